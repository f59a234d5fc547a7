"""One HTTP exchange, whatever library sent it: recorded as it streams, or answered from a session.

The adapters (one per HTTP library, :mod:`forkpoint.capture.httpx`…) hand this module plain values
(method, URL, header pairs, body bytes, chunks) and get plain values back, so what a recording
holds and how a replay behaves is decided here, once:

* **record**: the request is sent for real; the response stream goes through :func:`tee`, which
  hands every chunk to the caller the moment it arrives and keeps a copy with its time offset.
  When the stream ends (fully read, closed early by the caller, or failed) the :class:`Exchange`
  writes one ``model_call`` event with the request and the response.
* **replay**: nothing is sent; :func:`serve` finds the recorded call, and the adapter builds the
  library's response from :func:`recorded_chunks` and :func:`replayed` — unless the replayer
  answers ``None`` (models sourced live, or a divergence handled by going live): then the call is
  made and recorded as above, into the replay's child session.

What a user can rely on (each is a test in ``tests/capture/``):

* **Bodies as the caller saw them** (:mod:`.decoding`): a response body is stored decoded exactly
  when the client library decodes it, and the ``Content-Encoding`` header is then removed; one it
  hands over encoded is stored so, unless a secret in it must be scrubbed (``decoded_to_scrub``).
* **Send order.** Each call carries ``sent``, its position among the calls this runtime sent;
  identical requests are answered on replay in the order they were *sent*.
* **Failures are recorded.** A call that got no response is written at once with ``error``; a body
  that failed mid-way keeps its chunks with ``ended: "error"``; replay raises the same exception
  class after the same chunks.
* **Abandoned streams.** A response closed early is written with the chunks read so far and
  ``ended: "client"``. A replayed caller that reads *past* that point gets a
  :class:`~forkpoint.errors.Divergence`: the rest was never received. (A stream closed right after
  its protocol's final event, ``data: [DONE]`` and the like, just ends: nothing was left unread.)
* **A call the caller cancelled** (its own timeout) is written at once with the cancellation as
  its ``error``; on replay it waits to be cancelled again, so the caller's timer fires again.
"""

from __future__ import annotations

import hashlib
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any, cast
from urllib.parse import unquote, urlsplit

from .. import eventstream, runtime
from ..errors import RecordedError
from ..events import (
    ErrorRecord,
    HttpRequest,
    HttpResponse,
    ModelCallEvent,
    ToolCallEvent,
    WithheldDigest,
    cancelled,
    new_span_id,
    now_iso,
)
from ..providers import PLACEHOLDER_KEY, stream_end_markers
from ..redact import (
    basic_credentials,
    cookie_placeholders,
    form_credentials,
    json_credentials,
    scrub_bytes,
    scrub_chunks,
    scrub_headers,
    scrub_stream,
    scrub_text,
    scrub_url,
    secret_placeholders,
)
from ..redact import current as current_scrubber
from ..streamscrub import scrub_events
from ..text import say
from . import connections, resent
from .decoding import (
    DECODED_MAX,
    DecoderFactory,
    TooLarge,
    body_bytes,
    codings,
    decode_with,
    encoded,
    header,
    header_values,
    json_layout,
    own_decoder,
    parse_body,
    scrubbed_body,
    text_or_bytes,
)

#: Response headers not stored: hop-by-hop, and length/encoding that the stored body makes stale.
DROP_RESPONSE_HEADERS = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection"}
)
#: Content types kept as chunk lists with timing instead of one body (an AWS event stream as one
#: chunk per message).
STREAM_TYPES = (
    "text/event-stream",
    "application/x-ndjson",
    "application/jsonl",
    "application/stream+json",
    eventstream.CONTENT_TYPE,
)


def header_text(value: str | bytes) -> str:
    """A header name or value as text (botocore and others pass bytes: HTTP headers are Latin-1)."""
    return value.decode("latin-1") if isinstance(value, bytes | bytearray) else str(value)


