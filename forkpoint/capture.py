"""Model-call capture at the HTTP boundary of httpx and httpx2 (sync and async).

The openai and anthropic SDKs send every request through ``Client._send_single_request`` of httpx2
(or of httpx, for a client passed in by the user). forkpoint wraps that method on the four client
classes, once per process:

* **record**: the request is sent for real; the response stream is wrapped in a *tee* that hands
  every chunk to the caller the moment it arrives and keeps a copy with its time offset. When the
  stream ends (fully read, closed early by the caller, or failed) one ``model_call`` event is
  written with the request, the response and a provider-aware summary.
* **replay**: nothing is sent; the response is rebuilt from the session, chunk by chunk — unless the
  replayer answers ``None`` (models sourced live, or a divergence handled by going live): then the
  call is made and recorded as above, into the replay's child session.

Below ``_send_single_request`` sit transports, connection pools and auth: a replay never reaches them.

What a user can rely on (each is a test in ``tests/test_robustness.py``):

* **Bodies as the caller saw them.** A response body is stored decoded exactly when the client
  library decodes it (same decoders, so the same bytes, and the same failures): the
  ``Content-Encoding`` header is then removed so headers and body agree. A coding the library does
  not decode (unknown, or its package is missing), or a body that fails to decode, is stored as
  received, header and all, and replays the same way. A request body sent with a
  ``Content-Encoding`` is stored (and matched) decoded.
* **Send order.** Each call carries ``sent``, its position among the calls this runtime sent.
  Concurrent calls finish (and are written) in any order; identical requests are answered on replay
  in the order they were *sent*, which is what an asyncio program reproduces.
* **Failures are recorded.** A call that got no response is written at once with ``error``; a body
  that failed mid-way keeps its chunks with ``ended: "error"``; replay raises the same exception
  class after the same chunks.
* **Abandoned streams.** A response closed early is written with the chunks read so far and
  ``ended: "client"``. A replayed caller that reads *past* that point gets a
  :class:`~forkpoint.replay.Divergence`: the rest was never received, and ending the stream quietly
  would hand the agent a shorter answer than any server gave. (A stream closed right after its
  protocol's final event, ``data: [DONE]`` and the like, just ends: nothing was left unread.)
* **A call the caller cancelled** (its own timeout) is written at once with the cancellation as
  its ``error``; on replay it waits to be cancelled again, so the caller's timer fires again.
* **No waiting for a server that is not there.** The openai/anthropic SDKs sleep before a retry
  (``retry-after``/``retry-after-ms`` or backoff). When the failed attempt was served from the
  recording that sleep is skipped; the SDK still computes it (same headers read, same
  ``random()`` drawn for jitter), so the run stays on its recorded path, only faster.
"""

from __future__ import annotations

import contextvars
import datetime
import importlib
import sys
import threading
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from . import runtime
from .log import new_span_id, now_iso
from .redact import scrub_bytes, scrub_chunks, scrub_headers, scrub_json, scrub_text, scrub_url

if TYPE_CHECKING:
    from .record import Recorder
    from .replay import Replayer

#: Response headers not stored: hop-by-hop, and length/encoding that the stored body makes stale.
_DROP_RESPONSE_HEADERS = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "proxy-connection"}
)
#: Content types kept as chunk lists with timing instead of one body.
_STREAM_TYPES = ("text/event-stream", "application/x-ndjson", "application/jsonl", "application/stream+json")

_install_lock = threading.Lock()
_installed: dict[str, ModuleType] = {}


def install() -> None:
    """Wrap httpx and httpx2 clients (whichever are importable). Idempotent."""
    with _install_lock:
        for name in ("httpx", "httpx2"):
            if name in _installed:
                continue
            try:
                mod = importlib.import_module(name)
            except ImportError:
                continue
            _patch(mod)
            _installed[name] = mod


# --------------------------------------------------------------------------- bodies


def parse_body(data: bytes, content_type: str, *, json_ok: bool = True) -> tuple[str, Any]:
    """Classify and parse an HTTP body: ``("empty", None)``, ``("json", value)``, ``("text", str)``
    or ``("bytes", bytes)``. JSON is recognised by content type or by a leading ``{``/``[``;
    ``json_ok=False`` keeps the body as text or bytes (a body still under a content coding)."""
    if not data:
        return "empty", None
    ctype = content_type.lower()
    head = data.lstrip()[:1]
    if json_ok and ("json" in ctype or head in (b"{", b"[")):
        try:
            return "json", orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    try:
        return "text", data.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes", data


