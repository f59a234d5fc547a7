"""Tool-call capture at the function boundary.

``@forkpoint.tool`` wraps a sync or async function. While recording, each call runs the function and
writes a ``tool_call`` event: name, arguments (bound to the signature, defaults filled in), JSON
result or exception (type, module, message), duration. While replaying, the function body never
runs: the recorded result is returned, or the recorded exception raised again.

Results must be JSON data. orjson's conversions apply (dataclasses, datetimes, UUIDs, enums become
JSON), then any encoder registered with :func:`register_encoder`; anything else raises
:class:`ToolResultError` naming the tool and the type. On replay a tool returns the JSON form of its
recorded result (a dataclass comes back as a dict). Nothing is ever pickled.

For agents you cannot edit, :func:`install_import_hook` wraps ``module:qualname`` targets (methods as
``module:Class.method``) as soon as the module has executed, so ``from module import f`` elsewhere
already sees the wrapper. Such a wrapper records only while its target is enabled
(:func:`install_import_hook` enables it, :func:`disable_targets` disables it again: the pytest
plugin's per-test ``tools``); otherwise it calls the function as it is.
"""

from __future__ import annotations

import atexit
import base64
import builtins
import functools
import inspect
import sys
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from decimal import Decimal
from pathlib import PurePath
from types import ModuleType
from typing import Any, TypeVar, overload

import orjson

from .. import runtime
from ..errors import RecordedToolError, ToolResultError
from ..events import ErrorRecord, ToolCallEvent, new_span_id, now_iso
from ..redact import scrub_json, scrub_text
from .imports import ExecHook
from .imports import install as install_exec_hook

F = TypeVar("F", bound=Callable[..., Any])

_ENCODERS: dict[type, Callable[[Any], Any]] = {}


def register_encoder(cls: type, encode: Callable[[Any], Any]) -> None:
    """Store values of ``cls`` (and subclasses) as ``encode(value)``, which must return JSON data."""
    _ENCODERS[cls] = encode


