"""The shapes of a session: header, events, and the replay report, as typed dictionaries.

A session log line is JSON; these are its shapes in memory, after the log's encodings are resolved
(``docs/format.md`` is the on-disk reference). They are :class:`~typing.TypedDict`s rather than
classes so that the hot path (capture → log) builds and writes plain dicts, and readers get the
same dicts back.

Also here, because every layer needs them and they depend on nothing: new ids and timestamps, and
the one function that names a call's endpoint (:func:`endpoint`).
"""

# No ``from __future__ import annotations``: a TypedDict compiles each string annotation into a
# ForwardRef as its class is made (half of this module's import time, paid by every recording
# process); evaluated at once, the annotations cost nothing more.
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal, NotRequired, Required, TypedDict, TypeGuard, TypeVar
from urllib.parse import urlsplit

from .text import ordinal

#: How a stored body is kept: parsed JSON, text, binary, nothing, or (responses) a chunk stream.
BodyKind = Literal["json", "text", "bytes", "empty", "stream"]
#: How a response body ended: read to the end, closed early by the caller, failed, still open at exit.
Ended = Literal["complete", "client", "error", "unfinished"]
#: Where a replayed call's answer came from in a what-if session.
Source = Literal["replay", "override", "live"]
#: A checkpoint's boundary: resumable (an agent boundary) or observable (an environment state only).
Boundary = Literal["resumable", "observable"]


class ErrorRecord(TypedDict, total=False):
    """An exception as recorded: class name, module, message (scrubbed); a tool's exception also
    keeps its JSON ``args`` and instance ``attrs`` when it has them, an HTTP response error its
    ``status`` and own ``message`` in ``attrs``."""

    type: Required[str]
    module: Required[str]
    message: Required[str]
    args: list[Any]
    #: A tool's exception's ``args`` that have no JSON form, typed (:func:`forkpoint.values.encode`).
    typed_args: Any
    attrs: dict[str, Any]
    #: A tool's exception's instance attributes that have no JSON form (a tuple, a NaN, a datetime),
    #: each typed (:func:`forkpoint.values.encode`).
    typed_attrs: dict[str, Any]
    #: An ``OSError``'s number and text (``111``, ``"Connection refused"``), when it has them.
    errno: int
    strerror: str
    #: An HTTP exchange's failure while sending (``send``: connecting, writing the request), when the
    #: client library raises those elsewhere than failures while waiting for the answer.
    phase: str
    #: A tool's exception raised ``from`` another (its ``__cause__``), recorded the same way.
    cause: "ErrorRecord"
    #: A tool's exception raised while another was handled (its ``__context__``; with no cause),
    #: recorded the same way.
    context: "ErrorRecord"
    #: A tool's exception raised ``from None``: a traceback leaves out what was being handled.
    suppress_context: bool
    #: A tool's exception: the frames it was raised through below the tool call (a cause's: all of
    #: its own), each ``[file, line, function, end line, column, end column]``, outermost first; a
    #: replay raises it through frames that format the same (:mod:`forkpoint.capture.tracebacks`).
    frames: list[list[Any]]
    #: A tool's exception group (``ExceptionGroup``, a task group's): its own message, and the
    #: exceptions it holds, each recorded the same way.
    group_message: str
    exceptions: list["ErrorRecord"]
    #: pydantic's ``ValidationError`` (which has no constructor): its ``title`` and ``errors``, each
    #: ``{type, loc, msg, input, ctx}``, from which a replay makes it again.
    validation: dict[str, Any]
    #: A tool's cancellation that came from inside it (its own subtask), not from its caller.
    inside: bool
    #: A tool that left the process through ``os._exit(status)`` (type ``_exit``, module ``os``):
    #: the status; a replay leaves the same way.
    exit_status: int
    #: A tool that replaced the program through ``os.exec*`` (type ``_exec``, module ``os``): the
    #: file it ran and its arguments; a replay execs the same way, handing the replay on to it.
    exec: list[str]


class UnrecordedResult(TypedDict):
    """A tool result forkpoint could not record: the type that stopped it, and why in words."""

    type: str
    message: str


def error_record(exc: BaseException) -> ErrorRecord:
    """An exception as an :class:`ErrorRecord` (class name, module, message; the log scrubs it). An
    exception whose ``str()`` itself fails has that said as its message."""
    try:
        message = str(exc)
    except Exception as failed:  # (a __str__ reading an attribute its __init__ never set)
        message = f"<str() of this {type(exc).__qualname__} raised {type(failed).__name__}: {failed}>"
    return {"type": type(exc).__qualname__, "module": type(exc).__module__, "message": message}


#: Exception types that say the caller cancelled the call (asyncio, anyio on asyncio, trio).
_CANCELLED = frozenset({("asyncio.exceptions", "CancelledError"), ("trio", "Cancelled")})


def cancelled(error: ErrorRecord | None) -> bool:
    """True for a recorded error that says the call was cancelled (asyncio's or trio's)."""
    return error is not None and (error["module"], error["type"]) in _CANCELLED


class WithheldDigest(TypedDict):
    """What identifies a request body that was not stored (``capture.exchange.withheld_digest``):
    the SHA-256 (hex) of its bytes as sent, under their codings, gzip's timestamp read as zero; how
    many bytes; and the ``Content-Encoding`` codings they were under."""

    sha256: str
    length: int
    codings: list[str]


