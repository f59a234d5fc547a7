"""The agent's own clock and randomness, recorded and served back (opt-in: ``deterministic``).

What the agent's own code reads from

* ``datetime.datetime.now(tz=None)``, ``.utcnow()``, ``.today()``, ``datetime.date.today()``,
* ``time.time()``, ``time.time_ns()``, and the local or UTC time that ``time.localtime()``,
  ``gmtime()``, ``strftime(format)``, ``ctime()`` and ``asctime()`` read when not given a time
  (kept broken down, with its zone: a replay in another time zone reads the recorded one),
* ``uuid.uuid4()``,
* the functions of the ``random`` module that draw from its shared generator (``random()``,
  ``randint``, ``choice``, ``shuffle``, ``sample``, ``uniform``, ``gauss``… — all of them but
  ``seed``, ``getstate`` and ``setstate``, which act on that generator as they always do)

is written to the session as ``value`` events while recording, and handed back in the same order
on replay (per function, in the order the reads started), so an agent that puts the time or a uuid
into its prompt replays without any ignore rule. A read beyond the recorded ones is a
:class:`~forkpoint.errors.Divergence`, like a call beyond the recorded ones.

**The agent's own code** is every module whose file is neither in the standard library nor in an
installed package (``site-packages``/``dist-packages``), plus a ``__main__`` run from the command
line (``python -c``, ``python agent.py``, ``./agent`` by its ``#!`` line, whatever the file's name);
forkpoint itself never is. A list of module names
(``deterministic=["my_agent"]``) names them instead (each with its submodules). Library code —
the SDKs, HTTP clients, asyncio, the standard library — keeps the real clock and generator, so
timeouts, retries and back-offs behave as they always do. The code a smolagents ``CodeAgent``'s
model writes gets the stand-ins too (:mod:`forkpoint.integrations.smolagents`).

**How.** The modules and functions themselves are left alone; the agent's modules get stand-ins.
Their globals that hold ``time`` or one of those functions of it, ``datetime``,
``datetime.datetime``, ``datetime.date``, ``uuid``, ``uuid.uuid4``, ``random`` or one of its
functions are replaced by forkpoint's, and
``builtins.__import__`` hands the stand-in modules to an ``import`` statement of the agent's code
(it knows the importer by the globals every ``import`` passes it), so ``from datetime import
datetime`` run later — in a function, in a module imported later, or in the script itself when
``forkpoint record`` starts it — binds them too. The stand-in ``datetime`` and ``date`` classes
make real ``datetime`` and ``date`` objects: ``isinstance``, ``issubclass``, ``type(value) ==
datetime`` and a dict keyed by the class see no difference (``type(value) is datetime`` does), a
subclass the agent defines is a class like any other, and a pydantic model field annotated with
one is a ``datetime`` (``date``) field. Without an active
deterministic recording or replay, every stand-in does exactly what the original does.

**Limits.** Reads inside a tool's body are not recorded (the tool call is, and its result is what
a replay serves). Not covered: ``time.monotonic()``, ``time.perf_counter()``, ``os.urandom``,
``secrets``, ``uuid.uuid1``, ``random.Random()``/``SystemRandom()`` instances, numpy's generators, ids made in native code
(``uuid_utils``' ``uuid7``: LangChain's run and message ids), a module reached through ``importlib.import_module`` or ``sys.modules``, and
code that is not the agent's. Each read is one event in the log (``shuffle`` of a long list draws
once per item).
"""

from __future__ import annotations

import builtins
import datetime
import os
import random
import site
import sys
import sysconfig
import threading
import time
import types
import uuid
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from .. import runtime
from ..events import ValueEvent, new_span_id, now_iso

T = TypeVar("T")

_REAL_TIME = time.time
_REAL_TIME_NS = time.time_ns
_REAL_LOCALTIME = time.localtime
_REAL_GMTIME = time.gmtime
_REAL_DATETIME = datetime.datetime
_REAL_DATE = datetime.date
_REAL_UUID4 = uuid.uuid4
_ORIGINAL_IMPORT = builtins.__import__
_SHARED: random.Random = getattr(random, "_inst")  # noqa: B009 - the generator random's functions use
#: The ``random`` functions that act on the shared generator's state rather than draw from it.
_STATE_FUNCS = ("seed", "getstate", "setstate")
RANDOM_FUNCS = tuple(
    name
    for name, value in vars(random).items()
    if getattr(value, "__self__", None) is _SHARED and name not in _STATE_FUNCS and not name.startswith("_")
)


