"""Provider-aware understanding of recorded model calls.

forkpoint records model calls at the HTTP boundary, so what it holds is a URL, a parsed JSON request
body, and a response (a JSON body, or the text chunks of a server-sent-events stream). This package
turns that into something a person can read: which provider and API was called, with which model and
sampling settings, how many messages and tools went in, which tool calls and how many tokens came
out, and why the model stopped. Everything here is a pure function over plain data (no I/O, stdlib +
orjson) and never raises on malformed input: what cannot be read is reported as ``None``.

One module per wire format, each a :class:`~.base.Provider` (the interface, in :mod:`.base`, with
the helpers they share), registered in :data:`REGISTRY`:

* :mod:`.openai_chat` — OpenAI Chat Completions, and every OpenAI-compatible server;
* :mod:`.openai_responses` — OpenAI Responses;
* :mod:`.anthropic` — Anthropic Messages (also Claude on Vertex AI);
* :mod:`.gemini` — Google Gemini ``generateContent`` / ``streamGenerateContent``;
* :mod:`.bedrock` — Amazon Bedrock Converse / ConverseStream and InvokeModel (its streams are AWS
  event streams, :mod:`forkpoint.eventstream`, read as server-sent events).

Adding a format is one module plus one line in :data:`REGISTRY`. The functions below are the only
way the rest of forkpoint reaches provider knowledge: they find the provider that recognizes a call
(:func:`detect`) and ask it, or ask every registered provider (what a stream's last event looks
like, which headers change a request's meaning); which SDKs and API-key variables exist is
:mod:`forkpoint.sdks`' table, by provider family, re-exported here.

Public API: :func:`parse_sse`, :func:`detect`, :func:`summarize`, :func:`response_text`,
:func:`response_fields`,
:func:`request_messages`, :func:`recorded_response`, :func:`summary`; and for the layers above:
:func:`context_fields`, :func:`conversation_fields`, :func:`context_messages`,
:func:`tool_call_arguments`, :func:`is_tool_result`, :func:`tool_results`, :func:`stream_end_markers`,
:func:`stream_delta_text`, :func:`rewrite_response`, :func:`semantic_headers`,
:func:`otel_operation`, :func:`otel_provider_name`, :func:`genai_input_messages`,
:func:`genai_tool_definitions`, :func:`genai_usage`, :func:`response_id`, :func:`api_key_vars`, :func:`sdk_packages`, :func:`sdk_modules`. The response
side of :func:`summarize` and :func:`response_text` goes through one reader (``_read_response``), so
the summary and the timeline text can never disagree.
"""

from __future__ import annotations

import functools
from collections.abc import Container, Mapping, Sequence
from typing import Any, NamedTuple, cast
from urllib.parse import urlsplit

from .. import eventstream
from ..log import add_deriver
from ..sdks import api_key_vars, sdk_modules, sdk_packages
from . import anthropic, bedrock, gemini, kinds, openai_chat, openai_responses
from .base import (
    NOTHING,
    UNRECOGNIZED,
    GenAIInput,
    Message,
    NewToolCall,
    Provider,
    ResponseFields,
    SSEEvent,
    Summary,
    ToolCallSummary,
    Usage,
    coerce_json,
    d,
    error_of,
    i,
    join_chunks,
    loads,
    lst,
    on_vertex_ai,
    parse_sse,
    payloads,
    sse_objects,
)

__all__ = [
    "PLACEHOLDER_KEY",
    "REGISTRY",
    "SUMMARY_KEYS",
    "Message",
    "Provider",
    "SSEEvent",
    "Summary",
    "ToolCall",
    "Usage",
    "api_key_vars",
    "auxiliary",
    "by_api",
    "by_name",
    "call_kind",
    "classify",
    "context_fields",
    "context_messages",
    "conversation_fields",
    "detect",
    "genai_input_messages",
    "genai_tool_definitions",
    "genai_usage",
    "is_tool_result",
    "message_list_field",
    "otel_operation",
    "otel_provider_name",
    "parse_sse",
    "recorded_response",
    "request_messages",
    "response_fields",
    "response_id",
    "response_text",
    "rewrite_response",
    "sdk_modules",
    "sdk_packages",
    "semantic_headers",
    "stream_delta_text",
    "stream_end_markers",
    "summarize",
    "summary",
    "tool_call_arguments",
    "tool_results",
]

#: The registered wire formats. Recognition by URL path and by host is unambiguous; recognition by
#: body shape (only for unknown hosts at unknown paths) asks them in this order, so a shape that
#: refines another goes first (an Anthropic body is a Chat-like ``messages`` list with more).
REGISTRY: tuple[Provider, ...] = (
    bedrock.CONVERSE,
    bedrock.INVOKE,
    gemini.PROVIDER,
    anthropic.PROVIDER,
    openai_chat.PROVIDER,
    openai_responses.PROVIDER,
)

