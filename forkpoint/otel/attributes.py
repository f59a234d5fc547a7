"""The attributes of one span: the GenAI semantic conventions, and what OpenInference readers
(Phoenix) and Langfuse read.

Sources of the names:

* GenAI: opentelemetry.io/docs/specs/semconv/gen-ai/ ("Development" status; ``gen_ai.*``);
* OpenInference: github.com/Arize-ai/openinference, ``spec/semantic_conventions.md``
  (``openinference.span.kind``, ``input.value`` / ``output.value`` with ``.mime_type``,
  ``session.id``, ``llm.*``, ``tool.*``); Phoenix reads these, and so does Langfuse
  (``input.value`` / ``output.value`` as an observation's input and output, ``session.id`` as the
  trace's session).

Every function here is pure: plain data in, a ``dict`` of attribute values (str, bool, int, float
or lists of str) out. Content (prompts, completions, tool arguments and results, tool definitions)
is added only when the caller asks for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from .. import providers
from ..log import json_text as log_json_text
from ..log import to_json
from ..providers import recorded_response, response_fields
from ..providers.base import maybe_json

TEXT = "text/plain"
JSON = "application/json"

#: ``gen_ai.provider.name`` → OpenInference ``(llm.provider, llm.system)``.
_OI_PROVIDER: dict[str, tuple[str, str | None]] = {
    "openai": ("openai", "openai"),
    "anthropic": ("anthropic", "anthropic"),
    "azure.ai.openai": ("azure", "openai"),
    "gcp.gemini": ("google", None),
    "gcp.gen_ai": ("google", None),
    "gcp.vertex_ai": ("google", "vertexai"),
}


def json_text(value: Any) -> str:
    """``value`` as compact JSON text (forkpoint's encoded values made plain JSON first)."""
    return log_json_text(to_json(value)).decode()


def as_value(value: Any) -> tuple[str, str]:
    """A recorded value as ``(text, mime type)``: a string as itself (``text/plain``), anything
    else as JSON (``application/json``)."""
    if isinstance(value, str):
        return value, TEXT
    return json_text(value), JSON


def put(attrs: dict[str, Any], key: str, value: Any) -> None:
    """Set ``key`` unless ``value`` is None or empty text."""
    if value is not None and value != "":
        attrs[key] = value


def put_io(attrs: dict[str, Any], side: str, value: Any) -> None:
    """``{side}.value`` and ``{side}.mime_type`` (``side`` is ``input`` or ``output``) of a recorded
    value; nothing when it is None."""
    if value is None:
        return
    text, mime = as_value(value)
    attrs[f"{side}.value"] = text
    attrs[f"{side}.mime_type"] = mime


# --------------------------------------------------------------------------- messages


def part_text(parts: Any) -> str:
    """The text parts of a message in the conventions' shape, joined."""
    return "".join(
        p["content"]
        for p in parts or []
        if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("content"), str)
    )


def _oi_message(attrs: dict[str, Any], base: str, role: str, parts: list[dict[str, Any]]) -> None:
    attrs[f"{base}.message.role"] = role
    put(attrs, f"{base}.message.content", part_text(parts))
    calls = [p for p in parts if p.get("type") == "tool_call"]
    for j, call in enumerate(calls):
        prefix = f"{base}.message.tool_calls.{j}.tool_call"
        put(attrs, f"{prefix}.id", call.get("id"))
        put(attrs, f"{prefix}.function.name", call.get("name"))
        if call.get("arguments") is not None:
            attrs[f"{prefix}.function.arguments"] = as_value(call["arguments"])[0]


