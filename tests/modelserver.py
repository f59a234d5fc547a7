"""The tests' local HTTP server: one configurable fake model provider on 127.0.0.1.

Every test that needs a server talks to this one (fixtures ``server`` and ``make_server`` in
tests/conftest.py, or ``with LocalServer(...) as srv:``); only tests that need the demo's scripted
agent policy (tool calls chosen from the tools offered, in every dialect, Gemini and Responses
included) use the product's ``forkpoint.demo.server.ModelServer`` instead. This one runs in a thread
of the test process, logs every request, and answers in this order:

1. **Control headers**, on any path (headers, so that they stay out of forkpoint's match key):

   ``x-delay-ms: MS``        sleep first, then answer as usual
   ``x-status: CODE``        answer that error status in the provider's error shape (Anthropic's for
                             a path ending in ``/messages``, OpenAI's otherwise), with
                             ``retry-after-ms: 250``
   ``x-scenario: NAME`` +    fail the first attempts of scenario NAME with these statuses, in
   ``x-fail: 429,500``       order (an SDK's retries then succeed, or run out)
   ``x-drop-after: K``       a streamed answer is cut after K events: the socket is shut, no
                             terminating chunk (the server "dies" mid-stream)

2. **Routes the test registered** with :meth:`LocalServer.route` (the latest registered first): a
   function of the logged request that returns a :class:`Reply`, a :class:`Stream`, or ``None`` to
   leave the request to the next route. This is how a test gives the server special behaviour
   (a job that is ``running`` for three polls, a leaky provider, an OTLP receiver, a cassette
   played back) without a server class of its own.

3. **Built-in routes**:

   ``POST …/chat/completions``  OpenAI Chat Completions: a ``chat.completion``, or with
       ``"stream": true`` a ``chat.completion.chunk`` SSE stream (one word per event, ``chunk_delay``
       apart, usage in the last chunk, then ``data: [DONE]``). The text is ``"reply N to: LAST"``
       (N messages, the end of the last one); every answer has a fresh random id, so a replayed
       answer cannot come from the live server. With ``chat_script`` the answers follow a script
       instead (below).
   ``POST …/messages``           an Anthropic message (not streamed), text as above; with
                                 ``chat_script``, the script's answer (tool calls as
                                 ``tool_use`` blocks, ids ``toolu_N_I``; a
                                 ``thread`` continuing ``msg_N`` counts N + 1 turns before).
   ``POST /model/{id}/converse``  Amazon Bedrock Converse: the same answers (``chat_script`` or the
       echo) as ``{output{message{content[{text} | {toolUse}]}}, stopReason, usage}``;
       ``…/converse-stream`` streams them as an AWS event stream (``application/vnd.amazon.eventstream``,
       one binary message per event, ``chunk_delay`` apart: :func:`aws_event`).
   anything else                 a generic answer controlled by the query string:

       ``kind``      ``json`` (default: echoes the request), ``sse``, ``binary``, ``text``
       ``n``         number of SSE events (default 4; the last is ``data: [DONE]``)
       ``delay``     seconds between SSE events (default 0.02); every event is flushed alone
       ``gate=1``    after the first SSE event, wait until the test sets ``server.gate``
       ``drop``      cut an SSE stream after that many events (like ``x-drop-after``)
       ``encoding``  compress the body: ``gzip``, ``deflate`` (zlib-wrapped), ``deflate-raw``
                     (sent as ``deflate``), ``br``, ``zstd``, ``gzip-corrupt`` (a gzip header, then
                     garbage), or any other name (body sent as is under that name); streams:
                     the first three only
       ``size``      length of a ``binary`` body (default 4096; see :func:`binary_payload`)
       ``status``    HTTP status of the generic answer (default 200)
       ``sleep``     seconds to wait before answering

Every built-in answer, streamed or not, carries a random ``x-request-id`` header.

**Scripted chat** (``LocalServer(chat_script=[...])``, chat completions and Anthropic messages): reply ``n``, counted by the assistant
messages already in the conversation, is ``script[min(n, len(script) - 1)]``: either the final text,
or a list of ``(tool_name, arguments)`` tool calls, all in one response. A scripted answer is a pure
function of the conversation (ids ``chatcmpl-N`` and ``call_N_I``), so an agent loop replays the same.

Attributes of a running server: ``url`` (``http://127.0.0.1:PORT``), ``openai_base_url``
(``url + "/v1"``), ``port``; ``requests``: every request received, in arrival order, as
``{"method", "path", "query" (last value of each name), "headers" (lower-case names), "raw" (body
bytes), "body" (parsed JSON or None), "n" (its place, from 1)}``; ``gate`` and ``finished``
(set when a stream has been written to the end) are :class:`threading.Event`\\ s. :meth:`stop`
closes the listening socket and every open connection: the port then refuses connections.
"""