class HttpRequest(TypedDict):
    """An outgoing HTTP request as stored (scrubbed): headers as ``[name, value]`` pairs."""

    method: str
    url: str
    headers: list[list[str]]
    body_kind: BodyKind
    body: Any
    #: Why the body is not stored (it decodes past ``capture.decoding.DECODED_MAX``, and so could not
    #: be scrubbed).
    withheld: NotRequired[str]
    #: The digest of that body, which its match key covers in its place (``match.keyed_body``): a
    #: replay matches the same body sent again. A session recorded before had none: a replay stops
    #: at its call.
    withheld_digest: NotRequired[WithheldDigest]


class HttpResponse(TypedDict, total=False):
    """A response as stored: ``body`` for whole bodies, ``chunks`` (``[ms, str | bytes]``) for streams."""

    status: Required[int]
    reason: str
    http_version: str
    headers: list[list[str]]
    body_kind: BodyKind
    body: Any
    chunks: list[list[Any]]
    ended: Ended
    #: The ``Content-Encoding`` codings the stored body was decoded from (its header removed).
    decoded_from: list[str]
    #: True when the caller got the body under those codings (its library does not decode them): it
    #: was decoded only to be scrubbed, and a replay hands it over encoded again.
    decoded_to_scrub: bool
    #: The codings of ``decoded_from`` the caller got the body under, when its library took only the
    #: outer ones off (aiohttp, by one of two ``Content-Encoding`` lines); absent: all of them.
    handed_under: list[str]
    #: The ``Content-Encoding`` header lines of a body in ``decoded_from``, as they came, when they
    #: were several (``gzip`` twice); absent: one line, the codings comma-separated.
    encoding_lines: list[str]
    #: The ``Content-Length`` the response came with (null: none); see ``capture.exchange.said_length``.
    content_length: int | None
    #: How a JSON body's text was laid out, when not compactly (``capture.decoding.json_layout``).
    json_layout: dict[str, Any]
    #: Why the body is not stored (:attr:`HttpRequest.withheld`).
    withheld: str


class ToolCallSummary(TypedDict):
    """One tool call a model response asks for."""

    id: str | None
    name: str | None
    arguments: str | None


class Usage(TypedDict, total=False):
    """Token counts of one model call."""

    input_tokens: int | None
    output_tokens: int | None
    cache_read_input_tokens: int | None
    cache_creation_input_tokens: int | None


class Summary(TypedDict):
    """The provider-aware reading of a model call (:func:`forkpoint.providers.summarize`): always
    exactly these keys, ``None`` when unknown. Derived when a session is read, never stored.
    ``kind`` says what the exchange is: ``model`` (a provider recognized it), ``mcp``,
    ``telemetry`` or plain ``http`` (:mod:`forkpoint.providers.kinds`)."""

    kind: str
    provider: str
    api: str
    host: str | None
    model: str | None
    response_model: str | None
    temperature: float | None
    top_p: float | None
    seed: int | None
    max_tokens: int | None
    stream: bool
    n_messages: int | None
    n_tools: int | None
    tool_calls: list[ToolCallSummary] | None
    usage: Usage | None
    stop_reason: str | None
    error: str | None
    #: Tools the provider ran itself (Anthropic ``server_tool_use``: web search, code execution).
    server_tool_calls: list[ToolCallSummary] | None


class _Common(TypedDict, total=False):
    """Fields the log and the runtimes give every event."""

    seq: int
    ts: str
    prev: str
    hash: str
    span_id: str
    parent_span_id: str
    pid: int
    #: A call's: the name of the asyncio task that made it (:func:`forkpoint.runtime.caller`;
    #: absent outside any task).
    caller: str
    duration_ms: float | None
    #: What-if sessions: where the answer came from, and the parent's event it answers for.
    source: Source
    recorded_seq: int
    #: The spec a call's ``key`` was computed under, when the header's ``keys`` is another
    #: (:func:`forkpoint.match.key_spec`; None: unknown).
    keys: str | None


class ModelCallEvent(_Common, total=False):
    """One HTTP exchange with a model provider (or another HTTP peer)."""

    type: Required[Literal["model_call"]]
    request: Required[HttpRequest]
    response: HttpResponse | None
    error: ErrorRecord
    #: The order in which this process's runtime started the call (identical calls replay in it).
    sent: int
    key: str
    summary: Summary


class McpCall(TypedDict):
    """Where an MCP request went (:mod:`forkpoint.integrations.mcp`): the server's own name (from
    its ``initialize`` answer; None before it) and the JSON-RPC method (``tools/call``,
    ``initialize``, ``tools/list``…)."""

    server: str | None
    method: str
    #: The transport the session was opened on: a stdio server's command line, another's URL
    #: (identical requests to two servers are told apart by it on replay).
    via: NotRequired[str]
    #: What the server sent the agent while this request was in flight, in order: its notifications
    #: and requests as ``{"method", "params"}`` (a request with its ``id``; a progress notification
    #: that went to the request's progress callback with ``"to": "progress_callback"``). A replay
    #: hands each to what received it again, before the result. ``"beside": true``: it came while
    #: other requests were in flight; ``"shared": true``: which of them it came for is not known.
    received: NotRequired[list[dict[str, Any]]]


class Emitted(TypedDict, total=False):
    """One thing a tool's body emitted: ``to`` names the channel (``"stream_writer"``,
    ``"custom_event"``, with its ``name``); ``value`` is stored as a result is
    (:func:`forkpoint.values.encode`), or ``unrecorded`` says why it could not be."""

    to: Required[str]
    name: str
    value: Any
    unrecorded: UnrecordedResult
    #: Where below the tool's own run it was emitted: a LangGraph subgraph the tool ran, as the
    #: end of its checkpoint namespace after the tool's (``"|node:<task id>"``).
    within: str
    #: A custom event dispatched by a run inside the tool's (a chain, a subgraph it ran): a replay
    #: dispatches it from the tool's own run, with that run's ids, tags and metadata (said).
    inner: bool


