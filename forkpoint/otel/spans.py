"""A session as the spans of one trace: ids, times, parentage (:class:`TraceBuilder`, :func:`plan`).

The builder takes the events of a session one at a time, in ``seq`` order, and hands back each
call's span as soon as its event is read, and the root span when told the session is over: the
same code serves an export after the fact (:func:`stream`) and a live export that follows a
recording (:mod:`forkpoint.otel.live`), so both send the same trace.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import providers
from ..canonical import maybe_json
from ..errors import SessionError
from ..events import answer_tool, asking_call, mcp_tool_error, parse_time
from ..log import Session, to_json
from . import attributes


@dataclass
class SpanEvent:
    """A span event: name, time (ns since the epoch) and attributes."""

    name: str
    time_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass
class SpanPlan:
    """One span to emit. ``kind`` is ``internal`` or ``client``; ``status`` ``ok`` / ``unset`` /
    ``error`` (with ``status_message``); ``links`` are (trace id, span id) pairs."""

    span_id: int
    parent_id: int | None
    name: str
    kind: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    events: list[SpanEvent] = field(default_factory=list)
    status: str = "unset"
    status_message: str | None = None
    seq: int | None = None
    links: list[tuple[int, int]] = field(default_factory=list)


# --------------------------------------------------------------------------- ids and times


def variant_for(*, content: bool = False, service_name: str | None = None, nonce: str | None = None) -> str:
    """What in the export options changes what is sent, as text that goes into every id: ``""``
    for the default export (no content, no service name given), so its ids are the recorded ones.
    ``nonce`` (``--new-trace``) makes ids no earlier export had."""
    parts = (["content"] if content else []) + ([f"service={service_name}"] if service_name else [])
    return ";".join(parts + ([f"new={nonce}"] if nonce else []))


def trace_id_for(session_id: str, variant: str = "") -> int:
    """The 128-bit trace id of a session exported with options ``variant`` (:func:`variant_for`):
    the first 16 bytes of SHA-256 over ``forkpoint.trace:<session id>`` (then NUL and the variant
    when there is one)."""
    seed = b"forkpoint.trace:" + session_id.encode() + (b"\0" + variant.encode() if variant else b"")
    return int.from_bytes(hashlib.sha256(seed).digest()[:16], "big") or 1


def _derived(text: str) -> int:
    return int.from_bytes(hashlib.sha256(b"forkpoint.span:" + text.encode()).digest()[:8], "big") or 1


def _recorded(value: Any) -> int | None:
    """A recorded span id (16 hex digits, not all zero) as a number; None when it is not one."""
    if isinstance(value, str) and len(value) == 16:
        try:
            return int(value, 16) or None
        except ValueError:
            return None
    return None


def span_id_for(value: Any, fallback: str, variant: str = "") -> int:
    """The 64-bit span id of a recorded 16-hex ``span_id``: the recorded id itself for the default
    export, else derived from it and ``variant``; derived from ``fallback`` when the recorded one is
    absent or malformed."""
    n = _recorded(value)
    if n is not None:
        return _derived(f"{variant}:{value}") if variant else n
    return _derived(f"{fallback}:{variant}" if variant else fallback)


def _ns(ts: Any) -> int | None:
    """ISO 8601 (``…Z``) to nanoseconds since the epoch; None if unreadable."""
    dt = parse_time(ts)
    if dt is None:
        return None
    # Exact integer arithmetic: timestamp() as a float would lose sub-microsecond precision.
    return int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000


def _dur_ns(ms: Any) -> int | None:
    """Milliseconds to nanoseconds; None when the duration is unknown (absent, null, negative)."""
    return round(float(ms) * 1_000_000) if isinstance(ms, int | float) and ms >= 0 else None


# --------------------------------------------------------------------------- the builder


@dataclass
class _Asked:
    """A model call whose tool calls are not all answered yet."""

    span_id: int
    parent_id: int  # the span it was made in: the root, or a tool whose body runs a sub-agent
    calls: list[dict[str, Any]]
    tools: dict[str, dict[str, Any]]  # tool definitions offered, by name (content only)


class TraceBuilder:
    """Builds the spans of one session from its events, one event at a time (see the module doc).

    ``header`` is the session's header; ``content`` adds message content (see
    :mod:`.attributes`); ``variant`` (:func:`variant_for`) goes into every id; ``links`` are
    (trace id, span id) pairs the root span links to (a what-if session's parent).
    """

    def __init__(
        self,
        header: Mapping[str, Any],
        *,
        content: bool = False,
        variant: str = "",
        links: list[tuple[int, int]] | None = None,
    ) -> None:
        self.header = header
        self.session_id = str(header.get("session_id"))
        self.content = content
        self.variant = variant
        self.trace_id = trace_id_for(self.session_id, variant)
        self.root_id = span_id_for(header.get("span_id"), f"{self.session_id}:root", variant)
        self.links = list(links or [])
        created = _ns(header.get("created"))
        self._created = created
        self._starts: list[int] = [created] if created is not None else []
        self._ends: list[int] = []
        self._end: dict[str, Any] | None = None
        self._used: set[int] = {self.root_id}
        self._emitted: set[int] = set()
        self._held: dict[int, list[SpanEvent]] = {}  # span events waiting for their span
        self._asked: list[_Asked] = []
        self._providers: set[str] = set()
        self._task: str | None = None
        self._answer: Any = None  # (the last model text, or what a framework's answer tool took)

    def _parent(self, recorded: Any) -> int:
        """The span id of a recorded ``parent_span_id``: the root for the header's span (or none),
        else the span that recorded id becomes (a tool span, which ends after its children)."""
        if recorded == self.header.get("span_id") or _recorded(recorded) is None:
            return self.root_id
        return span_id_for(recorded, "", self.variant)

    def _unique(self, recorded: Any, seq: int) -> int:
        n = span_id_for(recorded, f"{self.session_id}:{seq}", self.variant)
        k = 0
        while n in self._used:  # a duplicated recorded id (should not happen): derive a fresh one
            k += 1
            n = span_id_for(None, f"{self.session_id}:{seq}:{k}", self.variant)
        self._used.add(n)
        return n

    def add(self, event: Mapping[str, Any]) -> list[SpanPlan]:
        """Read the next event; returns the span it completes (a model or tool call), else ``[]``.
        A checkpoint or note becomes an event of its parent span when that span is still to come
        (a tool whose body it was taken in), else of the root span."""
        kind = event.get("type")
        start = _ns(event.get("ts"))
        if kind == "end":
            self._end = dict(event)
            if start is not None:
                self._ends.append(start)
            return []
        if start is None:
            return []
        parent_id = self._parent(event.get("parent_span_id"))
        if kind in ("checkpoint", "note", "outcome"):
            target = self.root_id if parent_id in self._emitted else parent_id
            self._held.setdefault(target, []).append(
                SpanEvent(f"forkpoint.{kind}", start, attributes.span_event(event, self.content))
            )
            self._starts.append(start)
            return []
        if kind not in ("model_call", "tool_call"):
            return []
        seq = int(event["seq"])
        span_id = self._unique(event.get("span_id"), seq)
        duration = _dur_ns(event.get("duration_ms"))
        end = start + (duration or 0)
        self._starts.append(start)
        self._ends.append(end)
        status, message = "unset", None
        if kind == "model_call" and providers.call_kind(event) != "model":
            name, attrs, status, message = _http_span(event, self.content)
            span_kind = "client"
        elif kind == "model_call":
            name, attrs = attributes.model_call(event, self.session_id, self.content)
            self._providers.add(attrs["gen_ai.provider.name"])
            self._model_call_seen(event, span_id, parent_id)
            status, message = self._model_status(event, attrs)
            span_kind = "client"
        else:
            parent_id, call_id, definition = self._answering(event, parent_id)
            if self.content and answer_tool(event.get("tool")) and "result" in event:
                self._answer = event["result"]
            name, attrs = attributes.tool_call(event, self.session_id, self.content, call_id, definition)
            if "error" in event:
                err = event.get("error") or {}
                status = "error"
                attrs["error.type"] = str(err.get("type") or "_OTHER")
                message = (
                    f"{err.get('type')}: {err.get('message', '')}" if self.content else str(err.get("type"))
                )
            elif (failed := mcp_tool_error(event)) is not None:
                # An MCP tool that failed answers with isError instead of raising: the MCP semantic
                # conventions' error.type for it is "tool_error".
                status, attrs["error.type"] = "error", "tool_error"
                message = failed if self.content else "tool_error"
            span_kind = "internal"
        if duration is None:
            attrs["forkpoint.duration_unknown"] = True
        attrs.update(attributes.common(event, self.content))
        self._emitted.add(span_id)
        events = sorted(self._held.pop(span_id, []), key=lambda ev: ev.time_ns)
        return [
            SpanPlan(span_id, parent_id, name, span_kind, start, end, attrs, events, status, message, seq)
        ]

    def _model_call_seen(self, event: Mapping[str, Any], span_id: int, parent_id: int) -> None:
        summary = event.get("summary") or {}
        calls = [dict(tc) for tc in summary.get("tool_calls") or [] if isinstance(tc, dict)]
        tools: dict[str, dict[str, Any]] = {}
        if self.content:
            request = event.get("request") or {}
            defs = providers.genai_tool_definitions(str(summary.get("api") or "unknown"), request.get("body"))
            tools = {str(t.get("name")): t for t in defs if t.get("name")}
            if self._task is None:
                self._task = attributes.task_of(attributes.input_messages(event)[1])
            out = attributes.output_messages(event)
            text = attributes.part_text(out[0]["parts"]) if out else ""
            if text:
                self._answer = text
            else:  # (a framework's answer tool: its arguments, until its recorded result comes)
                asked = [c for c in calls if answer_tool(c.get("name"))]
                self._answer = maybe_json(asked[0].get("arguments")) if asked else self._answer
        if calls:
            self._asked.append(_Asked(span_id, parent_id, calls, tools))

    def _model_status(self, event: Mapping[str, Any], attrs: dict[str, Any]) -> tuple[str, str | None]:
        response = event.get("response") or {}
        if event.get("error"):
            err = event["error"]
            attrs["error.type"] = str(err.get("type") or "_OTHER")
            message = f"{err.get('type')}: {err.get('message', '')}" if self.content else str(err.get("type"))
            return "error", message
        if isinstance(response.get("status"), int) and response["status"] >= 400:
            attrs["error.type"] = str(response["status"])
            summary = event.get("summary") or {}
            if self.content:
                return "error", summary.get("error") or f"HTTP {response['status']}"
            return "error", f"HTTP {response['status']}"
        return "unset", None

    def _answering(
        self, event: Mapping[str, Any], parent_id: int
    ) -> tuple[int, str | None, dict[str, Any] | None]:
        """(parent span, call id, tool definition) of a tool call: a tool is nested under the model
        call that asked for it (:func:`~forkpoint.events.asking_call`) made in the same span as the
        tool: the root, or a tool whose body runs a sub-agent."""
        pending = [(asked, asked.calls) for asked in self._asked if asked.parent_id == parent_id]
        found = asking_call(event, to_json(event.get("args")), pending)
        if found is None:
            return parent_id, None, None
        asked, hit = found
        asked.calls.remove(hit)
        return asked.span_id, hit.get("id"), asked.tools.get(str(hit.get("name")))

    def finish(self) -> SpanPlan:
        """The root span, once every event is read: from the session's creation (or its first event)
        to its end; span events whose parent never came are the root's."""
        root_start = min(self._starts) if self._starts else 0
        root_end = max([root_start, *self._ends])
        end = self._end
        if end is not None and self._created is not None:
            root_end = max(root_end, self._created + (_dur_ns(end.get("duration_ms")) or 0))
        attrs = attributes.root(self.header, end, self._providers, self.content, self._task, self._answer)
        status, message = "unset", None
        if end is not None and end.get("exit_code") not in (0, None):
            status = "error"
            reason = attributes.end_reason(end)
            message = f"exit code {end.get('exit_code')}" + (f" ({reason})" if reason else "")
        elif end is not None and end.get("incomplete"):  # (not all of the run is in the trace)
            status, message = "error", f"recording incomplete: {end['incomplete']}"
        events = [ev for evs in self._held.values() for ev in evs]
        self._held = {}
        return SpanPlan(
            self.root_id,
            None,
            "invoke_agent",
            "internal",
            root_start,
            root_end,
            attrs,
            sorted(events, key=lambda ev: ev.time_ns),
            status,
            message,
            links=list(self.links),
        )


def parent_link(session: Session, variant: str = "", parent: Session | None = None) -> list[tuple[int, int]]:
    """The link from a what-if session's root to its parent session's root, as exported with the
    same options: ``[(trace id, span id)]``, or ``[]`` when the session has no parent or the parent
    (``parent``, else loaded from the same store) cannot be read."""
    ref = session.header.get("parent") or {}
    if not isinstance(ref, dict) or not ref.get("session_id"):
        return []
    psid = str(ref["session_id"])
    if parent is None:
        try:
            parent = Session.load(session.path.parent / psid, share_lists=True)
        except SessionError:
            return []
    if not parent.header.get("span_id"):
        return []
    return [(trace_id_for(psid, variant), span_id_for(parent.header["span_id"], f"{psid}:root", variant))]


def stream(
    session: Session,
    *,
    content: bool = False,
    variant: str = "",
    parent: Session | None = None,
    links: list[tuple[int, int]] | None = None,
) -> Iterator[SpanPlan]:
    """The spans that represent ``session``, one at a time as its events are read: the calls' in
    ``seq`` order, then the root (it is known only once every event is read), so an export holds one
    span's attributes at a time, not the whole trace's (with content each span carries the
    conversation so far).

    ``parent``: for a what-if session, its parent session (loaded from the same store when None
    and present there): the root span then links to the parent's root span (:func:`parent_link`),
    unless ``links`` are given.
    """
    if links is None:
        links = parent_link(session, variant, parent)
    builder = TraceBuilder(session.header, content=content, variant=variant, links=links)
    for e in session.records():
        yield from builder.add(e)
    yield builder.finish()


def plan(
    session: Session,
    *,
    content: bool = False,
    variant: str = "",
    parent: Session | None = None,
    links: list[tuple[int, int]] | None = None,
) -> list[SpanPlan]:
    """The spans of :func:`stream` in one list, the root first."""
    *spans, root = stream(session, content=content, variant=variant, parent=parent, links=links)
    return [root, *spans]


def _http_span(event: Mapping[str, Any], content: bool) -> tuple[str, dict[str, Any], str, str | None]:
    """An exchange that is no model call (telemetry, MCP, plain HTTP): an HTTP client span with the
    HTTP semantic conventions' attributes, no GenAI ones (its query values only with ``content``).
    Returns (name, attributes, status, message)."""
    req = event.get("request") or {}
    response = event.get("response") or {}
    name = str(req.get("method") or "HTTP")
    attrs: dict[str, Any] = {
        "http.request.method": name,
        "url.full": attributes.url_full(str(req.get("url") or ""), content),
        "forkpoint.http.kind": providers.call_kind(event),
    }
    if response.get("status") is not None:
        attrs["http.response.status_code"] = response["status"]
    if event.get("error"):
        attrs["error.type"] = str(event["error"].get("type") or "_OTHER")
        return name, attrs, "error", str(event["error"].get("type"))
    if isinstance(response.get("status"), int) and response["status"] >= 400:
        attrs["error.type"] = str(response["status"])
        return name, attrs, "error", f"HTTP {response['status']}"
    return name, attrs, "unset", None