#: A tool call the model asked for: ``arguments`` is the raw JSON text the provider sent.
ToolCall = ToolCallSummary

#: The keys of every :func:`summarize` result, in order.
SUMMARY_KEYS: tuple[str, ...] = tuple(Summary.__annotations__)

#: Provider (family) names and APIs :func:`detect` can answer with the built-in registry.
PROVIDERS: frozenset[str] = frozenset({p.name for p in REGISTRY} | {"unknown"})
APIS: frozenset[str] = frozenset({p.api for p in REGISTRY} | {"unknown"})


def by_api(api: str) -> Provider | None:
    """The registered provider of an API name (``summary["api"]``), ``None`` for ``"unknown"``."""
    return next((p for p in REGISTRY if p.api == api), None)


def by_name(name: str) -> Provider | None:
    """The first registered provider of a family name (``summary["provider"]``)."""
    return next((p for p in REGISTRY if p.name == name), None)


# --------------------------------------------------------------------------------------------------
# Detection


class _Target(NamedTuple):
    provider: Provider  # the one that reads the call: UNRECOGNIZED when no format was recognized
    name: str
    api: str
    host: str | None
    path: str


def _split_url(url: object) -> tuple[str | None, str]:
    """``(host, path)`` of a URL: host lower-case with ``:port`` if one was given, no
    credentials."""
    return _split_text_url(url) if isinstance(url, str) else (None, "")


@functools.lru_cache(maxsize=256)
def _split_text_url(url: str) -> tuple[str | None, str]:
    # (a conversation sends every call to the same few URLs; each is looked at several times a call)
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError:
        return None, ""
    if host and port is not None:
        host = f"{host}:{port}"
    return host or None, parts.path


def auxiliary(url: object) -> bool:
    """Whether ``url`` is an endpoint of a provider family that takes a model request's body but
    asks for no answer (token counting, embeddings, moderations: :meth:`.Provider.is_auxiliary_path`):
    at the provider's host a model call, never a turn."""
    path = _split_url(url)[1]
    return any(p.is_auxiliary_path(path) for p in REGISTRY)


def _target(url: object, body: object) -> _Target:
    host, path = _split_url(url)
    trimmed = path.rstrip("/")
    for p in REGISTRY:
        if p.claims_path(trimmed):
            return _Target(p, p.name, p.api, host, path)
    if host:
        name = host.split(":", 1)[0]
        for p in REGISTRY:
            if p.claims_host(name):
                return _Target(UNRECOGNIZED, p.name, "unknown", host, path)
    if isinstance(body, dict) and not auxiliary(url):
        for p in REGISTRY:
            if p.claims_body(body):
                return _Target(p, p.name, p.api, host, path)
    return _Target(UNRECOGNIZED, "unknown", "unknown", host, path)


#: OpenAI-compatible servers named by their host (lower-case, no port), and by a port only one of
#: them listens on by default.
VENDOR_HOSTS: dict[str, str] = {
    "api.mistral.ai": "mistral",
    "api.groq.com": "groq",
    "api.together.xyz": "together",
    "api.together.ai": "together",
    "openrouter.ai": "openrouter",
    "api.deepseek.com": "deepseek",
    "api.fireworks.ai": "fireworks",
    "api.perplexity.ai": "perplexity",
    "api.x.ai": "xai",
    "api.cerebras.ai": "cerebras",
    "integrate.api.nvidia.com": "nvidia",
    "api.deepinfra.com": "deepinfra",
    "api.sambanova.ai": "sambanova",
    "dashscope.aliyuncs.com": "qwen",
    "dashscope-intl.aliyuncs.com": "qwen",
    "api.moonshot.ai": "moonshot",
    "generativelanguage.googleapis.com": "gemini",
}
VENDOR_PORTS: dict[int, str] = {11434: "ollama"}


def vendor(host: str | None, response: Mapping[str, Any] | None = None) -> str | None:
    """The server an OpenAI-compatible call went to, when it says so: by host (:data:`VENDOR_HOSTS`),
    by a port only it uses by default (Ollama's 11434), or by what only it answers (Ollama's
    ``system_fingerprint: "fp_ollama"``; vLLM's ``prompt_logprobs`` field and the ``stop_reason``
    it adds to every choice). None for OpenAI itself and for servers that do not say."""
    name, _, port = (host or "").partition(":")
    for suffix, vendor_name in VENDOR_HOSTS.items():
        if name == suffix or name.endswith("." + suffix):
            return vendor_name
    if port.isdigit() and int(port) in VENDOR_PORTS:
        return VENDOR_PORTS[int(port)]
    resp = response or {}
    bodies: list[dict[str, Any]] = [resp["body"]] if isinstance(resp.get("body"), dict) else []
    # A stream says it in its first event: read the first chunks only, not the whole stream again.
    bodies += [p for _, p in payloads(join_chunks(lst(resp.get("stream"))[:4]))[:1]]
    for body in bodies:
        if body.get("system_fingerprint") == "fp_ollama":
            return "ollama"
        choice = d((lst(body.get("choices")) or [{}])[0])
        if "prompt_logprobs" in body or "stop_reason" in choice:
            return "vllm"
    return None