class ToolInstance(TypedDict):
    """Which object (a bound method's ``self``) made a tool call, of the objects whose method is
    that function: kept once more than one of them made calls in the run (one object's calls are
    recorded without it), so that a replay serves each object its own calls."""

    #: The object's ordinal, in the order of the objects' first calls: calls without one are the 1st's (0).
    n: int
    #: A short hash of the object's plain attributes (str, int, float, bool, None), scrubbed, as
    #: they were at its first call of any method tool: what tells it apart in another run.
    fp: str
    #: On the first call of the second object: the first one's ``fp``.
    first: NotRequired[str]
    #: True when no other object of its ``fp`` lived at its first call (a loop making one for each
    #: call): its ordinal is then the order they were made in, not a guess among objects alive
    #: together. Kept only then, and not on the first object's calls, whose ordinal always is.
    alone: NotRequired[bool]


class ToolCallEvent(_Common, total=False):
    """One call of a function the agent uses as a tool: arguments in, result or exception out.
    ``mcp`` is there for a request to an MCP server."""

    type: Required[Literal["tool_call"]]
    tool: Required[str]
    args: Required[dict[str, Any]]
    #: The return value (:func:`forkpoint.values.encode`); a generator's items, end and return value.
    result: Any
    error: ErrorRecord
    #: Instead of ``result``: why the result could not be recorded (the call ran, unrecorded).
    unrecorded: UnrecordedResult
    sent: int
    #: When the call finished, on the counter of ``sent`` (parallel results replay in this order).
    finished: int
    #: Made in a thread started while recording: the last ``sent`` given when it was started (a
    #: call whose ``finished`` is no later ended before it began: :meth:`forkpoint.replay.Replayer._raced`).
    born: int
    #: The id the model gave the call in its answer (a framework's ``tool_call_id``): identical
    #: calls are served to the call of their id first (:meth:`forkpoint.replay.Replayer.take_tool_call`).
    call_id: str
    #: The ``module:qualname`` of the function a ``@forkpoint.tool`` (``--tool``) wrapper ran: two
    #: functions recorded under one name, with identical arguments, are each served their own calls
    #: first (:meth:`forkpoint.replay.Replayer.take_tool_call`).
    function: str
    #: The object the method ``function`` was called on, once more than one was (:class:`ToolInstance`).
    instance: ToolInstance
    key: str
    mcp: McpCall
    #: What the tool's body emitted besides its result while it ran, in order, through a channel
    #: of the framework's (LangGraph's stream writer, LangChain's custom events): emitted again,
    #: in this order, when a replay serves the call (:func:`forkpoint.capture.tools.emission`).
    emitted: list[Emitted]


#: Every ``fn`` of a :class:`ValueEvent`. A session's header names those its recording read
#: (``deterministic_reads``); a replay serves those, and lets the agent read the others for real.
VALUE_FNS = (
    "time.time", "time.time_ns", "time.localtime", "time.gmtime", "datetime.now", "datetime.utcnow",
    "datetime.today", "date.today", "uuid.uuid4", "random.random", "random.getrandbits",
    "secrets.token_urlsafe",
)  # fmt: skip
#: Those of a header without ``deterministic_reads`` (recorded by forkpoint before 2026-12-04,
#: which read ``date.today()``, ``time.time_ns()`` and the local time for real).
FIRST_VALUE_FNS = (
    "time.time", "datetime.now", "datetime.utcnow", "datetime.today", "uuid.uuid4", "random.random",
    "random.getrandbits",
)  # fmt: skip


class ValueEvent(_Common, total=False):
    """A value the agent's own code read from the clock, ``uuid`` or ``random`` while recording with
    ``deterministic`` (:mod:`forkpoint.capture.clock`): served back in the same order on replay.

    ``fn`` names what was read (``"time.time"``, ``"time.time_ns"``, ``"time.localtime"``,
    ``"time.gmtime"``, ``"datetime.now"``, ``"datetime.utcnow"``, ``"datetime.today"``,
    ``"date.today"``, ``"uuid.uuid4"``, ``"random.random"``, ``"random.getrandbits"``,
    ``"secrets.token_urlsafe"``: a tool call id strands' Gemini model made up); ``args``
    its arguments when they decide the value (``[k]`` of ``getrandbits``); ``value`` its JSON form
    (a number, an ISO 8601 string, a struct_time's 9 fields then its zone name and UTC offset, a
    uuid string, hex digits)."""

    type: Required[Literal["value"]]
    fn: Required[str]
    args: list[Any]
    value: Any
    sent: int
    key: str


class CheckpointEvent(_Common, total=False):
    """The state a coherent continuation needs (``docs/format.md``, :mod:`forkpoint.checkpoint`)."""

    type: Required[Literal["checkpoint"]]
    boundary: Boundary
    reason: str
    turn: int
    forkpoint: str
    cwd: str
    source: Any
    workspace: dict[str, Any] | None
    context: dict[str, Any] | None
    context_digest: str | None
    referenced: list[str]
    mentioned_absent: list[str]
    uncaptured: list[str]
    #: ``{"type", "message"}`` when the checkpoint could not be taken (it then holds no state).
    error: dict[str, str]


class NoteEvent(_Common, total=False):
    """Free text plus JSON data (:func:`forkpoint.note`)."""

    type: Required[Literal["note"]]
    text: str
    data: dict[str, Any]


