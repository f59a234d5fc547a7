"""MCP (the ``mcp`` SDK, 1.x and 2.x): every request an agent makes to an MCP server through a
``ClientSession`` recorded, and served on replay with the server neither started nor contacted.

**Requests.** Patched: ``mcp.client.session.ClientSession.send_request`` (and
``send_notification``, only to mark its HTTP as recorded here), which every request of the client
goes through (mcp 2.x's ``Client`` included: it drives a ``ClientSession``), but for mcp 2.x's
``subscriptions/listen``: its dispatcher's ``send_raw_request`` is patched to say that one is not
recorded (see **Transports**) — ``initialize``,
``list_tools``, ``call_tool``, ``list_resources``, ``read_resource``, ``get_prompt``,
``complete``…, and those the SDK makes by itself (the
``list_tools`` with which ``call_tool`` validates structured content). Each is a ``tool_call``
event: a ``tools/call`` under the MCP tool's own name with its arguments, any other request as
``mcp:<method>`` (``mcp:initialize``, ``mcp:tools/list``) with its params. Both carry ``mcp``:
``{"server": <the name in the server's initialize answer>, "method": <JSON-RPC method>, "via": <the
transport>}``.
mcp 2.x's ``send_discover`` (the ``server/discover`` probe with which a client may negotiate
instead of ``initialize``; it does not go through ``send_request``) is patched too, and
recorded as ``mcp:server/discover`` with its raw answer. The
``result`` is the server's result in the protocol's JSON form (``content`` blocks,
``structuredContent``, ``isError``…), validated into the SDK's own type again on replay
(``CallToolResult``, ``InitializeResult``…). An error answer (``McpError``, ``MCPError`` in 2.x)
is stored as ``{"$mcp_error": {"type", "error": {code, message, data}}}`` and raised again as
that class. The progress token the SDK adds to a request (its JSON-RPC id) is not an argument, nor
is the OpenTelemetry trace context a client puts in its ``_meta`` (``traceparent``, ``tracestate``:
fastmcp's, under pydantic-ai's ``MCPToolset``, while a trace is current), new in every run as an
HTTP request's trace headers are, which the match key leaves out.
What the server sends the agent while a request is in flight (progress notifications to its
``progress_callback``, log messages and other notifications, and its own requests: sampling,
elicitation, roots) is recorded with that request (``mcp.received``), and handed again, in order,
to the callbacks that received it when a replay serves the request (:class:`_Exchange`). With
several requests in flight a progress notification is kept with the request its ``progressToken``
names, marked beside (handed in that request's turn, not interleaved with the others' messages as
it came); nothing tells which one another message came for: it is kept with the latest, marked
shared. Either way the replay's verdict says it is not certain. What the server sends while none
is in flight is not recorded: said while recording, noted in the session (``unrecorded_mcp``) and
named in the replay's verdict. ``ping`` is not recorded: its answer is empty and when a client
pings depends on the clock; a replay answers it at once. The server's name is part of the match
key (:func:`forkpoint.match.tool_request`), once its ``initialize`` answer gave it; each request
also records the transport its session was opened on (``via``: a stdio server's command line,
another's URL), which tells identical requests apart on replay (the ``initialize`` of two servers
opened at once, two servers of one name) where the recording's transports differ.

**Transports.** Patched: ``stdio_client``, ``sse_client``, ``streamable_http_client``
(``streamablehttp_client``) and ``websocket_client`` of ``mcp.client.*``, in their module and in
every module that had imported them already (a name bound elsewhere before forkpoint started, in
a function's locals, is out of reach: its transport runs as the SDK's own, and on replay connects
for real). While recording they are the SDK's own, and the
HTTP requests of the SSE and streamable-HTTP transports are left to this integration (not recorded
a second time as plain HTTP calls, and their server's ``host:port`` not named as a connection
forkpoint did not record). On replay they start no process and open no connection: the session
gets in-memory streams that nothing answers, as every request is served from the recording.
Nothing else comes from the server on replay; notifications the client sends are dropped. A request
it sends past ``send_request`` (mcp 2.x's ``subscriptions/listen``, which ``Client.listen`` sends
through the session's dispatcher) is not recorded: said while recording, noted (``unrecorded_mcp``)
and named in the verdict; a replay answers it with an error at once, as nothing would ever answer it
(:func:`_refusal`). A
replay whose tool calls are live from the start (``--tools live``, or after a divergence under
``--on-divergence live``) opens the real transport. One that may go live later (``--on-divergence
live``, a fork's arm, pytest's mode ``record``) starts a stdio server too, but keeps it apart from the
session while the session is served (:class:`_Standby`), and introduces the two at the first request
made live; a server that refuses that introduction makes the call raise
:class:`~forkpoint.errors.McpServerNotStarted`. That is for a server the agent starts (stdio): one
it reaches over a socket is not connected to before the replay goes live, when sockets open, so a
call that must go live on its session raises :class:`~forkpoint.errors.McpServerNotStarted`. (A
replay that can make no call live starts no server.)

Frameworks that reach MCP through a ``ClientSession`` (langchain-mcp-adapters, the OpenAI Agents
SDK's MCP servers, pydantic-ai's MCP toolsets) are recorded here, once: their integrations leave
MCP tools alone.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import logging
import math
import shlex
import sys
from collections.abc import Awaitable, Callable, Iterator
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import Any, cast

from .. import runtime
from ..capture import connections, programs
from ..capture.tools import acall_tool
from ..capture.tracebacks import hidden
from ..errors import McpServerNotStarted
from ..events import McpCall
from ..match import MCP_INTRODUCING
from ..redact import scrub_text, scrub_url
from ..text import say
from .base import Integration, replace

_ERROR = "$mcp_error"
_DISCOVERED_INFO = "io.modelcontextprotocol/serverInfo"  # where a server/discover answer names it
#: The transports of ``mcp.client.*``, and what they hand the session.
TRANSPORTS = (
    "stdio_client",
    "sse_client",
    "streamable_http_client",
    "streamablehttp_client",
    "websocket_client",
)
#: Requests whose answers are not recorded (see the module docstring).
UNRECORDED = frozenset({"ping"})
_SERVER = "_forkpoint_mcp_server"  # set on a ClientSession by its initialize answer
#: Set on the write stream a replay hands a session instead of a transport's, and on that session.
_FAKE = "_forkpoint_mcp_fake"
#: Set on the write stream a replay that may go live later hands a session, and on that session:
#: its :class:`_Standby`.
_STANDBY = "_forkpoint_mcp_standby"
#: The JSON-RPC id of the ``initialize`` request a :class:`_Standby` sends for the session.
_INTRODUCTION_ID = "forkpoint-initialize"
#: On a ClientSession: the transport it was opened on (``mcp.via`` of its requests, :meth:`_Transport.via`).
_VIA = "_forkpoint_mcp_via"
#: The patched transports open now: the id of the write stream each handed its session → the
#: transport (by id: the SDK's streams take no attribute, nor a weak reference).
_OPEN: dict[int, str] = {}
#: On a ClientSession: the :class:`_Exchange` of each of its requests in flight while recording.
_IN_FLIGHT = "_forkpoint_mcp_in_flight"
#: On a ClientSession: the methods of server messages said to be unrecorded already.
_SAID = "_forkpoint_mcp_said"
#: On a session's dispatcher (mcp 2.x): the ClientSession it sends for.
_SESSION = "_forkpoint_mcp_session"
#: True while a request goes through the patched ``send_request`` or ``send_discover`` (recorded,
#: or a ``ping``, answered on replay): one a session's dispatcher sends otherwise (mcp 2.x's
#: ``subscriptions/listen``) is not recorded (:func:`patch_dispatcher`).
_sent_here: contextvars.ContextVar[bool] = contextvars.ContextVar("forkpoint_mcp_sent_here", default=False)


#: What a client adds to a request's ``_meta`` that differs in every run (see the module docstring).
_PER_RUN_META = frozenset({"progressToken", "traceparent", "tracestate"})

#: The params of a ``tools/call`` that retries it with the answers to the server's input requests
#: (an ``InputRequiredResult``, protocol 2026-07-28): part of the call's ``args``, as ``$<name>``.
_RETRIED = ("inputResponses", "requestState")


def call_name(method: str, params: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The event's ``tool`` and ``args`` for a request: ``tools/call`` → (the tool's name, its
    arguments, and ``$inputResponses`` and ``$requestState`` when it answers the server's input
    requests); any other → (``mcp:<method>``, its params); the progress token and the trace
    context left out."""
    params = dict(params)
    meta = params.get("_meta")
    if isinstance(meta, dict) and not _PER_RUN_META.isdisjoint(meta):
        meta = {k: v for k, v in meta.items() if k not in _PER_RUN_META}
        if meta:
            params["_meta"] = meta
        else:
            params.pop("_meta")
    if method == "tools/call" and isinstance(params.get("name"), str):
        arguments = params.get("arguments") or {}
        args = dict(arguments) if isinstance(arguments, dict) else {"$arguments": arguments}
        for sent in _RETRIED:  # (a retry that answers the server's input requests: what it answers)
            if sent in params:
                args[f"${sent}"] = params[sent]
        return params["name"], args
    return f"mcp:{method}", params


