"""Anthropic Messages — ``POST /v1/messages``, and Claude on Vertex AI.

Wire format (docs.anthropic.com/en/api/messages; streaming in
docs.anthropic.com/en/docs/build-with-claude/streaming): request ``{model, max_tokens, system?: str |
[{type:"text", text}], messages[{role, content: str | [block]}], tools?, temperature?, top_p?,
stream?}``, blocks ``text`` / ``tool_use{id, name, input}`` / ``tool_result{tool_use_id, content}``.
Response ``{id, type:"message", model, content[block], stop_reason, usage{input_tokens,
output_tokens}}``. Streamed as ``message_start{message{id, model, usage}}``,
``content_block_start{index, content_block}``, ``content_block_delta{index, delta: text_delta{text}
| input_json_delta{partial_json}}``, ``content_block_stop``, ``message_delta{delta{stop_reason},
usage{output_tokens}}`` (cumulative counts), ``message_stop``, ``ping``, and ``error{error{type,
message}}``. Headers ``anthropic-version`` and ``anthropic-beta`` select the API version and
features. Also reached through Vertex AI as
``.../publishers/anthropic/models/{model}:rawPredict`` / ``:streamRawPredict``
(cloud.google.com/vertex-ai/generative-ai/docs/partner-models/claude).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from ..patterns import compiled_later
from .base import (
    NOTHING,
    CallAcc,
    GenAIInput,
    Message,
    NewToolCall,
    Payload,
    Provider,
    ResponseFields,
    ToolCallSummary,
    Usage,
    args_obj,
    d,
    dumps,
    error_of,
    first,
    genai_function,
    genai_parts,
    i,
    join,
    lst,
    on_vertex_ai,
    parts_text,
    plain_text,
    read_usage,
    role,
    s,
    sse,
)

#: Content blocks of tools Anthropic runs itself (web search, code execution, remote MCP servers):
#: shown, never counted as tool calls the agent must answer.
SERVER_TOOL_BLOCKS = ("server_tool_use", "mcp_tool_use")

_MODEL_IN_PATH = compiled_later(r"/(?:models|tunedModels)/([^/:]+):")

#: Content blocks of extended thinking. An answer that uses tools must be sent back with them
#: (Anthropic's documentation says so), so an override that asks for tools keeps the recorded ones.
THINKING_BLOCKS = ("thinking", "redacted_thinking")


def _blocks(text: str | None, calls: Sequence[NewToolCall]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks += [
        {"type": "tool_use", "id": c["id"], "name": c["name"], "input": args_obj(c["arguments"])}
        for c in calls
    ]
    return blocks


class Anthropic(Provider):
    """Anthropic Messages (direct, or Claude on Vertex AI)."""

    name = "anthropic"
    api = "messages"
    reference = "https://docs.anthropic.com/en/api/messages"
    context_fields = ("system", "messages")
    messages_field = "messages"
    final_events = (b"event: message_stop",)
    semantic_headers = frozenset({"anthropic-version", "anthropic-beta"})
    otel_operation = "chat"
    # usage.input_tokens counts the tokens after the last cache breakpoint only
    # (docs.anthropic.com/en/docs/build-with-claude/prompt-caching).
    cache_outside_input = True

    # --- recognition

    def claims_path(self, path: str) -> bool:
        if "/publishers/anthropic/" in path and (
            path.endswith(":rawPredict") or path.endswith(":streamRawPredict")
        ):
            return True
        return (
            path.endswith("/messages") and "/threads/" not in path
        )  # not OpenAI Assistants' thread messages

    def claims_host(self, host: str) -> bool:
        return host == "anthropic.com" or host.endswith(".anthropic.com")

    def claims_body(self, body: dict[str, Any]) -> bool:
        """A ``messages`` list with ``tool_use`` / ``tool_result`` blocks, a ``system`` field or an
        ``anthropic_version`` (the Vertex AI body): a Chat-shaped body that is Anthropic's."""
        if not isinstance(body.get("messages"), list):
            return False
        blocks = any(
            d(block).get("type") in ("tool_use", "tool_result")
            for m in body["messages"]
            for block in lst(d(m).get("content"))
        )
        return blocks or "system" in body or "anthropic_version" in body

    def is_auxiliary_path(self, path: str) -> bool:
        return "count_tokens" in path

    def path_streams(self, path: str) -> bool:
        return path.endswith(":streamRawPredict")

    def model_in_path(self, path: str) -> str | None:
        m = _MODEL_IN_PATH.search(path)  # Vertex AI: .../publishers/anthropic/models/{model}:rawPredict
        return m.group(1) if m else None

    # --- request side

    def messages(self, body: dict[str, Any]) -> list[Message]:
        """The ``system`` prompt first as ``{"role": "system"}`` (when non-empty), then one entry per
        message; ``tool_result`` blocks are rendered as their content text (the role stays the
        wire's ``user``)."""
        system = parts_text(body.get("system"))
        head: list[Message] = [{"role": "system", "text": system}] if system else []
        return head + [
            {"role": role(d(m).get("role")), "text": parts_text(d(m).get("content"))}
            for m in lst(body.get("messages"))
        ]

    # --- response side

    def read_body(self, body: object) -> ResponseFields:
        if not isinstance(body, dict) or (
            not isinstance(body.get("content"), list) and body.get("type") != "message"
        ):
            return NOTHING
        text: list[str] | None = None
        thought: list[str] | None = None
        calls: list[ToolCallSummary] = []
        server: list[ToolCallSummary] = []
        for block in lst(body.get("content")):
            block = d(block)
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                text = text if text is not None else []
                text.append(block["text"])
            elif block.get("type") == "thinking" and isinstance(block.get("thinking"), str):
                thought = [*(thought or []), block["thinking"]]
            elif block.get("type") in ("tool_use", *SERVER_TOOL_BLOCKS):
                inp = block.get("input")
                call: ToolCallSummary = {
                    "id": s(block.get("id")),
                    "name": s(block.get("name")),
                    "arguments": dumps(inp),
                }
                (calls if block["type"] == "tool_use" else server).append(call)
        return ResponseFields(
            join(text),
            calls,
            read_usage(body.get("usage")),
            s(body.get("stop_reason")),
            s(body.get("model")),
            None,
            server or None,
            join(thought),
        )

    def read_stream(self, stream: list[Payload]) -> ResponseFields:
        blocks: dict[int, tuple[str | None, list[str], CallAcc]] = {}
        start_usage: dict[Any, Any] | None = None
        delta_usage: dict[Any, Any] | None = None
        stop = model = error = None
        seen = False
        for event, p in stream:
            kind = s(p.get("type")) or event
            if kind == "error":
                error = error or error_of(p)
            elif kind == "message_start":
                seen = True
                msg = d(p.get("message"))
                model = s(msg.get("model")) or model
                stop = s(msg.get("stop_reason")) or stop
                if isinstance(msg.get("usage"), dict):
                    start_usage = msg["usage"]
            elif kind == "content_block_start":
                seen = True
                cb = d(p.get("content_block"))
                acc = CallAcc(s(cb.get("id")), s(cb.get("name")))
                acc.obj = cb.get("input")
                text0 = cb.get("thinking" if cb.get("type") == "thinking" else "text")
                blocks[i(p.get("index")) or 0] = (
                    s(cb.get("type")),
                    [text0] if isinstance(text0, str) else [],
                    acc,
                )
            elif kind == "content_block_delta":
                seen = True
                idx = i(p.get("index")) or 0
                delta = d(p.get("delta"))
                if idx not in blocks:  # a delta without its start (cut recording): infer the type
                    kind = {"text_delta": "text", "thinking_delta": "thinking"}.get(
                        s(delta.get("type")) or ""
                    )
                    blocks[idx] = (kind, [], CallAcc())
                _, text_parts, acc = blocks[idx]
                if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                    text_parts.append(delta["text"])
                elif delta.get("type") == "thinking_delta" and isinstance(delta.get("thinking"), str):
                    text_parts.append(delta["thinking"])
                elif delta.get("type") == "input_json_delta" and isinstance(delta.get("partial_json"), str):
                    acc.args.append(delta["partial_json"])
            elif kind == "message_delta":
                seen = True
                stop = s(d(p.get("delta")).get("stop_reason")) or stop
                if isinstance(p.get("usage"), dict):
                    delta_usage = p["usage"]
        if not seen:
            return NOTHING._replace(error=error)
        text: list[str] | None = None
        thought: list[str] | None = None
        calls: list[ToolCallSummary] = []
        server: list[ToolCallSummary] = []
        for idx in sorted(blocks):
            block_type, text_parts, acc = blocks[idx]
            if block_type == "text":
                text = text if text is not None else []
                text.extend(text_parts)
            elif block_type == "thinking":
                thought = [*(thought or []), *text_parts]
            elif block_type == "tool_use":
                # The concatenated partial_json as sent; a tool without arguments may stream none at
                # all, and then the content_block_start input ({}) is what the model asked for.
                calls.append(acc.result())
            elif block_type in SERVER_TOOL_BLOCKS:
                server.append(acc.result())
        usage: Usage | None = None
        if start_usage is not None or delta_usage is not None:
            # message_delta usage is cumulative, so it wins where it has a count.
            at_start, last = read_usage(start_usage) or {}, read_usage(delta_usage) or {}
            usage = {
                "input_tokens": i(first(last.get("input_tokens"), at_start.get("input_tokens"))),
                "output_tokens": i(first(last.get("output_tokens"), at_start.get("output_tokens"))),
            }
            for cache in ("cache_read_input_tokens", "cache_creation_input_tokens"):
                count = i(first(last.get(cache), at_start.get(cache)))
                if count is not None:
                    usage[cache] = count
        return ResponseFields(join(text), calls, usage, stop, model, error, server or None, join(thought))

    def response_id(self, payload: dict[str, Any]) -> str | None:
        msg = payload.get("message")  # a stream's message_start
        return s(payload.get("id")) or (s(msg.get("id")) if isinstance(msg, dict) else None) or None

    def stream_delta_text(self, payload: dict[str, Any]) -> str:
        delta = payload.get("delta") if payload.get("type") == "content_block_delta" else None
        if (
            isinstance(delta, dict)
            and delta.get("type") == "text_delta"
            and isinstance(delta.get("text"), str)
        ):
            return str(delta["text"])
        return ""

    # --- carried context

    def tool_call_arguments(self, node: dict[str, Any]) -> list[object]:
        return [node.get("input")] if node.get("type") == "tool_use" else []

    def is_tool_result(self, node: dict[str, Any]) -> bool:
        return node.get("type") == "tool_result"

    # --- overrides

    def rewrite_body(self, body: dict[str, Any], text: str | None, calls: Sequence[NewToolCall]) -> bool:
        thinking = (
            [b for b in lst(body.get("content")) if d(b).get("type") in THINKING_BLOCKS] if calls else []
        )
        body["content"] = thinking + _blocks(text, calls)
        body["stop_reason"] = "tool_use" if calls else "end_turn"
        return True

    def rewrite_stream(
        self, stream: list[dict[str, Any]], text: str | None, calls: Sequence[NewToolCall]
    ) -> list[str]:
        start: dict[str, Any] = next(
            (p for p in stream if p.get("type") == "message_start"), {"type": "message_start", "message": {}}
        )
        delta: dict[str, Any] = next(
            (p for p in stream if p.get("type") == "message_delta"), {"type": "message_delta", "usage": {}}
        )
        out = [sse(start, "message_start")]
        kept: dict[object, int] = {}  # recorded index of a thinking block -> its index here
        for p in stream if calls else ():
            if (
                p.get("type") == "content_block_start"
                and d(p.get("content_block")).get("type") in THINKING_BLOCKS
            ):
                kept[p.get("index")] = len(kept)
            if str(p.get("type")).startswith("content_block_") and p.get("index") in kept:
                out.append(sse({**p, "index": kept[p.get("index")]}, str(p["type"])))
        for n, b in enumerate(_blocks(text, calls), start=len(kept)):
            if b["type"] == "text":
                out.append(
                    sse(
                        {
                            "type": "content_block_start",
                            "index": n,
                            "content_block": {"type": "text", "text": ""},
                        },
                        "content_block_start",
                    )
                )
                out.append(
                    sse(
                        {
                            "type": "content_block_delta",
                            "index": n,
                            "delta": {"type": "text_delta", "text": b["text"]},
                        },
                        "content_block_delta",
                    )
                )
            else:
                out.append(
                    sse(
                        {
                            "type": "content_block_start",
                            "index": n,
                            "content_block": {
                                "type": "tool_use",
                                "id": b["id"],
                                "name": b["name"],
                                "input": {},
                            },
                        },
                        "content_block_start",
                    )
                )
                out.append(
                    sse(
                        {
                            "type": "content_block_delta",
                            "index": n,
                            "delta": {
                                "type": "input_json_delta",
                                "partial_json": orjson.dumps(b["input"]).decode(),
                            },
                        },
                        "content_block_delta",
                    )
                )
            out.append(sse({"type": "content_block_stop", "index": n}, "content_block_stop"))
        delta = {
            **delta,
            "delta": {**delta.get("delta", {}), "stop_reason": "tool_use" if calls else "end_turn"},
        }
        out += [sse(delta, "message_delta"), sse({"type": "message_stop"}, "message_stop")]
        return out

    # --- OpenTelemetry

    def otel_provider_name(self, host: str) -> str:
        return "gcp.vertex_ai" if on_vertex_ai(host) else "anthropic"

    def genai_input_messages(self, body: dict[str, Any]) -> GenAIInput:
        system = genai_parts(body["system"]) if body.get("system") else None
        msgs: list[dict[str, Any]] = []
        for m in lst(body.get("messages")):  # (a hand-edited session's may be anything)
            if not isinstance(m, dict):
                continue
            content = m.get("content")
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
            parts = []
            for b in blocks:
                if not isinstance(b, dict):
                    continue
                if b.get("type") == "tool_use":
                    parts.append(
                        {
                            "type": "tool_call",
                            "id": b.get("id"),
                            "name": b.get("name"),
                            "arguments": b.get("input"),
                        }
                    )
                elif b.get("type") == "tool_result":
                    parts.append(
                        {
                            "type": "tool_call_response",
                            "id": b.get("tool_use_id"),
                            "response": plain_text(b.get("content")),
                        }
                    )
                else:
                    parts.extend(genai_parts([b]))
            who = role(m.get("role"), "user")
            if parts and all(p["type"] == "tool_call_response" for p in parts):
                who = "tool"
            msgs.append({"role": who, "parts": parts})
        return system, msgs

    def genai_tool_definitions(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """Client tools ``{name, description, input_schema}`` (``type`` absent or ``custom``) as
        function tools; server tools (``{type: "web_search_20250305", name}``, …) as ``{type, name}``."""
        out: list[dict[str, Any]] = []
        for tool in lst(body.get("tools")):
            tool = d(tool)
            if tool.get("type") in (None, "custom"):
                out.append(
                    genai_function(tool.get("name"), tool.get("description"), tool.get("input_schema"))
                )
            elif tool:
                out.append({"type": str(tool.get("type")), "name": s(tool.get("name")) or ""})
        return out


PROVIDER = Anthropic()
