"""Secrets a model streams a few characters per event: no event holds one, the joined text does.

The stored stream must hold neither the secret nor a piece of it that a reader joining the deltas
(``show``, ``show --html``, ``export``) would put back together (docs/security.md).
"""

from __future__ import annotations

import base64
import json

import pytest

from forkpoint import eventstream, redact
from forkpoint.providers import recorded_response, response_text
from forkpoint.streamscrub import refilled, spread

SECRET = "sk-proj-Q7pVbX2mK9wLz4RtY8uN3cJ6hF1dS5gA0eIoP"
PASSWORD = "hunter2-canary-Pw-77"


def _sse(obj: object, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(obj)}\n\n".encode()


def _chat(delta: str) -> bytes:
    return _sse({"id": "c1", "choices": [{"index": 0, "delta": {"content": delta}}]})


def _stored(chunks: list[bytes], ctype: str) -> dict[str, object]:
    return {
        "status": 200,
        "headers": [["Content-Type", ctype]],
        "body_kind": "stream",
        "chunks": [[0.0, c] for c in chunks],
    }


def _event(response: dict[str, object]) -> dict[str, object]:
    # The URL only names the provider (its wire format) to the summary: nothing is sent to it.
    return {"request": {"url": "https://api.openai.com/v1/chat/completions"}, "response": response}


@pytest.mark.parametrize("cut", [1, 9, 16, 20])
def test_a_secret_split_over_sse_events_is_replaced_where_it_starts(cut: int) -> None:
    chunks = [_chat("Your key: " + SECRET[:cut]), _chat(SECRET[cut:] + " keep it"), b"data: [DONE]\n\n"]
    assert redact.scrub_chunks(chunks) == chunks  # no event holds it: the bytes scan finds nothing
    stored = redact.Scrubber().http(_stored(chunks, "text/event-stream; charset=utf-8"))
    joined = b"".join(c[1] for c in stored["chunks"])  # type: ignore[index,union-attr]
    for piece in (SECRET[:cut], SECRET[cut:]):
        assert len(piece) < 6 or piece.encode() not in joined
    text = response_text("https://api.openai.com/v1/chat/completions", recorded_response(_event(stored)))
    assert text == f"Your key: {redact.placeholder('openai-key', SECRET)} keep it"
    assert len(stored["chunks"]) == 3  # type: ignore[arg-type]
    assert redact.Scrubber().http(stored) == stored  # idempotent


@pytest.mark.parametrize("ctype", ["application/x-ndjson", "application/jsonl", "application/stream+json"])
def test_a_secret_split_over_json_lines_is_replaced_where_it_starts(ctype: str) -> None:
    """Ollama streams its answer one JSON line per piece: a key split over two lines was stored as
    its two pieces, the middle of it whole in the second line."""

    def line(piece: str) -> bytes:
        return json.dumps({"model": "m", "message": {"role": "assistant", "content": piece}}).encode() + b"\n"

    chunks = [line("Your key: " + SECRET[:9]), line(SECRET[9:] + " keep it"), line("")]
    stored = redact.Scrubber().http(_stored(chunks, ctype))
    lines = [json.loads(c[1]) for c in stored["chunks"]]  # type: ignore[index,union-attr]
    assert [x["message"]["content"] for x in lines] == [
        f"Your key: {redact.placeholder('openai-key', SECRET)}",
        " keep it",
        "",
    ]
    assert redact.Scrubber().http(stored) == stored  # idempotent