def read(
    fn: str,
    live: Callable[[], T],
    encode: Callable[[T], Any],
    decode: Callable[[Any], T],
    args: list[Any] | None = None,
) -> T:
    """The value the agent's own code reads from ``fn``: served from the session on a deterministic
    replay, else ``live()`` — written to the session when a deterministic run records it.
    ``encode``/``decode`` turn it into JSON and back. Outside a deterministic runtime, or inside a
    tool's body, just ``live()``. Raises :class:`~forkpoint.errors.Divergence` (replay)."""
    rt = runtime.active()
    if rt is None or not rt.deterministic or runtime.current_span.get() is not None:
        return live()
    if rt.mode == "replay":
        served = cast(runtime.Serving, rt).take_value(fn, args)
        if served is not None:
            return decode(served.get("value"))
    sent = runtime.next_sent(rt)
    value = live()
    event: ValueEvent = {
        "type": "value",
        "ts": now_iso(),
        "span_id": new_span_id(),
        "parent_span_id": rt.root_span,
        "sent": sent,
        "fn": fn,
        "value": encode(value),
    }
    if args is not None:
        event["args"] = args
    who = runtime.caller()
    if who is not None:
        event["caller"] = who
    rt.value_done(event)
    return value


# --------------------------------------------------------------------------- the stand-ins


def _time() -> float:
    return read("time.time", _REAL_TIME, float, float)


def _time_ns() -> int:
    return read("time.time_ns", _REAL_TIME_NS, int, int)


def _struct(fields: Any) -> time.struct_time:
    return time.struct_time(fields)  # its 9 fields, then tm_zone and tm_gmtoff


def _fields(value: time.struct_time) -> list[Any]:
    return [*value, value.tm_zone, value.tm_gmtoff]


def _localtime(secs: float | None = None) -> time.struct_time:
    # (the broken-down time, not the seconds: a replay in another time zone reads the recorded one)
    if secs is not None:
        return _REAL_LOCALTIME(secs)
    return read("time.localtime", _REAL_LOCALTIME, _fields, _struct)


def _gmtime(secs: float | None = None) -> time.struct_time:
    if secs is not None:
        return _REAL_GMTIME(secs)
    return read("time.gmtime", _REAL_GMTIME, _fields, _struct)


# Without a time argument these read the local time now: the recorded one, through _localtime.
def _strftime(format: str, t: Any = None) -> str:
    return time.strftime(format, _localtime() if t is None else t)


def _asctime(t: Any = None) -> str:
    return time.asctime(_localtime() if t is None else t)


def _ctime(secs: float | None = None) -> str:
    return time.asctime(_localtime(secs))


def _uuid4() -> uuid.UUID:
    return read("uuid.uuid4", _REAL_UUID4, str, uuid.UUID)


def _iso(value: datetime.datetime) -> str:
    return value.isoformat()


def _from_iso(tz: datetime.tzinfo | None) -> Callable[[Any], datetime.datetime]:
    def decode(text: Any) -> datetime.datetime:
        value = _REAL_DATETIME.fromisoformat(str(text))
        # The same instant in the zone asked for: its tzinfo is the caller's own object again.
        return value.astimezone(tz) if tz is not None and value.tzinfo is not None else value

    return decode


for _fn in (_time, _time_ns, _localtime, _gmtime, _strftime, _asctime, _ctime, _uuid4):
    _fn.__name__ = _fn.__qualname__ = _fn.__name__.lstrip("_")
del _fn


class _StandInClass(type):
    """``isinstance``/``issubclass`` against a stand-in class ask the real class it stands for
    (``_forkpoint_real`` in its own namespace); a subclass the agent's code defines of the stand-in
    is a class like any other, as it would be of the real one."""

    def __instancecheck__(cls, obj: Any) -> bool:
        real = cls.__dict__.get("_forkpoint_real")
        return isinstance(obj, real) if real is not None else super().__instancecheck__(obj)

    def __subclasscheck__(cls, sub: type) -> bool:
        real = cls.__dict__.get("_forkpoint_real")
        return issubclass(sub, real) if real is not None else super().__subclasscheck__(sub)

    # ``type(value) == datetime`` and a dict keyed by the class find the real one (``is`` does not).
    def __eq__(cls, other: object) -> bool:
        real = cls.__dict__.get("_forkpoint_real")
        return other is cls or (real is not None and other is real)

    def __hash__(cls) -> int:
        real = cls.__dict__.get("_forkpoint_real")
        return hash(real) if real is not None else super().__hash__()


