"""The tests' local model server (tests/modelserver.py) does what its docstring promises; the other
tests rely on it without checking, so it is checked here, without forkpoint."""

from __future__ import annotations

import gzip
import json
import socket
import zlib

import anthropic
import brotli
import httpx2
import openai
import pytest
import zstandard

from tests.modelserver import LocalServer, Reply, Stream, compress, json_reply


def test_chat_json_and_stream_through_the_sdk(server: LocalServer) -> None:
    client = openai.OpenAI(base_url=server.openai_base_url, api_key="sk-test", max_retries=0)
    messages = [{"role": "user", "content": "hello there"}]
    a = client.chat.completions.create(model="m", messages=messages)
    b = client.chat.completions.create(model="m", messages=messages)
    assert a.choices[0].message.content == "reply 1 to: hello there" and a.id != b.id
    chunks = list(client.chat.completions.create(model="m", messages=messages, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "reply 1 to: hello there"
    assert chunks[-1].choices[0].finish_reason == "stop" and chunks[-1].usage.completion_tokens == 5
    assert [r["body"]["messages"] for r in server.requests] == [messages] * 3
    assert [r["n"] for r in server.requests] == [1, 2, 3]


def test_chat_script_answers_by_the_number_of_assistant_turns() -> None:
    script = [[("look", {"q": 1}), ("look", {"q": 2})], "done"]
    with LocalServer(chat_script=script) as srv:
        client = openai.OpenAI(base_url=srv.openai_base_url, api_key="sk-test", max_retries=0)
        messages: list[dict] = [{"role": "user", "content": "go"}]
        first = client.chat.completions.create(model="m", messages=messages).choices[0]
        streamed = list(client.chat.completions.create(model="m", messages=messages, stream=True))
        messages.append({"role": "assistant", "content": "…"})
        last = client.chat.completions.create(model="m", messages=messages).choices[0]
    assert first.finish_reason == "tool_calls"
    assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in first.message.tool_calls] == [
        ("call_0_0", "look", {"q": 1}),
        ("call_0_1", "look", {"q": 2}),
    ]
    calls = streamed[0].choices[0].delta.tool_calls
    assert [(c.index, c.id, c.function.name) for c in calls] == [
        (0, "call_0_0", "look"),
        (1, "call_0_1", "look"),
    ]
    assert (last.message.content, last.finish_reason) == ("done", "stop")


def test_anthropic_messages_and_error_shapes(server: LocalServer) -> None:
    client = anthropic.Anthropic(base_url=server.url, api_key="sk-ant-test", max_retries=0)
    msg = client.messages.create(model="c", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    assert msg.content[0].text == "reply 1 to: hi"
    with pytest.raises(anthropic.RateLimitError) as info:
        client.messages.create(
            model="c",
            max_tokens=5,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-status": "429"},
        )
    assert info.value.body["error"]["type"] == "rate_limit_error"
    assert info.value.response.headers["retry-after-ms"] == "250"


def test_a_scenario_fails_its_first_attempts_in_order(server: LocalServer) -> None:
    headers = {"x-scenario": "s", "x-fail": "429,500"}
    statuses = [httpx2.get(server.url + "/x", headers=headers).status_code for _ in range(3)]
    assert statuses == [429, 500, 200]
    assert httpx2.get(server.url + "/x", headers={**headers, "x-scenario": "t"}).status_code == 429


def test_generic_routes(server: LocalServer) -> None:
    with httpx2.Client(base_url=server.url) as c:
        echo = c.post("/v1/things", params={"status": "201"}, json={"a": 1})
        assert echo.status_code == 201 and echo.json()["echo"] == {"a": 1} and echo.json()["count"] == 1
        assert c.get("/t", params={"kind": "text"}).text == "plain text: héllo\n"
        assert c.get("/b", params={"kind": "binary", "size": 50}).content == server.binary_payload(50)
        decode = {
            "gzip": gzip.decompress,
            "deflate": zlib.decompress,
            "deflate-raw": lambda d: zlib.decompress(d, -zlib.MAX_WBITS),
            "br": brotli.decompress,
            "zstd": lambda d: zstandard.ZstdDecompressor().decompressobj().decompress(d),
        }
        for encoding, undo in decode.items():
            with c.stream("GET", "/z", params={"encoding": encoding}) as r:
                body = json.loads(undo(b"".join(r.iter_raw())))
            assert r.headers["content-encoding"] == encoding.removesuffix("-raw")
            assert body["query"]["encoding"] == encoding
        with c.stream("GET", "/s", params={"kind": "sse", "n": 5, "delay": 0}) as r:
            assert list(r.iter_raw()) == server.sse_events(5)  # one transport chunk per event
            assert r.headers["x-request-id"].startswith("req_")
        with c.stream("GET", "/s", params={"kind": "sse", "n": 3, "encoding": "gzip"}) as r:
            assert b"".join(r.iter_bytes()) == b"".join(server.sse_events(3))
        with c.stream("GET", "/s", params={"kind": "sse", "n": 6, "delay": 0, "drop": 2}) as r:
            got: list[bytes] = []
            with pytest.raises(httpx2.RemoteProtocolError):
                for chunk in r.iter_raw():
                    got.append(chunk)
        assert got == server.sse_events(6)[:2]
    assert server.finished.is_set()


def test_routes_latest_first_with_fall_through_and_methods(server: LocalServer) -> None:
    server.route("/v1/*", lambda r: json_reply({"who": "first"}))
    server.route("/v1/*", lambda r: None)  # declines: the next route answers
    server.route("/v1/jobs/*", lambda r: Reply(b"posted", ctype="text/plain"), method="POST")
    server.route("/v1/raw", lambda r: Stream([b"a", b"b"], ctype=None, chunked=False, headers=[("x-k", "1")]))
    with httpx2.Client(base_url=server.url) as c:
        assert c.get("/v1/jobs/1").json() == {"who": "first"}
        assert c.post("/v1/jobs/1").text == "posted"
        raw = c.get("/v1/raw")
        assert raw.content == b"ab" and raw.headers["content-length"] == "2" and raw.headers["x-k"] == "1"
        assert "content-type" not in raw.headers
        assert "echo" in c.get("/other").json()  # no route matched: the generic answer


def test_request_log_reads_chunked_bodies(server: LocalServer) -> None:
    httpx2.post(server.url + "/up", content=iter([b'{"a": ', b"1}"]))
    (req,) = server.requests
    assert req["headers"]["transfer-encoding"] == "chunked"
    assert (req["raw"], req["body"], req["method"], req["path"]) == (b'{"a": 1}', {"a": 1}, "POST", "/up")


def test_stop_closes_the_port_and_open_connections(server: LocalServer) -> None:
    client = httpx2.Client()
    assert client.get(server.url + "/x").status_code == 200  # a pooled keep-alive connection
    server.stop()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", server.port), timeout=2).close()
    with pytest.raises(httpx2.TransportError):
        client.get(server.url + "/x")
    server.stop()  # idempotent
    client.close()


def test_compress_corrupt_and_unknown_codings() -> None:
    assert compress(b"x" * 100, "gzip-corrupt")[:2] == b"\x1f\x8b"
    assert compress(b"data", "x-custom") == b"data"
