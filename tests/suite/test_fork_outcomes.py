"""``fork --outcome`` and ``forkpoint sweep``: outcomes measured in every arm, written into the arm's
session, summed up as a pass rate with its 95 % interval, and by checkpoint: where the run became
unrecoverable. The agent is the keeper (tests/suite/agents.py), run through the CLI."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from forkpoint.executors.base import Executor, Task
from forkpoint.html import view_model
from forkpoint.log import Session
from forkpoint.orchestrate import arm_specs, run_arms, run_child
from forkpoint.outcome import NOT_MEASURED, Outcome, Rate, by_checkpoint, outcome_of, wilson
from forkpoint.store import resolve, session_dirs
from forkpoint.suite.tables import pass_rate_line, sweep_verdict
from tests.modelserver import LocalServer, Reply, chat_completion, json_reply
from tests.suite.agents import KEEPER_OUTCOME, ONE_CALL, SHELL_AGENT, Keeper, cli_env, record_keeper


def forkpoint_cli(keeper: Keeper, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "forkpoint.cli", *args],
        cwd=cwd, env=keeper.env | {"COLUMNS": "200"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def fork_one_arm(keeper: Keeper, tmp_path: Path, seq: int, *args: str) -> subprocess.CompletedProcess[str]:
    """``forkpoint fork SESSION@seq`` of the keeper's session, one arm into ``tmp_path/arms``, run in
    ``tmp_path``: ``args`` are its options and the command after ``--``."""
    return forkpoint_cli(
        keeper, "fork", f"{keeper.session.id}@{seq}", "--arms", "1", "--into", str(tmp_path / "arms"),
        "--store", str(keeper.store), *args, cwd=tmp_path,
    )  # fmt: skip


@pytest.fixture
def keeper(tmp_path: Path) -> Iterator[Keeper]:
    with LocalServer() as srv:
        yield record_keeper(tmp_path, srv)


def arms_of_store(keeper: Keeper) -> list[Session]:
    return [Session.load(d) for d in session_dirs(keeper.store) if d.name != keeper.session.id]


def test_wilson_interval_and_rates() -> None:
    # Reference values of the 95 % Wilson score interval (z = 1.96).
    low, high = wilson(2, 4)
    assert (round(low, 4), round(high, 4)) == (0.1500, 0.8500)
    assert wilson(0, 4)[0] == 0.0 and round(wilson(0, 4)[1], 4) == 0.4899
    assert round(wilson(4, 4)[0], 4) == 0.5101 and wilson(4, 4)[1] == 1.0
    assert wilson(0, 0) == (0.0, 1.0)
    assert Rate(2, 4).text() == "2/4 passed (50%, 95% CI 15%–85%)"
    assert Rate(0, 0).text() == "no run measured"


def test_unrecoverable_point_from_outcomes_by_checkpoint() -> None:
    arms = [(3, True), (3, False), (7, False), (7, True), (7, None), (11, False), (11, False), (15, False)]
    result = by_checkpoint(arms, {3: 1, 7: 2, 11: 3, 15: 4})
    assert [(p["seq"], p["passed"], p["ran"], p["arms"]) for p in result["points"]] == [
        (3, 1, 2, 2),
        (7, 1, 2, 3),  # an arm that did not run is not in the rate
        (11, 0, 2, 2),
        (15, 0, 1, 1),
    ]
    assert (result["last_recoverable"], result["unrecoverable_from"]) == (7, 11)
    # Recovered again later: the point is after the last passing checkpoint.
    again = by_checkpoint([(1, False), (2, True), (3, False)], {})
    assert (again["last_recoverable"], again["unrecoverable_from"]) == (2, 3)
    assert by_checkpoint([(1, False)], {})["last_recoverable"] is None


@pytest.mark.slow
def test_fork_measures_the_outcome_of_every_arm(keeper: Keeper, tmp_path: Path) -> None:
    before = keeper.resumable()[1]  # after answer.txt was written, before the keep-or-delete turn
    arms = tmp_path / "arms"
    fork = forkpoint_cli(
        keeper, "fork", f"{keeper.session.id}@{before}", "--arms", "4", "--into", str(arms),
        "--store", str(keeper.store), "--outcome", KEEPER_OUTCOME, "--jobs", "2", "--", *keeper.agent,
        cwd=tmp_path,
    )  # fmt: skip
    assert fork.returncode == 0, fork.stdout + fork.stderr
    # The model alternates keep and delete over its life (the recording took the first "delete"):
    # whatever order the arms ran in, two kept the answer.
    assert "outcome: 2/4 passed (50%, 95% CI 15%–85%)" in fork.stdout
    assert fork.stdout.count("pass") >= 2 and fork.stdout.count("fail (exit 1)") == 2
    assert fork.stderr.count("pass  source tree hash") == 4
    children = arms_of_store(keeper)
    assert len(children) == 4
    outcomes = [outcome_of(c) for c in children]
    assert all(o is not None and o["command"] == KEEPER_OUTCOME for o in outcomes)
    assert sorted(bool(o and o["passed"]) for o in outcomes) == [False, False, True, True]
    for child in children:
        types = [e["type"] for e in child.events]
        assert types[-2:] == ["outcome", "end"]  # measured before the session ended
        assert child.header["parent"] == {"session_id": keeper.session.id, "seq": before}
    for i in range(1, 5):
        assert (arms / f"arm-{i}.log").read_text().startswith("final: Done.")


def test_fork_and_sweep_write_every_arm_as_json(keeper: Keeper, tmp_path: Path) -> None:
    """docs/scale.md says a task's row is shown and written to --json, and a researcher comparing
    arms needs them as data: fork and sweep had no --json (a usage error), and what each arm came
    to was only in the table's text or in each arm's session."""
    before = keeper.resumable()[1]
    fork = forkpoint_cli(
        keeper, "fork", f"{keeper.session.id}@{before}", "--arms", "2", "--into", str(tmp_path / "arms"),
        "--store", str(keeper.store), "--outcome", KEEPER_OUTCOME, "--json", str(tmp_path / "fork.json"),
        "--", *keeper.agent, cwd=tmp_path,
    )  # fmt: skip
    assert fork.returncode == 0, fork.stdout + fork.stderr
    data = json.loads((tmp_path / "fork.json").read_text())
    assert (data["session"], data["executor"]) == (keeper.session.id, "local")
    assert [(a["index"], a["seq"]) for a in data["arms"]] == [(1, before), (2, before)]
    by_id = {c.id: outcome_of(c) for c in arms_of_store(keeper)}
    for arm in data["arms"]:  # (each row is its arm's: the outcome its session holds)
        # (the session's id: its path is where it ran, a Ray worker's mirror for a remote store)
        assert arm["outcome"]["passed"] == by_id[arm["session_id"]]["passed"], arm
        assert arm["exit_code"] == 0 and arm["lost"] is False, arm
    sweep = forkpoint_cli(
        keeper, "sweep", keeper.session.id, "--from", str(before), "--to", str(before), "--arms", "1",
        "--into", str(tmp_path / "sweep"), "--store", str(keeper.store), "--outcome", KEEPER_OUTCOME,
        "--json", str(tmp_path / "sweep.json"), "--", *keeper.agent, cwd=tmp_path,
    )  # fmt: skip
    assert sweep.returncode == 0, sweep.stdout + sweep.stderr
    (arm,) = json.loads((tmp_path / "sweep.json").read_text())["arms"]
    assert arm["seq"] == before and arm["exit_code"] == 0, arm
    assert outcome_of(Session.load(arm["session"]))["passed"] == arm["outcome"]["passed"]


@pytest.mark.slow
def test_sweep_shows_where_the_run_became_unrecoverable(keeper: Keeper, tmp_path: Path) -> None:
    cps = keeper.resumable()
    assert len(cps) == 3  # before each of the three model calls
    page = tmp_path / "sweep.html"
    out = forkpoint_cli(
        keeper, "sweep", keeper.session.id, "--store", str(keeper.store), "--arms", "2", "--jobs", "1",
        "--outcome", KEEPER_OUTCOME, "--html", str(page), "--into", str(tmp_path / "sweep"),
        "--", *keeper.agent, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr
    # One arm at a time: from each checkpoint before the decision, one arm keeps, one deletes.
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("@")]
    assert [(r[0], r[3], r[4]) for r in rows] == [
        (f"@{cps[0]}", "1/2", "50%"),
        (f"@{cps[1]}", "1/2", "50%"),
        (f"@{cps[2]}", "0/2", "0%"),
    ]
    assert "← last recoverable" in out.stdout and "← unrecoverable from here" in out.stdout
    assert (
        f"the run became unrecoverable between @{cps[1]} (turn 2, 1/2 passed) and @{cps[2]} (turn 3)"
        in out.stdout
    )
    assert len(arms_of_store(keeper)) == 6
    # The viewer draws it: from the sweep just run, and from the arms in the store.
    assert 'id="forkpoint-data"' in page.read_text()
    drawn = view_model(keeper.session)["sweep"]
    assert [(p["seq"], p["passed"], p["ran"]) for p in drawn["points"]] == [
        (cps[0], 1, 2),
        (cps[1], 1, 2),
        (cps[2], 0, 2),
    ]
    assert (drawn["last_recoverable"], drawn["unrecoverable_from"]) == (cps[1], cps[2])


@pytest.mark.slow
def test_an_arm_that_cannot_be_restored_is_reported_and_never_run(keeper: Keeper, tmp_path: Path) -> None:
    shutil.rmtree(keeper.repo)  # the recorded repository is gone, and no --repo is given
    decisions = keeper.model.decisions
    out = forkpoint_cli(
        keeper, "sweep", keeper.session.id, "--store", str(keeper.store), "--arms", "1",
        "--outcome", KEEPER_OUTCOME, "--html", str(tmp_path / "sweep.html"), "--", *keeper.agent, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.count("not run:") == 3
    assert (
        "no arm was measured, from any checkpoint: nothing says whether the run was recoverable" in out.stdout
    )
    assert keeper.model.decisions == decisions  # no arm reached the model
    # (each kept as a session that says why it was not run, and made no call)
    assert all(not a.by_type("model_call") and a.by_type("note") for a in arms_of_store(keeper))
    # Both pages draw each arm with why: the sweep's, and the parent's, from the arms in the store.
    page = (tmp_path / "sweep.html").read_text()
    data = re.search(r'<script type="application/json" id="forkpoint-data">(.*?)</script>', page, re.S)
    assert data is not None
    for drawn in (json.loads(data.group(1))["sweep"], view_model(keeper.session)["sweep"]):
        whys = [p["not_measured"] for p in drawn["points"]]
        assert len(whys) == 3 and all(len(w) == 1 and w[0].startswith("not run: ") for w in whys), whys


def test_an_arm_that_could_not_be_restored_is_drawn_on_its_parents_page(
    keeper: Keeper, tmp_path: Path
) -> None:
    """An arm whose restore failed has no session of its own, so the parent's page (show --html),
    which reads its arms from the store, drew nothing of it: a fork whose arms all failed had no
    section at all. It is kept as a session that says why it was not run, and drawn so."""
    shutil.rmtree(keeper.repo)  # the recorded repository is gone, and no --repo is given
    before = keeper.resumable()[1]
    fork = fork_one_arm(keeper, tmp_path, before, "--outcome", "true", "--", *keeper.agent)
    assert fork.returncode == 1 and "restore failed" in fork.stdout, fork.stdout + fork.stderr
    (arm,) = arms_of_store(keeper)
    (note,) = arm.by_type("note")
    why = note["data"][NOT_MEASURED]
    assert why.startswith("not run: ") and why.removeprefix("not run: ") in " ".join(fork.stderr.split()), why
    assert arm.end() is not None and arm.end()["exit_code"] is None, arm.end()
    (point,) = view_model(keeper.session)["sweep"]["points"]
    assert (point["seq"], point["arms"], point["ran"], point["not_measured"]) == (before, 1, 0, [why]), point


def test_an_arm_whose_run_could_not_start_says_so_and_is_drawn_on_its_parents_page(
    keeper: Keeper, tmp_path: Path
) -> None:
    """An arm whose checks all passed but whose replay refused to start (a forkpoint.toml with a bad
    rule above its folder, found from the arm up) was shown as ``invalid``, counted as "not run
    (restore or validation failed)", and kept no session: the parent's page drew nothing of it. It
    is said as what it was, and kept as a session that says why, as an arm whose restore failed."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "forkpoint.toml").write_text("[match]\nignore = 5\n")
    before = keeper.resumable()[1]
    fork = forkpoint_cli(
        keeper, "fork", f"{keeper.session.id}@{before}", "--arms", "1", "--into", str(project / "arms"),
        "--store", str(keeper.store), "--outcome", KEEPER_OUTCOME, "--", *keeper.agent, cwd=tmp_path,
    )  # fmt: skip
    out = fork.stdout + fork.stderr
    assert fork.returncode == 1, out
    assert fork.stderr.count("  pass  ") == 6, out  # (every check passed)
    assert re.search(r"arm-1 +valid +not run: its run could not start", fork.stdout), out
    assert "outcome: no run measured; 1 arm(s) not run (its run could not start)" in fork.stdout, out
    assert "restore or validation failed" not in out and "invalid" not in fork.stdout, out
    (arm,) = arms_of_store(keeper)
    assert arm.path.name in fork.stdout, out  # (the row names its session)
    (note,) = arm.by_type("note")
    why = note["data"][NOT_MEASURED]
    assert why.startswith("not run: its run could not start: ") and "ignore must be a list" in why, why
    assert not arm.by_type("model_call") and arm.end() is not None and arm.end()["exit_code"] is None
    (point,) = view_model(keeper.session)["sweep"]["points"]
    assert (point["seq"], point["arms"], point["ran"], point["not_measured"]) == (before, 1, 0, [why]), point


