"""``forkpoint check``: choosing sessions, the verdict of each, the table, JUnit XML, the exit code,
the recorded directory mapped to this checkout, and ``--models live`` as an A/B run against a
local stochastic model server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from rich.console import Console

import forkpoint
from forkpoint.demo.server import ModelServer
from forkpoint.errors import UsageError
from forkpoint.executors import LocalExecutor, open_executor
from forkpoint.log import Session, SessionWriter
from forkpoint.orchestrate import map_command
from forkpoint.outcome import NOT_MEASURED, outcome_of
from forkpoint.record import make_header
from forkpoint.store import list_sessions
from forkpoint.suite import check_sessions, parse_since, select, write_junit
from forkpoint.suite.tables import ab_answers_table, ab_table
from tests.cliutil import coding_checkouts
from tests.modelserver import LocalServer
from tests.suite.agents import SHELL_AGENT, cli_env, record_demo_sessions

# ----------------------------------------------------------------------------- choosing sessions


def recorded(store: Path, name: str, **tags: str) -> Path:
    with forkpoint.record(name=name, store=store, tags=tags, argv=["python", "agent.py"]) as rec:
        pass
    return rec.session_path


def test_a_credential_tags_value_is_stored_scrubbed_and_selected_by_the_value_given(tmp_path: Path) -> None:
    """``--tag token=…`` kept the token in the clear in the session's header and the store's index
    (a bare ``token`` key is no credential in JSON data): it is scrubbed as the ``token=…`` text it
    was given as, and ``--tag token=…`` still selects the session."""
    store = tmp_path / "store"
    secret = "Zx8kP2qLm9RtV4wN7sY3"
    path = recorded(store, "s", token=secret, team="x")
    files = [p for p in store.rglob("*") if p.is_file()]
    assert any(p.parent.name == "entries" for p in files)  # (the index holds the tags too)
    assert [p for p in files if secret.encode() in p.read_bytes()] == []
    tags = Session.load(path).header["tags"]
    assert tags["team"] == "x" and tags["token"].startswith("[REDACTED:secret-assignment:")
    assert [s.name for s in select([], store=str(store), tags={"token": secret}).sessions] == ["s"]
    assert [
        s.name for s in select([], store=str(store), tags={"token": "other1234567890abcdef"}).sessions
    ] == []


def test_select_a_store_with_tags_and_since(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = tmp_path / "store"
    a = recorded(store, "a", team="x")
    b = recorded(store, "b", team="y")
    c = recorded(store, "c", team="x")
    child = SessionWriter.create(store, make_header(argv=["python"], parent={"session_id": a.name, "seq": 1}))
    child.append({"type": "end", "exit_code": 0})
    child.close()
    unfinished = SessionWriter.create(store, make_header(argv=["python"], name="running"))
    unfinished.close()

    everything = select([str(store)])
    assert [s.name for s in everything.sessions] == ["a", "b", "c", "running"]
    monkeypatch.setenv("FORKPOINT_STORE", str(store))  # no target: the store
    assert [s.name for s in select([]).sessions] == ["a", "b", "c", "running"]
    monkeypatch.setenv("FORKPOINT_STORE", str(tmp_path / "nothing-yet"))
    assert select([]).sessions == []
    assert everything.notes == ["left out 1 session made by what-if runs or fork arms (name one to check it)"]
    assert everything.sessions[-1].problem and "no end event" in everything.sessions[-1].problem
    assert [s.name for s in select([], store=str(store), tags={"team": "x"}).sessions] == ["a", "c"]
    assert (
        select([], store=str(store), tags={"team": "x"}).notes[-1]
        == "left out 2 sessions that --tag/--since exclude"
    )
    later = datetime.now(UTC) + timedelta(days=1)
    assert select([str(store)], since=later).sessions == []
    assert len(select([str(store)], since=parse_since("2020-01-01")).sessions) == 4
    # Named one by one (a path, a name): taken as they are, a what-if run included.
    named = select([str(child.path), "b"], store=str(store))
    assert [s.session_id for s in named.sessions] == [child.path.name, b.name]
    assert named.sessions[0].ref == {"path": str(child.path.absolute()), "store": None, "id": child.path.name}
    assert c.exists()


def test_select_a_folder_of_cassettes(tmp_path: Path) -> None:
    cassettes = tmp_path / "cassettes"
    for where in (
        "mod_a/test_one",
        "mod_a/test_two",
        "mod_b/test_three.failed",
        "mod_b/.test_x.recording-1a2b3c",
    ):
        (cassettes / where).parent.mkdir(parents=True, exist_ok=True)
        with forkpoint.record(store=tmp_path / "tmp", argv=["pytest"]) as rec:
            pass
        shutil.move(rec.session_path, cassettes / where)
    found = select([str(cassettes)])
    assert sorted(Path(s.location).name for s in found.sessions) == ["test_one", "test_two"]
    assert not (cassettes / "index").exists()  # a folder of cassettes is read, never made a store


def test_parse_since() -> None:
    assert parse_since("2026-11-01") == datetime(2026, 11, 1, tzinfo=UTC)
    assert parse_since("2026-11-01T12:30:00Z") == datetime(2026, 11, 1, 12, 30, tzinfo=UTC)
    with pytest.raises(UsageError, match="--since 'yesterday'"):
        parse_since("yesterday")


def test_map_command_maps_the_recorded_directory_here(tmp_path: Path) -> None:
    here = tmp_path / "checkout"
    argv = ["python", "/srv/app/agent.py", "--out=/srv/app/out/x.json", "/srv/other/f", "/srv/app", "-v"]
    assert map_command(argv, "/srv/app", here) == [
        "python",
        "agent.py",
        "--out=out/x.json",
        "/srv/other/f",
        ".",
        "-v",
    ]
    assert map_command(argv, None, here) == argv
    assert map_command(argv, str(here), here) == argv
    # (as `check` runs it: paths under this checkout, which the replay matches as the recorded ones)
    assert map_command(argv, "/srv/app", here, absolute=True) == [
        "python",
        f"{here}/agent.py",
        f"--out={here}/out/x.json",
        "/srv/other/f",
        str(here),
        "-v",
    ]


# ----------------------------------------------------------------------------- executors


def double(spec: dict[str, Any]) -> dict[str, Any]:
    if spec["n"] == 3:
        raise ValueError("three is bad")
    return {"n": spec["n"] * 2}


def _child_after_the_signal(spec: dict[str, Any]) -> dict[str, Any]:
    import signal

    from forkpoint.executors import local
    from forkpoint.orchestrate import run_child

    os.kill(os.getpid(), signal.SIGTERM)  # (forkpoint is told to stop while this task runs…)
    while local.interrupted() is None:
        time.sleep(0.01)
    # …and its child starts after that: the task was still restoring its checkpoint, say.
    return {"code": run_child(["sleep", "30"], dict(os.environ)).code}


def test_a_task_child_started_after_the_executor_was_signalled_is_signalled_too() -> None:
    """SIGTERM to ``fork`` reached the arms' children already running; a child started a moment
    later (its task was still restoring, or the child ran before its thread could register it)
    ran to its end, and fork waited for it: ``sleep 30`` exited 0 thirty seconds on."""
    import signal

    with LocalExecutor(jobs=1) as ex:
        assert [r for _, r in ex.map(_child_after_the_signal, [{}])] == [{"code": 128 + signal.SIGTERM}]


def _stop_then_mark(spec: dict[str, Any]) -> dict[str, Any]:
    import signal

    from forkpoint.executors import local

    if spec["n"] == 0:  # (forkpoint is told to stop while the first task runs, which then ends)
        os.kill(os.getpid(), signal.SIGTERM)
        while local.interrupted() is None:
            time.sleep(0.01)
    else:
        Path(spec["mark"]).touch()
    return {"n": spec["n"]}


def test_a_task_not_started_when_the_executor_was_signalled_never_starts(tmp_path: Path) -> None:
    """The thread that ended a task took the next one at once, before the executor cancelled it
    (every half second): a fork arm's checkpoint was restored after SIGTERM, its agent started
    and killed, the arm shown as interrupted. Tasks not started never start, as scale.md says."""
    mark = tmp_path / "started"
    with LocalExecutor(jobs=1) as ex:
        done = [r for _, r in ex.map(_stop_then_mark, [{"n": 0}, {"n": 1, "mark": str(mark)}])]
    assert done == [{"n": 0}] and not mark.exists()


def test_local_executor_runs_every_task_and_reports_failures_as_results() -> None:
    with LocalExecutor(jobs=3) as ex:
        assert ex.workers == 3
        results = dict(ex.map(double, [{"n": n} for n in range(6)]))
    assert results == {
        0: {"n": 0},
        1: {"n": 2},
        2: {"n": 4},
        3: {"error": "ValueError: three is bad"},
        4: {"n": 8},
        5: {"n": 10},
    }
    with pytest.raises(UsageError, match="expected one of local, ray"):
        open_executor("dask")
    with pytest.raises(UsageError, match="takes no address"):
        open_executor("local:somewhere")


def _after(spec: dict[str, Any]) -> dict[str, Any]:
    if spec["after"] is not None:  # (the previous task's result was taken: tasks end one by one)
        spec["after"].wait(10)
    return {"n": spec["n"]}


def test_local_executor_looks_at_each_task_once_not_at_every_pending_one_per_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each result waited on the set of every pending task (and filtered it again): a pass over all
    of them per result, quadratic in the tasks of a large check or sweep (8,000 tasks of 2 ms on
    two threads: 22.8 s instead of 8). Counted as the futures asked whether they were cancelled."""
    import concurrent.futures
    import threading

    asked = [0]
    real = concurrent.futures.Future.cancelled

    def cancelled(self: concurrent.futures.Future[Any]) -> bool:
        asked[0] += 1
        return real(self)

    monkeypatch.setattr(concurrent.futures.Future, "cancelled", cancelled)
    n = 200
    taken = [threading.Event() for _ in range(n)]
    specs = [{"n": i, "after": taken[i - 1] if i else None} for i in range(n)]
    got = []
    with LocalExecutor(jobs=1) as ex:
        for i, result in ex.map(_after, specs):
            got.append(result["n"])
            taken[i].set()
    assert got == list(range(n))
    assert asked[0] <= 2 * n, asked[0]


