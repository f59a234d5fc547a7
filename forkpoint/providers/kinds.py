"""Kinds of HTTP call: a model call, MCP over HTTP, telemetry (and metadata), or plain HTTP.

forkpoint records every HTTP exchange a captured library makes; only those a provider recognizes
are *model calls* (numbered ``model#K``, shown as turns, exported as GenAI spans). The others are:

* ``telemetry`` — what frameworks send about a run, or fetch for it, that does not change what the
  agent does: the OpenAI Agents SDK's trace upload, litellm's model price list, agno's and
  CrewAI's anonymous telemetry, LangSmith and Langfuse tracing, Logfire, PostHog, Sentry, any OTLP
  export, and the AWS credentials botocore fetches from an instance or container endpoint. A replay answers them from the recording when it has them, else with the neutral answer
  the client expects (:data:`TELEMETRY`), and they never make a replay diverge or leave calls unused.
* ``mcp`` — a Model Context Protocol server over streamable HTTP (JSON-RPC 2.0 bodies, or the
  ``mcp-session-id`` / ``mcp-protocol-version`` headers; spec: modelcontextprotocol.io, "Transports").
  Its messages are matched like any call; the background ``GET`` (the server's event stream) and the
  closing ``DELETE`` are session management, answered like telemetry (:func:`is_session_management`).
* ``http`` — anything else (a search API, a file download): recorded and served as such.

Pure functions over plain data (and the variables naming where botocore fetches container
credentials); nothing here raises on malformed input.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, NamedTuple
from urllib.parse import urlsplit

Kind = Literal["model", "mcp", "telemetry", "http"]
KINDS: tuple[Kind, ...] = ("model", "mcp", "telemetry", "http")


class Answer(NamedTuple):
    """A neutral answer to an endpoint forkpoint answers itself on replay: status, content type, body."""

    status: int
    content_type: str | None
    body: Any  # JSON value, or None for an empty body


class Endpoint(NamedTuple):
    """A known telemetry or metadata endpoint: the host (a suffix of the request's host, ``""`` for
    any host), a path pattern (regular expression, searched), the neutral answer on replay, the
    one method it takes (None: any), and what its requests look like (``looks(parsed JSON body or
    None, headers)``; None: anything). An endpoint of any host has a ``looks``, so that an
    application's own ``GET`` or ``POST /api/v1/logs`` is not taken for an exporter's."""

    name: str
    host: str
    path: str
    answer: Answer
    method: str | None = None
    looks: Callable[[object, Iterable[Any] | Mapping[str, str] | None], bool] | None = None


_ACCEPTED = Answer(200, "application/json", {})
_EMPTY = Answer(204, None, None)

#: The top-level field of an OTLP/HTTP export in JSON (opentelemetry-proto's Export*ServiceRequest).
_OTLP_FIELDS = frozenset({"resourceSpans", "resourceMetrics", "resourceLogs", "resource_spans"})


def _otlp_export(body: object, headers: Iterable[Any] | Mapping[str, str] | None) -> bool:
    """An OTLP/HTTP export: protobuf (its only binary encoding), or JSON holding one."""
    if "protobuf" in (_header(headers, "content-type") or ""):
        return True
    return isinstance(body, dict) and not _OTLP_FIELDS.isdisjoint(body)


#: The ``User-Agent`` the OTLP exporter specification asks of an SDK's exporters
#: (opentelemetry.io/docs/specs/otel/protocol/exporter/#user-agent): ``OTel-OTLP-Exporter-Python/1.45.1``,
#: Go's ``OTel OTLP Exporter Go/…``.
_OTLP_USER_AGENT = re.compile(r"OTel[- ]OTLP[- ]Exporter[- ]")


def _otlp_exporter(body: object, headers: Iterable[Any] | Mapping[str, str] | None) -> bool:
    """An OTLP/HTTP export by an SDK's exporter (:data:`_OTLP_USER_AGENT`) to a path of its own."""
    return bool(_OTLP_USER_AGENT.match(_header(headers, "user-agent") or "")) and _otlp_export(body, headers)


def _langsmith_client(body: object, headers: Iterable[Any] | Mapping[str, str] | None) -> bool:
    """LangSmith's client (``langsmith-py/…`` in its ``User-Agent``), on any host: a self-hosted
    LangSmith, ``LANGSMITH_ENDPOINT``."""
    return (_header(headers, "user-agent") or "").startswith("langsmith-py/")


