"""Tests for forkpoint.providers.

Two kinds of tests live here:

* tests on REAL recorded provider traffic, read in place from ``../shared/realdata/cassettes/`` (see
  its README): every expected value below was read from the YAML files by hand, not computed by
  the code under test. They are skipped, with a reason, when that folder is absent;
* hand-written tests (SSE parsing rules, doc-shaped Gemini / Chat / Responses examples, error
  bodies, garbage input) that always run.

The realdata tests are skipped by a marker rather than a module-level ``pytest.skip``: a
module-level skip would also skip the hand-written tests in this same file.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from forkpoint.providers import (
    SUMMARY_KEYS,
    SSEEvent,
    detect,
    genai_tool_definitions,
    genai_usage,
    parse_sse,
    request_messages,
    response_text,
    summarize,
    tool_results,
)
from tests.modelserver import LocalServer
from tests.realdata import CASSETTES

needs_realdata = pytest.mark.skipif(
    not CASSETTES.is_dir(),
    reason=f"real recorded traffic not found at {CASSETTES} (CI keeps ../shared/realdata beside "
    "the checkout; the hand-written tests still run)",
)


# --------------------------------------------------------------------------------------------------
# Loading the two VCR dialects


def _header(headers: dict[str, Any] | None, name: str) -> str:
    for key, value in (headers or {}).items():
        if key.lower() == name:
            return value[0] if isinstance(value, list) else str(value)
    return ""


def _interaction(it: dict[str, Any]) -> tuple[str, Any, dict[str, Any]]:
    """``(url, request_body, response)`` as the recorder would hand them to summarize().

    Stock VCR.py (crewAI): request ``body`` is JSON text, response ``body.string`` is JSON or SSE
    text. pydantic-ai: JSON bodies are stored parsed under ``parsed_body``; SSE stays in
    ``body.string``.
    """
    rq, rs = it["request"], it["response"]
    request_body = rq["parsed_body"] if "parsed_body" in rq else json.loads(rq["body"])
    status = rs["status"]["code"]
    if "parsed_body" in rs:
        return (
            rq["uri"],
            request_body,
            {"status": status, "body": rs["parsed_body"], "stream": None},
        )
    text = rs["body"]["string"]
    if _header(rs.get("headers"), "content-type").startswith("text/event-stream"):
        return rq["uri"], request_body, {"status": status, "body": None, "stream": [text]}
    return rq["uri"], request_body, {"status": status, "body": json.loads(text), "stream": None}


def _load(name: str) -> list[tuple[str, Any, dict[str, Any]]]:
    with open(CASSETTES / name, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh)
    return [_interaction(it) for it in doc["interactions"]]


def _summary(**fields: Any) -> dict[str, Any]:
    """An expected summary: every key None unless given; ``kind`` is ``model`` for a call a provider
    recognized, ``http`` otherwise."""
    unknown = set(fields) - set(SUMMARY_KEYS)
    assert not unknown, unknown
    fields.setdefault("kind", "model" if fields.get("provider") not in (None, "unknown") else "http")
    return {key: fields.get(key) for key in SUMMARY_KEYS}


def _call(id: str | None, name: str, arguments: str) -> dict[str, Any]:
    return {"id": id, "name": name, "arguments": arguments}


def _usage(inp: int | None, out: int | None, **cache: int) -> dict[str, Any]:
    """A summary's usage; ``cache`` holds the prompt-cache counts the response reports
    (``cache_read_input_tokens``, ``cache_creation_input_tokens``)."""
    return {"input_tokens": inp, "output_tokens": out, **cache}


# --------------------------------------------------------------------------------------------------
# Expected facts, read by hand from each cassette

_OPENAI = {"provider": "openai", "host": "api.openai.com"}
_ANTHROPIC = {"provider": "anthropic", "api": "messages", "host": "api.anthropic.com"}

EXPECTED: dict[str, list[tuple[dict[str, Any], str | None, list[dict[str, str]]]]] = {
    # (summary, response_text, request_messages) per interaction
    "pydantic-ai__openai_chat_stream_tool_call.yaml": [
        (
            _summary(
                **_OPENAI,
                api="chat.completions",
                model="gpt-4o-mini",
                response_model="gpt-4o-mini-2024-07-18",
                stream=True,
                n_messages=1,
                n_tools=1,
                # six chunks: "" + '{"' + 'country' + '":"' + 'UK' + '"}'
                tool_calls=[_call("call_ZR5UUuTt3pf61kjwAJIYdVMj", "get_capital", '{"country":"UK"}')],
                usage=_usage(53, 15, cache_read_input_tokens=0),  # the final chunk with "choices": []
                stop_reason="tool_calls",
            ),
            None,  # delta.content is null: no text at all
            [{"role": "user", "text": "What is the capital of the UK? Use the tool, then answer."}],
        ),
        (
            _summary(
                **_OPENAI,
                api="chat.completions",
                model="gpt-4o-mini",
                response_model="gpt-4o-mini-2024-07-18",
                stream=True,
                n_messages=3,
                n_tools=1,
                tool_calls=[],
                usage=_usage(78, 9, cache_read_input_tokens=0),
                stop_reason="stop",
            ),
            "The capital of the UK is London.",
            [
                {
                    "role": "user",
                    "text": "What is the capital of the UK? Use the tool, then answer.",
                },
                {"role": "assistant", "text": ""},
                {"role": "tool", "text": "London"},
            ],
        ),
    ],
    "pydantic-ai__anthropic_tool_call.yaml": [
        (
            _summary(
                **_ANTHROPIC,
                model="claude-sonnet-4-5",
                response_model="claude-sonnet-4-5-20250929",
                max_tokens=4096,
                stream=False,  # "stream: false" in the request
                n_messages=1,
                n_tools=1,
                tool_calls=[_call("toolu_01WN4AuToBnJyXNQXwQBBebj", "get_weather", '{"city":"Paris"}')],
                usage=_usage(572, 53, cache_read_input_tokens=0, cache_creation_input_tokens=0),
                stop_reason="tool_use",
            ),
            None,
            [{"role": "user", "text": "What's the weather in Paris?"}],
        ),
        (
            _summary(
                **_ANTHROPIC,
                model="claude-sonnet-4-5",
                response_model="claude-sonnet-4-5-20250929",
                max_tokens=4096,
                stream=False,
                n_messages=3,
                n_tools=1,
                tool_calls=[],
                usage=_usage(646, 31, cache_read_input_tokens=0, cache_creation_input_tokens=0),
                stop_reason="end_turn",
            ),
            "The weather in Paris is currently sunny with a temperature of 22°C"
            " (approximately 72°F). It's a beautiful day!",
            [
                {"role": "user", "text": "What's the weather in Paris?"},
                {"role": "assistant", "text": ""},  # only a tool_use block
                {"role": "user", "text": "Sunny, 22C in Paris"},  # the tool_result content
            ],
        ),
    ],
    "pydantic-ai__openai_responses_stream.yaml": [
        (
            _summary(
                **_OPENAI,
                api="responses",
                model="gpt-4o",
                response_model="gpt-4o-2024-08-06",
                stream=True,
                n_messages=1,
                n_tools=1,
                # the call_id (what function_call_output refers to), not the fc_... item id
                tool_calls=[_call("call_kL0PCQV7M2WMoVX8V8OtYSAL", "get_capital", '{"country":"France"}')],
                usage=_usage(255, 16, cache_read_input_tokens=0),
                stop_reason="completed",
            ),
            None,
            # instructions is "" in the request: no system entry
            [{"role": "user", "text": "What is the capital of France?"}],
        ),
        (
            _summary(
                **_OPENAI,
                api="responses",
                model="gpt-4o",
                response_model="gpt-4o-2024-08-06",
                stream=True,
                n_messages=3,  # user message, function_call, function_call_output
                n_tools=1,
                tool_calls=[],
                usage=_usage(278, 9, cache_read_input_tokens=0),
                stop_reason="completed",
            ),
            "The capital of France is Paris.",
            [
                {"role": "user", "text": "What is the capital of France?"},
                {"role": "assistant", "text": ""},
                {"role": "tool", "text": "Paris"},
            ],
        ),
    ],
    "crewai__anthropic_stream_tool_call.yaml": [
        (
            _summary(
                **_ANTHROPIC,
                model="claude-3-5-haiku-latest",
                response_model="claude-3-5-haiku-20241022",
                max_tokens=4096,
                stream=True,
                n_messages=1,
                n_tools=1,
                # partial_json "" + '{"c' + 'ity":' + ' "San Franci' + 'sco"}': raw, with the space
                tool_calls=[
                    _call(
                        "toolu_01Lfr3kUnHMZApePPRWMv1uS",
                        "get_current_temperature",
                        '{"city": "San Francisco"}',
                    )
                ],
                # input from message_start (351), output from message_delta (85, not the start's 1)
                usage=_usage(351, 85, cache_read_input_tokens=0, cache_creation_input_tokens=0),
                stop_reason="tool_use",
            ),
            "I'll help you find out the current temperature in San Francisco. I'll use the"
            " get_current_temperature function to retrieve this information.",
            [{"role": "user", "text": "What is the temperature in San Francisco?"}],
        ),
        (
            _summary(
                **_ANTHROPIC,
                model="claude-3-5-haiku-latest",
                response_model="claude-3-5-haiku-20241022",
                max_tokens=4096,
                stream=True,
                n_messages=3,
                n_tools=1,
                tool_calls=[],
                usage=_usage(
                    457, 33, cache_read_input_tokens=0, cache_creation_input_tokens=0
                ),  # message_start says output_tokens 2
                stop_reason="end_turn",
            ),
            "The current temperature in San Francisco is 72°F. It sounds like a pleasant day! Is"
            " there anything else I can help you with?",
            [
                {"role": "user", "text": "What is the temperature in San Francisco?"},
                {
                    "role": "assistant",
                    "text": "I'll help you find out the current temperature in San Francisco. I'll"
                    " use the get_current_temperature function to retrieve this information.",
                },
                {"role": "user", "text": "The temperature in San Francisco is 72°F"},
            ],
        ),
    ],
    "crewai__anthropic_tool_call.yaml": [
        (
            _summary(
                **_ANTHROPIC,
                model="claude-sonnet-4-5",
                response_model="claude-sonnet-4-5-20250929",
                max_tokens=4096,
                stream=False,
                n_messages=1,
                n_tools=1,
                tool_calls=[
                    _call(
                        "toolu_01AoUFM2koNLsFscK6xjnLPo",
                        "get_weather",
                        '{"location":"Tokyo, Japan"}',
                    )
                ],
                usage=_usage(620, 55, cache_read_input_tokens=0, cache_creation_input_tokens=0),
                stop_reason="tool_use",
            ),
            None,
            [{"role": "user", "text": "What is the weather in Tokyo? Use the get_weather tool."}],
        ),
        (
            _summary(
                **_ANTHROPIC,
                model="claude-sonnet-4-5",
                response_model="claude-sonnet-4-5-20250929",
                max_tokens=4096,
                stream=False,
                n_messages=3,
                n_tools=1,
                tool_calls=[],
                usage=_usage(701, 22, cache_read_input_tokens=0, cache_creation_input_tokens=0),
                stop_reason="end_turn",
            ),
            "The weather in Tokyo is currently sunny and 72°F (approximately 22°C).",
            [
                {"role": "user", "text": "What is the weather in Tokyo? Use the get_weather tool."},
                {"role": "assistant", "text": ""},
                {"role": "user", "text": "The weather in Tokyo, Japan is sunny and 72°F"},
            ],
        ),
    ],
    "crewai__openai_stream_tool_call.yaml": [
        (
            _summary(
                **_OPENAI,
                api="chat.completions",
                model="gpt-4o-mini",
                response_model="gpt-4o-mini-2024-07-18",
                stream=True,
                n_messages=1,
                n_tools=1,
                tool_calls=[
                    _call(
                        "call_QXZLQbxriC1eBnOMXLPMopfe",
                        "get_current_temperature",
                        '{"city":"San Francisco"}',
                    )
                ],
                usage=_usage(66, 16, cache_read_input_tokens=0),
                stop_reason="tool_calls",
            ),
            None,
            [{"role": "user", "text": "What is the temperature in San Francisco?"}],
        ),
    ],
}

CASES = [(name, i) for name, turns in EXPECTED.items() for i in range(len(turns))]
STREAM_CASES = [
    ("pydantic-ai__openai_chat_stream_tool_call.yaml", 0),
    ("pydantic-ai__openai_chat_stream_tool_call.yaml", 1),
    ("pydantic-ai__openai_responses_stream.yaml", 0),
    ("pydantic-ai__openai_responses_stream.yaml", 1),
    ("crewai__anthropic_stream_tool_call.yaml", 0),
    ("crewai__anthropic_stream_tool_call.yaml", 1),
    ("crewai__openai_stream_tool_call.yaml", 0),
]


def _case_id(case: tuple[str, int]) -> str:
    return f"{case[0].removesuffix('.yaml')}[{case[1]}]"


# --------------------------------------------------------------------------------------------------
# Real recorded traffic


@needs_realdata
def test_all_six_cassettes_are_covered() -> None:
    assert sorted(p.name for p in CASSETTES.glob("*.yaml")) == sorted(EXPECTED)
    for name, turns in EXPECTED.items():
        assert len(_load(name)) == len(turns), name


@needs_realdata
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_cassette_summary(case: tuple[str, int]) -> None:
    name, i = case
    url, request_body, response = _load(name)[i]
    summary, _, _ = EXPECTED[name][i]
    assert summarize(url, request_body, response) == summary


@needs_realdata
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_cassette_response_text(case: tuple[str, int]) -> None:
    name, i = case
    url, _, response = _load(name)[i]
    assert response_text(url, response) == EXPECTED[name][i][1]


@needs_realdata
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_cassette_request_messages(case: tuple[str, int]) -> None:
    name, i = case
    url, request_body, _ = _load(name)[i]
    assert request_messages(url, request_body) == EXPECTED[name][i][2]


@needs_realdata
def test_cassette_request_body_as_json_text_gives_same_summary() -> None:
    # crewAI stores the request body as JSON text; handing that text over unparsed must not matter.
    with open(CASSETTES / "crewai__anthropic_tool_call.yaml", encoding="utf-8") as fh:
        it = yaml.safe_load(fh)["interactions"][0]
    url, parsed, response = _interaction(it)
    assert summarize(url, it["request"]["body"], response) == summarize(url, parsed, response)
    assert summarize(url, {"$text": it["request"]["body"]}, response)["n_tools"] == 1


def _rechunk(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


@needs_realdata
@pytest.mark.parametrize("size", [1, 7])
@pytest.mark.parametrize("case", STREAM_CASES, ids=_case_id)
def test_cassette_stream_rechunked(case: tuple[str, int], size: int) -> None:
    name, i = case
    url, request_body, response = _load(name)[i]
    (text,) = response["stream"]
    rechunked = {**response, "stream": _rechunk(text, size)}
    assert summarize(url, request_body, rechunked) == EXPECTED[name][i][0]
    assert response_text(url, rechunked) == EXPECTED[name][i][1]


@needs_realdata
@pytest.mark.parametrize("newline", ["\r\n", "\r"])
@pytest.mark.parametrize("case", STREAM_CASES, ids=_case_id)
def test_cassette_stream_other_line_endings(case: tuple[str, int], newline: str) -> None:
    # No JSON data line holds a raw newline, so only the SSE line structure changes. Chunks of 3
    # put some "\r\n" pairs across a chunk boundary: they must still count as one line break.
    name, i = case
    url, request_body, response = _load(name)[i]
    (text,) = response["stream"]
    converted = {**response, "stream": _rechunk(text.replace("\n", newline), 3)}
    assert summarize(url, request_body, converted) == EXPECTED[name][i][0]


@needs_realdata
def test_cassette_sse_events_of_a_real_anthropic_stream() -> None:
    url, _, response = _load("crewai__anthropic_stream_tool_call.yaml")[0]
    events = parse_sse("".join(response["stream"]))
    # Counted in the file: 1 message_start, 2 content_block_start, 13 text_delta and 5
    # input_json_delta deltas, 1 ping, 2 content_block_stop, 1 message_delta, 1 message_stop.
    names = [e.event for e in events]
    assert len(events) == 26
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert names.count("content_block_delta") == 18 and names.count("ping") == 1
    assert all(e.id is None for e in events)
    # Anthropic pads the JSON with spaces before its last brace; it stays in the data.
    assert events[-1].data == '{"type":"message_stop"      }'


@needs_realdata
def test_cassette_truncated_anthropic_stream() -> None:
    url, request_body, response = _load("crewai__anthropic_stream_tool_call.yaml")[0]
    (text,) = response["stream"]
    cut = {**response, "stream": [text[: text.index("event: message_delta")]]}
    s = summarize(url, request_body, cut)
    # only message_start's usage was received (with its cache counts)
    assert s["usage"] == _usage(351, 1, cache_read_input_tokens=0, cache_creation_input_tokens=0)
    assert s["stop_reason"] is None
    assert s["tool_calls"] == EXPECTED["crewai__anthropic_stream_tool_call.yaml"][0][0]["tool_calls"]


@needs_realdata
def test_cassette_truncated_responses_stream_is_rebuilt_from_deltas() -> None:
    name = "pydantic-ai__openai_responses_stream.yaml"
    url, request_body, response = _load(name)[0]
    (text,) = response["stream"]
    expected_call = [_call("call_kL0PCQV7M2WMoVX8V8OtYSAL", "get_capital", '{"country":"France"}')]
    for marker in (
        "event: response.completed",  # output_item.done was received
        "event: response.function_call_arguments.done",  # only the five argument deltas
    ):
        cut = {**response, "stream": [text[: text.index(marker)]]}
        s = summarize(url, request_body, cut)
        assert s["tool_calls"] == expected_call, marker
        assert s["response_model"] == "gpt-4o-2024-08-06"
        assert s["stop_reason"] == "in_progress"  # the last status the stream reported
        assert s["usage"] is None
    url, request_body, response = _load(name)[1]
    (text,) = response["stream"]
    cut = {**response, "stream": [text[: text.index("event: response.output_text.done")]]}
    assert response_text(url, cut) == "The capital of France is Paris."


@needs_realdata
@pytest.mark.parametrize("case", STREAM_CASES, ids=_case_id)
def test_cassette_stream_cut_anywhere_never_raises(case: tuple[str, int]) -> None:
    name, i = case
    url, request_body, response = _load(name)[i]
    (text,) = response["stream"]
    for end in range(0, len(text), 11):
        cut = {**response, "stream": [text[:end]]}
        s = summarize(url, request_body, cut)
        assert tuple(s) == SUMMARY_KEYS
        response_text(url, cut)


# --------------------------------------------------------------------------------------------------
# SSE parsing (WHATWG rules), hand-written


def test_sse_basic_and_line_endings() -> None:
    expected = [SSEEvent("a", "1", None), SSEEvent(None, "2", None)]
    for nl in ("\n", "\r\n", "\r"):
        assert parse_sse(f"event: a{nl}data: 1{nl}{nl}data: 2{nl}{nl}") == expected
    assert parse_sse("event: a\r\ndata: 1\r\rdata: 2\n\n") == expected  # mixed


def test_sse_multiline_data_and_space_stripping() -> None:
    assert parse_sse("data: a\ndata:b\ndata:  c\ndata\ndata:\n\n") == [SSEEvent(None, "a\nb\n c\n\n", None)]


def test_sse_comments_and_unknown_fields_ignored() -> None:
    text = ": this is a comment\nretry: 1000\nfoo: bar\n:another\ndata: x\n: trailing\n\n"
    assert parse_sse(text) == [SSEEvent(None, "x", None)]
    assert parse_sse(": keep-alive\n\n: ping\n\n") == []


def test_sse_event_without_data_is_not_dispatched() -> None:
    # The event name is dropped with it: the next event does not inherit "lonely".
    assert parse_sse("event: lonely\n\ndata: next\n\n") == [SSEEvent(None, "next", None)]
    # ... but an empty data line is data.
    assert parse_sse("event: e\ndata:\n\n") == [SSEEvent("e", "", None)]
    # event type resets after each dispatch
    assert parse_sse("event: a\ndata: 1\n\ndata: 2\n\n")[1].event is None


def test_sse_trailing_event_without_blank_line() -> None:
    assert parse_sse("data: 1\n\ndata: 2") == [SSEEvent(None, "1", None), SSEEvent(None, "2", None)]
    assert parse_sse("data: 1\n\ndata: 2\n") == [
        SSEEvent(None, "1", None),
        SSEEvent(None, "2", None),
    ]
    assert parse_sse("data: 1\n\nevent: only-a-name\n") == [SSEEvent(None, "1", None)]
    assert parse_sse("") == []
    assert parse_sse("\n\n\n") == []


def test_sse_ids_persist_as_in_whatwg() -> None:
    text = "id: 1\ndata: a\n\ndata: b\n\nid: 2\0x\ndata: c\n\nid\ndata: d\n\n"
    assert parse_sse(text) == [
        SSEEvent(None, "a", "1"),
        SSEEvent(None, "b", "1"),  # the last event ID is kept
        SSEEvent(None, "c", "1"),  # an id with NUL is ignored
        SSEEvent(None, "d", None),  # an empty id resets it
    ]


def test_sse_bom_and_colon_in_value() -> None:
    assert parse_sse('\ufeffdata: {"a": "b:c"}\n\n') == [SSEEvent(None, '{"a": "b:c"}', None)]
    # only one leading BOM is dropped; a second one makes an unknown field name
    assert parse_sse("\ufeff\ufeffdata: x\n\n") == []


def test_sse_non_string_input() -> None:
    assert parse_sse(None) == []  # type: ignore[arg-type]
    assert parse_sse(b"data: x\n\n") == []  # type: ignore[arg-type]


def test_sse_event_is_frozen() -> None:
    ev = SSEEvent("a", "b", None)
    with pytest.raises(AttributeError):
        ev.data = "c"  # type: ignore[misc]


# --------------------------------------------------------------------------------------------------
# detect


@pytest.mark.parametrize(
    "url, body, expected",
    [
        ("https://api.openai.com/v1/chat/completions", None, ("openai", "chat.completions")),
        ("https://api.openai.com/v1/responses", None, ("openai", "responses")),
        ("https://api.anthropic.com/v1/messages", None, ("anthropic", "messages")),
        ("https://api.anthropic.com/v1/messages?beta=true", None, ("anthropic", "messages")),
        ("http://localhost:8080/messages", None, ("anthropic", "messages")),
        (
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash:generateContent",
            None,
            ("gemini", "generateContent"),
        ),
        (
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash"
            ":streamGenerateContent?alt=sse",
            None,
            ("gemini", "generateContent"),
        ),
        # OpenAI-compatible servers: OpenAI in shape
        ("https://api.groq.com/openai/v1/chat/completions", None, ("openai", "chat.completions")),
        ("http://localhost:11434/v1/chat/completions", None, ("openai", "chat.completions")),
        (
            "https://generativelanguage.googleapis.com/v1beta/openai/chat/completions",
            None,
            ("openai", "chat.completions"),
        ),
        (
            "https://my.openai.azure.com/openai/deployments/gpt4o/chat/completions?api-version=1",
            None,
            ("openai", "chat.completions"),
        ),
        (
            "https://us-east5-aiplatform.googleapis.com/v1/projects/p/locations/us-east5/publishers"
            "/anthropic/models/claude-sonnet-4@20250514:streamRawPredict",
            None,
            ("anthropic", "messages"),
        ),
        # known hosts, other endpoints
        ("https://api.anthropic.com/v1/messages/count_tokens", None, ("anthropic", "unknown")),
        ("https://api.openai.com/v1/threads/thread_1/messages", None, ("openai", "unknown")),
        (
            "https://api.openai.com/v1/embeddings",
            {"input": "x", "model": "m"},
            ("openai", "unknown"),
        ),
        (
            "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash:countTokens",
            None,
            ("gemini", "unknown"),
        ),
        # unknown host, unknown path: the request shape decides
        ("https://proxy.example/llm", {"contents": []}, ("gemini", "generateContent")),
        (
            "https://proxy.example/llm",
            {"messages": [], "model": "m"},
            ("openai", "chat.completions"),
        ),
        ("https://proxy.example/llm", {"messages": [], "system": "s"}, ("anthropic", "messages")),
        (
            "https://proxy.example/llm",
            {"messages": [{"role": "user", "content": [{"type": "tool_result", "content": "x"}]}]},
            ("anthropic", "messages"),
        ),
        ("https://proxy.example/llm", {"input": "hi", "model": "m"}, ("openai", "responses")),
        # ... but not at the OpenAI endpoints that take the same fields (an embedding, a moderation,
        # speech, a Responses token count), which were read as Responses calls
        ("http://127.0.0.1:8000/v1/embeddings", {"input": ["a"], "model": "m"}, ("unknown", "unknown")),
        ("http://127.0.0.1:8000/v1/moderations", {"input": "a", "model": "m"}, ("unknown", "unknown")),
        ("http://127.0.0.1:8000/v1/audio/speech", {"input": "a", "model": "m"}, ("unknown", "unknown")),
        (
            "http://127.0.0.1:8000/v1/responses/input_tokens",
            {"input": "a", "model": "m"},
            ("unknown", "unknown"),
        ),
        ("https://proxy.example/llm", None, ("unknown", "unknown")),
        ("https://proxy.example/llm", '{"contents": []}', ("gemini", "generateContent")),
        ("not a url", None, ("unknown", "unknown")),
        ("http://[::1", None, ("unknown", "unknown")),
        (None, None, ("unknown", "unknown")),
    ],
)
def test_detect(url: Any, body: Any, expected: tuple[str, str]) -> None:
    assert detect(url, body) == expected


def test_host_tells_compatible_servers_apart() -> None:
    ok = {"status": 200, "body": None, "stream": None}
    assert summarize("https://api.groq.com/openai/v1/chat/completions", {}, ok)["host"] == ("api.groq.com")
    assert summarize("http://user:pw@LocalHost:11434/v1/chat/completions", {}, ok)["host"] == (
        "localhost:11434"
    )
    azure = "https://my.openai.azure.com/openai/deployments/gpt4o-prod/chat/completions?api-version=1"
    assert summarize(azure, {"messages": []}, ok)["model"] == "gpt4o-prod"


def test_an_azure_openai_agent_replays_without_its_key(
    tmp_path: Path, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``AzureOpenAI`` reads AZURE_OPENAI_API_KEY and refuses to start without it; a replay set no
    placeholder for it, so a replay on a machine without the key ended at the client's construction
    ("Missing credentials"), before its first call."""
    import openai

    import forkpoint

    def ask() -> str | None:
        client = openai.AzureOpenAI(azure_endpoint=server.url, api_version="2024-06-01", max_retries=0)
        reply = client.chat.completions.create(
            model="gpt4o-prod", messages=[{"role": "user", "content": "hi"}]
        )
        return reply.choices[0].message.content

    monkeypatch.setenv("AZURE_OPENAI_API_KEY", "azure-key-123")
    with forkpoint.record(store=tmp_path) as rec:
        answer = ask()
    monkeypatch.delenv("AZURE_OPENAI_API_KEY")
    with forkpoint.replay(rec.session_path) as rp:
        assert ask() == answer
    assert rp.report()["reproduced"] and len(server.requests) == 1