class EndDivergence(TypedDict, total=False):
    """Where a what-if run diverged, as its session's ``end`` keeps it: the call of this run
    (``kind``, ``position``, and ``seq`` in this session when it was written), the parent's call it
    was expected to be (``parent_seq``), why, and the first differences (recorded → actual)."""

    kind: Required[str]
    position: Required[int]
    seq: int | None
    parent_seq: int | None
    #: The parent's call ``diff`` compares with, as the report's: not ``parent_seq`` when several
    #: unused calls of one tool or endpoint were left (the nearest of them).
    diff_against: int
    label: str
    reason: str
    diff: list[dict[str, Any]]
    #: What an HTTP exchange that is no model call is (``"http"``, ``"mcp"``), as the report's.
    call: str
    #: A model's call after exchanges that were none: its place among model calls, as the report's.
    model_position: int


class EndEvent(_Common, total=False):
    """How the recorded run ended."""

    type: Required[Literal["end"]]
    exit_code: int | None
    reason: str | None
    #: The exceptions that ended the program (or its processes) uncaught.
    uncaught: list[ErrorRecord]
    #: A what-if run: where it first went another way than its parent (:class:`EndDivergence`).
    divergence: EndDivergence | None
    #: Why the recording stopped before the run ended (a write failed, e.g. a full disk): events
    #: after that point are missing, although the run went on.
    incomplete: str
    #: The tools the model asked for of which no call was recorded, and how many times it asked for
    #: each: if the program ran them, a replay runs them for real (and says so).
    unrecorded_tools: dict[str, int]
    #: The tools of which the program answered more different asks than calls of them were recorded,
    #: and how many asks more: another function of the program may answer to that name, which a
    #: replay runs for real (:meth:`forkpoint.record.Lacks.fewer_calls`).
    fewer_calls: dict[str, int]
    #: The ``model_call`` events that are no model's call, by kind (``telemetry``, ``mcp``, plain
    #: ``http``: :mod:`forkpoint.providers.kinds`), so a listing counts model calls without reading them.
    other_calls: dict[str, int]
    #: The ``tool_call`` events that are requests of an MCP session, no tool's call
    #: (:func:`mcp_session_request`), so a listing counts tool calls without reading them.
    mcp_requests: int


class OutcomeEvent(_Common, total=False):
    """What the run achieved, measured after it ended by a command the user names (``--outcome CMD``):
    run in the run's directory, ``passed`` when it exited 0, None when it could not run (it could not
    start, or the shell did not find it or could not execute it: 127, 126), which measured nothing.
    ``exit_code`` is None when it could not start or timed out, and ``reason`` says why; ``output`` is the end of what it printed (stdout
    and stderr, at most :data:`forkpoint.outcome.OUTPUT_KEPT` characters). Written before ``end``."""

    type: Required[Literal["outcome"]]
    command: Required[str]
    passed: Required[bool | None]
    exit_code: int | None
    reason: str | None
    output: str
    #: Tool calls of the run served from the recording, their bodies not run (a replay, not a
    #: fork's continuation): what they changed on disk is not where the outcome was measured.
    served_tools: int


#: Any event of a session log.
Event = ModelCallEvent | ToolCallEvent | ValueEvent | CheckpointEvent | NoteEvent | OutcomeEvent | EndEvent
#: The kinds of call a replay serves (a value read with ``deterministic`` is served like a call).
CallKind = Literal["model_call", "tool_call", "value"]
Call = ModelCallEvent | ToolCallEvent
#: What a replay serves from a session.
Served = ModelCallEvent | ToolCallEvent | ValueEvent


#: The largest ``PYTHONHASHSEED`` Python starts with (a header's ``hash_seed`` is 0 to this).
MAX_HASH_SEED = 4_294_967_295


class Header(TypedDict, total=False):
    """Line 1 of a session log."""

    type: Required[Literal["header"]]
    format: Required[str]
    version: Required[int]
    session_id: Required[str]
    created: str
    redaction: dict[str, Any]
    name: str | None
    argv: list[str]
    cwd: str
    tags: dict[str, str | None]
    versions: dict[str, str]
    git: dict[str, Any] | None
    parent: dict[str, Any] | None
    span_id: str
    platform: str
    #: The recording's time zone (``$TZ`` or the system's: ``America/New_York``), when known: a
    #: replay runs the program in it.
    timezone: str
    #: The ``PYTHONHASHSEED`` a command recorded by ``forkpoint record`` ran with: a replay runs with it.
    hash_seed: int
    tools: list[str]
    #: The agent's own clock and randomness recorded: True, or the modules that count as the agent's.
    deterministic: bool | list[str]
    #: Match settings given to the API or the pytest plugin beyond the configuration's: ``{"ignore": [...]}``.
    match: dict[str, Any]
    workspace: dict[str, Any] | None
    replay: dict[str, Any]
    imported_from: dict[str, Any]
    scrubbed: list[dict[str, Any]]
    #: An encrypted session's ``{"scheme": "age", "recipients": ["age1…", …]}`` (docs/security.md).
    encryption: dict[str, Any]
    hash: str


def _texts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_instance(value: Any) -> bool:
    """Whether ``value`` has the shape of a :class:`ToolInstance`."""
    return (
        isinstance(value, dict)
        and _whole(value.get("n"))
        and value["n"] >= 0
        and isinstance(value.get("fp"), str)
        and isinstance(value.get("first", ""), str)
        and isinstance(value.get("alone", True), bool)
    )


_TEXT: tuple[Callable[[Any], bool], str] = (lambda v: isinstance(v, str), "text")
_OBJECT: tuple[Callable[[Any], bool], str] = (lambda v: isinstance(v, dict), "an object")
_OBJECT_OR_NULL: tuple[Callable[[Any], bool], str] = (
    lambda v: v is None or isinstance(v, dict),
    "an object or null",
)

