"""Provider-aware understanding of recorded model calls.

forkpoint records model calls at the HTTP boundary, so what it holds is a URL, a parsed JSON request
body, and a response (a JSON body, or the text chunks of a server-sent-events stream). This module
turns that into something a person can read: which provider and API was called, with which model and
sampling settings, how many messages and tools went in, which tool calls and how many tokens came
out, and why the model stopped. Everything here is a pure function over plain data (no I/O, stdlib +
orjson) and never raises on malformed input: what cannot be read is reported as ``None``.

Wire formats understood (field names as the providers document them):

* **OpenAI Chat Completions** — ``POST /v1/chat/completions``
  (platform.openai.com/docs/api-reference/chat). Request ``{model, messages[{role, content: str |
  [{type:"text", text}], tool_calls?}], tools?, temperature?, top_p?, seed?, max_tokens? |
  max_completion_tokens?, stream?}``. Response ``{model, choices[{index, message{content,
  tool_calls[{id, function{name, arguments: str}}]}, finish_reason}], usage{prompt_tokens,
  completion_tokens}}``. Streamed as ``data: <chunk>`` events, chunk ``{model, choices[{index,
  delta{content?, tool_calls?[{index, id?, function{name?, arguments?: fragment}}]},
  finish_reason}], usage}``; with ``stream_options.include_usage`` a final chunk has ``choices: []``
  and the usage; the stream ends with ``data: [DONE]``. Any server with that path (Groq, Together,
  vLLM, Ollama, OpenRouter, Azure ...) is provider ``"openai"``: the provider names the wire
  *shape*; the ``host`` field tells the servers apart.
* **OpenAI Responses** — ``POST /v1/responses`` (platform.openai.com/docs/api-reference/responses).
  Request ``{model, input: str | [item], instructions?, tools?, temperature?, top_p?,
  max_output_tokens?, stream?}``, items ``{role, content}`` / ``{type:"function_call", call_id,
  name, arguments}`` / ``{type:"function_call_output", call_id, output}``. Response ``{model,
  status, incomplete_details{reason}?, output[{type:"message", content[{type:"output_text", text}]}
  | {type:"function_call", call_id, name, arguments}], usage{input_tokens, output_tokens},
  error?}``. Streamed as ``event: <type>`` + ``data: {type, ...}``: ``response.created``,
  ``response.output_item.added``, ``response.output_text.delta``,
  ``response.function_call_arguments.delta``/``.done``, ``response.output_item.done``, and a
  terminal ``response.completed`` / ``response.incomplete`` / ``response.failed`` carrying the full
  response.
* **Anthropic Messages** — ``POST /v1/messages`` (docs.anthropic.com/en/api/messages; streaming in
  docs.anthropic.com/en/docs/build-with-claude/streaming). Request ``{model, max_tokens, system?:
  str | [{type:"text", text}], messages[{role, content: str | [block]}], tools?, temperature?,
  top_p?, stream?}``, blocks ``text`` / ``tool_use{id, name, input}`` / ``tool_result{tool_use_id,
  content}``. Response ``{model, content[block], stop_reason, usage{input_tokens, output_tokens}}``.
  Streamed as ``message_start{message{model, usage}}``, ``content_block_start{index,
  content_block}``, ``content_block_delta{index, delta: text_delta{text} |
  input_json_delta{partial_json}}``, ``content_block_stop``, ``message_delta{delta{stop_reason},
  usage{output_tokens}}`` (cumulative counts), ``message_stop``, ``ping``, and ``error{error{type,
  message}}``. Also reached through Vertex AI as
  ``.../publishers/anthropic/models/{model}:rawPredict`` / ``:streamRawPredict``.
* **Google Gemini** — ``POST /v1beta/models/{model}:generateContent`` and ``:streamGenerateContent``
  (ai.google.dev/api/generate-content). Request ``{contents[{role?, parts[{text} |
  {functionCall{name, args}} | {functionResponse{name, response}}]}], systemInstruction?,
  tools?[{functionDeclarations[...]}], generationConfig?{temperature, topP, seed,
  maxOutputTokens}}`` (the proto snake_case spellings are accepted too). Response
  ``GenerateContentResponse{candidates[{content{role, parts}, finishReason}], usageMetadata{
  promptTokenCount, candidatesTokenCount}, modelVersion, promptFeedback?{blockReason}}``. Streamed
  with ``?alt=sse`` as one ``data: <GenerateContentResponse>`` per chunk, or without it as one JSON
  array of them.

Public API: :func:`parse_sse`, :func:`detect`, :func:`summarize`, :func:`response_text`,
:func:`request_messages`. The response side of all of them goes through one internal assembler
(``_assemble``), so the summary and the timeline text can never disagree.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, TypedDict
from urllib.parse import urlsplit

import orjson

from .log import add_deriver

__all__ = [
    "SUMMARY_KEYS",
    "Message",
    "SSEEvent",
    "Summary",
    "ToolCall",
    "Usage",
    "detect",
    "parse_sse",
    "request_messages",
    "response_text",
    "summarize",
]


# --------------------------------------------------------------------------------------------------
# Public types


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched server-sent event.

    ``event`` is the value of the last ``event:`` field (``None`` when the event had none, where a
    browser would report ``"message"``); ``data`` is the ``data:`` lines joined with ``"\\n"``;
    ``id`` is the last event ID seen so far in the stream (WHATWG keeps it across events), ``None``
    if unset.
    """

    event: str | None
    data: str
    id: str | None


