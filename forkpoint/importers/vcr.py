"""Import VCR.py cassettes as sessions that replay.

A cassette is ``{"version": 1, "interactions": [{"request": {...}, "response": {...}}, ...]}``, in
YAML (VCR.py's default serializer) or JSON, or VCR.py's in-memory layout ``{"requests": [...],
"responses": [...]}`` (gzip-compressed YAML, ``.yaml.gz``, as langchain's ``CustomSerializer``
writes it: the two lists are paired in order). Header names and values stored as bytes
(``!!binary``, as botocore sends them) are read as text. Two dialects of it exist in the wild:

* **stock VCR.py**: ``request.body`` is the body as a string (or ``!!binary`` bytes, or null);
  ``response.body.string`` likewise; header values are lists of strings (older cassettes: strings);
  ``response.status`` is ``{code, message}``.
* **``parsed_body``** (pydantic-ai's serializer): a JSON body is stored parsed under
  ``request.parsed_body`` / ``response.parsed_body`` instead; non-JSON bodies (SSE) stay in
  ``body.string``; volatile headers were dropped.

Each interaction becomes one ``model_call`` event in forkpoint's stored shapes (``docs/format.md``):
the request parsed and scrubbed, the response decoded (a ``Content-Encoding`` body is decompressed
and the header removed; so is the header of a body stored already decoded), an event stream split into chunks at event boundaries (a blank line; NDJSON
at each line), hop-by-hop and length headers dropped, and the provider-aware ``summary`` and match
``key`` computed as for a recording. A replay of the session with the real SDK then serves the
cassette's responses.

A cassette holds no timing: durations are null and every stream chunk is at 0 ms. The event's
``ts`` is the response's ``Date`` header when it has one.
"""

from __future__ import annotations

import email.utils
import re
from datetime import UTC
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from .. import eventstream
from ..capture.decoding import DECODED_MAX, TooLarge, decoder, parse_body, scrub_body, scrubbed_body
from ..capture.exchange import (
    DROP_RESPONSE_HEADERS,
    STREAM_TYPES,
    aws_messages,
    header_text,
    too_large,
)
from ..errors import ImportFormatError
from ..events import iso_time
from ..record import keyed
from ..redact import scrub_headers, scrub_json, scrub_stream, scrub_url
from .base import Imported, Importer, no_time

#: The ``anthropic-version`` of the Anthropic API's first version, used when no SDK is installed.
ANTHROPIC_VERSION = "2023-06-01"


def sdk_anthropic_version() -> tuple[str, str]:
    """(the ``anthropic-version`` the installed anthropic SDK sends, where that value came from)."""
    try:
        from anthropic._constants import ANTHROPIC_API_VERSION

        return str(ANTHROPIC_API_VERSION), "the version the installed anthropic SDK sends"
    except Exception:  # not installed, or moved: the API's first (and long its only) version
        return ANTHROPIC_VERSION, "the API's first version (no anthropic SDK installed)"


_EVENT_END = re.compile(r"\r\n\r\n|\n\n|\r\r")


def interactions(doc: Any) -> list[Any] | None:
    """The ``{request, response}`` pairs of a cassette in either layout, or None if it has neither."""
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("interactions"), list):
        return list(doc["interactions"])
    rqs, rss = doc.get("requests"), doc.get("responses")
    if isinstance(rqs, list) and isinstance(rss, list) and len(rqs) == len(rss) and rqs:
        return [{"request": rq, "response": rs} for rq, rs in zip(rqs, rss, strict=True)]
    return None


def looks_like(doc: Any) -> bool:
    """True when ``doc`` has the VCR.py cassette shape (either layout): an interaction of another
    shape is then refused by :func:`convert` naming it, not the file taken for no format at all."""
    its = interactions(doc)
    return its is not None and (
        not its or any(isinstance(i, dict) and ("request" in i or "response" in i) for i in its)
    )


# --------------------------------------------------------------------------- pieces


