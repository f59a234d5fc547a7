"""The Ray executor, on a Ray cluster these tests start on this machine (``ray start --head`` on
127.0.0.1, two CPUs, token authentication and usage statistics off): a 10-session ``check`` gives
the same table as the local executor, and a 4-arm ``fork`` runs its arms as Ray tasks, their
sessions and outcomes in the shared store."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from forkpoint.demo.server import ModelServer
from forkpoint.html import view_model
from forkpoint.log import Session
from forkpoint.outcome import outcome_of
from forkpoint.store import session_dirs
from tests.modelserver import LocalServer
from tests.suite.agents import KEEPER_OUTCOME, ONE_CALL, Keeper, cli_env, record_demo_sessions, record_keeper

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install -e '.[test]' installs it)")

pytestmark = pytest.mark.slow

#: Ray on loopback only, no token, no usage statistics: for the cluster and every client of it.
RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "disabled",
    "RAY_USAGE_STATS_ENABLED": "0",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def keeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Keeper]:
    with LocalServer() as srv:
        yield record_keeper(tmp_path_factory.mktemp("keeper"), srv)


@pytest.fixture(scope="module")
def cluster(keeper: Keeper, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``HOST:PORT`` of a Ray head started here; its workers get the keeper's environment (its model
    server's URL, this interpreter's ``python``), as a real cluster's workers get the agent's."""
    port = free_port()
    log = tmp_path_factory.mktemp("ray") / "ray.log"
    # Its own short temp dir (Ray's sockets live there): no trace in /tmp/ray of this cluster, whose
    # address a later plain ray.init() of anyone on this machine would otherwise try.
    temp = Path(tempfile.mkdtemp(prefix="fpray-", dir="/tmp"))
    env = keeper.env | RAY_ENV
    env.pop("RAY_ADDRESS", None)
    ray_bin = str(Path(sys.executable).parent / "ray")
    with open(log, "wb") as out:
        head = subprocess.Popen(
            [ray_bin, "start", "--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=2",
             "--include-dashboard=false", "--disable-usage-stats", f"--temp-dir={temp}", "--block"],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while b"will now block" not in log.read_bytes():
            assert head.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield address
    finally:
        head.send_signal(signal.SIGTERM)  # `ray start --block` stops what it started
        try:
            head.wait(30)
        except subprocess.TimeoutExpired:
            head.kill()
        shutil.rmtree(temp, ignore_errors=True)


def forkpoint_cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "forkpoint.cli", *args],
        cwd=cwd, env=env | RAY_ENV | {"COLUMNS": "220"}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def without_times(text: str) -> list[str]:
    """The table's lines without the time column (and the summary line's total)."""
    return [
        re.sub(r"\d+\.\d\d s\s*$", "", line).rstrip()
        for line in text.splitlines()
        if "checked in" not in line
    ]


def rows_without_times(path: Path) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "seconds"} for r in orjson.loads(path.read_bytes())["rows"]]


def test_check_of_ten_sessions_on_ray_gives_the_local_table(cluster: str, tmp_path: Path) -> None:
    store = tmp_path / "store"
    with ModelServer(turns=2) as srv:
        ids = record_demo_sessions(store, 10, srv.openai_base_url, tmp_path / "work")
    env = cli_env()
    local = forkpoint_cli("check", str(store), "--json", str(tmp_path / "local.json"), cwd=tmp_path, env=env)
    on_ray = forkpoint_cli(
        "check", str(store), "--executor", f"ray:{cluster}", "--json", str(tmp_path / "ray.json"),
        "--junit-xml", str(tmp_path / "ray.xml"), cwd=tmp_path, env=env,
    )  # fmt: skip
    assert local.returncode == 0, local.stdout + local.stderr
    assert on_ray.returncode == 0, on_ray.stdout + on_ray.stderr
    assert (
        "10 sessions checked" in on_ray.stdout
        and "on ray:" in on_ray.stdout
        and ": 10 reproduced" in on_ray.stdout
    )
    assert without_times(on_ray.stdout) == without_times(local.stdout)
    assert rows_without_times(tmp_path / "ray.json") == rows_without_times(tmp_path / "local.json")
    assert [r["session_id"] for r in rows_without_times(tmp_path / "ray.json")] == ids
    assert 'tests="10" failures="0" errors="0"' in (tmp_path / "ray.xml").read_text()