def body_bytes(kind: str, body: Any) -> bytes:
    """The bytes of a stored body (inverse of :func:`parse_body`, JSON re-serialized compactly)."""
    if kind == "json":
        return orjson.dumps(body)
    if kind == "text":
        return str(body).encode("utf-8")
    if kind == "bytes":
        return bytes(body)
    return b""


def scrub_body(kind: str, body: Any) -> Any:
    """A parsed body (see :func:`parse_body`) with secrets scrubbed."""
    if kind == "json":
        return scrub_json(body)
    if kind == "text":
        return scrub_text(body)
    if kind == "bytes":
        return scrub_bytes(body)
    return body


def request_record(request: Any, content: bytes) -> dict[str, Any]:
    """The stored form of an outgoing request (scrubbed): method, url, headers, body_kind, body.

    ``Content-Length`` is not stored. A body sent under a ``Content-Encoding`` (gzip, deflate, br,
    zstd) is stored decoded, without that header: readable in the log, and matched on what it says (gzip
    output embeds a timestamp, so the encoded bytes differ at every run).
    """
    # Content-Length says nothing the body does not; without it the headers of an agent's calls are
    # usually identical, and the log stores them once.
    headers = [(k, v) for k, v in request.headers.multi_items() if k.lower() != "content-length"]
    codings = _codings(request.headers.get_list("content-encoding", split_commas=True))
    if content and codings:
        decoded = _decode_with(_own_decoder, codings, [content], final=True)
        if decoded is not None:
            content = b"".join(decoded)
            headers = [(k, v) for k, v in headers if k.lower() != "content-encoding"]
    kind, body = parse_body(content, request.headers.get("content-type", ""))
    return {
        "method": request.method,
        "url": scrub_url(str(request.url)),
        "headers": scrub_headers(headers),
        "body_kind": kind,
        "body": scrub_body(kind, body),
    }


def _error_record(exc: BaseException) -> dict[str, Any]:
    cls = type(exc)
    return {"type": cls.__name__, "module": cls.__module__, "message": scrub_text(str(exc))}


def _codings(values: list[str]) -> list[str]:
    """The content codings of a ``Content-Encoding`` header, in the order they were applied."""
    return [v.strip().lower() for v in values if v.strip()]


class _Own:
    """A decoder of one content coding with the interface of httpx's (``decode``, ``flush``)."""

    def __init__(self, fn: Callable[[bytes], bytes]) -> None:
        self.decode = fn

    def flush(self) -> bytes:
        return b""


def _own_decoder(coding: str) -> Any:
    """forkpoint's own decoder of one coding (used for request bodies, and for responses when the
    library's decoders cannot be found), or None if unknown/unavailable."""
    fn = _decoder(coding)
    return None if fn is None else _Own(fn)


def _library_decoders(mod: ModuleType) -> Callable[[str], Any]:
    """A factory of the HTTP library's own content decoders (``None`` for a coding it does not
    decode), so that what forkpoint stores is byte for byte what the library gave the caller."""
    try:
        supported = importlib.import_module(f"{mod.__name__}._decoders").SUPPORTED_DECODERS
    except (ImportError, AttributeError):
        return _own_decoder

    def make(coding: str) -> Any:
        cls = supported.get(coding)
        return cls() if cls is not None else None

    return make


def _as_bytes(out: Any) -> bytes:
    """httpx decoders return bytes; httpx2's return an iterator of bytes."""
    return bytes(out) if isinstance(out, bytes | bytearray) else b"".join(out)


def _decode_with(
    make: Callable[[str], Any], codings: list[str], chunks: list[bytes], *, final: bool
) -> list[bytes] | None:
    """``chunks`` decoded chunk by chunk (last-applied coding first, as httpx does), with the
    decoders' flushed tail added to the last chunk when the body was read to the ``final`` end.
    None when a coding is not decodable here or the data does not decode: keep it as received."""
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
    except Exception:  # zlib.error, brotli.error, DecodingError…: the caller got the same failure
        return None