# --------------------------------------------------------------------------------------------------
# Hand-written, doc-shaped examples: request parameters


def test_summary_key_set_is_fixed() -> None:
    assert SUMMARY_KEYS == (
        "kind",
        "provider",
        "api",
        "host",
        "model",
        "response_model",
        "temperature",
        "top_p",
        "seed",
        "max_tokens",
        "stream",
        "n_messages",
        "n_tools",
        "tool_calls",
        "usage",
        "stop_reason",
        "error",
        "server_tool_calls",
    )


NO_RESPONSE = {"status": 200, "body": None, "stream": None}


def test_chat_request_parameters() -> None:
    body = {
        "model": "gpt-4o",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}],
        "temperature": 0.2,
        "top_p": 0.9,
        "seed": 42,
        "max_completion_tokens": 256,
        "tools": [{"type": "function", "function": {"name": "a"}}],
        "functions": [{"name": "legacy"}],
    }
    s = summarize("https://api.openai.com/v1/chat/completions", body, NO_RESPONSE)
    assert (s["model"], s["temperature"], s["top_p"], s["seed"], s["max_tokens"]) == (
        "gpt-4o",
        0.2,
        0.9,
        42,
        256,
    )
    assert (s["n_messages"], s["n_tools"], s["stream"]) == (2, 2, False)
    assert s["tool_calls"] is None and s["usage"] is None  # nothing was read from the response
    body["max_tokens"] = 100
    assert summarize("https://x/v1/chat/completions", body, NO_RESPONSE)["max_tokens"] == 100