class ToolCall(TypedDict):
    """A tool call the model asked for: ``arguments`` is the raw JSON text the provider sent."""

    id: str | None
    name: str | None
    arguments: str | None


class Usage(TypedDict):
    """Token counts normalized across providers."""

    input_tokens: int | None
    output_tokens: int | None


class Message(TypedDict):
    """An input message normalized for display."""

    role: str
    text: str


class Summary(TypedDict):
    """What :func:`summarize` returns: always exactly these keys, ``None`` when unknown."""

    provider: str
    api: str
    host: str | None
    model: str | None
    response_model: str | None
    temperature: float | None
    top_p: float | None
    seed: int | None
    max_tokens: int | None
    stream: bool
    n_messages: int | None
    n_tools: int | None
    tool_calls: list[ToolCall] | None
    usage: Usage | None
    stop_reason: str | None
    error: str | None


#: The keys of every :func:`summarize` result, in order.
SUMMARY_KEYS: tuple[str, ...] = tuple(Summary.__annotations__)

PROVIDERS: frozenset[str] = frozenset({"openai", "anthropic", "gemini", "unknown"})
APIS: frozenset[str] = frozenset({"chat.completions", "responses", "messages", "generateContent", "unknown"})


# --------------------------------------------------------------------------------------------------
# Small total helpers: each accepts any object and never raises.


def _d(x: object) -> dict[Any, Any]:
    return x if isinstance(x, dict) else {}


def _l(x: object) -> list[Any]:
    return x if isinstance(x, list) else []


def _s(x: object) -> str | None:
    return x if isinstance(x, str) else None


def _i(x: object) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _num(x: object) -> float | None:
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return x


def _first(*values: object) -> object:
    """The first value that is not ``None``."""
    for v in values:
        if v is not None:
            return v
    return None


def _dumps(x: object) -> str | None:
    """Compact JSON text of ``x`` (orjson: no whitespace, key order kept), ``None`` if not JSON
    data."""
    try:
        return orjson.dumps(x).decode()
    except (TypeError, orjson.JSONEncodeError):
        return None


def _loads(x: str | bytes) -> object:
    try:
        return orjson.loads(x)
    except (orjson.JSONDecodeError, TypeError):
        return None


def _coerce_json(x: object) -> object:
    """A request/response body as parsed JSON: JSON text is parsed, ``{"$text": s}`` unwrapped."""
    if isinstance(x, dict) and len(x) == 1 and isinstance(x.get("$text"), str):
        x = x["$text"]
    if isinstance(x, bytes | bytearray):
        x = bytes(x)
    if isinstance(x, str | bytes):
        return _loads(x)
    return x


# --------------------------------------------------------------------------------------------------
# Server-sent events

_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def parse_sse(text: str) -> list[SSEEvent]:
    """Parse a whole ``text/event-stream`` body into events.

    Follows the WHATWG HTML "Server-sent events" parsing rules
    (html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):

    * one leading U+FEFF BOM is dropped; lines end at ``\\r\\n``, ``\\n`` or ``\\r``;
    * a line starting with ``:`` is a comment and ignored;
    * ``field: value`` — one space after the colon is stripped; a line without a colon is a field
      with an empty value; fields other than ``event``, ``data`` and ``id`` (e.g. ``retry``) are
      ignored; an ``id`` containing U+0000 is ignored;
    * ``data`` lines accumulate and are joined with ``"\\n"``;
    * a blank line dispatches the pending event; an event with no ``data`` line at all is not
      dispatched (its ``event`` field is discarded), while ``data:`` with an empty value does
      dispatch an event whose data is ``""``;
    * the last event ID persists across events, as in WHATWG (``id:`` with an empty value clears
      it).

    Chosen deviation at end of input: WHATWG discards an event that is not followed by a blank line.
    Here the input is a *recording* (possibly cut short), so a final unterminated line is processed
    as a line, and a trailing event that has at least one ``data`` line is dispatched; one without
    data is dropped.

    ``text`` is the concatenation of all chunks of the stream (join chunks before calling: a
    ``\\r\\n`` split across two chunks must not count as two line breaks). Non-``str`` input gives
    ``[]``.
    """
    if not isinstance(text, str):
        return []
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = _LINE_BREAK.split(text)
    tail = lines.pop()  # the unterminated remainder, "" if the text ended with a line break
    if tail:
        lines.append(tail)

    events: list[SSEEvent] = []
    data: list[str] = []
    event_type = ""
    last_id = ""

    for line in lines:
        if not line:
            if data:
                events.append(SSEEvent(event_type or None, "\n".join(data), last_id or None))
            data = []
            event_type = ""
            continue
        if line[0] == ":":
            continue
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "data":
            data.append(value)
        elif field == "event":
            event_type = value
        elif field == "id":
            if "\x00" not in value:
                last_id = value
    if data:
        events.append(SSEEvent(event_type or None, "\n".join(data), last_id or None))
    return events