def _pairs(headers: Any, where: str) -> list[tuple[str, str]]:
    """Header pairs from VCR.py's ``{name: [values]}`` (or ``{name: value}``, or a pair list); names
    and values stored as bytes are read as text. Raises :class:`ImportFormatError` naming ``where``
    for headers of another shape: one dropped or read as Python's text of a mapping would change
    what is matched and served, without a word."""

    def text(value: Any, what: str) -> str:
        if isinstance(value, str | bytes | bytearray):
            return header_text(bytes(value) if isinstance(value, bytearray) else value)
        if isinstance(value, int | float) and not isinstance(value, bool):  # (YAML reads `Age: 5` so)
            return str(value)
        raise ImportFormatError(f"{where}: a header {what} is {type(value).__name__} {value!r:.80}, not text")

    out: list[tuple[str, str]] = []
    if headers is None:
        return out
    if isinstance(headers, dict):
        for k, values in headers.items():
            for v in values if isinstance(values, list) else [values]:
                out.append((text(k, "name"), "" if v is None else text(v, "value")))
    elif isinstance(headers, list):
        for item in headers:
            if not (isinstance(item, list | tuple) and len(item) == 2):
                raise ImportFormatError(f"{where}: a header is {item!r:.80}, not a [name, value] pair")
            out.append((text(item[0], "name"), text(item[1], "value")))
    else:
        raise ImportFormatError(f"{where}: the headers are {type(headers).__name__}, not a mapping or a list")
    return out


def _text(value: Any, where: str, what: str, expected: str) -> str:
    """``value``, the ``what`` of ``where``, as text. Raises :class:`ImportFormatError` naming both
    and ``expected`` when it is of another type: Python's text of a list or a number would be
    imported (and matched, and served) in its place."""
    if not isinstance(value, str):
        raise ImportFormatError(
            f"{where}: the {what} is {type(value).__name__} {value!r:.80}, not text (expected {expected})"
        )
    return value


def _header(pairs: list[tuple[str, str]], name: str) -> str:
    return next((v for k, v in pairs if k.lower() == name), "")


def _as_bytes(value: Any) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return orjson.dumps(value)  # a serializer that kept a parsed JSON body under "body"


def split_stream(data: bytes, content_type: str) -> list[bytes]:
    """An event-stream body cut into its events, each with its terminating blank line (SSE), or
    its lines (NDJSON). Joining the pieces gives ``data`` back."""
    if "ndjson" in content_type or "jsonl" in content_type:
        return [line for line in data.splitlines(keepends=True) if line]
    text = data.decode("latin-1")  # byte-preserving: only ASCII delimiters are searched
    pieces, pos = [], 0
    for m in _EVENT_END.finditer(text):
        pieces.append(data[pos : m.end()])
        pos = m.end()
    if pos < len(data):
        pieces.append(data[pos:])
    return [p for p in pieces if p]


def _text_or_bytes(data: bytes) -> str | bytes:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def _request(rq: dict[str, Any], n: int, notes: list[str], where: str) -> dict[str, Any]:
    pairs = _pairs(rq.get("headers"), f"{where}: the request")
    ctype = _header(pairs, "content-type")
    if "parsed_body" in rq:
        kind, body = ("json", rq["parsed_body"]) if rq["parsed_body"] is not None else ("empty", None)
    else:
        kind, body = parse_body(_as_bytes(rq.get("body")) or b"", ctype)
    uri = rq["uri"]
    path = urlsplit(uri).path
    names = {k.lower() for k, _ in pairs}
    # The match key includes content-type and anthropic-version; a cassette whose serializer dropped
    # them would never match an SDK's request. The SDK sent JSON, and the Anthropic API requires
    # anthropic-version (whose value is lost: the one today's SDK sends is the useful guess).
    if kind == "json" and "content-type" not in names:
        pairs.append(("content-type", "application/json"))
        notes.append(f"interaction {n}: no content-type header in the cassette; set to application/json")
    if path.rstrip("/").endswith("/v1/messages") and "anthropic-version" not in names:
        version, why = sdk_anthropic_version()
        pairs.append(("anthropic-version", version))
        notes.append(
            f"interaction {n}: no anthropic-version header in the cassette (its serializer dropped it; "
            f"the API requires one); set to {version}, {why}"
        )
    return {
        "method": _text(
            rq.get("method") or "GET", where, "request's method", "an HTTP method such as POST"
        ).upper(),
        "url": scrub_url(uri),
        "headers": scrub_headers(pairs, request=True),
        "body_kind": kind,
        "body": scrub_body(kind, body, content_type=ctype),
    }


def _status(rs: dict[str, Any], where: str) -> tuple[int, str]:
    """(status code, reason) of a response: ``status: {code, message}`` (vcrpy), ``status: 200``, or
    ``status_code``/``reason``. Raises :class:`ImportFormatError` naming ``where`` when there is
    none or it is no HTTP status: a default would replay a recorded error as a success."""
    st = rs.get("status")
    code, reason = (st.get("code"), st.get("message")) if isinstance(st, dict) else (st, None)
    if code is None:
        code, reason = rs.get("status_code"), rs.get("reason")
    if isinstance(code, str) and code.strip().isdigit():
        code = int(code)
    if isinstance(code, bool) or not isinstance(code, int) or not 100 <= code <= 999:
        raise ImportFormatError(
            f"{where}: the response has no HTTP status (status: {{code: 200}}), got {code!r}"
        )
    return code, _text(reason or "", where, "response's status message", "a reason phrase such as OK")


