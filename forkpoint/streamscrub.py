"""Secrets split over a stream's events: found in the text the events make together, removed from each.

A model streams its answer a few characters per event, so a secret it repeats arrives in fragments:
``data: {"choices":[{"delta":{"content":"sk-proj-Q7p"}}]}`` then ``…"content":"VbX2mK9…"…``. No
event holds the secret, so scrubbing the stream's bytes finds nothing, but every reader that joins
the deltas (``show``, ``show --html``, ``export``) would show it whole. Here, each event's JSON is
read, the string values at one JSON path in successive events (``choices.0.delta.content``,
``delta.text``, ``delta.partial_json``…) are joined and scrubbed as one text, and a secret found is
replaced in the event where it starts and removed from the events it spilled into; only the events
that change are written again (as compact JSON). A secret whole in one server-sent event is left to
the scan of the stream's bytes, which keeps every other byte in its transport chunk, unless that
scan, which sees the event JSON-escaped, misses it (an escape such as ``\\n`` before a key hides
where it starts): then that event is written again too. Three stream framings are read:

* server-sent events (``data:`` lines holding JSON: OpenAI, Anthropic, Gemini, Responses; and
  those holding plain text, joined as a reader of the text joins them);
* JSON lines (``application/x-ndjson``, ``application/jsonl``, ``application/stream+json``: one
  JSON value a line, as Ollama streams its answer);
* the AWS event stream (:mod:`forkpoint.eventstream`: Bedrock), each message's JSON payload, and
  inside an InvokeModelWithResponseStream ``chunk`` the model's own event, base64-encoded in its
  ``bytes`` field; a changed message is framed again (lengths and checksums right).

The scrubbing itself is handed in (``scrub``: fragments in, fragments out, as
:meth:`forkpoint.redact.Scrubber.chunks` does), so this module knows no rules.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from . import eventstream
from .patterns import compiled_later_bytes

#: A change to a stream: (start, end) byte offsets in the joined stream, and what replaces them.
Edit = tuple[int, int, bytes]
#: How fragments are scrubbed as one text: as many fragments back, each scrubbed in place.
Scrub = Callable[[list[bytes]], list[bytes]]

_DATA_LINE = compiled_later_bytes(rb"^data: ?([^\r\n]*)", re.M)
_LINE = compiled_later_bytes(rb"^([^\r\n]*)", re.M)
#: Content types of a stream of JSON lines (the capture's stream types other than SSE's and AWS's).
_JSON_LINES = ("ndjson", "jsonl", "stream+json")


def spread(chunks: Sequence[bytes], edits: Sequence[Edit]) -> list[bytes]:
    """``chunks`` with ``edits`` (in order, not overlapping) applied, as many chunks as given: an
    edit's replacement goes into the chunk where it starts, and what it replaces is removed from the
    chunks it spans, so every other byte keeps its chunk."""
    joined = b"".join(chunks)
    out: list[bytes] = []
    cstart = 0
    for c in chunks:
        cend = cstart + len(c)
        piece = bytearray()
        p = cstart
        for start, end, replacement in edits:
            if end <= cstart or start >= cend:
                continue
            if start > p:
                piece += joined[p:start]
            if cstart <= start < cend:
                piece += replacement
            p = max(p, min(end, cend))
        if p < cend:
            piece += joined[p:cend]
        out.append(bytes(piece))
        cstart = cend
    return out


def refilled(chunks: Sequence[bytes], scrubbed: Sequence[bytes]) -> list[bytes]:
    """``scrubbed`` (``chunks`` with secrets replaced: :func:`spread`), every chunk the scrubbing
    emptied given a byte of the start of the piece after it (what followed the secret), while that
    piece has more than one: no HTTP library hands a program an empty piece, so a replay would hand
    it one fewer than it read live. The placeholder stays whole in its chunk (what looks for one
    there finds it); joined, the same bytes."""
    out = list(scrubbed)
    k = 0
    while k < len(out):
        if out[k] or not chunks[k]:
            k += 1
            continue
        emptied = []
        while k < len(out) and not out[k]:
            if chunks[k]:  # (a chunk that came empty, a piece that decodes to nothing, stays so)
                emptied.append(k)
            k += 1
        take = min(len(emptied), len(out[k]) - 1) if k < len(out) else 0
        if take > 0:
            moved, out[k] = out[k][:take], out[k][take:]
            for n, j in enumerate(emptied[:take]):
                out[j] = moved[n : n + 1]
    return out


class _Event:
    """One event of a stream: where its JSON sits, the parsed JSON, and how to write it again."""

    def __init__(self, start: int, end: int, value: Any, frame: tuple[dict[str, str], Any] | None) -> None:
        self.start, self.end, self.value, self.frame = start, end, value, frame
        self.changed = False

    def encoded(self) -> bytes:
        data = orjson.dumps(self.value)
        if self.frame is None:
            return data
        headers, outer = self.frame
        if outer is not None:  # a chunk event: the model's event is base64 in "bytes"
            outer["bytes"] = base64.b64encode(data).decode()
            data = orjson.dumps(outer)
        return eventstream.encode(headers, data)


def _json_events(joined: bytes, line: re.Pattern[bytes]) -> list[_Event]:
    """The events whose JSON is the first group of a ``line`` match (an SSE ``data:`` line, a JSON line)."""
    out = []
    for m in line.finditer(joined):
        body = m.group(1)
        if body[:1] not in (b"{", b"["):
            continue
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            continue
        out.append(_Event(m.start(1), m.end(1), value, None))
    return out


def _text_lines(joined: bytes) -> list[tuple[int, int] | None]:
    """Where the SSE ``data:`` lines that hold no JSON sit (a server streaming plain text), in order;
    None between two lines of one event, which a reader joins with a line break."""
    out: list[tuple[int, int] | None] = []
    last = 0
    for m in _DATA_LINE.finditer(joined):
        if m.group(1)[:1] in (b"{", b"["):  # (JSON, and the end of OpenAI's stream: [DONE])
            continue
        if out and joined[last : m.start()] in (b"\n", b"\r\n", b"\r"):
            out.append(None)
        out.append(m.span(1))
        last = m.end()
    return out


def _aws_events(joined: bytes) -> list[_Event]:
    out = []
    frames, _ = eventstream.split(joined)
    pos = 0
    for frame in frames:
        start, pos = pos, pos + len(frame)
        decoded = eventstream.decode(frame)
        if decoded is None:
            continue
        raw_headers, payload = decoded
        headers = {k: v if isinstance(v, str) else str(v) for k, v in raw_headers.items()}
        try:
            value = orjson.loads(payload)
        except orjson.JSONDecodeError:
            continue
        outer = None
        if isinstance(value, dict) and isinstance(value.get("bytes"), str):
            try:
                inner = orjson.loads(base64.b64decode(value["bytes"], validate=True))
            except (binascii.Error, ValueError, orjson.JSONDecodeError):
                inner = None
            if inner is not None:
                value, outer = inner, value
        out.append(_Event(start, pos, value, (headers, outer)))
    return out


def _leaves(value: Any, path: tuple[Any, ...], out: list[tuple[tuple[Any, ...], Any, Any]]) -> None:
    """(path, container, key) of every string in ``value``."""
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for k, v in items:
        if isinstance(v, str):
            out.append(((*path, k), value, k))
        elif isinstance(v, dict | list):
            _leaves(v, (*path, k), out)


def _bytes_take(joined: bytes, event: _Event, path: tuple[Any, ...], fresh: bytes, scrub: Scrub) -> bool:
    """Whether scrubbing the bytes of ``event`` (its JSON as sent) turns the value at ``path`` into
    ``fresh``. Not when an escape hides where a secret starts (``…:\\nsk-proj-…``, the escape's
    letter before the key): then only the decoded value shows it, and the event is written again."""
    try:
        value = orjson.loads(scrub([joined[event.start : event.end]])[0])
        for step in path:
            value = value[step]
    except (orjson.JSONDecodeError, LookupError, TypeError):
        return False
    return isinstance(value, str) and value.encode("utf-8", "surrogatepass") == fresh


def scrub_events(chunks: Sequence[bytes], content_type: str, scrub: Scrub) -> list[bytes]:
    """The chunks of a stored stream (``content_type`` says its framing) with every secret split
    over its events (or hidden in a base64 event) replaced; the chunks themselves when there is none.
    Never raises on malformed input: what cannot be read is left as it is."""
    joined = b"".join(chunks)
    text: list[tuple[int, int] | None] = []
    if eventstream.is_event_stream(content_type):
        events = _aws_events(joined)
    elif any(t in content_type.lower() for t in _JSON_LINES):
        events = _json_events(joined, _LINE)
    elif b"data:" in joined:
        events, text = _json_events(joined, _DATA_LINE), _text_lines(joined)
    else:
        return list(chunks)
    channels: dict[tuple[Any, ...], list[tuple[_Event, Any, Any]]] = {}
    for event in events:
        if isinstance(event.value, dict | list):
            found: list[tuple[tuple[Any, ...], Any, Any]] = []
            _leaves(event.value, (), found)
            for path, container, key in found:
                channels.setdefault(path, []).append((event, container, key))
    for path, leaves in channels.items():
        frags = [c[k].encode("utf-8", "surrogatepass") for _, c, k in leaves]
        one = leaves[0][0]
        if len(frags) == 1 and one.frame is None and b'"%s"' % frags[0] in joined[one.start : one.end]:
            continue  # one SSE event's value, written as it is (nothing escaped): the bytes scan sees it
        if frags.count(frags[0]) == len(frags) and scrub(frags[:1]) == frags[:1]:
            continue  # the same clean value in every event (an id, the model): no piece of anything
        new = scrub(frags)
        for (event, container, key), old, fresh in zip(leaves, frags, new, strict=True):
            if fresh == old:
                continue
            if (
                event.frame is None
                and scrub([old]) == [fresh]
                and _bytes_take(joined, event, path, fresh, scrub)
            ):
                continue  # a secret whole in this SSE event, which the scan of the bytes takes
            container[key] = fresh.decode("utf-8", "surrogatepass")
            event.changed = True
    edits = [(e.start, e.end, e.encoded()) for e in events if e.changed]
    if len(text) > 1:  # (a secret in one line alone is the scan of the bytes')
        frags = [b"\n" if span is None else joined[span[0] : span[1]] for span in text]
        # (a line break between two lines of an event is no byte of either: it stays)
        edits += [
            (*span, new)
            for span, old, new in zip(text, frags, scrub(frags), strict=True)
            if span and new != old
        ]
        edits.sort()
    return spread(chunks, edits) if edits else list(chunks)
