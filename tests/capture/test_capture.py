"""Model calls captured at the HTTP boundary of httpx and httpx2 (sync and async), replayed offline."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import json
import secrets
import socket
import string
import weakref
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import httpx2
import pytest

import forkpoint
from forkpoint import redact
from forkpoint.log import Session
from tests.modelserver import json_reply

LIBS = [pytest.param(httpx, id="httpx"), pytest.param(httpx2, id="httpx2")]
MODES = [pytest.param(False, id="sync"), pytest.param(True, id="async")]

SECRET = "sk-proj-" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(48))


def assert_secret_absent(session_dir: Path, secret: str = SECRET) -> None:
    """No file of the session contains the secret, or a recognisable part of it."""
    needles = [secret.encode(), secret[8:32].encode(), secret[-20:].encode()]
    files = [p for p in session_dir.rglob("*") if p.is_file()]
    assert files
    for p in files:
        data = p.read_bytes()
        for needle in needles:
            assert needle not in data, f"secret found in {p}"


def send(lib: ModuleType, is_async: bool, method: str, url: str, **kw: Any) -> Any:
    """One request through a fresh client; returns the (read) response."""
    if is_async:

        async def go() -> Any:
            async with lib.AsyncClient() as c:
                return await c.request(method, url, **kw)

        return asyncio.run(go())
    with lib.Client() as c:
        return c.request(method, url, **kw)


def stream(
    lib: ModuleType, is_async: bool, url: str, on_first: Callable[[bytes], None] | None = None, **kw: Any
) -> tuple[Any, list[bytes]]:
    """Stream a response; returns it and its ``iter_bytes`` chunks. ``on_first`` runs after chunk 1."""
    if is_async:

        async def go() -> tuple[Any, list[bytes]]:
            chunks: list[bytes] = []
            async with lib.AsyncClient() as c, c.stream("POST", url, **kw) as r:
                async for chunk in r.aiter_bytes():
                    chunks.append(chunk)
                    if len(chunks) == 1 and on_first:
                        on_first(chunk)
            return r, chunks

        return asyncio.run(go())
    chunks: list[bytes] = []
    with lib.Client() as c, c.stream("POST", url, **kw) as r:
        for chunk in r.iter_bytes():
            chunks.append(chunk)
            if len(chunks) == 1 and on_first:
                on_first(chunk)
    return r, chunks


def auth_headers() -> dict[str, str]:
    return {"Authorization": f"Bearer {SECRET}", "X-Api-Key": SECRET, "User-Agent": "agent/1.0"}


# ----------------------------------------------------------------------------- JSON


@pytest.mark.parametrize("is_async", MODES)
@pytest.mark.parametrize("lib", LIBS)
def test_json_call_recorded_and_replayed_offline(
    lib: ModuleType, is_async: bool, server: Any, store: Path
) -> None:
    body = {"model": "m-1", "messages": [{"role": "user", "content": f"hello, my key is {SECRET}"}], "n": 1}
    with forkpoint.record(store=store) as rec:
        live = send(
            lib,
            is_async,
            "POST",
            server.url + f"/v1/things?kind=json&api_key={SECRET}",
            json=body,
            headers=auth_headers(),
        )
    assert live.status_code == 200
    assert server.requests[0]["headers"]["authorization"] == f"Bearer {SECRET}"  # the call was real
    live_json = live.json()
    assert live_json["echo"] == body

    (event,) = Session.load(rec.session_path).by_type("model_call")
    req = event["request"]
    assert req["method"] == "POST" and req["body_kind"] == "json"
    assert req["body"]["model"] == "m-1" and req["body"]["messages"][0]["content"].startswith(
        "hello, my key is [REDACTED"
    )
    # (credential headers are kept as their values' placeholders: which key a call sent, no key)
    stored = {k.lower(): v for k, v in req["headers"]}
    assert stored["authorization"] == redact.placeholder("header-credential", f"Bearer {SECRET}")
    assert stored["x-api-key"] == redact.placeholder("header-credential", SECRET) and "user-agent" in stored
    assert event["response"]["status"] == 200 and event["response"]["ended"] == "complete"
    assert event["response"]["body_kind"] == "json"
    assert_secret_absent(rec.session_path)

    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        again = send(
            lib,
            is_async,
            "POST",
            server.url + f"/v1/things?kind=json&api_key={SECRET}",
            json=body,
            headers=auth_headers(),
        )
    assert again.status_code == live.status_code
    assert again.headers["content-type"] == live.headers["content-type"]
    assert again.headers["x-request-id"] == live.headers["x-request-id"]
    # The answer comes back as recorded: with the secret the server echoed replaced by its placeholder.
    placeholder = f"[REDACTED:openai-key:{hashlib.sha256(SECRET.encode()).hexdigest()[:8]}]"
    assert again.json() == json.loads(json.dumps(live_json).replace(SECRET, placeholder))
    assert SECRET in json.dumps(live_json)
    report = rp.report()
    assert (report["matched"], report["recorded"], report["unused"]) == (1, 1, [])
    assert report["divergence"] is None


# ----------------------------------------------------------------------------- streams


@pytest.mark.parametrize("is_async", MODES)
@pytest.mark.parametrize("lib", LIBS)
def test_sse_stream_chunks_arrive_live_and_replay_with_same_boundaries(
    lib: ModuleType, is_async: bool, server: Any, store: Path
) -> None:
    n = 5
    url = server.url + f"/v1/stream?kind=sse&n={n}&gate=1&delay=0.02"
    seen_before_finish: list[bool] = []

    def first_chunk(_: bytes) -> None:
        # The server is parked after its first event until we open the gate: if the tee buffered
        # the stream, we would never get here before the server finished.
        seen_before_finish.append(not server.finished.is_set())
        server.gate.set()

    with forkpoint.record(store=store) as rec:
        live, live_chunks = stream(
            lib, is_async, url, on_first=first_chunk, json={"stream": True, "q": "x"}, headers=auth_headers()
        )
    assert seen_before_finish == [True]
    assert server.finished.is_set()
    assert live_chunks == server.sse_events(n)  # one chunk per flushed event

    (event,) = Session.load(rec.session_path).by_type("model_call")
    assert event["request"]["body"] == {"stream": True, "q": "x"}
    resp = event["response"]
    assert resp["body_kind"] == "stream" and resp["ended"] == "complete"
    times = [t for t, _ in resp["chunks"]]
    assert [c.encode() for _, c in resp["chunks"]] == live_chunks
    assert times == sorted(times) and times[-1] - times[0] >= 0.02 * (n - 2) * 1000 * 0.9
    assert_secret_absent(rec.session_path)

    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        again, replay_chunks = stream(lib, is_async, url, json={"q": "x", "stream": True})
    assert replay_chunks == live_chunks
    assert again.status_code == 200
    assert again.headers["content-type"] == live.headers["content-type"] == "text/event-stream"
    assert rp.report()["matched"] == 1


@pytest.mark.parametrize("lib", LIBS)
def test_stream_closed_early_is_recorded_and_replayed(lib: ModuleType, server: Any, store: Path) -> None:
    url = server.url + "/v1/stream?kind=sse&n=6&delay=0.01"
    with forkpoint.record(store=store) as rec, lib.Client() as c, c.stream("POST", url, json={}) as r:
        first = next(r.iter_bytes())
    (event,) = Session.load(rec.session_path).by_type("model_call")
    assert event["response"]["ended"] == "client"
    assert event["response"]["chunks"][0][1].encode() == first
    server.stop()
    with forkpoint.replay(rec.session_path), lib.Client() as c, c.stream("POST", url, json={}) as r:
        assert next(r.iter_bytes()) == first


# ----------------------------------------------------------------------------- encodings and binary


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "deflate-raw"])
@pytest.mark.parametrize("lib", LIBS)
def test_compressed_json_stored_decoded_and_replayed(
    lib: ModuleType, encoding: str, server: Any, store: Path
) -> None:
    url = server.url + f"/v1/z?kind=json&encoding={encoding}"
    with forkpoint.record(store=store) as rec:
        live = send(lib, False, "GET", url)
    assert live.headers["content-encoding"] in ("gzip", "deflate")
    (event,) = Session.load(rec.session_path).by_type("model_call")
    resp = event["response"]
    assert "content-encoding" not in {k.lower() for k, _ in resp["headers"]}
    assert resp["body_kind"] == "json" and resp["body"] == live.json()

    server.stop()
    with forkpoint.replay(rec.session_path):
        again = send(lib, False, "GET", url)
    # (encoded again, said as live: httpx decodes it itself, and iter_raw() sees what came)
    assert again.headers["content-encoding"] == live.headers["content-encoding"]
    assert again.json() == live.json()
    assert json.loads(again.content) == live.json()


@pytest.mark.parametrize("is_async", MODES)
def test_a_recorded_response_is_freed_as_soon_as_the_program_drops_it(
    is_async: bool, server: Any, store: Path
) -> None:
    """A recorded response goes when the program lets it go, as it does without forkpoint: the
    call's decoders held the response, which held the call through its stream, a cycle only the
    garbage collector freed, the body with it (~40 objects a call, and all a recording of an
    httpx2 loop left to it). (httpx2 only: httpx's own response and stream hold each other, with
    forkpoint or without.)"""
    url = server.url + "/v1/z?kind=json&encoding=gzip"  # (decoded by the library: decoders asked)
    with forkpoint.record(store=store) as rec:
        response = send(httpx2, is_async, "GET", url)
        gone = weakref.ref(response)
        gc.disable()
        try:
            del response
            assert gone() is None, gc.get_referrers(gone())
        finally:
            gc.enable()
    assert len(Session.load(rec.session_path).by_type("model_call")) == 1


@pytest.mark.parametrize("is_async", MODES)
@pytest.mark.parametrize("lib", LIBS)
def test_compressed_stream_stored_decoded_and_replayed(
    lib: ModuleType, is_async: bool, server: Any, store: Path
) -> None:
    url = server.url + "/v1/zs?kind=sse&n=4&encoding=gzip&delay=0.01"
    with forkpoint.record(store=store) as rec:
        live, live_chunks = stream(lib, is_async, url, json={})
    assert b"".join(live_chunks) == b"".join(server.sse_events(4))
    (event,) = Session.load(rec.session_path).by_type("model_call")
    assert "content-encoding" not in {k.lower() for k, _ in event["response"]["headers"]}
    assert "".join(c for _, c in event["response"]["chunks"]).encode() == b"".join(server.sse_events(4))

    server.stop()
    with forkpoint.replay(rec.session_path):
        again, replay_chunks = stream(lib, is_async, url, json={})
    assert replay_chunks == live_chunks
    # (encoded again chunk by chunk, said as live: iter_raw() sees what came)
    assert again.headers["content-encoding"] == live.headers["content-encoding"] == "gzip"


@pytest.mark.parametrize("is_async", MODES)
@pytest.mark.parametrize("lib", LIBS)
def test_binary_response_round_trips_byte_exact(
    lib: ModuleType, is_async: bool, server: Any, store: Path
) -> None:
    url = server.url + "/v1/audio?kind=binary&size=5000"
    with forkpoint.record(store=store) as rec:
        live = send(lib, is_async, "GET", url)
    assert live.content == server.binary_payload(5000)
    (event,) = Session.load(rec.session_path).by_type("model_call")
    assert event["response"]["body_kind"] == "bytes"
    assert event["response"]["body"] == live.content

    server.stop()
    with forkpoint.replay(rec.session_path):
        again = send(lib, is_async, "GET", url)
    assert again.content == live.content
    assert again.headers["content-type"] == "application/octet-stream"


@pytest.mark.parametrize("lib", LIBS)
def test_binary_request_body_is_recorded_and_matched(lib: ModuleType, server: Any, store: Path) -> None:
    upload = server.binary_payload(3000)
    headers = {"content-type": "application/octet-stream"}
    with forkpoint.record(store=store) as rec:
        live = send(lib, False, "POST", server.url + "/v1/upload", content=upload, headers=headers)
    assert server.requests[0]["raw"] == upload
    (event,) = Session.load(rec.session_path).by_type("model_call")
    assert event["request"]["body_kind"] == "bytes" and event["request"]["body"] == upload
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        assert (
            send(lib, False, "POST", server.url + "/v1/upload", content=upload, headers=headers).json()
            == live.json()
        )
        with pytest.raises(forkpoint.Divergence):
            send(lib, False, "POST", server.url + "/v1/upload", content=upload[:-1] + b"!", headers=headers)
    assert rp.report()["matched"] == 1


@pytest.mark.parametrize("lib", LIBS)
def test_multipart_upload_replays_despite_a_new_boundary(lib: ModuleType, server: Any, store: Path) -> None:
    files = {"file": ("speech.wav", server.binary_payload(2000), "audio/wav")}
    with forkpoint.record(store=store) as rec:
        live = send(
            lib, False, "POST", server.url + "/v1/audio/transcriptions", files=files, data={"model": "w"}
        )
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        again = send(
            lib, False, "POST", server.url + "/v1/audio/transcriptions", files=files, data={"model": "w"}
        )
        assert again.json() == live.json()
        with pytest.raises(forkpoint.Divergence):
            other = {"file": ("speech.wav", server.binary_payload(2001), "audio/wav")}
            send(
                lib, False, "POST", server.url + "/v1/audio/transcriptions", files=other, data={"model": "w"}
            )
    assert rp.report()["matched"] == 1


def test_credentials_in_the_url_never_reach_disk(server: Any, store: Path) -> None:
    url = server.url.replace("http://", f"http://user:{SECRET}@") + "/v1/things"
    with forkpoint.record(store=store) as rec:
        live = send(httpx, False, "POST", url, json={"a": 1})
    assert_secret_absent(rec.session_path)
    server.stop()
    with forkpoint.replay(rec.session_path):
        assert send(httpx, False, "POST", url, json={"a": 1}).json() == live.json()


# ----------------------------------------------------------------------------- divergence, network, report


@pytest.mark.parametrize("is_async", MODES)
@pytest.mark.parametrize("lib", LIBS)
def test_unmatched_request_raises_divergence_with_a_diff(
    lib: ModuleType, is_async: bool, server: Any, store: Path
) -> None:
    url = server.url + "/v1/chat/completions"

    def body(text: str) -> dict[str, Any]:
        return {
            "model": "m",
            "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": text}],
        }

    with forkpoint.record(store=store) as rec:
        send(lib, is_async, "POST", url, json=body("first question"))
        send(lib, is_async, "POST", url, json=body("second question"))
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        send(lib, is_async, "POST", url, json=body("first question"))
        with pytest.raises(forkpoint.Divergence) as exc:
            send(lib, is_async, "POST", url, json=body("a different second question"))
    msg = str(exc.value)
    assert "2nd model call" in msg
    assert "POST /v1/chat/completions" in msg
    assert "seq 2" in msg  # the recorded call that was expected next
    assert "$.body.messages[1].content" in msg
    assert "second question" in msg and "a different second question" in msg
    report = rp.report()
    assert report["divergence"]["position"] == 2 and report["divergence"]["expected"]["seq"] == 2
    assert (report["matched"], report["recorded"], report["unused"]) == (1, 2, [2])


def test_network_is_blocked_during_replay(server: Any, store: Path) -> None:
    with forkpoint.record(store=store) as rec:
        send(httpx, False, "GET", server.url + "/v1/x")
    with forkpoint.replay(rec.session_path) as rp:
        with pytest.raises(forkpoint.NetworkBlocked, match=f"127.0.0.1:{server.port}"):
            socket.create_connection(("127.0.0.1", server.port), timeout=2)
        with pytest.raises(forkpoint.NetworkBlocked):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                s.connect_ex(("127.0.0.1", server.port))
            finally:
                s.close()
        assert send(httpx, False, "GET", server.url + "/v1/x").status_code == 200  # served, not sent
    assert len(server.requests) == 1
    report = rp.report()
    assert report["network_blocked"] == [f"127.0.0.1:{server.port}"]  # each destination once…
    assert report["network_attempts"] == {f"127.0.0.1:{server.port}": 2}  # …with its attempts
    # After the replay the network is back.
    socket.create_connection(("127.0.0.1", server.port), timeout=2).close()


def test_replay_report_counts_matched_recorded_unused(server: Any, store: Path) -> None:
    @forkpoint.tool
    def lookup(q: str) -> str:
        return q.upper()

    with forkpoint.record(store=store) as rec, httpx.Client() as c:
        for i in range(3):
            c.post(
                server.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": str(i)}]}
            )
        lookup("a")
    server.stop()
    with forkpoint.replay(rec.session_path) as rp, httpx.Client() as c:
        c.post(server.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "0"}]})
        c.post(server.url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "2"}]})
    report = rp.report()
    assert report["matched"] == 2
    assert report["recorded"] == 4
    assert report["unused"] == [2, 4]  # the 2nd model call and the tool call were never asked for
    assert report["divergence"] is None


@pytest.mark.parametrize("lib", LIBS)
def test_identical_requests_replay_in_recorded_order(lib: ModuleType, server: Any, store: Path) -> None:
    url = server.url + "/v1/chat/completions"
    body = {"model": "m", "messages": [{"role": "user", "content": "roll a die"}]}
    with forkpoint.record(store=store) as rec:
        live = [send(lib, False, "POST", url, json=body).json()["id"] for _ in range(3)]
    assert len(set(live)) == 3  # the server answered differently each time
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        assert [send(lib, False, "POST", url, json=body).json()["id"] for _ in range(3)] == live
        with pytest.raises(forkpoint.Divergence, match="already served"):
            send(lib, False, "POST", url, json=body)
    assert rp.report()["matched"] == 3


@pytest.mark.parametrize("status", [429, 500])
@pytest.mark.parametrize("lib", LIBS)
def test_error_status_round_trips(lib: ModuleType, status: int, server: Any, store: Path) -> None:
    url = server.url + f"/v1/x?status={status}"
    with forkpoint.record(store=store) as rec:
        live = send(lib, False, "POST", url, json={"a": 1})
    assert live.status_code == status
    server.stop()
    with forkpoint.replay(rec.session_path):
        again = send(lib, False, "POST", url, json={"a": 1})
    assert again.status_code == status and again.json() == live.json()
    assert again.reason_phrase == live.reason_phrase


@pytest.mark.parametrize("is_async", MODES)
@pytest.mark.parametrize("lib", LIBS)
def test_transport_error_is_recorded_and_raised_again(lib: ModuleType, is_async: bool, store: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    with forkpoint.record(store=store) as rec, pytest.raises(lib.ConnectError):
        send(lib, is_async, "POST", url, json={"q": 1})
    (event,) = Session.load(rec.session_path).by_type("model_call")
    assert event["response"] is None and event["error"]["type"] == "ConnectError"
    with forkpoint.replay(rec.session_path) as rp, pytest.raises(lib.ConnectError):
        send(lib, is_async, "POST", url, json={"q": 1})
    assert rp.report()["matched"] == 1 and rp.report()["network_blocked"] == []


@pytest.mark.parametrize("lib", LIBS)
@pytest.mark.parametrize("is_async", MODES)
@pytest.mark.parametrize("streamed", [pytest.param(False, id="read"), pytest.param(True, id="streamed")])
def test_a_response_built_already_read_is_recorded_whole_and_replays(
    store: Path, lib: ModuleType, is_async: bool, streamed: bool
) -> None:
    """A ``MockTransport`` handler (or respx) returns ``Response(json=...)``, which the library read
    while building it: its body never streams through the transport. It is recorded whole, as one
    complete response, and replays."""
    turns: list[str] = []

    def answer(request: Any) -> Any:
        turns.append(json.loads(request.content)["messages"][-1]["content"])
        reply = {"role": "assistant", "content": f"echo {turns[-1]} #{len(turns)}"}
        return lib.Response(200, json={"id": f"c{len(turns)}", "model": "m", "choices": [{"message": reply}]})

    async def answer_async(request: Any) -> Any:
        return answer(request)

    url = "http://127.0.0.1:9/v1/chat/completions"  # answered by the MockTransport
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}

    def run() -> list[Any]:
        if is_async:

            async def go() -> list[Any]:
                async with lib.AsyncClient(transport=lib.MockTransport(answer_async)) as c:
                    if not streamed:
                        return [(await c.post(url, json=body)).json() for _ in range(2)]
                    out = []
                    for _ in range(2):
                        async with c.stream("POST", url, json=body) as r:
                            out.append(json.loads(b"".join([b async for b in r.aiter_bytes()])))
                    return out

            return asyncio.run(go())
        with lib.Client(transport=lib.MockTransport(answer)) as c:
            if not streamed:
                return [c.post(url, json=body).json() for _ in range(2)]
            out = []
            for _ in range(2):
                with c.stream("POST", url, json=body) as r:
                    out.append(json.loads(r.read()))
            return out

    with forkpoint.record(store=store) as rec:
        live = run()
    calls = Session.load(rec.session_path).by_type("model_call")
    assert [c["response"]["ended"] for c in calls] == ["complete", "complete"]  # type: ignore[index]
    assert [c["response"]["body"] for c in calls] == live  # type: ignore[index]
    turns.clear()
    with forkpoint.replay(rec.session_path) as rp:
        again = run()
    assert again == live and turns == []  # served from the session: the handler never ran
    assert rp.report()["reproduced"]


@pytest.mark.parametrize("lib", LIBS)
def test_form_fields_named_as_credentials_never_reach_disk_and_still_replay(
    lib: ModuleType, server: Any, store: Path
) -> None:
    """An OAuth token request (``client_secret`` in an ``application/x-www-form-urlencoded`` body) and
    a ``multipart/form-data`` upload with an ``api_key`` field were stored in the clear: their values
    have no secret shape, and a form's field names were never read. They are replaced by name, like a
    JSON key's or a query parameter's, and a replay of the same requests still matches."""
    client_secret, api_key = "plain" + SECRET[8:40], "mixedCase" + SECRET[-20:]
    server.route("/oauth/token", lambda _r: json_reply({"access_token": "t", "token_type": "bearer"}))
    server.route("/upload", lambda r: json_reply({"bytes": len(r["raw"])}))
    form = {"grant_type": "client_credentials", "client_id": "agent", "client_secret": client_secret}
    files = {"doc": ("notes.txt", b"ordinary text\n", "text/plain")}

    def calls() -> list[Any]:
        with lib.Client() as c:
            token = c.post(server.url + "/oauth/token", data=form)
            upload = c.post(server.url + "/upload", data={"api_key": api_key, "title": "t"}, files=files)
        return [token.json(), upload.json()]

    with forkpoint.record(store=store) as rec:
        live = calls()
    assert server.requests[0]["raw"].count(client_secret.encode()) == 1  # the call was real
    bodies = [e["request"]["body"] for e in Session.load(rec.session_path).by_type("model_call")]
    assert "client_id=agent&client_secret=%5BREDACTED%3Aform-credential%3A" in bodies[0]
    assert 'name="title"\r\n\r\nt\r\n' in bodies[1] and "ordinary text" in bodies[1]
    for secret in (client_secret, api_key):
        assert_secret_absent(rec.session_path, secret)

    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        again = calls()
    # (the access token the server answered is a credential too: served as its placeholder)
    assert again[1] == live[1] and again[0]["token_type"] == "bearer"
    assert again[0]["access_token"].startswith("[REDACTED:")
    assert rp.report()["matched"] == 2 and rp.report()["divergence"] is None
