"""Match keys, and the structured diff that explains a divergence.

A recorded model call is found again at replay by its **match key**: the SHA-256 of the canonical
JSON of the *normalized* request. Normalizing keeps what decides the model's answer and drops what
varies between two runs of the same program:

* kept: method, URL path, query (sorted, scrubbed), the parsed body (scrubbed), and the few headers
  that change the meaning of a request (:data:`SEMANTIC_HEADERS`, e.g. ``anthropic-version``);
* dropped: scheme, host and port (a replay may run against another base URL), every other header —
  SDK telemetry such as ``x-stainless-*``, ``user-agent``, idempotency keys, request ids, retry
  counts, credentials — since none of them changes what the model sees.

Tool calls are keyed the same way on ``{"tool": name, "args": arguments}``.

Calls with the same key are answered in the order they were **sent** (:func:`in_send_order`), which
is the recorded order unless concurrent calls finished in another order than they started.
"""

from __future__ import annotations

import base64
import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from .canonical import canonical_json, digest
from .redact import scrub_bytes, scrub_json, scrub_url

#: Request headers that are part of the match key (lower-case). All others are ignored.
SEMANTIC_HEADERS: frozenset[str] = frozenset(
    {"anthropic-version", "anthropic-beta", "openai-beta", "content-type"}
)


def normalize_request(
    method: str, url: str, headers: dict[str, str] | list[list[str]] | None, body: Any
) -> dict[str, Any]:
    """The part of an HTTP request that its match key covers, as plain JSON data.

    ``body`` is already parsed (JSON value, text as ``str``, binary data as ``bytes``, which becomes
    ``{"$b64": str}``); it is scrubbed here, so callers may pass a live request. A multipart body's
    boundary, random for every request, is replaced by a fixed token.
    """
    parts = urlsplit(scrub_url(url))
    pairs = list(headers.items() if isinstance(headers, dict) else (headers or []))
    kept = {k.lower(): v.split(";")[0].strip() if k.lower() == "content-type" else v for k, v in pairs}
    ctype = next((v for k, v in pairs if k.lower() == "content-type"), "")
    return {
        "method": method.upper(),
        "path": parts.path,
        "query": sorted(parse_qsl(parts.query, keep_blank_values=True)),
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


def in_send_order(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
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


def tool_key(name: str, args: Any) -> str:
    """Match key (64 hex) of a tool call: its name and its (scrubbed, JSON) arguments."""
    return digest({"tool": name, "args": scrub_json(args)})


@dataclass(frozen=True)
class Change:
    """One difference between two JSON documents.

    ``op`` is ``"added"`` (only in actual), ``"removed"`` (only in expected) or ``"changed"``;
    ``path`` is a JSONPath-like string such as ``$.body.messages[3].content``.
    """

    op: str
    path: str
    expected: Any = None
    actual: Any = None

    def to_json(self) -> dict[str, Any]:
        """This change as JSON data."""
        out: dict[str, Any] = {"op": self.op, "path": self.path}
        if self.op != "added":
            out["expected"] = self.expected
        if self.op != "removed":
            out["actual"] = self.actual
        return out


def json_diff(expected: Any, actual: Any, path: str = "$") -> list[Change]:
    """Every difference between two JSON values, by path, in document order.

    Lists are compared item by item (a list that grew shows ``added`` items at the end).
    """
    if isinstance(expected, dict) and isinstance(actual, dict):
        out: list[Change] = []
        for k in expected:
            sub = f"{path}.{k}" if k.isidentifier() else f"{path}[{k!r}]"
            if k not in actual:
                out.append(Change("removed", sub, expected=expected[k]))
            else:
                out.extend(json_diff(expected[k], actual[k], sub))
        for k in actual:
            if k not in expected:
                sub = f"{path}.{k}" if k.isidentifier() else f"{path}[{k!r}]"
                out.append(Change("added", sub, actual=actual[k]))
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        out = []
        for i in range(max(len(expected), len(actual))):
            sub = f"{path}[{i}]"
            if i >= len(actual):
                out.append(Change("removed", sub, expected=expected[i]))
            elif i >= len(expected):
                out.append(Change("added", sub, actual=actual[i]))
            else:
                out.extend(json_diff(expected[i], actual[i], sub))
        return out
    if type(expected) is not type(actual) or expected != actual:
        return [Change("changed", path, expected=expected, actual=actual)]
    return []


def similarity(a: Any, b: Any) -> float:
    """0..1 closeness of two JSON values (1.0 = same), for picking the nearest recorded request."""
    if a == b:
        return 1.0
    sa, sb = canonical_json(a), canonical_json(b)
    matcher = difflib.SequenceMatcher(None, sa, sb, autojunk=False)
    # quick_ratio is an upper bound that is cheap; exact ratio only for short documents.
    return matcher.ratio() if len(sa) + len(sb) < 20_000 else matcher.quick_ratio()


def _short(value: Any, limit: int = 160) -> str:
    text = value if isinstance(value, str) else canonical_json(value).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _first_difference(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _clip_lines(diff: list[str], width: int = 160) -> list[str]:
    """Unified-diff lines cut to ``width`` characters around the first column where a changed line
    differs from its counterpart, so a long single-line prompt does not print twice in full."""
    removed = [d[1:] for d in diff if d.startswith("-")]
    added = [d[1:] for d in diff if d.startswith("+")]
    out = []
    for d in diff:
        text = d[1:]
        if len(text) <= width:
            out.append(d)
            continue
        others = added if d[0] == "-" else removed if d[0] == "+" else []
        col = max((_first_difference(text, o) for o in others), default=0)
        start = max(0, col - width // 3)
        clipped = ("…" if start else "") + text[start : start + width]
        out.append(d[0] + clipped + ("…" if start + width < len(text) else ""))
    return out


def format_changes(changes: list[Change], limit: int = 20) -> str:
    """Human-readable lines for a diff; long strings are shown as a compact text diff."""
    lines: list[str] = []
    for c in changes[:limit]:
        if c.op == "added":
            lines.append(f"  + {c.path}: {_short(c.actual)}")
        elif c.op == "removed":
            lines.append(f"  - {c.path}: {_short(c.expected)}")
        elif (
            isinstance(c.expected, str)
            and isinstance(c.actual, str)
            and (len(c.expected) > 80 or len(c.actual) > 80)
        ):
            lines.append(f"  ~ {c.path}:")
            diff = difflib.unified_diff(
                c.expected.splitlines(), c.actual.splitlines(), "recorded", "actual", n=1, lineterm=""
            )
            lines.extend(f"      {d}" for d in _clip_lines(list(diff)[2:14]))
        else:
            lines.append(f"  ~ {c.path}: {_short(c.expected)} → {_short(c.actual)}")
    if len(changes) > limit:
        lines.append(f"  … and {len(changes) - limit} more differences")
    return "\n".join(lines)