def test_responses_and_anthropic_request_parameters() -> None:
    s = summarize(
        "https://api.openai.com/v1/responses",
        {"model": "o3", "input": "hello", "max_output_tokens": 50, "temperature": 1},
        NO_RESPONSE,
    )
    assert (s["n_messages"], s["max_tokens"], s["temperature"], s["n_tools"]) == (1, 50, 1, 0)
    s = summarize(
        "https://api.anthropic.com/v1/messages",
        {
            "model": "claude-opus-4-1",
            "system": "be brief",
            "max_tokens": 1024,
            "top_p": 0.5,
            "messages": [{"role": "user", "content": "x"}],
            "stream": True,
        },
        NO_RESPONSE,
    )
    assert (s["n_messages"], s["max_tokens"], s["top_p"], s["stream"]) == (1, 1024, 0.5, True)


# --------------------------------------------------------------------------------------------------
# Gemini (shapes from ai.google.dev/api/generate-content and the function-calling guide)

GEMINI_URL = "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash:generateContent"
GEMINI_STREAM_URL = (
    "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse"
)
GEMINI_REQUEST = {
    "systemInstruction": {"parts": [{"text": "You control the lights."}]},
    "contents": [
        {"role": "user", "parts": [{"text": "Dim the lights"}, {"text": " please"}]},
        {
            "role": "model",
            "parts": [{"functionCall": {"name": "set_light_values", "args": {"brightness": 25}}}],
        },
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "set_light_values", "response": {"brightness": 25}}}],
        },
    ],
    "tools": [
        {
            "functionDeclarations": [
                {"name": "set_light_values", "parameters": {"type": "object"}},
                {"name": "get_light_values"},
            ]
        },
        {"googleSearch": {}},
    ],
    "generationConfig": {"temperature": 0.4, "topP": 0.95, "seed": 7, "maxOutputTokens": 800},
}
GEMINI_TEXT_RESPONSE = {
    "candidates": [
        {
            "content": {"parts": [{"text": "The lights are now dimmed."}], "role": "model"},
            "finishReason": "STOP",
            "avgLogprobs": -0.05,
        }
    ],
    "usageMetadata": {"promptTokenCount": 31, "candidatesTokenCount": 7, "totalTokenCount": 38},
    "modelVersion": "gemini-2.0-flash-001",
}
GEMINI_CALL_RESPONSE = {
    "candidates": [
        {
            "content": {
                "role": "model",
                "parts": [
                    {
                        "functionCall": {
                            "name": "set_light_values",
                            "args": {"brightness": 25, "color_temp": "warm"},
                        }
                    },
                    {"functionCall": {"id": "fc-2", "name": "get_light_values", "args": {}}},
                ],
            },
            "finishReason": "STOP",
        }
    ],
    "usageMetadata": {"promptTokenCount": 40, "candidatesTokenCount": 12, "totalTokenCount": 52},
    "modelVersion": "gemini-2.0-flash-001",
}