from __future__ import annotations

import fnmatch
import gzip
import json
import random
import socket
import socketserver
import sys
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = [
    "LocalServer",
    "Reply",
    "Request",
    "Route",
    "Stream",
    "aws_event",
    "binary_payload",
    "chat_chunks",
    "chat_completion",
    "compress",
    "json_reply",
    "sse_events",
]

Request = dict[str, Any]
Headers = Mapping[str, str] | Iterable[tuple[str, str]]

#: How long a failing attempt asks the client to wait (``retry-after-ms``).
RETRY_AFTER_MS = "250"

# ----------------------------------------------------------------------------------- replies


@dataclass
class Reply:
    """A whole response. ``ctype=None`` sends no content type (unless ``headers`` has one);
    ``encoding`` compresses ``body`` (see :func:`compress`) and names it in ``Content-Encoding``."""

    body: bytes = b""
    status: int = 200
    ctype: str | None = "application/octet-stream"
    headers: Headers = ()
    reason: str | None = None
    encoding: str | None = None


@dataclass
class Stream:
    """A response written event by event, each flushed alone (one transport chunk per event).

    ``delay`` seconds pass between two events; with ``gate`` the server waits after the first event
    until the test sets ``server.gate``; ``drop=K`` cuts the connection after K events (no
    terminating chunk). ``chunked=False`` sends a ``Content-Length`` for the whole body instead of
    chunked framing, still one write per event. ``encoding`` (``gzip``, ``deflate``,
    ``deflate-raw``) compresses the stream as it goes, flushing after every event."""

    events: list[bytes]
    delay: float = 0.0
    status: int = 200
    ctype: str | None = "text/event-stream"
    headers: Headers = ()
    reason: str | None = None
    encoding: str | None = None
    gate: bool = False
    drop: int | None = None
    chunked: bool = True


Route = Callable[[Request], Reply | Stream | None]


def json_reply(obj: Any, status: int = 200, headers: Headers = (), encoding: str | None = None) -> Reply:
    """``obj`` as an ``application/json`` reply."""
    return Reply(json.dumps(obj).encode(), status, "application/json", headers, encoding=encoding)


def binary_payload(size: int) -> bytes:
    """Deterministic bytes that are neither JSON nor UTF-8 (they start like a PNG file)."""
    rng = random.Random(size)
    return b"\x89PNG\r\n\x1a\n" + bytes(rng.randrange(256) for _ in range(max(0, size - 8)))


def sse_events(n: int) -> list[bytes]:
    """The SSE events of a generic ``kind=sse`` stream of ``n`` events (the last is ``[DONE]``)."""
    out = [f'data: {{"i": {i}, "text": "part {i} of the answer"}}\n\n'.encode() for i in range(n - 1)]
    return [*out, b"data: [DONE]\n\n"]


def compress(data: bytes, encoding: str) -> bytes:
    """``data`` compressed with one content coding, as a server would send it; an unknown coding
    leaves it as is, and ``gzip-corrupt`` is a gzip header followed by garbage."""
    if encoding == "gzip":
        return gzip.compress(data)
    if encoding == "deflate":
        return zlib.compress(data)
    if encoding == "deflate-raw":
        c = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
        return c.compress(data) + c.flush()
    if encoding == "br":
        import brotli

        return bytes(brotli.compress(data))
    if encoding == "zstd":
        import zstandard

        return zstandard.ZstdCompressor().compress(data)
    if encoding == "gzip-corrupt":
        return gzip.compress(data)[:10] + b"\x00not deflate at all\xff" * 4
    return data


def _encoding_header(encoding: str) -> str:
    return {"deflate-raw": "deflate", "gzip-corrupt": "gzip"}.get(encoding, encoding)


