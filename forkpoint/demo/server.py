"""A local, scripted, deliberately stochastic model server for demos, tests and benchmarks.

It speaks four provider dialects well enough for the real ``openai``, ``anthropic`` and
``google-genai`` SDKs (including their streaming helpers) to parse every answer:

- ``POST /v1/chat/completions``: OpenAI Chat Completions (``chat.completion`` objects, or
  ``chat.completion.chunk`` SSE ``data:`` lines ending with ``data: [DONE]``).
- ``POST /v1/responses``: OpenAI Responses API (a ``response`` object, or the ``event:``/``data:``
  stream ``response.created`` … ``response.completed``, each event with ``sequence_number``).
  ``previous_response_id`` chaining is honoured from an in-memory store.
- ``POST /v1/messages``: Anthropic Messages API (a ``message`` object, or the ``message_start`` …
  ``message_stop`` event stream with a ``ping``).
- ``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent`` (also under
  ``/v1`` and ``/v1alpha``): Google Gemini (a ``GenerateContentResponse`` with ``candidates``,
  ``usageMetadata``, ``modelVersion``; streamed as one ``data:`` event per chunk with ``?alt=sse``,
  as one JSON array of chunks without it). Function calls are ``functionCall`` parts; tool results
  come back as ``functionResponse`` parts. The model is the one named in the URL.

Any request carrying the header ``x-demo-fail: STATUS`` is answered with that HTTP status and the
provider's error JSON shape (Gemini: ``{"error": {"code", "message", "status"}}``). Unknown paths
get a 404 JSON error.

The scripted policy is the same for every dialect: when the request offers tools and the
conversation holds fewer than ``turns`` tool results, the model calls a tool, otherwise it answers
with text. With the demo agent's two tools (``write_file`` and ``run_tests``) it alternates: write a
scratch test, run the tests, and now and then (30 %) run the tests a second time. Everything the
model "chooses" (ids, file names, file contents, wording, the extra test run) is random, so a live
re-run takes a different path. With ``seed`` given, each answer is a pure function of
``(seed, path, request body, how many times that exact request was seen)``: ids, texts, and even
the ``created``/``created_at`` timestamps (then derived from a fixed epoch, not the clock) are
byte-for-byte reproducible, independent of request order or concurrency.

Run it standalone with ``python -m forkpoint.demo.server --turns N --port P``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import re
import signal
import socket
import socketserver
import string
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import orjson

__all__ = ["ModelServer", "main"]

DEFAULT_MODEL = "demo-model"
#: ``created`` timestamps of a seeded server start here (2023-11-14T22:13:20Z), in seconds.
SEEDED_EPOCH = 1_700_000_000
#: Probability that the scripted model runs the tests a second time in a row.
RERUN_PROBABILITY = 0.3
#: Probability that the scratch test it writes asserts a wrong value (it "reproduces the bug").
FAILING_REPRO_PROBABILITY = 0.2

#: How many Responses API answers are kept for ``previous_response_id`` chaining.
_RESPONSE_STORE_MAX = 1024

_ALNUM = string.ascii_letters + string.digits
_HEX = "0123456789abcdef"


# --------------------------------------------------------------------------------------------
# The scripted policy (dialect independent)
# --------------------------------------------------------------------------------------------


@dataclass
class _Conversation:
    """What the policy needs to know about a request, whatever its dialect."""

    tools: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> JSON schema
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # earlier tool calls
    results: list[str] = field(default_factory=list)  # tool results, as text, in order
    tool_choice_none: bool = False


@dataclass
class _Call:
    name: str
    arguments: str  # JSON text


@dataclass
class _Reply:
    text: str | None  # final text, or a short preamble before tool calls (Anthropic only)
    calls: list[_Call]


def _rand_id(rng: random.Random, prefix: str, n: int = 24) -> str:
    return prefix + "".join(rng.choice(_ALNUM) for _ in range(n))


def _rand_hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(_HEX) for _ in range(n))


def _loads_maybe(text: str | bytes) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


def _scratch_file(rng: random.Random) -> dict[str, str]:
    """Arguments of a ``write_file`` call: a small, self-contained scratch test."""
    prefix = rng.choice(("scratch", "repro"))
    path = f"{prefix}_{_rand_hex(rng, 4)}.py"
    a, b = rng.randint(2, 99), rng.randint(2, 99)
    expected = a + b + (1 if rng.random() < FAILING_REPRO_PROBABILITY else 0)
    content = (
        '"""Scratch test reproducing the bug in calc.py (written by the demo model)."""\n'
        "\n"
        "try:\n"
        "    from calc import add\n"
        "except ImportError:  # no calc.py in this workspace: use a stand-in\n"
        "\n"
        "    def add(a, b):\n"
        "        return a + b\n"
        "\n"
        "\n"
        "def test_add():\n"
        f"    assert add({a}, {b}) == {expected}, 'add({a}, {b}) != {expected}'\n"
        "\n"
        "\n"
        'if __name__ == "__main__":\n'
        "    test_add()\n"
        '    print("ok")\n'
    )
    return {"path": path, "content": content}


def _args_from_schema(schema: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Plausible arguments for an arbitrary (non-demo) tool, from its JSON schema."""
    out: dict[str, Any] = {}
    props = schema.get("properties") or {}
    if not isinstance(props, dict):
        return out
    for name, spec in props.items():
        spec = spec if isinstance(spec, dict) else {}
        kind = spec.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "string")
        if "enum" in spec and spec["enum"]:
            out[name] = rng.choice(list(spec["enum"]))
        elif kind == "integer":
            out[name] = rng.randint(1, 100)
        elif kind == "number":
            out[name] = round(rng.uniform(0, 100), 2)
        elif kind == "boolean":
            out[name] = rng.random() < 0.5
        elif kind == "array":
            out[name] = []
        elif kind == "object":
            out[name] = {}
        else:
            out[name] = f"demo-{_rand_hex(rng, 4)}"
    return out


