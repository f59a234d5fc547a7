"""``forkpoint show SESSION --html FILE``: one self-contained HTML page to read a session in a browser.

The page has no network access at all (a Content-Security-Policy of ``default-src 'none'`` with
hashes for its one inline style sheet and one inline script): everything it shows is embedded as
JSON in a ``<script type="application/json">`` element and rendered by the script with DOM text
nodes (never ``innerHTML``), so recorded content cannot inject markup.

What it shows: the header; an overview strip of the calls on the session's time axis; the turns
(a turn starts at each model call; a checkpoint goes to the turn it precedes) with, for each model
call, the request messages (:func:`forkpoint.providers.request_messages`, enriched with the tool
calls and tool-call ids of the request), parameters, the response text and tool calls, usage,
HTTP details and the raw stream chunks, and which of its bodies were not stored (withheld) and why; a stream player that re-renders the assistant text chunk by
chunk with the recorded timing (speed adjustable); tool calls with arguments and result or error;
checkpoints (boundary, source tree and changed files, workspace files, carried context); notes;
outcomes; the end; and, when fork arms of the session were given an outcome command (``forkpoint sweep``),
the pass rate by checkpoint with its 95 % intervals, where the run became unrecoverable, and why
each arm that measured nothing did not. For a what-if session: the parent, the replay options, each event's source (replay, override,
live), and where the run diverged from its parent (from a replay report when given, else from
:func:`forkpoint.diff.diff_sessions` against the parent when it is in the same store).

The page shows what the session holds, as it holds it: nothing is removed beyond what recording
already redacted. Module-level API: :func:`view_model`, :func:`render`, :func:`write_html`.
"""

from __future__ import annotations

import base64
import hashlib
from datetime import datetime
from pathlib import Path
from typing import Any

from ._version import __version__
from .checkpoint import manifest_rows
from .events import (
    asking_call,
    divergence_place,
    endpoint,
    in_start_order,
    in_tool,
    mcp_session_request,
    mcp_tool_error,
    retries,
    tool_spans,
    withheld_bodies,
)
from .files import write_private
from .log import Session, SessionError, json_text, to_json
from .outcome import sweep_of
from .providers import (
    call_kind,
    context_messages,
    conversation_fields,
    genai_input_messages,
    genai_usage,
    kinds,
    message_list_field,
    parse_sse,
    recorded_response,
    request_messages,
    response_fields,
    response_text,
    stream_delta_text,
)
from .redact import scrub_json

__all__ = ["render", "view_model", "write_html"]

#: Conversation fields left out of a model call's "parameters" (they are shown as messages).
_CONVERSATION_FIELDS = conversation_fields()
#: Checkpoint patches longer than this are cut in the page (the session keeps them whole).
_PATCH_MAX = 256 * 1024
#: At most this many cumulative re-reads when a stream's per-chunk text must be found the slow way.
_SLOW_FRAMES = 200


# --------------------------------------------------------------------------- small helpers


def _ms_since(ts: Any, t0: datetime | None) -> float | None:
    if not isinstance(ts, str) or t0 is None:
        return None
    try:
        t = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None
    return round((t - t0).total_seconds() * 1000.0, 3)


def _parse_ts(ts: Any) -> datetime | None:
    if not isinstance(ts, str):
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return None


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return ""