class _StreamCompressor:
    def __init__(self, encoding: str) -> None:
        wbits = {"gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS, "deflate-raw": -zlib.MAX_WBITS}
        if encoding not in wbits:
            raise ValueError(f"a stream cannot be sent with encoding {encoding!r}")
        self._c = zlib.compressobj(6, zlib.DEFLATED, wbits[encoding])

    def chunk(self, data: bytes) -> bytes:
        return self._c.compress(data) + self._c.flush(zlib.Z_SYNC_FLUSH)

    def end(self) -> bytes:
        return self._c.flush(zlib.Z_FINISH)


# ------------------------------------------------------------------------- provider dialects


def _rid() -> dict[str, str]:
    return {"x-request-id": "req_" + uuid.uuid4().hex}


def chat_completion(
    cid: str,
    model: str,
    text: str | None = None,
    tool_calls: list[tuple[str, dict[str, Any]]] | None = None,
    call_ids: list[str] | None = None,
    usage: dict[str, int] | None = None,
) -> dict[str, Any]:
    """A ``chat.completion`` object: the final ``text``, or ``tool_calls`` (name, arguments)."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        ids = call_ids or [f"call_{uuid.uuid4().hex[:12]}" for _ in tool_calls]
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for i, (name, args) in zip(ids, tool_calls, strict=True)
        ]
    return {
        "id": cid,
        "object": "chat.completion",
        "created": 1700000000,
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if tool_calls else "stop"}
        ],
        "usage": usage or {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def chat_chunks(completion: dict[str, Any]) -> list[bytes]:
    """The SSE events that stream ``completion`` (from :func:`chat_completion`): one word of the text
    per chunk (or the tool calls in one chunk), a last chunk with the finish reason and the usage,
    then ``data: [DONE]``."""
    choice = completion["choices"][0]
    message = choice["message"]
    head = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        c = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}
        return f"data: {json.dumps(c)}\n\n".encode()

    if message.get("tool_calls"):
        calls = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
        deltas = [{"role": "assistant", "content": None, "tool_calls": calls}]
    else:
        words = (message["content"] or "").split(" ")
        deltas = [
            {"role": "assistant", "content": w} if i == 0 else {"content": " " + w}
            for i, w in enumerate(words)
        ]
    return [
        *(chunk(d) for d in deltas),
        chunk({}, choice["finish_reason"], usage=completion["usage"]),
        b"data: [DONE]\n\n",
    ]


def _last_text(messages: list[Any]) -> str:
    last = (messages[-1] if messages else {}).get("content") or ""
    return last if isinstance(last, str) else json.dumps(last)


def _error_reply(status: int, path: str) -> Reply:
    rid = uuid.uuid4().hex
    if path.endswith("/messages"):
        kind = "rate_limit_error" if status == 429 else "api_error"
        body: Any = {"type": "error", "error": {"type": kind, "message": f"failure {rid}"}}
    else:
        body = {"error": {"message": f"failure {rid}", "type": "server_error", "code": status}}
    return json_reply(body, status, {**_rid(), "retry-after-ms": RETRY_AFTER_MS})


def aws_event(event_type: str, payload: dict[str, Any]) -> bytes:
    """One AWS event-stream message (a 12-byte prelude with its CRC32, string headers, the JSON
    payload, the message CRC32) as Bedrock's ConverseStream sends it, written here independently of
    forkpoint's own encoder so that botocore checks the framing."""
    headers = b""
    for name, value in (
        (":event-type", event_type),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ):
        headers += (
            bytes([len(name)]) + name.encode() + b"\x07" + len(value).to_bytes(2, "big") + value.encode()
        )
    body = json.dumps(payload).encode()
    total = 12 + len(headers) + len(body) + 4
    prelude = total.to_bytes(4, "big") + len(headers).to_bytes(4, "big")
    message = prelude + zlib.crc32(prelude).to_bytes(4, "big") + headers + body
    return message + zlib.crc32(message).to_bytes(4, "big")


def converse_events(answer: dict[str, Any]) -> list[bytes]:
    """The ConverseStream events of a Converse ``answer``: text one word per delta, a tool use as its
    start and one input delta, then ``messageStop`` and ``metadata``."""
    events = [aws_event("messageStart", {"role": "assistant"})]
    for n, block in enumerate(answer["output"]["message"]["content"]):
        if "toolUse" in block:
            use = block["toolUse"]
            start = {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}
            events.append(aws_event("contentBlockStart", {"contentBlockIndex": n, "start": start}))
            delta = {"toolUse": {"input": json.dumps(use["input"])}}
            events.append(aws_event("contentBlockDelta", {"contentBlockIndex": n, "delta": delta}))
        else:
            for i, word in enumerate(block["text"].split(" ")):
                text = word if i == 0 else " " + word
                events.append(
                    aws_event("contentBlockDelta", {"contentBlockIndex": n, "delta": {"text": text}})
                )
        events.append(aws_event("contentBlockStop", {"contentBlockIndex": n}))
    events.append(aws_event("messageStop", {"stopReason": answer["stopReason"]}))
    events.append(aws_event("metadata", {"usage": answer["usage"], "metrics": {"latencyMs": 12}}))
    return events


# ------------------------------------------------------------------------------ the server


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall between headers and body
    timeout = 20  # seconds an idle keep-alive connection is kept
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        self._handle()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_GET  # noqa: N815 - stdlib names

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
            data = bytearray()
            while size := int(self.rfile.readline().split(b";")[0].strip() or b"0", 16):
                data += self.rfile.read(size)
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return bytes(data)
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _handle(self) -> None:
        owner = self.server.owner
        raw = self._read_body()
        parts = urlsplit(self.path)
        request: Request = {
            "method": self.command,
            "path": parts.path,
            "query": {k: v[-1] for k, v in parse_qs(parts.query).items()},
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "raw": raw,
        }
        try:
            request["body"] = json.loads(raw) if raw else None
        except ValueError:
            request["body"] = None
        with owner.lock:
            owner.requests.append(request)
            request["n"] = len(owner.requests)
        try:
            self._write(owner._answer(request), request)
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):  # the client left
            self.close_connection = True

    def _head(self, status: int, reason: str | None, ctype: str | None, headers: Headers) -> None:
        pairs = list(headers.items() if isinstance(headers, Mapping) else headers)
        self.send_response(status, reason)
        if ctype and not any(k.lower() == "content-type" for k, _ in pairs):
            self.send_header("Content-Type", ctype)
        for k, v in pairs:
            self.send_header(k, v)

    def _write(self, reply: Reply | Stream, request: Request) -> None:
        if isinstance(reply, Reply):
            data = compress(reply.body, reply.encoding) if reply.encoding else reply.body
            self._head(reply.status, reply.reason, reply.ctype, reply.headers)
            if reply.encoding:
                self.send_header("Content-Encoding", _encoding_header(reply.encoding))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if request["method"] != "HEAD":  # (its length is the body a GET would get)
                self.wfile.write(data)
            self.wfile.flush()
            return
        drop = reply.drop
        if drop is None and request["headers"].get("x-drop-after"):
            drop = int(request["headers"]["x-drop-after"])
        comp = _StreamCompressor(reply.encoding) if reply.encoding else None
        self._head(reply.status, reply.reason, reply.ctype, reply.headers)
        if reply.encoding:
            self.send_header("Content-Encoding", _encoding_header(reply.encoding))
        if reply.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            if comp:
                raise ValueError("a compressed stream must be chunked")
            self.send_header("Content-Length", str(sum(len(e) for e in reply.events)))
        self.end_headers()
        frame = (lambda d: b"%x\r\n%s\r\n" % (len(d), d)) if reply.chunked else (lambda d: d)
        for i, event in enumerate(reply.events):
            if drop is not None and i == drop:  # the server dies mid-stream
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            data = comp.chunk(event) if comp else event
            self.wfile.write(frame(data))
            self.wfile.flush()
            if reply.gate and i == 0:
                self.server.owner.gate.wait(10)
            elif i < len(reply.events) - 1 and reply.delay:
                time.sleep(reply.delay)
        if comp and (tail := comp.end()):
            self.wfile.write(frame(tail))
        if reply.chunked:
            self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        self.server.owner.finished.set()


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # dozens of concurrent connects must not overflow the backlog

    def __init__(self, address: tuple[str, int], owner: LocalServer) -> None:
        self.owner = owner
        self.connections: set[socket.socket] = set()
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), a reverse DNS lookup that can stall.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), int(self.server_address[1])

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.owner.lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.owner.lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], OSError):
            return  # a client that hangs up (abandoned stream, timeout) is normal here
        super().handle_error(request, client_address)


