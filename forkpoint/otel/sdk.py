"""Span plans through the OpenTelemetry SDK, and OTLP/HTTP delivery.

Needs the ``otel`` extra (``opentelemetry-sdk``, ``opentelemetry-exporter-otlp-proto-http``); the
imports are made when a :class:`SpanFactory` or :class:`Sender` is built, and their absence is an
:class:`~forkpoint.errors.ExportError` saying what to install.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from .. import redact
from .._version import __version__
from ..errors import ExportError
from .spans import SpanPlan

#: Instrumentation scope of the exported spans.
SCOPE = "forkpoint"
#: Spans per OTLP request: a long session's spans carry the whole conversation each (with content),
#: and one request for all of them could pass a backend's size limit.
BATCH = 64


def _missing(exc: ImportError) -> ExportError:
    return ExportError(f"OpenTelemetry export needs the otel extra: pip install 'forkpoint[otel]' ({exc})")


def shown(text: str) -> str:
    """``text`` (an endpoint's URL, or a message naming it) as forkpoint says it: a password or a key
    in the URL (``http://user:pass@127.0.0.1:4318``, ``?api_key=…``) as its placeholder, not in a terminal or a
    CI log."""
    return redact.current().text(text)


def otlp_traces_url(url: str) -> str:
    """An OTLP/HTTP endpoint: ``http://host:4318`` (no path) becomes ``http://host:4318/v1/traces``;
    a URL with a path is used as given. Raises :class:`ExportError` for anything but http(s)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as exc:  # ("http://127.0.0.1:4318]": a stray bracket)
        raise ExportError(f"{shown(repr(url))}: not a URL of an OTLP/HTTP endpoint ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ExportError(f"{shown(repr(url))}: expected an http:// or https:// URL of an OTLP/HTTP endpoint")
    if parts.path in ("", "/"):
        parts = parts._replace(path="/v1/traces")
    return urlunsplit(parts)


class SpanFactory:
    """Turns the :class:`SpanPlan` s of one trace into the SDK's ended spans (``ReadableSpan``),
    with the planned ids, times, parents and links, no attribute dropped (the SDK's default limit is
    128 per span; a span with content carries a whole conversation)."""

    def __init__(self, trace_id: int, service_name: str | None = None) -> None:
        try:
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
            from opentelemetry.sdk.trace.id_generator import IdGenerator
        except ImportError as exc:
            raise _missing(exc) from None

        class Ids(IdGenerator):
            """Hands the SDK the planned ids: the session's trace id, the next planned span id."""

            next_span_id = 0

            def generate_span_id(self) -> int:
                return self.next_span_id

            def generate_trace_id(self) -> int:
                return trace_id

        class Collect(SpanProcessor):
            def __init__(self) -> None:
                self.spans: list[ReadableSpan] = []

            def on_end(self, span: ReadableSpan) -> None:
                self.spans.append(span)

        attrs: dict[str, Any] = {}
        if service_name or not os.environ.get("OTEL_SERVICE_NAME"):
            attrs["service.name"] = service_name or "forkpoint"
        unset = SpanLimits.UNSET
        limits = SpanLimits(
            max_attributes=unset,
            max_events=unset,
            max_links=unset,
            max_span_attributes=unset,
            max_event_attributes=unset,
            max_link_attributes=unset,
            max_attribute_length=unset,
            max_span_attribute_length=unset,
        )
        self.trace_id = trace_id
        self._ids = Ids()
        self._collect = Collect()
        self._provider = TracerProvider(
            resource=Resource.create(attrs), id_generator=self._ids, span_limits=limits
        )
        self._provider.add_span_processor(self._collect)
        self._tracer = self._provider.get_tracer(SCOPE, __version__)

    def spans(self, plans: Sequence[SpanPlan]) -> list[Any]:
        """The ended SDK spans of ``plans``, in order."""
        from opentelemetry import trace
        from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

        kinds = {"internal": SpanKind.INTERNAL, "client": SpanKind.CLIENT}
        sampled = TraceFlags(TraceFlags.SAMPLED)
        self._collect.spans = []
        for p in plans:
            self._ids.next_span_id = p.span_id
            if p.parent_id is None:
                ctx = trace.set_span_in_context(trace.INVALID_SPAN)
            else:
                parent = SpanContext(self.trace_id, p.parent_id, is_remote=False, trace_flags=sampled)
                ctx = trace.set_span_in_context(trace.NonRecordingSpan(parent))
            links = [
                Link(
                    SpanContext(t, s, is_remote=True, trace_flags=sampled),
                    {"forkpoint.link": "parent_session"},
                )
                for t, s in p.links
            ]
            span = self._tracer.start_span(
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
            span.end(end_time=max(p.end_ns, p.start_ns))
        return list(self._collect.spans)

    def shutdown(self) -> None:
        """Release the SDK's tracer provider."""
        self._provider.shutdown()


class _Shown(logging.Filter):
    """The OTLP exporter's own messages as :func:`shown` says them (when a request fails, ``requests``
    quotes the URL, query included)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = shown(record.getMessage()), None
        return True


_SHOWN = _Shown()


def partial_success(status: int, ctype: str, body: bytes) -> tuple[int, str]:
    """The spans an OTLP/HTTP endpoint that answered ``status`` with ``body`` (of content type
    ``ctype``) says it rejected, and its message: ``(0, "")`` when it says nothing. The
    ``partial_success`` field of ExportTraceServiceResponse, protobuf or JSON
    (https://opentelemetry.io/docs/specs/otlp/#partial-success-1): the request succeeded, the spans it
    names were dropped, and the client must not send them again; a message with none rejected is a
    warning. A count below 0 is taken as 0."""
    if not 200 <= status < 300 or not body:
        return 0, ""
    try:
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

        if "json" in ctype.lower():  # (a media type is case-insensitive: Application/JSON is JSON)
            from google.protobuf import json_format

            # (protobuf's own JSON reading: the field's JSON name or its proto name, a count as a
            # number or a string, as OTLP/JSON allows)
            answer = json_format.Parse(body, ExportTraceServiceResponse(), ignore_unknown_fields=True)
        else:
            answer = ExportTraceServiceResponse.FromString(body)
        found = answer.partial_success
        return max(0, int(found.rejected_spans)), str(found.error_message)
    except Exception:  # a body that is no OTLP response (a proxy's page) says nothing of rejections
        return 0, ""


def _http_session() -> Any:
    """The ``requests`` session the OTLP exporter would make itself: the one a configured credential
    provider gives (``OTEL_PYTHON_EXPORTER_OTLP_HTTP_*CREDENTIAL_PROVIDER``, through the SDK's own
    loader where it has one), else a new one. Raises :class:`ExportError` for a provider that gives
    none."""
    import requests

    try:
        from opentelemetry.exporter.otlp.proto.http._common import _load_session_from_envvar
    except ImportError:  # (an SDK before credential providers)
        return requests.Session()
    try:
        found = _load_session_from_envvar("OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER")
    except Exception as exc:  # (one not installed, or the provider's own failure: a traceback otherwise)
        var = next((v for v in _CREDENTIAL_VARS if os.environ.get(v)), _CREDENTIAL_VARS[0])
        raise ExportError(
            f"the OTLP credential provider {os.environ.get(var, '')!r} ({var}) gives no session: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    return found or requests.Session()


#: The variables naming the OTLP/HTTP exporter's credential provider (the first one wins).
_CREDENTIAL_VARS = (
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER",
)


class Sender:
    """Delivers SDK spans to an OTLP/HTTP endpoint (protobuf), :data:`BATCH` spans a request.

    ``timeout`` (seconds) bounds one request with the exporter's own retries of transient failures
    (``OTEL_EXPORTER_OTLP_*`` variables for headers, certificates and compression apply). Spans the
    endpoint took but said it dropped (:func:`partial_success`) are counted in ``rejected``, its
    last reason in ``rejection``, and its last warning (a message with none dropped) is
    ``warning``: the SDK's exporter reads no response body.
    """

    def __init__(
        self, endpoint: str, headers: Mapping[str, str] | None = None, timeout: float = 10.0
    ) -> None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError as exc:
            raise _missing(exc) from None
        self.endpoint = otlp_traces_url(endpoint)
        self.rejected = 0
        self.rejection: str | None = None
        self.warning: str | None = None
        #: The thread sending through this sender: a credential provider may hand every exporter
        #: one session (the program's own too), whose answers to others are not this sender's.
        self._sending: int | None = None
        session = self._session = _http_session()
        session.hooks["response"].append(self._answered)
        self._exporter = OTLPSpanExporter(
            endpoint=self.endpoint, headers=dict(headers or {}) or None, timeout=timeout, session=session
        )
        self._closed = False
        #: The logger the exporter reports its failures to (forkpoint reports them itself).
        self.logger_name = OTLPSpanExporter.__module__
        logging.getLogger(self.logger_name).addFilter(_SHOWN)  # (once: the same filter is not added twice)

    def _answered(self, response: Any, *args: Any, **kwargs: Any) -> None:
        if self._sending != threading.get_ident():
            return
        rejected, why = partial_success(
            response.status_code, response.headers.get("content-type", ""), response.content
        )
        if rejected:
            self.rejected += rejected
            self.rejection = shown(why) if why else None
        elif why:  # (the spec's way to warn of what it took whole: a truncated attribute, a quota)
            self.warning = shown(why)

    def send(self, spans: Sequence[Any]) -> int:
        """Send ``spans``; returns how many the endpoint took (a batch is taken whole or not at all,
        and sending stops at the first batch refused). Of those taken, the endpoint may have dropped
        some: ``rejected`` grows by them."""
        from opentelemetry.sdk.trace.export import SpanExportResult

        done = 0
        self._sending = threading.get_ident()
        try:
            for i in range(0, len(spans), BATCH):
                batch = spans[i : i + BATCH]
                before = self.rejected
                if self._exporter.export(batch) != SpanExportResult.SUCCESS:
                    break
                done += len(batch)
                # (an endpoint cannot drop more than it was sent: the counts of what was sent stay true)
                self.rejected = min(self.rejected, before + len(batch))
        finally:
            self._sending = None
        return done

    def close(self) -> None:
        """Stop: a request waiting to retry gives up, later ones fail at once. Closing again does
        nothing (the exporter would log "Exporter already shutdown" into the program's log)."""
        if not self._closed:
            self._closed = True
            with contextlib.suppress(ValueError):  # (a shared session outlives this sender)
                self._session.hooks["response"].remove(self._answered)
            self._exporter.shutdown()  # type: ignore[no-untyped-call]  # (the SDK does not annotate it)