def classify(method: str, url: str, body: object, headers: Any = None) -> kinds.Kind:
    """What an HTTP exchange is (:mod:`.kinds`): ``telemetry`` at a known telemetry or metadata
    endpoint, ``mcp`` for MCP over HTTP, ``model`` when a provider recognizes it (its wire format, or
    a ``POST`` to a provider's host such as an embeddings endpoint), else ``http``."""
    parsed = coerce_json(body)
    named = kinds.headers_by_name(headers)
    if kinds.telemetry_endpoint(method, url, parsed, named) is not None:
        return "telemetry"
    if kinds.is_mcp(method, parsed, named):
        return "mcp"
    t = _target(url, parsed)
    if t.api != "unknown" or (t.name != "unknown" and method.upper() == "POST"):
        return "model"
    return "http"


def call_kind(event: Mapping[str, Any]) -> kinds.Kind:
    """What a recorded exchange is (see :func:`classify`): its summary's ``kind`` when it has one."""
    found = d(event.get("summary")).get("kind")
    if found in kinds.KINDS:
        return found  # type: ignore[no-any-return]
    req = d(event.get("request"))
    return classify(
        str(req.get("method") or "POST"),
        str(req.get("url") or ""),
        req.get("body") if req.get("body_kind") == "json" else None,
        req.get("headers"),
    )


def detect(url: str, body: object) -> tuple[str, str]:
    """``(provider, api)`` of a model call.

    ``provider`` is one of ``"openai"``, ``"anthropic"``, ``"gemini"``, ``"unknown"`` and names the
    wire format, not the company: any server at ``.../chat/completions`` is ``"openai"`` (use
    :func:`summarize`'s ``host`` to tell OpenAI from an OpenAI-compatible server). ``api`` is one of
    ``"chat.completions"``, ``"responses"``, ``"messages"``, ``"generateContent"`` (also for
    ``:streamGenerateContent``), ``"unknown"``.

    Decided by URL path first (``/chat/completions``, ``/responses``, ``/messages`` except OpenAI
    Assistants' ``/threads/.../messages``, ``:generateContent``, ``:streamGenerateContent``, Vertex
    ``/publishers/anthropic/...:rawPredict``); then by host (``api.anthropic.com``,
    ``generativelanguage.googleapis.com``, ``aiplatform.googleapis.com``, ``api.openai.com``:
    provider known, api ``"unknown"`` — e.g. ``/v1/messages/count_tokens`` or embeddings); and only
    for unknown hosts at unknown paths (not token counting, embeddings, moderations or speech) by
    the shape of the parsed request ``body`` (``contents`` → Gemini; ``messages`` → Anthropic if it has
    ``system``/``anthropic_version``/``tool_use`` or ``tool_result`` blocks, else Chat Completions;
    ``input`` + ``model`` → Responses). Each rule is its provider's (:data:`REGISTRY`).
    """
    t = _target(url, coerce_json(body))
    return t.name, t.api


# --------------------------------------------------------------------------------------------------
# Response side


def _http_error(status: int, body: object, stream_text: str | None, raw: object) -> str:
    msg = error_of(body, loose=True)
    for item in lst(body):  # errors of a streamed request can come as [{"error": {...}}] (Gemini)
        msg = msg or error_of(item, loose=True)
    if msg is None and stream_text:
        msg = next((m for _, p in payloads(stream_text) if (m := error_of(p))), None)
    if msg is None and isinstance(raw, str) and raw.strip():
        msg = raw.strip()[:500]
    return msg or f"HTTP {status}"


def _read_response(provider: Provider, response: object) -> ResponseFields:
    """Everything the response says, read by ``provider``: the single source of truth for both
    :func:`summarize` and :func:`response_text`.

    ``response`` is ``{"status": int, "body": <parsed JSON or None>, "stream": [str, ...] | None}``.
    A non-empty ``stream`` is joined and read as SSE; a ``body`` that is JSON text is parsed, and
    one that is not JSON but looks like SSE is read as a stream.
    """
    resp = d(response)
    status = i(resp.get("status"))
    raw = resp.get("body")
    body = coerce_json(raw)
    stream = resp.get("stream")
    stream_text = join_chunks(stream) if isinstance(stream, list) and stream else None
    if stream_text is None and body is None and isinstance(raw, str) and "data:" in raw:
        stream_text = raw
    if status is not None and status >= 400:
        return NOTHING._replace(error=_http_error(status, body, stream_text, raw))
    if stream_text is not None:
        read = provider.read_stream(payloads(stream_text))
        if read is not None:
            return read
    if isinstance(body, dict):
        read = provider.read_body(body)
        return read._replace(error=read.error or error_of(body))
    return provider.read_body(body)