def _join_chunks(chunks: Iterable[object]) -> str:
    parts: list[str] = []
    for c in chunks:
        if isinstance(c, str):
            parts.append(c)
        elif isinstance(c, bytes | bytearray):
            parts.append(bytes(c).decode("utf-8", "replace"))
    return "".join(parts)


_Payload = tuple[str | None, dict[str, Any]]


def _payloads(stream_text: str) -> list[_Payload]:
    """The JSON objects of a recorded stream, with their SSE event names.

    SSE events whose data is not a JSON object (``[DONE]``, truncated JSON) are skipped. A stream
    that holds no SSE event but is one JSON document (Gemini ``:streamGenerateContent`` without
    ``alt=sse`` sends a JSON array of responses) is read as that document's objects.
    """
    events = parse_sse(stream_text)
    out: list[_Payload] = []
    for ev in events:
        obj = _loads(ev.data)
        if isinstance(obj, dict):
            out.append((ev.event, obj))
    if not events:
        doc = _loads(stream_text)
        if isinstance(doc, dict):
            out.append((None, doc))
        else:
            out.extend((None, o) for o in _l(doc) if isinstance(o, dict))
    return out


# --------------------------------------------------------------------------------------------------
# Detection

_MODEL_IN_PATH = re.compile(r"/(?:models|tunedModels)/([^/:]+):")
_AZURE_DEPLOYMENT = re.compile(r"/deployments/([^/]+)/")


class _Target(NamedTuple):
    provider: str
    api: str
    host: str | None
    path: str


def _split_url(url: object) -> tuple[str | None, str]:
    """``(host, path)`` of a URL: host lower-case with ``:port`` if one was given, no
    credentials."""
    if not isinstance(url, str):
        return None, ""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError:
        return None, ""
    if host and port is not None:
        host = f"{host}:{port}"
    return host or None, parts.path


def _api_from_path(path: str) -> tuple[str, str] | None:
    p = path.rstrip("/")
    if p.endswith(":generateContent") or p.endswith(":streamGenerateContent"):
        return "gemini", "generateContent"
    if "/publishers/anthropic/" in p and (p.endswith(":rawPredict") or p.endswith(":streamRawPredict")):
        return "anthropic", "messages"
    if p.endswith("/chat/completions"):
        return "openai", "chat.completions"
    if p.endswith("/responses"):
        return "openai", "responses"
    if p.endswith("/messages") and "/threads/" not in p:  # not OpenAI Assistants' thread messages
        return "anthropic", "messages"
    return None


def _provider_from_host(host: str | None) -> str | None:
    if not host:
        return None
    name = host.split(":", 1)[0]
    if name == "anthropic.com" or name.endswith(".anthropic.com"):
        return "anthropic"
    if name.endswith("generativelanguage.googleapis.com") or name.endswith("aiplatform.googleapis.com"):
        return "gemini"
    if name == "openai.com" or name.endswith(".openai.com") or name.endswith(".openai.azure.com"):
        return "openai"
    return None


def _api_from_body(body: object) -> tuple[str, str] | None:
    """Guess from the request shape alone (used only for unknown hosts at unknown paths)."""
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("contents"), list):
        return "gemini", "generateContent"
    if isinstance(body.get("messages"), list):
        anthropic_blocks = any(
            _d(block).get("type") in ("tool_use", "tool_result")
            for m in body["messages"]
            for block in _l(_d(m).get("content"))
        )
        if anthropic_blocks or "system" in body or "anthropic_version" in body:
            return "anthropic", "messages"
        return "openai", "chat.completions"
    if "input" in body and ("model" in body or "instructions" in body):
        return "openai", "responses"
    return None


