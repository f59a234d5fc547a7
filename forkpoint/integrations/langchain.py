"""LangChain tools, and so LangGraph agents (``ToolNode``, ``create_react_agent``): every tool call
recorded and replayed, unmodified.

Patched: ``langchain_core.tools.base.BaseTool.run`` and ``arun``, the path every tool invocation
takes (``tool.invoke``, ``ToolNode``, agents). They are not recorded themselves: on its first call
a tool's class gets its *body* wrapped, the ``_run`` / ``_arun`` it defines or inherits
(``StructuredTool``'s for ``@tool`` functions, a ``BaseTool`` subclass's own). So argument
parsing, callbacks (tracing), error handling (``handle_tool_error``) and building the
``ToolMessage`` run as usual, live and on replay; only the body is served from the session. A body
called from inside another (``_arun`` running ``_run`` in a thread) is one call, recorded once.

The event's ``tool`` is the tool's ``name``; ``args`` the arguments the body got, in pydantic's JSON
form, without the run manager, the ``RunnableConfig`` and injected arguments (``InjectedState``,
``InjectedToolCallId``, ``ToolRuntime``: supplied by the graph, not chosen by the model); a
positional string input is ``$args``. ``call_id`` is the id the model gave the call
(``tool_call_id``, which a ``ToolNode`` passes to ``run``): a replay tells identical calls of
concurrent runs apart by it. ``result`` is what the model is sent, in a form LangChain
turns into the same ``ToolMessage`` again: JSON data as is; a message
(``ToolMessage`` and the like) as ``{"$langchain_message": messages_to_dict form}``; content and
artifact (``response_format="content_and_artifact"``) as ``{"$content_and_artifact": [c, a]}``
(the artifact, which the model never sees, typed where it has typed parts, else in its JSON form);
a value with typed parts (a date, a tuple, a ``Decimal``, a set) in forkpoint's typed form
(:mod:`forkpoint.values`), so ``invoke`` returns the same value on replay;
a LangGraph ``Command`` (a handoff, a state update; its messages, ``Send`` and tuples inside) as
``{"$langgraph_command": {graph, update, resume, goto}}``, rebuilt on replay; anything else as the
text LangChain would send (its ``json.dumps``, else ``str``). A tool whose ``func`` is already a
``@forkpoint.tool`` records itself (with the ``call_id``: :func:`.base.asked_as`), and so does a tool of langchain-mcp-adapters (its MCP request,
by :mod:`.mcp`).

What the body emits besides its result while it runs is recorded with the call, in order, as its
``emitted`` (docs/format.md): each chunk it writes to LangGraph's stream writer (the one
``get_stream_writer()`` finds in the run's config, and a ``ToolRuntime``'s ``stream_writer``,
``{"to": "stream_writer", "value": …}``), and each custom event it dispatches
(``dispatch_custom_event`` / ``adispatch_custom_event``, through the callback managers' ``on_custom_event``,
also patched: ``{"to": "custom_event", "name": …, "value": …}``), values stored as results are. When a
replay serves the call, they are written to the run's current writer and dispatched again, in the
same order, before the result (or the recorded exception) reaches LangChain: a ``stream_mode="custom"``
consumer and ``astream_events`` see them as they did live. A what-if that overrides the call's result
replaces the result only: what the body emitted before returning is emitted again as recorded.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import json
import sys
import weakref
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any, cast

from .. import runtime
from ..capture.tools import emission, handing_emitted
from ..capture.tracebacks import hidden
from ..errors import ToolResultError
from ..events import Emitted
from ..text import say
from .base import (
    Integration,
    asked_as,
    calls_mcp,
    is_forkpoint_tool,
    is_json,
    jsonable,
    replace,
    run_tool,
    run_tool_sync,
    stored_form,
    tool_call_id,
    wrap_where_defined,
)

#: Set while a wrapped tool body runs: a body it calls (``_arun`` → ``_run``) is not a second call.
_inside: contextvars.ContextVar[bool] = contextvars.ContextVar("forkpoint_langchain_tool", default=False)
#: Set while a recorded tool body runs live: the tool's name, the list of what it emits, and the
#: id of the tool's own run (its callbacks'), when it has one.
_emitting: contextvars.ContextVar[tuple[str, list[Emitted], Any] | None] = contextvars.ContextVar(
    "forkpoint_langchain_emitting", default=None
)
_SKIPPED_ARGS = frozenset({"run_manager", "callbacks", "config"})
_MESSAGE = "$langchain_message"
_PAIR = "$content_and_artifact"
_TUPLE = "$tuple"
_COMMAND = "$langgraph_command"
_SEND = "$langgraph_send"


def patch(module: ModuleType) -> None:
    """Wrap ``BaseTool.run`` / ``arun`` of ``langchain_core.tools.base`` (see the module docstring)."""
    base = module.BaseTool
    run, arun = base.run, base.arun

    @functools.wraps(run)
    def patched_run(self: Any, *args: Any, **kwargs: Any) -> Any:
        with hidden:
            if runtime.active() is not None:
                _wrap_bodies(type(self))
            with asked_as(tool_call_id(kwargs)):  # (its body runs in a copy of this context)
                return run(self, *args, **kwargs)

    @functools.wraps(arun)
    async def patched_arun(self: Any, *args: Any, **kwargs: Any) -> Any:
        with hidden:
            if runtime.active() is not None:
                _wrap_bodies(type(self))
            with asked_as(tool_call_id(kwargs)):  # (its body runs in a copy of this context)
                return await arun(self, *args, **kwargs)

    if replace(base, "run", patched_run):
        replace(base, "arun", patched_arun)


def patch_custom_events(module: ModuleType) -> None:
    """Wrap ``CallbackManager.on_custom_event`` and ``AsyncCallbackManager``'s of
    ``langchain_core.callbacks.manager``, through which ``(a)dispatch_custom_event`` reaches the
    run's handlers: an event a recorded tool body dispatches is noted with its call."""
    sync_cls, async_cls = module.CallbackManager, module.AsyncCallbackManager
    on_event, on_aevent = sync_cls.on_custom_event, async_cls.on_custom_event

    @functools.wraps(on_event)
    def on_custom_event(self: Any, name: str, data: Any, *args: Any, **kwargs: Any) -> Any:
        _note_event(self, name, data)
        return on_event(self, name, data, *args, **kwargs)

    @functools.wraps(on_aevent)
    async def on_acustom_event(self: Any, name: str, data: Any, *args: Any, **kwargs: Any) -> Any:
        _note_event(self, name, data)
        return await on_aevent(self, name, data, *args, **kwargs)

    if replace(sync_cls, "on_custom_event", on_custom_event):
        replace(async_cls, "on_custom_event", on_acustom_event)