def test_a_secret_split_over_plain_text_sse_events_is_replaced_where_it_starts() -> None:
    """A server streaming plain text (no JSON) in its events: a key split over two was stored as its
    two pieces, and a line break (two data lines of one event) is part of the text a reader joins."""
    pem = "-----BEGIN RSA PRIVATE KEY-----\n" + "A" * 64 + "\n-----END RSA PRIVATE KEY-----"
    chunks = [
        b"data: Your key: " + SECRET[:9].encode() + b"\n\n",
        b"data: " + SECRET[9:].encode() + b" keep it\n\n",
    ]
    chunks += [b"data: \ndata: " + pem[:40].encode().replace(b"\n", b"\ndata: ") + b"\n\n"]
    chunks += [
        b"data: " + pem[40:].encode().replace(b"\n", b"\ndata: ") + b"\ndata: bye\n\n",
        b"data: [DONE]\n\n",
    ]
    stored = redact.Scrubber().http(_stored(chunks, "text/event-stream"))
    events = b"".join(c[1] for c in stored["chunks"]).decode().split("\n\n")  # type: ignore[union-attr,misc]
    text = "".join("\n".join(line.removeprefix("data: ") for line in e.split("\n")) for e in events)
    key, private = redact.placeholder("openai-key", SECRET), redact.placeholder("private-key", pem)
    # (the line breaks between data lines it spanned stay: they are no bytes of theirs)
    assert text == f"Your key: {key} keep it\n{private}\n\n\nbye[DONE]"
    assert len(stored["chunks"]) == 5  # type: ignore[arg-type]
    assert redact.Scrubber().http(stored) == stored  # idempotent


@pytest.mark.parametrize("escape", ["\n", "\t", "\r", "é"])  # é: the stream writes \u00e9
@pytest.mark.parametrize("events", [1, 2])
def test_a_secret_after_an_escape_in_one_sse_event_is_scrubbed(escape: str, events: int) -> None:
    """Whole in one event, but after a newline: the stream's bytes hold it JSON-escaped, where the
    escape's letter (``\\nsk-proj-…``) hides where the key starts from a scan of the bytes."""
    chunks = (
        [_chat(f"Your key:{escape}{SECRET}")] + [_chat(" keep it")] * (events - 1) + [b"data: [DONE]\n\n"]
    )
    # What the bytes scan alone would store: it reads an escaped line break or tab as what it stands
    # for (Scrubber.find), not yet \u00e9.
    assert (redact.scrub_chunks(chunks) == chunks) is (escape == "é")
    stored = redact.Scrubber().http(_stored(chunks, "text/event-stream"))
    joined = b"".join(c[1] for c in stored["chunks"])  # type: ignore[index,union-attr]
    assert SECRET[8:20].encode() not in joined
    text = response_text("https://api.openai.com/v1/chat/completions", recorded_response(_event(stored)))
    tail = " keep it" * (events - 1)
    assert text == f"Your key:{escape}{redact.placeholder('openai-key', SECRET)}{tail}"
    assert len(stored["chunks"]) == len(chunks)  # type: ignore[arg-type]


def test_tool_call_arguments_streamed_in_pieces_are_scrubbed_as_one_text() -> None:
    args = json.dumps({"user": "ada", "password": PASSWORD})
    pieces = [args[:12], args[12:31], args[31:]]
    chunks = [
        _sse(
            {
                "type": "content_block_delta",
                "index": 1,
                "delta": {"type": "input_json_delta", "partial_json": p},
            },
            "content_block_delta",
        )
        for p in pieces
    ]
    stored = redact.Scrubber().http(_stored(chunks, "text/event-stream"))
    joined = b"".join(c[1] for c in stored["chunks"])  # type: ignore[index,union-attr]
    assert PASSWORD[:6].encode() not in joined and PASSWORD[-6:].encode() not in joined
    deltas = [json.loads(c[1].split(b"data: ", 1)[1])["delta"]["partial_json"] for c in stored["chunks"]]  # type: ignore[index,union-attr]
    # (the piece after "password": is taken for a value by the bytes scan first: the placeholder
    # then stands for what it and the rest of the password made together)
    joined_args = json.loads("".join(deltas))
    assert joined_args["user"] == "ada" and redact.find_secrets(joined_args["password"]) == []
    assert joined_args["password"].startswith("[REDACTED:secret-field:")


