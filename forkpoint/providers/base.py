"""The :class:`Provider` interface, the normalized types, and the helpers every wire format shares.

A provider here is a *wire format* (OpenAI Chat Completions, Anthropic Messages, ...), not a company:
one object that knows everything forkpoint needs to know about that format, from recognizing a
request to rewriting a recorded response. :mod:`forkpoint.providers` holds the registry and the
functions the rest of forkpoint calls; they find the provider that recognizes a call and ask it.

The base class is also the reading of a request that no provider recognizes: its defaults are
the tolerant, format-agnostic reading forkpoint has always applied to such requests (a top-level
``model``, ``messages``, ``tools``; error objects; usage under any of the common spellings). A
provider overrides what its format does differently.

Everything here is a pure function over plain data (no I/O, stdlib + orjson) and never raises on
malformed input: what cannot be read is ``None`` (or empty).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypedDict

import orjson

from ..canonical import maybe_json as maybe_json  # (the providers' readers' name for it)
from ..deltalist import json_default
from ..events import Summary, ToolCallSummary, Usage
from ..patterns import compiled_later

__all__ = [
    "NOTHING",
    "Message",
    "Payload",
    "Provider",
    "ResponseFields",
    "SSEEvent",
    "Sampling",
    "Summary",
    "ToolCallSummary",
    "UNRECOGNIZED",
    "Usage",
    "parse_sse",
]

# --------------------------------------------------------------------------------------------------
# Types


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


class Message(TypedDict):
    """An input message normalized for display."""

    role: str
    text: str


#: One JSON object of a recorded stream, with the name of the SSE event that carried it.
Payload = tuple[str | None, dict[str, Any]]


class ResponseFields(NamedTuple):
    """Everything a response says, as a provider reads it from a whole body or a stream: the one
    source of both :func:`~forkpoint.providers.summarize` and
    :func:`~forkpoint.providers.response_text`, so the two can never disagree."""

    text: str | None
    tool_calls: list[ToolCallSummary] | None  # None: no recognizable response; []: read, no tool call
    usage: Usage | None
    stop_reason: str | None
    response_model: str | None
    error: str | None
    #: Tools the provider ran itself (Anthropic ``server_tool_use``); None when it reports none.
    server_tool_calls: list[ToolCallSummary] | None = None
    #: The thinking the model showed (Anthropic ``thinking`` blocks, Gemini ``thought`` parts,
    #: Bedrock ``reasoningContent``, Responses ``reasoning`` summaries, Chat ``reasoning_content``),
    #: concatenated; None when it showed none (an encrypted or redacted thought has no text).
    reasoning: str | None = None


#: A response with nothing recognizable in it.
NOTHING = ResponseFields(None, None, None, None, None, None)


class Sampling(NamedTuple):
    """The sampling settings of a request (``None`` when not given)."""

    temperature: float | None
    top_p: float | None
    seed: int | None
    max_tokens: int | None


#: A tool call an override puts into a response: ``arguments`` is JSON text of an object.
NewToolCall = Mapping[str, str]


# --------------------------------------------------------------------------------------------------
# Small total helpers: each accepts any object and never raises.


def d(x: object) -> dict[Any, Any]:
    """``x`` if it is a dict, else ``{}``."""
    return x if isinstance(x, dict) else {}


def lst(x: object) -> list[Any]:
    """``x`` if it is a list, else ``[]``."""
    return x if isinstance(x, list) else []


def s(x: object) -> str | None:
    """``x`` if it is a string, else ``None``."""
    return x if isinstance(x, str) else None


def i(x: object) -> int | None:
    """``x`` if it is an int (not a bool), else ``None``."""
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def num(x: object) -> float | None:
    """``x`` if it is a number (not a bool), else ``None``."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return x


def first(*values: object) -> object:
    """The first value that is not ``None``."""
    for v in values:
        if v is not None:
            return v
    return None


def dumps(x: object) -> str | None:
    """Compact JSON text of ``x`` (orjson: no whitespace, key order kept), ``None`` if not JSON
    data."""
    try:
        return orjson.dumps(x, default=json_default).decode()
    except (TypeError, orjson.JSONEncodeError):
        return None


