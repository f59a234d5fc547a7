"""Match keys, and the structured diff that explains a divergence.

A recorded model call is found again at replay by its **match key**: the SHA-256 of the canonical
JSON of the *normalized* request. Normalizing keeps what decides the model's answer and drops what
varies between two runs of the same program:

* kept: method, URL path, query (sorted, scrubbed), the parsed body (scrubbed), and the few headers
  that change the meaning of a request (:data:`SEMANTIC_HEADERS`, e.g. ``anthropic-version``);
* dropped: credentials in the query (``?key=``, ``?api_key=``, ``?access_token=``… — the scrubber's
  credential parameters: a recording made with one key replays with another), scheme, host and port
  (a replay may run against another base URL), every other header —
  SDK telemetry such as ``x-stainless-*``, ``user-agent``, idempotency keys, request ids, retry
  counts, credentials — since none of them changes what the model sees.

Tool calls are keyed the same way on ``{"tool": name, "args": arguments}``.

Calls with the same key are answered in the order they were **sent** (:func:`in_send_order`), which
is the recorded order unless concurrent calls finished in another order than they started.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit

from . import redact
from .canonical import digest
from .providers import semantic_headers
from .redact import scrub_bytes, scrub_json, scrub_url

#: Request headers that are part of the match key (lower-case). All others are ignored. Content-type
#: for every request; the rest name a provider's API version or features (``anthropic-version``,
#: ``anthropic-beta``, ``openai-beta``: :func:`forkpoint.providers.semantic_headers`).
SEMANTIC_HEADERS: frozenset[str] = frozenset({"content-type"}) | semantic_headers()


def normalize_request(
    method: str, url: str, headers: dict[str, str] | list[list[str]] | None, body: Any
) -> dict[str, Any]:
    """The part of an HTTP request that its match key covers, as plain JSON data.

    ``body`` is already parsed (JSON value, text as ``str``, binary data as ``bytes``, which becomes
    ``{"$b64": str}``); it is scrubbed here, so callers may pass a live request. A multipart body's
    boundary, random for every request, is replaced by a fixed token.
    """
    parts = urlsplit(scrub_url(url))
    secret_params = redact.current().query_params
    pairs = list(headers.items() if isinstance(headers, dict) else (headers or []))
    kept = {k.lower(): v.split(";")[0].strip() if k.lower() == "content-type" else v for k, v in pairs}
    ctype = next((v for k, v in pairs if k.lower() == "content-type"), "")
    return {
        "method": method.upper(),
        "path": parts.path,
        "query": sorted(
            (k, v)
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
            if k.lower() not in secret_params
        ),
        "headers": {k: v for k, v in sorted(kept.items()) if k in SEMANTIC_HEADERS},
        "body": scrub_json(_stable_body(body, ctype)),
    }


def _stable_body(body: Any, content_type: str) -> Any:
    m = (
        re.search(r'boundary="?([^";]+)"?', content_type)
        if content_type.lower().startswith("multipart/")
        else None
    )
    if m and isinstance(body, str):
        body = body.replace(m.group(1), "forkpoint-boundary")
    elif m and isinstance(body, bytes):
        body = body.replace(m.group(1).encode(), b"forkpoint-boundary")
    if isinstance(body, bytes | bytearray):  # not JSON data: hashed (and diffed) as base64 text
        return {"$b64": base64.b64encode(scrub_bytes(bytes(body))).decode()}
    return body


def model_key(normalized: dict[str, Any]) -> str:
    """Match key (64 hex) of a normalized request from :func:`normalize_request`."""
    return digest(normalized)


def in_send_order(events: Iterable[_E]) -> list[_E]:
    """Recorded calls that share one match key, in the order they were sent.

    Events are written when a call *ends*, so concurrent identical requests (best-of-n sampling with
    ``asyncio.gather``) appear in the log in the order they finished, which depends on the server.
    Each model and tool call records ``sent``, its position among the calls its process started, and
    ``pid``. Calls are ordered process by process (a process before another when its first call
    here was logged first), and within a process by ``sent``; a call without ``sent`` keeps its
    place in the log.
    """
    out = list(events)
    if len(out) < 2 or not all(isinstance(e.get("sent"), int) for e in out):
        return out
    first_seq: dict[Any, int] = {}
    for e in out:
        first_seq.setdefault(e.get("pid"), int(e.get("seq") or 0))
    return sorted(out, key=lambda e: (first_seq[e.get("pid")], e["sent"]))


_E = TypeVar("_E", bound=Mapping[str, Any])


def tool_key(name: str, args: Any) -> str:
    """Match key (64 hex) of a tool call: its name and its (scrubbed, JSON) arguments."""
    return digest({"tool": name, "args": scrub_json(args)})


def normalized(event: Mapping[str, Any]) -> dict[str, Any]:
    """What the match key of a recorded call covers: the normalized request of a model call
    (:func:`normalize_request`), ``{"tool", "args"}`` of a tool call."""
    if event.get("type") == "tool_call":
        return {"tool": event["tool"], "args": event.get("args")}
    r = event["request"]
    return normalize_request(r["method"], r["url"], r["headers"], r["body"])


def event_key(event: Mapping[str, Any]) -> str:
    """The match key of a recorded model or tool call, computed from its request or arguments: the
    one function every reader and writer of ``key`` uses."""
    if event.get("type") == "tool_call":
        return tool_key(event["tool"], event.get("args"))
    return model_key(normalized(event))
