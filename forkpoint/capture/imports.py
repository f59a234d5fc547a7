"""Running code around the execution of a module that is imported later: the one import hook of
``--tool`` targets (:mod:`.tools`), framework integrations (:mod:`forkpoint.integrations`) and
the agent's own clock (:mod:`.clock`).

An :class:`ExecHook` on ``sys.meta_path`` finds nothing itself: it asks the other finders for the
module's spec and wraps the loader they return, so that ``before(module)`` runs before the
module's code and ``after(module)`` right after it (before ``from module import f`` elsewhere can
see the module). Hooks compose: each one asks the finders after it, and a hook that is asked again
for the module it is looking up steps aside.
"""

from __future__ import annotations

import importlib.machinery
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

#: Code run on a module: before its own code runs, or right after.
ModuleHook = Callable[[ModuleType], None]
#: What a hook does around one module: ``(before, after)``, either None.
Around = tuple[ModuleHook | None, ModuleHook | None]


# Neither class derives from importlib.abc: importing it costs more than the rest of this layer at a
# bootstrapped start, and the import system only calls the methods.
class _Loader:
    """Runs ``before``, the real loader, then ``after``."""

    def __init__(self, loader: Any, before: ModuleHook | None, after: ModuleHook | None) -> None:
        self._loader, self._before, self._after = loader, before, after

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        if self._before is not None:
            self._before(module)
        self._loader.exec_module(module)
        if self._after is not None:
            # The import system binds a submodule to its package only once this returns; bind it
            # now, so that code run after it may say ``http.client`` as the program will.
            parent, _, child = module.__name__.rpartition(".")
            if parent and parent in sys.modules:
                setattr(sys.modules[parent], child, module)
            self._after(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_code, is_package… of the real loader
        return getattr(self._loader, name)


class ExecHook:
    """A finder that wraps the loader of the modules it is about (see the module docstring).

    ``candidate(fullname)`` says cheaply whether a module may be of interest; ``around(fullname,
    spec)`` then returns ``(before, after)`` for it, or None to leave it alone."""

    def __init__(self, candidate: Callable[[str], bool], around: Callable[[str, Any], Around | None]) -> None:
        self.candidate, self.around = candidate, around
        self._busy = threading.local()

    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        busy: set[str] = self._busy.__dict__.setdefault("names", set())
        if fullname in busy or not self.candidate(fullname):
            return None
        busy.add(fullname)
        try:
            for finder in list(sys.meta_path):
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is None:
                    continue
                hooks = self.around(fullname, spec)
                if hooks is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, *hooks)  # type: ignore[assignment]  # duck-typed (above)
                return spec
            return None
        finally:
            busy.discard(fullname)


def install(hook: ExecHook) -> ExecHook:
    """Put ``hook`` first on ``sys.meta_path`` (once); returns it."""
    if hook not in sys.meta_path:
        sys.meta_path.insert(0, hook)
    return hook


def uninstall(hook: ExecHook) -> None:
    """Take ``hook`` off ``sys.meta_path``."""
    while hook in sys.meta_path:
        sys.meta_path.remove(hook)


#: Modules waited for (:func:`when_imported`) and not imported yet: what to do once they are.
_waiting: dict[str, ModuleHook] = {}
_hook: ExecHook | None = None
_lock = threading.Lock()


def when_imported(name: str, then: ModuleHook) -> None:
    """Call ``then(module)`` right after module ``name`` has executed, when (if ever) the program
    imports it; one callback per name (the last one given). ``then`` must not raise: an error in it
    would surface in the program's import."""
    global _hook
    with _lock:
        _waiting[name] = then
        if _hook is None:
            _hook = ExecHook(lambda fullname: fullname in _waiting, lambda fullname, spec: (None, _imported))
        install(_hook)


def stop_waiting(names: Sequence[str]) -> None:
    """Forget the callbacks of ``names`` (:func:`when_imported`)."""
    with _lock:
        for name in names:
            _waiting.pop(name, None)
        if not _waiting and _hook is not None:
            uninstall(_hook)


def _imported(mod: ModuleType) -> None:
    with _lock:
        then = _waiting.pop(mod.__name__, None)
    if then is not None:
        then(mod)
