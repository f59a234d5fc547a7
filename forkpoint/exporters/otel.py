"""Export a session as OpenTelemetry traces, following the GenAI semantic conventions.

``forkpoint export SESSION --otlp URL`` sends one trace per session to an OTLP/HTTP endpoint (a
collector, Jaeger, Tempo, Phoenix, Langfuse, Honeycomb …); ``--file PATH`` writes the same spans as
OTLP JSON (one ``ExportTraceServiceRequest`` per line, the format of the collector's ``file``
exporter and ``otlpjsonfile`` receiver). See ``docs/otel.md``.

The trace (conventions: opentelemetry.io/docs/specs/semconv/gen-ai/, "Development" status):

* a root ``invoke_agent`` span (kind INTERNAL) for the session: the header's ``span_id``, from the
  session's creation to its ``end`` event;
* one ``{gen_ai.operation.name} {gen_ai.request.model}`` span per model call (kind CLIENT;
  operation ``chat`` for Chat Completions, Responses and Anthropic Messages, ``generate_content``
  for Gemini) with the ``gen_ai.request.*``, ``gen_ai.response.*`` and ``gen_ai.usage.*``
  attributes the recording holds;
* one ``execute_tool {gen_ai.tool.name}`` span per tool call (kind INTERNAL), a child of the model
  call whose ``tool_calls`` it answers (then with ``gen_ai.tool.call.id``), else of its recorded
  parent;
* checkpoints and notes as span events (``forkpoint.checkpoint``, ``forkpoint.note``) of their
  parent span.

Span ids are the recorded ``span_id``s; the trace id is derived from the session id
(:func:`trace_id_for`), so exporting a session twice gives the same trace. Start and end times are
the recorded ``ts`` and ``ts + duration_ms``. Message content (``gen_ai.input.messages``,
``gen_ai.output.messages``, ``gen_ai.system_instructions``, ``gen_ai.tool.call.arguments`` /
``.result``, note texts, the command line, override values) is exported only with
``content=True``, as the conventions recommend; structured values are JSON strings on spans.

:func:`plan` is pure Python (it builds :class:`SpanPlan` records); :func:`export` needs the
``otel`` extra (``opentelemetry-sdk`` and ``opentelemetry-exporter-otlp-proto-http``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from .. import providers
from ..errors import ExportError, SessionError
from ..log import Session, to_json
from ..providers import recorded_response, response_text

__all__ = ["ExportError", "SpanEvent", "SpanPlan", "export", "otlp_traces_url", "plan", "trace_id_for"]

#: Instrumentation scope of the exported spans.
SCOPE = "forkpoint"


@dataclass
class SpanEvent:
    """A span event: name, time (ns since the epoch) and attributes."""

    name: str
    time_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)


@dataclass
class SpanPlan:
    """One span to emit. ``kind`` is ``internal`` or ``client``; ``status`` ``ok`` / ``unset`` /
    ``error`` (with ``status_message``)."""

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
    links: list[tuple[int, int]] = field(default_factory=list)  # (trace id, span id)


# --------------------------------------------------------------------------- ids and times


def trace_id_for(session_id: str) -> int:
    """The 128-bit trace id of a session: the first 16 bytes of SHA-256 over its id."""
    n = int.from_bytes(hashlib.sha256(b"forkpoint.trace:" + session_id.encode()).digest()[:16], "big")
    return n or 1


def _span_id(value: Any, fallback: str) -> int:
    """A recorded 16-hex span id as an int; a stable derived one when absent or malformed."""
    if isinstance(value, str) and len(value) == 16:
        try:
            n = int(value, 16)
        except ValueError:
            n = 0
        if n:
            return n
    return int.from_bytes(hashlib.sha256(b"forkpoint.span:" + fallback.encode()).digest()[:8], "big") or 1


def _ns(ts: Any) -> int | None:
    """ISO 8601 (``…Z``) to nanoseconds since the epoch; None if unreadable."""
    if not isinstance(ts, str):
        return None
    try:
        dt = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None
    # Exact integer arithmetic: timestamp() as a float would lose sub-microsecond precision.
    return int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000


def _dur_ns(ms: Any) -> int:
    return round(float(ms) * 1_000_000) if isinstance(ms, int | float) and ms > 0 else 0


# --------------------------------------------------------------------------- content helpers


def _json(value: Any) -> str:
    return orjson.dumps(to_json(value)).decode()


def _maybe_parse(text: Any) -> Any:
    """JSON text to a value (the conventions want tool-call arguments as objects); else as is."""
    if isinstance(text, str):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            return text
    return text


def _output_messages(event: dict[str, Any], summary: dict[str, Any]) -> list[dict[str, Any]]:
    if not event.get("response"):
        return []
    parts: list[dict[str, Any]] = []
    text = response_text(event["request"]["url"], recorded_response(event))
    if text:
        parts.append({"type": "text", "content": text})
    for tc in summary.get("tool_calls") or []:
        parts.append(
            {
                "type": "tool_call",
                "id": tc.get("id"),
                "name": tc.get("name"),
                "arguments": _maybe_parse(tc.get("arguments")),
            }
        )
    return [{"role": "assistant", "parts": parts, "finish_reason": summary.get("stop_reason") or ""}]


def response_id(event: dict[str, Any]) -> str | None:
    """The provider's id of the completion (``chatcmpl-…``, ``msg_…``, ``resp_…``, Gemini
    ``responseId``), from the body or the first stream event that carries one."""
    return providers.response_id(event)


# --------------------------------------------------------------------------- the plan


def provider_name(summary: dict[str, Any]) -> str:
    """``gen_ai.provider.name`` for a model call: the conventions' well-known value where one
    applies (``openai``, ``anthropic``, ``azure.ai.openai``, ``gcp.gemini``, ``gcp.vertex_ai``,
    ``gcp.gen_ai``), else the wire shape forkpoint recognised."""
    return providers.otel_provider_name(summary)


def _set(attrs: dict[str, Any], key: str, value: Any) -> None:
    if value is not None and value != "":
        attrs[key] = value


def _model_span(event: dict[str, Any], session_id: str, content: bool) -> tuple[str, str, dict[str, Any]]:
    summary = event.get("summary") or {}
    request = event.get("request") or {}
    url = request.get("url") or ""
    api = summary.get("api") or "unknown"
    operation = providers.otel_operation(api)
    model = summary.get("model")
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": provider_name(summary),
    }
    _set(attrs, "gen_ai.request.model", model)
    _set(attrs, "gen_ai.conversation.id", session_id)
    parts = urlsplit(url)
    try:
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    except ValueError:
        port = None
    if parts.hostname:
        attrs["server.address"] = parts.hostname
        _set(attrs, "server.port", port)
    for key, name in (
        ("temperature", "gen_ai.request.temperature"),
        ("top_p", "gen_ai.request.top_p"),
        ("max_tokens", "gen_ai.request.max_tokens"),
        ("seed", "gen_ai.request.seed"),
    ):
        _set(attrs, name, summary.get(key))
    if summary.get("stream"):
        attrs["gen_ai.request.stream"] = True
        chunks = (event.get("response") or {}).get("chunks") or []
        if chunks:
            attrs["gen_ai.response.time_to_first_chunk"] = round(
                float(chunks[0][0]) / 1000.0, 6
            )  # s, to the µs
    _set(attrs, "gen_ai.response.id", response_id(event) if event.get("response") else None)
    _set(attrs, "gen_ai.response.model", summary.get("response_model"))
    if summary.get("stop_reason"):
        attrs["gen_ai.response.finish_reasons"] = [str(summary["stop_reason"])]
    usage = summary.get("usage") or {}
    _set(attrs, "gen_ai.usage.input_tokens", usage.get("input_tokens"))
    _set(attrs, "gen_ai.usage.output_tokens", usage.get("output_tokens"))
    response = event.get("response") or {}
    if response.get("status") is not None:
        attrs["http.response.status_code"] = int(response["status"])
    if content:
        system, messages = providers.genai_input_messages(api, url, request.get("body"))
        if system:
            attrs["gen_ai.system_instructions"] = _json(system)
        attrs["gen_ai.input.messages"] = _json(messages)
        out = _output_messages(event, summary)
        if out:
            attrs["gen_ai.output.messages"] = _json(out)
    name = f"{operation} {model}" if model else operation
    return name, operation, attrs


def _common(event: dict[str, Any], content: bool) -> dict[str, Any]:
    attrs: dict[str, Any] = {"forkpoint.seq": int(event["seq"])}
    # A what-if run's "replay"/"override"/"live"; a checkpoint's `source` is its source *state*
    # (patch included), which is content and never exported here.
    if isinstance(event.get("source"), str):
        attrs["forkpoint.source"] = event["source"]
    _set(attrs, "forkpoint.recorded_seq", event.get("recorded_seq"))
    if content:
        _set(attrs, "forkpoint.override", event.get("override"))
    return attrs


def _tool_matches(recorded: str, requested: Any) -> bool:
    if not isinstance(requested, str) or not requested:
        return False
    if recorded == requested:
        return True
    tail = recorded.replace(":", ".").rsplit(".", 1)[-1]
    return tail == requested


def plan(session: Session, *, content: bool = False, parent: Session | None = None) -> list[SpanPlan]:
    """The spans (root first, then in ``seq`` order) that represent ``session``.

    ``parent``: for a what-if session, its parent session (loaded from the same store when None
    and present there): the root span then links to the parent's root span.
    """
    sid = session.id
    header = session.header
    root_id = _span_id(header.get("span_id"), f"{sid}:root")
    known: dict[str, int] = {}  # recorded span id (hex) -> span id used
    used: set[int] = {root_id}
    if isinstance(header.get("span_id"), str):
        known[header["span_id"]] = root_id

    def unique(value: Any, seq: int) -> int:
        n = _span_id(value, f"{sid}:{seq}")
        k = 0
        while n in used:  # a duplicated recorded id (should not happen): derive a fresh one
            k += 1
            n = _span_id(None, f"{sid}:{seq}:{k}")
        used.add(n)
        return n

    created = _ns(header.get("created"))
    spans: list[SpanPlan] = []
    events_for: dict[int, list[SpanEvent]] = {}
    # tool calls the model asked for and no tool span has answered yet: [model span, call ids]
    pending: list[tuple[int, list[dict[str, Any]]]] = []
    starts: list[int] = [created] if created is not None else []
    ends: list[int] = []
    end_event: dict[str, Any] | None = None
    provider_names: set[str] = set()
    for e in session.records():
        kind = e.get("type")
        start = _ns(e.get("ts"))
        if kind == "end":
            end_event = e
            if start is not None:
                ends.append(start)
            continue
        if start is None:
            continue
        parent_hex = e.get("parent_span_id")
        parent_id = known.get(parent_hex, root_id) if isinstance(parent_hex, str) else root_id
        if kind in ("checkpoint", "note", "outcome"):
            attrs = _common(e, content)
            if kind == "checkpoint":
                src = e.get("source") or {}
                ws = e.get("workspace") or {}
                attrs["forkpoint.checkpoint.boundary"] = str(e.get("boundary"))
                _set(attrs, "forkpoint.checkpoint.reason", e.get("reason"))
                _set(attrs, "forkpoint.checkpoint.turn", e.get("turn"))
                _set(attrs, "forkpoint.checkpoint.source_tree", src.get("tree"))
                attrs["forkpoint.checkpoint.changed_files"] = len(src.get("changed") or [])
                _set(attrs, "forkpoint.checkpoint.workspace_fingerprint", ws.get("fingerprint"))
                attrs["forkpoint.checkpoint.workspace_files"] = len(ws.get("manifest") or [])
                _set(attrs, "forkpoint.checkpoint.context_digest", e.get("context_digest"))
            elif kind == "outcome":
                attrs["forkpoint.outcome.passed"] = bool(e.get("passed"))
                _set(attrs, "forkpoint.outcome.exit_code", e.get("exit_code"))
                if content:
                    _set(attrs, "forkpoint.outcome.command", e.get("command"))
            elif content:
                _set(attrs, "forkpoint.note.text", e.get("text"))
                if e.get("data") is not None:
                    attrs["forkpoint.note.data"] = _json(e["data"])
            events_for.setdefault(parent_id, []).append(SpanEvent(f"forkpoint.{kind}", start, attrs))
            starts.append(start)
            continue
        if kind not in ("model_call", "tool_call"):
            continue
        span_id = unique(e.get("span_id"), int(e["seq"]))
        if isinstance(e.get("span_id"), str):
            known[e["span_id"]] = span_id
        end = start + _dur_ns(e.get("duration_ms"))
        starts.append(start)
        ends.append(end)
        attrs = {}
        status, message = "unset", None
        if kind == "model_call":
            name, _, attrs = _model_span(e, sid, content)
            provider_names.add(attrs["gen_ai.provider.name"])
            summary = e.get("summary") or {}
            calls = [dict(tc) for tc in summary.get("tool_calls") or [] if isinstance(tc, dict)]
            if calls:
                pending.append((span_id, calls))
            response = e.get("response") or {}
            if e.get("error"):
                status, message = "error", f"{e['error'].get('type')}: {e['error'].get('message', '')}"
                attrs["error.type"] = str(e["error"].get("type") or "_OTHER")
                if not content:
                    message = str(e["error"].get("type"))
            elif isinstance(response.get("status"), int) and response["status"] >= 400:
                status, message = "error", summary.get("error") or f"HTTP {response['status']}"
                attrs["error.type"] = str(response["status"])
                if not content:
                    message = f"HTTP {response['status']}"
            span_kind = "client"
        else:
            tool = str(e.get("tool"))
            name = f"execute_tool {tool}"
            attrs = {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": tool,
                "gen_ai.tool.type": "function",
            }
            if parent_id == root_id:
                # The agent runs tools outside any model span; nest the tool under the model call that
                # asked for it (the latest one with an unanswered call of that name).
                for model_id, calls in reversed(pending):
                    hit = next((c for c in calls if _tool_matches(tool, c.get("name"))), None)
                    if hit is not None:
                        calls.remove(hit)
                        parent_id = model_id
                        _set(attrs, "gen_ai.tool.call.id", hit.get("id"))
                        break
            if content:
                attrs["gen_ai.tool.call.arguments"] = _json(e.get("args"))
                if "result" in e:
                    attrs["gen_ai.tool.call.result"] = _json(e.get("result"))
            if "error" in e:
                err = e.get("error") or {}
                status = "error"
                attrs["error.type"] = str(err.get("type") or "_OTHER")
                message = f"{err.get('type')}: {err.get('message', '')}" if content else str(err.get("type"))
            span_kind = "internal"
        attrs.update(_common(e, content))
        spans.append(
            SpanPlan(
                span_id, parent_id, name, span_kind, start, end, attrs, [], status, message, int(e["seq"])
            )
        )

    # The root span: the whole session.
    root_start = min(starts) if starts else 0
    root_end = max([root_start, *ends])
    if end_event is not None and created is not None:
        root_end = max(root_end, created + _dur_ns(end_event.get("duration_ms")))
    root_attrs: dict[str, Any] = {"gen_ai.operation.name": "invoke_agent", "gen_ai.conversation.id": sid}
    if len(provider_names) == 1:
        root_attrs["gen_ai.provider.name"] = next(iter(provider_names))
    tags = header.get("tags") or {}
    _set(root_attrs, "gen_ai.agent.version", tags.get("agent_version"))
    root_attrs["forkpoint.session.id"] = sid
    _set(root_attrs, "forkpoint.session.name", header.get("name"))
    for k, v in tags.items():
        if v is not None and k != "agent_version":
            root_attrs[f"forkpoint.tag.{k}"] = str(v)
    _set(root_attrs, "forkpoint.version", (header.get("versions") or {}).get("forkpoint"))
    if content and header.get("argv"):
        root_attrs["process.command_args"] = [str(a) for a in header["argv"]]
    links: list[tuple[int, int]] = []
    parent_ref = header.get("parent") or {}
    if isinstance(parent_ref, dict) and parent_ref.get("session_id"):
        psid = str(parent_ref["session_id"])
        root_attrs["forkpoint.parent.session_id"] = psid
        _set(root_attrs, "forkpoint.parent.seq", parent_ref.get("seq"))
        replay = header.get("replay") or {}
        _set(root_attrs, "forkpoint.replay.models", replay.get("models"))
        _set(root_attrs, "forkpoint.replay.tools", replay.get("tools"))
        _set(root_attrs, "forkpoint.replay.on_divergence", replay.get("on_divergence"))
        if replay.get("overrides"):
            root_attrs["forkpoint.replay.override_count"] = len(replay["overrides"])
        if parent is None:
            try:
                parent = Session.load(session.path.parent / psid)
            except SessionError:
                parent = None
        if parent is not None and parent.header.get("span_id"):
            links.append((trace_id_for(psid), _span_id(parent.header["span_id"], f"{psid}:root")))
    status, message = "unset", None
    if end_event is not None:
        root_attrs["forkpoint.exit_code"] = end_event.get("exit_code")
        if end_event.get("exit_code") not in (0, None):
            status = "error"
            message = f"exit code {end_event.get('exit_code')}" + (
                f" ({end_event['reason']})" if end_event.get("reason") else ""
            )
            root_attrs["error.type"] = str(end_event.get("reason") or "_OTHER")
    root_attrs = {k: v for k, v in root_attrs.items() if v is not None}
    root = SpanPlan(
        root_id, None, "invoke_agent", "internal", root_start, root_end, root_attrs, [], status, message
    )
    root.links = links
    for s in [root, *spans]:
        s.events = sorted(events_for.get(s.span_id, []), key=lambda ev: ev.time_ns)
    return [root, *spans]


# --------------------------------------------------------------------------- export through the SDK


def otlp_traces_url(url: str) -> str:
    """An OTLP/HTTP endpoint: ``http://host:4318`` (no path) becomes ``http://host:4318/v1/traces``;
    a URL with a path is used as given."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ExportError(f"{url!r}: expected an http:// or https:// URL of an OTLP/HTTP endpoint")
    if parts.path in ("", "/"):
        parts = parts._replace(path="/v1/traces")
    return urlunsplit(parts)