def test_gemini_request_and_text_response() -> None:
    s = summarize(GEMINI_URL, GEMINI_REQUEST, {"status": 200, "body": GEMINI_TEXT_RESPONSE, "stream": None})
    assert s == _summary(
        provider="gemini",
        api="generateContent",
        host="generativelanguage.googleapis.com",
        model="gemini-2.0-flash",
        response_model="gemini-2.0-flash-001",
        temperature=0.4,
        top_p=0.95,
        seed=7,
        max_tokens=800,
        stream=False,
        n_messages=3,
        n_tools=3,  # two function declarations + googleSearch
        tool_calls=[],
        usage=_usage(31, 7),
        stop_reason="STOP",
    )
    resp = {"status": 200, "body": GEMINI_TEXT_RESPONSE, "stream": None}
    assert response_text(GEMINI_URL, resp) == "The lights are now dimmed."


def test_gemini_function_call_response() -> None:
    s = summarize(GEMINI_URL, GEMINI_REQUEST, {"status": 200, "body": GEMINI_CALL_RESPONSE, "stream": None})
    assert s["tool_calls"] == [
        _call(None, "set_light_values", '{"brightness":25,"color_temp":"warm"}'),
        _call("fc-2", "get_light_values", "{}"),
    ]
    assert response_text(GEMINI_URL, {"status": 200, "body": GEMINI_CALL_RESPONSE}) is None


