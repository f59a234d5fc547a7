"""The AWS event stream (``application/vnd.amazon.eventstream``): Amazon Bedrock's streamed answers.

Binary framing, as specified in the AWS documentation ("Event stream encoding", Amazon S3
SelectObjectContent / Transcribe streaming) and implemented by botocore's ``eventstream`` module.
One message is:

* a 12-byte prelude: total length (uint32, big-endian, the whole message), headers length (uint32),
  and the CRC32 of those 8 bytes;
* the headers: each is a name length (1 byte), the UTF-8 name, a value type (1 byte) and the value
  (0/1 true/false; 2 byte; 3 int16; 4 int32; 5 int64; 6 bytes and 7 string, each a uint16 length
  then the data; 8 timestamp, int64 ms; 9 UUID, 16 bytes);
* the payload (Bedrock: JSON), then the CRC32 of everything before it (uint32).

Bedrock names each event in the ``:event-type`` header (``messageStart``, ``contentBlockDelta``…,
``chunk`` for InvokeModelWithResponseStream, whose payload is ``{"bytes": base64 of the model's own
stream event}``); ``:message-type`` is ``event`` or ``exception`` (``:exception-type`` names it).

Pure functions, stdlib only; malformed input never raises here (what cannot be read is skipped).
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Iterable, Mapping

import orjson

#: The content type of an AWS event stream.
CONTENT_TYPE = "application/vnd.amazon.eventstream"
_PRELUDE = 12
#: Fixed-size header value types and their sizes (bool true/false carry no value).
_FIXED = {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16}


def is_event_stream(content_type: str) -> bool:
    """Whether a response's content type is an AWS event stream."""
    return CONTENT_TYPE in content_type.lower()


def split(data: bytes) -> tuple[list[bytes], bytes]:
    """(the whole messages at the start of ``data``, the rest): a reader that gets bytes in pieces
    keeps the rest and adds the next piece to it. A length that cannot be a message ends the split
    (what follows is returned as the rest)."""
    frames: list[bytes] = []
    pos = 0
    while len(data) - pos >= _PRELUDE:
        total = struct.unpack_from(">I", data, pos)[0]
        if total < _PRELUDE + 4 or len(data) - pos < total:
            break
        frames.append(data[pos : pos + total])
        pos += total
    return frames, data[pos:]


def decode(frame: bytes) -> tuple[dict[str, object], bytes] | None:
    """(headers, payload) of one message; None when it is not one (short, or its lengths disagree).
    CRCs are not checked: the recording holds what the client accepted."""
    if len(frame) < _PRELUDE + 4:
        return None
    total, headers_len = struct.unpack_from(">II", frame, 0)
    if total != len(frame) or _PRELUDE + headers_len + 4 > total:
        return None
    headers: dict[str, object] = {}
    pos, end = _PRELUDE, _PRELUDE + headers_len
    try:
        while pos < end:
            n = frame[pos]
            name = frame[pos + 1 : pos + 1 + n].decode("utf-8", "replace")
            pos += 1 + n
            kind = frame[pos]
            pos += 1
            if kind in (6, 7):
                size = struct.unpack_from(">H", frame, pos)[0]
                raw = frame[pos + 2 : pos + 2 + size]
                headers[name] = raw.decode("utf-8", "replace") if kind == 7 else raw
                pos += 2 + size
            elif kind in _FIXED:
                size = _FIXED[kind]
                raw = frame[pos : pos + size]
                headers[name] = (
                    (kind == 0) if kind in (0, 1) else int.from_bytes(raw, "big", signed=kind != 9)
                )
                pos += size
            else:
                return None
    except (IndexError, struct.error):
        return None
    return headers, frame[end : total - 4]


def encode(headers: Mapping[str, str], payload: bytes) -> bytes:
    """One message with string-valued ``headers`` and ``payload`` (what an override writes)."""
    head = b"".join(
        bytes([len(k.encode())]) + k.encode() + b"\x07" + struct.pack(">H", len(v.encode())) + v.encode()
        for k, v in headers.items()
    )
    total = _PRELUDE + len(head) + len(payload) + 4
    prelude = struct.pack(">II", total, len(head))
    prelude += struct.pack(">I", binascii.crc32(prelude))
    body = prelude + head + payload
    return body + struct.pack(">I", binascii.crc32(body))


def event_name(headers: Mapping[str, object]) -> str | None:
    """The event a message carries: ``:event-type``, or ``:exception-type`` for an exception."""
    name = headers.get(":exception-type") or headers.get(":event-type")
    return name if isinstance(name, str) else None


def ends_stream(frame: bytes) -> bool:
    """Whether the message ``frame`` is an exception or an error, after which an event stream sends
    nothing more (a client raises it, and may never read the stream to its end)."""
    decoded = decode(frame)
    return decoded is not None and decoded[0].get(":message-type") in ("exception", "error")


def as_sse(frames: Iterable[bytes]) -> str:
    """An event stream written as server-sent events (``event: NAME`` / ``data: JSON``), the shape
    every stream reader of :mod:`forkpoint.providers` reads. A ``chunk`` event (InvokeModel with
    response stream) is unwrapped: its data is the model's own event (named by its ``type``), and an
    exception's data is wrapped as ``{"error": {"type", "message"}}``."""
    out: list[str] = []
    for frame in frames:
        decoded = decode(frame)
        if decoded is None:
            continue
        headers, payload = decoded
        name = event_name(headers)
        text = payload.decode("utf-8", "replace")
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            obj = None
        if name == "chunk" and isinstance(obj, dict) and isinstance(obj.get("bytes"), str):
            try:
                inner = base64.b64decode(obj["bytes"])
                text = inner.decode("utf-8")
                obj = orjson.loads(inner)
                name = obj.get("type") if isinstance(obj, dict) and isinstance(obj.get("type"), str) else name
            except (ValueError, orjson.JSONDecodeError):
                pass
        if headers.get(":message-type") == "exception":
            message = obj.get("message") if isinstance(obj, dict) else text
            text = orjson.dumps({"error": {"type": name, "message": message}}).decode()
        out.append(
            (f"event: {name}\n" if name else "")
            + "".join(f"data: {line}\n" for line in text.split("\n"))
            + "\n"
        )
    return "".join(out)
