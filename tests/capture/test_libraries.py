"""Model calls sent through urllib3 (``requests``), the standard library (``urllib.request``) and aiohttp
are recorded and replayed like httpx's: a real agent loop against the local server, the server stopped,
the loop replayed, its outputs compared; streams, failures and cut streams; no socket on replay; and
a client forkpoint does not capture is named, never silently missing from the session."""

from __future__ import annotations

import asyncio
import base64
import functools
import gzip
import hashlib
import http.client
import importlib
import io
import json
import os
import socket
import subprocess
import sys
import threading
import tracemalloc
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import brotli
import httpx
import pytest
import requests
import urllib3
import yaml
import zstandard
from rich.console import Console

import forkpoint
from forkpoint.capture.decoding import DECODED_MAX, TooLarge, decode_with, encoded, own_decoder
from forkpoint.importers import import_file
from forkpoint.log import SessionWriter
from forkpoint.match import event_key
from forkpoint.record import Lacks, recording_warnings
from forkpoint.replay import summary_line
from forkpoint.show import render
from tests.modelserver import LocalServer, Reply, Stream, compress
from tests.test_canary import SECRETS, scan

SCRIPT: list[str | list[tuple[str, dict[str, Any]]]] = [
    [("add", {"a": 2, "b": 3})],
    [("add", {"a": 5, "b": 10})],
    "the total is 15",
]
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
#: A streamed request late in the script: the server streams its final text, word by word.
STREAMED = {
    "model": "m",
    "stream": True,
    "messages": [
        {"role": "user", "content": "stream it"},
        {"role": "assistant", "content": "one"},
        {"role": "assistant", "content": "two"},
    ],
}