def _target(url: object, body: object) -> _Target:
    host, path = _split_url(url)
    found = _api_from_path(path)
    if found is None:
        by_host = _provider_from_host(host)
        if by_host is not None:
            found = (by_host, "unknown")
        elif "count_tokens" not in path and "countTokens" not in path:
            found = _api_from_body(body)
    provider, api = found or ("unknown", "unknown")
    return _Target(provider, api, host, path)


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
    for unknown hosts at unknown paths by the shape of the parsed request ``body`` (``contents`` →
    Gemini; ``messages`` → Anthropic if it has ``system``/``anthropic_version``/``tool_use`` or
    ``tool_result`` blocks, else Chat Completions; ``input`` + ``model`` → Responses).
    """
    t = _target(url, _coerce_json(body))
    return t.provider, t.api


# --------------------------------------------------------------------------------------------------
# Response assembly: one function per API and transport, all returning _Assembled.


class _Assembled(NamedTuple):
    text: str | None
    tool_calls: list[ToolCall] | None  # None: no recognizable response; []: read, no tool call
    usage: Usage | None
    stop_reason: str | None
    response_model: str | None
    error: str | None


_NOTHING = _Assembled(None, None, None, None, None, None)


def _usage(u: object) -> Usage | None:
    """Normalize a usage object of any of the four APIs; ``None`` if ``u`` is not an object."""
    if not isinstance(u, dict):
        return None
    return {
        "input_tokens": _i(_first(u.get("prompt_tokens"), u.get("input_tokens"), u.get("promptTokenCount"))),
        "output_tokens": _i(
            _first(u.get("completion_tokens"), u.get("output_tokens"), u.get("candidatesTokenCount"))
        ),
    }


def _error_of(obj: object, loose: bool = False) -> str | None:
    """The message of a provider error object: ``{"error": {"message": ...}}`` in all four APIs
    (Anthropic adds ``"type": "error"``), a bare ``{"type": "error", "message": ...}`` as in
    Responses stream ``error`` events, or ``{"message"|"detail": str}`` from gateways."""
    o = _d(obj)
    err = o.get("error")
    if isinstance(err, str) and err:
        return err
    if isinstance(err, dict):
        msg = _first(_s(err.get("message")), _s(err.get("type")), _s(err.get("code")), _s(err.get("status")))
        if isinstance(msg, str):
            return msg
    if loose or o.get("type") == "error":
        return _s(o.get("message")) or _s(o.get("detail"))
    return None


def _join(parts: list[str] | None) -> str | None:
    return None if parts is None else "".join(parts)


def _text_of_content(content: object) -> list[str] | None:
    """Text pieces of a response ``content`` that is a string or a list of text parts."""
    if isinstance(content, str):
        return [content]
    pieces = [
        p["text"]
        for p in _l(content)
        if isinstance(p, dict) and p.get("type") in ("text", "output_text") and isinstance(p.get("text"), str)
    ]
    return pieces or None


def _chat_call(tc: object) -> ToolCall:
    tc = _d(tc)
    fn = _d(_first(tc.get("function"), tc.get("custom")))
    args = _first(fn.get("arguments"), fn.get("input"))
    return {
        "id": _s(tc.get("id")),
        "name": _s(fn.get("name")),
        "arguments": args if isinstance(args, str) else _dumps(args) if args is not None else None,
    }


def _chat_choice(choices: object, stream: bool = False) -> dict[Any, Any]:
    """The choice with index 0: summaries follow the first choice only. A body without one falls
    back to its first choice; a stream chunk without one has nothing for choice 0 (``{}``)."""
    cs = [c for c in _l(choices) if isinstance(c, dict)]
    for c in cs:
        if _i(c.get("index")) in (0, None):
            return c
    return cs[0] if cs and not stream else {}


def _chat_body(body: dict[str, Any]) -> _Assembled:
    if not isinstance(body.get("choices"), list):
        return _NOTHING
    choice = _chat_choice(body["choices"])
    msg = _d(choice.get("message"))
    calls = [_chat_call(tc) for tc in _l(msg.get("tool_calls"))]
    legacy = _d(msg.get("function_call"))
    if legacy:
        calls.append(_chat_call({"function": legacy}))
    return _Assembled(
        _join(_text_of_content(msg.get("content"))),
        calls,
        _usage(body.get("usage")),
        _s(choice.get("finish_reason")),
        _s(body.get("model")),
        None,
    )


class _CallAcc:
    """A tool call being assembled from stream fragments."""

    __slots__ = ("id", "name", "args", "obj")

    def __init__(self, id: str | None = None, name: str | None = None) -> None:
        self.id = id
        self.name = name
        self.args: list[str] = []
        self.obj: object = None  # a complete arguments object, when the stream sent one

    def add_name(self, name: object) -> None:
        # OpenAI sends the whole name once; some compatible servers repeat it in every chunk.
        if isinstance(name, str) and name and name != self.name:
            self.name = name if self.name is None else self.name + name

    def result(self) -> ToolCall:
        args = "".join(self.args)
        if not args and self.obj is not None:
            args = _dumps(self.obj) or ""
        return {"id": self.id, "name": self.name, "arguments": args}


def _chat_stream(payloads: list[_Payload]) -> _Assembled:
    text: list[str] | None = None
    calls: dict[int, _CallAcc] = {}
    usage: Usage | None = None
    stop = model = error = None
    seen = False
    for _, p in payloads:
        if p.get("error"):
            error = error or _error_of(p)
            continue
        if not isinstance(p.get("choices"), list):
            continue
        seen = True
        model = model or _s(p.get("model"))
        if isinstance(p.get("usage"), dict):
            usage = _usage(p["usage"])
        choice = _chat_choice(p["choices"], stream=True)
        delta = _d(choice.get("delta"))
        content = delta.get("content")
        if isinstance(content, str):
            text = text if text is not None else []
            text.append(content)
        for pos, tc in enumerate(_l(delta.get("tool_calls"))):
            tc = _d(tc)
            key = _i(tc.get("index"))
            acc = calls.setdefault(pos if key is None else key, _CallAcc())
            acc.id = acc.id or _s(tc.get("id"))
            fn = _d(tc.get("function"))
            acc.add_name(fn.get("name"))
            frag = fn.get("arguments")
            if isinstance(frag, str):
                acc.args.append(frag)
            elif frag is not None:
                acc.obj = frag
        legacy = _d(delta.get("function_call"))
        if legacy:
            acc = calls.setdefault(-1, _CallAcc())
            acc.add_name(legacy.get("name"))
            if isinstance(legacy.get("arguments"), str):
                acc.args.append(legacy["arguments"])
        stop = _s(choice.get("finish_reason")) or stop
    if not seen:
        return _NOTHING._replace(error=error)
    tool_calls = [calls[k].result() for k in sorted(calls)]
    return _Assembled(_join(text), tool_calls, usage, stop, model, error)


def _anthropic_body(body: dict[str, Any]) -> _Assembled:
    if not isinstance(body.get("content"), list) and body.get("type") != "message":
        return _NOTHING
    text: list[str] | None = None
    calls: list[ToolCall] = []
    for block in _l(body.get("content")):
        block = _d(block)
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            text = text if text is not None else []
            text.append(block["text"])
        elif block.get("type") == "tool_use":
            inp = block.get("input")
            calls.append({"id": _s(block.get("id")), "name": _s(block.get("name")), "arguments": _dumps(inp)})
    return _Assembled(
        _join(text),
        calls,
        _usage(body.get("usage")),
        _s(body.get("stop_reason")),
        _s(body.get("model")),
        None,
    )


def _anthropic_stream(payloads: list[_Payload]) -> _Assembled:
    blocks: dict[int, tuple[str | None, list[str], _CallAcc]] = {}
    start_usage: dict[Any, Any] | None = None
    delta_usage: dict[Any, Any] | None = None
    stop = model = error = None
    seen = False
    for event, p in payloads:
        kind = _s(p.get("type")) or event
        if kind == "error":
            error = error or _error_of(p)
        elif kind == "message_start":
            seen = True
            msg = _d(p.get("message"))
            model = _s(msg.get("model")) or model
            stop = _s(msg.get("stop_reason")) or stop
            if isinstance(msg.get("usage"), dict):
                start_usage = msg["usage"]
        elif kind == "content_block_start":
            seen = True
            cb = _d(p.get("content_block"))
            acc = _CallAcc(_s(cb.get("id")), _s(cb.get("name")))
            acc.obj = cb.get("input")
            first = cb.get("text")
            blocks[_i(p.get("index")) or 0] = (
                _s(cb.get("type")),
                [first] if isinstance(first, str) else [],
                acc,
            )
        elif kind == "content_block_delta":
            seen = True
            idx = _i(p.get("index")) or 0
            d = _d(p.get("delta"))
            if idx not in blocks:  # a delta without its start (cut recording): infer the type
                blocks[idx] = ("text" if d.get("type") == "text_delta" else None, [], _CallAcc())
            _, text_parts, acc = blocks[idx]
            if d.get("type") == "text_delta" and isinstance(d.get("text"), str):
                text_parts.append(d["text"])
            elif d.get("type") == "input_json_delta" and isinstance(d.get("partial_json"), str):
                acc.args.append(d["partial_json"])
        elif kind == "message_delta":
            seen = True
            stop = _s(_d(p.get("delta")).get("stop_reason")) or stop
            if isinstance(p.get("usage"), dict):
                delta_usage = p["usage"]
    if not seen:
        return _NOTHING._replace(error=error)
    text: list[str] | None = None
    calls: list[ToolCall] = []
    for idx in sorted(blocks):
        kind, text_parts, acc = blocks[idx]
        if kind == "text":
            text = text if text is not None else []
            text.extend(text_parts)
        elif kind == "tool_use":
            # The concatenated partial_json as sent; a tool without arguments may stream none at
            # all, and then the content_block_start input ({}) is what the model asked for.
            calls.append(acc.result())
    usage: Usage | None = None
    if start_usage is not None or delta_usage is not None:
        # message_delta usage is cumulative, so it wins where it has a count.
        none: Usage = {"input_tokens": None, "output_tokens": None}
        first, last = _usage(start_usage) or none, _usage(delta_usage) or none
        usage = {
            "input_tokens": _i(_first(last["input_tokens"], first["input_tokens"])),
            "output_tokens": _i(_first(last["output_tokens"], first["output_tokens"])),
        }
    return _Assembled(_join(text), calls, usage, stop, model, error)


def _responses_stop(resp: dict[str, Any]) -> str | None:
    status = _s(resp.get("status"))
    if status == "incomplete":
        return _s(_d(resp.get("incomplete_details")).get("reason")) or status
    return status


def _responses_item_call(item: dict[Any, Any]) -> ToolCall | None:
    kind = item.get("type")
    if kind not in ("function_call", "custom_tool_call"):
        return None
    args = item.get("arguments") if kind == "function_call" else item.get("input")
    return {
        "id": _s(_first(item.get("call_id"), item.get("id"))),
        "name": _s(item.get("name")),
        "arguments": _s(args),
    }


def _responses_item_text(item: dict[Any, Any]) -> list[str] | None:
    if item.get("type") != "message":
        return None
    return _text_of_content(item.get("content"))


def _responses_body(body: dict[str, Any]) -> _Assembled:
    if not isinstance(body.get("output"), list) and body.get("object") != "response":
        return _NOTHING
    text: list[str] | None = None
    calls: list[ToolCall] = []
    for item in _l(body.get("output")):
        item = _d(item)
        pieces = _responses_item_text(item)
        if pieces is not None:
            text = text if text is not None else []
            text.extend(pieces)
        call = _responses_item_call(item)
        if call is not None:
            calls.append(call)
    return _Assembled(
        _join(text),
        calls,
        _usage(body.get("usage")),
        _responses_stop(body),
        _s(body.get("model")),
        _error_of(body),
    )


_RESPONSES_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def _responses_stream(payloads: list[_Payload]) -> _Assembled:
    final: dict[str, Any] | None = None
    latest: dict[Any, Any] = {}
    items: dict[int, dict[Any, Any]] = {}
    args: dict[int, list[str]] = {}
    texts: dict[int, list[str]] = {}
    error = None
    for event, p in payloads:
        kind = _s(p.get("type")) or event
        if kind == "error":
            error = error or _error_of(p)
            continue
        if isinstance(p.get("response"), dict):
            latest = p["response"]
            if kind in _RESPONSES_TERMINAL:
                final = latest
        idx = _i(p.get("output_index"))
        if idx is None:
            continue
        if kind in ("response.output_item.added", "response.output_item.done"):
            items[idx] = _d(p.get("item"))
        elif kind == "response.function_call_arguments.delta" and isinstance(p.get("delta"), str):
            args.setdefault(idx, []).append(p["delta"])
        elif kind == "response.function_call_arguments.done" and isinstance(p.get("arguments"), str):
            args[idx] = [p["arguments"]]
        elif kind == "response.output_text.delta" and isinstance(p.get("delta"), str):
            texts.setdefault(idx, []).append(p["delta"])
    if final is not None:
        # The terminal event carries the whole response, exactly as the non-streamed body would.
        assembled = _responses_body(final)
        return assembled._replace(error=assembled.error or error)
    if not latest and not items:
        return _NOTHING._replace(error=error)
    # Cut-off stream: rebuild what the deltas say.
    text: list[str] | None = None
    calls: list[ToolCall] = []
    for idx in sorted(items.keys() | texts.keys()):
        item = items.get(idx, {})
        done_text = _responses_item_text(item)
        if done_text or idx in texts:
            text = text if text is not None else []
            text.extend(done_text or texts[idx])
        call = _responses_item_call(item)
        if call is not None:
            if not call["arguments"] and idx in args:
                call["arguments"] = "".join(args[idx])
            calls.append(call)
    return _Assembled(
        _join(text),
        calls,
        _usage(latest.get("usage")),
        _responses_stop(latest),
        _s(latest.get("model")),
        error or _error_of(latest),
    )


def _gemini_chunks(chunks: list[dict[str, Any]]) -> _Assembled:
    text: list[str] | None = None
    calls: list[ToolCall] = []
    usage: Usage | None = None
    stop = model = error = None
    seen = False
    for chunk in chunks:
        if chunk.get("error"):
            error = error or _error_of(chunk)
            continue
        if not any(k in chunk for k in ("candidates", "usageMetadata", "promptFeedback", "modelVersion")):
            continue
        seen = True
        model = _s(chunk.get("modelVersion")) or model
        if isinstance(chunk.get("usageMetadata"), dict):
            usage = _usage(chunk["usageMetadata"])  # cumulative: the last one wins
        cands = [c for c in _l(chunk.get("candidates")) if isinstance(c, dict)]
        cand = next((c for c in cands if _i(c.get("index")) in (0, None)), {})
        for part in _l(_d(cand.get("content")).get("parts")):
            part = _d(part)
            if isinstance(part.get("text"), str) and not part.get("thought"):
                text = text if text is not None else []
                text.append(part["text"])
            fc = part.get("functionCall")
            if isinstance(fc, dict):
                calls.append(
                    {
                        "id": _s(fc.get("id")),
                        "name": _s(fc.get("name")),
                        "arguments": _dumps(fc.get("args", {})),
                    }
                )
        stop = _s(cand.get("finishReason")) or stop
        stop = stop or _s(_d(chunk.get("promptFeedback")).get("blockReason"))
    if not seen:
        return _NOTHING._replace(error=error)
    return _Assembled(_join(text), calls, usage, stop, model, error)


def _gemini_body(body: dict[str, Any]) -> _Assembled:
    return _gemini_chunks([body])


def _gemini_stream(payloads: list[_Payload]) -> _Assembled:
    return _gemini_chunks([p for _, p in payloads])


_BODY: dict[str, Callable[[dict[str, Any]], _Assembled]] = {
    "chat.completions": _chat_body,
    "responses": _responses_body,
    "messages": _anthropic_body,
    "generateContent": _gemini_body,
}
_STREAM: dict[str, Callable[[list[_Payload]], _Assembled]] = {
    "chat.completions": _chat_stream,
    "responses": _responses_stream,
    "messages": _anthropic_stream,
    "generateContent": _gemini_stream,
}


def _http_error(status: int, body: object, stream_text: str | None, raw: object) -> str:
    msg = _error_of(body, loose=True)
    for item in _l(body):  # Gemini :streamGenerateContent errors come as [{"error": {...}}]
        msg = msg or _error_of(item, loose=True)
    if msg is None and stream_text:
        msg = next((m for _, p in _payloads(stream_text) if (m := _error_of(p))), None)
    if msg is None and isinstance(raw, str) and raw.strip():
        msg = raw.strip()[:500]
    return msg or f"HTTP {status}"


def _assemble(api: str, response: object) -> _Assembled:
    """Everything the response says, for the given API: the single source of truth for both
    :func:`summarize` and :func:`response_text`.

    ``response`` is ``{"status": int, "body": <parsed JSON or None>, "stream": [str, ...] | None}``.
    A non-empty ``stream`` is joined and read as SSE; a ``body`` that is JSON text is parsed, and
    one that is not JSON but looks like SSE is read as a stream.
    """
    resp = _d(response)
    status = _i(resp.get("status"))
    raw = resp.get("body")
    body = _coerce_json(raw)
    stream = resp.get("stream")
    stream_text = _join_chunks(stream) if isinstance(stream, list) and stream else None
    if stream_text is None and body is None and isinstance(raw, str) and "data:" in raw:
        stream_text = raw
    if status is not None and status >= 400:
        return _NOTHING._replace(error=_http_error(status, body, stream_text, raw))
    if stream_text is not None and api in _STREAM:
        return _STREAM[api](_payloads(stream_text))
    if api == "generateContent" and isinstance(body, list):
        return _gemini_chunks([c for c in body if isinstance(c, dict)])
    if isinstance(body, dict):
        assembled = _BODY[api](body) if api in _BODY else _NOTHING
        return assembled._replace(error=assembled.error or _error_of(body))
    return _NOTHING


# --------------------------------------------------------------------------------------------------
# Request side


def _gen_config(body: dict[Any, Any]) -> dict[Any, Any]:
    return _d(_first(body.get("generationConfig"), body.get("generation_config")))


def _count_tools(api: str, body: dict[Any, Any]) -> int:
    tools = _l(body.get("tools"))
    if api != "generateContent":
        return len(tools) + len(_l(body.get("functions")))  # + Chat Completions' legacy functions
    n = 0
    for tool in tools:
        decls = _first(_d(tool).get("functionDeclarations"), _d(tool).get("function_declarations"))
        n += len(decls) if isinstance(decls, list) else 1  # googleSearch, codeExecution, ... count 1
    return n


def _count_messages(api: str, body: dict[Any, Any]) -> int | None:
    if api == "generateContent":
        contents = body.get("contents")
        return len(contents) if isinstance(contents, list) else 1 if isinstance(contents, dict) else None
    if api == "responses":
        inp = body.get("input")
        return 1 if isinstance(inp, str) else len(inp) if isinstance(inp, list) else None
    messages = body.get("messages")
    return len(messages) if isinstance(messages, list) else None


def _request_model(t: _Target, body: dict[Any, Any]) -> str | None:
    model = _s(body.get("model"))
    if model:
        return model
    m = _MODEL_IN_PATH.search(t.path) or _AZURE_DEPLOYMENT.search(t.path)
    return m.group(1) if m else None


def summarize(url: str, request_body: object, response: dict[str, Any]) -> Summary:
    """The provider-aware summary stored with each recorded model call.

    ``request_body`` is the parsed JSON request body (JSON text and ``{"$text": str}`` are parsed
    too; anything else that is not an object gives ``None`` request fields). ``response`` is
    ``{"status": int, "body": <parsed JSON or None>, "stream": [str, ...] | None}``, ``stream``
    holding the decoded text chunks of an SSE response in order, at arbitrary boundaries.

    Returns exactly the keys of :data:`SUMMARY_KEYS` (``None`` when unknown or absent):

    * ``provider``, ``api`` — see :func:`detect`; ``host`` — the URL's host (``:port`` if given);
    * ``model`` — the request's ``model`` (Gemini and Vertex: ``models/{model}:...`` in the path;
      Azure: the deployment); ``response_model`` — the model the response reports (Gemini:
      ``modelVersion``);
    * ``temperature``, ``top_p``, ``seed``, ``max_tokens`` — from the request (``max_tokens``,
      ``max_completion_tokens`` or ``max_output_tokens``; Gemini: ``generationConfig.temperature``,
      ``topP``, ``seed``, ``maxOutputTokens``);
    * ``stream`` — ``True`` if the request asked to stream (``"stream": true``,
      ``:streamGenerateContent``) or the response was recorded as a stream;
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
    * ``error`` — for status >= 400 the provider's error message (``"HTTP <status>"`` when the body
      has none). Also set for an error the provider reported with status 200: an ``error`` event in
      a stream (e.g. Anthropic ``overloaded_error`` mid-stream, Responses ``response.failed``) or an
      ``error`` object in the body.

    Chat Completions and Gemini responses with several choices/candidates are summarized from the
    first one (index 0). Never raises on malformed input.
    """
    req = _coerce_json(request_body)
    t = _target(url, req)
    body = req if isinstance(req, dict) else None
    a = _assemble(t.api, response)
    resp_stream = _d(response).get("stream")

    out: Summary = {
        "provider": t.provider,
        "api": t.api,
        "host": t.host,
        "model": None,
        "response_model": a.response_model,
        "temperature": None,
        "top_p": None,
        "seed": None,
        "max_tokens": None,
        "stream": isinstance(resp_stream, list)
        or t.path.endswith(":streamGenerateContent")
        or t.path.endswith(":streamRawPredict")
        or (body is not None and body.get("stream") is True),
        "n_messages": None,
        "n_tools": None,
        "tool_calls": a.tool_calls,
        "usage": a.usage,
        "stop_reason": a.stop_reason,
        "error": a.error,
    }
    if body is not None:
        src = _gen_config(body) if t.api == "generateContent" else body
        out["model"] = _request_model(t, body)
        out["temperature"] = _num(src.get("temperature"))
        out["top_p"] = _num(_first(src.get("top_p"), src.get("topP")))
        out["seed"] = _i(src.get("seed"))
        out["max_tokens"] = _i(
            _first(
                src.get("max_tokens"),
                src.get("max_completion_tokens"),
                src.get("max_output_tokens"),
                src.get("maxOutputTokens"),
            )
        )
        out["n_messages"] = _count_messages(t.api, body)
        out["n_tools"] = _count_tools(t.api, body)
    else:
        out["model"] = _request_model(t, {})
    return out


def response_text(url: str, response: dict[str, Any]) -> str | None:
    """The assistant's text output: all text parts (not tool calls, not thinking) concatenated, read
    from the body or assembled from the stream exactly as :func:`summarize` does. ``None`` when the
    response holds no text part (e.g. only a tool call) or could not be read."""
    return _assemble(_target(url, None).api, response).text


def _parts_text(content: object) -> str:
    """Display text of a message ``content`` in any of the four request formats.

    A string is itself; a Gemini ``Content`` is its ``parts``; a list concatenates its text parts (``{"type": "text" | "input_text" |
    "output_text", "text"}``, Gemini ``{"text"}``), Anthropic ``tool_result`` blocks (their own
    content, recursively) and Gemini ``functionResponse`` parts (the response, as compact JSON).
    Images, tool calls and thinking are left out.
    """
    if isinstance(content, str):
        return content
    if isinstance(content, dict):  # a Gemini Content {"role", "parts"}, or a single part
        content = content["parts"] if isinstance(content.get("parts"), list) else [content]
    out: list[str] = []
    for part in _l(content):
        if isinstance(part, str):
            out.append(part)
            continue
        part = _d(part)
        kind = part.get("type")
        if kind == "tool_result":
            out.append(_parts_text(part.get("content")))
        elif isinstance(part.get("functionResponse"), dict):
            out.append(_dumps(part["functionResponse"].get("response")) or "")
        elif kind in (None, "text", "input_text", "output_text") and isinstance(part.get("text"), str):
            if not part.get("thought"):
                out.append(part["text"])
    return "".join(out)


def _role(x: object, default: str = "unknown") -> str:
    return x if isinstance(x, str) and x else default


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

    Unknown formats give ``[]``; never raises.
    """
    req = _coerce_json(request_body)
    body = _d(req)
    api = _target(url, req).api
    out: list[Message] = []

    def system(content: object) -> None:
        text = _parts_text(content)
        if text:
            out.append({"role": "system", "text": text})

    if api == "generateContent":
        system(_first(body.get("systemInstruction"), body.get("system_instruction")))
        contents = body.get("contents")
        for c in [contents] if isinstance(contents, dict) else _l(contents):
            c = _d(c)
            role = _role(c.get("role"), "user")
            out.append(
                {
                    "role": "assistant" if role == "model" else role,
                    "text": _parts_text(c.get("parts")),
                }
            )
    elif api == "responses":
        system(body.get("instructions"))
        inp = body.get("input")
        if isinstance(inp, str):
            out.append({"role": "user", "text": inp})
        for item in _l(inp):
            item = _d(item)
            kind = item.get("type")
            if "role" in item and kind in (None, "message"):
                out.append({"role": _role(item.get("role")), "text": _parts_text(item.get("content"))})
            elif kind in ("function_call", "custom_tool_call"):
                out.append({"role": "assistant", "text": ""})
            elif kind in ("function_call_output", "custom_tool_call_output"):
                out.append({"role": "tool", "text": _parts_text(item.get("output"))})
    elif api in ("messages", "chat.completions") or isinstance(body.get("messages"), list):
        if api == "messages":
            system(body.get("system"))
        for m in _l(body.get("messages")):
            m = _d(m)
            out.append({"role": _role(m.get("role")), "text": _parts_text(m.get("content"))})
    return out