# --------------------------------------------------------------------------------------------------
# Summaries


def summarize(
    url: str, request_body: object, response: dict[str, Any], *, method: str = "POST", headers: Any = None
) -> Summary:
    """The provider-aware summary stored with each recorded model call.

    ``request_body`` is the parsed JSON request body (JSON text and ``{"$text": str}`` are parsed
    too; anything else that is not an object gives ``None`` request fields). ``response`` is
    ``{"status": int, "body": <parsed JSON or None>, "stream": [str, ...] | None}``, ``stream``
    holding the decoded text chunks of an SSE response in order, at arbitrary boundaries.

    Returns exactly the keys of :data:`SUMMARY_KEYS` (``None`` when unknown or absent):

    * ``kind`` — ``model``, ``mcp``, ``telemetry`` or ``http`` (:func:`classify`, from ``method``
      and the request ``headers`` too);
    * ``provider``, ``api`` — see :func:`detect`, except that an OpenAI-compatible server that says
      who it is is named as itself (``mistral``, ``groq``, ``ollama``, ``vllm``…: :func:`vendor`);
      ``host`` — the URL's host (``:port`` if given);
    * ``model`` — the request's ``model`` (Gemini and Vertex: ``models/{model}:...`` in the path;
      Azure: the deployment); ``response_model`` — the model the response reports (Gemini:
      ``modelVersion``);
    * ``temperature``, ``top_p``, ``seed``, ``max_tokens`` — from the request (``max_tokens``,
      ``max_completion_tokens`` or ``max_output_tokens``; Gemini: ``generationConfig.temperature``,
      ``topP``, ``seed``, ``maxOutputTokens``);
    * ``stream`` — ``True`` if the request asked to stream (``"stream": true``,
      ``:streamGenerateContent``, ``:streamRawPredict``) or the response was recorded as a stream;
    * ``n_messages`` — input messages: Chat/Anthropic ``messages`` (Anthropic's ``system`` not
      counted), Responses ``input`` items (1 for a string), Gemini ``contents``;
    * ``n_tools`` — tools offered (Gemini: each function declaration, other tools count 1); ``0`` if
      the request offers none;
    * ``tool_calls`` — ``[{"id", "name", "arguments"}]`` the model asked for, ``arguments`` being
      the raw JSON text as sent (streams: the fragments concatenated; Anthropic and Gemini send an
      object: it is serialized compactly with orjson). Responses API ids are the ``call_id``. ``[]``
      when the response was read and holds none, ``None`` when no response could be read;
    * ``usage`` — ``{"input_tokens", "output_tokens"}`` from
      ``prompt_tokens``/``completion_tokens``, ``input_tokens``/``output_tokens`` or
      ``promptTokenCount``/``candidatesTokenCount``; Anthropic streams combine ``message_start`` and
      the cumulative ``message_delta`` usage; ``None`` if the response reports no usage;
    * ``stop_reason`` — ``finish_reason`` / ``stop_reason`` / Responses ``status`` (the
      ``incomplete_details.reason`` when incomplete) / Gemini ``finishReason`` (or
      ``promptFeedback.blockReason``);
    * ``server_tool_calls`` — tools the provider ran itself (Anthropic ``server_tool_use`` blocks:
      web search, code execution), like ``tool_calls``; ``None`` when there are none;
    * ``error`` — for status >= 400 the provider's error message (``"HTTP <status>"`` when the body
      has none). Also set for an error the provider reported with status 200: an ``error`` event in
      a stream (e.g. Anthropic ``overloaded_error`` mid-stream, Responses ``response.failed``) or an
      ``error`` object in the body.

    Chat Completions and Gemini responses with several choices/candidates are summarized from the
    first one (index 0). Never raises on malformed input.
    """
    req = coerce_json(request_body)
    t = _target(url, req)
    body = req if isinstance(req, dict) else None
    a = _read_response(t.provider, response)
    resp_stream = d(response).get("stream")

    family = by_name(t.name)
    named = vendor(t.host, d(response)) if family is not None and family.name == "openai" else None
    out: Summary = {
        "kind": classify(method, url, req, headers),
        "provider": named or t.name,
        "api": t.api,
        "host": t.host,
        "model": (t.provider.request_model(body) if body is not None else None)
        or next((m for p in REGISTRY if (m := p.model_in_path(t.path))), None),
        "response_model": a.response_model,
        "temperature": None,
        "top_p": None,
        "seed": None,
        "max_tokens": None,
        "stream": isinstance(resp_stream, list)
        or any(p.path_streams(t.path) for p in REGISTRY)
        or (body is not None and t.provider.requests_stream(body)),
        "n_messages": None,
        "n_tools": None,
        "tool_calls": a.tool_calls,
        "usage": a.usage,
        "stop_reason": a.stop_reason,
        "error": a.error,
        "server_tool_calls": a.server_tool_calls,
    }
    if body is not None:
        sampling = t.provider.sampling(body)
        out["temperature"] = sampling.temperature
        out["top_p"] = sampling.top_p
        out["seed"] = sampling.seed
        out["max_tokens"] = sampling.max_tokens
        out["n_messages"] = t.provider.count_messages(body)
        out["n_tools"] = t.provider.count_tools(body)
    return out


