"""OpenAI-compatible servers are named as themselves (the wire shape stays ``chat.completions``), and
Anthropic's server tools are read beside the agent's own tool calls."""

from __future__ import annotations

from typing import Any

import pytest

from forkpoint.providers import otel_provider_name, parse_sse, response_text, summarize

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
ANSWER = {
    "id": "x",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
}


@pytest.mark.parametrize(
    "url, name, otel",
    [
        ("https://api.mistral.ai/v1/chat/completions", "mistral", "mistral_ai"),
        ("https://api.groq.com/openai/v1/chat/completions", "groq", "groq"),
        ("https://api.together.xyz/v1/chat/completions", "together", "together"),
        ("https://openrouter.ai/api/v1/chat/completions", "openrouter", "openrouter"),
        ("https://api.deepseek.com/chat/completions", "deepseek", "deepseek"),
        ("http://localhost:11434/v1/chat/completions", "ollama", "ollama"),
        ("https://api.openai.com/v1/chat/completions", "openai", "openai"),
        ("http://127.0.0.1:8000/v1/chat/completions", "openai", "openai"),  # says nothing about itself
    ],
)
def test_compatible_servers_are_named_as_themselves(url: str, name: str, otel: str) -> None:
    s = summarize(url, BODY, {"status": 200, "body": ANSWER})
    assert (s["provider"], s["api"], s["kind"]) == (name, "chat.completions", "model")
    assert otel_provider_name(s) == otel


def test_servers_known_by_what_they_answer() -> None:
    vllm = {**ANSWER, "prompt_logprobs": None, "choices": [{**ANSWER["choices"][0], "stop_reason": None}]}
    assert (
        summarize("http://127.0.0.1:8000/v1/chat/completions", BODY, {"status": 200, "body": vllm})[
            "provider"
        ]
        == "vllm"
    )
    ollama_chunk = 'data: {"id":"c","system_fingerprint":"fp_ollama","choices":[{"index":0,"delta":{"content":"ok"}}]}\n\n'
    s = summarize(
        "http://gpu-box:8080/v1/chat/completions",
        {**BODY, "stream": True},
        {"status": 200, "body": None, "stream": [ollama_chunk]},
    )
    assert s["provider"] == "ollama"


def _server_tool_message() -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [
            {"type": "text", "text": "Let me search. "},
            {
                "type": "server_tool_use",
                "id": "srvtoolu_1",
                "name": "web_search",
                "input": {"query": "forkpoint"},
            },
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
            {"type": "text", "text": "Found nothing."},
            {"type": "tool_use", "id": "toolu_1", "name": "note", "input": {"text": "none"}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 10, "output_tokens": 5},
    }


def test_anthropic_server_tools_and_every_text_block() -> None:
    url = "https://api.anthropic.com/v1/messages"
    body = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "search"}],
    }
    response = {"status": 200, "body": _server_tool_message()}
    s = summarize(url, body, response)
    assert s["server_tool_calls"] == [
        {"id": "srvtoolu_1", "name": "web_search", "arguments": '{"query":"forkpoint"}'}
    ]
    assert s["tool_calls"] == [{"id": "toolu_1", "name": "note", "arguments": '{"text":"none"}'}]
    assert response_text(url, response) == "Let me search. Found nothing."


def test_anthropic_server_tools_in_a_stream() -> None:
    def ev(kind: str, data: str) -> str:
        return f"event: {kind}\ndata: {data}\n\n"

    stream = [
        ev(
            "message_start",
            '{"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":3}}}',
        ),
        ev(
            "content_block_start",
            '{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}',
        ),
        ev(
            "content_block_delta",
            '{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\\"query\\": \\"x\\"}"}}',
        ),
        ev("content_block_stop", '{"type":"content_block_stop","index":0}'),
        ev(
            "content_block_start",
            '{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}',
        ),
        ev(
            "content_block_delta",
            '{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"done"}}',
        ),
        ev(
            "message_delta",
            '{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}',
        ),
        ev("message_stop", '{"type":"message_stop"}'),
    ]
    assert len(parse_sse("".join(stream))) == 8
    s = summarize(
        "https://api.anthropic.com/v1/messages",
        {"model": "c", "messages": [], "stream": True},
        {"status": 200, "body": None, "stream": stream},
    )
    assert s["server_tool_calls"] == [
        {"id": "srvtoolu_1", "name": "web_search", "arguments": '{"query": "x"}'}
    ]
    assert s["tool_calls"] == [] and s["stop_reason"] == "end_turn"


def test_show_and_the_html_page_show_server_tools(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    import httpx

    import forkpoint
    from forkpoint.html import write_html
    from forkpoint.show import render
    from tests.modelserver import LocalServer, json_reply

    with LocalServer() as srv:
        srv.route("/v1/messages", lambda r: json_reply(_server_tool_message()))
        with forkpoint.record(store=tmp_path / "store") as rec:
            httpx.post(
                srv.url + "/v1/messages", json={"model": "claude-sonnet-4-5", "max_tokens": 9, "messages": []}
            )
    session = forkpoint.Session.load(rec.session_path)
    render(session)
    out = capsys.readouterr().out
    assert "⚙ server tool web_search(" in out and "→ note(" in out and "Let me search. Found nothing." in out
    page = tmp_path / "run.html"
    write_html(session, page)
    html = page.read_text()
    assert (
        "server_tool_calls" in html and "srvtoolu_1" in html and "server tool (run by the provider)" in html
    )