def request_record(
    method: str, url: str, headers: list[tuple[str | bytes, str | bytes]], content: bytes
) -> HttpRequest:
    """The stored form of an outgoing request (scrubbed): method, url, headers (names and values
    as text), body_kind, body.

    ``Content-Length`` is not stored. A body sent under a ``Content-Encoding`` (gzip, deflate, br,
    zstd) is stored decoded, without that header: readable in the log, and matched on what it says.
    """
    # Content-Length says nothing the body does not; without it the headers of an agent's calls are
    # usually identical, and the log stores them once.
    pairs = [
        (name, header_text(v)) for k, v in headers if (name := header_text(k)).lower() != "content-length"
    ]
    applied = codings(header_values(pairs, "content-encoding"))
    rt = runtime.active()
    replaying = rt is not None and rt.mode == "replay"
    withheld = None
    if content and applied:
        try:
            decoded = decode_with(own_decoder, applied, [content], final=True)
        except TooLarge:  # (kept nowhere, it cannot be scrubbed: its digest is, which a replay matches)
            # (a replay records nothing unless the call goes live: live() says it then)
            withheld = too_large(None if replaying else f"{method} {scrub_url(url)}", "request", applied)
            digest = withheld_digest(content, applied)
            decoded = [b""]
        if decoded is not None:
            content = b"".join(decoded)
            pairs = [(k, v) for k, v in pairs if k.lower() != "content-encoding"]
    if replaying:  # (looked at by live(), if it goes live)
        runtime.live_request.set((url, pairs, content))
    # (an agent resends its conversation: the body is parsed by what it adds to the last one)
    endpoint = f"{method} {url}"
    kind, body = scrubbed_body(
        content,
        header(pairs, "content-type"),
        loads=lambda data: resent.loads(data, endpoint, runtime.active()),
    )
    record = {
        "method": method,
        "url": scrub_url(url),
        "headers": scrub_headers(pairs, request=True),
        "body_kind": kind,
        "body": body,
    }
    if withheld is not None:
        record["withheld"] = withheld
        record["withheld_digest"] = digest
    return cast(HttpRequest, current_scrubber().http_record(record))


def too_large(call: str | None, what: str, applied: list[str]) -> str:
    """Why the ``what`` body (request, response) of a call under the codings ``applied`` is not
    stored, said now as a warning that names the ``call`` (:func:`say_withheld`); with no ``call``
    (a replay's request, which is stored only if the call goes live), not said."""
    why = (
        f"its {what} body, under Content-Encoding {', '.join(applied)}, decodes to more than "
        f"{DECODED_MAX} bytes (a compression bomb?): forkpoint stopped decoding it there, cannot "
        "scrub it, and so did not store it"
    )
    if call is not None:
        say_withheld(call, what, why)
    return why


def say_withheld(call: str, what: str, why: str) -> None:
    """Say, as it is recorded, that the ``what`` body of ``call`` is not stored, ``why``, and what a
    replay does at it."""
    then = (
        "only its digest: a replay matches the same bytes sent again"
        if what == "request"
        else "a replay stops at this call"
    )
    say(f"forkpoint: WARNING: {call}: {why}; {then}")


#: The first bytes of a gzip member; bytes 4 to 7 of its header are a time (RFC 1952, MTIME).
GZIP_MAGIC = b"\x1f\x8b"


def withheld_digest(content: bytes, applied: list[str]) -> WithheldDigest:
    """What a request body sent under the codings ``applied`` that is not stored (:func:`too_large`)
    is matched by: the SHA-256 of its bytes as sent, their length and the codings. Under gzip
    outermost its header's time is read as zero: ``gzip.compress`` writes the time it ran, and the
    same body compressed again at a replay is the same request. (The bytes as sent, not decoded: a
    body that decodes past the limit may decode to any size, and the program waits for no digest.)"""
    sha = hashlib.sha256()
    if applied[-1] in ("gzip", "x-gzip") and content.startswith(GZIP_MAGIC) and len(content) >= 8:
        sha.update(content[:4])
        sha.update(bytes(4))
        sha.update(memoryview(content)[8:])
    else:
        sha.update(content)
    return {"sha256": sha.hexdigest(), "length": len(content), "codings": applied}


def _placeholder_carrier(url: str, pairs: list[tuple[str, str]], content: bytes) -> tuple[str, str] | None:
    """Where a request carries the replay's placeholder API key, the placeholder of a secret
    scrubbed when recorded (a served tool result handed the program a key as one), or a cookie a
    served ``Set-Cookie`` set to its placeholder, and which: the name of the header (an
    ``Authorization`` the SDK built from it, a ``Basic`` one's password, an AWS signature's
    credential, ``Cookie``), ``"its URL"`` (a ``?key=``) or a form or JSON body's field named as a
    credential (a login's ``password``), or None. (Elsewhere in a body, a placeholder is content
    the model may see.)"""
    ctype = header(pairs, "content-type")
    fields = [(f"its form field {k!r}", v) for k, v in form_credentials(content, ctype)]
    if b"[REDACTED:" in content or PLACEHOLDER_KEY.encode() in content:  # (a body is parsed only then)
        fields += [(f"its JSON field {k!r}", v) for k, v in json_credentials(content, ctype)]
    # (the URL decoded: requests and aiohttp leave a placeholder's colons as they are, %5BREDACTED:…%5D)
    for where, text in [*pairs, ("its URL", unquote(url)), *fields]:
        text = basic_credentials(text) or text  # (a Basic header's password is sent as base64)
        found = [PLACEHOLDER_KEY] if PLACEHOLDER_KEY in text else secret_placeholders(text)
        if not found and where.lower() == "cookie":
            found = cookie_placeholders(text)
        if found:
            return where, found[0]
    return None