def _aws(event_type: str, payload: object) -> bytes:
    headers = {":event-type": event_type, ":content-type": "application/json", ":message-type": "event"}
    return eventstream.encode(headers, json.dumps(payload).encode())


def test_a_secret_split_over_aws_event_stream_messages_is_replaced_and_reframed() -> None:
    frames = [
        _aws("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "key " + SECRET[:15]}}),
        _aws("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": SECRET[15:] + "."}}),
        _aws("messageStop", {"stopReason": "end_turn"}),
    ]
    stored = redact.Scrubber().http(_stored(frames, eventstream.CONTENT_TYPE))
    out = [c[1] for c in stored["chunks"]]  # type: ignore[index,union-attr]
    assert all(isinstance(f, bytes) for f in out) and out[2] == frames[2]
    texts = []
    for frame in out:  # every message still reads: lengths and checksums were recomputed
        parts, rest = eventstream.split(frame)
        assert rest == b"" and len(parts) == 1
        decoded = eventstream.decode(frame)
        assert decoded is not None
        texts.append(json.loads(decoded[1]).get("delta", {}).get("text", ""))
    assert "".join(texts) == f"key {redact.placeholder('openai-key', SECRET)}."
    assert SECRET[15:].encode() not in b"".join(out)


def test_a_secret_in_base64_model_events_of_invoke_with_response_stream_is_scrubbed() -> None:
    def chunk(inner: object) -> bytes:
        return _aws("chunk", {"bytes": base64.b64encode(json.dumps(inner).encode()).decode()})

    def delta(text: str) -> dict[str, object]:
        return {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}

    frames = [chunk(delta("one " + SECRET + " two ")), chunk(delta(SECRET[:20])), chunk(delta(SECRET[20:]))]
    stored = redact.Scrubber().http(_stored(frames, eventstream.CONTENT_TYPE))
    sse = eventstream.as_sse([c[1] for c in stored["chunks"]])  # type: ignore[index,union-attr]
    assert SECRET not in sse and SECRET[20:] not in sse
    ph = redact.placeholder("openai-key", SECRET)
    assert sse.count(ph) == 2


def test_spread_puts_a_replacement_where_its_span_starts() -> None:
    chunks = [b"abc", b"defg", b"hi"]
    assert spread(chunks, [(2, 6, b"X")]) == [b"abX", b"g", b"hi"]
    assert spread(chunks, []) == chunks
    assert spread(chunks, [(3, 7, b"")]) == [b"abc", b"", b"hi"]


def test_a_chunk_the_scrubbing_empties_keeps_a_byte_of_the_piece_before() -> None:
    """A key over four chunks, the middle two all key: stored empty, no HTTP library hands them to a
    program, so a replay handed it two pieces fewer than live. Each takes a byte of what followed
    the key now, the placeholder whole where the key began; a chunk that came empty (a piece that
    decodes to nothing) stays empty, and the chunks joined are the same bytes."""
    stream = b"data: key " + SECRET.encode() + b" here\n\n"
    at = stream.index(SECRET.encode())
    chunks = [stream[: at + 5], b"", stream[at + 5 : at + 15], stream[at + 15 : at + 25], stream[at + 25 :]]
    scrubbed = redact.Scrubber().stream(chunks, "text/event-stream")
    assert b"".join(scrubbed) == redact.scrub_bytes(stream)
    assert [bool(c) for c in scrubbed] == [True, False, True, True, True], scrubbed
    ph = redact.placeholder("openai-key", SECRET).encode()
    assert scrubbed[0].endswith(ph) and scrubbed[2:] == [b" ", b"h", b"ere\n\n"], scrubbed
    # (nothing to give: a chunk emptied before a piece of one byte, or at the end, stays empty)
    assert refilled([b"ab", b"cd", b"e"], [b"X", b"", b"e"]) == [b"X", b"", b"e"]
    assert refilled([b"ab", b"cd"], [b"X", b""]) == [b"X", b""]
    assert refilled([b"ab", b"cd"], [b"ab", b"cd"]) == [b"ab", b"cd"]
