"""The provider seam: a wire format is one :class:`~forkpoint.providers.base.Provider` plus one line in
:data:`forkpoint.providers.REGISTRY` (and its SDKs' entry in :data:`forkpoint.sdks.SDKS`), and every
provider-aware function goes through that registry.

The toy "echo" format below is defined here, not in forkpoint. Before it is registered forkpoint
knows nothing of it; after one registration line (``monkeypatch.setattr`` of the registry) it is
recognized, summarized, listed, rewritten by an override and exported. A dispatcher that bypassed
the registry (a hard-coded list of formats) would fail these tests.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest

import forkpoint.providers as providers
from forkpoint import override, sdks
from forkpoint.checkpoint import CONTEXT_FIELDS
from forkpoint.match import semantic_headers
from forkpoint.providers import anthropic, bedrock, gemini, openai_chat, openai_responses
from forkpoint.providers.base import (
    NOTHING,
    Message,
    NewToolCall,
    Payload,
    Provider,
    ResponseFields,
    Sampling,
    ToolCallSummary,
    args_obj,
    d,
    dumps,
    lst,
    num,
    s,
)
from forkpoint.record import TRACKED_PACKAGES
from forkpoint.replay import API_KEY_VARS

# --------------------------------------------------------------------------------------------------
# The echo wire format, as its (imaginary) docs would say:
#
#   POST /v1/echo   {"voice": str, "lines": [{"speaker", "words"}], "props": [{"name"}],
#                    "loudness": float, "continuous": bool}
#   response        {"echo_id", "voice", "echo": str, "asks": [{"ref", "prop", "with": {...}}],
#                    "cost": {"heard", "said"}, "why": str}
#   stream          data: {"echo_id", "piece": str} ... data: {"why": str, "cost": {...}}, data: END


def _asks(asks: object) -> list[ToolCallSummary]:
    return [
        {"id": s(d(a).get("ref")), "name": s(d(a).get("prop")), "arguments": dumps(d(a).get("with"))}
        for a in lst(asks)
    ]


def _cost(cost: object) -> Any:
    return {"input_tokens": d(cost).get("heard"), "output_tokens": d(cost).get("said")} if cost else None


class Echo(Provider):
    name = "echo"
    api = "echo"
    reference = "tests/providers/test_registry.py"
    context_fields = ("lines",)
    messages_field = "lines"
    final_events = (b"data: END",)
    semantic_headers = frozenset({"echo-version"})
    otel_operation = "echo"

    def claims_path(self, path: str) -> bool:
        return path.endswith("/v1/echo")

    def claims_body(self, body: dict[str, Any]) -> bool:
        return isinstance(body.get("lines"), list)

    def request_model(self, body: dict[str, Any]) -> str | None:
        return s(body.get("voice"))

    def requests_stream(self, body: dict[str, Any]) -> bool:
        return body.get("continuous") is True

    def sampling(self, body: dict[str, Any]) -> Sampling:
        return Sampling(num(body.get("loudness")), None, None, None)

    def count_messages(self, body: dict[str, Any]) -> int | None:
        return len(lst(body.get("lines")))

    def count_tools(self, body: dict[str, Any]) -> int:
        return len(lst(body.get("props")))

    def messages(self, body: dict[str, Any]) -> list[Message]:
        return [
            {"role": s(d(line).get("speaker")) or "?", "text": s(d(line).get("words")) or ""}
            for line in lst(body.get("lines"))
        ]

    def read_body(self, body: object) -> ResponseFields:
        if not isinstance(body, dict) or "echo" not in body:
            return NOTHING
        return ResponseFields(
            s(body.get("echo")),
            _asks(body.get("asks")),
            _cost(body.get("cost")),
            s(body.get("why")),
            s(body.get("voice")),
            None,
        )

    def read_stream(self, stream: list[Payload]) -> ResponseFields:
        pieces = [p["piece"] for _, p in stream if isinstance(p.get("piece"), str)]
        last = stream[-1][1] if stream else {}
        return ResponseFields("".join(pieces), [], _cost(last.get("cost")), s(last.get("why")), None, None)

    def response_id(self, payload: dict[str, Any]) -> str | None:
        return s(payload.get("echo_id"))

    def stream_delta_text(self, payload: dict[str, Any]) -> str:
        return s(payload.get("piece")) or ""

    def tool_call_arguments(self, node: dict[str, Any]) -> list[object]:
        return [node.get("with")] if "prop" in node else []

    def is_tool_result(self, node: dict[str, Any]) -> bool:
        return node.get("speaker") == "prop"

    def rewrite_body(self, body: dict[str, Any], text: str | None, calls: Sequence[NewToolCall]) -> bool:
        body["echo"] = text
        body["asks"] = [{"ref": c["id"], "prop": c["name"], "with": args_obj(c["arguments"])} for c in calls]
        body["why"] = "asked" if calls else "done"
        return True


ECHO = Echo()

URL = "http://127.0.0.1:9/v1/echo"
REQUEST: dict[str, Any] = {
    "voice": "parrot-1",
    "lines": [
        {"speaker": "user", "words": "say hello"},
        {"speaker": "model", "words": "", "prop": "read_file", "with": {"path": "notes.txt"}},
        {"speaker": "prop", "words": "contents of todo.md"},
    ],
    "props": [{"name": "read_file"}, {"name": "write_file"}],
    "loudness": 0.3,
}
RESPONSE = {
    "echo_id": "echo-42",
    "voice": "parrot-1-2024",
    "echo": "hello",
    "asks": [{"ref": "e1", "prop": "read_file", "with": {"path": "a.txt"}}],
    "cost": {"heard": 7, "said": 2},
    "why": "asked",
}


@pytest.fixture
def registered(monkeypatch: pytest.MonkeyPatch) -> Echo:
    """The one registration line, and its SDK's entry (read without loading any provider)."""
    monkeypatch.setattr(providers, "REGISTRY", (*providers.REGISTRY, ECHO))
    monkeypatch.setitem(sdks.SDKS, "echo", sdks.Sdk(("echo-sdk",), ("echo_sdk",), ("ECHO_API_KEY",)))
    return ECHO


