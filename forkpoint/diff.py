"""``forkpoint diff A B``: align two sessions call by call and say where and how they parted.

Calls (model and tool calls; not telemetry, which a replay never diverges on) are aligned by their
*signature* — kind plus endpoint or tool name — their common start paired first, the rest with a
longest-matching-subsequence alignment, so an extra tool call in one run shows as an insertion
rather than shifting every later pair. Calls are taken in the order they started (their ``sent``
ordinals), not the order they were logged in: parallel tools are logged as they finish, and a
what-if's replay logs each call as it is served. Two aligned calls are *equivalent* when their match keys are
equal; the first pair that is not (or the first unpaired call) is the first divergence. Sessions are
equivalent when every call pairs with an equivalent one.

Equivalent calls may still have *answered* differently: a tool call whose result changed (a what-if
override, a tool that is not deterministic) or a model call whose response changed. The match key
does not cover the answer, so such a pair stays equivalent (``~`` in the table; the exit code stays
0), but the text output prints its JSON-path differences under ``$.result``/``$.error`` or
``$.response``, labelled as outside the match key and counted on the verdict line, at most
:data:`MAX_LINES_PER_CALL` lines for each of the first :data:`MAX_CALLS_SHOWN` such calls. Runs
whose ends say other exit codes are said so on the verdict line too.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.table import Table

from .events import answer_tool, endpoint, in_start_order, mcp_tool_error
from .jsondiff import Change, EqualPairs, format_changes, json_diff
from .log import Session
from .match import configured, event_key, key_spec, normalized, stored_key
from .providers import auxiliary, genai_usage, recorded_response, response_text, summary
from .text import apart, escape

#: Paths of :func:`comparable` covered by the match key; every other difference is in the answer.
_KEY_ROOTS = ("$.request", "$.args")
#: Text output bounds for differences outside the match key: lines per call, and calls shown.
MAX_LINES_PER_CALL = 12
MAX_CALLS_SHOWN = 20


def _calls(session: Session) -> list[dict[str, Any]]:
    # Telemetry (a trace upload, a price list) is no call of the run's: a replay never diverges on it.
    return [
        dict(e) for e in session.calls() if e["type"] != "model_call" or summary(e)["kind"] != "telemetry"
    ]


def signature(event: dict[str, Any]) -> str:
    """``model POST /v1/chat/completions``, ``http POST /v1/search`` (an exchange's kind: ``model``,
    ``mcp`` or ``http``) or ``tool NAME``: what must agree for two calls to pair up."""
    return f"{'tool' if event['type'] == 'tool_call' else summary(event)['kind']} {endpoint(event)}"


def comparable(event: dict[str, Any]) -> dict[str, Any]:
    """The part of a call its match key covers, plus its outcome (for the per-event diff).

    Tool calls: ``args`` (key) and ``result`` or ``error``, and for an MCP request what the server
    sent the agent meanwhile (``received``: log messages, sampling and elicitation requests,
    progress; without the JSON-RPC ids, which differ from run to run). Model calls: ``request``
    (key) and ``response``, the answer as the agent reads it (see :func:`_model_outcome`).
    """
    if event["type"] == "tool_call":
        out: dict[str, Any] = {"args": event.get("args")}
        if "error" in event:
            out["error"] = _without_frames(event.get("error"))
        else:
            result = event.get("result")
            if isinstance(result, dict) and isinstance(result.get("raised"), dict):  # (a generator's)
                result = {**result, "raised": _without_frames(result["raised"])}
            out["result"] = result
        received = (event.get("mcp") or {}).get("received")
        if received:
            out["received"] = [_sent(m) for m in received]
        return out
    return {"request": normalized(event), "response": _model_outcome(event)}


def _sent(message: dict[str, Any]) -> dict[str, Any]:
    """A message an MCP server sent (``mcp.received``) as a run's outcome: its method and params,
    the progress token (a request's JSON-RPC id) left out."""
    params = message.get("params")
    if isinstance(params, dict):
        params = {k: v for k, v in params.items() if k != "progressToken"}
    return {"method": message.get("method"), "params": params}


def _without_frames(error: Any) -> Any:
    """A tool's recorded exception without where it was raised (``frames``; its cause's, context's
    and an exception group's exceptions' too): the same exception raised from another checkout, or
    after an edit that moved lines, is the same outcome."""
    if not isinstance(error, dict):
        return error
    out = {k: v for k, v in error.items() if k != "frames"}
    for chained in ("cause", "context"):
        if chained in out:
            out[chained] = _without_frames(out[chained])
    if isinstance(out.get("exceptions"), list):
        out["exceptions"] = [_without_frames(e) for e in out["exceptions"]]
    return out


def _maybe_json(text: Any) -> Any:
    """Tool-call arguments as sent are JSON text: parsed, so a diff names the argument that changed."""
    if isinstance(text, str):
        try:
            value = json.loads(text)
        except ValueError:
            return text
        return value if isinstance(value, dict | list) else text
    return text


def _model_outcome(event: dict[str, Any]) -> dict[str, Any]:
    """What a model call answered: status, text, tool calls (name and arguments; ids are random per
    run, so left out), stop reason and error. Response ids, timestamps and usage are left out too:
    they differ between any two runs (tokens are compared in the summary table)."""
    summary = event.get("summary") or {}
    resp = recorded_response(event)
    calls = summary.get("tool_calls")
    out: dict[str, Any] = {
        "status": resp["status"],
        "text": response_text(event["request"]["url"], resp),
        "tool_calls": [
            {"name": c.get("name"), "arguments": _maybe_json(c.get("arguments"))}
            for c in calls
            if isinstance(c, dict)
        ]
        if isinstance(calls, list)
        else None,
        "stop_reason": summary.get("stop_reason"),
        "error": summary.get("error"),
    }
    transport = event.get("error")
    if isinstance(transport, dict) and not out["error"]:
        out["error"] = f"{transport.get('type')}: {transport.get('message')}"
    if out["text"] is None and out["tool_calls"] is None:  # an API the summary cannot read
        raw = event.get("response") or {}
        out["body"] = (
            "".join(recorded_response(event)["stream"] or [])
            if raw.get("body_kind") == "stream"
            else raw.get("body")
        )
    return out


def in_key(change: Change) -> bool:
    """True when ``change`` (a path of :func:`comparable`) is covered by the match key."""
    return any(change.path == r or change.path.startswith((r + ".", r + "[")) for r in _KEY_ROOTS)


def key(event: dict[str, Any], spec: str | None = None, header_spec: Any = None) -> str:
    """The match key of a recorded call: the one it stored when computed under ``spec`` (the key
    spec in force, :func:`~forkpoint.match.key_spec`; ``header_spec``: its session header's
    ``keys``), else recomputed, so sessions of older versions or other rules compare fairly.
    Recomputing a model call's key scrubs and hashes its whole request: an agent that resends its
    conversation would make that quadratic in the conversation's length."""
    if spec is not None:
        stored = stored_key(event, spec, header_spec)
        if stored is not None:
            return stored
    return event_key(event)


@dataclass
class Pair:
    """One row of the alignment: ``a`` and/or ``b`` (None where a call exists in one run only).

    ``changes`` lists the differences of two calls of the same kind: of the request (key) for
    non-equivalent pairs, and of the answer — tool result or error, model response — for any pair,
    including calls asked the same way but answered differently (marked ``~`` in the table).
    """

    a: dict[str, Any] | None
    b: dict[str, Any] | None
    equivalent: bool
    changes: list[Change] = field(default_factory=list)

    @property
    def key_changes(self) -> list[Change]:
        """Differences the match key covers (request, tool arguments)."""
        return [c for c in self.changes if in_key(c)]

    @property
    def outcome_changes(self) -> list[Change]:
        """Differences the match key ignores (tool result or error, model response)."""
        return [c for c in self.changes if not in_key(c)]

    @property
    def outcome(self) -> str:
        """``"result"`` (tool call) or ``"response"`` (model call): what ``outcome_changes`` are of."""
        e = self.a or self.b
        return "result" if e is not None and e["type"] == "tool_call" else "response"


def _cell(event: dict[str, Any] | None) -> str:
    return f"#{event['seq']} {signature(event)}" if event else "—"


def known_sum(values: Iterable[Any]) -> int | None:
    """The sum of the counts given, None when none was (unknown, not 0)."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _tool_answer(model_call: Mapping[str, Any], tools: list[Any]) -> str | None:
    """The answer the model gave in ``model_call`` by a framework's answer tool (:func:`~forkpoint.events.answer_tool`):
    the result of the recorded call of that tool made after it (smolagents' ``final_answer``
    returns the answer), else the model's arguments (pydantic-ai's output tools have no function:
    the arguments are the output). None when it asked for no such tool."""
    for c in summary(model_call).get("tool_calls") or ():
        name = c.get("name") if isinstance(c, dict) else None
        if not answer_tool(name):
            continue
        ran = next(
            (t for t in tools if t["tool"] == name and t["seq"] > model_call["seq"] and "result" in t), None
        )
        answer = ran["result"] if ran is not None else _maybe_json(c.get("arguments"))
        return answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
    return None


def totals(session: Session) -> dict[str, Any]:
    """What a run amounts to: ``turns`` (model calls that ask for an answer: no telemetry, MCP or
    plain HTTP, nor a provider's token counting or embeddings, :func:`~forkpoint.providers.auxiliary`), ``tools``
    (calls by name), ``tool_errors`` (raised, or an MCP tool's ``isError`` answer),
    ``tokens`` (``input``/``output``, summed over the model calls' usage, None when none reported it; input with the tokens the
    prompt cache read and wrote, as :func:`~forkpoint.providers.genai_usage` counts them), ``model_ms`` (the model
    calls' summed wall time, ms), ``final_answer`` (the last model text, or the answer a framework
    took by a tool: :func:`_tool_answer`) and ``exit_code``."""
    models = [m for m in session.by_type("model_call") if summary(m)["kind"] == "model"]
    tools = session.by_type("tool_call")
    # (input tokens with the prompt cache's, which Anthropic's own count leaves out: genai_usage)
    usages: list[Mapping[str, Any]] = [genai_usage(summary(m)) for m in models]
    # (None when no call reported it, as an OpenAI stream without include_usage: no "0 tokens")
    tokens_in = known_sum(u.get("input_tokens") for u in usages)
    tokens_out = known_sum(u.get("output_tokens") for u in usages)
    final = None
    for m in reversed(models):
        final = response_text(m["request"]["url"], recorded_response(m)) or _tool_answer(m, tools)
        if final:
            break
    end = session.end()
    return {
        "turns": sum(1 for m in models if not auxiliary(m["request"].get("url"))),
        "tools": dict(Counter(t["tool"] for t in tools)),
        "tool_errors": sum(1 for t in tools if "error" in t or mcp_tool_error(t) is not None),
        "tokens": {"input": tokens_in, "output": tokens_out},
        "model_ms": round(sum(float(m.get("duration_ms") or 0) for m in models), 3),
        "final_answer": final,
        "exit_code": end.get("exit_code") if end else None,
    }


@dataclass
class SessionDiff:
    """The result of :func:`diff_sessions`."""

    a: Session
    b: Session
    pairs: list[Pair]
    first_divergence: int | None  # index into pairs
    totals: tuple[dict[str, Any], dict[str, Any]]

    @property
    def equivalent(self) -> bool:
        """True when every call pairs with an equivalent call."""
        return self.first_divergence is None

    @property
    def first_change(self) -> int | None:
        """Where behaviour first changed (index into pairs): the first pair that is not equivalent
        or whose calls were answered differently; None when the runs asked and got the same. A
        difference an ignore rule takes out of the key (an id the model makes anew) is no change."""
        return next(
            (
                i
                for i, p in enumerate(self.pairs)
                if not p.equivalent or any(not c.ignored for c in p.changes)
            ),
            None,
        )

    def describe(self, index: int) -> tuple[str, str | None]:
        """(where, first JSON path that differs) for pair ``index``: ``"seq 3 ↔ seq 3 (model POST
        /v1/chat/completions)"``, ``"$.response.text"``."""
        p = self.pairs[index]
        e = p.a or p.b
        assert e is not None
        sides = " ↔ ".join(f"seq {x['seq']}" if x is not None else "—" for x in (p.a, p.b))
        # (a difference an ignore rule takes out, a timestamp, is not where they parted)
        named = [c for c in p.changes if not c.ignored] or p.changes
        return f"{sides} ({signature(e)})", named[0].path if named else None

    def to_json(self) -> dict[str, Any]:
        """JSON form (``forkpoint diff --json``)."""

        def ref(e: dict[str, Any] | None) -> dict[str, Any] | None:
            return {"seq": e["seq"], "signature": signature(e)} if e else None

        first = self.pairs[self.first_divergence] if self.first_divergence is not None else None
        return {
            "a": self.a.id,
            "b": self.b.id,
            "equivalent": self.equivalent,
            "first_divergence": {
                "a": ref(first.a),
                "b": ref(first.b),
                "diff": [c.to_json() for c in first.changes],
            }
            if first
            else None,
            "pairs": [
                {
                    "a": ref(p.a),
                    "b": ref(p.b),
                    "equivalent": p.equivalent,
                    "diff": [c.to_json() for c in p.changes],
                }
                for p in self.pairs
            ],
            "summary": {"a": self.totals[0], "b": self.totals[1]},
        }


def _mark_ignored(x: dict[str, Any], y: dict[str, Any], changes: list[Change]) -> list[Change]:
    """``changes`` of two calls whose match keys differ, each request (or argument) difference an
    ignore rule in force takes out of the key marked ``ignored``, as a replay's divergence report
    marks it: the key differs for another reason, and the rule's part (a timestamp in the system
    prompt) is no part of why."""
    if x["type"] not in ("tool_call", "model_call") or not any(in_key(c) for c in changes):
        return changes
    rules = configured()
    if not rules:
        return changes
    tool = x["tool"] if x["type"] == "tool_call" else None
    # (comparable() puts a model call's normalized request under "request"; a tool's args as they are)
    prefix = "$.request" if tool is None else "$"
    left, right = rules.mask(normalized(x), tool), rules.mask(normalized(y), tool)
    left_over = {prefix + c.path[1:] for c in json_diff(left, right)}
    return [
        dataclasses.replace(c, ignored=True) if in_key(c) and c.path not in left_over else c for c in changes
    ]


def _alignment(sa: list[str], sb: list[str]) -> list[tuple[str, int, int, int, int]]:
    """difflib opcodes aligning two runs' call signatures, their common start paired first: both
    runs began there, and the longest matching block alone, taken where it first occurs in A, may
    pair A's 1st model call with B's 2nd (``M L M L M`` against ``M G M L M``), leaving B's 1st
    "only in B" though both runs asked it the same."""
    n = 0
    while n < min(len(sa), len(sb)) and sa[n] == sb[n]:
        n += 1
    rest = difflib.SequenceMatcher(None, sa[n:], sb[n:], autojunk=False).get_opcodes()
    head = [("equal", 0, n, 0, n)] if n else []
    return head + [(op, i1 + n, i2 + n, j1 + n, j2 + n) for op, i1, i2, j1, j2 in rest]


def diff_sessions(a: Session, b: Session) -> SessionDiff:
    """Align the calls of ``a`` and ``b`` and compare them (see module docstring)."""
    spec, ha, hb = key_spec(), a.header.get("keys"), b.header.get("keys")
    ca, cb = in_start_order(_calls(a)), in_start_order(_calls(b))
    sa, sb = [signature(e) for e in ca], [signature(e) for e in cb]
    pairs: list[Pair] = []
    equal = EqualPairs()  # (each pair of resent messages compared once, not at every call)
    for op, i1, i2, j1, j2 in _alignment(sa, sb):
        if op == "equal":
            for x, y in zip(ca[i1:i2], cb[j1:j2], strict=True):
                if x["type"] == "model_call":  # (the next model call resends this one's messages)
                    equal.next()
                # A call asked the same way may still have answered differently (an override): its
                # diff shows that, though the pair stays equivalent under the match key.
                same = key(x, spec, ha) == key(y, spec, hb)
                changes = json_diff(comparable(x), comparable(y), equal=equal)
                if same:  # (a request difference under one match key is one the key ignores: a rule)
                    changes = [dataclasses.replace(c, ignored=True) if in_key(c) else c for c in changes]
                else:
                    changes = _mark_ignored(x, y, changes)
                pairs.append(Pair(x, y, same, changes))
        else:
            # Replaced stretches pair up positionally as far as they go; the rest is one-sided.
            xs, ys = ca[i1:i2], cb[j1:j2]
            for k in range(max(len(xs), len(ys))):
                xo = xs[k] if k < len(xs) else None
                yo = ys[k] if k < len(ys) else None
                if xo and xo["type"] == "model_call":
                    equal.next()
                changes = (
                    _mark_ignored(xo, yo, json_diff(comparable(xo), comparable(yo), equal=equal))
                    if xo and yo and xo["type"] == yo["type"]
                    else []
                )
                pairs.append(Pair(xo, yo, False, changes))
    first = next((i for i, p in enumerate(pairs) if not p.equivalent), None)
    return SessionDiff(a, b, pairs, first, (totals(a), totals(b)))


def _bounded(changes: list[Change], max_lines: int, indent: str = "") -> list[str]:
    """:func:`format_changes` lines of ``changes``, at most ``max_lines`` of them (a long text diff
    is cut), then a line saying how many differences were left out."""
    lines: list[str] = []
    shown = 0
    for c in changes:
        block = format_changes([c]).splitlines()
        if len(lines) + len(block) > max_lines:
            if not lines:  # one long text diff: show its start rather than nothing
                lines, shown = block[: max_lines - 1] + ["      …"], 1
            break
        lines.extend(block)
        shown += 1
    if shown < len(changes):
        n = len(changes) - shown
        lines.append(f"  … and {n} more difference{'s' if n != 1 else ''} (forkpoint diff --json lists all)")
    return [indent + line for line in lines]


def _count_phrase(pairs: list[Pair]) -> str:
    """``1 tool result differs``, ``2 model responses differ``, ``1 tool result and 1 model response differ``;
    calls that differ only where the match key ignores their request (an ignore rule) are counted
    apart: ``1 model request differs only where the match key ignores it``."""
    counts = Counter(p.outcome for p in pairs if p.outcome_changes)
    parts = [
        f"{n} {noun}{'s' if n != 1 else ''}"
        for n, noun in ((counts["result"], "tool result"), (counts["response"], "model response"))
        if n
    ]
    out = " and ".join(parts) + (" differ" if sum(counts.values()) != 1 else " differs") if parts else ""
    ignored = sum(1 for p in pairs if not p.outcome_changes)
    if ignored:
        them = f"{ignored} call{'s' if ignored != 1 else ''} differ{'s' if ignored == 1 else ''} only where the match key ignores {'it' if ignored == 1 else 'them'}"
        out = f"{out} and {them}" if out else them
    return out


def _where(p: Pair) -> str:
    return " vs ".join(
        f"{side} seq {e['seq']} ({signature(e)})" for side, e in (("A", p.a), ("B", p.b)) if e is not None
    )


def _stopped_at(b: Session, recorded: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """How what-if session ``b`` diverged, when it stopped at the call that answered to ``recorded``
    (its ``end`` keeps it: :class:`~forkpoint.events.EndDivergence`), and the differences are known."""
    end: Mapping[str, Any] = b.end() or {}
    div = end.get("divergence")
    if isinstance(div, Mapping) and div.get("parent_seq") == recorded.get("seq") and div.get("diff"):
        return div
    return None


def exit_text(session: Session) -> str:
    """How ``session`` ended, for people: its exit code, ``unfinished`` without an end, ``unknown``
    when its end has none (an imported session: the file does not say)."""
    end = session.end()
    if end is None:
        return "unfinished"
    code = end.get("exit_code")
    return "unknown" if code is None else str(code)


def ended_differently(a: Session, b: Session) -> str | None:
    """``they ended differently (A exit 0, B exit 1)`` when the runs' ends say other exit codes
    (a session without an end: ``unfinished``), else None."""

    def code(s: Session) -> str:
        text = exit_text(s)
        return text if text == "unfinished" else f"exit {text}"

    ca, cb = code(a), code(b)
    return f"they ended differently (A {ca}, B {cb})" if ca != cb else None


def render_diff(result: SessionDiff, console: Console) -> None:
    """Print the alignment, the first divergence with its JSON-path diff, the differences the match
    key ignores (tool results, model responses) of equivalent calls, and the summary table."""
    a, b = result.a, result.b
    console.print(f"[bold]A[/bold] {a.id}  {escape(a.header.get('name') or '')}")
    console.print(f"[bold]B[/bold] {b.id}  {escape(b.header.get('name') or '')}")
    answered = [(i, p) for i, p in enumerate(result.pairs, start=1) if p.equivalent and p.changes]
    if result.first_divergence is None:
        n = len(result.pairs)
        verdict = f"equivalent under the match key: {n} call{'s pair' if n != 1 else ' pairs'} up one to one"
        ended = ended_differently(a, b)
        buts = (
            [f"{_count_phrase([p for _, p in answered])} (not part of the match key; see below)"]
            if answered
            else []
        )
        buts += [ended] if ended else []
        if buts:
            console.print(f"[yellow]{verdict}, but {' and '.join(buts)}[/yellow]")
        else:
            console.print(f"[green]{verdict}[/green]")
    else:
        p = result.pairs[result.first_divergence]
        console.print(
            f"[yellow]first divergence at call {result.first_divergence + 1}: {escape(_where(p))}[/yellow]"
        )
        if p.key_changes:
            console.print(escape(format_changes(p.key_changes, limit=12)), highlight=False)
        elif p.a is None or p.b is None:
            console.print(f"  only in {'B' if p.a is None else 'A'}")
            stopped = _stopped_at(b, p.a) if p.a is not None else None
            if stopped is not None:  # (a what-if that stopped at this call wrote none: its end says how)
                against = stopped.get("diff_against", p.a["seq"]) if p.a is not None else None
                console.print(
                    f"  B stopped there, its request not recorded ({escape(str(stopped.get('reason') or ''))}); "
                    f"recorded (A seq {against}) → B's request:",
                    highlight=False,
                )
                changes = [Change.from_json(c) for c in stopped.get("diff") or []]
                console.print(escape(format_changes(changes, limit=12)), highlight=False)
        if p.outcome_changes:
            console.print(f"  {p.outcome} differs too (not part of the match key):", highlight=False)
            lines = _bounded(p.outcome_changes, MAX_LINES_PER_CALL, indent="  ")
            console.print(escape("\n".join(lines)), highlight=False)
    table = Table(box=None, header_style="bold")
    for col in ("#", "", "A", "B", "differences"):
        table.add_column(col)
    for i, p in enumerate(result.pairs, start=1):
        mark = (
            ("~" if p.changes else "=")
            if p.equivalent
            else ("+" if p.a is None else "-" if p.b is None else "≠")
        )
        counts = [
            f"{n} {what}"
            for n, what in (
                (len(p.key_changes), "args" if p.outcome == "result" else "request"),
                (len(p.outcome_changes), p.outcome),
            )
            if n
        ]
        table.add_row(str(i), mark, escape(_cell(p.a)), escape(_cell(p.b)), ", ".join(counts))
    console.print(table)
    for i, p in answered[:MAX_CALLS_SHOWN]:
        assert p.a is not None and p.b is not None  # equivalent pairs have both sides
        what = [f"{p.outcome} differs (not part of the match key)"] if p.outcome_changes else []
        if p.key_changes:
            asked = "args differ" if p.outcome == "result" else "request differs"
            what.insert(
                0, f"{asked} only where the match key ignores {'them' if p.outcome == 'result' else 'it'}"
            )
        console.print(
            f"~ call {i}: {escape(signature(p.a))} (A seq {p.a['seq']}, B seq {p.b['seq']}): {'; '.join(what)}",
            highlight=False,
        )
        console.print(escape("\n".join(_bounded(p.changes, MAX_LINES_PER_CALL))), highlight=False)
    if len(answered) > MAX_CALLS_SHOWN:
        n = len(answered) - MAX_CALLS_SHOWN
        console.print(
            f"… and {n} more equivalent call{'s' if n != 1 else ''} with differences outside the match key"
            " (forkpoint diff --json lists all)",
            highlight=False,
        )
    ta, tb = result.totals
    summary = Table(box=None, header_style="bold", title="summary", title_justify="left")
    for col in ("", "A", "B"):
        summary.add_column(col)

    def tools(t: dict[str, Any]) -> str:
        return escape(", ".join(f"{k}×{v}" for k, v in t["tools"].items())) or "—"

    summary.add_row("turns", str(ta["turns"]), str(tb["turns"]))
    summary.add_row("tools called", tools(ta), tools(tb))
    summary.add_row("tool errors", str(ta["tool_errors"]), str(tb["tool_errors"]))
    summary.add_row(
        "tokens in/out",
        *(
            "/".join("—" if t["tokens"][k] is None else str(t["tokens"][k]) for k in ("input", "output"))
            for t in (ta, tb)
        ),
    )
    summary.add_row("final answer", *(escape(t) for t in apart(ta["final_answer"], tb["final_answer"])))
    summary.add_row("exit code", exit_text(a), exit_text(b))
    console.print(summary)