#: What each field of a :class:`Header` must be when present, and that in words. A hand-edited or
#: forged header (``tags: 5``, ``argv: "python agent.py"``) made show, diff, export and check fail
#: with a traceback, and replay and make-test run or write something else than the recording's.
_HEADER_SHAPES: dict[str, tuple[Callable[[Any], bool], str]] = {
    **dict.fromkeys(("created", "cwd", "span_id", "platform", "timezone"), _TEXT),
    **dict.fromkeys(
        ("tags", "versions", "match", "replay", "imported_from", "encryption", "redaction"), _OBJECT
    ),
    **dict.fromkeys(("git", "parent", "workspace"), _OBJECT_OR_NULL),
    "name": (lambda v: v is None or isinstance(v, str), "text or null"),
    "argv": (_texts, "a list of texts"),
    "tools": (_texts, "a list of texts"),
    "hash_seed": (_whole, "a whole number"),
    "deterministic": (lambda v: isinstance(v, bool) or _texts(v), "true, false or a list of module names"),
    "scrubbed": (lambda v: isinstance(v, list), "a list"),
}


def header_problem(head: Mapping[str, Any]) -> str | None:
    """What is wrong with the fields of a session header (or an encrypted header's sealed part)
    that every reader relies on, in words (``"tags is 5, not an object"``), or None."""
    for name, (fits, what) in _HEADER_SHAPES.items():
        if name in head and not fits(head[name]):
            return f"{name} is {head[name]!r:.80}, not {what}"
    return None


class Expected(TypedDict):
    """The recorded call a divergence report points at."""

    seq: int | None
    label: str


class Nearest(Expected):
    similarity: float


class DivergenceReport(TypedDict, total=False):
    """Where and how a replay left the recording (:class:`forkpoint.errors.Divergence`)."""

    kind: Required[CallKind]
    position: Required[int]
    #: A model's call after HTTP exchanges of this run that were none (plain HTTP, MCP): its place
    #: among the run's model calls (``position`` counts those exchanges too).
    model_position: int
    reason: Required[str]
    endpoint: str
    name: str
    key: str | None
    actual: Any
    expected: Expected | None
    nearest: Nearest | None
    diff: list[dict[str, Any]]
    #: The seq of the recorded call ``diff`` compares with: the expected one, or the nearest of
    #: several unused calls of one tool or endpoint (a batch asked in any order).
    diff_against: int
    #: Ignore rules that would make the call match, when every difference looks volatile.
    suggest: list[dict[str, str]]
    #: The session was recorded without ``deterministic``: the report says what it would do.
    hint_deterministic: bool
    #: The session was recorded ``deterministic`` all the same: True (the program's own code), or
    #: the modules it named; the report says how to name the module that read it.
    hint_deterministic_modules: bool | list[str]
    #: With either hint: the top-level modules on the call's stack that the recording's (or
    #: ``--deterministic``'s) choice leaves out, and the selection naming them too.
    left_out_modules: list[str]
    deterministic_selection: list[str]
    #: A date and time of the recorded call, among the differences, from before the session began
    #: (``stamp``, and the session's ``started``): read before forkpoint recorded (at import, at
    #: pytest's collection), if the program read it.
    read_before_recording: dict[str, str]
    #: How many tool calls ran live before this call: the value may be one's (no deterministic hint).
    after_live_tools: int
    #: The overrides applied before this call (their specs): no ``suggest`` then.
    after_overrides: list[str]
    #: Configured ignore rules about this call that took nothing out of either request (with their
    #: ``source``), said beside ``suggest``: a mistyped path or regex.
    inert: list[dict[str, str]]
    #: fifo drift: the recorded call served anyway.
    served_seq: int
    #: What an HTTP exchange that is no model call is (:func:`forkpoint.providers.classify`):
    #: ``http`` (plain HTTP) or ``mcp``.
    call: str
    #: ``[name, recorded, now]`` of the header's packages whose installed version changed since
    #: the recording (``now`` ``""``: no longer installed); model calls only.
    versions: list[list[str]]
    #: The tools that changed state in place when recorded, before the call expected here (their
    #: notes' ``changed_in_place``: ``tool``, ``changed``, ``beside``): a replay, not running their
    #: bodies, did not change it, which may be why the call differs.
    changed_in_place: list[dict[str, Any]]
    #: Groups of identical calls answered differently when recorded, served before this call to
    #: callers racing each other (their seqs: :func:`forkpoint.replay.report.ambiguous`): a caller
    #: may have got another's answer, which may be why the call differs.
    raced: list[list[int]]
    #: Where the agent's own code made the call: ``" at FILE:LINE (FUNC)"``
    #: (:func:`forkpoint.callsite.agent_call_site`), when a frame of it is on the stack.
    site: str


class OverrideState(TypedDict):
    spec: str
    target: str
    field: str
    value: Any
    seq: int
    applied: bool
    #: Why the value given could not be handed to the program (it got a divergence instead).
    refused: NotRequired[str]


#: How a replay of a recorded run compares with it (:func:`forkpoint.replay.verdict`).
VerdictStatus = Literal["reproduced", "diverged", "ended differently", "error"]


class Verdict(TypedDict):
    """A replay's verdict: ``status``; ``detail`` in words; for a divergence, the ``call`` where it
    happened (``model call #2 (POST /v1/chat/completions)``) and the first JSON ``path`` that differs."""

    status: VerdictStatus
    detail: str
    call: str | None
    path: str | None