def test_fork_of_four_arms_on_ray(cluster: str, keeper: Keeper, tmp_path: Path) -> None:
    before = keeper.resumable()[1]  # before the keep-or-delete turn
    decisions = keeper.model.decisions
    fork = forkpoint_cli(
        "fork", f"{keeper.session.id}@{before}", "--arms", "4", "--into", str(tmp_path / "arms"),
        "--store", str(keeper.store), "--outcome", KEEPER_OUTCOME, "--executor", f"ray:{cluster}",
        "--", *keeper.agent, cwd=tmp_path, env=keeper.env,
    )  # fmt: skip
    assert fork.returncode == 0, fork.stdout + fork.stderr
    assert f"forkpoint: 4 arms on ray:{cluster} (2 at a time)" in fork.stderr
    assert keeper.model.decisions == decisions + 4  # each arm asked the model once
    assert "outcome: 2/4 passed (50%, 95% CI 15%–85%)" in fork.stdout
    arms = [Session.load(d) for d in session_dirs(keeper.store) if d.name != keeper.session.id]
    mine = [a for a in arms if a.header["parent"] == {"session_id": keeper.session.id, "seq": before}]
    assert len(mine) >= 4
    found = [outcome_of(a) for a in mine[-4:]]
    assert sorted(bool(o and o["passed"]) for o in found) == [False, False, True, True]


#: An arm's command that kills the Ray worker running its task (the first ``ray::`` process among
#: its ancestors), as the kernel's OOM killer or a lost node would.
KILL_WORKER = """
import os, signal
pid = os.getppid()
while pid > 1:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        if f.read().startswith(b"ray::"):
            os.kill(pid, signal.SIGKILL)
            break
    with open(f"/proc/{pid}/stat") as f:
        pid = int(f.read().rsplit(")", 1)[1].split()[1])
"""


def test_an_arm_whose_ray_worker_dies_is_reported_as_that_not_retried(
    cluster: str, keeper: Keeper, tmp_path: Path
) -> None:
    """Ray retries a task whose worker died (three times by default): the retry restored into the
    arm's folder the first attempt had filled, and the arm was reported as "restore failed: … not
    empty", hiding the crash. An arm is not idempotent (it writes a session): it runs once, and a
    crash is said as one, in words (Ray's own said only "died unexpectedly"), and kept as a session
    saying so: the parent's page drew nothing of it."""
    before = keeper.resumable()[1]
    fork = forkpoint_cli(
        "fork", f"{keeper.session.id}@{before}", "--arms", "1", "--into", str(tmp_path / "arms"),
        "--store", str(keeper.store), "--executor", f"ray:{cluster}", "--outcome", KEEPER_OUTCOME,
        "--", sys.executable, "-c", KILL_WORKER, cwd=tmp_path, env=keeper.env,
    )  # fmt: skip
    out = fork.stdout + fork.stderr
    assert fork.returncode != 0, out
    # (forkpoint's own words on the arm, not the raylet's log)
    said = next(line for line in fork.stderr.splitlines() if line.startswith("arm 1: "))
    said = said.removeprefix("arm 1: ")
    lost = "lost: the worker process running it died, killed by a signal or with its node"
    assert said.startswith(lost) and "the Ray task failed: WorkerCrashedError" in said, out
    assert "not empty" not in out and "retries remaining" not in out, out
    assert re.search(r"arm-1 +task failed +unknown", fork.stdout), out
    assert "outcome: no run measured; 1 arm(s) lost (the task running it failed)" in fork.stdout, out
    # (the worker had made the arm's session, which it never ended: the one that says why is new)
    kept = [a for a in session_dirs(keeper.store) if a.name in fork.stdout and a.name != keeper.session.id]
    assert len(kept) == 1, out
    drawn = view_model(keeper.session)["sweep"]["points"]
    assert [(p["seq"], p["ran"], [w[: len(lost)] for w in p["not_measured"]]) for p in drawn] == [
        (before, 0, [lost])
    ], drawn