def _error_class() -> Any:
    mod = sys.modules.get("mcp.shared.exceptions")
    return getattr(mod, "McpError", None) or getattr(mod, "MCPError", None)


def encode_error(exc: BaseException) -> dict[str, Any]:
    """An MCP error answer as ``{"$mcp_error": {"type", "error"}}`` (the JSON-RPC error object)."""
    error = exc.error  # type: ignore[attr-defined]
    return {
        _ERROR: {
            "type": type(exc).__qualname__,
            "error": error.model_dump(by_alias=True, mode="json", exclude_none=True),
        }
    }


def rebuild_error(stored: dict[str, Any]) -> BaseException:
    """The MCP error class (the recorded subclass when it is built the same way) for a stored
    ``{"type", "error"}``."""
    base = _error_class()
    module = sys.modules[base.__module__]
    data = module.ErrorData.model_validate(stored.get("error") or {})
    recorded = getattr(module, str(stored.get("type")), None)
    for cls in (recorded, base):
        if not (isinstance(cls, type) and issubclass(cls, base)):
            continue
        try:  # 2.x builds from the error's fields, 1.x from the ErrorData itself
            exc = cls.from_error_data(data) if hasattr(cls, "from_error_data") else cls(data)
        except Exception:  # a subclass with a constructor of its own
            continue
        return exc  # type: ignore[no-any-return]
    raise AssertionError("unreachable: the base class builds")


