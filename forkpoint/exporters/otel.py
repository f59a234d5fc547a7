"""``forkpoint export``: a recorded session as one OpenTelemetry trace, after the fact.

``--otlp URL`` sends it to an OTLP/HTTP endpoint (a collector, Jaeger, Tempo, Phoenix, Langfuse,
Honeycomb …); ``--file PATH`` writes the same spans as OTLP JSON (one ``ExportTraceServiceRequest``
per line, the format of the collector's ``file`` exporter and ``otlpjsonfile`` receiver). What the
trace holds is :mod:`forkpoint.otel`; see ``docs/otel.md``.
"""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from ..batches import by_size
from ..errors import ExportError
from ..files import private_file
from ..log import Session
from ..otel import Sender, SpanFactory, SpanPlan, parent_link, shown, stream, trace_id_for, variant_for
from ..otel.sdk import BATCH
from ..scrub import rescrubbed

__all__ = ["ExportError", "Exported", "export"]


@dataclass
class Exported:
    """What :func:`export` sent: how many ``spans``, as which trace (``trace_id``, 32 hex digits),
    and the ``warning`` the endpoint gave, if any (it took them all)."""

    spans: int
    trace_id: str
    warning: str | None = None


#: Bytes of one line of an OTLP JSON file at most, where the spans allow it: the Collector's
#: ``otlpjsonfile`` receiver reads lines of up to 1 MiB (its ``max_log_size`` default) and cuts a
#: longer one into pieces none of which parses (a session exported with content soon passes that).
LINE_BYTES = 1 << 20


def _otlp_json(spans: Sequence[Any]) -> bytes:
    """OTLP JSON (ids as hex, enums as integers) of ``spans``, in their order: one
    ``ExportTraceServiceRequest`` a line (:func:`_request_lines`)."""
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
    return b"".join(
        line
        for rs in doc.get("resourceSpans", [])
        for ss in rs.get("scopeSpans", [])
        for line in _request_lines(rs, ss)
    )


def _request_lines(resource: dict[str, Any], scope: dict[str, Any]) -> list[bytes]:
    """The spans of ``scope`` (an entry of ``resource``'s ``scopeSpans``) as lines of OTLP JSON,
    each one request of at most :data:`~forkpoint.otel.sdk.BATCH` spans and, where the spans allow
    it, :data:`LINE_BYTES`."""

    def line(spans: list[Any]) -> bytes:
        return (
            orjson.dumps({"resourceSpans": [{**resource, "scopeSpans": [{**scope, "spans": spans}]}]}) + b"\n"
        )

    room = LINE_BYTES - len(line([]))
    spans = scope.get("spans", [])
    return [
        line(b) for b in by_size(spans, lambda span: len(orjson.dumps(span)) + 1, room, BATCH)
    ]  # (+ its comma)


def _dropped(sender: Sender, total: int) -> str:
    """What the endpoint said it dropped of the ``total`` spans, as a clause ("" for nothing)."""
    if not sender.rejected:
        return ""
    return f" but dropped {sender.rejected} of {total} ({sender.rejection or 'it gave no reason'})"


def _text_bytes(plan: SpanPlan) -> int:
    """About the bytes ``plan`` takes as OTLP JSON beyond its fixed fields: the length of its text
    attributes and span events' (what grows with the conversation when content is exported)."""
    attrs = [plan.attributes, *(ev.attributes for ev in plan.events)]
    return sum(len(v) for a in attrs for v in a.values() if isinstance(v, str))


@contextmanager
def _output(file: str | Path | None) -> Iterator[BinaryIO | None]:
    """Where the OTLP JSON lines go: nowhere (None), stdout (``-``), or ``file``, put in place whole
    when the export ends without an exception (:func:`~forkpoint.files.private_file`)."""
    if file is None:
        yield None
    elif str(file) == "-":
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
    else:
        with private_file(file) as f:
            yield f


def export(
    session: Session,
    *,
    otlp: str | None = None,
    file: str | Path | None = None,
    content: bool = False,
    headers: dict[str, str] | None = None,
    service_name: str | None = None,
    timeout: float = 10.0,
    new_trace: bool = False,
) -> Exported:
    """Export ``session`` as one trace to an OTLP/HTTP endpoint and/or an OTLP JSON file (``-`` is
    stdout). The ids depend on the session and on ``content`` and ``service_name``
    (:func:`forkpoint.otel.variant_for`): the same export twice sends the same trace, another
    option another one; ``new_trace`` makes ids no export had before. The spans go out a batch at a
    time as the session is read (the calls' in order, the root last: :func:`forkpoint.otel.stream`),
    so memory holds one batch, not the trace. Raises :class:`ExportError`."""
    if not otlp and not file:
        raise ExportError("nothing to do: give an OTLP endpoint (--otlp URL) or a file (--file PATH)")
    sender = Sender(otlp, headers, timeout) if otlp else None
    session = rescrubbed(session)  # the rules in force now apply to what leaves (docs/security.md)
    variant = variant_for(content=content, service_name=service_name)
    links = parent_link(session, variant)  # a what-if run links to its parent as exported alike
    if new_trace:
        variant = variant_for(content=content, service_name=service_name, nonce=secrets.token_hex(8))
    factory = SpanFactory(trace_id_for(session.id, variant), service_name)
    total = sent = 0
    refused = False
    try:
        with _output(file) as out:
            spans_of = stream(session, content=content, variant=variant, links=links)
            for batch in by_size(spans_of, _text_bytes, LINE_BYTES, BATCH):  # (what a request, a line holds)
                spans = factory.spans(batch)
                total += len(spans)
                if out is not None:
                    out.write(_otlp_json(spans))
                if sender is not None and not refused:  # (sending stops at the first batch refused)
                    accepted = sender.send(spans)
                    sent += accepted
                    refused = accepted < len(spans)
    finally:
        factory.shutdown()
        if sender is not None:
            sender.close()
    if sender is not None and sent < total:
        raise ExportError(
            f"the OTLP endpoint {shown(sender.endpoint)} did not accept the spans ({total - sent} of "
            f"{total} not sent; see the log above){_dropped(sender, total)}"
        )
    if sender is not None and sender.rejected:
        raise ExportError(
            f"the OTLP endpoint {shown(sender.endpoint)} took the spans{_dropped(sender, total)}"
        )
    return Exported(total, format(factory.trace_id, "032x"), sender.warning if sender is not None else None)
