"""Google Gemini generateContent — ``POST /v1beta/models/{model}:generateContent`` and
``:streamGenerateContent``, on the Gemini API or Vertex AI.

Wire format (ai.google.dev/api/generate-content): request ``{contents[{role?, parts[{text} |
{functionCall{name, args}} | {functionResponse{name, response}}]}], systemInstruction?,
tools?[{functionDeclarations[...]}], generationConfig?{temperature, topP, seed, maxOutputTokens}}``
(the proto snake_case spellings ``system_instruction``, ``generation_config``,
``function_declarations``, ``function_call``, ``function_response`` are accepted too). Response
``GenerateContentResponse{candidates[{content{role, parts}, finishReason, index}],
usageMetadata{promptTokenCount, candidatesTokenCount}, modelVersion, responseId,
promptFeedback?{blockReason}}``. Streamed with ``?alt=sse`` as one ``data:
<GenerateContentResponse>`` per chunk, or without it as one JSON array of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..patterns import compiled_later
from .base import (
    NOTHING,
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
    genai_function,
    i,
    join,
    lst,
    on_vertex_ai,
    parts_text,
    read_sampling,
    read_usage,
    role,
    s,
    sse,
)

_MODEL_IN_PATH = compiled_later(r"/(?:models|tunedModels)/([^/:]+):")


def _chunks(chunks: list[dict[str, Any]]) -> ResponseFields:
    """A response read from its ``GenerateContentResponse`` objects in order (one for a body)."""
    text: list[str] | None = None
    thought: list[str] | None = None
    calls: list[ToolCallSummary] = []
    usage: Usage | None = None
    stop = model = error = None
    seen = False
    for chunk in chunks:
        if chunk.get("error"):
            error = error or error_of(chunk)
            continue
        if not any(k in chunk for k in ("candidates", "usageMetadata", "promptFeedback", "modelVersion")):
            continue
        seen = True
        model = s(chunk.get("modelVersion")) or model
        if isinstance(chunk.get("usageMetadata"), dict):
            usage = read_usage(chunk["usageMetadata"])  # cumulative: the last one wins
        cands = [c for c in lst(chunk.get("candidates")) if isinstance(c, dict)]
        cand = next((c for c in cands if i(c.get("index")) in (0, None)), {})
        for part in lst(d(cand.get("content")).get("parts")):
            part = d(part)
            if isinstance(part.get("text"), str) and not part.get("thought"):
                text = text if text is not None else []
                text.append(part["text"])
            elif isinstance(part.get("text"), str):
                thought = [*(thought or []), part["text"]]
            fc = part.get("functionCall")
            if isinstance(fc, dict):
                calls.append(
                    {"id": s(fc.get("id")), "name": s(fc.get("name")), "arguments": dumps(fc.get("args", {}))}
                )
        stop = s(cand.get("finishReason")) or stop
        stop = stop or s(d(chunk.get("promptFeedback")).get("blockReason"))
    if not seen:
        return NOTHING._replace(error=error)
    return ResponseFields(join(text), calls, usage, stop, model, error, reasoning=join(thought))


def _recorded_parts(recorded: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The parts of the first candidate of a response, across its ``GenerateContentResponse`` objects."""
    out = []
    for chunk in recorded:
        cands = [c for c in lst(chunk.get("candidates")) if isinstance(c, dict)]
        cand = next((c for c in cands if i(c.get("index")) in (0, None)), {})
        out += [d(p) for p in lst(d(cand.get("content")).get("parts"))]
    return out