def oi_messages(prefix: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Messages in the conventions' shape as OpenInference's flattened ``{prefix}.{i}.message.*``
    attributes (``prefix`` is ``llm.input_messages`` or ``llm.output_messages``). OpenInference
    gives a tool's result a message of its own (``message.tool_call_id``, ``message.content``), so a
    message holding several results becomes several messages."""
    attrs: dict[str, Any] = {}
    n = 0
    for m in messages:
        parts = [p for p in m.get("parts") or [] if isinstance(p, dict)]
        role = str(m.get("role") or "user")
        results = [p for p in parts if p.get("type") == "tool_call_response"]
        rest = [p for p in parts if p.get("type") != "tool_call_response"]
        if rest or not results:
            _oi_message(attrs, f"{prefix}.{n}", role, rest)
            n += 1
        for r in results:
            base = f"{prefix}.{n}"
            attrs[f"{base}.message.role"] = "tool"
            put(attrs, f"{base}.message.tool_call_id", r.get("id"))
            if r.get("response") is not None:
                attrs[f"{base}.message.content"] = as_value(r["response"])[0]
            n += 1
    return attrs


def input_messages(event: Mapping[str, Any]) -> tuple[list[dict[str, Any]] | None, list[dict[str, Any]]]:
    """(system instructions, input messages) of a model call in the conventions' shape."""
    summary = event.get("summary") or {}
    request = event.get("request") or {}
    return providers.genai_input_messages(
        str(summary.get("api") or "unknown"), str(request.get("url") or ""), request.get("body")
    )


def output_messages(event: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The response of a model call as the conventions' output messages: ``[{"role": "assistant",
    "parts": [reasoning, text, tool calls], "finish_reason"}]``, or ``[]`` without a response."""
    if not event.get("response"):
        return []
    summary = event.get("summary") or {}
    parts: list[dict[str, Any]] = []
    read = response_fields(str((event.get("request") or {}).get("url") or ""), recorded_response(event))
    if read.reasoning:
        parts.append({"type": "reasoning", "content": read.reasoning})
    if read.text:
        parts.append({"type": "text", "content": read.text})
    for tc in summary.get("tool_calls") or []:
        parts.append(
            {
                "type": "tool_call",
                "id": tc.get("id"),
                "name": tc.get("name"),
                "arguments": maybe_json(tc.get("arguments")),
            }
        )
    return [{"role": "assistant", "parts": parts, "finish_reason": summary.get("stop_reason") or ""}]


def task_of(messages: list[dict[str, Any]]) -> str | None:
    """The text of the first user message: what the agent was asked to do."""
    for m in messages:
        if m.get("role") == "user":
            text = part_text(m.get("parts"))
            if text:
                return text
    return None


# --------------------------------------------------------------------------- model calls


def url_full(url: str, content: bool) -> str:
    """``url.full`` of an HTTP span: the recorded URL, each query value (an item without ``=``
    whole: ``?secret+term``) and the fragment ``REDACTED``
    without content (a query carries what the program asked for: a search term, a file name; a
    fragment a token, ``#access_token=…``; the HTTP conventions redact query values that may be
    sensitive the same way); the URL as recorded with it. Split at the first ``?`` and ``#`` as
    a URL parser does, but by hand: a URL no parser takes (``http://127.0.0.1:9]/``: a stray bracket) is redacted too."""
    if content:
        return url
    rest, hash_, fragment = url.partition("#")
    base, mark, query = rest.partition("?")
    if query:
        query = "&".join(
            f"{item.partition('=')[0]}=REDACTED" if "=" in item else "REDACTED" for item in query.split("&")
        )
    return f"{base}{mark}{query}{hash_}{'REDACTED' if fragment else ''}"


def model_call(event: Mapping[str, Any], session_id: str, content: bool) -> tuple[str, dict[str, Any]]:
    """(span name, attributes) of a model call's span (kind CLIENT; OpenInference ``LLM``)."""
    summary = event.get("summary") or {}
    request = event.get("request") or {}
    api = str(summary.get("api") or "unknown")
    operation = providers.otel_operation(api)
    model = summary.get("model")
    provider = providers.otel_provider_name(summary)
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": operation,
        "gen_ai.provider.name": provider,
        "openinference.span.kind": "LLM",
    }
    put(attrs, "gen_ai.request.model", model)
    put(attrs, "gen_ai.conversation.id", session_id)
    attrs["session.id"] = session_id
    parts = urlsplit(str(request.get("url") or ""))
    try:
        port = parts.port or {"https": 443, "http": 80}.get(parts.scheme)
    except ValueError:
        port = None
    if parts.hostname and parts.scheme in ("http", "https"):  # (an imported trajectory's names an agent)
        attrs["server.address"] = parts.hostname
        put(attrs, "server.port", port)
    params: dict[str, Any] = {}
    for key in ("temperature", "top_p", "max_tokens", "seed"):
        put(attrs, f"gen_ai.request.{key}", summary.get(key))
        if summary.get(key) is not None:
            params[key] = summary[key]
    if summary.get("stream"):
        attrs["gen_ai.request.stream"] = True
        params["stream"] = True
        chunks = (event.get("response") or {}).get("chunks") or []
        if chunks:
            attrs["gen_ai.response.time_to_first_chunk"] = round(
                float(chunks[0][0]) / 1000.0, 6
            )  # s, to the µs
    if event.get("response"):
        put(attrs, "gen_ai.response.id", providers.response_id(event))
    put(attrs, "gen_ai.response.model", summary.get("response_model"))
    if summary.get("stop_reason"):
        attrs["gen_ai.response.finish_reasons"] = [str(summary["stop_reason"])]
    usage = providers.genai_usage(summary)
    put(attrs, "gen_ai.usage.input_tokens", usage.get("input_tokens"))
    put(attrs, "gen_ai.usage.output_tokens", usage.get("output_tokens"))
    put(attrs, "gen_ai.usage.cache_read.input_tokens", usage.get("cache_read_input_tokens"))
    put(attrs, "gen_ai.usage.cache_creation.input_tokens", usage.get("cache_creation_input_tokens"))
    response = event.get("response") or {}
    if response.get("status") is not None:
        attrs["http.response.status_code"] = int(response["status"])

    # OpenInference: the same facts under its names.
    put(attrs, "llm.model_name", summary.get("response_model") or model)
    oi_provider, oi_system = _OI_PROVIDER.get(provider, (None, None))
    put(attrs, "llm.provider", oi_provider)
    put(attrs, "llm.system", oi_system)
    if params:
        attrs["llm.invocation_parameters"] = json_text(params)
    put(attrs, "llm.token_count.prompt", usage.get("input_tokens"))
    put(attrs, "llm.token_count.completion", usage.get("output_tokens"))
    if usage.get("input_tokens") is not None and usage.get("output_tokens") is not None:
        attrs["llm.token_count.total"] = (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)
    put(attrs, "llm.token_count.prompt_details.cache_read", usage.get("cache_read_input_tokens"))
    put(attrs, "llm.token_count.prompt_details.cache_write", usage.get("cache_creation_input_tokens"))

    if content:
        system, messages = input_messages(event)
        if system:
            attrs["gen_ai.system_instructions"] = json_text(system)
        attrs["gen_ai.input.messages"] = json_text(messages)
        everything = ([{"role": "system", "parts": system}] if system else []) + messages
        attrs.update(oi_messages("llm.input_messages", everything))
        put_io(attrs, "input", everything)
        out = output_messages(event)
        if out:
            attrs["gen_ai.output.messages"] = json_text(out)
            attrs.update(oi_messages("llm.output_messages", out))
            text = part_text(out[0]["parts"])
            calls = [p for p in out[0]["parts"] if p["type"] == "tool_call"]
            put_io(attrs, "output", text or (calls or None))
        tools = providers.genai_tool_definitions(api, request.get("body"))
        if tools:
            attrs["gen_ai.tool.definitions"] = json_text(tools)
            for i, tool in enumerate(tools):
                attrs[f"llm.tools.{i}.tool.json_schema"] = json_text(_openai_schema(tool))
    name = f"{operation} {model}" if model else operation
    return name, attrs


