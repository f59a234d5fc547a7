"""``--tool module:qualname``: functions and methods of an agent one cannot edit, recorded as tools.

:func:`install_import_hook` wraps each target with :func:`~forkpoint.capture.tools.tool` (named
``qualname``) as soon as its module has executed (:mod:`.imports`), so ``from module import f``
elsewhere already sees the wrapper; a module imported already is patched at once, and so is every
name other modules imported the target by. Such a wrapper records only while its target is enabled
(:func:`install_import_hook` enables it, :func:`disable_targets` disables it again: the pytest
plugin's per-test ``tools``); otherwise it calls the function as it is.

**The script itself** (``--tool __main__:save_note``, ``--tool __main__:Notes.add``) is not
imported: the interpreter runs it as ``__main__`` (``python agent.py``, ``python -m pkg.agent``,
``python -c``). Its targets are wrapped the moment the script has defined them: a trace function
(``sys.settrace``) watches the lines of the script's module-level code only, wraps each target
right after the statement that defined it, and removes itself once every target is wrapped or the
script's module-level code is done. Until then every Python call pays for a trace callback (the
imports above the definitions run about 1.5x slower); later code, and the calls that use the tool,
run untraced. Like any ``--tool`` target, a function that a framework took hold of while it was
being defined (a decorator that registers it) keeps the unwrapped one, which is said when the
target is wrapped: name those with the framework's integration or ``@forkpoint.tool``.
"""

from __future__ import annotations

import atexit
import gc
import sys
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

from ..text import say
from .imports import ExecHook
from .imports import install as install_exec_hook
from .tools import wrapped

#: The module name of the script or module the interpreter runs.
MAIN = "__main__"


def parse_target(spec: str) -> tuple[str, str, str]:
    """Split ``module:qualname`` or ``module:qualname=name`` into the module, the qualname and the
    tool's name (the qualname unless given: the name the model asks for, when the function runs a
    tool of another name, as mini-swe-agent's ``LocalEnvironment.execute`` runs ``bash``); raises
    ``ValueError`` with the expected shape otherwise."""
    target, eq, name = spec.partition("=")
    module, sep, qualname = target.partition(":")
    if (
        not sep
        or not module
        or not qualname
        or not all(p.isidentifier() for p in qualname.split("."))
        or (eq and (not name or name != name.strip() or any(c.isspace() for c in name)))
    ):
        raise ValueError(
            f"--tool {spec!r}: expected MODULE:FUNCTION or MODULE:CLASS.METHOD, optionally followed by "
            "=NAME (the tool's name, as the model asks for it)"
        )
    return module, qualname, name or qualname


def _key(spec: str) -> str:
    """The target ``module:qualname`` of ``spec`` (its wrapper records while it is enabled)."""
    module, qualname, _ = parse_target(spec)
    return f"{module}:{qualname}"


#: How many times each ``module:qualname`` target is enabled (its wrapper records while above 0).
_enabled: Counter[str] = Counter()
_targets_lock = threading.Lock()
#: Modules not imported yet → the qualnames to wrap once they are, with their tools' names.
_pending: dict[str, list[tuple[str, str]]] = {}
_hook: ExecHook | None = None


def wrap_target(module: ModuleType, qualname: str, name: str | None = None) -> None:
    """Replace ``module.<qualname>`` by its :func:`~forkpoint.capture.tools.tool` wrapper (named
    ``name``, else ``qualname``), which records while the target ``module:qualname`` is enabled
    (:func:`install_import_hook`).

    Raises ``AttributeError`` naming the target when it does not exist.
    """
    *owners, attr = qualname.split(".")
    owner: Any = module
    for part in owners:
        owner = getattr(owner, part)
    raw = owner.__dict__.get(attr) if isinstance(owner, type) else getattr(owner, attr, None)
    if raw is None:
        raise AttributeError(f"--tool {module.__name__}:{qualname}: {module.__name__} has no {qualname}")
    if getattr(raw, "__forkpoint_tool__", None) or getattr(
        getattr(raw, "__func__", None), "__forkpoint_tool__", None
    ):
        return
    # (a spawned worker runs the script as __mp_main__: the target is the user's __main__ one)
    target = f"{MAIN if module.__name__ == '__mp_main__' else module.__name__}:{qualname}"

    def on() -> bool:
        return _enabled[target] > 0

    # (a bound method, `search = Client().search`, is wrapped whole: its function would lose self)
    fn = raw.__func__ if isinstance(raw, staticmethod | classmethod) else raw
    namespaces, held = _taken(owner, raw, fn)
    wrapper = wrapped(fn, name or qualname, on)
    setattr(owner, attr, type(raw)(wrapper) if isinstance(raw, staticmethod | classmethod) else wrapper)
    for ns in namespaces:  # (`from module import fn` run before: that name gets the wrapper too)
        for key, value in list(ns.items()):  # (no comprehension: its closure would hold fn)
            if value is fn:
                ns[key] = wrapper
    if held:
        # Calls through what the program took before the wrap are neither recorded nor served: said
        # now, and the end of the recording does not call the tool one the program never called.
        wrapper.__forkpoint_bypassed__ = True
        say(
            f"forkpoint: --tool {target}: the program took this function before forkpoint could wrap it "
            f"({', '.join(held)}): calls made through that are not recorded, and a replay runs them for "
            "real. Put @forkpoint.tool on the function itself (under a decorator that registers it)"
        )


