"""Names a package exports from other modules, imported on first use (PEP 562's module
``__getattr__``): importing the package, or one light submodule of it, does not import the heavy
ones. ``import forkpoint`` loads no layer; ``forkpoint replay``'s parent process reads the verdict
(``forkpoint.replay.report``) and verifies the session (``forkpoint.checkpoint.verify``) without
loading the replayer or what takes and restores checkpoints."""

from __future__ import annotations

import sys

# Not typing.TYPE_CHECKING: `import forkpoint` uses this module and does not import typing.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from types import ModuleType as _Module
    from typing import Any
else:
    _Module = type(sys)  # types.ModuleType, without importing types


def from_submodules(names: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, str]]:
    """``where`` for :func:`lazy_package` from submodule → the names it defines
    (``{".report": ["conclude"]}``)."""
    return {name: (module, name) for module, defined in names.items() for name in defined}


def exports(
    package: str, where: Mapping[str, tuple[str, str]], shadowed: Sequence[str] = ()
) -> Callable[[str], Any]:
    """The module ``__getattr__`` of the already imported ``package`` (bind it as ``__getattr__``):
    each name in ``where`` (name → (module, its name there); the module absolute, or relative to
    ``package`` as ``".report"``) is imported on first access, then kept in the package. Other
    names raise :class:`AttributeError`, as a module does.

    ``shadowed``: names that are also a submodule's (``forkpoint.checkpoint.restore``, the function,
    and ``forkpoint/checkpoint/restore.py``), which the submodule would hide once imported (the
    import system binds it in the package). They become properties of the package's module type,
    which win over its attributes: the import system's binding is ignored (the submodule stays in
    ``sys.modules``), and any other assignment is refused, naming where the name lives."""
    module = sys.modules[package]

    def load(name: str) -> Any:
        try:
            source, attr = where[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        import importlib

        value = getattr(importlib.import_module(source, package), attr)
        if name not in shadowed:
            setattr(module, name, value)
        return value

    def prop(name: str) -> property:
        def put(_self: object, value: object) -> None:
            if not isinstance(value, _Module):
                source, attr = where[name]
                raise AttributeError(f"{package}.{name} cannot be replaced: it is {source}.{attr}")

        return property(lambda _self: load(name), put)

    if shadowed:
        props = {name: prop(name) for name in shadowed}
        module.__class__ = type("LazyPackage", (type(module),), props)
    return load