def _result_of(result_type: Any, value: Any) -> Any:
    if hasattr(result_type, "validate_python"):  # 2.x: a TypeAdapter for union results
        return result_type.validate_python(value)
    return result_type.model_validate(value)


async def _request(
    session: Any,
    method: str,
    params: dict[str, Any],
    send: Callable[[], Awaitable[Any]],
    encode: Callable[[Any], Any],
    decode: Callable[[Any], Any],
    exchange: _Exchange | None = None,
) -> Any:
    """One request of ``session`` through forkpoint (see the module docstring): ``send()`` makes it
    live; ``encode`` turns its answer into JSON, ``decode`` turns the recorded JSON back;
    ``exchange``: what the server sends the agent while it is in flight (its progress callback,
    which ``send`` reaches through it)."""
    name, arguments = call_name(method, params)
    fake = getattr(session, _FAKE, False)
    failed: list[BaseException] = []
    info: McpCall = {"server": getattr(session, _SERVER, None), "method": method}
    if (via := getattr(session, _VIA, None)) is not None:
        info["via"] = via
    exchange = exchange if exchange is not None else _Exchange(session, None)

    async def body() -> Any:
        standby = getattr(session, _STANDBY, None)
        if standby is not None:
            await standby.go_live(introduce=method != "initialize")
        if isinstance(fake, str):
            raise McpServerNotStarted(
                f"the replay must make MCP request {method} ({name}) to server "
                f"{getattr(session, _SERVER, None)!r} live, but it could not start that server ({fake}): "
                "the replay served its session from the recording without it."
            )
        if fake:
            raise McpServerNotStarted(
                f"the replay must make MCP request {method} ({name}) to server "
                f"{getattr(session, _SERVER, None)!r} live, but it never connected to that server: the "
                "replay served its session from the recording, and connects early only to a server it "
                "starts itself (stdio), not to one it reaches over a socket, which a replay keeps closed "
                "until it goes live. A replay whose tool calls are live from the start (--tools live) "
                "connects to it; a what-if of this run with live MCP calls then overrides a model answer "
                "(--override 'model#K.…'), not an MCP tool's result, which a live tool would not use."
            )
        in_flight = session.__dict__.setdefault(_IN_FLIGHT, [])
        in_flight.append(exchange)
        try:
            with _http_above():
                result = await send()
            if method in MCP_INTRODUCING and info["server"] is None:  # (its event names the server too)
                info["server"] = _server_name(result)
            return result
        except Exception as exc:
            error_class = _error_class()
            if error_class is None or not isinstance(exc, error_class):
                raise
            failed.append(exc)  # recorded as the error answer; raised to the caller as it was
            return encode_error(exc)
        finally:
            in_flight.remove(exchange)
            if exchange.received:
                info["received"] = exchange.received

    live: list[Any] = []

    def keep(value: Any) -> Any:
        live.append(value)
        return value if failed else encode(value)

    served = await acall_tool(name, arguments, body, keep, mcp=info, replayed=exchange.replay)
    if failed:
        raise failed[0]
    if live and served is live[0]:  # made live: the caller gets the SDK's own object
        return served
    if isinstance(served, dict) and isinstance(served.get(_ERROR), dict) and len(served) == 1:
        raise rebuild_error(served[_ERROR])
    return decode(served)