@pytest.mark.parametrize(
    ("path", "body", "answered"),
    [
        (
            "/v1/chat/completions",
            {
                "messages": [
                    {"role": "user", "content": "go"},
                    {"role": "tool", "tool_call_id": "c1", "content": "a"},
                ]
            },
            "c1",
        ),
        (
            "/v1/responses",
            {"input": [{"type": "function_call_output", "call_id": "c1", "output": "a"}]},
            "c1",
        ),
        (
            "/v1/messages",
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "a"}],
                    }
                ]
            },
            "c1",
        ),
        (
            "/model/m/converse",
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"toolResult": {"toolUseId": "c1", "content": [{"text": "a"}]}}],
                    }
                ]
            },
            "c1",
        ),
        (
            "/v1beta/models/g:generateContent",
            {"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "f", "response": "a"}}]}]},
            None,
        ),
    ],
)
def test_the_tool_results_a_request_sends_back_are_read_with_the_call_they_answer(
    path: str, body: dict[str, Any], answered: str | None
) -> None:
    """What a recording counts as the program's answers to the model's asks (the tool called for
    more often than it was recorded): each format's tool result, by the id of the call it answers
    (a Gemini ``functionResponse`` has none here)."""
    event = {"request": {"url": "http://127.0.0.1:9" + path, "body_kind": "json", "body": body}}
    assert tool_results(event) == [(answered, "a")]


#: Each format's (path, list field, the model's item asking for call ``c``, the result of ``c``).
TURNS: list[tuple[str, str, Callable[[str], dict[str, Any]], Callable[[str], dict[str, Any]]]] = [
    (
        "/v1/chat/completions",
        "messages",
        lambda c: {
            "role": "assistant",
            "tool_calls": [{"id": c, "function": {"name": "f", "arguments": "{}"}}],
        },
        lambda c: {"role": "tool", "tool_call_id": c, "content": "r" + c},
    ),
    (
        "/v1/responses",
        "input",
        lambda c: {"type": "function_call", "call_id": c, "name": "f", "arguments": "{}"},
        lambda c: {"type": "function_call_output", "call_id": c, "output": "r" + c},
    ),
    (
        "/v1/messages",
        "messages",
        lambda c: {"role": "assistant", "content": [{"type": "tool_use", "id": c, "name": "f", "input": {}}]},
        lambda c: {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": c, "content": "r" + c}],
        },
    ),
    (
        "/model/m/converse",
        "messages",
        lambda c: {"role": "assistant", "content": [{"toolUse": {"toolUseId": c, "name": "f", "input": {}}}]},
        lambda c: {
            "role": "user",
            "content": [{"toolResult": {"toolUseId": c, "content": [{"text": "r" + c}]}}],
        },
    ),
    (
        "/v1beta/models/g:generateContent",
        "contents",
        lambda c: {"role": "model", "parts": [{"functionCall": {"id": c, "name": "f", "args": {}}}]},
        lambda c: {
            "role": "user",
            "parts": [{"functionResponse": {"id": c, "name": "f", "response": "r" + c}}],
        },
    ),
]


@pytest.mark.parametrize(("path", "field", "ask", "result"), TURNS)
def test_only_the_tool_results_sent_back_since_the_models_last_answer_are_read(
    path: str, field: str, ask: Callable[[str], dict[str, Any]], result: Callable[[str], dict[str, Any]]
) -> None:
    """A conversation resends every earlier turn's result with each request: reading them all at
    every call made a recording's tally quadratic in its turns. Only the results after the model's
    last item are read (Responses' further back while the results right before the model's items
    were not read from an earlier request: below)."""
    items = [{"role": "user", "content": "go"}] + [x for c in ("c1", "c2", "c3") for x in (ask(c), result(c))]
    event = {"request": {"url": "http://127.0.0.1:9" + path, "body_kind": "json", "body": {field: items}}}
    assert tool_results(event, {"c1", "c2"}) == [("c3", "rc3")]
    if path != "/v1/responses":
        assert tool_results(event) == [("c3", "rc3")]


def test_each_call_of_a_parallel_answer_put_right_before_its_result_is_read() -> None:
    """Responses items in the order a program made them, each call of the model's parallel answer
    right before its result: the results before the model's last item are read too while no request
    before sent them back, and not once one did."""
    _, field, ask, result = TURNS[1]
    items = [{"role": "user", "content": "go"}, ask("c1"), result("c1"), ask("c2"), result("c2")]
    event = {
        "request": {"url": "http://127.0.0.1:9/v1/responses", "body_kind": "json", "body": {field: items}}
    }
    assert tool_results(event) == [("c1", "rc1"), ("c2", "rc2")]
    assert tool_results(event, {"c1"}) == [("c2", "rc2")]


def test_a_request_with_no_message_list_is_not_read_for_tool_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """A body of a format no provider reads, or with no message list (a prompt text), sends back
    no tool result: it is not read at every call (its prompt may hold the whole conversation)."""
    from forkpoint.providers.base import UNRECOGNIZED

    def unread(body: dict[str, Any]) -> Any:
        raise AssertionError("read")

    monkeypatch.setattr(UNRECOGNIZED, "genai_input_messages", unread)
    event = {"request": {"url": "http://127.0.0.1:9/generate", "body_kind": "json", "body": {"prompt": "go"}}}
    assert tool_results(event) == []


def test_gemini_request_messages() -> None:
    assert request_messages(GEMINI_URL, GEMINI_REQUEST) == [
        {"role": "system", "text": "You control the lights."},
        {"role": "user", "text": "Dim the lights please"},
        {"role": "assistant", "text": ""},
        {"role": "user", "text": '{"brightness":25}'},
    ]


def test_gemini_snake_case_request() -> None:
    body = {
        "contents": [{"parts": [{"text": "hi"}]}],
        "system_instruction": {"parts": [{"text": "sys"}]},
        "generation_config": {"temperature": 0, "top_p": 1, "max_output_tokens": 10},
        "tools": [{"function_declarations": [{"name": "f"}]}],
    }
    s = summarize(GEMINI_URL, body, NO_RESPONSE)
    assert (s["temperature"], s["top_p"], s["max_tokens"], s["n_tools"]) == (0, 1, 10, 1)
    assert request_messages(GEMINI_URL, body) == [
        {"role": "system", "text": "sys"},
        {"role": "user", "text": "hi"},
    ]


