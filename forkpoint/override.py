"""What-if overrides: replace one recorded result by another value during a replay.

An override spec is ``TARGET[.FIELD]=VALUE``:

========================  =====================================================================
TARGET                    which recorded call
========================  =====================================================================
``tool:NAME``             the first call of tool NAME; ``tool:NAME#K`` its K-th call (1-based, in the
                          order the calls started, as ``forkpoint show`` lists them)
``model#K``               the K-th model call of the session (1-based; telemetry, MCP, plain HTTP
                          and calls made inside a tool are not model calls here)
``seq:N``                 the event with seq N (a model or tool call)
========================  =====================================================================

A tool NAME may contain dots (``tool:Store.query.result=…``: ``--tool module:Class.method`` names
its tool so). FIELD for a tool call: ``result`` (default) or ``error`` (value
``{"type": "TimeoutError", "message": "…"}``). For a model call: ``text`` (the answer becomes this
text alone, with no tool calls: "what if the model had answered so"), ``tool_calls`` (a list of
``{"name", "arguments", "id"?}``, arguments as an object or a JSON string; any text the model said
alongside is kept; a call without an id takes the recorded id of the call in its place if that
called the same tool, else an id derived from the spec), or ``body`` (default: the whole response
body — for a stream, a list of raw chunk strings).

VALUE is JSON (quote strings: ``'"hello"'``), or ``@path`` to read the JSON from a file.

Rewriting a model response keeps its provider's shape, streamed or not, so the unmodified SDK parses
it: the provider that recognizes the call rewrites it (:func:`forkpoint.providers.rewrite_response`).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from .errors import OverrideError, UsageError
from .events import endpoint, in_start_order, in_tool, tool_spans
from .log import from_json, read_json_text
from .patterns import compiled_later
from .providers import (
    call_kind,
    detect,
    recorded_response,
    response_text,
    rewrite_losses,
    rewrite_response,
    summarize,
)
from .providers.base import stable_id
from .text import KIND_NAMES
from .values import MARK, is_typed

_SPEC = compiled_later(
    r"^(?P<target>tool:[^#=]+?(?:#\d+)?|model#\d+|seq:\d+)(?:\.(?P<field>[a-z_]+))?=(?P<value>.*)$", re.S
)
_TOOL_FIELDS = ("result", "error")
_MODEL_FIELDS = ("text", "tool_calls", "body")


@dataclass(frozen=True)
class Override:
    """One parsed override: ``kind`` is ``tool`` or ``model`` or ``seq``; ``field`` may be None."""

    spec: str
    kind: str
    name: str | None
    occurrence: int
    seq: int | None
    field: str | None
    value: Any

    def to_json(self) -> dict[str, Any]:
        """JSON form for reports and session headers."""
        return {"spec": self.spec, "field": self.field, "value": self.value}


def parse(spec: str, *, base: Path | None = None) -> Override:
    """Parse an override spec (see module docstring). Raises :class:`OverrideError`."""
    m = _SPEC.match(spec)
    if not m:
        raise OverrideError(
            f"override {spec!r}: expected TARGET[.FIELD]=VALUE with TARGET tool:NAME[#K], model#K or seq:N"
        )
    target, field, raw = m["target"], m["field"], m["value"]
    if raw.startswith("@"):
        path = Path(raw[1:])
        if base is not None and not path.is_absolute():
            path = base / path
        try:
            raw = path.read_text()
        except OSError as exc:
            raise OverrideError(f"override {spec!r}: cannot read {path}: {exc.strerror}") from None
    try:
        value = read_json_text(raw)
    except ValueError as exc:
        raise OverrideError(
            f"override {spec!r}: value is not JSON ({exc}); quote strings, e.g. '\"text\"', or use @file.json"
        ) from None
    if target.startswith("tool:"):
        name, _, k = target[5:].partition("#")
        kind, occurrence, seq = "tool", int(k or 1), None
    elif target.startswith("model#"):
        name, kind, occurrence, seq = None, "model", int(target[6:]), None
    else:
        name, kind, occurrence, seq = None, "seq", 0, int(target[4:])
    if kind == "tool" and field not in (None, *_TOOL_FIELDS):
        name, field = f"{name}.{field}", None  # a dotted tool name (``module:Class.method`` tools)
    if kind == "model" and field not in (None, *_MODEL_FIELDS):
        raise OverrideError(f"override {spec!r}: a model call's field is one of {', '.join(_MODEL_FIELDS)}")
    if occurrence < 1 and kind != "seq":
        raise OverrideError(f"override {spec!r}: occurrences count from 1")
    if field == "error" and not (isinstance(value, dict) and "type" in value):
        raise OverrideError(f'override {spec!r}: an error is {{"type": "ValueError", "message": "…"}}')
    return Override(spec, kind, name, occurrence, seq, field, value)


def resolve(overrides: list[Override], events: Sequence[Mapping[str, Any]]) -> dict[int, Override]:
    """Map each override to the seq of the recorded event it replaces. Raises :class:`OverrideError`
    when a target does not exist, or two overrides hit the same event."""
    out: dict[int, Override] = {}
    if not overrides:  # (every replay resolves its overrides: most have none)
        return out
    schemas = _output_schemas(events)
    # K counts calls as ``forkpoint show`` lists them, in the order they started: parallel calls
    # (a ToolNode's) are written in the order they ended, which the user never sees.
    started = in_start_order(events)
    for o in overrides:
        if o.kind == "tool":
            hits = [e for e in started if e["type"] == "tool_call" and e["tool"] == o.name]
            if len(hits) < o.occurrence:
                hint = (
                    f" (a tool call's field is one of {', '.join(_TOOL_FIELDS)})"
                    if "." in str(o.name)
                    else ""
                )
                if not hits:  # (a typo, or a tool recorded under another name: say which it has)
                    names = sorted({str(e["tool"]) for e in events if e["type"] == "tool_call"})
                    hint += f"; its tools: {', '.join(names)}" if names else "; it has no tool calls"
                raise OverrideError(
                    f"override {o.spec!r}: the session has {len(hits)} call(s) of tool {o.name!r}{hint}"
                )
            event = hits[o.occurrence - 1]
        elif o.kind == "model":
            spans = tool_spans(events)
            hits = [
                e
                for e in started
                if e["type"] == "model_call" and call_kind(e) == "model" and not in_tool(e, spans)
            ]
            if len(hits) < o.occurrence:
                raise OverrideError(f"override {o.spec!r}: the session has {len(hits)} model call(s)")
            event = hits[o.occurrence - 1]
        else:
            found = [e for e in events if e["seq"] == o.seq and e["type"] in ("tool_call", "model_call")]
            if not found:
                raise OverrideError(f"override {o.spec!r}: no model or tool call has seq {o.seq}")
            event = found[0]
        allowed = _TOOL_FIELDS if event["type"] == "tool_call" else _MODEL_FIELDS
        if o.field is not None and o.field not in allowed:
            raise OverrideError(
                f"override {o.spec!r}: event {event['seq']} is a {event['type']}; fields: {allowed}"
            )
        if event["seq"] in out:
            raise OverrideError(f"override {o.spec!r}: event {event['seq']} is already overridden")
        apply(event, o, schemas)  # a value that does not fit this call is refused now, not inside the agent
        out[event["seq"]] = o
    return out


def refuse_unreached(
    resolved: Mapping[int, Override],
    events: Sequence[Mapping[str, Any]],
    *,
    models: str = "replay",
    tools: str = "replay",
    live_tools: Sequence[str] = (),
    live_from: int | None = None,
) -> None:
    """Raise :class:`UsageError` for one of the ``resolved`` overrides (:func:`resolve`) that would
    never apply: it names a call the run makes live (``models``/``tools`` ``"live"``, a tool in
    ``live_tools``, or past ``live_from``: a fork's checkpoint), or one made inside a recorded tool
    call that the replay serves whole (an agno team member's, inside ``delegate_task_to_member``),
    whose body, which made it, does not run."""
    if not resolved:
        return
    by_seq = {int(e["seq"]): e for e in events}
    by_span = {e["span_id"]: e for e in events if e["type"] == "tool_call" and e.get("span_id")}
    for seq, o in resolved.items():
        event = by_seq[seq]
        kind = str(event["type"])
        enclosing = []  # the tool calls it was made in, innermost first
        outer = by_span.get(event.get("parent_span_id"))
        while outer is not None:
            enclosing.append(outer)
            outer = by_span.get(outer.get("parent_span_id"))
        why = (
            "--tools live: every tool runs for real"
            if kind == "tool_call" and tools == "live"
            else "--tools live: every tool runs for real, and what its body calls is live too"
            if enclosing and tools == "live"
            else f"live_tools: {event['tool']} runs for real"
            if kind == "tool_call" and event["tool"] in live_tools
            else "--models live: every model call is made for real"
            if kind == "model_call" and models == "live"
            else f"it was recorded after checkpoint seq {live_from}, from which every call is live"
            if live_from is not None and seq > live_from
            else None
        )
        if why is not None:
            raise UsageError(
                f"override {o.spec!r} names event seq {seq}, a {kind.replace('_', ' ')} this run makes live "
                f"({why}): it would never apply"
            )
        # (a tool in live_tools runs its body, which asks for this call again; one served does not)
        served = [e for e in enclosing if e["tool"] not in live_tools]
        if served:
            outermost = served[-1]
            raise UsageError(
                f"override {o.spec!r} names event seq {seq}, a {kind.replace('_', ' ')} made inside tool call "
                f"{outermost['tool']} (seq {outermost['seq']}), which a replay serves whole without running it: "
                f"it would never apply. Override that call's result instead (seq:{outermost['seq']}), or run it "
                f"live (forkpoint.replay(live_tools=[{outermost['tool']!r}]))"
            )


def _plain_where_typed(recorded: Any, given: Any, path: str = "$") -> Iterator[tuple[str, Any, Any]]:
    """``(path, recorded node, given node)`` wherever ``given`` (an override's value, resolved by
    ``from_json``) has plain JSON where ``recorded`` (the tool's recorded result) had a typed value
    or bytes: at the top, or inside a dict, a list or a typed value's own fields (a datetime in a
    dict the tool returned came back as a ``str``, unsaid). ``null`` is left alone: a tool that
    returns an object may return None."""
    if given is None:
        return
    if isinstance(recorded, bytes):
        if not isinstance(given, bytes):
            yield path, recorded, given
    elif is_typed(recorded):
        if not is_typed(given):
            yield path, recorded, given
        elif given[MARK] == recorded[MARK]:
            yield from _plain_where_typed(recorded["value"], given["value"], path)
    elif isinstance(recorded, dict) and isinstance(given, dict):
        for key in recorded.keys() & given.keys():
            yield from _plain_where_typed(recorded[key], given[key], f"{path}.{key}")
    elif isinstance(recorded, list) and isinstance(given, list):
        for i, (r, g) in enumerate(zip(recorded, given, strict=False)):
            yield from _plain_where_typed(r, g, f"{path}[{i}]")


def untyped(resolved: Mapping[int, Override], events: Sequence[Mapping[str, Any]]) -> list[str]:
    """A line for each of the ``resolved`` overrides (:func:`resolve`) that gives plain JSON where
    the tool's recorded result had a typed value (a dataclass, a pydantic model, a datetime…, at
    the top or anywhere inside) or bytes: the agent gets a ``dict``, or a ``str`` where the tool
    returned a datetime…, which the tool could not have returned. Allowed (a what-if may mean it),
    but said: the first such place, and how many more."""
    if not resolved:
        return []
    by_seq = {e["seq"]: e for e in events}
    out = []
    for seq, o in resolved.items():
        event = by_seq[seq]
        if event["type"] != "tool_call" or o.field not in (None, "result") or "result" not in event:
            continue
        found = list(_plain_where_typed(event["result"], from_json(o.value)))
        if not found:
            continue
        path, recorded, given = found[0]
        at = "" if path == "$" else f" at {path}"
        there = "" if path == "$" else " there"
        more = (
            f" (and at {len(found) - 1} more place(s): {', '.join(p for p, _, _ in found[1:4])}"
            f"{'…' if len(found) > 4 else ''})"
            if len(found) > 1
            else ""
        )
        if isinstance(recorded, bytes):
            out.append(
                f"forkpoint: override {o.spec!r}: {event['tool']} returned bytes{at} when recorded; this "
                f"value is plain JSON{there}, so the agent gets a plain {type(given).__name__} instead{more}. "
                'To give it bytes: {"$b64": "<base64>"}, as forkpoint show prints them (docs/overrides.md)'
            )
            continue
        cls = str(recorded[MARK])
        value = recorded["value"]
        shape = "{…}" if isinstance(value, dict) else "[…]" if isinstance(value, list) else '"…"'
        out.append(
            f"forkpoint: override {o.spec!r}: {event['tool']} returned a {cls.replace(':', '.')}{at} "
            f"when recorded; this value is plain JSON{there}, so the agent gets a plain {type(given).__name__} "
            f'instead{more}. To give it the recorded {cls.rsplit(":", 1)[-1]}: {{"{MARK}": "{cls}", "kind": '
            f'"{recorded.get("kind")}", "value": {shape}}} (docs/overrides.md; forkpoint show --json '
            "shows the recorded one)"
        )
    return out


def _output_schemas(events: Sequence[Mapping[str, Any]]) -> frozenset[tuple[Any, str]]:
    """``(server, tool)`` of each MCP tool that its server's recorded ``tools/list`` gives an output
    schema: the client requires ``structuredContent`` of its results."""
    out = set()
    for e in events:
        mcp, listed = e.get("mcp"), e.get("result")
        if e.get("type") != "tool_call" or not isinstance(mcp, Mapping) or mcp.get("method") != "tools/list":
            continue
        for t in (listed.get("tools") if isinstance(listed, Mapping) else None) or []:
            if (
                isinstance(t, Mapping)
                and isinstance(t.get("name"), str)
                and t.get("outputSchema") is not None
            ):
                out.add((mcp.get("server"), t["name"]))
    return frozenset(out)


def apply(
    event: Mapping[str, Any], o: Override, schemas: frozenset[tuple[Any, str]] = frozenset()
) -> dict[str, Any]:
    """A copy of the recorded ``event`` with the override applied (the original is not changed).
    ``schemas``: the MCP tools with an output schema (:func:`_output_schemas` of the session)."""
    new: dict[str, Any] = copy.deepcopy(dict(event))
    if new["type"] == "tool_call":
        new.pop("result", None)
        new.pop("error", None)
        if o.field == "error":
            new["error"] = {
                "type": str(o.value["type"]),
                "module": str(o.value.get("module", "builtins")),
                "message": str(o.value.get("message", "")),
            }
        else:
            if new.get("mcp"):
                _check_mcp_result(o, event, schemas)
            try:  # (bytes as show prints them, {"$b64": …}: the agent gets bytes, as recorded)
                new["result"] = from_json(o.value)
            except ValueError as exc:
                raise OverrideError(f"override {o.spec!r}: a $b64 is not base64 ({exc})") from None
        return new
    resp = new.get("response")
    if resp is None:
        raise OverrideError(f"override {o.spec!r}: model call {event['seq']} got no response to replace")
    if o.field in (None, "body"):
        if resp.get("body_kind") == "stream":
            if not (isinstance(o.value, list) and all(isinstance(c, str) for c in o.value)):
                raise OverrideError(f"override {o.spec!r}: a streamed body is a list of raw chunk strings")
            resp["chunks"] = [[0.0, c] for c in o.value]
        else:
            resp["body_kind"], resp["body"] = "json", o.value
        resp["ended"] = "complete"
        new.pop("error", None)
        return new
    if call_kind(event) != "model":
        raise OverrideError(
            f"override {o.spec!r}: event {event['seq']} is no model call but "
            f"{KIND_NAMES.get(call_kind(event), call_kind(event))} ({endpoint(event)}): it has no "
            f"{o.field} to rewrite; override its whole .body instead"
        )
    url = new["request"]["url"]
    text: str | None
    if o.field == "text":
        if not isinstance(o.value, str):
            raise OverrideError(f"override {o.spec!r}: text is a JSON string, e.g. '\"I give up.\"'")
        text, calls = o.value, None
    else:  # tool_calls: the text said alongside them stays
        text, calls = response_text(url, recorded_response(event)), _calls(event, o)
    if not rewrite_response(url, new["request"]["body"], resp, text, calls):
        _, api = detect(url, new["request"]["body"])
        stream = resp.get("body_kind") == "stream"
        raise OverrideError(
            f"override {o.spec!r}: cannot rewrite the {o.field} of a {'streamed ' if stream else ''}{api} response; "
            "override the whole body instead"
        )
    resp["ended"] = "complete"
    new.pop("error", None)
    return new


def _calls(event: Mapping[str, Any], o: Override) -> list[dict[str, str]]:
    """The calls a ``tool_calls`` override asks for in place of those of the model call ``event``."""
    recorded = summarize(event["request"]["url"], event["request"]["body"], recorded_response(event))
    return _norm_calls(o, recorded["tool_calls"] or [])


def losses(event: Mapping[str, Any], o: Override) -> list[str]:
    """What applying ``o`` to ``event`` (:func:`resolve`) drops that the model's API needs back with
    the next request (a Gemini call's thought signature), said with the override, which applies."""
    if event["type"] != "model_call" or o.field != "tool_calls" or not event.get("response"):
        return []
    return rewrite_losses(
        event["request"]["url"], event["request"]["body"], event["response"], _calls(event, o)
    )


def _check_mcp_result(o: Override, event: Mapping[str, Any], schemas: frozenset[tuple[Any, str]]) -> None:
    """The answer to another MCP request than ``tools/call`` (``tools/list``…) is a JSON object;
    an MCP tool's result is the ``CallToolResult`` the client validates (its ``content`` list,
    and ``structuredContent`` when the tool has an output schema, as the recorded result shows or,
    when that was an error answer, the server's recorded listing of its tools): anything else
    failed inside the agent's MCP client."""
    value, recorded = o.value, event.get("result")
    mcp = event.get("mcp")
    method = mcp.get("method") if isinstance(mcp, Mapping) else None
    if method != "tools/call":  # (tools/list, initialize…)
        if not isinstance(value, dict):
            raise OverrideError(
                f"override {o.spec!r}: {event.get('tool')} is the MCP request {method}: its result "
                "is the server's answer, a JSON object as the recorded one (forkpoint show --json)"
            )
        _validate_mcp(o, method)
        return
    listed = isinstance(mcp, Mapping) and (mcp.get("server"), event.get("tool")) in schemas
    example = '{"content": [{"type": "text", "text": "…"}]'
    if not (isinstance(value, dict) and isinstance(value.get("content"), list)):
        raise OverrideError(
            f"override {o.spec!r}: {event.get('tool')} is an MCP tool: its result is a CallToolResult, "
            f"{example}}}, as the recorded one (forkpoint show --json)"
        )
    shown = isinstance(recorded, dict) and "structuredContent" in recorded
    if (shown or listed) and "structuredContent" not in value and value.get("isError") is not True:
        why = "its recorded result has structuredContent" if shown else "its server listed one"
        raise OverrideError(
            f"override {o.spec!r}: {event.get('tool')} has an output schema ({why}): give "
            f'structuredContent too, {example}, "structuredContent": {{…}}}}'
        )
    _validate_mcp(o, method)


#: The mcp SDK's class of the answer to each request a session makes.
_MCP_RESULTS = {
    "tools/call": "CallToolResult",
    "tools/list": "ListToolsResult",
    "initialize": "InitializeResult",
    "resources/list": "ListResourcesResult",
    "resources/templates/list": "ListResourceTemplatesResult",
    "resources/read": "ReadResourceResult",
    "prompts/list": "ListPromptsResult",
    "prompts/get": "GetPromptResult",
    "completion/complete": "CompleteResult",
}


def _validate_mcp(o: Override, method: Any) -> None:
    """The value validates as the SDK's class of ``method``'s answer, as the agent's session will
    validate it (where the mcp SDK is installed here too): else the agent got a ValidationError."""
    try:
        from mcp import types
        from pydantic import ValidationError
    except ImportError:
        return
    result_type = getattr(types, _MCP_RESULTS.get(str(method), ""), None)
    if result_type is None:
        return
    try:
        result_type.model_validate(o.value)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the value"
        raise OverrideError(
            f"override {o.spec!r}: not a {result_type.__name__}, as the agent's MCP session expects: "
            f"{where}: {first['msg']}"
        ) from None


def _norm_calls(o: Override, recorded: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """The override's tool calls as ``{"id", "name", "arguments": str}``. A call given without an id
    takes the id of the recorded call in its place when that called the same tool, so an override
    equal to the recording replays exactly as the recording; otherwise an id derived from the spec,
    so the same what-if sends the same requests every time."""
    if not isinstance(o.value, list) or not all(isinstance(c, dict) and "name" in c for c in o.value):
        raise OverrideError(f'override {o.spec!r}: tool_calls is a list of {{"name": …, "arguments": …}}')
    out = []
    for i, c in enumerate(o.value):
        args = c.get("arguments", {})
        if isinstance(args, str):
            try:
                parsed = orjson.loads(args) if args.strip() else {}
            except orjson.JSONDecodeError:
                parsed = None
            if not isinstance(parsed, dict):
                raise OverrideError(
                    f"override {o.spec!r}: the arguments of tool call {i + 1} are a string that is not a JSON "
                    "object (override the whole .body to send malformed arguments)"
                )
        elif not isinstance(args, dict):
            raise OverrideError(
                f"override {o.spec!r}: the arguments of tool call {i + 1} are an object or a JSON string, "
                f"not {type(args).__name__}"
            )
        same = recorded[i] if i < len(recorded) and recorded[i].get("name") == c["name"] else {}
        out.append(
            {
                "id": str(c.get("id") or same.get("id") or stable_id("call_fp_", o.spec, i)),
                "name": str(c["name"]),
                "arguments": args if isinstance(args, str) else orjson.dumps(args).decode(),
            }
        )
    return out