def body_content(body: Any) -> tuple[bytes, Any]:
    """(the bytes of a request body, what to send instead): a file or an iterable of chunks is read
    once here, and its bytes are sent in its place (the same bytes; a file is not read twice)."""
    if body is None:
        return b"", None
    if isinstance(body, str):
        return body.encode("utf-8"), body
    if isinstance(body, bytes | bytearray | memoryview):
        return bytes(body), body
    if hasattr(body, "read"):
        data = body.read()
    else:
        data = b"".join(c.encode("utf-8") if isinstance(c, str) else bytes(c) for c in body)
    data = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    return data, data


def error_record(exc: BaseException) -> ErrorRecord:
    """How an exception of an exchange is stored: its class, module and (scrubbed) message, an
    ``OSError``'s ``errno`` and ``strerror`` (a program tells "refused" from "reset" by them), and
    an HTTP response error's ``status`` and own ``message`` (``attrs``)."""
    cls = type(exc)
    out: ErrorRecord = {"type": cls.__name__, "module": cls.__module__, "message": scrub_text(str(exc))}
    if isinstance(exc, OSError) and isinstance(exc.errno, int):
        out["errno"] = exc.errno
        out["strerror"] = scrub_text(str(exc.strerror or ""))
    # (an HTTP library's response error keeps the status it says and its own message apart: aiohttp's
    # ClientResponseError, whose str() is made of them; rebuilt from that str() alone, its status was 0)
    status, said = getattr(exc, "status", None), getattr(exc, "message", None)
    if type(status) is int and isinstance(said, str):
        out["attrs"] = {"status": status, "message": scrub_text(said)}
    return out


#: Builds an HTTP library's own exception from a recorded one's class name and message (and its
#: ``OSError`` part, when it had an errno: an aiohttp connector error carries it), or None.
LibraryError = Callable[[str, str, "OSError | None"], "BaseException | None"]