def _note_event(manager: Any, name: str, data: Any) -> None:
    """Note custom event ``name`` that callback ``manager`` dispatches, when a recorded body runs."""
    emitting = _emitting.get()
    if emitting is not None:
        tool, emitted, own = emitting
        with hidden:
            entry = emission(tool, "custom_event", data, name=str(name))
            if getattr(manager, "parent_run_id", None) != own:  # (dispatched by a run inside the tool's)
                entry["inner"] = True
            emitted.append(entry)


def _wrap_bodies(cls: type) -> None:
    """Wrap ``_run`` and ``_arun`` where ``cls`` gets them from (once per defining class)."""
    wrap_where_defined(cls, "_run", _sync_body)
    wrap_where_defined(cls, "_arun", _async_body)


def _records(tool: Any) -> bool:
    fn = getattr(tool, "func", None) or getattr(tool, "coroutine", None)
    if is_forkpoint_tool(fn):  # (it records itself, under its own name: the model asks for the tool's)
        runtime.alias_tool(str(tool.name), str(getattr(fn, "__forkpoint_tool__", "")))
        return False
    return runtime.active() is not None and not _inside.get() and not calls_mcp(fn)


def _records_itself(tool: Any) -> bool:
    """True when a runtime is active and ``tool``'s function is a ``@forkpoint.tool``: its own tool
    call records it, and takes what the body emits from this integration (:func:`handing_emitted`)."""
    fn = getattr(tool, "func", None) or getattr(tool, "coroutine", None)
    return runtime.active() is not None and is_forkpoint_tool(fn)


