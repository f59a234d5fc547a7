"""Outcomes: what a run achieved, measured by a command the user names, and pass rates over many runs.

An *outcome command* (``--outcome CMD`` of ``check``, ``fork`` and ``sweep``) runs through
``/bin/sh -c`` in the run's directory once the run has ended; exit status 0 is a pass. It sees three
variables besides the caller's environment: ``FORKPOINT_OUTCOME_SESSION`` (the run's session
directory), ``FORKPOINT_OUTCOME_OUTPUT`` (a read-only file holding what the run printed on stdout) and
``FORKPOINT_OUTCOME_EXIT`` (the run's exit code). What it found is an ``outcome`` event
(:class:`~forkpoint.events.OutcomeEvent`) in the run's session, written before the ``end`` event.

A pass rate over ``n`` runs is given with its 95 % Wilson score interval (Wilson 1927; the interval
that stays inside [0, 1] and behaves at 0/n and n/n, where the normal approximation collapses).
A *sweep* forks arms from many checkpoints of one run; :func:`by_checkpoint` turns their outcomes
into the pass rate at each checkpoint and the point after which no arm recovered.
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import SessionError

if TYPE_CHECKING:  # the CLI reads DEFAULT_TIMEOUT while it starts: keep this module light
    from .children import Captured
    from .events import OutcomeEvent
    from .log import Session
    from .store.base import SessionInfo

#: Characters of the outcome command's output kept in its event (the end, where test runners sum up).
OUTPUT_KEPT = 2000
#: Seconds an outcome command may run before it is stopped and counted as a failure.
DEFAULT_TIMEOUT = 600.0
#: The key of the ``note`` a run given an outcome command writes when it measured nothing (a fork's
#: arm that never went live, one stopped or interrupted): why, in words, beside the ``command``.
NOT_MEASURED = "outcome_not_measured"
#: The key, in that note of a lost arm's session, of the ids of the sessions of that arm its task's
#: worker had written before it was lost: the arm is counted once, as lost (:func:`arms_of`).
LEFT_BY_LOST_TASK = "left_by_lost_task"
#: z for a two-sided 95% interval.
Z95 = 1.959963984540054


@dataclass(frozen=True)
class Outcome:
    """An outcome measure: the shell ``command`` and how many seconds it may take."""

    command: str
    timeout: float = DEFAULT_TIMEOUT


#: The shell's exit codes for a command it did not find (127) or could not execute (126).
NOT_RUN_CODES = (126, 127)


def measure(
    outcome: Outcome,
    *,
    cwd: Path,
    session: Path | None,
    output: Captured | None,
    exit_code: int | None,
) -> OutcomeEvent:
    """Run ``outcome.command`` in ``cwd`` for a run that ended with ``exit_code``, printed
    ``output`` on stdout (None: nothing captured) and was recorded as ``session``; returns its
    ``outcome`` event (not yet written).

    Never raises for the command itself: one that times out (its whole process group is killed)
    is a failure whose ``reason`` says so; one that cannot run — it cannot start, or the shell did
    not find it or could not execute it (exit 127 or 126: a typo in ``--outcome``) — measured
    nothing: ``passed`` is None, and ``reason`` says why with the shell's words.
    """
    env = dict(os.environ)
    env["FORKPOINT_OUTCOME_EXIT"] = "" if exit_code is None else str(exit_code)
    env["FORKPOINT_OUTCOME_SESSION"] = str(session.resolve()) if session is not None else ""
    started = time.perf_counter()
    from .children import Captured

    with (output if output is not None else Captured()).named() as printed:
        env["FORKPOINT_OUTCOME_OUTPUT"] = str(printed)
        code, text, reason = _run_shell(outcome, cwd, env)
    if code in NOT_RUN_CODES:
        said = next((line for line in reversed(text.splitlines()) if line.strip()), "")
        reason = f"the outcome command could not run (exit {code}: {said or 'not found or not executable'})"
    # (a command that timed out ran, and failed; one that could not start measured nothing)
    ran = code not in (*NOT_RUN_CODES, None) or (reason or "").startswith("timed out")
    event: OutcomeEvent = {
        "type": "outcome",
        "command": outcome.command,
        "passed": code == 0 if ran else None,
        "exit_code": code,
        "reason": reason,
        "output": text,
        "duration_ms": round((time.perf_counter() - started) * 1000, 3),
    }
    return event


def _run_shell(outcome: Outcome, cwd: Path, env: dict[str, str]) -> tuple[int | None, str, str | None]:
    """(exit code or None, the last :data:`OUTPUT_KEPT` characters it printed, why there is no exit code)."""
    try:
        # A session of its own, so a timeout can stop everything the command started (a test runner's
        # workers included), not only the shell.
        proc = subprocess.Popen(
            ["/bin/sh", "-c", outcome.command],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) and str(exc.filename) == str(cwd):
            return None, "", f"cannot run the outcome command in {cwd}: that directory does not exist"
        return None, "", f"cannot run the outcome command in {cwd}: {exc}"
    from .children import wait_child
    from .executors.local import in_task, task_child

    # (a fork's or a check's: Ctrl-C, SIGTERM and SIGHUP to forkpoint reach it as they reach the
    # run; else forkpoint waited for it to end, up to its timeout, and took it as measured)
    task = in_task()
    if task:
        task_child(proc)

    deadline = time.monotonic() + outcome.timeout
    late: list[str] = []

    def watch() -> str | None:
        if time.monotonic() > deadline and not late:
            late.append(f"timed out after {outcome.timeout:g} s")
            return f"the outcome command ran longer than {outcome.timeout:g} s"
        return None

    # (what it left running with its output open, a server a test started, is not waited for)
    try:
        printed, _ = wait_child(proc, watch, own_group=True, what="the outcome command")
    finally:
        if task:
            task_child(proc, done=True)
    text = printed.text(last=OUTPUT_KEPT) if printed is not None else ""
    if late:
        return None, text, late[0]
    code = proc.returncode  # (killed by a signal: 128 + its number, as a shell and run_child say)
    return 128 - code if code < 0 else code, text, None


def outcome_of(session: Session) -> OutcomeEvent | None:
    """The session's outcome (its last ``outcome`` event), or None when none was measured."""
    found = session.by_type("outcome")
    return found[-1] if found else None


