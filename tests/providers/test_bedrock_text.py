"""Bedrock InvokeModel of the text models in their own formats (Meta Llama, Mistral, Amazon Titan
Text, Cohere Command): ``show``, ``diff`` and the export read nothing of them (no text, no tokens, no
prompt), as the formats were not read. Bodies and streams as the model-parameters pages give them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from forkpoint.providers import detect, request_messages, response_fields, summarize

BASE = "http://127.0.0.1:9/model/{}/invoke"


def chunks(*data: dict[str, Any]) -> list[str]:
    """An InvokeModelWithResponseStream answer as forkpoint stores it: one ``chunk`` event each."""
    return [f"event: chunk\ndata: {json.dumps(c)}\n\n" for c in data]


METRICS = {"amazon-bedrock-invocationMetrics": {"inputTokenCount": 11, "outputTokenCount": 3}}
#: family → (model id, request, response body, stream chunks)
CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any], list[str]]] = {
    "llama": (
        "meta.llama3-8b-instruct-v1:0",
        {"prompt": "What is 2 + 3?", "max_gen_len": 64, "temperature": 0.2},
        {
            "generation": "It is 5.",
            "prompt_token_count": 11,
            "generation_token_count": 3,
            "stop_reason": "stop",
        },
        chunks(
            {
                "generation": "It is ",
                "prompt_token_count": 11,
                "generation_token_count": 2,
                "stop_reason": None,
            },
            {
                "generation": "5.",
                "prompt_token_count": None,
                "generation_token_count": 3,
                "stop_reason": "stop",
                **METRICS,
            },
        ),
    ),
    "mistral": (
        "mistral.mistral-7b-instruct-v0:2",
        {"prompt": "What is 2 + 3?", "max_tokens": 64, "temperature": 0.2},
        {"outputs": [{"text": "It is 5.", "stop_reason": "stop"}]},
        chunks(
            {"outputs": [{"text": "It is ", "stop_reason": None}]},
            {"outputs": [{"text": "5.", "stop_reason": "stop"}], **METRICS},
        ),
    ),
    "titan": (
        "amazon.titan-text-express-v1",
        {"inputText": "What is 2 + 3?", "textGenerationConfig": {"maxTokenCount": 64, "temperature": 0.2}},
        {
            "inputTextTokenCount": 11,
            "results": [{"tokenCount": 3, "outputText": "It is 5.", "completionReason": "FINISH"}],
        },
        chunks(
            {
                "outputText": "It is ",
                "index": 0,
                "totalOutputTextTokenCount": 2,
                "completionReason": None,
                "inputTextTokenCount": 11,
            },
            {
                "outputText": "5.",
                "index": 0,
                "totalOutputTextTokenCount": 3,
                "completionReason": "FINISH",
                **METRICS,
            },
        ),
    ),
    "cohere": (
        "cohere.command-r-v1:0",
        {
            "message": "What is 2 + 3?",
            "chat_history": [{"role": "USER", "message": "Hi"}, {"role": "CHATBOT", "message": "Hello."}],
            "max_tokens": 64,
            "temperature": 0.2,
        },
        {
            "text": "It is 5.",
            "finish_reason": "COMPLETE",
            "generation_id": "g1",
            "meta": {"billed_units": {"input_tokens": 11, "output_tokens": 3}},
        },
        chunks(
            {"is_finished": False, "event_type": "text-generation", "text": "It is "},
            {"is_finished": False, "event_type": "text-generation", "text": "5."},
            {"is_finished": True, "event_type": "stream-end", "finish_reason": "COMPLETE", **METRICS},
        ),
    ),
}


@pytest.mark.parametrize("family", list(CASES))
@pytest.mark.parametrize("shape", ["body", "stream"])
def test_a_text_models_answer_is_read(family: str, shape: str) -> None:
    model, request, body, stream = CASES[family]
    url = BASE.format(model.replace(":", "%3A"))
    if shape == "stream":
        url = url.replace("/invoke", "/invoke-with-response-stream")
    assert detect(url, request) == ("bedrock", "invoke")
    response = {"status": 200, "body": body} if shape == "body" else {"status": 200, "stream": stream}
    read = response_fields(url, response)
    assert read.text == "It is 5."
    assert read.stop_reason in ("stop", "FINISH", "COMPLETE")
    if family != "mistral" or shape == "stream":  # (Mistral's body reports no token counts)
        assert read.usage == {"input_tokens": 11, "output_tokens": 3}
    summary = summarize(url, request, response)
    assert (summary["max_tokens"], summary["temperature"]) == (64, 0.2)
    assert [m["text"] for m in request_messages(url, request)][-1] == "What is 2 + 3?"


def test_cohere_history_is_read_as_the_conversation() -> None:
    model, request, _, _ = CASES["cohere"]
    messages = request_messages(BASE.format(model), request)
    assert [(m["role"], m["text"]) for m in messages] == [
        ("user", "Hi"),
        ("assistant", "Hello."),
        ("user", "What is 2 + 3?"),
    ]


def test_cohere_commands_generations_are_read() -> None:
    """Cohere Command (``cohere.command-text-v14``) answers ``{generations[{text, finish_reason}],
    prompt}``: its ``prompt`` made it a text model's body, whose text and stop reason were not read
    (``show`` printed an answer with no text). The first of ``num_generations`` answers is read."""
    url = BASE.format("cohere.command-text-v14")
    request = {"prompt": "What is 2 + 3?", "max_tokens": 64, "temperature": 0.2, "num_generations": 2}
    body = {
        "id": "r1",
        "prompt": "What is 2 + 3?",
        "generations": [
            {"id": "g1", "text": "It is 5.", "finish_reason": "COMPLETE"},
            {"id": "g2", "index": 1, "text": "Five.", "finish_reason": "MAX_TOKENS"},
        ],
    }
    read = response_fields(url, {"status": 200, "body": body})
    assert (read.text, read.stop_reason) == ("It is 5.", "COMPLETE")
    assert summarize(url, request, {"status": 200, "body": body})["max_tokens"] == 64
