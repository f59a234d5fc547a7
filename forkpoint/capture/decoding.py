"""Bodies of HTTP exchanges: parsed for storing, and decoded from their content codings.

A response body is stored decoded exactly when the client library decodes it: with the library's
own decoders when it has them (so the stored bytes are those the caller got, and the same bodies
fail), with forkpoint's own otherwise (and with forkpoint's own to scrub one the library hands over
encoded: :class:`~.exchange.Exchange`). Request bodies sent under a ``Content-Encoding`` are
stored decoded (gzip embeds a timestamp: the encoded bytes differ at every run).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from typing import Any

import orjson

from ..log import json_text
from ..redact import current as current_scrubber
from ..redact import scrub_bytes, scrub_json

#: A factory of decoders for one content coding (``decode(chunk)``, ``flush()``), or None.
DecoderFactory = Callable[[str], Any]


#: Digits to "0", "." kept, every other byte to a space: :data:`_LONG` in a body's translation is
#: a run of 19 digits or more not after a "." (an integer as long as 2**63, or such a run in a
#: string), while a float's fraction (an embedding's -0.0069456464052200317) is not one.
_DIGITS = bytes(48 if 48 <= b <= 57 else 46 if b == 46 else 32 for b in range(256))
_LONG = b" " + b"0" * 19


def loads_exact(data: bytes | bytearray | memoryview | str) -> Any:
    """``orjson.loads(data)``, but with an integer beyond 64 bits as the integer it is: orjson reads
    one as a float (an id of 2**70 became 1.1805916207174113e+21, and a replay handed that float to
    the agent). A body with a run of 19 digits or more is read again by Python's json, which reads
    every other value as orjson does once orjson has read the body; finding the run costs about what
    orjson's parse does. Raises :class:`orjson.JSONDecodeError` where ``data`` is not JSON."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else bytes(data)
    value = orjson.loads(data if isinstance(data, str) else raw)
    digits = raw.lstrip(b" \t\r\n-").translate(_DIGITS)
    if _LONG in digits or digits.startswith(_LONG[1:]):  # (a body that is one number)
        return json.loads(raw)
    return value


def parse_body(
    data: bytes,
    content_type: str,
    *,
    json_ok: bool = True,
    loads: Callable[[bytes], Any] = loads_exact,
) -> tuple[str, Any]:
    """Classify and parse an HTTP body: ``("empty", None)``, ``("json", value)``, ``("text", str)``
    or ``("bytes", bytes)``. JSON is recognised by content type or by a leading ``{``/``[`` and
    parsed by ``loads`` (raising :class:`orjson.JSONDecodeError` where it is not JSON);
    ``json_ok=False`` keeps the body as text or bytes (a body still under a content coding)."""
    if not data:
        return "empty", None
    ctype = content_type.lower()
    head = data.lstrip()[:1]
    if json_ok and ("json" in ctype or head in (b"{", b"[")):
        try:
            return "json", loads(data)
        except (orjson.JSONDecodeError, RecursionError):  # (Python's json, on a deep body of long ints)
            pass
    try:
        return "text", data.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes", data


def scrubbed_body(
    data: bytes,
    content_type: str,
    *,
    json_ok: bool = True,
    loads: Callable[[bytes], Any] = loads_exact,
    parsed: Callable[[Any], None] | None = None,
) -> tuple[str, Any]:
    """:func:`parse_body`, then :func:`scrub_body` of what it parsed: ``(kind, scrubbed body)``. A JSON
    body nested deeper than the scrubber's walk can go (``[`` * 500) is kept as text, as it came:
    recording it must not raise into the program that received it. ``parsed`` is handed a JSON
    body as parsed, before it is scrubbed."""
    kind, body = parse_body(data, content_type, json_ok=json_ok, loads=loads)
    if kind == "json":
        if parsed is not None:
            parsed(body)
        try:
            return kind, scrub_body(kind, body, parsed=True)
        except RecursionError:
            kind, body = parse_body(data, content_type, json_ok=False)
    return kind, scrub_body(kind, body, parsed=True, content_type=content_type)