class Exchange:
    """One model call being recorded: filled in while the response streams, written when it ends.

    The adapter calls :meth:`respond` with the response head, feeds the body through :func:`tee`
    (or :meth:`whole` when the library read it already), and sets :attr:`error` when it failed.
    """

    def __init__(self, rt: runtime.Runtime, request: HttpRequest, decoders: DecoderFactory) -> None:
        self.rt = rt
        self.request = request
        self.decoders = decoders
        self.ts = now_iso()
        self.t0 = time.perf_counter()
        self.sent = runtime.next_sent(rt)
        self.caller = runtime.caller()
        self.span_id = new_span_id()
        self.parent_span_id = runtime.current_span.get() or rt.root_span
        self.head: tuple[int, str, str, list[tuple[str, str]]] | None = None
        self.raw: list[tuple[float, bytes]] = []
        self.complete = False
        self.error: BaseException | None = None
        #: Where the error struck, when the adapter can tell: ``send`` (the request never went out).
        self.phase: str | None = None
        #: The codings the library hands the body over under when it took only the outer ones off
        #: (aiohttp, by one of two ``Content-Encoding`` lines); None: as ``decoders`` say.
        self.left: list[str] | None = None
        #: An AWS event stream's bytes past its last whole message (None for any other body).
        self._frames: bytes | None = None
        self._done = False
        self._lock = threading.Lock()
        connections.recorded(request["url"])
        rt.pending.add(self)

    def respond(self, status: int, reason: str, http_version: str, headers: list[tuple[str, str]]) -> None:
        """The response head arrived: status, reason phrase, HTTP version, header pairs."""
        self.head = (status, reason, http_version, headers)
        for answered in runtime.call_ended:
            answered(False)
        if status == 101:
            _upgraded(self.request)
        if eventstream.is_event_stream(header(headers, "content-type")) and not header(
            headers, "content-encoding"
        ):
            self._frames = b""

    def chunk(self, data: bytes) -> None:
        """A piece of the body, as the transport delivered it. An AWS event stream ends at an exception
        message: the call is written then (botocore raises it and never reads on, nor closes the
        response; the call was written at the program's exit, or lost with a killed process)."""
        self.raw.append((round((time.perf_counter() - self.t0) * 1000, 3), data))
        if self._frames is not None:
            frames, self._frames = eventstream.split(self._frames + data)
            if any(eventstream.ends_stream(f) for f in frames):
                self.complete = True
                self.finish()

    def whole(self, data: bytes) -> None:
        """The whole body at once (the library had read it before handing the response over)."""
        if data:
            self.chunk(data)
        self.complete = True
        self.finish()

    def finish(self, *, ended: str | None = None) -> None:
        """Write the event (once). ``ended`` overrides how the stream is said to have ended."""
        with self._lock:
            if self._done:
                return
            self._done = True
        self.rt.pending.discard(self)
        duration = round((time.perf_counter() - self.t0) * 1000, 3)
        if self.error is not None:
            how = "error"
        elif self.complete:
            how = "complete"
        else:
            how = ended or "client"
        event: ModelCallEvent = {
            "type": "model_call",
            "ts": self.ts,
            "duration_ms": duration,
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
            "sent": self.sent,
            "request": self.request,
            "response": self._response_record(how) if self.head is not None else None,
        }
        if self.caller is not None:
            event["caller"] = self.caller
        if self.error is not None:
            event["error"] = error_record(self.error)
            if self.phase is not None:
                event["error"]["phase"] = self.phase
        self.rt.model_call_done(event)
        # An adapter's decoders may hold the library's response, which holds this call through its
        # stream: a cycle only the garbage collector frees, the body with it, where the program's
        # response went as soon as it let it go. Written, the call needs them no more.
        self.decoders = _written

    def _response_record(self, ended: str, *, as_received: bool = False) -> HttpResponse:
        """The stored response. ``as_received``: a body the library left under its codings is kept so,
        not decoded to be scrubbed (nothing in it was)."""
        assert self.head is not None
        status, reason, http_version, all_headers = self.head
        headers = [(k, v) for k, v in all_headers if k.lower() not in DROP_RESPONSE_HEADERS]
        times = [t for t, _ in self.raw]
        chunks = [c for _, c in self.raw]
        applied = codings(header_values(all_headers, "content-encoding"))
        encoded = False
        decoded_from: list[str] = []
        to_scrub = False
        withheld = None
        if applied:
            under = applied if self.left is None else self.left
            try:
                decoded = decode_with(self.decoders, under, chunks, final=ended == "complete")
                if decoded is None and not as_received:
                    # The caller got it encoded (httpx leaves x-gzip so): decoded here for the
                    # scrubber only, a key in it kept otherwise; a replay encodes it again.
                    decoded = decode_with(own_decoder, under, chunks, final=ended == "complete")
                    to_scrub = decoded is not None
            except TooLarge:  # (kept as received, header and all, but for its body: none of it)
                call = f"{self.request['method']} {scrub_url(self.request['url'])}"
                withheld = too_large(call, "response", applied)
                decoded, chunks, times = None, [], []
            if decoded is None:  # not decodable here: keep the body as received, header and all
                encoded = True
            else:
                chunks = decoded
                headers = [(k, v) for k, v in headers if k.lower() != "content-encoding"]
                decoded_from = applied
        plain = chunks  # (before they are scrubbed)
        ctype = header(all_headers, "content-type")
        streamed = any(t in ctype.lower() for t in STREAM_TYPES)
        if eventstream.is_event_stream(ctype) and not encoded:
            times, chunks = aws_messages(times, chunks)
        elif streamed:  # (a whole body is scrubbed whole, once, below)
            chunks = scrub_stream(chunks, ctype)
        out: HttpResponse = {
            "status": status,
            "reason": reason,
            "http_version": http_version,
            "headers": scrub_headers(headers),
        }
        # (not a header: the stored body may be decoded, or its JSON written anew; said_length)
        length = header(all_headers, "content-length").strip()
        out["content_length"] = int(length) if length.isdigit() else None
        if streamed:
            out["body_kind"] = "stream"
            # (a chunk that decodes to nothing, a gzip header alone, is kept: the program may have
            # had it as a piece of its own, under a coding its client left on)
            out["chunks"] = [[t, text_or_bytes(c)] for t, c in zip(times, chunks, strict=True)]
        else:
            # A body still under its coding is kept as text or bytes, never re-serialized JSON.
            data = b"".join(chunks)
            layouts: list[dict[str, Any] | None] = []
            kind, out["body"] = scrubbed_body(
                data,
                ctype,
                json_ok=not encoded,
                parsed=lambda value: layouts.append(json_layout(data, value)),
            )
            out["body_kind"] = cast(Any, kind)
            if kind == "json" and layouts and layouts[0] is not None:
                out["json_layout"] = layouts[0]  # (a replay hands back the same bytes)
        out["ended"] = cast(Any, ended)
        if decoded_from:  # (a client that decodes for itself gets it encoded again on replay)
            out["decoded_from"] = decoded_from
            lines = [v for k, v in all_headers if k.lower() == "content-encoding"]
            if len(lines) > 1:  # (said again as they came: a program may read them one by one)
                out["encoding_lines"] = lines
        if to_scrub:
            out["decoded_to_scrub"] = True
            if self.left is not None:
                out["handed_under"] = self.left
        if withheld is not None:
            out["withheld"] = withheld
        if eventstream.is_event_stream(ctype) and not encoded:
            # Only each message's payload was scrubbed here (its headers were not): the writer's
            # pass over the whole stream is the one that reads them.
            record = out
        else:
            record = cast(HttpResponse, current_scrubber().http_record(dict(out)))
        if to_scrub and _nothing_scrubbed(record, b"".join(plain), ctype):
            # (then the very bytes the caller got are stored, and handed to it again on replay)
            current_scrubber().forget_record(record)
            return self._response_record(ended, as_received=True)
        return record