def _openai_schema(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool definition as OpenInference's ``tool.json_schema`` holds it: the OpenAI tool shape
    ``{"type", "function": {"name", "description"?, "parameters"?}}``."""
    fn = {k: tool[k] for k in ("name", "description", "parameters") if k in tool}
    return {"type": tool.get("type") or "function", "function": fn}


# --------------------------------------------------------------------------- tool calls


def tool_call(
    event: Mapping[str, Any],
    session_id: str,
    content: bool,
    call_id: str | None,
    definition: dict[str, Any] | None,
) -> tuple[str, dict[str, Any]]:
    """(span name, attributes) of a tool call's span (kind INTERNAL; OpenInference ``TOOL``).
    ``call_id``: the id the model gave the call it answers; ``definition``: that tool's definition
    in the request that asked for it (content)."""
    tool = str(event.get("tool"))
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool,
        "gen_ai.tool.type": "function",
        "openinference.span.kind": "TOOL",
        "tool.name": tool,
        "session.id": session_id,
    }
    put(attrs, "gen_ai.conversation.id", session_id)
    put(attrs, "gen_ai.tool.call.id", call_id)
    put(attrs, "tool.id", call_id)
    if content:
        # (typed values in their stored form, {"$type": …}, as forkpoint show prints them and an
        # override takes them)
        args = event.get("args")
        attrs["gen_ai.tool.call.arguments"] = json_text(args)
        put_io(attrs, "input", args)
        if "result" in event:
            text, mime = as_value(event.get("result"))
            attrs["gen_ai.tool.call.result"] = text
            attrs["output.value"], attrs["output.mime_type"] = text, mime
        if definition:
            put(attrs, "gen_ai.tool.description", definition.get("description"))
            put(attrs, "tool.description", definition.get("description"))
            if definition.get("parameters") is not None:
                attrs["tool.parameters"] = json_text(definition["parameters"])
    return f"execute_tool {tool}", attrs


def common(event: Mapping[str, Any], content: bool) -> dict[str, Any]:
    """The ``forkpoint.*`` attributes of any event's span or span event."""
    attrs: dict[str, Any] = {"forkpoint.seq": int(event["seq"])}
    # A what-if run's "replay"/"override"/"live"; a checkpoint's `source` is its source *state*
    # (patch included), which is content and never exported here.
    if isinstance(event.get("source"), str):
        attrs["forkpoint.source"] = event["source"]
    put(attrs, "forkpoint.recorded_seq", event.get("recorded_seq"))
    if content:
        put(attrs, "forkpoint.override", event.get("override"))
    return attrs


def span_event(event: Mapping[str, Any], content: bool) -> dict[str, Any]:
    """The attributes of the span event (``forkpoint.checkpoint`` / ``forkpoint.note`` /
    ``forkpoint.outcome``) of a checkpoint, a note or an outcome."""
    attrs = common(event, content)
    if event.get("type") == "checkpoint":
        src = event.get("source") or {}
        ws = event.get("workspace") or {}
        attrs["forkpoint.checkpoint.boundary"] = str(event.get("boundary"))
        put(attrs, "forkpoint.checkpoint.reason", event.get("reason"))
        put(attrs, "forkpoint.checkpoint.turn", event.get("turn"))
        put(attrs, "forkpoint.checkpoint.source_tree", src.get("tree"))
        attrs["forkpoint.checkpoint.changed_files"] = len(src.get("changed") or [])
        put(attrs, "forkpoint.checkpoint.workspace_fingerprint", ws.get("fingerprint"))
        attrs["forkpoint.checkpoint.workspace_files"] = ws.get("files", len(ws.get("manifest") or []))
        put(attrs, "forkpoint.checkpoint.context_digest", event.get("context_digest"))
    elif event.get("type") == "outcome":
        if event.get("passed") is not None:  # (None: the outcome command could not run)
            attrs["forkpoint.outcome.passed"] = bool(event.get("passed"))
        put(attrs, "forkpoint.outcome.exit_code", event.get("exit_code"))
        if content:
            put(attrs, "forkpoint.outcome.command", event.get("command"))
    elif content:
        put(attrs, "forkpoint.note.text", event.get("text"))
        if event.get("data") is not None:
            attrs["forkpoint.note.data"] = json_text(event["data"])
    return attrs


# --------------------------------------------------------------------------- the session


def root(
    header: Mapping[str, Any],
    end: Mapping[str, Any] | None,
    provider_names: set[str],
    content: bool,
    task: str | None,
    answer: Any,
) -> dict[str, Any]:
    """The attributes of the session's root span (kind INTERNAL; OpenInference ``AGENT``):
    ``task`` (the first user message) in and ``answer`` (the last model text, or what a framework's
    answer tool took: :func:`~forkpoint.events.answer_tool`) out, with content."""
    sid = str(header.get("session_id"))
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.conversation.id": sid,
        "openinference.span.kind": "AGENT",
        "session.id": sid,
    }
    if len(provider_names) == 1:
        attrs["gen_ai.provider.name"] = next(iter(provider_names))
    tags = header.get("tags") or {}
    put(attrs, "gen_ai.agent.version", tags.get("agent_version"))
    attrs["forkpoint.session.id"] = sid
    put(attrs, "forkpoint.session.name", header.get("name"))
    for k, v in tags.items():
        if v is not None and k != "agent_version":
            attrs[f"forkpoint.tag.{k}"] = str(v)
    put(attrs, "forkpoint.version", (header.get("versions") or {}).get("forkpoint"))
    if content:
        if header.get("argv"):
            attrs["process.command_args"] = [str(a) for a in header["argv"]]
        put_io(attrs, "input", task)
        put_io(attrs, "output", answer)
    parent_ref = header.get("parent") or {}
    if isinstance(parent_ref, dict) and parent_ref.get("session_id"):
        attrs["forkpoint.parent.session_id"] = str(parent_ref["session_id"])
        put(attrs, "forkpoint.parent.seq", parent_ref.get("seq"))
        replay = header.get("replay") or {}
        put(attrs, "forkpoint.replay.models", replay.get("models"))
        put(attrs, "forkpoint.replay.tools", replay.get("tools"))
        put(attrs, "forkpoint.replay.on_divergence", replay.get("on_divergence"))
        if replay.get("overrides"):
            attrs["forkpoint.replay.override_count"] = len(replay["overrides"])
    if end is not None:
        put(attrs, "forkpoint.exit_code", end.get("exit_code"))
        if end.get("incomplete"):  # (the recording stopped early: a full disk)
            attrs["forkpoint.incomplete"] = str(end["incomplete"])
        if end.get("exit_code") not in (0, None):
            attrs["error.type"] = end_reason(end) or "_OTHER"
    return attrs


def end_reason(end: Mapping[str, Any]) -> str | None:
    """Why a run ended with a non-zero exit code, as a type: the recorded ``reason`` (a signal, an
    exception from a ``with forkpoint.record()`` block), else the type of the first exception that
    ended the program uncaught (``forkpoint record -- CMD`` records it there, with no reason)."""
    if end.get("reason"):
        return str(end["reason"])
    uncaught = end.get("uncaught")
    first = uncaught[0] if isinstance(uncaught, list) and uncaught else None
    return str(first["type"]) if isinstance(first, dict) and first.get("type") else None