def loads(x: str | bytes) -> object:
    """Parsed JSON, ``None`` if ``x`` is not JSON text."""
    try:
        return orjson.loads(x)
    except (orjson.JSONDecodeError, TypeError):
        return None


def coerce_json(x: object) -> object:
    """A request/response body as parsed JSON: JSON text is parsed, ``{"$text": s}`` unwrapped."""
    if isinstance(x, dict) and len(x) == 1 and isinstance(x.get("$text"), str):
        x = x["$text"]
    if isinstance(x, bytes | bytearray):
        x = bytes(x)
    if isinstance(x, str | bytes):
        return loads(x)
    return x


def join(parts: list[str] | None) -> str | None:
    """The pieces concatenated; ``None`` stays ``None`` (no text part at all)."""
    return None if parts is None else "".join(parts)


# --------------------------------------------------------------------------------------------------
# Server-sent events

_LINE_BREAK = compiled_later(r"\r\n|\r|\n")


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


def join_chunks(chunks: Iterable[object]) -> str:
    """The text of a recorded stream: its ``str`` chunks (``bytes`` decoded as UTF-8) joined."""
    parts: list[str] = []
    for c in chunks:
        if isinstance(c, str):
            parts.append(c)
        elif isinstance(c, bytes | bytearray):
            parts.append(bytes(c).decode("utf-8", "replace"))
    return "".join(parts)


def payloads(stream_text: str) -> list[Payload]:
    """The JSON objects of a recorded stream, with their SSE event names.

    SSE events whose data is not a JSON object (``[DONE]``, truncated JSON) are skipped. A stream
    that holds no SSE event but is one JSON document (Gemini ``:streamGenerateContent`` without
    ``alt=sse`` sends a JSON array of responses) is read as that document's objects.
    """
    events = parse_sse(stream_text)
    out: list[Payload] = []
    for ev in events:
        obj = loads(ev.data)
        if isinstance(obj, dict):
            out.append((ev.event, obj))
    if not events:
        doc = loads(stream_text)
        if isinstance(doc, dict):
            out.append((None, doc))
        else:
            out.extend((None, o) for o in lst(doc) if isinstance(o, dict))
    return out


def sse_objects(stream_text: str) -> list[dict[str, Any]]:
    """The JSON objects carried by the SSE events of ``stream_text`` (only SSE: no JSON-document
    fallback), in order: what an override rewrites a stream from."""
    out: list[dict[str, Any]] = []
    for ev in parse_sse(stream_text):
        try:
            obj = orjson.loads(ev.data)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def sse(data: Any, event: str | None = None) -> str:
    """One SSE event as text: ``event: …`` (when given) and ``data: <JSON>`` (a string as is)."""
    payload = data if isinstance(data, str) else orjson.dumps(data, default=json_default).decode()
    return (f"event: {event}\n" if event else "") + f"data: {payload}\n\n"


# --------------------------------------------------------------------------------------------------
# Reading helpers shared by several formats


def read_usage(u: object) -> Usage | None:
    """Token counts from a usage object in any of the built-in spellings (OpenAI-compatible servers
    mix them): ``prompt_tokens``/``completion_tokens``, ``input_tokens``/``output_tokens``,
    ``promptTokenCount``/``candidatesTokenCount`` (plus Gemini's ``thoughtsTokenCount``, which it
    counts apart: the output includes the thinking, as OpenAI's and Anthropic's counts do); and,
    when reported, the prompt-cache counts:
    ``cache_read_input_tokens`` from Anthropic's field of that name, OpenAI's
    ``prompt_tokens_details.cached_tokens`` / ``input_tokens_details.cached_tokens`` or Gemini's
    ``cachedContentTokenCount``; ``cache_creation_input_tokens`` from Anthropic's field of that name
    or ``input_tokens_details.cache_write_tokens``. ``None`` if ``u`` is not an object."""
    if not isinstance(u, dict):
        return None
    output = i(first(u.get("completion_tokens"), u.get("output_tokens"), u.get("candidatesTokenCount")))
    thoughts = i(u.get("thoughtsTokenCount"))
    if thoughts is not None and thoughts > 0 and "completion_tokens" not in u and "output_tokens" not in u:
        # Gemini counts the thinking apart from the answer; the others' output counts include it
        output = (output or 0) + thoughts
    usage: Usage = {
        "input_tokens": i(first(u.get("prompt_tokens"), u.get("input_tokens"), u.get("promptTokenCount"))),
        "output_tokens": output,
    }
    details = d(first(u.get("prompt_tokens_details"), u.get("input_tokens_details")))
    cache_read = i(
        first(
            u.get("cache_read_input_tokens"), details.get("cached_tokens"), u.get("cachedContentTokenCount")
        )
    )
    cache_creation = i(first(u.get("cache_creation_input_tokens"), details.get("cache_write_tokens")))
    # Only the counts the provider reported: a usage without cache fields reads as before.
    if cache_read is not None:
        usage["cache_read_input_tokens"] = cache_read
    if cache_creation is not None:
        usage["cache_creation_input_tokens"] = cache_creation
    return usage