class ReplayReport(TypedDict):
    """The outcome of a replay (``forkpoint replay --report``, ``Replayer.report()``)."""

    session: str
    session_path: str
    reproduced: bool
    processes: int
    process_started: float
    served: list[int]
    unserved: list[int]
    matched: int
    recorded: int
    unused: list[int]
    ended_early: bool
    divergence: DivergenceReport | None
    policy: str
    sources: dict[str, str]
    drift: list[DivergenceReport]
    #: The calls the replay answered with a :class:`~forkpoint.Divergence` instead of a recorded
    #: answer (under ``fifo``: none of that endpoint or tool was left to serve), each as its report.
    unanswered: NotRequired[list[DivergenceReport]]
    overrides: list[OverrideState]
    live_calls: dict[str, int]
    child_session: str | None
    live_from: int | None
    #: Each destination the replay kept from the network, once, in the order first tried (``host:port``,
    #: ``… (udp)``, ``name (name lookup)``): the Python guard's refusals and what the kernel's namespace saw.
    network_blocked: list[str]
    #: How many attempts were made at each of them (a client's retries are attempts at one).
    network_attempts: dict[str, int]
    #: Requests a framework answered from its own cache of model answers (DSPy's), by framework:
    #: they never asked for the recorded calls that answered them.
    answered_from_cache: NotRequired[dict[str, int]]
    #: What kept the run offline (set by the command line's replay): ``network namespace``,
    #: ``python guard`` (the kernel refused a namespace), or ``none (live calls)``.
    sandbox: NotRequired[str]
    #: Telemetry and MCP session calls: ``{"recorded", "served", "answered": [endpoint, …]}``.
    aside: dict[str, Any]
    #: Plain HTTP calls served a recording that differed only in ids (not with ``strict``).
    id_drift: list[DivergenceReport]
    strict: bool


def is_model_call(event: Mapping[str, Any]) -> TypeGuard[ModelCallEvent]:
    """True for a ``model_call`` event (narrows its type)."""
    return event.get("type") == "model_call"


def is_tool_call(event: Mapping[str, Any]) -> TypeGuard[ToolCallEvent]:
    """True for a ``tool_call`` event (narrows its type)."""
    return event.get("type") == "tool_call"


def _pairs_of(value: Any, first: tuple[type, ...], second: tuple[type, ...]) -> bool:
    """Whether ``value`` is a list of two-item lists (or tuples) of those types."""
    if not isinstance(value, list):
        return False
    # Every event's headers and chunks are looked at on load: first by the exact types JSON gives,
    # in C (no bytecode per pair); a list that fails that (a subclass, a bool, a bad pair) is read
    # pair by pair below.
    if set(map(type, value)) <= _PAIR_SET and set(map(len, value)) <= _TWO:
        firsts, seconds = zip(*value, strict=True) if value else ((), ())
        if set(map(type, firsts)) <= set(first) and set(map(type, seconds)) <= set(second):
            return True
    for p in value:
        if not (
            isinstance(p, _PAIR)
            and len(p) == 2
            and isinstance(p[0], first)
            and not isinstance(p[0], bool)
            and isinstance(p[1], second)
        ):
            return False
    return True


_PAIR = (list, tuple)
_PAIR_SET, _TWO = frozenset(_PAIR), frozenset({2})