class _Exchange:
    """What the server sends the agent while one of its requests is in flight, in the order it came:
    the notifications of progress that reach the request's progress callback, the server's requests
    (``sampling/createMessage``, ``elicitation/create``, ``roots/list``: answered by the session's
    callbacks) and its other notifications (log messages: the session's logging callback and message
    handler). Noted while recording (``mcp.received`` of the event); when a replay serves the request,
    each is handed again to what received it, before the result, and what a callback answers goes
    nowhere (no server is there to read it)."""

    def __init__(self, session: Any, callback: Callable[..., Awaitable[Any]] | None) -> None:
        self.session, self.callback = session, callback
        self.received: list[dict[str, Any]] = []

    def note(self, message: dict[str, Any]) -> None:
        """Note a message that came for this request; marked ``"beside": true`` when another request
        of the session was in flight too (a replay hands it in this request's turn: with this
        request's other messages, in their order, but not interleaved with the other's as it came)."""
        if len(self.session.__dict__.get(_IN_FLIGHT) or ()) > 1:
            message["beside"] = True
        self.received.append(message)

    async def relay(self, progress: float, total: float | None, message: str | None) -> None:
        params = {"progress": progress, "total": total, "message": message}
        self.note({"method": "notifications/progress", "params": params, "to": "progress_callback"})
        assert self.callback is not None  # (only relayed for a request made with one)
        with _http_above(False):
            await self.callback(progress, total, message)

    async def replay(self, event: Any) -> None:
        for message in (event.get("mcp") or {}).get("received") or ():
            method, params = message.get("method"), message.get("params")
            try:  # as the SDK calls them: an exception of a callback is logged, never raised
                if message.get("to") == "progress_callback":
                    if self.callback is not None:
                        await self.callback(
                            params.get("progress"), params.get("total"), params.get("message")
                        )
                elif "id" in message:
                    await self.session._on_request(_Dispatched(message["id"]), method, params)
                else:
                    await self.session._on_notify(_Dispatched(None), method, params)
            except Exception:
                logging.getLogger("mcp.client.session").exception("replaying %r raised", method)


class _Dispatched:
    """The dispatch context a replayed server message is handed to the session with."""

    def __init__(self, request_id: Any) -> None:
        self.request_id = request_id


def _received(session: Any, message: dict[str, Any]) -> None:
    """A message of the server reached ``session`` while recording: noted with the request of it in
    flight, or said when none is. With several in flight, a progress notification is noted with the
    request its ``progressToken`` names (:func:`_progress_for`); nothing tells which any other came
    for: it is noted with the latest, marked ``"shared": true`` (a replay's verdict says it is not
    certain)."""
    in_flight = session.__dict__.get(_IN_FLIGHT)
    if in_flight:
        own = _progress_for(session, message)
        if own is not None and own in in_flight:
            own.note(message)
            return
        if len(in_flight) > 1:
            message["shared"] = True
        in_flight[-1].received.append(message)
        return
    _unrecorded(
        session,
        message["method"],
        f"forkpoint: MCP server {getattr(session, _SERVER, None)!r} sent {message['method']} while "
        "no request of the agent was in flight: not recorded, a replay does not hand it to the "
        "agent's callbacks",
    )


def _unrecorded(session: Any, method: str, said_as: str, *, request: bool = False) -> None:
    """While recording, say once per ``session`` and ``method`` that a message was not recorded
    (``said_as``), and note it in the session (``unrecorded_mcp``: the replay's verdict names it);
    ``request``: one the agent sent, not the server."""
    rt, said = runtime.active(), session.__dict__.setdefault(_SAID, set())
    if rt is None or rt.mode != "record" or method in said:
        return
    said.add(method)
    unrecorded: dict[str, Any] = {"server": getattr(session, _SERVER, None), "method": method}
    if request:
        unrecorded["request"] = True
    what = "an MCP request" if request else "an MCP server message"
    cast(Any, rt).note(f"{what} forkpoint did not record", unrecorded_mcp=unrecorded)
    say(said_as)


def _progress_for(session: Any, message: dict[str, Any]) -> _Exchange | None:
    """The request a progress notification is for, by its ``progressToken``: the request's id, under
    which the session's dispatcher (mcp 2.x) keeps the progress callback of the request in flight,
    which forkpoint made its :meth:`_Exchange.relay`. None for another message, or where the token
    names none."""
    params = message.get("params")
    token = params.get("progressToken") if isinstance(params, dict) else None
    if message["method"] != "notifications/progress" or not isinstance(token, str | int):
        return None
    pending = getattr(getattr(session, "_dispatcher", None), "_pending", None)
    coerce = getattr(sys.modules.get("mcp.shared.dispatcher"), "coerce_request_id", None)
    if not isinstance(pending, dict) or coerce is None:
        return None
    relay = getattr(pending.get(coerce(token)), "on_progress", None)
    exchange = getattr(relay, "__self__", None)
    return exchange if isinstance(exchange, _Exchange) else None


