"""``forkpoint sweep``: fork arms from every resumable checkpoint of a run (or a chosen range) and
measure their outcome, to see where the run became unrecoverable.

Every arm is a fork arm (:func:`forkpoint.orchestrate.arm_task`): restored into a fresh directory,
validated without a model (an arm that fails validation is reported and never run), continued live,
its outcome measured and written into its session. Arms of all checkpoints run together on one
executor. The result is the pass rate at each checkpoint (:func:`forkpoint.outcome.by_checkpoint`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..executors import Executor
from ..log import Session
from ..orchestrate import (
    Arm,
    arm_specs,
    check_config,
    check_overrides,
    fork_into,
    refuse_taken,
    run_arms,
    say_unrecorded_before,
)
from ..outcome import Outcome, by_checkpoint


def sweep_checkpoints(
    session: Session, first: int | None = None, last: int | None = None
) -> list[dict[str, Any]]:
    """The resumable checkpoints of ``session`` with ``first <= seq <= last`` (either bound optional),
    by seq. Raises :class:`~forkpoint.errors.UsageError` when there is none."""
    cps = [
        c
        for c in session.by_type("checkpoint")
        if c.get("boundary") == "resumable"
        and not c.get("error")
        and (first is None or c["seq"] >= first)
        and (last is None or c["seq"] <= last)
    ]
    if not session.by_type("checkpoint"):
        from ..checkpoint.restore import why_no_checkpoints

        raise UsageError(f"session {session.id} has no checkpoints to sweep ({why_no_checkpoints(session)})")
    if not cps:
        where = (
            ""
            if first is None and last is None
            else f" between seq {'start' if first is None else first} and {'end' if last is None else last}"
        )
        raise UsageError(
            f"session {session.id} has no resumable checkpoint{where} to sweep "
            f"(forkpoint checkpoints {session.path} lists them)"
        )
    return [dict(c) for c in cps]


@dataclass
class SweepPlan:
    """A sweep checked and planned (:func:`plan_sweep`), no arm run yet."""

    session: Session
    checkpoints: list[dict[str, Any]]
    into: Path
    specs: list[dict[str, Any]]

    def run(
        self, executor: Executor | None = None, on_arm: Callable[[Arm], None] | None = None
    ) -> dict[str, Any]:
        """Run the arms (:func:`~forkpoint.orchestrate.run_arms`). Returns ``{"session", "into", "arms":
        [Arm...], **by_checkpoint(...)}``: the pass rate at each checkpoint and where the run became
        unrecoverable."""
        done = run_arms(self.specs, executor=executor, on_arm=on_arm)
        turns = {c["seq"]: c.get("turn") for c in self.checkpoints}
        # (an arm never run, or lost, is drawn with why too, as its parent's page draws it from its session)
        unmeasured = [
            (a.seq, a.not_run_or_lost or a.problem or str((a.outcome or {}).get("reason")))
            for a in done
            if a.passed is None
        ]
        rates = by_checkpoint(((a.seq, a.passed) for a in done), turns, unmeasured)
        return {"session": self.session.id, "into": str(self.into), "arms": done, **rates}


def plan_sweep(
    session: Session,
    cmd: list[str],
    *,
    arms: int,
    outcome: Outcome,
    first: int | None = None,
    last: int | None = None,
    into: Path | None = None,
    overrides: list[str] | None = None,
    on_divergence: str = "stop",
    repo: Path | None = None,
    timeout: float | None = None,
) -> SweepPlan:
    """Check what a sweep is asked to do and plan its arms, before anything runs: ``arms`` arms from
    each resumable checkpoint in ``[first, last]``, ``outcome`` measured in each (an arm still
    running after ``timeout`` seconds is stopped, then measured). Raises
    :class:`~forkpoint.errors.UsageError` when there is no checkpoint to fork from, or ``into``
    already holds an arm of one (as ``fork`` does: nothing there is replaced), and
    :class:`~forkpoint.errors.OverrideError` for an override that names no recorded call."""
    cps = sweep_checkpoints(session, first, last)
    check_overrides(session, list(overrides or []), losses=True)
    check_config()  # (before a folder for the arms is made: a refused sweep leaves none behind)
    into = into if into is not None else fork_into(session, cps[0]["seq"])
    refuse_taken(into, [into / f"seq-{cp['seq']}" for cp in cps], arms, "sweep")
    say_unrecorded_before(session, [cp["seq"] for cp in cps])
    specs: list[dict[str, Any]] = []
    experiment = uuid.uuid4().hex  # (one sweep: one experiment, whatever the checkpoint)
    for cp in cps:
        specs += arm_specs(
            session,
            cp["seq"],
            cmd,
            arms=arms,
            into=into / f"seq-{cp['seq']}",
            overrides=overrides,
            on_divergence=on_divergence,
            repo=repo,
            outcome=outcome,
            timeout=timeout,
            experiment=experiment,
        )
    return SweepPlan(session, cps, into, specs)