def read_sampling(src: Mapping[Any, Any]) -> Sampling:
    """The sampling settings of an object that holds them, under any of the built-in spellings
    (``top_p``/``topP``; ``max_tokens``, ``max_completion_tokens``, ``max_output_tokens``,
    ``maxOutputTokens``)."""
    return Sampling(
        num(src.get("temperature")),
        num(first(src.get("top_p"), src.get("topP"))),
        i(src.get("seed")),
        i(
            first(
                src.get("max_tokens"),
                src.get("max_completion_tokens"),
                src.get("max_output_tokens"),
                src.get("maxOutputTokens"),
            )
        ),
    )


def error_of(obj: object, loose: bool = False) -> str | None:
    """The message of a provider error object: ``{"error": {"message": ...}}`` in all four APIs
    (Anthropic adds ``"type": "error"``), a bare ``{"type": "error", "message": ...}`` as in
    Responses stream ``error`` events, or ``{"message"|"detail": str}`` from gateways."""
    o = d(obj)
    err = o.get("error")
    if isinstance(err, str) and err:
        return err
    if isinstance(err, dict):
        msg = first(s(err.get("message")), s(err.get("type")), s(err.get("code")), s(err.get("status")))
        if isinstance(msg, str):
            return msg
    if loose or o.get("type") == "error":
        return s(o.get("message")) or s(o.get("detail"))
    return None


def text_of_content(content: object) -> list[str] | None:
    """Text pieces of a response ``content`` that is a string or a list of text parts
    (``{"type": "text" | "output_text", "text"}``)."""
    if isinstance(content, str):
        return [content]
    pieces = [
        p["text"]
        for p in lst(content)
        if isinstance(p, dict) and p.get("type") in ("text", "output_text") and isinstance(p.get("text"), str)
    ]
    return pieces or None


def parts_text(content: object) -> str:
    """Display text of a request message's ``content`` in any of the built-in formats.

    A string is itself; a Gemini ``Content`` is its ``parts``; a list concatenates its text parts
    (``{"type": "text" | "input_text" | "output_text", "text"}``, Gemini ``{"text"}``), Anthropic
    ``tool_result`` blocks (their own content, recursively) and Gemini ``functionResponse`` parts
    (the response, as compact JSON). Images, tool calls and thinking are left out. One tolerant
    reader for all formats, because proxies and compatible servers mix their part shapes.
    """
    if isinstance(content, str):
        return content
    if isinstance(content, dict):  # a Gemini Content {"role", "parts"}, or a single part
        content = content["parts"] if isinstance(content.get("parts"), list) else [content]
    out: list[str] = []
    for part in lst(content):
        if isinstance(part, str):
            out.append(part)
            continue
        part = d(part)
        kind = part.get("type")
        if kind == "tool_result":
            out.append(parts_text(part.get("content")))
        elif isinstance(part.get("functionResponse"), dict):
            out.append(dumps(part["functionResponse"].get("response")) or "")
        elif kind in (None, "text", "input_text", "output_text") and isinstance(part.get("text"), str):
            if not part.get("thought"):
                out.append(part["text"])
    return "".join(out)