def test_a_session_that_cannot_be_checked_is_an_error_row_and_runs_nothing(tmp_path: Path) -> None:
    writer = SessionWriter.create(tmp_path / "store", make_header(argv=["false"], name="killed"))
    writer.close()
    rows = check_sessions(select([str(tmp_path / "store")]), executor=LocalExecutor(), cwd=tmp_path)
    assert [(r["name"], r["status"]) for r in rows] == [("killed", "error")]
    assert "no end event" in rows[0]["detail"]


def test_check_that_selects_no_session_fails(tmp_path: Path) -> None:
    """``forkpoint check --tag nosuch=1`` said "no session to check" and exited 0: a typo in a CI
    job's filter passed as green."""
    writer = SessionWriter.create(tmp_path / "store", make_header(argv=["true"], name="one"))
    writer.close()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "forkpoint.cli",
            "check",
            "--store",
            str(tmp_path / "store"),
            "--tag",
            "nosuch=1",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert r.returncode == 1 and "no session to check" in r.stderr, r.stderr


# ----------------------------------------------------------------------------- JUnit XML


def test_junit_xml(tmp_path: Path) -> None:
    base = {
        "name": "n",
        "tags": {},
        "location": "/s",
        "call": None,
        "path": None,
        "divergence": None,
        "stderr": "",
    }
    rows = [
        {**base, "session_id": "s1", "status": "reproduced", "detail": "", "seconds": 1.5},
        {
            **base,
            "session_id": "s2",
            "status": "diverged",
            "detail": "no recorded request has the same match key",
            "call": "model call #1 (POST /v1/chat/completions)",
            "path": "$.body.messages[0].content",
            "divergence": "replay diverged at …",
            "stderr": "Traceback \x1b[31m\x00 …",
            "seconds": 0.5,
        },
        {**base, "session_id": "s3", "status": "error", "detail": "cannot read", "seconds": 0.0},
    ]
    out = write_junit(rows, tmp_path / "check.xml", seconds=2.0)
    suite = ET.parse(out).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("time")) == (
        "3",
        "1",
        "1",
        "2.000",
    )
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["s1", "s2", "s3"]
    assert cases[0].find("failure") is None and cases[0].get("time") == "1.500"
    failure = cases[1].find("failure")
    assert failure is not None
    assert (
        failure.get("message")
        == "diverged at model call #1 (POST /v1/chat/completions): $.body.messages[0].content"
    )
    assert failure.text == "/s\nreplay diverged at …"
    assert cases[1].findtext("system-err") == "Traceback \ufffd[31m\ufffd …"
    error = cases[2].find("error")
    assert error is not None and error.get("message") == "error: cannot read"


