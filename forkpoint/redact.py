"""The scrubber: one function family that every path writing or matching data goes through.

Rules (baseline; see docs/security.md):

* Credential headers (:data:`SECRET_HEADERS`, any case) are dropped, never written.
* Values shaped like a known secret (:data:`PATTERNS`) are replaced, wherever they occur in text
  (bodies, stream chunks, URLs, tool arguments and results, exception messages), by a deterministic
  placeholder ``[REDACTED:<kind>:<8 hex of sha256(secret)>]``. The same secret always gives the same
  placeholder, so a scrubbed recording still matches a live request scrubbed the same way; eight hex
  digits of a hash of a high-entropy key do not help anyone recover it.
* Query parameters whose name says they carry a credential (``api_key``, ``key``, ``token``...) are
  replaced the same way.

Scrubbing is idempotent: a placeholder never matches a pattern again.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

#: Headers whose values are credentials. Compared lower-case.
SECRET_HEADERS: frozenset[str] = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
        "x-auth-token",
        "x-amz-security-token",
        "openai-api-key",
        "anthropic-api-key",
    }
)

#: Query-string parameter names whose values are credentials. Compared lower-case.
SECRET_QUERY_PARAMS: frozenset[str] = frozenset(
    {"key", "api_key", "apikey", "api-key", "access_token", "token", "auth", "sig", "signature"}
)

#: (kind, pattern) pairs. Order matters: the first pattern that matches at a position wins, so the
#: more specific shapes come first. Group "s", where present, is the part that is replaced.
PATTERNS: tuple[tuple[str, str], ...] = (
    (
        "private-key",
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----",
    ),
    ("anthropic-key", r"sk-ant-[A-Za-z0-9_\-]{20,}"),
    ("openai-key", r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}"),
    ("aws-access-key", r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),
    ("google-api-key", r"\bAIza[0-9A-Za-z_\-]{35}\b"),
    ("github-token", r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})\b"),
    ("jwt", r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    ("bearer", r"(?i:\bbearer)\s+(?P<s>[A-Za-z0-9\-._~+/]{8,}=*)"),
)

_COMBINED = "|".join(f"(?P<k{i}>{p.replace('(?P<s>', f'(?P<s{i}>')})" for i, (_, p) in enumerate(PATTERNS))
_TEXT_RE = re.compile(_COMBINED)
_BYTES_RE = re.compile(_COMBINED.encode())
_PLACEHOLDER_RE = re.compile(r"\[REDACTED:[a-z0-9-]+:[0-9a-f]{8}\]")


def placeholder(kind: str, secret: str | bytes) -> str:
    """The deterministic stand-in for ``secret`` of the given ``kind``."""
    raw = secret.encode() if isinstance(secret, str) else secret
    return f"[REDACTED:{kind}:{hashlib.sha256(raw).hexdigest()[:8]}]"


def _span(m: re.Match[Any]) -> tuple[int, int, str]:
    """(start, end, kind) of the secret inside a combined-pattern match."""
    for i, (kind, _) in enumerate(PATTERNS):
        if m.group(f"k{i}") is not None:
            sub = f"s{i}"
            if sub in m.re.groupindex and m.group(sub) is not None:
                return m.start(sub), m.end(sub), kind
            return m.start(), m.end(), kind
    raise AssertionError("unreachable: a combined match names one alternative")


def find_secrets(text: str) -> list[tuple[int, int, str]]:
    """Spans ``(start, end, kind)`` of every secret in ``text``, in order, non-overlapping."""
    return [_span(m) for m in _TEXT_RE.finditer(text)]


def scrub_text(text: str) -> str:
    """``text`` with every secret replaced by its placeholder."""
    if not _TEXT_RE.search(text):
        return text
    out: list[str] = []
    pos = 0
    for start, end, kind in find_secrets(text):
        out.append(text[pos:start])
        out.append(placeholder(kind, text[start:end]))
        pos = end
    out.append(text[pos:])
    return "".join(out)


def scrub_bytes(data: bytes) -> bytes:
    """``data`` with every secret replaced (byte-level, so non-UTF-8 payloads are safe too)."""
    if not _BYTES_RE.search(data):
        return data
    return scrub_chunks([data])[0]


def scrub_chunks(chunks: Sequence[bytes]) -> list[bytes]:
    """Scrub a stream given as chunks, catching secrets split across chunk boundaries.

    Returns as many chunks as it was given. A secret is replaced in the chunk where it starts;
    the rest of it is removed from the chunks it spilled into, so every other byte keeps its chunk.
    """
    joined = b"".join(chunks)
    matches = [_span(m) for m in _BYTES_RE.finditer(joined)]
    if not matches:
        return list(chunks)
    bounds: list[tuple[int, int]] = []
    pos = 0
    for c in chunks:
        bounds.append((pos, pos + len(c)))
        pos += len(c)
    out: list[bytes] = []
    for cstart, cend in bounds:
        piece = bytearray()
        p = cstart
        for start, end, kind in matches:
            if end <= cstart or start >= cend:
                continue
            piece += joined[p : max(start, cstart)] if start > p else b""
            if cstart <= start < cend:
                piece += placeholder(kind, joined[start:end]).encode()
            p = min(end, cend)
        if p < cend:
            piece += joined[p:cend]
        out.append(bytes(piece))
    return out


def scrub_json(value: Any) -> Any:
    """A copy of JSON data with every string (values and keys) scrubbed. Unchanged parts are shared."""
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, dict):
        return {scrub_text(k): scrub_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub_json(v) for v in value]
    return value


def scrub_headers(headers: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Header pairs without credential headers, other values scrubbed. Names keep their case."""
    return [[name, scrub_text(value)] for name, value in headers if name.lower() not in SECRET_HEADERS]


def _is_placeholder(value: str) -> bool:
    return _PLACEHOLDER_RE.fullmatch(value) is not None


def scrub_url(url: str) -> str:
    """``url`` with credential query parameters and secret-shaped substrings replaced."""
    parts = urlsplit(url)
    if parts.query:
        pairs = parse_qsl(parts.query, keep_blank_values=True)

        def secret(k: str, v: str) -> bool:  # a placeholder is left alone: scrubbing is idempotent
            return k.lower() in SECRET_QUERY_PARAMS and bool(v) and not _is_placeholder(v)

        if any(secret(k, v) for k, v in pairs):
            query = urlencode(
                [(k, placeholder("query-credential", v) if secret(k, v) else v) for k, v in pairs]
            )
            parts = parts._replace(query=query)
    userinfo, _, host = parts.netloc.rpartition("@")
    if (parts.username or parts.password) and not _is_placeholder(unquote(userinfo)):
        # Percent-encoded: a bare "[...]" in the authority would read as an IPv6 host.
        ph = quote(placeholder("url-credential", parts.netloc), safe="")
        parts = parts._replace(netloc=f"{ph}@{host}")
    return scrub_text(urlunsplit(parts))
