"""``forkpoint check``: replay many sessions against today's code, as a suite, or run them as an A/B
test of a new prompt or model against each session's recorded tool world.

Each session is one task (:func:`check_task`) on an executor (:mod:`forkpoint.executors`), so a
check runs several sessions at once here, or on a Ray cluster, with the same result rows. A row is
JSON data: the session (``session_id``, ``name``, ``tags``, ``location``), the verdict
(``status``, ``detail``, ``call``, ``path``: :func:`forkpoint.replay.verdict`), the exit codes, the
divergence report in words, the end of what the program printed on stderr, ``seconds``, with
``--models live`` the two arms (``ab``, see :func:`_ab`), and when the session ran a command the
user gave or trusted, ``signature``: why its signature vouches for nothing
(:func:`forkpoint.signing.doubt`). Each session's recorded command runs in the
current directory, with absolute paths under its recorded directory mapped there
(:func:`forkpoint.orchestrate.map_command`).
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..diff import diff_sessions, known_sum, totals
from ..errors import ForkpointError
from ..executors import Executor
from ..log import Session
from ..orchestrate import Replayed, fifo_drift_text, load_ref, replay_run
from ..outcome import Outcome, rate_of
from ..replay import EXIT_DIVERGENCE, format_divergence, verdict
from ..runtime import cache_off_text, cached_answers_text
from .select import Candidate, Selection

#: Characters of a program's stderr kept in a row (the end, where the traceback is).
STDERR_KEPT = 4000
#: A/B statuses: the new run asked and got what the recorded one did; behaviour changed; the tool
#: policy ``stop`` stopped it at a tool call whose arguments changed.
AB_STATUSES = ("same", "changed", "stopped")


def _row(candidate: dict[str, Any]) -> dict[str, Any]:
    return {
        "session_id": candidate["session_id"],
        "name": candidate.get("name"),
        "tags": candidate.get("tags") or {},
        "location": candidate.get("location"),
        "status": "error",
        "detail": "",
        "call": None,
        "path": None,
        "exit_code": None,
        "recorded_exit_code": None,
        "divergence": None,
        "stderr": "",
        "outcome": None,
        "ab": None,
        "seconds": 0.0,
    }


def _describe(c: Candidate) -> dict[str, Any]:
    return {"session_id": c.session_id, "name": c.name, "tags": c.tags, "location": c.location}


def _replayed(run: Replayed, recorded_exit: int | None) -> dict[str, Any]:
    """The row fields of a plain replay: its verdict, exit codes, divergence, stderr and outcome."""
    v = verdict(run.report, run.exit_code, recorded_exit)
    div = (run.report or {}).get("divergence")
    detail = v["detail"]
    if v["status"] == "error" and run.problem:
        detail = run.problem.removeprefix("forkpoint: ")
    elif (
        v["status"] == "ended differently"
        and run.problem
        and run.report is not None
        and not run.report.get("matched")
        and run.report.get("recorded")
    ):
        # Nothing served, and it ran somewhere else than it was recorded (a relative path that names
        # nothing here: pytest's "file not found" is exit code 4, not the agent ending otherwise).
        detail += "; " + run.problem.removeprefix("forkpoint: note ").strip("()")
    return {
        **v,
        "detail": detail,
        "exit_code": run.exit_code,
        "recorded_exit_code": recorded_exit,
        "divergence": format_divergence(div) if div else None,
        "stderr": run.err.text(last=STDERR_KEPT) if run.err is not None else "",
        "outcome": run.outcome,
    }


def _arm(session: Session, outcome: dict[str, Any] | None, exit_code: int | None) -> dict[str, Any]:
    t = totals(session)
    end: dict[str, Any] = dict(session.end() or {})
    return {
        "session": str(session.path),
        "tokens_in": t["tokens"]["input"],
        "tokens_out": t["tokens"]["output"],
        "model_ms": t["model_ms"],
        "wall_ms": end.get("duration_ms"),
        "exit_code": exit_code,
        "outcome": outcome,
        "final_answer": t["final_answer"],
    }


def _ab(
    session: Session, cmd: list[str] | None, spec: dict[str, Any], common: dict[str, Any]
) -> dict[str, Any]:
    """Both arms of one session, as the row fields they set: the new run's verdict fields, and
    ``ab`` = ``{"recorded", "new"}`` (each ``{"session", "tokens_in", "tokens_out", "model_ms",
    "wall_ms", "exit_code", "outcome", "final_answer"}``; ``new`` None when the run made no report),
    ``not_stored`` (why the new run's session is not in the store: its upload failed, or None),
    ``recorded_replay`` (status and detail of the plain replay an outcome command was measured on,
    else None: when that replay did not reproduce, the recorded outcome is not measured, ``passed``
    None with the reason), ``first_change`` (``{"where", "path"}``, :meth:`~forkpoint.diff.SessionDiff.describe`,
    or None) and ``child`` (the new run's session). ``recorded`` is the session as recorded; with an
    outcome command, a plain replay of it is measured the same way as the new run. ``new`` has its
    models live and its tools from the recording, ``spec["on_divergence"]`` deciding about a tool
    call whose arguments changed; ``status`` is ``stopped`` when that policy stopped it, else
    ``changed`` or ``same``."""
    outcome = Outcome(**spec["outcome"]) if spec.get("outcome") else None
    end: dict[str, Any] = dict(session.end() or {})
    recorded_exit = end.get("exit_code")
    recorded_outcome = None
    baseline: dict[str, Any] | None = None
    if outcome is not None:
        base = replay_run(session, cmd, outcome=outcome, **common)
        baseline = _replayed(base, recorded_exit)
        recorded_outcome = base.outcome
        if baseline["status"] != "reproduced":  # (the changed code made another run: not the recorded one's)
            recorded_outcome = {
                "passed": None,
                "reason": f"not measured: the recorded run does not replay with this code ({verdict_text(baseline)})",
            }
    run = replay_run(
        session,
        cmd,
        models_source="live",
        on_divergence=spec.get("on_divergence", "stop"),
        outcome=outcome,
        child_name=f"check --models live of {session.id}",
        **common,
    )
    fields = _replayed(run, recorded_exit)
    ab: dict[str, Any] = {
        "recorded": _arm(session, recorded_outcome, recorded_exit),
        "recorded_replay": {k: baseline[k] for k in ("status", "detail")} if baseline else None,
        "new": None,
        "first_change": None,
        "child": str(run.child) if run.child else None,
        "not_stored": run.not_stored,
    }
    if run.report is None or run.child is None:
        return {**fields, "ab": ab}
    child = Session.load(run.child, share_lists=True)
    ab["new"] = _arm(child, run.outcome, run.exit_code)
    compared = diff_sessions(session, child)
    first = compared.first_change
    if first is not None:
        where, path = compared.describe(first)
        ab["first_change"] = {"where": where, "path": path}
    div = run.report.get("divergence")
    policy = spec.get("on_divergence", "stop")
    # (fifo stops a run too, at a tool call with no recorded call of that tool left: unanswered)
    if div and (policy == "stop" or run.report.get("unanswered")):
        status = "stopped"
        if outcome is not None:  # (a run cut short is not measured: no outcome of the new code)
            ab["new"]["outcome"] = {"passed": None, "reason": f"not measured: {run.not_measured}"}
    else:
        status = "changed" if first is not None else "same"
    detail = fields["detail"] if status == "stopped" else ""
    counts = run.report.get("answered_from_cache") or {}
    cached = cached_answers_text(counts)
    if cached and status != "stopped":  # (no model answered those: the cache gave older answers)
        detail = f"{cached}: not asked of the model ({cache_off_text(counts)} asks it)"
    if run.report.get("drift") and status != "stopped":
        # (the new run was handed tool results of requests it did not make: its outcome rests on them)
        detail = "; ".join(filter(None, (detail, fifo_drift_text(run.report))))
    return {**fields, "status": status, "detail": detail, "ab": ab}


def verdict_text(row: dict[str, Any]) -> str:
    """A row's verdict in one line: ``reproduced``, ``diverged at model call #2 (POST …): $.body…``,
    ``ended differently: exit code 1, recorded 0``, ``error: …`` (A/B rows: ``changed at …``)."""
    status = str(row["status"])
    if status == "diverged":
        text = f"diverged at {row.get('call')}"
        return text + (f": {row['path']}" if row.get("path") else f": {row.get('detail')}")
    first = (row.get("ab") or {}).get("first_change")
    if status in ("changed", "same") and first:
        return (
            f"changed at {first['where']}"
            + (f": {first['path']}" if first.get("path") else "")
            + (f"; {row['detail']}" if row.get("detail") else "")
        )
    if status == "stopped":
        where = f" at {row['call']}" if row.get("call") else ""
        return f"stopped{where}" + (f": {row['path']}" if row.get("path") else f": {row.get('detail')}")
    return status + (f": {row['detail']}" if row.get("detail") else "")


def check_task(spec: dict[str, Any]) -> dict[str, Any]:
    """Check one session, as an executor task (JSON in, JSON out): ``spec`` has ``session`` (a
    :func:`~forkpoint.orchestrate.session_ref`), ``candidate`` (what the row shows), ``cmd`` (None:
    the recorded command), ``cwd``, ``models`` (``replay``, or ``live`` for an A/B run),
    ``on_divergence``, ``outcome`` (``{"command", "timeout"}`` or None), ``verify`` and ``trust``
    (run a recorded command no trusted key signed). Returns
    the session's row (module docstring); a session that cannot be replayed is an ``error`` row."""
    started = time.perf_counter()
    row = _row(spec["candidate"])
    common: dict[str, Any] = {
        "cwd": Path(spec["cwd"]),
        "map_cwd": True,
        "quiet": True,
        "capture": True,
        "capture_stderr": True,
        "check": bool(spec.get("verify", True)),
        "trust": bool(spec.get("trust")),
    }
    cmd = list(spec["cmd"]) if spec.get("cmd") else None
    try:
        session = load_ref(spec["session"])
        if cmd or common["trust"]:  # (else replay_run refuses a session no trusted key signed)
            from ..signing import doubt

            if doubted := doubt(session.path, session.id):
                row["signature"] = doubted
        end: dict[str, Any] = dict(session.end() or {})
        if spec.get("models") == "live":
            row.update(_ab(session, cmd, spec, common))
        else:
            outcome = Outcome(**spec["outcome"]) if spec.get("outcome") else None
            row.update(_replayed(replay_run(session, cmd, outcome=outcome, **common), end.get("exit_code")))
    except ForkpointError as exc:
        row.update(status="error", detail=str(exc))
    row["seconds"] = round(time.perf_counter() - started, 3)
    return row


def check_sessions(
    selection: Selection,
    *,
    executor: Executor,
    cwd: Path,
    cmd: list[str] | None = None,
    models: str = "replay",
    on_divergence: str = "stop",
    outcome: Outcome | None = None,
    verify: bool = True,
    trust: bool = False,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Check every selected session on ``executor``; returns the rows in selection order (whatever
    order they finished in), calling ``on_row`` with each as it comes. Without ``cmd``, a session
    no trusted key signed is an ``error`` row showing its command, unless ``trust``."""
    rows: list[dict[str, Any] | None] = [None] * len(selection.sessions)
    specs: list[dict[str, Any]] = []
    where: list[int] = []
    for i, c in enumerate(selection.sessions):
        if c.problem is not None:
            rows[i] = {**_row(_describe(c)), "detail": c.problem}
            if on_row is not None:
                on_row(rows[i] or {})
            continue
        where.append(i)
        specs.append(
            {
                "session": c.ref,
                "candidate": _describe(c),
                "cmd": cmd,
                "cwd": str(cwd.absolute()),
                "models": models,
                "on_divergence": on_divergence,
                "outcome": vars(outcome) if outcome else None,
                "verify": verify,
                "trust": trust,
            }
        )
    for j, result in executor.map(check_task, specs):
        if "status" not in result:  # the task itself failed (an exception, a lost worker)
            result = {**_row(specs[j]["candidate"]), "detail": str(result.get("error"))}
        rows[where[j]] = result
        if on_row is not None:
            on_row(result)
    return [r for r in rows if r is not None]


def exit_code(rows: list[dict[str, Any]], *, ab: bool = False) -> int:
    """How ``forkpoint check`` exits: 0 when every session reproduced (for an A/B run: when every
    run could be made and its session reached the store), else :data:`~forkpoint.replay.EXIT_DIVERGENCE`."""
    ok = ("reproduced",) if not ab else AB_STATUSES
    stored = all(not (r.get("ab") or {}).get("not_stored") for r in rows)
    return 0 if stored and all(r["status"] in ok for r in rows) else EXIT_DIVERGENCE


def not_stored(rows: list[dict[str, Any]]) -> str | None:
    """``2 what-if session(s) of --models live are not in the store: <why>`` for the A/B rows whose
    new run's session could not be uploaded to the remote store, or None."""
    found = [r for r in rows if (r.get("ab") or {}).get("not_stored")]
    if not found:
        return None
    return (
        f"{len(found)} what-if session(s) of --models live are not in the store "
        f"({found[0]['session_id']}: {found[0]['ab']['not_stored']})"
    )


def counts(rows: list[dict[str, Any]]) -> dict[str, int]:
    """How many rows have each status."""
    return dict(Counter(r["status"] for r in rows))


def ab_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The two arms of an A/B check side by side: for ``recorded`` and ``new``, the outcome pass
    rate (:class:`~forkpoint.outcome.Rate` as JSON), tokens in and out summed, and model time
    (summed and median per session, ms), over the sessions where both arms ran to their end (a new
    run the tool policy stopped is no whole run to weigh against the recorded one); plus how many
    sessions changed behaviour, were stopped by the tool policy, or failed."""
    both = [r for r in rows if r.get("ab") and r["ab"].get("new") and r.get("status") != "stopped"]
    out: dict[str, Any] = {"sessions": len(rows), "compared": len(both), **counts(rows)}
    for arm in ("recorded", "new"):
        arms = [r["ab"][arm] for r in both]
        model_ms = [a["model_ms"] or 0.0 for a in arms]
        out[arm] = {
            "outcome": rate_of(
                (a["outcome"] or {}).get("passed") if a.get("outcome") else None for a in arms
            ).to_json(),
            # (None when runs were compared but none reported its tokens: unknown, not 0)
            "tokens_in": known_sum(a["tokens_in"] for a in arms) if arms else 0,
            "tokens_out": known_sum(a["tokens_out"] for a in arms) if arms else 0,
            "model_ms": round(sum(model_ms), 3),
            "median_model_ms": round(statistics.median(model_ms), 3) if model_ms else None,
        }
    return out
