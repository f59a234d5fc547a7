"""The aiohttp adapter: capture as the innermost client middleware of every request.

aiohttp's ``ClientSession._request`` handles redirects, cookies, auth and retries of a dropped
keep-alive connection, and hands each single request to a handler chain — the session's (or the
request's) middlewares, then the function that connects and sends. While a runtime is active this
adapter adds one middleware of its own at the end of that chain (``_request`` takes
``middlewares``), so it sees every request exactly as it goes to the connection, once per attempt:

* **record**: the request is sent for real; the response's body (``resp.content``) is replaced by a
  ``StreamReader`` that pulls from the real one as the caller reads and tees each piece into an
  :class:`~forkpoint.capture.exchange.Exchange`. aiohttp hands over bodies already decompressed
  (``auto_decompress``, the default): they are stored as the caller got them.
* **replay**: the connection is never made; the response is a ``ClientResponse`` whose status,
  headers and ``content`` come from the recording, so everything the caller does with it (``read``,
  ``json``, iteration, ``raise_for_status``, redirects) is aiohttp's own code.

The private names used (``ClientSession._request``'s ``middlewares``, ``ClientResponse``'s
constructor and the fields ``start()`` sets, ``StreamReader._wait``) are checked at install.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from types import ModuleType, SimpleNamespace
from typing import Any

from .. import runtime
from . import seam
from .decoding import codings, header_values, own_decoder
from .exchange import (
    Exchange,
    LibraryError,
    areplayed,
    await_cancellation,
    built,
    cancelled_by_caller,
    encoded_again,
    encoding_said,
    live,
    past_end,
    rebuilt_error,
    recorded_chunks,
    request_record,
    said_length,
    serve,
)

#: The libraries this adapter captures.
LIBRARIES = ("aiohttp",)
#: The constructor of a response, as the replay calls it.
RESPONSE_INIT = (
    "self",
    "method",
    "url",
    "writer",
    "continue100",
    "timer",
    "request_info",
    "traces",
    "loop",
    "session",
    "stream_writer",
)

_installed: dict[str, ModuleType] = {}


def install() -> list[str]:
    """Add forkpoint's middleware to aiohttp client requests (now, or when the
    program imports aiohttp). Idempotent."""
    return seam.install_library("aiohttp", _installed, signature_problem, _patch)


def installed() -> list[str]:
    """The libraries patched in this process."""
    return sorted(_installed)


def uninstall() -> None:
    """Restore the original method (for tests of the capture layer itself)."""
    seam.stop_waiting(("aiohttp",))
    for name, mod in list(_installed.items()):
        seam.unwrap(mod.ClientSession, "_request")
        del _installed[name]


def signature_problem(mod: ModuleType) -> str | None:
    """What the adapter relies on that the installed aiohttp lacks (None when it has all)."""
    request = getattr(getattr(mod, "ClientSession", None), "_request", None)
    request = getattr(request, "__wrapped__", request)
    if request is None or "middlewares" not in inspect.signature(request).parameters:
        return "ClientSession._request takes no middlewares (aiohttp 3.12 or later is needed)"
    streams = importlib.import_module("aiohttp.streams")
    if not hasattr(streams.StreamReader, "_wait"):
        return "StreamReader._wait is missing"
    return seam.signature_problem(mod, (("ClientResponse", "__init__", RESPONSE_INIT),))


def _patch(mod: ModuleType) -> None:
    streams = importlib.import_module("aiohttp.streams")
    multidict = importlib.import_module("multidict")

    class Reader(streams.StreamReader):  # type: ignore[misc,name-defined]
        """A response body fed on demand by ``source()`` (bytes, or ``b""`` at the end)."""

        __slots__ = ("_source",)

        def __init__(self, source: Callable[[], Awaitable[bytes]], protocol: Any, loop: Any) -> None:
            super().__init__(protocol, 2**16, loop=loop)
            self._source = source

        async def _wait(self, func_name: str) -> None:
            data = await self._source()
            if data:
                self.feed_data(data)
            else:
                self.feed_eof()

    class Quiet:
        """The protocol of a replayed body: there is no connection to pause or resume."""

        connected = True

        def pause_reading(self) -> None:
            pass

        def resume_reading(self, resume_parser: bool = True) -> None:
            pass

    def library_error(req: Any) -> LibraryError:
        """Builds aiohttp's exceptions by name for ``req``: a connector error with its connection key
        and its recorded ``OSError`` (errno and all; older sessions: the message), a response error
        with its request info."""

        def build(name: str, message: str, os_error: OSError | None) -> BaseException | None:
            cls = getattr(mod, name, None)
            if not (isinstance(cls, type) and issubclass(cls, mod.ClientError)):
                return None
            if issubclass(cls, mod.ClientConnectorError):
                return cls(req.connection_key, os_error or OSError(message))  # type: ignore[no-any-return]
            if issubclass(cls, mod.ClientResponseError):
                return cls(req.request_info, (), message=message)  # type: ignore[no-any-return]
            return built(cls, message)

        return build

    def feeder(body: AsyncIterator[bytes]) -> Callable[[], Awaitable[bytes]]:
        async def next_piece() -> bytes:
            async for piece in body:
                if piece:  # (b"" is the end to a Reader: an empty chunk is no piece to aiohttp)
                    return piece
            return b""

        return next_piece

    def recorded(req: Any, rt: runtime.Runtime, event: Any, position: int, sent: int) -> Any:
        resp = event.get("response")
        if resp is None:
            raise rebuilt_error(event.get("error") or {}, library_error(req))
        chunks = recorded_chunks(event)
        error = rebuilt_error(event["error"], library_error(req)) if event.get("error") else None
        pairs = [(str(k), str(v)) for k, v in resp.get("headers", [])]
        past = past_end(rt, event, position, chunks)  # (read from the chunks as stored)
        # The body is served past aiohttp's decompression, so it goes as aiohttp handed it over:
        # decoded for a session that decompresses (its header still said, as live), else encoded,
        # as is a body under a coding aiohttp left alone (decoded when recorded, to be scrubbed).
        decompresses = getattr(req._session, "_auto_decompress", True)
        if decompresses and resp.get("handed_under") is not None:  # (its outer coding taken off live)
            chunks, _ = encoded_again(resp, chunks, error, under=list(resp["handed_under"]))
            lines = encoding_said(resp)
        elif decompresses and not resp.get("decoded_to_scrub"):
            lines = encoding_said(resp)
        else:
            chunks, lines = encoded_again(resp, chunks, error)
        pairs += [("Content-Encoding", line) for line in lines]
        body = areplayed(chunks, error, past)
        response = req.response_class(
            req.method,
            req.original_url,
            writer=None,
            continue100=None,
            timer=req._timer,
            request_info=req.request_info,
            traces=req._traces,
            loop=req.loop,
            session=req._session,
            stream_writer=SimpleNamespace(output_size=sent),
        )
        length = said_length(resp, req.method, sum(map(len, chunks)))
        if length is not None:
            pairs.append(("Content-Length", str(length)))
        # What ClientResponse.start() sets from a parsed response head.
        response._closed = False
        response.version = mod.HttpVersion10 if resp.get("http_version") == "HTTP/1.0" else mod.HttpVersion11
        response.status = resp["status"]
        response.reason = resp.get("reason") or ""
        response._headers = multidict.CIMultiDictProxy(multidict.CIMultiDict(pairs))
        response._raw_headers = tuple((k.encode(), v.encode()) for k, v in pairs)
        response.content = Reader(feeder(body), Quiet(), req.loop)
        response.content.on_eof(response._response_eof)
        return response

    def teed(response: Any, call: Exchange, loop: Any) -> Any:
        version = response.version
        call.respond(
            response.status,
            response.reason or "",
            f"HTTP/{version.major}.{version.minor}" if version else "HTTP/1.1",
            [(str(k), str(v)) for k, v in response.headers.items()],
        )
        inner = response.content

        async def next_piece() -> bytes:
            try:
                data: bytes = await inner.readany()
            except BaseException as exc:
                call.error = exc
                call.finish()
                raise
            if data:
                call.chunk(data)
            else:
                call.whole(b"")
            return data

        protocol = getattr(inner, "_protocol", None)
        response.content = Reader(next_piece, protocol if protocol is not None else Quiet(), loop)
        response.content.on_eof(response._response_eof)
        release = response.release

        def _release() -> Any:
            try:
                return release()
            finally:
                call.finish()

        response.release = _release
        return response

    async def middleware(req: Any, handler: Callable[[Any], Awaitable[Any]]) -> Any:
        rt = runtime.active_for_http()
        if rt is None:
            return await handler(req)
        payload = req.body
        content = await payload.as_bytes() if hasattr(payload, "as_bytes") else bytes(payload or b"")
        rec = request_record(
            req.method, str(req.url), [(str(k), str(v)) for k, v in req.headers.items()], content
        )
        taken = serve(rt, rec)
        if taken is not None:
            event, position = taken
            if cancelled_by_caller(event):
                await await_cancellation(rt, event, position)
            return recorded(req, rt, event, position, len(content))
        session = getattr(req, "_session", None)
        decompressed = getattr(session, "_auto_decompress", True)
        call = live(rt, rec, own_decoder if not decompressed else _left_encoded)
        try:
            response = await handler(req)
        except BaseException as exc:  # no response: connect failure, timeout, cancellation
            call.error = exc
            call.finish()
            raise
        if decompressed and _decompresses(_decompressed_by(mod, response.headers)):
            applied = codings(header_values(list(response.headers.items()), "content-encoding"))
            if len(applied) > 1:  # (two header lines: the outer coding alone was taken off)
                call.left = applied[:-1]
            else:  # Bodies come decompressed from aiohttp: "decoding" them again is the identity.
                call.decoders = lambda coding: _Identity()
        return teed(response, call, req.loop)

    def make(original: Any) -> Any:
        def _request(self: Any, *args: Any, middlewares: Any = None, **kwargs: Any) -> Any:
            if runtime.active() is not None:
                chain = self._middlewares if middlewares is None else middlewares
                middlewares = (*chain, middleware)
            return original(self, *args, middlewares=middlewares, **kwargs)

        return _request

    seam.wrap(mod.ClientSession, "_request", make)


def _decompresses(content_encoding: str) -> bool:
    """Whether aiohttp hands a body under ``content_encoding`` over decompressed (when its session
    decompresses): one of these codings alone, as its parser reads the header; x-gzip, or two
    codings (``gzip, gzip``), it hands over as they came."""
    return content_encoding.isascii() and content_encoding.lower() in ("gzip", "deflate", "br", "zstd")


def _decompressed_by(mod: ModuleType, headers: Any) -> str:
    """The ``Content-Encoding`` line aiohttp's parser decompresses a body by: of several, its C
    parser takes the last (the outer coding), its Python one the first."""
    lines = headers.getall("Content-Encoding", [])
    in_c = importlib.import_module(f"{mod.__name__}.http_parser").HttpResponseParser.__module__.endswith(
        "._http_parser"
    )
    return str(lines[-1] if in_c else lines[0]) if lines else ""


def _left_encoded(coding: str) -> None:
    """No decoder: aiohttp handed the body over as it came (forkpoint decodes it to scrub it)."""
    return None


class _Identity:
    """A decoder that leaves a body as it is (aiohttp decoded it already)."""

    def decode(self, chunk: bytes) -> bytes:
        return chunk

    def flush(self) -> bytes:
        return b""
