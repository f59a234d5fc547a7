"""The real openai and anthropic SDKs, unmodified: recorded against the demo model server, then
replayed with the server stopped. What the SDK parses on replay must equal what it parsed live."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

import forkpoint
from forkpoint.demo.server import ModelServer

TOOLS_CHAT = [
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    }
]
TOOLS_ANTHROPIC = [
    {
        "name": "write_file",
        "description": "Write a file.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    }
]
TOOLS_RESPONSES = [
    {
        "type": "function",
        "name": "write_file",
        "description": "Write a file.",
        "parameters": TOOLS_CHAT[0]["function"]["parameters"],
    }
]
MSG = [{"role": "user", "content": "Reproduce the bug with a scratch file."}]


def dump(x: Any) -> Any:
    return x.model_dump(mode="json") if hasattr(x, "model_dump") else x


def oa(url: str, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-proj-" + "x" * 40, max_retries=0, **kw)


def aoa(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-proj-" + "x" * 40, max_retries=0)


def an(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="sk-ant-api03-" + "y" * 40, max_retries=0)


def aan(url: str) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-api03-" + "y" * 40, max_retries=0)


def chat_sync(url: str) -> list[Any]:
    c = oa(url)
    whole = c.chat.completions.create(model="demo-model", messages=MSG, tools=TOOLS_CHAT)
    chunks = c.chat.completions.create(
        model="demo-model",
        messages=MSG,
        tools=TOOLS_CHAT,
        stream=True,
        stream_options={"include_usage": True},
    )
    plain = c.chat.completions.create(model="demo-model", messages=MSG)
    return [dump(whole), [dump(ch) for ch in chunks], dump(plain)]


def chat_legacy_httpx(url: str) -> list[Any]:
    with httpx.Client() as http:
        c = oa(url, http_client=http)
        whole = c.chat.completions.create(model="demo-model", messages=MSG, tools=TOOLS_CHAT)
        chunks = c.chat.completions.create(model="demo-model", messages=MSG, stream=True)
        return [dump(whole), [dump(ch) for ch in chunks]]


def chat_helper_stream(url: str) -> list[Any]:
    with oa(url).chat.completions.stream(model="demo-model", messages=MSG, tools=TOOLS_CHAT) as s:
        events = [e.type for e in s]
        final = s.get_final_completion()
    return [events, dump(final)]


async def chat_async(url: str) -> list[Any]:
    c = aoa(url)
    whole = await c.chat.completions.create(model="demo-model", messages=MSG, tools=TOOLS_CHAT)
    chunks = await c.chat.completions.create(model="demo-model", messages=MSG, tools=TOOLS_CHAT, stream=True)
    return [dump(whole), [dump(ch) async for ch in chunks]]


def responses_sync(url: str) -> list[Any]:
    c = oa(url)
    whole = c.responses.create(model="demo-model", input="Reproduce the bug.", tools=TOOLS_RESPONSES)
    events = c.responses.create(model="demo-model", input="Say hi.", stream=True)
    with c.responses.stream(model="demo-model", input="Reproduce the bug.", tools=TOOLS_RESPONSES) as s:
        helper = [e.type for e in s]
        final = s.get_final_response()
    return [dump(whole), [dump(e) for e in events], helper, dump(final)]


def messages_sync(url: str) -> list[Any]:
    c = an(url)
    whole = c.messages.create(model="claude-demo", max_tokens=256, messages=MSG, tools=TOOLS_ANTHROPIC)
    raw = c.messages.create(model="claude-demo", max_tokens=256, messages=MSG, stream=True)
    with c.messages.stream(model="claude-demo", max_tokens=256, messages=MSG, tools=TOOLS_ANTHROPIC) as s:
        text = list(s.text_stream)
        final = s.get_final_message()
    return [dump(whole), [dump(e) for e in raw], text, dump(final)]


async def messages_async(url: str) -> list[Any]:
    c = aan(url)
    whole = await c.messages.create(model="claude-demo", max_tokens=256, messages=MSG)
    async with c.messages.stream(
        model="claude-demo", max_tokens=256, messages=MSG, tools=TOOLS_ANTHROPIC
    ) as s:
        events = [e.type async for e in s]
        final = await s.get_final_message()
    return [dump(whole), events, dump(final)]


SCENARIOS: dict[str, Callable[[str], list[Any]]] = {
    "openai-chat-sync": chat_sync,
    "openai-chat-legacy-httpx": chat_legacy_httpx,
    "openai-chat-stream-helper": chat_helper_stream,
    "openai-chat-async": lambda url: asyncio.run(chat_async(url)),
    "openai-responses": responses_sync,
    "anthropic-messages-sync": messages_sync,
    "anthropic-messages-async": lambda url: asyncio.run(messages_async(url)),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_sdk_record_then_replay_offline(name: str, tmp_path: Path) -> None:
    scenario = SCENARIOS[name]
    with ModelServer(turns=1) as server:
        url = server.base_url
        with forkpoint.record(store=tmp_path) as rec:
            live = scenario(url)
        n_requests = len(server.requests)
    # The server is stopped: a live request now fails; only the session can answer.
    with pytest.raises((openai.APIConnectionError, anthropic.APIConnectionError)):
        oa(url).chat.completions.create(model="demo-model", messages=MSG)

    with forkpoint.replay(rec.session_path) as rp:
        replayed = scenario(url)
    assert replayed == live
    report = rp.report()
    assert report["matched"] == report["recorded"] == n_requests
    assert report["unused"] == [] and report["divergence"] is None

    session = forkpoint.Session.load(rec.session_path)
    for call in session.by_type("model_call"):
        assert call["summary"]["model"] in ("demo-model", "claude-demo")
        assert call["request"]["body_kind"] == "json"
        if call["summary"]["stream"]:
            assert call["response"]["body_kind"] == "stream" and len(call["response"]["chunks"]) > 1
    data = b"".join(p.read_bytes() for p in rec.session_path.rglob("*") if p.is_file())
    assert b"x" * 40 not in data and b"y" * 40 not in data  # API keys never reach disk


def test_stream_is_teed_not_buffered(tmp_path: Path) -> None:
    """While recording, the SDK's caller gets the first chunk before the server ends the stream."""
    from tests.modelserver import LocalServer, Stream, chat_chunks, chat_completion

    server = LocalServer()
    answer = chat_completion("chatcmpl-1", "demo-model", text="one two three four five six")
    # The server parks after its first event until the test sets its gate: a tee that buffered the
    # stream would hand the caller nothing before the server finished (it then opens after 10 s).
    server.route("/v1/chat/completions", lambda _: Stream(chat_chunks(answer), gate=True))
    seen_before_finish: list[bool] = []
    try:
        with forkpoint.record(store=tmp_path):
            stream = oa(server.url).chat.completions.create(model="demo-model", messages=MSG, stream=True)
            for i, _ in enumerate(stream):
                if i == 0:
                    seen_before_finish.append(not server.finished.is_set())
                    server.gate.set()
    finally:
        server.stop()
    assert seen_before_finish == [True]
    assert server.finished.is_set()


