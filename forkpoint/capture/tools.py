"""Tool-call capture at the function boundary.

``@forkpoint.tool`` wraps a function: sync, async, a generator or an async generator. While
recording, each call runs the function and writes a ``tool_call`` event: name, arguments (bound to
the signature, defaults filled in, in their JSON form: they are the match key), the result or the
exception (type, module, message, args, attributes), duration, and when the call started and
finished (``sent``, ``finished``). While replaying, the function body never runs: the recorded
result is returned, or the recorded exception raised again: an exit (``sys.exit``, Ctrl-C) too, and
a call the program cancelled (its own timeout) waits on replay to be cancelled again.

**Results come back as what they were.** A result is stored by :func:`forkpoint.values.encode`:
JSON data as is, and dataclasses, pydantic models, datetimes, decimals, UUIDs, enums, paths, bytes,
tuples, sets, named tuples… as typed JSON that a replay rebuilds into the same type (only from
classes the replayed program has imported; nothing is imported or pickled). A result with no
stored form (and no encoder registered with :func:`register_encoder`) is said on stderr, naming
the tool, the type and the hook; the call runs on as it would have, and its event records why it
is missing (``unrecorded``), so a replay stops there with a divergence that says so.

**Generators.** A tool that returns a generator or an async generator (a generator function, or
a function returning one) hands the program a wrapper that passes every item on as it comes and
records it; the event is written when the generator ends (exhausted, closed by the program, failed
or, at the end of the run, still open). On replay the program gets a generator of the same kind
yielding the recorded items, then ending as it did; reading past the point where the recorded
program stopped reading is a divergence.

**Parallel calls.** A served result is handed back only after the results of the calls that
finished before it live while it was running (:func:`forkpoint.replay.release_order`), so results
gathered in parallel arrive in the order they did live.

Targets named on the command line (``--tool module:qualname``) are :mod:`.targets`.
"""

from __future__ import annotations

import base64
import builtins
import collections
import contextlib
import contextvars
import functools
import hashlib
import inspect
import json
import math
import os
import re
import sys
import threading
import time
import types
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator, Iterator, Sequence
from decimal import Decimal
from pathlib import PurePath
from typing import Any, NoReturn, TypeVar, cast, overload

import orjson

from .. import runtime, values
from ..errors import RecordedToolError, SessionError, ToolResultError, UnrebuildableValue
from ..events import (
    Emitted,
    ErrorRecord,
    McpCall,
    ToolCallEvent,
    ToolInstance,
    UnrecordedResult,
    cancelled,
    error_record,
    new_span_id,
    now_iso,
)
from ..providers import PLACEHOLDER_KEY
from ..redact import PLACEHOLDER_PATTERN, current, scrub_chunks, scrub_json, scrub_text
from ..text import say, visible
from .tracebacks import frames_of, hidden, hide_own_frames, recorded_traceback

F = TypeVar("F", bound=Callable[..., Any])

#: Store values of a class as JSON of one's own (and, with a decoder, get them back on replay).
register_encoder = values.register_encoder

#: At least this long (seconds) a served result waits for the calls that finished before it live.
TURN_WAIT_S = 2.0


def _default(value: Any) -> Any:
    """orjson's fallback for an *argument*: its JSON form, which is what a call is matched by."""
    pair = values.registered(type(value))
    if pair is not None:
        return pair[0](value)
    # Built-in conversions for values tools commonly take (documented in docs/format.md).
    # pydantic v2 models: the class's own method (a mock answers any attribute, with another mock)
    if callable(getattr(type(value), "model_dump", None)):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    if isinstance(value, PurePath | Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(bytes(value)).decode()
    raise TypeError


#: orjson's error for a value nested deeper than it writes, or containing itself.
_TOO_DEEP = "Recursion limit reached"
_ARG_OPTIONS = orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY
#: Containers of an argument this deep are kept as their type only: the log (orjson) must hold them
#: inside the event.
_DEEPEST = values.DEEPEST


def to_json_value(value: Any, room: int = _DEEPEST) -> Any:
    """``value`` converted to plain JSON data via orjson and the registered encoders (an argument's
    form: results keep their types, :func:`forkpoint.values.encode`).

    Raises ``TypeError`` when some part of it has no JSON form, or has containers nested more than
    ``room`` deep.
    """
    try:
        data = orjson.dumps(value, default=_default, option=_ARG_OPTIONS)
    except orjson.JSONEncodeError as exc:
        if str(exc) == _TOO_DEEP:  # (or a cycle): Python's json would go deeper than the log holds
            raise TypeError(str(exc)) from None
        try:  # lone surrogates (a file name's, a Path's) or integers beyond 64 bits are JSON: Python's
            text = json.dumps(value, default=_default, allow_nan=False)
        except (TypeError, ValueError):
            raise TypeError(str(exc)) from None
        data, loaded = text.encode(), json.loads(text)  # (ASCII: non-ASCII is escaped)
    else:
        loaded = orjson.loads(data)
    # (checked on what was written: orjson writes tuples nested past its own limit, and Python's
    # json has none, and either way the log could not hold the event around it)
    if data.count(b"[") + data.count(b"{") > room and _deeper_than(loaded, room):
        raise TypeError(_TOO_DEEP)
    return loaded


def _deeper_than(data: Any, room: int) -> bool:
    """Whether the lists and dicts of ``data`` (plain JSON) nest more than ``room`` deep."""
    level = [data] if isinstance(data, list | dict) else []
    for _ in range(room):
        level = [
            v for c in level for v in (c.values() if isinstance(c, dict) else c) if isinstance(v, list | dict)
        ]
        if not level:
            return False
    return True


def _lenient(value: Any, typed_only: list[type] | None = None, inside: frozenset[int] = frozenset()) -> Any:
    """JSON form of an argument; values with none (a framework's context object) become their type
    (added to ``typed_only``), and so do a container met again inside itself (``inside``: the
    containers around ``value``) and one nested deeper than :data:`_DEEPEST`: walked into, they
    raised RecursionError into the program while recording, and the log could not hold them."""
    try:
        return to_json_value(value, _DEEPEST - len(inside))
    except (TypeError, ValueError, RecursionError):  # (any error of a converter of the program's)
        if isinstance(value, dict | list | tuple) and id(value) not in inside and len(inside) < _DEEPEST:
            within = inside | {id(value)}
            if isinstance(value, dict):
                return {str(k): _lenient(v, typed_only, within) for k, v in value.items()}
            return [_lenient(v, typed_only, within) for v in value]
        return _type_only(value, typed_only)


def _type_only(value: Any, typed_only: list[type] | None) -> dict[str, str]:
    """What an argument with no JSON form is kept as: its type (added to ``typed_only``)."""
    if typed_only is not None:
        typed_only.append(type(value))
    return {"$type": f"{type(value).__module__}.{type(value).__qualname__}"}


#: (tool, parameter, class) of arguments kept as their type only, already looked at (once per process).
_typed_seen: set[tuple[str, str, str]] = set()


def _own_class(cls: type) -> bool:
    """Whether ``cls`` is the program's own (``__main__``, or a module outside the interpreter's
    library folders): a framework's or the standard library's context object is not."""
    if cls.__module__ == "__main__":
        return True
    where = getattr(sys.modules.get(cls.__module__), "__file__", None)
    if not where:
        return False
    import os
    import sysconfig

    libraries = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    return not any(os.path.abspath(where).startswith(os.path.abspath(d) + os.sep) for d in libraries)


#: A plain function's signature, with the code, defaults and keyword defaults (their items: the
#: dict is changed in place by ``f.__kwdefaults__["limit"] = 50``) it was read from (a tool is
#: called again and again: ``inspect.signature`` was a sixth of a replayed call's cost).
_signatures: weakref.WeakKeyDictionary[
    Callable[..., Any], tuple[Any, Any, tuple[tuple[str, Any], ...], inspect.Signature]
] = weakref.WeakKeyDictionary()


def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    """``inspect.signature(fn)``, kept for a plain function while its code and defaults are the
    ones it was read from (raises as ``inspect.signature`` does)."""
    if type(fn) is not types.FunctionType or "__signature__" in fn.__dict__ or "__wrapped__" in fn.__dict__:
        return inspect.signature(fn)
    code, defaults = fn.__code__, fn.__defaults__
    kwdefaults = tuple(fn.__kwdefaults__.items()) if fn.__kwdefaults__ else ()
    kept = _signatures.get(fn)
    if (
        kept is not None
        and kept[0] is code
        and kept[1] is defaults
        and len(kept[2]) == len(kwdefaults)
        and all(a[0] == b[0] and a[1] is b[1] for a, b in zip(kept[2], kwdefaults, strict=True))
    ):
        return kept[3]
    sig = inspect.signature(fn)
    _signatures[fn] = (code, defaults, kwdefaults, sig)
    return sig


def bind_call(
    fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any], tool: str | None = None
) -> tuple[dict[str, Any], frozenset[str]]:
    """The call's arguments by parameter name (defaults filled in, ``self``/``cls`` left out, each in its
    JSON form), and the names among them whose value came from a default, not the caller. With
    ``tool`` (its name), an argument of the program's own class with no JSON form, kept as its type
    only, is said once: calls that differ only in it are taken for the same call on replay."""
    try:
        bound = _signature(fn).bind(*args, **kwargs)
        given = set(bound.arguments)
        bound.apply_defaults()
        params = dict(bound.arguments)
        defaulted = frozenset(k for k in params if k not in given)
    except (TypeError, ValueError):
        params, defaulted = {"args": list(args), "kwargs": kwargs}, frozenset()
    first = next(iter(params), None)
    if first in ("self", "cls"):
        params.pop(first)
    out = {}
    typed_only: list[type] = []
    for k, v in params.items():
        n = len(typed_only)
        try:
            out[k] = _lenient(v, typed_only)
        except RecursionError:  # (the program's stack was deep already when it called the tool)
            out[k] = _type_only(v, typed_only)
        if tool is None:
            continue
        for cls in typed_only[n:]:
            seen = (tool, k, f"{cls.__module__}.{cls.__qualname__}")
            if seen in _typed_seen:
                continue
            _typed_seen.add(seen)
            if _own_class(cls):
                _say(
                    f"tool {tool!r}: argument {k!r} is a {seen[2]}, which has no JSON form and is kept as its "
                    "type only: on replay, calls that differ only in it are taken for the same call. To match "
                    f"on it, register an encoder: forkpoint.register_encoder({cls.__qualname__}, to_json)"
                )
    return out, defaulted