def _decoder(encoding: str) -> Callable[[bytes], bytes] | None:
    """An incremental decoder for one ``Content-Encoding``, or None if unknown/unavailable."""
    enc = encoding.strip().lower()
    if enc == "identity":
        return lambda chunk: chunk
    if enc == "gzip":
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        return d.decompress
    if enc == "deflate":
        # RFC 9110 says zlib-wrapped; some servers send raw deflate. Decide on the first bytes.
        state: dict[str, Any] = {}

        def inflate(chunk: bytes) -> bytes:
            if "d" not in state:
                wbits = zlib.MAX_WBITS if chunk[:1] and (chunk[0] & 0x0F) == 8 else -zlib.MAX_WBITS
                state["d"] = zlib.decompressobj(wbits)
            return state["d"].decompress(chunk)

        return inflate
    if enc == "br":
        try:
            import brotli
        except ImportError:
            return None
        return brotli.Decompressor().process
    if enc == "zstd":
        try:
            import zstandard
        except ImportError:
            return None
        # A body may hold several zstd frames: start a new one where the last ended.
        zstate = {"d": zstandard.ZstdDecompressor().decompressobj()}

        def unzstd(chunk: bytes) -> bytes:
            out = zstate["d"].decompress(chunk)
            while zstate["d"].eof and zstate["d"].unused_data:
                rest = zstate["d"].unused_data
                zstate["d"] = zstandard.ZstdDecompressor().decompressobj()
                out += zstate["d"].decompress(rest)
            return out

        return unzstd
    return None


# --------------------------------------------------------------------------- recording


class _Call:
    """One model call being recorded: filled in while the response streams, written when it ends."""

    def __init__(
        self, rt: Recorder | Replayer, request: dict[str, Any], decoders: Callable[[str], Any]
    ) -> None:
        self.rt = rt
        self.request = request
        self.decoders = decoders
        self.ts = now_iso()
        self.t0 = time.perf_counter()
        self.sent = runtime.next_sent(rt)
        self.span_id = new_span_id()
        self.parent_span_id = runtime.current_span.get() or rt.root_span
        self.response: Any = None
        self.raw: list[tuple[float, bytes]] = []
        self.complete = False
        self.error: BaseException | None = None
        self._done = False
        self._lock = threading.Lock()
        rt.pending.add(self)

    def chunk(self, data: bytes) -> None:
        self.raw.append((round((time.perf_counter() - self.t0) * 1000, 3), data))

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
        event: dict[str, Any] = {
            "type": "model_call",
            "ts": self.ts,
            "duration_ms": duration,
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
            "sent": self.sent,
            "request": self.request,
        }
        if self.response is not None:
            event["response"] = self._response_record(how)
        else:
            event["response"] = None
        if self.error is not None:
            event["error"] = _error_record(self.error)
        self.rt.model_call_done(event)

    def _response_record(self, ended: str) -> dict[str, Any]:
        resp = self.response
        headers = [(k, v) for k, v in resp.headers.multi_items() if k.lower() not in _DROP_RESPONSE_HEADERS]
        times = [t for t, _ in self.raw]
        chunks = [c for _, c in self.raw]
        codings = _codings(resp.headers.get_list("content-encoding", split_commas=True))
        encoded = False
        if codings:
            decoded = _decode_with(self.decoders, codings, chunks, final=ended == "complete")
            if decoded is None:  # not decodable here: keep the body as received, header and all
                encoded = True
            else:
                chunks = decoded
                headers = [(k, v) for k, v in headers if k.lower() != "content-encoding"]
        chunks = scrub_chunks(chunks)
        ctype = resp.headers.get("content-type", "")
        out: dict[str, Any] = {
            "status": resp.status_code,
            "reason": resp.reason_phrase,
            "http_version": resp.http_version,
            "headers": scrub_headers(headers),
        }
        if any(t in ctype.lower() for t in _STREAM_TYPES):
            out["body_kind"] = "stream"
            out["chunks"] = [[t, _text_or_bytes(c)] for t, c in zip(times, chunks, strict=True) if c]
        else:
            # A body still under its coding is kept as text or bytes, never re-serialized JSON.
            kind, body = parse_body(b"".join(chunks), ctype, json_ok=not encoded)
            out["body_kind"] = kind
            out["body"] = body
        out["ended"] = ended
        return out