def _nothing_scrubbed(record: HttpResponse, plain: bytes, ctype: str) -> bool:
    """Whether the body stored in ``record`` says what ``plain`` (the body before it was scrubbed) does."""
    if record.get("body_kind") == "stream":
        return b"".join(body_chunks(record)) == plain
    return (record.get("body_kind"), record.get("body")) == parse_body(plain, ctype)


def aws_messages(times: list[float], chunks: list[bytes]) -> tuple[list[float], list[bytes]]:
    """An AWS event stream as one chunk per message, each at the time its last byte arrived, with
    each message's payload scrubbed (and the message framed again when that changed it, so its
    lengths and checksums stay right)."""
    out_times: list[float] = []
    out: list[bytes] = []
    rest = b""
    for t, chunk in zip(times, chunks, strict=True):
        frames, rest = eventstream.split(rest + chunk)
        out_times.extend(t for _ in frames)
        out.extend(frames)
    if rest:  # a message cut off: kept as received
        out_times.append(times[-1])
        out.append(scrub_bytes(rest))
    # Secrets split over messages (or base64 in them) first; then each message's own payload.
    out = scrub_events(out, eventstream.CONTENT_TYPE, scrub_chunks)
    for n, frame in enumerate(out):
        decoded = eventstream.decode(frame)
        if decoded is not None and scrub_bytes(decoded[1]) != decoded[1]:
            headers = {k: v if isinstance(v, str) else str(v) for k, v in decoded[0].items()}
            out[n] = eventstream.encode(headers, scrub_bytes(decoded[1]))
    return out_times, out


def tee(inner: Iterable[bytes], call: Exchange) -> Iterator[bytes]:
    """The body of a live response: each chunk to the caller as it arrives, and to ``call``."""
    try:
        for chunk in inner:
            call.chunk(chunk)
            yield chunk
    except Exception as exc:
        call.error = exc
        call.finish()
        raise
    call.complete = True


async def atee(inner: Any, call: Exchange) -> AsyncIterator[bytes]:
    """:func:`tee` for an async body."""
    try:
        async for chunk in inner:
            call.chunk(chunk)
            yield chunk
    except Exception as exc:
        call.error = exc
        call.finish()
        raise
    call.complete = True


# --------------------------------------------------------------------------- replay


def serve(rt: runtime.Runtime, request: HttpRequest) -> tuple[ModelCallEvent, int] | None:
    """The recorded call answering ``request`` (and its position in this run) when ``rt`` is a
    replay that serves it; None when the call is to be made for real (then recorded). Raises
    :class:`~forkpoint.errors.Divergence`."""
    if rt.mode != "replay":
        return None
    taken = cast(runtime.Serving, rt).take_model_call(request)
    if taken is not None and (taken[0].get("response") or {"status": None})["status"] == 101:
        raise cast(runtime.Serving, rt).diverged(taken[0], "model_call", taken[1], UPGRADED)
    if taken is not None and (why := _withheld(taken[0])):
        raise cast(runtime.Serving, rt).diverged(
            taken[0], "model_call", taken[1], f"{why}: the recording cannot serve it", handed_nothing=True
        )
    runtime.served_from_recording.set(taken is not None)
    if taken is not None:  # answered from the recording: this record is not logged here
        current_scrubber().forget_record(request)
        for answered in runtime.call_ended:
            answered(False)
    return taken


def _withheld(event: ModelCallEvent) -> str | None:
    """Why a recorded call cannot be served, its request or response body not stored
    (:func:`too_large`), or None. A request body withheld with its digest was matched by it (the
    match key covers it); one recorded before such digests were was not."""
    response: HttpResponse | dict[str, Any] = event.get("response") or {}
    request = event["request"]
    unmatched = None if "withheld_digest" in request else request.get("withheld")
    return unmatched or response.get("withheld")