def _response(
    rs: dict[str, Any], where: str, headers: list[tuple[str, str]], n: int, notes: list[str]
) -> dict[str, Any]:
    """The stored response of ``rs`` (interaction ``n``), whose header pairs are ``headers``
    (:func:`_pairs`); what had to be adjusted is added to ``notes``."""
    status, reason = _status(rs, where)
    pairs = [(k, v) for k, v in headers if k.lower() not in DROP_RESPONSE_HEADERS]
    ctype = _header(pairs, "content-type")
    out: dict[str, Any] = {"status": status, "reason": reason, "http_version": "HTTP/1.1"}
    if "parsed_body" in rs:
        body = rs["parsed_body"]
        out["headers"] = scrub_headers(pairs)
        out["body_kind"] = "json" if body is not None else "empty"
        out["body"] = scrub_json(body)
        out["ended"] = "complete"
        return out
    raw_body = rs.get("body")
    data = _as_bytes(raw_body.get("string") if isinstance(raw_body, dict) else raw_body) or b""
    encoding = _header(pairs, "content-encoding").strip().lower()
    decoded_from: list[str] = []
    withheld = None
    if encoding and data:
        decode = decoder(encoding, limit=DECODED_MAX)
        if decode is not None:
            try:
                data = decode(data)
            except TooLarge:  # (as a recording withholds one: none of it stored, the header kept)
                withheld = too_large(where, "response", [encoding])
                data, decode = b"", None
            except Exception:
                # Stored already decoded under its Content-Encoding (VCR.py with requests on urllib3
                # 2 writes such cassettes): kept as it is, the header would make a replayed client
                # decode plain bytes again, and fail.
                notes.append(
                    f"interaction {n}: the response says Content-Encoding: {encoding} but its body "
                    "is not compressed (stored decoded)"
                )
        if decode is not None:
            pairs = [(k, v) for k, v in pairs if k.lower() != "content-encoding"]
            if encoding != "identity":  # as a recording stores it: see decoded_from below
                decoded_from = [encoding]
    out["headers"] = scrub_headers(pairs)
    if eventstream.is_event_stream(ctype):  # binary messages: one chunk each, never scrubbed apart
        out["body_kind"] = "stream"
        out["chunks"] = [[t, _text_or_bytes(c)] for t, c in zip(*aws_messages([0.0], [data]), strict=True)]
    elif any(t in ctype.lower() for t in STREAM_TYPES):
        chunks = scrub_stream(split_stream(data, ctype.lower()), ctype)
        out["body_kind"] = "stream"
        out["chunks"] = [[0.0, _text_or_bytes(c)] for c in chunks if c]
    else:
        kind, out["body"] = scrubbed_body(data, ctype)
        out["body_kind"] = kind
        if decoded_from:  # a replay encodes it again for a client that decodes itself (urllib)
            out["decoded_from"] = decoded_from
    out["ended"] = "complete"
    if withheld is not None:
        out["withheld"] = withheld
    return out


#: ``name/version`` tokens of ``user-agent`` and ``x-goog-api-client`` that name a tracked package (or
#: Python) and its version: ``google-genai-sdk/1.2.0 gl-python/3.11.7``, ``python-requests/2.31.0``,
#: ``Boto3/1.34.0 md/Botocore#1.34.0 … lang/python#3.11.7``.
_UA_TOKENS = {
    "google-genai-sdk": "google-genai",
    "gl-python": "python",
    "python-requests": "requests",
    "python-httpx": "httpx",
    "aiohttp": "aiohttp",
    "boto3": "boto3",
    "botocore": "botocore",
    "md/botocore": "botocore",
    "lang/python": "python",
}
# (A token starts where a run of its characters does: tried from within a run as well, each start
# scanned the rest of it, quadratic in a long header with no version in it.)
_UA_TOKEN = re.compile(r"(?<![\w./-])([\w./-]+?)[/#](\d[\w.+-]*)")
#: A Stainless SDK's ``user-agent`` (``OpenAI/Python 1.30.1``, ``AsyncAnthropic/Python 0.40.0``).
_STAINLESS_UA = re.compile(r"^(?:Async)?(OpenAI|Anthropic)/Python\b", re.IGNORECASE)