class _Strings:
    """A table of unique values; large repeated payloads (messages, parameters) are stored once."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._index: dict[bytes, int] = {}

    def add(self, value: Any) -> int:
        key = json_text(value, sort_keys=True)
        i = self._index.get(key)
        if i is None:
            i = self._index[key] = len(self.items)
            self.items.append(value)
        return i


# --------------------------------------------------------------------------- streams


def _split_complete(buf: str) -> tuple[str, str]:
    """(the complete SSE events at the start of ``buf``, the rest)."""
    end = -1
    for sep in ("\n\n", "\r\n\r\n", "\r\r"):
        i = buf.rfind(sep)
        if i >= 0:
            end = max(end, i + len(sep))
    return (buf[:end], buf[end:]) if end >= 0 else ("", buf)


def stream_frames(event: dict[str, Any]) -> tuple[list[list[Any]], bool]:
    """``([[ms, text added], ...], exact)`` for a recorded stream: the assistant text each chunk
    adds, at the chunk's recorded offset. ``exact`` is false when the per-chunk text could only be
    approximated (the frames then still add up to the whole response text)."""
    resp = event.get("response") or {}
    chunks = resp.get("chunks") or []
    url = (event.get("request") or {}).get("url") or ""
    api = (event.get("summary") or {}).get("api") or ""
    full = response_text(url, recorded_response(event)) or ""
    if not chunks or not full:
        return [], True
    frames: list[list[Any]] = []
    buf = ""
    for ms, chunk in chunks:
        buf += _text(chunk)
        complete, buf = _split_complete(buf)
        delta = "".join(stream_delta_text(api, ev.data) for ev in parse_sse(complete)) if complete else ""
        if delta:
            frames.append([float(ms), delta])
    if buf:
        delta = "".join(stream_delta_text(api, ev.data) for ev in parse_sse(buf))
        if delta:
            frames.append([float(chunks[-1][0]), delta])
    if "".join(d for _, d in frames) == full:
        return frames, True
    # The slow way: the text of growing prefixes of the stream, at up to _SLOW_FRAMES chunk boundaries.
    n = len(chunks)
    step = max(1, -(-n // _SLOW_FRAMES))
    cut = sorted({*range(step - 1, n, step), n - 1})
    frames, seen = [], ""
    for i in cut:
        text = (
            response_text(url, {**recorded_response(event), "stream": [_text(c) for _, c in chunks[: i + 1]]})
            or ""
        )
        if text.startswith(seen) and len(text) > len(seen):
            frames.append([float(chunks[i][0]), text[len(seen) :]])
            seen = text
    if seen != full:
        frames = [[float(chunks[-1][0]), full]]
    return frames, False


# --------------------------------------------------------------------------- per-event views


def _rich_messages(url: str, api: str, body: Any) -> list[dict[str, Any]]:
    """``request_messages`` entries, each with the request's tool calls / tool-call id when known."""
    plain = request_messages(url, body)
    out: list[dict[str, Any]] = [{"role": m["role"], "text": m["text"]} for m in plain]
    try:
        system, msgs = genai_input_messages(api, url, body)
    except Exception:  # noqa: BLE001 - enrichment is optional; the plain messages stand
        return out
    rich: list[dict[str, Any]] = ([{"role": "system", "parts": system}] if system else []) + msgs
    if len(rich) != len(out):
        return out
    for view, r in zip(out, rich, strict=True):
        calls = [
            {"id": p.get("id"), "name": p.get("name"), "arguments": p.get("arguments")}
            for p in r.get("parts") or []
            if p.get("type") == "tool_call"
        ]
        if calls:
            view["tool_calls"] = to_json(calls)
        ids = [
            p.get("id") for p in r.get("parts") or [] if p.get("type") == "tool_call_response" and p.get("id")
        ]
        if ids:
            view["tool_call_id"] = ids[0]
    return out


class _Messages:
    """The message views of a session's requests (indices into a :class:`_Strings`), each item of a
    conversation read once: every request resends the conversation so far, and a session loaded
    with ``share_lists`` gives the items one request shares with an earlier one as the same objects
    (reading each request whole made ``show --html`` quadratic in the turns)."""

    def __init__(self, strings: _Strings) -> None:
        self._strings = strings
        self._items: dict[
            tuple[int, str, str], tuple[object, list[int]]
        ] = {}  # (id, url, api) -> (item, views)

    def of(self, url: str, api: str, body: Any) -> list[int]:
        """The views of ``body``'s messages, in order: the other fields' (a system prompt) first, then
        each item of its message list (:func:`~forkpoint.providers.message_list_field`)."""
        add = self._strings.add
        field = message_list_field(url, body)
        if field is None:
            return [add(m) for m in _rich_messages(url, api, body)]
        head = [add(m) for m in _rich_messages(url, api, {**body, field: []})]
        out = list(head)
        for item in body[field]:
            key = (id(item), url, api)
            seen = self._items.get(key)
            if seen is None or seen[0] is not item:  # (an id is reused only once its object is gone)
                views = _rich_messages(url, api, {**body, field: [item]})[len(head) :]
                seen = self._items[key] = (item, [add(m) for m in views])
            out += seen[1]
        return out