# --------------------------------------------------------------------------- rates


def wilson(passed: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval (low, high) of the pass rate ``passed``/``n``; (0, 1) when n is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = passed / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Rate:
    """``passed`` of ``ran`` runs passed; ``low``/``high`` bound the pass rate (95 % Wilson)."""

    passed: int
    ran: int

    @property
    def rate(self) -> float | None:
        """The pass rate, None when nothing ran."""
        return self.passed / self.ran if self.ran else None

    @property
    def interval(self) -> tuple[float, float]:
        """The 95% interval of the pass rate."""
        return wilson(self.passed, self.ran)

    def text(self) -> str:
        """``3/4 passed (75%, 95% CI 30%–95%)``, or ``no run measured``."""
        if not self.ran:
            return "no run measured"
        low, high = self.interval
        return f"{self.passed}/{self.ran} passed ({self.passed / self.ran:.0%}, 95% CI {low:.0%}–{high:.0%})"

    def to_json(self) -> dict[str, Any]:
        """``{"passed", "ran", "rate", "low", "high"}`` (rates as fractions, rounded to 4 places)."""
        low, high = self.interval
        rate = self.rate
        return {
            "passed": self.passed,
            "ran": self.ran,
            "rate": round(rate, 4) if rate is not None else None,
            "low": round(low, 4),
            "high": round(high, 4),
        }


def rate_of(passes: Iterable[bool | None]) -> Rate:
    """The pass rate of runs whose outcome is True (pass), False (fail) or None (not measured: the
    arm never ran, or ran without an outcome command); the last are left out."""
    measured = [p for p in passes if p is not None]
    return Rate(sum(1 for p in measured if p), len(measured))


def by_checkpoint(
    arms: Iterable[tuple[int, bool | None]],
    turns: dict[int, Any],
    not_measured: Iterable[tuple[int, str]] = (),
) -> dict[str, Any]:
    """The pass rate by checkpoint of a sweep, from ``(checkpoint seq, passed)`` per arm (None: the
    arm did not run, e.g. its checkpoint did not validate, or it measured nothing) and the
    checkpoints' ``turns`` by seq; ``not_measured``: ``(checkpoint seq, why)`` of each arm that ran
    and measured nothing, said in its point.

    Returns ``{"points": [{"seq", "turn", "arms", "not_measured", **Rate.to_json()}...] (by seq),
    "unrecoverable_from": seq | None, "last_recoverable": seq | None}``: the run became
    unrecoverable at the first measured checkpoint from which no arm, of that checkpoint or any
    later one, passed; the last recoverable checkpoint is the latest one where an arm passed.
    """
    grouped: dict[int, list[bool | None]] = {}
    for seq, passed in arms:
        grouped.setdefault(seq, []).append(passed)
    whys: dict[int, list[str]] = {}
    for seq, why in not_measured:
        whys.setdefault(seq, []).append(why)
    points = []
    for seq in sorted(grouped):
        rate = rate_of(grouped[seq])
        points.append(
            {
                "seq": seq,
                "turn": turns.get(seq),
                "arms": len(grouped[seq]),
                "not_measured": whys.get(seq, []),
                **rate.to_json(),
            }
        )
    measured = [p for p in points if p["ran"]]
    passing = [p["seq"] for p in measured if p["passed"]]
    last = passing[-1] if passing else None
    after = [p["seq"] for p in measured if last is None or p["seq"] > last]
    return {"points": points, "last_recoverable": last, "unrecoverable_from": after[0] if after else None}


def arm_sessions(session: Session) -> Iterator[tuple[SessionInfo, Session]]:
    """Every fork arm of ``session`` found beside it in its store (sessions whose header names it as
    parent, with a checkpoint seq), oldest first, as its index row and its session; none for a
    session that is not in a store (a cassette)."""
    from .log import Session
    from .store import is_store, open_store

    if not is_store(session.path.parent):
        return
    try:
        store = open_store(session.path.parent)
        rows = store.listing().rows
    except SessionError:
        return
    for row in rows:
        parent = row.header.get("parent")
        if not isinstance(parent, dict) or parent.get("session_id") != session.id:
            continue
        if not isinstance(parent.get("seq"), int):
            continue
        try:
            # An arm of a remote store may have run on another machine (a Ray worker): its outcome is
            # in the store, not here yet, and a rate of the arms that happen to be here misleads.
            path = store.fetch(row.session_id)
            if path is None:
                continue
            yield row, Session.load(path, share_lists=True)
        except SessionError:
            continue


def arms_of(session: Session) -> list[tuple[int, bool | None, tuple[Any, ...], str | None]]:
    """``(checkpoint seq, passed, experiment, why not measured)`` of every fork arm of ``session``
    (:func:`arm_sessions`), oldest first; passed is None for an arm without an outcome, and why is
    said when its outcome command could not run or it measured nothing (:data:`NOT_MEASURED`), None
    when it was measured or given no outcome command; ``experiment`` tells arms of one fork or sweep
    from another's: the id they share (recorded since arms have one: two forks of the same command
    may have run other code or another environment) with their command, outcome command,
    overrides and divergence policy. A session a lost arm's worker had written is left out: the
    lost arm's own session, which names it (:data:`LEFT_BY_LOST_TASK`), counts the arm."""
    out: list[tuple[str, int, bool | None, tuple[Any, ...], str | None]] = []
    left: set[str] = set()
    for row, arm in arm_sessions(session):
        found = outcome_of(arm)
        unmeasured = next(
            (n.get("data") or {} for n in arm.by_type("note") if NOT_MEASURED in (n.get("data") or {})), {}
        )
        left.update(map(str, unmeasured.get(LEFT_BY_LOST_TASK) or ()))
        replay = row.header.get("replay") or {}
        overrides = replay.get("overrides") or []
        experiment = (
            tuple(map(str, row.header.get("argv") or [])),
            str(found.get("command")) if found is not None else unmeasured.get("command"),
            tuple(map(str, overrides)) if isinstance(overrides, list) else (),
            str(replay.get("on_divergence")),
            replay.get("experiment"),
        )
        why = found.get("reason") if found is not None else unmeasured.get(NOT_MEASURED)
        passed = found["passed"] if found is not None else None
        seq = row.header["parent"]["seq"]
        out.append((row.session_id, seq, passed, experiment, why if passed is None else None))
    return [(seq, passed, experiment, why) for sid, seq, passed, experiment, why in out if sid not in left]


def sweep_of(session: Session) -> dict[str, Any] | None:
    """The pass rate by checkpoint of the session's fork arms given an outcome command, if any: of
    the latest fork or sweep's (the arms of another measured something else, or the same of other
    code, and are left out, said in ``note``). An arm that measured nothing is drawn outside the
    rate, its why in its point's ``not_measured``."""
    # (a lost arm given no outcome command says why too: its experiment names no outcome command)
    given = [
        arm
        for arm in arms_of(session)
        if arm[2][1] is not None and (arm[1] is not None or arm[3] is not None)
    ]
    if not given:
        return None
    latest = given[-1][2]
    arms = [(seq, passed, why) for seq, passed, experiment, why in given if experiment == latest]
    turns = {c["seq"]: c.get("turn") for c in session.by_type("checkpoint")}
    drawn = by_checkpoint(
        [(seq, passed) for seq, passed, _ in arms],
        turns,
        [(seq, why) for seq, _, why in arms if why is not None],
    )
    others = {experiment for _, _, experiment, _ in given if experiment != latest}
    if others:
        drawn["note"] = (
            f"The arms of the latest fork or sweep ({' '.join(latest[0])}, outcome {latest[1]}); "
            f"{len(given) - len(arms)} arm(s) of {len(others)} other fork(s) or sweep(s) are left out."
        )
    return drawn
