"""Shared fixtures: a local HTTP server on 127.0.0.1 that the capture and CLI tests talk to.

The server answers according to the request:

* ``POST /v1/chat/completions`` speaks OpenAI Chat Completions: a JSON completion, or an SSE stream
  of chunks when the body says ``"stream": true``. The reply text is derived from the last message,
  and every response carries a fresh random id, so a replayed answer cannot come from a live server.
* any other path is controlled by the query string:

  ``kind``      ``json`` (default: echoes the request), ``sse``, ``binary``, ``text``
  ``n``         number of SSE events (default 4)
  ``delay``     seconds to sleep between SSE events (default 0.02); every event is flushed alone
  ``gate=1``    after the first SSE event, wait until the test sets ``server.gate``
  ``encoding``  ``gzip``, ``deflate`` (zlib-wrapped) or ``deflate-raw``: compress the body
  ``size``      length of a ``binary`` body (default 4096)
  ``status``    HTTP status (default 200)

``server.requests`` holds every request received; ``server.finished`` is set when a stream has been
written to the end; ``server.stop()`` closes the listening socket and every open connection.
"""

from __future__ import annotations

import gzip
import json
import random
import socket
import threading
import time
import uuid
import zlib
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from typing import Any

import pytest

from forkpoint import runtime
from tests.httpserver import LoggingHandler


def binary_payload(size: int) -> bytes:
    """Deterministic bytes that are neither JSON nor UTF-8 (they start like a PNG file)."""
    rng = random.Random(size)
    return b"\x89PNG\r\n\x1a\n" + bytes(rng.randrange(256) for _ in range(max(0, size - 8)))


def sse_events(n: int) -> list[bytes]:
    """The SSE events of a generic ``kind=sse`` stream of ``n`` events (the last is ``[DONE]``)."""
    out = [f'data: {{"i": {i}, "text": "part {i} of the answer"}}\n\n'.encode() for i in range(n - 1)]
    return [*out, b"data: [DONE]\n\n"]


class _Compressor:
    def __init__(self, encoding: str) -> None:
        wbits = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS, "deflate-raw": -zlib.MAX_WBITS}
        self._c = zlib.compressobj(6, zlib.DEFLATED, wbits[encoding])

    def chunk(self, data: bytes) -> bytes:
        return self._c.compress(data) + self._c.flush(zlib.Z_SYNC_FLUSH)

    def end(self) -> bytes:
        return self._c.flush(zlib.Z_FINISH)


def compress(data: bytes, encoding: str) -> bytes:
    if encoding == "gzip":
        return gzip.compress(data)
    if encoding == "deflate":
        return zlib.compress(data)
    c = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    return c.compress(data) + c.flush()