def _turns(post: Callable[[dict[str, Any]], dict[str, Any]]) -> list[Any]:
    """An agent loop over Chat Completions: call the model, run the tools it asks for, until it answers."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "add things up"}]
    outputs: list[Any] = []
    for _ in range(5):
        message = post({"model": "m", "messages": messages, "tools": TOOLS})["choices"][0]["message"]
        messages.append(message)
        if not message.get("tool_calls"):
            outputs.append(message["content"])
            return outputs
        for call in message["tool_calls"]:
            args = json.loads(call["function"]["arguments"])
            outputs.append((call["id"], args["a"] + args["b"]))
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "content": str(args["a"] + args["b"])}
            )
    return outputs


def _sse_text(lines: list[bytes]) -> str:
    """The assistant text of a streamed Chat Completions answer, from its ``data:`` lines."""
    text = []
    for line in lines:
        if line.startswith(b"data: {"):
            text.append(json.loads(line[6:])["choices"][0]["delta"].get("content") or "")
    return "".join(text)


def requests_agent(base: str) -> list[Any]:
    with requests.Session() as s:
        out = _turns(lambda body: s.post(base + "/v1/chat/completions", json=body, timeout=10).json())
        with s.post(base + "/v1/chat/completions", json=STREAMED, stream=True) as r:
            out.append(_sse_text([line for line in r.iter_lines() if line]))
    return out


def urllib_agent(base: str) -> list[Any]:
    def post(body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            base + "/v1/chat/completions", json.dumps(body).encode(), {"content-type": "application/json"}
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            return dict(json.loads(resp.read()))

    out = _turns(post)
    req = urllib.request.Request(
        base + "/v1/chat/completions", json.dumps(STREAMED).encode(), {"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        out.append(_sse_text([line.strip() for line in resp]))
    return out


def aiohttp_agent(base: str) -> list[Any]:
    async def run() -> list[Any]:
        async with aiohttp.ClientSession() as s:
            messages: list[dict[str, Any]] = [{"role": "user", "content": "add things up"}]
            out: list[Any] = []
            for _ in range(5):
                async with s.post(
                    base + "/v1/chat/completions", json={"model": "m", "messages": messages}
                ) as r:
                    message = (await r.json())["choices"][0]["message"]
                messages.append(message)
                if not message.get("tool_calls"):
                    out.append(message["content"])
                    break
                for call in message["tool_calls"]:
                    args = json.loads(call["function"]["arguments"])
                    out.append((call["id"], args["a"] + args["b"]))
                    messages.append(
                        {"role": "tool", "tool_call_id": call["id"], "content": str(args["a"] + args["b"])}
                    )
            async with s.post(base + "/v1/chat/completions", json=STREAMED) as r:
                out.append(_sse_text([line.strip() async for line in r.content]))
            return out

    return asyncio.run(run())


AGENTS = {"requests": requests_agent, "urllib": urllib_agent, "aiohttp": aiohttp_agent}


@pytest.mark.parametrize("library", AGENTS)
def test_an_agent_loop_replays_offline(library: str, store: Path) -> None:
    agent = AGENTS[library]
    srv = LocalServer(chat_script=SCRIPT, chunk_delay=0.002)
    with forkpoint.record(store=store) as rec:
        live = agent(srv.url)
    served = len(srv.requests)
    srv.stop()  # the provider is gone: only the session can answer
    assert live == [("call_0_0", 5), ("call_1_0", 15), "the total is 15", "the total is 15"]

    session = forkpoint.Session.load(rec.session_path)
    calls = session.by_type("model_call")
    assert len(calls) == served == 4
    assert all(c["summary"]["kind"] == "model" for c in calls)
    stream = calls[-1]["response"]
    assert stream["body_kind"] == "stream" and len(stream["chunks"]) > 3  # teed chunk by chunk
    assert [t for t, _ in stream["chunks"]] == sorted(t for t, _ in stream["chunks"])  # with timing

    with forkpoint.replay(rec.session_path) as rp:
        again = agent(srv.url)
    report = rp.report()
    assert again == live
    assert report["reproduced"] and report["matched"] == 4 and not report["network_blocked"]


@pytest.mark.parametrize("library", ["requests", "urllib", "aiohttp"])
def test_a_refused_connection_is_recorded_and_raised_again_as_the_same_type(
    library: str, store: Path
) -> None:
    """The same class, and what a program tells "refused" from "reset" by: urllib's ``reason`` and
    aiohttp's ``os_error`` came back with no ``errno`` (a bare ``OSError`` in aiohttp), so a retry
    loop took another way under "replay ok"."""
    srv = LocalServer()
    srv.stop()  # nothing listens there any more

    def call() -> tuple[type[BaseException], Any]:
        try:
            if library == "requests":
                requests.post(
                    srv.url + "/v1/chat/completions", json={"model": "m", "messages": []}, timeout=5
                )
            elif library == "urllib":
                urllib.request.urlopen(srv.url + "/v1/models", timeout=5)
            else:

                async def get() -> None:
                    async with aiohttp.ClientSession() as s, s.get(srv.url + "/v1/models") as r:
                        await r.read()

                asyncio.run(get())
        except Exception as exc:
            os_error = getattr(exc, "reason", None) or getattr(exc, "os_error", None)
            seen = (type(os_error), os_error.errno, str(os_error)) if isinstance(os_error, OSError) else None
            assert library == "requests" or seen is not None, exc
            return type(exc), seen
        raise AssertionError("the call went through")

    with forkpoint.record(store=store) as rec:
        live = call()
    assert forkpoint.Session.load(rec.session_path).by_type("model_call")[0]["error"]["type"]
    with forkpoint.replay(rec.session_path) as rp:
        replayed = call()
    assert replayed == live
    assert rp.report()["reproduced"], rp.report()


def test_a_read_timeout_of_requests_replays_as_the_exception_requests_raised(
    server: LocalServer, store: Path
) -> None:
    """The socket's ``TimeoutError`` (a builtin) was rebuilt as urllib3's own ``TimeoutError`` on
    replay, which requests does not turn into a ``requests.ConnectionError``: the agent's handler
    missed it and the replay ended in a traceback."""
    server.route("/slow", lambda req: Stream([b"data: 1\n\n", b"data: 2\n\n"], delay=1.0))

    def call() -> str:
        try:
            requests.get(server.url + "/slow", timeout=(5, 0.3)).raise_for_status()
        except requests.RequestException as exc:
            return f"handled: {type(exc).__name__}"
        return "answered"

    with forkpoint.record(store=store) as rec:
        live = call()
    assert live == "handled: ConnectionError"
    with forkpoint.replay(rec.session_path) as rp:
        assert call() == live
    assert rp.report()["reproduced"], rp.report()


@pytest.mark.parametrize("library", ["requests", "urllib", "aiohttp"])
def test_a_stream_cut_by_the_server_ends_the_same_way_on_replay(
    library: str, server: LocalServer, store: Path
) -> None:
    """requests raises ``ChunkedEncodingError`` (urllib3's ``ProtocolError``) where the server died,
    aiohttp ``ClientPayloadError``; ``urllib.request``'s line iteration just ends there: either way,
    replay ends as the live run did."""
    url = server.url + "/events?kind=sse&n=6&delay=0.005&drop=3"

    def read() -> tuple[list[bytes], str]:
        got: list[bytes] = []
        try:
            if library == "requests":
                with requests.get(url, stream=True, timeout=5) as r:
                    for line in r.iter_lines():
                        got.append(line)
            elif library == "urllib":
                with urllib.request.urlopen(url, timeout=5) as resp:
                    for line in resp:
                        got.append(line)
            else:

                async def lines() -> None:
                    async with aiohttp.ClientSession() as s, s.get(url) as r:
                        async for line in r.content:
                            got.append(line)

                asyncio.run(lines())
        except Exception as exc:
            return got, type(exc).__name__
        return got, "no error"

    with forkpoint.record(store=store) as rec:
        live = read()
    server.stop()
    assert len([line for line in live[0] if line.strip()]) == 3
    event = forkpoint.Session.load(rec.session_path).by_type("model_call")[0]
    if library != "urllib":
        assert live[1] == {"requests": "ChunkedEncodingError", "aiohttp": "ClientPayloadError"}[library]
        assert event["response"]["ended"] == "error"
    with forkpoint.replay(rec.session_path):
        assert read() == live


def test_an_incomplete_read_keeps_what_arrived_on_replay(server: LocalServer, store: Path) -> None:
    """urllib's ``read()`` of a chunked body the server cut raises ``http.client.IncompleteRead``,
    whose ``partial`` a program keeps (what arrived): on replay it was ``b''`` (the error rebuilt
    from its message alone), so the program kept nothing under "replay ok"."""
    url = server.url + "/d?kind=sse&n=8&delay=0.01&drop=3"

    def read() -> tuple[bytes, Any]:
        try:
            return urllib.request.urlopen(url, timeout=5).read(), None
        except http.client.IncompleteRead as exc:
            return exc.partial, exc.expected

    with forkpoint.record(store=store) as rec:
        live = read()
    server.stop()
    assert live[0].count(b"data:") == 3
    with forkpoint.replay(rec.session_path) as rp:
        assert read() == live
    assert rp.report()["reproduced"]


def _serving(handle: Callable[[socket.socket], None]) -> tuple[socket.socket, threading.Thread]:
    """A listener on 127.0.0.1 whose connections are handed to ``handle`` one by one, in a thread,
    until the listener is closed; and that thread."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            handle(conn)

    serving = threading.Thread(target=serve, daemon=True)
    serving.start()
    return listener, serving


def test_an_http_10_answer_replays_as_http_10_in_aiohttp(store: Path) -> None:
    """aiohttp's response said HTTP/1.1 on replay for an answer that came as HTTP/1.0."""

    def old_server(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")

    listener, serving = _serving(old_server)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v"

    async def get() -> tuple[Any, str]:
        async with aiohttp.ClientSession() as s, s.get(url) as r:
            return tuple(r.version), await r.text()

    try:
        with forkpoint.record(store=store) as rec:
            live = asyncio.run(get())
    finally:
        # (close alone leaves the accept blocked: it then answered a later test's connections)
        listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        serving.join(5)
    assert live == ((1, 0), "ok")
    with forkpoint.replay(rec.session_path):
        assert asyncio.run(get()) == live


@pytest.mark.parametrize("stream", [False, True])
def test_a_body_shorter_than_its_content_length_fails_on_replay_as_it_did_live(
    stream: bool, store: Path
) -> None:
    """10 bytes of a Content-Length of 100, then the connection closed: requests raised
    ChunkedEncodingError live (urllib3's IncompleteRead, raised after the last read), but the call
    was recorded as a complete 200 and the replay handed over the 10 bytes, "replay ok"."""

    def cut_short(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\nonly ten b"
            )
            conn.shutdown(socket.SHUT_RDWR)

    listener, serving = _serving(cut_short)
    port = listener.getsockname()[1]

    def fetch() -> str:
        try:
            r = requests.get(f"http://127.0.0.1:{port}/file", stream=stream, timeout=5)
            return repr(b"".join(r.iter_content(4)) if stream else r.content)
        except requests.RequestException as exc:
            return type(exc).__name__

    try:
        with forkpoint.record(store=store) as rec:
            live = fetch()
    finally:
        listener.shutdown(socket.SHUT_RDWR)  # (wakes the accept: close alone leaves it blocked)
        listener.close()
        serving.join(5)
    assert live == "ChunkedEncodingError"
    (event,) = forkpoint.Session.load(rec.session_path).by_type("model_call")
    assert event["error"]["type"] == "IncompleteRead" and event["response"]["ended"] == "error"
    with forkpoint.replay(rec.session_path) as rp:
        assert fetch() == live
    assert rp.report()["reproduced"]


def test_a_gzip_body_the_client_does_not_decode_replays_encoded(server: LocalServer, store: Path) -> None:
    """urllib (http.client) never decodes, nor urllib3 with ``decode_content=False``: the body is
    stored decoded (readable, scrubbed), and a replay handed those clients the decoded bytes
    without the header, so the program's own ``gzip.decompress`` failed. They get it encoded
    again (bytes that decode to the same), with its Content-Encoding."""
    url = server.url + "/x?kind=json&encoding=gzip"
    pool = urllib3.PoolManager()

    def run() -> list[Any]:
        with urllib.request.urlopen(url, timeout=5) as r:
            plain = (r.headers["Content-Encoding"], json.loads(gzip.decompress(r.read()))["path"])
        raw = pool.request("GET", url, decode_content=False)
        decoded = pool.request("GET", url).json()["path"]
        return [plain, json.loads(gzip.decompress(raw.data))["path"], decoded]

    with forkpoint.record(store=store) as rec:
        live = run()
    server.stop()
    assert live == [("gzip", "/x"), "/x", "/x"]
    events = forkpoint.Session.load(rec.session_path).by_type("model_call")
    assert all(
        e["response"]["decoded_from"] == ["gzip"] and e["response"]["body"]["path"] == "/x" for e in events
    )
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    assert rp.report()["reproduced"]


def test_an_x_gzip_body_is_stored_decoded_and_scrubbed_as_a_gzip_one_is(
    server: LocalServer, store: Path
) -> None:
    """x-gzip is gzip (RFC 9110), and urllib3 decodes it: such a body was stored still compressed (as
    bytes), out of the scrubber's reach, a key in it kept. It is stored decoded and scrubbed now,
    and a replay encodes it again for a client that reads it raw."""
    key = "sk-proj-Q7pVbX2mK9wLz4RtY8uN3cJ6hF1dS5gA0eIoP"
    body = gzip.compress(json.dumps({"text": f"key {key}"}).encode())
    server.route(
        "/xg", lambda _r: Reply(body, ctype="application/json", headers=[("Content-Encoding", "x-gzip")])
    )
    pool = urllib3.PoolManager()

    def run() -> list[Any]:
        decoded = pool.request("GET", server.url + "/xg").json()["text"]
        raw = pool.request("GET", server.url + "/xg", decode_content=False)
        return [decoded, raw.headers.get("content-encoding"), json.loads(gzip.decompress(raw.data))["text"]]

    with forkpoint.record(store=store) as rec:
        assert run() == [f"key {key}", "x-gzip", f"key {key}"]
    server.stop()
    events = forkpoint.Session.load(rec.session_path).by_type("model_call")
    scrubbed = f"key {forkpoint.redact.placeholder('openai-key', key)}"
    assert [(e["response"]["body"], e["response"]["decoded_from"]) for e in events] == [
        ({"text": scrubbed}, ["x-gzip"])
    ] * 2
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == [scrubbed, "x-gzip", scrubbed]
    assert rp.report()["reproduced"]


#: The libraries whose program gets a body under a coding it does not decode still compressed (httpx2
#: without zstd where backports.zstd is missing).
_RAW_READERS = ("httpx", "httpx-async", "httpx2", "aiohttp")


def _fetch(library: str, url: str) -> bytes:
    """The body of a GET as the program gets it from ``library`` (its default decoding)."""
    if library in ("httpx", "httpx2"):
        return importlib.import_module(library).get(url).content

    async def run() -> bytes:
        if library == "httpx-async":
            async with httpx.AsyncClient() as c:
                return (await c.get(url)).content
        async with aiohttp.ClientSession() as s, s.get(url) as r:
            return await r.read()

    return asyncio.run(run())


def _opened(data: bytes) -> tuple[int, Any]:
    """(how many content codings ``data`` was still under, the JSON under them)."""
    for layers in range(4):
        try:
            return layers, json.loads(data)
        except ValueError:
            pass
        for decode in (gzip.decompress, zlib.decompress, brotli.decompress, zstandard.decompress):
            try:
                data = decode(data)
                break
            except Exception:  # not this coding
                continue
    raise AssertionError(f"not JSON under gzip, deflate, br or zstd: {data[:40]!r}")


def _layered(data: bytes, coding: str) -> bytes:
    """``data`` under ``coding`` (a ``Content-Encoding`` value, codings in the order applied)."""
    for c in coding.split(","):
        data = compress(data, {"x-gzip": "gzip"}.get(c.strip(), c.strip()))
    return data


@pytest.mark.parametrize("coding", ["x-gzip", "gzip, x-gzip", "gzip, gzip", "deflate", "br", "zstd"])
@pytest.mark.parametrize("library", _RAW_READERS)
def test_a_secret_in_a_body_under_a_coding_the_client_does_not_decode_is_scrubbed(
    library: str, coding: str, server: LocalServer, store: Path
) -> None:
    """httpx does not decode x-gzip (nor httpx2 zstd without backports.zstd), nor aiohttp x-gzip or
    two codings: the program got the body compressed, and it was stored so, a key in it kept in the
    session (base64 of gzip bytes). It is stored decoded and scrubbed now, and a replay hands the
    program the scrubbed body under the same codings, which it reads as it read the live one."""
    key = SECRETS["openai_proj"]
    body = _layered(json.dumps({"text": f"key {key} here"}).encode(), coding)
    server.route(
        "/c", lambda _r: Reply(body, ctype="application/json", headers=[("Content-Encoding", coding)])
    )
    if (library, coding) == ("aiohttp", "zstd") and not aiohttp.compression_utils.HAS_ZSTD:
        # An aiohttp without backports.zstd (this test extra's) refuses the body live, with a 400 of
        # its own: that failure is what is recorded, and raised again alike; the key is not stored.
        with forkpoint.record(store=store) as rec, pytest.raises(aiohttp.ClientResponseError) as live_error:
            _fetch(library, server.url + "/c")
        server.stop()
        assert live_error.value.status == 400 and "zstd" in live_error.value.message
        assert scan([rec.session_path])[1] == []
        with forkpoint.replay(rec.session_path) as rp, pytest.raises(aiohttp.ClientResponseError) as again:
            _fetch(library, server.url + "/c")
        assert (again.value.status, str(again.value)) == (400, str(live_error.value))
        assert rp.report()["reproduced"]
        return
    with forkpoint.record(store=store) as rec:
        live = _opened(_fetch(library, server.url + "/c"))
    server.stop()
    assert live[1] == {"text": f"key {key} here"}
    assert scan([rec.session_path])[1] == []
    with forkpoint.replay(rec.session_path) as rp:
        again = _opened(_fetch(library, server.url + "/c"))
    scrubbed = f"key {forkpoint.redact.placeholder('openai-key', key)} here"
    assert again == (live[0], {"text": scrubbed})
    assert rp.report()["reproduced"]


@pytest.mark.parametrize("coding", ["x-gzip", "gzip, x-gzip"])
@pytest.mark.parametrize("library", _RAW_READERS)
def test_a_body_under_a_coding_the_client_does_not_decode_replays_byte_for_byte(
    library: str, coding: str, server: LocalServer, store: Path
) -> None:
    """With nothing in it to scrub, such a body is kept as it came: the replay hands the program
    the very bytes it got live (compressed again, they would differ)."""
    body = _layered(json.dumps({"text": "nothing secret"}).encode(), coding)
    server.route(
        "/c", lambda _r: Reply(body, ctype="application/json", headers=[("Content-Encoding", coding)])
    )
    with forkpoint.record(store=store) as rec:
        live = _fetch(library, server.url + "/c")
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        assert _fetch(library, server.url + "/c") == live
    assert rp.report()["reproduced"]


def _gzipped_events(
    server: LocalServer, key: str, delay: float = 0.0, *, coding: str = "x-gzip", header_alone: bool = False
) -> list[bytes]:
    """Three server-sent events, ``key`` in the second, served at ``/s`` under ``coding`` (gzip), an
    event a chunk (each flushed, so that it decodes as it comes), the gzip header in a chunk of its
    own first when ``header_alone``: the events."""
    gz = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    events = [f"data: {i} key {key if i == 1 else 'none'} here\n\n".encode() for i in range(3)]
    pieces = [gz.compress(e) + gz.flush(zlib.Z_SYNC_FLUSH) for e in events]
    chunks = [*pieces[:-1], pieces[-1] + gz.flush()]
    if header_alone:
        chunks[:1] = [chunks[0][:10], chunks[0][10:]]
    server.route("/s", lambda _r: Stream(chunks, delay=delay, headers=[("Content-Encoding", coding)]))
    return events


@pytest.mark.parametrize("library", ["httpx", "aiohttp"])
def test_a_secret_in_a_stream_under_a_coding_the_client_does_not_decode_is_scrubbed(
    library: str, server: LocalServer, store: Path
) -> None:
    """Server-sent events under x-gzip, a key in one: stored decoded and scrubbed, and handed to the
    program on replay under x-gzip again (in one piece), as it got them live."""
    key = SECRETS["openai_proj"]
    events = _gzipped_events(server, key)
    with forkpoint.record(store=store) as rec:
        live = gzip.decompress(_fetch(library, server.url + "/s"))
    server.stop()
    assert live == b"".join(events)
    assert scan([rec.session_path])[1] == []
    with forkpoint.replay(rec.session_path) as rp:
        again = gzip.decompress(_fetch(library, server.url + "/s"))
    assert again == live.replace(key.encode(), forkpoint.redact.placeholder("openai-key", key).encode())
    assert rp.report()["reproduced"]


def _under_two_lines(server: LocalServer, text: str) -> bytes:
    """``{"text": text}`` served at ``/two`` under gzip twice, said on two ``Content-Encoding: gzip``
    lines: the body as sent."""
    body = _layered(json.dumps({"text": text}).encode(), "gzip, gzip")
    server.route(
        "/two",
        lambda _r: Reply(
            body,
            ctype="application/json",
            headers=[("Content-Encoding", "gzip"), ("Content-Encoding", "gzip")],
        ),
    )
    return body


@pytest.mark.parametrize("secret", [True, False])
def test_a_body_under_two_content_encoding_lines_aiohttp_decodes_once_is_scrubbed(
    secret: bool, server: LocalServer, store: Path
) -> None:
    """Two ``Content-Encoding: gzip`` lines: aiohttp takes one layer off (by one line) and hands the
    program the body still under gzip. forkpoint said both layers were decoded and stored the gzip
    bytes so, a key in them kept. The layer left is decoded to scrub it now, and a replay hands the
    program the scrubbed body under one gzip layer again (without a secret: the very bytes)."""
    key = SECRETS["openai_proj"]
    body = _under_two_lines(server, f"key {key if secret else 'none'} here")
    with forkpoint.record(store=store) as rec:
        live = _fetch("aiohttp", server.url + "/two")
    server.stop()
    assert live == gzip.decompress(body)
    assert scan([rec.session_path])[1] == []
    with forkpoint.replay(rec.session_path) as rp:
        again = _fetch("aiohttp", server.url + "/two")
    if secret:
        scrubbed = f"key {forkpoint.redact.placeholder('openai-key', key)} here"
        assert _opened(again) == (1, {"text": scrubbed})
    else:
        assert again == live
    assert rp.report()["reproduced"]


def _pieces(library: str, url: str) -> list[bytes]:
    """A streamed body as ``library`` hands it to the program, piece by piece, each piece decoded
    from gzip as it comes (httpx and aiohttp leave x-gzip to the program)."""
    gz = zlib.decompressobj(16 + zlib.MAX_WBITS)
    if library == "httpx":
        with httpx.stream("GET", url) as r:
            return [gz.decompress(p) for p in r.iter_bytes()]

    async def run() -> list[bytes]:
        async with aiohttp.ClientSession() as s, s.get(url) as r:
            return [gz.decompress(p) async for p in r.content.iter_any()]

    return asyncio.run(run())


@pytest.mark.parametrize("library", ["httpx", "aiohttp"])
def test_a_scrubbed_stream_under_a_coding_replays_chunk_by_chunk(
    library: str, server: LocalServer, store: Path
) -> None:
    """Server-sent events under x-gzip, a key in one, stored decoded and scrubbed: its replay handed
    the program the whole stream compressed in one piece, where it had read it live event by event
    (a program that shows each event as it comes saw one). Each recorded chunk comes as a piece of
    its own now, decodable as it comes."""
    key = SECRETS["openai_proj"]
    events = _gzipped_events(server, key, delay=0.05)
    with forkpoint.record(store=store) as rec:
        live = _pieces(library, server.url + "/s")
    server.stop()
    assert live == events
    with forkpoint.replay(rec.session_path) as rp:
        again = _pieces(library, server.url + "/s")
    placeholder = forkpoint.redact.placeholder("openai-key", key).encode()
    assert again == [e.replace(key.encode(), placeholder) for e in events]
    assert rp.report()["reproduced"]


def _two_lines_seen(library: str, url: str) -> list[Any]:
    """(the ``Content-Encoding`` lines of a GET's response as ``library`` shows them to the program,
    in its headers and, aiohttp, its raw headers; the body as it hands it over)."""
    if library == "httpx":
        r = httpx.get(url)
        return [r.headers.get_list("content-encoding"), None, r.content.hex()]

    async def run() -> list[Any]:
        async with aiohttp.ClientSession() as s, s.get(url) as r:
            raw = [v.decode() for k, v in r.raw_headers if k.lower() == b"content-encoding"]
            return [r.headers.getall("Content-Encoding"), raw, (await r.read()).hex()]

    return asyncio.run(run())


def two_lines_recorded_and_replayed(library: str, url: str, store: Path) -> list[Any]:
    """(what the program saw of a response under two ``Content-Encoding`` lines live, on replay,
    whether the replay reproduced the run), the body's key scrubbed for the comparison."""
    with forkpoint.record(store=store) as rec:
        live = _two_lines_seen(library, url)
    with forkpoint.replay(rec.session_path) as rp:
        again = _two_lines_seen(library, url)
    return [live, again, rp.report()["reproduced"]]


@pytest.mark.parametrize("library", ["httpx", "aiohttp", "aiohttp-python-parser"])
def test_two_content_encoding_lines_replay_as_two_lines(
    library: str, server: LocalServer, store: Path
) -> None:
    """Two ``Content-Encoding: gzip`` lines and a key in the body (stored decoded and scrubbed): the
    replay said the codings again on one line, ``gzip, gzip``, where the program had seen two (its
    headers and aiohttp's raw headers differed from live). The lines come back as they came, under
    aiohttp's C parser and its Python one (``AIOHTTP_NO_EXTENSIONS=1``) alike."""
    key = SECRETS["openai_proj"]
    _under_two_lines(server, f"key {key} here")
    url = server.url + "/two"
    if library == "aiohttp-python-parser":
        code = "import json, sys; from pathlib import Path; from tests.capture import test_libraries as t\n"
        code += (
            "print(json.dumps(t.two_lines_recorded_and_replayed('aiohttp', sys.argv[1], Path(sys.argv[2]))))"
        )
        env = {**os.environ, "AIOHTTP_NO_EXTENSIONS": "1"}
        done = subprocess.run(
            [sys.executable, "-c", code, url, str(store)],
            capture_output=True,
            text=True,
            env=env,
            cwd=Path(__file__).parents[2],
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        live, again, reproduced = json.loads(done.stdout.splitlines()[-1])
    else:
        live, again, reproduced = two_lines_recorded_and_replayed(library, url, store)
    assert live[:2] == [["gzip", "gzip"], None if library == "httpx" else ["gzip", "gzip"]]
    assert again[:2] == live[:2]
    opened = [_opened(bytes.fromhex(seen[2])) for seen in (live, again)]
    scrubbed = f"key {forkpoint.redact.placeholder('openai-key', key)} here"
    assert opened == [(0 if library == "httpx" else 1, {"text": t}) for t in (f"key {key} here", scrubbed)]
    assert reproduced


@pytest.mark.parametrize("library", ["httpx", "aiohttp"])
def test_a_stream_piece_that_decodes_to_nothing_is_replayed_as_a_piece(
    library: str, server: LocalServer, store: Path
) -> None:
    """Server-sent events under x-gzip, a key in one, the gzip header arriving alone in the first
    chunk: it decodes to nothing, and the recording dropped it, so the replay handed the program one
    piece fewer than it read live. It is kept, and replayed as a piece that decodes to nothing."""
    key = SECRETS["openai_proj"]
    events = _gzipped_events(server, key, delay=0.05, header_alone=True)
    with forkpoint.record(store=store) as rec:
        live = _pieces(library, server.url + "/s")
    server.stop()
    assert live == [b"", *events]
    with forkpoint.replay(rec.session_path) as rp:
        again = _pieces(library, server.url + "/s")
    placeholder = forkpoint.redact.placeholder("openai-key", key).encode()
    assert again == [e.replace(key.encode(), placeholder) for e in live]
    assert rp.report()["reproduced"]


def _pieces_read_raw(reader: str, url: str, coding: str | None = "gzip") -> list[bytes]:
    """A streamed body as a program reading it raw gets it, piece by piece, each piece decoded from
    gzip (its ``coding``, or None) by the program as it comes: httpx's ``iter_raw()``, an aiohttp
    session that does not decompress, ``urllib.request`` (which never decodes)."""
    gz = zlib.decompressobj(16 + zlib.MAX_WBITS)
    opened: Callable[[bytes], bytes] = gz.decompress if coding else bytes
    if reader == "httpx":
        with httpx.stream("GET", url) as r:
            return [opened(p) for p in r.iter_raw()]
    if reader == "urllib":
        with urllib.request.urlopen(url, timeout=10) as resp:
            return [opened(p) for p in iter(lambda: resp.read1(1 << 16), b"")]

    async def run() -> list[bytes]:
        async with aiohttp.ClientSession(auto_decompress=False) as s, s.get(url) as r:
            return [opened(p) async for p in r.content.iter_any()]

    return asyncio.run(run())


@pytest.mark.parametrize("reader", ["httpx", "aiohttp", "urllib"])
def test_a_stream_under_gzip_read_raw_replays_under_gzip(
    reader: str, server: LocalServer, store: Path
) -> None:
    """Server-sent events under gzip (a coding httpx and aiohttp decode), read raw, the gzip header
    arriving alone: stored decoded, the stream was replayed decoded and without its header, so the
    program read plain text where it had read gzip (its own gzip.decompress failed) and the replay
    said "reproduced". It comes under gzip again, chunk by chunk, as many pieces as live."""
    events = _gzipped_events(server, "nothing", delay=0.05, coding="gzip", header_alone=True)
    with forkpoint.record(store=store) as rec:
        live = _pieces_read_raw(reader, server.url + "/s")
    server.stop()
    assert live == [b"", *events]
    with forkpoint.replay(rec.session_path) as rp:
        assert _pieces_read_raw(reader, server.url + "/s") == live
    assert rp.report()["reproduced"]


@pytest.mark.parametrize("library", ["httpx", "aiohttp", "urllib"])
def test_a_stream_chunk_scrubbed_to_nothing_does_not_end_the_replayed_body(
    library: str, server: LocalServer, store: Path
) -> None:
    """A key split over three chunks of an event stream, the middle one all key: scrubbed, that
    chunk was stored empty (as a session recorded before such a chunk kept a byte of what followed
    holds it). A replay must hand over every chunk after it (an empty HTTP chunk ends a chunked
    body, and an empty piece ends aiohttp's reader), and its verdict names the piece it cannot."""
    key = SECRETS["openai_proj"]
    chunks = [b"data: key " + key[:20].encode(), key[20:].encode(), b" here\n\ndata: two\n\n"]
    server.route("/s", lambda _r: Stream(chunks, delay=0.05))
    with forkpoint.record(store=store) as rec:
        live = b"".join(_pieces_read_raw(library, server.url + "/s", coding=None))
    server.stop()
    assert live == b"".join(chunks)
    session = _middle_chunk_emptied(rec.session_path)
    with forkpoint.replay(session) as rp:
        again = b"".join(_pieces_read_raw(library, server.url + "/s", coding=None))
    assert again == live.replace(key.encode(), forkpoint.redact.placeholder("openai-key", key).encode())
    (event,) = forkpoint.Session.load(session).by_type("model_call")
    assert rp.report()["reproduced"] and rp.report()["pieces_lost"] == [{"seq": event["seq"], "pieces": 1}]


def _rewritten(session: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of ``session``, in its store, each model call changed by ``change`` (as an older
    forkpoint wrote it)."""
    old = forkpoint.Session.load(session)
    header = {k: v for k, v in old.header.items() if k not in ("type", "session_id", "hash")}
    writer = SessionWriter.create(session.parent, header, fsync="never")
    for e in old.events:
        e = {k: v for k, v in e.items() if k not in ("seq", "prev", "hash")}
        if e["type"] == "model_call":
            change(e)
        writer.append(e)
    writer.close()
    return writer.path


def _middle_chunk_emptied(session: Path) -> Path:
    """A copy of ``session``, in its store, its stream's second chunk empty, its byte given back to
    the third (as forkpoint stored a chunk a secret filled before it kept a byte of what followed)."""

    def emptied(e: dict[str, Any]) -> None:
        (t0, c0), (t1, c1), (t2, c2), *rest = e["response"]["chunks"]
        e["response"] = {**e["response"], "chunks": [[t0, c0], [t1, ""], [t2, c1 + c2], *rest]}

    return _rewritten(session, emptied)


@pytest.mark.parametrize("library", ["httpx", "httpx-text", "aiohttp", "urllib"])
def test_a_stream_chunk_a_secret_fills_is_replayed_as_a_piece_of_its_own(
    library: str, server: LocalServer, store: Path
) -> None:
    """The middle of three chunks all key, the key begun in the first: scrubbed, the placeholder
    went into the first and the middle chunk was stored empty, which no HTTP library hands a
    program. Live it read three pieces, replayed two, and the replay said it reproduced the run.
    The chunk keeps a byte of what replaced the key now: as many pieces as live, the placeholder
    whole in them."""
    key = SECRETS["openai_proj"]
    chunks = [b"data: key " + key[:20].encode(), key[20:].encode(), b" here\n\ndata: two\n\n"]
    server.route("/s", lambda _r: Stream(chunks, delay=0.05))

    def read() -> list[bytes]:
        if library == "httpx-text":
            with httpx.stream("GET", server.url + "/s") as r:
                return [t.encode() for t in r.iter_text()]
        return _pieces_read_raw(library, server.url + "/s", coding=None)

    with forkpoint.record(store=store) as rec:
        live = read()
    server.stop()
    assert live == chunks
    (event,) = forkpoint.Session.load(rec.session_path).by_type("model_call")
    assert all(c for _, c in event["response"]["chunks"]), event["response"]["chunks"]
    with forkpoint.replay(rec.session_path) as rp:
        again = read()
    placeholder = forkpoint.redact.placeholder("openai-key", key).encode()
    assert len(again) == len(live) and all(again), again
    assert b"".join(again) == b"".join(live).replace(key.encode(), placeholder)
    # (the placeholder whole in one chunk: the verdict still says the program was handed it)
    assert rp.report()["reproduced"] and rp.report()["placeholders_served"] == [event["seq"]]


def test_a_stream_chunk_emptied_with_nothing_after_it_is_said_in_the_verdict(
    server: LocalServer, store: Path
) -> None:
    """The last chunk of a stream all key, the key begun in the one before: nothing follows to give
    it a byte, so it is stored empty and the replay hands the program one piece fewer than it read
    live. The verdict said "replay ok" of it; it says the pieces it could not hand back now."""
    key = SECRETS["openai_proj"]
    chunks = [b"data: key " + key[:20].encode(), key[20:].encode()]
    server.route("/s", lambda _r: Stream(chunks, delay=0.05))
    with forkpoint.record(store=store) as rec:
        live = _pieces_read_raw("httpx", server.url + "/s", coding=None)
    server.stop()
    assert live == chunks
    (event,) = forkpoint.Session.load(rec.session_path).by_type("model_call")
    assert [c for _, c in event["response"]["chunks"]][1] == ""
    with forkpoint.replay(rec.session_path) as rp:
        assert len(_pieces_read_raw("httpx", server.url + "/s", coding=None)) == 1
    report = rp.report()
    assert report["pieces_lost"] == [{"seq": event["seq"], "pieces": 1}], report
    line = summary_line(report)
    assert (
        line.startswith("replay ok, but ")
        and (
            f"1 stream piece the recording holds empty (a chunk a scrubbed secret filled) was not handed to "
            f"the program, which read it live (seq {event['seq']})"
        )
        in line
    ), line


@pytest.mark.parametrize("library", ["httpx", "httpx2"])
@pytest.mark.parametrize("made", ["content", "read_stream"])
def test_a_response_a_mock_transport_read_already_is_stored_decoded_like_any_other(
    library: str, made: str, store: Path
) -> None:
    """A ``MockTransport`` handler answering gzip bytes under ``Content-Encoding: gzip``: httpx reads
    (and decodes) such a response before the client sees it, and the recording stored what it had
    decoded under the gzip header, so the replay handed plain JSON as gzip and httpx failed
    ("incorrect header check") where the program had read JSON live. The body is stored as any
    encoded body is: decoded, scrubbed, without its header; the replay hands the same JSON."""
    mod = importlib.import_module(library)
    key = SECRETS["openai_proj"]
    sent = json.dumps({"text": f"key {key}"}).encode()

    def answer(_request: Any) -> Any:
        headers = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        if made == "content":
            return mod.Response(200, content=gzip.compress(sent), headers=headers)
        response = mod.Response(200, content=iter([gzip.compress(sent)]), headers=headers)
        response.read()  # (its stream is spent: only the decoded content is left)
        return response

    def ask() -> Any:
        with mod.Client(transport=mod.MockTransport(answer)) as client:
            return client.post("http://127.0.0.1:9/v1/chat/completions", json={"model": "m"}).json()

    with forkpoint.record(store=store) as rec:
        assert ask() == {"text": f"key {key}"}
    assert scan([rec.session_path])[1] == []
    (event,) = forkpoint.Session.load(rec.session_path).by_type("model_call")
    response = event["response"]
    placeholder = forkpoint.redact.placeholder("openai-key", key)
    assert response["body"] == {"text": f"key {placeholder}"} and response["decoded_from"] == ["gzip"], (
        response
    )
    assert not [v for k, v in response["headers"] if k.lower() == "content-encoding"], response
    with forkpoint.replay(rec.session_path) as rp:
        assert ask() == {"text": f"key {placeholder}"}
    assert rp.report()["reproduced"], summary_line(rp.report())


@functools.cache
def _zeros_gzipped(size: int) -> bytes:
    """``size`` zero bytes under gzip (a thousandth of that), made without holding them."""
    gz = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    return b"".join([*(gz.compress(zeros) for _ in range(size >> 20)), gz.flush()])


def _peak_while(run: Callable[[], Any]) -> tuple[Any, int]:
    """(what ``run()`` returns, the most memory Python held while it ran, in bytes)."""
    tracemalloc.start()
    try:
        return run(), tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
@pytest.mark.parametrize("library", ["httpx", "aiohttp"])
def test_a_compression_bomb_the_program_never_opens_is_not_inflated_by_its_recording(
    library: str, server: LocalServer, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """200 MB of zeros under x-gzip (200 KB), which httpx and aiohttp hand the program compressed:
    forkpoint inflated all of it in the program's memory, to scrub it. It stops past DECODED_MAX
    now, says so naming the call, stores none of the body (it could not scrub it), and the replay
    stops at the call; the program's live read is the bytes that came."""
    bomb = _zeros_gzipped(200 << 20)
    server.route(
        "/bomb", lambda _r: Reply(bomb, ctype="application/json", headers=[("Content-Encoding", "x-gzip")])
    )
    with forkpoint.record(store=store) as rec:
        live, peak = _peak_while(lambda: _fetch(library, server.url + "/bomb"))
    server.stop()
    assert live == bomb
    assert peak < 2.5 * DECODED_MAX  # (at most the limit, and a copy of it; 200 MB, twice, before)
    said = " ".join(capsys.readouterr().err.split())
    assert (
        f"forkpoint: WARNING: GET {server.url}/bomb: its response body, under Content-Encoding x-gzip, "
        f"decodes to more than {DECODED_MAX} bytes"
    ) in said
    (event,) = forkpoint.Session.load(rec.session_path).by_type("model_call")
    assert event["response"]["body_kind"] == "empty" and "cannot scrub it" in event["response"]["withheld"]
    assert sum(f.stat().st_size for f in rec.session_path.rglob("*") if f.is_file()) < 64 << 10
    with forkpoint.replay(rec.session_path) as rp:
        with pytest.raises(forkpoint.Divergence, match="decodes to more than"):
            _fetch(library, server.url + "/bomb")
    assert not rp.report()["reproduced"]


@pytest.mark.slow
@pytest.mark.parametrize("decode", [True, False])
def test_a_body_urllib3_inflates_for_the_program_is_recorded_past_the_limit(
    decode: bool, server: LocalServer, store: Path
) -> None:
    """urllib3 (under requests) inflates a gzip body for the program itself: past DECODED_MAX the
    recording kept none of such a download, and its replay stopped there, though the program held it
    whole anyway. It is recorded whole and replayed; read raw (``decode_content=False``), it is the
    bomb the program never opens, and forkpoint stops there."""
    size = DECODED_MAX + (1 << 20)
    body = _zeros_gzipped(size)
    server.route(
        "/big",
        lambda _r: Reply(body, ctype="application/octet-stream", headers=[("Content-Encoding", "gzip")]),
    )

    def get() -> bytes:
        with urllib3.PoolManager() as pool:
            return bytes(pool.request("GET", server.url + "/big", decode_content=decode).data)

    with forkpoint.record(store=store) as rec:
        live = get()
    server.stop()
    assert live == (bytes(size) if decode else body)
    (event,) = forkpoint.Session.load(rec.session_path).by_type("model_call")
    assert ("withheld" in event["response"]) is not decode
    with forkpoint.replay(rec.session_path) as rp:
        if decode:
            assert get() == live
        else:
            with pytest.raises(forkpoint.Divergence, match="decodes to more than"):
                get()
    assert rp.report()["reproduced"] is decode


def _httpx_body(library: str, url: str, *, raw: bool) -> bytes:
    """The body of a GET as ``library`` (httpx, httpx2, or httpx's async client) hands it to the
    program: ``raw``, as it came (``iter_raw()``, ``aiter_raw()``), else decoded by the library."""
    if library != "httpx-async":
        with importlib.import_module(library).Client() as c, c.stream("GET", url) as r:
            return b"".join(r.iter_raw() if raw else r.iter_bytes())

    async def run() -> bytes:
        async with httpx.AsyncClient() as c, c.stream("GET", url) as r:
            return b"".join([p async for p in (r.aiter_raw() if raw else r.aiter_bytes())])

    return asyncio.run(run())


@pytest.mark.slow
@pytest.mark.parametrize("library", ["httpx", "httpx-async", "httpx2"])
def test_a_compression_bomb_httpx_hands_over_raw_is_not_inflated_by_its_recording(
    library: str, server: LocalServer, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """200 MB of zeros under gzip (a coding httpx decodes), read with ``iter_raw()``: httpx never
    inflated it, but forkpoint did, whole, in the program's memory, to scrub it (with httpx's own
    decoders, which have no limit). It stops past DECODED_MAX now, says so naming the call, stores
    none of the body, and the replay stops at the call."""
    bomb = _zeros_gzipped(200 << 20)
    server.route(
        "/bomb", lambda _r: Reply(bomb, ctype="application/json", headers=[("Content-Encoding", "gzip")])
    )
    with forkpoint.record(store=store) as rec:
        live, peak = _peak_while(lambda: _httpx_body(library, server.url + "/bomb", raw=True))
    server.stop()
    assert live == bomb
    assert peak < 2.5 * DECODED_MAX
    said = " ".join(capsys.readouterr().err.split())
    assert (
        f"forkpoint: WARNING: GET {server.url}/bomb: its response body, under Content-Encoding gzip" in said
    )
    (event,) = forkpoint.Session.load(rec.session_path).by_type("model_call")
    assert event["response"]["body_kind"] == "empty" and "cannot scrub it" in event["response"]["withheld"]
    with forkpoint.replay(rec.session_path) as rp:
        with pytest.raises(forkpoint.Divergence, match="decodes to more than"):
            _httpx_body(library, server.url + "/bomb", raw=True)
    assert not rp.report()["reproduced"]


@pytest.mark.slow
@pytest.mark.parametrize("library", ["httpx", "httpx-async", "httpx2"])
def test_a_body_httpx_inflates_for_the_program_is_recorded_past_the_limit(
    library: str, server: LocalServer, store: Path
) -> None:
    """A gzip body past DECODED_MAX that httpx inflates for the program (``iter_bytes()``): the
    program holds it whole anyway, so it is recorded whole and replayed, as urllib3's is."""
    size = DECODED_MAX + (1 << 20)
    body = _zeros_gzipped(size)
    server.route(
        "/big",
        lambda _r: Reply(body, ctype="application/octet-stream", headers=[("Content-Encoding", "gzip")]),
    )
    with forkpoint.record(store=store) as rec:
        live = _httpx_body(library, server.url + "/big", raw=False)
    server.stop()
    assert live == bytes(size)
    (event,) = forkpoint.Session.load(rec.session_path).by_type("model_call")
    assert "withheld" not in event["response"]
    with forkpoint.replay(rec.session_path) as rp:
        assert _httpx_body(library, server.url + "/big", raw=False) == live
    assert rp.report()["reproduced"]


@pytest.mark.slow
def test_a_compressed_request_body_past_the_limit_is_not_inflated_by_its_recording(
    server: LocalServer, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A request body sent under gzip is stored decoded: forkpoint inflated it whatever its size.
    Past DECODED_MAX it stops, says so naming the call, and stores none of the body, only its digest:
    the replay serves the same body sent again."""
    bomb = _zeros_gzipped(200 << 20)
    server.route("/up", lambda _r: Reply(b'{"ok": true}', ctype="application/json"))

    def post() -> Any:
        headers = {"content-type": "application/octet-stream", "content-encoding": "gzip"}
        return httpx.post(server.url + "/up", content=bomb, headers=headers).json()

    with forkpoint.record(store=store) as rec:
        live, peak = _peak_while(post)
    server.stop()
    assert live == {"ok": True} and peak < 2.5 * DECODED_MAX
    said = " ".join(capsys.readouterr().err.split())
    assert f"forkpoint: WARNING: POST {server.url}/up: its request body, under Content-Encoding gzip" in said
    assert "did not store it; only its digest: a replay matches the same bytes sent again" in said
    (event,) = forkpoint.Session.load(rec.session_path).by_type("model_call")
    assert event["request"]["body_kind"] == "empty" and "cannot scrub it" in event["request"]["withheld"]
    with forkpoint.replay(rec.session_path) as rp:
        assert post() == {"ok": True}
    assert rp.report()["reproduced"]


def _post_gzipped(url: str, body: bytes) -> Any:
    """POST ``body`` (bytes already under gzip) with its ``Content-Encoding``; the JSON answer."""
    headers = {"content-type": "application/octet-stream", "content-encoding": "gzip"}
    return httpx.post(url, content=body, headers=headers).json()


def _gzip_past_limit(mtime: int) -> bytes:
    """Zeros past DECODED_MAX under gzip with ``mtime`` in its header (as ``gzip.compress`` writes
    the time it ran: a program compressing the same body again sends other bytes)."""
    raw = _zeros_gzipped(DECODED_MAX + (1 << 20))
    return raw[:4] + mtime.to_bytes(4, "little") + raw[8:]


@pytest.mark.slow
def test_a_withheld_request_body_sent_again_is_matched_by_its_digest(
    server: LocalServer, store: Path
) -> None:
    """A request body past DECODED_MAX is not stored, so every replay of the call diverged, even one
    that sent the very same bytes. Its SHA-256 (of the bytes as sent, gzip's timestamp read as zero),
    length and codings are stored now: the same body sent again (compressed at another time) is
    matched and served; another body is a divergence whose diff names the digest."""
    server.route("/up", lambda _r: Reply(b'{"ok": true}', ctype="application/json"))
    sent = _gzip_past_limit(mtime=1)
    with forkpoint.record(store=store) as rec:
        assert _post_gzipped(server.url + "/up", sent) == {"ok": True}
    server.stop()
    (event,) = forkpoint.Session.load(rec.session_path).by_type("model_call")
    zeroed = sent[:4] + bytes(4) + sent[8:]
    assert event["request"]["withheld_digest"] == {
        "sha256": hashlib.sha256(zeroed).hexdigest(),
        "length": len(sent),
        "codings": ["gzip"],
    }
    with forkpoint.replay(rec.session_path) as rp:
        assert _post_gzipped(server.url + "/up", _gzip_past_limit(mtime=2)) == {"ok": True}
    assert rp.report()["reproduced"], summary_line(rp.report())
    other = _zeros_gzipped(DECODED_MAX + (2 << 20))
    with forkpoint.replay(rec.session_path) as rp:
        with pytest.raises(forkpoint.Divergence, match="no recorded request has the same match key"):
            _post_gzipped(server.url + "/up", other)
    div = rp.report()["divergence"]
    assert not rp.report()["reproduced"] and div["diff_against"] == event["seq"]
    changed = {c["path"]: (c.get("expected"), c.get("actual")) for c in div["diff"]}
    assert changed["$.body['$withheld'].length"] == (len(sent), len(other)), div["diff"]


@pytest.mark.slow
def test_a_replay_matching_a_withheld_body_by_its_digest_says_so_once_as_a_replay_fact(
    server: LocalServer, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replay matched a withheld request body by its digest and said the recording's warning
    again ("forkpoint stopped decoding it there ... did not store it"), as if it were recording. It
    stores nothing: its verdict names the call matched by its digest, once, and stderr is quiet."""
    server.route("/up", lambda _r: Reply(b'{"ok": true}', ctype="application/json"))
    sent = _gzip_past_limit(mtime=1)
    with forkpoint.record(store=store) as rec:
        _post_gzipped(server.url + "/up", sent)
    server.stop()
    assert "did not store it" in capsys.readouterr().err
    (event,) = forkpoint.Session.load(rec.session_path).by_type("model_call")
    with forkpoint.replay(rec.session_path) as rp:
        assert _post_gzipped(server.url + "/up", sent) == {"ok": True}
    said = capsys.readouterr().err
    assert "forkpoint" not in said, said
    report = rp.report()
    assert report["reproduced"] and report["digest_matched"] == [event["seq"]], report
    line = summary_line(report)
    assert line.startswith("replay ok:"), line
    assert line.endswith(
        f"; 1 request whose body was not stored when recorded (too large to scrub) matched by the body's digest: "
        f"seq {event['seq']}"
    ), line


@pytest.mark.slow
def test_a_withheld_request_body_a_replay_sends_live_is_said_as_it_is_recorded(
    server: LocalServer, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replay that goes live past a divergence records its calls: one whose request body is past
    the limit is said as a recording says it (a replay that serves the call says nothing)."""
    server.route("/up", lambda _r: Reply(b'{"ok": true}', ctype="application/json"))
    with forkpoint.record(store=store) as rec:
        _post_gzipped(server.url + "/up", _gzip_past_limit(mtime=1))
    capsys.readouterr()
    with forkpoint.replay(rec.session_path, on_divergence="live"):
        assert _post_gzipped(server.url + "/up", _zeros_gzipped(DECODED_MAX + (2 << 20))) == {"ok": True}
    said = " ".join(capsys.readouterr().err.split())
    assert said.count("did not store it") == 1, said
    assert (
        f"forkpoint: WARNING: POST {server.url}/up: its request body, under Content-Encoding gzip" in said
    ), said


@pytest.mark.slow
def test_a_call_whose_request_and_response_were_withheld_still_diverges(
    server: LocalServer, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The request body matched by its digest, a response body that was withheld too leaves nothing
    to hand back: the replay stops there, saying the response was not stored and why. The end of
    the recording, which listed what it lacked but not such bodies, names both, and so does
    ``forkpoint show``."""
    bomb = _zeros_gzipped(DECODED_MAX + (1 << 20))
    server.route(
        "/both", lambda _r: Reply(bomb, ctype="application/json", headers=[("Content-Encoding", "x-gzip")])
    )

    def post() -> bytes:
        headers = {"content-type": "application/octet-stream", "content-encoding": "gzip"}
        return httpx.post(server.url + "/both", content=bomb, headers=headers).content

    with forkpoint.record(store=store) as rec:
        assert post() == bomb
        capsys.readouterr()  # (the warnings said as the call ended)
    server.stop()
    session = forkpoint.Session.load(rec.session_path)
    (event,) = session.by_type("model_call")
    assert "withheld_digest" in event["request"] and "withheld" in event["response"]
    # The end of the recording lists what it lacks: the withheld bodies too, each call and why.
    said = " ".join(capsys.readouterr().err.split())
    seq = event["seq"]
    assert (
        f"forkpoint: WARNING: 2 bodies of calls were not stored (withheld): seq {seq} POST /both: its request "
        f"body, under Content-Encoding gzip, decodes to more than {DECODED_MAX} bytes"
    ) in said, said
    assert f"; seq {seq} POST /both: its response body, under Content-Encoding x-gzip" in said, said
    # (as `forkpoint record` says it, from its processes' tallies or the session read back)
    merged = Lacks.merged([json.loads(json.dumps(rec.lacks.to_json()))], 1)
    assert merged is not None and merged.warnings() == rec.lacks.warnings()
    assert recording_warnings(rec.session_path) == rec.lacks.warnings()
    out = io.StringIO()
    render(session, Console(file=out, width=300, highlight=False))
    shown = out.getvalue()
    assert f"request body NOT STORED: {event['request']['withheld']}" in shown, shown
    assert f"response body NOT STORED: {event['response']['withheld']}" in shown, shown
    with forkpoint.replay(rec.session_path) as rp:
        with pytest.raises(forkpoint.Divergence, match="its response body.*the recording cannot serve it"):
            post()
    assert not rp.report()["reproduced"]
    # (the verdict called the HTTP exchange it served nothing a tool call)
    said = summary_line(rp.report())
    assert f"as what was recorded could not be handed back: 1 call (seq {seq})" in said, said


@pytest.mark.slow
def test_a_withheld_request_body_is_not_answered_by_an_empty_ones_recording(
    server: LocalServer, store: Path
) -> None:
    """A withheld body was keyed as no body at all: a replay that sent one where the recording had
    sent an empty body was served that call's answer, and said it reproduced the run."""
    server.route("/up", lambda _r: Reply(b'{"ok": true}', ctype="application/json"))
    with forkpoint.record(store=store) as rec:
        httpx.post(server.url + "/up", content=b"", headers={"content-type": "application/octet-stream"})
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        with pytest.raises(forkpoint.Divergence, match="no recorded request has the same match key"):
            _post_gzipped(server.url + "/up", _gzip_past_limit(mtime=0))
    assert not rp.report()["reproduced"]


def _as_recorded_before_digests(session: Path) -> Path:
    """A copy of ``session``, in its store, as forkpoint wrote it before a withheld request body had
    its digest: none, and the match keys computed without."""

    def undigested(e: dict[str, Any]) -> None:
        e["request"] = {k: v for k, v in e["request"].items() if k != "withheld_digest"}
        e["key"] = event_key(e)

    return _rewritten(session, undigested)


@pytest.mark.slow
def test_a_withheld_request_recorded_without_a_digest_diverges_as_it_did(
    server: LocalServer, store: Path
) -> None:
    """A session recorded before withheld request bodies had a digest: its replay stops at the call,
    saying the body was withheld, as it did (not as a request that matches nothing)."""
    server.route("/up", lambda _r: Reply(b'{"ok": true}', ctype="application/json"))
    sent = _gzip_past_limit(mtime=0)
    with forkpoint.record(store=store) as rec:
        _post_gzipped(server.url + "/up", sent)
    server.stop()
    session = _as_recorded_before_digests(rec.session_path)
    (event,) = forkpoint.Session.load(session).by_type("model_call")
    assert "withheld" in event["request"] and "withheld_digest" not in event["request"]
    with forkpoint.replay(session) as rp:
        with pytest.raises(forkpoint.Divergence, match="its request body.*the recording cannot serve it"):
            _post_gzipped(server.url + "/up", sent)
    assert rp.report()["unservable"] == [event["seq"]], rp.report()


@pytest.mark.slow
def test_a_compression_bomb_in_an_imported_cassette_is_not_inflated_by_the_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A VCR.py cassette whose response is 200 MB of zeros under gzip (200 KB, ``!!binary``): the
    import inflated all of it, to store it decoded. It stops past DECODED_MAX now, as a recording
    does: says so naming the interaction, stores none of the body (``withheld``), and the replay
    stops at the call."""
    url = "http://127.0.0.1:9/bomb"
    response = {
        "status": {"code": 200, "message": "OK"},
        "headers": {"Content-Type": ["application/json"], "Content-Encoding": ["gzip"]},
        "body": {"string": "@GZIP@"},
    }
    request = {"method": "GET", "uri": url, "headers": {}, "body": None}
    cassette = yaml.safe_dump({"version": 1, "interactions": [{"request": request, "response": response}]})
    path = tmp_path / "bomb.yaml"
    b64 = base64.b64encode(_zeros_gzipped(200 << 20)).decode()
    path.write_text(cassette.replace("'@GZIP@'", "!!binary |\n          " + b64))
    session, peak = _peak_while(lambda: import_file(path, store=tmp_path / "store"))
    assert peak < 2.5 * DECODED_MAX
    said = " ".join(capsys.readouterr().err.split())
    assert (
        f"forkpoint: WARNING: {path}: interaction 1: its response body, under Content-Encoding gzip, "
        f"decodes to more than {DECODED_MAX} bytes"
    ) in said
    (event,) = forkpoint.Session.load(session).by_type("model_call")
    assert event["response"]["body_kind"] == "empty" and "cannot scrub it" in event["response"]["withheld"]
    with forkpoint.replay(session) as rp:
        with pytest.raises(forkpoint.Divergence, match="decodes to more than"):
            urllib.request.urlopen(url)
    assert not rp.report()["reproduced"]


class _Brotli11:
    """brotli 1.1's Decompressor: ``process`` with no output limit."""

    made = brotli.Decompressor  # (the real one, before a test puts this class in its place)

    def __init__(self) -> None:
        self._inner = self.made()

    def process(self, data: bytes) -> bytes:
        return bytes(self._inner.process(data))


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "br-1.1", "zstd"])
def test_forkpoints_own_decoders_stop_past_their_limit(coding: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each of forkpoint's own decoders raises TooLarge once its output passes DECODED_MAX, fed the
    body whole or in pieces (brotli before 1.2, which has no output limit, too); a body under it
    decodes whole."""
    if coding == "br-1.1":
        monkeypatch.setattr(brotli, "Decompressor", _Brotli11)
        coding = "br"
    data = b"".join(encoded([bytes(DECODED_MAX + 1)], [coding]) or [])
    for pieces in ([data], [data[i : i + 4096] for i in range(0, len(data), 4096)]):
        decode = own_decoder(coding).decode
        with pytest.raises(TooLarge):
            for piece in pieces:
                decode(piece)
    small = encoded([b"x" * 1000], [coding]) or []
    assert decode_with(own_decoder, [coding], small, final=True) == [b"x" * 1000]


def test_httpx_raw_reads_and_aiohttp_without_decompression_replay_the_encoded_body(
    server: LocalServer, store: Path
) -> None:
    """httpx's ``iter_raw()`` and an aiohttp session with ``auto_decompress=False`` hand the body
    over as it came, gzip and all; a replay handed them the stored, decoded bytes without the
    header (``gzip.decompress`` failed: exit 3 on a good recording), and an aiohttp session that
    decompresses saw no ``Content-Encoding`` where it had one live."""
    import httpx

    url = server.url + "/x?kind=json&encoding=gzip"

    def run() -> list[Any]:
        with httpx.Client() as client, client.stream("GET", url) as r:
            raw = b"".join(r.iter_raw())
            out: list[Any] = [r.headers.get("content-encoding"), json.loads(gzip.decompress(raw))["path"]]
        out.append(httpx.get(url).json()["path"])

        async def both() -> None:
            async with aiohttp.ClientSession(auto_decompress=False) as s, s.get(url) as r:
                out.extend(
                    [r.headers.get("Content-Encoding"), json.loads(gzip.decompress(await r.read()))["path"]]
                )
            async with aiohttp.ClientSession() as s, s.get(url) as r:
                out.extend([r.headers.get("Content-Encoding"), (await r.json())["path"]])

        asyncio.run(both())
        return out

    with forkpoint.record(store=store) as rec:
        live = run()
    server.stop()
    assert live == ["gzip", "/x", "/x", "gzip", "/x", "gzip", "/x"]
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    assert rp.report()["reproduced"]


def test_urllib3_directly_preloaded_and_streamed(server: LocalServer, store: Path) -> None:
    """urllib3's own API: a preloaded body (the default) and ``preload_content=False`` streamed with
    ``stream()``; also a gzip body, stored decoded."""
    pool = urllib3.PoolManager()

    def run() -> list[Any]:
        whole = pool.request("GET", server.url + "/x?kind=json&encoding=gzip").json()["path"]
        r = pool.request("GET", server.url + "/s?kind=sse&n=3&delay=0.001", preload_content=False)
        parts = list(r.stream(64))
        r.release_conn()
        return [whole, b"".join(parts)]

    with forkpoint.record(store=store) as rec:
        live = run()
    server.stop()
    events = forkpoint.Session.load(rec.session_path).by_type("model_call")
    assert events[0]["response"]["body"]["path"] == "/x"
    assert not any(k.lower() == "content-encoding" for k, _ in events[0]["response"]["headers"])
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    assert rp.report()["reproduced"]


def test_a_client_forkpoint_does_not_capture_is_named_at_the_end(
    server: LocalServer, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A request sent piece by piece over ``http.client`` is not captured: the recording says which
    host:port it connected to, in the session (a note) and on stderr."""
    with forkpoint.record(store=store) as rec:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        conn.putrequest("GET", "/hidden")
        conn.endheaders()
        assert conn.getresponse().read()
        conn.close()
        requests.get(server.url + "/seen", timeout=5)  # recorded: its host:port is accounted for
    where = f"127.0.0.1:{server.port}"
    # The same host:port served a recorded call too, so only a second server shows up as unrecorded.
    other = LocalServer()
    try:
        with forkpoint.record(store=store) as rec:
            conn = http.client.HTTPConnection("127.0.0.1", other.port, timeout=5)
            conn.putrequest("GET", "/hidden")
            conn.endheaders()
            conn.getresponse().read()
            conn.close()
            requests.get(server.url + "/seen", timeout=5)
    finally:
        other.stop()
    notes = forkpoint.Session.load(rec.session_path).by_type("note")  # type: ignore[call-overload]
    assert notes[-1]["data"]["unrecorded_connections"] == [f"127.0.0.1:{other.port}"]
    err = capsys.readouterr().err
    assert f"127.0.0.1:{other.port}" in err and where not in err.split("connected to", 1)[-1]


def test_a_grpc_channel_is_named_among_the_connections_not_recorded(
    server: LocalServer, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """grpcio connects from its C core, past Python's socket: a pydantic-ai agent exporting its
    spans over OTLP/gRPC to a local collector was recorded with no word of it, though its export is
    not in the session (README: "nothing goes missing silently")."""
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    class Collector(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 (the service's method name)
            return trace_service_pb2.ExportTraceServiceResponse()

    collector = grpc.server(futures.ThreadPoolExecutor(1))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Collector(), collector)
    port = collector.add_insecure_port("127.0.0.1:0")
    collector.start()
    try:
        with forkpoint.record(store=store) as rec:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = trace_service_pb2_grpc.TraceServiceStub(channel)
                stub.Export(trace_service_pb2.ExportTraceServiceRequest(), timeout=10)
            requests.get(server.url + "/seen", timeout=5)
    finally:
        collector.stop(None)
    notes = forkpoint.Session.load(rec.session_path).by_type("note")  # type: ignore[call-overload]
    assert [n["data"]["unrecorded_connections"] for n in notes if "unrecorded_connections" in n["data"]] == [
        [f"127.0.0.1:{port}"]
    ]
    assert f"connected to 127.0.0.1:{port} through a client" in capsys.readouterr().err


def test_a_replay_of_a_run_that_made_grpc_calls_is_not_said_ok_alone(store: Path) -> None:
    """grpcio connects past the replay's network guard: the gRPC call the recording said it did not
    record went out again, live, and the replay said "replay ok" (check: "reproduced")."""
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

    from forkpoint.replay import verdict

    exports = []

    class Collector(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 (the service's method name)
            exports.append(request)
            return trace_service_pb2.ExportTraceServiceResponse()

    collector = grpc.server(futures.ThreadPoolExecutor(1))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Collector(), collector)
    port = collector.add_insecure_port("127.0.0.1:0")
    collector.start()

    def run() -> None:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            trace_service_pb2_grpc.TraceServiceStub(channel).Export(
                trace_service_pb2.ExportTraceServiceRequest(), timeout=10
            )

    try:
        with forkpoint.record(store=store) as rec:
            run()
        with forkpoint.replay(rec.session_path) as rp:
            run()
    finally:
        collector.stop(None)
    assert len(exports) == 2  # (made again, live)
    said = summary_line(rp.report())
    assert said.startswith("replay ok, but incomplete") and f"connected to 127.0.0.1:{port}" in said, said
    assert f"connected to 127.0.0.1:{port}" in verdict(rp.report(), 0, 0)["detail"]


def test_a_grpc_target_whose_port_is_no_number_does_not_raise_into_the_program(store: Path) -> None:
    """A target is the program's to give and grpcio's to refuse: ``host:²`` (a digit to
    ``str.isdigit``, not to ``int``) raised ValueError into the program from the channel
    constructor while recording; grpcio makes the channel (and fails its calls)."""
    import grpc

    with forkpoint.record(store=store):
        for target in ("localhost:\u00b2", "dns:///localhost:\u00b2", "ipv4:127.0.0.1:\u00b2"):
            grpc.insecure_channel(target).close()


_OTLP_GRPC_EXPORTER = """
import sys

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

import forkpoint

with forkpoint.record(store=sys.argv[2]):
    OTLPSpanExporter(endpoint="http://127.0.0.1:" + sys.argv[1], insecure=True).shutdown()
"""


def test_the_otlp_grpc_exporters_channel_is_named_though_it_imported_grpcs_constructor_first(
    tmp_path: Path,
) -> None:
    """OpenTelemetry's OTLP/gRPC exporter binds ``from grpc import insecure_channel`` when it is
    imported, before the recording starts: its channel was not named, and the recording said
    nothing of the spans it sent past it."""
    script = tmp_path / "agent.py"
    script.write_text(_OTLP_GRPC_EXPORTER)
    out = subprocess.run(
        [sys.executable, str(script), "4317", str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert "connected to 127.0.0.1:4317 through a client" in out.stderr, out.stderr


def test_a_recorded_call_to_localhost_after_one_to_127_0_0_1_is_not_named_unrecorded(
    server: LocalServer, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two names of one address: a call to ``127.0.0.1:P`` and then one to ``localhost:Q`` (agno's
    telemetry in its dev runtime, a local tool server), both recorded. The address was noted under
    the first name it was looked up for only, so the second connection, ``127.0.0.1:Q``, was said to
    go through "a client forkpoint does not capture" whose calls "will not be served on replay",
    while the session held them. A connection counts as recorded under the name it was made for."""
    other = LocalServer()
    try:
        with forkpoint.record(store=store) as rec:
            requests.get(server.url + "/a", timeout=5)
            requests.get(f"http://localhost:{other.port}/b", timeout=5)
            with urllib.request.urlopen(f"http://localhost:{other.port}/c", timeout=5) as r:
                r.read()
    finally:
        other.stop()
    session = forkpoint.Session.load(rec.session_path)
    assert len(session.calls()) == 3
    notes = [e for e in session.records() if e["type"] == "note"]
    assert [n["data"] for n in notes if "unrecorded_connections" in n["data"]] == []
    assert "does not capture" not in capsys.readouterr().err


def test_a_replay_that_blocks_a_connection_names_the_host(server: LocalServer, store: Path) -> None:
    with forkpoint.record(store=store) as rec:
        requests.get(server.url + "/a", timeout=5)
    with forkpoint.replay(rec.session_path) as rp:
        requests.get(server.url + "/a", timeout=5)
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=5)
        with pytest.raises(forkpoint.NetworkBlocked):
            conn.connect()  # a raw connection nothing captures
    report = rp.report()
    assert report["network_blocked"] == [f"127.0.0.1:{server.port}"]
    assert f"network blocked (1): 127.0.0.1:{server.port}" in summary_line(report)


def test_an_http_error_status_replays_as_the_same_exception(server: LocalServer, store: Path) -> None:
    def call() -> tuple[int, str]:
        try:
            urllib.request.urlopen(server.url + "/missing?status=404", timeout=5)
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())["path"]
        raise AssertionError("no HTTPError")

    with forkpoint.record(store=store) as rec:
        live = call()
    server.stop()
    with forkpoint.replay(rec.session_path):
        assert call() == live == (404, "/missing")


#: A document as a server that writes JSON with Python's json.dumps(indent=2) sends it.
DOC = json.dumps({"title": "Übersicht", "items": [1, 2.5, None], "ok": True}, indent=2).encode()


def _fetch_doc(library: str, url: str) -> list[Any]:
    """(size a HEAD says, the GET's Content-Length, the GET's text) as the agent's code sees them."""
    if library == "requests":
        head, got = requests.head(url, timeout=5), requests.get(url, timeout=5)
        return [head.headers.get("content-length"), got.headers.get("content-length"), got.text]
    if library == "httpx":
        import httpx

        head, got = httpx.head(url), httpx.get(url)
        return [head.headers.get("content-length"), got.headers.get("content-length"), got.text]
    if library == "urllib":
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=5) as h:
            size = h.headers.get("content-length")
        with urllib.request.urlopen(url, timeout=5) as g:
            return [size, g.headers.get("content-length"), g.read().decode()]

    async def go() -> list[Any]:
        async with aiohttp.ClientSession() as s:
            async with s.head(url) as h:
                size = h.headers.get("content-length")
            async with s.get(url) as g:
                return [size, g.headers.get("content-length"), await g.text()]

    return asyncio.run(go())


@pytest.mark.parametrize("library", ["requests", "httpx", "urllib", "aiohttp"])
def test_a_documents_length_and_text_replay_as_they_came(
    library: str, server: LocalServer, store: Path
) -> None:
    """An agent that sized a document with HEAD, or read a JSON document's text into its prompt,
    saw on replay no Content-Length (httpx: a KeyError; requests: 0 for the HEAD, so another branch
    of the program) and the JSON written anew, compactly (another prompt: a divergence of an
    unchanged program)."""
    server.route("/doc", lambda r: Reply(DOC, ctype="application/json"))
    with forkpoint.record(store=store) as rec:
        live = _fetch_doc(library, server.url + "/doc")
    assert live == [str(len(DOC)), str(len(DOC)), DOC.decode()]
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        assert _fetch_doc(library, server.url + "/doc") == live
    assert rp.report()["reproduced"], summary_line(rp.report())


_FRESH_CALL = {
    "urllib": "import urllib.request\nreq = urllib.request.Request(URL, BODY, HEADERS)\n"
    "print(urllib.request.urlopen(req, timeout=10).status)",
    "requests": "import requests\nprint(requests.post(URL, data=BODY, headers=HEADERS, timeout=10).status_code)",
    "httpx": "import httpx\nprint(httpx.post(URL, content=BODY, headers=HEADERS).status_code)",
    "httpx2": "import httpx2\nprint(httpx2.post(URL, content=BODY, headers=HEADERS).status_code)",
    "aiohttp": "import asyncio, aiohttp\nasync def go():\n    async with aiohttp.ClientSession() as s:\n"
    "        async with s.post(URL, data=BODY, headers=HEADERS) as r:\n            return r.status\n"
    "print(asyncio.run(go()))",
}


@pytest.mark.parametrize("library", sorted(_FRESH_CALL))
def test_a_library_first_imported_by_a_recorded_program_is_captured(library: str, tmp_path: Path) -> None:
    """Under `forkpoint record`, an adapter is imported when its library is (issue 15: start-up):
    a program that imports the library only after forkpoint started (a fresh process, nothing
    preloaded) is recorded all the same, with nothing said about a library it could not capture."""
    import sys

    from tests.cliutil import forkpoint_cli, with_this_path

    with LocalServer() as srv:
        script = tmp_path / "agent.py"
        script.write_text(
            f"URL = {srv.openai_base_url + '/chat/completions'!r}\n"
            'BODY = b\'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}\'\n'
            "HEADERS = {'content-type': 'application/json'}\n" + _FRESH_CALL[library] + "\n"
        )
        done = forkpoint_cli(
            ["record", "--store", str(tmp_path / "st"), "--no-workspace", "--", sys.executable, str(script)],
            env=with_this_path(None),
        )
    assert done.returncode == 0 and done.stdout.strip() == "200", done.stderr
    assert "cannot capture" not in done.stderr and "(1 model call," in done.stderr, done.stderr


# --------------------------------------------------------------------------- through a proxy


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key (PEM files), made for this test."""
    import datetime as dt
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_file, key_file


def _tunnelling_proxy(connects: list[str]) -> tuple[socket.socket, int]:
    """A proxy on 127.0.0.1 that answers ``CONNECT host:port`` by piping bytes both ways (what
    ``HTTPS_PROXY`` sends HTTPS through); each CONNECT's target is appended to ``connects``."""

    def pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            dst.close()

    def tunnel(client: socket.socket) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            head += client.recv(4096)
        target = head.split(b" ")[1].decode()
        connects.append(target)
        host, port = target.rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)))
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()

    listener, _ = _serving(tunnel)
    return listener, listener.getsockname()[1]


def test_https_through_a_proxy_replays_without_dialling_the_proxy(
    tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """``requests`` (urllib3, so boto3 too) over HTTPS through ``HTTPS_PROXY``: the call was
    recorded, but its replay opened the proxy tunnel first (urllib3 does that before the request
    it sends), which the replay blocked: "DID NOT REPRODUCE", 0 of 1 served. And the recording
    said the proxy's address was a connection it did not record."""
    import http.server
    import ssl

    cert, key = _self_signed(tmp_path)

    class Answer(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            out = json.dumps({"echo": json.loads(body)["q"]}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    connects: list[str] = []
    proxy, proxy_port = _tunnelling_proxy(connects)
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{proxy_port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    url = f"https://127.0.0.1:{server.server_address[1]}/v1/ask"
    try:
        with forkpoint.record(store=store) as rec:
            live = requests.post(url, json={"q": "hi"}, verify=str(cert), timeout=10).json()
        assert live == {"echo": "hi"} and len(connects) == 1  # it went through the proxy
        said = capfd.readouterr().err
        assert "does not capture" not in said, said
        server.shutdown()
        proxy.close()
        with forkpoint.replay(rec.session_path) as rp:
            assert requests.post(url, json={"q": "hi"}, verify=str(cert), timeout=10).json() == live
        assert rp.report()["reproduced"], summary_line(rp.report())
        assert len(connects) == 1
    finally:
        server.shutdown()
        proxy.close()


def test_an_upgraded_connection_is_said_when_recorded_and_replayed_as_a_divergence(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An aiohttp websocket was recorded as its handshake alone (``GET /ws`` → 101) without a word,
    and its replay failed in aiohttp ("Invalid connection header") under "replay DIVERGED" at the
    next call. It is said while recording, and its replay stops there, saying why."""
    from aiohttp import web

    async def handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_str("task: summarize")
        await ws.close()
        return ws

    async def agent(port: int) -> str:
        async with aiohttp.ClientSession() as s:
            async with s.ws_connect(f"http://127.0.0.1:{port}/ws") as ws:
                return str(await ws.receive_str())

    async def live() -> str:
        app = web.Application()
        app.router.add_get("/ws", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            return await agent(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        finally:
            await runner.cleanup()

    with forkpoint.record(store=store) as rec:
        assert asyncio.run(live()) == "task: summarize"
    said = " ".join(capsys.readouterr().err.split())
    assert "the connection was upgraded (101 Switching Protocols" in said and "handshake only" in said
    with forkpoint.replay(rec.session_path) as rp:
        with pytest.raises(forkpoint.Divergence, match="handshake only"):
            asyncio.run(agent(9))
    report = rp.report()
    assert report["divergence"]["call"] == "http" and "upgraded" in report["divergence"]["reason"]


def test_cookies_a_server_sets_are_set_again_on_replay_with_placeholder_values(
    server: LocalServer, store: Path
) -> None:
    """Set-Cookie was dropped as a credential: a replayed client had no cookies, and a program that
    looked at them (a login, then a session) went another way under "replay ok". They come back with
    each cookie's name and attributes, and a placeholder for its value: no secret is stored."""
    server.route(
        "/login",
        lambda r: Reply(
            b"{}", ctype="application/json", headers=[("Set-Cookie", "sid=s3cr3t-v4lue; Path=/")]
        ),
    )

    def agent() -> list[Any]:
        with requests.Session() as s:
            s.get(server.url + "/login", timeout=5)
            return sorted(s.cookies.keys())

    with forkpoint.record(store=store) as rec:
        assert agent() == ["sid"]
    assert b"s3cr3t-v4lue" not in (rec.session_path / "session.jsonl").read_bytes()
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        assert agent() == ["sid"]
    assert rp.report()["reproduced"]


def test_a_json_layout_a_session_makes_up_is_not_followed() -> None:
    """A hostile session's ``json_layout`` (an indent of 10**9) would have a replay write a body of
    gigabytes: only the layouts recording looks for are followed; any other gives the compact form."""
    from forkpoint.capture.decoding import body_bytes, json_layout

    value = {"a": [1, 2], "b": "ü"}
    for kw in ({"indent": 2, "ensure_ascii": False}, {"indent": None, "ensure_ascii": True}):
        data = json.dumps(value, **kw).encode() + b"\n"  # type: ignore[arg-type]
        assert body_bytes("json", value, json_layout(data, value)) == data
    for bad in ({"indent": 10**9, "ensure_ascii": True}, {"indent": "x"}, {"indent": 3}, []):
        assert body_bytes("json", value, bad) == '{"a":[1,2],"b":"ü"}'.encode()  # type: ignore[arg-type]


class AiohttpTransport(httpx.AsyncBaseTransport):
    """An httpx transport that sends each request through aiohttp, as litellm's async one does
    (``LiteLLMAiohttpTransport``, under every ``litellm.acompletion``)."""

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        async with (
            aiohttp.ClientSession() as session,
            session.request(
                request.method, str(request.url), headers=dict(request.headers), data=await request.aread()
            ) as response,
        ):
            body = await response.read()  # (decoded: the encoding headers are left out)
            skip = ("content-encoding", "content-length", "transfer-encoding")
            headers = [(k, v) for k, v in response.headers.items() if k.lower() not in skip]
            return httpx.Response(response.status, headers=headers, content=body)


def test_httpx_sending_through_aiohttp_is_recorded_once(server: LocalServer, store: Path) -> None:
    """A request an httpx client sends through a transport that uses aiohttp was recorded twice, at
    httpx's seam and at aiohttp's: every ``litellm.acompletion`` (DSPy's async ReAct, any async
    litellm agent) had two model calls in its session, and every replay, served at httpx's seam,
    left aiohttp's copy unused: "DID NOT REPRODUCE". Now the request is recorded once, where httpx
    sends it."""

    async def ask() -> str:
        async with httpx.AsyncClient(transport=AiohttpTransport()) as client:
            r = await client.post(
                server.openai_base_url + "/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
            )
            return str(r.json()["choices"][0]["message"]["content"])

    with forkpoint.record(store=store) as rec:
        live = asyncio.run(ask())
    assert len(server.requests) == 1
    assert len(forkpoint.Session.load(rec.session_path).by_type("model_call")) == 1
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(ask()) == live
    assert rp.report()["reproduced"], summary_line(rp.report())