def response_text(url: str, response: dict[str, Any]) -> str | None:
    """The assistant's text output: all text parts (not tool calls, not thinking) concatenated, read
    from the body or assembled from the stream exactly as :func:`summarize` does. ``None`` when the
    response holds no text part (e.g. only a tool call) or could not be read."""
    return _read_response(_target(url, None).provider, response).text


def response_fields(url: str, response: dict[str, Any]) -> ResponseFields:
    """Everything the response says (:class:`.base.ResponseFields`: its text, the thinking the
    model showed, tool calls…), read as :func:`response_text` reads the text."""
    return _read_response(_target(url, None).provider, response)


def request_messages(url: str, request_body: object) -> list[Message]:
    """The input messages of a request, normalized to ``{"role": str, "text": str}`` for display.

    * Chat Completions: one entry per ``messages`` item, role as sent (``system``, ``developer``,
      ``user``, ``assistant``, ``tool``); an assistant message holding only tool calls has text
      ``""``.
    * Anthropic: the ``system`` prompt first as ``{"role": "system"}`` (when non-empty), then one
      entry per message; ``tool_result`` blocks are rendered as their content text (the role stays
      the wire's ``user``).
    * Responses: ``instructions`` first as ``system`` (when non-empty), then a string ``input`` as
      one ``user`` entry, or one entry per item: ``{role, content}`` messages as is,
      ``function_call`` as ``assistant`` with text ``""``, ``function_call_output`` as ``tool`` with
      its output; other item types (reasoning, item references) are skipped.
    * Gemini: ``systemInstruction`` first as ``system``, then one entry per ``contents`` item with
      role ``model`` shown as ``assistant`` (missing role: ``user``); ``functionResponse`` parts are
      rendered as their response JSON.

    Unknown formats: one entry per item of a ``messages`` list, else ``[]``; never raises.
    """
    req = coerce_json(request_body)
    return _target(url, req).provider.messages(d(req))


def message_list_field(url: str, request_body: object) -> str | None:
    """The request field that holds the conversation as a list, one item a message (``messages``,
    ``input``, ``contents``: the last of the format's ``context_fields``), when the body has a list
    there; else ``None`` (an unknown format, a string ``input``). :func:`request_messages` reads
    each item of it alone, the other fields' entries (a system prompt) first."""
    req = coerce_json(request_body)
    fields = _target(url, req).provider.context_fields
    if fields and isinstance(req, dict) and isinstance(req.get(fields[-1]), list):
        return fields[-1]
    return None


def recorded_response(event: Mapping[str, Any]) -> dict[str, Any]:
    """The ``response`` argument of :func:`summarize` / :func:`response_text` for a recorded
    ``model_call`` event (see docs/format.md): status, parsed JSON body, or the stream's text chunks."""
    resp = event.get("response") or {}
    kind = resp.get("body_kind")
    return {
        "status": resp.get("status"),
        "body": resp.get("body") if kind == "json" else None,
        "stream": stream_texts(resp) if kind == "stream" else None,
    }


def stream_texts(response: Mapping[str, Any]) -> list[str]:
    """The text chunks of a stored streamed response: an AWS event stream written as server-sent
    events (:func:`.eventstream.as_sse`, one per message), any other stream's chunks as UTF-8."""
    chunks = [c for _, c in response.get("chunks", [])]
    ctype = next((str(v) for k, v in response.get("headers") or [] if str(k).lower() == "content-type"), "")
    if eventstream.is_event_stream(ctype):
        return [eventstream.as_sse([c if isinstance(c, bytes) else c.encode("utf-8")]) for c in chunks]
    return [c if isinstance(c, str) else c.decode("utf-8", "replace") for c in chunks]


def summary(event: Mapping[str, Any]) -> Summary:
    """The provider-aware summary of a recorded model call (:func:`summarize` of its request and
    response): the one the event carries (derived when it was loaded, or stored by an importer),
    else derived now (and not kept: an event being recorded is written without it)."""
    found = event.get("summary")
    if _well_formed(found):
        return found  # type: ignore[return-value]
    url, body, response, method, headers = _summarized(event)
    return summarize(url, body, response, method=method, headers=headers)