def sdk_versions(headers: list[tuple[str, str]]) -> dict[str, str]:
    """The versions of Python and of the packages that sent a request, as its headers name them
    (``header["versions"]`` of an imported session: the run's, never the importing environment's).
    A Stainless SDK's ``x-stainless-package-version`` is the openai or anthropic SDK's as its
    ``user-agent`` says, or anthropic's when the request carries ``anthropic-version`` (a cassette's
    filter may have replaced the user agent); what no header names is left out."""
    out: dict[str, str] = {}
    ua = _header(headers, "user-agent")
    for text in (ua, _header(headers, "x-goog-api-client")):
        for token, version in _UA_TOKEN.findall(text):
            name = _UA_TOKENS.get(token.lower())
            if name:
                out.setdefault(name, version)
    if _header(headers, "x-stainless-lang").lower() == "python":
        sdk = _STAINLESS_UA.match(ua.strip())
        package = (
            sdk.group(1).lower() if sdk else "anthropic" if _header(headers, "anthropic-version") else None
        )
        version = _header(headers, "x-stainless-package-version").strip()
        if package and re.fullmatch(r"\d[\w.+-]*", version):
            out.setdefault(package, version)
        runtime = _header(headers, "x-stainless-runtime-version").strip()
        if _header(headers, "x-stainless-runtime") == "CPython" and re.fullmatch(r"\d[\w.+-]*", runtime):
            out.setdefault("python", runtime)
    return out


def _date(pairs: list[tuple[str, str]]) -> str | None:
    value = _header(pairs, "date")
    if not value:
        return None
    try:
        dt = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return iso_time(dt)


def convert(path: Path, doc: Any) -> Imported:
    """The model calls of a cassette (see the module docstring)."""
    if not looks_like(doc):
        raise ImportFormatError(f"{path}: not a VCR.py cassette (no `interactions` list)")
    notes: list[str] = []
    events: list[dict[str, Any]] = []
    dialects: set[str] = set()
    dated = 0
    undated: list[int] = []  # (interactions whose Date header is no date)
    first_undated: str | None = None
    versions: dict[str, str] = {}
    for n, it in enumerate(interactions(doc) or [], start=1):
        where = f"{path}: interaction {n}"
        if not isinstance(it, dict):
            raise ImportFormatError(
                f"{where} is {type(it).__name__} {it!r:.80}, not a mapping (expected {{request, response}})"
            )
        for part in ("request", "response"):
            if part not in it:
                raise ImportFormatError(f"{where} has no {part} (expected {{request, response}})")
            if not isinstance(it[part], dict):
                raise ImportFormatError(
                    f"{where}: the {part} is {type(it[part]).__name__} {it[part]!r:.80}, not a mapping"
                )
        rq, rs = it["request"], it["response"]
        dialects.add("parsed_body" if "parsed_body" in rq or "parsed_body" in rs else "stock")
        if rq.get("uri") in (None, ""):
            raise ImportFormatError(f"{where}: the request has no uri")
        _text(rq["uri"], where, "request's uri", "a URL")
        request = _request(rq, n, notes, where)
        headers = _pairs(rs.get("headers"), f"{where}: the response")
        event: dict[str, Any] = {
            "type": "model_call",
            "duration_ms": None,
            "request": request,
            "response": _response(rs, where, headers, n, notes),
        }
        ts = _date(headers)
        if ts:
            event["ts"] = ts
            dated += 1
        elif _header(headers, "date"):
            undated.append(n)
            first_undated = first_undated or _header(headers, "date")
        events.append(keyed(event))
        for name, version in sdk_versions(_pairs(rq.get("headers"), f"{where}: the request")).items():
            versions.setdefault(name, version)
    if undated:
        notes.append(no_time("Date header", "interaction(s)", undated, first_undated))
    missing = ["call durations and stream chunk timing (a cassette stores none; chunks are at 0 ms)"]
    if dated < len(events):
        missing.append("the time of calls without a Date response header")
    if "parsed_body" in dialects:
        missing.append("request and response headers the cassette's serializer dropped as volatile")
    missing.append("credentials (a cassette holds placeholders, and forkpoint drops credential headers)")
    missing.append("tool calls (a cassette records HTTP traffic only)")
    return Imported(
        format="vcr",
        events=events,
        missing=missing,
        adjusted=notes,
        details={"dialect": "+".join(sorted(dialects)) or "stock", "interactions": len(events)},
        versions=versions,
    )


IMPORTER = Importer(
    "vcr",
    "a VCR.py cassette (YAML or JSON with an `interactions` list of {request, response})",
    looks_like,
    convert,
)