@contextlib.contextmanager
def _inside_tool() -> Iterator[None]:
    token = _inside.set(True)
    try:
        yield
    finally:
        _inside.reset(token)


def _sync_body(body: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(body)
    def _run(self: Any, *args: Any, **kwargs: Any) -> Any:
        with hidden:
            if not _records(self):
                if not _records_itself(self):
                    return body(self, *args, **kwargs)
                emitted: list[Emitted] = []  # (its own tool call takes these)
                with (
                    handing_emitted(emitted, lambda _: _emit_again(kwargs, emitted)),
                    _noting(str(self.name), kwargs, emitted) as noted,
                ):
                    return body(self, *args, **noted)
            ran: list[bool] = []  # appended to when the body runs: its output is handed on as it is
            emitted = []

            def live() -> Any:
                ran.append(True)
                with _noting(str(self.name), kwargs, emitted) as noted:
                    return body(self, *args, **noted)

            name, arguments = str(self.name), _arguments(self, args, kwargs)
            with _inside_tool():  # (served: what the body emitted live is emitted again first)
                out = run_tool_sync(
                    name,
                    arguments,
                    live,
                    lambda o: encode_output(self, o),
                    emitted=emitted,
                    replayed=lambda _: _emit_again(kwargs, emitted),
                )
            return out if ran else decode_output(out)

    return _run


def _async_body(body: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(body)
    async def _arun(self: Any, *args: Any, **kwargs: Any) -> Any:
        with hidden:
            if not _records(self):
                if not _records_itself(self):
                    return await body(self, *args, **kwargs)
                emitted: list[Emitted] = []
                with (
                    handing_emitted(emitted, lambda _: _aemit_again(kwargs, emitted)),
                    _noting(str(self.name), kwargs, emitted) as noted,
                ):
                    return await body(self, *args, **noted)
            ran: list[bool] = []
            emitted = []

            async def live() -> Any:
                ran.append(True)
                with _noting(str(self.name), kwargs, emitted) as noted:
                    return await body(self, *args, **noted)

            name, arguments = str(self.name), _arguments(self, args, kwargs)
            with _inside_tool():
                out = await run_tool(
                    name,
                    arguments,
                    live,
                    lambda o: encode_output(self, o),
                    emitted=emitted,
                    replayed=lambda _: _aemit_again(kwargs, emitted),
                )
            return out if ran else decode_output(out)

    return _arun


@contextlib.contextmanager
def _noting(tool: str, kwargs: dict[str, Any], emitted: list[Emitted]) -> Iterator[dict[str, Any]]:
    """While a recorded body runs live: the custom events it dispatches and the chunks it writes to
    LangGraph's stream writer are noted in ``emitted``, in order. The writer is the run's: the one
    in the config ``get_stream_writer()`` reads (the context's, and a ``config`` argument's) and a
    ``ToolRuntime`` argument's, each handed to the body wrapped; gives the body's arguments so."""
    from langchain_core.runnables.config import var_child_runnable_config

    config = var_child_runnable_config.get()
    own = _namespace(config)

    def noted(writer: Callable[[Any], None]) -> Callable[[Any], None]:
        def write(chunk: Any) -> None:
            with hidden:
                entry = emission(tool, "stream_writer", chunk)
                # (a subgraph the body ran writes through the same writer, which reads its namespace)
                now = _namespace(var_child_runnable_config.get())
                if now != own and now.startswith(own):
                    entry["within"] = now[len(own) :]
                emitted.append(entry)
            writer(chunk)

        return write

    context = var_child_runnable_config.set(_config_noted(config, noted)) if config else None
    # (the tool's run: the parent of its body's callbacks, whether or not its _run takes a run_manager)
    callbacks = config.get("callbacks") if isinstance(config, dict) else None
    run = getattr(callbacks, "parent_run_id", None) or getattr(kwargs.get("run_manager"), "run_id", None)
    token = _emitting.set((tool, emitted, run))
    try:
        yield {
            k: _config_noted(v, noted) if k == "config" else _tool_runtime_noted(v, noted)
            for k, v in kwargs.items()
        }
    finally:
        _emitting.reset(token)
        if context is not None:
            var_child_runnable_config.reset(context)


def _graph_runtime(config: Any) -> Any:
    """The LangGraph ``Runtime`` a run's ``config`` carries (its stream writer), or None."""
    configurable = config.get("configurable") if isinstance(config, dict) else None
    found = configurable.get(_RUNTIME_KEY) if isinstance(configurable, dict) else None
    return found if callable(getattr(found, "stream_writer", None)) else None


#: Where LangGraph keeps a run's ``Runtime`` and its checkpoint namespace in its config
#: (``langgraph._internal._constants``); the namespace's parts are joined by ``|``.
_RUNTIME_KEY, _NAMESPACE_KEY = "__pregel_runtime", "checkpoint_ns"


def _namespace(config: Any) -> str:
    """The LangGraph checkpoint namespace of the run ``config`` is for, which its stream writer
    sends a chunk under (a subgraph's chunks with the subgraph's), or ``""``."""
    configurable = config.get("configurable") if isinstance(config, dict) else None
    found = configurable.get(_NAMESPACE_KEY) if isinstance(configurable, dict) else None
    return found if isinstance(found, str) else ""


def _config_noted(config: Any, noted: Callable[[Callable[[Any], None]], Callable[[Any], None]]) -> Any:
    graph = _graph_runtime(config)
    if graph is None or not callable(getattr(graph, "override", None)):
        return config
    configurable = {
        **config["configurable"],
        _RUNTIME_KEY: graph.override(stream_writer=noted(graph.stream_writer)),
    }
    return {**config, "configurable": configurable}


def _is_tool_runtime(value: Any) -> bool:
    """True for a LangGraph ``ToolRuntime`` (a tool's injected argument; never imported for it)."""
    cls = getattr(sys.modules.get("langgraph.prebuilt.tool_node"), "ToolRuntime", None)
    return cls is not None and isinstance(value, cls)


def _tool_runtime_noted(value: Any, noted: Callable[[Callable[[Any], None]], Callable[[Any], None]]) -> Any:
    if not _is_tool_runtime(value):
        return value
    return dataclasses.replace(value, stream_writer=noted(value.stream_writer))


def _writer(kwargs: dict[str, Any]) -> Callable[[Any], None] | None:
    """The stream writer the body would write to now: a ``ToolRuntime`` argument's, else the run's."""
    from langchain_core.runnables.config import var_child_runnable_config

    for value in kwargs.values():
        if _is_tool_runtime(value):
            return cast(Callable[[Any], None], value.stream_writer)
    graph = _graph_runtime(var_child_runnable_config.get())
    return None if graph is None else cast(Callable[[Any], None], graph.stream_writer)


def _emit_again(kwargs: dict[str, Any], emitted: list[Emitted]) -> None:
    """Emit what a served call's body emitted live (:meth:`forkpoint.capture.tools._Served.emitted`)."""
    from langchain_core.callbacks.manager import dispatch_custom_event

    for entry in list(emitted):  # (a copy: a writer the body was handed notes into ``emitted``)
        if entry["to"] == "custom_event":
            dispatch_custom_event(entry.get("name", ""), entry["value"])
        else:
            _write_again(kwargs, entry)


async def _aemit_again(kwargs: dict[str, Any], emitted: list[Emitted]) -> None:
    """:func:`_emit_again` in an async body: its custom events dispatched to async handlers too."""
    from langchain_core.callbacks.manager import adispatch_custom_event

    for entry in list(emitted):
        if entry["to"] == "custom_event":
            await adispatch_custom_event(entry.get("name", ""), entry["value"])
        else:
            _write_again(kwargs, entry)


def _write_again(kwargs: dict[str, Any], entry: Emitted) -> None:
    if entry["to"] != "stream_writer":
        raise ValueError(
            f"forkpoint: the recording has this tool emit through {entry['to']!r}, which is no channel of LangChain's"
        )
    from langchain_core.runnables.config import var_child_runnable_config

    writer = _writer(kwargs)
    if writer is None:  # (never dropped unsaid: the tool is called outside a graph now)
        raise RuntimeError(
            "forkpoint: this tool wrote to LangGraph's stream writer when it was recorded, and the "
            "replay has no stream writer to write that again to (the tool is not run by a graph now)"
        )
    config = var_child_runnable_config.get()
    within = entry.get("within")
    if not isinstance(within, str) or not isinstance(config, dict):
        writer(entry["value"])
        return
    # Written by a subgraph the body ran: under the subgraph's namespace below this tool's, as live.
    configurable = {**(config.get("configurable") or {}), _NAMESPACE_KEY: _namespace(config) + within}
    token = var_child_runnable_config.set(cast(Any, {**config, "configurable": configurable}))
    try:
        writer(entry["value"])
    finally:
        var_child_runnable_config.reset(token)


def _arguments(tool: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The model-chosen arguments of one body call, as JSON (see the module docstring)."""
    try:
        injected = set(tool._injected_args_keys)
    except Exception:  # older langchain-core: no injected arguments to leave out
        injected = set()
    out = {k: v for k, v in kwargs.items() if k not in _SKIPPED_ARGS and k not in injected}
    if args:
        out["$args"] = list(args)
    return dict(jsonable(out))


def encode_output(tool: Any, output: Any) -> Any:
    """The JSON form of a tool body's return value from which LangChain builds the same model input
    (and LangGraph the same state update), and a caller of ``invoke`` gets the same value: a value
    with typed parts (a date, a tuple, a ``Decimal``), an artifact too, is handed on as forkpoint
    stores it typed (:func:`.base.stored_form`), rebuilt on replay. Raises
    :class:`~forkpoint.ToolResultError` for an output object with no such form."""
    if getattr(tool, "response_format", None) == "content_and_artifact" and isinstance(output, tuple):
        if len(output) == 2:
            return {_PAIR: [encode_output(None, output[0]), stored_form(output[1])]}
    if is_json(output):
        return output
    try:
        return _pack(output)  # messages, LangGraph commands, and containers of them
    except TypeError:
        pass
    try:
        return stored_form(output)
    except Exception as exc:  # (no stored form: said below, recorded as its text)
        unstorable = exc
    from langchain_core.tools.base import ToolOutputMixin  # type: ignore[attr-defined]

    if isinstance(output, ToolOutputMixin):
        raise ToolResultError(
            f"tool {getattr(tool, 'name', '?')!r} returned a {type(output).__module__}.{type(output).__qualname__}, "
            "which forkpoint cannot store as JSON and rebuild on replay; return JSON data or a message, "
            "or register an encoder for it: forkpoint.register_encoder(SomeType, to_json)"
        )
    try:  # what LangChain sends the model for any other value (tools/base.py: _stringify)
        text = json.dumps(output, ensure_ascii=False)
    except Exception:
        text = str(output)
    _said_as_text(str(getattr(tool, "name", "?")), output, unstorable)
    return text


#: By recording, the tools whose result was recorded as its text (said once each).
_text_said: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def _said_as_text(name: str, output: Any, why: Exception) -> None:
    """Say (once per tool and recording) that the result of tool ``name`` is recorded as the text
    LangChain makes of it for the model: exact for the model and for a ``ToolNode`` (which hands on
    that text), not for a caller of ``invoke`` that reads the value itself. ``why``: what storing
    it raised, whose part with no stored form (a ``complex`` in a dict) is named, not the dict."""
    rt = runtime.active()
    if rt is None or name in _text_said.setdefault(rt, set()):
        return
    _text_said[rt].add(name)
    kind = f"{type(output).__module__}.{type(output).__qualname__}"
    known = why if isinstance(why, ToolResultError) and why.type_name else None
    part = known.type_name if known is not None else kind
    what = f"a {kind} holding {known} (at result{known.where})" if known and known.where else f"a {kind}"
    encoder = f"forkpoint.register_encoder({part.rsplit('.', 1)[-1]}, encode, decode)"
    # (a cycle or a value nested too deep has a "(…)" name: no encoder helps)
    how = "" if part.startswith("(") else f" ({encoder} stores it and makes it again)"
    say(
        f"forkpoint: tool {name!r} returned {what}, which forkpoint cannot store as itself: recorded as "
        "its text, what LangChain sends the model; on replay a caller of the tool's invoke() gets that "
        f"text, not a {type(output).__qualname__}{how}"
    )


def _pack(value: Any) -> Any:
    """JSON with markers for what JSON cannot hold: messages (LangChain's own dict form), LangGraph
    ``Command`` and ``Send``, tuples. Raises TypeError for anything else that is not JSON."""
    from langchain_core.messages import BaseMessage, messages_to_dict

    if value is None or type(value) in (str, bool, int, float):
        return value
    if isinstance(value, BaseMessage):
        return {_MESSAGE: messages_to_dict([value])[0]}
    if type(value) is dict:
        return {str(k): _pack(v) for k, v in value.items()}
    if type(value) is list:
        return [_pack(v) for v in value]
    if type(value) is tuple:
        return {_TUPLE: [_pack(v) for v in value]}
    kind = f"{type(value).__module__}.{type(value).__qualname__}"
    if kind == "langgraph.types.Command":
        fields = ("graph", "update", "resume", "goto")
        return {_COMMAND: {f: _pack(getattr(value, f)) for f in fields}}
    if kind == "langgraph.types.Send":
        return {_SEND: {"node": value.node, "arg": _pack(value.arg)}}
    raise TypeError(kind)


def _unpack(value: Any) -> Any:
    """Inverse of :func:`_pack`: only plain lists and dicts hold its markers (a ``Counter`` or an
    ``OrderedDict`` the tool returned, rebuilt as itself, stays one)."""
    if type(value) is list:
        return [_unpack(v) for v in value]
    if type(value) is not dict:
        return value
    if len(value) == 1:
        ((key, inner),) = value.items()
        if key == _MESSAGE and isinstance(inner, dict):
            from langchain_core.messages import messages_from_dict

            return messages_from_dict([inner])[0]
        if key == _TUPLE and isinstance(inner, list):
            return tuple(_unpack(v) for v in inner)
        if key == _COMMAND and isinstance(inner, dict):
            from langgraph.types import Command

            return Command(**{k: _unpack(v) for k, v in inner.items()})
        if key == _SEND and isinstance(inner, dict):
            from langgraph.types import Send

            return Send(inner["node"], _unpack(inner["arg"]))
    return {k: _unpack(v) for k, v in value.items()}


def decode_output(value: Any) -> Any:
    """Inverse of :func:`encode_output` for a served result (a live one is handed on as it is)."""
    if isinstance(value, dict) and len(value) == 1 and _PAIR in value:
        pair = value[_PAIR]
        if isinstance(pair, list) and len(pair) == 2:
            return decode_output(pair[0]), _unpack(pair[1])
    return _unpack(value)


INTEGRATION = Integration(
    "langchain",
    {"langchain_core.tools.base": patch, "langchain_core.callbacks.manager": patch_custom_events},
)
