"""A third-party package made on the fly for the tests of the entry-point seams: a module and a
``.dist-info`` with ``entry_points.txt`` on ``sys.path``, as ``pip install`` would leave them."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def installed_plugin(root: Path, name: str, modules: dict[str, str], entry_points: str) -> Iterator[None]:
    """Make ``modules`` (name → source) importable and register ``entry_points`` (the text of an
    ``entry_points.txt``) for a distribution ``name``, for the duration of the block."""
    root.mkdir(parents=True, exist_ok=True)
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{name}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    try:
        yield
    finally:
        sys.path.remove(str(root))
        for module in modules:
            sys.modules.pop(module, None)
        importlib.invalidate_caches()
