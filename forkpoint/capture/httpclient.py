"""The standard library adapter: capture at ``http.client.HTTPConnection`` (so ``urllib.request``).

``urllib.request`` (and code that uses ``http.client`` directly) sends a request with
``HTTPConnection.request(method, url, body, headers)`` and reads the answer with
``getresponse()``. This adapter wraps both, once per process on the base class (HTTPS included):

* **record**: the request is sent for real; the ``HTTPResponse``'s reads (``read``, ``read1``,
  ``readinto``, ``readline``, so also iteration by line) are teed into an
  :class:`~forkpoint.capture.exchange.Exchange` as the caller makes them.
* **replay**: ``request`` sends nothing and ``getresponse`` returns a real ``http.client.HTTPResponse``
  that parses the recorded status line, headers and body from memory (the recorded chunks, then
  the recorded end), so the caller's own reading is the standard library's code; no socket is
  opened.

urllib3's connections subclass ``HTTPConnection`` but send through their own ``request`` (captured
by :mod:`forkpoint.capture.urllib3`): their ``getresponse`` finds no request of this adapter's and
passes through. A request sent piece by piece (``putrequest``/``putheader``/``endheaders``) is not
captured; its connection is then named as unrecorded at the end of the recording.
"""

from __future__ import annotations

import http.client
import io
import re
import threading
from collections.abc import Iterator
from typing import Any

from .. import runtime
from . import seam
from .decoding import own_decoder
from .exchange import (
    ChunkReader,
    Exchange,
    LibraryError,
    bodiless,
    body_content,
    built,
    encoded_again,
    live,
    past_end,
    rebuilt_error,
    recorded_chunks,
    replayed,
    request_record,
    said_length,
    serve,
)

#: The libraries this adapter captures.
LIBRARIES = ("http.client",)
#: What is patched, with the parameters forkpoint calls them with.
PATCHED: seam.Patched = (
    ("HTTPConnection", "request", ("self", "method", "url", "body", "headers", "encode_chunked")),
    ("HTTPConnection", "getresponse", ("self",)),
)
#: The attribute of a connection that holds this adapter's request between ``request`` and
#: ``getresponse``.
_STATE = "_forkpoint_exchange"

_installed: list[str] = []
_lock = threading.Lock()


def install() -> list[str]:
    """Wrap ``HTTPConnection.request`` and ``getresponse``. Idempotent."""
    with _lock:
        if _installed:
            return []
        problem = seam.signature_problem(http.client, PATCHED)
        if problem:
            seam.cannot_capture("http.client", http.client, problem)
            return []
        seam.wrap(http.client.HTTPConnection, "request", _make_request)
        seam.wrap(http.client.HTTPConnection, "getresponse", _make_getresponse)
        _installed.append("http.client")
        return ["http.client"]


def installed() -> list[str]:
    """The libraries patched in this process."""
    return list(_installed)


def uninstall() -> None:
    """Restore the original methods (for tests of the capture layer itself)."""
    with _lock:
        for _, method, _params in PATCHED:
            seam.unwrap(http.client.HTTPConnection, method)
        _installed.clear()


def _url(conn: http.client.HTTPConnection, url: str) -> str:
    if "://" in url:  # through a proxy: the absolute URL
        return url
    scheme = "https" if isinstance(conn, http.client.HTTPSConnection) else "http"
    host = conn.host if ":" not in conn.host else f"[{conn.host}]"
    return f"{scheme}://{host}:{conn.port}{url}"


def _make_request(original: Any) -> Any:
    def request(
        self: http.client.HTTPConnection,
        method: str,
        url: str,
        body: Any = None,
        headers: Any = None,
        *,
        encode_chunked: bool = False,
    ) -> None:
        headers = {} if headers is None else headers
        rt = runtime.active_for_http()
        if rt is None:
            return original(self, method, url, body, headers, encode_chunked=encode_chunked)  # type: ignore[no-any-return]
        content, body = body_content(body)
        rec = request_record(method, _url(self, url), list(headers.items()), content)
        taken = serve(rt, rec)
        if taken is not None:
            error = taken[0].get("error")
            if taken[0].get("response") is None and error and error.get("phase") == "send":
                raise rebuilt_error(error, _library_error)  # where it struck live: urllib wraps it
            setattr(self, _STATE, (rt, taken, method))
            return None
        call = live(rt, rec, own_decoder)
        try:
            original(self, method, url, body, headers, encode_chunked=encode_chunked)
        except BaseException as exc:
            call.error, call.phase = exc, "send"
            call.finish()
            raise
        setattr(self, _STATE, call)
        return None

    return request


def _make_getresponse(original: Any) -> Any:
    def getresponse(self: http.client.HTTPConnection) -> http.client.HTTPResponse:
        state = self.__dict__.pop(_STATE, None)
        if state is None:  # not a request of this adapter's (urllib3's own, or sent piece by piece)
            return original(self)  # type: ignore[no-any-return]
        if isinstance(state, Exchange):
            try:
                response = original(self)
            except BaseException as exc:
                state.error = exc
                state.finish()
                raise
            return _teed(response, state)
        rt, (event, position), method = state
        return recorded_response(rt, event, position, method, _library_error, self.response_class)

    return getresponse


_INCOMPLETE = re.compile(r"IncompleteRead\((\d+) bytes read(?:, (\d+) more expected)?\)")


def _with_partial(error: http.client.IncompleteRead, chunks: list[bytes]) -> None:
    """Give a rebuilt ``IncompleteRead`` what the program had of the body when it struck (the last
    N bytes served, N from its message) and how much more was expected: a program that keeps
    ``e.partial`` keeps the same bytes on replay."""
    counts = _INCOMPLETE.fullmatch(str(error.args[0]) if error.args else "")
    if counts is None:
        return
    body = b"".join(chunks)
    n = int(counts[1])
    error.partial = body[-n:] if 0 < n <= len(body) else body if n else b""
    error.expected = int(counts[2]) if counts[2] is not None else None
    error.args = (error.partial,)


