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
Responses are stored decoded (``Content-Encoding`` removed, so headers and body stay consistent);
when a body cannot be decoded it is stored as received and the header is kept.
"""

from __future__ import annotations

import datetime
import importlib
import threading
import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

import orjson

from . import runtime
from .log import new_span_id, now_iso
from .redact import scrub_bytes, scrub_chunks, scrub_headers, scrub_json, scrub_text, scrub_url

if TYPE_CHECKING:
    from .record import Recorder

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


def parse_body(data: bytes, content_type: str) -> tuple[str, Any]:
    """Classify and parse an HTTP body: ``("empty", None)``, ``("json", value)``, ``("text", str)``
    or ``("bytes", bytes)``. JSON is recognised by content type or by a leading ``{``/``[``."""
    if not data:
        return "empty", None
    ctype = content_type.lower()
    head = data.lstrip()[:1]
    if "json" in ctype or head in (b"{", b"["):
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


def _scrub_body(kind: str, body: Any) -> Any:
    if kind == "json":
        return scrub_json(body)
    if kind == "text":
        return scrub_text(body)
    if kind == "bytes":
        return scrub_bytes(body)
    return body


def request_record(request: Any, content: bytes) -> dict[str, Any]:
    """The stored form of an outgoing request (scrubbed): method, url, headers, body_kind, body."""
    kind, body = parse_body(content, request.headers.get("content-type", ""))
    return {
        "method": request.method,
        "url": scrub_url(str(request.url)),
        "headers": scrub_headers(request.headers.multi_items()),
        "body_kind": kind,
        "body": _scrub_body(kind, body),
    }


def _error_record(exc: BaseException) -> dict[str, Any]:
    cls = type(exc)
    return {"type": cls.__name__, "module": cls.__module__, "message": scrub_text(str(exc))}


def _decoder(encoding: str) -> Callable[[bytes], bytes] | None:
    """An incremental decoder for one ``Content-Encoding``, or None if unknown/unavailable."""
    enc = encoding.strip().lower()
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
        return zstandard.ZstdDecompressor().decompressobj().decompress
    return None


# --------------------------------------------------------------------------- recording


class _Call:
    """One model call being recorded: filled in while the response streams, written when it ends."""

    def __init__(self, rt: Recorder, request: dict[str, Any]) -> None:
        self.rt = rt
        self.request = request
        self.ts = now_iso()
        self.t0 = time.perf_counter()
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
        encoding = resp.headers.get("content-encoding", "")
        times = [t for t, _ in self.raw]
        chunks = [c for _, c in self.raw]
        if encoding:
            decode = _decoder(encoding)
            if decode is not None:
                try:
                    chunks = [decode(c) for c in chunks]
                    headers = [(k, v) for k, v in headers if k.lower() != "content-encoding"]
                except Exception:  # undecodable: keep the body as received, header and all
                    chunks = [c for _, c in self.raw]
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
            kind, body = parse_body(b"".join(chunks), ctype)
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
    class ReplaySync(mod.SyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, chunks: list[bytes], error: BaseException | None) -> None:
            self._chunks, self._error = chunks, error

        def __iter__(self) -> Iterator[bytes]:
            yield from self._chunks
            if self._error is not None:
                raise self._error

    class ReplayAsync(mod.AsyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, chunks: list[bytes], error: BaseException | None) -> None:
            self._chunks, self._error = chunks, error

        async def __aiter__(self) -> AsyncIterator[bytes]:
            for c in self._chunks:
                yield c
            if self._error is not None:
                raise self._error

    return ReplaySync, ReplayAsync


# --------------------------------------------------------------------------- replay


def _rebuild_error(mod: ModuleType, error: dict[str, Any], request: Any) -> BaseException:
    """The recorded transport exception, raised again as the same class of the same library."""
    cls = getattr(mod, str(error.get("type")), None)
    message = str(error.get("message", ""))
    if isinstance(cls, type) and issubclass(cls, mod.TransportError):
        return cls(message, request=request)
    from .replay import RecordedError

    return RecordedError(error)


def _build_response(mod: ModuleType, request: Any, event: dict[str, Any], stream_cls: type) -> Any:
    resp = event.get("response")
    if resp is None:
        raise _rebuild_error(mod, event.get("error") or {}, request)
    if resp.get("body_kind") == "stream":
        chunks = [c if isinstance(c, bytes) else c.encode("utf-8") for _, c in resp.get("chunks", [])]
    else:
        data = body_bytes(resp.get("body_kind", "empty"), resp.get("body"))
        chunks = [data] if data else []
    error = _rebuild_error(mod, event["error"], request) if event.get("error") else None
    response = mod.Response(
        resp["status"],
        headers=[(k, v) for k, v in resp.get("headers", [])],
        stream=stream_cls(chunks, error),
        request=request,
        extensions={
            "http_version": str(resp.get("http_version", "HTTP/1.1")).encode(),
            "reason_phrase": str(resp.get("reason", "")).encode(),
        },
    )
    response.elapsed = datetime.timedelta(milliseconds=float(event.get("duration_ms") or 0))
    return response


# --------------------------------------------------------------------------- patching


def _patch(mod: ModuleType) -> None:
    tee_sync, tee_async = _stream_classes(mod)
    replay_sync, replay_async = _replay_classes(mod)
    orig_sync = mod.Client._send_single_request
    orig_async = mod.AsyncClient._send_single_request

    def _send_single_request(self: Any, request: Any) -> Any:
        rt = runtime.active()
        if rt is None:
            return orig_sync(self, request)
        content = request.read()
        record = request_record(request, content)
        if rt.mode == "replay":
            served = rt.take_model_call(record)
            if served is not None:
                return _build_response(mod, request, served, replay_sync)
        rt.before_model_call(record)
        call = _Call(rt, record)
        try:
            response = orig_sync(self, request)
        except Exception as exc:
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
            served = rt.take_model_call(record)
            if served is not None:
                return _build_response(mod, request, served, replay_async)
        rt.before_model_call(record)
        call = _Call(rt, record)
        try:
            response = await orig_async(self, request)
        except Exception as exc:
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