def _event(response: dict[str, Any] | None = None, stream: list[str] | None = None) -> dict[str, Any]:
    resp: dict[str, Any] = {"status": 200}
    if stream is not None:
        resp |= {
            "body_kind": "stream",
            "chunks": [[float(n), c] for n, c in enumerate(stream)],
            "ended": "complete",
        }
    else:
        resp |= {"body_kind": "json", "body": copy.deepcopy(response or RESPONSE), "ended": "complete"}
    return {
        "type": "model_call",
        "seq": 1,
        "request": {
            "method": "POST",
            "url": URL,
            "headers": [],
            "body_kind": "json",
            "body": copy.deepcopy(REQUEST),
        },
        "response": resp,
    }


# --------------------------------------------------------------------------------------------------


def test_the_builtin_providers_are_one_module_each_and_all_registered() -> None:
    modules = (openai_chat, openai_responses, anthropic, gemini)
    builtin = {id(m.PROVIDER) for m in modules} | {id(bedrock.CONVERSE), id(bedrock.INVOKE)}
    assert builtin == {id(p) for p in providers.REGISTRY}
    assert all(isinstance(p, Provider) and p.reference for p in providers.REGISTRY)
    assert len({p.api for p in providers.REGISTRY}) == len(providers.REGISTRY)  # an API has one reader
    assert providers.by_api("messages") is anthropic.PROVIDER
    assert providers.by_name("openai") in (openai_chat.PROVIDER, openai_responses.PROVIDER)


def test_unregistered_the_echo_format_is_unknown() -> None:
    assert providers.detect(URL, REQUEST) == ("unknown", "unknown")
    assert providers.summarize(URL, REQUEST, {"status": 200, "body": RESPONSE})["model"] is None
    assert providers.request_messages(URL, REQUEST) == []
    assert providers.response_text(URL, {"status": 200, "body": RESPONSE}) is None


def test_registered_it_is_recognized_summarized_and_listed(registered: Echo) -> None:
    assert providers.detect(URL, REQUEST) == ("echo", "echo")
    assert providers.detect("https://elsewhere.example/proxy", REQUEST) == ("echo", "echo")  # by body shape
    assert providers.summarize(URL, REQUEST, {"status": 200, "body": RESPONSE}) == {
        "kind": "model",
        "provider": "echo",
        "api": "echo",
        "host": "127.0.0.1:9",
        "model": "parrot-1",
        "response_model": "parrot-1-2024",
        "temperature": 0.3,
        "top_p": None,
        "seed": None,
        "max_tokens": None,
        "stream": False,
        "n_messages": 3,
        "n_tools": 2,
        "tool_calls": [{"id": "e1", "name": "read_file", "arguments": '{"path":"a.txt"}'}],
        "usage": {"input_tokens": 7, "output_tokens": 2},
        "stop_reason": "asked",
        "error": None,
        "server_tool_calls": None,
    }
    assert providers.request_messages(URL, REQUEST) == [
        {"role": "user", "text": "say hello"},
        {"role": "model", "text": ""},
        {"role": "prop", "text": "contents of todo.md"},
    ]
    assert providers.response_text(URL, {"status": 200, "body": RESPONSE}) == "hello"
    # the shared parts still apply: an HTTP error is an error whatever the format
    assert (
        providers.summarize(URL, REQUEST, {"status": 503, "body": {"error": {"message": "hoarse"}}})["error"]
        == "hoarse"
    )