def _library_error(name: str, message: str, os_error: OSError | None) -> BaseException | None:
    """An ``http.client`` exception by name, with the recorded message."""
    cls = getattr(http.client, name, None)
    if isinstance(cls, type) and issubclass(cls, http.client.HTTPException):
        return built(cls, message)
    return None


class _Replayed(io.RawIOBase):
    """The bytes a replayed response is parsed from: its head, then the recorded body."""

    def __init__(self, head: bytes, body: Iterator[bytes]) -> None:
        self._head = head
        self._body = ChunkReader(body)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n], self._head = self._head[:n], self._head[n:]
            return n
        return self._body.readinto(buffer)


class _Socket:
    """What ``HTTPResponse`` needs of a socket: ``makefile``."""

    def __init__(self, raw: _Replayed) -> None:
        self._raw = raw

    def makefile(self, mode: str, *args: Any, **kwargs: Any) -> io.BufferedReader:
        return io.BufferedReader(self._raw)


def _framed(chunks: list[bytes], body: Iterator[bytes], chunked: bool) -> Iterator[bytes]:
    """The body on the wire: as it is (``Content-Length``), or chunked, one HTTP chunk per recorded
    chunk and the terminating chunk at a normal end (a recorded failure is raised where the next
    chunk would have been read, as the live connection failed there)."""
    if not chunked:
        yield from body
        return
    for chunk in body:
        if chunk:  # (a chunk of size 0 is the end of the body)
            yield b"%x\r\n%s\r\n" % (len(chunk), chunk)
    yield b"0\r\n\r\n"


def recorded_response(
    rt: runtime.Runtime,
    event: Any,
    position: int,
    method: str,
    library_error: LibraryError,
    response_class: type[http.client.HTTPResponse] = http.client.HTTPResponse,
) -> http.client.HTTPResponse:
    """A real ``http.client.HTTPResponse`` that parses a recorded answer from memory: the status line
    and headers, then the body (``Content-Length`` for a whole body read to its end, else chunked,
    one HTTP chunk per recorded chunk, ending as the recording did). Raises the recorded exception
    (``library_error(name, message)`` builds the library's own) when no answer came."""
    resp = event.get("response")
    if resp is None:
        raise rebuilt_error(event.get("error") or {}, library_error)
    chunks = recorded_chunks(event)
    error = rebuilt_error(event["error"], library_error) if event.get("error") else None
    if isinstance(error, http.client.IncompleteRead):
        _with_partial(error, chunks)
    whole = resp.get("body_kind") != "stream" and resp.get("ended") == "complete" and error is None
    version = "HTTP/1.0" if resp.get("http_version") == "HTTP/1.0" else "HTTP/1.1"
    lines = [f"{version} {resp['status']} {resp.get('reason') or ''}".rstrip()]
    lines += [f"{k}: {v}" for k, v in resp.get("headers", [])]
    past = past_end(rt, event, position, chunks)  # (read from the chunks as stored)
    # A body stored decoded goes to this client as it came, encoded (it decodes, or not, itself).
    chunks, said = encoded_again(resp, chunks, error)
    lines += [f"Content-Encoding: {line}" for line in said]
    served = sum(map(len, chunks))
    # (a session recorded before the length was kept: a whole body says its own)
    length = said_length(resp, method, served) if "content_length" in resp else (served if whole else None)
    chunked = length is None or not (whole or bodiless(resp, method))
    lines.append("Transfer-Encoding: chunked" if chunked else f"Content-Length: {length}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
    body = _framed(chunks, replayed(chunks, error, past), chunked)
    response = response_class(_Socket(_Replayed(head, body)), method=method)  # type: ignore[arg-type]
    response.begin()
    return response


def _teed(response: http.client.HTTPResponse, call: Exchange) -> http.client.HTTPResponse:
    """A live response whose reads are recorded as they happen (each once: ``read`` calls
    ``readinto`` itself)."""
    call.respond(
        response.status,
        response.reason,
        "HTTP/1.0" if response.version == 10 else "HTTP/1.1",
        list(response.getheaders()),
    )
    depth = threading.local()

    def teed(name: str, count: Any) -> None:
        method = getattr(response, name)

        def read(*args: Any, **kwargs: Any) -> Any:
            outer = not getattr(depth, "busy", False)
            depth.busy = True
            try:
                result = method(*args, **kwargs)
            except BaseException as exc:
                if outer:
                    # What arrived before the body was cut: http.client hands it over in the error
                    # only (a program keeps e.partial), so it is part of the body received.
                    if isinstance(exc, http.client.IncompleteRead) and isinstance(exc.partial, bytes):
                        if exc.partial:
                            call.chunk(exc.partial)
                    call.error = exc
                    call.finish()
                raise
            finally:
                if outer:
                    depth.busy = False
            if outer:
                data = count(result, args)
                if data:
                    call.chunk(data)
                if response.isclosed():
                    call.whole(b"")
            return result

        setattr(response, name, read)

    for name in ("read", "read1", "readline"):
        teed(name, lambda result, args: result)
    teed("readinto", lambda n, args: bytes(memoryview(args[0])[:n]))
    close = response.close

    def _close() -> None:
        try:
            close()
        finally:
            call.finish()

    response.close = _close  # type: ignore[method-assign]
    if response.isclosed():  # no body at all (HEAD, 204, 304)
        call.whole(b"")
    return response