_OPENERS = ("Done.", "All set.", "Finished.", "Here is what I did.", "That's done.")
_SMALL_TALK = (
    "Sure! Short answer: it depends on the inputs, but the common case is straightforward.",
    "Good question. In most setups the default configuration is the right place to start.",
    "Here's a quick take: keep it simple, measure first, then optimise the hot path.",
    "I'd start by writing a failing test that pins the behaviour down, then fix the code.",
    "Yes, that works. Just make sure the edge cases (empty input, None) are covered.",
    "The short version: it's a trade-off between speed and clarity, and clarity usually wins.",
)


def _final_text(conv: _Conversation, rng: random.Random) -> str:
    opener = rng.choice(_OPENERS)
    written = [str(a.get("path")) for n, a in conv.calls if n == "write_file" and "path" in a]
    runs = sum(1 for n, _ in conv.calls if n == "run_tests")
    last_run: dict[str, Any] | None = None
    for text in conv.results:
        parsed = _loads_maybe(text)
        if isinstance(parsed, dict) and "passed" in parsed and "failed" in parsed:
            last_run = parsed
    if written or runs:
        parts = [opener]
        if written:
            shown = ", ".join(written[:3])
            if len(written) > 3:
                shown += f" and {len(written) - 3} more files"
            parts.append(f"I wrote {shown} to reproduce the bug in calc.py")
        if runs:
            joiner = "and ran" if written else "I ran"
            times = "once" if runs == 1 else "twice" if runs == 2 else f"{runs} times"
            parts.append(f"{joiner} the test suite {times}")
        sentence = " ".join(parts) + "."
        if last_run is not None:
            sentence += f" Last run: {last_run.get('passed')} passed, {last_run.get('failed')} failed."
        return sentence
    if conv.calls:
        names = ", ".join(dict.fromkeys(n for n, _ in conv.calls))
        return f"{opener} I called {names} ({len(conv.calls)} calls in total)."
    return rng.choice(_SMALL_TALK)


def _decide(conv: _Conversation, turns: int, rng: random.Random) -> _Reply:
    """The scripted model: a tool call while fewer than ``turns`` tool results are in, else text."""
    if not conv.tools or conv.tool_choice_none or len(conv.results) >= turns:
        return _Reply(text=_final_text(conv, rng), calls=[])
    if "write_file" in conv.tools and "run_tests" in conv.tools:
        names = [n for n, _ in conv.calls]
        last = names[-1] if names else None
        before = names[-2] if len(names) > 1 else None
        if last == "write_file":
            name = "run_tests"
        elif last == "run_tests" and before != "run_tests" and rng.random() < RERUN_PROBABILITY:
            name = "run_tests"  # double-check: run the tests once more
        else:
            name = "write_file"
        args: dict[str, Any] = _scratch_file(rng) if name == "write_file" else {}
        preamble = (
            "I'll write a scratch test that reproduces the bug."
            if name == "write_file"
            else "Now let me run the test suite."
        )
    else:
        tool_names = list(conv.tools)
        name = tool_names[len(conv.results) % len(tool_names)]
        args = _args_from_schema(conv.tools[name], rng)
        preamble = f"Let me call {name}."
    return _Reply(text=preamble, calls=[_Call(name=name, arguments=orjson.dumps(args).decode())])