def tally_reading(
    event: Mapping[str, Any], read: Container[str] = frozenset()
) -> tuple[str, list[ToolCallSummary] | None, list[tuple[str | None, object]]]:
    """:func:`summary`'s ``kind`` and ``tool_calls`` of a recorded model call, read as it reads them,
    and the tool results a model's call sends back (:func:`tool_results`, ``read`` as there): what a
    recorder tallies of every call it writes, without the rest of the summary (the vendor, the
    model, sampling, counts), which it never looks at."""
    url, body, response, method, headers = _summarized(event)
    req = coerce_json(body)
    provider = _target(url, req).provider
    found = event.get("summary")
    if _well_formed(found):
        held = cast(Summary, found)
        kind, calls = held["kind"], held["tool_calls"]
    else:
        kind, calls = classify(method, url, req, headers), _read_response(provider, response).tool_calls
    return kind, calls, _tool_results(provider, event, req, read) if kind == "model" else []


def tool_results(
    event: Mapping[str, Any], read: Container[str] = frozenset()
) -> list[tuple[str | None, object]]:
    """The tool results the request of a recorded model call sends back to the model, as ``(id of
    the call it answers, what it says)``, in the request's format (its GenAI input messages'
    ``tool_call_response`` parts: Chat Completions ``role: tool`` messages by ``tool_call_id``,
    Responses ``function_call_output`` by ``call_id``, Anthropic ``tool_result`` by
    ``tool_use_id``, Bedrock ``toolResult`` by ``toolUseId``, Gemini ``functionResponse`` by its
    ``id``, often None).

    A conversation resends every result with each later request, so only those after the model's
    last item in the message list are read (:func:`_since_last_answer`): reading them all at every
    call would cost a recording time quadratic in its turns. ``read``: the ids of the results read
    from the requests before."""
    request = event.get("request")
    body = coerce_json(request.get("body")) if isinstance(request, Mapping) else None
    return (
        _tool_results(_target(request.get("url"), body).provider, event, body, read)
        if isinstance(request, Mapping)
        else []
    )


def _tool_results(
    provider: Provider, event: Mapping[str, Any], body: object, read: Container[str]
) -> list[tuple[str | None, object]]:
    """:func:`tool_results` of ``event``, whose request ``body`` (parsed) is in ``provider``'s format."""
    request = event.get("request")
    if not isinstance(request, Mapping) or request.get("body_kind") != "json" or not isinstance(body, dict):
        return []
    since = _since_last_answer(provider, body, read)
    return _results(provider, since) if since is not None else []


def _results(provider: Provider, body: dict[str, Any]) -> list[tuple[str | None, object]]:
    """The tool results of request ``body`` in ``provider``'s format, as :func:`tool_results`."""
    _, messages = provider.genai_input_messages(body)
    return [
        (part.get("id"), part.get("response"))
        for m in messages
        for part in m["parts"]
        if part.get("type") == "tool_call_response"
    ]


def _since_last_answer(
    provider: Provider, body: dict[str, Any], read: Container[str]
) -> dict[str, Any] | None:
    """``body`` with its message list cut to the items after the model's last one
    (:meth:`Provider.is_model_item`), the results sent back since; or, where each call of the
    model's is an item of its own (``calls_as_items``), from an earlier item of the model's while
    the item right before the one found is a result with an id not ``read`` (a program that puts
    each call of a parallel answer right before its result). Walked from the end, so a long
    conversation costs only its last turn. None when the body has no message list (an
    unrecognized format, a prompt text): it sends back no result."""
    field = provider.messages_field
    items = body.get(field) if field else None
    if field is None or not isinstance(items, list):
        return None
    start = len(items)
    while (start := _last_model_item(provider, items, start)) > 0 and provider.calls_as_items:
        before = _results(provider, {**body, field: items[start - 1 : start]})
        if not before or any(call is None or str(call) in read for call, _ in before):
            break
    return {**body, field: items[start + 1 :]}


def _last_model_item(provider: Provider, items: list[Any], end: int) -> int:
    """The index of the model's last item (:meth:`Provider.is_model_item`) before ``end`` in a
    message list, -1 when there is none."""
    for at in range(end - 1, -1, -1):
        if isinstance(items[at], dict) and provider.is_model_item(items[at]):
            return at
    return -1


def _summarized(event: Mapping[str, Any]) -> tuple[str, object, dict[str, Any], str, Any]:
    """The arguments of :func:`summarize` for a recorded model call: URL, request body, response,
    method and request headers."""
    req = event["request"]
    return (
        req["url"],
        req["body"] if req.get("body_kind") == "json" else None,
        recorded_response(event),
        str(req.get("method") or "POST"),
        req.get("headers"),
    )