def role(x: object, default: str = "unknown") -> str:
    """A message's role, ``default`` when missing or empty."""
    return x if isinstance(x, str) and x else default


class CallAcc:
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

    def result(self) -> ToolCallSummary:
        args = "".join(self.args)
        if not args and self.obj is not None:
            args = dumps(self.obj) or ""
        return {"id": self.id, "name": self.name, "arguments": args}


# --------------------------------------------------------------------------------------------------
# Writing helpers (overrides)


def args_obj(raw: str) -> Any:
    """Tool-call arguments (JSON text) as a value; ``{}`` when not JSON."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}


def stable_id(prefix: str, seed: str, n: int) -> str:
    """An id derived from ``seed`` and ``n``: the same what-if gives the same ids every time."""
    return prefix + hashlib.sha256(f"{seed}\0{n}".encode()).hexdigest()[:12]


# --------------------------------------------------------------------------------------------------
# OpenTelemetry GenAI helpers (opentelemetry.io/docs/specs/semconv/gen-ai/, input/output messages)


def plain_text(content: Any) -> str:
    """A string, or the concatenated ``text`` of a list of parts (for tool results)."""
    if isinstance(content, str):
        return content
    out = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, dict) and isinstance(part.get("text"), str):
            out.append(part["text"])
    return "".join(out)


def genai_parts(content: Any) -> list[dict[str, Any]]:
    """Text (and other) parts of a message content value in the conventions' part shapes."""
    if isinstance(content, str):
        return [{"type": "text", "content": content}] if content else []
    parts: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else []:
        if isinstance(part, str):
            parts.append({"type": "text", "content": part})
        elif isinstance(part, dict):
            kind = part.get("type")
            if isinstance(part.get("text"), str) and kind in (None, "text", "input_text", "output_text"):
                parts.append({"type": "text", "content": part["text"]})
            elif kind in ("thinking", "reasoning") and isinstance(part.get("thinking"), str):
                parts.append({"type": "reasoning", "content": part["thinking"]})
            elif kind:
                parts.append({"type": str(kind)})
    return parts


#: (system instructions or None, input messages) in the GenAI conventions' JSON shapes.
GenAIInput = tuple[list[dict[str, Any]] | None, list[dict[str, Any]]]


def genai_function(name: object, description: object, parameters: object) -> dict[str, Any]:
    """A function tool definition in the conventions' shape (``gen_ai.tool.definitions``):
    ``{"type": "function", "name", "description"?, "parameters"?}``."""
    out: dict[str, Any] = {"type": "function", "name": s(name) or ""}
    if isinstance(description, str) and description:
        out["description"] = description
    if parameters is not None:
        out["parameters"] = parameters
    return out


def on_vertex_ai(host: str) -> bool:
    """Whether ``host`` is Google Vertex AI, which serves models of several wire formats."""
    return host.endswith("aiplatform.googleapis.com")


# --------------------------------------------------------------------------------------------------
# The interface