def _sse(*payloads: Any, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return "".join(f"{head}data: {json.dumps(p)}\r\n\r\n" for p in payloads)


GEMINI_CHUNKS = [
    {
        "candidates": [{"content": {"parts": [{"text": "The lights"}], "role": "model"}}],
        "usageMetadata": {"promptTokenCount": 31, "totalTokenCount": 31},
        "modelVersion": "gemini-2.0-flash-001",
    },
    {
        "candidates": [{"content": {"parts": [{"text": "Thinking...", "thought": True}], "role": "model"}}],
        "modelVersion": "gemini-2.0-flash-001",
    },
    {
        "candidates": [
            {
                "content": {"parts": [{"text": " are now dimmed."}], "role": "model"},
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {"promptTokenCount": 31, "candidatesTokenCount": 7, "totalTokenCount": 38},
        "modelVersion": "gemini-2.0-flash-001",
    },
]


def test_gemini_sse_stream() -> None:
    stream = _rechunk(_sse(*GEMINI_CHUNKS), 5)
    resp = {"status": 200, "body": None, "stream": stream}
    s = summarize(GEMINI_STREAM_URL, GEMINI_REQUEST, resp)
    assert (s["stream"], s["stop_reason"], s["usage"], s["response_model"]) == (
        True,
        "STOP",
        _usage(31, 7),
        "gemini-2.0-flash-001",
    )
    assert s["tool_calls"] == []
    assert response_text(GEMINI_STREAM_URL, resp) == "The lights are now dimmed."  # no thought text


def test_gemini_stream_without_alt_sse_is_a_json_array() -> None:
    url = GEMINI_STREAM_URL.removesuffix("?alt=sse")
    as_body = {"status": 200, "body": GEMINI_CHUNKS, "stream": None}
    as_text = {"status": 200, "body": None, "stream": _rechunk(json.dumps(GEMINI_CHUNKS), 9)}
    for resp in (as_body, as_text):
        assert response_text(url, resp) == "The lights are now dimmed."
        assert summarize(url, {"contents": []}, resp)["usage"] == _usage(31, 7)


def test_gemini_blocked_prompt() -> None:
    body = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 5}}
    s = summarize(GEMINI_URL, {"contents": []}, {"status": 200, "body": body})
    assert (s["stop_reason"], s["tool_calls"], s["usage"]) == ("SAFETY", [], _usage(5, None))


# --------------------------------------------------------------------------------------------------
# OpenAI and Anthropic bodies and streams, hand-written


def test_chat_body_keeps_raw_arguments() -> None:
    # The function-calling example of the Chat Completions reference: arguments with newlines.
    body = {
        "id": "chatcmpl-abc123",
        "object": "chat.completion",
        "model": "gpt-4o-2024-08-06",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_abc123",
                            "type": "function",
                            "function": {
                                "name": "get_current_weather",
                                "arguments": '{\n"location": "Boston, MA"\n}',
                            },
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 82, "completion_tokens": 17, "total_tokens": 99},
    }
    s = summarize(
        "https://api.openai.com/v1/chat/completions",
        {"model": "gpt-4o"},
        {"status": 200, "body": body},
    )
    assert s["tool_calls"] == [_call("call_abc123", "get_current_weather", '{\n"location": "Boston, MA"\n}')]
    assert (s["usage"], s["stop_reason"], s["response_model"]) == (
        _usage(82, 17),
        "tool_calls",
        "gpt-4o-2024-08-06",
    )
    body["choices"][0]["message"] = {
        "role": "assistant",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
    }
    assert response_text("https://api.openai.com/v1/chat/completions", {"status": 200, "body": body}) == "ab"


def _chunk(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
    return {
        "object": "chat.completion.chunk",
        "model": "gpt-4.1",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
    }


def test_chat_stream_parallel_tool_calls_interleaved() -> None:
    def tc(index: int, **fn: str) -> dict[str, Any]:
        return {"tool_calls": [{"index": index, "function": fn}]}

    stream = (
        _sse(
            _chunk(
                {
                    "role": "assistant",
                    "tool_calls": [{"index": 0, "id": "c0", "function": {"name": "a", "arguments": ""}}],
                }
            ),
            _chunk(
                {"tool_calls": [{"index": 1, "id": "c1", "function": {"name": "b", "arguments": '{"y"'}}]}
            ),
            _chunk(tc(0, arguments='{"x"')),
            _chunk(tc(1, arguments=":2}")),
            _chunk(tc(0, arguments=":1}")),
            _chunk({"content": "ignored"}, index=1),  # a second choice is not summarized
            _chunk({}, finish="tool_calls"),
            {
                "object": "chat.completion.chunk",
                "choices": [],
                "usage": {"prompt_tokens": 9, "completion_tokens": 4},
            },
        )
        + "data: [DONE]\n\n"
    )
    resp = {"status": 200, "body": None, "stream": [stream]}
    s = summarize("https://api.openai.com/v1/chat/completions", {"stream": True}, resp)
    assert s["tool_calls"] == [_call("c0", "a", '{"x":1}'), _call("c1", "b", '{"y":2}')]
    assert (s["usage"], s["stop_reason"]) == (_usage(9, 4), "tool_calls")
    assert response_text("https://api.openai.com/v1/chat/completions", resp) is None


def test_responses_body_incomplete_with_reason() -> None:
    body = {
        "id": "resp_1",
        "object": "response",
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "error": None,
        "model": "gpt-4.1-2025-04-14",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {
                "type": "message",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "Hello", "annotations": []},
                    {"type": "output_text", "text": " world", "annotations": []},
                ],
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_1",
                "name": "f",
                "arguments": "{}",
            },
        ],
        "usage": {"input_tokens": 10, "output_tokens": 20, "total_tokens": 30},
    }
    url = "https://api.openai.com/v1/responses"
    s = summarize(
        url,
        {"model": "gpt-4.1", "input": [{"role": "user", "content": "x"}]},
        {"status": 200, "body": body},
    )
    assert (s["stop_reason"], s["usage"], s["error"]) == ("max_output_tokens", _usage(10, 20), None)
    assert s["tool_calls"] == [_call("call_1", "f", "{}")]
    assert response_text(url, {"status": 200, "body": body}) == "Hello world"


def test_responses_request_messages() -> None:
    body = {
        "instructions": "Be terse.",
        "input": [
            {"role": "developer", "content": "dev note"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "42"},
        ],
    }
    assert request_messages("https://api.openai.com/v1/responses", body) == [
        {"role": "system", "text": "Be terse."},
        {"role": "developer", "text": "dev note"},
        {"role": "user", "text": "hi"},
        {"role": "assistant", "text": ""},
        {"role": "tool", "text": "42"},
    ]
    assert request_messages("https://api.openai.com/v1/responses", {"input": "hello"}) == [
        {"role": "user", "text": "hello"}
    ]


def test_anthropic_request_messages_with_system_blocks_and_tool_results() -> None:
    body = {
        "system": [{"type": "text", "text": "You are "}, {"type": "text", "text": "helpful."}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "image", "source": {}}, {"type": "text", "text": "look"}],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hmm"},
                    {"type": "tool_use", "id": "t", "name": "f", "input": {}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": [{"type": "text", "text": "result"}],
                    }
                ],
            },
        ],
    }
    assert request_messages("https://api.anthropic.com/v1/messages", body) == [
        {"role": "system", "text": "You are helpful."},
        {"role": "user", "text": "look"},
        {"role": "assistant", "text": ""},
        {"role": "user", "text": "result"},
    ]
    s = summarize("https://api.anthropic.com/v1/messages", body, NO_RESPONSE)
    assert s["n_messages"] == 3  # the system prompt is not a message


def test_anthropic_stream_tool_without_argument_deltas_and_thinking() -> None:
    stream = "".join(
        [
            _sse(
                {
                    "type": "message_start",
                    "message": {
                        "model": "claude-x",
                        "usage": {"input_tokens": 10, "output_tokens": 1},
                    },
                },
                event="message_start",
            ),
            _sse(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "thinking", "thinking": ""},
                },
                event="content_block_start",
            ),
            _sse(
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "thinking_delta", "thinking": "hmm"},
                },
                event="content_block_delta",
            ),
            _sse(
                {
                    "type": "content_block_start",
                    "index": 1,
                    "content_block": {"type": "tool_use", "id": "t1", "name": "now", "input": {}},
                },
                event="content_block_start",
            ),
            _sse({"type": "content_block_stop", "index": 1}, event="content_block_stop"),
            _sse(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "tool_use"},
                    "usage": {"output_tokens": 12},
                },
                event="message_delta",
            ),
            _sse({"type": "message_stop"}, event="message_stop"),
        ]
    )
    resp = {"status": 200, "body": None, "stream": [stream]}
    s = summarize("https://api.anthropic.com/v1/messages", {"stream": True}, resp)
    assert s["tool_calls"] == [_call("t1", "now", "{}")]
    assert (s["usage"], s["stop_reason"], s["response_model"]) == (
        _usage(10, 12),
        "tool_use",
        "claude-x",
    )
    assert response_text("https://api.anthropic.com/v1/messages", resp) is None