def test_a_sweep_arm_whose_override_cannot_apply_from_its_checkpoint_is_kept_as_not_run(
    keeper: Keeper, tmp_path: Path
) -> None:
    """An override of a call recorded after a checkpoint cannot apply to that checkpoint's arms (every
    call from there is live): their run was refused, which the sweep said, but they kept no session,
    so the parent's page drew only the checkpoints whose arms ran. They are kept, saying why."""
    cps = keeper.resumable()
    spec = 'tool:delete_file={"deleted": "nothing"}'  # (recorded between the 2nd and 3rd checkpoint)
    out = forkpoint_cli(
        keeper, "sweep", keeper.session.id, "--store", str(keeper.store), "--arms", "1", "--from", str(cps[1]),
        "--outcome", KEEPER_OUTCOME, "--override", spec, "--into", str(tmp_path / "sweep"), "--", *keeper.agent,
        cwd=tmp_path,
    )  # fmt: skip
    said = f"forkpoint: @{cps[1]} arm 1: not run: its run could not start: override '{spec}' names event seq"
    assert out.returncode == 1 and said in out.stderr, out.stdout + out.stderr
    assert f"@{cps[2]} arm 1: fail" in out.stderr, out.stderr  # (the override applied before it)
    points = {p["seq"]: p for p in view_model(keeper.session)["sweep"]["points"]}
    assert sorted(points) == cps[1:], points
    (why,) = points[cps[1]]["not_measured"]
    assert (points[cps[1]]["ran"], points[cps[2]]["ran"]) == (0, 1), points
    assert f"forkpoint: @{cps[1]} arm 1: {why}" in out.stderr, why