def _rewritten(
    recorded: list[dict[str, Any]], text: str | None, calls: Sequence[NewToolCall]
) -> tuple[dict[str, Any], list[str]]:
    """The candidate answering ``text`` and ``calls`` in place of the ``recorded`` answer, and what
    it lacks of the ``thoughtSignature`` Gemini requires back, said plainly. A thinking model signs
    its answer on a part (the first call of each step, or its text when it asks for none), and an
    answer's first call must come back signed with the next request: the parts that stay keep
    theirs (the text, as recorded; a call equal to the recorded one in its place; the thoughts,
    with calls, as for Anthropic's thinking), a replaced call cannot carry it, and neither can a
    call asked for where a signed answer asked for none."""
    old = _recorded_parts(recorded)
    said = [p for p in old if isinstance(p.get("text"), str) and not p.get("thought")]
    parts = [p for p in old if p.get("thought")] if calls else []
    if text and "".join(p["text"] for p in said) == text:
        parts += said
    elif text:
        parts.append({"text": text})
    asked = [p for p in old if isinstance(p.get("functionCall"), dict)]
    kept = set()
    for n, c in enumerate(calls):
        new = {"name": c["name"], "args": args_obj(c["arguments"])}
        was = d(asked[n].get("functionCall")) if n < len(asked) else {}
        if (was.get("name"), was.get("args", {})) == (new["name"], new["args"]):
            kept.add(n)
        parts.append(asked[n] if n in kept else {"functionCall": new})
    lacks = [
        f"the thought signature of the recorded call {_call_text(p)}, which Gemini requires back with the "
        "next request, is dropped with it (no other call can carry it)"
        for n, p in enumerate(asked)
        if p.get("thoughtSignature") and n not in kept and calls  # (an answer asking for none needs none)
    ]
    if calls and 0 not in kept and not lacks and any(p.get("thoughtSignature") for p in old):
        first = next(p for p in parts if "functionCall" in p)
        lacks.append(
            f"the call {_call_text(first)} comes first with no thought signature, which Gemini requires on "
            "an answer's first call back with the next request (the recorded answer is signed, on no call "
            "asked for again)"
        )
    return {"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}, lacks


def _call_text(part: dict[str, Any]) -> str:
    """A ``functionCall`` part as ``name({args})``."""
    call = d(part["functionCall"])
    return f"{call.get('name')}({dumps(call.get('args', {}))})"


class Gemini(Provider):
    """Google Gemini ``generateContent`` (Gemini API and Vertex AI)."""

    name = "gemini"
    api = "generateContent"
    reference = "https://ai.google.dev/api/generate-content"
    context_fields = ("systemInstruction", "contents")
    messages_field = "contents"
    otel_operation = "generate_content"

    @property
    def conversation_fields(self) -> frozenset[str]:
        return frozenset({*self.context_fields, "system_instruction"})

    # --- recognition

    def claims_path(self, path: str) -> bool:
        return path.endswith(":generateContent") or path.endswith(":streamGenerateContent")

    def claims_host(self, host: str) -> bool:
        return host.endswith("generativelanguage.googleapis.com") or on_vertex_ai(host)

    def claims_body(self, body: dict[str, Any]) -> bool:
        return isinstance(body.get("contents"), list)

    def is_auxiliary_path(self, path: str) -> bool:
        return "countTokens" in path

    def path_streams(self, path: str) -> bool:
        return path.endswith(":streamGenerateContent")

    def model_in_path(self, path: str) -> str | None:
        m = _MODEL_IN_PATH.search(path)
        return m.group(1) if m else None

    # --- request side

    def sampling(self, body: dict[str, Any]) -> Sampling:
        return read_sampling(d(first(body.get("generationConfig"), body.get("generation_config"))))

    def count_messages(self, body: dict[str, Any]) -> int | None:
        contents = body.get("contents")
        return len(contents) if isinstance(contents, list) else 1 if isinstance(contents, dict) else None

    def count_tools(self, body: dict[str, Any]) -> int:
        """Each function declaration counts; other tools (googleSearch, codeExecution, ...) count 1."""
        n = 0
        for tool in lst(body.get("tools")):
            decls = first(d(tool).get("functionDeclarations"), d(tool).get("function_declarations"))
            n += len(decls) if isinstance(decls, list) else 1
        return n

    def messages(self, body: dict[str, Any]) -> list[Message]:
        """``systemInstruction`` first as ``system``, then one entry per ``contents`` item with role
        ``model`` shown as ``assistant`` (missing role: ``user``); ``functionResponse`` parts are
        rendered as their response JSON."""
        out: list[Message] = []
        system = parts_text(first(body.get("systemInstruction"), body.get("system_instruction")))
        if system:
            out.append({"role": "system", "text": system})
        contents = body.get("contents")
        for c in [contents] if isinstance(contents, dict) else lst(contents):
            c = d(c)
            r = role(c.get("role"), "user")
            out.append({"role": "assistant" if r == "model" else r, "text": parts_text(c.get("parts"))})
        return out

    # --- response side

    def read_body(self, body: object) -> ResponseFields:
        if isinstance(body, list):  # :streamGenerateContent without alt=sse, kept as one JSON body
            return _chunks([c for c in body if isinstance(c, dict)])
        return _chunks([body]) if isinstance(body, dict) else NOTHING

    def read_stream(self, stream: list[Payload]) -> ResponseFields:
        return _chunks([p for _, p in stream])

    def response_id(self, payload: dict[str, Any]) -> str | None:
        return s(payload.get("responseId")) or None

    def stream_delta_text(self, payload: dict[str, Any]) -> str:
        cands = payload.get("candidates") or []
        head = cands[0] if cands and isinstance(cands[0], dict) else {}
        parts = (head.get("content") or {}).get("parts") or []
        return "".join(
            p["text"]
            for p in parts
            if isinstance(p, dict) and isinstance(p.get("text"), str) and not p.get("thought")
        )

    # --- carried context

    def tool_call_arguments(self, node: dict[str, Any]) -> list[object]:
        call = node.get("functionCall")
        return [call.get("args")] if isinstance(call, dict) else []

    def is_tool_result(self, node: dict[str, Any]) -> bool:
        return "functionResponse" in node

    # --- overrides

    def rewrite_body(self, body: dict[str, Any], text: str | None, calls: Sequence[NewToolCall]) -> bool:
        body["candidates"] = [_rewritten([body], text, calls)[0]]
        return True

    def rewrite_stream(
        self, stream: list[dict[str, Any]], text: str | None, calls: Sequence[NewToolCall]
    ) -> list[str]:
        last = dict(stream[-1]) if stream else {}
        last["candidates"] = [_rewritten(stream, text, calls)[0]]
        return [sse(last)]

    def rewrite_losses(self, recorded: list[dict[str, Any]], calls: Sequence[NewToolCall]) -> list[str]:
        return _rewritten(recorded, None, calls)[1]

    # --- OpenTelemetry

    def otel_provider_name(self, host: str) -> str:
        if on_vertex_ai(host):
            return "gcp.vertex_ai"
        return "gcp.gemini" if host.endswith("generativelanguage.googleapis.com") else "gcp.gen_ai"

    def is_model_item(self, item: dict[str, Any]) -> bool:
        """A ``role: model`` content."""
        return item.get("role") == "model"

    def genai_input_messages(self, body: dict[str, Any]) -> GenAIInput:
        system: list[dict[str, Any]] | None = None
        sys_inst = body.get("systemInstruction") or body.get("system_instruction")
        if sys_inst:
            system = [
                {"type": "text", "content": p["text"]}
                for p in lst(d(sys_inst).get("parts"))
                if isinstance(p, dict) and isinstance(p.get("text"), str)
            ]
        msgs: list[dict[str, Any]] = []
        contents = body.get("contents")
        for c in [contents] if isinstance(contents, dict) else lst(contents):
            if not isinstance(c, dict):
                continue
            parts = []
            for p in lst(c.get("parts")):
                if not isinstance(p, dict):
                    continue
                call = p.get("functionCall") or p.get("function_call")
                resp = p.get("functionResponse") or p.get("function_response")
                if isinstance(call, dict):
                    parts.append(
                        {
                            "type": "tool_call",
                            "id": call.get("id"),
                            "name": call.get("name"),
                            "arguments": call.get("args"),
                        }
                    )
                elif isinstance(resp, dict):
                    parts.append(
                        {"type": "tool_call_response", "id": resp.get("id"), "response": resp.get("response")}
                    )
                elif isinstance(p.get("text"), str):
                    parts.append({"type": "reasoning" if p.get("thought") else "text", "content": p["text"]})
            who = role(c.get("role"), "user")
            who = "assistant" if who == "model" else who
            if parts and all(x["type"] == "tool_call_response" for x in parts):
                who = "tool"
            msgs.append({"role": who, "parts": parts})
        return system, msgs

    def genai_tool_definitions(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """Each function declaration ``{name, description, parameters | parametersJsonSchema}`` as a
        function tool; any other tool (``{"googleSearch": {}}``, …) as ``{"type": its key}``."""
        out: list[dict[str, Any]] = []
        for tool in lst(body.get("tools")):
            tool = d(tool)
            decls = first(tool.get("functionDeclarations"), tool.get("function_declarations"))
            if isinstance(decls, list):
                for fn in decls:
                    fn = d(fn)
                    params = first(
                        fn.get("parameters"), fn.get("parametersJsonSchema"), fn.get("parameters_json_schema")
                    )
                    out.append(genai_function(fn.get("name"), fn.get("description"), params))
            else:
                out.extend({"type": str(key)} for key in tool)
        return out


PROVIDER = Gemini()