def test_an_arm_whose_ray_worker_dies_given_no_outcome_command_is_kept_naming_what_its_worker_left(
    cluster: str, keeper: Keeper, tmp_path: Path
) -> None:
    """Without --outcome, a lost arm kept no session: the one its worker had made (unended) sat in the
    store under the arm's name, and neither the fork's words nor any session said it was what the
    lost arm left. The lost arm is kept as with --outcome, naming it."""
    before = keeper.resumable()[1]
    fork = forkpoint_cli(
        "fork", f"{keeper.session.id}@{before}", "--arms", "1", "--into", str(tmp_path / "arms"),
        "--store", str(keeper.store), "--executor", f"ray:{cluster}", "--", sys.executable, "-c", KILL_WORKER,
        cwd=tmp_path, env=keeper.env,
    )  # fmt: skip
    out = fork.stdout + fork.stderr
    assert fork.returncode != 0, out
    said = " ".join(fork.stderr.split())
    # (this fork's: the keeper's store holds the arms of the other tests of this module too)
    mine = [
        s for s in map(Session.load, session_dirs(keeper.store)) if str(tmp_path) in str(s.header.get("cwd"))
    ]
    (left,) = [s for s in mine if not s.header["name"].endswith("(lost)")]
    (lost,) = [s for s in mine if s.header["name"].endswith("(lost)")]
    assert (
        left.end() is None and f"the arm's session its task had written, {left.id}, has no end event" in said
    ), out
    assert lost.id in fork.stdout, out  # (the table's row names the session that says what happened)
    (note,) = lost.by_type("note")
    assert note["text"].startswith("lost: the worker process running it died") and left.id in note["text"], (
        note
    )


def test_an_arm_stopped_at_its_timeout_on_ray_leaves_nothing_it_started_running(
    cluster: str, keeper: Keeper, tmp_path: Path
) -> None:
    """On the local executor an arm's agent leads a process group, and stopping it at
    ``--arm-timeout`` stops everything it started before the outcome is measured; on a Ray worker
    only the agent itself was sent SIGTERM, so what it started (a tool's server, a test run) went on
    in the arm's folder while the outcome was measured there (and until the fork ended). (From the
    first checkpoint, before any recorded call, its first call is live: a program stopped before it
    went live is not measured: tests/suite/test_fork_outcomes.py.)"""
    before = keeper.resumable()[0]
    pid_file = shlex.quote(str(tmp_path / "started.pid"))
    agent = f"python -c {shlex.quote(ONE_CALL)}; sleep 120 & echo $! > {pid_file}; wait"
    # Passes when what the agent started is gone (or a zombie) by the time the outcome is measured.
    gone = f's=$(cut -d\' \' -f3 /proc/$(cat {pid_file})/stat 2>/dev/null); [ -z "$s" ] || [ "$s" = Z ]'
    fork = forkpoint_cli(
        "fork", f"{keeper.session.id}@{before}", "--arms", "1", "--into", str(tmp_path / "arms"),
        "--store", str(keeper.store), "--executor", f"ray:{cluster}", "--arm-timeout", "8",
        "--outcome", gone, "--", "sh", "-c", agent, cwd=tmp_path, env=keeper.env,
    )  # fmt: skip
    out = fork.stdout + fork.stderr
    assert "ran longer than its timeout of 8 s" in out, out
    assert "outcome: 1/1 passed" in fork.stdout, out


