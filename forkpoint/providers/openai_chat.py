"""OpenAI Chat Completions — ``POST /v1/chat/completions``.

Wire format (platform.openai.com/docs/api-reference/chat; streaming in
platform.openai.com/docs/api-reference/chat-streaming): request ``{model, messages[{role, content:
str | [{type:"text", text}], tool_calls?[{id, type:"function", function{name, arguments: str}}],
tool_call_id?}], tools?, functions? (legacy), temperature?, top_p?, seed?, max_tokens? |
max_completion_tokens?, stream?}``. Response ``{id, model, choices[{index, message{content,
tool_calls[{id, function{name, arguments: str}}], function_call? (legacy)}, finish_reason}],
usage{prompt_tokens, completion_tokens}}``. Streamed as ``data: <chunk>`` events, chunk ``{id,
model, choices[{index, delta{content?, tool_calls?[{index, id?, function{name?, arguments?:
fragment}}]}, finish_reason}], usage}``; with ``stream_options.include_usage`` a final chunk has
``choices: []`` and the usage; the stream ends with ``data: [DONE]``.

Any server with that path (Groq, Together, vLLM, Ollama, OpenRouter, Azure ...) is provider
``"openai"``: the provider names the wire *shape*; the ``host`` field tells the servers apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..patterns import compiled_later
from .base import (
    NOTHING,
    CallAcc,
    GenAIInput,
    NewToolCall,
    Payload,
    Provider,
    ResponseFields,
    ToolCallSummary,
    Usage,
    d,
    dumps,
    error_of,
    first,
    genai_parts,
    i,
    join,
    lst,
    maybe_json,
    on_vertex_ai,
    plain_text,
    read_usage,
    role,
    s,
    sse,
    text_of_content,
)

_AZURE_DEPLOYMENT = compiled_later(r"/deployments/([^/]+)/")


def is_openai_host(host: str) -> bool:
    """OpenAI's own hosts and Azure OpenAI's."""
    return host == "openai.com" or host.endswith(".openai.com") or host.endswith(".openai.azure.com")


def openai_provider_name(host: str) -> str:
    """``gen_ai.provider.name`` of an OpenAI-format call (shared with the Responses API)."""
    if on_vertex_ai(host):
        return "gcp.vertex_ai"  # Vertex AI's OpenAI-compatible endpoint
    return "azure.ai.openai" if host.endswith(".openai.azure.com") else "openai"


def azure_deployment(path: str) -> str | None:
    """The Azure OpenAI deployment a path names (``/openai/deployments/{name}/...``)."""
    m = _AZURE_DEPLOYMENT.search(path)
    return m.group(1) if m else None


def _call(tc: object) -> ToolCallSummary:
    tc = d(tc)
    fn = d(first(tc.get("function"), tc.get("custom")))
    args = first(fn.get("arguments"), fn.get("input"))
    return {
        "id": s(tc.get("id")),
        "name": s(fn.get("name")),
        "arguments": args if isinstance(args, str) else dumps(args) if args is not None else None,
    }


def _choice(choices: object, stream: bool = False) -> dict[Any, Any]:
    """The choice with index 0: summaries follow the first choice only. A body without one falls
    back to its first choice; a stream chunk without one has nothing for choice 0 (``{}``)."""
    cs = [c for c in lst(choices) if isinstance(c, dict)]
    for c in cs:
        if i(c.get("index")) in (0, None):
            return c
    return cs[0] if cs and not stream else {}


def _reasoning(message: dict[Any, Any]) -> str | None:
    """The thinking an OpenAI-compatible server sends beside the content, in a message or a
    stream's delta: ``reasoning_content`` (DeepSeek, vLLM) or ``reasoning`` (OpenRouter, Ollama)."""
    for key in ("reasoning_content", "reasoning"):
        if isinstance(message.get(key), str):
            return str(message[key])
    return None