def _written(coding: str) -> Any:
    raise AssertionError("a call's body is decoded before its event is written, never after")


def live(rt: runtime.Runtime, request: HttpRequest, decoders: DecoderFactory) -> Exchange:
    """Start recording a call that is made for real (after :func:`serve` said so). Raises
    :class:`~forkpoint.errors.NetworkBlocked` for a replay's call that carries the placeholder API
    key the replay set where the key was unset, or a scrubbed secret's placeholder, as a header or
    in its URL: the server would refuse it (a 401 the run would take for the server's answer), so
    it is not sent, and the report says which key is missing."""
    runtime.served_from_recording.set(False)
    raw = runtime.live_request.get() if rt.mode == "replay" else None
    carried = _placeholder_carrier(*raw) if raw is not None else None
    if carried is not None:
        raise cast(runtime.Serving, rt).placeholder_refused(request, *carried)
    if rt.mode == "replay" and (why := request.get("withheld")):  # (now recorded: request_record)
        say_withheld(f"{request['method']} {request['url']}", "request", why)
    rt.before_model_call(request)
    return Exchange(rt, request, decoders)


def said_length(resp: HttpResponse | dict[str, Any], method: str, served: int) -> int | None:
    """The ``Content-Length`` a replayed response says, ``served`` bytes of body handed over: none
    when the recorded response had none (chunked, or read to the connection's close); the recorded
    value for a response that has no body whatever its length says (a ``HEAD``, a 204 or 304: RFC
    9110 section 8.6); else ``served``, the length of what is handed over (the stored body may be
    decoded, or its JSON written anew, so the recorded value may not fit it)."""
    length = resp.get("content_length")
    if type(length) is not int:
        return None
    return length if bodiless(resp, method) else served


def encoding_said(resp: HttpResponse | dict[str, Any]) -> list[str]:
    """The ``Content-Encoding`` header lines the response of a body stored decoded came with (none
    for any other): each of ``encoding_lines``, else its ``decoded_from`` codings on one line."""
    lines = resp.get("encoding_lines")
    if isinstance(lines, list) and lines:
        return [str(line) for line in lines]
    codings = resp.get("decoded_from") or []
    return [", ".join(map(str, codings))] if codings else []


def encoded_again(
    resp: HttpResponse | dict[str, Any],
    chunks: list[bytes],
    error: BaseException | None,
    *,
    under: list[str] | None = None,
) -> tuple[list[bytes], list[str]]:
    """A body stored decoded (``decoded_from``) under its content codings again, for a client that
    decodes it itself (or hands it over raw: ``iter_raw``, ``auto_decompress=False``,
    ``urllib.request``): (the chunks to serve, the ``Content-Encoding`` lines to say with them:
    :func:`encoding_said`), or (``chunks``, []) to serve them as stored (a whole body cut short, a
    coding that cannot be applied here). A stream is encoded chunk by chunk (as many chunks as
    recorded, each decodable as it comes: a chunk that decoded to nothing is a piece again); a body
    decoded only to be scrubbed (``decoded_to_scrub``: its caller got it encoded) whatever it is.
    ``under``: other codings to apply than ``decoded_from`` (those its caller got it under)."""
    whole = resp.get("body_kind") != "stream" and resp.get("ended") == "complete" and error is None
    whole = whole or resp.get("body_kind") == "stream" or resp.get("decoded_to_scrub") is True
    codings = [str(c) for c in (resp.get("decoded_from") or [] if under is None else under)] if whole else []
    ended = resp.get("ended") == "complete" and error is None
    again = encoded(chunks, codings, final=ended) if codings else None
    return (again, encoding_said(resp)) if again is not None else (chunks, [])


def bodiless(resp: HttpResponse | dict[str, Any], method: str) -> bool:
    """A response that has no body, whatever its headers say: to a ``HEAD``, or a 204 or 304."""
    return method.upper() == "HEAD" or resp.get("status") in (204, 304)


_upgrades_said: set[str] = set()
#: Why a recorded ``101 Switching Protocols`` cannot be replayed.
UPGRADED = (
    "the connection was upgraded (101 Switching Protocols: a websocket, say); forkpoint recorded its "
    "handshake only, not what went over it afterwards, so a replay cannot serve it"
)


def _upgraded(request: HttpRequest) -> None:
    """Say, once for each ``host:port``, that a connection was upgraded and what went over it after
    is not recorded (:data:`UPGRADED`)."""
    where = urlsplit(str(request.get("url") or "")).netloc
    if where not in _upgrades_said:
        _upgrades_said.add(where)
        say(f"forkpoint: WARNING: to {where}: {UPGRADED}")