def test_junit_xml_is_scrubbed(tmp_path: Path) -> None:
    """``check --json`` scrubbed its rows, ``--junit-xml`` wrote them as they were: a secret the
    replayed program printed on stderr (an exception's message with the key it sent) or one in a
    divergence's details reached the XML file."""
    key = "sk-proj-" + "Q7pVbX2mK9wL4nR8tY3uE6iO1aS5dF0gH2jK4lZ7"
    row = {
        "session_id": "s1",
        "name": "n",
        "tags": {},
        "location": "/s",
        "status": "diverged",
        "detail": f"no recorded request has the key {key}",
        "call": None,
        "path": None,
        "divergence": f"replay diverged at {key}",
        "stderr": f"Traceback …\nAuthenticationError: Incorrect API key provided: {key}",
        "seconds": 0.5,
    }
    out = write_junit([row], tmp_path / "check.xml", seconds=1.0)
    text = out.read_text()
    assert key not in text and "[REDACTED:openai-key:" in text, text


# ----------------------------------------------------------------------------- end to end

ASK = """import os
import sys

import openai

PROMPTS = {}
EXIT = {}
client = openai.OpenAI(base_url=os.environ["AGENT_BASE_URL"], api_key="sk-test", max_retries=0)
prompt = PROMPTS.get(sys.argv[1], sys.argv[1])
reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}])
print(reply.choices[0].message.content)
sys.exit(EXIT.get(sys.argv[1], 0))
"""


def forkpoint_cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "forkpoint.cli", *args],
        cwd=cwd, env=env | {"COLUMNS": "250"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.mark.slow
def test_check_a_library_recorded_elsewhere_against_this_checkout(tmp_path: Path) -> None:
    prod = tmp_path / "prod"
    prod.mkdir()
    (prod / "ask.py").write_text(ASK)
    store = tmp_path / "store"
    with LocalServer() as srv:
        env = cli_env(AGENT_BASE_URL=srv.openai_base_url)
        for prompt, team in (("same", "a"), ("changed", "a"), ("exits", "a"), ("other team", "b")):
            rec = forkpoint_cli(
                "record", "--store", str(store), "--name", prompt, "--tag", f"team={team}", "--no-workspace",
                "--", "python", str(prod / "ask.py"), prompt, cwd=prod, env=env,
            )  # fmt: skip
            assert rec.returncode == 0, rec.stderr
    killed = SessionWriter.create(
        store, make_header(argv=["python", "ask.py", "x"], name="killed", tags={"team": "a"})
    )
    killed.close()
    # Today's checkout: the prompt of one session changed, another now exits 1.
    here = tmp_path / "checkout"
    here.mkdir()
    (here / "ask.py").write_text(
        ASK.replace("PROMPTS = {}", "PROMPTS = {'changed': 'a new prompt'}").replace(
            "EXIT = {}", "EXIT = {'exits': 1}"
        )
    )
    junit = tmp_path / "out" / "check.xml"
    junit.parent.mkdir()
    out = forkpoint_cli(
        "check", str(store), "--tag", "team=a", "--junit-xml", str(junit), "--json", str(tmp_path / "out" / "c.json"),
        cwd=here, env=env,
    )  # fmt: skip
    assert out.returncode == 3, out.stdout + out.stderr
    data = orjson.loads((tmp_path / "out" / "c.json").read_bytes())
    verdicts = {r["name"]: (r["status"], r["call"], r["path"], r["detail"]) for r in data["rows"]}
    assert verdicts == {
        "same": ("reproduced", None, None, ""),
        "changed": (
            "diverged",
            "model call #1 (POST /v1/chat/completions)",
            "$.body.messages[0].content",
            "no recorded request has the same match key",
        ),
        "exits": ("ended differently", None, None, "exit code 1, recorded 0"),
        "killed": (
            "error",
            None,
            None,
            "the session has no end event: it is still being recorded, or its recorder was killed",
        ),
    }
    table = out.stdout
    assert "diverged at model call #1 (POST /v1/chat/completions): $.body.messages[0].content" in table
    assert "ended differently: exit code 1, recorded 0" in table
    assert (
        "4 sessions checked in" in table and "1 diverged, 1 ended differently, 1 error, 1 reproduced" in table
    )
    assert "other team" not in table and "left out 1 session that --tag/--since exclude" in out.stderr
    assert "~ $.body.messages[0].content: changed → a new prompt" in out.stderr  # the divergence in full
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures"), suite.get("errors")) == (
        "4",
        "2",
        "1",
    )

    # The same library passes against the checkout it was recorded in.
    ok = forkpoint_cli("check", "--store", str(store), "--tag", "team=b", cwd=prod, env=env)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "1 session checked" in ok.stdout and ": 1 reproduced" in ok.stdout


