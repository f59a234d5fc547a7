"""Names a package exports from other modules, imported on first use (PEP 562's module
``__getattr__``): importing the package, or one light submodule of it, does not import the heavy
ones. ``import forkpoint`` loads no layer; ``forkpoint replay``'s parent process reads the verdict
(``forkpoint.replay.report``) without loading the replayer."""

from __future__ import annotations

import sys

# Not typing.TYPE_CHECKING: `import forkpoint` uses this module and does not import typing.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any


def exports(
    package: str, where: Mapping[str, tuple[str, str]], unkept: Sequence[str] = ()
) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: each name in ``where`` (name → (module, its name
    there); the module absolute, or relative to ``package`` as ``".report"``) is imported on first
    access, then kept in the package as a plain attribute, except the names in ``unkept`` (looked up
    each time). Other names raise :class:`AttributeError`, as a module does."""

    def __getattr__(name: str) -> Any:
        try:
            module, attr = where[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        import importlib

        value = getattr(importlib.import_module(module, package), attr)
        if name not in unkept:
            setattr(sys.modules[package], name, value)
        return value

    return __getattr__