def _is_error(value: Any) -> bool:
    """Whether ``value`` has the fields of an :class:`ErrorRecord` that every reader shows."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("type"), str)
        and isinstance(value.get("message"), str)
        and isinstance(value.get("module", ""), str)
    )


#: The ``type`` of every event a session log holds (the header's is ``header``).
EVENT_TYPES = frozenset({"model_call", "tool_call", "value", "checkpoint", "note", "outcome", "end"})


def envelope_problem(event: Mapping[str, Any]) -> str | None:
    """What is wrong with an event's type and the fields around a call's recorded values (its
    ``request`` URL and headers, its response's headers and stream chunks, its ``duration_ms`` and
    ``error``, a tool call's ``tool`` and ``mcp``, an end's ``exit_code`` and ``uncaught``), in
    words, or None when they have the shapes every reader relies on. A recording always has them;
    a hand-edited log may not, and ``show``, ``diff``, make-test and the export crashed on it with a
    traceback instead of naming the line."""
    kind = event.get("type")
    if kind not in EVENT_TYPES:
        # (``show`` left such an event out of the timeline without a word; a newer format that
        # adds a type has a newer version, which :func:`forkpoint.log.check_header` refuses)
        return f"its type {kind!r:.80} is no event type of a session log"
    ms = event.get("duration_ms")
    if ms is not None and (isinstance(ms, bool) or not isinstance(ms, int | float)):
        return f"its duration_ms is {ms!r:.80}, not a number"
    if kind == "end":
        code = event.get("exit_code")
        if code is not None and not _whole(code):
            return f"its exit_code is {code!r:.80}, not a whole number"
        uncaught = event.get("uncaught")
        if uncaught is not None and not (isinstance(uncaught, list) and all(map(_is_error, uncaught))):
            return "its uncaught is not a list of exceptions (each an object with a type and a message)"
        return None
    if kind not in ("model_call", "tool_call"):
        return None
    if event.get("error") is not None and not _is_error(event["error"]):
        return "its error is not an exception (an object with a type and a message)"
    if kind == "tool_call":
        if not isinstance(event.get("tool"), str):
            return f"its tool is {event.get('tool')!r}, not a name"
        if event.get("mcp") is not None and not isinstance(event.get("mcp"), dict):
            return "its mcp is not an object"
        if event.get("instance") is not None and not _is_instance(event["instance"]):
            # (a replay took an ordinal "1" for the first object's, and served it that one's calls)
            return (
                f"its instance is not an object with an ordinal n (a whole number, 0 or more), a "
                f"fingerprint fp (text) and, if any, alone (true or false): {event['instance']!r:.80}"
            )
        return None
    request, response = event.get("request"), event.get("response")
    if not isinstance(request, dict) or not isinstance(request.get("url"), str):
        return "its request has no url"
    if request.get("headers") is not None and not _pairs_of(request["headers"], (str,), (str,)):
        return "its request's headers are not [name, value] pairs of text"
    if response is None:
        return None
    if not isinstance(response, dict):
        return "its response is not an object"
    if response.get("headers") is not None and not _pairs_of(response["headers"], (str,), (str,)):
        return "its response's headers are not [name, value] pairs of text"
    if response.get("chunks") is not None and not _pairs_of(response["chunks"], (int, float), (str, bytes)):
        return "its response's chunks are not [ms, text] pairs"
    return None


def mcp_session_request(event: Mapping[str, Any]) -> bool:
    """Whether a tool call event is a request of an MCP session other than a tool's call
    (``mcp:initialize``, ``mcp:tools/list``…): MCP session traffic, no tool call (by its method:
    a tool's own name may start with ``mcp:``)."""
    mcp = event.get("mcp")
    return isinstance(mcp, Mapping) and mcp.get("method") != "tools/call"


def mcp_tool_error(event: Mapping[str, Any]) -> str | None:
    """The text of an MCP tool's error answer (a ``tools/call`` whose ``CallToolResult`` has
    ``isError``: the tool failed, but no exception reached the agent), or None for any other call."""
    mcp, result = event.get("mcp"), event.get("result")
    if not isinstance(mcp, Mapping) or mcp.get("method") != "tools/call":
        return None
    if not isinstance(result, Mapping) or result.get("isError") is not True:
        return None
    blocks = result.get("content")
    blocks = blocks if isinstance(blocks, list) else []
    return " ".join(str(b.get("text")) for b in blocks if isinstance(b, Mapping) and b.get("type") == "text")


def tool_spans(events: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The span ids of the tool calls among ``events``."""
    return frozenset(str(e["span_id"]) for e in events if e.get("type") == "tool_call" and e.get("span_id"))


def in_tool(event: Mapping[str, Any], spans: frozenset[str]) -> bool:
    """Whether ``event`` happened while a recorded tool call ran (its parent span is the tool's):
    it belongs to that tool call, and a replay, which does not run the tool, does not expect it."""
    return event.get("parent_span_id") in spans


def retries(event: Mapping[str, Any], previous: Mapping[str, Any] | None) -> bool:
    """Whether the model call ``event`` retries ``previous``, the model call before it (an SDK's retry,
    which ``show`` and the viewer count in the turn it retries): ``previous`` got no answer or an
    error status, and ``event`` asked the same (one match key)."""
    if previous is None or event.get("key") is None or event.get("key") != previous.get("key"):
        return False
    status = (previous.get("response") or {}).get("status")
    return previous.get("error") is not None or not isinstance(status, int) or status >= 400


_E = TypeVar("_E", bound=Mapping[str, Any])
_K = TypeVar("_K")


def process_of(event: Mapping[str, Any]) -> Any:
    """The process that logged ``event`` (its ``pid``), as a key to group calls by: a session edited
    or made by another tool may hold any JSON there (``[1]``, ``{}``), which is no dict key."""
    pid = event.get("pid")
    return pid if pid is None or isinstance(pid, int | str) else repr(pid)


def in_start_order(events: Sequence[_E]) -> list[_E]:
    """``events`` with each process's model and tool calls in the order they started (``sent``)
    rather than in the order they ended, which is the order they were written: a tool the program
    ran while it still read a streamed answer ended, so was written, before the model call that
    asked for it. Every other event keeps its place; so does each process's set of call places."""
    places: dict[Any, list[int]] = {}
    for i, e in enumerate(events):
        if e.get("type") in ("model_call", "tool_call") and isinstance(e.get("sent"), int):
            places.setdefault(process_of(e), []).append(i)
    out = list(events)
    for at in places.values():
        for place, i in zip(at, sorted(at, key=lambda i: events[i]["sent"]), strict=True):
            out[place] = events[i]
    return out


#: What an HTTP exchange that is no model call is, said after its place (``report["call"]``).
_EXCHANGE_KINDS = {"http": ", a plain HTTP call", "mcp": ", a call to an MCP server"}


def divergence_place(div: Mapping[str, Any]) -> tuple[str, str]:
    """Where a divergence happened, said in two parts (a caller puts "of this run" between them):
    its call by its ordinal among this run's calls of its kind (``1st model call``, ``2nd tool
    call``), and what more there is to say of it: an HTTP exchange that is no model call, counted
    among them (``2nd HTTP exchange``, ``", a plain HTTP call"``); a model's call after such
    exchanges (a login, an MCP server), by its own count (``model_position``) and then by theirs
    (``1st model call``, ``", its 2nd HTTP exchange"``)."""
    position = int(div.get("position") or 0)
    said = _EXCHANGE_KINDS.get(str(div.get("call")))
    if said:
        return f"{ordinal(position)} HTTP exchange", said
    kind = str(div.get("kind", "call")).replace("_", " ")
    own = div.get("model_position")
    if isinstance(own, int):
        return f"{ordinal(own)} {kind}", f", its {ordinal(position)} HTTP exchange"
    return f"{ordinal(position)} {kind}", ""


def divergence_call(div: Mapping[str, Any]) -> str:
    """A divergence's call by kind and number: ``model call #2``, or ``model call #1 (HTTP exchange
    #2)`` when HTTP exchanges that were no model's call came before it (``model_position``), or
    ``HTTP exchange #3, a plain HTTP call`` for one of those (it was called a model call)."""
    if str(div.get("call")) in _EXCHANGE_KINDS:
        return f"HTTP exchange #{div.get('position')}{_EXCHANGE_KINDS[str(div.get('call'))]}"
    said = f"{str(div.get('kind', 'call')).replace('_', ' ')} #"
    if isinstance(div.get("model_position"), int):
        return f"{said}{div['model_position']} (HTTP exchange #{div.get('position')})"
    return f"{said}{div.get('position')}"


def endpoint(event: Mapping[str, Any]) -> str:
    """The endpoint a call went to: ``"POST /v1/chat/completions"`` for a model call (method and URL
    path; host and query left out, as in the match key), the tool's name for a tool call, the
    function for a value read (``time.time``)."""
    if event.get("type") == "tool_call":
        return str(event.get("tool"))
    if event.get("type") == "value":
        return str(event.get("fn"))
    req = event.get("request") or {}
    return f"{str(req.get('method', '')).upper()} {urlsplit(str(req.get('url', ''))).path}"


def withheld_bodies(event: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The bodies of a recorded model call that were not stored, as ``(part, why)``: ``request``,
    ``response`` (:attr:`HttpRequest.withheld`)."""
    return [
        (part, str(why))
        for part in ("request", "response")
        if (why := (event.get(part) or {}).get("withheld"))
    ]


def tool_matches(recorded: str, requested: Any) -> bool:
    """True when a recorded tool call's name is the tool a model asked for: the same name, or a
    ``--tool module:Class.method`` target's last part (``method``)."""
    if not isinstance(requested, str) or not requested:
        return False
    return recorded == requested or recorded.replace(":", ".").rsplit(".", 1)[-1] == requested


def answer_tool(name: Any) -> bool:
    """Whether ``name`` is a tool by which a framework takes the run's answer, ending it:
    smolagents' ``final_answer`` (whose result is the answer), pydantic-ai's output tools
    (``final_result``, and ``final_result_<type>`` for one of several output types: no function
    answers them, the model's arguments are the output)."""
    return isinstance(name, str) and (
        name in ("final_answer", "final_result") or name.startswith("final_result_")
    )


def answered_call(tool: str, args: Any, calls: Sequence[_E]) -> _E | None:
    """Of the tool calls a model asked for (``{"id", "name", "arguments"}``, the arguments as JSON
    text), the one a recorded call of ``tool`` with ``args`` (plain JSON) answers: parallel calls of
    one tool finish, and are logged, in any order, so the call with these arguments, else one whose
    arguments these hold (the recorded ones have the tool's defaults filled in), else the first of
    that name; None when none has that name."""
    from .canonical import maybe_json  # (only a session's reader gets here: not at every recording's import)

    named = [c for c in calls if tool_matches(tool, c.get("name"))]
    asked = [(c, maybe_json(c.get("arguments"))) for c in named]
    return (
        next((c for c, a in asked if a == args), None)
        or next((c for c, a in asked if _given_in(a, args)), None)
        or next(iter(named), None)
    )


def asking_call(
    event: Mapping[str, Any], args: Any, pending: Sequence[tuple[_K, list[_E]]]
) -> tuple[_K, _E] | None:
    """Of the model calls whose tool calls are not all answered yet (``pending``, in the order they
    were made: each as what the caller knows it by and the tool calls it asked for, as
    :func:`answered_call` reads them), the one the recorded tool call ``event`` (with ``args``,
    plain JSON) answers, and the call it asked for: the one with the id the tool call was recorded
    with (``call_id``), else the latest with a call it answers (:func:`answered_call`: concurrent
    runs asking the same tool are told apart by the id only). None when none has."""
    tool, call_id = str(event.get("tool")), event.get("call_id")
    if isinstance(call_id, str):
        for key, calls in reversed(pending):
            hit = next(
                (c for c in calls if c.get("id") == call_id and tool_matches(tool, c.get("name"))), None
            )
            if hit is not None:
                return key, hit
    for key, calls in reversed(pending):
        hit = answered_call(tool, args, calls)
        if hit is not None:
            return key, hit
    return None


def _given_in(asked: Any, recorded: Any) -> bool:
    """Whether every argument the model gave is in the recorded call with the same value."""
    if not isinstance(asked, dict) or not isinstance(recorded, dict):
        return False
    return all(k in recorded and recorded[k] == v for k, v in asked.items())


def iso_time(dt: datetime) -> str:
    """An aware time as the log writes times: UTC, ISO 8601 with milliseconds, e.g.
    ``2026-11-29T18:10:29.123Z``."""
    return dt.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def parse_time(ts: object) -> datetime | None:
    """A time the log holds (ISO 8601 with ``Z`` or an offset) as an aware datetime; None when it is
    not one (a time without a zone is not one)."""
    if not isinstance(ts, str):
        return None
    try:
        dt = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None
    return dt if dt.tzinfo is not None else None


#: The id of the session being recorded (or replayed) in the environment of every process of it
#: (``forkpoint record`` and ``forkpoint.record()``): to log it, or link it from a PR or a deploy.
SESSION_ID_VAR = "FORKPOINT_SESSION_ID"


def now_iso() -> str:
    """The current UTC time as ISO 8601 with milliseconds, e.g. ``2026-11-29T18:10:29.123Z``."""
    return iso_time(datetime.now(UTC))


def new_session_id() -> str:
    """A new session id: UTC time then 6 random hex digits, e.g. ``20261129-181029-3f9a1c``.

    Ids sort by creation time, and any unique prefix names a session on the command line.
    """
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + os.urandom(3).hex()


def new_span_id() -> str:
    """A random 64-bit span id as 16 hex digits (the OpenTelemetry span id shape)."""
    return os.urandom(8).hex()