def test_registered_its_stream_is_read_and_played(registered: Echo) -> None:
    chunks = [
        'data: {"echo_id": "echo-7", "piece": "hel"}\n\n',
        'data: {"piece": "lo"}\n\n',
        'data: {"why": "done", "cost": {"heard": 1, "said": 2}}\n\ndata: END\n\n',
    ]
    event = _event(stream=chunks)
    summ = providers.summary(event)
    assert (summ["stream"], summ["stop_reason"], summ["usage"]) == (
        True,
        "done",
        {"input_tokens": 1, "output_tokens": 2},
    )
    assert providers.response_text(URL, providers.recorded_response(event)) == "hello"
    assert providers.response_id(event) == "echo-7"
    assert [
        providers.stream_delta_text("echo", e.data) for e in providers.parse_sse("".join(chunks))[:2]
    ] == ["hel", "lo"]
    assert b"data: END" in providers.stream_end_markers()
    body = {**REQUEST, "continuous": True}
    assert providers.summarize(URL, body, {"status": 200, "body": RESPONSE})["stream"] is True


def test_registered_an_override_rewrites_it_in_its_own_shape(registered: Echo) -> None:
    event = _event()
    new = override.apply(
        event, override.parse('model#1.tool_calls=[{"name": "write_file", "arguments": {"path": "b.txt"}}]')
    )
    (ask,) = new["response"]["body"]["asks"]
    assert (ask["prop"], ask["with"]) == ("write_file", {"path": "b.txt"})
    assert ask["ref"].startswith("call_fp_")  # another tool than the recorded call: a derived id
    assert new["response"]["body"]["echo"] == "hello"  # the text said alongside stays
    calls = providers.summarize(URL, REQUEST, providers.recorded_response(new))["tool_calls"]
    assert calls is not None and calls[0]["name"] == "write_file"
    said = override.apply(event, override.parse('model#1.text="bye"'))
    assert (said["response"]["body"]["echo"], said["response"]["body"]["asks"]) == ("bye", [])
    # a stream it cannot rewrite is refused, as for any provider
    with pytest.raises(override.OverrideError, match="cannot rewrite the text of a streamed echo response"):
        override.apply(_event(stream=["data: {}\n\n"]), override.parse('model#1.text="bye"'))


def test_registered_its_context_headers_export_and_sdk_are_known(registered: Echo) -> None:
    lines: list[dict[str, Any]] = REQUEST["lines"]
    assert "lines" in providers.context_fields()
    assert providers.context_messages({"lines": lines}) == lines
    assert providers.tool_call_arguments(lines[1]) == [{"path": "notes.txt"}]
    assert providers.is_tool_result(lines[2])
    assert "echo-version" in providers.semantic_headers()
    assert "ECHO_API_KEY" in providers.api_key_vars()
    assert "echo-sdk" in providers.sdk_packages() and "echo_sdk" in providers.sdk_modules()
    assert providers.otel_operation("echo") == "echo"
    assert providers.otel_provider_name({"provider": "echo", "host": "127.0.0.1:9"}) == "echo"
    system, msgs = providers.genai_input_messages("echo", URL, REQUEST)
    assert system is None and msgs[0] == {"role": "user", "parts": [{"type": "text", "content": "say hello"}]}


def test_registration_order_decides_only_between_body_shapes(monkeypatch: pytest.MonkeyPatch) -> None:
    class Greedy(Echo):
        name = api = "greedy"

        def claims_body(self, body: dict[str, Any]) -> bool:
            return True  # every body shape

    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    monkeypatch.setattr(providers, "REGISTRY", (*providers.REGISTRY, Greedy()))
    assert providers.detect("https://proxy.example/x", chat) == ("openai", "chat.completions")
    monkeypatch.setattr(providers, "REGISTRY", (Greedy(), *providers.REGISTRY))
    assert providers.detect("https://proxy.example/x", chat) == ("greedy", "greedy")
    assert providers.detect("https://proxy.example/v1/chat/completions", chat) == (
        "openai",
        "chat.completions",
    )


def test_what_other_layers_hold_is_derived_from_the_registry() -> None:
    assert (
        frozenset({"content-type", "range", "if-range"}) | providers.semantic_headers() == semantic_headers()
    )
    assert providers.context_fields() == CONTEXT_FIELDS
    assert providers.api_key_vars() == API_KEY_VARS
    assert TRACKED_PACKAGES[: len(providers.sdk_packages())] == providers.sdk_packages()
    # (the SDKs' table is by provider family: each of its entries is a registered provider's)
    assert set(sdks.SDKS) <= {p.name for p in providers.REGISTRY}