def _model_view(e: dict[str, Any], strings: _Strings, messages: _Messages) -> dict[str, Any]:
    s = e.get("summary") or {}
    req = e.get("request") or {}
    resp = e.get("response")
    url = req.get("url") or ""
    body = req.get("body")
    api = s.get("api") or ""
    view: dict[str, Any] = {
        # (usage as forkpoint show and the export count it: input with the prompt cache's)
        "summary": to_json({**s, "usage": genai_usage(s)} if s.get("usage") else s),
        "method": req.get("method"),
        "url": url,
        "request_headers": to_json(req.get("headers") or []),
        "body_kind": req.get("body_kind"),
        "messages": messages.of(url, api, body),
    }
    if isinstance(body, dict):
        params = {k: v for k, v in body.items() if k not in _CONVERSATION_FIELDS}
        view["params"] = strings.add(to_json(params))
    elif body is not None:
        view["params"] = strings.add(to_json(body))
    if e.get("error"):
        view["error"] = to_json(e["error"])
    if resp:
        read = response_fields(url, recorded_response(e))
        r: dict[str, Any] = {
            "status": resp.get("status"),
            "reason": resp.get("reason"),
            "http_version": resp.get("http_version"),
            "headers": to_json(resp.get("headers") or []),
            "body_kind": resp.get("body_kind"),
            "ended": resp.get("ended"),
            "text": read.text,
        }
        if read.reasoning:
            r["reasoning"] = read.reasoning
        if resp.get("body_kind") == "stream":
            chunks = resp.get("chunks") or []
            frames, exact = stream_frames(e)
            r["chunks"] = [[float(ms), _text(c)] for ms, c in chunks]
            r["frames"] = frames
            r["frames_exact"] = exact
        elif resp.get("body") is not None:
            r["body"] = to_json(resp.get("body"))
        view["response"] = r
    return view


def _patch_text(patch: Any) -> str:
    """A checkpoint's patch as text: bytes, a string, or a list of sections of either."""
    if isinstance(patch, list):
        return "".join(_text(p) for p in patch)
    return _text(patch)


def _scalars(d: dict[str, Any], skip: frozenset[str]) -> dict[str, Any]:
    return {
        k: v for k, v in d.items() if k not in skip and (v is None or isinstance(v, str | int | float | bool))
    }


def _checkpoint_view(e: dict[str, Any]) -> dict[str, Any]:
    src = e.get("source") or None
    ws = e.get("workspace") or {}
    view: dict[str, Any] = {
        "boundary": e.get("boundary"),
        "reason": e.get("reason"),
        "cp_turn": e.get("turn"),
        "cwd": e.get("cwd"),
        "context_digest": e.get("context_digest"),
        "referenced": e.get("referenced") or [],
        "mentioned_absent": e.get("mentioned_absent") or [],
        "uncaptured": e.get("uncaptured") or [],
        "workspace": {
            "root": ws.get("root"),
            "fingerprint": ws.get("fingerprint"),
            "fields": _scalars(ws, frozenset({"root", "fingerprint"})),
            "manifest": to_json(manifest_rows(ws)),
        },
    }
    if isinstance(src, dict):
        patch = _patch_text(src.get("patch"))
        view["source"] = {
            "base": src.get("base"),
            "tree": src.get("tree"),
            "repo": src.get("repo"),
            "fields": _scalars(src, frozenset({"patch", "changed"})),
            "changed": src.get("changed") or [],
            "patch": patch[:_PATCH_MAX],
            "patch_cut": len(patch) > _PATCH_MAX,
        }
    context = e.get("context")
    if isinstance(context, dict):
        msgs = context_messages(context)
        view["context_messages"] = len(msgs) if isinstance(msgs, list) else (1 if msgs else 0)
    return view