class _Datetime(_REAL_DATETIME, metaclass=_StandInClass):
    """``datetime.datetime`` for the agent's own code: ``now``, ``utcnow`` and ``today`` are
    recorded; everything it makes is a real ``datetime``."""

    _forkpoint_real = _REAL_DATETIME

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        # The agent's own subclass (class Stamp(datetime)) makes its own instances.
        return (
            _REAL_DATETIME(*args, **kwargs)
            if cls is _Datetime
            else _REAL_DATETIME.__new__(cls, *args, **kwargs)
        )

    @classmethod
    def now(cls, tz: datetime.tzinfo | None = None) -> Any:
        return _as(cls, read("datetime.now", lambda: _REAL_DATETIME.now(tz), _iso, _from_iso(tz)))

    @classmethod
    def utcnow(cls) -> Any:
        return _as(cls, read("datetime.utcnow", _REAL_DATETIME.utcnow, _iso, _from_iso(None)))

    @classmethod
    def today(cls) -> Any:
        return _as(cls, read("datetime.today", _REAL_DATETIME.today, _iso, _from_iso(None)))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        # pydantic knows datetime by identity: a model field annotated with the stand-in (a model
        # the agent's code defines while recording) is validated, serialized and described as one.
        return handler.generate_schema(_REAL_DATETIME)


class _Date(_REAL_DATE, metaclass=_StandInClass):
    """``datetime.date`` for the agent's own code: ``today`` is recorded; everything it makes is a
    real ``date``."""

    _forkpoint_real = _REAL_DATE

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        return _REAL_DATE(*args, **kwargs) if cls is _Date else _REAL_DATE.__new__(cls, *args, **kwargs)

    @classmethod
    def today(cls) -> Any:
        value = read("date.today", _REAL_DATE.today, _REAL_DATE.isoformat, _REAL_DATE.fromisoformat)
        return value if cls is _Date else cls(value.year, value.month, value.day)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        return handler.generate_schema(_REAL_DATE)


_Datetime.__name__ = _Datetime.__qualname__ = "datetime"
_Date.__name__ = _Date.__qualname__ = "date"


def _as(cls: type, value: datetime.datetime) -> Any:
    """``value`` as an instance of ``cls``: a real ``datetime`` for the stand-in itself, else the
    agent's own subclass (as ``now()`` on that subclass gives live)."""
    return value if cls is _Datetime else cls.combine(value.date(), value.timetz())  # type: ignore[attr-defined]


_Datetime.__module__ = _Date.__module__ = "datetime"


class _AgentRandom(random.Random):
    """The agent's view of the shared generator: every draw goes through its two primitives, which
    read the shared generator (so the program draws what it would have) and are recorded."""

    def __init__(self) -> None:
        pass  # (random.Random's would seed it, and clear the shared generator's gauss_next below)

    # gauss() keeps its second value for the next call: the shared generator's, which seed() clears.
    @property
    def gauss_next(self) -> float | None:
        return _SHARED.gauss_next  # type: ignore[attr-defined,no-any-return]

    @gauss_next.setter
    def gauss_next(self, value: float | None) -> None:
        _SHARED.gauss_next = value  # type: ignore[attr-defined]

    def random(self) -> float:
        return read("random.random", _SHARED.random, float, float)

    def getrandbits(self, k: int) -> int:
        return read(
            "random.getrandbits", lambda: _SHARED.getrandbits(k), lambda v: format(v, "x"), _hex_int, [k]
        )


def _hex_int(value: Any) -> int:
    return int(str(value), 16)


class _StandIn(types.ModuleType):
    """A module as the agent's own code sees it: the real one, but for a few attributes."""

    def __init__(self, real: types.ModuleType, attrs: dict[str, Any]) -> None:
        super().__init__(real.__name__, real.__doc__)
        for name in ("__package__", "__loader__", "__spec__"):  # the real module's, through __getattr__
            self.__dict__.pop(name, None)
        self.__dict__.update(attrs)
        self.__dict__["_forkpoint_real"] = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_forkpoint_real"], name)


_agent_random = _AgentRandom()
#: id(original) → (original, stand-in): the modules and the functions and class they export.
_STAND_INS: dict[int, tuple[Any, Any]] = {}


def _register(original: Any, stand_in: Any) -> Any:
    _STAND_INS[id(original)] = (original, stand_in)
    return stand_in


_register(
    time,
    _StandIn(
        time,
        {
            fn.__name__: _register(getattr(time, fn.__name__), fn)
            for fn in (_time, _time_ns, _localtime, _gmtime, _strftime, _asctime, _ctime)
        },
    ),
)
_register(
    datetime,
    _StandIn(
        datetime, {"datetime": _register(_REAL_DATETIME, _Datetime), "date": _register(_REAL_DATE, _Date)}
    ),
)
_register(uuid, _StandIn(uuid, {"uuid4": _register(_REAL_UUID4, _uuid4)}))
_register(
    random,
    _StandIn(random, {n: _register(getattr(random, n), getattr(_agent_random, n)) for n in RANDOM_FUNCS}),
)


def stand_in(value: Any) -> Any:
    """forkpoint's stand-in for ``value`` when it is one of the originals, else ``value``."""
    found = _STAND_INS.get(id(value))
    return found[1] if found is not None and found[0] is value else value


# --------------------------------------------------------------------------- which code is the agent's