def _running(pid: int) -> bool:
    """True while process ``pid`` runs (not gone, not a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def still_running_after(pid: int, seconds: float) -> bool:
    """True when process ``pid`` still runs ``seconds`` from now (it is then killed: a test that
    fails leaves nothing behind)."""
    deadline = time.monotonic() + seconds
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _running(pid)
    if left:
        os.kill(pid, signal.SIGKILL)
    return left


def test_an_arm_whose_ray_worker_dies_leaves_nothing_its_agent_started_running(
    cluster: str, keeper: Keeper, tmp_path: Path
) -> None:
    """The arm's agent leads a process group of its own on the worker: when the worker died under it
    (killed as the OOM killer would), the fork reported the arm lost and ended, while its agent and
    what the agent started went on, orphaned, calling the live model and writing into the arm's folder
    and session after the arm was said lost. They are stopped with the worker."""
    before = keeper.resumable()[1]
    pid_file = tmp_path / "started.pid"
    agent = f"sleep 60 & echo $! > {shlex.quote(str(pid_file))}; {shlex.quote(sys.executable)} -c {shlex.quote(KILL_WORKER)}; wait"
    fork = forkpoint_cli(
        "fork", f"{keeper.session.id}@{before}", "--arms", "1", "--into", str(tmp_path / "arms"),
        "--store", str(keeper.store), "--executor", f"ray:{cluster}", "--", "sh", "-c", agent,
        cwd=tmp_path, env=keeper.env,
    )  # fmt: skip
    out = fork.stdout + fork.stderr
    assert re.search(r"arm-1 +task failed +unknown", fork.stdout), out
    started = int(pid_file.read_text())
    assert not still_running_after(started, 5), (
        "what the lost arm's agent started still runs after the fork ended"
    )


def test_a_fork_killed_while_its_arm_runs_on_ray_leaves_nothing_its_agent_started_running(
    cluster: str, keeper: Keeper, tmp_path: Path
) -> None:
    """``forkpoint fork`` killed (kill -9: the OOM killer, a lost CI runner) while an arm runs: Ray
    ends the job's workers and kills their own children, the arm's agent and its guard alike, but not
    what the agent started, which ran on, orphaned, in the arm's folder. The guard is no child of
    the worker, so it outlives it and stops the agent's process group."""
    before = keeper.resumable()[1]
    pid_file = tmp_path / "started.pid"
    agent = f"sleep 60 & echo $! > {shlex.quote(str(pid_file))}; wait"
    fork = subprocess.Popen(
        [sys.executable, "-m", "forkpoint.cli", "fork", f"{keeper.session.id}@{before}", "--arms", "1",
         "--into", str(tmp_path / "arms"), "--store", str(keeper.store), "--executor", f"ray:{cluster}",
         "--", "sh", "-c", agent],
        cwd=tmp_path, env=keeper.env | RAY_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not pid_file.exists() or not pid_file.read_text().strip():
        assert fork.poll() is None and time.monotonic() < deadline, "the arm's agent never started"
        time.sleep(0.2)
    started = int(pid_file.read_text())
    fork.kill()
    fork.wait()
    assert not still_running_after(started, 20), (
        "what the arm's agent started still runs after its fork was killed"
    )


def test_a_ray_address_where_nothing_listens_is_said_at_once(tmp_path: Path) -> None:
    """``--executor ray:HOST:PORT`` with a typo in the port (nothing listens there): Ray's client
    retried connecting for minutes on end, printing its own warnings, and forkpoint said nothing of
    its own (a reviewer's check was still waiting after 3 minutes). It is a usage error at once,
    naming the address."""
    store = tmp_path / "store"
    with ModelServer(turns=1) as srv:
        record_demo_sessions(store, 1, srv.openai_base_url, tmp_path / "work")
    address = f"127.0.0.1:{free_port()}"
    try:
        check = subprocess.run(
            [sys.executable, "-m", "forkpoint.cli", "check", str(store), "--executor", f"ray:{address}"],
            cwd=tmp_path, env=cli_env() | RAY_ENV, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"forkpoint check --executor ray:{address} was still waiting after 60 s")
    assert check.returncode == 2, check.stdout + check.stderr
    assert f"cannot connect to the Ray cluster at {address}" in check.stderr, check.stderr