def _agno_client(body: object, headers: Iterable[Any] | Mapping[str, str] | None) -> bool:
    """agno's telemetry client (``agno/…`` in its ``User-Agent``), on any host: ``AGNO_API_RUNTIME=dev``
    sends it to ``localhost:7070`` (port 7070 of the Docker host under ``AGNO_RUNTIME=docker``)."""
    return (_header(headers, "user-agent") or "").startswith("agno/")


def _botocore_client(body: object, headers: Iterable[Any] | Mapping[str, str] | None) -> bool:
    """botocore's credential fetchers (``Botocore/…`` in their ``User-Agent``): the instance
    metadata service may be at any host (``AWS_EC2_METADATA_SERVICE_ENDPOINT``). Not its API calls,
    whose agent names its format (``ua/2.1``): S3 at a custom endpoint is path-style, so a bucket
    named ``latest`` has keys at ``/latest/meta-data/…`` too."""
    agent = _header(headers, "user-agent") or ""
    return "Botocore/" in agent and " ua/" not in agent


def _agents_trace_upload(body: object, headers: Iterable[Any] | Mapping[str, str] | None) -> bool:
    """The OpenAI Agents SDK's span upload: ``{"data": [spans and traces]}``."""
    return isinstance(body, dict) and isinstance(body.get("data"), list)


#: The telemetry and metadata endpoints of the frameworks forkpoint supports (first match wins).
TELEMETRY: tuple[Endpoint, ...] = (
    # OpenAI Agents SDK: BackendSpanExporter posts spans; any status below 300 is success.
    Endpoint("openai-agents traces", "", r"/v1/traces/ingest$", _EMPTY, "POST", _agents_trace_upload),
    # litellm fetches its model price list at import; a failed fetch makes it load its bundled copy.
    Endpoint(
        "litellm model prices",
        "raw.githubusercontent.com",
        r"/BerriAI/litellm/.*model_prices_and_context_window.*\.json$",
        Answer(503, "text/plain", None),
    ),
    Endpoint("agno telemetry", "agno.com", r"", _ACCEPTED),
    Endpoint("agno telemetry", "", r"^/telemetry/(runs|evals|os)/?$", _ACCEPTED, "POST", _agno_client),
    Endpoint("crewai telemetry", "telemetry.crewai.com", r"", _ACCEPTED),
    # AWS credentials botocore fetches before its first call (EC2's instance metadata service; the
    # container endpoints: _container_credentials): they sign the requests, which a replay runs with
    # other credentials; answered 404 when not recorded, so botocore looks no further there.
    Endpoint(
        "aws instance metadata",
        "",
        r"^/latest/(api/token$|meta-data/|dynamic/)",
        Answer(404, None, None),
        None,
        _botocore_client,
    ),
    Endpoint("langsmith tracing", "smith.langchain.com", r"", _ACCEPTED),
    Endpoint(
        "langsmith tracing",
        "",
        r"/(runs(/multipart|/batch|/[0-9a-f-]{36})?|info|sessions)/?$",
        _ACCEPTED,
        None,
        _langsmith_client,
    ),
    Endpoint("langfuse tracing", "langfuse.com", r"/api/public/(ingestion|otel)", _ACCEPTED),
    Endpoint("logfire", "pydantic.dev", r"^/v1/(traces|metrics|logs)$", _ACCEPTED),
    Endpoint("posthog", "posthog.com", r"", Answer(200, "application/json", {"status": 1})),
    Endpoint("sentry", "sentry.io", r"/envelope/?$|/store/?$", _ACCEPTED),
    Endpoint("huggingface telemetry", "huggingface.co", r"^/api/telemetry", _ACCEPTED),
    # Any OTLP/HTTP export (opentelemetry.io/docs/specs/otlp/#otlphttp: always a POST): an empty success.
    Endpoint(
        "otlp export",
        "",
        r"^(/[^/]+)*/v1/(traces|metrics|logs)$",
        Answer(200, None, None),
        "POST",
        _otlp_export,
    ),
    # The same at a path of its own: a signal's endpoint variable is used as it is
    # (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://collector:4318 posts to /), by the exporter's agent.
    Endpoint("otlp export", "", r"", Answer(200, None, None), "POST", _otlp_exporter),
)


#: Each endpoint's path pattern, compiled once (every HTTP call a replay serves is looked at).
_PATHS = {e.path: re.compile(e.path) for e in TELEMETRY}


@functools.lru_cache(maxsize=256)
def _at_host(host: str) -> tuple[Endpoint, ...]:
    """The endpoints of :data:`TELEMETRY` a request to ``host`` may be at, in order (every HTTP call
    a replay serves is looked at, most at a host no telemetry endpoint names)."""
    return tuple(e for e in TELEMETRY if not e.host or host == e.host or host.endswith("." + e.host))


