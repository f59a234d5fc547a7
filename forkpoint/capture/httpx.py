"""The httpx and httpx2 adapter: capture at the transport seam.

The openai and anthropic SDKs send every request through an httpx2 client (or an httpx one, for a
client passed in by the user). A client asks ``_transport_for_url(url)`` for the transport of each
request; forkpoint wraps what it returns in a transport of its own, once per process, on
``Client`` and ``AsyncClient`` of both libraries. That wrapper:

* **record**: sends the request through the real transport and tees the response body into an
  :class:`~forkpoint.capture.exchange.Exchange`;
* **replay**: answers from the session with a response built from the recorded chunks, and never
  calls the real transport (so no connection pool, proxy or socket is touched).

Requests made where :data:`forkpoint.runtime.http_recorded_above` is set (an MCP transport, whose
requests the MCP integration records) pass straight through; and it is set while a recorded request
goes through the real transport, so that a client beneath it (aiohttp, under litellm's async
transport) does not record the request again.

Everything after the transport — redirects, auth, cookies, default encoding, ``elapsed``, event
hooks, logging — is httpx's own code on both paths, so a replayed response goes through exactly
what a live one does. ``Client._transport_for_url`` is the only private name this adapter touches;
:data:`PATCHED` lists it with the signature it expects, checked at install (a mismatch is said
and the library left unpatched) and by a test against the installed versions.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Iterator
from types import ModuleType
from typing import Any

from .. import runtime
from . import seam
from .decoding import DecoderFactory, codings, own_decoder
from .exchange import (
    Exchange,
    areplayed,
    atee,
    await_cancellation,
    cancelled_by_caller,
    encoded_again,
    live,
    past_end,
    rebuilt_error,
    recorded_chunks,
    replayed,
    request_record,
    said_length,
    serve,
    tee,
)

#: The libraries this adapter captures (whichever are installed).
LIBRARIES = ("httpx", "httpx2")
#: (class, method, the parameter names forkpoint relies on) patched in each library.
PATCHED = (
    ("Client", "_transport_for_url", ("self", "url")),
    ("AsyncClient", "_transport_for_url", ("self", "url")),
)

_installed: dict[str, ModuleType] = {}


def install() -> list[str]:
    """Wrap the transports of httpx and httpx2 clients (now, or when the program imports them:
    :func:`.seam.install_library`). Idempotent.
    Returns the libraries patched now."""
    return [
        done
        for name in LIBRARIES
        for done in seam.install_library(name, _installed, signature_problem, _patch)
    ]


def installed() -> list[str]:
    """The libraries patched in this process."""
    return sorted(_installed)


def signature_problem(mod: ModuleType) -> str | None:
    """What does not match :data:`PATCHED` in the installed ``mod`` (None when all does)."""
    return seam.signature_problem(mod, PATCHED)


def _library_decoders(mod: ModuleType) -> tuple[DecoderFactory, DecoderFactory]:
    """(a factory of the library's own content decoders, so that what forkpoint stores is byte for
    byte what the library gave the caller; :func:`~.decoding.own_decoder` for the same codings, which
    stops at :data:`~.decoding.DECODED_MAX`), each ``None`` for a coding the library does not decode."""
    try:
        supported = importlib.import_module(f"{mod.__name__}._decoders").SUPPORTED_DECODERS
    except (ImportError, AttributeError):
        return own_decoder, own_decoder

    def make(coding: str) -> Any:
        cls = supported.get(coding)
        return cls() if cls is not None else None

    def capped(coding: str) -> Any:
        return own_decoder(coding) if coding in supported else None

    return make, capped


def _decoders_for(response: Any, library: DecoderFactory, capped: DecoderFactory) -> DecoderFactory:
    """The decoders of ``response``'s body, asked for once it is read: the library's own when it
    decoded the body for the program (``iter_bytes``, ``read``: it made its ``_decoder`` then), which
    inflates it whatever forkpoint does; else (``iter_raw``) the ``capped`` ones: a compression bomb
    the program never opens must not be inflated by its recording."""
    return lambda coding: (library if hasattr(response, "_decoder") else capped)(coding)


def _patch(mod: ModuleType) -> None:
    decoders, capped = _library_decoders(mod)

    class TeeStream(mod.SyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any, call: Exchange) -> None:
            self._inner, self._call = inner, call

        def __iter__(self) -> Iterator[bytes]:
            return tee(self._inner, self._call)

        def close(self) -> None:
            try:
                self._inner.close()
            finally:
                self._call.finish()

    class AsyncTeeStream(mod.AsyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, inner: Any, call: Exchange) -> None:
            self._inner, self._call = inner, call

        def __aiter__(self) -> AsyncIterator[bytes]:
            return atee(self._inner, self._call)

        async def aclose(self) -> None:
            try:
                await self._inner.aclose()
            finally:
                self._call.finish()

    class ReplayStream(mod.SyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, chunks: list[bytes], error: BaseException | None, past: Any) -> None:
            self._args = (chunks, error, past)

        def __iter__(self) -> Iterator[bytes]:
            return replayed(*self._args)

    class AsyncReplayStream(mod.AsyncByteStream):  # type: ignore[name-defined,misc]
        def __init__(self, chunks: list[bytes], error: BaseException | None, past: Any) -> None:
            self._args = (chunks, error, past)

        def __aiter__(self) -> AsyncIterator[bytes]:
            return areplayed(*self._args)

    def record(request: Any) -> Any:
        return request_record(
            request.method, str(request.url), list(request.headers.multi_items()), request.content
        )

    def library_error(request: Any) -> Any:
        def build(name: str, message: str, os_error: OSError | None) -> BaseException | None:
            cls = getattr(mod, name, None)
            if isinstance(cls, type) and issubclass(cls, mod.TransportError):
                return cls(message, request=request)  # type: ignore[no-any-return]
            return None

        return build

    def recorded(rt: runtime.Runtime, request: Any, event: Any, position: int, stream_cls: type) -> Any:
        """The library's response for a recorded call (or the recorded failure, raised)."""
        resp = event.get("response")
        if resp is None:
            raise rebuilt_error(event.get("error") or {}, library_error(request))
        chunks = recorded_chunks(event)
        error = rebuilt_error(event["error"], library_error(request)) if event.get("error") else None
        headers = [(k, v) for k, v in resp.get("headers", [])]
        past = past_end(rt, event, position, chunks)  # (read from the chunks as stored)
        # (httpx decodes it again, as it did live: iter_raw() sees the encoded bytes)
        chunks, lines = encoded_again(resp, chunks, error)
        headers.extend(("content-encoding", line) for line in lines)
        length = said_length(resp, request.method, sum(map(len, chunks)))
        if length is not None:
            headers.append(("content-length", str(length)))
        return mod.Response(
            resp["status"],
            headers=headers,
            stream=stream_cls(chunks, error, past),
            extensions={
                "http_version": str(resp.get("http_version", "HTTP/1.1")).encode(),
                "reason_phrase": str(resp.get("reason", "")).encode(),
            },
        )

    def started(rt: runtime.Runtime, response: Any, call: Exchange, tee_cls: type) -> Any:
        """A live response: its head recorded, its body teed (or recorded whole when the transport
        handed over a response it had read already, as ``MockTransport`` handlers do)."""
        call.respond(
            response.status_code,
            response.reason_phrase,
            response.http_version,
            list(response.headers.multi_items()),
        )
        call.decoders = _decoders_for(response, decoders, capped)
        try:
            content = response.content  # only there when the body was read already
        except mod.ResponseNotRead:
            response.stream = tee_cls(response.stream, call)
            return response
        # Read, it was decoded: the bytes as received are those its stream holds (content=…), as
        # any body is recorded; a spent stream left the decoded content only, under the codings the
        # library does not decode (stored decoded, as any body: a replay encodes it again).
        if isinstance(response.stream, mod.ByteStream):
            call.whole(b"".join(response.stream))
        else:
            said = codings(response.headers.get_list("content-encoding"))
            call.left = [c for c in said if decoders(c) is None]
            call.whole(content)
        return response

    class Transport(mod.BaseTransport):  # type: ignore[name-defined,misc]
        """The transport forkpoint puts in front of a client's own (see the module docstring)."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def handle_request(self, request: Any) -> Any:
            rt = runtime.active()
            if rt is None:
                return self.inner.handle_request(request)
            request.read()
            rec = record(request)
            taken = serve(rt, rec)
            if taken is not None:
                return recorded(rt, request, taken[0], taken[1], ReplayStream)
            call = live(rt, rec, decoders)
            token = runtime.http_recorded_above.set(True)  # (see the async transport)
            try:
                response = self.inner.handle_request(request)
            except BaseException as exc:  # also KeyboardInterrupt: the call got no response either way
                call.error = exc
                call.finish()
                raise
            finally:
                runtime.http_recorded_above.reset(token)
            return started(rt, response, call, TeeStream)

    class AsyncTransport(mod.AsyncBaseTransport):  # type: ignore[name-defined,misc]
        """:class:`Transport` for async clients."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        async def handle_async_request(self, request: Any) -> Any:
            rt = runtime.active()
            if rt is None:
                return await self.inner.handle_async_request(request)
            await request.aread()
            rec = record(request)
            taken = serve(rt, rec)
            if taken is not None:
                event, position = taken
                if cancelled_by_caller(event):
                    await await_cancellation(rt, event, position)
                return recorded(rt, request, event, position, AsyncReplayStream)
            call = live(rt, rec, decoders)
            # Recorded here: a client the transport sends through (aiohttp, under litellm's async
            # transport) would record it again, and a replay served here never asks for that copy.
            token = runtime.http_recorded_above.set(True)
            try:
                response = await self.inner.handle_async_request(request)
            except BaseException as exc:  # also a cancellation by the caller (its own timeout)
                call.error = exc
                call.finish()
                raise
            finally:
                runtime.http_recorded_above.reset(token)
            return started(rt, response, call, AsyncTeeStream)

    _wrap_transports(mod.Client, Transport)
    _wrap_transports(mod.AsyncClient, AsyncTransport)


def _wrap_transports(cls: Any, wrapper: type) -> None:
    """``cls._transport_for_url`` returning the client's transport behind ``wrapper`` while a
    runtime is active."""

    def make(original: Any) -> Any:
        def _transport_for_url(self: Any, url: Any) -> Any:
            inner = original(self, url)
            if runtime.active_for_http() is None:
                return inner
            return wrapper(inner)

        return _transport_for_url

    seam.wrap(cls, "_transport_for_url", make)


def uninstall() -> None:
    """Restore the original client methods (for tests of the capture layer itself)."""
    seam.stop_waiting(LIBRARIES)
    for name, mod in list(_installed.items()):
        for cls in (mod.Client, mod.AsyncClient):
            seam.unwrap(cls, "_transport_for_url")
        del _installed[name]