# --------------------------------------------------------------------------------------------------
# Errors


@pytest.mark.parametrize(
    "url, status, body, message",
    [
        (
            "https://api.openai.com/v1/chat/completions",
            401,
            {
                "error": {
                    "message": "Incorrect API key provided: sk-abc. You can find your API key at "
                    "https://platform.openai.com/account/api-keys.",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_api_key",
                }
            },
            "Incorrect API key provided: sk-abc. You can find your API key at "
            "https://platform.openai.com/account/api-keys.",
        ),
        (
            "https://api.openai.com/v1/responses",
            429,
            {
                "error": {
                    "message": "Rate limit reached",
                    "type": "requests",
                    "param": None,
                    "code": "rate_limit_exceeded",
                }
            },
            "Rate limit reached",
        ),
        (
            "https://api.anthropic.com/v1/messages",
            529,
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            "Overloaded",
        ),
        (
            "https://api.anthropic.com/v1/messages",
            400,
            {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": "max_tokens: Field required"},
            },
            "max_tokens: Field required",
        ),
        (
            GEMINI_URL,
            400,
            {
                "error": {
                    "code": 400,
                    "message": "API key not valid. Please pass a valid API key.",
                    "status": "INVALID_ARGUMENT",
                    "details": [
                        {
                            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                            "reason": "API_KEY_INVALID",
                        }
                    ],
                }
            },
            "API key not valid. Please pass a valid API key.",
        ),
        (
            GEMINI_STREAM_URL.removesuffix("?alt=sse"),
            503,
            [
                {
                    "error": {
                        "code": 503,
                        "message": "The model is overloaded.",
                        "status": "UNAVAILABLE",
                    }
                }
            ],
            "The model is overloaded.",
        ),
        ("https://gateway.example/v1/chat/completions", 404, {"detail": "Not Found"}, "Not Found"),
        ("https://api.openai.com/v1/chat/completions", 502, None, "HTTP 502"),
        (
            "https://api.openai.com/v1/chat/completions",
            502,
            "<html>Bad gateway</html>",
            "<html>Bad gateway</html>",
        ),
    ],
)
def test_error_responses(url: str, status: int, body: Any, message: str) -> None:
    request = {"model": "m", "messages": [{"role": "user", "content": "x"}], "contents": []}
    s = summarize(url, request, {"status": status, "body": body, "stream": None})
    assert s["error"] == message
    assert (s["tool_calls"], s["usage"], s["stop_reason"], s["response_model"]) == (None,) * 4
    assert s["model"] is not None  # the request side is still read
    assert response_text(url, {"status": status, "body": body, "stream": None}) is None


def test_error_inside_a_200_stream() -> None:
    stream = _sse(
        {"type": "message_start", "message": {"model": "claude-x", "usage": {"input_tokens": 3}}},
        event="message_start",
    ) + _sse(
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        event="error",
    )
    s = summarize("https://api.anthropic.com/v1/messages", {}, {"status": 200, "stream": [stream]})
    assert (s["error"], s["response_model"], s["usage"]) == (
        "Overloaded",
        "claude-x",
        _usage(3, None),
    )
    failed = _sse(
        {
            "type": "response.failed",
            "response": {
                "object": "response",
                "status": "failed",
                "output": [],
                "error": {"code": "server_error", "message": "boom"},
            },
        },
        event="response.failed",
    )
    s = summarize("https://api.openai.com/v1/responses", {}, {"status": 200, "stream": [failed]})
    assert (s["error"], s["stop_reason"], s["tool_calls"]) == ("boom", "failed", [])
    chat = 'data: {"error": {"message": "upstream died", "type": "server_error"}}\n\n'
    s = summarize("https://x/v1/chat/completions", {}, {"status": 200, "stream": [chat]})
    assert (s["error"], s["tool_calls"]) == ("upstream died", None)


# --------------------------------------------------------------------------------------------------
# Garbage never raises

URLS = [
    "https://api.openai.com/v1/chat/completions",
    "https://api.openai.com/v1/responses",
    "https://api.anthropic.com/v1/messages",
    GEMINI_URL,
    GEMINI_STREAM_URL,
    "https://unknown.example/x",
    "",
    None,
    42,
    "http://[::1",
]
GARBAGE: list[Any] = [
    None,
    0,
    -1,
    1.5,
    True,
    "",
    "x",
    "{",
    b"\xff\xfe",
    [],
    {},
    [None],
    {"": None},
    {1: 2},
    {"$text": 5},
]


def _mutations(obj: Any) -> Any:
    """Copies of ``obj`` with one node replaced by each garbage value (or removed)."""
    paths: list[tuple[Any, ...]] = []

    def walk(node: Any, path: tuple[Any, ...]) -> None:
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*path, i))

    walk(obj, ())
    for path in paths:
        if not path:
            continue
        for value in [*GARBAGE, "__delete__"]:
            out = copy.deepcopy(obj)
            node = out
            for step in path[:-1]:
                node = node[step]
            if value == "__delete__":
                del node[path[-1]]
            else:
                node[path[-1]] = value
            yield out


def _check_all(url: Any, request: Any, response: Any) -> None:
    s = summarize(url, request, response)
    assert tuple(s) == SUMMARY_KEYS
    t = response_text(url, response)
    assert t is None or isinstance(t, str)
    msgs = request_messages(url, request)
    assert all(isinstance(m["role"], str) and isinstance(m["text"], str) for m in msgs)


def test_garbage_top_level_inputs() -> None:
    for url in URLS:
        for request in [
            *GARBAGE,
            {"model": 5, "messages": 5, "tools": "x", "contents": {}, "input": 3},
        ]:
            for response in [
                *GARBAGE,
                {"status": "500", "body": 5, "stream": 5},
                {
                    "status": 200,
                    "body": None,
                    "stream": [1, None, b"\xff", "data: {", "data: [1]\n\n"],
                },
                {"status": 200, "body": "data: nonsense\n\n", "stream": None},
                {
                    "status": 200,
                    "body": {"choices": "x", "content": 5, "output": {}, "candidates": [5]},
                },
                {
                    "status": 200,
                    "stream": ["data: " + json.dumps({"choices": [5, {"delta": 5}]}) + "\n\n"],
                },
                {"status": 500, "body": {"error": 5}, "stream": None},
                {"status": 10**30, "body": [[]], "stream": ["\r\n" * 3]},
            ]:
                _check_all(url, request, response)


def test_empty_stream_list_does_not_hide_a_body() -> None:
    resp = {"status": 200, "body": GEMINI_TEXT_RESPONSE, "stream": []}
    assert response_text(GEMINI_URL, resp) == "The lights are now dimmed."


def test_all_summary_none_for_unreadable_response() -> None:
    s = summarize("https://unknown.example/x", None, {"status": 200, "body": None, "stream": None})
    assert s == _summary(provider="unknown", api="unknown", host="unknown.example", stream=False)
    s = summarize(
        "https://api.openai.com/v1/chat/completions",
        "not json",
        {"status": 200, "stream": ["garbage"]},
    )
    assert s == _summary(provider="openai", api="chat.completions", host="api.openai.com", stream=True)


