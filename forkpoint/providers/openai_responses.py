"""OpenAI Responses — ``POST /v1/responses``.

Wire format (platform.openai.com/docs/api-reference/responses; streaming in
platform.openai.com/docs/api-reference/responses-streaming): request ``{model, input: str | [item],
instructions?, tools?, temperature?, top_p?, max_output_tokens?, stream?}``, items ``{role,
content}`` / ``{type:"function_call", call_id, name, arguments}`` / ``{type:"function_call_output",
call_id, output}`` (and the ``custom_tool_call`` pair). Response ``{id, object:"response", model,
status, incomplete_details{reason}?, output[{type:"message", content[{type:"output_text", text}]} |
{type:"function_call", call_id, name, arguments}], usage{input_tokens, output_tokens}, error?}``.
Streamed as ``event: <type>`` + ``data: {type, ...}``: ``response.created``,
``response.output_item.added``, ``response.output_text.delta``,
``response.function_call_arguments.delta``/``.done``, ``response.output_item.done``, and a terminal
``response.completed`` / ``response.incomplete`` / ``response.failed`` carrying the full response.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .base import (
    NOTHING,
    GenAIInput,
    Message,
    NewToolCall,
    Payload,
    Provider,
    ResponseFields,
    ToolCallSummary,
    d,
    error_of,
    first,
    genai_parts,
    i,
    join,
    lst,
    maybe_json,
    parts_text,
    read_usage,
    role,
    s,
    stable_id,
    text_of_content,
)
from .openai_chat import is_openai_host, openai_provider_name

_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def _stop(resp: dict[str, Any]) -> str | None:
    status = s(resp.get("status"))
    if status == "incomplete":
        return s(d(resp.get("incomplete_details")).get("reason")) or status
    return status


def _item_call(item: dict[Any, Any]) -> ToolCallSummary | None:
    kind = item.get("type")
    if kind not in ("function_call", "custom_tool_call"):
        return None
    args = item.get("arguments") if kind == "function_call" else item.get("input")
    return {
        "id": s(first(item.get("call_id"), item.get("id"))),
        "name": s(item.get("name")),
        "arguments": s(args),
    }


def _item_text(item: dict[Any, Any]) -> list[str] | None:
    if item.get("type") != "message":
        return None
    return text_of_content(item.get("content"))


def _item_reasoning(item: dict[Any, Any]) -> list[str]:
    """The text of a ``reasoning`` item: its ``summary`` and any ``reasoning_text`` content (an
    encrypted one has none)."""
    if item.get("type") != "reasoning":
        return []
    parts = [*lst(item.get("summary")), *lst(item.get("content"))]
    texts = [p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return ["\n\n".join(texts)] if texts else []  # (each part a paragraph of its own)


#: The stream events that carry a piece of a ``reasoning`` item's text.
_REASONING_DELTAS = ("response.reasoning_summary_text.delta", "response.reasoning_text.delta")


#: The ends of OpenAI paths that take ``input`` and ``model`` and are no Responses call.
AUXILIARY = ("/embeddings", "/moderations", "/input_tokens", "/audio/speech")


class OpenAIResponses(Provider):
    """The OpenAI Responses API."""

    name = "openai"
    api = "responses"
    reference = "https://platform.openai.com/docs/api-reference/responses"
    context_fields = ("instructions", "input")
    messages_field = "input"
    calls_as_items = True
    final_events = (b"event: response.completed", b"event: response.incomplete", b"event: response.failed")
    semantic_headers = frozenset({"openai-beta"})
    otel_operation = "chat"

    # --- recognition

    def claims_path(self, path: str) -> bool:
        return path.endswith("/responses")

    def claims_host(self, host: str) -> bool:
        return is_openai_host(host)

    def claims_body(self, body: dict[str, Any]) -> bool:
        return "input" in body and ("model" in body or "instructions" in body)

    def is_auxiliary_path(self, path: str) -> bool:
        # The OpenAI endpoints whose body has ``input`` and ``model`` too (an OpenAI-compatible
        # server's embeddings were shown, exported and rewritten as a Responses call).
        return path.rstrip("/").endswith(AUXILIARY)

    # --- request side

    def count_messages(self, body: dict[str, Any]) -> int | None:
        inp = body.get("input")
        return 1 if isinstance(inp, str) else len(inp) if isinstance(inp, list) else None

    def messages(self, body: dict[str, Any]) -> list[Message]:
        """``instructions`` first as ``system`` (when non-empty), then a string ``input`` as one
        ``user`` entry, or one entry per item: ``{role, content}`` messages as is, ``function_call``
        as ``assistant`` with text ``""``, ``function_call_output`` as ``tool`` with its output;
        other item types (reasoning, item references) are skipped."""
        out: list[Message] = []
        system = parts_text(body.get("instructions"))
        if system:
            out.append({"role": "system", "text": system})
        inp = body.get("input")
        if isinstance(inp, str):
            out.append({"role": "user", "text": inp})
        for item in lst(inp):
            item = d(item)
            kind = item.get("type")
            if "role" in item and kind in (None, "message"):
                out.append({"role": role(item.get("role")), "text": parts_text(item.get("content"))})
            elif kind in ("function_call", "custom_tool_call"):
                out.append({"role": "assistant", "text": ""})
            elif kind in ("function_call_output", "custom_tool_call_output"):
                out.append({"role": "tool", "text": parts_text(item.get("output"))})
        return out

    # --- response side

    def read_body(self, body: object) -> ResponseFields:
        if not isinstance(body, dict) or (
            not isinstance(body.get("output"), list) and body.get("object") != "response"
        ):
            return NOTHING
        text: list[str] | None = None
        thought: list[str] = []
        calls: list[ToolCallSummary] = []
        for item in lst(body.get("output")):
            item = d(item)
            pieces = _item_text(item)
            if pieces is not None:
                text = text if text is not None else []
                text.extend(pieces)
            thought.extend(_item_reasoning(item))
            call = _item_call(item)
            if call is not None:
                calls.append(call)
        return ResponseFields(
            join(text),
            calls,
            read_usage(body.get("usage")),
            _stop(body),
            s(body.get("model")),
            error_of(body),
            reasoning="".join(thought) if thought else None,
        )

    def read_stream(self, stream: list[Payload]) -> ResponseFields:
        final: dict[str, Any] | None = None
        latest: dict[Any, Any] = {}
        items: dict[int, dict[Any, Any]] = {}
        args: dict[int, list[str]] = {}
        texts: dict[int, list[str]] = {}
        thoughts: dict[int, list[str]] = {}
        parts: dict[int, int] = {}  # (output index → the reasoning part its last delta was of)
        error = None
        for event, p in stream:
            kind = s(p.get("type")) or event
            if kind == "error":
                error = error or error_of(p)
                continue
            if isinstance(p.get("response"), dict):
                latest = p["response"]
                if kind in _TERMINAL:
                    final = latest
            idx = i(p.get("output_index"))
            if idx is None:
                continue
            if kind in ("response.output_item.added", "response.output_item.done"):
                items[idx] = d(p.get("item"))
            elif kind == "response.function_call_arguments.delta" and isinstance(p.get("delta"), str):
                args.setdefault(idx, []).append(p["delta"])
            elif kind == "response.function_call_arguments.done" and isinstance(p.get("arguments"), str):
                args[idx] = [p["arguments"]]
            elif kind == "response.output_text.delta" and isinstance(p.get("delta"), str):
                texts.setdefault(idx, []).append(p["delta"])
            elif kind in _REASONING_DELTAS and isinstance(p.get("delta"), str):
                pieces = thoughts.setdefault(idx, [])
                part = i(p.get("summary_index")) or i(p.get("content_index")) or 0
                if pieces and part != parts.get(idx, part):  # (a new part: a paragraph of its own)
                    pieces.append("\n\n")
                parts[idx] = part
                pieces.append(p["delta"])
        if final is not None:
            # The terminal event carries the whole response, exactly as the non-streamed body would.
            read = self.read_body(final)
            return read._replace(error=read.error or error)
        if not latest and not items:
            return NOTHING._replace(error=error)
        # Cut-off stream: rebuild what the deltas say.
        text: list[str] | None = None
        thought: list[str] = []
        calls: list[ToolCallSummary] = []
        for idx in sorted(items.keys() | texts.keys() | thoughts.keys()):
            item = items.get(idx, {})
            done_text = _item_text(item)
            if done_text or idx in texts:
                text = text if text is not None else []
                text.extend(done_text or texts.get(idx) or [])
            thought.extend(_item_reasoning(item) or thoughts.get(idx) or [])
            call = _item_call(item)
            if call is not None:
                if not call["arguments"] and idx in args:
                    call["arguments"] = "".join(args[idx])
                calls.append(call)
        return ResponseFields(
            join(text),
            calls,
            read_usage(latest.get("usage")),
            _stop(latest),
            s(latest.get("model")),
            error or error_of(latest),
            reasoning="".join(thought) if thought else None,
        )

    def response_id(self, payload: dict[str, Any]) -> str | None:
        inner = payload.get("response")
        return s(payload.get("id")) or (s(inner.get("id")) if isinstance(inner, dict) else None) or None

    def stream_delta_text(self, payload: dict[str, Any]) -> str:
        delta = payload.get("delta")
        return delta if payload.get("type") == "response.output_text.delta" and isinstance(delta, str) else ""

    # --- carried context

    def tool_call_arguments(self, node: dict[str, Any]) -> list[object]:
        return [node.get("arguments")] if node.get("type") == "function_call" else []

    def is_tool_result(self, node: dict[str, Any]) -> bool:
        return node.get("type") == "function_call_output"

    # --- overrides (whole bodies; a Responses stream is not rewritten: override its .body)

    def rewrite_body(self, body: dict[str, Any], text: str | None, calls: Sequence[NewToolCall]) -> bool:
        # Output items keep the recorded item ids where they stand for the same thing (an agent may
        # send them back); new items get ids derived from their content, the same on every replay.
        before = [x for x in body.get("output") or [] if isinstance(x, dict)]
        message_id = next((x.get("id") for x in before if x.get("type") == "message"), None)
        call_ids = {x.get("call_id"): x.get("id") for x in before if x.get("type") == "function_call"}
        output: list[dict[str, Any]] = []
        if text:
            output.append(
                {
                    "type": "message",
                    "id": message_id or stable_id("msg_fp_", text, 0),
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            )
        for c in calls:
            output.append(
                {
                    "type": "function_call",
                    "id": call_ids.get(c["id"]) or stable_id("fc_fp_", c["id"], 0),
                    "call_id": c["id"],
                    "name": c["name"],
                    "arguments": c["arguments"],
                    "status": "completed",
                }
            )
        body["output"] = output
        return True

    # --- OpenTelemetry

    def otel_provider_name(self, host: str) -> str:
        return openai_provider_name(host)

    def is_model_item(self, item: dict[str, Any]) -> bool:
        """An assistant message, a ``function_call`` or a ``reasoning`` item."""
        return item.get("role") == "assistant" or item.get("type") in ("function_call", "reasoning")

    def genai_input_messages(self, body: dict[str, Any]) -> GenAIInput:
        system = genai_parts(body["instructions"]) if body.get("instructions") else None
        msgs: list[dict[str, Any]] = []
        inp = body.get("input")
        if isinstance(inp, str):
            msgs.append({"role": "user", "parts": [{"type": "text", "content": inp}]})
        for item in inp if isinstance(inp, list) else []:
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if "role" in item and kind in (None, "message"):
                role = item.get("role") or "user"
                msgs.append(
                    {
                        "role": "system" if role == "developer" else role,
                        "parts": genai_parts(item.get("content")),
                    }
                )
            elif kind == "function_call":
                part = {
                    "type": "tool_call",
                    "id": item.get("call_id"),
                    "name": item.get("name"),
                    "arguments": maybe_json(item.get("arguments")),
                }
                msgs.append({"role": "assistant", "parts": [part]})
            elif kind == "function_call_output":
                part = {
                    "type": "tool_call_response",
                    "id": item.get("call_id"),
                    "response": item.get("output"),
                }
                msgs.append({"role": "tool", "parts": [part]})
        return system, msgs


PROVIDER = OpenAIResponses()