_BYTES = "$bytes"


def _plain(value: Any, inside: frozenset[int] = frozenset(), *, exact: bool = False) -> Any:
    """``value`` as JSON for an exception's args and attributes: bytes as ``{"$bytes": base64}``
    (so they come back as bytes); raises TypeError for anything else that is not plain JSON, a
    container met again inside itself (``inside``: the containers around ``value``) or one nested
    deeper than :data:`_DEEPEST` (walked into, they left the whole call unrecorded). ``exact``: a
    tuple (which would come back a list) or a float JSON has no number for (NaN, which would come
    back None) raises TypeError too, for args that have a typed form (``typed_args``)."""
    if exact and (type(value) is tuple or type(value) is float and not math.isfinite(value)):
        raise TypeError(type(value).__qualname__)
    if value is None or type(value) in (str, bool, int, float):
        return value
    if type(value) is bytes:
        return {_BYTES: base64.b64encode(value).decode()}
    if type(value) in (list, tuple, dict) and (id(value) in inside or len(inside) >= _DEEPEST):
        raise TypeError(type(value).__qualname__)
    if type(value) in (list, tuple):
        return [_plain(v, inside | {id(value)}, exact=exact) for v in value]
    if type(value) is dict and all(type(k) is str for k in value):
        return {k: _plain(v, inside | {id(value)}, exact=exact) for k, v in value.items()}
    raise TypeError(type(value).__qualname__)


