"""The thinking a model shows beside its answer (Anthropic ``thinking`` blocks, Gemini ``thought``
parts, Bedrock ``reasoningContent``, Responses ``reasoning`` items, Chat ``reasoning_content``):
read from whole bodies and from streams, kept out of the answer's text, and shown by ``show`` and
the export (a ``reasoning`` part of ``gen_ai.output.messages``, as the GenAI conventions have it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forkpoint.otel.attributes import output_messages
from forkpoint.providers import response_fields

BASE = "http://127.0.0.1:9"


def sse(*events: tuple[str | None, dict[str, Any]]) -> list[str]:
    return [(f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}\n\n" for name, data in events]


THOUGHT, ANSWER = "Two and three make five.", "5"

#: provider → (url, a whole body, a stream), each answering ANSWER after thinking THOUGHT (in two pieces)
CASES: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "anthropic": (
        BASE + "/v1/messages",
        {
            "type": "message",
            "content": [
                {"type": "thinking", "thinking": "Two and three ", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "thinking", "thinking": "make five.", "signature": "sig"},
                {"type": "text", "text": ANSWER},
            ],
        },
        sse(
            ("message_start", {"type": "message_start", "message": {"model": "m", "usage": {}}}),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "thinking", "thinking": ""},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "thinking_delta", "thinking": "Two and three "},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "thinking_delta", "thinking": "make five."},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "signature_delta", "signature": "sig"},
                },
            ),
            (
                "content_block_start",
                {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
            ),
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": ANSWER}},
            ),
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
            ("message_stop", {"type": "message_stop"}),
        ),
    ),
    "chat": (
        BASE + "/v1/chat/completions",
        {
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": ANSWER, "reasoning_content": THOUGHT},
                }
            ]
        },
        sse(
            (None, {"choices": [{"index": 0, "delta": {"reasoning_content": "Two and three "}}]}),
            (None, {"choices": [{"index": 0, "delta": {"reasoning": "make five."}}]}),
            (None, {"choices": [{"index": 0, "delta": {"content": ANSWER}, "finish_reason": "stop"}]}),
        ),
    ),
    "responses": (
        BASE + "/v1/responses",
        {
            "object": "response",
            "output": [
                {
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": THOUGHT}],
                },
                {"type": "message", "content": [{"type": "output_text", "text": ANSWER}]},
            ],
        },
        # a stream cut before its terminal event: rebuilt from the deltas
        sse(
            (
                "response.created",
                {"type": "response.created", "response": {"object": "response", "output": []}},
            ),
            (
                "response.output_item.added",
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": {"type": "reasoning", "summary": []},
                },
            ),
            (
                "response.reasoning_summary_text.delta",
                {
                    "type": "response.reasoning_summary_text.delta",
                    "output_index": 0,
                    "delta": "Two and three ",
                },
            ),
            (
                "response.reasoning_summary_text.delta",
                {"type": "response.reasoning_summary_text.delta", "output_index": 0, "delta": "make five."},
            ),
            (
                "response.output_text.delta",
                {"type": "response.output_text.delta", "output_index": 1, "delta": ANSWER},
            ),
        ),
    ),
    "gemini": (
        BASE + "/v1beta/models/m:generateContent",
        {
            "candidates": [
                {
                    "index": 0,
                    "content": {
                        "role": "model",
                        "parts": [{"text": THOUGHT, "thought": True}, {"text": ANSWER}],
                    },
                }
            ]
        },
        sse(
            (
                None,
                {
                    "candidates": [
                        {"index": 0, "content": {"parts": [{"text": "Two and three ", "thought": True}]}}
                    ]
                },
            ),
            (
                None,
                {
                    "candidates": [
                        {"index": 0, "content": {"parts": [{"text": "make five.", "thought": True}]}}
                    ]
                },
            ),
            (
                None,
                {
                    "candidates": [
                        {"index": 0, "content": {"parts": [{"text": ANSWER}]}, "finishReason": "STOP"}
                    ]
                },
            ),
        ),
    ),
    "bedrock": (
        BASE + "/model/m/converse",
        {
            "output": {
                "message": {
                    "role": "assistant",
                    "content": [
                        {"reasoningContent": {"reasoningText": {"text": THOUGHT, "signature": "sig"}}},
                        {"text": ANSWER},
                    ],
                }
            },
            "stopReason": "end_turn",
        },
        sse(
            ("messageStart", {"role": "assistant"}),
            (
                "contentBlockDelta",
                {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "Two and three "}}},
            ),
            (
                "contentBlockDelta",
                {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": "make five."}}},
            ),
            (
                "contentBlockDelta",
                {"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "sig"}}},
            ),
            ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"text": ANSWER}}),
            ("messageStop", {"stopReason": "end_turn"}),
        ),
    ),
}


@pytest.mark.parametrize("provider", list(CASES))
@pytest.mark.parametrize("shape", ["body", "stream"])
def test_the_thinking_is_read_apart_from_the_answer(provider: str, shape: str) -> None:
    url, body, stream = CASES[provider]
    response = {"status": 200, "body": body} if shape == "body" else {"status": 200, "stream": stream}
    read = response_fields(url, response)
    assert (read.reasoning, read.text) == (THOUGHT, ANSWER)


def test_a_response_without_thinking_has_none() -> None:
    url, body, _ = CASES["anthropic"]
    plain = {
        **body,
        "content": [{"type": "redacted_thinking", "data": "opaque"}, {"type": "text", "text": ANSWER}],
    }
    assert response_fields(url, {"status": 200, "body": plain}).reasoning is None


@pytest.mark.parametrize("provider", list(CASES))
def test_the_export_gives_the_thinking_as_a_reasoning_part(provider: str) -> None:
    url, body, _ = CASES[provider]
    event = {
        "request": {"url": url, "body": {}},
        "response": {"status": 200, "body_kind": "json", "body": body},
    }
    (message,) = output_messages(event)
    assert message["parts"][:2] == [
        {"type": "reasoning", "content": THOUGHT},
        {"type": "text", "content": ANSWER},
    ]


def record_thinking(store: Path) -> Path:
    """A session of one Anthropic call (through the SDK, against a local server) whose answer
    comes after thinking: its path."""
    anthropic = pytest.importorskip("anthropic")
    import forkpoint
    from tests.modelserver import LocalServer, json_reply

    _, body, _ = CASES["anthropic"]
    reply = {**body, "id": "msg_1", "role": "assistant", "model": "m", "stop_reason": "end_turn", "usage": {}}
    with LocalServer() as server:
        server.route("/v1/messages", lambda request: json_reply(reply), method="POST")
        with forkpoint.record(store=store) as rec:
            client = anthropic.Anthropic(base_url=server.url, api_key="sk-ant-test", max_retries=0)
            client.messages.create(model="m", max_tokens=9, messages=[{"role": "user", "content": "2 + 3?"}])
    return rec.session_path


def test_show_and_the_page_show_the_thinking_of_a_recorded_call(tmp_path: Path) -> None:
    """``show`` prints the thinking beside the answer, and the HTML page carries it (the viewer
    shows it: tests/views/test_html.py)."""
    from click.testing import CliRunner

    from forkpoint.cli import main

    session = record_thinking(tmp_path / "store")
    shown = CliRunner().invoke(main, ["show", str(session)], env={"COLUMNS": "250"})
    assert shown.exit_code == 0, shown.output
    assert f"thought “{THOUGHT}”" in shown.output and f"“{ANSWER}”" in shown.output
    page = tmp_path / "page.html"
    made = CliRunner().invoke(main, ["show", str(session), "--html", str(page)])
    assert made.exit_code == 0, made.output
    assert json.dumps(THOUGHT) in page.read_text()


def test_gemini_output_tokens_include_the_thinking() -> None:
    """Gemini counts the thinking (``thoughtsTokenCount``) apart from the answer's tokens
    (``candidatesTokenCount``); OpenAI's and Anthropic's output counts include it. The output
    tokens said the answer's only: 7 where 7 + 120 were generated (and billed)."""
    url, body, _ = CASES["gemini"]
    usage = {
        "promptTokenCount": 10,
        "candidatesTokenCount": 7,
        "thoughtsTokenCount": 120,
        "totalTokenCount": 137,
    }
    read = response_fields(url, {"status": 200, "body": {**body, "usageMetadata": usage}})
    assert read.usage == {"input_tokens": 10, "output_tokens": 127}
    only_thought = {"promptTokenCount": 10, "thoughtsTokenCount": 3}
    assert response_fields(url, {"status": 200, "body": {**body, "usageMetadata": only_thought}}).usage == {
        "input_tokens": 10,
        "output_tokens": 3,
    }


def test_the_parts_of_a_reasoning_summary_are_paragraphs() -> None:
    """A Responses reasoning summary comes in parts, each a paragraph: they were run together."""
    url = BASE + "/v1/responses"
    parts = [{"type": "summary_text", "text": "**Adding**"}, {"type": "summary_text", "text": "It is 5."}]
    body = {"object": "response", "output": [{"type": "reasoning", "summary": parts}]}
    assert response_fields(url, {"status": 200, "body": body}).reasoning == "**Adding**\n\nIt is 5."
    delta = "response.reasoning_summary_text.delta"
    stream = sse(
        ("response.created", {"type": "response.created", "response": {"object": "response", "output": []}}),
        (delta, {"type": delta, "output_index": 0, "summary_index": 0, "delta": "**Add"}),
        (delta, {"type": delta, "output_index": 0, "summary_index": 0, "delta": "ing**"}),
        (delta, {"type": delta, "output_index": 0, "summary_index": 1, "delta": "It is 5."}),
    )
    assert response_fields(url, {"status": 200, "stream": stream}).reasoning == "**Adding**\n\nIt is 5."