class _LosingExecutor(Executor):
    """Loses every task, as an executor whose workers died under them does: with the error it says,
    or (``None``) with no error text at all."""

    name, workers = "losing", 1

    def __init__(self, errors: list[str | None]) -> None:
        self.errors = errors

    def map(self, fn: Task, specs: Sequence[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
        for i, error in enumerate(self.errors):
            yield i, {} if error is None else {"error": error}


def test_a_lost_arm_says_what_happened_and_is_drawn_on_its_parents_page(
    keeper: Keeper, tmp_path: Path
) -> None:
    """An arm whose task was lost (its worker died) kept no session, so the parent's page drew
    nothing of it, and with no error text sweep said "lost: None". It is kept as a session that says
    what happened to it, and the sweep draws it alike."""
    before = keeper.resumable()[1]
    died = "the Ray task failed: WorkerCrashedError: The worker died unexpectedly while executing this task."
    specs = arm_specs(
        keeper.session, before, keeper.agent, arms=2, into=tmp_path / "arms", outcome=Outcome(KEEPER_OUTCOME)
    )
    arms = run_arms(specs, executor=_LosingExecutor([died, None]))
    whys = [a.not_run_or_lost for a in arms]
    assert whys == [f"lost: {died}", "lost: the task running it ended without a result or an error"], whys
    assert all(a.lost and a.session and a.unrun is None and not a.not_stored for a in arms), arms
    assert pass_rate_line(arms) == "outcome: no run measured; 2 arm(s) lost (the task running it failed)"
    kept = {a.path.name: a for a in arms_of_store(keeper)}
    assert sorted(kept) == sorted(Path(str(a.session)).name for a in arms)
    for arm, why in zip(arms, whys, strict=True):
        (note,) = kept[Path(str(arm.session)).name].by_type("note")
        assert note["data"][NOT_MEASURED] == why
    (point,) = view_model(keeper.session)["sweep"]["points"]
    assert (point["arms"], point["ran"], sorted(point["not_measured"])) == (2, 0, sorted(whys)), point


class _Died(BaseException):
    """The worker's death, in this process (as SIGKILL, nothing catches it on the way out)."""


class _DyingExecutor(Executor):
    """Runs each arm here, then loses its task with ``error``, as a Ray worker that died after the
    arm's run wrote its outcome, and (``before_end``) before its session's end was written, or
    after that, before its task returned."""

    name, workers = "dying", 1

    def __init__(self, error: str, monkeypatch: pytest.MonkeyPatch, *, before_end: bool) -> None:
        self.error, self.monkeypatch, self.before_end = error, monkeypatch, before_end

    def map(self, fn: Task, specs: Sequence[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
        from forkpoint.store.base import Recording

        def die(recording: Recording, *_args: Any, **_kwargs: Any) -> None:
            # (the kernel closes a dead worker's descriptors: left open here, the log's stayed open,
            # held by the writers still to close at exit, for every later test of this process)
            recording.writer.close()
            raise _Died

        for i, spec in enumerate(specs):
            with self.monkeypatch.context() as m, contextlib.suppress(_Died):
                if self.before_end:
                    m.setattr(Recording, "end", die)
                fn(spec)
            yield i, {"error": self.error}


@pytest.mark.parametrize("before_end", [True, False], ids=["before its end", "before it returned"])
def test_an_arm_whose_worker_died_after_measuring_is_counted_once_and_its_session_said(
    keeper: Keeper, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, before_end: bool
) -> None:
    """A worker that died after the arm's run measured its outcome left the arm's session in the
    store (without an end event, when it died before writing it), and the arm was kept again as a
    lost one: the parent's page counted the one arm twice, measured and lost. It is counted once, as
    lost, and its why names the session the worker left, as what it is; nothing is deleted."""
    for name, value in keeper.env.items():  # (the arm runs here, as its worker ran it)
        monkeypatch.setenv(name, value)
    before = keeper.resumable()[1]
    died = "the Ray task failed: WorkerCrashedError: The worker died unexpectedly while executing this task."
    specs = arm_specs(
        keeper.session, before, keeper.agent, arms=1, into=tmp_path / "arms", outcome=Outcome(KEEPER_OUTCOME)
    )
    (arm,) = run_arms(specs, executor=_DyingExecutor(died, monkeypatch, before_end=before_end))
    kept = arms_of_store(keeper)
    assert len(kept) == 2, kept  # (the session the worker wrote, and the lost arm's)
    (left,) = [s for s in kept if str(s.path) != arm.session]
    found = outcome_of(left)
    assert found is not None and (left.end() is None) is before_end, left.events
    passed = "pass" if found["passed"] else "fail"
    ending = "has no end event (its task ended before writing it)" if before_end else "ended"
    said = (
        f"lost: {died}; the arm's session its task had written, {left.id}, {ending}, with an outcome "
        f"({passed}) measured before the task was lost: it is not counted"
    )
    assert arm.not_run_or_lost == said, arm.not_run_or_lost
    (point,) = view_model(keeper.session)["sweep"]["points"]
    assert (point["arms"], point["ran"], point["not_measured"]) == (1, 0, [said]), point
    # (`forkpoint ls` lists both under the arm's name: the one that stands for the arm says it was lost)
    name = specs[0]["name"]
    assert (left.header["name"], Session.load(str(arm.session)).header["name"]) == (name, f"{name} (lost)")


def test_a_lost_arm_given_no_outcome_command_keeps_a_session_naming_the_one_its_worker_left(
    keeper: Keeper, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lost arm was kept as a session (naming the half-written one its worker left) only when the
    fork had an outcome command: without one, the session the worker left sat in the store under
    the arm's name, unended, and nothing (the fork's table, its session, `forkpoint ls`) said that
    the arm was lost or that this session was what it left. It is kept and named alike."""
    for name, value in keeper.env.items():  # (the arm runs here, as its worker ran it)
        monkeypatch.setenv(name, value)
    before = keeper.resumable()[1]
    died = "the Ray task failed: WorkerCrashedError: The worker died unexpectedly while executing this task."
    specs = arm_specs(keeper.session, before, keeper.agent, arms=1, into=tmp_path / "arms")
    (arm,) = run_arms(specs, executor=_DyingExecutor(died, monkeypatch, before_end=True))
    kept = arms_of_store(keeper)
    assert len(kept) == 2 and arm.session is not None, (kept, arm)
    (left,) = [s for s in kept if str(s.path) != arm.session]
    assert left.end() is None and outcome_of(left) is None, left.events
    said = (
        f"lost: {died}; the arm's session its task had written, {left.id}, has no end event (its task ended "
        "before writing it), without an outcome: it is not counted"
    )
    assert arm.not_run_or_lost == said, arm.not_run_or_lost
    lost = Session.load(arm.session)
    (note,) = lost.by_type("note")
    assert note["text"] == said and note["data"]["left_by_lost_task"] == [left.id], note
    name = specs[0]["name"]
    assert (left.header["name"], lost.header["name"]) == (name, f"{name} (lost)")
    # (the parent's page draws the outcomes of arms given an outcome command: none here)
    assert view_model(keeper.session)["sweep"] is None


def test_an_arm_whose_task_raised_after_its_session_was_made_does_not_say_a_worker_died(
    keeper: Keeper, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An arm whose task raised (forkpoint's own error, on the local executor) after its run's
    session was made is lost, and the session it left was said to have "no end event (the worker
    died before writing it)": no worker died. It is said as what is known: its task ended first."""
    from forkpoint.store.base import Recording

    for name, value in keeper.env.items():  # (the arm runs here)
        monkeypatch.setenv(name, value)
    before = keeper.resumable()[1]
    end = Recording.end
    raised: list[str] = []

    def fails_once(recording: Recording, *args: Any, **kwargs: Any) -> None:
        if not raised:
            raised.append(recording.session_id)
            recording.writer.close()  # (what the task's end leaves open is not the test's)
            raise RuntimeError("a bug")
        end(recording, *args, **kwargs)

    monkeypatch.setattr(Recording, "end", fails_once)
    specs = arm_specs(keeper.session, before, keeper.agent, arms=1, into=tmp_path / "arms")
    (arm,) = run_arms(specs)
    assert arm.lost and raised, arm
    said = str(arm.not_run_or_lost)
    assert said.startswith("lost: RuntimeError: a bug; ") and "worker" not in said, said
    assert f"{raised[0]}, has no end event (its task ended before writing it)" in said, said


def test_sweep_into_a_folder_holding_arms_refuses_as_fork_does(keeper: Keeper, tmp_path: Path) -> None:
    """A sweep into the folder of an earlier one ran its arms anyway: an arm whose directory was
    there was "not run" (restore wants an empty one), one whose directory was gone ran live and
    lost what it printed (its log is never written over), beside the earlier arm's log. It is
    refused before any arm runs, naming the folder, as fork refuses a folder holding arm-N."""
    cps = keeper.resumable()
    into = tmp_path / "sweep"
    (into / f"seq-{cps[0]}" / "arm-1").mkdir(parents=True)
    (into / f"seq-{cps[0]}" / "arm-1" / "mine.txt").write_text("mine\n")
    (into / f"seq-{cps[1]}").mkdir()
    (into / f"seq-{cps[1]}" / "arm-2.log").write_text("earlier\n")
    (into / f"seq-{cps[2]}" / "arm-1").mkdir(parents=True)  # empty: an arm may go there
    decisions = keeper.model.decisions
    out = forkpoint_cli(
        keeper, "sweep", keeper.session.id, "--store", str(keeper.store), "--arms", "2", "--into", str(into),
        "--outcome", KEEPER_OUTCOME, "--", *keeper.agent, cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    said = " ".join(out.stderr.split())
    assert (
        f"{into} already holds seq-{cps[0]}/arm-1, seq-{cps[1]}/arm-2.log: sweep into an empty folder" in said
    )
    assert keeper.model.decisions == decisions and arms_of_store(keeper) == []  # no arm ran
    assert (into / f"seq-{cps[0]}" / "arm-1" / "mine.txt").read_text() == "mine\n"
    assert (into / f"seq-{cps[1]}" / "arm-2.log").read_text() == "earlier\n"
    assert sorted(p.name for p in into.rglob("*")) == sorted(
        ["arm-1", "mine.txt", "arm-2.log", "arm-1", *(f"seq-{c}" for c in cps)]
    )


def test_sweep_verdict_in_words() -> None:
    def result(arms: list[tuple[int, bool | None]]) -> dict[str, Any]:
        return {"session": "s", **by_checkpoint(arms, {1: 1, 4: 2, 7: 3})}

    assert (
        sweep_verdict(result([(1, None), (4, None)]))
        == "no arm was measured, from any checkpoint: nothing says whether the run was recoverable"
    )
    assert sweep_verdict(result([(1, False), (4, False)])) == (
        "no arm passed from any checkpoint: the run was unrecoverable from @1 (turn 1) on"
    )
    assert sweep_verdict(result([(1, True), (4, True)])) == (
        "arms passed from every checkpoint up to the last (@4): the run was still recoverable there"
    )
    assert sweep_verdict(result([(1, True), (4, True), (4, False), (7, False)])) == (
        "the run became unrecoverable between @4 (turn 2, 1/2 passed) and @7 (turn 3): no arm from there on passed"
    )
    # Arms from an early checkpoint that all failed are not hidden by a later one that passed.
    assert sweep_verdict(result([(1, False), (4, True), (7, None)])) == (
        "arms passed from the last measured checkpoint (@4): the run was still recoverable there, "
        "though no arm passed from @1; nothing was measured from @7"
    )


def test_the_pass_rate_line_says_how_many_arms_were_not_measured_and_why() -> None:
    """``fork --outcome``'s summary said "1 arm(s) never went live (not measured)" without why, and
    left out an arm stopped after it went live (forkpoint interrupted) altogether: "outcome: 1/1
    passed" over two arms run. Each row said why; the summary now says it too, briefly."""
    from forkpoint.orchestrate import Arm
    from forkpoint.suite.tables import pass_rate_line

    def arm(index: int, **fields: Any) -> Arm:
        return Arm(index, Path(f"arm-{index}"), seq=5, **fields)

    passed = arm(1, outcome={"passed": True})
    stopped = arm(2, problem="stopped: interrupted: forkpoint was sent SIGTERM, after it went live")
    never = [arm(3, diverged="never replayed"), arm(4, diverged="its replayed prefix diverged")]
    assert pass_rate_line([passed, stopped, *never]) == (
        "outcome: 1/1 passed (100%, 95% CI 21%–100%); 2 arm(s) never went live (not measured): 1 never "
        "replayed, 1 its replayed prefix diverged; 1 arm(s) not measured: stopped: interrupted: forkpoint "
        "was sent SIGTERM, after it went live"
    )
    assert pass_rate_line([passed, never[0], never[0]]).endswith(
        "; 2 arm(s) never went live (not measured): never replayed"
    )


def test_an_arm_whose_command_never_started_forkpoint_is_shown_as_run_and_not_measured(
    keeper: Keeper, tmp_path: Path
) -> None:
    """An arm whose command exited before forkpoint started in it (exit 9) was shown as "invalid
    … not run (restore or validation failed)", though every check had passed and it ran. Its
    outcome was then counted in the pass rate ("outcome: 1/1 passed", the row only saying "wrote no
    report"), though it never continued the recorded run from its checkpoint: no process of it left
    the mark of a replay that started. It is run, and not measured, and its row says why."""
    before = keeper.resumable()[1]
    fork = fork_one_arm(
        keeper, tmp_path, before, "--outcome", "true", "--", "sh", "-c", "echo crashing; exit 9",
    )  # fmt: skip
    assert fork.returncode == 1, fork.stdout + fork.stderr
    (row,) = [line for line in fork.stdout.splitlines() if line.startswith("1 ")]
    assert row.split()[2] == "valid" and " 9 " in row and "pass" not in row, fork.stdout
    assert "not run" not in fork.stdout, fork.stdout
    text = " ".join(fork.stdout.split())
    assert "outcome: no run measured; 1 arm(s) never went live (not measured)" in text, text
    said = " ".join(fork.stderr.split())
    assert (
        f"arm 1: its command (exit code 9) never started forkpoint's replay, so it never went live from "
        f"checkpoint seq {before} (not measured): is it the recorded agent, with forkpoint installed in its "
        "environment?"
    ) in said, said
    (arm,) = arms_of_store(keeper)
    assert outcome_of(arm) is None
    assert (tmp_path / "arms" / "arm-1.log").read_text() == "crashing\n"
    # (one arm runs alone: "1 arm on local (2 at a time)" said otherwise)
    assert "forkpoint: 1 arm on local\n" in fork.stderr, fork.stderr


@pytest.mark.parametrize("case", ["not found", "not executable", "killed at start"])
def test_an_arm_whose_command_could_not_run_or_was_killed_at_start_says_what_happened(
    keeper: Keeper, tmp_path: Path, case: str
) -> None:
    """An arm whose command was not found (exit 127), was not executable (126) or was killed by a
    signal before forkpoint started in it (137) was said, on the fork's row, in its session and on
    its parent's page, only as "its command (exit code N) never started forkpoint's replay … is it
    the recorded agent, with forkpoint installed in its environment?": what happened to it was left
    for the user to work out from an exit code. It is said, and the arm is not measured."""
    before = keeper.resumable()[1]
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\necho hi\n")  # (no execute bit)
    cmd, what = {
        "not found": (["no-such-agent"], "its command no-such-agent was not found"),
        "not executable": ([str(script)], f"its command {script} could not be run: Permission denied"),
        "killed at start": (
            ["sh", "-c", "kill -KILL $$"],
            "its command was killed by SIGKILL (exit code 137) before forkpoint's replay started in it",
        ),
    }[case]
    fork = fork_one_arm(keeper, tmp_path, before, "--outcome", "true", "--", *cmd)
    assert fork.returncode == 1, fork.stdout + fork.stderr
    said = " ".join(fork.stderr.split())
    assert f"arm 1: {what}, so it never went live from checkpoint seq {before} (not measured)" in said, said
    assert "is it the recorded agent" not in said, said
    text = " ".join(fork.stdout.split())
    assert "outcome: no run measured; 1 arm(s) never went live (not measured)" in text, text
    (arm,) = arms_of_store(keeper)
    assert outcome_of(arm) is None
    (note,) = arm.by_type("note")
    assert note["data"][NOT_MEASURED] == what, note
    (point,) = view_model(keeper.session)["sweep"]["points"]
    assert (point["seq"], point["arms"], point["ran"], point["not_measured"]) == (before, 1, 0, [what]), point
    # (`forkpoint show` of the parent says it too, as its page draws it)
    shown = forkpoint_cli(keeper, "show", keeper.session.id, "--store", str(keeper.store), cwd=tmp_path)
    text = " ".join(shown.stdout.split())
    assert f"@{before} (turn 2): 1 arm, no run measured; not measured: {what}" in text, shown.stdout


def test_an_arm_whose_folder_vanished_before_its_run_started_says_so(
    keeper: Keeper, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The arm's folder removed after its checkpoint was restored and validated, before its command
    started there: the arm was said to be a command that "never started forkpoint's replay … is it
    the recorded agent?". It says the folder was gone, and is not measured."""
    from forkpoint import orchestrate

    for name, value in keeper.env.items():  # (the arm runs here)
        monkeypatch.setenv(name, value)
    before = keeper.resumable()[1]
    where = orchestrate._where_it_ran

    def vanished(session: Session, seq: int, directory: Path) -> Path:
        shutil.rmtree(directory)
        return where(session, seq, directory)

    monkeypatch.setattr(orchestrate, "_where_it_ran", vanished)
    specs = arm_specs(
        keeper.session, before, keeper.agent, arms=1, into=tmp_path / "arms", outcome=Outcome("true")
    )
    (arm,) = run_arms(specs)
    what = f"its command {keeper.agent[0]} could not be run in {arm.directory}: that directory does not exist"
    assert arm.diverged == "never replayed" and arm.passed is None, arm
    assert str(arm.problem).startswith(f"{what}, so it never went live from checkpoint seq {before}"), (
        arm.problem
    )
    assert pass_rate_line([arm]).startswith("outcome: no run measured; 1 arm(s) never went live"), arm
    (kept,) = arms_of_store(keeper)
    (note,) = kept.by_type("note")
    assert note["data"][NOT_MEASURED] == what, note
    (point,) = view_model(keeper.session)["sweep"]["points"]
    assert (point["ran"], point["not_measured"]) == (0, [what]), point


@pytest.mark.parametrize("full", [("outcome",), ("outcome", "note", "end")], ids=["its outcome", "all after"])
def test_an_arm_whose_session_the_disk_was_full_for_says_so_and_is_not_counted(
    keeper: Keeper, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, full: tuple[str, ...]
) -> None:
    """A full disk when the arm's outcome was written into its session: the OSError left the arm's
    task, which made the arm "lost: OSError: … No space left on device; the arm's session its worker
    had written … (the worker died before writing it)", untrue (no worker died), and its session was
    never ended nor closed. The arm says its outcome could not be written, is not counted (its
    session, which the parent's page reads, holds none), and what could still be written is."""
    import errno

    from forkpoint.log import SessionWriter

    for name, value in keeper.env.items():  # (the arm runs here)
        monkeypatch.setenv(name, value)
    before = keeper.resumable()[1]
    write = SessionWriter.write

    def on_a_full_disk(self: SessionWriter, event: Any) -> Any:
        if event["type"] in full and self.session_id != keeper.session.id:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return write(self, event)

    monkeypatch.setattr(SessionWriter, "write", on_a_full_disk)
    specs = arm_specs(
        keeper.session, before, keeper.agent, arms=1, into=tmp_path / "arms", outcome=Outcome(KEEPER_OUTCOME)
    )
    (arm,) = run_arms(specs)
    (kept,) = arms_of_store(keeper)
    assert not arm.lost and arm.passed is None and arm.session == str(kept.path), arm
    why = f"its outcome ({'pass' if (tmp_path / 'arms' / 'arm-1' / 'answer.txt').exists() else 'fail'}) could not"
    why += f" be written to its session {kept.id} ([Errno 28] No space left on device)"
    assert str(arm.problem).startswith(why), arm.problem
    assert pass_rate_line([arm]) == f"outcome: no run measured; 1 arm(s) not measured: {arm.problem}"
    assert outcome_of(kept) is None and kept.by_type("model_call"), kept.events
    if full == ("outcome",):  # (the rest is written: its parent's page draws it, not measured)
        (note,) = kept.by_type("note")
        assert note["data"][NOT_MEASURED] == why, note
        assert kept.end() is not None
        (point,) = view_model(keeper.session)["sweep"]["points"]
        assert (point["ran"], point["not_measured"]) == (0, [why]), point
    else:
        assert arm.problem == (
            f"{why}; why it measured nothing could not be written to its session ([Errno 28] No space "
            "left on device); its end could not be written ([Errno 28] No space left on device): it stays "
            "incomplete"
        )
        assert not kept.by_type("note") and kept.end() is None
        assert view_model(keeper.session)["sweep"] is None  # (not counted as measured)


@pytest.mark.slow
def test_sigterm_to_fork_stops_every_process_of_its_arms_and_reports_them(
    keeper: Keeper, tmp_path: Path
) -> None:
    """``kill -TERM`` of a ``forkpoint fork`` whose arm hung: forkpoint exited (143) and left the
    arm's ``sh`` and the ``sleep`` it ran running under init, never reported. The signal reaches
    every process of each running arm; the arms that ran are reported; forkpoint then ends. What
    the cut-short arms left is not measured (``true`` passed them all: "2/2 passed")."""
    import signal
    import time

    before = keeper.resumable()[1]
    pids = tmp_path / "pids"
    hang = f"sleep 1000 & echo $! >> {pids}; wait"
    fork = subprocess.Popen(
        [sys.executable, "-m", "forkpoint.cli", "fork", f"{keeper.session.id}@{before}", "--arms", "2",
         "--jobs", "2", "--into", str(tmp_path / "arms"), "--store", str(keeper.store), "--outcome", "true",
         "--", "sh", "-c", hang],
        cwd=tmp_path, env=keeper.env | {"COLUMNS": "200"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while not (pids.exists() and len(pids.read_text().split()) == 2):
        assert time.monotonic() < deadline and fork.poll() is None, fork.communicate()
        time.sleep(0.1)
    fork.send_signal(signal.SIGTERM)
    out, err = fork.communicate(timeout=60)
    assert fork.returncode == 1, out + err  # (its arms did not end well)
    time.sleep(0.5)
    for pid in map(int, pids.read_text().split()):  # ended (a zombie where init does not reap it)
        status = Path(f"/proc/{pid}/status")
        assert not status.exists() or "State:\tZ" in status.read_text(), status.read_text()
    rows = [line for line in out.splitlines() if line[:2] in ("1 ", "2 ")]
    assert len(rows) == 2 and all(" valid " in r and "143" in r for r in rows), out
    assert "outcome: no run measured" in out and "passed" not in out.split("outcome:")[1], out
    assert "interrupted: forkpoint was sent SIGTERM" in " ".join(out.split()), out


def test_sigterm_while_an_arms_outcome_command_runs_stops_it_and_measures_nothing(
    keeper: Keeper, tmp_path: Path
) -> None:
    """SIGTERM to ``fork`` while an arm's outcome command ran (here it sends the signal itself, to
    its parent, forkpoint): the command was never passed the signal, so fork waited for it (up to its
    timeout: ten minutes by default) and showed what it then said as the arm's outcome, "pass". Now
    it is stopped with the arm, and nothing is measured."""
    before = keeper.resumable()[1]
    fork = fork_one_arm(
        keeper, tmp_path, before, "--outcome", "kill -TERM $PPID; sleep 60", "--", *keeper.agent,
    )  # fmt: skip
    out = " ".join(fork.stdout.split())
    assert "outcome: no run measured" in out and "pass" not in out.split("outcome:")[1], out
    assert "interrupted: forkpoint was sent" in out and "while the outcome command ran" in out, out
    assert fork.returncode == 1, fork.stdout + fork.stderr
    (arm,) = arms_of_store(keeper)
    assert outcome_of(arm) is None
    # sweep too: it exited 0, as no arm it ran had failed
    sweep = forkpoint_cli(
        keeper, "sweep", keeper.session.id, "--arms", "1", "--jobs", "1", "--into", str(tmp_path / "sweep"),
        "--store", str(keeper.store), "--outcome", "kill -TERM $PPID; sleep 60", "--", *keeper.agent,
        cwd=tmp_path,
    )  # fmt: skip
    assert sweep.returncode == 1, sweep.stdout + sweep.stderr
    assert all(outcome_of(a) is None for a in arms_of_store(keeper)), sweep.stdout


def test_an_arm_past_its_timeout_is_stopped_with_what_it_started_and_measured(
    keeper: Keeper, tmp_path: Path
) -> None:
    """An arm whose agent hung kept ``forkpoint fork`` (and every arm queued behind it) waiting
    forever: there was no per-arm limit. ``--arm-timeout`` stops it (and the processes it started),
    says so in its row, and measures its outcome on what it left, as it went live (from the first
    checkpoint, before any recorded call, its first call was live; one stopped before it went live
    is not measured, below)."""
    import time

    before = keeper.resumable()[0]
    pids = tmp_path / "pids"
    started = time.monotonic()
    fork = fork_one_arm(
        keeper, tmp_path, before, "--outcome", "true", "--arm-timeout", "8",
        "--", "sh", "-c", f"python -c {shlex.quote(ONE_CALL)}; sleep 1000 & echo $! >> {pids}; wait",
    )  # fmt: skip
    assert time.monotonic() - started < 60, fork.stdout + fork.stderr
    assert fork.returncode == 1, fork.stdout + fork.stderr
    said = " ".join(fork.stderr.split())
    assert "stopped: the program ran longer than its timeout of 8 s, after it went live" in said, said
    assert "outcome: 1/1 passed" in fork.stdout
    time.sleep(0.5)
    status = Path(f"/proc/{int(pids.read_text())}/status")  # the sleep the arm started is gone too
    assert not status.exists() or "State:\tZ" in status.read_text(), status.read_text()


def test_an_arm_stopped_at_its_timeout_before_it_reached_its_checkpoint_is_not_measured(
    keeper: Keeper, tmp_path: Path
) -> None:
    """An arm stopped by ``--arm-timeout`` before it had asked for the recorded calls up to its
    checkpoint (a slow start) never went live: what it left is the checkpoint's state, not a
    continuation. It was measured all the same and counted in the pass rate ("outcome: 1/1
    passed"), a pass the agent never earned; an arm that ended there is not measured."""
    before = keeper.resumable()[1]
    fork = fork_one_arm(
        keeper, tmp_path, before, "--outcome", "true", "--arm-timeout", "2",
        "--", "sh", "-c", "sleep 1000",
    )  # fmt: skip
    text = " ".join(fork.stdout.split())
    assert fork.returncode == 1, fork.stdout + fork.stderr
    said = " ".join(fork.stderr.split())
    assert f"ran longer than its timeout of 2 s, before it reached checkpoint seq {before}" in said, said
    assert "never went live (not measured)" in text, text
    assert "outcome: no run measured; 1 arm(s) never went live (not measured)" in text, text
    (arm,) = arms_of_store(keeper)
    assert outcome_of(arm) is None


def test_an_arm_stopped_at_its_timeout_before_it_went_live_from_a_first_checkpoint_is_not_measured(
    keeper: Keeper, tmp_path: Path
) -> None:
    """From a first checkpoint (no recorded call before it to leave unserved), an arm stopped by
    ``--arm-timeout`` before it went live was measured and counted in the pass rate ("outcome: 1/1
    passed"; sweep called the checkpoint recoverable), whether its command had not yet started the
    agent or the agent had made no call: a pass nothing earned. Each says how far it got and is not
    measured; one stopped after its first live call, with no report written, is measured, and said."""
    first = keeper.resumable()[0]

    def fork(timeout: str, *cmd: str) -> tuple[str, subprocess.CompletedProcess[str]]:
        into = tmp_path / f"arms-{len(list(tmp_path.glob('arms-*')))}"
        done = forkpoint_cli(
            keeper, "fork", f"{keeper.session.id}@{first}", "--arms", "1", "--into", str(into),
            "--store", str(keeper.store), "--outcome", "true", "--arm-timeout", timeout, "--", *cmd, cwd=tmp_path,
        )  # fmt: skip
        return " ".join((done.stdout + done.stderr).split()), done

    text, slow = fork("2", "sh", "-c", f"sleep 1000; {shlex.join(keeper.agent)}")
    assert slow.returncode == 1, slow.stdout + slow.stderr
    assert (
        f"stopped: the program ran longer than its timeout of 2 s, before it reached checkpoint seq {first}: "
        "forkpoint's replay had not started in it, so it never went live (not measured)"
    ) in text, text
    assert "outcome: no run measured; 1 arm(s) never went live (not measured)" in text, text
    # (Python's start, and openai's import below, on a busy machine: well within 8 s)
    text, idle = fork("8", "python", "-c", "import time; time.sleep(1000)")
    assert idle.returncode == 1, idle.stdout + idle.stderr
    assert (
        f"stopped: the program ran longer than its timeout of 8 s, before it made a call from checkpoint seq "
        f"{first}, so it never went live (not measured)"
    ) in text, text
    assert "outcome: no run measured; 1 arm(s) never went live (not measured)" in text, text
    assert [outcome_of(a) for a in arms_of_store(keeper)] == [None, None]
    text, hung = fork("8", "python", "-c", f"{ONE_CALL}; import time; time.sleep(1000)")
    assert f"ran longer than its timeout of 8 s, after it went live from checkpoint seq {first}" in text, text
    assert "outcome: 1/1 passed" in text and "never went live" not in text, text
    assert hung.returncode == 1, hung.stdout + hung.stderr
    # sweep leaves the arm that had not started out of its verdict, and says why
    sweep = forkpoint_cli(
        keeper, "sweep", keeper.session.id, "--to", str(first), "--arms", "1", "--into", str(tmp_path / "sweep"),
        "--store", str(keeper.store), "--outcome", "true", "--arm-timeout", "2",
        "--", "sh", "-c", f"sleep 1000; {shlex.join(keeper.agent)}", cwd=tmp_path,
    )  # fmt: skip
    said = " ".join(sweep.stdout.split())
    assert sweep.returncode == 1, sweep.stdout + sweep.stderr
    assert "no arm was measured, from any checkpoint: nothing says whether the run was recoverable" in said, (
        said
    )
    assert "1 arm(s) never went live (not measured): stopped:" in said, said
    assert "forkpoint's replay had not started in it" in said, said


def test_what_an_arm_started_is_stopped_with_it_before_its_outcome_is_measured(
    keeper: Keeper, tmp_path: Path
) -> None:
    """An agent that ended at once on SIGTERM left what it had started (a shell, its sleeps) running
    in the arm: the outcome was measured while they ran, and they changed the arm's folder after it
    ("late.txt" came after the outcome passed). What the arm started is stopped with it."""
    import time

    before = keeper.resumable()[1]
    late = "import subprocess; subprocess.run('(sleep 4; echo late > late.txt) & sleep 60', shell=True, capture_output=True)"
    fork = fork_one_arm(
        keeper, tmp_path, before, "--outcome", "test ! -e late.txt", "--arm-timeout", "2",
        "--", sys.executable, "-c", late,
    )  # fmt: skip
    assert "stopped: the program ran longer than its timeout of 2 s" in " ".join(fork.stdout.split()), (
        fork.stdout
    )
    time.sleep(5)  # (past the moment the shell it started would have written late.txt)
    assert not (tmp_path / "arms" / "arm-1" / "late.txt").exists()


def test_an_outcome_command_that_cannot_run_measures_nothing_and_fails_the_fork(
    keeper: Keeper, tmp_path: Path
) -> None:
    """A typo in ``--outcome`` ('pytst -q': the shell exits 127) was counted as a fail in every arm:
    "outcome: 0/2 passed", and fork exited 0. An outcome command that could not run measured
    nothing: the arms are unknown, the line says why in the shell's words, and fork exits 1."""
    before = keeper.resumable()[1]
    fork = forkpoint_cli(
        keeper, "fork", f"{keeper.session.id}@{before}", "--arms", "2", "--into", str(tmp_path / "arms"),
        "--store", str(keeper.store), "--outcome", "pytst -q", "--", *keeper.agent, cwd=tmp_path,
    )  # fmt: skip
    assert fork.returncode == 1, fork.stdout + fork.stderr
    text = " ".join(fork.stdout.split())
    assert (
        "outcome: no run measured; 2 arm(s) not measured: the outcome command could not run (exit 127:"
        in text
    )
    assert "pytst: not found" in text and "fail" not in fork.stdout, fork.stdout
    outcomes = [outcome_of(c) for c in arms_of_store(keeper)]
    assert [o["passed"] if o else "none" for o in outcomes] == [None, None]


def test_a_fork_whose_arm_ran_no_forkpoint_fails_as_sweep_does(keeper: Keeper, tmp_path: Path) -> None:
    """``fork … -- true``: the arm's command exited 0 but never started forkpoint, so nothing of its
    continuation was recorded; fork exited 0 where sweep exits 1. So did an arm that never went live."""
    before = keeper.resumable()[1]
    fork = fork_one_arm(
        keeper, tmp_path, before, "--", "true",
    )  # fmt: skip
    assert fork.returncode == 1, fork.stdout + fork.stderr
    assert "never started forkpoint's replay" in " ".join(fork.stdout.split()), fork.stdout
    # A Python command starts forkpoint, reports, and exits 0, but asked for none of the recorded
    # calls before the checkpoint: it never went live. fork said so and exited 0.
    fork = forkpoint_cli(
        keeper, "fork", f"{keeper.session.id}@{before}", "--arms", "1", "--into", str(tmp_path / "python"),
        "--store", str(keeper.store), "--", "python", "-c", "pass", cwd=tmp_path,
    )  # fmt: skip
    assert "never went live" in " ".join(fork.stdout.split()), fork.stdout
    assert fork.returncode == 1, fork.stdout + fork.stderr


def test_an_arm_timeout_is_kept_when_the_agent_started_a_process_in_a_session_of_its_own(
    keeper: Keeper, tmp_path: Path
) -> None:
    """The agent started a server in a session of its own (``setsid``), which kept the arm's
    captured output open after the arm was stopped: ``--arm-timeout 2`` took as long as that
    process lived. What was read is kept, and fork goes on."""
    import time

    before = keeper.resumable()[1]
    pids = tmp_path / "pids"
    hang = f"echo started; setsid sleep 60 & echo $! >> {pids}; sleep 1000"
    started = time.monotonic()
    try:
        fork = fork_one_arm(
            keeper, tmp_path, before, "--arm-timeout", "2", "--", "sh", "-c", hang,
        )  # fmt: skip
        took = time.monotonic() - started
    finally:
        for pid in map(int, pids.read_text().split()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    assert took < 30, fork.stdout + fork.stderr
    assert "stopped: the program ran longer than its timeout of 2 s" in " ".join(fork.stdout.split())
    assert (tmp_path / "arms" / "arm-1.log").read_text().startswith("started")


def test_an_arm_that_ended_is_not_waited_for_past_what_it_left_running(
    keeper: Keeper, tmp_path: Path
) -> None:
    """The agent ended (exit 0) and left a process running in the background (a dev server) that
    held its captured output open: without ``--arm-timeout``, fork waited as long as that process
    lived (forever, for a server), and its outcome was measured after it had changed the arm's
    folder; with one, the row said the program "ran longer than its timeout". What it left running
    is stopped soon after it ended, and its outcome measured on what the program left."""
    before = keeper.resumable()[1]
    left = f"echo started; {shlex.join(keeper.agent)}; (sleep 30; echo late > late.txt) & exit 0"
    fork = fork_one_arm(
        keeper, tmp_path, before, "--outcome", "test ! -e late.txt", "--", "sh", "-c", left,
    )  # fmt: skip
    text = " ".join(fork.stdout.split())
    assert "outcome: 1/1 passed" in text, fork.stdout + fork.stderr
    assert "ran longer than its timeout" not in text, fork.stdout
    assert "a process it started still holds its output open: its process group is stopped" in fork.stderr, (
        fork.stderr
    )
    assert (tmp_path / "arms" / "arm-1.log").read_text().startswith("started")
    assert not (tmp_path / "arms" / "arm-1" / "late.txt").exists()


PRINTER = """
import sys
for _ in range(2048):
    sys.stdout.buffer.write(b"x" * 65534 + b"\\r\\n")
sys.stderr.buffer.write(b"\\xff err\\r\\n")
"""

# Runs a command and prints the peak resident size of it and its processes (KiB): from a small
# process, since a child's peak starts at its parent's size when it forks (pytest's, here).
PEAK = """
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[1:])
print(os.wait4(proc.pid, 0)[2].ru_maxrss, flush=True)
"""

# The outcome: stdout as printed (a line at a time: the file is bigger than the peak allowed),
# then the agent's final answer, and nothing of stderr.
JUDGE = """
import os, sys
with open(os.environ["FORKPOINT_OUTCOME_OUTPUT"], "rb") as f:
    printed = all(f.readline() == b"x" * 65534 + b"\\r\\n" for _ in range(2048))
    rest = f.read()
sys.exit(not (printed and rest.startswith(b"final:") and b"err" not in rest))
"""


@pytest.mark.slow
def test_what_an_arm_prints_is_kept_byte_for_byte_on_disk_not_in_memory(
    keeper: Keeper, tmp_path: Path
) -> None:
    """An arm that printed 300 MB had forkpoint hold 1.3 GB (its output read into memory as text,
    joined, encoded), and its ``arm-N.log`` and the outcome's ``$FORKPOINT_OUTCOME_OUTPUT`` had
    each ``\\r\\n`` turned into ``\\n`` and each byte that is not UTF-8 into U+FFFD. Here an arm
    prints 128 MiB before the agent goes on: the whole ``fork`` (its arm's processes included)
    peaks below that, and both files hold the bytes printed."""
    before = keeper.resumable()[1]
    printed = 2048 * 65536
    (tmp_path / "judge.py").write_text(JUDGE)
    arms = tmp_path / "arms"
    fork = subprocess.run(
        [sys.executable, "-c", PEAK, sys.executable, "-m", "forkpoint.cli", "fork", f"{keeper.session.id}@{before}",
         "--arms", "1", "--into", str(arms), "--store", str(keeper.store),
         "--outcome", f"python {tmp_path / 'judge.py'}",
         "--", "sh", "-c", f'python -c "$0" && exec {shlex.join(keeper.agent)}', PRINTER],
        cwd=tmp_path, env=keeper.env | {"COLUMNS": "200"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    peak = fork.stdout.splitlines()[-1]
    assert "outcome: 1/1 passed" in fork.stdout, (
        fork.stdout + fork.stderr
    )  # (the outcome's file: stdout only)
    assert int(peak) * 1024 < printed, f"peak {peak} KiB"
    with (arms / "arm-1.log").open("rb") as log:
        assert log.read(65536) == b"x" * 65534 + b"\r\n"
        log.seek(printed - 65536)
        assert log.read() == b"x" * 65534 + b"\r\nfinal: Done.\n\xff err\r\n"  # (stdout, then stderr)


def test_an_outcome_command_that_removes_its_output_file_leaves_the_arms_log_whole(
    keeper: Keeper, tmp_path: Path
) -> None:
    """``$FORKPOINT_OUTCOME_OUTPUT`` is the file ``arm-N.log`` is then copied from, read by its
    name: an outcome command that removed it (done with it, or moved it away) left the log empty,
    the arm with a problem, and a traceback from the file's cleanup. It is now read through
    forkpoint's own descriptor."""
    before = keeper.resumable()[1]
    arms = tmp_path / "arms"
    fork = forkpoint_cli(
        keeper, "fork", f"{keeper.session.id}@{before}", "--arms", "1", "--into", str(arms),
        "--store", str(keeper.store), "--outcome", 'grep -q final "$FORKPOINT_OUTCOME_OUTPUT" && rm "$FORKPOINT_OUTCOME_OUTPUT"',
        "--", *keeper.agent, cwd=tmp_path,
    )  # fmt: skip
    assert fork.returncode == 0 and "outcome: 1/1 passed" in fork.stdout, fork.stdout + fork.stderr
    assert (arms / "arm-1.log").read_text().startswith("final: Done."), fork.stdout + fork.stderr
    assert "Traceback" not in fork.stderr, fork.stderr


# A child printing 1 MB where forkpoint's temporary files may hold 64 KiB (a full disk, as the limit
# on file size makes it: writes past it fail with EFBIG), then writing a file of its own.
FULL_DISK = """
import os, resource
from pathlib import Path
from forkpoint.orchestrate import run_child
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
ran = run_child(["sh", "-c", "head -c 1000000 /dev/zero; echo ended > ended.txt"], dict(os.environ), capture=True)
print(ran.code, ran.out.size, ran.out.lost, Path("ended.txt").read_text().strip())
"""


def test_what_a_child_prints_past_a_full_disk_is_dropped_and_it_is_waited_for(tmp_path: Path) -> None:
    """The temporary file of what an arm printed on a full ``$TMPDIR``: the failed write ended the
    wait, the arm's task failed, and its agent ran on alone, after ``forkpoint fork`` had exited,
    live. Now what the file cannot take is dropped (counted, said) and the child waited for."""
    ran = subprocess.run(
        [sys.executable, "-c", FULL_DISK], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert ran.stdout.split() == ["0", "65536", str(1000000 - 65536), "ended"], ran.stdout + ran.stderr
    assert "the rest of it is dropped" in ran.stderr


def test_a_child_whose_directory_does_not_exist_is_said_so(tmp_path: Path) -> None:
    """An arm's command run in a folder its checkpoint does not hold (the recording's directory,
    git-ignored) was said "the command python could not be run: [Errno 2] No such file or
    directory: PosixPath('…/arm-1/scratch')": the command is there, the directory is not."""
    gone = tmp_path / "arm-1" / "scratch"
    ran = run_child([sys.executable, "-c", "pass"], dict(os.environ), cwd=gone, capture_stderr=True)
    assert ran.code == 127
    assert ran.unrun == f"could not be run in {gone}: that directory does not exist"
    # (its outcome command, run there, said "[Errno 2] No such file or directory: PosixPath('…')")
    from forkpoint.outcome import Outcome, measure

    measured = measure(Outcome("true"), cwd=gone, session=None, output=None, exit_code=127)
    assert measured["passed"] is None
    assert measured["reason"] == f"cannot run the outcome command in {gone}: that directory does not exist"


# forkpoint cannot wait for a child it started (here its temporary file cannot be made: out of
# descriptors, say); then, whether the child was left running.
NO_WAIT = """
import os
from forkpoint import children
from forkpoint.orchestrate import run_child

def refuse(self, text=""):
    raise OSError(24, "Too many open files")

children.Captured.__init__ = refuse
try:
    run_child(["sleep", "60"], dict(os.environ), capture=True, capture_stderr=True)
except OSError as exc:
    print("raised:", exc)
try:
    print("left running:", os.waitpid(-1, os.WNOHANG))
except ChildProcessError:
    print("left running: none")
"""


def test_a_child_forkpoint_cannot_wait_for_is_not_left_running(tmp_path: Path) -> None:
    """An error between starting a child and waiting for it (its output's temporary file) ended
    the wait and left the child running on alone: an arm's agent, live, after fork had exited. Now
    it is killed and reaped before the error goes on."""
    ran = subprocess.run([sys.executable, "-c", NO_WAIT], capture_output=True, text=True, timeout=60)
    assert ran.stdout.splitlines() == ["raised: [Errno 24] Too many open files", "left running: none"], (
        ran.stdout + ran.stderr
    )


OTHER_AGENT = """
import os
import openai

client = openai.OpenAI(base_url=os.environ["AGENT_BASE_URL"], api_key="sk-test", max_retries=0)
client.chat.completions.create(model="m", messages=[{"role": "user", "content": "Something else."}])
"""


def test_an_arm_whose_replayed_prefix_diverged_is_not_measured(keeper: Keeper, tmp_path: Path) -> None:
    """An arm whose agent asked something else than the recording before the checkpoint stopped
    there and never went live; with ``--outcome true`` it was counted as a pass ("2/2 passed"), and
    sweep called the run recoverable. It is shown as diverged, and left out of the pass rate."""
    before = keeper.resumable()[1]
    fork = fork_one_arm(
        keeper, tmp_path, before, "--outcome", "true", "--", sys.executable, "-c", OTHER_AGENT,
    )  # fmt: skip
    text = " ".join(fork.stdout.split())
    assert fork.returncode == 1, fork.stdout + fork.stderr
    said = " ".join(fork.stderr.split())
    assert "arm 1: its replayed prefix diverged at the 1st model call" in said, fork.stderr
    assert "outcome: no run measured; 1 arm(s) never went live (not measured)" in text, fork.stdout
    assert "pass" not in fork.stdout.split("outcome:")[0].split("directory")[-1]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("policy", "said"),
    [
        ("live", "it went live there (--on-divergence live), so the calls from there on, tools included, ran "
         "on the checkpoint's restored files, not from the checkpoint"),
        ("fifo", "fifo served the recorded answers to 1 request that differed (--on-divergence fifo), then it "
         "went live from the checkpoint"),
    ],
)  # fmt: skip
def test_an_arm_whose_prefix_diverged_and_went_on_as_asked_says_so(
    keeper: Keeper, tmp_path: Path, policy: str, said: str
) -> None:
    """An override of the first tool result changes the 2nd model request, before the last
    checkpoint: under ``live`` the arm went live there, its tools running again on the restored
    files, and under ``fifo`` it was served recorded answers to a request that differed. Its row read
    like any continuation from the checkpoint, measured and counted, without a word."""
    last = keeper.resumable()[2]
    fork = fork_one_arm(
        keeper, tmp_path, last, "--on-divergence", policy,
        "--override", 'tool:write_file.result={"path": "elsewhere.txt"}', "--", *keeper.agent,
    )  # fmt: skip
    said = (
        "its replayed prefix diverged at the 2nd model call (no recorded request has the same match key), "
        f"before checkpoint seq {last}: {said}"
    )
    assert f"arm 1: {said}" in " ".join(fork.stderr.split()), fork.stdout + fork.stderr


@pytest.mark.slow
def test_an_arm_whose_prefix_an_override_made_diverge_names_the_override(
    keeper: Keeper, tmp_path: Path
) -> None:
    """The same override under ``stop``: the arm never went live, and the reason given was to add an
    ignore rule, which cannot make the recording answer a request the override changed on purpose."""
    last = keeper.resumable()[2]
    spec = 'tool:write_file.result={"path": "elsewhere.txt"}'
    fork = fork_one_arm(
        keeper, tmp_path, last, "--override", spec, "--", *keeper.agent,
    )  # fmt: skip
    said = " ".join(fork.stderr.split())
    assert fork.returncode == 1, fork.stdout + fork.stderr
    assert (
        "it never went live (the override " + spec + ", served before the checkpoint, changed what the agent "
        "asked next, which the recording cannot answer; --on-divergence live goes live there, on the "
        "checkpoint's files)" in said
    ), fork.stderr
    assert "ignore rule" not in said


@pytest.mark.slow
def test_an_arm_whose_live_tool_named_the_recorded_repository_says_so(tmp_path: Path) -> None:
    """A model that goes on with the absolute path of the recorded repository, as the answers served
    before the checkpoint gave it, makes the arm's tool write there: the user's repository changed,
    the arm did not, and its row read like any continuation whose outcome failed."""
    with LocalServer() as srv:
        keeper = record_keeper(tmp_path, srv)
        answer = keeper.repo / "answer.txt"

        target = [answer]

        def absolute(request: dict[str, Any]) -> Reply:
            turn = sum(1 for m in request["body"]["messages"] if m.get("role") == "assistant")
            if turn != 1:
                return json_reply(chat_completion("chatcmpl-2", "m", text="Done."))
            calls = [("write_file", {"path": str(target[0]), "content": "43"})]
            return json_reply(chat_completion("chatcmpl-1", "m", tool_calls=calls, call_ids=["call_1"]))

        def fork(into: Path) -> str:
            out = forkpoint_cli(
                keeper, "fork", f"{keeper.session.id}@{keeper.resumable()[1]}", "--arms", "1",
                "--into", str(into), "--store", str(keeper.store), "--outcome", KEEPER_OUTCOME,
                "--", *keeper.agent, cwd=tmp_path,
            )  # fmt: skip
            return " ".join((out.stdout + out.stderr).split())

        srv.route("/v1/chat/completions", absolute)
        said = fork(tmp_path / "arms")
        assert answer.read_text() == "43"  # (forkpoint cannot stop an agent's own absolute path)
        assert (
            f"arm 1: its live tool call(s) write_file named the recorded repository {keeper.repo}, outside the "
            "arm: whatever they did there is not in the arm its outcome measures" in said
        ), said
        # An arm inside the recorded repository, whose agent names its own files: nothing to say.
        target[0] = keeper.repo / "inside" / "arm-1" / "answer.txt"
        said = fork(keeper.repo / "inside")
        assert "named the recorded repository" not in said and "outcome: 1/1 passed" in said, said


@pytest.mark.slow
def test_an_arm_an_override_ended_before_its_checkpoint_names_the_override(
    keeper: Keeper, tmp_path: Path
) -> None:
    """``--override 'model#2.text="…"'`` before the checkpoint: the agent answered and ended there,
    as the override asked. The arm was said to have never gone live, and asked whether the command
    ran the recorded agent as it was recorded, which it did."""
    last = keeper.resumable()[2]
    fork = fork_one_arm(
        keeper, tmp_path, last, "--override", 'model#2.text="I give up."', "--", *keeper.agent,
    )  # fmt: skip
    said = " ".join(fork.stderr.split())
    assert fork.returncode == 1, fork.stdout + fork.stderr
    assert (
        f"before it reached checkpoint seq {last}: 1 recorded call before it (seq {last - 1}) never asked for, so "
        "it never went live (the override it was given before the checkpoint ended it there. What it printed:"
        in said
    ), fork.stderr
    assert "as it was recorded?" not in said


def test_arms_whose_program_ended_before_their_checkpoint_are_not_measured(
    keeper: Keeper, tmp_path: Path
) -> None:
    """A command that never ran the recorded agent (a wrong path, an import error) asked for none of
    the recorded calls before the checkpoint, so it never went live: sweep measured its outcome all
    the same, showed 100% at every checkpoint, called the run recoverable and exited 0. From the
    first checkpoint (no recorded call before it) it made no call at all: measured, until that was
    not measured either."""
    out = forkpoint_cli(
        keeper, "sweep", keeper.session.id, "--store", str(keeper.store), "--arms", "1", "--jobs", "1",
        "--to", str(keeper.resumable()[1]), "--outcome", "true", "--into", str(tmp_path / "sweep"),
        "--", sys.executable, "-c", "import sys; sys.exit('ImportError: no module named agent')", cwd=tmp_path,
    )  # fmt: skip
    text, said = " ".join(out.stdout.split()), " ".join(out.stderr.split())
    first, second = keeper.resumable()[:2]
    assert out.returncode == 1, out.stdout + out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("@")]
    assert [(r[0], r[3]) for r in rows] == [(f"@{first}", "0/0"), (f"@{second}", "0/0")], out.stdout
    assert "no arm was measured, from any checkpoint: nothing says whether the run was recoverable" in text
    assert "2 arm(s) never went live (not measured)" in text, out.stdout
    assert (
        f"@{second} arm 1: not measured: it ended (exit code 1) before it reached checkpoint seq {second}"
        in said
    ), out.stderr
    # Why it ended is in what it printed: named, the table said only "exit code 1".
    log = tmp_path / "sweep" / f"seq-{second}" / "arm-1.log"
    assert f"as it was recorded? What it printed: {log})" in said, out.stderr
    assert "no module named agent" in log.read_text()
    assert (
        f"@{first} arm 1: not measured: the command made no call from checkpoint seq {first} on (exit code 1), "
        f"so it never went live: does it run the recorded agent? What it printed: {log.parent.with_name(f'seq-{first}') / 'arm-1.log'}"
        in said
    ), out.stderr
    assert "measured arm(s) ended with an exit code other than 0" not in text


@pytest.mark.slow
def test_an_arm_served_its_prefix_that_ended_without_the_checkpoints_call_is_not_measured(
    keeper: Keeper, tmp_path: Path
) -> None:
    """An agent that asked for every recorded call before the checkpoint, then ended without the one
    recorded there (one turn only): nothing was left unasked, so nothing said it never went live,
    and its outcome was counted in the pass rate."""
    short = tmp_path / "short.py"
    short.write_text(Path(keeper.agent[1]).read_text().replace("range(6)", "range(1)"))
    seq = keeper.resumable()[1]
    fork = fork_one_arm(
        keeper, tmp_path, seq, "--outcome", "true", "--", sys.executable, str(short),
    )  # fmt: skip
    said = " ".join(fork.stderr.split())
    assert fork.returncode == 1, fork.stdout + fork.stderr
    assert (
        f"arm 1: the command made no call from checkpoint seq {seq} on, once the 2 recorded calls before it "
        "were served (exit code 4), so it never went live: does it run the recorded agent as it was recorded?"
        in said
    ), fork.stderr
    assert "outcome: no run measured; 1 arm(s) never went live (not measured)" in " ".join(
        fork.stdout.split()
    )


@pytest.mark.slow
def test_an_arm_an_override_ended_at_its_checkpoint_is_measured_and_said(
    keeper: Keeper, tmp_path: Path
) -> None:
    """An override served before the checkpoint that ends the agent there (the tool it ran last
    raised) is the what-if's answer: measured, and said."""
    last = keeper.resumable()[2]
    fork = fork_one_arm(
        keeper, tmp_path, last, "--outcome", "true", "--override",
        'tool:delete_file.error={"type": "PermissionError", "message": "read-only"}', "--", *keeper.agent,
    )  # fmt: skip
    said = " ".join(fork.stderr.split())
    assert "outcome: 1/1 passed" in fork.stdout, fork.stdout + fork.stderr
    assert (
        f"arm 1: it made no call from checkpoint seq {last} on (exit code 1): the override it was given before "
        "the checkpoint ended it there" in said
    ), fork.stderr
    assert "PermissionError: read-only" in (tmp_path / "arms" / "arm-1.log").read_text()


def test_the_page_draws_the_latest_experiments_arms_not_every_arms_pool(
    keeper: Keeper, tmp_path: Path
) -> None:
    """``show --html`` pooled every arm forked from a checkpoint into one pass rate: arms of another
    command or outcome command (another experiment) with these, "15 arms, 8 passed"; and then the
    arms of two forks of the same command (run with other code or another environment between)."""
    before = keeper.resumable()[1]
    experiments = (("true", "stop"), ("false", "stop"), ("false", "fifo"), ("true", "stop"))
    for n, (outcome, policy) in enumerate(experiments):
        fork = forkpoint_cli(
            keeper, "fork", f"{keeper.session.id}@{before}", "--arms", "1", "--into", str(tmp_path / f"arms{n}"),
            "--store", str(keeper.store), "--outcome", outcome, "--on-divergence", policy, "--", *keeper.agent,
            cwd=tmp_path,
        )  # fmt: skip
        assert f"outcome: {1 if outcome == 'true' else 0}/1 passed" in fork.stdout, fork.stdout
        drawn = view_model(keeper.session)["sweep"]
        assert [(p["seq"], p["passed"], p["ran"]) for p in drawn["points"]] == [
            (before, int(outcome == "true"), 1)
        ]
    assert "outcome true); 3 arm(s) of 3 other fork(s) or sweep(s) are left out" in drawn["note"], drawn[
        "note"
    ]


def test_the_page_draws_the_arms_that_ran_and_measured_nothing_and_why(
    keeper: Keeper, tmp_path: Path
) -> None:
    """``show --html`` of the parent drew only the arms with an outcome: an arm that ran and measured
    nothing (here its command never started forkpoint's replay) was left out without a word, and a
    fork none of whose arms measured anything had no section at all. Each arm forked with an outcome
    command is drawn, the ones that measured nothing outside the rate, with why."""
    before = keeper.resumable()[1]
    marker = tmp_path / "first-arm-ran"
    # (arms run one at a time: the first exits before it starts the agent, the second runs it)
    cmd = f"if [ -e {marker} ]; then exec {shlex.join(keeper.agent)}; else touch {marker}; exit 9; fi"
    fork = forkpoint_cli(
        keeper, "fork", f"{keeper.session.id}@{before}", "--arms", "2", "--jobs", "1", "--into",
        str(tmp_path / "arms"), "--store", str(keeper.store), "--outcome", "true", "--", "sh", "-c", cmd,
        cwd=tmp_path,
    )  # fmt: skip
    assert "outcome: 1/1 passed (100%, 95% CI 21%–100%); 1 arm(s) never went live" in fork.stdout, fork.stdout
    (point,) = view_model(keeper.session)["sweep"]["points"]
    assert (point["seq"], point["arms"], point["ran"], point["passed"]) == (before, 2, 1, 1), point
    assert point["not_measured"] == ["its command (exit code 9) never started forkpoint's replay"], point
    # A fork none of whose arms measured anything is drawn too.
    (tmp_path / "none").mkdir()
    fork = fork_one_arm(keeper, tmp_path / "none", before, "--outcome", "true", "--", "true")
    assert "outcome: no run measured" in fork.stdout, fork.stdout
    (point,) = view_model(keeper.session)["sweep"]["points"]
    assert (point["arms"], point["ran"]) == (1, 0), point
    assert point["not_measured"] == ["its command (exit code 0) never started forkpoint's replay"], point


def test_an_outcome_command_that_leaves_a_process_running_is_measured_by_its_exit(tmp_path: Path) -> None:
    """A command that started something in the background holding its output open (a test runner's
    server) was waited for until its timeout, then counted a failure: "timed out after 600 s"."""
    from forkpoint.outcome import Outcome, measure

    left = measure(
        Outcome("sleep 120 & echo measured", timeout=60), cwd=tmp_path, session=None, output=None, exit_code=0
    )
    assert (left["passed"], left["reason"], left["output"]) == (True, None, "measured\n"), left
    late = measure(Outcome("sleep 120", timeout=0.5), cwd=tmp_path, session=None, output=None, exit_code=0)
    assert (late["passed"], late["reason"]) == (False, "timed out after 0.5 s"), late
    # Killed by a signal: 128 + its number, as the shell says it (it was -9)
    killed = measure(Outcome("kill -9 $$", timeout=60), cwd=tmp_path, session=None, output=None, exit_code=0)
    assert (killed["passed"], killed["exit_code"]) == (False, 137), killed


def test_an_arm_that_drifted_under_fifo_and_ended_before_its_checkpoint_is_not_measured(
    keeper: Keeper, tmp_path: Path
) -> None:
    """Under --on-divergence fifo a prefix that diverged is served on (drift): an arm whose program
    then ended before it asked for every recorded call before the checkpoint never went live, like
    one that ended early without diverging; its outcome was measured all the same (a pass)."""
    script = Path(keeper.agent[1]).read_text()
    short = tmp_path / "short.py"  # another first message (a drift), and one turn only
    short.write_text(script.replace("Write the answer.", "Write the answer!").replace("range(6)", "range(1)"))
    seq = keeper.resumable()[2]
    fork = fork_one_arm(
        keeper, tmp_path, seq, "--on-divergence", "fifo", "--outcome", "true", "--",
        sys.executable, str(short),
    )  # fmt: skip
    said = " ".join(fork.stderr.split())
    assert fork.returncode == 1, fork.stdout + fork.stderr
    assert f"(its prefix drifted: fifo) before it reached checkpoint seq {seq}" in said, fork.stderr
    assert "outcome: no run measured; 1 arm(s) never went live (not measured)" in " ".join(
        fork.stdout.split()
    )


def test_sweep_does_not_measure_arms_whose_command_started_no_forkpoint(
    keeper: Keeper, tmp_path: Path
) -> None:
    """A command that is not the agent and starts no forkpoint (``true``, a typo'd script) writes no
    replay report: sweep showed 100% from every checkpoint and called the last one recoverable, from
    arms that never replayed anything. No process of them marked that its replay started: they are
    not measured, and sweep says why. An arm whose replay started and that was killed before it wrote
    its report is measured, and sweep says it wrote none."""
    out = forkpoint_cli(
        keeper, "sweep", keeper.session.id, "--store", str(keeper.store), "--arms", "1", "--jobs", "1",
        "--to", str(keeper.resumable()[1]), "--outcome", "true", "--into", str(tmp_path / "sweep"),
        "--", "true", cwd=tmp_path,
    )  # fmt: skip
    text = " ".join(out.stdout.split())
    assert out.returncode == 1, out.stdout + out.stderr
    assert "no arm was measured, from any checkpoint: nothing says whether the run was recoverable" in text, (
        text
    )
    assert (
        "2 arm(s) never went live (not measured): its command (exit code 0) never started forkpoint's" in text
    )
    assert "wrote no replay report" not in text, text
    killed = forkpoint_cli(
        keeper, "sweep", keeper.session.id, "--store", str(keeper.store), "--arms", "1", "--jobs", "1",
        "--to", str(keeper.resumable()[0]), "--outcome", "true", "--into", str(tmp_path / "killed"),
        "--", "python", "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", cwd=tmp_path,
    )  # fmt: skip
    text = " ".join(killed.stdout.split())
    assert killed.returncode == 1, killed.stdout + killed.stderr
    assert "1 measured arm(s) wrote no replay report, so nothing says they ran the recorded agent" in text, (
        text
    )


def test_a_fork_says_its_arms_replay_a_prefix_that_ran_tools_the_recording_lacks(tmp_path: Path) -> None:
    """The agent's write_file was not marked as a tool (a shell tool of mini-swe-agent not named with
    --tool): the recording said so, but a fork of a later checkpoint said nothing while each arm's
    replayed prefix ran it again for real on the restored workspace, so every arm started from
    another state than the checkpoint's. fork and sweep say it, naming the tool; a fork of a
    checkpoint before the model asked for it does not."""
    with LocalServer() as srv:
        keeper = record_keeper(tmp_path, srv)
        script = Path(keeper.agent[1])
        script.write_text(script.read_text().replace("@forkpoint.tool\ndef write_file", "def write_file"))
        rec = forkpoint_cli(
            keeper, "record", "--store", str(keeper.store), "--name", "untooled", "--", *keeper.agent,
            cwd=keeper.repo,
        )  # fmt: skip
        assert rec.returncode == 0 and "never recorded: write_file" in " ".join(rec.stderr.split()), (
            rec.stderr
        )
        cps = [c["seq"] for c in Session.load(resolve("untooled", str(keeper.store))).by_type("checkpoint")]
        said = []
        for seq in (cps[0], cps[1]):
            fork = forkpoint_cli(
                keeper, "fork", f"untooled@{seq}", "--into", str(tmp_path / f"arms-{seq}"),
                "--store", str(keeper.store), "--", *keeper.agent, cwd=tmp_path,
            )  # fmt: skip
            said.append(" ".join(fork.stderr.split()))
        sweep = forkpoint_cli(
            keeper, "sweep", "untooled", "--arms", "1", "--into", str(tmp_path / "sweep"), "--store",
            str(keeper.store), "--outcome", "true", "--", *keeper.agent, cwd=tmp_path,
        )  # fmt: skip
    assert "WARNING" not in said[0], said[0]
    assert (
        f"WARNING: before checkpoint seq {cps[1]} the model asked for tools the recording has no calls of: "
        "write_file (1 call). The program of each arm replays that part of the run, and if it ran them, it runs "
        "them again for real on the restored checkpoint"
    ) in said[1]
    assert f"The program of each arm of checkpoint seq {cps[1]} and later replays" in " ".join(
        sweep.stderr.split()
    )


def _forked_in_a_repo(
    tmp_path: Path, agent: str, script: list[Any], *, checkpoint: int
) -> tuple[subprocess.CompletedProcess[str], list[int]]:
    """Record ``agent`` (its model answering ``script``) in a new git repository with one file, then
    fork one arm (outcome ``true``) from its checkpoint number ``checkpoint``: the fork's run, and
    the seqs of the recording's checkpoints."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "n.txt").write_text("1\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    for args in (["init", "-q"], ["add", "n.txt"], ["commit", "-qm", "init"]):
        subprocess.run([*git, *args], cwd=repo, check=True)
    (tmp_path / "agent.py").write_text(agent)
    cli, store = [sys.executable, "-m", "forkpoint.cli"], str(tmp_path / "store")
    with LocalServer(chat_script=script) as srv:
        env = cli_env(AGENT_BASE_URL=srv.openai_base_url)
        rec = subprocess.run(
            [*cli, "record", "--store", store, "--name", "run", "--", sys.executable, str(tmp_path / "agent.py")],
            cwd=repo, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert rec.returncode == 0, rec.stderr
        cps = [c["seq"] for c in Session.load(resolve("run", store)).by_type("checkpoint")]
        fork = subprocess.run(
            [*cli, "fork", f"run@{cps[checkpoint]}", "--store", store, "--into", str(tmp_path / "arms"),
             "--outcome", "true", "--", sys.executable, str(tmp_path / "agent.py")],
            cwd=repo, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    return fork, cps


def test_an_arm_that_diverged_after_rerunning_unrecorded_commands_says_so(tmp_path: Path) -> None:
    """A mini-swe-agent-like run whose bash commands are no tool calls, forked right after a command
    that changed a file: each arm's program ran that command again on the restored file, its replayed
    call matched, and the arm went live with another conversation than the checkpoint's
    ("1 2 2", not "1 2") and was measured as the checkpoint's. Its first live request is checked
    against the one recorded at the checkpoint: the arm never goes live, and says why."""
    script = [
        [("bash", {"command": "echo 2 >> n.txt; cat n.txt"})],
        [("bash", {"command": "cat n.txt"})],
        "done",
    ]
    fork, cps = _forked_in_a_repo(tmp_path, SHELL_AGENT, script, checkpoint=1)
    said = " ".join(fork.stderr.split())
    assert fork.returncode == 1, fork.stdout + fork.stderr
    assert (
        f"arm 1: its replayed prefix diverged at the 2nd model call (it is not the request recorded at checkpoint "
        f"seq {cps[1]}: the replayed calls before it matched, but the run reached another state than the "
        "checkpoint's (something it did before the checkpoint and forkpoint did not record ran again)): it never "
        "went live (the model asked for bash before the checkpoint, of which the recording has no calls: the "
        "arm's program ran them again on the restored files; record them as tools (--tool MODULE:QUALNAME=NAME))"
    ) in said, said
    assert "outcome: no run measured; 1 arm(s) never went live" in " ".join(fork.stdout.split()), fork.stdout


STAMPED_AGENT = """
import os
import time

import openai

client = openai.OpenAI(base_url=os.environ["AGENT_BASE_URL"], api_key="sk-test-not-a-real-key", max_retries=0)
messages = []
for turn in range(2):
    messages.append({"role": "user", "content": f"turn {turn}, sent at {time.time()}"})
    answer = client.chat.completions.create(model="demo-model", messages=messages)
    messages.append({"role": "assistant", "content": answer.choices[0].message.content})
"""


#: The shell agent, which asks a status page (a plain HTTP call) when a command printed "2" twice.
CHECKING_SHELL_AGENT = SHELL_AGENT.replace(
    "        out = env.execute(json.loads(call.function.arguments))\n",
    "        out = env.execute(json.loads(call.function.arguments))\n"
    "        if out['output'].count('2') > 1:\n"
    "            import urllib.request\n"
    "            urllib.request.urlopen(os.environ['AGENT_BASE_URL'] + '/status', timeout=5).read()\n",
)


def test_an_arm_whose_rerun_commands_make_another_call_first_is_still_checked(tmp_path: Path) -> None:
    """The arm's re-run command left another state, in which its program made a call the recording
    never made (to another endpoint) before its model call: that first live call went live, and with
    it every later one, unchecked: the arm's model call, another conversation than the checkpoint's,
    went live and the arm was measured as the checkpoint's ("1/1 passed")."""
    script = [
        [("bash", {"command": "echo 2 >> n.txt; cat n.txt"})],
        [("bash", {"command": "cat n.txt"})],
        "done",
    ]
    fork, cps = _forked_in_a_repo(tmp_path, CHECKING_SHELL_AGENT, script, checkpoint=1)
    said = " ".join(fork.stderr.split())
    assert fork.returncode == 1, fork.stdout + fork.stderr
    assert f"it is not the request recorded at checkpoint seq {cps[1]}" in said, said
    assert "outcome: no run measured; 1 arm(s) never went live" in " ".join(fork.stdout.split()), fork.stdout


#: The shell agent, its task stamped with the time: it runs bash commands the recording has no calls of.
STAMPED_SHELL_AGENT = SHELL_AGENT.replace(
    '"Fix calc.py"', "f\"Fix calc.py (at {__import__('time').time()})\""
)


@pytest.mark.parametrize("shell", [False, True])
def test_an_arm_whose_first_request_is_stamped_with_the_time_goes_live(tmp_path: Path, shell: bool) -> None:
    """The check that an arm's first live request is the one recorded at its checkpoint holds for
    recordings that ran what they hold no calls of: a prompt stamped with the time (not recorded
    deterministic) differs at every run, and an arm forked at the first checkpoint, whose prefix
    served nothing, must go live and be measured, as it was. So too when the recording ran bash
    commands it has no calls of, but after that checkpoint: none ran again before it, yet the arm
    never went live ("it is not the request recorded at checkpoint seq …")."""
    if shell:
        script: list[Any] = [[("bash", {"command": "echo 2 >> n.txt"})], "done", "done"]
        fork, _ = _forked_in_a_repo(tmp_path, STAMPED_SHELL_AGENT, script, checkpoint=0)
    else:
        fork, _ = _forked_in_a_repo(tmp_path, STAMPED_AGENT, ["one", "two", "three"], checkpoint=0)
    said = " ".join(fork.stdout.split())
    assert fork.returncode == 0, fork.stdout + fork.stderr
    assert "never went live" not in said + fork.stderr, fork.stdout + fork.stderr
    assert "outcome: 1/1 passed" in said, said


KEYED_AGENT = """
import os
import time

import openai

client = openai.OpenAI(base_url=os.environ["AGENT_BASE_URL"], api_key="sk-proj-%s", max_retries=0)
for turn in range(2):
    try:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"turn {turn}"}])
    except Exception:
        if os.environ.get("AGENT_WAITS"):  # (as an agent that retries for ever does)
            time.sleep(1000)
        raise
""" % ("k" * 40)


@pytest.mark.slow
@pytest.mark.parametrize("waits", [False, True], ids=["ended", "waited-till-its-timeout"])
def test_an_arm_whose_first_call_from_its_checkpoint_was_not_sent_is_not_measured(
    tmp_path: Path, waits: bool
) -> None:
    """An agent with its API key in a file the checkpoint holds (changed or untracked): a checkpoint
    keeps files scrubbed, so the arm's agent sent the key's placeholder, and its first call from the
    checkpoint was not sent (NetworkBlocked). The arm never went live, yet its outcome was measured
    on the checkpoint's files and counted: "outcome: 1/1 passed", and fork said nothing of why. One
    that then waited until --arm-timeout stopped it, with no report written, is not measured either:
    no call of it was sent."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    (repo / "README").write_text("shop\n")
    for args in (["init", "-q"], ["add", "README"], ["commit", "-qm", "init"]):
        subprocess.run([*git, *args], cwd=repo, check=True)
    (repo / "agent.py").write_text(KEYED_AGENT)  # (untracked: kept in the checkpoint, scrubbed)
    cli, store = [sys.executable, "-m", "forkpoint.cli"], str(tmp_path / "store")
    with LocalServer(chat_script=["one", "two"]) as srv:
        env = cli_env(AGENT_BASE_URL=srv.openai_base_url) | {"COLUMNS": "300"}
        rec = subprocess.run(
            [*cli, "record", "--store", store, "--name", "run", "--", sys.executable, "agent.py"],
            cwd=repo, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert rec.returncode == 0, rec.stderr
        second = [c["seq"] for c in Session.load(resolve("run", store)).by_type("checkpoint")][1]
        fork = subprocess.run(
            [*cli, "fork", f"run@{second}", "--store", store, "--into", str(tmp_path / "arms"),
             "--outcome", "true", *(["--arm-timeout", "4"] if waits else []), "--", sys.executable, "agent.py"],
            cwd=repo, env=env | ({"AGENT_WAITS": "1"} if waits else {}), capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert len(srv.requests) == 2  # (the recording's: the arm sent none)
    said, text = " ".join(fork.stderr.split()), " ".join(fork.stdout.split())
    assert fork.returncode == 1, fork.stdout + fork.stderr
    assert "outcome: no run measured; 1 arm(s) never went live (not measured)" in text, text
    if waits:
        assert (
            "arm 1: stopped: the program ran longer than its timeout of 4 s, before it made a call from checkpoint "
            f"seq {second}, so it never went live (not measured)"
        ) in said, said
        return
    assert f"arm 1: its first call from checkpoint seq {second} was not sent" in said, fork.stderr
    printed = " ".join((tmp_path / "arms" / "arm-1.log").read_text().split())
    assert "which the checkpoint's restored files hold in its place" in printed, printed


def unreachable_store_options() -> str:
    """``$FORKPOINT_STORE_OPTIONS`` of the test's S3 endpoint reached through a proxy on loopback where
    nothing listens (one try): the same store (its mirror is named by its endpoint), unreachable."""
    import json
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        gone = f"http://127.0.0.1:{s.getsockname()[1]}"
    endpoint = os.environ["AWS_ENDPOINT_URL_S3"]  # (the s3_endpoint fixture's)
    config = {"retries": {"max_attempts": 1}, "proxies": {"http": gone, "https": gone}}
    return json.dumps({"client_kwargs": {"endpoint_url": endpoint}, "config_kwargs": config})


def test_an_arm_whose_session_cannot_be_uploaded_to_the_store_is_said_and_fails_the_fork(
    s3_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The arms of a fork of a session in S3 are uploaded when each ends (on a Ray worker: from its
    own mirror). An upload that failed (the store unreachable from there, credentials without write
    access) was silent (the arm's session is closed quietly): the fork printed the pass rate and
    each arm's session id and exited 0, while the sessions stayed staged where the arm ran, and
    ``ls``, ``show --html`` and ``check`` reading the arms from the store never saw them."""
    from forkpoint.store import list_sessions

    monkeypatch.setenv("FORKPOINT_CACHE", str(tmp_path / "cache"))
    with LocalServer() as srv:
        keeper = record_keeper(tmp_path, srv, s3_url)  # (its session in this machine's mirror too)
        # The store's endpoint, as the arms end: nothing listens there.
        env = keeper.env | {"FORKPOINT_STORE_OPTIONS": unreachable_store_options(), "COLUMNS": "250"}
        fork = subprocess.run(
            [sys.executable, "-m", "forkpoint.cli", "fork", f"{keeper.session.id}@{keeper.resumable()[1]}",
             "--arms", "2", "--into", str(tmp_path / "arms"), "--store", s3_url, "--outcome", KEEPER_OUTCOME,
             "--", *keeper.agent],
            cwd=keeper.repo, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    out = fork.stdout + fork.stderr
    assert fork.returncode == 1, out
    assert "outcome: 1/2 passed" in fork.stdout, out
    assert fork.stdout.count("(not in the store)") == 2, out
    said = " ".join(fork.stdout.split())
    assert "2 arm session(s) are not in the store, so what reads the arms from it will not count them" in said
    assert f"it stays staged in {keeper.store}" in said and f"forkpoint ls --store {s3_url}" in said
    monkeypatch.setenv("FORKPOINT_CACHE", str(tmp_path / "elsewhere"))  # what another machine sees
    assert [r.session_id for r in list_sessions(s3_url).rows] == [keeper.session.id]


@pytest.mark.slow
def test_fork_arms_match_under_the_configuration_where_fork_runs(
    keeper: Keeper, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """An ignore rule in the forkpoint.toml of the directory `fork` runs in (the one `forkpoint
    replay` there uses) applies to arms whose restored repository has none: the arms are restored
    elsewhere, and the search up from there never found it, so every arm's replayed prefix diverged
    and none went live, while `forkpoint replay` of the same session in the same directory
    reproduced."""
    script = Path(keeper.agent[1])  # (outside the repository: the prompt changes, the checkpoint does not)
    script.write_text(script.read_text().replace('"You keep answer.txt."', '"You keep answer.txt!"'))
    (tmp_path / "forkpoint.toml").write_text(
        '[match]\nignore = [ { path = "$.body.messages[0].content", regex = "answer[.]txt." } ]\n'
    )
    replayed = forkpoint_cli(keeper, "replay", keeper.session.id, "--store", str(keeper.store), cwd=tmp_path)
    assert replayed.returncode == 0, replayed.stderr
    arms = tmp_path_factory.mktemp("elsewhere") / "arms"  # (not under tmp_path and its forkpoint.toml)
    before = keeper.resumable()[1]
    fork = forkpoint_cli(
        keeper, "fork", f"{keeper.session.id}@{before}", "--arms", "1", "--into", str(arms),
        "--store", str(keeper.store), "--outcome", KEEPER_OUTCOME, "--", *keeper.agent,
        cwd=tmp_path,
    )  # fmt: skip
    assert "never went live" not in fork.stdout, fork.stdout + fork.stderr
    assert "outcome: 1/1 passed" in fork.stdout or "outcome: 0/1 passed" in fork.stdout, fork.stdout


def test_a_sweep_with_no_checkpoint_in_range_names_the_session_folder_to_list_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`sweep FOLDER --from SEQ` past every checkpoint said "(forkpoint checkpoints ID lists them)",
    and ID named no session of the store where it ran ("no session 'ID'"): the folder does."""
    import forkpoint
    from forkpoint.errors import UsageError
    from forkpoint.suite import sweep_checkpoints

    monkeypatch.setenv("FORKPOINT_KEYS_DIR", str(tmp_path / "keys"))
    work = tmp_path / "work"
    work.mkdir()
    with forkpoint.record(store=tmp_path / "store", workspace=work) as rec:
        forkpoint.checkpoint()
    copy = tmp_path / "elsewhere" / "run"
    shutil.copytree(rec.session_path, copy)
    with pytest.raises(UsageError) as refused:
        sweep_checkpoints(Session.load(copy), first=10**6)
    assert f"(forkpoint checkpoints {copy} lists them)" in str(refused.value)