class LocalServer:
    """The tests' configurable model server, serving in a thread from construction on; see the module
    docstring for what it answers.

    Args:
        chat_script: answer ``…/chat/completions`` from this script instead of echoing.
        chunk_delay: seconds between two events of a streamed chat answer.
        host: the loopback address to bind.
    """

    #: What ``kind=binary`` and ``kind=sse`` answer, for tests to compare with.
    binary_payload = staticmethod(binary_payload)
    sse_events = staticmethod(sse_events)

    def __init__(
        self,
        *,
        chat_script: list[str | list[tuple[str, dict[str, Any]]]] | None = None,
        chunk_delay: float = 0.005,
        host: str = "127.0.0.1",
    ) -> None:
        self.chat_script = chat_script
        self.chunk_delay = chunk_delay
        self.lock = threading.Lock()
        self.requests: list[Request] = []
        self.gate = threading.Event()
        self.finished = threading.Event()
        self._routes: list[tuple[str, str | None, Route]] = []
        self._attempts: dict[str, int] = {}
        self._server = _HTTPServer((host, 0), self)
        self.port: int = self._server.server_address[1]
        self.url = f"http://{host}:{self.port}"
        self.openai_base_url = self.url + "/v1"
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        self.running = True

    # -------------------------------------------------------------------------- configuration

    def route(self, pattern: str, fn: Route | None = None, *, method: str | None = None) -> Any:
        """Answer requests whose path matches ``pattern`` (``fnmatch``: ``/v1/jobs/*``, ``*``) and
        ``method`` (any if None) with ``fn(request)``; usable as a decorator. Routes registered later
        are tried first; a route that returns None leaves the request to the next one."""

        def register(f: Route) -> Route:
            with self.lock:
                self._routes.append((pattern, method, f))
            return f

        return register(fn) if fn is not None else register

    # -------------------------------------------------------------------------- lifecycle

    def stop(self) -> None:
        """Stop serving: the port refuses connections and open connections are closed."""
        if not self.running:
            return
        self.running = False
        self.gate.set()
        self._server.shutdown()
        self._server.server_close()
        with self.lock:
            conns = list(self._server.connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        self._thread.join(5)

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -------------------------------------------------------------------------- answering

    def _answer(self, request: Request) -> Reply | Stream:
        headers, path = request["headers"], request["path"]
        if headers.get("x-delay-ms"):
            time.sleep(int(headers["x-delay-ms"]) / 1000)
        status = self._planned_status(headers)
        if status >= 400:
            return _error_reply(status, path)
        with self.lock:
            routes = list(reversed(self._routes))
        for pattern, method, fn in routes:
            if fnmatch.fnmatchcase(path, pattern) and method in (None, request["method"]):
                reply = fn(request)
                if reply is not None:
                    return reply
        body = request["body"] if isinstance(request["body"], dict) else {}
        if path.endswith("/chat/completions"):
            return self._chat(body)
        if path.endswith("/messages"):
            return self._message(body)
        if path.startswith("/model/") and path.endswith(("/converse", "/converse-stream")):
            return self._converse(body, stream=path.endswith("-stream"))
        return self._generic(request)

    def _planned_status(self, headers: dict[str, str]) -> int:
        if headers.get("x-status"):
            return int(headers["x-status"])
        scenario = headers.get("x-scenario")
        if scenario and headers.get("x-fail"):
            plan = [int(s) for s in headers["x-fail"].split(",")]
            with self.lock:
                attempt = self._attempts.get(scenario, 0)
                self._attempts[scenario] = attempt + 1
            if attempt < len(plan):
                return plan[attempt]
        return 200

    def _chat(self, body: dict[str, Any]) -> Reply | Stream:
        messages = body.get("messages") or [{}]
        model = body.get("model", "test-model")
        if self.chat_script is not None:
            n = sum(1 for m in messages if m.get("role") == "assistant")
            step = self.chat_script[min(n, len(self.chat_script) - 1)]
            if isinstance(step, str):
                completion = chat_completion(f"chatcmpl-{n}", model, text=step)
            else:
                ids = [f"call_{n}_{i}" for i in range(len(step))]
                completion = chat_completion(f"chatcmpl-{n}", model, tool_calls=step, call_ids=ids)
        else:
            text = f"reply {len(messages)} to: {_last_text(messages)[-60:]}"
            usage = {"prompt_tokens": 10 * len(messages), "completion_tokens": len(text.split())}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            completion = chat_completion(f"chatcmpl-{uuid.uuid4().hex[:12]}", model, text=text, usage=usage)
        if body.get("stream"):
            return Stream(chat_chunks(completion), delay=self.chunk_delay, headers=_rid())
        return json_reply(completion, headers=_rid())

    def _converse(self, body: dict[str, Any], *, stream: bool) -> Reply | Stream:
        messages = body.get("messages") or [{}]
        n = sum(1 for m in messages if m.get("role") == "assistant")
        step: str | list[tuple[str, dict[str, Any]]]
        if self.chat_script is not None:
            step = self.chat_script[min(n, len(self.chat_script) - 1)]
        else:
            last = "".join(b.get("text", "") for b in (messages[-1].get("content") or []))
            step = f"reply {len(messages)} to: {last[-60:]}"
        if isinstance(step, str):
            content: list[dict[str, Any]] = [{"text": step}]
        else:
            content = [
                {"toolUse": {"toolUseId": f"tooluse_{n}_{i}", "name": name, "input": args}}
                for i, (name, args) in enumerate(step)
            ]
        answer = {
            "output": {"message": {"role": "assistant", "content": content}},
            "stopReason": "end_turn" if isinstance(step, str) else "tool_use",
            "usage": {
                "inputTokens": 10 * len(messages),
                "outputTokens": 5,
                "totalTokens": 10 * len(messages) + 5,
            },
            "metrics": {"latencyMs": 12},
        }
        rid = {"x-amzn-requestid": str(uuid.uuid4())}
        if stream:
            return Stream(
                converse_events(answer),
                delay=self.chunk_delay,
                ctype="application/vnd.amazon.eventstream",
                headers=rid,
            )
        return json_reply(answer, headers=rid)

    def _message(self, body: dict[str, Any]) -> Reply:
        messages = body.get("messages") or [{}]
        text = f"reply {len(messages)} to: {_last_text(messages)[-60:]}"
        content: list[dict[str, Any]] = [{"type": "text", "text": text}]
        msg_id, stop = "msg_" + uuid.uuid4().hex, "end_turn"
        if self.chat_script is not None:
            n = sum(1 for m in messages if m.get("role") == "assistant")
            # The SDK's tool runner continues a server-side thread: only the new messages are sent.
            previous = str((body.get("thread") or {}).get("previous_message_id") or "")
            if previous.startswith("msg_") and previous[4:].isdigit():
                n += int(previous[4:]) + 1
            step = self.chat_script[min(n, len(self.chat_script) - 1)]
            msg_id = f"msg_{n}"
            if isinstance(step, str):
                content = [{"type": "text", "text": step}]
            else:
                content = [
                    {"type": "tool_use", "id": f"toolu_{n}_{i}", "name": name, "input": args}
                    for i, (name, args) in enumerate(step)
                ]
                stop = "tool_use"
        reply = {
            "id": msg_id,
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude-test"),
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 10 * len(messages), "output_tokens": len(text.split())},
        }
        return json_reply(reply, headers=_rid())

    def _generic(self, request: Request) -> Reply | Stream:
        query = request["query"]
        if query.get("sleep"):
            time.sleep(float(query["sleep"]))
        kind = query.get("kind", "json")
        status = int(query.get("status", "200"))
        encoding = query.get("encoding")
        if kind == "sse":
            return Stream(
                sse_events(int(query.get("n", "4"))),
                delay=float(query.get("delay", "0.02")),
                gate=query.get("gate") == "1",
                drop=int(query["drop"]) if "drop" in query else None,
                encoding=encoding,
                headers=_rid(),
            )
        if kind == "binary":
            return Reply(
                binary_payload(int(query.get("size", "4096"))), status, headers=_rid(), encoding=encoding
            )
        if kind == "text":
            return Reply(
                "plain text: héllo\n".encode(), status, "text/plain; charset=utf-8", _rid(), encoding=encoding
            )
        reply = {
            "id": uuid.uuid4().hex,
            "path": request["path"],
            "query": query,
            "echo": request["body"],
            "count": request["n"],
            "note": "ünïcode ✓",
        }
        return json_reply(reply, status, _rid(), encoding)