def _text_or_bytes(data: bytes) -> str | bytes:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data


def _stream_classes(mod: ModuleType) -> tuple[type, type]:
    """Tee and replay stream classes for one HTTP library (they must subclass its stream bases)."""

    class TeeSync(mod.SyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any, call: _Call) -> None:
            self._inner, self._call = inner, call

        def __iter__(self) -> Iterator[bytes]:
            try:
                for chunk in self._inner:
                    self._call.chunk(chunk)
                    yield chunk
            except Exception as exc:
                self._call.error = exc
                self._call.finish()
                raise
            self._call.complete = True

        def close(self) -> None:
            try:
                self._inner.close()
            finally:
                self._call.finish()

    class TeeAsync(mod.AsyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any, call: _Call) -> None:
            self._inner, self._call = inner, call

        async def __aiter__(self) -> AsyncIterator[bytes]:
            try:
                async for chunk in self._inner:
                    self._call.chunk(chunk)
                    yield chunk
            except Exception as exc:
                self._call.error = exc
                self._call.finish()
                raise
            self._call.complete = True

        async def aclose(self) -> None:
            try:
                await self._inner.aclose()
            finally:
                self._call.finish()

    return TeeSync, TeeAsync


def _replay_classes(mod: ModuleType) -> tuple[type, type]:
    """Streams that give back recorded chunks, then end the way the recording did: normally, with
    the recorded exception, or — past the point where the recorded caller stopped reading — with a
    :class:`~forkpoint.replay.Divergence` (``past_end`` builds it)."""

    class ReplaySync(mod.SyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(
            self,
            chunks: list[bytes],
            error: BaseException | None,
            past_end: Callable[[], BaseException] | None = None,
        ) -> None:
            self._chunks, self._error, self._past_end = chunks, error, past_end

        def __iter__(self) -> Iterator[bytes]:
            yield from self._chunks
            if self._error is not None:
                raise self._error
            if self._past_end is not None:
                raise self._past_end()

    class ReplayAsync(mod.AsyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(
            self,
            chunks: list[bytes],
            error: BaseException | None,
            past_end: Callable[[], BaseException] | None = None,
        ) -> None:
            self._chunks, self._error, self._past_end = chunks, error, past_end

        async def __aiter__(self) -> AsyncIterator[bytes]:
            for c in self._chunks:
                yield c
            if self._error is not None:
                raise self._error
            if self._past_end is not None:
                raise self._past_end()

    return ReplaySync, ReplayAsync


# --------------------------------------------------------------------------- replay


def _rebuild_error(mod: ModuleType, error: dict[str, Any], request: Any) -> BaseException:
    """The recorded exception, raised again as the same class: a transport error of the HTTP
    library with its request, or any other exception class that is a builtin or whose module is
    already imported (nothing is imported to find it: reading a session runs no code). Otherwise
    :class:`~forkpoint.replay.RecordedError`, which names the recorded class."""
    name, module = str(error.get("type")), str(error.get("module"))
    message = str(error.get("message", ""))
    cls = getattr(mod, name, None)
    if isinstance(cls, type) and issubclass(cls, mod.TransportError):
        return cls(message, request=request)
    found = getattr(sys.modules.get(module), name, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        try:
            return found(message) if message else found()
        except Exception:  # a constructor that wants other arguments
            pass
    from .replay import RecordedError

    return RecordedError(error)


#: Exception types that say the caller cancelled the call (asyncio, anyio on asyncio, trio).
_CANCELLED = frozenset({("asyncio.exceptions", "CancelledError"), ("trio", "Cancelled")})


def _cancelled_by_caller(event: dict[str, Any]) -> bool:
    error = event.get("error") or {}
    return event.get("response") is None and (error.get("module"), error.get("type")) in _CANCELLED


async def _await_cancellation(rt: Any, event: dict[str, Any], position: int) -> None:
    """Live, the caller gave up on this call before any answer came (its own timeout:
    ``asyncio.wait_for``, ``anyio.fail_after``…). The replay waits as long as the live call lasted
    (and a second more), so the caller's own timer fires again and it sees the same timeout; if
    nothing cancels the call by then, the run went another way: a Divergence."""
    waited = float(event.get("duration_ms") or 0) / 1000 + 1.0
    try:
        import anyio

        await anyio.sleep(waited)
    except ImportError:  # pragma: no cover - httpx and httpx2 both depend on anyio
        import asyncio

        await asyncio.sleep(waited)
    raise _divergence(
        rt,
        event,
        position,
        f"the recorded caller cancelled this call after {float(event.get('duration_ms') or 0):.0f} ms, "
        f"before any answer came; in this run nothing cancelled it within {waited:.1f} s",
    )


def _divergence(rt: Any, event: dict[str, Any], position: int, reason: str) -> BaseException:
    """A Divergence about a recorded call that was served, noted as the replay's divergence (so
    ``forkpoint replay`` exits with its divergence code) when it is the first."""
    from .replay import Divergence

    req = event.get("request") or {}
    endpoint = f"{str(req.get('method', '')).upper()} {urlsplit(str(req.get('url', ''))).path}"
    report: dict[str, Any] = {
        "kind": "model_call",
        "endpoint": endpoint,
        "position": position,
        "reason": reason,
        "key": event.get("key"),
        "actual": None,
        "expected": {"seq": event.get("seq"), "label": endpoint},
        "nearest": None,
        "diff": [],
    }
    lock = getattr(rt, "_lock", None)
    if lock is not None and getattr(rt, "divergence", "absent") is None:
        with lock:
            if rt.divergence is None:
                rt.divergence = report
    return Divergence(report)


#: The last event of an SSE stream in the providers' protocols: a caller that closes the response
#: right after it (the openai SDK does) has read everything the server had to say.
_FINAL_EVENTS = (
    b"data: [DONE]",
    b"event: message_stop",
    b"event: response.completed",
    b"event: response.incomplete",
    b"event: response.failed",
)


def _protocol_ended(chunks: list[bytes]) -> bool:
    """True when a recorded stream ends with its protocol's final event (then reading on ends the
    stream, as the server did, whatever the client library's habit of draining it)."""
    tail = b"".join(chunks[-2:])[-4096:]
    return any(marker in tail for marker in _FINAL_EVENTS)


def _past_end(rt: Any, event: dict[str, Any], position: int, n_chunks: int) -> Callable[[], BaseException]:
    """What reading past the recorded end of an abandoned response raises: a Divergence."""
    ended = (event.get("response") or {}).get("ended")
    reason = (
        f"the recorded caller stopped reading this response after {n_chunks} chunk(s) (ended: {ended}); "
        "this run reads further, and the rest of it was never received"
    )
    return lambda: _divergence(rt, event, position, reason)


def _build_response(
    mod: ModuleType, request: Any, event: dict[str, Any], stream_cls: type, rt: Any = None, position: int = 0
) -> Any:
    resp = event.get("response")
    if resp is None:
        raise _rebuild_error(mod, event.get("error") or {}, request)
    if resp.get("body_kind") == "stream":
        chunks = [c if isinstance(c, bytes) else c.encode("utf-8") for _, c in resp.get("chunks", [])]
    else:
        data = body_bytes(resp.get("body_kind", "empty"), resp.get("body"))
        chunks = [data] if data else []
    error = _rebuild_error(mod, event["error"], request) if event.get("error") else None
    past_end = None
    if error is None and resp.get("ended") in ("client", "unfinished") and not _protocol_ended(chunks):
        past_end = _past_end(rt, event, position, len(chunks))
    response = mod.Response(
        resp["status"],
        headers=[(k, v) for k, v in resp.get("headers", [])],
        stream=stream_cls(chunks, error, past_end),
        request=request,
        extensions={
            "http_version": str(resp.get("http_version", "HTTP/1.1")).encode(),
            "reason_phrase": str(resp.get("reason", "")).encode(),
        },
    )
    response.elapsed = datetime.timedelta(milliseconds=float(event.get("duration_ms") or 0))
    return response


# --------------------------------------------------------------------------- SDK retry waits

#: True while the last model call made in this context was answered from the recording.
_served: contextvars.ContextVar[bool] = contextvars.ContextVar("forkpoint_served", default=False)
_retry_patched: set[str] = set()
_retry_seen_modules = 0


def _patch_sdk_retry_waits() -> None:
    """Make the retry wait of Stainless-generated SDKs (openai, anthropic, and others built the same
    way: ``<pkg>._base_client.BaseClient._calculate_retry_timeout``) zero after a failure that was
    served from the recording. The original still runs first, so the SDK reads the same headers
    and draws the same jitter from ``random`` as it did live. Cheap when nothing new was imported."""
    global _retry_seen_modules
    if len(sys.modules) == _retry_seen_modules:
        return
    with _install_lock:
        _retry_seen_modules = len(sys.modules)
        for name, module in list(sys.modules.items()):
            if not name.endswith("._base_client") or name in _retry_patched:
                continue
            _retry_patched.add(name)
            base = getattr(module, "BaseClient", None)
            orig = getattr(base, "_calculate_retry_timeout", None)
            if base is not None and callable(orig) and not getattr(orig, "__forkpoint__", False):
                base._calculate_retry_timeout = _no_wait_when_served(orig)


def _no_wait_when_served(orig: Callable[..., Any]) -> Callable[..., Any]:
    def _calculate_retry_timeout(self: Any, *args: Any, **kwargs: Any) -> Any:
        timeout = orig(self, *args, **kwargs)
        rt = runtime.active()
        return 0.0 if _served.get() and rt is not None and rt.mode == "replay" else timeout

    _calculate_retry_timeout.__forkpoint__ = True  # type: ignore[attr-defined]
    _calculate_retry_timeout.__wrapped__ = orig  # type: ignore[attr-defined]
    return _calculate_retry_timeout


# --------------------------------------------------------------------------- patching


def _patch(mod: ModuleType) -> None:
    tee_sync, tee_async = _stream_classes(mod)
    replay_sync, replay_async = _replay_classes(mod)
    decoders = _library_decoders(mod)
    orig_sync = mod.Client._send_single_request
    orig_async = mod.AsyncClient._send_single_request

    def take(rt: Any, record: dict[str, Any]) -> tuple[dict[str, Any], int] | None:
        """The recorded call answering ``record`` and its position in this run, or None: go live."""
        served = rt.take_model_call(record)
        if served is None:
            return None
        _served.set(True)
        _patch_sdk_retry_waits()
        return served, int(getattr(rt, "positions", {}).get("model_call", 0))

    def _send_single_request(self: Any, request: Any) -> Any:
        rt = runtime.active()
        if rt is None:
            return orig_sync(self, request)
        content = request.read()
        record = request_record(request, content)
        if rt.mode == "replay":
            taken = take(rt, record)
            if taken is not None:
                event, position = taken
                return _build_response(mod, request, event, replay_sync, rt, position)
        _served.set(False)
        rt.before_model_call(record)
        call = _Call(rt, record, decoders)
        try:
            response = orig_sync(self, request)
        except BaseException as exc:  # also KeyboardInterrupt: the call got no response either way
            call.error = exc
            call.finish()
            raise
        call.response = response
        response.stream = tee_sync(response.stream, call)
        return response

    async def _send_single_request_async(self: Any, request: Any) -> Any:
        rt = runtime.active()
        if rt is None:
            return await orig_async(self, request)
        content = await request.aread()
        record = request_record(request, content)
        if rt.mode == "replay":
            taken = take(rt, record)
            if taken is not None:
                event, position = taken
                if _cancelled_by_caller(event):
                    await _await_cancellation(rt, event, position)
                return _build_response(mod, request, event, replay_async, rt, position)
        _served.set(False)
        rt.before_model_call(record)
        call = _Call(rt, record, decoders)
        try:
            response = await orig_async(self, request)
        except BaseException as exc:  # also a cancellation by the caller (its own timeout)
            call.error = exc
            call.finish()
            raise
        call.response = response
        response.stream = tee_async(response.stream, call)
        return response

    _send_single_request.__wrapped__ = orig_sync  # type: ignore[attr-defined]
    _send_single_request_async.__wrapped__ = orig_async  # type: ignore[attr-defined]
    mod.Client._send_single_request = _send_single_request
    mod.AsyncClient._send_single_request = _send_single_request_async


def uninstall() -> None:
    """Restore the original client methods (for tests of the capture layer itself)."""
    with _install_lock:
        for name, mod in list(_installed.items()):
            for cls in (mod.Client, mod.AsyncClient):
                wrapped = getattr(cls._send_single_request, "__wrapped__", None)
                if wrapped is not None:
                    cls._send_single_request = wrapped
            del _installed[name]