def _learn_server(session: Any, result: Any) -> None:
    """Note the server's name from an ``initialize`` (or 2.x ``server/discover``) answer."""
    setattr(session, _SERVER, _server_name(result))


def _server_name(result: Any) -> Any:
    """The server's name in an ``initialize`` (or 2.x ``server/discover``) answer, or None."""
    info = None
    if isinstance(result, dict):  # a raw discover answer carries it in _meta
        meta = result.get("_meta")
        info = result.get("serverInfo") or (meta.get(_DISCOVERED_INFO) if isinstance(meta, dict) else None)
    if info is None:
        # (2.x's name first: its result says the 1.x name is deprecated, in the program's run)
        info = getattr(result, "server_info", None) or getattr(result, "serverInfo", None)
    return info.get("name") if isinstance(info, dict) else getattr(info, "name", None)


def _dump(value: Any) -> Any:
    return value.model_dump(by_alias=True, mode="json", exclude_none=True)


def patch_session(module: ModuleType) -> None:
    """Wrap ``ClientSession.send_request`` of ``mcp.client.session`` (and 2.x's
    ``send_discover``, which bypasses it); see the module docstring."""
    cls = module.ClientSession
    original = cls.send_request
    signature = inspect.signature(original)

    @functools.wraps(original)
    async def send_request(self: Any, request: Any, result_type: Any, *args: Any, **kwargs: Any) -> Any:
        with hidden, _marked(_sent_here):
            rt = runtime.active()
            if rt is None:
                return await original(self, request, result_type, *args, **kwargs)
            data = request.model_dump(by_alias=True, mode="json", exclude_none=True)
            method = str(data.get("method"))
            standby = getattr(self, _STANDBY, None)
            if method in UNRECORDED:
                if rt.mode == "replay" and (getattr(self, _FAKE, False) or (standby and not standby.live)):
                    return _result_of(result_type, {})
                with _http_above():
                    return await original(self, request, result_type, *args, **kwargs)
            if method == "initialize" and standby is not None:
                standby.introduction = data.get("params") or {}
            call = signature.bind(self, request, result_type, *args, **kwargs)
            exchange = _Exchange(self, call.arguments.get("progress_callback"))
            if exchange.callback is not None:
                call.arguments["progress_callback"] = exchange.relay
            result = await _request(
                self,
                method,
                data.get("params") or {},
                lambda: original(*call.args, **call.kwargs),
                _dump,
                lambda value: _result_of(result_type, value),
                exchange,
            )
            if method == "initialize":
                _learn_server(self, result)
            return result

    init, notify = cls.__init__, cls.send_notification

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        # The write stream, or (2.x's mcp.Client) the JSON-RPC dispatcher built over it.
        given = (*args, *kwargs.values())
        for stream in (w for v in given for w in (v, getattr(v, "_write_stream", None))):
            for mark in (_FAKE, _STANDBY):  # (_FAKE: its server was not started: nothing can go live)
                if found := getattr(stream, mark, None):
                    setattr(self, mark, found)
            if (via := _OPEN.get(id(stream))) is not None:
                setattr(self, _VIA, via)
        if (dispatcher := getattr(self, "_dispatcher", None)) is not None:  # (2.x)
            with contextlib.suppress(AttributeError):  # (a dispatcher that takes no attribute: unsaid)
                setattr(dispatcher, _SESSION, self)

    @functools.wraps(notify)
    async def send_notification(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _http_above():
            return await notify(self, *args, **kwargs)

    on_request, on_notify = cls.__dict__.get("_on_request"), cls.__dict__.get("_on_notify")

    @functools.wraps(on_request)
    async def _on_request(self: Any, dctx: Any, method: str, params: Any) -> Any:
        if runtime.active() is not None and method != "ping":
            _received(self, {"method": method, "params": params, "id": getattr(dctx, "request_id", None)})
        with _http_above(False):
            return await on_request(self, dctx, method, params)

    @functools.wraps(on_notify)
    async def _on_notify(self: Any, dctx: Any, method: str, params: Any) -> Any:
        if runtime.active() is not None and method != "notifications/cancelled":
            _received(self, {"method": method, "params": params})
        with _http_above(False):
            return await on_notify(self, dctx, method, params)

    if replace(cls, "send_request", send_request):
        replace(cls, "send_notification", send_notification)
        replace(cls, "__init__", __init__)
        if on_request is not None and on_notify is not None:  # (2.x: the server's messages come here)
            replace(cls, "_on_request", _on_request)
            replace(cls, "_on_notify", _on_notify)
    discover = cls.__dict__.get("send_discover")
    if discover is not None:

        @functools.wraps(discover)
        async def send_discover(self: Any, version: str) -> Any:
            if runtime.active() is None:
                return await discover(self, version)
            send = functools.partial(discover, self, version)
            with _marked(_sent_here):
                raw = await _request(self, "server/discover", {"version": version}, send, dict, dict)
            _learn_server(self, raw)
            return raw

        replace(cls, "send_discover", send_discover)


def patch_dispatcher(module: ModuleType) -> None:
    """Wrap ``send_raw_request`` of mcp 2.x's ``JSONRPCDispatcher``, through which a session's
    requests go: one not made through :func:`_request` (``subscriptions/listen``, which
    ``Client.listen`` sends so) is said not recorded while recording (a replay answers it with an
    error: :func:`_refusal`)."""
    cls = getattr(module, "JSONRPCDispatcher", None)
    if cls is None:
        return
    original = cls.send_raw_request

    @functools.wraps(original)
    async def send_raw_request(self: Any, method: str, *args: Any, **kwargs: Any) -> Any:
        session = getattr(self, _SESSION, None)
        if session is not None and not _sent_here.get():
            _unrecorded(
                session,
                method,
                f"forkpoint: MCP request {method} to server {getattr(session, _SERVER, None)!r} was not "
                "recorded: the agent's MCP client sent it past ClientSession.send_request, which forkpoint "
                "records; a replay answers it with an error",
                request=True,
            )
        return await original(self, method, *args, **kwargs)

    replace(cls, "send_raw_request", send_raw_request)


@contextlib.contextmanager
def _marked(var: contextvars.ContextVar[bool], value: bool = True) -> Iterator[None]:
    """``var`` set to ``value`` in this context."""
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


def _http_above(above: bool = True) -> contextlib.AbstractContextManager[None]:
    """Marks the HTTP requests made in this context as recorded here (not by the HTTP capture).
    The transports of mcp 1.x send from tasks they started, marked when the transport was
    entered; those of 2.x send in the context of the caller (``ClientSession`` hands its context
    along with each message), which is marked around each request and notification. What the
    server sends comes in that context too: the agent's callbacks that receive it run unmarked
    (``above=False``), their own HTTP (a sampling callback's model call) recorded as any other."""
    return _marked(runtime.http_recorded_above, above)


class _ReplayStreams:
    """What a replay hands an MCP session instead of a transport's streams: a read stream that
    nothing writes to but :meth:`refuse` (closed when the transport is left) and a write stream that
    drops what it is sent but a request, answered by :meth:`refuse`. Marked so the session knows
    its server was not started."""

    def __init__(self, width: int, failed: str | None = None) -> None:
        import anyio

        self._read_writer, self.read = anyio.create_memory_object_stream[Any](0)
        self.write, self._write_reader = anyio.create_memory_object_stream[Any](math.inf)
        setattr(self.write, _FAKE, failed or True)  # (failed: why the replay could not start it)
        self.width = width

    def streams(self) -> tuple[Any, ...]:
        extra = (lambda: None,) * (self.width - 2)  # 1.x streamable HTTP: get_session_id
        return (self.read, self.write, *extra)

    async def refuse(self) -> None:
        """Answer each request the session sends with :func:`_refusal`."""
        async for message in self._write_reader:
            await _refuse(message, self._read_writer)

    async def aclose(self) -> None:
        for stream in (self._read_writer, self.read, self.write, self._write_reader):
            await stream.aclose()


def _message(data: dict[str, Any]) -> Any:
    """A JSON-RPC message of the mcp SDK, as its transports carry it."""
    from mcp import types
    from mcp.shared.message import SessionMessage

    adapter = getattr(types, "jsonrpc_message_adapter", None)  # 2.x; 1.x has a root model
    parsed = (
        adapter.validate_python(data)
        if adapter is not None
        else cast(Any, types.JSONRPCMessage).model_validate(data)
    )
    return SessionMessage(parsed)


def _refusal(message: Any) -> Any:
    """The error a replay answers a request its session sent to no server with: one not made
    through :func:`_request`, which serves the others (mcp 2.x's ``subscriptions/listen``), is not
    recorded, and nothing would ever answer it: its caller, live answered at once, would wait
    forever. None for another message (a notification, the session's answer to the server)."""
    inner = _jsonrpc(message)
    method, request_id = getattr(inner, "method", None), getattr(inner, "id", None)
    if not isinstance(method, str) or request_id is None:
        return None
    why = (
        f"forkpoint: the replay cannot answer MCP request {method}: it was not recorded (the agent's MCP "
        "client sent it past ClientSession.send_request, which forkpoint records), and the replay serves "
        "this session from the recording"
    )
    return _message({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32603, "message": why}})


