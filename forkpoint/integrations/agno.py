"""agno: every tool call of an agent or team recorded and replayed under the tool's name.

Patched: ``agno.tools.function.FunctionCall._execute`` and ``_aexecute``, which run every tool
call the model asks for (functions given as ``tools=[...]``, ``@tool`` functions, toolkit
methods) inside agno's own handling: argument injection (``agent``, ``run_context``…), hooks,
the result cache, turning an exception into the error the model is sent. For one call the
``FunctionCall`` runs on a copy of its ``Function`` whose ``entrypoint`` is wrapped, so all of
that runs as usual, live and on replay, and only the function's work is served from the session.
The event's ``tool`` is the function's ``name``, ``args`` the model's arguments, ``call_id`` the
model's id for the call (``FunctionCall.call_id``: a replay tells identical calls of concurrent
runs apart by it), ``result`` the return value, typed where forkpoint rebuilds it (:func:`.base.stored_form`: a dataclass comes
back a dataclass, so agno sends the model the same ``str()`` of it); an async-generator tool's items are recorded and yielded again.
agno's ``@tool`` wrapper (it logs a tool's exception) is inside what is recorded, under pydantic's
``validate_call``: an exception a replay serves from past it goes through that wrapper's own code again.
A toolkit's method that changes its object (``self.calls += 1``) is said while recording, as a
replay does not run it, and so is one that changes the run's context agno hands it
(``run_context.session_state``). agno's cache of tool results (``@tool(cache_results=True)``, on disk) is read
and written through that copy (``Function._get_cached_result``, ``_save_to_cache``, patched): a
recording records an answer it gave as the tool's call, and a replay neither reads it (every call is
served from the session, whether the cache or the tool answered live, whatever the cache holds now)
nor writes what it served there (an override's answer would be a later live run's). A sync generator tool is not recorded (forkpoint says so when it is called, and it runs live on
replay). MCP tools (``MCPTools``) are recorded as MCP requests by :mod:`.mcp`.

agno's cache of model answers (a model's ``cache_response=True``) answers a whole response, its tool
calls included, without a call: the answers it gives while forkpoint records or replays are counted
and said, as DSPy's are (:func:`patch_model_cache`), and a replay writes none to it.

The SQLite file a ``SqliteDb`` keeps sessions in (the history an agent adds to its context) is read
as agno opens it, which a divergence names when it differs from the recorded run's
(:func:`patch_sqlite_db`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import os
import types
from collections.abc import Callable
from types import ModuleType
from typing import Any, cast

from .. import runtime
from ..capture.tracebacks import hidden
from ..text import say
from .base import (
    Integration,
    json_args,
    recorded_function,
    records,
    replace,
    run_tool_sync,
    stored_state,
    tool_call_id,
)

_warned: set[str] = set()
#: By the id of the ``Function`` copy a call runs on (:func:`_shim`), while it runs: what records
#: an answer agno's result cache gave that call as the call of its tool.
_cache_answers: dict[int, Callable[[Any], Any]] = {}


def _shim(call: Any) -> Any:
    """A copy of ``call.function`` whose entrypoint records, or None to run the call as it is."""
    fn: Any = getattr(call, "function", None)
    entry: Any = getattr(fn, "entrypoint", None)
    if not records(entry):
        return None
    name = str(fn.name)
    if inspect.isgeneratorfunction(entry):
        if name not in _warned:
            _warned.add(name)
            say(
                f"forkpoint: agno tool {name!r} is a generator function: its calls are not recorded, "
                "and run for real on replay"
            )
        return None
    shim = fn.model_copy()
    args, call_id = json_args(call.arguments or {}), tool_call_id(call, "call_id")
    # (the run's context agno hands a tool, whose session_state its docs have tools change)
    context = getattr(fn, "_run_context", None)
    watch = {"run_context": context, "run_context.session_state": getattr(context, "session_state", None)}
    recorded = recorded_function(name, args, entry, call_id=call_id, watch=watch)
    shim.entrypoint = _handled_again(entry, recorded)
    _cache_answers[id(shim)] = lambda hit: run_tool_sync(name, args, lambda: hit, call_id=call_id)
    return shim


def _served(function: Any) -> bool:
    """Whether ``function`` is a call's copy (:func:`_shim`) that a replay serves from the session."""
    rt = runtime.active()
    return (
        id(function) in _cache_answers
        and rt is not None
        and rt.mode == "replay"
        and not cast(runtime.Serving, rt).runs_live("tool_call")
    )


