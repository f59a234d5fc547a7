"""The tables ``check``, ``fork`` and ``sweep`` print: built from their result rows alone, so the
same rows give the same table whichever executor produced them."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from rich.table import Table

from ..orchestrate import Arm
from ..outcome import Rate, rate_of
from ..replay.report import live_text
from ..text import apart, escape
from .check import verdict_text

_STYLE = {
    "reproduced": "green",
    "same": "green",
    "diverged": "red",
    "changed": "yellow",
    "stopped": "yellow",
    "ended differently": "yellow",
    "error": "red",
}
_BAR = 20


def _table(title: str | None, *columns: str) -> Table:
    table = Table(box=None, header_style="bold", title=title, title_justify="left", pad_edge=False)
    for col in columns:
        table.add_column(col, overflow="fold")
    return table


def _tags(tags: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in tags.items())


def _seconds(value: Any) -> str:
    return f"{float(value or 0):.2f} s"


def _passed(outcome: dict[str, Any] | None) -> str:
    if not outcome:
        return "—"
    if outcome.get("passed") is None:
        return f"[yellow]unknown[/yellow] ({escape(str(outcome.get('reason') or 'not measured'))})"
    # (an outcome that reads files measured the checkout, not what the run's tools wrote)
    served = outcome.get("served_tools")
    aside = f" [yellow](measured where {served} served tool call(s) did not run)[/yellow]" if served else ""
    if outcome.get("passed"):
        return "[green]pass[/green]" + aside
    why = outcome.get("reason") or f"exit {outcome.get('exit_code')}"
    return f"[red]fail[/red] ({escape(str(why))})" + aside


def _verdict(row: dict[str, Any]) -> str:
    style = _STYLE.get(row["status"], "")
    return f"[{style}]{escape(verdict_text(row))}[/{style}]" if style else escape(verdict_text(row))


def check_table(rows: list[dict[str, Any]], title: str | None = None) -> Table:
    """session, name, tags, verdict, time (plus outcome, when one was measured)."""
    with_outcome = any(r.get("outcome") for r in rows)
    cols = ["session", "name", "tags", "verdict", *(["outcome"] if with_outcome else []), "time"]
    table = _table(title, *cols)
    for r in rows:
        cells = [
            r["session_id"],
            escape(r.get("name") or ""),
            escape(_tags(r.get("tags") or {})),
            _verdict(r),
        ]
        if with_outcome:
            cells.append(_passed(r.get("outcome")))
        table.add_row(*cells, _seconds(r.get("seconds")))
    return table


def _pair(row: dict[str, Any], key: str, unit: str = "") -> str:
    ab = row.get("ab") or {}
    old, new = (ab.get("recorded") or {}).get(key), (ab.get("new") or {}).get(key)

    def shown(v: Any) -> str:
        if v is None:
            return "—"
        return f"{v:.0f}{unit}" if isinstance(v, float) else f"{v}{unit}"

    return f"{shown(old)} → {shown(new)}"


def _answers(row: dict[str, Any]) -> tuple[str | None, str | None] | None:
    """The final answers of an A/B row's recorded and new run; None without a new run."""
    ab = row.get("ab") or {}
    if not ab.get("new"):
        return None
    return (ab.get("recorded") or {}).get("final_answer"), ab["new"].get("final_answer")


def _answer(row: dict[str, Any]) -> str:
    answers = _answers(row)
    if answers is None:
        return "—"
    old, new = answers
    if old == new:
        return "[green]same[/green]"
    if old is not None and new is not None and old.split() == new.split():
        return "[yellow]differs (in whitespace only)[/yellow]"  # (shown alike in one line each)
    return "[yellow]differs[/yellow]"


def ab_table(rows: list[dict[str, Any]], title: str | None = None) -> Table:
    """One row per session of an A/B check: where behaviour first changed, whether the final answer
    did, and the outcome, tokens in and out and model time of the recorded run → the new one."""
    table = _table(
        title, "session", "name", "first change", "final answer", "outcome", "tokens in", "tokens out",
        "model time", "time",
    )  # fmt: skip
    for r in rows:
        ab = r.get("ab") or {}
        outcome = f"{_passed((ab.get('recorded') or {}).get('outcome'))} → {_passed((ab.get('new') or {}).get('outcome'))}"
        table.add_row(
            r["session_id"],
            escape(r.get("name") or ""),
            _verdict(r),
            _answer(r),
            outcome,
            _pair(r, "tokens_in"),
            _pair(r, "tokens_out"),
            _pair(r, "model_ms", " ms"),
            _seconds(r.get("seconds")),
        )
    return table


_ANSWER_WIDTH = 60