def _sdk_spans(session: Session, plans: Sequence[SpanPlan], service_name: str | None) -> list[Any]:
    """Run the plans through the SDK's tracer (explicit times and ids); return the ended spans."""
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
        from opentelemetry.sdk.trace.id_generator import IdGenerator
        from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
    except ImportError as exc:
        raise ExportError(
            f"OpenTelemetry export needs the otel extra: pip install 'forkpoint[otel]' ({exc})"
        ) from None

    class _Ids(IdGenerator):
        """Hands the SDK the recorded ids: the trace id of the session, the next planned span id."""

        def __init__(self, trace_id: int) -> None:
            self.trace_id = trace_id
            self.next_span_id = 0

        def generate_span_id(self) -> int:
            return self.next_span_id

        def generate_trace_id(self) -> int:
            return self.trace_id

    class _Collect(SpanProcessor):
        def __init__(self) -> None:
            self.spans: list[ReadableSpan] = []

        def on_end(self, span: ReadableSpan) -> None:
            self.spans.append(span)

    trace_id = trace_id_for(session.id)
    ids = _Ids(trace_id)
    attrs: dict[str, Any] = {}
    if service_name or not os.environ.get("OTEL_SERVICE_NAME"):
        attrs["service.name"] = service_name or "forkpoint"
    provider = TracerProvider(resource=Resource.create(attrs), id_generator=ids)
    collect = _Collect()
    provider.add_span_processor(collect)
    from .._version import __version__

    tracer = provider.get_tracer(SCOPE, __version__)
    kinds = {"internal": SpanKind.INTERNAL, "client": SpanKind.CLIENT}
    live: dict[int, Any] = {}
    # Start every span first (parents before children), then end them: an SDK span is immutable once ended.
    for p in plans:
        ids.next_span_id = p.span_id
        if p.parent_id is None:
            ctx = trace.set_span_in_context(trace.INVALID_SPAN)
        else:
            parent_span = live.get(p.parent_id)
            parent_ctx = (
                parent_span.get_span_context()
                if parent_span is not None
                else SpanContext(trace_id, p.parent_id, is_remote=False, trace_flags=TraceFlags(1))
            )
            ctx = trace.set_span_in_context(trace.NonRecordingSpan(parent_ctx))
        links = [
            Link(
                SpanContext(t, s, is_remote=True, trace_flags=TraceFlags(1)),
                {"forkpoint.link": "parent_session"},
            )
            for t, s in p.links
        ]
        span = tracer.start_span(
            p.name,
            context=ctx,
            kind=kinds[p.kind],
            attributes=p.attributes,
            links=links,
            start_time=p.start_ns,
            record_exception=False,
            set_status_on_exception=False,
        )
        for ev in p.events:
            span.add_event(ev.name, ev.attributes, timestamp=ev.time_ns)
        if p.status == "error":
            span.set_status(Status(StatusCode.ERROR, p.status_message))
        live[p.span_id] = span
    for p in plans:
        live[p.span_id].end(end_time=max(p.end_ns, p.start_ns))
    provider.shutdown()
    return collect.spans