def recorded_chunks(event: ModelCallEvent) -> list[bytes]:
    """The body of a recorded response as the chunks to hand back (one chunk for a whole body)."""
    return body_chunks(event.get("response") or {})


def body_chunks(resp: HttpResponse | dict[str, Any]) -> list[bytes]:
    """:func:`recorded_chunks` of a stored response."""
    if resp.get("body_kind") == "stream":
        return [c if isinstance(c, bytes) else c.encode("utf-8") for _, c in resp.get("chunks", [])]
    data = body_bytes(str(resp.get("body_kind", "empty")), resp.get("body"), resp.get("json_layout"))
    return [data] if data else []


#: The last event of an SSE stream in the providers' protocols: a caller that closes the response
#: right after it (the openai SDK does) has read everything the server had to say.
_FINAL_EVENTS = stream_end_markers()


def _protocol_ended(chunks: list[bytes]) -> bool:
    """True when a recorded stream ends with its protocol's final event (then reading on ends the
    stream, as the server did, whatever the client library's habit of draining it)."""
    tail = b"".join(chunks[-2:])[-4096:]
    return any(marker in tail for marker in _FINAL_EVENTS)


class Abandoned:
    """A recorded response whose caller stopped reading before its end: what reading past that
    point raises (calling it gives the divergence), and the pace its chunks are handed out at, as
    they came live (seconds after the request was sent: ``times``), so that the caller's own timer
    (``asyncio.wait_for`` around the reading, a deadline) cuts the stream where it did live."""

    def __init__(self, diverged: Callable[[], BaseException], times: list[float], gave_up: float) -> None:
        self.diverged, self.times, self.gave_up = diverged, times, gave_up
        self.start = time.monotonic()

    def __call__(self) -> BaseException:
        return self.diverged()

    def wait(self, index: int) -> float:
        """Seconds until chunk ``index`` came live (0 or less: hand it over now); past the last
        one, until a second after the caller gave up live (``gave_up``): a caller whose own timer
        cut it off is waiting for more, and its timer fires again before the divergence."""
        at = self.times[index] if index < len(self.times) else (self.gave_up + 1.0 if self.times else 0.0)
        return self.start + at - time.monotonic()


def past_end(
    rt: runtime.Runtime, event: ModelCallEvent, position: int, chunks: list[bytes]
) -> Abandoned | None:
    """What reading past the recorded end of a response raises (and how its chunks are paced): a
    divergence when the recorded caller abandoned the stream before its end; None when the
    recorded body ended there."""
    response = event.get("response")
    ended = response.get("ended") if response else None
    if event.get("error") or ended not in ("client", "unfinished") or _protocol_ended(chunks):
        return None
    reason = (
        f"the recorded caller stopped reading this response after {len(chunks)} chunk(s) (ended: {ended}); "
        "this run reads further, and the rest of it was never received"
    )
    stored = response.get("chunks") if response and response.get("body_kind") == "stream" else None
    times = [float(t) / 1000 for t, _ in stored] if stored and len(stored) == len(chunks) else []
    gave_up = float(event.get("duration_ms") or 0) / 1000
    return Abandoned(
        lambda: cast(runtime.Serving, rt).diverged(event, "model_call", position, reason), times, gave_up
    )


def replayed(chunks: list[bytes], error: BaseException | None, past: Abandoned | None) -> Iterator[bytes]:
    """The recorded chunks (paced as they came, when the recorded caller abandoned them), then the
    end the recording had: normal, the recorded exception, or (past the point where the recorded
    caller stopped reading) a divergence."""
    for i, c in enumerate(chunks):
        if past is not None and (wait := past.wait(i)) > 0:
            time.sleep(wait)
        yield c
    if error is not None:
        raise error
    if past is not None:
        if (wait := past.wait(len(chunks))) > 0:
            time.sleep(wait)
        raise past()


async def areplayed(
    chunks: list[bytes], error: BaseException | None, past: Abandoned | None
) -> AsyncIterator[bytes]:
    """:func:`replayed` for an async body."""
    for i, c in enumerate(chunks):
        if past is not None and (wait := past.wait(i)) > 0:
            await _sleep(wait)
        yield c
    if error is not None:
        raise error
    if past is not None:
        if (wait := past.wait(len(chunks))) > 0:
            await _sleep(wait)
        raise past()