class OpenAIChat(Provider):
    """OpenAI Chat Completions, and every OpenAI-compatible server."""

    name = "openai"
    api = "chat.completions"
    reference = "https://platform.openai.com/docs/api-reference/chat"
    context_fields = ("messages",)
    messages_field = "messages"
    final_events = (b"data: [DONE]",)
    semantic_headers = frozenset({"openai-beta"})
    otel_operation = "chat"

    # --- recognition

    def claims_path(self, path: str) -> bool:
        return path.endswith("/chat/completions")

    def claims_host(self, host: str) -> bool:
        return is_openai_host(host)

    def claims_body(self, body: dict[str, Any]) -> bool:
        return isinstance(body.get("messages"), list)

    def model_in_path(self, path: str) -> str | None:
        return azure_deployment(path)

    # --- request side (messages, tools + legacy functions, sampling: the base reading)

    # --- response side

    def read_body(self, body: object) -> ResponseFields:
        if not isinstance(body, dict) or not isinstance(body.get("choices"), list):
            return NOTHING
        choice = _choice(body["choices"])
        msg = d(choice.get("message"))
        calls = [_call(tc) for tc in lst(msg.get("tool_calls"))]
        legacy = d(msg.get("function_call"))
        if legacy:
            calls.append(_call({"function": legacy}))
        return ResponseFields(
            join(text_of_content(msg.get("content"))),
            calls,
            read_usage(body.get("usage")),
            s(choice.get("finish_reason")),
            s(body.get("model")),
            None,
            reasoning=_reasoning(msg),
        )

    def read_stream(self, stream: list[Payload]) -> ResponseFields:
        text: list[str] | None = None
        thought: list[str] | None = None
        calls: dict[int, CallAcc] = {}
        usage: Usage | None = None
        stop = model = error = None
        seen = False
        for _, p in stream:
            if p.get("error"):
                error = error or error_of(p)
                continue
            if not isinstance(p.get("choices"), list):
                continue
            seen = True
            model = model or s(p.get("model"))
            if isinstance(p.get("usage"), dict):
                usage = read_usage(p["usage"])
            choice = _choice(p["choices"], stream=True)
            delta = d(choice.get("delta"))
            content = delta.get("content")
            if isinstance(content, str):
                text = text if text is not None else []
                text.append(content)
            if (piece := _reasoning(delta)) is not None:
                thought = [*(thought or []), piece]
            for pos, tc in enumerate(lst(delta.get("tool_calls"))):
                tc = d(tc)
                key = i(tc.get("index"))
                acc = calls.setdefault(pos if key is None else key, CallAcc())
                acc.id = acc.id or s(tc.get("id"))
                fn = d(tc.get("function"))
                acc.add_name(fn.get("name"))
                frag = fn.get("arguments")
                if isinstance(frag, str):
                    acc.args.append(frag)
                elif frag is not None:
                    acc.obj = frag
            legacy = d(delta.get("function_call"))
            if legacy:
                acc = calls.setdefault(-1, CallAcc())
                acc.add_name(legacy.get("name"))
                if isinstance(legacy.get("arguments"), str):
                    acc.args.append(legacy["arguments"])
            stop = s(choice.get("finish_reason")) or stop
        if not seen:
            return NOTHING._replace(error=error)
        tool_calls = [calls[k].result() for k in sorted(calls)]
        return ResponseFields(join(text), tool_calls, usage, stop, model, error, reasoning=join(thought))

    def response_id(self, payload: dict[str, Any]) -> str | None:
        return s(payload.get("id")) or None

    def stream_delta_text(self, payload: dict[str, Any]) -> str:
        out = []
        for ch in payload.get("choices") or []:
            if isinstance(ch, dict) and ch.get("index", 0) == 0:
                content = (ch.get("delta") or {}).get("content")
                if isinstance(content, str):
                    out.append(content)
        return "".join(out)

    # --- carried context

    def tool_call_arguments(self, node: dict[str, Any]) -> list[object]:
        if "tool_calls" not in node:
            return []
        return [
            d(c.get("function")).get("arguments") for c in node.get("tool_calls") or [] if isinstance(c, dict)
        ]

    def is_tool_result(self, node: dict[str, Any]) -> bool:
        return node.get("role") == "tool"

    # --- overrides

    def rewrite_body(self, body: dict[str, Any], text: str | None, calls: Sequence[NewToolCall]) -> bool:
        # The answer is choice 0 (what summaries read); the other choices of ``n`` > 1 stay as
        # recorded: the agent gets as many as it asked for.
        first = _choice(body.get("choices"))
        others = [c for c in lst(body.get("choices")) if isinstance(c, dict) and c is not first]
        choice = dict(first)
        msg: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            msg["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in calls
            ]
        choice.update({"index": 0, "message": msg, "finish_reason": "tool_calls" if calls else "stop"})
        body["choices"] = [choice, *others]
        return True

    def rewrite_stream(
        self, stream: list[dict[str, Any]], text: str | None, calls: Sequence[NewToolCall]
    ) -> list[str]:
        head = stream[0] if stream else {}
        base = {k: head.get(k) for k in ("id", "object", "created", "model") if k in head}
        base.setdefault("object", "chat.completion.chunk")
        usage = next((p for p in stream if p.get("usage") and not p.get("choices")), None)
        chunks = [
            sse(
                {
                    **base,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": text or ""},
                            "finish_reason": None,
                        }
                    ],
                }
            )
        ]
        for n, c in enumerate(calls):
            delta = {
                "tool_calls": [
                    {
                        "index": n,
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]},
                    }
                ]
            }
            chunks.append(sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}))
        chunks.append(
            sse(
                {
                    **base,
                    "choices": [
                        {"index": 0, "delta": {}, "finish_reason": "tool_calls" if calls else "stop"}
                    ],
                }
            )
        )
        # (the other choices of n > 1, as recorded, each chunk with only them)
        for p in stream:
            kept = [
                c for c in lst(p.get("choices")) if isinstance(c, dict) and i(c.get("index")) not in (0, None)
            ]
            if kept:
                chunks.append(sse({**p, "choices": kept}))
        if usage is not None:
            chunks.append(sse(usage))
        chunks.append(sse("[DONE]"))
        return chunks

    # --- OpenTelemetry

    def otel_provider_name(self, host: str) -> str:
        return openai_provider_name(host)

    def genai_input_messages(self, body: dict[str, Any]) -> GenAIInput:
        msgs: list[dict[str, Any]] = []
        for m in lst(body.get("messages")):  # (a hand-edited session's may be anything)
            if not isinstance(m, dict):
                continue
            who = role(m.get("role"), "user")
            if who == "tool":
                msgs.append(
                    {
                        "role": "tool",
                        "parts": [
                            {
                                "type": "tool_call_response",
                                "id": m.get("tool_call_id"),
                                "response": plain_text(m.get("content")),
                            }
                        ],
                    }
                )
                continue
            parts = genai_parts(m.get("content"))
            for c in lst(m.get("tool_calls")):
                fn = d(d(c).get("function"))
                parts.append(
                    {
                        "type": "tool_call",
                        "id": d(c).get("id"),
                        "name": fn.get("name"),
                        "arguments": maybe_json(fn.get("arguments")),
                    }
                )
            msgs.append({"role": "system" if who == "developer" else who, "parts": parts})
        return None, msgs


PROVIDER = OpenAIChat()