def _cache_read(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _get_cached_result(self: Any, cache_file: str) -> Any:
        with hidden:
            if _served(self):
                return None  # (the entrypoint answers from the session, as the cache or the tool did live)
            hit = original(self, cache_file)
            answer = _cache_answers.get(id(self))
            if hit is None or answer is None or runtime.active() is None:
                return hit
            return answer(hit)

    return _get_cached_result


def _cache_write(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _save_to_cache(self: Any, cache_file: str, result: Any) -> Any:
        with hidden:
            if _served(self):
                return None
            return original(self, cache_file, result)

    return _save_to_cache


#: agno's ``@tool`` wrapper, which logs a tool's exception ("Error in tool 'x': ...") and raises it on.
_TOOL_WRAPPER = os.path.join("agno", "tools", "decorator.py")
#: Where agno binds a toolkit's ``@tool`` method to its object (``bound``, calling the method's entry).
_TOOLKIT = os.path.join("agno", "tools", "toolkit.py")
_CLOSED = (_ for _ in ())
_CLOSED.close()


def _failed(exc: BaseException) -> asyncio.Future[Any]:
    """A future that failed with ``exc``: awaited, it raises ``exc`` as the tool's coroutine did,
    at the wrapper's ``await``, through no frame of forkpoint's."""
    future = asyncio.get_running_loop().create_future()
    future.set_exception(exc)
    return future


def _served_past(code: types.CodeType, exc: BaseException, tool: str | None) -> types.TracebackType | None:
    """Where ``exc`` was raised below agno's wrapper (``code``) by the tool's function (``tool``, its
    code's name, when it has one), when a replay raised it from the recording through a frame made
    to stand for that wrapper, whose code did not run (live it ran the wrapper, which logged then);
    None otherwise: pydantic refused the arguments before it, or the wrapper's own handler raised
    it (a repr of the tool's exception that failed), which logged nothing live."""
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame.f_code
        if frame is code:
            return None
        if frame.co_name == code.co_name and frame.co_filename.endswith(_TOOL_WRAPPER):
            # (the outermost: a tool that calls another @tool's entry has that one's wrapper below)
            below = tb.tb_next
            if below is None or tool not in (None, below.tb_frame.f_code.co_name):
                return None
            return below
        tb = tb.tb_next
    return None


def _handled_again(entry: Any, recorded: Callable[..., Any]) -> Callable[..., Any]:
    """``recorded`` (``entry``, recording its call) running agno's ``@tool`` wrapper again over the
    exception a replay serves when ``entry`` is pydantic's ``validate_call`` over one (or a toolkit's
    method bound to its object, calling that): the wrapper is inside what is recorded, so it did not
    run on replay, and the line it logged live was missing. Its own code runs, over a function that
    raises the served exception where the tool raised it."""
    if inspect.isfunction(entry) and entry.__code__.co_filename.endswith(_TOOLKIT):
        # (a toolkit's @tool method: the entry its object is bound to is the one over the wrapper)
        entry = next(
            (c.cell_contents for c in entry.__closure__ or () if inspect.isfunction(c.cell_contents)), None
        )
    wrapper = getattr(entry, "__wrapped__", None)
    func = getattr(wrapper, "__wrapped__", None)
    if (
        not inspect.isfunction(wrapper)
        or not wrapper.__code__.co_filename.endswith(_TOOL_WRAPPER)
        or not any(c.cell_contents is func for c in wrapper.__closure__ or ())
        or inspect.isasyncgenfunction(func)  # (its wrapper only makes the generator: it never logs)
    ):
        return recorded
    code, tool = wrapper.__code__, getattr(getattr(func, "__code__", None), "co_name", None)

    def again(exc: Exception, raiser: Callable[[Exception], Any]) -> Any:
        """The wrapper's code called over ``raiser(exc)``, which raises ``exc`` as the tool did
        (what it returns: a coroutine for an async tool), or None when the replay did not serve
        ``exc`` from past the wrapper."""
        below = _served_past(code, exc, tool)
        if below is None:
            return None
        exc.__traceback__ = below  # (what the wrapper sees, and logs with its traceback, as live)
        named = functools.partial(raiser, exc)
        named.__name__ = wrapper.__name__  # type: ignore[attr-defined]  # (its function's, which it names)
        cells = tuple(
            types.CellType(named) if c.cell_contents is func else c for c in wrapper.__closure__ or ()
        )
        return types.FunctionType(code, wrapper.__globals__, wrapper.__name__, None, cells)()

    if inspect.iscoroutinefunction(recorded):

        @functools.wraps(recorded)
        async def awaited(*a: Any, **kw: Any) -> Any:
            with hidden:
                try:
                    return await recorded(*a, **kw)
                except Exception as exc:
                    tb = exc.__traceback__
                    with contextlib.suppress(type(exc)):
                        coro = again(exc, _failed)
                        if coro is not None:
                            await coro
                    exc.__traceback__ = tb
                    raise

        return awaited

    @functools.wraps(recorded)
    def called(*a: Any, **kw: Any) -> Any:
        with hidden:
            try:
                return recorded(*a, **kw)
            except Exception as exc:
                tb = exc.__traceback__
                with contextlib.suppress(type(exc)):
                    # (a closed generator's throw raises exc from C: no frame of forkpoint's is logged)
                    again(exc, _CLOSED.throw)
                exc.__traceback__ = tb
                raise

    return called


def _swapped(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _execute(self: Any) -> Any:
        with hidden:
            shim = _shim(self)
            if shim is None:
                return original(self)
            real, self.function = self.function, shim
            try:
                return original(self)
            finally:
                self.function = real
                _cache_answers.pop(id(shim), None)

    return _execute


def _aswapped(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def _aexecute(self: Any) -> Any:
        with hidden:
            shim = _shim(self)
            if shim is None:
                return await original(self)
            real, self.function = self.function, shim
            try:
                return await original(self)
            finally:
                self.function = real
                _cache_answers.pop(id(shim), None)

    return _aexecute


def patch(module: ModuleType) -> None:
    """Wrap ``FunctionCall._execute`` and ``_aexecute`` of ``agno.tools.function``, and the reads
    and writes of ``Function``'s result cache."""
    cls = module.FunctionCall
    if replace(cls, "_execute", _swapped(cls._execute)):
        replace(cls, "_aexecute", _aswapped(cls._aexecute))
        replace(module.Function, "_get_cached_result", _cache_read(module.Function._get_cached_result))
        replace(module.Function, "_save_to_cache", _cache_write(module.Function._save_to_cache))


#: The framework's name in what a recording and a replay say about its cache of model answers.
NAME = "agno"


def patch_model_cache(module: ModuleType) -> None:
    """Count every answer agno's cache of model answers (``cache_response=True``, on disk) gives
    while a runtime is active: a whole response, its tool calls included, made of no call
    (:func:`forkpoint.runtime.answered_from_cache`). And write nothing to that cache during a replay:
    the answers it is served come from the session (or an override), and every later run, live ones
    too, would be given them instead of asking the model."""
    cls = module.Model
    read = cls._get_cached_model_response

    @functools.wraps(read)
    def _get_cached_model_response(self: Any, cache_key: str) -> Any:
        found = read(self, cache_key)
        if found:  # (what agno takes for a hit)
            runtime.answered_from_cache(NAME)
        return found

    def kept(save: Callable[..., None]) -> Callable[..., None]:
        @functools.wraps(save)
        def not_on_replay(self: Any, *args: Any, **kwargs: Any) -> None:
            rt = runtime.active()
            if rt is None or rt.mode != "replay":
                save(self, *args, **kwargs)

        return not_on_replay

    if replace(cls, "_get_cached_model_response", _get_cached_model_response):
        for name in ("_save_model_response_to_cache", "_save_streaming_responses_to_cache"):
            replace(cls, name, kept(getattr(cls, name)))


def patch_sqlite_db(module: ModuleType) -> None:
    """Wrap ``SqliteDb.__init__`` of ``agno.db.sqlite.sqlite``: the file its engine opens (from
    ``db_file``, ``db_url`` or ``db_engine``), which holds the sessions an agent starts from, is read
    before agno first connects to it (:func:`.base.stored_state`)."""
    cls = getattr(module, "SqliteDb", None)
    original = getattr(cls, "__init__", None)
    if cls is None or original is None:  # (another version: a divergence names less, nothing worse)
        return

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        with hidden:
            path = getattr(getattr(getattr(self, "db_engine", None), "url", None), "database", None)
            if isinstance(path, str) and path not in ("", ":memory:"):
                stored_state("agno's SqliteDb", path)

    replace(cls, "__init__", __init__)


INTEGRATION = Integration(
    "agno",
    {
        "agno.tools.function": patch,
        "agno.models.base": patch_model_cache,
        "agno.db.sqlite.sqlite": patch_sqlite_db,
    },
)