def _unplain(value: Any) -> Any:
    if isinstance(value, list):
        return [_unplain(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1 and isinstance(value.get(_BYTES), str):
            return base64.b64decode(value[_BYTES])
        return {k: _unplain(v) for k, v in value.items()}
    return value


#: How many exceptions of a ``raise … from …`` chain a tool call's error keeps (and how deep
#: exception groups inside exception groups).
_CAUSES = 5
#: How many exceptions of an exception group a tool call's error keeps.
_GROUPED = 100


def _error_dict(exc: BaseException, tool: str, depth: int = 0, below: bool = False) -> ErrorRecord:
    """``{"type", "module", "message"}``, plus the exception's ``args`` (when they are JSON and not
    just the message; typed as a tool's result is, ``typed_args``, when they are not JSON; said when
    they have no stored form) and its instance attributes (``attrs``, each on its own, the JSON ones;
    ``typed_attrs``, the others, typed; an ``OSError``'s ``filename`` and ``filename2`` too), and the exception it was raised ``from`` (``cause``, up to
    :data:`_CAUSES` deep), so a custom exception (``ApiError(429, "slow down")`` with ``.status``)
    or a ``FileNotFoundError`` (its ``errno`` and ``filename``) comes back whole on replay. An
    attribute with no stored form (neither JSON nor typed) is left out, and said (naming ``tool``). ``below``: the exception
    was caught where the tool was called, and its ``frames`` (those of the tool's body: forkpoint's
    own are left out; a cause's are all of its own) are kept, so that a replay raises it through
    frames that look the same (:mod:`.tracebacks`)."""
    out = error_record(exc)
    out["message"] = scrub_text(out["message"])
    if (below or depth) and (frames := frames_of(exc.__traceback__)):
        out["frames"] = frames
    for field in ("errno", "strerror"):  # (an OSError's are its args, kept below)
        out.pop(field, None)  # type: ignore[misc]
    unstored = None
    try:
        args = scrub_json(_plain(list(exc.args), exact=True))
    except TypeError:
        args = None
        try:  # (typed, as a result is: LangGraph's GraphInterrupt holds the Interrupt objects it reads)
            out["typed_args"] = scrub_json(values.encode(exc.args))
        except ToolResultError as why:
            unstored = f"{why}{f' (at args{why.where})' if why.where else ''}"
    if args is not None and args != [out["message"]]:
        out["args"] = args
    attrs, typed = {}, {}
    fields = dict(getattr(exc, "__dict__", {}))
    if isinstance(exc, OSError):  # (attributes of the C type, not in __dict__)
        fields.update((k, v) for k in ("filename", "filename2") if (v := getattr(exc, k, None)) is not None)
    left: list[str] = []
    for key, value in fields.items():
        if key.startswith("__"):
            continue
        try:
            attrs[key] = scrub_json(_plain(value, exact=True))
        except TypeError:  # typed as args are (a tuple, a NaN, a datetime), else left out and said
            try:
                typed[key] = scrub_json(values.encode(value))
            except ToolResultError:
                left.append(f"{key} ({type(value).__qualname__})")
    if attrs:
        out["attrs"] = attrs
    if typed:
        out["typed_attrs"] = typed
    validation = _validation_errors(exc)
    if validation is not None:
        out["validation"] = validation
    if exc.__cause__ is not None and depth < _CAUSES:  # (retry logic reads it: raise ApiError from exc)
        out["cause"] = _error_dict(exc.__cause__, tool, depth + 1)
    elif exc.__suppress_context__:  # raise … from None: no traceback shows what was handled
        out["suppress_context"] = True
    elif exc.__context__ is not None and depth < _CAUSES:
        # (raised while handling another: a traceback shows that one first, DSPy's to the model)
        out["context"] = _error_dict(exc.__context__, tool, depth + 1)
    if isinstance(exc, BaseExceptionGroup):  # (a task group's: the program may catch its parts, except*)
        if depth < _CAUSES:
            out["group_message"] = scrub_text(str(exc.message))
            out["exceptions"] = [_error_dict(e, tool, depth + 1) for e in exc.exceptions[:_GROUPED]]
        if depth >= _CAUSES or len(exc.exceptions) > _GROUPED:
            kept = 0 if depth >= _CAUSES else _GROUPED
            _say(
                f"tool {tool!r} raised {type(exc).__qualname__} of {len(exc.exceptions)} "
                f"exception{'s' if len(exc.exceptions) != 1 else ''}, "
                f"{'nested deeper than forkpoint keeps' if not kept else f'more than the {kept} forkpoint keeps'}: "
                f"a replay raises {'a RecordedToolError in its place' if not kept else f'it with the first {kept}'}"
            )
    if left:
        _say(
            f"tool {tool!r} raised {type(exc).__qualname__} with attributes forkpoint cannot store: "
            f"{', '.join(left)}; a replay rebuilds it from its args and message only"
        )
    if unstored:
        _say(
            f"tool {tool!r} raised {type(exc).__qualname__} with arguments forkpoint cannot store: "
            f"{unstored}; a replay rebuilds it from its message"
        )
    return out


def _is_validation_error(cls: Any) -> bool:
    """Whether ``cls`` is pydantic's ``ValidationError`` (pydantic-core's, which has no constructor:
    it is made by ``from_exception_data``)."""
    core = sys.modules.get("pydantic_core")
    return core is not None and isinstance(cls, type) and issubclass(cls, core.ValidationError)


def _validation_errors(exc: BaseException) -> dict[str, Any] | None:
    """Of pydantic's ``ValidationError``, what ``from_exception_data`` builds it again from: its
    title and its errors (type, location, message, input and context; an input or context value
    with no JSON form as its ``repr`` and type's name), scrubbed; None for any other exception."""
    if not _is_validation_error(type(exc)):
        return None
    try:
        errors = []
        for e in cast(Any, exc).errors(include_url=False):
            item: dict[str, Any] = {"type": str(e["type"]), "loc": list(e["loc"]), "msg": str(e["msg"])}
            try:
                item["input"] = _plain(e.get("input"))
            except TypeError:
                item["input"] = {"$repr": repr(e.get("input")), "$type": type(e.get("input")).__name__}
            if e.get("ctx"):
                item["ctx"] = {str(k): _plain_or_str(v) for k, v in e["ctx"].items()}
            errors.append(item)
        return cast(dict[str, Any], scrub_json({"title": str(cast(Any, exc).title), "errors": errors}))
    except Exception:  # (another pydantic-core whose errors read otherwise: rebuilt as another exception)
        return None


def _plain_or_str(value: Any) -> Any:
    """``value`` as :func:`_plain` has it, else its ``str()`` (a ``ValueError`` in a validation
    error's context is shown as its text)."""
    try:
        return _plain(value)
    except TypeError:
        return str(value)


def _validation_error(cls: Any, recorded: dict[str, Any], message: str) -> BaseException:
    """pydantic's ``ValidationError`` ``cls`` made again from what :func:`_validation_errors`
    recorded: as JSON or Python input, input shown or hidden, the one whose ``str()`` is the
    recorded ``message`` (else the first). Raises when it cannot be made."""
    from pydantic_core import PydanticCustomError

    details = []
    for e in recorded["errors"]:
        shown = e.get("input")
        if isinstance(shown, dict) and set(shown) == {"$repr", "$type"}:  # (no JSON form: shown as it was)
            text = str(shown["$repr"])
            shown = type(str(shown["$type"]), (), {"__repr__": lambda _self, text=text: text})()
        else:
            shown = _unplain(shown)
        ctx = e.get("ctx") if isinstance(e.get("ctx"), dict) else None
        detail: dict[str, Any] = {"type": str(e["type"]), "loc": tuple(e["loc"]), "input": shown}
        if ctx:
            detail["ctx"] = ctx
        details.append(detail)
    built: list[BaseException] = []
    for input_type in ("python", "json"):
        for hide_input in (False, True):
            try:
                exc = cls.from_exception_data(str(recorded["title"]), details, input_type, hide_input)
            except (KeyError, TypeError, ValueError):  # an error type of the program's own
                custom = [
                    {**d, "type": PydanticCustomError(d["type"], str(e["msg"]))}
                    for d, e in zip(details, recorded["errors"], strict=True)
                ]
                exc = cls.from_exception_data(str(recorded["title"]), custom, input_type, hide_input)
            if str(exc) == message:
                return cast(BaseException, exc)
            built.append(exc)
    return built[0]


def rebuild_exception(error: dict[str, Any]) -> BaseException:
    """The recorded exception, as its own class when that class is a builtin or already imported
    (otherwise :class:`RecordedToolError`), raised ``from`` its recorded ``cause`` again. No module
    is imported to find it: loading a session never runs code.

    The class is called with the recorded ``args``, else with the message, else the instance is made
    without its constructor; the recorded attributes are set again. The first of these whose
    ``str()`` is the recorded message is returned (an agent may send that text to the model), else
    the first that could be built. Raises :class:`~forkpoint.errors.UnrebuildableValue` for typed
    ``args`` this run cannot rebuild."""
    exc = _rebuilt(error)
    if isinstance(error.get("cause"), dict):
        cause = rebuild_exception(error["cause"])
        exc.__cause__ = cause.with_traceback(recorded_traceback(error["cause"].get("frames")))
    elif isinstance(error.get("context"), dict):
        context = rebuild_exception(error["context"])
        exc.__context__ = context.with_traceback(recorded_traceback(error["context"].get("frames")))
    exc.__suppress_context__ = exc.__suppress_context__ or error.get("suppress_context") is True
    return runtime.replayed(exc)


def _raise_recorded(exc: BaseException) -> NoReturn:
    """Raise a rebuilt exception, keeping its recorded ``__context__``: ``raise`` sets it to the
    exception the program is handling where it called the tool, which live was the last of the
    chain (recorded with it), not the first."""
    context = exc.__context__
    try:
        raise exc
    finally:
        if context is not None:
            exc.__context__ = context


def _rebuilt(error: dict[str, Any]) -> BaseException:
    name, module, message = str(error.get("type")), str(error.get("module")), str(error.get("message", ""))
    owner: Any = builtins if module == "builtins" else sys.modules.get(module)
    cls: Any = owner
    for part in name.split("."):
        cls = getattr(cls, part, None)
    raisable = isinstance(cls, type) and (
        issubclass(cls, Exception | SystemExit | KeyboardInterrupt | BaseExceptionGroup)
        or cancelled(cast(ErrorRecord, error))
    )
    if not raisable:
        return RecordedToolError(name, module, message)
    args = _unplain(error["args"]) if isinstance(error.get("args"), list) else _typed_args(error)
    attrs = _unplain(error["attrs"]) if isinstance(error.get("attrs"), dict) else {}
    if isinstance(error.get("typed_attrs"), dict):  # (a class this run has not imported: as typed args)
        attrs.update((k, values.decode(v)) for k, v in error["typed_attrs"].items())
    grouped = error.get("exceptions")
    if issubclass(cls, BaseExceptionGroup) and isinstance(grouped, list):  # (its message and its parts)
        parts = [
            rebuild_exception(e).with_traceback(recorded_traceback(e.get("frames")))
            for e in grouped
            if isinstance(e, dict)
        ]
        args = [str(error.get("group_message", "")), parts]

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
        if issubclass(cls, BaseExceptionGroup) and isinstance(grouped, list) and args is not None:
            # (a group subclass with its own constructor, MyGroup(errors): its message and parts
            # are set by BaseExceptionGroup.__new__, which except* reads, not by the constructor)
            group: BaseException = BaseExceptionGroup.__new__(cls, *args)
            return group
        exc = cls.__new__(cls)
        exc.args = tuple(args) if args is not None else (message,)
        built: BaseException = exc
        return built

    validation = error.get("validation")
    rebuilt = (
        (lambda: _validation_error(cls, validation, message))
        if isinstance(validation, dict) and _is_validation_error(cls)
        else None
    )
    candidates: list[BaseException] = []
    for how in (rebuilt, (lambda: cls(*args)) if args is not None else None, lambda: cls(message), bare):
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


def _typed_args(error: dict[str, Any]) -> list[Any] | None:
    """The exception's recorded typed ``args`` rebuilt, or None (none recorded). Raises
    :class:`~forkpoint.errors.UnrebuildableValue` for args of a class this run has not imported, as
    a result of one does: made from its message, the exception would reach the program without them,
    and the replay say ok."""
    if "typed_args" not in error:
        return None
    args = values.decode(error["typed_args"])
    return list(args) if isinstance(args, tuple | list) else None


def _unrebuildable(exc: UnrebuildableValue, error: dict[str, Any]) -> str:
    """Why the recorded exception ``error`` cannot be raised again in this run (a divergence)."""
    return f"the {visible(str(error.get('type')), one_line=True)} this call raised cannot be rebuilt: {exc}"


def _caller_cancelled(exc: BaseException) -> bool:
    """Whether the task running the tool was asked to cancel (its caller's timeout, a task group):
    not when the cancellation came out of the tool's own subtask. (Only asyncio tells; trio's
    cancellations always come from a scope around the call.)"""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None or not isinstance(exc, asyncio.CancelledError):
        return True
    task = runtime.running_task()
    return task is None or not hasattr(task, "cancelling") or task.cancelling() > 0


def _say(message: str) -> None:
    """A line for the person running the agent (stderr: stdout belongs to the program)."""
    say(f"forkpoint: {message}")


def _unrecordable(name: str, value: Any, exc: Exception) -> UnrecordedResult:
    """Say (once per call) why a result of tool ``name`` is not recorded, and how to record it;
    returns what the event keeps of it."""
    if isinstance(exc, ToolResultError) and exc.type_name:
        kind = exc.type_name
        where = f" (at result{exc.where})" if exc.where else ""
        what = f"{exc}{where}"
    else:  # (storing it raised: the value is named, then what storing it raised)
        kind = values.type_label(value)
        what = f"a {kind} (storing it raised {type(exc).__name__}: {exc})"
    short = kind.rsplit(".", 1)[-1]
    how = (
        "To record it, return a value that does not contain itself"
        if kind == "(cycle)"
        else "To record it, return a value nested less deeply"
        if kind == "(too deep)"
        else "To record it, return it as a string (or as something smaller)"
        if kind == "(int too long)"
        else f"To record it, register an encoder (with a decoder, a replay gives back {short} objects again): "
        f"forkpoint.register_encoder({short}, to_json, decode=from_json)"
    )
    _say(
        f"tool {name!r} returned {what}, which forkpoint cannot record: the call ran as usual, but it is "
        f"not in the session, and a replay stops there. {how}"
    )
    return {"type": kind, "message": scrub_text(what)}


def emission(tool: str, to: str, value: Any, name: str | None = None) -> Emitted:
    """What the body of tool ``tool`` emitting ``value`` through channel ``to`` (a custom event's
    ``name``) is recorded as, the value stored now (as the program may change it after): an entry
    of the tool call's ``emitted``. A value with no stored form is said, and recorded as such: a
    replay of the call then stops there (:meth:`_Served.emitted`)."""
    entry: Emitted = {"to": to} if name is None else {"to": to, "name": name}
    try:
        entry["value"] = values.encode(value)
    except Exception as exc:
        known = isinstance(exc, ToolResultError) and exc.type_name
        kind = str(exc.type_name) if isinstance(exc, ToolResultError) and known else values.type_label(value)
        where = f" (at value{exc.where})" if isinstance(exc, ToolResultError) and known and exc.where else ""
        why = "" if known else f" (storing it raised {type(exc).__name__}: {exc})"
        entry["unrecorded"] = {"type": kind, "message": scrub_text(f"a {kind}{where}{why}")}
        _say(
            f"tool {tool!r} emitted a {kind}{where} through the {to.replace('_', ' ')}, which forkpoint "
            f"cannot record{why}: a replay stops at this call. To record it, register an encoder: "
            f"forkpoint.register_encoder({kind.rsplit('.', 1)[-1]}, to_json, decode=from_json)"
        )
    return entry


#: What a framework integration hands the next tool call made in this context, which records itself
#: (a ``@forkpoint.tool`` function the framework runs as its tool): its ``emitted`` and ``replayed``
#: (:func:`call_tool`; :func:`handing_emitted`).
_handed: contextvars.ContextVar[tuple[list[Emitted], Callable[[ToolCallEvent], Any]] | None] = (
    contextvars.ContextVar("forkpoint_handed_emitted", default=None)
)


@contextlib.contextmanager
def handing_emitted(emitted: list[Emitted], replayed: Callable[[ToolCallEvent], Any]) -> Iterator[None]:
    """Inside, the next tool call made (a ``@forkpoint.tool`` function a framework runs as its
    tool) takes ``emitted`` and ``replayed`` as its own (:func:`call_tool`), as the framework's
    integration would have passed them; ``replayed`` is awaited when it gives an awaitable."""
    token = _handed.set((emitted, replayed))
    try:
        yield
    finally:
        _handed.reset(token)


def _take_handed(
    emitted: list[Emitted] | None, replayed: Callable[[ToolCallEvent], Any] | None
) -> tuple[list[Emitted] | None, Callable[[ToolCallEvent], Any] | None]:
    """``emitted`` and ``replayed``, or what a framework handed this call (:func:`handing_emitted`):
    taken by it, so the calls its body makes do not take them too."""
    handed = _handed.get()
    if emitted is not None or handed is None:
        return emitted, replayed
    _handed.set(None)
    return handed


#: The tool call whose body runs in this context (innermost), for :func:`exiting`.
_running: contextvars.ContextVar[_ToolCall | None] = contextvars.ContextVar("forkpoint_tool", default=None)


def in_tool_body() -> bool:
    """Whether this context runs a recorded tool's body (what it does is the tool's: its result is
    recorded, and its body does not run on replay)."""
    return _running.get() is not None


def exiting(status: int) -> None:
    """Write the tool calls running in this context, innermost first, as ended by ``os._exit(status)``:
    the process leaves without unwinding them, so no ``except`` or ``finally`` of theirs would
    (the recording process's ``os._exit`` calls this first: :mod:`forkpoint._boot`). Not those of
    the process this one was forked from (a tool's worker leaving): they go on there."""
    _end_running({"type": "_exit", "module": "os", "message": f"os._exit({status})", "exit_status": status})


def execing(path: str, args: list[str]) -> None:
    """Write the tool calls running in this context, innermost first, as ended by the exec of ``path``
    with ``args`` (``os.exec*`` in a tool's body: the recording process hands itself on to the new
    program as it replaces itself, :mod:`forkpoint.execs`, and a replay execs the same way). Should
    the exec fail, they go on, but are not written again (the log has them)."""
    argv = scrub_json([path, *args])
    _end_running(
        {"type": "_exec", "module": "os", "message": f"os.execv{tuple(argv)!r}", "exec": argv}, execed=True
    )


def _end_running(ended: ErrorRecord, *, execed: bool = False) -> None:
    """Write the tool calls running in this context and this process, innermost first, as ``ended``."""
    call = _running.get()
    while call is not None and call.pid == os.getpid():
        call.write(ended=ErrorRecord(**ended))
        call.execed = call.execed or execed
        call = call.outer


class _ToolCall:
    """Bookkeeping of one recorded tool call: started when created, written by :meth:`write`."""

    def __init__(
        self,
        name: str,
        args: dict[str, Any],
        mcp: McpCall | None = None,
        call_id: str | None = None,
        emitted: list[Emitted] | None = None,
        function: str | None = None,
        instance: ToolInstance | None = None,
    ) -> None:
        self.name, self.args, self.mcp, self.call_id, self.emitted = name, args, mcp, call_id, emitted
        self.function, self.instance = function, instance
        rt = runtime.active()
        self.sent = runtime.next_sent(rt) if rt is not None else None
        self.caller = runtime.caller()
        self.born = runtime.caller_born(rt) if rt is not None else None
        self.ts = now_iso()
        self.t0 = time.perf_counter()
        self.span_id = new_span_id()
        self.parent = runtime.current_span.get()
        #: The tool call whose body made this one, when one did, and the process making it (:func:`exiting`).
        self.outer: _ToolCall | None = None
        self.pid = os.getpid()
        #: Written as ended by an exec that then failed (:func:`execing`): not written again.
        self.execed = False

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """The tool's span is current inside (its body runs: calls it makes are its children)."""
        token = runtime.current_span.set(self.span_id)
        self.outer = _running.get()
        running = _running.set(self)
        try:
            yield
        finally:
            _running.reset(running)
            runtime.current_span.reset(token)

    def write(
        self,
        *,
        result: Any = None,
        error: BaseException | None = None,
        unrecorded: UnrecordedResult | None = None,
        rt: runtime.Runtime | None = None,
        inside: bool = False,
        ended: ErrorRecord | None = None,
    ) -> None:
        """Write the event: ``result`` (stored form), ``error`` (raised), ``ended`` (how it ended
        without raising: :func:`exiting`) or ``unrecorded``, to the active runtime (or ``rt``: the
        one ending the run; nothing when none is active)."""
        rt = rt or runtime.active()
        if rt is None or self.execed:
            return
        try:
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
                event["finished"] = runtime.next_sent(rt)
            if self.caller is not None:
                event["caller"] = self.caller
            if self.born is not None:
                event["born"] = self.born.sent
            if self.mcp is not None:
                event["mcp"] = self.mcp
            if self.call_id is not None:
                event["call_id"] = self.call_id
            if self.function is not None:
                event["function"] = self.function
            if self.instance is not None:
                event["instance"] = self.instance
            if self.emitted:
                event["emitted"] = scrub_json(list(self.emitted))
            if error is not None:
                event["error"] = _error_dict(error, self.name, below=True)
                if inside:
                    event["error"]["inside"] = True
            elif ended is not None:
                event["error"] = ended
            elif unrecorded is not None:
                event["unrecorded"] = unrecorded
            else:
                event["result"] = scrub_json(result)
        except RecursionError:  # (the scrubber's walk, on arguments or a result nested ~500 deep)
            _say(
                f"the call of tool {self.name!r} could not be recorded: its arguments or result are nested "
                "too deeply to store; it ran as usual, and a replay will stop at it"
            )
            return
        except Exception as exc:  # (the program's own code: an exception's attribute, a converter)
            _say(
                f"the call of tool {self.name!r} could not be recorded ({type(exc).__name__}: {exc}); it ran "
                "as usual, and a replay will stop at it"
            )
            return
        try:
            rt.tool_call_done(event)
        except SessionError as exc:  # the log cannot take it (closed at exit, disk full): the call goes on
            _say(f"the call of tool {self.name!r} could not be written to the session: {exc}")

    def raised(self, exc: BaseException) -> None:
        """Write the call that raised ``exc``: an exception, an exit (``sys.exit``, Ctrl-C) or the
        task's cancellation (a timeout of the program's), each of which a replay gives back as it
        came; anything else that is not an ``Exception`` is said not to be recorded. A cancellation
        that did not come from the caller (the tool's own subtask, cancelled inside it) is marked
        ``inside``: a replay raises it at once, as it does an exception."""
        kind = type(exc)
        if cancelled({"type": kind.__qualname__, "module": kind.__module__, "message": ""}):
            self.write(error=exc, inside=not _caller_cancelled(exc))
        elif isinstance(exc, Exception | SystemExit | KeyboardInterrupt):
            self.write(error=exc)
        else:
            _say(
                f"the call of tool {self.name!r} was interrupted by {kind.__module__}.{kind.__qualname__}: "
                "it is not recorded, and a replay will stop at it"
            )

    def returned(self, value: Any, encode: Callable[[Any], Any] | None) -> Any:
        """What the program gets for ``value`` (a generator is wrapped to record its items); a
        value that is not a generator is written now. Never raises for a value it cannot store."""
        if isinstance(value, types.GeneratorType):
            return _recorded_generator(self, value, _Items(self, "generator", encode))
        if isinstance(value, types.AsyncGeneratorType):
            return _recorded_async_generator(self, value, _Items(self, "async_generator", encode))
        try:
            stored = values.encode(encode(value) if encode else value, shared=True)  # (written below)
        except Exception as exc:  # an integration's encoder too: the call must go on regardless
            self.write(unrecorded=_unrecordable(self.name, value, exc))
        else:
            self.write(result=stored)
        return value


# --------------------------------------------------------------------------- generators

#: The kinds of a recorded generator's node (``{"$type", "kind", "value": [items], "ended", …}``).
_ITEM_KINDS = {"generator": "builtins:generator", "async_generator": "builtins:async_generator"}


class _Items:
    """The items of a generator a tool returned, stored as they come; written as the tool call's
    result when the generator ends. Held in the runtime's ``pending`` meanwhile, so one still open
    when the run ends is written then (``ended: "unfinished"``)."""

    def __init__(self, call: _ToolCall, kind: str, encode: Callable[[Any], Any] | None) -> None:
        self.call, self.kind, self.encode = call, kind, encode
        self.items: list[Any] = []
        self.unrecorded: UnrecordedResult | None = None
        self.rt = runtime.active()
        self.done = False
        if self.rt is not None:
            self.rt.pending.add(self)

    def _stored(self, value: Any) -> Any:
        try:
            return values.encode(self.encode(value) if self.encode else value)
        except Exception as exc:
            if self.unrecorded is None:
                self.unrecorded = _unrecordable(self.call.name, value, exc)
            return None

    def add(self, item: Any) -> None:
        if self.unrecorded is None:
            stored = self._stored(item)
            if self.unrecorded is None:
                self.items.append(stored)

    def finish(
        self, *, ended: str = "complete", returned: Any = None, error: BaseException | None = None
    ) -> None:
        """Write the call (once): its items and how the generator ended."""
        if self.done:
            return
        self.done = True
        if self.rt is not None:
            self.rt.pending.discard(self)
        items = _scrubbed_as_one(self.items)
        node: dict[str, Any] = {values.MARK: _ITEM_KINDS[self.kind], "kind": self.kind, "value": items}
        node["ended"] = ended
        if returned is not None:
            node["return"] = self._stored(returned)
        if error is not None:  # (with its frames: the program reads them as it reads a function's)
            node["raised"] = _error_dict(error, self.call.name, below=True)
        # Still open when the run ends: its runtime is finishing it (and may be inactive already).
        rt = self.rt if ended == "unfinished" else None
        if self.unrecorded is not None:
            self.call.write(unrecorded=self.unrecorded, rt=rt)
        else:
            self.call.write(result=node, rt=rt)


def _scrubbed_as_one(items: list[Any]) -> list[Any]:
    """A generator's text (or bytes) items scrubbed as the one text a reader joining them reads: a
    secret it yields a few characters at a time, as a model streams it, is in no item alone."""
    if all(isinstance(i, bytes) for i in items):
        return scrub_chunks(items)
    if not all(isinstance(i, str) for i in items):
        return items
    return [
        p.decode("utf-8", "surrogatepass")
        for p in scrub_chunks([i.encode("utf-8", "surrogatepass") for i in items])
    ]


def _recorded_generator(
    call: _ToolCall, gen: Generator[Any, Any, Any], items: _Items
) -> Generator[Any, Any, Any]:
    """``gen`` passed on to the program unchanged (sends, throws, close, return value), its items
    recorded; the tool's span is current while its body runs."""
    step: Callable[[Any], Any] = gen.send
    arg: Any = None
    try:
        while True:
            with call.running():
                item = step(arg)
            items.add(item)
            try:
                arg, step = (yield item), gen.send
            except GeneratorExit:
                gen.close()
                items.finish(ended="closed")
                raise
            except BaseException as exc:  # thrown in by the program: the tool's generator decides
                arg, step = exc, gen.throw
    except StopIteration as stop:
        items.finish(returned=stop.value)
        return stop.value
    except Exception as exc:
        items.finish(error=exc)
        raise


async def _recorded_async_generator(
    call: _ToolCall, agen: AsyncGenerator[Any, Any], items: _Items
) -> AsyncGenerator[Any, Any]:
    """:func:`_recorded_generator` for an async generator."""
    step: Callable[[Any], Awaitable[Any]] = agen.asend
    arg: Any = None
    try:
        while True:
            with call.running():
                item = await step(arg)
            items.add(item)
            try:
                arg, step = (yield item), agen.asend
            except GeneratorExit:
                await agen.aclose()
                items.finish(ended="closed")
                raise
            except BaseException as exc:
                arg, step = exc, agen.athrow
    except StopAsyncIteration:
        items.finish()
    except Exception as exc:
        items.finish(error=exc)
        raise


class _ItemsServed:
    """A recorded generator's items and end, rebuilt; :meth:`ending` is what follows the last item."""

    def __init__(
        self, rt: runtime.Serving, event: ToolCallEvent, position: int, node: dict[str, Any]
    ) -> None:
        self.rt, self.event, self.position, self.node = rt, event, position, node
        # (as a result is: an override's items are validated, or refused — see served_result)
        self.items = rt.served_result(event, node.get("value") or [])
        self.returned = rt.served_result(event, node.get("return"))

    def ending(self) -> BaseException | None:
        """The recorded exception, a divergence when the recorded program stopped reading here
        (closed the generator, or the run ended with it open), or None for a normal end."""
        if isinstance(raised := self.node.get("raised"), dict):
            try:
                exc = rebuild_exception(raised)
            except UnrebuildableValue as why:
                return self.rt.diverged(self.event, "tool_call", self.position, _unrebuildable(why, raised))
            return exc.with_traceback(recorded_traceback(raised.get("frames")))
        ended = self.node.get("ended")
        if ended in ("closed", "unfinished"):
            return self.rt.diverged(
                self.event,
                "tool_call",
                self.position,
                f"the recorded program stopped reading this generator after {len(self.items)} item(s) "
                f"(ended: {ended}); this run reads further, and the rest was never produced",
            )
        return None


def _served_generator(served: _ItemsServed) -> Generator[Any, Any, Any]:
    """The recorded items of a generator (values sent in are not compared), then its recorded end."""
    for item in served.items:  # noqa: UP028 - `yield from` would hand the program's sends to a list
        yield item
    end = served.ending()
    if end is not None:
        _raise_recorded(end)
    return served.returned


async def _served_async_generator(served: _ItemsServed) -> AsyncGenerator[Any, Any]:
    """:func:`_served_generator` for an async generator."""
    for item in served.items:
        yield item
    end = served.ending()
    if end is not None:
        _raise_recorded(end)


# --------------------------------------------------------------------------- replay


#: Event loop turns (1 ms each) an async tool call's result waits, on replay, for an earlier result
#: handed over in another thread to reach its caller.
_THREAD_GRACE_STEPS = 3


class _Served:
    """A recorded tool call being served: waits for its turn (:meth:`wait`, :meth:`await_turn`),
    then :meth:`value` releases it and gives what the program gets."""

    def __init__(self, rt: runtime.Serving, event: ToolCallEvent, position: int) -> None:
        self.rt, self.event, self.position = rt, event, position
        result = event.get("result")
        #: The recorded result is a generator's items (a node of one of ``_ITEM_KINDS``).
        self.generator: dict[str, Any] | None = (
            result
            if isinstance(result, dict)
            and result.get("kind") in _ITEM_KINDS
            and result.get(values.MARK) == _ITEM_KINDS[result["kind"]]
            else None
        )
        # Never longer than the call lasted live (and at least TURN_WAIT_S): the calls it waits for
        # came within that time then, and a run that does not ask for them went another way.
        self.timeout = max(TURN_WAIT_S, min(60.0, float(event.get("duration_ms") or 0) / 1000))

    async def until_cancelled(self) -> None:
        """Wait for the program to cancel the call, as it did live (:func:`.exchange.await_cancellation`)."""
        from .exchange import await_cancellation  # (here: a tool call alone loads no HTTP capture)

        try:
            await await_cancellation(self.rt, self.event, self.position, until="it returned")
        finally:  # (the calls that finished after it live are handed back after it is cancelled)
            self.rt.release(self.event)

    def wait(self) -> None:
        if self.generator is None:
            self.rt.wait_turn(self.event, self.timeout)

    async def await_turn(self) -> None:
        if self.generator is not None or (
            self.rt.ready(self.event) and not self.rt.released_elsewhere(self.event)
        ):
            return
        import anyio  # httpx and httpx2 depend on it: works under asyncio and trio alike

        deadline = time.monotonic() + self.timeout
        spins = 0
        while not self.rt.ready(self.event):
            if time.monotonic() >= deadline:
                self.rt.late(self.event)
                return
            spins += 1
            await anyio.sleep(0 if spins < 20 else 0.001)  # first let the other tasks ask their calls
        if self.rt.released_elsewhere(self.event):
            # A result handed over in a worker thread (asyncio.to_thread) reaches its caller through
            # the event loop, later than this task would go on: let it get there first, as it did live.
            for _ in range(_THREAD_GRACE_STEPS):
                await anyio.sleep(0.001)

    def emitted(self) -> list[Emitted]:
        """What the tool's body emitted while recorded (its ``emitted``), values rebuilt, for the
        caller to emit again before the result; a divergence when one was not recorded or cannot
        be rebuilt here."""
        out: list[Emitted] = []
        for entry in self.event.get("emitted") or ():
            if not isinstance(entry, dict) or not isinstance(entry.get("to"), str) or "value" not in entry:
                unrecorded = entry.get("unrecorded") if isinstance(entry, dict) else None
                why = (
                    f"one was not recorded ({unrecorded.get('message')})"
                    if isinstance(unrecorded, dict)
                    else f"a malformed entry {entry!r}"
                )
                raise self.rt.diverged(
                    self.event,
                    "tool_call",
                    self.position,
                    f"what this tool emitted while it ran (stream writes, custom events) cannot be "
                    f"emitted again: {why}; the recording cannot serve this call",
                    handed_nothing=True,
                )
            try:
                out.append(cast(Emitted, {**entry, "value": values.decode(entry["value"])}))
            except UnrebuildableValue as exc:
                raise self.rt.diverged(
                    self.event, "tool_call", self.position, str(exc), handed_nothing=True
                ) from None
        return out

    async def avalue(self) -> Any:
        """:meth:`value`, awaited where a live call awaits the tool's body."""
        return self.value()

    def value(self) -> Any:
        """The recorded result rebuilt (a generator of the recorded kind for items), or raises the
        recorded exception, or a divergence when it was not recorded or cannot be rebuilt here."""
        event = self.event
        self.rt.release(event)
        if "error" in event:
            status = event["error"].get("exit_status")
            if isinstance(status, int) and not isinstance(status, bool):
                os._exit(status)  # as it left live (a replaying process writes its report first)
            argv = event["error"].get("exec")
            if isinstance(argv, list) and len(argv) > 1 and all(isinstance(a, str) for a in argv):
                # (in forkpoint.replay()'s block, the process is not the recorded program's)
                if runtime.exec_hands_over_in != os.getpid():
                    raise self.rt.diverged(
                        event,
                        "tool_call",
                        self.position,
                        "this tool replaced the program through exec when it was recorded: only a replay "
                        "of the recorded command (forkpoint replay) goes on into the program it became",
                        handed_nothing=True,
                    )
                os.execv(argv[0], argv[1:])  # as it went on live (a replaying process hands itself on)
            try:
                exc = rebuild_exception(dict(event["error"]))
            except UnrebuildableValue as why:
                raise self.rt.diverged(
                    event,
                    "tool_call",
                    self.position,
                    _unrebuildable(why, dict(event["error"])),
                    handed_nothing=True,
                ) from None
            # (through frames made to look like the recorded ones: forkpoint's are taken out)
            _raise_recorded(exc.with_traceback(recorded_traceback(event["error"].get("frames"))))
        if "unrecorded" in event:
            u = event["unrecorded"]
            raise self.rt.diverged(
                event,
                "tool_call",
                self.position,
                f"the result of this call was not recorded ({u.get('message')}): the recording "
                "cannot serve it; register an encoder for that type and record again",
                handed_nothing=True,
            )
        try:
            if self.generator is not None:
                served = _ItemsServed(self.rt, event, self.position, self.generator)
                if self.generator["kind"] == "async_generator":
                    return _served_async_generator(served)
                return _served_generator(served)
            return self.rt.served_result(event)
        except UnrebuildableValue as exc:
            raise self.rt.diverged(event, "tool_call", self.position, str(exc), handed_nothing=True) from None


def _taken_id(call_id: str | None, mcp: McpCall | None) -> str | None:
    """``call_id``, else the id of the tool call a framework is running (:data:`runtime.asked_as`),
    which this call takes: the tool calls made after it in the framework's call are not the one
    the model asked for. Of MCP requests, only a ``tools/call`` takes it (an MCP tool may open a
    session for its call: ``initialize`` is not the call the model asked for)."""
    if mcp is not None and mcp["method"] != "tools/call":
        return call_id
    asked = runtime.asked_as.get()
    if asked is not None:
        runtime.asked_as.set(None)
    return call_id or asked


def _replayed(
    rt: runtime.Runtime,
    name: str,
    args: dict[str, Any],
    defaulted: frozenset[str],
    call_id: str | None,
    mcp: McpCall | None,
    function: str | None,
    instance: Instance | None,
) -> _Served | None:
    """The recorded call to serve, or None when the replayer says to run it for real."""
    serving = cast(runtime.Serving, rt)
    taken = serving.take_tool_call(
        name,
        args,
        defaulted=defaulted,
        call_id=call_id,
        mcp=mcp,
        function=function,
        instance=instance[0] if instance else None,
        kept=instance[1] if instance else None,
    )
    return None if taken is None else _Served(serving, taken[0], taken[1])


def call_tool(
    name: str,
    args: dict[str, Any],
    body: Callable[[], Any],
    encode: Callable[[Any], Any] | None = None,
    *,
    defaulted: frozenset[str] = frozenset(),
    mcp: McpCall | None = None,
    call_id: str | None = None,
    emitted: list[Emitted] | None = None,
    replayed: Callable[[ToolCallEvent], None] | None = None,
    function: str | None = None,
    instance: Instance | None = None,
) -> Any:
    """Run one tool call through forkpoint: the building block of :func:`tool` and of the framework
    integrations (:mod:`forkpoint.integrations`).

    ``args`` are the call's JSON arguments; ``defaulted`` names those the caller did not pass (their
    default was filled in), so a recording made before such a parameter existed still matches.
    No runtime active: ``body()``. Replay: the recorded result of ``name`` with ``args``, rebuilt
    (or its exception raised again), and ``body`` never runs, unless the replay runs tools live.
    Record (or live): ``body()`` runs and a ``tool_call`` event is written with its result
    (``encode(result)`` when given, stored by :func:`forkpoint.values.encode`) or its exception;
    a generator result is handed on wrapped, its items recorded as they come; ``mcp`` (the server
    and method of an MCP request) is written with the event when given, and so is ``call_id``: the
    id the model gave this call in its answer (a framework's ``tool_call_id``), by which a replay
    tells identical calls apart (:meth:`forkpoint.replay.Replayer.take_tool_call`); without it,
    the id of the framework's call this one is made in (:data:`runtime.asked_as`), if any.
    ``emitted``: what the body emits through a framework's channel besides its result
    (:func:`emission`), appended while it runs and written with the event; when a replay serves
    the call, it is filled with the recorded entries, rebuilt, and ``replayed`` is called with the
    recorded event, in the call's turn, before its result is handed back: to emit them again.
    ``function``: the ``module:qualname`` of the function a wrapper runs (:func:`function_name`),
    recorded with the call, by which a replay tells two functions of one tool name apart;
    ``instance``: the object a method was called on (:func:`instance_of`), by which it tells that
    function's objects apart.
    """
    rt = runtime.active()
    if rt is None:
        return body()
    call_id = _taken_id(call_id, mcp)
    emitted, replayed = _take_handed(emitted, replayed)
    served = (
        _replayed(rt, name, args, defaulted, call_id, mcp, function, instance)
        if rt.mode == "replay"
        else None
    )
    if served is not None:
        served.wait()
        if emitted is not None:
            emitted[:] = served.emitted()
        if replayed is not None:
            replayed(served.event)
        body = served.value
    kept = instance[1] if instance else None
    call = _ToolCall(name, args, mcp, call_id, emitted, function, kept) if served is None else None
    # A tool run live in a replay: its connections are allowed.
    live = runtime.running_live_tool.set(rt.mode == "replay") if call is not None else None
    try:
        try:
            with call.running() if call is not None else contextlib.nullcontext():
                result = body()
        except BaseException as exc:
            if call is not None:
                call.raised(exc)
            hide_own_frames(exc)  # (the program's traceback is the one it has without forkpoint)
            raise
        finally:
            if live is not None:
                runtime.running_live_tool.reset(live)
        return result if call is None else call.returned(result, encode)
    finally:  # (once recorded: the time the program's own work after it starts from)
        for ended in runtime.call_ended:
            ended(True)


async def acall_tool(
    name: str,
    args: dict[str, Any],
    body: Callable[[], Awaitable[Any]],
    encode: Callable[[Any], Any] | None = None,
    *,
    defaulted: frozenset[str] = frozenset(),
    mcp: McpCall | None = None,
    replayed: Callable[[ToolCallEvent], Awaitable[None]] | None = None,
    call_id: str | None = None,
    emitted: list[Emitted] | None = None,
    function: str | None = None,
    instance: Instance | None = None,
) -> Any:
    """:func:`call_tool` for a tool whose body is a coroutine function; ``replayed`` is awaited."""
    rt = runtime.active()
    if rt is None:
        return await body()
    call_id = _taken_id(call_id, mcp)
    emitted, handed = _take_handed(emitted, replayed)
    served = (
        _replayed(rt, name, args, defaulted, call_id, mcp, function, instance)
        if rt.mode == "replay"
        else None
    )
    if served is not None:
        await served.await_turn()
        error = served.event.get("error")
        if cancelled(error) and not (error is not None and error.get("inside")):
            await served.until_cancelled()
        if emitted is not None:
            emitted[:] = served.emitted()
        if handed is not None and inspect.isawaitable(done := handed(served.event)):
            await done
        body = served.avalue
    kept = instance[1] if instance else None
    call = _ToolCall(name, args, mcp, call_id, emitted, function, kept) if served is None else None
    live = runtime.running_live_tool.set(rt.mode == "replay") if call is not None else None
    try:
        try:
            with call.running() if call is not None else contextlib.nullcontext():
                result = await body()
        except BaseException as exc:
            if call is not None:
                call.raised(exc)
            hide_own_frames(exc)  # (the program's traceback is the one it has without forkpoint)
            raise
        finally:
            if live is not None:
                runtime.running_live_tool.reset(live)
        return result if call is None else call.returned(result, encode)
    finally:  # (once recorded: the time the program's own work after it starts from)
        for ended in runtime.call_ended:
            ended(True)


@overload
def tool(fn: F, *, name: str | None = None) -> F: ...
@overload
def tool(fn: None = None, *, name: str | None = None) -> Callable[[F], F]: ...


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None) -> Any:
    """Mark a function as a tool: recorded while recording, served from the session on replay.

    Usable bare (``@forkpoint.tool``) or with a name (``@forkpoint.tool(name="search")``; default:
    the function's ``__name__``). Works on sync and async functions, generator and async generator
    functions, and methods. The wrapper keeps the function's name, docstring and signature, and is
    of the same kind (a generator function stays one), so frameworks that inspect them still work.
    """
    if fn is None:
        return lambda f: tool(f, name=name)
    if isinstance(fn, staticmethod | classmethod):  # (written above @staticmethod: wrap what it holds)
        inner = fn.__func__
        return type(fn)(wrapped(inner, str(name or getattr(inner, "__name__", "tool"))))
    return wrapped(fn, str(name or getattr(fn, "__name__", "tool")))


#: The tools each recording has said changed their arguments (:func:`_changed_in_place`), each with
#: its function (:func:`_said_as`).
_changes_said: weakref.WeakKeyDictionary[Any, set[tuple[str, str]]] = weakref.WeakKeyDictionary()


def function_name(fn: Any) -> str:
    """The ``module:qualname`` of ``fn`` (of a bound method's function; ``""`` for None)."""
    fn = getattr(fn, "__func__", fn)
    return f"{getattr(fn, '__module__', '')}:{getattr(fn, '__qualname__', '')}" if fn is not None else ""


def _said_as(tool: str, fn: Any) -> tuple[str, str]:
    """``tool`` with its function's ``module:qualname``: two agents' tools of one name are
    different functions, each watched until its own change was said."""
    return tool, function_name(fn)


def _watched(tool: str, fn: Any = None) -> bool:
    """Whether a call of ``tool`` (function ``fn``) is to be watched for changes it makes in place:
    while recording, until one was said."""
    rt = runtime.active()
    return rt is not None and rt.mode == "record" and _said_as(tool, fn) not in _changes_said.get(rt, ())


#: Of a method's call (:func:`instance_of`): its object's fingerprint, and what a recording keeps of
#: the object (None while only one object of the function made calls).
Instance = tuple[str, ToolInstance | None]


class _Objects:
    """The objects one run called method tools on (:func:`instance_of`)."""

    def __init__(self) -> None:
        #: By id, while the object lives: its fingerprint at its first call of any of its method
        #: tools (what one's body changed, which a replay's does not, changes no other's), of one
        #: with no weak reference (known by id past its end) its fingerprint as its last call left
        #: it, how many of its calls are running, and, of each function, its ordinal among the
        #: function's objects and whether it was alone (:meth:`alone`).
        self.by_id: dict[int, list[Any]] = {}
        #: Per function, how many objects it was called on, and the first one's fingerprint (not
        #: every object's: a program may make one for each call).
        self.count: dict[str, int] = {}
        self.first: dict[str, str] = {}
        #: Per function and fingerprint, its objects (id, :attr:`by_id` entry) that may still live,
        #: the last one made living if any does (:meth:`alone`).
        self.alike: dict[tuple[str, str], list[tuple[int, list[Any]]]] = {}

    def alone(self, function: str, obj: Any, known: list[Any]) -> bool:
        """Whether no other object of ``function`` with ``obj``'s fingerprint lives as ``obj``
        (entry ``known``) makes its first call of it: alike objects alive together are known only
        by the order of their first calls, which a program may change (``web``, ``docs``); one made
        for each call, gone before the next is made, is not. An object with no weak reference
        lives on here until another is seen at its address."""
        peers = self.alike.setdefault((function, known[0]), [])
        while peers and self.by_id.get(peers[-1][0]) is not peers[-1][1]:
            peers.pop()  # (gone: each is looked at once more, when it is left last)
        alone = not peers
        peers.append((id(obj), known))
        return alone


#: Per run, the objects its method tools were called on.
_instances: weakref.WeakKeyDictionary[Any, _Objects] = weakref.WeakKeyDictionary()
_instances_lock = threading.Lock()


def instance_of(fn: Callable[..., Any], args: tuple[Any, ...], function: str) -> Instance | None:
    """Of a call of ``function`` as a method (its object in ``args[0]``), the object's fingerprint
    (:func:`_fingerprint`, taken at its first call of a method tool in this run) and, once the
    function was called on more than one object, its :class:`ToolInstance`: two objects' identical
    calls (``web.search`` and ``docs.search``) were served each other's answers when a replay asked
    in another order. None for a call not made as a method, or with no run active."""
    rt = runtime.active()
    params = getattr(getattr(fn, "__code__", None), "co_varnames", ())
    if rt is None or not args or not params or params[0] != "self":
        return None
    obj = args[0]
    with _instances_lock:
        objects = _instances.setdefault(rt, _Objects())
        known = objects.by_id.get(id(obj))
        # (while a call of it runs, the object at its address is it, whatever that call changed)
        if known is not None and known[1] is not None and not known[2] and _fingerprint(obj) != known[1]:
            known = None  # (another object at the address of one with no weak reference, gone since)
        if known is None:
            now = _fingerprint(obj)
            known = objects.by_id[id(obj)] = [now, None, 0, {}]
            # (an id is reused once its object is gone: a new object is not taken for the old one)
            try:
                weakref.finalize(obj, objects.by_id.pop, id(obj), None).atexit = False
            except TypeError:  # (no weak reference to it: told from the next one by its attributes)
                known[1] = now
        known[2] += 1
        fp, new = known[0], function not in known[3]
        if new:
            known[3][function] = (objects.count.get(function, 0), objects.alone(function, obj, known))
            objects.count[function] = known[3][function][0] + 1
            objects.first.setdefault(function, fp)
        n, alone = known[3][function]
        if objects.count[function] < 2:
            return fp, None
        mark = ToolInstance(n=n, fp=fp)
        if alone and n:  # (the first object is: its ordinal is the order objects were made in)
            mark["alone"] = True
        if n == 1 and new:  # (the first object's calls until now were kept without it)
            mark["first"] = objects.first[function]
    return fp, mark


def _instance_done(args: tuple[Any, ...]) -> None:
    """After a call of :func:`instance_of`'s: an object with no weak reference is known by its
    attributes as the call left them (one at its address with others is another object)."""
    rt = runtime.active()
    objects = _instances.get(rt) if rt is not None else None
    with _instances_lock:
        mine = objects.by_id.get(id(args[0])) if objects is not None else None
        if mine is None:
            return
        mine[2] -= 1
        if mine[1] is not None:
            mine[1] = _fingerprint(args[0])


def _own_dict(obj: Any) -> dict[str, Any] | None:
    """``obj.__dict__``, read past the program's ``__getattr__`` and ``__getattribute__`` (a proxy's
    would run its code), or None: a class's own ``__dict__`` property that fails is no failure of
    the tool's call (it raised into the program while recording)."""
    try:
        attrs = object.__getattribute__(obj, "__dict__")
    except Exception:
        return None
    return attrs if isinstance(attrs, dict) else None


def _fingerprint(obj: Any) -> str:
    """A short hash of ``obj``'s plain attributes (str, int, float, bool or None, of its ``__dict__``
    and ``__slots__``, and a tuple's items), scrubbed first: what tells two objects of one class
    apart across runs (a name, a URL), without keeping any value, a secret's least of all."""
    attrs = _own_dict(obj)
    items = list(attrs.items()) if attrs is not None else []
    if isinstance(obj, tuple):  # (a named tuple's fields are its items; read past its own __iter__)
        items += [(f"[{i}]", v) for i, v in enumerate(tuple.__getitem__(obj, slice(None)))]
    for cls in type(obj).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in [slots] if isinstance(slots, str) else slots:
            member = cls.__dict__.get(name)  # (read through its slot: no property of the program's runs)
            if isinstance(member, types.MemberDescriptorType):
                with contextlib.suppress(AttributeError):  # (a slot never set)
                    items.append((name, member.__get__(obj, cls)))
    # (a key that is no string, set in __dict__ directly, is no attribute, and its str() the program's code)
    kept = {
        str(k): v
        for k, v in items
        if isinstance(k, str) and (v is None or type(v) in (str, int, float, bool))
    }
    long = {k: v for k, v in kept.items() if type(v) is str and len(v) >= _LONG_TEXT}
    short = scrub_json({k: v for k, v in kept.items() if k not in long})
    plain = sorted(
        [(k, _any_secret(v)) for k, v in short.items()] + [_long_item(k, v) for k, v in long.items()]
    )
    try:
        shown = repr(plain)
    except ValueError:  # (an int longer than Python writes in decimal, sys.get_int_max_str_digits: in hex)
        shown = repr([(k, hex(v) if type(v) is int else v) for k, v in plain])
    return hashlib.sha256(shown.encode()).hexdigest()[:16]


#: Of long texts (:func:`_fingerprint`), the last few scrubbed, as :func:`_long_item` gives them, by
#: scrubber, attribute and text: objects made one per call share one (a prompt), scrubbed again at
#: each object's first call (~44 ms a MB).
_long_items: dict[tuple[Any, str, str], tuple[str, Any]] = {}
_LONG_TEXT = 4096
_LONG_ITEMS = 16


def _long_item(name: str, text: str) -> tuple[str, Any]:
    """The attribute ``name`` holding the long ``text``, scrubbed as :func:`_fingerprint` scrubs an
    attribute, each secret as any secret; once for each text (its callers hold :data:`_instances_lock`)."""
    memo = (current(), name, text)
    hit = _long_items.get(memo)
    if hit is None:
        ((key, value),) = scrub_json({name: text}).items()
        hit = _long_items[memo] = (key, _any_secret(value))
        if len(_long_items) > _LONG_ITEMS:
            del _long_items[next(iter(_long_items))]
    return hit


#: A secret's placeholder (:mod:`forkpoint.redact`), and a replay's stand-in for an unset API key.
_SECRET = re.compile(rf"{PLACEHOLDER_PATTERN}|{re.escape(PLACEHOLDER_KEY)}")


def _any_secret(value: Any) -> Any:
    """A scrubbed attribute with each secret in it as any secret: a replay with another key, of
    another kind or none (:data:`PLACEHOLDER_KEY`), is given objects alike to the recorded ones."""
    return _SECRET.sub("[REDACTED]", value) if isinstance(value, str) else value


def _object_state(fn: Callable[..., Any], args: tuple[Any, ...]) -> dict[str, Any] | None:
    """Of a method's object (``self``: a tool that is a method), :func:`_attributes`; None for a
    function that is not called as a method."""
    params = getattr(getattr(fn, "__code__", None), "co_varnames", ())
    if not args or not params or params[0] != "self":
        return None
    return _attributes(args[0])


#: The lengths :func:`_attributes` reads: Python's own containers', which only count. Another
#: object's ``__len__`` is the program's code (a lazy query's, Django's QuerySet, runs the query and
#: keeps its rows), which recording must not run.
_PLAIN_LENGTHS = frozenset(
    t.__len__ for t in (list, tuple, dict, set, frozenset, bytes, bytearray, collections.deque)
)


class ItemsBut:
    """The items of the dict ``of`` but those keyed in ``but``, to watch (:func:`objects_watched`):
    state a framework hands a tool in a dict it also writes its own keys to while tools run."""

    def __init__(self, of: dict[Any, Any], but: frozenset[str]) -> None:
        self.of, self.but = of, but


def _identity(obj: Any) -> int:
    """What tells the objects watched apart: an :class:`ItemsBut`'s is its dict's."""
    return id(obj.of) if isinstance(obj, ItemsBut) else id(obj)


def _attributes(obj: Any) -> dict[str, Any] | None:
    """Each attribute of ``obj`` (each item of a dict), keyed as it is named after the object
    (``.total``, ``['cart']``), as far as a change made in place shows cheaply — a number or a
    string itself, one of Python's containers its identity and length (:data:`_PLAIN_LENGTHS`),
    anything else its identity; None for an object with neither (a number, a string, a class)."""
    if isinstance(obj, ItemsBut):
        items = [(f"[{k!r}]", v) for k, v in list(obj.of.items()) if k not in obj.but]
    elif isinstance(obj, dict):
        items = [(f"[{k!r}]", v) for k, v in list(obj.items())]
    else:
        attrs = _own_dict(obj)
        if attrs is None:
            return None
        cls = type(obj)
        # (a cached_property is a cache the first read fills: a replay's first read fills it again;
        # a key that is no string, set in __dict__ directly, is no attribute, and its str() the program's code)
        items = [
            (f".{k}", v)
            for k, v in list(attrs.items())
            if isinstance(k, str) and not isinstance(getattr(cls, k, None), functools.cached_property)
        ]
    out: dict[str, Any] = {}
    for k, v in items:
        if v is None or type(v) in (str, int, float, bool):
            out[k] = v
        elif getattr(type(v), "__len__", None) in _PLAIN_LENGTHS:
            out[k] = (id(v), len(v))
        else:
            out[k] = id(v)
    return out


def _changed_attributes(label: str, before: dict[str, Any], after: dict[str, Any] | None) -> list[str]:
    """The attributes (items) that differ between two :func:`_attributes` of the object ``label``."""
    now = after or {}
    return [f"{label}{k}" for k in dict.fromkeys([*before, *now]) if before.get(k) != now.get(k)]


def _say_changed(tool: str, changed: list[str], beside: Sequence[str] = (), fn: Any = None) -> None:
    """Say (once per tool, function ``fn``, and recording) that ``tool`` changed ``changed`` in
    place; ``beside``: the other tools that ran at the same time on one of those objects, which may
    have made it."""
    rt = runtime.active()
    _changes_said.setdefault(rt, set()).add(_said_as(tool, fn))
    who = f"tool {tool!r}" + (
        f" (or {', '.join(map(repr, beside))}, which ran at the same time)" if beside else ""
    )
    _say(
        f"{who} changed {', '.join(changed)} in place while it ran: a replay "
        "does not run the tool's body, so the program will not see that change there and may go another "
        "way. Return what the tool changes instead, or replay the tool live (forkpoint replay --tools live)"
    )
    # Kept in the session too: a replay that diverges there says why it may have (replay/report.py).
    note = getattr(rt, "note", None)
    if callable(note):
        note(CHANGED_IN_PLACE, changed_in_place={"tool": tool, "changed": changed, "beside": list(beside)})


#: The text of the note a recording keeps of a tool that changed state in place (:func:`_say_changed`).
CHANGED_IN_PLACE = "a tool changed state in place, which a replay does not do again"


class _MethodCall:
    """One call of a tool wrapper's function, around :func:`call_tool`: its arguments bound, and
    what is looked at before and after it when it is a method (its object's state, which object)."""

    def __init__(
        self, fn: Callable[..., Any], tool: str, function: str, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> None:
        self.fn, self.tool, self.function, self.args, self.kwargs = fn, tool, function, args, kwargs
        self.bound, self.defaulted = bind_call(fn, args, kwargs, tool)
        self.state = _object_state(fn, args) if _watched(tool, fn) else None
        self.instance = instance_of(fn, args, function)

    def options(self) -> dict[str, Any]:
        """:func:`call_tool`'s keyword arguments for it."""
        return {"defaulted": self.defaulted, "function": self.function, "instance": self.instance}

    def done(self) -> None:
        """After the call (returned or raised)."""
        _changed_in_place(self.fn, self.tool, self.bound, self.args, self.kwargs, self.state)
        if self.instance is not None:
            _instance_done(self.args)


def _changed_in_place(
    fn: Callable[..., Any],
    tool: str,
    before: dict[str, Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    state: dict[str, Any] | None = None,
) -> None:
    """While recording, say (once per tool) that a tool changed its arguments in place (appended to a
    list it was given, set a key of a dict), or its object's attributes (``state``, of
    :func:`_object_state`: a method that keeps a history in ``self``): a replay does not run its
    body, so the program does not see that change there, and may go another way under "replay ok"."""
    if not _watched(tool, fn):
        return
    changed = []
    if not all(v is None or type(v) in (str, int, float, bool) for v in before.values()):
        try:  # (strings and numbers, as most tools take, the tool cannot change)
            after, _ = bind_call(fn, args, kwargs)
        except Exception:  # (an argument that cannot be read again: nothing to compare)
            after = before
        changed = [f"its argument {k!r}" for k in before if after.get(k) != before[k]]
    if state is not None:
        changed += _changed_attributes("self", state, _object_state(fn, args))
    if changed:
        _say_changed(tool, changed, fn=fn)


#: Calls being watched by :func:`objects_watched`, by the id of each object they watch.
_watching: dict[int, list[_Watch]] = {}
_watching_lock = threading.Lock()


class _Watch:
    """One call of :func:`objects_watched`: its tool, and the tools of the other calls that
    watched one of its objects while it ran."""

    def __init__(self, tool: str) -> None:
        self.tool = tool
        self.beside: set[str] = set()


@contextlib.contextmanager
def objects_watched(tool: str, objects: dict[str, Any], fn: Any = None) -> Iterator[None]:
    """Around a framework's call of ``tool``: while recording, say (once per tool) that it changed
    the attributes (a dict's items) of an object the framework handed it besides its arguments,
    each named by its label (``{"context": ctx.context}``: the Agents SDK's run context,
    pydantic-ai's ``ctx.deps``, a bound method's ``self``) — state the program reads after the
    call, which a replay, not running the body, leaves as it was. Tools running at the same time
    on one object are named beside it: which of them changed it cannot be told. ``fn``: the tool's
    callable, when the framework has one."""
    if not _watched(tool, fn):
        yield
        return
    before = {
        label: (obj, state) for label, obj in objects.items() if (state := _attributes(obj)) is not None
    }
    me = _Watch(tool)
    with _watching_lock:
        for obj, _ in before.values():
            running = _watching.setdefault(_identity(obj), [])
            for other in running:
                other.beside.add(tool)
                me.beside.add(other.tool)
            running.append(me)
    try:
        yield
    finally:
        with _watching_lock:
            for obj, _ in before.values():
                running = _watching.get(_identity(obj), [])
                if me in running:
                    running.remove(me)
                if not running:
                    _watching.pop(_identity(obj), None)
        changed = [
            c
            for label, (obj, state) in before.items()
            for c in _changed_attributes(label, state, _attributes(obj))
        ]
        if changed and _watched(tool, fn):
            _say_changed(tool, changed, sorted(me.beside - {tool}), fn)


@contextlib.contextmanager
def method_watched(fn: Any, tool: str) -> Iterator[None]:
    """Around a framework's call of a tool that is a bound method (google-genai's automatic function
    calling with ``tools=[shop.add_item]``, ``beta_tool(shop.add_item)``): while recording, say, as
    for a ``@forkpoint.tool`` method, that it changed its object's attributes (:func:`objects_watched`).
    Anything else (a function, a builtin, ``fn`` None) is left alone."""
    func, obj = getattr(fn, "__func__", None), getattr(fn, "__self__", None)
    if func is None or obj is None or not _watched(tool, fn) or _object_state(func, (obj,)) is None:
        yield
        return
    with objects_watched(tool, {"self": obj}, fn):
        yield


def wrapped(fn: Callable[..., Any], tool_name: str, on: Callable[[], bool] | None = None) -> Any:
    """The tool wrapper of ``fn`` (see :func:`tool`); with ``on``, it records only while ``on()`` is
    true (a ``--tool`` target, enabled per test by the pytest plugin: :mod:`.targets`)."""

    function = function_name(fn)

    def off() -> bool:
        return runtime.active() is None or (on is not None and not on())

    def through(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        call = _MethodCall(fn, tool_name, function, args, kwargs)
        try:
            return call_tool(tool_name, call.bound, lambda: fn(*args, **kwargs), **call.options())
        finally:
            call.done()

    wrapper: Any
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            with hidden:
                if off():
                    return await fn(*args, **kwargs)
                call = _MethodCall(fn, tool_name, function, args, kwargs)
                try:
                    return await acall_tool(
                        tool_name, call.bound, lambda: fn(*args, **kwargs), **call.options()
                    )
                finally:
                    call.done()

    elif inspect.isasyncgenfunction(fn):

        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> AsyncGenerator[Any, Any]:
            with hidden:  # (an exception midway leaves without forkpoint's frames, as a function's)
                # What `yield from` is for a generator: items out; sends, throws and close in.
                agen = fn(*args, **kwargs) if off() else through(args, kwargs)
                try:
                    item = await agen.__anext__()
                except StopAsyncIteration:
                    return
                while True:
                    try:
                        sent = yield item
                    except GeneratorExit:
                        await agen.aclose()
                        raise
                    except BaseException as exc:
                        step = agen.athrow(exc)
                    else:
                        step = agen.asend(sent)
                    try:
                        item = await step
                    except StopAsyncIteration:
                        return

    elif inspect.isgeneratorfunction(fn):

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            with hidden:  # (as for an async generator)
                return (yield from (fn(*args, **kwargs) if off() else through(args, kwargs)))

    else:

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with hidden:
                return fn(*args, **kwargs) if off() else through(args, kwargs)

    wrapper.__forkpoint_tool__ = tool_name
    runtime.tool_wrappers.add(wrapper)
    return wrapper