def test_a_check_from_a_folder_where_the_command_names_nothing_says_so(tmp_path: Path) -> None:
    """A command recorded with a relative path (``python agent/ask.py``, as ``pytest proj/tests``
    from a parent folder) checked from another folder finds no such file: the row said only "ended
    differently: exit code 2, recorded 0", as if the agent had ended otherwise. It says where the
    session was recorded and where it ran."""
    prod = tmp_path / "prod"
    (prod / "agent").mkdir(parents=True)
    (prod / "agent" / "ask.py").write_text(ASK)
    store = tmp_path / "store"
    with LocalServer() as srv:
        env = cli_env(AGENT_BASE_URL=srv.openai_base_url)
        rec = forkpoint_cli(
            "record", "--store", str(store), "--no-workspace", "--", "python", "agent/ask.py", "hello",
            cwd=prod, env=env,
        )  # fmt: skip
        assert rec.returncode == 0, rec.stderr
    out = forkpoint_cli(
        "check", "--store", str(store), "--json", str(tmp_path / "c.json"), cwd=prod / "agent", env=env
    )
    assert out.returncode == 3, out.stdout + out.stderr
    (row,) = orjson.loads((tmp_path / "c.json").read_bytes())["rows"]
    assert row["status"] == "ended differently", row
    assert row["detail"] == (
        f"exit code 2, recorded 0; ended before asking for 1 recorded call; the session was recorded in {prod}, this replay ran "
        f"in {prod / 'agent'}: its command ran here as it ran there, a relative path in it naming what is here"
    ), row["detail"]


