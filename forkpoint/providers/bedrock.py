"""Amazon Bedrock runtime — Converse / ConverseStream, and InvokeModel / InvokeModelWithResponseStream.

Wire formats (docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html,
``API_runtime_ConverseStream.html``, ``API_runtime_InvokeModel.html``,
``API_runtime_InvokeModelWithResponseStream.html``), at
``https://bedrock-runtime.{region}.amazonaws.com/model/{modelId}/{operation}`` (the model id
percent-encoded in the path, ``anthropic.claude-3-haiku-20240307-v1%3A0``):

* **Converse** ``POST …/converse``: request ``{messages[{role, content[{text} | {image} |
  {toolUse{toolUseId, name, input}} | {toolResult{toolUseId, content[{text} | {json}], status}}]}],
  system?[{text}], inferenceConfig?{maxTokens, temperature, topP, stopSequences}, toolConfig?{tools[
  {toolSpec{name, description, inputSchema{json}}}], toolChoice}}``; response ``{output{message{role,
  content[…]}}, stopReason, usage{inputTokens, outputTokens, totalTokens}, metrics{latencyMs}}``.
* **ConverseStream** ``POST …/converse-stream``: the same request; the answer is an AWS event stream
  (:mod:`forkpoint.eventstream`) of ``messageStart{role}``, ``contentBlockStart{contentBlockIndex,
  start{toolUse{toolUseId, name}}}``, ``contentBlockDelta{contentBlockIndex, delta{text} |
  {toolUse{input: JSON text fragment}}}``, ``contentBlockStop``, ``messageStop{stopReason}``,
  ``metadata{usage, metrics}``.
* **InvokeModel** ``POST …/invoke`` and **InvokeModelWithResponseStream**
  ``…/invoke-with-response-stream``: the body is the model's own format (Anthropic Messages with
  ``anthropic_version: "bedrock-2023-05-31"`` for Claude); streamed as ``chunk`` events whose
  ``bytes`` are the model's own stream events. Read by the provider of that format; the text
  models' own formats by :class:`BedrockTextModel` (Meta Llama, Mistral, Amazon Titan Text, Cohere
  Command).

Requests are signed with SigV4 (``authorization``, ``x-amz-date``, ``x-amz-content-sha256``,
``x-amz-security-token``): :mod:`forkpoint.redact` drops those headers, and none of them is in a
match key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote

import orjson

from .. import eventstream
from ..patterns import compiled_later
from . import anthropic
from .base import (
    NOTHING,
    UNRECOGNIZED,
    CallAcc,
    GenAIInput,
    Message,
    NewToolCall,
    Payload,
    Provider,
    ResponseFields,
    Sampling,
    ToolCallSummary,
    Usage,
    args_obj,
    d,
    dumps,
    error_of,
    first,
    i,
    join,
    lst,
    num,
    read_sampling,
    role,
    s,
)

_PATH = compiled_later(r"/model/([^/]+)/(converse|converse-stream|invoke|invoke-with-response-stream)$")


def _operation(path: str) -> tuple[str, str] | None:
    m = _PATH.search(path)
    return (unquote(m.group(1)), m.group(2)) if m else None


def is_bedrock_host(host: str) -> bool:
    """Bedrock runtime endpoints (``bedrock-runtime.us-east-1.amazonaws.com``, FIPS and VPC ones)."""
    return host.startswith("bedrock-runtime") and host.endswith(".amazonaws.com")


def _usage(u: object) -> Usage | None:
    u = d(u) if isinstance(u, dict) else None
    if u is None:
        return None
    return {
        "input_tokens": i(u.get("inputTokens")),
        "output_tokens": i(u.get("outputTokens")),
        "cache_read_input_tokens": i(u.get("cacheReadInputTokens")),
        "cache_creation_input_tokens": i(u.get("cacheWriteInputTokens")),
    }


def _block_text(block: dict[str, Any]) -> str:
    """Display text of one Converse content block (tool results: their text and JSON parts)."""
    if isinstance(block.get("text"), str):
        return str(block["text"])
    result = d(block.get("toolResult"))
    if result:
        return "".join(
            _block_text(d(b)) if "text" in d(b) else dumps(d(b).get("json")) or ""
            for b in lst(result.get("content"))
        )
    return ""


_CONVERSE_EVENTS = frozenset(
    {"messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop", "messageStop", "metadata"}
)


def _nova_shaped(b: dict[str, Any]) -> bool:
    """A request or response body in Converse's shape, as Amazon Nova takes and gives them through
    InvokeModel: ``schemaVersion``, an ``inferenceConfig``, ``output.message``, or messages whose
    content blocks are keyed by kind (``{text}``, ``{toolUse}``) rather than typed (``{type}``)."""
    if "schemaVersion" in b or isinstance(b.get("inferenceConfig"), dict):
        return True
    if isinstance(d(b.get("output")).get("message"), dict):
        return True
    blocks = [blk for m in lst(b.get("messages")) for blk in lst(d(m).get("content"))]
    return bool(blocks) and all(isinstance(blk, dict) and "type" not in blk for blk in blocks)


def _nova_event(item: Payload) -> Payload | None:
    """One InvokeModelWithResponseStream chunk of Nova (``{"contentBlockDelta": {…}}``) as the
    ConverseStream event it is (``("contentBlockDelta", {…})``); None for any other."""
    _, payload = item
    keys = [k for k in payload if k in _CONVERSE_EVENTS]
    return (keys[0], d(payload[keys[0]])) if len(keys) == 1 else None


#: The keys a text model's InvokeModel body (request or response) holds, any one of them telling it:
#: Llama's and Mistral's ``prompt``, Titan's ``inputText``, Cohere's ``message``; Llama's
#: ``generation``, Mistral's ``outputs``, Titan's ``results`` / ``outputText``, Cohere Command's
#: ``generations``, Command R's ``text`` with ``finish_reason`` or ``is_finished``.
_TEXT_MODEL_KEYS = frozenset(
    {"prompt", "inputText", "message", "generation", "outputs", "results", "outputText", "generations"}
)


def _text_model_shaped(b: dict[str, Any]) -> bool:
    return not _TEXT_MODEL_KEYS.isdisjoint(b) or (
        "text" in b and ("finish_reason" in b or "is_finished" in b)
    )


class BedrockTextModel(Provider):
    """The text models' own InvokeModel formats (docs.aws.amazon.com/bedrock/latest/userguide/
    model-parameters.html), read for what a person needs to see: the prompt as one user message
    (Cohere's ``chat_history`` before it), the answer's text, the stop reason and the token counts
    (the model's own, or the ``amazon-bedrock-invocationMetrics`` a stream's last chunk carries).
    A whole body and a stream's chunks are read alike: each chunk is a body's piece of text."""

    name = "bedrock"
    api = "invoke"

    def messages(self, body: dict[str, Any]) -> list[Message]:
        out: list[Message] = [
            {
                "role": "assistant" if s(m.get("role")) == "CHATBOT" else "user",
                "text": s(m.get("message")) or "",
            }
            for m in map(d, lst(body.get("chat_history")))
        ]
        prompt = first(body.get("prompt"), body.get("inputText"), body.get("message"))
        if isinstance(prompt, str):
            out.append({"role": "user", "text": prompt})
        return out

    def count_messages(self, body: dict[str, Any]) -> int | None:
        return len(self.messages(body)) or None

    def sampling(self, body: dict[str, Any]) -> Sampling:
        config = d(body.get("textGenerationConfig"))  # (Titan's)
        src = {**body, **config}
        base = read_sampling(src)
        limit = first(src.get("max_gen_len"), src.get("maxTokenCount"))
        return base._replace(max_tokens=base.max_tokens if base.max_tokens is not None else i(limit))

    def read_body(self, body: object) -> ResponseFields:
        return self._chunks([body] if isinstance(body, dict) else [])

    def read_stream(self, stream: list[Payload]) -> ResponseFields:
        return self._chunks([p for _, p in stream])

    @staticmethod
    def _chunks(chunks: list[dict[str, Any]]) -> ResponseFields:
        text: list[str] | None = None
        stop = None
        prompt_tokens = output_tokens = None
        seen = False
        for c in map(d, chunks):
            pieces: list[Any] = [c.get("generation"), c.get("outputText")]  # (Llama; a Titan chunk)
            pieces += [d(o).get("text") for o in lst(c.get("outputs"))]  # (Mistral)
            pieces += [d(r).get("outputText") for r in lst(c.get("results"))]  # (Titan)
            # (Cohere Command's: num_generations asks for up to 5 answers; the first is the one read)
            generation = next((g for g in map(d, lst(c.get("generations"))) if not g.get("index")), {})
            pieces.append(generation.get("text"))
            if "finish_reason" in c or "is_finished" in c or c.get("event_type") == "text-generation":
                pieces.append(c.get("text"))  # (Cohere)
            for piece in pieces:
                if isinstance(piece, str):
                    text = [*(text or []), piece]
            reasons = [c.get("stop_reason"), c.get("completionReason"), c.get("finish_reason")]
            reasons += [d(o).get("stop_reason") for o in lst(c.get("outputs"))]
            reasons += [d(r).get("completionReason") for r in lst(c.get("results"))]
            reasons.append(generation.get("finish_reason"))
            stop = next((r for r in reasons if isinstance(r, str)), stop)
            metrics = d(c.get("amazon-bedrock-invocationMetrics"))
            billed = d(d(c.get("meta")).get("billed_units"))  # (Cohere's)
            prompt_tokens = first(
                metrics.get("inputTokenCount"),
                c.get("prompt_token_count"),
                c.get("inputTextTokenCount"),
                billed.get("input_tokens"),
                prompt_tokens,
            )
            generated = first(
                c.get("generation_token_count"),
                c.get("totalOutputTextTokenCount"),
                billed.get("output_tokens"),
            )
            titan = sum(i(d(r).get("tokenCount")) or 0 for r in lst(c.get("results"))) or None
            output_tokens = first(metrics.get("outputTokenCount"), generated, titan, output_tokens)
            seen = seen or _text_model_shaped(c)
        if not seen:
            return NOTHING
        usage: Usage | None = None
        if prompt_tokens is not None or output_tokens is not None:
            usage = {"input_tokens": i(prompt_tokens), "output_tokens": i(output_tokens)}
        return ResponseFields(join(text), [], usage, stop, None, None)


TEXT_MODEL = BedrockTextModel()


class BedrockConverse(Provider):
    """Amazon Bedrock Converse and ConverseStream."""

    name = "bedrock"
    api = "converse"
    reference = "https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_Converse.html"
    context_fields = ("system", "messages")
    messages_field = "messages"
    otel_operation = "chat"

    # --- recognition

    def claims_path(self, path: str) -> bool:
        op = _operation(path)
        return op is not None and op[1].startswith("converse")

    def claims_host(self, host: str) -> bool:
        return is_bedrock_host(host)

    def path_streams(self, path: str) -> bool:
        op = _operation(path)
        return op is not None and op[1].endswith("stream")

    def model_in_path(self, path: str) -> str | None:
        op = _operation(path)
        return op[0] if op else None

    # --- request side

    def request_model(self, body: dict[str, Any]) -> str | None:
        return None  # the model is in the path

    def sampling(self, body: dict[str, Any]) -> Sampling:
        cfg = d(body.get("inferenceConfig"))
        # (Nova's InvokeModel body spells them top_p and max_new_tokens)
        top_p = num(cfg.get("topP")) if "topP" in cfg else num(cfg.get("top_p"))
        limit = i(cfg.get("maxTokens")) if "maxTokens" in cfg else i(cfg.get("max_new_tokens"))
        return Sampling(num(cfg.get("temperature")), top_p, None, limit)

    def count_tools(self, body: dict[str, Any]) -> int:
        return len(lst(d(body.get("toolConfig")).get("tools")))

    def messages(self, body: dict[str, Any]) -> list[Message]:
        system = "".join(_block_text(d(b)) for b in lst(body.get("system")))
        head: list[Message] = [{"role": "system", "text": system}] if system else []
        return head + [
            {
                "role": role(d(m).get("role")),
                "text": "".join(_block_text(d(b)) for b in lst(d(m).get("content"))),
            }
            for m in lst(body.get("messages"))
        ]

    # --- response side

    def read_body(self, body: object) -> ResponseFields:
        if not isinstance(body, dict) or not isinstance(body.get("output"), dict):
            return NOTHING
        text: list[str] | None = None
        thought: list[str] | None = None
        calls: list[ToolCallSummary] = []
        for block in lst(d(d(body["output"]).get("message")).get("content")):
            block = d(block)
            if isinstance(block.get("text"), str):
                text = [*(text or []), block["text"]]
            if isinstance(piece := d(d(block.get("reasoningContent")).get("reasoningText")).get("text"), str):
                thought = [*(thought or []), piece]
            use = d(block.get("toolUse"))
            if use:
                calls.append(
                    {
                        "id": s(use.get("toolUseId")),
                        "name": s(use.get("name")),
                        "arguments": dumps(use.get("input")),
                    }
                )
        return ResponseFields(
            join(text),
            calls,
            _usage(body.get("usage")),
            s(body.get("stopReason")),
            None,
            None,
            reasoning=join(thought),
        )

    def read_stream(self, stream: list[Payload]) -> ResponseFields:
        blocks: dict[int, tuple[list[str], CallAcc | None]] = {}
        thoughts: dict[int, list[str]] = {}
        usage: Usage | None = None
        stop = error = None
        seen = False
        for event, p in stream:
            if event == "messageStart":
                seen = True
            elif event == "contentBlockStart":
                use = d(d(p.get("start")).get("toolUse"))
                acc = CallAcc(s(use.get("toolUseId")), s(use.get("name"))) if use else None
                blocks[i(p.get("contentBlockIndex")) or 0] = ([], acc)
            elif event == "contentBlockDelta":
                seen = True
                text_parts, acc = blocks.setdefault(i(p.get("contentBlockIndex")) or 0, ([], None))
                delta = d(p.get("delta"))
                if isinstance(delta.get("text"), str):
                    text_parts.append(delta["text"])
                if isinstance(piece := d(delta.get("reasoningContent")).get("text"), str):
                    thoughts.setdefault(i(p.get("contentBlockIndex")) or 0, []).append(piece)
                fragment = d(delta.get("toolUse")).get("input")
                if isinstance(fragment, str) and acc is not None:
                    acc.args.append(fragment)
            elif event == "messageStop":
                seen = True
                stop = s(p.get("stopReason")) or stop
            elif event == "metadata":
                usage = _usage(p.get("usage")) or usage
            elif error_of(p):
                error = error or error_of(p)
        if not seen:
            return NOTHING._replace(error=error)
        text: list[str] | None = None
        calls: list[ToolCallSummary] = []
        for idx in sorted(blocks):
            text_parts, acc = blocks[idx]
            if acc is not None:
                calls.append(acc.result())
            elif text_parts:
                text = [*(text or []), *text_parts]
        thought = [piece for idx in sorted(thoughts) for piece in thoughts[idx]]
        return ResponseFields(
            join(text), calls, usage, stop, None, error, reasoning="".join(thought) if thought else None
        )

    def stream_delta_text(self, payload: dict[str, Any]) -> str:
        text = d(payload.get("delta")).get("text")
        return text if isinstance(text, str) else ""

    # --- carried context

    def tool_call_arguments(self, node: dict[str, Any]) -> list[object]:
        use = node.get("toolUse")
        return [d(use).get("input")] if isinstance(use, dict) else []

    def is_tool_result(self, node: dict[str, Any]) -> bool:
        return isinstance(node.get("toolResult"), dict)

    # --- overrides

    def _content(self, text: str | None, calls: Sequence[NewToolCall]) -> list[dict[str, Any]]:
        content: list[dict[str, Any]] = [{"text": text}] if text else []
        return content + [
            {"toolUse": {"toolUseId": c["id"], "name": c["name"], "input": args_obj(c["arguments"])}}
            for c in calls
        ]

    def rewrite_body(self, body: dict[str, Any], text: str | None, calls: Sequence[NewToolCall]) -> bool:
        output = body.setdefault("output", {})
        message = output.setdefault("message", {"role": "assistant"})
        # (Claude's reasoning must come back with an answer that uses tools: kept for one that does)
        reasoning = [b for b in lst(message.get("content")) if "reasoningContent" in d(b)] if calls else []
        message["content"] = reasoning + self._content(text, calls)
        body["stopReason"] = "tool_use" if calls else "end_turn"
        return True

    def rewrite_stream(
        self, stream: list[dict[str, Any]], text: str | None, calls: Sequence[NewToolCall]
    ) -> Sequence[str | bytes] | None:
        def frame(event: str, payload: dict[str, Any]) -> bytes:
            headers = {":event-type": event, ":content-type": "application/json", ":message-type": "event"}
            return eventstream.encode(headers, orjson.dumps(payload))

        metadata = next((p for p in stream if "usage" in p and "metrics" in p), None)
        out = [frame("messageStart", {"role": "assistant"})]
        kept: dict[object, int] = {}  # recorded index of a reasoning block -> its index here (as above)
        for p in stream if calls else ():
            if "reasoningContent" in d(p.get("delta")):
                kept.setdefault(p.get("contentBlockIndex"), len(kept))
            if p.get("contentBlockIndex") in kept and "start" not in p:
                event = "contentBlockDelta" if "delta" in p else "contentBlockStop"
                out.append(frame(event, {**p, "contentBlockIndex": kept[p.get("contentBlockIndex")]}))
        for n, block in enumerate(self._content(text, calls), start=len(kept)):
            if "text" in block:
                out.append(
                    frame("contentBlockDelta", {"contentBlockIndex": n, "delta": {"text": block["text"]}})
                )
            else:
                use = block["toolUse"]
                start = {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}
                out.append(frame("contentBlockStart", {"contentBlockIndex": n, "start": start}))
                delta = {"toolUse": {"input": orjson.dumps(use["input"]).decode()}}
                out.append(frame("contentBlockDelta", {"contentBlockIndex": n, "delta": delta}))
            out.append(frame("contentBlockStop", {"contentBlockIndex": n}))
        out.append(frame("messageStop", {"stopReason": "tool_use" if calls else "end_turn"}))
        if metadata is not None:
            out.append(frame("metadata", metadata))
        return out

    # --- OpenTelemetry

    def otel_provider_name(self, host: str) -> str:
        return "aws.bedrock"

    def genai_input_messages(self, body: dict[str, Any]) -> GenAIInput:
        system = [{"type": "text", "content": _block_text(d(b))} for b in lst(body.get("system"))] or None
        msgs: list[dict[str, Any]] = []
        for m in lst(body.get("messages")):
            parts: list[dict[str, Any]] = []
            for b in lst(d(m).get("content")):
                b = d(b)
                use, result = d(b.get("toolUse")), d(b.get("toolResult"))
                if use:
                    parts.append(
                        {
                            "type": "tool_call",
                            "id": use.get("toolUseId"),
                            "name": use.get("name"),
                            "arguments": use.get("input"),
                        }
                    )
                elif result:
                    parts.append(
                        {
                            "type": "tool_call_response",
                            "id": result.get("toolUseId"),
                            "response": _block_text(b),
                        }
                    )
                elif isinstance(b.get("text"), str):
                    parts.append({"type": "text", "content": b["text"]})
            tool = bool(parts) and all(p["type"] == "tool_call_response" for p in parts)
            msgs.append({"role": "tool" if tool else role(d(m).get("role"), "user"), "parts": parts})
        return system, msgs


class BedrockInvoke(Provider):
    """Amazon Bedrock InvokeModel and InvokeModelWithResponseStream: the body is the model's own
    format, read by that format's provider (Anthropic Messages for Claude)."""

    name = "bedrock"
    api = "invoke"
    reference = "https://docs.aws.amazon.com/bedrock/latest/APIReference/API_runtime_InvokeModel.html"
    context_fields = ("system", "messages")
    messages_field = "messages"
    final_events = ()
    otel_operation = "chat"
    # InvokeModel's parameters that travel as headers (botocore's bedrock-runtime service model):
    # another guardrail, trace setting, latency profile, service tier or accepted type is another
    # request. (X-Amzn-Bedrock-Request-Metadata only labels the invocation log.)
    semantic_headers = frozenset(
        {
            "x-amzn-bedrock-guardrailidentifier",
            "x-amzn-bedrock-guardrailversion",
            "x-amzn-bedrock-trace",
            "x-amzn-bedrock-performanceconfig-latency",
            "x-amzn-bedrock-service-tier",
            "x-amzn-bedrock-accept",
        }
    )

    def claims_path(self, path: str) -> bool:
        op = _operation(path)
        return op is not None and op[1].startswith("invoke")

    def path_streams(self, path: str) -> bool:
        op = _operation(path)
        return op is not None and op[1] == "invoke-with-response-stream"

    @staticmethod
    def _inner(body: object) -> Provider:
        """The provider of the model format a body (request or response) is in: Anthropic Messages
        for Claude; Converse's for Amazon Nova (request ``{schemaVersion?: "messages-v1",
        messages[{role, content[{text} | {toolUse} | …]}], system?, inferenceConfig?, toolConfig?}``,
        response ``{output{message}, stopReason, usage}``)."""
        b = d(body)
        if "anthropic_version" in b or b.get("type") == "message":
            return anthropic.PROVIDER
        if _nova_shaped(b):
            return CONVERSE
        if _text_model_shaped(b):
            return TEXT_MODEL
        return UNRECOGNIZED

    def request_model(self, body: dict[str, Any]) -> str | None:
        return None

    def sampling(self, body: dict[str, Any]) -> Sampling:
        return self._inner(body).sampling(body)

    def count_messages(self, body: dict[str, Any]) -> int | None:
        return self._inner(body).count_messages(body)

    def count_tools(self, body: dict[str, Any]) -> int:
        return self._inner(body).count_tools(body)

    def messages(self, body: dict[str, Any]) -> list[Message]:
        return self._inner(body).messages(body)

    def read_body(self, body: object) -> ResponseFields:
        return self._inner(body).read_body(body)

    def read_stream(self, stream: list[Payload]) -> ResponseFields | None:
        if any(event == "message_start" for event, _ in stream):
            return anthropic.PROVIDER.read_stream(stream)
        nova = [e for e in map(_nova_event, stream) if e is not None]
        if any(event == "messageStart" for event, _ in nova):
            return CONVERSE.read_stream(nova)
        if any(_text_model_shaped(p) for _, p in stream):
            return TEXT_MODEL.read_stream(stream)
        return None

    def stream_delta_text(self, payload: dict[str, Any]) -> str:
        nova = _nova_event(("chunk", payload))
        if nova is not None:
            return CONVERSE.stream_delta_text(nova[1])
        return anthropic.PROVIDER.stream_delta_text(payload)

    def tool_call_arguments(self, node: dict[str, Any]) -> list[object]:
        return []  # the Anthropic provider reads Claude's blocks already

    def rewrite_body(self, body: dict[str, Any], text: str | None, calls: Sequence[NewToolCall]) -> bool:
        return self._inner(body).rewrite_body(body, text, calls)

    def otel_provider_name(self, host: str) -> str:
        return "aws.bedrock"

    def genai_input_messages(self, body: dict[str, Any]) -> GenAIInput:
        return self._inner(body).genai_input_messages(body)


CONVERSE = BedrockConverse()
INVOKE = BedrockInvoke()