def _otlp_json(spans: Sequence[Any]) -> bytes:
    """OTLP JSON of an ``ExportTraceServiceRequest`` (ids as hex, enums as integers), one line."""
    import base64

    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    doc = MessageToDict(encode_spans(spans), use_integers_for_enums=True)

    def fix(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k in ("traceId", "spanId", "parentSpanId") and isinstance(v, str):
                    node[k] = base64.b64decode(v).hex()
                else:
                    fix(v)
        elif isinstance(node, list):
            for v in node:
                fix(v)

    fix(doc)
    return orjson.dumps(doc) + b"\n"


def export(
    session: Session,
    *,
    otlp: str | None = None,
    file: str | Path | None = None,
    content: bool = False,
    headers: dict[str, str] | None = None,
    service_name: str | None = None,
    timeout: float = 10.0,
) -> int:
    """Export ``session`` as one trace to an OTLP/HTTP endpoint and/or an OTLP JSON file (``-`` is
    stdout). Returns the number of spans. Raises :class:`ExportError`."""
    if not otlp and not file:
        raise ExportError("nothing to do: give an OTLP endpoint (--otlp URL) or a file (--file PATH)")
    endpoint = otlp_traces_url(otlp) if otlp else None
    from ..scrub import rescrubbed

    session = rescrubbed(session)  # the rules in force now apply to what leaves (docs/security.md)
    spans = _sdk_spans(session, plan(session, content=content), service_name)
    if file is not None:
        data = _otlp_json(spans)
        if str(file) == "-":
            import sys

            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            Path(file).write_bytes(data)
    if endpoint:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import SpanExportResult

        exporter = OTLPSpanExporter(endpoint=endpoint, headers=headers or None, timeout=timeout)
        try:
            result = exporter.export(spans)
        finally:
            exporter.shutdown()  # type: ignore[no-untyped-call]  # (the SDK does not annotate it)
        if result != SpanExportResult.SUCCESS:
            raise ExportError(f"the OTLP endpoint {endpoint} did not accept the spans (see the log above)")
    return len(spans)