def _divergence(
    session: Session, parent: Session | None, report: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Where a what-if session went a different way than its parent, if that can be told: from a
    replay report, else from what the session's ``end`` kept, else by comparing it with its parent."""
    end = session.end()
    kept = end.get("divergence") if end is not None else None
    if report is None and kept is not None:
        place, more = divergence_place(kept)
        return {
            "from": "session",
            "seq": kept.get("seq"),
            "parent_seq": kept.get("parent_seq"),
            "diff_against": kept.get("diff_against", kept.get("parent_seq")),
            "text": f"the run diverged at the {place} of the run{more}"
            + (f" ({kept['label']})" if kept.get("label") else "")
            + f": {kept.get('reason', '')}",
            "changes": to_json(kept.get("diff") or []),
        }
    div = (report or {}).get("divergence")
    if isinstance(div, dict):
        kind = div.get("kind")
        same = [e for e in session.events if e.get("type") == kind]
        pos = div.get("position")
        child = same[pos - 1] if isinstance(pos, int) and 0 < pos <= len(same) else None
        place, more = divergence_place(div)
        return {
            "from": "report",
            "seq": child["seq"] if child else None,
            "parent_seq": (div.get("expected") or {}).get("seq"),
            "diff_against": div.get("diff_against"),
            "text": f"the replay diverged at the {place} of the run{more}: {div.get('reason', '')}",
            "changes": to_json(div.get("diff") or []),
        }
    if parent is None:
        return None
    from .diff import diff_sessions, signature

    result = diff_sessions(parent, session)
    if result.first_divergence is None:
        return {
            "from": "diff",
            "seq": None,
            "parent_seq": None,
            "text": None,
            "changes": [],
            "equivalent": True,
        }
    p = result.pairs[result.first_divergence]
    if p.b is not None and p.a is not None:
        text = f"this run's #{p.b['seq']} ({signature(p.b)}) differs from the parent's #{p.a['seq']}"
    elif p.b is not None:
        text = f"this run's #{p.b['seq']} ({signature(p.b)}) has no counterpart in the parent"
    else:
        assert p.a is not None
        text = f"the parent's #{p.a['seq']} ({signature(p.a)}) has no counterpart in this run"
    return {
        "from": "diff",
        "seq": p.b["seq"] if p.b else None,
        "parent_seq": p.a["seq"] if p.a else None,
        "diff_against": p.a["seq"] if p.a else None,
        "text": text,
        "changes": [c.to_json() for c in p.changes][:50],
        "equivalent": False,
    }


def view_model(
    session: Session,
    *,
    parent: Session | None = None,
    report: dict[str, Any] | None = None,
    sweep: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON data the page renders. ``parent`` (default: the header's parent, when it is in the
    same store) and ``report`` (a replay report) tell where a what-if session diverged. ``sweep``
    (:func:`forkpoint.outcome.by_checkpoint`; default: computed from the session's fork arms with
    outcomes in its store) is drawn as the pass rate by checkpoint."""
    h = session.header
    parent_ref = h.get("parent") if isinstance(h.get("parent"), dict) else None
    if parent is None and parent_ref and parent_ref.get("session_id"):
        try:
            parent = Session.load(session.path.parent / str(parent_ref["session_id"]), share_lists=True)
        except SessionError:
            parent = None
    times = [t for t in [_parse_ts(h.get("created")), *(_parse_ts(e.get("ts")) for e in session.events)] if t]
    t0 = min(times) if times else None
    strings = _Strings()
    messages = _Messages(strings)
    events: list[dict[str, Any]] = []
    turn = 0
    last: dict[str, Any] | None = None  # the latest model call (a turn's)
    # (model call's seq, the span it was made in, its unanswered tool calls)
    pending: list[tuple[int, Any, list[dict[str, Any]]]] = []
    stats: dict[str, Any] = {
        "model_calls": 0,
        "tool_calls": 0,
        "mcp_requests": 0,
        "checkpoints": 0,
        "notes": 0,
        "input_tokens": 0,
        "output_tokens": 0,
    }
    end_ms = 0.0
    spans = tool_spans(session.records())
    for e in in_start_order(session.records()):  # (as show lists them: a turn's calls after it)
        kind = e.get("type")
        t = _ms_since(e.get("ts"), t0)
        v: dict[str, Any] = {
            "seq": e.get("seq"),
            "type": kind,
            "ts": e.get("ts"),
            "t": t,
            "duration_ms": e.get("duration_ms"),
            "span_id": e.get("span_id"),
            "parent_span_id": e.get("parent_span_id"),
        }
        for k in ("source", "recorded_seq", "override"):
            if e.get(k) is not None:
                v[k] = to_json(e[k])
        if kind == "model_call" and (held := withheld_bodies(e)):
            v["withheld"] = [[part, why] for part, why in held]  # (in the call's line and detail)
        if kind == "model_call" and (call_kind(e) != "model" or in_tool(e, spans)):
            # Telemetry, MCP, plain HTTP, or a request a tool made: shown as such, never a turn.
            req = e.get("request") or {}
            resp = e.get("response") or {}
            v["type"] = "http_call"
            v["turn"] = turn
            v["kind"] = call_kind(e)
            v["label"] = kinds.mcp_method(req.get("body")) if v["kind"] == "mcp" else None
            v["label"] = v["label"] or endpoint(e)
            v["status"] = resp.get("status")
            if e.get("error"):
                v["error"] = to_json(e.get("error"))
        elif kind == "model_call":
            if retries(e, last):
                v["retry"] = True
            else:
                turn += 1
            last = e
            v["turn"] = turn
            v.update(_model_view(e, strings, messages))
            stats["model_calls"] += 1
            usage = genai_usage(e.get("summary") or {})  # (input with the prompt cache's)
            stats["input_tokens"] += usage.get("input_tokens") or 0
            stats["output_tokens"] += usage.get("output_tokens") or 0
            calls = [dict(c) for c in (e.get("summary") or {}).get("tool_calls") or [] if isinstance(c, dict)]
            if calls:
                pending.append((e["seq"], e.get("parent_span_id"), calls))
        elif kind == "tool_call":
            v["turn"] = turn
            v["tool"] = e.get("tool")
            v["args"] = to_json(e.get("args"))
            if "error" in e:
                v["error"] = to_json(e.get("error"))
            elif "unrecorded" in e:
                v["unrecorded"] = to_json(e.get("unrecorded"))
            else:
                v["result"] = to_json(e.get("result"), escape=True)  # (as show --json: bytes apart from data)
                failed = mcp_tool_error(e)
                if failed is not None:
                    v["mcp_error"] = failed
            # (a sub-agent's tool answers its own model call)
            here = [
                ((seq, calls), calls) for seq, made_in, calls in pending if made_in == e.get("parent_span_id")
            ]
            found = asking_call(e, v["args"], here)
            if found is not None:
                (model_seq, calls), hit = found
                calls.remove(hit)
                v["call_id"] = hit.get("id")
                v["requested_by"] = model_seq
            if mcp_session_request(e):  # (initialize, tools/list…: MCP session traffic, no tool's call)
                v["mcp_session"] = True
                stats["mcp_requests"] += 1
            else:
                stats["tool_calls"] += 1
        elif kind == "checkpoint":
            v.update(_checkpoint_view(e))
            v["turn"] = e["turn"] if isinstance(e.get("turn"), int) else turn
            stats["checkpoints"] += 1
        elif kind == "note":
            v["turn"] = turn
            v["text"] = e.get("text")
            if e.get("data") is not None:
                v["data"] = to_json(e.get("data"))
            stats["notes"] += 1
        elif kind == "outcome":
            v["turn"] = turn
            v["command"] = e.get("command")
            v["passed"] = e.get("passed")
            v["raw"] = to_json({k: x for k, x in e.items() if k not in ("prev", "hash")})
        elif kind == "end":
            v["turn"] = None
            v["exit_code"] = e.get("exit_code")
            v["reason"] = e.get("reason")
            v["uncaught"] = to_json(e.get("uncaught") or [])
            v["incomplete"] = to_json(e.get("incomplete"))
            if e.get("divergence"):
                v["divergence"] = to_json(e.get("divergence"))
        else:
            v["turn"] = turn
            v["raw"] = to_json({k: x for k, x in e.items() if k not in ("prev", "hash")})
        if t is not None:
            end_ms = max(end_ms, t + float(e.get("duration_ms") or 0) if kind != "end" else t)
        events.append(v)
    end = session.end()
    if end is not None and t0 is not None:
        created = _ms_since(h.get("created"), t0) or 0.0
        end_ms = max(end_ms, created + float(end.get("duration_ms") or 0))
    stats["duration_ms"] = round(end_ms, 3)
    stats["exit_code"] = end.get("exit_code") if end else None
    stats["events"] = len(events)
    return {
        "format": "forkpoint.viewer",
        "version": 1,
        "forkpoint": __version__,
        "header": to_json(h),
        "truncated": session.truncated,
        "finished": end is not None,
        "t0": t0.isoformat().replace("+00:00", "Z") if t0 else None,
        "stats": stats,
        "strings": strings.items,
        "events": events,
        "parent": {
            "session_id": parent_ref.get("session_id"),
            "seq": parent_ref.get("seq"),
            "found": parent is not None,
            "name": parent.header.get("name") if parent is not None else None,
        }
        if parent_ref
        else None,
        "divergence": _divergence(session, parent, report) if parent_ref or report else None,
        "sweep": sweep if sweep is not None else sweep_of(session),
    }


# --------------------------------------------------------------------------- the page


#: JavaScript's JSON.parse rounds an integer beyond 2**53 - 1 (a 64-bit id, a snowflake): the page
#: holds one as the string ``"\\u0000int:<digits>"``, and a string that begins like that or like
#: ``"\\u0000str:"`` as ``"\\u0000str:"`` + itself; the script shows each as it was recorded.
_BIG_INT, _ESCAPED = "\x00int:", "\x00str:"
_EXACT_IN_JS = 2**53 - 1


def _exact_in_js(value: Any) -> Any:
    """``value`` (plain JSON data) with the integers JavaScript would round, and the strings that would
    read as one of them, in the page's own forms (:data:`_BIG_INT`)."""
    if isinstance(value, dict):
        return {k: _exact_in_js(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_exact_in_js(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _EXACT_IN_JS:
        return f"{_BIG_INT}{value}"
    if isinstance(value, str) and value.startswith((_BIG_INT, _ESCAPED)):
        return _ESCAPED + value
    return value


def _script_json(data: Any) -> str:
    """JSON safe inside ``<script type="application/json">``: ``<``, ``>`` and ``&`` (so no ``</script>``
    or ``<!--`` can close or confuse the element) and U+2028/U+2029 are written as ``\\u`` escapes;
    integers beyond JavaScript's exact range as :data:`_BIG_INT` strings."""
    text = json_text(_exact_in_js(data)).decode()
    return (
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def _esc(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")


def _resent_as_kept(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``events`` with each model call's ``messages`` as the page holds them: the ones after those it
    shares with the model call before, ``messages_keep`` saying how many it shares (a conversation
    resent whole at every call made the page grow with the square of the turns). The script
    rebuilds each list."""
    out = []
    last: list[int] = []
    for e in events:
        if e.get("type") == "model_call" and isinstance(e.get("messages"), list):
            messages = e["messages"]
            keep = 0
            for a, b in zip(last, messages, strict=False):
                if a != b:
                    break
                keep += 1
            e = {**e, "messages": messages[keep:], "messages_keep": keep}
            last = messages
        out.append(e)
    return out


def render(
    session: Session,
    *,
    parent: Session | None = None,
    report: dict[str, Any] | None = None,
    sweep: dict[str, Any] | None = None,
) -> str:
    """The whole page as a string (see the module docstring)."""
    from .scrub import rescrubbed
    from .viewer.assets import CSS, JS

    session = rescrubbed(session)  # the rules in force now apply to what leaves (docs/security.md)
    report, sweep = scrub_json(report), scrub_json(sweep)  # an override's value is the user's
    data = view_model(session, parent=parent, report=report, sweep=sweep)
    data["events"] = _resent_as_kept(data["events"])
    csp = (
        f"default-src 'none'; style-src {_csp_hash(CSS)}; script-src {_csp_hash(JS)}; "
        "img-src data:; base-uri 'none'; form-action 'none'"
    )
    title = f"forkpoint · {session.id}" + (
        f" · {session.header['name']}" if session.header.get("name") else ""
    )
    return (
        "<!doctype html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{csp}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        '<meta name="referrer" content="no-referrer">\n'
        '<link rel="icon" href="data:,">\n'
        f"<title>{_esc(title)}</title>\n"
        f"<style>{CSS}</style>\n</head>\n<body>\n"
        '<noscript><p class="noscript">This session viewer needs JavaScript (it runs locally: the page '
        "makes no network request).</p></noscript>\n"
        '<div id="app"></div>\n'
        f'<script type="application/json" id="forkpoint-data">{_script_json(data)}</script>\n'
        f"<script>{JS}</script>\n</body>\n</html>\n"
    )


def write_html(
    session: Session,
    path: str | Path,
    *,
    parent: Session | None = None,
    report: dict[str, Any] | None = None,
    sweep: dict[str, Any] | None = None,
) -> Path:
    """Write the page to ``path`` (owner-only permissions, like the session it shows)."""
    path = Path(path)
    page = render(session, parent=parent, report=report, sweep=sweep).encode()
    return write_private(path, page)