async def _refuse(message: Any, to: Any) -> None:
    """Send the session (its read stream's writer ``to``) :func:`_refusal` of ``message`` when it is
    a request; nothing once the session has left."""
    import anyio

    if (refusal := _refusal(message)) is not None:
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await to.send(refusal)


def _jsonrpc(message: Any) -> Any:
    """The JSON-RPC message a transport's ``SessionMessage`` carries (1.x wraps it in a root model)."""
    inner = getattr(message, "message", None)
    return getattr(inner, "root", inner)


def _message_id(message: Any) -> Any:
    return getattr(_jsonrpc(message), "id", None)


class _Standby:
    """The transport of a replay that may go live later: its server is started, as when recording,
    but hears nothing while the session is served from the recording (what the session sends is
    dropped, and what the server says). At the session's first request made live, the server is
    introduced to it as recorded (the session's ``initialize`` request, whose recorded answer the
    session already has, then ``notifications/initialized``), and from then on the two talk."""

    def __init__(self, real: tuple[Any, ...]) -> None:
        import anyio

        self._real = real
        self._to_session, self.read = anyio.create_memory_object_stream[Any](0)
        self.write, self._from_session = anyio.create_memory_object_stream[Any](math.inf)
        setattr(self.write, _STANDBY, self)
        self.introduction: dict[str, Any] | None = None
        self.live = False
        self._lock = anyio.Lock()
        self._answered = anyio.Event()
        self._answer: Any = None

    def streams(self) -> tuple[Any, ...]:
        return (self.read, self.write, *self._real[2:])

    async def go_live(self, *, introduce: bool) -> None:
        """Connect the session to its server; first, unless the session is introducing itself now,
        send the server the session's recorded introduction."""
        import anyio

        async with self._lock:
            if self.live:
                return
            # What the session sent while served stays unsent (a request refused); EndOfStream: a
            # server that ended ended the session's receive loop, which closed what it writes to.
            while True:
                try:
                    message = self._from_session.receive_nowait()
                except (anyio.WouldBlock, anyio.EndOfStream):
                    break
                await _refuse(message, self._to_session)
            if introduce and self.introduction is not None:
                request = {"jsonrpc": "2.0", "id": _INTRODUCTION_ID, "method": "initialize"}
                # (a server that ended may have closed its stdin's stream: it has no answer, said below)
                with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                    await self._real[1].send(_message({**request, "params": self.introduction}))
                await self._answered.wait()
                answer = getattr(self._answer, "message", None)  # (None: the server ended)
                error = getattr(getattr(answer, "root", answer), "error", None)
                if answer is None or error is not None:
                    why = f"refused it: {error!r}" if answer is not None else "ended before it answered"
                    raise McpServerNotStarted(
                        "the replay must make an MCP request live and started the server for it, but the "
                        f"server {why} (the session's recorded initialize request)"
                    )
                await self._real[1].send(_message({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            self.live = True

    async def to_server(self) -> None:
        async for message in self._from_session:
            if self.live:
                await self._real[1].send(message)
            else:
                await _refuse(message, self._to_session)

    async def to_session(self) -> None:
        import anyio

        try:
            async for message in self._real[0]:
                if not self._answered.is_set() and _message_id(message) == _INTRODUCTION_ID:
                    self._answer = message
                    self._answered.set()
                elif self.live:
                    await self._to_session.send(message)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass  # the session is gone (a server's message after it left): dropped, as stdio does
        finally:
            self._answered.set()  # (a server that ended: go_live says so)
            await self._to_session.aclose()

    async def aclose(self) -> None:
        for stream in (self._to_session, self.read, self.write, self._from_session):
            await stream.aclose()


class _Transport:
    """A patched transport's async context manager (see the module docstring)."""

    def __init__(self, original: Any, width: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._original, self._width, self._args, self._kwargs = original, width, args, kwargs
        self._inner: Any = None
        self._fake: _ReplayStreams | None = None
        self._standby: _Standby | None = None
        self._relay: Any = None  # the task group of its relays
        self._opened: int | None = None  # its key in _OPEN

    def _target(self) -> Any:
        """What the transport was given to reach its server: a stdio server's parameters, a URL."""
        return self._args[0] if self._args else self._kwargs.get("server", self._kwargs.get("url"))

    def via(self) -> str | None:
        """The transport as its requests record it (``mcp.via``): a stdio server's command line,
        another's URL, scrubbed as the session keeps it; None for what it cannot name."""
        target = self._target()
        if isinstance(target, str):
            return scrub_url(target)
        command, args = getattr(target, "command", None), getattr(target, "args", None)
        if isinstance(command, str) and isinstance(args, list):
            return scrub_text(shlex.join([command, *map(str, args)]))
        return None

    async def __aenter__(self) -> Any:
        streams = await self._open()
        if (via := self.via()) is not None:
            self._opened = id(streams[1])
            _OPEN[self._opened] = via
        return streams

    async def _open(self) -> Any:
        rt = runtime.active()
        standby = False
        if rt is not None and rt.mode == "replay" and not cast(runtime.Serving, rt).runs_live("tool_call"):
            # (a socket's server is not reached before the replay goes live, when sockets open)
            if self._original.__name__ != "stdio_client" or not cast(runtime.Serving, rt).may_go_live():
                return await self._served()
            standby = True
        self._inner = self._original(*self._args, **self._kwargs)
        url = self._target()
        if rt is not None and rt.mode == "record" and isinstance(url, str):
            # Its requests are recorded here, as MCP calls: the connection is accounted for.
            connections.recorded(url)
        # A stdio transport starts its server: a Python program whose requests are recorded here,
        # as MCP calls, and which a replay starts only to go live; not one the recording missed.
        with _http_above(), programs.accounted():
            if not standby:
                return await self._inner.__aenter__()
            try:
                real = await self._inner.__aenter__()
            except OSError as exc:
                failed = f"{type(exc).__name__}: {exc}"
            else:
                self._standby = _Standby(tuple(real))
        if self._standby is None:
            # (a server not installed where the session is replayed): the replay serves the
            # session as one that cannot go live, and a call made live says why
            return await self._served(failed)
        await self._relaying(self._standby.to_server, self._standby.to_session)
        return self._standby.streams()

    async def _served(self, failed: str | None = None) -> Any:
        """The streams of a session served from the recording with no server behind it
        (:class:`_ReplayStreams`; ``failed``: why the replay could not start its server)."""
        self._fake = _ReplayStreams(self._width, failed)
        await self._relaying(self._fake.refuse)
        return self._fake.streams()

    async def _relaying(self, *relays: Callable[[], Awaitable[None]]) -> None:
        """Run ``relays`` in a task group of their own until the transport is left."""
        import anyio

        self._relay = anyio.create_task_group()
        await self._relay.__aenter__()
        for relay in relays:
            self._relay.start_soon(relay)

    async def __aexit__(self, *exc_info: Any) -> Any:
        if self._opened is not None:
            del _OPEN[self._opened]
        closed = None
        try:
            if self._relay is not None:
                self._relay.cancel_scope.cancel()
                await self._relay.__aexit__(None, None, None)
            if (streams := self._fake or self._standby) is not None:
                await streams.aclose()
        finally:  # a server started is stopped whatever its relays did
            if self._fake is None:
                with _http_above():  # a closing DELETE of streamable HTTP
                    closed = await self._inner.__aexit__(*exc_info)
        return closed


def _width(name: str) -> int:
    """How many values the transport yields: 1.x's streamable HTTP adds ``get_session_id``."""
    if name not in ("streamable_http_client", "streamablehttp_client"):
        return 2
    try:
        return 3 if int(version("mcp").split(".")[0]) < 2 else 2
    except (PackageNotFoundError, ValueError):
        return 2


def _wrapped_transport(original: Any, width: int) -> Any:
    @functools.wraps(original)
    def transport(*args: Any, **kwargs: Any) -> Any:
        if runtime.active() is None:
            return original(*args, **kwargs)
        return _Transport(original, width, args, kwargs)

    return transport


def patch_transports(module: ModuleType) -> None:
    """Wrap the transports defined in ``module`` (one of ``mcp.client.*``), there and in every
    module that imported them already (``from mcp.client.stdio import stdio_client`` in a framework
    imported before forkpoint started)."""
    for name in TRANSPORTS:
        original = module.__dict__.get(name)
        if original is None or getattr(original, "__forkpoint_integration__", False):
            continue
        transport = _wrapped_transport(original, _width(name))
        for holder in list(sys.modules.values()):
            if getattr(holder, "__dict__", {}).get(name) is original:
                replace(holder, name, transport)


INTEGRATION = Integration(
    "mcp",
    {
        "mcp.client.session": patch_session,
        "mcp.shared.jsonrpc_dispatcher": patch_dispatcher,
        "mcp.client.stdio": patch_transports,
        "mcp.client.sse": patch_transports,
        "mcp.client.streamable_http": patch_transports,
        "mcp.client.websocket": patch_transports,
    },
)