def _well_formed(found: Any) -> bool:
    """Whether a summary an event carries (an importer's) has the shapes readers rely on: lists of
    call objects, a usage object, scalars elsewhere. A hand-edited one that has not is derived
    again (``show``, the page and the export iterated ``"tool_calls": 5``)."""
    if not isinstance(found, dict):
        return False
    for key, value in found.items():
        if value is None:
            continue
        if key in ("tool_calls", "server_tool_calls"):
            if not (isinstance(value, list) and all(isinstance(c, dict) for c in value)):
                return False
        elif key == "usage":
            if not isinstance(value, dict):
                return False
        elif isinstance(value, dict | list):
            return False
    return True


def _derive_summary(event: dict[str, Any]) -> None:
    """Add a model call's ``summary`` as a session is loaded (handed to the log: it is derived, not
    stored; an importer's own is kept when it is well formed)."""
    if (
        event.get("type") == "model_call"
        and not _well_formed(event.get("summary"))
        and isinstance(event.get("request"), dict)
    ):
        event.pop("summary", None)
        try:
            event["summary"] = summary(event)
        except (KeyError, TypeError, AttributeError):  # a hand-made or foreign event: no summary
            pass


add_deriver(_derive_summary)


# --------------------------------------------------------------------------------------------------
# Carried context (checkpoints)


def _unique(items: Any) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(items))


def context_fields() -> tuple[str, ...]:
    """The request-body fields that make up a checkpoint's carried context, in every registered
    format: the system prompts first, then the message lists."""
    return _unique(
        [f for p in REGISTRY for f in p.context_fields if f != p.messages_field]
        + [f for p in REGISTRY for f in p.context_fields if f == p.messages_field]
    )


def conversation_fields() -> frozenset[str]:
    """Request-body fields shown as messages rather than as parameters, in every registered format."""
    return frozenset(f for p in REGISTRY for f in p.conversation_fields)


def context_messages(context: Mapping[str, Any]) -> Any:
    """The messages of a carried context: its first non-empty message field, else ``None``."""
    for name in _unique(p.messages_field for p in REGISTRY if p.messages_field):
        found = context.get(name)
        if found:
            return found
    return None


def tool_call_arguments(node: dict[str, Any]) -> list[object]:
    """Arguments of the tool calls one JSON object of a conversation makes, in any registered format
    (a carried context has no URL: every format is asked)."""
    return [args for p in REGISTRY for args in p.tool_call_arguments(node)]


def is_tool_result(node: dict[str, Any]) -> bool:
    """Whether one JSON object of a conversation is a tool's result, in any registered format."""
    return any(p.is_tool_result(node) for p in REGISTRY)


# --------------------------------------------------------------------------------------------------
# Streams


def stream_end_markers() -> tuple[bytes, ...]:
    """Byte strings that only the last event of a complete stream contains, in any registered
    format (``data: [DONE]``, ``event: message_stop``, ...)."""
    return _unique(m for p in REGISTRY for m in p.final_events)


def stream_delta_text(api: str, data: str) -> str:
    """The assistant text one stream event (its ``data``) adds, for a call of ``api``."""
    provider = by_api(api)
    obj = loads(data)
    if provider is None or not isinstance(obj, dict):
        return ""
    return provider.stream_delta_text(obj)


# --------------------------------------------------------------------------------------------------
# Overrides


def rewrite_response(
    url: str,
    request_body: object,
    response: dict[str, Any],
    text: str | None,
    calls: Sequence[NewToolCall] | None,
) -> bool:
    """Make a recorded response (the stored ``response`` of a model call, changed in place) answer
    ``text`` and ``calls`` (``{"id", "name", "arguments": JSON text}``) in its provider's shape,
    streamed or not. ``False``, with nothing changed, when its provider cannot rewrite it."""
    provider = _target(url, coerce_json(request_body)).provider
    calls = calls or []
    if response.get("body_kind") == "stream":
        stream = _objects(response)
        chunks = provider.rewrite_stream(stream, text, calls)
        if chunks is None:
            return False
        response["chunks"] = [[0.0, c] for c in chunks]
        return True
    return provider.rewrite_body(response["body"], text, calls)


def rewrite_losses(
    url: str, request_body: object, response: dict[str, Any], calls: Sequence[NewToolCall]
) -> list[str]:
    """What :func:`rewrite_response` of a recorded ``response`` to ask for ``calls`` drops that its
    API needs back with the next request (a Gemini call's thought signature), said plainly."""
    return _target(url, coerce_json(request_body)).provider.rewrite_losses(_objects(response), calls)