def _taken(owner: Any, raw: Any, fn: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """Where the program holds the target ``fn`` (``raw`` in ``owner``) besides ``owner``: the
    globals of modules that imported it by name (and the script's own, which multiprocessing's spawn
    copies, and ``owner``'s own, where another name may be an alias of it), which the wrapper can
    replace; and, named, what it cannot (a dict of tools, a registry a decorator filled, a list, a
    closure). A variable of a function running now is not seen: gc tracks no running frame, and
    reading its variables (``f_locals``) would keep every one of them alive until it returns."""
    module = not isinstance(owner, type)
    own: Any = vars(owner) if module else next(iter(gc.get_referents(vars(owner))), None)
    namespaces: list[dict[str, Any]] = []
    held: list[str] = []
    for ref in gc.get_referrers(fn):
        if ref is own:
            if module:
                namespaces.append(ref)
            continue
        if ref is raw or isinstance(ref, FrameType):
            continue
        if isinstance(ref, dict) and "__builtins__" in ref:
            namespaces.append(ref)
            continue
        names = [
            f"{ns.get('__name__')}.{k}"
            for ns in gc.get_referrers(ref)
            if isinstance(ns, dict) and "__builtins__" in ns
            for k, v in ns.items()
            if v is ref
        ]
        held.append(
            names[0] if names else "a closure" if type(ref).__name__ == "cell" else f"a {type(ref).__name__}"
        )
    return namespaces, held


def _wrap_pending(module: ModuleType) -> None:
    with _targets_lock:
        qualnames = _pending.pop(module.__name__, [])
    for q, name in qualnames:
        _wrap_or_warn(module, q, name)


def _wrap_or_warn(module: ModuleType, qualname: str, name: str) -> None:
    # A typo in --tool must not crash the agent being recorded; say it instead.
    try:
        wrap_target(module, qualname, name)
    except AttributeError as exc:
        say(f"forkpoint: {exc}; its calls are not recorded or replayed")


class _MainWatcher:
    """Wraps ``__main__`` targets as soon as the script being run defines them (module docstring).
    A trace function already in place (a debugger, coverage) keeps getting every event, and is
    put back when the watch ends."""

    def __init__(self, qualnames: list[tuple[str, str]]) -> None:
        self.pending = qualnames  # (qualname, the tool's name)
        self.done = False
        self.previous: Any = sys.gettrace()
        self.theirs: Any = None  # the previous tracer's trace function for the script's frame

    def start(self, *, spawned: bool = False) -> None:
        self.check()
        if self.done:
            return
        if spawned:  # the script runs later, as __mp_main__: wrapped then (main_prepared), untraced
            _spawned_main.append(self)
            return
        # Installed from inside the running script (the Python API): watch its frame from here on.
        frame: FrameType | None = sys._getframe()
        while frame is not None and not _is_main(frame):
            frame = frame.f_back
        if frame is not None:
            self.theirs, frame.f_trace = frame.f_trace, self.local
        sys.settrace(self.watch)

    def watch(self, frame: FrameType, event: str, arg: Any) -> Any:
        """The global trace function: only the script's module-level frame is traced."""
        theirs = self.previous(frame, event, arg) if self.previous is not None else None
        if event == "call" and _is_main(frame):
            self.theirs = theirs
            return self.local
        return theirs

    def local(self, frame: FrameType, event: str, arg: Any) -> Any:
        """The trace function of that frame: before each of its lines, wrap what is defined now."""
        if self.theirs is not None:
            self.theirs = self.theirs(frame, event, arg)
        if event in ("line", "return"):
            self.check()
            if self.done or event == "return":
                self.stop(frame)
                return self.theirs
        return self.local

    def check(self) -> None:
        main = sys.modules.get(MAIN)
        names = vars(main) if main is not None else {}
        for qualname, name in [q for q in self.pending if q[0].split(".")[0] in names]:
            self.pending.remove((qualname, name))
            _wrap_or_warn(main, qualname, name)  # type: ignore[arg-type]
        self.done = not self.pending

    def stop(self, frame: FrameType) -> None:
        frame.f_trace = self.theirs
        if sys.gettrace() == self.watch:
            # A watch this one was put over (the pytest plugin's, for the same targets, then
            # run_command's) that is done already is not put back: nothing would ever end it.
            previous = self.previous
            while isinstance(getattr(previous, "__self__", None), _MainWatcher) and previous.__self__.done:
                previous = previous.__self__.previous
            sys.settrace(previous)
        self.done = True
        for qualname, _ in self.pending:
            say(
                f"forkpoint: --tool {MAIN}:{qualname}: the script ran to its end without defining "
                f"{qualname.split('.')[0]} at module level; its calls are not recorded or replayed"
            )
        self.pending = []


#: The ``__main__`` watchers of a worker ``multiprocessing`` spawned, waiting for its script.
_spawned_main: list[_MainWatcher] = []


def main_prepared() -> None:
    """In a worker ``multiprocessing`` spawned: its ``prepare`` has run the script as
    ``__mp_main__`` (now ``__main__`` too), so its ``--tool __main__:…`` targets are wrapped now."""
    for watcher in list(_spawned_main):
        watcher.check()
        if watcher.done:
            _spawned_main.remove(watcher)


def _is_main(frame: FrameType) -> bool:
    """``frame`` runs the script's module-level code: ``<module>`` code in ``__main__``, and not a
    snippet other code compiled from a string and ran with the script's globals (a ``@dataclass``'s
    generated methods: ``dataclasses`` execs them so; ``python -c`` code has no caller, runpy's its
    own module)."""
    if frame.f_code.co_name != "<module>" or frame.f_globals.get("__name__") != MAIN:
        return False
    caller = frame.f_back
    return (
        frame.f_code.co_filename != "<string>"
        or caller is None
        or caller.f_globals.get("__name__") == "runpy"
    )


def _script_module() -> str | None:
    """The module name the running script has when imported: ``agent`` for ``python agent.py`` and
    ``python -m agent``; None for ``python -c``."""
    main = sys.modules.get(MAIN)
    spec = getattr(main, "__spec__", None)
    if spec is not None:
        return str(spec.name)
    # (its loader, not ``__file__``: the interpreter deletes that once the script has run)
    file = getattr(getattr(main, "__loader__", None), "path", None)
    return Path(file).stem if isinstance(file, str) else None


def install_import_hook(specs: Sequence[str], *, warn_at_exit: bool = False, spawned: bool = False) -> None:
    """Wrap each ``module:qualname`` in ``specs`` (now if imported, else when first imported, and
    ``__main__`` targets as soon as the running script defines them; in a worker ``multiprocessing``
    spawned (``spawned``), once its ``prepare`` has run the script: :func:`main_prepared`) and
    enable it: its calls are recorded or served until :func:`disable_targets`.

    A target that does not exist is reported on stderr, never raised into the program; with
    ``warn_at_exit`` (the CLI's bootstrap), so is a module the program never imported.
    Raises ``ValueError`` for a spec that is not ``module:qualname``.
    """
    global _hook
    targets: dict[str, list[tuple[str, str]]] = {}
    main: list[tuple[str, str]] = []
    for module, qualname, name in [parse_target(spec) for spec in specs]:
        with _targets_lock:
            _enabled[f"{module}:{qualname}"] += 1
        if module == MAIN:
            main.append((qualname, name))
        elif module in sys.modules:
            _wrap_or_warn(sys.modules[module], qualname, name)
        else:
            targets.setdefault(module, []).append((qualname, name))
    if main:
        _MainWatcher(main).start(spawned=spawned)
    if targets:
        with _targets_lock:
            for module, names in targets.items():
                _pending.setdefault(module, []).extend(names)
            if _hook is None:
                _hook = ExecHook(lambda name: name in _pending, lambda name, spec: (None, _wrap_pending))
        install_exec_hook(_hook)
    if targets and warn_at_exit:

        def never_imported() -> None:
            for module, names in targets.items():
                if module not in sys.modules:
                    listed = ", ".join(f"{module}:{q}" for q, _ in names)
                    said = f"forkpoint: --tool {listed}: the program never imported {module}"
                    if module == _script_module():
                        # ``python agent.py`` runs agent.py as __main__: the usual first guess
                        instead = ", ".join(f"--tool {MAIN}:{q}" for q, _ in names)
                        said += f": it ran {module} as its script, {MAIN}; name the tool {instead}"
                    say(said)

        atexit.register(never_imported)


def disable_targets(specs: Sequence[str]) -> None:
    """Undo one :func:`install_import_hook` of ``specs``: their wrappers call the functions as they
    are again (unless enabled elsewhere). Targets not yet imported stay pending, disabled."""
    keys = [_key(spec) for spec in specs]
    with _targets_lock:
        for key in keys:
            if _enabled[key] > 0:
                _enabled[key] -= 1