def _library_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    dirs = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    dirs.update(getattr(site, "getsitepackages", list)())
    dirs.add(site.getusersitepackages())
    return tuple(sorted({os.path.realpath(d) + os.sep for d in dirs if d}))


_LIBRARY_DIRS = _library_dirs()
_NEVER = frozenset({"forkpoint", "_pytest", "pytest", "pluggy"})


def is_agent(name: str, file: str | None, modules: Sequence[str] | None = None, spec: Any = None) -> bool:
    """True when module ``name`` (its file ``file``) is the agent's own code: one of ``modules``
    (names, each with its submodules) when given, else neither the standard library, nor an
    installed package, nor forkpoint (see the module docstring). ``spec``: the module's
    ``__spec__``, by whose name ``python -m myagent``'s ``__main__`` is ``myagent.__main__``."""
    if modules is not None:
        names = {name, str(getattr(spec, "name", None) or name)}
        return any(n == m or n.startswith(m + ".") for n in names for m in modules)
    top = name.split(".")[0]
    if top in _NEVER or top in sys.stdlib_module_names:
        return False
    if not file:
        return name == "__main__"
    if not file.endswith((".py", ".pyc")) and name != "__main__":
        # (an extension module: compiled code never reads through these globals; a script is
        # Python, whatever its name: ``./agent`` run by its ``#!`` line, ``python agent``)
        return False
    real = os.path.realpath(file)
    parts = real.split(os.sep)
    return (
        not real.startswith(_LIBRARY_DIRS) and "site-packages" not in parts and "dist-packages" not in parts
    )


def to_name(
    select: bool | Sequence[str], modules: Sequence[tuple[str, str, str | None, Any]]
) -> tuple[list[str], list[str]]:
    """For a call made through ``modules`` (``(top-level package, name, file, spec)``, outermost
    first): the top-level packages that ``select`` leaves out of the agent's code, and the selection
    that names them too (``deterministic=[...]``: the modules ``select`` names, or, for True, the
    packages of ``modules`` it counts), each list in order and once."""
    chosen = None if isinstance(select, bool) else list(select)
    counted: list[str] = []
    left_out: list[str] = []
    for top, name, file, spec in modules:
        into = counted if is_agent(name, file, chosen, spec) else left_out
        if top not in into:
            into.append(top)
    return left_out, [*(counted if chosen is None else chosen), *left_out]


# --------------------------------------------------------------------------- installing


_lock = threading.Lock()
#: What install() changed, to undo: (module globals, name, original, stand-in).
_changed: list[tuple[dict[str, Any], str, Any, Any]] = []
#: The ``__import__`` install() replaced (None while not installed).
_previous_import: Callable[..., Any] | None = None
_modules: Sequence[str] | None = None
#: Importer module name → whether it is the agent's (for the selection installed).
_agent_modules: dict[str, bool] = {}


def _agent_import(
    name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0
) -> Any:
    """``builtins.__import__`` while installed: the agent's own code gets the stand-in modules."""
    previous = _previous_import or _ORIGINAL_IMPORT
    module = previous(name, globals, locals, fromlist, level)
    if not isinstance(globals, dict) or _previous_import is None:
        return module
    importer = str(globals.get("__name__"))
    agent = _agent_modules.get(importer)
    if agent is None:
        agent = _agent_modules[importer] = is_agent(
            importer, globals.get("__file__"), _modules, globals.get("__spec__")
        )
    return stand_in(module) if agent else module


def _patch(module: types.ModuleType) -> None:
    """Give one of the agent's modules, imported already, the stand-ins in its globals."""
    g = module.__dict__
    for name, value in list(g.items()):
        new = stand_in(value)
        if new is not value:
            g[name] = new
            _changed.append((g, name, value, new))


def install(select: bool | Sequence[str] = True) -> None:
    """Give the agent's own code the stand-ins: the modules imported already, and every import
    statement it runs from now on. ``select``: True (the rule in the module docstring) or module
    names. Installing again first undoes the previous install."""
    global _previous_import, _modules
    uninstall()
    with _lock:
        _modules = None if isinstance(select, bool) else tuple(select)
        _agent_modules.clear()
        for name, module in list(sys.modules.items()):
            if isinstance(module, types.ModuleType) and is_agent(
                name, getattr(module, "__file__", None), _modules, getattr(module, "__spec__", None)
            ):
                _patch(module)
        _previous_import = builtins.__import__
        builtins.__import__ = _agent_import


def uninstall() -> None:
    """Put back what :func:`install` replaced (where the program has not replaced it since)."""
    global _previous_import
    with _lock:
        if _previous_import is not None:
            if builtins.__import__ is _agent_import:
                builtins.__import__ = _previous_import
            _previous_import = None
        for g, name, original, new in reversed(_changed):
            if g.get(name) is new:
                g[name] = original
        _changed.clear()


def installed() -> bool:
    """True while the stand-ins are installed."""
    return _previous_import is not None