def _objects(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSON objects of a recorded response: its stream's events, or its body."""
    if response.get("body_kind") == "stream":
        return sse_objects("".join(stream_texts(response)))
    body = response.get("body")
    return [body] if isinstance(body, dict) else [b for b in lst(body) if isinstance(b, dict)]


# --------------------------------------------------------------------------------------------------
# Matching


def semantic_headers() -> frozenset[str]:
    """Request headers (lower-case) that change a request's meaning in some registered format."""
    return frozenset(h for p in REGISTRY for h in p.semantic_headers)


# --------------------------------------------------------------------------------------------------
# OpenTelemetry GenAI export


def otel_operation(api: str) -> str:
    """``gen_ai.operation.name`` of a call of ``api`` (``chat`` when unknown)."""
    provider = by_api(api)
    return provider.otel_operation if provider is not None else "chat"


#: Vendor names (:func:`vendor`) whose ``gen_ai.provider.name`` the conventions spell otherwise.
_OTEL_VENDORS = {"mistral": "mistral_ai", "xai": "x_ai", "gemini": "gcp.gemini"}


def otel_provider_name(summary: Mapping[str, Any]) -> str:
    """``gen_ai.provider.name`` for a model call: the conventions' well-known value where one
    applies (``openai``, ``anthropic``, ``azure.ai.openai``, ``gcp.gemini``, ``gcp.vertex_ai``,
    ``gcp.gen_ai``), else the wire shape forkpoint recognised."""
    name = summary.get("provider") or "unknown"
    host = (summary.get("host") or "").split(":", 1)[0]
    provider = by_name(str(name))
    if provider is None:
        return "gcp.vertex_ai" if on_vertex_ai(host) else _OTEL_VENDORS.get(str(name), str(name))
    return provider.otel_provider_name(host)


def genai_input_messages(api: str, url: str, body: Any) -> GenAIInput:
    """(system instructions, input messages) of a request in the GenAI conventions' structure."""
    if not isinstance(body, dict):
        return None, []
    provider = by_api(api)
    if provider is None:
        return None, [
            {"role": m["role"], "parts": [{"type": "text", "content": m["text"]}]}
            for m in request_messages(url, body)
        ]
    return provider.genai_input_messages(body)


def genai_tool_definitions(api: str, body: Any) -> list[dict[str, Any]]:
    """The tools a request offers in the conventions' shape (``gen_ai.tool.definitions``):
    ``[{"type": "function", "name", "description"?, "parameters"?} | {"type", "name"?}]``."""
    if not isinstance(body, dict):
        return []
    return (by_api(api) or UNRECOGNIZED).genai_tool_definitions(body)


def genai_usage(summary: Mapping[str, Any]) -> Usage:
    """A model call's token counts as the conventions count them: ``input_tokens`` includes the
    tokens read from and written to the prompt cache (added for a format whose own count leaves
    them out, :attr:`Provider.cache_outside_input`), and the cache counts are given separately;
    only the counts the response reported."""
    usage = d(summary.get("usage"))
    out: Usage = {}
    for key in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
        count = i(usage.get(key))
        if count is not None:
            out[key] = count
    provider = by_api(str(summary.get("api") or ""))
    if provider is not None and provider.cache_outside_input and out.get("input_tokens") is not None:
        out["input_tokens"] = (
            (out.get("input_tokens") or 0)
            + (out.get("cache_read_input_tokens") or 0)
            + (out.get("cache_creation_input_tokens") or 0)
        )
    return out


def _payload_objects(resp: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON objects of a response as :func:`recorded_response` gives it: its body, or each
    object of its stream."""
    if resp.get("body") is not None:
        return [resp["body"]] if isinstance(resp["body"], dict) else []
    return [p for _, p in payloads("".join(resp.get("stream") or []))]


def response_id(event: Mapping[str, Any]) -> str | None:
    """The provider's id of the completion (``chatcmpl-…``, ``msg_…``, ``resp_…``, Gemini
    ``responseId``), from the body or the first stream object that carries one. Each object is read
    by the provider that recognizes the call first, then by every other registered provider (a
    proxy's path or a body's shape can mislead recognition; an id is an id)."""
    req = d(event.get("request"))
    provider = _target(
        req.get("url"), coerce_json(req.get("body") if req.get("body_kind") == "json" else None)
    ).provider
    readers = (provider, *(p for p in REGISTRY if p is not provider))
    for obj in _payload_objects(recorded_response(event)):
        for reader in readers:
            found = reader.response_id(obj)
            if found:
                return found
    return None


# --------------------------------------------------------------------------------------------------
# Environment


#: What a replay sets each unset variable of :func:`api_key_vars` to, since the SDKs refuse to start
#: without their key. Never sent upstream: a replay refuses a live call that carries it.
PLACEHOLDER_KEY = "forkpoint-replay-no-key"