def test_summary_of_a_tool_call_turn(tmp_path: Path) -> None:
    with ModelServer(turns=1, seed=7) as server, forkpoint.record(store=tmp_path) as rec:
        c = oa(server.base_url)
        r = c.chat.completions.create(
            model="demo-model",
            messages=MSG,
            tools=TOOLS_CHAT,
            temperature=0.3,
            top_p=0.9,
            seed=11,
            max_tokens=99,
        )
    (call,) = forkpoint.Session.load(rec.session_path).by_type("model_call")
    s = call["summary"]
    assert (s["provider"], s["api"], s["model"]) == ("openai", "chat.completions", "demo-model")
    assert (s["temperature"], s["top_p"], s["seed"], s["max_tokens"]) == (0.3, 0.9, 11, 99)
    assert s["stream"] is False and s["n_messages"] == 1 and s["n_tools"] == 1
    tc = r.choices[0].message.tool_calls[0]
    assert s["tool_calls"] == [{"id": tc.id, "name": "write_file", "arguments": tc.function.arguments}]
    assert s["usage"] == {
        "input_tokens": r.usage.prompt_tokens,
        "output_tokens": r.usage.completion_tokens,
        "cache_read_input_tokens": r.usage.prompt_tokens_details.cached_tokens,
    }
    assert s["stop_reason"] == "tool_calls"


def test_anthropic_prompt_caching_agent_is_parsed_by_what_each_call_adds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A coding agent on Anthropic's prompt caching, as users write one: the real SDK, a tool loop,
    # and a cache_control marker on the last two user messages, which moves on at every call. Each
    # request body changes a message it sent before, then appends; forkpoint parses it from the
    # changed message on (capture.resent), and the run replays exactly.
    from forkpoint.capture import resent

    parsed: list[tuple[int, int]] = []  # (bytes parsed, body size) of each request

    def loop(url: str) -> list[Any]:
        client, messages, out = an(url), [dict(MSG[0])], []
        while True:
            marked = [dict(m) for m in messages]
            for m in [m for m in marked if m["role"] == "user"][-2:]:
                blocks = (
                    m["content"]
                    if isinstance(m["content"], list)
                    else [{"type": "text", "text": m["content"]}]
                )
                m["content"] = [*blocks[:-1], {**blocks[-1], "cache_control": {"type": "ephemeral"}}]
            reply = client.messages.create(
                model="claude-demo", max_tokens=256, messages=marked, tools=TOOLS_ANTHROPIC
            )
            out.append(dump(reply))
            messages.append({"role": "assistant", "content": [dump(b) for b in reply.content]})
            uses = [b for b in reply.content if b.type == "tool_use"]
            if not uses:
                return out
            results = [{"type": "tool_result", "tool_use_id": u.id, "content": "written"} for u in uses]
            messages.append({"role": "user", "content": results})

    def counting(data: Any, loads: Callable[[Any], Any] = orjson.loads) -> Any:
        parsed[-1] = (parsed[-1][0] + len(data), parsed[-1][1])
        return loads(data)

    real = resent.loads

    def each(data: bytes, endpoint: str, owner: object | None) -> Any:
        parsed.append((0, len(data)))
        return real(data, endpoint, owner)

    # (resent's own parsers: the SDK and the rest of forkpoint parse as they do)
    monkeypatch.setattr(
        resent, "orjson", SimpleNamespace(loads=counting, JSONDecodeError=orjson.JSONDecodeError)
    )
    monkeypatch.setattr(resent, "loads_exact", functools.partial(counting, loads=resent.loads_exact))
    monkeypatch.setattr(resent, "loads", each)
    with ModelServer(turns=30) as server:
        url = server.base_url
        with forkpoint.record(store=tmp_path) as rec:
            live = loop(url)
        assert len(server.requests) == 31
    recorded = list(parsed)
    with forkpoint.replay(rec.session_path) as rp:
        assert loop(url) == live
    report = rp.report()
    assert report["matched"] == report["recorded"] == 31 and report["divergence"] is None
    # Each body was read from where it changed (and the items before it, which the last call added,
    # cut to find where it is): about the same bytes at every call, while the bodies grow.
    steady = [n for n, _ in recorded[4:]]
    assert max(steady) < 2 * min(steady) and recorded[-1][0] < recorded[-1][1] / 5, recorded