def _split(text: str, rng: random.Random, pieces: tuple[int, int] = (3, 6)) -> list[str]:
    """Split ``text`` into a few fragments (at least two when it has 2+ chars), at random cuts."""
    if len(text) < 2:
        return [text]
    n = min(len(text), rng.randint(*pieces))
    cuts = sorted(rng.sample(range(1, len(text)), n - 1))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def _words(text: str, per_chunk: int = 3) -> list[str]:
    """Split text into pieces of ``per_chunk`` words that keep their leading space.

    ``"a b c d"`` with ``per_chunk=2`` gives ``["a b", " c d"]``; joining the pieces gives the text.
    """
    words = text.split(" ")
    pieces = [" ".join(words[i : i + per_chunk]) for i in range(0, len(words), per_chunk)]
    pieces = [p if i == 0 else " " + p for i, p in enumerate(pieces)]
    return [p for p in pieces if p] or [text]


def _tokens(n_chars: int) -> int:
    return max(1, n_chars // 4)


def _text_of(content: Any) -> str:
    """Flatten a message/tool-result content (string or list of parts/blocks) into text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    out.append(part["text"])
                elif "content" in part:
                    out.append(_text_of(part["content"]))
        return "".join(out)
    if isinstance(content, dict) and isinstance(content.get("text"), str):
        return str(content["text"])
    return str(content)


def _parse_args(text: Any) -> dict[str, Any]:
    if isinstance(text, dict):
        return text
    parsed = _loads_maybe(text) if isinstance(text, str | bytes) else None
    return parsed if isinstance(parsed, dict) else {}


# --------------------------------------------------------------------------------------------
# Dialect readers: request body -> _Conversation
# --------------------------------------------------------------------------------------------


def _read_chat(body: dict[str, Any]) -> _Conversation:
    conv = _Conversation()
    for tool in body.get("tools") or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name"):
            conv.tools[fn["name"]] = fn.get("parameters") or {}
    conv.tool_choice_none = body.get("tool_choice") == "none"
    for msg in body.get("messages") or []:
        if not isinstance(msg, dict):
            continue
        role = msg.get("role")
        if role == "tool":
            conv.results.append(_text_of(msg.get("content")))
        elif role == "assistant":
            for call in msg.get("tool_calls") or []:
                fn = call.get("function") or {}
                conv.calls.append((fn.get("name", ""), _parse_args(fn.get("arguments"))))
    return conv


def _responses_items(body: dict[str, Any], store: dict[str, list[Any]]) -> list[Any]:
    items: list[Any] = []
    prev = body.get("previous_response_id")
    if isinstance(prev, str):
        items.extend(store.get(prev, []))
    inp = body.get("input")
    if isinstance(inp, str):
        items.append({"role": "user", "content": inp})
    elif isinstance(inp, list):
        items.extend(inp)
    return items


def _read_responses(items: list[Any], body: dict[str, Any]) -> _Conversation:
    conv = _Conversation()
    for tool in body.get("tools") or []:
        if isinstance(tool, dict) and tool.get("type") == "function" and tool.get("name"):
            conv.tools[tool["name"]] = tool.get("parameters") or {}
    conv.tool_choice_none = body.get("tool_choice") == "none"
    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "function_call":
            conv.calls.append((item.get("name", ""), _parse_args(item.get("arguments"))))
        elif kind == "function_call_output":
            conv.results.append(_text_of(item.get("output")))
    return conv


def _read_messages(body: dict[str, Any]) -> _Conversation:
    conv = _Conversation()
    for tool in body.get("tools") or []:
        if isinstance(tool, dict) and tool.get("name"):
            conv.tools[tool["name"]] = tool.get("input_schema") or {}
    choice = body.get("tool_choice")
    conv.tool_choice_none = isinstance(choice, dict) and choice.get("type") == "none"
    for msg in body.get("messages") or []:
        if not isinstance(msg, dict):
            continue
        content = msg.get("content")
        blocks = content if isinstance(content, list) else []
        if msg.get("role") == "assistant":
            for block in blocks:
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    conv.calls.append((block.get("name", ""), _parse_args(block.get("input"))))
        elif msg.get("role") == "user":
            for block in blocks:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    conv.results.append(_text_of(block.get("content")))
    return conv


# --------------------------------------------------------------------------------------------
# Dialect writers: _Reply -> JSON body or SSE events
# --------------------------------------------------------------------------------------------


@dataclass
class _Ctx:
    """Per-request context: the RNG, the clock, sizes."""

    rng: random.Random
    created: int  # Unix seconds
    model: str
    prompt_tokens: int
    turns: int


SSE = tuple[str | None, Any]  # (event name or None, data: a JSON-able object or the str "[DONE]")


def _chat(body: dict[str, Any], ctx: _Ctx) -> tuple[dict[str, Any], list[SSE]]:
    reply = _decide(_read_chat(body), ctx.turns, ctx.rng)
    rng = ctx.rng
    cid = _rand_id(rng, "chatcmpl-", 29)
    fingerprint = "fp_" + _rand_hex(rng, 10)
    text = None if reply.calls else reply.text
    calls: list[dict[str, Any]] = [
        {
            "id": _rand_id(rng, "call_", 24),
            "type": "function",
            "function": {"name": c.name, "arguments": c.arguments},
        }
        for c in reply.calls
    ]
    finish = "tool_calls" if calls else "stop"
    out_chars = len(text or "") + sum(len(c.name) + len(c.arguments) for c in reply.calls)
    usage = {
        "prompt_tokens": ctx.prompt_tokens,
        "completion_tokens": _tokens(out_chars),
        "total_tokens": ctx.prompt_tokens + _tokens(out_chars),
        "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    }
    message: dict[str, Any] = {
        "role": "assistant",
        "content": text,
        "refusal": None,
        "annotations": [],
    }
    if calls:
        message["tool_calls"] = calls
    full = {
        "id": cid,
        "object": "chat.completion",
        "created": ctx.created,
        "model": ctx.model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": usage,
        "service_tier": "default",
        "system_fingerprint": fingerprint,
    }

    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> SSE:
        data: dict[str, Any] = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": ctx.created,
            "model": ctx.model,
            "service_tier": "default",
            "system_fingerprint": fingerprint,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        if include_usage:
            data["usage"] = None
        return (None, data)

    events: list[SSE] = []
    if calls:
        for i, call in enumerate(calls):
            first: dict[str, Any] = {
                "tool_calls": [
                    {
                        "index": i,
                        "id": call["id"],
                        "type": "function",
                        "function": {"name": call["function"]["name"], "arguments": ""},
                    }
                ]
            }
            if i == 0:
                first = {"role": "assistant", "content": None, "refusal": None, **first}
            events.append(chunk(first))
            for frag in _split(call["function"]["arguments"], rng):
                events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": frag}}]}))
    else:
        events.append(chunk({"role": "assistant", "content": "", "refusal": None}))
        for piece in _words(text or ""):
            events.append(chunk({"content": piece}))
    events.append(chunk({}, finish))
    if include_usage:
        data = dict(events[-1][1])
        data["choices"] = []
        data["usage"] = usage
        events.append((None, data))
    events.append((None, "[DONE]"))
    return full, events


def _responses(
    body: dict[str, Any], ctx: _Ctx, store: dict[str, list[Any]], lock: threading.Lock
) -> tuple[dict[str, Any], list[SSE]]:
    with lock:
        items = _responses_items(body, store)
    reply = _decide(_read_responses(items, body), ctx.turns, ctx.rng)
    rng = ctx.rng
    rid = "resp_" + _rand_hex(rng, 48)
    output: list[dict[str, Any]] = []
    if reply.calls:
        for call in reply.calls:
            output.append(
                {
                    "type": "function_call",
                    "id": "fc_" + _rand_hex(rng, 48),
                    "call_id": _rand_id(rng, "call_", 24),
                    "name": call.name,
                    "arguments": call.arguments,
                    "status": "completed",
                }
            )
    else:
        output.append(
            {
                "type": "message",
                "id": "msg_" + _rand_hex(rng, 48),
                "status": "completed",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": reply.text or "", "annotations": [], "logprobs": []}
                ],
            }
        )
    out_chars = len(reply.text or "") if not reply.calls else 0
    out_chars += sum(len(c.name) + len(c.arguments) for c in reply.calls)
    usage = {
        "input_tokens": ctx.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": _tokens(out_chars),
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": ctx.prompt_tokens + _tokens(out_chars),
    }

    def response(status: str, out: list[dict[str, Any]], use: Any) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "response",
            "created_at": ctx.created,
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"),
            "model": ctx.model,
            "output": out,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "previous_response_id": body.get("previous_response_id"),
            "reasoning": {"effort": None, "summary": None},
            "store": body.get("store", True),
            "temperature": body.get("temperature", 1.0),
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "top_p": body.get("top_p", 1.0),
            "truncation": "disabled",
            "usage": use,
            "user": None,
            "metadata": body.get("metadata") or {},
        }

    full = response("completed", output, usage)
    with lock:
        store[rid] = [*items, *output]
        while len(store) > _RESPONSE_STORE_MAX:
            del store[next(iter(store))]  # forget the oldest chain

    events: list[SSE] = []

    def emit(kind: str, **data: Any) -> None:
        events.append((kind, {"type": kind, "sequence_number": len(events), **data}))

    emit("response.created", response=response("in_progress", [], None))
    emit("response.in_progress", response=response("in_progress", [], None))
    for index, item in enumerate(output):
        if item["type"] == "function_call":
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "arguments": "", "status": "in_progress"},
            )
            for frag in _split(item["arguments"], rng):
                emit(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=index,
                    delta=frag,
                )
            emit(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=index,
                name=item["name"],
                arguments=item["arguments"],
            )
        else:
            part = item["content"][0]
            emit(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "content": []},
            )
            emit(
                "response.content_part.added",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part={**part, "text": ""},
            )
            for piece in _words(part["text"]):
                emit(
                    "response.output_text.delta",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    delta=piece,
                    logprobs=[],
                )
            emit(
                "response.output_text.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                text=part["text"],
                logprobs=[],
            )
            emit(
                "response.content_part.done",
                item_id=item["id"],
                output_index=index,
                content_index=0,
                part=part,
            )
        emit("response.output_item.done", output_index=index, item=item)
    emit("response.completed", response=full)
    return full, events


def _messages(body: dict[str, Any], ctx: _Ctx) -> tuple[dict[str, Any], list[SSE]]:
    reply = _decide(_read_messages(body), ctx.turns, ctx.rng)
    rng = ctx.rng
    mid = _rand_id(rng, "msg_01", 22)
    blocks: list[dict[str, Any]] = []
    # Claude often says a word before it calls a tool; the demo model does so half of the time.
    if reply.text and (not reply.calls or rng.random() < 0.5):
        blocks.append({"type": "text", "text": reply.text})
    for call in reply.calls:
        blocks.append(
            {
                "type": "tool_use",
                "id": _rand_id(rng, "toolu_01", 22),
                "name": call.name,
                "input": orjson.loads(call.arguments),
            }
        )
    out_chars = sum(len(b.get("text", "")) for b in blocks)
    out_chars += sum(len(c.name) + len(c.arguments) for c in reply.calls)
    stop = "tool_use" if reply.calls else "end_turn"
    usage = {
        "input_tokens": ctx.prompt_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": _tokens(out_chars),
        "service_tier": "standard",
    }
    full = {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "model": ctx.model,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": usage,
    }

    events: list[SSE] = []

    def emit(kind: str, **data: Any) -> None:
        events.append((kind, {"type": kind, **data}))

    emit(
        "message_start",
        message={
            **full,
            "content": [],
            "stop_reason": None,
            "usage": {**usage, "output_tokens": 1},
        },
    )
    for index, block in enumerate(blocks):
        if block["type"] == "text":
            emit("content_block_start", index=index, content_block={"type": "text", "text": ""})
            if index == 0:
                emit("ping")
            for piece in _words(block["text"]):
                emit(
                    "content_block_delta",
                    index=index,
                    delta={"type": "text_delta", "text": piece},
                )
        else:
            emit(
                "content_block_start",
                index=index,
                content_block={**block, "input": {}},
            )
            if index == 0:
                emit("ping")
            emit(
                "content_block_delta",
                index=index,
                delta={"type": "input_json_delta", "partial_json": ""},
            )
            for frag in _split(orjson.dumps(block["input"]).decode(), rng):
                emit(
                    "content_block_delta",
                    index=index,
                    delta={"type": "input_json_delta", "partial_json": frag},
                )
        emit("content_block_stop", index=index)
    emit(
        "message_delta",
        delta={"stop_reason": stop, "stop_sequence": None},
        usage={"output_tokens": usage["output_tokens"]},
    )
    emit("message_stop")
    return full, events


#: ``/{version}/models/{model}:{method}`` of the Gemini API (the model id may not hold ``/`` or ``:``).
_GEMINI_PATH = re.compile(r"^/(?:v1|v1beta|v1alpha)/models/([^/:]+):(generateContent|streamGenerateContent)$")


def _lower_types(schema: Any) -> Any:
    """A Gemini ``Schema`` (``"type": "STRING"``, the proto enum spelling) with JSON-schema type names."""
    if isinstance(schema, dict):
        return {
            k: (v.lower() if k == "type" and isinstance(v, str) else _lower_types(v))
            for k, v in schema.items()
        }
    if isinstance(schema, list):
        return [_lower_types(v) for v in schema]
    return schema


def _g(obj: dict[str, Any], camel: str, snake: str) -> Any:
    """A field of a Gemini request by its JSON (camelCase) or proto (snake_case) name."""
    return obj.get(camel) if camel in obj else obj.get(snake)


def _gemini_result_text(response: Any) -> str:
    """A ``functionResponse.response`` as text; ``{"output": x}`` / ``{"result": x}`` wrappers are unwrapped."""
    if isinstance(response, dict) and len(response) == 1:
        ((key, value),) = response.items()
        if key in ("output", "result", "content"):
            response = value
    return response if isinstance(response, str) else orjson.dumps(response).decode()


def _read_gemini(body: dict[str, Any]) -> _Conversation:
    conv = _Conversation()
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        for decl in _g(tool, "functionDeclarations", "function_declarations") or []:
            if isinstance(decl, dict) and decl.get("name"):
                schema = _g(decl, "parametersJsonSchema", "parameters_json_schema") or decl.get("parameters")
                conv.tools[decl["name"]] = _lower_types(schema) if isinstance(schema, dict) else {}
    tool_config = _g(body, "toolConfig", "tool_config")
    calling = (
        _g(tool_config, "functionCallingConfig", "function_calling_config")
        if isinstance(tool_config, dict)
        else None
    )
    conv.tool_choice_none = isinstance(calling, dict) and str(calling.get("mode", "")).upper() == "NONE"
    for content in body.get("contents") or []:
        if not isinstance(content, dict):
            continue
        for part in content.get("parts") or []:
            if not isinstance(part, dict):
                continue
            call = _g(part, "functionCall", "function_call")
            response = _g(part, "functionResponse", "function_response")
            if isinstance(call, dict):
                conv.calls.append((str(call.get("name", "")), _parse_args(call.get("args"))))
            elif isinstance(response, dict):
                conv.results.append(_gemini_result_text(response.get("response")))
    return conv


def _gemini(body: dict[str, Any], ctx: _Ctx) -> tuple[dict[str, Any], list[SSE]]:
    """A ``GenerateContentResponse``, and the chunks of the same answer for ``:streamGenerateContent``."""
    reply = _decide(_read_gemini(body), ctx.turns, ctx.rng)
    rng = ctx.rng
    response_id = _rand_id(rng, "", 22)
    parts: list[dict[str, Any]] = [
        {"functionCall": {"name": c.name, "args": orjson.loads(c.arguments)}} for c in reply.calls
    ]
    if not parts:
        parts = [{"text": reply.text or ""}]
    out_chars = len(reply.text or "") if not reply.calls else 0
    out_chars += sum(len(c.name) + len(c.arguments) for c in reply.calls)
    prompt, output = ctx.prompt_tokens, _tokens(out_chars)
    usage = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": output,
        "totalTokenCount": prompt + output,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": prompt}],
    }

    def response(chunk_parts: list[dict[str, Any]], finish: bool, use: dict[str, Any]) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": chunk_parts, "role": "model"}}
        if finish:
            candidate["finishReason"] = "STOP"
        candidate["index"] = 0
        return {
            "candidates": [candidate],
            "usageMetadata": use,
            "modelVersion": ctx.model,
            "responseId": response_id,
        }

    full = response(parts, True, usage)
    # Streamed: text arrives a few words per chunk, function calls whole (as Gemini sends them); every
    # chunk carries the usage so far, the last one the finish reason and the full usage.
    running = {"promptTokenCount": prompt, "totalTokenCount": prompt}
    if reply.calls:
        events: list[SSE] = [(None, full)]
    else:
        pieces = _words(reply.text or "")
        events = [(None, response([{"text": p}], False, running)) for p in pieces[:-1]]
        events.append((None, response([{"text": pieces[-1]}], True, usage)))
    return full, events


_GEMINI_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}


def _gemini_error_body(status: int, message: str) -> dict[str, Any]:
    """The Google API error shape: ``{"error": {"code", "message", "status"}}``."""
    name = _GEMINI_STATUS.get(status, "INTERNAL" if status >= 500 else "FAILED_PRECONDITION")
    return {"error": {"code": status, "message": message, "status": name}}


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------

_OPENAI_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("invalid_request_error", "unsupported_country_region_territory"),
    404: ("invalid_request_error", "unknown_url"),
    409: ("invalid_request_error", "conflict"),
    422: ("invalid_request_error", None),
    429: ("rate_limit_exceeded", "rate_limit_exceeded"),
}
_ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}


def _error_body(anthropic: bool, status: int, message: str, rng: random.Random) -> dict[str, Any]:
    if anthropic:
        kind = _ANTHROPIC_ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {
            "type": "error",
            "error": {"type": kind, "message": message},
            "request_id": _rand_id(rng, "req_011", 21),
        }
    kind, code = _OPENAI_ERROR_TYPES.get(
        status, ("server_error", None) if status >= 500 else ("invalid_request_error", None)
    )
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


# --------------------------------------------------------------------------------------------
# HTTP plumbing
# --------------------------------------------------------------------------------------------


class _HTTPServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that knows its open connections, so ``stop()`` can cut them."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], owner: ModelServer) -> None:
        self.owner = owner
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls socket.getfqdn(), a reverse DNS lookup that can stall.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._conns_lock:
            self._conns.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._conns_lock:
            self._conns.discard(request)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (closed pool, killed agent) is normal here: stay quiet.
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            return
        super().handle_error(request, client_address)

    def cut_connections(self) -> None:
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "forkpoint-demo-model/1"
    sys_version = ""
    timeout = 60  # seconds an idle keep-alive connection is kept
    server: _HTTPServer

    def setup(self) -> None:
        super().setup()
        try:
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        return

    # -- helpers --------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("transfer-encoding") or "").lower():
            data = bytearray()
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(data)
                data += self.rfile.read(size)
                self.rfile.readline()
        length = int(self.headers.get("content-length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def _send_json(self, status: int, obj: Any, extra: dict[str, str] | None = None) -> None:
        payload = orjson.dumps(obj)
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(payload)

    def _send_sse(self, events: list[SSE], extra: dict[str, str]) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        for key, value in extra.items():
            self.send_header(key, value)
        self.end_headers()
        delay = self.server.owner.chunk_delay
        for i, frame in enumerate(_sse_frames(events)):
            if i and delay > 0:
                time.sleep(delay)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
        self.wfile.write(b"0\r\n\r\n")

    # -- verbs ------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - stdlib naming
        self._not_found()

    do_PUT = do_PATCH = do_DELETE = do_GET  # noqa: N815 - stdlib naming

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        try:
            self._post()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
            self.close_connection = True

    def _not_found(self) -> None:
        owner = self.server.owner
        rng = owner._rng_for(self.path, b"404")
        body = _error_body(False, 404, f"Unknown request URL: {self.command} {self.path}.", rng)
        self._send_json(404, body)

    def _post(self) -> None:
        owner = self.server.owner
        raw = self._read_body()
        path = self.path.split("?", 1)[0].rstrip("/")
        try:
            body = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            body = None
        owner._record(
            {
                "method": "POST",
                "path": path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
                "body": body,
            }
        )
        anthropic = path.endswith("/messages")
        gemini = _GEMINI_PATH.match(path)
        query = self.path.partition("?")[2]
        rng = owner._rng_for(path, raw)
        req_header = (
            {"request-id": _rand_id(rng, "req_011", 21)}
            if anthropic
            else {"x-request-id": "req_" + _rand_hex(rng, 32)}
        )

        def error(status: int, message: str, extra: dict[str, str]) -> None:
            if gemini or "/models/" in path:
                self._send_json(status, _gemini_error_body(status, message), extra)
            else:
                self._send_json(status, _error_body(anthropic, status, message, rng), extra)

        if not gemini and path not in ("/v1/chat/completions", "/v1/responses", "/v1/messages"):
            error(404, f"Unknown request URL: POST {self.path}.", req_header)
            return
        fail = self.headers.get("x-demo-fail")
        if fail:
            try:
                status = int(fail.strip())
            except ValueError:
                status = 500
            if not 400 <= status <= 599:
                status = 500
            error(
                status, f"Simulated failure (x-demo-fail: {status}).", {**req_header, "retry-after-ms": "5"}
            )
            return
        if not isinstance(body, dict):
            error(400, "We could not parse the JSON body of your request.", req_header)
            return

        ctx = _Ctx(
            rng=rng,
            created=owner._created(body),
            model=gemini.group(1) if gemini else str(body.get("model") or DEFAULT_MODEL),
            prompt_tokens=_tokens(len(raw)),
            turns=owner.turns,
        )
        if gemini:
            full, events = _gemini(body, ctx)
            if gemini.group(2) == "generateContent":
                self._send_json(200, full, req_header)
            elif "alt=sse" in query.split("&"):
                self._send_sse(events, req_header)
            else:  # :streamGenerateContent without alt=sse: one JSON array of the chunks
                self._send_json(200, [data for _, data in events], req_header)
            return
        if path == "/v1/chat/completions":
            full, events = _chat(body, ctx)
        elif path == "/v1/responses":
            full, events = _responses(body, ctx, owner._response_store, owner._lock)
        else:
            full, events = _messages(body, ctx)
        if body.get("stream"):
            self._send_sse(events, req_header)
        else:
            self._send_json(200, full, req_header)


def _sse_frames(events: list[SSE]) -> Iterator[bytes]:
    for event, data in events:
        payload = data.encode() if isinstance(data, str) else orjson.dumps(data)
        head = b"event: %s\n" % event.encode() if event else b""
        yield head + b"data: " + payload + b"\n\n"


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------


class ModelServer:
    """A scripted model provider on a local port (OpenAI chat/responses, Anthropic messages, Gemini).

    Args:
        turns: how many tool results a conversation may hold before the model stops calling
            tools and answers with text (with the demo agent, turns=2 gives
            write_file -> run_tests -> final answer).
        seed: ``None`` for a stochastic model; an int makes every answer reproducible (ids,
            choices, texts and timestamps) as a function of the seed and the request.
        host: interface to bind (loopback by default).
        port: TCP port; 0 picks a free one.
        chunk_delay: seconds slept between two SSE frames of a streamed answer (default 1 ms;
            clamped to [0, 0.002] so that 100-turn benchmarks stay fast).

    Attributes:
        port: the bound TCP port (after :meth:`start`).
        base_url: ``"http://HOST:PORT"`` without a path (Anthropic SDK ``base_url``, and google-genai's
            ``HttpOptions(base_url=...)``).
        openai_base_url: ``base_url + "/v1"`` (OpenAI SDK ``base_url``).
        requests: every POST received, in arrival order, as
            ``{"method", "path", "headers" (lower-cased names), "body" (parsed JSON or None)}``;
            appended under a lock, so take ``list(server.requests)`` to read a stable snapshot.
    """

    def __init__(
        self,
        *,
        turns: int = 2,
        seed: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        chunk_delay: float = 0.001,
    ) -> None:
        if turns < 0:
            raise ValueError("turns must be >= 0")
        self.turns = turns
        self.seed = seed
        self.host = host
        self.chunk_delay = max(0.0, min(float(chunk_delay), 0.002))
        self.requests: list[dict[str, Any]] = []
        self._requested_port = port
        self._lock = threading.Lock()
        self._seen: dict[bytes, int] = {}
        self._response_store: dict[str, list[Any]] = {}
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._port: int | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> ModelServer:
        """Bind the socket and serve in a background thread; returns ``self``."""
        if self._httpd is not None:
            return self
        httpd = _HTTPServer((self.host, self._requested_port), self)
        self._httpd = httpd
        self._port = int(httpd.server_address[1])
        self._thread = threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"forkpoint-demo-server:{self._port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, cut open keep-alive connections and close the listening socket.

        Afterwards a new connection to :attr:`port` is refused. Idempotent.
        """
        httpd, thread = self._httpd, self._thread
        if httpd is None:
            return
        self._httpd = None
        self._thread = None
        httpd.shutdown()
        httpd.cut_connections()
        httpd.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def __enter__(self) -> ModelServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        """True between :meth:`start` and :meth:`stop`."""
        return self._httpd is not None

    @property
    def port(self) -> int:
        """The bound TCP port. Raises RuntimeError before :meth:`start`."""
        if self._port is None:
            raise RuntimeError("ModelServer is not started")
        return self._port

    @property
    def base_url(self) -> str:
        """``"http://HOST:PORT"``, no trailing slash, no path."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def openai_base_url(self) -> str:
        """``base_url + "/v1"``: what ``openai.OpenAI(base_url=...)`` wants."""
        return self.base_url + "/v1"

    # -- internals used by the handler --------------------------------------------------------

    def _record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(entry)

    def _rng_for(self, path: str, raw: bytes) -> random.Random:
        if self.seed is None:
            return random.Random(int.from_bytes(os.urandom(16), "big"))
        digest = hashlib.sha256(path.encode() + b"\0" + raw).digest()
        with self._lock:
            nth = self._seen.get(digest, 0)
            self._seen[digest] = nth + 1
        material = b"%d\0%s\0%d" % (self.seed, digest, nth)
        return random.Random(hashlib.sha256(material).digest())

    def _created(self, body: dict[str, Any]) -> int:
        if self.seed is None:
            return int(time.time())
        # Seeded: a fixed epoch that advances with the length of the conversation.
        size = len(body.get("messages") or body.get("input") or body.get("contents") or [])
        return SEEDED_EPOCH + 7 * size


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """``python -m forkpoint.demo.server [--turns N] [--port P] [--host H] [--seed S]``.

    Prints the base URL (``http://HOST:PORT``) on one line, then serves until SIGINT/SIGTERM.
    """
    parser = argparse.ArgumentParser(
        prog="python -m forkpoint.demo.server",
        description="Scripted local model server (OpenAI chat/responses, Anthropic messages, Gemini).",
    )
    parser.add_argument("--turns", type=int, default=2, help="tool calls before the final text")
    parser.add_argument("--port", type=int, default=0, help="TCP port (0: pick a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="interface to bind")
    parser.add_argument("--seed", type=int, default=None, help="make every answer reproducible")
    parser.add_argument("--chunk-delay-ms", type=float, default=1.0, help="pause between SSE frames (max 2)")
    args = parser.parse_args(argv)
    if args.turns < 0:
        parser.error(f"argument --turns: must be 0 or more, not {args.turns}")

    stop = threading.Event()

    def _on_signal(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    server = ModelServer(
        turns=args.turns,
        seed=args.seed,
        host=args.host,
        port=args.port,
        chunk_delay=args.chunk_delay_ms / 1000.0,
    )
    with server:
        print(server.base_url, flush=True)
        while not stop.wait(0.5):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