def _default(value: Any) -> Any:
    for cls, encode in _ENCODERS.items():
        if isinstance(value, cls):
            return encode(value)
    # Built-in conversions for values tools commonly return (documented in docs/format.md).
    if hasattr(value, "model_dump") and callable(value.model_dump):  # pydantic v2 models
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if isinstance(value, PurePath | Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    raise TypeError


def to_json_value(value: Any) -> Any:
    """``value`` converted to plain JSON data via orjson and the registered encoders.

    Raises ``TypeError`` when some part of it has no JSON form.
    """
    try:
        return orjson.loads(
            orjson.dumps(value, default=_default, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)
        )
    except orjson.JSONEncodeError as exc:
        raise TypeError(str(exc)) from None


def _lenient(value: Any) -> Any:
    """JSON form of an argument; values with none (a framework's context object) become their type."""
    try:
        return to_json_value(value)
    except TypeError:
        if isinstance(value, dict):
            return {str(k): _lenient(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [_lenient(v) for v in value]
        return {"$type": f"{type(value).__module__}.{type(value).__qualname__}"}


def bind_call(
    fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]
) -> tuple[dict[str, Any], frozenset[str]]:
    """The call's arguments by parameter name (defaults filled in, ``self``/``cls`` left out, each in its
    JSON form), and the names among them whose value came from a default, not the caller."""
    try:
        sig = inspect.signature(fn)
        bound = sig.bind(*args, **kwargs)
        given = set(bound.arguments)
        bound.apply_defaults()
        params = dict(bound.arguments)
        defaulted = frozenset(k for k in params if k not in given)
    except (TypeError, ValueError):
        params, defaulted = {"args": list(args), "kwargs": kwargs}, frozenset()
    first = next(iter(params), None)
    if first in ("self", "cls"):
        params.pop(first)
    return {k: _lenient(v) for k, v in params.items()}, defaulted


_BYTES = "$bytes"


def _plain(value: Any) -> Any:
    """``value`` as JSON for an exception's args and attributes: bytes as ``{"$bytes": base64}``
    (so they come back as bytes); raises TypeError for anything else that is not plain JSON."""
    if value is None or type(value) in (str, bool, int, float):
        return value
    if type(value) is bytes:
        return {_BYTES: base64.b64encode(value).decode()}
    if type(value) in (list, tuple):
        return [_plain(v) for v in value]
    if type(value) is dict and all(type(k) is str for k in value):
        return {k: _plain(v) for k, v in value.items()}
    raise TypeError(type(value).__qualname__)


def _unplain(value: Any) -> Any:
    if isinstance(value, list):
        return [_unplain(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1 and isinstance(value.get(_BYTES), str):
            return base64.b64decode(value[_BYTES])
        return {k: _unplain(v) for k, v in value.items()}
    return value


def _error_dict(exc: BaseException) -> ErrorRecord:
    """``{"type", "module", "message"}``, plus the exception's ``args`` (when they are JSON and not
    just the message) and its JSON instance attributes (``attrs``, each on its own), so a custom
    exception (``ApiError(429, "slow down")`` with ``.status``) comes back whole on replay."""
    out: ErrorRecord = {
        "type": type(exc).__qualname__,
        "module": type(exc).__module__,
        "message": scrub_text(str(exc)),
    }
    try:
        args = scrub_json(_plain(list(exc.args)))
    except TypeError:
        args = None
    if args is not None and args != [out["message"]]:
        out["args"] = args
    attrs = {}
    for key, value in getattr(exc, "__dict__", {}).items():
        if key.startswith("__"):
            continue
        try:
            attrs[key] = scrub_json(_plain(value))
        except TypeError:  # an attribute with no JSON form is left out, the others kept
            continue
    if attrs:
        out["attrs"] = attrs
    return out


def rebuild_exception(error: dict[str, Any]) -> BaseException:
    """The recorded exception, as its own class when that class is a builtin or already imported
    (otherwise :class:`RecordedToolError`). No module is imported to find it: loading a session
    never runs code.

    The class is called with the recorded ``args``, else with the message, else the instance is made
    without its constructor; the recorded attributes are set again. The first of these whose
    ``str()`` is the recorded message is returned (an agent may send that text to the model), else
    the first that could be built."""
    name, module, message = str(error.get("type")), str(error.get("module")), str(error.get("message", ""))
    owner: Any = builtins if module == "builtins" else sys.modules.get(module)
    cls: Any = owner
    for part in name.split("."):
        cls = getattr(cls, part, None)
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        return RecordedToolError(name, module, message)
    args = _unplain(error["args"]) if isinstance(error.get("args"), list) else None
    attrs = _unplain(error["attrs"]) if isinstance(error.get("attrs"), dict) else {}

    def made(how: Callable[[], BaseException]) -> BaseException | None:
        try:
            exc = how()
        except Exception:  # a constructor with another signature
            return None
        for key, value in attrs.items():
            try:
                setattr(exc, str(key), value)
            except Exception:  # a read-only property: the constructor has set it
                pass
        return exc

    def bare() -> BaseException:
        exc = cls.__new__(cls)
        exc.args = tuple(args) if args is not None else (message,)
        built: BaseException = exc
        return built

    candidates: list[BaseException] = []
    for how in ((lambda: cls(*args)) if args is not None else None, lambda: cls(message), bare):
        exc = made(how) if how is not None else None
        if exc is None:
            continue
        try:
            if str(exc) == message:
                return exc
        except Exception:  # a __str__ that needs what the constructor did not set
            pass
        candidates.append(exc)
    return candidates[0] if candidates else RecordedToolError(name, module, message)


def _encode_result(name: str, value: Any) -> Any:
    try:
        return scrub_json(to_json_value(value))
    except TypeError as exc:
        raise ToolResultError(
            f"tool {name!r} returned a {type(value).__module__}.{type(value).__qualname__} that cannot be "
            f"stored as JSON ({exc}); return JSON data, or register an encoder for the offending type: "
            "forkpoint.register_encoder(SomeType, to_json)"
        ) from None


class _ToolCall:
    """Bookkeeping of one recorded tool call."""

    def __init__(self, name: str, args: dict[str, Any]) -> None:
        self.name, self.args = name, args
        rt = runtime.active()
        self.sent = runtime.next_sent(rt) if rt is not None else None
        self.ts = now_iso()
        self.t0 = time.perf_counter()
        self.span_id = new_span_id()
        self.parent = runtime.current_span.get()
        self.token = runtime.current_span.set(self.span_id)

    def done(self, *, result: Any = None, error: BaseException | None = None) -> None:
        runtime.current_span.reset(self.token)
        rt = runtime.active()
        if rt is None:
            return
        event: ToolCallEvent = {
            "type": "tool_call",
            "ts": self.ts,
            "duration_ms": round((time.perf_counter() - self.t0) * 1000, 3),
            "span_id": self.span_id,
            "parent_span_id": self.parent or rt.root_span,
            "tool": self.name,
            "args": scrub_json(self.args),
        }
        if self.sent is not None:
            event["sent"] = self.sent
        if error is not None:
            event["error"] = _error_dict(error)
        else:
            event["result"] = _encode_result(self.name, result)
        rt.tool_call_done(event)


_LIVE = object()


def _replayed(rt: Any, name: str, args: dict[str, Any], defaulted: frozenset[str]) -> Any:
    """The served result of a tool call, or ``_LIVE`` when the replayer says to run it for real."""
    event = rt.take_tool_call(name, args, defaulted=defaulted)
    if event is None:
        return _LIVE
    if "error" in event:
        raise rebuild_exception(event["error"])
    return event.get("result")


def call_tool(
    name: str,
    args: dict[str, Any],
    body: Callable[[], Any],
    encode: Callable[[Any], Any] | None = None,
    *,
    defaulted: frozenset[str] = frozenset(),
) -> Any:
    """Run one tool call through forkpoint: the building block of :func:`tool` and of the framework
    integrations (:mod:`forkpoint.integrations`).

    ``args`` are the call's JSON arguments; ``defaulted`` names those the caller did not pass (their
    default was filled in), so a recording made before such a parameter existed still matches.
    No runtime active: ``body()``. Replay: the recorded
    result of ``name`` with ``args`` (or its exception raised again) and ``body`` never runs, unless
    the replay runs tools live. Record (or live): ``body()`` runs and a ``tool_call`` event is written
    with its result (``encode(result)`` when given; it must be JSON data) or its exception.
    """
    rt = runtime.active()
    if rt is None:
        return body()
    if rt.mode == "replay" and (served := _replayed(rt, name, args, defaulted)) is not _LIVE:
        return served
    call = _ToolCall(name, args)
    live = runtime.running_live_tool.set(rt.mode == "replay")
    try:
        result = body()
    except Exception as exc:
        call.done(error=exc)
        raise
    except BaseException:  # cancelled or exiting: nothing to record, but leave the span
        runtime.current_span.reset(call.token)
        raise
    finally:
        runtime.running_live_tool.reset(live)
    call.done(result=encode(result) if encode else result)
    return result


async def acall_tool(
    name: str,
    args: dict[str, Any],
    body: Callable[[], Awaitable[Any]],
    encode: Callable[[Any], Any] | None = None,
    *,
    defaulted: frozenset[str] = frozenset(),
) -> Any:
    """:func:`call_tool` for a tool whose body is a coroutine function."""
    rt = runtime.active()
    if rt is None:
        return await body()
    if rt.mode == "replay" and (served := _replayed(rt, name, args, defaulted)) is not _LIVE:
        return served
    call = _ToolCall(name, args)
    live = runtime.running_live_tool.set(rt.mode == "replay")
    try:
        result = await body()
    except Exception as exc:
        call.done(error=exc)
        raise
    except BaseException:  # cancelled (e.g. a framework timeout): nothing to record, but leave the span
        runtime.current_span.reset(call.token)
        raise
    finally:
        runtime.running_live_tool.reset(live)
    call.done(result=encode(result) if encode else result)
    return result


@overload
def tool(fn: F, *, name: str | None = None) -> F: ...
@overload
def tool(fn: None = None, *, name: str | None = None) -> Callable[[F], F]: ...


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
    """Mark a function as a tool: recorded while recording, served from the session on replay.

    Usable bare (``@forkpoint.tool``) or with a name (``@forkpoint.tool(name="search")``; default:
    the function's ``__name__``). Works on sync and async functions and on methods. The wrapper keeps
    the function's name, docstring and signature, so frameworks that read them still work.
    """
    if fn is None:
        return lambda f: tool(f, name=name)
    return _wrapped(fn, str(name or getattr(fn, "__name__", "tool")))


def _wrapped(fn: Callable[..., Any], tool_name: str, target: str | None = None) -> Any:
    """The tool wrapper of ``fn``; with ``target`` (a ``--tool`` spec), it records only while that
    target is enabled."""

    def off() -> bool:
        return runtime.active() is None or (target is not None and not _enabled[target])

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            if off():
                return await fn(*args, **kwargs)
            bound, defaulted = bind_call(fn, args, kwargs)
            return await acall_tool(tool_name, bound, lambda: fn(*args, **kwargs), defaulted=defaulted)

        async_wrapper.__forkpoint_tool__ = tool_name  # type: ignore[attr-defined]
        return async_wrapper

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if off():
            return fn(*args, **kwargs)
        bound, defaulted = bind_call(fn, args, kwargs)
        return call_tool(tool_name, bound, lambda: fn(*args, **kwargs), defaulted=defaulted)

    wrapper.__forkpoint_tool__ = tool_name  # type: ignore[attr-defined]
    return wrapper


# --------------------------------------------------------------------------- --tool module:qualname


def parse_target(spec: str) -> tuple[str, str]:
    """Split ``module:qualname``; raises ``ValueError`` with the expected shape otherwise."""
    module, sep, qualname = spec.partition(":")
    if not sep or not module or not qualname or not all(p.isidentifier() for p in qualname.split(".")):
        raise ValueError(f"--tool {spec!r}: expected MODULE:FUNCTION or MODULE:CLASS.METHOD")
    return module, qualname


#: How many times each ``module:qualname`` target is enabled (its wrapper records while above 0).
_enabled: Counter[str] = Counter()
_targets_lock = threading.Lock()
#: Modules not imported yet → the qualnames to wrap once they are.
_pending: dict[str, list[str]] = {}
_hook: ExecHook | None = None


def wrap_target(module: ModuleType, qualname: str) -> None:
    """Replace ``module.<qualname>`` by its :func:`tool` wrapper (named ``qualname``), which records
    while the target ``module:qualname`` is enabled (:func:`install_import_hook`).

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
    target = f"{module.__name__}:{qualname}"
    if isinstance(raw, staticmethod | classmethod):
        setattr(owner, attr, type(raw)(_wrapped(raw.__func__, qualname, target)))
    else:
        setattr(owner, attr, _wrapped(raw, qualname, target))


def _wrap_pending(module: ModuleType) -> None:
    with _targets_lock:
        qualnames = _pending.pop(module.__name__, [])
    for q in qualnames:
        _wrap_or_warn(module, q)


def _wrap_or_warn(module: ModuleType, qualname: str) -> None:
    # A typo in --tool must not crash the agent being recorded; say it instead.
    try:
        wrap_target(module, qualname)
    except AttributeError as exc:
        sys.stderr.write(f"forkpoint: {exc}; its calls are not recorded or replayed\n")


def install_import_hook(specs: Sequence[str], *, warn_at_exit: bool = False) -> None:
    """Wrap each ``module:qualname`` in ``specs`` (now if imported, else when first imported) and
    enable it: its calls are recorded or served until :func:`disable_targets`.

    A target that does not exist is reported on stderr, never raised into the program; with
    ``warn_at_exit`` (the CLI's bootstrap), so is a module the program never imported.
    Raises ``ValueError`` for a spec that is not ``module:qualname``.
    """
    global _hook
    targets: dict[str, list[str]] = {}
    parsed = [(spec, *parse_target(spec)) for spec in specs]
    for spec, module, qualname in parsed:
        with _targets_lock:
            _enabled[spec] += 1
        if module in sys.modules:
            _wrap_or_warn(sys.modules[module], qualname)
        else:
            targets.setdefault(module, []).append(qualname)
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
                    listed = ", ".join(f"{module}:{n}" for n in names)
                    sys.stderr.write(f"forkpoint: --tool {listed}: the program never imported {module}\n")

        atexit.register(never_imported)


def disable_targets(specs: Sequence[str]) -> None:
    """Undo one :func:`install_import_hook` of ``specs``: their wrappers call the functions as they
    are again (unless enabled elsewhere). Targets not yet imported stay pending, disabled."""
    with _targets_lock:
        for spec in specs:
            if _enabled[spec] > 0:
                _enabled[spec] -= 1