def ab_answers_table(rows: list[dict[str, Any]]) -> Table | None:
    """The final answers of the A/B rows whose answers differ, the recorded one beside the new one,
    each in one line of at most ``_ANSWER_WIDTH`` characters starting shortly before where they
    part; None when no answer differs."""
    table = _table("final answers that differ", "session", "name", "recorded", "new")
    for r in rows:
        answers = _answers(r)
        if answers is None or answers[0] == answers[1]:
            continue
        table.add_row(
            r["session_id"],
            escape(r.get("name") or ""),
            *(escape(a) for a in apart(*answers, _ANSWER_WIDTH)),
        )
    return table if table.row_count else None


def ab_summary_table(summary: dict[str, Any]) -> Table:
    """The two arms side by side (:func:`forkpoint.suite.check.ab_summary`)."""
    title = (
        f"{summary['compared']} of {summary['sessions']} sessions compared: "
        f"{summary.get('changed', 0)} changed, {summary.get('same', 0)} same, "
        f"{summary.get('stopped', 0)} stopped by the tool policy, {summary.get('error', 0)} errors"
    )
    table = _table(
        title, "arm", "outcome", "tokens in", "tokens out", "model time (total)", "model time (median)"
    )
    for arm in ("recorded", "new"):
        a = summary[arm]
        o = a["outcome"]
        median = a["median_model_ms"]
        table.add_row(
            arm,
            Rate(o["passed"], o["ran"]).text(),
            "—" if a["tokens_in"] is None else str(a["tokens_in"]),
            "—" if a["tokens_out"] is None else str(a["tokens_out"]),
            f"{a['model_ms']:.0f} ms",
            f"{median:.0f} ms" if median is not None else "—",
        )
    return table


def fork_table(arms: list[Arm], title: str | None = None) -> Table:
    """One row per arm: directory, checkpoint validation, calls replayed and live, exit code,
    outcome, session."""
    with_outcome = any(a.outcome for a in arms)
    cols = [
        "arm",
        "directory",
        "checkpoint",
        "calls",
        "exit",
        *(["outcome"] if with_outcome else []),
        "session",
    ]
    table = _table(title, *cols)
    for arm in arms:
        if not arm.valid:
            if arm.lost:  # (the task failed: whether it restored or ran is unknown)
                state, calls = "[red]task failed[/red]", "unknown"
            elif arm.unrun == "restore failed":
                state, calls = "[red]restore failed[/red]", "not run"
            elif arm.unrun == "validation failed":
                state, calls = "[red]invalid[/red]", "not run"
            else:  # (every check passed)
                state, calls = "[green]valid[/green]", f"[red]not run: {arm.unrun}[/red]"
            table.add_row(
                str(arm.index),
                str(arm.directory),
                state,
                calls,
                "",
                *([""] if with_outcome else []),
                _session_cell(arm) if arm.session else "",
            )
            continue
        report = arm.report or {}
        live = report.get("live_calls") or {}
        calls = (
            f"{report.get('matched', 0)} replayed, {live_text(live, ' + ')} live"
            if arm.report is not None
            else f"[red]{escape(arm.problem or 'no report')}[/red]"
        )
        if arm.report is not None and arm.problem:  # (stopped by its timeout, or its log unwritten)
            calls += f"; [red]{escape(arm.problem)}[/red]"
        table.add_row(
            str(arm.index),
            str(arm.directory),
            "[green]valid[/green]",
            calls,
            str(arm.exit_code),
            *([_passed(arm.outcome)] if with_outcome else []),
            _session_cell(arm),
        )
    return table


def _session_cell(arm: Arm) -> str:
    """An arm's session in its row, with whether it is not in the store."""
    return Path(arm.session or "—").name + (" [red](not in the store)[/red]" if arm.not_stored else "")


def _counted(whys: Counter[str]) -> str:
    """Each why once: alone, or with how many arms it holds for, the commonest first."""
    return ", ".join(why if len(whys) == 1 else f"{n} {why}" for why, n in whys.most_common())


def pass_rate_line(arms: list[Arm]) -> str:
    """``outcome: 3/4 passed (75%, 95% CI 30%–95%); 1 arm(s) not run (restore failed)`` (and ``; 1
    arm(s) lost (the task running it failed)``, ``; 2 arm(s) never went live (not measured): 1 never
    replayed, 1 <why>``, ``; 2 arm(s) not measured: <why>``)."""
    rate = rate_of(a.passed for a in arms)
    unrun = Counter(a.unrun for a in arms if a.unrun)
    lost = sum(1 for a in arms if a.lost)
    diverged = Counter(a.diverged for a in arms if a.diverged)
    tail = f"; {unrun.total()} arm(s) not run ({_counted(unrun)})" if unrun else ""
    tail += f"; {lost} arm(s) lost (the task running it failed)" if lost else ""
    if diverged:
        tail += f"; {diverged.total()} arm(s) never went live (not measured): {_counted(diverged)}"
    not_measured = unmeasured(arms)
    return f"outcome: {rate.text()}{tail}" + (f"; {not_measured}" if not_measured else "")