def recorded_response(event: dict[str, Any]) -> dict[str, Any]:
    """The ``response`` argument of :func:`summarize` / :func:`response_text` for a recorded
    ``model_call`` event (see docs/format.md): status, parsed JSON body, or the stream's text chunks."""
    resp = event.get("response") or {}
    kind = resp.get("body_kind")
    return {
        "status": resp.get("status"),
        "body": resp.get("body") if kind == "json" else None,
        "stream": [
            c if isinstance(c, str) else c.decode("utf-8", "replace") for _, c in resp.get("chunks", [])
        ]
        if kind == "stream"
        else None,
    }


def summary(event: Mapping[str, Any]) -> Summary:
    """The provider-aware summary of a recorded model call (:func:`summarize` of its request and
    response): the one the event carries (derived when it was loaded, or stored by an importer),
    else derived now (and not kept: an event being recorded is written without it)."""
    found = event.get("summary")
    if isinstance(found, dict):
        return found  # type: ignore[return-value]
    req = event["request"]
    return summarize(
        req["url"], req["body"] if req.get("body_kind") == "json" else None, recorded_response(event)
    )


def _derive_summary(event: dict[str, Any]) -> None:
    """Add a model call's ``summary`` as a session is loaded (handed to the log: it is derived, not
    stored; an importer's own is kept)."""
    if (
        event.get("type") == "model_call"
        and "summary" not in event
        and isinstance(event.get("request"), dict)
    ):
        try:
            event["summary"] = summary(event)
        except (KeyError, TypeError, AttributeError):  # a hand-made or foreign event: no summary
            pass


add_deriver(_derive_summary)
