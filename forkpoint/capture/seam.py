"""What every HTTP adapter does the same way: check the private names it patches against the
installed library, put a wrapper in place of a method, take it out again, and say when a library
cannot be captured.

An adapter declares what it patches as ``(class path, method, parameter names)`` triples
(:data:`Patched`); :func:`signature_problem` compares them with the installed version before anything
is patched, so a release that renames or reshapes a private method is reported and left alone
(recording never changes what the live run does) instead of failing inside a user's recording.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from . import imports

#: What an adapter patches: (dotted class path inside the module, method name, parameter names).
Patched = Sequence[tuple[str, str, tuple[str, ...]]]


def find(mod: ModuleType, path: str) -> Any:
    """The object at dotted ``path`` inside ``mod`` (``"connectionpool.HTTPConnectionPool"``), or None."""
    obj: Any = mod
    for part in path.split("."):
        obj = getattr(obj, part, None)
    return obj


def signature_problem(mod: ModuleType, patched: Patched) -> str | None:
    """What in the installed ``mod`` does not match ``patched`` (None when everything does)."""
    for cls_path, method, params in patched:
        fn = getattr(find(mod, cls_path), method, None)
        fn = getattr(fn, "__wrapped__", fn)
        if fn is None:
            return f"{cls_path}.{method} is missing"
        found = tuple(inspect.signature(fn).parameters)
        if found != params:
            return f"{cls_path}.{method} takes {found}, forkpoint expects {params}"
    return None


def cannot_capture(name: str, mod: ModuleType, problem: str) -> None:
    """Say that library ``name`` is left unpatched, and why."""
    warnings.warn(
        f"forkpoint cannot capture {name} {getattr(mod, '__version__', '?')}: {problem}. Its "
        "requests are neither recorded nor replayed.",
        RuntimeWarning,
        stacklevel=4,
    )


def install_library(
    name: str,
    installed: dict[str, ModuleType],
    problem: Callable[[ModuleType], str | None],
    patch: Callable[[ModuleType], None],
) -> list[str]:
    """Patch library ``name`` once: check it with ``problem`` (a mismatch is said and the library
    left alone), ``patch`` it and note it in ``installed``. A library not imported yet is patched
    right after its own code runs, when (if ever) the program imports it (:mod:`.imports`): it is
    not imported here, so a program that never uses it does not pay for importing it (an HTTP
    library costs more than the rest of a short program's start). Returns ``[name]`` when it was
    patched now, else ``[]``."""
    if name in installed:
        return []
    mod = sys.modules.get(name)
    if mod is None:
        _wait_for(name, lambda mod: _patch_library(name, mod, installed, problem, patch))
        return []
    return _patch_library(name, mod, installed, problem, patch)


def _patch_library(
    name: str,
    mod: ModuleType,
    installed: dict[str, ModuleType],
    problem: Callable[[ModuleType], str | None],
    patch: Callable[[ModuleType], None],
) -> list[str]:
    imports.stop_waiting((name,))
    found = problem(mod)
    if found:
        cannot_capture(name, mod, found)
        return []
    patch(mod)
    installed[name] = mod
    return [name]


def _wait_for(name: str, then: Callable[[ModuleType], object]) -> None:
    def patch(mod: ModuleType) -> None:
        try:
            then(mod)
        except Exception as exc:  # an internal of this version we did not foresee
            cannot_capture(mod.__name__, mod, f"patching it failed ({type(exc).__name__}: {exc})")

    imports.when_imported(name, patch)


def stop_waiting(names: Sequence[str]) -> None:
    """Patch none of ``names`` when they are imported later (an adapter's ``uninstall``)."""
    imports.stop_waiting(names)


def wrap(cls: Any, method: str, make: Callable[[Any], Any]) -> None:
    """Replace ``cls.method`` by ``make(original)``; the original stays reachable as ``__wrapped__``."""
    original = cls.__dict__[method]
    wrapper = make(original)
    wrapper.__wrapped__ = original
    setattr(cls, method, wrapper)


def unwrap(cls: Any, method: str) -> None:
    """Put back what :func:`wrap` replaced (nothing when ``cls.method`` is not wrapped)."""
    wrapped = getattr(cls.__dict__.get(method), "__wrapped__", None)
    if wrapped is not None:
        setattr(cls, method, wrapped)