def not_stored(arms: list[Arm]) -> str | None:
    """``2 arm session(s) are not in the store: <why>`` for the arms whose session could not be
    uploaded to the parent's remote store (measured all the same, but only on the machine that ran
    them: the store, and whatever later reads the arms from it, lacks them), or None."""
    found = [a for a in arms if a.not_stored]
    if not found:
        return None
    return (
        f"{len(found)} arm session(s) are not in the store, so what reads the arms from it will not "
        f"count them (arm {found[0].index}: {found[0].not_stored})"
    )


def unmeasured(arms: list[Arm]) -> str | None:
    """``2 arm(s) not measured: <why>`` for the arms that went live and measured nothing: their outcome
    command could not run, or forkpoint was stopped before it had measured it; or None."""
    found = [
        (a.outcome or {}).get("reason") or a.problem or "stopped before its outcome was measured"
        for a in arms
        if a.valid and not a.diverged and a.passed is None
    ]
    return f"{len(found)} arm(s) not measured: {found[0]}" if found else None


def sweep_table(result: dict[str, Any]) -> Table:
    """One row per checkpoint: arms, how many ran and passed, the pass rate with its 95% interval and
    a bar; the last recoverable checkpoint and the first unrecoverable one are marked."""
    table = _table(
        f"pass rate by checkpoint of {result['session']}",
        "checkpoint",
        "turn",
        "arms",
        "passed",
        "pass rate",
        "95% CI",
        "",
    )
    unrun: dict[int, int] = {}
    lost: dict[int, int] = {}
    for a in result["arms"]:
        unrun[a.seq] = unrun.get(a.seq, 0) + bool(a.unrun)
        lost[a.seq] = lost.get(a.seq, 0) + a.lost
    for p in result["points"]:
        rate = p["rate"]
        bar = (
            "█" * round((rate or 0) * _BAR) + "·" * (_BAR - round((rate or 0) * _BAR))
            if rate is not None
            else ""
        )
        mark = ""
        if p["seq"] == result["last_recoverable"]:
            mark = "  ← last recoverable"
        elif p["seq"] == result["unrecoverable_from"]:
            mark = "  ← unrecoverable from here"
        said = [
            f"{n} {what}" for n, what in ((unrun.get(p["seq"]), "not run"), (lost.get(p["seq"]), "lost")) if n
        ]
        table.add_row(
            f"@{p['seq']}",
            str(p["turn"]),
            str(p["arms"]) + (f" ({', '.join(said)})" if said else ""),
            f"{p['passed']}/{p['ran']}",
            f"{rate:.0%}" if rate is not None else "—",
            f"{p['low']:.0%}–{p['high']:.0%}" if p["ran"] else "—",
            bar + mark,
        )
    return table


def sweep_verdict(result: dict[str, Any]) -> str:
    """Where the run became unrecoverable, in one sentence (and the checkpoints no arm measured)."""
    return _where_unrecoverable(result) + _none_measured(result)


def _where_unrecoverable(result: dict[str, Any]) -> str:
    last, first_bad = result["last_recoverable"], result["unrecoverable_from"]
    points = {p["seq"]: p for p in result["points"]}
    if last is None and first_bad is None:
        return "no arm was measured, from any checkpoint: nothing says whether the run was recoverable"
    if last is None:
        return f"no arm passed from any checkpoint: the run was unrecoverable from @{first_bad} (turn {points[first_bad]['turn']}) on"
    if first_bad is None:
        # A later checkpoint's arms passing says nothing of an earlier one whose arms all failed.
        dead = [seq for seq, p in points.items() if p["ran"] and not p["passed"]]
        if dead:
            return (
                f"arms passed from the last measured checkpoint (@{last}): the run was still recoverable there, "
                "though no arm passed from " + ", ".join(f"@{seq}" for seq in dead)
            )
        every = (
            "every measured checkpoint up to"
            if any(not p["ran"] for p in points.values())
            else "every checkpoint up to the last"
        )
        return f"arms passed from {every} (@{last}): the run was still recoverable there"
    return (
        f"the run became unrecoverable between @{last} (turn {points[last]['turn']}, "
        f"{points[last]['passed']}/{points[last]['ran']} passed) and @{first_bad} (turn {points[first_bad]['turn']}): "
        "no arm from there on passed"
    )


def _none_measured(result: dict[str, Any]) -> str:
    """``; nothing was measured from @4, @7`` when some checkpoints' arms all went unmeasured."""
    empty = [p["seq"] for p in result["points"] if not p["ran"]]
    if not empty or len(empty) == len(result["points"]):
        return ""
    return "; nothing was measured from " + ", ".join(f"@{seq}" for seq in empty)