def rebuilt_error(error: ErrorRecord | dict[str, Any], library: LibraryError) -> BaseException:
    """The recorded exception, raised again as the same class: a transport error of the HTTP library
    (``library(name, message, os_error)`` builds it, or returns None), or any other exception class
    that is a builtin or whose module is already imported (nothing is imported to find it: reading a
    session runs no code), an ``OSError`` with its recorded ``errno`` and ``strerror``. Otherwise
    :class:`~forkpoint.errors.RecordedError`, which names the recorded class."""
    name, module = str(error.get("type")), str(error.get("module"))
    message = str(error.get("message", ""))
    code, strerror = error.get("errno"), str(error.get("strerror") or "")
    # (OSError picks the subclass its errno names: ConnectionRefusedError for ECONNREFUSED)
    os_error = OSError(code, strerror) if isinstance(code, int) else None
    # A builtin is never the library's: urllib3 has a TimeoutError and a ConnectionError of its own.
    own = library(name, message, os_error) if module != "builtins" else None
    if own is not None:
        attrs = error.get("attrs")
        if (
            isinstance(attrs, dict)
            and type(attrs.get("status")) is int
            and isinstance(attrs.get("message"), str)
        ):
            if hasattr(own, "status") and hasattr(own, "message"):  # (error_record's status and message)
                own.status, own.message = attrs["status"], attrs["message"]
        return own
    found = getattr(sys.modules.get(module), name, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        try:
            if os_error is not None and issubclass(found, OSError):
                return found(code, strerror)
            return runtime.replayed(found(message) if message else found())
        except Exception:  # a constructor that wants other arguments
            pass
    return RecordedError(dict(error))


def built(cls: type[BaseException], message: str) -> BaseException:
    """An instance of exception class ``cls`` with ``message``: its constructor called with the
    message, else (a constructor that wants a pool, a connection, a request…) made without it."""
    try:
        return cls(message)
    except TypeError:
        exc: BaseException = cast(Any, cls).__new__(cls)
        BaseException.__init__(exc, message)
        return exc


def cancelled_by_caller(event: ModelCallEvent) -> bool:
    """True for a recorded model call that its caller cancelled before any answer came."""
    return event.get("response") is None and cancelled(event.get("error"))


async def _sleep(seconds: float) -> None:
    """Sleep under whichever event loop runs (anyio: asyncio and trio alike)."""
    try:
        import anyio
    except ImportError:  # pragma: no cover - httpx and httpx2 both depend on anyio
        import asyncio

        await asyncio.sleep(seconds)
    else:
        await anyio.sleep(seconds)


async def await_cancellation(
    rt: runtime.Runtime,
    event: ModelCallEvent | ToolCallEvent,
    position: int,
    *,
    until: str = "any answer came",
) -> None:
    """Live, the caller gave up on this call (a model call or a tool's) before ``until`` (its own
    timeout: ``asyncio.wait_for``, ``anyio.fail_after``…). The replay waits as long as the live
    call lasted (and a second more), so the caller's own timer fires again and it sees the same
    timeout; if nothing cancels the call by then, the run went another way: a Divergence."""
    recorded_ms = float(event.get("duration_ms") or 0)
    waited = recorded_ms / 1000 + 1.0
    await _sleep(waited)
    raise cast(runtime.Serving, rt).diverged(
        event,
        event["type"],
        position,
        f"the recorded caller cancelled this call after {recorded_ms:.0f} ms, "
        f"before {until}; in this run nothing cancelled it within {waited:.1f} s",
    )


class ChunkReader:
    """A recorded body as a file-like object for libraries that read one (urllib3, http.client):
    ``read(amt)`` and ``read1(amt)`` hand out at most one recorded chunk at a time (as a socket
    delivers what has arrived), then the end the recording had (see :func:`replayed`): EOF, the
    recorded exception, or a divergence when the caller reads past where the recorded caller stopped.
    ``isclosed()`` and ``closed`` are true once the normal end was read."""

    def __init__(self, body: Iterator[bytes]) -> None:
        self._body = body
        self._pending = b""
        self._eof = False

    def _fill(self) -> bool:
        """Make sure something is pending unless the body ended; False at the end."""
        while not self._pending and not self._eof:
            try:
                self._pending = next(self._body)
            except StopIteration:
                self._eof = True
        return bool(self._pending)

    def read(self, amt: int | None = None) -> bytes:
        """Up to ``amt`` bytes of the current chunk; everything that is left when ``amt`` is None."""
        if amt is None or amt < 0:
            out = [self._pending]
            self._pending = b""
            while self._fill():
                out.append(self._pending)
                self._pending = b""
            return b"".join(out)
        if amt == 0 or not self._fill():
            return b""
        data, self._pending = self._pending[:amt], self._pending[amt:]
        return data

    read1 = read

    def readinto(self, buffer: Any) -> int:
        """:meth:`read` into ``buffer`` (for :class:`io.RawIOBase` users); returns the count."""
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def isclosed(self) -> bool:
        return self._eof and not self._pending

    @property
    def closed(self) -> bool:
        return self.isclosed()

    def close(self) -> None:
        self._eof, self._pending = True, b""