@pytest.mark.slow
def test_check_in_another_checkout_matches_its_paths_as_the_recorded_ones(tmp_path: Path) -> None:
    """A coding agent names its directory and the file it was given (an absolute path) in its
    prompt: ``check`` from any other checkout diverged at once (the recorded directory was mapped in
    the command line, never in what was matched). Both are matched as the recorded ones now."""
    prod, here = tmp_path / "prod", tmp_path / "ci" / "checkout"
    coding_checkouts(*(prod, here))
    store = tmp_path / "store"
    with LocalServer() as srv:
        env = cli_env(AGENT_BASE_URL=srv.openai_base_url)
        rec = forkpoint_cli(
            "record", "--store", str(store), "--no-workspace", "--", "python", "coder.py", str(prod / "bug.py"),
            cwd=prod, env=env,
        )  # fmt: skip
        assert rec.returncode == 0, rec.stderr
    out = forkpoint_cli("check", "--store", str(store), cwd=here, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert ": 1 reproduced" in out.stdout, out.stdout


DSPY_AGENT = """
import os

import dspy


def add(a: int, b: int) -> int:
    \"\"\"Add two integers.\"\"\"
    return a + b


lm = dspy.LM("openai/m", api_base=os.environ["MODEL_URL"], api_key="sk-test", num_retries=0, engine="litellm")
with dspy.context(lm=lm):
    print(dspy.ReAct("question -> answer", tools=[add], max_iters=3)(question="What is 2 + 3?").answer)
"""


@pytest.mark.slow
def test_an_ab_run_that_dspy_s_cache_answered_says_so(tmp_path: Path) -> None:
    """``check --models live`` of a DSPy agent with its cache on (by default, on disk): the cache
    answered every request the recording made, so no model was asked, and the row said only that
    behaviour "changed at seq 1 ↔ —" (the new run has no model call). Now it says the cache answered."""
    pytest.importorskip("dspy")
    from tests.integrations.test_tool_frameworks import dspy_route

    (tmp_path / "agent.py").write_text(DSPY_AGENT)
    store = tmp_path / "store"
    with LocalServer() as srv:
        srv.route("/v1/chat/completions", dspy_route, method="POST")
        env = cli_env(
            MODEL_URL=srv.openai_base_url,
            DSPY_CACHEDIR=str(tmp_path / "dspy"),
            LITELLM_LOCAL_MODEL_COST_MAP="True",
        )
        rec = forkpoint_cli(
            "record", "--store", str(store), "--", "python", "agent.py", cwd=tmp_path, env=env
        )
        assert rec.returncode == 0, rec.stderr
        assert len(srv.requests) == 3
        ab = forkpoint_cli(
            "check",
            str(store),
            "--models",
            "live",
            "--json",
            str(tmp_path / "ab.json"),
            cwd=tmp_path,
            env=env,
        )
        assert len(srv.requests) == 3  # no model was asked
    (row,) = orjson.loads((tmp_path / "ab.json").read_bytes())["rows"]
    said = "DSPy answered 3 requests from its own cache: not asked of the model"
    assert row["detail"].startswith(said), row
    assert "DSPy answered 3 requests from its own cache" in ab.stdout, ab.stdout


def test_ab_run_under_fifo_says_the_tool_calls_it_served_for_other_arguments(tmp_path: Path) -> None:
    """The new model asked for write_file with another file name; fifo served the recorded result
    anyway. The row read "changed at …" and its outcome "pass", and nothing in the table said that
    the new run was handed tool results of requests it did not make (its --json divergence did)."""
    store = tmp_path / "store"
    env = cli_env()
    with ModelServer(turns=2) as srv:
        record_demo_sessions(store, 1, srv.openai_base_url, tmp_path / "work")
        ab = forkpoint_cli(
            "check", str(store), "--models", "live", "--on-divergence", "fifo",
            "--json", str(tmp_path / "ab.json"), cwd=tmp_path, env=env,
        )  # fmt: skip
    assert ab.returncode == 0, ab.stdout + ab.stderr
    (row,) = orjson.loads((tmp_path / "ab.json").read_bytes())["rows"]
    assert row["status"] == "changed", row
    said = "fifo served the recorded answers to 1 request that differed (--on-divergence fifo)"
    assert said in row["detail"], row
    assert said in " ".join(ab.stdout.split()), ab.stdout


@pytest.mark.slow
def test_ab_run_against_each_sessions_recorded_tool_world(tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = cli_env()
    with ModelServer(turns=2) as srv:
        record_demo_sessions(store, 3, srv.openai_base_url, tmp_path / "work")
        outcome = 'grep -q "^final:" "$FORKPOINT_OUTCOME_OUTPUT"'
        ab = forkpoint_cli(
            "check", str(store), "--models", "live", "--on-divergence", "fifo", "--outcome", outcome,
            "--json", str(tmp_path / "ab.json"), "--junit-xml", str(tmp_path / "ab.xml"), cwd=tmp_path, env=env,
        )  # fmt: skip
        stopped = forkpoint_cli(
            "check",
            str(store),
            "--models",
            "live",
            "--outcome",
            outcome,
            "--json",
            str(tmp_path / "stop.json"),
            cwd=tmp_path,
            env=env,
        )
    assert ab.returncode == 0, ab.stdout + ab.stderr
    data = orjson.loads((tmp_path / "ab.json").read_bytes())
    for r in data["rows"]:
        # The stochastic model wrote another scratch file than the recorded one: behaviour changed at
        # its first answer.
        assert r["status"] == "changed", r
        assert r["ab"]["first_change"]["where"] == "seq 1 ↔ seq 1 (model POST /v1/chat/completions)"
        assert r["ab"]["first_change"]["path"].startswith("$.response.tool_calls[0].arguments")
        for arm in ("recorded", "new"):
            a = r["ab"][arm]
            assert a["tokens_in"] > 0 and a["tokens_out"] > 0 and a["model_ms"] > 0
            assert a["outcome"]["passed"] is True and a["outcome"]["command"] == outcome
        child = Session.load(Path(r["ab"]["child"]))
        assert (
            child.header["replay"]["models"] == "live" and child.header["replay"]["on_divergence"] == "fifo"
        )
        assert [e["type"] for e in child.events][-2:] == ["outcome", "end"]
        assert all(e.get("source") == "live" for e in child.by_type("model_call"))
    summary = data["summary"]
    assert summary["sessions"] == summary["compared"] == 3 and summary["changed"] == 3
    assert summary["recorded"]["outcome"] == {"passed": 3, "ran": 3, "rate": 1.0, "low": 0.4385, "high": 1.0}
    assert summary["new"]["outcome"]["passed"] == 3
    assert summary["new"]["tokens_in"] > 0 and summary["recorded"]["tokens_in"] > 0
    assert "recorded  3/3 passed (100%, 95% CI 44%–100%)" in ab.stdout
    assert "changed at seq 1 ↔ seq 1" in ab.stdout
    # The table says whether each final answer changed, and shows those that did (the JSON has them).
    lines = [" ".join(line.split()) for line in ab.stdout.splitlines()]
    for r in data["rows"]:
        old, new = r["ab"]["recorded"]["final_answer"], r["ab"]["new"]["final_answer"]
        assert "reproduce the bug in calc.py" in old and "reproduce the bug in calc.py" in new, r
        said = [line for line in lines if line.startswith(f"{r['session_id']} {r['name']} ")]
        assert ("differs" if old != new else "same") in said[0].split(" (model POST ")[1], ab.stdout
        assert len(said) == (2 if old != new else 1), ab.stdout
    assert 'tests="3" failures="0" errors="0"' in (tmp_path / "ab.xml").read_text()
    # With the tool policy stop, the new arm stops at the first tool call whose arguments changed.
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    rows = orjson.loads((tmp_path / "stop.json").read_bytes())["rows"]
    assert {r["status"] for r in rows} == {"stopped"}
    assert {r["call"] for r in rows} == {"tool call #1 (write_file)"}
    assert all(r["path"].startswith("$.args.") for r in rows)
    # A run cut short at its first tool call is no outcome of the new code, nor a whole run to weigh
    # (its tokens) against the recorded one: it was counted in the new pass rate and the totals.
    for r in rows:
        assert r["ab"]["new"]["outcome"]["passed"] is None
        assert "forkpoint stopped the run" in r["ab"]["new"]["outcome"]["reason"]
    summary = orjson.loads((tmp_path / "stop.json").read_bytes())["summary"]
    assert summary["compared"] == 0 and summary["stopped"] == 3
    assert summary["new"]["outcome"]["ran"] == 0 and summary["new"]["tokens_in"] == 0


def ab_row(recorded: str | None, new: str | None, *, ran: bool = True) -> dict[str, Any]:
    arm = {"tokens_in": 1, "tokens_out": 1, "model_ms": 1.0, "outcome": None}
    return {
        "session_id": "s1", "name": "n", "status": "changed", "seconds": 1.0,
        "ab": {"recorded": {**arm, "final_answer": recorded}, "new": {**arm, "final_answer": new} if ran else None,
               "first_change": {"where": "seq 1 ↔ seq 1 (model POST /v1/chat/completions)", "path": "$.response.text"}},
    }  # fmt: skip


def shown(table: Any) -> list[str]:
    console = Console(record=True, width=200, highlight=False)
    console.print(table)
    return [" ".join(line.split()) for line in console.export_text().splitlines()]


def test_the_ab_table_says_whether_the_final_answers_differ_and_shows_them() -> None:
    """``check --models live`` printed where behaviour first changed, the outcome, tokens and time,
    but not the final answers, which its --json rows carry: whether a new model's answer changed
    could not be seen in the terminal."""
    prefix = "The bug was in calc.py's add, which subtracted; I fixed it and the whole suite now passes: "
    rows = [
        ab_row("4", "5"),
        ab_row("same answer", "same answer"),
        ab_row("a  b", "a b"),
        ab_row("recorded", None, ran=False),
        ab_row(prefix + "12 tests.", prefix + "13 tests, and a new one."),
        ab_row("an answer", None),
    ]
    table = shown(ab_table(rows))
    assert table[0].split()[:6] == ["session", "name", "first", "change", "final", "answer"]
    assert [line.split(" $.response.text ")[1].split(" — → —")[0] for line in table[1:]] == [
        "differs", "same", "differs (in whitespace only)", "—", "differs", "differs",
    ]  # fmt: skip
    answers = shown(ab_answers_table(rows))
    assert answers[:3] == ["final answers that differ", "session name recorded new", "s1 n 4 5"]
    assert answers[3] == "s1 n a b a b"
    # Long answers that part late are cut to where they part, each to 60 characters.
    cut = len(prefix) + 1 - 20  # (20 characters before the first that differs: 2 against 3)
    assert answers[4] == f"s1 n …{prefix[cut:]}12 tests. …{prefix[cut:]}13 tests, and a new one."
    assert answers[5] == "s1 n an answer —"
    assert len(answers) == 6
    assert ab_answers_table([ab_row("x", "x"), ab_row("y", None, ran=False)]) is None


TOOL_AGENT = """import json, os

import openai

import forkpoint


@forkpoint.tool
def lookup() -> str:
    return "sunny"


@forkpoint.tool
def clock() -> str:
    return "noon"


client = openai.OpenAI(base_url=os.environ["AGENT_BASE_URL"], api_key="sk-test", max_retries=0)
tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("lookup", "clock")]
messages = [{"role": "user", "content": "weather?"}]
while True:
    m = client.chat.completions.create(model="m", messages=messages, tools=tools).choices[0].message
    messages.append(m.model_dump(exclude_none=True))
    if not m.tool_calls:
        print("final:", m.content)
        break
    for c in m.tool_calls:
        out = {"lookup": lookup, "clock": clock}[c.function.name]()
        messages.append({"role": "tool", "tool_call_id": c.id, "content": out})
"""


@pytest.mark.slow
def test_ab_run_fifo_stopped_at_a_tool_it_has_no_call_of_is_not_measured(tmp_path: Path) -> None:
    """With --on-divergence fifo, the new model asked for a tool the recording never called: the
    run stopped there, as stop stops one, and its outcome counted as a failure of the new code
    ("pass → fail", in the pass rate). It is cut short: not measured, as under stop. Its session
    says so as the row does: it kept the outcome the row said was not measured (fifo), or a note
    that its "replayed prefix diverged" (stop), though a check's run has no prefix: it is live from
    its first call."""
    (tmp_path / "agent.py").write_text(TOOL_AGENT)
    store = tmp_path / "store"
    with LocalServer(chat_script=[[("lookup", {})], "sunny"]) as srv:
        env = cli_env(AGENT_BASE_URL=srv.openai_base_url)
        rec = forkpoint_cli(
            "record",
            "--store",
            str(store),
            "--no-workspace",
            "--",
            "python",
            "agent.py",
            cwd=tmp_path,
            env=env,
        )
        assert rec.returncode == 0, rec.stderr
    for policy, at in (
        ("fifo", "at a tool call with no recorded call of that tool left to serve"),
        ("stop", "where it diverged"),
    ):
        with LocalServer(chat_script=[[("clock", {})], "noon"]) as srv:
            env = cli_env(AGENT_BASE_URL=srv.openai_base_url)
            ab = forkpoint_cli(
                "check", str(store), "--models", "live", "--on-divergence", policy,
                "--outcome", 'grep -q "^final:" "$FORKPOINT_OUTCOME_OUTPUT"',
                "--json", str(tmp_path / "ab.json"), cwd=tmp_path, env=env,
            )  # fmt: skip
        assert ab.returncode == 0, ab.stdout + ab.stderr
        data = orjson.loads((tmp_path / "ab.json").read_bytes())
        (row,) = data["rows"]
        assert row["status"] == "stopped" and row["call"] == "tool call #1 (clock)", row
        new = row["ab"]["new"]["outcome"]
        assert new["passed"] is None
        assert new["reason"] == f"not measured: forkpoint stopped the run {at}"
        assert data["summary"]["stopped"] == 1 and data["summary"]["new"]["outcome"]["ran"] == 0
        child = Session.load(Path(row["ab"]["child"]))
        assert outcome_of(child) is None, child.by_type("outcome")
        notes = [
            n["data"][NOT_MEASURED] for n in child.by_type("note") if NOT_MEASURED in (n.get("data") or {})
        ]
        assert notes == [f"forkpoint stopped the run {at}"], notes


@pytest.mark.slow
def test_ab_run_does_not_judge_a_recorded_run_it_cannot_replay(tmp_path: Path) -> None:
    """The recorded arm's outcome is measured on a replay of the session with today's code. With a
    changed prompt that replay diverges at the first call, and the recorded run, which exited 0, was
    judged a failure: the new prompt seemed to fix a failure that never happened. It is unknown."""
    (tmp_path / "ask.py").write_text(ASK)
    store = tmp_path / "store"
    with LocalServer() as srv:
        env = cli_env(AGENT_BASE_URL=srv.openai_base_url)
        for prompt in ("kept", "reworded"):
            rec = forkpoint_cli(
                "record", "--store", str(store), "--name", prompt, "--no-workspace",
                "--", "python", "ask.py", prompt, cwd=tmp_path, env=env,
            )  # fmt: skip
            assert rec.returncode == 0, rec.stderr
        (tmp_path / "ask.py").write_text(ASK.replace("PROMPTS = {}", "PROMPTS = {'reworded': 'Be brief.'}"))
        ab = forkpoint_cli(
            "check", str(store), "--trust", "--models", "live", "--outcome", 'test "$FORKPOINT_OUTCOME_EXIT" = 0',
            "--json", str(tmp_path / "ab.json"), cwd=tmp_path, env=env,
        )  # fmt: skip
    assert ab.returncode == 0, ab.stdout + ab.stderr
    data = orjson.loads((tmp_path / "ab.json").read_bytes())
    recorded = {r["name"]: r["ab"]["recorded"]["outcome"] for r in data["rows"]}
    assert recorded["kept"]["passed"] is True
    assert recorded["reworded"]["passed"] is None
    assert "does not replay with this code (diverged at model call #1" in recorded["reworded"]["reason"]
    assert {r["name"]: r["ab"]["new"]["outcome"]["passed"] for r in data["rows"]} == {
        "kept": True,
        "reworded": True,
    }
    assert data["summary"]["recorded"]["outcome"]["ran"] == 1  # the unknown one is left out
    assert "unknown (not measured" in ab.stdout


@pytest.mark.slow
def test_check_a_remote_store(s3_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sessions of an S3 store (moto on loopback) are found by id and URL, downloaded by the task
    that replays them, and what an A/B run writes is uploaded to the same store."""
    monkeypatch.setenv("FORKPOINT_CACHE", str(tmp_path / "cache"))
    env = cli_env(FORKPOINT_CACHE=str(tmp_path / "worker-cache"))  # the tasks' own mirror, empty
    with ModelServer(turns=1) as srv:
        ids = record_demo_sessions(s3_url, 2, srv.openai_base_url, tmp_path / "work")
        plain = forkpoint_cli("check", s3_url, "--json", str(tmp_path / "plain.json"), cwd=tmp_path, env=env)
        ab = forkpoint_cli(
            "check", s3_url, "--models", "live", "--on-divergence", "live", cwd=tmp_path, env=env
        )
    assert plain.returncode == 0, plain.stdout + plain.stderr
    rows = orjson.loads((tmp_path / "plain.json").read_bytes())["rows"]
    assert [(r["session_id"], r["status"]) for r in rows] == [(i, "reproduced") for i in ids]
    assert all(r["location"].startswith(s3_url) for r in rows)
    assert ab.returncode == 0, ab.stdout + ab.stderr
    listed = list_sessions(s3_url).rows
    children = [r for r in listed if r.header.get("parent")]
    assert sorted(r.header["parent"]["session_id"] for r in children) == sorted(ids)


def test_an_ab_run_whose_session_cannot_be_uploaded_to_the_store_is_said_and_fails_the_check(
    s3_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``--models live`` run of a session of an S3 store is recorded as a what-if session and
    uploaded when it ends (on a Ray worker: from its mirror). An upload that failed was silent: the
    A/B table and its summary were shown and check exited 0, while the new run's session stayed
    staged where it ran, missing from the store."""
    from tests.suite.test_fork_outcomes import unreachable_store_options

    monkeypatch.setenv("FORKPOINT_CACHE", str(tmp_path / "cache"))
    env = cli_env(
        FORKPOINT_CACHE=str(tmp_path / "cache"), FORKPOINT_STORE_OPTIONS=unreachable_store_options()
    )
    with ModelServer(turns=1) as srv:
        (sid,) = record_demo_sessions(s3_url, 1, srv.openai_base_url, tmp_path / "work")
        ab = forkpoint_cli(
            "check",
            sid,
            "--store",
            s3_url,
            "--models",
            "live",
            "--on-divergence",
            "live",
            cwd=tmp_path,
            env=env,
        )
    assert ab.returncode == 3, ab.stdout + ab.stderr
    said = " ".join(ab.stdout.split())
    assert f"1 what-if session(s) of --models live are not in the store ({sid}: " in said, ab.stdout
    assert "it stays staged in" in said
    monkeypatch.setenv("FORKPOINT_CACHE", str(tmp_path / "elsewhere"))  # what another machine sees
    assert [r.session_id for r in list_sessions(s3_url).rows] == [sid]


def _signal_seen(spec: dict[str, Any]) -> dict[str, Any]:
    from forkpoint.executors.local import interrupted

    sig = interrupted()
    return {"sig": sig.name if sig else None}


def test_a_signal_passed_on_in_one_map_says_nothing_of_the_next_ones_tasks() -> None:
    """A process that runs several forks (the Python API) and was told to stop once during an
    earlier one: every later task thought it was interrupted, and measured nothing."""
    import signal

    from forkpoint.executors import local

    local._interrupted.append(signal.SIGTERM)  # (what an earlier map passed on)
    with LocalExecutor(jobs=1) as ex:
        assert [r for _, r in ex.map(_signal_seen, [{}])] == [{"sig": None}]


def test_check_says_a_reproduced_run_is_not_certain_as_replay_does(tmp_path: Path) -> None:
    """A tool that changed its argument in place when recorded: `forkpoint replay` says "ok, but not
    certain" and why, while `forkpoint check` said "reproduced" and nothing else (so did it for
    identical calls answered differently served to racing callers, as a pydantic-ai agent's tools
    are, and for secrets served as their placeholders)."""
    (tmp_path / "agent.py").write_text(
        "import forkpoint\n\n@forkpoint.tool\ndef add_note(notes: list, text: str) -> int:\n"
        "    notes.append(text)\n    return len(notes)\n\nprint(add_note([], 'a'))\n"
    )
    store = tmp_path / "store"
    env = cli_env()
    rec = forkpoint_cli(
        "record", "--store", str(store), "--no-workspace", "--", "python", "agent.py", cwd=tmp_path, env=env
    )  # fmt: skip
    assert rec.returncode == 0, rec.stderr
    out = forkpoint_cli("check", str(store), "--json", str(tmp_path / "c.json"), cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    (row,) = orjson.loads((tmp_path / "c.json").read_bytes())["rows"]
    assert row["status"] == "reproduced", row
    assert row["detail"].startswith(
        "not certain: when recorded, tool 'add_note' changed its argument 'notes' in place"
    ), row
    assert "reproduced: not certain:" in " ".join(out.stdout.split()), out.stdout


@pytest.mark.slow
def test_check_says_what_of_a_reproduced_run_ran_for_real(tmp_path: Path) -> None:
    """A mini-swe-agent-like run whose bash commands are no recorded tool calls (one of them a Python
    program): `forkpoint replay` says "ok, but incomplete" and names them, while `forkpoint check`
    said "reproduced" and nothing else, though the commands ran for real in the checkout."""
    (tmp_path / "agent.py").write_text(SHELL_AGENT)
    (tmp_path / "calc.py").write_text("print(2 - 3)\n")
    script = [
        [("bash", {"command": "cat calc.py"})],
        [("bash", {"command": "python3 calc.py"})],
        "done",
    ]
    store = tmp_path / "store"
    with LocalServer(chat_script=script) as srv:
        env = cli_env(AGENT_BASE_URL=srv.openai_base_url)
        rec = forkpoint_cli(
            "record", "--store", str(store), "--no-workspace", "--", "python", "agent.py", cwd=tmp_path, env=env
        )  # fmt: skip
        assert rec.returncode == 0, rec.stderr
        # (the recording says how to record such a tool: under the name the model asks for)
        assert "minisweagent.environments.local:LocalEnvironment.execute=bash" in rec.stderr, rec.stderr
    out = forkpoint_cli("check", str(store), "--json", str(tmp_path / "c.json"), cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    (row,) = orjson.loads((tmp_path / "c.json").read_bytes())["rows"]
    assert row["status"] == "reproduced", row
    assert row["detail"] == (
        "incomplete: 1 Python program it started, not recorded, ran again: /bin/sh -c python3 calc.py; "
        "tools the recording has no calls of ran for real if the program ran them: bash (2 calls)"
    ), row
    assert "reproduced: incomplete: 1 Python program" in " ".join(out.stdout.split()), out.stdout


@pytest.mark.slow
def test_an_outcome_measured_after_served_tool_calls_says_so(tmp_path: Path) -> None:
    """A recorded tool (mini-swe-agent's execute as ``bash``) wrote the file the outcome command
    checks; the replay served its result without running it, so the recorded run "failed" in the
    checkout, and nothing said the outcome was measured where the run's tools never ran."""
    (tmp_path / "agent.py").write_text(SHELL_AGENT)
    script = [[("bash", {"command": "echo fixed > out.txt"})], "done"]
    store = tmp_path / "store"
    with LocalServer(chat_script=script) as srv:
        env = cli_env(AGENT_BASE_URL=srv.openai_base_url)
        rec = forkpoint_cli(
            "record", "--store", str(store), "--no-workspace", "--tool", "__main__:LocalEnvironment.execute=bash",
            "--", "python", "agent.py", cwd=tmp_path, env=env,
        )  # fmt: skip
        assert rec.returncode == 0 and (tmp_path / "out.txt").exists(), rec.stderr
    (tmp_path / "out.txt").unlink()
    out = forkpoint_cli(
        "check", str(store), "--outcome", "test -f out.txt", "--json", str(tmp_path / "c.json"), cwd=tmp_path, env=env
    )  # fmt: skip
    (row,) = orjson.loads((tmp_path / "c.json").read_bytes())["rows"]
    assert row["status"] == "reproduced" and not (tmp_path / "out.txt").exists(), out.stdout + out.stderr
    assert (row["outcome"]["passed"], row["outcome"]["served_tools"]) == (False, 1), row
    assert "(measured where 1 served tool call(s) did not run)" in " ".join(out.stdout.split()), out.stdout
