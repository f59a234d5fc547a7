"""``forkpoint diff A B``: align two sessions call by call and say where and how they parted.

Calls (model and tool calls) are aligned by their *signature* — kind plus endpoint or tool name — with
a longest-matching-subsequence alignment, so an extra tool call in one run shows as an insertion
rather than shifting every later pair. Two aligned calls are *equivalent* when their match keys are
equal; the first pair that is not (or the first unpaired call) is the first divergence. Sessions are
equivalent when every call pairs with an equivalent one.
"""

from __future__ import annotations

import difflib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .log import Session
from .match import Change, format_changes, json_diff, model_key, normalize_request, tool_key
from .providers import recorded_response, response_text


def _calls(session: Session) -> list[dict[str, Any]]:
    return [e for e in session.events if e["type"] in ("model_call", "tool_call")]


def signature(event: dict[str, Any]) -> str:
    """``model POST /v1/chat/completions`` or ``tool NAME``: what must agree for two calls to pair up."""
    if event["type"] == "tool_call":
        return f"tool {event['tool']}"
    from urllib.parse import urlsplit

    req = event["request"]
    return f"model {req['method'].upper()} {urlsplit(req['url']).path}"


def comparable(event: dict[str, Any]) -> dict[str, Any]:
    """The part of a call its match key covers, plus its outcome (for the per-event diff)."""
    if event["type"] == "tool_call":
        out: dict[str, Any] = {"args": event.get("args")}
        out["result" if "error" not in event else "error"] = event.get("result", event.get("error"))
        return out
    r = event["request"]
    return {"request": normalize_request(r["method"], r["url"], r["headers"], r["body"])}


def key(event: dict[str, Any]) -> str:
    """The match key of a recorded call (recomputed, so sessions of older versions compare fairly)."""
    if event["type"] == "tool_call":
        return tool_key(event["tool"], event["args"])
    return model_key(comparable(event)["request"])


@dataclass
class Pair:
    """One row of the alignment: ``a`` and/or ``b`` (None where a call exists in one run only).

    ``changes`` lists request differences of non-equivalent pairs, and result differences of tool
    calls that were asked the same way but answered differently (marked ``~`` in the table).
    """

    a: dict[str, Any] | None
    b: dict[str, Any] | None
    equivalent: bool
    changes: list[Change] = field(default_factory=list)


def _totals(session: Session) -> dict[str, Any]:
    models = session.by_type("model_call")
    tools = session.by_type("tool_call")
    tokens_in = sum(((m.get("summary") or {}).get("usage") or {}).get("input_tokens") or 0 for m in models)
    tokens_out = sum(((m.get("summary") or {}).get("usage") or {}).get("output_tokens") or 0 for m in models)
    final = None
    for m in reversed(models):
        final = response_text(m["request"]["url"], recorded_response(m))
        if final:
            break
    end = session.end()
    return {
        "turns": len(models),
        "tools": dict(Counter(t["tool"] for t in tools)),
        "tool_errors": sum(1 for t in tools if "error" in t),
        "tokens": {"input": tokens_in, "output": tokens_out},
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


def diff_sessions(a: Session, b: Session) -> SessionDiff:
    """Align the calls of ``a`` and ``b`` and compare them (see module docstring)."""
    ca, cb = _calls(a), _calls(b)
    sa, sb = [signature(e) for e in ca], [signature(e) for e in cb]
    pairs: list[Pair] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, sa, sb, autojunk=False).get_opcodes():
        if op == "equal":
            for x, y in zip(ca[i1:i2], cb[j1:j2], strict=True):
                same = key(x) == key(y)
                # A tool call asked the same way may still have answered differently (an override):
                # show that, though the pair stays equivalent under the match key.
                changes = (
                    json_diff(comparable(x), comparable(y)) if not same or x["type"] == "tool_call" else []
                )
                pairs.append(Pair(x, y, same, changes))
        else:
            # Replaced stretches pair up positionally as far as they go; the rest is one-sided.
            xs, ys = ca[i1:i2], cb[j1:j2]
            for k in range(max(len(xs), len(ys))):
                x = xs[k] if k < len(xs) else None
                y = ys[k] if k < len(ys) else None
                changes = (
                    json_diff(comparable(x), comparable(y)) if x and y and x["type"] == y["type"] else []
                )
                pairs.append(Pair(x, y, False, changes))
    first = next((i for i, p in enumerate(pairs) if not p.equivalent), None)
    return SessionDiff(a, b, pairs, first, (_totals(a), _totals(b)))


def render_diff(result: SessionDiff, console: Console) -> None:
    """Print the alignment, the first divergence with its JSON-path diff, and the summary table."""
    a, b = result.a, result.b
    console.print(f"[bold]A[/bold] {a.id}  {escape(a.header.get('name') or '')}")
    console.print(f"[bold]B[/bold] {b.id}  {escape(b.header.get('name') or '')}")
    if result.first_divergence is None:
        console.print(
            f"[green]equivalent under the match key: {len(result.pairs)} calls pair up one to one[/green]"
        )
    else:
        p = result.pairs[result.first_divergence]
        where = " vs ".join(
            f"{side} seq {e['seq']} ({signature(e)})" for side, e in (("A", p.a), ("B", p.b)) if e is not None
        )
        console.print(
            f"[yellow]first divergence at call {result.first_divergence + 1}: {escape(where)}[/yellow]"
        )
        if p.changes:
            console.print(escape(format_changes(p.changes, limit=12)), highlight=False)
        elif p.a is None or p.b is None:
            console.print(f"  only in {'B' if p.a is None else 'A'}")
    table = Table(box=None, header_style="bold")
    for col in ("#", "", "A", "B", "differences"):
        table.add_column(col)
    for i, p in enumerate(result.pairs, start=1):
        mark = (
            ("~" if p.changes else "=")
            if p.equivalent
            else ("+" if p.a is None else "-" if p.b is None else "≠")
        )
        cell = lambda e: f"#{e['seq']} {signature(e)}" if e else "—"  # noqa: E731
        table.add_row(
            str(i), mark, escape(cell(p.a)), escape(cell(p.b)), str(len(p.changes)) if p.changes else ""
        )
    console.print(table)
    ta, tb = result.totals
    summary = Table(box=None, header_style="bold", title="summary", title_justify="left")
    for col in ("", "A", "B"):
        summary.add_column(col)

    def tools(t: dict[str, Any]) -> str:
        return ", ".join(f"{k}×{v}" for k, v in t["tools"].items()) or "—"

    def short(text: str | None) -> str:
        text = " ".join((text or "—").split())
        return text if len(text) <= 70 else text[:69] + "…"

    summary.add_row("turns (model calls)", str(ta["turns"]), str(tb["turns"]))
    summary.add_row("tools called", tools(ta), tools(tb))
    summary.add_row("tool errors", str(ta["tool_errors"]), str(tb["tool_errors"]))
    summary.add_row(
        "tokens in/out",
        f"{ta['tokens']['input']}/{ta['tokens']['output']}",
        f"{tb['tokens']['input']}/{tb['tokens']['output']}",
    )
    summary.add_row("final answer", escape(short(ta["final_answer"])), escape(short(tb["final_answer"])))
    summary.add_row("exit code", str(ta["exit_code"]), str(tb["exit_code"]))
    console.print(summary)