#: AWS credentials botocore fetches from a container endpoint: where its environment names one.
_CONTAINER_CREDENTIALS = Endpoint("aws container credentials", "", r"", Answer(404, None, None), "GET")
#: ECS's credentials host, which ``AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`` is a path on (botocore).
ECS_CREDENTIALS_HOST = "http://169.254.170.2"


def _container_credentials(url: str) -> bool:
    """Whether ``url`` is where botocore fetches container credentials, as its environment says:
    ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` (EKS Pod Identity's 169.254.170.23, or any loopback URL:
    aws-vault's ``--ecs-server``, Greengrass) or ECS's host and ``AWS_CONTAINER_CREDENTIALS_RELATIVE_URI``.
    Only that URL: an application's own server may be on the same host."""
    relative = os.environ.get("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")  # (botocore's first choice)
    full = (
        ECS_CREDENTIALS_HOST + relative if relative else os.environ.get("AWS_CONTAINER_CREDENTIALS_FULL_URI")
    )
    if not full:
        return False
    try:
        a, b = urlsplit(url), urlsplit(full)
        return (a.hostname, a.port, a.path or "/") == (b.hostname, b.port, b.path or "/")
    except ValueError:
        return False


def _host(url: object) -> tuple[str, str]:
    return _text_host(url) if isinstance(url, str) else ("", "")


@functools.lru_cache(maxsize=256)
def _text_host(url: str) -> tuple[str, str]:
    try:
        parts = urlsplit(url)
        return (parts.hostname or "").lower(), parts.path
    except ValueError:
        return "", ""


def telemetry_endpoint(
    method: str, url: str, body: object = None, headers: Iterable[Any] | Mapping[str, str] | None = None
) -> Endpoint | None:
    """The known telemetry or metadata endpoint a ``method`` request to ``url`` is at, or None; at an
    endpoint of any host, only a request that looks like its exporter's (its parsed JSON ``body``,
    its ``headers``: :class:`Endpoint`)."""
    host, path = _host(url)
    method = method.upper()
    if method == "GET" and _container_credentials(url):
        return _CONTAINER_CREDENTIALS
    named = headers_by_name(headers)
    for e in _at_host(host):
        if e.method is not None and method != e.method:
            continue
        if _PATHS[e.path].search(path) and (e.looks is None or e.looks(body, named)):
            return e
    return None


class Headers(dict[str, str]):
    """A request's headers by lower-case name (the first of a repeated one), read once for the
    several checks of one classification (each looked them all over again)."""


def headers_by_name(headers: Iterable[Any] | Mapping[str, str] | None) -> Headers:
    """``headers`` (pairs, or a mapping) as :class:`Headers`."""
    if isinstance(headers, Headers):
        return headers
    pairs = headers.items() if isinstance(headers, Mapping) else headers or []
    out = Headers()
    for p in pairs:
        try:
            out.setdefault(str(p[0]).lower(), str(p[1]))
        except (TypeError, IndexError, KeyError):  # (an edited session's malformed pair)
            continue
    return out


def _header(headers: Iterable[Any] | Mapping[str, str] | None, name: str) -> str | None:
    return headers_by_name(headers).get(name)


def is_jsonrpc(body: object) -> bool:
    """A JSON-RPC 2.0 message or batch (MCP's messages)."""
    items = body if isinstance(body, list) and body else [body]
    return all(isinstance(m, dict) and m.get("jsonrpc") == "2.0" for m in items)


def is_mcp(method: str, body: object, headers: Iterable[Any] | Mapping[str, str] | None) -> bool:
    """Whether a request is MCP over streamable HTTP: a JSON-RPC body, or MCP's own headers."""
    named = headers_by_name(headers)
    if named.get("mcp-session-id") or named.get("mcp-protocol-version"):
        return True
    return method.upper() == "POST" and is_jsonrpc(body)


def is_session_management(method: str, kind: Kind) -> bool:
    """An MCP request that is no message of the conversation: the background ``GET`` that opens the
    server's event stream, or the ``DELETE`` that ends the session."""
    return kind == "mcp" and method.upper() in ("GET", "DELETE")


def mcp_method(body: object) -> str | None:
    """The JSON-RPC method of an MCP request (the first of a batch), or None for a response/none."""
    first = body[0] if isinstance(body, list) and body else body
    method = first.get("method") if isinstance(first, dict) else None
    return method if isinstance(method, str) else None