class _Handler(LoggingHandler):
    timeout = 20

    def route(self, request: dict[str, Any]) -> None:
        if request["path"].endswith("/chat/completions"):
            self._chat(request["body"] or {})
        else:
            self._generic(request["path"], request["query"], request["body"], request["n"])

    def _send_body(self, status: int, ctype: str, data: bytes, encoding: str | None = None) -> None:
        if encoding:
            data = compress(data, encoding)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Server-Nonce", uuid.uuid4().hex)
        if encoding:
            self.send_header("Content-Encoding", "deflate" if encoding == "deflate-raw" else encoding)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def _stream(
        self,
        events: list[bytes],
        *,
        delay: float,
        gate: bool = False,
        encoding: str | None = None,
        ctype: str = "text/event-stream",
    ) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        if encoding:
            self.send_header("Content-Encoding", "deflate" if encoding == "deflate-raw" else encoding)
        self.end_headers()
        comp = _Compressor(encoding) if encoding else None
        for i, event in enumerate(events):
            data = comp.chunk(event) if comp else event
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            if gate and i == 0:
                self.server.gate.wait(10)
            elif i < len(events) - 1 and delay:
                time.sleep(delay)
        if comp:
            tail = comp.end()
            if tail:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(tail), tail))
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        self.server.finished.set()

    # ----------------------------------------------------------------- routes

    def _generic(self, path: str, query: dict[str, str], body: Any, n: int) -> None:
        kind = query.get("kind", "json")
        status = int(query.get("status", "200"))
        encoding = query.get("encoding")
        if kind == "sse":
            n = int(query.get("n", "4"))
            self._stream(
                sse_events(n),
                delay=float(query.get("delay", "0.02")),
                gate=query.get("gate") == "1",
                encoding=encoding,
            )
        elif kind == "binary":
            self._send_body(
                status, "application/octet-stream", binary_payload(int(query.get("size", "4096"))), encoding
            )
        elif kind == "text":
            self._send_body(status, "text/plain; charset=utf-8", "plain text: héllo\n".encode(), encoding)
        else:
            reply = {
                "id": uuid.uuid4().hex,
                "path": path,
                "query": query,
                "echo": body,
                "count": n,
                "note": "ünïcode ✓",
            }
            self._send_body(status, "application/json", json.dumps(reply).encode(), encoding)

    def _chat(self, body: dict[str, Any]) -> None:
        messages = body.get("messages") or [{}]
        last = messages[-1].get("content") or ""
        if not isinstance(last, str):
            last = json.dumps(last)
        text = f"reply {len(messages)} to: {last[-60:]}"
        cid = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        model = body.get("model", "test-model")
        usage = {
            "prompt_tokens": 10 * len(messages),
            "completion_tokens": len(text.split()),
            "total_tokens": 0,
        }
        if body.get("stream"):
            words = text.split(" ")
            chunks = []
            for i, w in enumerate(words):
                delta = {"role": "assistant", "content": w} if i == 0 else {"content": " " + w}
                chunks.append(
                    {
                        "id": cid,
                        "object": "chat.completion.chunk",
                        "created": 1700000000,
                        "model": model,
                        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
                    }
                )
            chunks.append(
                {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": 1700000000,
                    "model": model,
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                    "usage": usage,
                }
            )
            events = [f"data: {json.dumps(c)}\n\n".encode() for c in chunks] + [b"data: [DONE]\n\n"]
            self._stream(events, delay=0.005)
            return
        reply = {
            "id": cid,
            "object": "chat.completion",
            "created": 1700000000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": usage,
        }
        self._send_body(200, "application/json", json.dumps(reply).encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.gate = threading.Event()
        self.finished = threading.Event()
        self.connections: list[socket.socket] = []

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.lock:
            self.connections.append(request)
        super().process_request(request, client_address)


class LocalServer:
    """A running :class:`_Server` in a thread; see the module docstring."""

    def __init__(self) -> None:
        self._server = _Server()
        self.port: int = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05})
        self._thread.daemon = True
        self._thread.start()
        self.running = True

    #: What ``kind=binary`` and ``kind=sse`` answer, for tests to compare with.
    binary_payload = staticmethod(binary_payload)
    sse_events = staticmethod(sse_events)

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self._server.requests

    @property
    def gate(self) -> threading.Event:
        return self._server.gate

    @property
    def finished(self) -> threading.Event:
        return self._server.finished

    def stop(self) -> None:
        """Stop serving: the port refuses connections and open connections are closed."""
        if not self.running:
            return
        self.running = False
        self._server.gate.set()
        self._server.shutdown()
        self._server.server_close()
        with self._server.lock:
            conns = list(self._server.connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        self._thread.join(5)


@pytest.fixture
def server() -> Iterator[LocalServer]:
    """A fresh local server for one test; stopped at the end (tests may stop it earlier)."""
    srv = LocalServer()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def make_server() -> Iterator[Any]:
    """A factory of local servers for module-scoped fixtures; each is stopped at the latest at the
    end of the test session."""
    started: list[LocalServer] = []

    def make() -> LocalServer:
        srv = LocalServer()
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.stop()


@pytest.fixture
def store(tmp_path: Any) -> Any:
    """A session store directory (not created yet) under the test's tmp_path."""
    return tmp_path / "store"


@pytest.fixture(autouse=True)
def _no_runtime_left_active() -> Iterator[None]:
    """Fail a test that leaves a recorder or replayer active, and clean up so others still run."""
    assert runtime.active() is None, "a previous test left a forkpoint runtime active"
    yield
    rt = runtime.active()
    if rt is not None:
        runtime.deactivate(rt)
        pytest.fail(f"test left a forkpoint {rt.mode} active")