#: The layouts of JSON text tried, as ``json.dumps`` keywords, when a body is not the compact
#: form of what it says: Python's own (``", "`` and ``": "``), or indented by 2 or 4, each with
#: non-ASCII text escaped or not. Bodies past :data:`LAYOUT_MAX` bytes are not tried.
_LAYOUTS = tuple({"indent": i, "ensure_ascii": a} for i in (None, 2, 4) for a in (True, False))
LAYOUT_MAX = 4 << 20


def json_layout(data: bytes, value: Any) -> dict[str, Any] | None:
    """How ``json.dumps`` writes ``value`` (a JSON body as parsed) back as exactly ``data``, when its
    compact form is not ``data``: ``{"indent", "ensure_ascii"}`` and ``"newline"`` when ``data`` ends
    with one. None when the compact form is ``data``, or no layout tried gives it (then a replay
    hands back the compact form: the same JSON, other bytes)."""
    if len(data) > LAYOUT_MAX or json_text(value) == data:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    for kw in _LAYOUTS:
        try:
            out = json.dumps(value, **kw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return None
        if text in (out, out + "\n"):
            return {**kw, "newline": True} if text != out else dict(kw)
    return None


def body_bytes(kind: str, body: Any, layout: dict[str, Any] | None = None) -> bytes:
    """The bytes of a stored body (inverse of :func:`parse_body`): JSON re-serialized compactly, or
    in the ``layout`` it came in (:func:`json_layout`)."""
    if kind == "json":
        kw = {k: layout.get(k) for k in ("indent", "ensure_ascii")} if isinstance(layout, dict) else {}
        if layout and kw in _LAYOUTS:  # (only a layout json_layout finds: an indent of 10**9 is none)
            try:
                text = json.dumps(body, **kw) + ("\n" if layout.get("newline") is True else "")
            except (TypeError, ValueError):
                return json_text(body)
            return text.encode("utf-8", "surrogatepass")
        return json_text(body)  # (an integer beyond 64 bits, as loads_exact reads one, too)
    if kind == "text":
        return str(body).encode("utf-8")
    if kind == "bytes":
        return bytes(body)
    return b""


def scrub_body(kind: str, body: Any, *, parsed: bool = False, content_type: str = "") -> Any:
    """A parsed body with secrets scrubbed. ``parsed``: it is :func:`parse_body`'s own result,
    which the caller keeps to itself (see :meth:`forkpoint.redact.Scrubber.json`); a text body's
    ``content_type`` says whether it is a form (:meth:`forkpoint.redact.Scrubber.body_text`)."""
    if kind == "json":
        return scrub_json(body, parsed=parsed)
    if kind == "text":
        return current_scrubber().body_text(body, content_type)
    if kind == "bytes":
        return scrub_bytes(body)
    return body


def text_or_bytes(data: bytes) -> str | bytes:
    """A stream chunk as stored: text when it is valid UTF-8 on its own, else bytes."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def codings(values: list[str]) -> list[str]:
    """The content codings of a ``Content-Encoding`` header, in the order they were applied."""
    return [v.strip().lower() for v in values if v.strip()]


def header_values(headers: list[tuple[str, str]], name: str) -> list[str]:
    """Every comma-separated value of header ``name`` (any case) in ``headers``."""
    out: list[str] = []
    for k, v in headers:
        if k.lower() == name:
            out.extend(v.split(","))
    return out


def header(headers: list[tuple[str, str]], name: str) -> str:
    """The first value of header ``name`` (any case), or ``""``."""
    return next((v for k, v in headers if k.lower() == name), "")


#: The most forkpoint's own decoders (:func:`own_decoder`) inflate a body to: 16 times the largest
#: JSON body whose layout is kept (:data:`LAYOUT_MAX`). A body the client library did not decode
#: for the program is decoded to scrub it; a compression bomb the program never opens must not be
#: inflated in the program's memory by its recording.
DECODED_MAX = 16 * LAYOUT_MAX


class TooLarge(Exception):
    """A body that decodes to more than :data:`DECODED_MAX` bytes: decoding stopped there."""


class _Own:
    """A decoder of one content coding with the interface of httpx's (``decode``, ``flush``)."""

    def __init__(self, fn: Callable[[bytes], bytes]) -> None:
        self.decode = fn

    def flush(self) -> bytes:
        return b""


def own_decoder(coding: str) -> Any:
    """forkpoint's own decoder of one coding (used for request bodies, and for responses when the
    library's decoders cannot be found), or None if unknown/unavailable. It raises
    :class:`TooLarge` once its output passes :data:`DECODED_MAX`."""
    fn = decoder(coding, limit=DECODED_MAX)
    return None if fn is None else _Own(fn)


def following_decoder(coding: str) -> Any:
    """:func:`own_decoder` without its limit: for a library that decodes the body for the program
    itself (urllib3), which inflates it whatever forkpoint does; a large download stays recorded."""
    fn = decoder(coding)
    return None if fn is None else _Own(fn)


def _as_bytes(out: Any) -> bytes:
    """httpx decoders return bytes; httpx2's return an iterator of bytes."""
    return bytes(out) if isinstance(out, bytes | bytearray) else b"".join(out)


def decode_with(
    make: DecoderFactory, codings: list[str], chunks: list[bytes], *, final: bool
) -> list[bytes] | None:
    """``chunks`` decoded chunk by chunk (last-applied coding first, as httpx does), with the
    decoders' flushed tail added to the last chunk when the body was read to the ``final`` end.
    None when a coding is not decodable here or the data does not decode: keep it as received.
    Raises :class:`TooLarge` from a decoder that stopped at its limit (:func:`own_decoder`)."""
    try:
        decoders = [make(c) for c in reversed(codings)]
        if any(d is None for d in decoders):
            return None
        out = []
        for chunk in chunks:
            for d in decoders:
                chunk = _as_bytes(d.decode(chunk))
            out.append(chunk)
        if final:
            if len(decoders) == 1:
                tail = _as_bytes(decoders[0].flush())
            else:  # httpx's MultiDecoder.flush
                tail = b""
                for d in decoders:
                    tail = _as_bytes(d.decode(tail)) + _as_bytes(d.flush())
            if tail:
                out = [*out[:-1], (out[-1] if out else b"") + tail]
        return out
    except TooLarge:
        raise
    except Exception:  # zlib.error, brotli.error, DecodingError…: the caller got the same failure
        return None


def _encoder(coding: str) -> tuple[Callable[[bytes], bytes], Callable[[], bytes]] | None:
    """(a piece under ``coding``, flushed so that it decodes as it comes; the coding's end), or None
    when it cannot be applied here (the fastest levels: a replay pays for this on every such body)."""
    if coding in ("gzip", "x-gzip", "deflate"):
        z = zlib.compressobj(1, zlib.DEFLATED, zlib.MAX_WBITS + (16 if coding != "deflate" else 0))
        return (lambda piece: z.compress(piece) + z.flush(zlib.Z_SYNC_FLUSH)), z.flush
    if coding == "zstd":
        try:
            import zstandard
        except ImportError:
            return None
        # (a frame a piece: one that says its size, which zstandard.decompress needs)
        return zstandard.ZstdCompressor(level=1).compress, lambda: b""
    if coding == "br":
        try:
            import brotli
        except ImportError:
            return None
        br = brotli.Compressor(quality=1)
        return (lambda piece: br.process(piece) + br.flush()), br.finish
    if coding == "identity":
        return (lambda piece: piece), lambda: b""
    return None


def encoded(pieces: list[bytes], codings: list[str], *, final: bool = True) -> list[bytes] | None:
    """``pieces`` under the content ``codings``, in the order they were applied (a recorded body that
    was decoded, served again to a client that decodes it itself: :mod:`.httpclient`), piece by
    piece (a stream's chunks stay chunks, each decodable as it comes), the codings' ends after the
    last when the body was ``final``ly whole; None when one of them cannot be applied here. The
    bytes need not be those received: they decode to them."""
    for coding in codings:
        encoder = _encoder(coding)
        if encoder is None:
            return None
        piece, end = encoder
        out = [piece(p) for p in pieces or [b""]]  # (an empty body is still under its codings)
        if final:
            out[-1] += end()
        pieces = out
    return pieces


def _capped(inflate: Callable[[bytes, int], bytes], limit: int | None) -> Callable[[bytes], bytes]:
    """``inflate(chunk, most)`` (which returns at most ``most`` bytes, 0 for no limit, keeping the
    rest of its input for later) as a decoder whose whole output is at most ``limit`` bytes: past
    that it raises :class:`TooLarge`, having inflated a byte beyond (or a slice's worth: _sliced)."""
    if limit is None:
        return lambda chunk: inflate(chunk, 0)
    room = [limit]

    def decode(chunk: bytes) -> bytes:
        out = inflate(chunk, room[0] + 1)
        if len(out) > room[0]:
            raise TooLarge(f"the body decodes to more than {limit} bytes")
        room[0] -= len(out)
        return out

    return decode


def _sliced(decode: Callable[[bytes], bytes], step: int) -> Callable[[bytes, int], bytes]:
    """An ``inflate(chunk, most)`` for a decoder that cannot stop at a size (zstandard's, brotli's
    before 1.2): fed ``step`` bytes at a time, it stops at the slice where its output passes
    ``most`` (a zstd block of 3 bytes or more makes at most 128 KiB)."""

    def inflate(chunk: bytes, most: int) -> bytes:
        if not most:
            return decode(chunk)
        out = bytearray()
        for at in range(0, len(chunk), step):
            out += decode(chunk[at : at + step])
            if len(out) >= most:
                break
        return bytes(out)

    return inflate


def decoder(encoding: str, *, limit: int | None = None) -> Callable[[bytes], bytes] | None:
    """An incremental decoder for one ``Content-Encoding``, or None if unknown/unavailable; with a
    ``limit``, one that raises :class:`TooLarge` rather than inflate its output past that."""
    enc = encoding.strip().lower()
    if enc == "identity":
        return lambda chunk: chunk
    if enc in ("gzip", "x-gzip", "deflate"):
        # (RFC 9110: x-gzip is gzip; urllib3 decodes both.) RFC 9110 says deflate is zlib-wrapped;
        # some servers send raw deflate: decided on the first bytes.
        state: dict[str, Any] = {}

        def inflate(chunk: bytes, most: int) -> bytes:
            if "d" not in state:
                if enc != "deflate":
                    wbits = 16 + zlib.MAX_WBITS
                elif chunk[:1] and (chunk[0] & 0x0F) == 8:
                    wbits = zlib.MAX_WBITS
                else:
                    wbits = -zlib.MAX_WBITS
                state["d"] = zlib.decompressobj(wbits)
            out: bytes = state["d"].decompress(chunk, most)
            return out

        return _capped(inflate, limit)
    if enc == "br":
        try:
            import brotli
        except ImportError:
            return None
        br = brotli.Decompressor()
        if hasattr(br, "can_accept_more_data"):  # (brotli 1.2: an output limit)
            return _capped(
                lambda chunk, most: (
                    br.process(chunk, output_buffer_limit=most) if most else br.process(chunk)
                ),
                limit,
            )
        return _capped(_sliced(br.process, 8), limit)  # (a brotli command copies 16 MiB at most)
    if enc == "zstd":
        try:
            import zstandard
        except ImportError:
            return None
        # A body may hold several zstd frames: start a new one where the last ended.
        zstate = {"d": zstandard.ZstdDecompressor().decompressobj()}

        def unzstd(chunk: bytes) -> bytes:
            out: bytes = zstate["d"].decompress(chunk)
            while zstate["d"].eof and zstate["d"].unused_data:
                rest = zstate["d"].unused_data
                zstate["d"] = zstandard.ZstdDecompressor().decompressobj()
                out += zstate["d"].decompress(rest)
            return out

        return _capped(_sliced(unzstd, 256), limit)
    return None