class Provider:
    """One wire format. Subclass it, override what the format does, register an instance in
    :data:`forkpoint.providers.REGISTRY`.

    Attributes (class-level constants):

    * ``name`` — the wire family, :func:`~forkpoint.providers.summarize`'s ``provider``
      (``"openai"`` for any server speaking an OpenAI format); ``api`` — the API, its ``api``;
      ``reference`` — where the format is documented;
    * ``context_fields`` — the request fields that make up the carried context (system prompt
      first, the message list last); ``messages_field`` — the one holding the message list;
      ``conversation_fields`` — every request field shown as messages rather than as a parameter;
    * ``final_events`` — byte strings that only the last event of a complete stream contains;
    * ``semantic_headers`` — request headers (lower-case) that change what the request means, and
      so belong to its match key;
    * ``otel_operation`` — the GenAI ``gen_ai.operation.name`` of a call; ``cache_outside_input`` —
      whether the format's input-token count leaves out the tokens read from and written to the
      prompt cache (the conventions' ``gen_ai.usage.input_tokens`` includes them);

    Its SDKs (their packages, modules and key variables) are declared by its family ``name`` in
    :data:`forkpoint.sdks.SDKS`, which the session header reads without loading the providers.

    Methods take parsed JSON (``dict`` arguments are JSON objects already checked to be dicts) and
    never raise on malformed input. The defaults are the reading of a request no provider
    recognizes.
    """

    name: str = "unknown"
    api: str = "unknown"
    reference: str = ""

    context_fields: tuple[str, ...] = ()
    messages_field: str | None = None
    final_events: tuple[bytes, ...] = ()
    semantic_headers: frozenset[str] = frozenset()
    otel_operation: str = "chat"
    cache_outside_input: bool = False
    #: Whether each tool call of the model's answer is an item of the message list of its own, so a
    #: program may put each right before its result (Responses' ``function_call`` items); else one
    #: item of the model's holds all the calls of an answer, and their results follow it.
    calls_as_items: bool = False

    @property
    def conversation_fields(self) -> frozenset[str]:
        """Request fields shown as messages, not as parameters (default: ``context_fields``)."""
        return frozenset(self.context_fields)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}/{self.api}>"

    # ---------------------------------------------------------------------------- recognition

    def claims_path(self, path: str) -> bool:
        """Whether a request to this URL path (no query, trailing ``/`` stripped) is in this format.
        Paths are checked first; no two providers claim the same path."""
        return False

    def claims_host(self, host: str) -> bool:
        """Whether ``host`` (lower-case, no port) serves this provider family: then a call at a path
        no provider claims is ``(name, "unknown")`` (an embeddings or count-tokens endpoint)."""
        return False

    def claims_body(self, body: dict[str, Any]) -> bool:
        """Whether a request body has this format's shape; asked only for a request at an unknown
        host and path, in registry order (a shape that refines another's goes first)."""
        return False

    def is_auxiliary_path(self, path: str) -> bool:
        """Whether this URL path is an endpoint of this family that takes a model request's body but
        is no model call (token counting): such a request is never recognized by its body shape."""
        return False

    def path_streams(self, path: str) -> bool:
        """Whether this URL path asks for a streamed response (asked of every provider: a Vertex AI
        path streams whoever's model it names)."""
        return False

    def model_in_path(self, path: str) -> str | None:
        """The model a URL path names when the body does not (asked of every provider, in registry
        order)."""
        return None

    # ---------------------------------------------------------------------------- request side

    def request_model(self, body: dict[str, Any]) -> str | None:
        """The model a request body names (default: a non-empty ``model`` string); when it names
        none, the URL path is asked (:meth:`model_in_path`)."""
        return s(body.get("model")) or None

    def requests_stream(self, body: dict[str, Any]) -> bool:
        """Whether a request body asks for a streamed response (default: ``"stream": true``); a
        streaming path (:meth:`path_streams`) or a response recorded as a stream count too."""
        return body.get("stream") is True

    def sampling(self, body: dict[str, Any]) -> Sampling:
        """Temperature, top-p, seed and output-token limit of a request (default: top-level fields
        in any common spelling)."""
        return read_sampling(body)

    def count_messages(self, body: dict[str, Any]) -> int | None:
        """Input messages of a request (default: the length of a ``messages`` list)."""
        messages = body.get("messages")
        return len(messages) if isinstance(messages, list) else None

    def count_tools(self, body: dict[str, Any]) -> int:
        """Tools a request offers (default: a ``tools`` list plus a legacy ``functions`` list)."""
        return len(lst(body.get("tools"))) + len(lst(body.get("functions")))

    def messages(self, body: dict[str, Any]) -> list[Message]:
        """The input messages of a request as ``{"role", "text"}`` for display (default: one entry
        per item of a ``messages`` list)."""
        return [
            {"role": role(d(m).get("role")), "text": parts_text(d(m).get("content"))}
            for m in lst(body.get("messages"))
        ]

    # ---------------------------------------------------------------------------- response side

    def read_body(self, body: object) -> ResponseFields:
        """What a whole response body says (``body`` is parsed JSON of any type). The caller adds
        an ``error`` object of a dict body when this reading has none."""
        return NOTHING

    def read_stream(self, stream: list[Payload]) -> ResponseFields | None:
        """What a recorded stream says, from its JSON objects in order; ``None`` when this format
        does not stream (the stream's text is then read as a body)."""
        return None

    def response_id(self, payload: dict[str, Any]) -> str | None:
        """The provider's id of the completion, from a body or one stream object (or ``None``)."""
        return None

    def stream_delta_text(self, payload: dict[str, Any]) -> str:
        """The assistant text one stream object adds (for stream playback)."""
        return ""

    # ---------------------------------------------------------------------------- carried context

    def tool_call_arguments(self, node: dict[str, Any]) -> list[object]:
        """Arguments (JSON text or a value) of the tool calls one JSON object of a conversation
        makes (a message, a content block, an item); ``[]`` when it makes none."""
        return []

    def is_tool_result(self, node: dict[str, Any]) -> bool:
        """Whether one JSON object of a conversation is (or wraps) a tool's result."""
        return False

    def is_model_item(self, item: dict[str, Any]) -> bool:
        """Whether one item of a request's message list (``messages_field``) is the model's own, put
        there from one of its answers: the tool results a request sends back follow the model's
        last (default: ``role: assistant``)."""
        return item.get("role") == "assistant"

    # ---------------------------------------------------------------------------- overrides

    def rewrite_body(self, body: dict[str, Any], text: str | None, calls: Sequence[NewToolCall]) -> bool:
        """Make a recorded whole response body (changed in place) answer ``text`` and ``calls``
        instead, in this format's shape; ``False`` (nothing changed) when this format cannot."""
        return False

    def rewrite_stream(
        self, stream: list[dict[str, Any]], text: str | None, calls: Sequence[NewToolCall]
    ) -> Sequence[str | bytes] | None:
        """The chunks of a stream that answers ``text`` and ``calls`` (text, or bytes for a binary
        stream), built from the JSON objects of the recorded one (ids, model, usage kept); ``None``
        when this format cannot."""
        return None

    def rewrite_losses(self, recorded: list[dict[str, Any]], calls: Sequence[NewToolCall]) -> list[str]:
        """What a rewrite of the ``recorded`` response (its JSON objects: a body, or a stream's) to
        ask for ``calls`` cannot keep that the API needs back with the next request, said plainly
        (default: nothing)."""
        return []

    # ---------------------------------------------------------------------------- OpenTelemetry

    def otel_provider_name(self, host: str) -> str:
        """``gen_ai.provider.name`` of a call to ``host`` (lower-case, no port)."""
        return self.name

    def genai_input_messages(self, body: dict[str, Any]) -> GenAIInput:
        """(system instructions, input messages) of a request in the GenAI conventions' structure
        (default: the display messages as text parts)."""
        return None, [
            {"role": m["role"], "parts": [{"type": "text", "content": m["text"]}]}
            for m in self.messages(body)
        ]

    def genai_tool_definitions(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The tools a request offers, in the conventions' shape (``gen_ai.tool.definitions``):
        function tools as :func:`genai_function`, any other tool as ``{"type", "name"?}``.
        Default: a ``tools`` list of Chat Completions ``{type: "function", function: {name,
        description, parameters}}`` or Responses ``{type: "function", name, description,
        parameters}`` items, plus a legacy ``functions`` list."""
        out: list[dict[str, Any]] = []
        for tool in lst(body.get("tools")):
            tool = d(tool)
            fn = d(tool.get("function")) or tool
            if tool.get("type") in ("function", None) and fn.get("name"):
                out.append(genai_function(fn.get("name"), fn.get("description"), fn.get("parameters")))
            elif tool:
                other = {"type": s(tool.get("type")) or "unknown"}
                if s(tool.get("name")):
                    other["name"] = str(tool["name"])
                out.append(other)
        for fn in lst(body.get("functions")):
            fn = d(fn)
            out.append(genai_function(fn.get("name"), fn.get("description"), fn.get("parameters")))
        return out


#: What a request that no provider recognizes is read with.
UNRECOGNIZED = Provider()