SAMPLES: list[tuple[str, Any, Any]] = [
    # (url, request, response) small enough to mutate node by node
    (GEMINI_URL, GEMINI_REQUEST, {"status": 200, "body": GEMINI_CALL_RESPONSE, "stream": None}),
    (
        "https://api.anthropic.com/v1/messages",
        {
            "system": [{"type": "text", "text": "s"}],
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "tool_result", "content": [{"type": "text", "text": "r"}]}],
                }
            ],
            "tools": [{"name": "f"}],
        },
        {
            "status": 200,
            "body": {
                "type": "message",
                "model": "c",
                "content": [
                    {"type": "text", "text": "a"},
                    {"type": "tool_use", "id": "t", "name": "f", "input": {"a": [1]}},
                ],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 1, "output_tokens": 2},
            },
            "stream": None,
        },
    ),
    (
        "https://api.openai.com/v1/responses",
        {
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "x"}]},
                {"type": "function_call_output", "output": "o"},
            ],
            "instructions": "i",
        },
        {
            "status": 200,
            "body": {
                "object": "response",
                "status": "incomplete",
                "incomplete_details": {"reason": "r"},
                "output": [
                    {"type": "message", "content": [{"type": "output_text", "text": "t"}]},
                    {"type": "function_call", "call_id": "c", "name": "n", "arguments": "{}"},
                ],
                "usage": {"input_tokens": 1},
            },
            "stream": None,
        },
    ),
    (
        "https://api.openai.com/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}],
            "tools": [{}],
            "functions": [{}],
        },
        {
            "status": 200,
            "body": {
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "content": "c",
                            "tool_calls": [{"id": "i", "function": {"name": "n", "arguments": "{}"}}],
                            "function_call": {"name": "l", "arguments": "{}"},
                        },
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1},
            },
            "stream": None,
        },
    ),
]


@pytest.mark.parametrize("sample", SAMPLES, ids=["gemini", "anthropic", "responses", "chat"])
def test_mutated_bodies_never_raise(sample: tuple[str, Any, Any]) -> None:
    url, request, response = sample
    for bad_request in _mutations(request):
        _check_all(url, bad_request, response)
    for bad_response in _mutations(response):
        _check_all(url, request, bad_response)


STREAM_SAMPLES: list[tuple[str, list[tuple[str | None, Any]]]] = [
    (
        "https://api.anthropic.com/v1/messages",
        [
            (
                "message_start",
                {"type": "message_start", "message": {"model": "m", "usage": {"input_tokens": 1}}},
            ),
            (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "tool_use", "id": "t", "name": "n", "input": {}},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": "{}"},
                },
            ),
            (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": 1,
                    "delta": {"type": "text_delta", "text": "x"},
                },
            ),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": 2},
                },
            ),
            ("error", {"type": "error", "error": {"message": "e"}}),
        ],
    ),
    (
        "https://api.openai.com/v1/responses",
        [
            (
                "response.created",
                {"type": "response.created", "response": {"model": "m", "status": "in_progress"}},
            ),
            (
                "response.output_item.added",
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": {"type": "function_call", "call_id": "c", "name": "n", "arguments": ""},
                },
            ),
            (
                "response.function_call_arguments.delta",
                {
                    "type": "response.function_call_arguments.delta",
                    "output_index": 0,
                    "delta": "{}",
                },
            ),
            (
                "response.output_text.delta",
                {"type": "response.output_text.delta", "output_index": 1, "delta": "t"},
            ),
            (
                "response.function_call_arguments.done",
                {
                    "type": "response.function_call_arguments.done",
                    "output_index": 0,
                    "arguments": "{}",
                },
            ),
            (
                "response.completed",
                {
                    "type": "response.completed",
                    "response": {"status": "completed", "output": [], "usage": {}},
                },
            ),
        ],
    ),
    (
        "https://api.openai.com/v1/chat/completions",
        [
            (
                None,
                {
                    "model": "m",
                    "choices": [
                        {
                            "index": 0,
                            "delta": {
                                "content": "a",
                                "tool_calls": [
                                    {
                                        "index": 0,
                                        "id": "i",
                                        "function": {"name": "n", "arguments": "{"},
                                    }
                                ],
                                "function_call": {"name": "f", "arguments": "x"},
                            },
                            "finish_reason": None,
                        }
                    ],
                },
            ),
            (None, {"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}),
        ],
    ),
    (GEMINI_STREAM_URL, [(None, GEMINI_CHUNKS[2]), (None, GEMINI_CALL_RESPONSE)]),
]


@pytest.mark.parametrize("sample", STREAM_SAMPLES, ids=["anthropic", "responses", "chat", "gemini"])
def test_mutated_stream_events_never_raise(
    sample: tuple[str, list[tuple[str | None, Any]]],
) -> None:
    url, events = sample
    payloads = [p for _, p in events]
    for bad in _mutations(payloads):
        text = "".join(
            (f"event: {name}\n" if name else "") + f"data: {json.dumps(p, default=repr)}\n\n"
            for (name, _), p in zip(events, bad, strict=False)
        )
        _check_all(url, {}, {"status": 200, "body": None, "stream": [text]})


# --------------------------------------------------------------------------------------------------
# The OpenTelemetry readings: tool definitions and token counts as the GenAI conventions count them

_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}}
_WEATHER = {"type": "function", "name": "weather", "description": "Weather now.", "parameters": _SCHEMA}


@pytest.mark.parametrize(
    ("api", "body", "expected"),
    [
        (
            "chat.completions",
            {
                "tools": [
                    {"type": "function", "function": {k: v for k, v in _WEATHER.items() if k != "type"}}
                ],
                "functions": [{"name": "legacy", "parameters": _SCHEMA}],
            },
            [_WEATHER, {"type": "function", "name": "legacy", "parameters": _SCHEMA}],
        ),
        (
            "responses",
            {"tools": [_WEATHER, {"type": "web_search_preview"}]},
            [_WEATHER, {"type": "web_search_preview"}],
        ),
        (
            "messages",
            {
                "tools": [
                    {"name": "weather", "description": "Weather now.", "input_schema": _SCHEMA},
                    {"type": "web_search_20250305", "name": "web_search"},
                ]
            },
            [_WEATHER, {"type": "web_search_20250305", "name": "web_search"}],
        ),
        (
            "generateContent",
            {
                "tools": [
                    {
                        "functionDeclarations": [
                            {"name": "weather", "description": "Weather now.", "parameters": _SCHEMA}
                        ]
                    },
                    {"googleSearch": {}},
                ]
            },
            [_WEATHER, {"type": "googleSearch"}],
        ),
        ("chat.completions", {"messages": []}, []),
    ],
)
def test_tool_definitions_in_the_conventions_shape(
    api: str, body: dict[str, Any], expected: list[Any]
) -> None:
    assert genai_tool_definitions(api, body) == expected


def test_input_tokens_include_the_cache_as_the_conventions_count_them() -> None:
    # Anthropic's input_tokens leave out what the cache read and wrote; OpenAI's prompt_tokens do not.
    anthropic_usage = {
        "input_tokens": 10,
        "output_tokens": 5,
        "cache_read_input_tokens": 100,
        "cache_creation_input_tokens": 7,
    }
    assert genai_usage({"api": "messages", "usage": anthropic_usage}) == {
        **anthropic_usage,
        "input_tokens": 117,
    }
    openai_usage = {"input_tokens": 110, "output_tokens": 5, "cache_read_input_tokens": 100}
    assert genai_usage({"api": "chat.completions", "usage": openai_usage}) == openai_usage
    assert genai_usage({"api": "messages", "usage": None}) == {}
    # Every spelling of the cache counts reads the same.
    url = "https://api.openai.com/v1/chat/completions"
    body = {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 4}},
    }
    assert summarize(url, {"model": "m"}, {"status": 200, "body": body})["usage"] == {
        "input_tokens": 9,
        "output_tokens": 1,
        "cache_read_input_tokens": 4,
    }
    gemini = {
        "usageMetadata": {"promptTokenCount": 9, "candidatesTokenCount": 1, "cachedContentTokenCount": 3},
        "candidates": [],
    }
    url = "https://generativelanguage.googleapis.com/v1beta/models/g:generateContent"
    assert summarize(url, {}, {"status": 200, "body": gemini})["usage"]["cache_read_input_tokens"] == 3
