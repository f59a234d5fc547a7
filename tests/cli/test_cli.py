"""The ``forkpoint`` command line, end to end: a real openai-SDK agent recorded against a local server
in a subprocess, then replayed with the server stopped and no API key."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

import forkpoint
from forkpoint._boot import BOOTSTRAP_DIR
from forkpoint.cli import main
from forkpoint.log import LOG_NAME, Session, SessionWriter, line_hash
from forkpoint.store import list_sessions
from tests.cliutil import QUOTE_AGENT
from tests.modelserver import LocalServer

SECRET = "sk-proj-CLItestKEY" + "x7Yq" * 10
FORKPOINT = [str(Path(sys.executable).with_name("forkpoint"))]
if not Path(FORKPOINT[0]).exists():  # pragma: no cover - forkpoint not installed as a script
    FORKPOINT = [sys.executable, "-m", "forkpoint.cli"]

AGENT = """
import os
import sys

import openai

from agenttools import lookup

prompt, code = sys.argv[1], int(sys.argv[2])
client = openai.OpenAI(base_url=os.environ["AGENT_BASE_URL"], max_retries=int(os.environ.get("AGENT_RETRIES", "2")))
messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": prompt}]
first = client.chat.completions.create(model="gpt-4o-mini", messages=messages, temperature=0)
text = first.choices[0].message.content
print("model:", first.id, text)
found = lookup(text, limit=2)
print("tool:", found)
messages += [{"role": "assistant", "content": text}, {"role": "user", "content": f"the tool said {found}"}]
stream = client.chat.completions.create(model="gpt-4o-mini", messages=messages, stream=True)
parts = [c.choices[0].delta.content or "" for c in stream if c.choices]
print("stream:", len(parts), "".join(parts))
sys.exit(code)
"""

TOOLS = """
import os

SIDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "side_effect.txt")


def lookup(text, limit=5):
    with open(SIDE, "a") as f:
        f.write(text + "\\n")
    return {"length": len(text), "head": text[:limit].upper()}
"""


@dataclass
class Recorded:
    workdir: Path
    store: Path
    base_env: dict[str, str]
    alpha: Path  # prompt "hello there", exit 0, recorded with --store
    beta: Path  # same prompt, exit 7, recorded through FORKPOINT_STORE
    alpha_run: subprocess.CompletedProcess[str]
    beta_run: subprocess.CompletedProcess[str]


def run(
    args: list[str], cwd: Path, env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def record_here(tmp_path: Path, *script: str) -> tuple[subprocess.CompletedProcess[str], str, dict[str, str]]:
    """``forkpoint record --store STORE --no-workspace -- python SCRIPT…`` in ``tmp_path``, without the
    environment's ``FORKPOINT_`` variables: (what it did, STORE, that environment, for the replay)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    store = str(tmp_path / "store")
    cmd = [*FORKPOINT, "record", "--store", store, "--no-workspace", "--", sys.executable, *script]
    return run(cmd, tmp_path, env), store, env


def flat(text: str) -> str:
    """``text`` with all whitespace runs as single spaces (rich wraps lines on a pipe)."""
    return " ".join(text.split())


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory, make_server: Any) -> Recorded:
    workdir = tmp_path_factory.mktemp("agent")
    (workdir / "agent_script.py").write_text(textwrap.dedent(AGENT))
    (workdir / "agenttools.py").write_text(textwrap.dedent(TOOLS))
    store = workdir / "store"
    server = make_server()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("FORKPOINT_", "OPENAI_"))}
    base_env["AGENT_BASE_URL"] = server.url + "/v1"
    rec_env = {**base_env, "OPENAI_API_KEY": SECRET}
    script = [sys.executable, "agent_script.py"]

    alpha_run = run(
        [
            *FORKPOINT,
            "record",
            "--store",
            str(store),
            "--name",
            "alpha",
            "--tag",
            "agent_version=3",
            "--tag",
            "prompt_version=p1",
            "--tool",
            "agenttools:lookup",
            "--",
            *script,
            "hello there",
            "0",
        ],
        workdir,
        rec_env,
    )
    assert alpha_run.returncode == 0, alpha_run.stderr
    beta_run = run(
        [
            *FORKPOINT,
            "record",
            "--name",
            "beta",
            "--tool",
            "agenttools:lookup",
            "--",
            *script,
            "hello there",
            "7",
        ],
        workdir,
        {**rec_env, "FORKPOINT_STORE": str(store)},
    )
    server.stop()  # from here on nothing can answer a real request
    # Ids start with the second they were made in: two recordings within one second are ordered by
    # their header's creation time (milliseconds), as `forkpoint ls` orders them.
    sessions = [row.path for row in list_sessions(store).rows]
    assert len(sessions) == 2
    return Recorded(workdir, store, base_env, sessions[0], sessions[1], alpha_run, beta_run)


def cli(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "250", **(env or {})}, catch_exceptions=False)


# ----------------------------------------------------------------------------- record


def test_record_exit_code_is_the_scripts(recorded: Recorded) -> None:
    assert recorded.alpha_run.returncode == 0
    assert recorded.beta_run.returncode == 7, recorded.beta_run.stderr
    for r in (recorded.alpha_run, recorded.beta_run):
        lines = r.stdout.splitlines()
        assert lines[0].startswith("model: chatcmpl-") and "reply 2 to: hello there" in lines[0]
        assert lines[1] == "tool: {'length': 23, 'head': 'RE'}"  # lookup("reply 2 to: hello there", limit=2)
        assert lines[2].startswith("stream: ") and "reply 4 to: the tool said" in lines[2]
        assert "forkpoint: recorded session" in r.stderr and "2 model calls, 1 tool call)" in r.stderr
    assert (recorded.workdir / "side_effect.txt").read_text().count("\n") == 2


def test_recorded_session_contents(recorded: Recorded) -> None:
    s = Session.load(recorded.alpha)
    h = s.header
    assert h["name"] == "alpha"
    assert h["tags"] == {"agent_version": "3", "prompt_version": "p1"}
    assert h["tools"] == ["agenttools:lookup"]
    assert h["argv"][-3:] == ["agent_script.py", "hello there", "0"]
    assert h["cwd"] == str(recorded.workdir.resolve())
    assert [e["type"] for e in s.events] == ["model_call", "tool_call", "model_call", "end"]
    tool = s.events[1]
    assert tool["tool"] == "lookup" and tool["args"] == {"text": tool["args"]["text"], "limit": 2}
    assert tool["result"] == {"length": 23, "head": "RE"}
    stream = s.events[2]["response"]
    assert stream["body_kind"] == "stream" and len(stream["chunks"]) >= 5
    assert s.events[0]["summary"]["model"] == "gpt-4o-mini"
    assert s.end()["exit_code"] == 0
    assert Session.load(recorded.beta).end()["exit_code"] == 7
    assert Session.load(recorded.beta).header["name"] == "beta"  # recorded into $FORKPOINT_STORE


def test_api_key_never_reaches_disk(recorded: Recorded) -> None:
    for session in (recorded.alpha, recorded.beta):
        for p in session.rglob("*"):
            if p.is_file():
                data = p.read_bytes()
                assert SECRET.encode() not in data and b"CLItestKEY" not in data, p


# ----------------------------------------------------------------------------- replay


@pytest.mark.slow
def test_replay_serves_everything_offline_and_exits_with_the_scripts_code(recorded: Recorded) -> None:
    side = recorded.workdir / "side_effect.txt"
    before = side.read_text()
    env = dict(recorded.base_env)  # no OPENAI_API_KEY, and the server is stopped
    assert "OPENAI_API_KEY" not in env
    report_file = recorded.workdir / "report.json"
    r = run(
        [
            *FORKPOINT,
            "replay",
            recorded.beta.name,
            "--store",
            str(recorded.store),
            "--report",
            str(report_file),
        ],
        recorded.workdir,
        env,
    )
    assert r.returncode == 7, r.stderr
    assert r.stdout == recorded.beta_run.stdout  # same ids, same texts, same stream
    assert side.read_text() == before  # the tool body did not run
    assert "replay ok: 3/3 events matched" in flat(r.stderr)
    report = json.loads(report_file.read_text())
    assert (report["matched"], report["recorded"], report["unused"], report["divergence"]) == (3, 3, [], None)

    r0 = run([*FORKPOINT, "replay", str(recorded.alpha)], recorded.workdir, env)
    assert r0.returncode == 0, r0.stderr
    assert r0.stdout == recorded.alpha_run.stdout
    assert "was recorded in" not in r0.stderr
    # From elsewhere the recorded command (python agent_script.py) cannot find its script. It is not
    # run in the recorded directory behind the user's back (that may be another checkout), but a
    # note says where the session was recorded.
    elsewhere = run([*FORKPOINT, "replay", str(recorded.alpha)], recorded.workdir.parent, env)
    assert elsewhere.returncode != 0
    note = flat(elsewhere.stderr)
    assert (
        f"the session was recorded in {recorded.workdir}, this replay ran in {recorded.workdir.parent}"
        in note
    )


@pytest.mark.slow
def test_replay_leaves_loading_the_session_to_the_replaying_process(
    recorded: Recorded, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``forkpoint replay`` verifies the session (reading it once) and the replaying process loads
    it: the command line does not load and decode every event a third time."""
    # A copy in a store of its own: the what-if run below adds a session beside the one it replays,
    # and the module's store must keep its two sessions for the tests after this one.
    alpha = tmp_path / "store" / recorded.alpha.name
    shutil.copytree(recorded.alpha, alpha)
    loaded: list[Path] = []
    load = Session.load.__func__  # type: ignore[attr-defined]

    def counted(cls: type[Session], path: Path | str, **kw: Any) -> Session:
        loaded.append(Path(path))
        return load(cls, path, **kw)  # type: ignore[no-any-return]

    monkeypatch.setattr(Session, "load", classmethod(counted))
    monkeypatch.chdir(recorded.workdir)
    r = cli("replay", str(alpha), env=recorded.base_env)
    assert r.exit_code == 0, r.output
    assert "replay ok" in r.output
    assert loaded == []
    r = cli("replay", str(alpha), "--override", "tool:lookup.result=1", env=recorded.base_env)
    assert loaded[:1] == [alpha]  # overrides are checked against the recorded calls here


@pytest.mark.slow
@pytest.mark.parametrize("how", [["agent_script.py"], ["-m", "agent_script"]], ids=["script", "module"])
def test_replay_divergence_exits_3_with_the_paragraph(recorded: Recorded, how: list[str]) -> None:
    env = {**recorded.base_env, "AGENT_RETRIES": "0"}
    r = run(
        [
            *FORKPOINT,
            "replay",
            recorded.alpha.name,
            "--store",
            str(recorded.store),
            "--",
            sys.executable,
            *how,
            "something else entirely",
            "0",
        ],
        recorded.workdir,
        env,
    )
    assert r.returncode == 3, (r.stdout, r.stderr)
    err = flat(r.stderr)
    # The agent's own line is named as the call site (not runpy's frames, not the SDK's).
    line = 1 + AGENT.splitlines().index(next(x for x in AGENT.splitlines() if x.startswith("first =")))
    # (relative to the current directory, the same whether run as a script or a module)
    site = f"the call made at agent_script.py:{line} (<module>) diverged"
    assert site in err
    assert "replay DIVERGED: 0/3 events matched" in err
    assert "replay diverged at the 1st model call of this run (POST /v1/chat/completions)" in err
    assert "Expected next: recorded event seq 1" in err
    assert "$.body.messages[1].content" in err
    assert "hello there → something else entirely" in err


# ----------------------------------------------------------------------------- show, ls, verify


def test_show_prints_turns_and_tool_calls(recorded: Recorded) -> None:
    r = cli("show", recorded.alpha.name, "--store", str(recorded.store))
    assert r.exit_code == 0, r.output
    out = r.output
    assert f"session {recorded.alpha.name}" in out and "alpha" in out
    assert "agent_version=3" in out
    assert "turn  1" in out and "turn  2" in out and "turn  3" not in out
    assert "gpt-4o-mini" in out
    assert "lookup(text=" in out and "limit=2" in out
    assert "reply 2 to: hello there" in out  # the model's answer
    assert "exit code 0" in out


def test_show_json_has_every_event(recorded: Recorded) -> None:
    r = cli("show", str(recorded.alpha), "--json")
    assert r.exit_code == 0
    data = json.loads(r.stdout)
    loaded = Session.load(recorded.alpha)
    assert data["header"]["session_id"] == recorded.alpha.name
    assert [e["seq"] for e in data["events"]] == [e["seq"] for e in loaded.events] == [1, 2, 3, 4]
    assert [e["type"] for e in data["events"]] == ["model_call", "tool_call", "model_call", "end"]
    assert data["events"][0]["request"]["body"] == loaded.events[0]["request"]["body"]
    assert data["truncated"] is False


@pytest.mark.parametrize("stamped", [False, True], ids=["plain", "time-stamped"])
def test_show_json_keeps_resent_conversations_as_deltas(tmp_path: Path, stamped: bool) -> None:
    """An agent resends its whole conversation at every turn; ``show --json`` keeps each request's
    messages as the ``$delta`` the log stores (the new messages only), so its output grows linearly
    with the turns, and every request can be rebuilt from it exactly as ``Session.load`` gives it.
    A system prompt stamped with the time at every call is the one message a delta replaces."""
    import datetime

    import httpx2

    import forkpoint

    def answer(request: httpx2.Request) -> httpx2.Response:
        n = len(json.loads(request.content)["messages"])
        return httpx2.Response(
            200, json={"id": f"c{n}", "choices": [{"message": {"role": "assistant", "content": f"a{n}"}}]}
        )

    with forkpoint.record(store=tmp_path) as rec:
        messages: list[Any] = [{"role": "user", "content": "go " + "x" * 2000}]  # a blob
        with httpx2.Client(transport=httpx2.MockTransport(answer)) as c:
            for i in range(6):
                now = datetime.datetime.now(datetime.UTC).isoformat()
                sent = (
                    [{"role": "system", "content": f"The time is {now}."}, *messages] if stamped else messages
                )
                reply = c.post(
                    "http://127.0.0.1:9/v1/chat/completions", json={"model": "m", "messages": sent}
                )
                messages += [
                    reply.json()["choices"][0]["message"],
                    {"role": "user", "content": f"result {i}"},
                ]
    r = cli("show", str(rec.session_path), "--json")
    assert r.exit_code == 0, r.output
    shown = {e["seq"]: e for e in json.loads(r.stdout)["events"]}
    loaded = Session.load(rec.session_path).by_type("model_call")
    assert len(loaded) == 6
    rebuilt: dict[int, list[Any]] = {}
    for i, event in enumerate(loaded):
        stored = shown[event["seq"]]["request"]["body"]["messages"]
        if i == 0 or (stamped and i == 1):
            # The first request, whole; stamped, the second too: it would keep one message of two.
            assert stored == event["request"]["body"]["messages"]
            rebuilt[event["seq"]] = stored
            continue
        delta = stored["$delta"]
        assert len(delta["add"]) == 2  # the reply and the next result: nothing resent
        items = rebuilt[delta["base"]][: delta["keep"]]
        assert [i for i, _ in delta.get("set", [])] == ([0] if stamped else [])  # the new time only
        for at, item in delta.get("set", []):
            items[at] = item
        rebuilt[event["seq"]] = items + delta["add"]
        assert rebuilt[event["seq"]] == event["request"]["body"]["messages"]


def test_show_json_never_reads_data_as_an_encoding(tmp_path: Path) -> None:
    """``show --json`` writes bytes as ``{"$b64": …}`` and resent lists as ``{"$delta": …}``: data
    that itself has such a key (a tool returning ``{"$b64": …}``, a message with a ``$delta`` field)
    read the same as those (bytes ``b"hi"`` and the dict ``{"$b64": "aGk="}`` were one output)."""
    messages: list[Any] = [{"role": "user", "content": "go " + "x" * 2000}]
    looks_encoded = [{"$b64": "aGk="}, {"$delta": {"base": 1, "keep": 0}}, {"$lit": 1}]
    w = SessionWriter.create(tmp_path, {"argv": ["x"], "tags": {"$b64": "aGk="}}, fsync="never")
    w.append({"type": "tool_call", "tool": "t", "args": {}, "result": [b"hi", *looks_encoded]})
    for i in range(3):
        messages = [*messages, {"role": "tool", "content": f"r{i}", "meta": looks_encoded[i]}]
        request = {"method": "POST", "url": "http://127.0.0.1:9/v1/chat/completions", "headers": []}
        body = {"model": "m", "messages": messages}
        w.append({"type": "model_call", "request": {**request, "body_kind": "json", "body": body}})
    w.close()
    r = cli("show", str(w.path), "--json")
    assert r.exit_code == 0, r.output
    shown = json.loads(r.stdout)
    assert shown["header"]["tags"] == {"$lit": {"$b64": "aGk="}}  # a tag, not bytes
    events = shown["events"]
    assert events[0]["result"] == [{"$b64": "aGk="}, *({"$lit": v} for v in looks_encoded)]
    first, *later = (e["request"]["body"]["messages"] for e in events[1:])
    assert first[-1]["meta"] == {"$lit": looks_encoded[0]}
    for n, shown in enumerate(later, start=1):  # each a real delta, its new item's data escaped
        assert shown["$delta"]["keep"] == n + 1 and shown["$delta"]["add"][0]["meta"] == {
            "$lit": looks_encoded[n]
        }


def test_ls_lists_sessions_and_honours_forkpoint_store(recorded: Recorded) -> None:
    r = cli("ls", env={"FORKPOINT_STORE": str(recorded.store)})
    assert r.exit_code == 0
    rows = [
        line for line in r.stdout.splitlines() if recorded.alpha.name in line or recorded.beta.name in line
    ]
    assert len(rows) == 2
    # columns: session, name, created, model calls, tool calls, exit code, command
    alpha, beta = rows[0].split(), rows[1].split()
    assert alpha[0] == recorded.alpha.name and alpha[1] == "alpha" and alpha[3:6] == ["2", "1", "0"]
    assert beta[0] == recorded.beta.name and beta[1] == "beta" and beta[3:6] == ["2", "1", "7"]
    # the command is the last column, whole and quoted as a shell would need it
    assert rows[0].endswith("agent_script.py 'hello there' 0")
    empty = cli("ls", "--store", str(recorded.workdir / "nowhere"))
    assert f"no sessions in {recorded.workdir / 'nowhere'} (no such directory)" in empty.output
    (recorded.workdir / "empty").mkdir()
    empty = cli("ls", "--store", str(recorded.workdir / "empty"))
    assert f"no sessions in {recorded.workdir / 'empty'}\n" in empty.output


def test_session_resolution(recorded: Recorded, tmp_path: Path) -> None:
    store = str(recorded.store)

    def shown(ref: str, **kw: Any) -> str:
        r = cli("show", ref, "--json", *kw.get("args", ["--store", store]), env=kw.get("env"))
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)["header"]["session_id"]

    alpha, beta = recorded.alpha.name, recorded.beta.name
    assert shown(alpha) == alpha  # full id
    assert shown(str(recorded.beta)) == beta  # path
    assert shown("last") == beta  # newest
    assert shown("last", args=[], env={"FORKPOINT_STORE": store}) == beta
    unique = next(alpha[:n] for n in range(len(alpha)) if not beta.startswith(alpha[:n]))
    assert shown(unique) == alpha  # unique prefix

    other = tmp_path / "store2"
    for sid in ("20260101-000000-aaa111", "20260101-000000-aaa222", "20260102-000000-bbb333"):
        SessionWriter.create(other, {"argv": ["x"]}, session_id=sid, fsync="never").close()
    r = CliRunner().invoke(main, ["show", "20260101-000000-aaa", "--store", str(other)])
    assert r.exit_code == 1
    assert "ambiguous" in r.output and "aaa111" in r.output and "aaa222" in r.output
    r = CliRunner().invoke(main, ["show", "2099", "--store", str(other)])
    assert r.exit_code == 1 and "no session '2099'" in r.output
    assert shown("20260102", args=["--store", str(other)]) == "20260102-000000-bbb333"
    # By name: the names given with --name; a name recorded twice means its newest session.
    assert shown("alpha") == alpha and shown("beta") == beta
    for sid in ("20260103-000000-ccc444", "20260104-000000-ddd555"):
        SessionWriter.create(other, {"argv": ["x"], "name": "nightly"}, session_id=sid, fsync="never").close()
    assert shown("nightly", args=["--store", str(other)]) == "20260104-000000-ddd555"
    SessionWriter.create(
        other, {"argv": ["x"], "name": "2026"}, session_id="20260105-000000-eee666", fsync="never"
    ).close()
    assert shown("2026", args=["--store", str(other)]) == "20260105-000000-eee666"  # not "ambiguous"
    r = CliRunner().invoke(main, ["verify", "", "--store", str(other)])
    assert r.exit_code == 1 and "no session given" in r.output
    r = CliRunner().invoke(main, ["show", "last@3", "--store", str(other)])
    assert r.exit_code == 1 and "looks like a checkpoint, SESSION@SEQ" in flat(r.output)
    r = CliRunner().invoke(main, ["show", "nightly-2", "--store", str(other)])
    assert r.exit_code == 1 and "no session there has that name; did you mean 'nightly'?" in flat(r.output)
    r = CliRunner().invoke(main, ["show", "nighlty", "--store", str(other)])
    assert "did you mean 'nightly'?" in flat(r.output)  # a typo in a name
    r = CliRunner().invoke(main, ["show", "20260104-000000-ddd556", "--store", str(other)])
    assert "did you mean '20260104-000000-ddd555'" in flat(r.output)  # and in an id


def test_a_name_that_is_another_sessions_id_prefix_is_ambiguous(tmp_path: Path) -> None:
    """A session named ``20260101`` beside one whose id is the only one to start so: the id prefix
    named the other session, and the named one could not be reached by its name, without a word."""
    store = tmp_path / "store"
    SessionWriter.create(store, {"argv": ["x"]}, session_id="20260101-000000-aaa111", fsync="never").close()
    SessionWriter.create(
        store, {"argv": ["x"], "name": "20260101"}, session_id="20260102-000000-bbb333", fsync="never"
    ).close()
    r = CliRunner().invoke(main, ["show", "20260101", "--store", str(store)])
    assert r.exit_code == 1, r.output
    assert (
        "'20260101' is ambiguous in " in flat(r.output)
        and "the start of the id of 20260101-000000-aaa111, and the name of 20260102-000000-bbb333: "
        "name it by its id"
        in flat(r.output)
    ), r.output
    for ref, sid in (("20260101-000000-aaa111", "aaa111"), ("20260102-000000", "bbb333")):
        r = CliRunner().invoke(main, ["show", ref, "--store", str(store), "--json"])
        assert r.exit_code == 0 and json.loads(r.stdout)["header"]["session_id"].endswith(sid), r.output


@pytest.mark.slow
def test_verify_passes_then_fails_after_tampering(recorded: Recorded, tmp_path: Path) -> None:
    copy = tmp_path / recorded.alpha.name
    shutil.copytree(recorded.alpha, copy)
    ok = cli("verify", str(copy))
    assert ok.exit_code == 0 and "verify ok: 4 events" in ok.stdout
    log = copy / LOG_NAME
    lines = log.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"ts":"2', b'"ts":"3')  # (in the clear, packed line or not)
    log.write_bytes(b"".join(lines))
    r = run([*FORKPOINT, "verify", str(copy)], tmp_path, dict(os.environ, COLUMNS="300"))
    assert r.returncode == 1
    assert "verify FAILED" in r.stdout
    assert f"{LOG_NAME}:3:" in flat(r.stderr)
    # Reading commands still show it, but say first that it is not what was recorded.
    for args in (
        ["show", str(copy)],
        ["export", str(copy), "--file", "-"],
        ["diff", str(copy), str(recorded.alpha)],
    ):
        shown = run([*FORKPOINT, *args], tmp_path, dict(os.environ, COLUMNS="300"))
        warning = flat(shown.stderr)
        assert f"WARNING: session {copy.name} fails verification" in warning, args
        assert f"{LOG_NAME}:3: event seq 2 was modified" in warning, args
    clean = run([*FORKPOINT, "show", str(recorded.alpha)], tmp_path, dict(os.environ, COLUMNS="300"))
    assert clean.returncode == 0 and "WARNING" not in clean.stderr


@pytest.mark.parametrize(
    ("stored", "forged", "said", "problem"),
    [
        (2**70, b'{"$int":"1180591620717411303424"}', b'{"$int":"12x"}', "cannot decode the event"),
        ("caf\udce9", b'{"$u":"Y2Fm7bOp"}', b'{"$u":"Y2Fm7bOp!"}', "a $u holds 'Y2Fm7bOp!', not base64"),
    ],
)
def test_verify_fails_a_value_that_does_not_decode(
    tmp_path: Path, stored: Any, forged: bytes, said: bytes, problem: str
) -> None:
    """Its hash and links were all verify read: an ``$int`` that is no integer (a ``$u`` that is
    no base64), hashed again, passed "verify ok" and then failed the replay that loaded it."""
    w = SessionWriter.create(tmp_path / "store", {"argv": ["x"]}, fsync="never")
    w.append({"type": "note", "text": "n", "data": {"v": stored}})
    w.close()
    assert cli("verify", str(w.path)).exit_code == 0
    log = w.path / LOG_NAME
    lines = log.read_bytes().splitlines(keepends=True)
    assert forged in lines[1], lines[1]  # (a line this small is stored plain, not packed)
    obj = orjson.loads(lines[1].replace(forged, said))
    obj["hash"] = line_hash(obj)
    log.write_bytes(lines[0] + orjson.dumps(obj) + b"\n")
    r = cli("verify", str(w.path))
    assert r.exit_code == 1 and "verify FAILED" in r.stdout
    assert problem in flat(r.stderr) and f"{LOG_NAME}:2" in flat(r.stderr)
    # The library's verify says the same as the command's.
    v = forkpoint.verify(w.path)
    assert not v.ok and problem in v.problems[0] and f"{LOG_NAME}:2" in v.problems[0]
    # A replay does not run the program unreplayed (it used to run live after Python's "Error in
    # sitecustomize", and the verdict blamed a missing install).
    ran = tmp_path / "ran"
    program = [sys.executable, "-c", f"open({str(ran)!r}, 'w')"]
    for checked in ([], ["--no-verify"]):
        r2 = run([*FORKPOINT, "replay", *checked, str(w.path), "--", *program], tmp_path, dict(os.environ))
        assert r2.returncode == 1 and not ran.exists(), r2.stderr
        said = flat(r2.stderr)
        assert problem in said and "Error in sitecustomize" not in said, said
        assert "is forkpoint installed" not in said, said
    # Checked or not by the replaying parent, the replaying process refuses to run the program.
    env = dict(
        os.environ, PYTHONPATH=str(BOOTSTRAP_DIR), FORKPOINT_MODE="replay", FORKPOINT_SESSION=str(w.path)
    )
    env["FORKPOINT_REPORT"] = str(tmp_path / "reports")
    (tmp_path / "reports").mkdir()
    r3 = run(program, tmp_path, env)
    assert r3.returncode == 1 and not ran.exists(), r3.stderr
    (why,) = [p.read_text() for p in (tmp_path / "reports").glob("not-started-*.txt")]
    assert "the replay could not start (SessionError:" in why and problem in why, why
    assert why.endswith("the program was not run"), why


def test_a_session_recorded_in_python_keeps_the_command_that_ran_and_its_replay_says_what_to_do(
    tmp_path: Path,
) -> None:
    """``forkpoint.record()`` stored ``sys.argv`` (``["p.py"]``), which no replay could run
    ("command not found: p.py", then "is forkpoint installed?"). It keeps the whole command. Run
    again, the program recorded itself inside the replay, which refused it with a traceback, and
    ``make-test`` wrote a test that failed so: replay and make-test refuse it before it runs."""
    (tmp_path / "p.py").write_text(
        "import forkpoint\nopen('ran', 'a').write('x')\n"
        "with forkpoint.record(name='inproc', store='store'):\n    print('hi')\n"
    )
    made = run([sys.executable, "p.py"], tmp_path, dict(os.environ))
    assert made.returncode == 0, made.stderr
    (session,) = list_sessions(tmp_path / "store").rows
    assert Session.load(session.path).header["argv"] == [sys.executable, "p.py"]
    (tmp_path / "ran").unlink()
    for args in (["replay"], ["make-test", "--trust"]):
        r = run([*FORKPOINT, *args, "--store", "store", "inproc"], tmp_path, dict(os.environ))
        said = flat(r.stderr)
        assert r.returncode == 2, said
        assert "Traceback" not in said and "command not found" not in said, said
        assert "was recorded by forkpoint.record() inside its own program" in said, said
        assert "forkpoint.replay()" in said, said
        # (run as it is, `forkpoint record -- python p.py` records it again in a session of its own)
        assert (
            "take the forkpoint.record() block out of the program and record it with "
            f"forkpoint record -- {sys.executable} p.py" in said
        ), said
    assert not (tmp_path / "ran").exists() and not (tmp_path / "tests").exists()  # nothing ran or was written
    assert [s.session_id for s in list_sessions(tmp_path / "store").rows] == [session.session_id]
    # Another command, which does not record itself, replays it.
    (tmp_path / "q.py").write_text("import forkpoint\nprint('hi')\n")
    r = run(
        [*FORKPOINT, "replay", "--store", "store", "inproc", "--", sys.executable, "q.py"],
        tmp_path,
        dict(os.environ),
    )
    assert r.returncode == 0 and r.stdout == "hi\n", r.stderr


@pytest.mark.parametrize("inner", ["record", "replay"])
def test_a_refused_record_or_replay_writes_no_session_and_leaves_no_placeholder_key(
    tmp_path: Path, inner: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``forkpoint.record()`` inside a replay wrote a session (exit 1, no calls) before it was
    refused, which then took over its name; a refused ``forkpoint.replay()`` left its what-if
    session and the SDKs' API-key placeholders behind."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with forkpoint.record(store=tmp_path, name="first") as rec:
        pass
    outer = forkpoint.replay(rec.session_path) if inner == "record" else forkpoint.record(store=tmp_path)
    with outer:
        before = sorted(p.name for p in tmp_path.iterdir())
        env = dict(os.environ)
        with pytest.raises(forkpoint.ForkpointError, match="already active in this process") as exc:
            if inner == "record":
                with forkpoint.record(store=tmp_path, name="second"):
                    pass
            else:
                with forkpoint.replay(rec.session_path, models="live"):
                    pass
        assert sorted(p.name for p in tmp_path.iterdir()) == before
        assert dict(os.environ) == env
        assert ("forkpoint.replay()" in str(exc.value)) == (inner == "record")


def test_a_recording_no_process_reported_back_to_says_so(tmp_path: Path) -> None:
    """``python -I`` (or ``-E``) ignores the PYTHONPATH that starts forkpoint in the program: the
    recording held nothing, and said nothing about it."""
    store = str(tmp_path / "store")
    for flags, warned in (["-I"], True), (["-E"], True), ([], False):
        r = run(
            [*FORKPOINT, "record", "--store", store, "--", sys.executable, *flags, "-c", "pass"],
            tmp_path,
            dict(os.environ),
        )
        assert r.returncode == 0, r.stderr
        said = flat(r.stderr)
        assert ("no process of the command recorded anything or reported back" in said) == warned, (
            flags,
            said,
        )
        assert ("python -I and -E ignore the PYTHONPATH" in said) == warned, said


def test_a_command_that_failed_before_any_call_says_so(tmp_path: Path) -> None:
    """``forkpoint record -- python nosuchfile.py`` exited 2 and said it recorded a session of 0
    calls, as it would of a run that made none: which one it was took a look at the session."""
    store = str(tmp_path / "store")
    r = run(
        [*FORKPOINT, "record", "--store", store, "--", sys.executable, "nosuchfile.py"],
        tmp_path,
        dict(os.environ),
    )
    assert r.returncode == 2, r.stderr
    said = flat(r.stderr)
    assert (
        "the command exited 2 before it made any model or tool call: the session holds its end only" in said
    )
    r = run(
        [*FORKPOINT, "record", "--store", store, "--", sys.executable, "-c", "pass"],
        tmp_path,
        dict(os.environ),
    )
    assert r.returncode == 0 and "before it made any" not in flat(r.stderr), r.stderr


def test_a_forked_child_that_outlives_the_recording_does_not_append_after_its_end(tmp_path: Path) -> None:
    """A child forked without exec that called a tool after ``forkpoint record`` had ended and signed
    the session appended to it: ``verify`` then failed (the signature, and "no end event"), and a
    replay refused the session. Its write is now refused, and said; the session stays whole."""
    (tmp_path / "forkafter.py").write_text(
        textwrap.dedent(
            """
            import os, time, forkpoint
            from pathlib import Path

            @forkpoint.tool
            def t(x):
                return x * 2

            print("parent", t(1), flush=True)
            if os.fork() == 0:
                log = Path(os.environ["FORKPOINT_SESSION_LOG"])
                for _ in range(200):  # until forkpoint record has ended the session
                    if b'"type":"end"' in log.read_bytes():
                        break
                    time.sleep(0.05)
                print("child", t(2), flush=True)
                os._exit(0)
            """
        )
    )
    store = tmp_path / "store"
    env = dict(os.environ)
    r = run([*FORKPOINT, "record", "--store", str(store), "--name", "outlived", "--", sys.executable, "-c",
             "import os, glob, runpy; os.environ['FORKPOINT_SESSION_LOG'] = glob.glob("
             f"{str(store)!r} + '/' + os.environ['FORKPOINT_SESSION_ID'] + '/session.jsonl')[0]; "
             "runpy.run_path('forkafter.py')"], tmp_path, env)  # fmt: skip
    assert r.returncode == 0 and "parent 2" in r.stdout and "child 4" in r.stdout, r.stdout + r.stderr
    said = flat(r.stderr)
    assert (
        "the session has ended" in said and "a process that outlived the recording cannot add to it" in said
    )
    v = run([*FORKPOINT, "verify", "--store", str(store), "outlived"], tmp_path, env)
    assert v.returncode == 0 and "verify ok: 2 events" in v.stdout and "trusted" in v.stdout, (
        v.stdout + v.stderr
    )


def test_call_site_is_the_agents_frame_even_when_installed_in_site_packages() -> None:
    """Modules are told apart by name: an agent living in site-packages (run with ``python -m``) is
    named, while runpy's frozen frames, the SDK and forkpoint are not."""
    from forkpoint.callsite import agent_call_site

    def module(name: str, filename: str, source: str, **names: Any) -> dict[str, Any]:
        scope: dict[str, Any] = {"__name__": name, **names}
        exec(compile(textwrap.dedent(source), filename, "exec"), scope)
        return scope

    sdk = module(
        "openai._base_client",
        "/venv/site-packages/openai/_base_client.py",
        """
        def request():
            raise RuntimeError("diverged")
    """,
    )
    agent = module(
        "myagent.run",
        "/venv/site-packages/myagent/run.py",
        """
        def step():
            return request()
    """,
        request=sdk["request"],
    )
    runner = module(
        "runpy",
        "<frozen runpy>",
        """
        def run_module():
            step()
    """,
        step=agent["step"],
    )
    with pytest.raises(RuntimeError) as info:
        runner["run_module"]()
    assert agent_call_site(info.tb) == " at /venv/site-packages/myagent/run.py:3 (step)"
    with pytest.raises(RuntimeError) as info:
        sdk["request"]()
    assert agent_call_site(info.tb.tb_next) == ""  # nothing but the SDK: no call site to name


LOOKUP_AGENT = """
import sys

import forkpoint


@forkpoint.tool
def lookup(q: str) -> str:
    return "r:" + q


def main() -> None:
    lookup(sys.argv[1])


main()
"""


def test_call_site_is_relative_to_the_current_directory_however_the_program_was_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The call site was the file as Python named it: ``lookup_agent.py`` run by
    ``forkpoint.run_command(["python", "lookup_agent.py"])`` (a test ``make-test`` wrote), the
    absolute path run as ``python /abs/lookup_agent.py`` or ``python -m lookup_agent``, so one
    replay's report said it one way and the next the other. It is relative to the current directory
    when below it, else absolute, as the pytest plugin names a cassette or a test file."""
    script = tmp_path / "lookup_agent.py"
    script.write_text(LOOKUP_AGENT)
    monkeypatch.chdir(tmp_path)
    with forkpoint.record(store=tmp_path / "store") as rec:
        forkpoint.run_command(["python", "lookup_agent.py", "a"])

    def site(argv: list[str]) -> str:
        with forkpoint.replay(rec.session_path, record_child=False) as rp:
            forkpoint.run_command([*argv, "b"])
        return str(rp.report()["divergence"]["site"])

    line = 1 + LOOKUP_AGENT.splitlines().index("    lookup(sys.argv[1])")
    for argv in (["python", "lookup_agent.py"], ["python", str(script)], ["python", "-m", "lookup_agent"]):
        assert site(argv) == f" at lookup_agent.py:{line} (main)", argv
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert site(["python", str(script)]) == f" at {script.resolve()}:{line} (main)"


QUOTE = """
import sys
from pathlib import Path

import forkpoint

COUNTER = Path(sys.argv[1])


@forkpoint.tool
def quote(ticker):
    # A live price: each call returns the next value, so identical calls get different answers.
    n = int(COUNTER.read_text()) + 1 if COUNTER.exists() else 1
    COUNTER.write_text(str(n))
    return {"ticker": ticker, "price": 100 + n}


ticker = sys.argv[2] if len(sys.argv) > 2 else "ACME"
print(quote(ticker)["price"], quote(ticker)["price"])
"""


STAT = """
import sys
import forkpoint

@forkpoint.tool
def stat(path: str, inode: int) -> dict:
    return {"path": path, "inode": inode}

other = len(sys.argv) > 1
print(stat("caf\\udce8.txt" if other else "caf\\udce9.txt", 2**70 + other)["inode"])
"""


def test_a_divergence_in_arguments_orjson_refuses_is_reported_by_the_cli(tmp_path: Path) -> None:
    """A lone surrogate and an integer beyond 64 bits in a tool's arguments: the replayed process's
    report carries them to the verdict (it was lost: "the replayed process wrote no report"), and
    ``show`` prints the timeline."""
    (tmp_path / "stat.py").write_text(STAT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    store = str(tmp_path / "store")
    rec = run([*FORKPOINT, "record", "--store", store, "--", sys.executable, "stat.py"], tmp_path, env)
    assert rec.returncode == 0 and rec.stdout == f"{2**70}\n", rec.stderr
    report = tmp_path / "report.json"
    args = ["replay", "last", "--store", store, "--report", str(report), "--", sys.executable, "stat.py", "x"]
    rep = run([*FORKPOINT, *args], tmp_path, env)
    assert rep.returncode != 0 and "replay DIVERGED: 0/1 events matched" in rep.stderr, rep.stderr
    assert f"$.args.inode: {2**70} → {2**70 + 1}" in rep.stderr
    assert '$.args.path: "caf\\udce9.txt" → "caf\\udce8.txt"' in rep.stderr
    assert json.loads(report.read_text())["divergence"]["kind"] == "tool_call"
    assert str(2**70) in report.read_text() and "e+21" not in report.read_text()  # (not read as a float)
    override = f'tool:stat.result={{"path": "x", "inode": {2**71}}}'
    served = run([*FORKPOINT, "replay", "last", "--store", store, "--override", override], tmp_path, env)
    assert served.stdout == f"{2**71}\n", served.stderr  # (orjson read it as a float: 2.3611832414348226e+21)
    exported = tmp_path / "trace.json"
    assert (
        run(
            [*FORKPOINT, "export", "last", "--store", store, "--content", "--file", str(exported)],
            tmp_path,
            env,
        ).returncode
        == 0
    )
    assert str(2**70) in exported.read_text() and "\\udce9" in exported.read_text()
    compared = run([*FORKPOINT, "diff", "last", "last", "--store", store, "--json"], tmp_path, env)
    assert compared.returncode == 0 and json.loads(compared.stdout), compared.stderr
    # (bytes: where Python's stdout escapes surrogates, it writes the file name's own bytes back)
    shown = subprocess.run(
        [*FORKPOINT, "show", "last", "--store", store], cwd=tmp_path, env=env, capture_output=True
    )
    assert shown.returncode == 0 and f"inode={2**70}".encode() in shown.stdout, shown.stderr


@pytest.mark.slow
def test_replay_of_a_command_that_ran_several_programs(tmp_path: Path) -> None:
    """A recorded shell script ran the agent twice, one run after the other, with identical tool
    calls: each program must get back its own answers on replay (the second run the 3rd and 4th
    recorded calls, not the first two again), and the report counts both programs' calls."""
    (tmp_path / "quote.py").write_text(QUOTE)
    counter = tmp_path / "counter"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    script = f"{shlex.quote(sys.executable)} quote.py {counter} && {shlex.quote(sys.executable)} quote.py {counter}"
    store = str(tmp_path / "store")
    rec = run([*FORKPOINT, "record", "--store", store, "--", "sh", "-c", script], tmp_path, env)
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout.split() == ["101", "102", "103", "104"]
    counter.unlink()

    report = tmp_path / "report.json"
    rep = run([*FORKPOINT, "replay", "last", "--store", store, "--report", str(report)], tmp_path, env)
    assert rep.returncode == 0, rep.stderr
    assert rep.stdout == rec.stdout
    assert not counter.exists()  # no tool body ran
    assert "replay ok: 4/4 events matched, 0 recorded events left unused; served to 2 processes" in rep.stderr
    got = json.loads(report.read_text())
    assert (got["processes"], got["served"], got["unused"], got["reproduced"]) == (2, [1, 2, 3, 4], [], True)

    # The second program asks something else: the report names the call it was expected to make
    # (seq 3), not one the first program was already served.
    other = f"{shlex.quote(sys.executable)} quote.py {counter} && {shlex.quote(sys.executable)} quote.py {counter} ZZZ"
    div = run([*FORKPOINT, "replay", "last", "--store", store, "--", "sh", "-c", other], tmp_path, env)
    assert div.returncode == 3
    said = flat(div.stderr)
    assert "Expected next: recorded event seq 3" in said and "$.args.ticker: ACME → ZZZ" in said


def replayed_as_recorded(
    tmp_path: Path, store: str, env: dict[str, str], rec: subprocess.CompletedProcess[str], counter: Path
) -> str:
    """``forkpoint replay last`` of QUOTE's counter program, asserted to exit 0 with the recorded
    output and no tool body run (``counter`` is removed first: a body would write it); its stderr,
    flattened."""
    counter.unlink()
    rep = run([*FORKPOINT, "replay", "last", "--store", store], tmp_path, env)
    assert rep.returncode == 0, rep.stderr
    assert rep.stdout == rec.stdout
    assert not counter.exists()
    return flat(rep.stderr)


#: QUOTE with its output flushed: a program that execs next loses what it buffered (forkpoint or not).
FLUSHED_QUOTE = QUOTE.replace(
    'print(quote(ticker)["price"], quote(ticker)["price"])',
    'print(quote(ticker)["price"], quote(ticker)["price"], flush=True)',
)


#: QUOTE's two calls, then the program replaces itself (argv[2] says how) with its second run.
EXEC_QUOTE = (
    FLUSHED_QUOTE.replace("import sys\n", "import os\nimport sys\n").replace(
        "sys.argv[2] if len(sys.argv) > 2 else ", ""
    )
    + """
again = [sys.executable, __file__, sys.argv[1], "again"]
how = sys.argv[2]
if how == "execv":
    os.execv(sys.executable, again)
elif how == "execvp":  # (found in the second folder of PATH: the first candidate fails)
    os.execvp(os.path.basename(sys.executable), again)
elif how == "execve":  # (an environment of its own, built from os.environ: forkpoint's variables are not in it)
    os.execve(sys.executable, again, {**os.environ, "QUOTE_RUN": "2"})
elif how == "execve-bytes":  # (an environment of bytes, as execve takes too)
    os.execve(sys.executable, again, {os.fsencode(k): os.fsencode(v) for k, v in os.environ.items()})
elif how == "noexec":  # (a file that can be run but not executed: the exec fails, the program goes on)
    try:
        os.execv(os.path.abspath("garbage"), again)
    except OSError:
        print(quote("ACME")["price"])
"""
)


@pytest.mark.parametrize("how", ["execv", "execvp", "execve", "execve-bytes", "noexec"])
def test_a_program_that_replaces_itself_through_exec_is_recorded_and_replayed_whole(
    tmp_path: Path, how: str
) -> None:
    """A program that execs into another (a launcher, a program restarting itself) is the recorded
    command going on. forkpoint took its activation out of the environment, so the new program ran
    unrecorded and nothing said so: the session held the first program's calls only, and a replay
    ran the second program's tools live (or its model calls against the network) and exited 1,
    "wrote no report". Its calls also restart their ordinals in the same pid, so identical calls
    must still come back in the order they were made across the exec."""
    (tmp_path / "quote.py").write_text(EXEC_QUOTE)
    garbage = tmp_path / "garbage"
    garbage.write_bytes(b"\x00\x01 not a program")
    garbage.chmod(0o755)
    (tmp_path / "empty").mkdir()
    counter = tmp_path / "counter"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    env["PATH"] = os.pathsep.join([str(tmp_path / "empty"), str(Path(sys.executable).parent), env["PATH"]])
    store = str(tmp_path / "store")
    cmd = [sys.executable, "quote.py", str(counter), how]
    rec = run([*FORKPOINT, "record", "--store", store, "--no-workspace", "--", *cmd], tmp_path, env)
    assert rec.returncode == 0, rec.stderr
    expected = ["101", "102", "103"] if how == "noexec" else ["101", "102", "103", "104"]
    assert rec.stdout.split() == expected
    assert f"(0 model calls, {len(expected)} tool calls)" in flat(rec.stderr), rec.stderr
    said = replayed_as_recorded(tmp_path, store, env, rec, counter)
    assert f"replay ok: {len(expected)}/{len(expected)} events matched, 0 recorded events left unused" in said
    assert ("served to 2 processes" in said) == (how != "noexec"), said


def test_an_exec_into_a_python_that_does_not_start_forkpoint_is_said_and_never_replay_ok(
    tmp_path: Path,
) -> None:
    """``python -I`` ignores the PYTHONPATH that starts forkpoint: a program that exec'd into one left
    its second run unrecorded, said nothing, and the replay said "replay ok: 2/2" while the second
    run's tools ran live. The recording now says so (and its end is incomplete); the replay says
    the program ran unreplayed and exits 1. A shell exec'd into is not such a program: the Python
    programs it starts report under their own pids (no warning)."""
    (tmp_path / "quote.py").write_text(
        EXEC_QUOTE
        + 'if how == "isolated":\n    os.execv(sys.executable, [sys.executable, "-I", *again[1:]])\n'
    )
    counter = tmp_path / "counter"
    rec, store, env = record_here(tmp_path, "quote.py", str(counter), "isolated")
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout.split() == ["101", "102", "103", "104"]
    said = flat(rec.stderr)
    assert (
        "(0 model calls, 2 tool calls)" in said and "through exec, which did not start forkpoint" in said
    ), said
    assert "-I" in said and "what it did is not in the session" in said
    end = Session.load(next((tmp_path / "store").glob(f"*/{LOG_NAME}")).parent).events[-1]
    assert "did not start forkpoint" in end["incomplete"]
    counter.unlink()

    rep = run([*FORKPOINT, "replay", "last", "--store", store], tmp_path, env)
    assert rep.returncode == 1, rep.stderr
    said = flat(rep.stderr)
    assert "through exec, which did not start forkpoint's replay" in said and "it ran unreplayed" in said, (
        said
    )
    assert "replay ok" not in said

    shell = tmp_path / "shell.py"
    shell.write_text(
        "import os, sys\nos.execv('/bin/sh', ['sh', '-c', f'{sys.executable} -c \"print(42)\"'])\n"
    )
    done = run(
        [*FORKPOINT, "record", "--store", store, "--no-workspace", "--", sys.executable, "shell.py"],
        tmp_path,
        env,
    )
    assert done.returncode == 0 and done.stdout.split() == ["42"], done.stderr
    assert "did not start forkpoint" not in flat(done.stderr)


def test_an_exec_inside_forkpoint_record_ends_the_session_saying_so(tmp_path: Path) -> None:
    """Inside a ``forkpoint.record()`` block, a program that replaced itself through exec left its
    session without an end, and said nothing: the new program's calls were not recorded. The
    session now ends there (exit code unknown, reason ``exec``, incomplete), and stderr says why."""
    (tmp_path / "inproc.py").write_text(
        textwrap.dedent(
            """
            import os, sys, forkpoint
            if len(sys.argv) > 1:
                print("the new program")
                sys.exit(0)

            @forkpoint.tool
            def t(x):
                return x + 1

            with forkpoint.record(store=sys.argv[0] + ".store"):
                print(t(1), flush=True)
                os.execv(sys.executable, [sys.executable, __file__, "again"])
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    r = run([sys.executable, "inproc.py"], tmp_path, env)
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["2", "the new program"]
    assert "ends here: the program replaced itself through exec inside forkpoint.record()" in flat(r.stderr)
    (session,) = [p.parent for p in (tmp_path / "inproc.py.store").glob(f"*/{LOG_NAME}")]
    end = Session.load(session).events[-1]
    assert (end["type"], end["exit_code"], end["reason"]) == ("end", None, "exec")
    assert "replaced itself through exec" in end["incomplete"]


#: QUOTE's two calls in each of four programs: each execs into the next (argv[2] counts them).
CHAIN_QUOTE = (
    FLUSHED_QUOTE.replace("import sys\n", "import os\nimport sys\n").replace(
        'ticker = sys.argv[2] if len(sys.argv) > 2 else "ACME"',
        'ticker, k = "ACME", int(sys.argv[2])',
    )
    + """
if k < 4:
    os.execv(sys.executable, [sys.executable, __file__, sys.argv[1], str(k + 1)])
"""
)


def test_a_chain_of_execs_is_replayed_whole(tmp_path: Path) -> None:
    """Each program of a chain of execs finishes its part under the same pid: its report was named
    after the exec's number in that program (``-exec1`` in each), so each program's replaced the
    one before's, and the replay of a recording that ran whole said "DID NOT REPRODUCE": 4/8 events
    matched, seq 1 to 4 "left unused" though they had been served, "served to 2 processes"."""
    (tmp_path / "quote.py").write_text(CHAIN_QUOTE)
    counter = tmp_path / "counter"
    rec, store, env = record_here(tmp_path, "quote.py", str(counter), "1")
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout.split() == [str(n) for n in range(101, 109)]
    assert "(0 model calls, 8 tool calls)" in flat(rec.stderr), rec.stderr
    said = replayed_as_recorded(tmp_path, store, env, rec, counter)
    assert "replay ok: 8/8 events matched, 0 recorded events left unused; served to 4 processes" in said, said


#: QUOTE's two calls, then a tool whose body execs into the program's second run, which calls once.
TOOL_EXEC_QUOTE = QUOTE.replace("import sys\n", "import os\nimport sys\n").replace(
    'ticker = sys.argv[2] if len(sys.argv) > 2 else "ACME"\nprint(quote(ticker)["price"], quote(ticker)["price"])',
    """
@forkpoint.tool
def restart(again):
    os.execv(sys.executable, [sys.executable, __file__, sys.argv[1], again])


if len(sys.argv) > 2:
    print(sys.argv[2], quote("ACME")["price"])
else:
    print(quote("ACME")["price"], quote("ACME")["price"], flush=True)
    restart("again")
    print("not reached")
""",
)


def test_a_tool_named_like_an_mcp_request_is_counted_as_a_tool_call(tmp_path: Path) -> None:
    """The summary counts an MCP session's own requests (``mcp:initialize``) apart from tool calls;
    a tool of the program's own named ``mcp:lookup`` was counted among them: "(0 model calls,
    0 tool calls, 1 MCP session request)"."""
    (tmp_path / "agent.py").write_text(
        "import forkpoint\n\n\n"
        "@forkpoint.tool(name='mcp:lookup')\n"
        "def lookup(q):\n    return q.upper()\n\n\n"
        "print(lookup('x'))\n"
    )
    rec, _, _ = record_here(tmp_path, "agent.py")
    assert rec.returncode == 0 and rec.stdout == "X\n", rec.stderr
    assert "(0 model calls, 1 tool call)" in flat(rec.stderr), rec.stderr


def test_a_tool_whose_body_execs_is_recorded_and_replayed(tmp_path: Path) -> None:
    """A tool that replaces the program (a "restart" tool) never returns: its call was not written
    at all, so the session held 3 of the 4 calls, said nothing, and its replay served the call
    after it to the tool itself and stopped, "DIVERGED" (the program went on past the tool call,
    as the tool's body did not run). It is written as ended by that exec, and a replay execs the
    same way, handing itself on."""
    (tmp_path / "quote.py").write_text(TOOL_EXEC_QUOTE)
    counter = tmp_path / "counter"
    rec, store, env = record_here(tmp_path, "quote.py", str(counter))
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout.split() == ["101", "102", "again", "103"]
    assert "(0 model calls, 4 tool calls)" in flat(rec.stderr), rec.stderr
    shown = run([*FORKPOINT, "show", "last", "--store", store], tmp_path, env)
    assert "restart(again=again)" in shown.stdout and "replaced the program: os.execv(" in flat(shown.stdout)
    said = replayed_as_recorded(tmp_path, store, env, rec, counter)
    assert "replay ok: 4/4 events matched, 0 recorded events left unused; served to 2 processes" in said, said


#: One model call, then the program execs into its next run (argv[1] counts them), three in all.
EXEC_ASKER = """import os
import sys

import openai

k = int(sys.argv[1])
client = openai.OpenAI(base_url=os.environ["AGENT_BASE_URL"], api_key="sk-test", max_retries=0)
answer = client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"run {k}"}])
print(answer.choices[0].message.content)
if k < 3:
    os.execv(sys.executable, [sys.executable, __file__, str(k + 1)])
"""


def test_checkpoints_after_an_exec_go_on_counting_turns(tmp_path: Path, server: Any) -> None:
    """The checkpoints a program takes after its recorded command exec'd into it name the turn of
    the whole session, as ``show`` counts it: each program's started again from turn 1 (1, 1, 1
    for one model call in each of three), and the HTML viewer groups a checkpoint by that turn."""
    from tests.gitutil import make_repo

    work = make_repo(tmp_path / "work", {"asker.py": EXEC_ASKER})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORKPOINT_", "OPENAI_"))}
    env["AGENT_BASE_URL"] = server.url + "/v1"
    store = str(tmp_path / "store")
    rec = run([*FORKPOINT, "record", "--store", store, "--", sys.executable, "asker.py", "1"], work, env)
    assert rec.returncode == 0, rec.stderr
    assert "(3 model calls, 0 tool calls)" in flat(rec.stderr), rec.stderr
    (row,) = list_sessions(Path(store)).rows
    assert [c["turn"] for c in Session.load(row.path).by_type("checkpoint")] == [1, 2, 3]


FORKED_QUOTE = QUOTE.replace(
    'print(quote(ticker)["price"], quote(ticker)["price"])',
    """first = quote("ACME")["price"]
read, write = os.pipe()
pid = os.fork()
if pid == 0:  # a worker forked without exec, leaving as a multiprocessing worker does
    os.close(read)
    os.write(write, str(quote(ticker)["price"]).encode())
    os._exit(0)
os.close(write)
got = os.read(read, 100).decode()
os.waitpid(pid, 0)
print(first, got)""",
).replace("import sys\n", "import os\nimport sys\n")


@pytest.mark.slow
def test_replay_of_a_program_whose_forked_worker_makes_calls(tmp_path: Path) -> None:
    """A worker forked without exec keeps the recorder, and on replay it is served from the
    recording. It leaves through os._exit, past every exit handler: it reports as it goes, so its
    calls count as served, and a divergence in it is the replay's (docs/format.md)."""
    (tmp_path / "fq.py").write_text(FORKED_QUOTE)
    counter = tmp_path / "counter"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    store = str(tmp_path / "store")
    rec = run(
        [*FORKPOINT, "record", "--store", store, "--", sys.executable, "fq.py", str(counter)], tmp_path, env
    )
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout.split() == ["101", "102"]
    counter.unlink()

    rep = run([*FORKPOINT, "replay", "last", "--store", store], tmp_path, env)
    assert rep.returncode == 0, rep.stderr
    assert rep.stdout == rec.stdout and not counter.exists()
    assert "replay ok: 2/2 events matched, 0 recorded events left unused; served to 2 processes" in rep.stderr

    div = run(
        [*FORKPOINT, "replay", "last", "--store", store, "--", sys.executable, "fq.py", str(counter), "ZZZ"],
        tmp_path,
        env,
    )
    assert div.returncode == 3, div.stderr
    assert "$.args.ticker: ACME → ZZZ" in flat(div.stderr)


def test_a_program_that_ends_through_os_exit_replays_ok(tmp_path: Path) -> None:
    """A program that ended with os._exit(0) recorded fine, but its replay ran no exit handler, wrote
    no report, and forkpoint replay failed it (exit 1, "wrote no report")."""
    (tmp_path / "ox.py").write_text(
        QUOTE_AGENT.replace(
            'print(quote("ACME")["price"])',
            'print(quote("ACME")["price"], flush=True)\nimport os\nos._exit(0)',
        )
    )
    rec, store, env = record_here(tmp_path, "ox.py")
    assert rec.returncode == 0 and rec.stdout == "101\n", rec.stderr
    rep = run([*FORKPOINT, "replay", "last", "--store", store], tmp_path, env)
    assert rep.returncode == 0, rep.stderr
    assert rep.stdout == "101\n" and "replay ok: 1/1 events matched" in rep.stderr


def test_a_tool_that_leaves_through_os_exit_is_recorded_and_leaves_again_on_replay(tmp_path: Path) -> None:
    """A ``finish`` tool calling os._exit(4) was lost from the recording without a word (no event,
    no warning), and the replay diverged there. Its call, and the one of the tool that called it,
    are recorded as ended by os._exit; the replay leaves the same way, running neither body."""
    (tmp_path / "ox.py").write_text(
        textwrap.dedent(
            """
            import os, sys
            import forkpoint

            @forkpoint.tool
            def finish(code):
                open("ran", "a").write("finish\\n")
                os._exit(code)

            @forkpoint.tool
            def wrap_up(code):
                open("ran", "a").write("wrap_up\\n")
                finish(code)

            print("start", flush=True)
            wrap_up(int(sys.argv[1]))
            print("never")
            """
        )
    )
    rec, store, env = record_here(tmp_path, "ox.py", "4")
    assert rec.returncode == 4 and rec.stdout == "start\n", rec.stderr
    assert "2 tool calls" in rec.stderr and "WARNING" not in rec.stderr, rec.stderr
    (session,) = [p for p in Path(store).iterdir() if (p / LOG_NAME).exists()]
    calls = Session.load(session).by_type("tool_call")
    assert [(c["tool"], c["error"].get("exit_status")) for c in calls] == [("finish", 4), ("wrap_up", 4)]
    assert Session.load(session).by_type("end")[0]["exit_code"] == 4
    (tmp_path / "ran").unlink()

    rep = run([*FORKPOINT, "replay", "last", "--store", store], tmp_path, env)
    assert rep.returncode == 4 and rep.stdout == "start\n", rep.stderr
    assert "replay ok: 2/2 events matched" in rep.stderr
    assert not (tmp_path / "ran").exists()  # no body ran


def test_a_worker_a_tool_forks_leaves_through_os_exit_without_ending_the_tools_call(tmp_path: Path) -> None:
    """A child forked inside a tool (a fork pool's worker) leaves through os._exit: the tool's
    call goes on in the parent, so the child must not write it as ended by os._exit."""
    (tmp_path / "fk.py").write_text(
        textwrap.dedent(
            """
            import os
            import forkpoint

            @forkpoint.tool
            def crunch(n):
                pid = os.fork()
                if pid == 0:
                    os._exit(0)
                os.waitpid(pid, 0)
                return n * 2

            print(crunch(21))
            """
        )
    )
    rec, store, env = record_here(tmp_path, "fk.py")
    assert rec.returncode == 0 and rec.stdout == "42\n", rec.stderr
    (session,) = [p for p in Path(store).iterdir() if (p / LOG_NAME).exists()]
    calls = Session.load(session).by_type("tool_call")
    assert [(c["tool"], c.get("result"), c.get("error")) for c in calls] == [("crunch", 42, None)]
    rep = run([*FORKPOINT, "replay", "last", "--store", store], tmp_path, env)
    assert rep.returncode == 0 and rep.stdout == "42\n" and "replay ok: 1/1" in rep.stderr, rep.stderr


def test_a_program_ended_by_ctrl_c_exits_130_recorded_and_replayed(tmp_path: Path) -> None:
    """An uncaught KeyboardInterrupt exits 130 (killed by SIGINT, as the shell says); recorded, it
    exited 1: the recording's imports at exit cleared CPython's note of the interrupt."""
    (tmp_path / "ki.py").write_text(QUOTE_AGENT + "raise KeyboardInterrupt\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    store = str(tmp_path / "store")
    plain = run([sys.executable, "ki.py"], tmp_path, env)
    assert plain.returncode in (130, -2), plain.stderr
    rec = run(
        [*FORKPOINT, "record", "--store", store, "--no-workspace", "--", sys.executable, "ki.py"],
        tmp_path,
        env,
    )
    assert rec.returncode == 130, rec.stderr
    rep = run([*FORKPOINT, "replay", "last", "--store", store], tmp_path, env)
    assert rep.returncode == 130 and "replay ok: 1/1 events matched" in rep.stderr, rep.stderr


@pytest.mark.slow
def test_a_recording_whose_stderr_is_on_a_full_disk_ends_with_the_programs_own_exit_code(
    tmp_path: Path,
) -> None:
    """``forkpoint record -- … 2>>log`` on a full disk (``/dev/full``): the program never writes to
    stderr and exits 4; forkpoint's own lines (a result it cannot store, in the program; "recorded
    session", in the command line) raised OSError there, and ``forkpoint record`` exited 1."""
    (tmp_path / "full.py").write_text(
        QUOTE_AGENT
        + textwrap.dedent(
            """
            class Slotted:
                __slots__ = ()

            @forkpoint.tool
            def make():
                return Slotted()

            make()
            raise SystemExit(4)
            """
        )
    )
    # (stderr buffered, as without PYTHONUNBUFFERED: a line forkpoint could not write stayed in the
    # buffer, failed again as the interpreter exited, and the program exited 120, not 4)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_") and k != "PYTHONUNBUFFERED"}
    store = str(tmp_path / "store")
    cmd = [*FORKPOINT, "record", "--store", store, "--no-workspace", "--", sys.executable, "full.py"]
    with open("/dev/full", "w") as full:
        plain = subprocess.run(
            [sys.executable, "full.py"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=full
        )
        rec = subprocess.run(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=full, timeout=60)
    assert plain.returncode == rec.returncode == 4
    assert plain.stdout == rec.stdout == b"101\n"


@pytest.mark.slow
def test_a_program_that_closed_its_stdout_does_not_write_into_the_session_log(tmp_path: Path) -> None:
    """A daemon-like program closes fd 1, then makes its first recorded call: the session log was
    opened there, so the program's writes to fd 1 (EBADF live) went into the log, and the session
    failed to verify. The log now takes a descriptor above 2."""
    (tmp_path / "closed.py").write_text(
        textwrap.dedent(
            """
            import os

            import forkpoint


            @forkpoint.tool
            def quote(ticker):
                return {"ticker": ticker, "price": 101}


            os.close(1)
            quote("ACME")
            try:
                os.write(1, b"where does this go?\\n")
                wrote = "written"
            except OSError as exc:
                wrote = exc.strerror
            open("wrote.txt", "w").write(wrote)
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    assert run([sys.executable, "closed.py"], tmp_path, env).returncode == 0
    live = (tmp_path / "wrote.txt").read_text()
    rec, store, env = record_here(tmp_path, "closed.py")
    assert rec.returncode == 0, rec.stderr
    assert (tmp_path / "wrote.txt").read_text() == live == "Bad file descriptor"
    verified = run([*FORKPOINT, "verify", "last", "--store", store], tmp_path, env)
    assert verified.returncode == 0, verified.stdout + verified.stderr


POOL_AGENT = """
import multiprocessing
import sys

import forkpoint


@forkpoint.tool
def square(x: int) -> int:
    with open(sys.argv[2], "a") as ran:
        ran.write(f"{x}\\n")
    return x * x


def work(x: int) -> int:
    return square(x + int(sys.argv[3]))


if __name__ == "__main__":
    with multiprocessing.get_context(sys.argv[1]).Pool(2) as pool:
        print(sorted(pool.map(work, [1, 2, 3])), square(10))
"""


@pytest.mark.slow
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_programs_spawned_workers_are_recorded_and_replayed(tmp_path: Path, method: str) -> None:
    """A worker started with spawn (forkserver: forked from a server that is spawned) is a fresh
    interpreter: its tool calls were missing from the recording, unsaid, and ran live on replay,
    which said "replay ok". Such workers now start forkpoint with the process that starts them."""
    (tmp_path / "pool.py").write_text(POOL_AGENT)
    ran = tmp_path / "ran.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    store = str(tmp_path / "store")
    program = [sys.executable, "pool.py", method, str(ran)]
    rec = run([*FORKPOINT, "record", "--store", store, "--no-workspace", "--", *program, "0"], tmp_path, env)
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout.split() == ["[1,", "4,", "9]", "100"]
    assert sorted(ran.read_text().split()) == ["1", "10", "2", "3"]
    calls = Session.load(next(p for p in (tmp_path / "store").iterdir() if (p / LOG_NAME).exists())).by_type(
        "tool_call"
    )
    assert sorted(c["args"]["x"] for c in calls) == [1, 2, 3, 10]
    ran.unlink()

    rep = run([*FORKPOINT, "replay", "last", "--store", store, "--", *program, "0"], tmp_path, env)
    assert rep.returncode == 0, rep.stderr
    assert rep.stdout == rec.stdout and not ran.exists()  # no tool body ran, in any process
    assert "replay ok: 4/4 events matched, 0 recorded events left unused" in rep.stderr

    div = run([*FORKPOINT, "replay", "last", "--store", store, "--", *program, "1"], tmp_path, env)
    assert div.returncode == 3, div.stderr
    assert "DIVERGED" in div.stderr and not ran.exists()  # (the pool unpickled the worker's Divergence)
    assert "the call made in a multiprocessing worker diverged" in div.stderr


@pytest.mark.slow
def test_a_tool_named_on_the_command_line_is_recorded_in_spawned_workers(tmp_path: Path) -> None:
    """--tool __main__:square was not applied in a spawned worker (its script runs as __mp_main__,
    its functions looking names up in a copy of __main__'s globals): the workers' calls were not
    recorded, ran live on replay, and the replay said "replay ok"."""
    (tmp_path / "pool.py").write_text(POOL_AGENT.replace("@forkpoint.tool\n", ""))
    ran = tmp_path / "ran.txt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    store = str(tmp_path / "store")
    program = [sys.executable, "pool.py", "spawn", str(ran), "0"]
    tool = ["--tool", "__main__:square"]
    rec = run(
        [*FORKPOINT, "record", "--store", store, "--no-workspace", *tool, "--", *program], tmp_path, env
    )
    assert rec.returncode == 0 and "(0 model calls, 4 tool calls)" in rec.stderr, rec.stderr
    ran.unlink()
    rep = run([*FORKPOINT, "replay", "last", "--store", store], tmp_path, env)
    assert rep.returncode == 0 and "replay ok: 4/4 events matched" in rep.stderr, rep.stderr
    assert rep.stdout == rec.stdout and not ran.exists()


OUTLIVES = """
import sys
import time

import forkpoint


@forkpoint.tool
def square(x: int) -> int:
    return x * x


time.sleep(float(sys.argv[1]))
print("late", square(4), flush=True)
"""

ENDS_FIRST = """
import forkpoint


@forkpoint.tool
def double(x: int) -> int:
    return 2 * x


print("early", double(3), flush=True)
"""

#: The CLI, with the wait for the processes that outlive the program cut to half a second.
IMPATIENT = [
    sys.executable,
    "-c",
    "import sys, forkpoint.orchestrate as o; o.OUTLIVED_GRACE = 0.5; "
    "from forkpoint.cli import main; sys.argv[0] = 'forkpoint'; main()",
]


def outliving_program(tmp_path: Path, late: float) -> list[str]:
    """A shell command whose program in the background makes its tool call ``late`` seconds after
    the one in the foreground, which the shell waits for, has ended."""
    (tmp_path / "late.py").write_text(OUTLIVES)
    (tmp_path / "early.py").write_text(ENDS_FIRST)
    py = shlex.quote(sys.executable)
    return ["sh", "-c", f"{py} late.py {late} & {py} early.py"]


REDIRECTING = " ".join(f"{n}>/dev/null" for n in range(3, 10))


@pytest.mark.parametrize(
    ("background", "before"),
    [
        pytest.param("{py} late.py 0.2", "", id="as-the-shell-leaves", marks=pytest.mark.slow),
        pytest.param(
            "({py} late.py 1.5; {py} late.py 0)", "", id="the-next-of-a-job", marks=pytest.mark.slow
        ),
        pytest.param("{py} late.py 0.2", f"exec {REDIRECTING}; ", id="its-shell-redirecting-3-to-9"),
    ],
)
def test_a_program_started_in_the_background_is_waited_for(
    tmp_path: Path, background: str, before: str
) -> None:
    """`sh -c "a; python b.py &"`: the shell left as it started b, before b's Python started
    forkpoint, so no process was waited for: b's call was refused after the session's end (which
    said complete, 1 call of 2), and on replay b's report came after the verdict ("replay ok").
    The program's processes inherit a lock (`tree`), whose holder is waited for to start forkpoint.
    `(python b.py; python c.py) &`: c starts once b ended, more than a second after the shell left;
    the second counted from the shell's end, so c was missed: it counts from when the last process
    that started forkpoint ran. A script redirects descriptors 3 to 9 by number (`exec 4>log`): the
    lock's was the lowest free one (4 when recording, 5 on replay), which the shell closed; it is
    passed at 100 or above."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    store = str(tmp_path / "store")
    outliving_program(tmp_path, 0)
    py = shlex.quote(sys.executable)
    program = ["sh", "-c", f"{before}{py} early.py; {background.format(py=py)} &"]
    calls = 1 + background.count("late.py")
    rec = run([*FORKPOINT, "record", "--store", store, "--no-workspace", "--", *program], tmp_path, env)
    assert rec.returncode == 0 and f"(0 model calls, {calls} tool calls)" in rec.stderr, rec.stderr
    session = Session.load(next(p for p in Path(store).iterdir() if (p / LOG_NAME).exists()))
    assert [e["type"] for e in session.events][-calls - 1 :] == ["tool_call"] * calls + ["end"]
    assert not session.by_type("end")[0].get("incomplete")
    rep = run([*FORKPOINT, "replay", "last", "--store", store], tmp_path, env)
    assert rep.returncode == 0 and f"replay ok: {calls}/{calls} events matched" in rep.stderr, rep.stderr
    assert f"served to {calls} processes" in rep.stderr


def test_a_background_process_that_is_not_forkpoints_is_not_waited_for(tmp_path: Path) -> None:
    """A server the command leaves running (not Python, it starts no forkpoint) holds the inherited
    lock as long as it runs: the record and its replay end without waiting for it, saying nothing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    store = str(tmp_path / "store")
    outliving_program(tmp_path, 0)
    pid = tmp_path / "server.pid"
    py = shlex.quote(sys.executable)
    program = ["sh", "-c", f"sleep 60 >/dev/null 2>&1 & echo $! > server.pid; {py} early.py"]
    for args in (["record", "--no-workspace"], ["replay", "last"]):
        try:
            done = run([*FORKPOINT, *args, "--store", store, "--", *program], tmp_path, env)
            assert done.returncode == 0 and "still ran" not in done.stderr, done.stderr
            os.kill(int(pid.read_text()), 0)  # (the server still runs: forkpoint ended before it)
        finally:
            if pid.exists():
                os.kill(int(pid.read_text()), 9)
                pid.unlink()
    assert "replay ok: 1/1 events matched" in done.stderr


@pytest.mark.slow
def test_a_process_that_outlives_the_program_is_waited_for(tmp_path: Path) -> None:
    """A process that ended after the program (a multiprocessing forkserver leaving, which
    writes its report as it goes) was not waited for: its call was appended to the session after
    its end (whose signature it broke), its report was missed, and removing the report folder it
    was writing to failed the replay ("Directory not empty"). The CLI now waits for it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    store = str(tmp_path / "store")
    rec = run(
        [*FORKPOINT, "record", "--store", store, "--no-workspace", "--", *outliving_program(tmp_path, 1)],
        tmp_path,
        env,
    )
    assert rec.returncode == 0 and "(0 model calls, 2 tool calls)" in rec.stderr, rec.stderr
    assert sorted(rec.stdout.splitlines()) == ["early 6", "late 16"]
    events = Session.load(next(p for p in Path(store).iterdir() if (p / LOG_NAME).exists())).events
    assert [e["type"] for e in events][-3:] == ["tool_call", "tool_call", "end"]
    rep = run([*FORKPOINT, "replay", "last", "--store", store], tmp_path, env)
    assert rep.returncode == 0 and "replay ok: 2/2 events matched" in rep.stderr, rep.stderr
    assert sorted(rep.stdout.splitlines()) == ["early 6", "late 16"]


@pytest.mark.slow
def test_a_process_still_running_after_the_wait_is_said_and_the_verdict_unknown(tmp_path: Path) -> None:
    """One that runs on past the wait is named: the session says it is incomplete (and what the
    process does later is not appended after its end, which broke its signature), and the replay's
    verdict is unknown, not "replay ok" on what the program's other processes did."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    store = str(tmp_path / "store")
    program = outliving_program(tmp_path, 3)
    rec = run([*IMPATIENT, "record", "--store", store, "--no-workspace", "--", *program], tmp_path, env)
    assert rec.returncode == 0, rec.stderr
    assert (
        "still ran 0.5 s after the program ended: what it does from now is not in the session" in rec.stderr
    )
    # (the straggler holds the pipe: run returned once it ended, its call refused, not appended)
    assert "the session has ended (event seq 2 is its end, written by another process)" in rec.stderr
    session = Session.load(next(p for p in Path(store).iterdir() if (p / LOG_NAME).exists()))
    assert [e["type"] for e in session.events][-2:] == ["tool_call", "end"]
    assert "still ran 0.5 s after the program ended" in session.by_type("end")[0]["incomplete"]

    rep = run([*IMPATIENT, "replay", "last", "--store", store], tmp_path, env)
    assert rep.returncode == 1, rep.stderr
    assert re.search(r"process \d+ \(or a process forked from it\) still ran 0\.5 s", rep.stderr), rep.stderr
    assert "its report is not in the verdict: the replay's verdict is unknown" in rep.stderr
    assert "replay ok" not in rep.stderr


HANDS_ON = """
import multiprocessing
import os
import time
from pathlib import Path

import forkpoint


@forkpoint.tool
def square(x: int) -> int:
    return x * x


def late() -> None:
    Path("started").touch()
    time.sleep(1)
    print("late", square(4), flush=True)


if __name__ == "__main__":
    while not os.path.exists("ended"):  # (the program, the shell, is ending: the CLI then waits)
        time.sleep(0.01)
    time.sleep(0.5)
    multiprocessing.get_context("spawn").Process(target=late).start()
    while not os.path.exists("started"):
        time.sleep(0.01)
    os._exit(0)  # (leaving its worker running, not joined)
"""


@pytest.mark.slow
def test_a_what_if_run_whose_process_ran_on_past_the_wait_is_recorded_incomplete(tmp_path: Path) -> None:
    """A what-if run's session is recorded as the run goes: a process still running after the wait
    has what it does later refused there (the session has ended), as at record time. Its end said
    nothing of it: a session that lacks that process's calls read as complete."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    store = str(tmp_path / "store")
    program = outliving_program(tmp_path, 0)
    rec = run([*FORKPOINT, "record", "--store", store, "--no-workspace", "--", *program], tmp_path, env)
    assert rec.returncode == 0 and "(0 model calls, 2 tool calls)" in rec.stderr, rec.stderr
    slower = outliving_program(tmp_path, 3)
    rep = run(
        [*IMPATIENT, "replay", "last", "--store", store, "--tools", "live", "--", *slower], tmp_path, env
    )
    assert rep.returncode == 1 and "still ran 0.5 s after the program ended" in rep.stderr, rep.stderr
    what_if = Session.load(list_sessions(store).rows[-1].path)
    assert what_if.header["parent"] and [e["tool"] for e in what_if.by_type("tool_call")] == ["double"]
    end = what_if.by_type("end")[0]
    assert "still ran 0.5 s after the program ended" in (end.get("incomplete") or ""), end


FORKS_THEN_EXECS = """
import os
import sys
import time

import forkpoint


@forkpoint.tool
def square(x: int) -> int:
    return x * x


print("before", square(2), flush=True)
if os.fork() == 0:  # (a sibling that waits for the program its parent becomes)
    deadline = time.monotonic() + 15
    while not os.path.exists("became") and time.monotonic() < deadline:
        time.sleep(0.01)
    print("sibling", square(5) if os.path.exists("became") else "gave up waiting", flush=True)
    os._exit(0)
os.execv(sys.executable, [sys.executable, "became.py"])
"""

BECAME = """
from pathlib import Path

import forkpoint


@forkpoint.tool
def double(x: int) -> int:
    return 2 * x


Path("became").touch()
print("became", double(3), flush=True)
"""


def test_a_program_that_forks_then_execs_starts_at_once(tmp_path: Path) -> None:
    """The program a process became through exec took the lock of ``alive-<pid>``, its pid's,
    waiting for it: a child forked before the exec held it, so the program did not start until
    that child ended (here, one that waited for it: both hung 15 s), or never for a daemon."""
    (tmp_path / "forks.py").write_text(FORKS_THEN_EXECS)
    (tmp_path / "became.py").write_text(BECAME)
    rec, store, env = record_here(tmp_path, "forks.py")
    assert rec.returncode == 0 and "(0 model calls, 3 tool calls)" in rec.stderr, rec.stderr
    assert sorted(rec.stdout.splitlines()) == ["became 6", "before 4", "sibling 25"], rec.stdout
    (tmp_path / "became").unlink()
    rep = run([*FORKPOINT, "replay", "last", "--store", store], tmp_path, env)
    assert rep.returncode == 0 and "replay ok: 3/3 events matched" in rep.stderr, rep.stderr
    assert sorted(rep.stdout.splitlines()) == ["became 6", "before 4", "sibling 25"], rep.stdout


@pytest.mark.slow
def test_a_process_started_during_the_wait_is_waited_for(tmp_path: Path) -> None:
    """The wait listed the processes to wait for once, as it began: a worker one of them started
    later, which went on after it, was not waited for, and its call was refused (the session had
    ended) with nothing said at record time: the session held one call of two, as complete."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    store = str(tmp_path / "store")
    (tmp_path / "hands_on.py").write_text(HANDS_ON)
    (tmp_path / "early.py").write_text(ENDS_FIRST)
    py = shlex.quote(sys.executable)
    program = ["sh", "-c", f"{py} hands_on.py & {py} early.py; touch ended"]
    rec = run([*FORKPOINT, "record", "--store", store, "--no-workspace", "--", *program], tmp_path, env)
    assert rec.returncode == 0 and "(0 model calls, 2 tool calls)" in rec.stderr, rec.stderr
    assert sorted(rec.stdout.splitlines()) == ["early 6", "late 16"]
    session = Session.load(next(p for p in Path(store).iterdir() if (p / LOG_NAME).exists()))
    assert [e["tool"] for e in session.by_type("tool_call")] == ["double", "square"]
    assert not session.by_type("end")[0].get("incomplete")
    for mark in ("ended", "started"):
        (tmp_path / mark).unlink()
    rep = run([*FORKPOINT, "replay", "last", "--store", store], tmp_path, env)
    assert rep.returncode == 0 and "replay ok: 2/2 events matched" in rep.stderr, rep.stderr


@pytest.mark.slow
@pytest.mark.parametrize("verb, sig", [("record", signal.SIGTERM), ("replay", signal.SIGINT)])
def test_a_signal_during_the_wait_ends_it_and_the_run_is_still_ended(
    tmp_path: Path, verb: str, sig: signal.Signals
) -> None:
    """SIGTERM or Ctrl-C sent to forkpoint while it waited for a process that outlived the program
    killed it there: a recording left without its end (unsigned, said to be still running), a
    replay without its verdict and its temporary folder left behind. The wait now ends at once,
    what still runs is named as when it ran on past the wait, and the run is ended as then."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir()
    store = str(tmp_path / "store")
    (tmp_path / "late.py").write_text(OUTLIVES)
    (tmp_path / "early.py").write_text(ENDS_FIRST)
    py = shlex.quote(sys.executable)
    program = [
        "sh",
        "-c",
        f"{py} late.py 30 > late.out 2>&1 & echo $! > late.pid; {py} early.py; touch ended",
    ]

    def stop_late() -> None:
        os.kill(int((tmp_path / "late.pid").read_text()), signal.SIGKILL)

    if verb == "replay":  # (recorded with a shorter wait, its straggler stopped: replayed below)
        rec = run([*IMPATIENT, "record", "--store", store, "--no-workspace", "--", *program], tmp_path, env)
        stop_late()
        assert rec.returncode == 0 and "still ran 0.5 s after" in rec.stderr, rec.stderr
        (tmp_path / "ended").unlink()
    args = ["record", "--store", store, "--no-workspace", "--", *program]
    args = args if verb == "record" else ["replay", "last", "--store", store]
    with open(tmp_path / "out", "wb") as out:
        proc = subprocess.Popen(
            [*FORKPOINT, *args], cwd=tmp_path, env=env, stdout=out, stderr=subprocess.PIPE
        )
    try:
        while not (tmp_path / "ended").exists() and proc.poll() is None:
            time.sleep(0.02)
        time.sleep(1)  # (forkpoint waits for late.py, 30 s long)
        proc.send_signal(sig)
        started = time.monotonic()
        said = proc.communicate(timeout=30)[1].decode()
        waited = time.monotonic() - started
    finally:
        proc.kill()
        proc.wait()
        stop_late()
    assert waited < 3, said  # (not the rest of the 5 s wait)
    late = f"still ran when forkpoint was sent {sig.name}, "
    assert re.search(
        rf"process \d+ \(or a process forked from it\) {late}[\d.]+ s after the program ended", said
    ), said
    assert not list((tmp_path / "tmp").iterdir())
    if verb == "record":
        assert proc.returncode == 0, said
        assert "what it does from now is not in the session" in said
        session = Session.load(next(p for p in Path(store).iterdir() if (p / LOG_NAME).exists()))
        assert f"still ran when forkpoint was sent {sig.name}" in session.by_type("end")[0]["incomplete"]
        v = run([*FORKPOINT, "verify", "--store", store, "last"], tmp_path, env)
        assert v.returncode == 0 and "verify ok: 2 events" in v.stdout and "signed by" in v.stdout, v.stdout
    else:
        assert proc.returncode == 1, said
        assert "its report is not in the verdict: the replay's verdict is unknown" in said
        assert "replay ok" not in said


WAITS_FOR_A_WORKER = """
import queue
import sys
import threading

import forkpoint


@forkpoint.tool
def square(x: int) -> int:
    return x * x


results: queue.Queue = queue.Queue()
threading.Thread(target=lambda: results.put(square(int(sys.argv[1]))), daemon=True).start()
print(results.get())
"""


@pytest.mark.slow
def test_a_program_that_waits_for_ever_on_a_worker_that_diverged_is_stopped(tmp_path: Path) -> None:
    """A worker (a thread, a process) diverged, and the program waited for its result for ever:
    the replay printed the divergence and never ended. It is stopped a few seconds after."""
    (tmp_path / "waits.py").write_text(WAITS_FOR_A_WORKER)
    rec, store, env = record_here(tmp_path, "waits.py", "3")
    assert rec.returncode == 0 and rec.stdout == "9\n", rec.stderr
    t0 = time.monotonic()
    rep = run(
        [*FORKPOINT, "replay", "last", "--store", store, "--", sys.executable, "waits.py", "4"],
        tmp_path,
        env,
        30,
    )
    assert time.monotonic() - t0 < 30
    assert rep.returncode == 3, rep.stderr
    said = flat(rep.stderr)
    assert (
        "the replay diverged, and the program has not ended 5 s later" in said and "replay DIVERGED" in said
    )


def test_a_spawned_worker_of_a_program_that_records_itself_is_said_not_to_be_recorded(
    store: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    import multiprocessing
    import time

    with forkpoint.record(store=store):
        worker = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
        worker.start()
        worker.join()
    said = " ".join(capfd.readouterr().err.split())
    assert "a multiprocessing worker started with 'spawn' or 'forkserver' is not recorded or replayed" in said


@pytest.mark.parametrize(
    "args",
    [
        ["show", "{s}", "--html", "{missing}/x.html"],
        ["export", "{s}", "--file", "{missing}/x.json"],
        ["replay", "{s}", "--report", "{missing}/r.json"],
        ["show", "{s}", "--html", "{folder}"],
    ],
    ids=["show-html", "export-file", "replay-report", "a-folder"],
)
def test_output_files_in_missing_folders_are_refused_up_front(
    recorded: Recorded, tmp_path: Path, args: list[str]
) -> None:
    missing = tmp_path / "no" / "such"
    values = {"s": str(recorded.alpha), "missing": str(missing), "folder": str(tmp_path)}
    r = cli(*(a.format(**values) for a in args))
    assert r.exit_code == 2, r.output
    out = flat(r.output)
    assert "does not exist" in out or "is a directory" in out or "it is a folder" in out
    assert "Traceback" not in r.output and not missing.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing half-written


@pytest.mark.parametrize(
    ("args", "target"),
    [
        (["show", "{s}", "--html"], "session.jsonl"),
        (["export", "{s}", "--file"], "session.jsonl"),
        (["check", "{s}", "--json"], "signature.json"),
        (["replay", "{s}", "--report"], "blobs/report.json"),
    ],
    ids=["show-html", "export-file", "check-json", "replay-report"],
)
def test_an_output_file_inside_a_session_folder_is_refused(store: Path, args: list[str], target: str) -> None:
    """`forkpoint show last --html .forkpoint/ID/session.jsonl` (a slip of the shell's completion)
    replaced the session's log with the page: the session was gone. A session folder is never
    written into; a project's own file named session.jsonl is no session and stops nothing."""
    with forkpoint.record(store=store) as rec:
        forkpoint.note("x")
    (rec.session_path / "blobs").mkdir(exist_ok=True)
    before = {p: p.read_bytes() for p in rec.session_path.rglob("*") if p.is_file()}
    out = rec.session_path / target
    r = cli(*(a.format(s=str(rec.session_path)) for a in args), str(out))
    assert r.exit_code == 2, r.output
    said = flat(r.output)
    assert f"cannot write {out}: it is inside the session folder {rec.session_path.resolve()}" in said, said
    assert {p: p.read_bytes() for p in rec.session_path.rglob("*") if p.is_file()} == before
    project = store.parent / "project"
    project.mkdir()
    (project / LOG_NAME).write_text('{"event": "a log of the project\'s own"}\n')
    page = project / "page.html"
    assert cli("show", str(rec.session_path), "--html", str(page)).exit_code == 0 and page.exists()
    # A session's log copied to a project's root: its reports/ is no part of the session (refused).
    (project / LOG_NAME).write_bytes((rec.session_path / LOG_NAME).read_bytes())
    (project / "reports").mkdir()
    page = project / "reports" / "page.html"
    r = cli("show", str(rec.session_path), "--html", str(page))
    assert r.exit_code == 0 and page.exists(), r.output


@pytest.mark.parametrize("into", ["r", "a/b", "blobs/x"])
def test_a_folder_restore_fork_or_sweep_fills_inside_a_session_folder_is_refused(
    tmp_path: Path, into: str
) -> None:
    """`restore SESSION@SEQ --into .forkpoint/ID/r` restored the workspace into the session's folder
    (fork and sweep their arms), where verify then named it as no part of the session; output files
    there were already refused."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "agent.py").write_text("print(1)\n")
    with forkpoint.record(store=tmp_path / "store", workspace=work) as rec:
        seq = forkpoint.checkpoint()
    (rec.session_path / "blobs").mkdir(exist_ok=True)
    before = sorted(rec.session_path.rglob("*"))
    target = rec.session_path / into
    for args in (
        ["restore", f"{rec.session_path}@{seq}", "--into", str(target)],
        ["fork", f"{rec.session_path}@{seq}", "--into", str(target), "--", sys.executable, "agent.py"],
        [
            "sweep",
            str(rec.session_path),
            "--outcome",
            "true",
            "--into",
            str(target),
            "--",
            sys.executable,
            "agent.py",
        ],
    ):
        r = cli(*args)
        assert r.exit_code == 2, (args, r.output)
        said = flat(r.output)
        assert (
            f"cannot write {target}: it is inside the session folder {rec.session_path.resolve()}" in said
        ), said
        assert sorted(rec.session_path.rglob("*")) == before


def test_sweep_refuses_one_file_for_both_html_and_json(tmp_path: Path) -> None:
    """`sweep --html F --json F` ran every arm, then wrote the page over the JSON it had just
    written: one of the two outputs asked for was lost, without a word."""
    both = tmp_path / "sweep.out"
    r = cli("sweep", "last", "--store", str(tmp_path / "store"), "--outcome", "true",
            "--html", str(both), "--json", str(both), "--", sys.executable, "agent.py")  # fmt: skip
    assert r.exit_code == 2, r.output
    assert f"--html and --json name the same file, {both}" in flat(r.output), r.output
    assert not both.exists()


def test_record_of_a_command_that_does_not_exist_leaves_no_session(tmp_path: Path) -> None:
    store = tmp_path / "store"
    r = CliRunner().invoke(main, ["record", "--store", str(store), "--", "no-such-agent-command", "x"])
    assert r.exit_code == 127 and "command not found: no-such-agent-command" in flat(r.output)
    assert not store.exists() or not any(store.iterdir())


BAD_NAMES = [
    ("", "is empty"),
    ("   ", "is empty"),
    (" agent", "starts or ends with a space"),
    ("a\x01b", "has a control character"),
    ("a\nb", "has a control character"),
    ("-x", "starts with '-'"),
    ("last", "is the word for the newest session"),
]


@pytest.mark.parametrize(("name", "why"), BAD_NAMES)
def test_record_refuses_a_session_name_no_one_could_name_it_by(tmp_path: Path, name: str, why: str) -> None:
    """``--name ''`` (and names of spaces, with control characters, starting with '-', or ``last``,
    which ``forkpoint replay last`` takes for the newest session) were accepted, and the session
    could not be named by it. Refused before the program runs, naming the option and what a name may
    be; so are ``forkpoint import --name`` and ``forkpoint.record(name=…)``."""
    store, ran = tmp_path / "store", tmp_path / "ran"
    agent = tmp_path / "agent.py"
    agent.write_text(f"open({str(ran)!r}, 'w').close()\n")
    r = CliRunner().invoke(
        main, ["record", "--store", str(store), "--name", name, "--", sys.executable, str(agent)]
    )
    said = flat(r.output)
    assert r.exit_code == 2, r.output
    assert flat(f"Invalid value for '--name': {name!r} {why}") in said, said
    assert "a session name is what" in said and "not 'last'" in said, said
    assert not ran.exists() and (not store.exists() or not any(store.iterdir()))
    cassette = tmp_path / "c.yaml"
    cassette.write_text("interactions: []\nversion: 1\n")
    r = CliRunner().invoke(main, ["import", str(cassette), "--store", str(store), "--name", name])
    assert r.exit_code == 2 and flat(f"Invalid value for '--name': {name!r} {why}") in flat(r.output), (
        r.output
    )
    with pytest.raises(
        forkpoint.errors.UsageError, match=rf"forkpoint.record\(name=…\): {re.escape(repr(name))} {why}"
    ):
        with forkpoint.record(name, store=store):
            pass
    assert not store.exists() or not any(store.iterdir())


@pytest.mark.parametrize("threads", [1, 2])
def test_replay_of_a_command_that_does_not_exist_says_nothing_was_replayed(
    recorded: Recorded, threads: int
) -> None:
    """The command after -- not found: the replay said it, then that the replayed process "wrote
    no report: it did not start forkpoint (is forkpoint installed in its environment?)", of a
    process that never existed. With a second thread running, a replay in a network namespace
    starts the command through a launcher (forkpoint.netns), which finds it missing itself."""
    r = replay_with_threads(recorded, threads, "no-such-agent-command", "x")
    said = flat(r.output)
    assert r.exit_code == 127, r.output
    assert "nothing was replayed: the command no-such-agent-command was not found" in said, said
    assert "wrote no report" not in said and "is forkpoint installed" not in said, said


def replay_with_threads(recorded: Recorded, threads: int, *cmd: str) -> Any:
    """``forkpoint replay ALPHA -- CMD`` with ``threads`` threads running in this process (more
    than one: the network namespace's launcher starts the command, :mod:`forkpoint.netns`)."""
    stop = threading.Event()
    others = [threading.Thread(target=stop.wait) for _ in range(threads - 1)]
    for t in others:
        t.start()
    try:
        return cli("replay", str(recorded.alpha), "--", *cmd)
    finally:
        stop.set()
        for t in others:
            t.join()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(
    ("kind", "code", "why"),
    [
        ("interpreter", 127, "names an interpreter that was not found: #!/no/such/python"),
        (
            "crlf",
            127,
            "names an interpreter that was not found: #!/bin/sh followed by a carriage return (the file has "
            "Windows line endings, CRLF)",
        ),
        ("not-executable", 126, "could not be run: Permission denied"),
        ("folder", 126, "is a directory"),
        (
            "no-shebang",
            126,
            "could not be run: it has no #! line naming its interpreter (run it through one: sh ",
        ),
    ],
)
def test_replay_of_a_command_that_is_there_but_cannot_run_says_why(
    recorded: Recorded, tmp_path: Path, threads: int, kind: str, code: int, why: str
) -> None:
    """A script whose #! interpreter is missing was said "command not found" (the kernel's ENOENT),
    sending the user after a file that is there; one not executable, or a folder, ended the replay
    in click's "Error: …: Permission denied" and exit code 1 (through the launcher: "wrote no
    report … is forkpoint installed"). A script saved with Windows line endings names "/bin/sh\r",
    which was said as "#!/bin/sh", an interpreter that is there."""
    program = tmp_path / kind
    if kind == "folder":
        program.mkdir()
    elif kind == "crlf":
        program.write_bytes(b"#!/bin/sh\r\necho ran\r\n")
        program.chmod(0o755)
    elif kind == "no-shebang":  # a shell runs it with sh; exec said only "Exec format error"
        program.write_text("echo ran\n")
        program.chmod(0o755)
    else:
        program.write_text("#!/no/such/python\nprint(1)\n")
        program.chmod(0o755 if kind == "interpreter" else 0o644)
    r = replay_with_threads(recorded, threads, str(program))
    said = flat(r.output)
    assert r.exit_code == code, r.output
    assert f"nothing was replayed: the command {program} {why}" in said, said
    assert "not found: " + str(program) not in said and "wrote no report" not in said, said


def test_check_given_a_command_without_dashes_says_it_goes_after_them(recorded: Recorded) -> None:
    """``forkpoint check SESSION python agent.py`` read every word as a session and said only
    "no session 'python'", as if a session were missing; ``replay`` takes the same words as its
    command. A word that is a command here, and no session, is said to go after --."""
    r = cli("check", str(recorded.alpha), sys.executable, "agent_script.py")
    said = flat(r.output)
    assert r.exit_code == 1, r.output
    assert f"no session {sys.executable!r}" in said, said
    assert (
        f"{sys.executable!r} is a command here: the command to run goes after --, as in forkpoint check "
        f"{recorded.alpha} -- {sys.executable} agent_script.py"
    ) in said, said
    # Shown as a shell takes it: pasted, 'python my agent.py' ran my with agent.py.
    r = cli("check", str(recorded.alpha), sys.executable, "my agent.py")
    assert f"-- {shlex.join([sys.executable, 'my agent.py'])}" in flat(r.output), r.output
    # A word that is no command here gets no such note.
    r = cli("check", "no-such-session-here")
    assert "is a command here" not in flat(r.output), r.output


def test_replay_elsewhere_of_a_relative_command_not_found_says_where_it_was_recorded(tmp_path: Path) -> None:
    """A session of ``./agent.sh`` replayed from another directory: "nothing was replayed: the
    command ./agent.sh was not found", without the note every other failed replay from elsewhere
    gives, that the session was recorded in another directory."""
    here, elsewhere, store = tmp_path / "here", tmp_path / "elsewhere", tmp_path / "store"
    here.mkdir()
    elsewhere.mkdir()
    (here / "agent.sh").write_text("#!/bin/sh\necho ran\n")
    (here / "agent.sh").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    rec = run([*FORKPOINT, "record", "--store", str(store), "--no-workspace", "--", "./agent.sh"], here, env)
    assert rec.returncode == 0, rec.stderr
    r = run([*FORKPOINT, "replay", "--store", str(store), "last"], elsewhere, env)
    said = flat(r.stderr)
    assert r.returncode == 127, said
    assert (
        f"nothing was replayed: the command ./agent.sh was not found (the session was recorded in {here}, "
        f"this replay ran in {elsewhere}: replay from there, or give the command after --)"
    ) in said, said


@pytest.mark.parametrize(
    ("kind", "code", "why"),
    [
        ("not-executable", 126, "is not executable"),
        ("folder", 126, "is a directory"),
        ("loop", 126, "is a symbolic link in a loop of them"),
        ("dangling", 127, "is a symbolic link to nothing-here, which does not exist"),
        ("no-shebang", 126, "could not be run: it has no #! line naming its interpreter"),
        ("interpreter", 127, "names an interpreter that was not found: #!/no/such/python"),
    ],
)
def test_record_of_a_command_that_cannot_run_says_why(
    tmp_path: Path, kind: str, code: int, why: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """A path that is there but which() refuses was said "command not found" (a symbolic link to
    itself, or to nothing, among them: the link is there). One which() takes that exec refuses (no
    #! line, an interpreter not there) left an empty session as `last`, said to have run "no Python
    that started forkpoint"."""
    program = tmp_path / kind
    if kind == "folder":
        program.mkdir()
    elif kind in ("loop", "dangling"):
        program.symlink_to(kind if kind == "loop" else "nothing-here")
    elif kind in ("no-shebang", "interpreter"):
        program.write_text("print(1)\n" if kind == "no-shebang" else "#!/no/such/python\nprint(1)\n")
        program.chmod(0o755)
    else:
        program.write_text("print(1)\n")
    store = tmp_path / "store"
    r = CliRunner().invoke(main, ["record", "--store", str(store), "--", str(program)])
    said = flat(r.output + capfd.readouterr().err)
    assert r.exit_code == code and f"the command {program} {why}" in said, said
    assert "no process of the command recorded anything" not in said, said
    assert not list(store.glob("*/session.jsonl")), list(store.iterdir())


GATHER = """
import asyncio
import sys
from pathlib import Path

import forkpoint

COUNTER = Path(sys.argv[1])


@forkpoint.tool
async def work(item):
    n = int(COUNTER.read_text()) + 1 if COUNTER.exists() else 1
    COUNTER.write_text(str(n))
    await asyncio.sleep(0.05 * (3 - n) if n <= 3 else 0)  # the first started finishes last
    return n


async def main(times):
    print(*await asyncio.gather(*(work("a") for _ in range(times))))


asyncio.run(main(int(sys.argv[2])))
"""


@pytest.mark.slow
def test_concurrent_identical_calls_keep_their_order_when_another_program_made_the_same_call(
    tmp_path: Path,
) -> None:
    """Start order (``sent``) counts within each process: a second program making the same call
    must not make the first program's concurrent identical calls fall back to finish order."""
    (tmp_path / "gather.py").write_text(GATHER)
    counter = tmp_path / "counter"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    py = shlex.quote(sys.executable)
    script = f"{py} gather.py {counter} 3 && {py} gather.py {counter} 1"
    store = str(tmp_path / "store")
    rec = run([*FORKPOINT, "record", "--store", store, "--", "sh", "-c", script], tmp_path, env)
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout.split("\n")[:2] == ["1 2 3", "4"]
    rep = run([*FORKPOINT, "replay", "last", "--store", store], tmp_path, env)
    assert rep.returncode == 0, rep.stderr
    assert rep.stdout == rec.stdout


def test_the_summary_line_tells_model_calls_from_other_http_calls(tmp_path: Path, server: Any) -> None:
    """Telemetry uploads and plain HTTP calls were counted as model calls ("5 model calls" for 2);
    the other calls are counted by kind."""
    from tests.modelserver import json_reply

    server.route("/api/status", lambda r: json_reply({"ok": True}), method="GET")
    (tmp_path / "mix.py").write_text(
        textwrap.dedent(
            f"""
            import httpx, openai
            client = openai.OpenAI(base_url="{server.url}/v1", api_key="sk-proj-" + "a" * 40, max_retries=0)
            client.chat.completions.create(model="m", messages=[{{"role": "user", "content": "hi"}}])
            httpx.get("{server.url}/api/status")
            httpx.get("{server.url}/api/status")
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    rec = run(
        [
            *FORKPOINT,
            "record",
            "--store",
            str(tmp_path / "s"),
            "--no-workspace",
            "--",
            sys.executable,
            "mix.py",
        ],
        tmp_path,
        env,
    )
    assert rec.returncode == 0, rec.stderr
    # (by kind: "telemetry, MCP, plain HTTP" was fixed text, whatever the calls were)
    assert "(1 model call, 0 tool calls, 2 other HTTP calls: 2 plain HTTP)" in rec.stderr, rec.stderr
    # `ls` said 3 in its model column: it counts model_call events, and reads none of them.
    listing = run([*FORKPOINT, "ls", "--store", str(tmp_path / "s")], tmp_path, env)
    header, row = listing.stdout.splitlines()[:2]
    at = header.index("model")
    assert row[at : header.index("tool")].strip() == "1", listing.stdout
    # A what-if of it is a session of its own, written by no single recorder: counted alike.
    whatif = run(
        [*FORKPOINT, "replay", "last", "--store", str(tmp_path / "s"), "--override", 'model#1.text="x"'],
        tmp_path,
        env,
    )
    assert whatif.returncode == 0, whatif.stderr
    listing = run([*FORKPOINT, "ls", "--store", str(tmp_path / "s")], tmp_path, env)
    header, *rows = listing.stdout.splitlines()
    column = slice(header.index("model"), header.index("tool"))
    assert [r[column].strip() for r in rows] == ["1", "1"], listing.stdout


KEYS_SCRIPT = """
import os
from pathlib import Path

import forkpoint
from forkpoint.replay import API_KEY_VARS


@forkpoint.tool
def keys():
    return [k for k in API_KEY_VARS if os.environ.get(k)]


if Path("dotenv.txt").exists():  # (as python-dotenv would: a key the environment did not have)
    os.environ["OPENAI_API_KEY"] = Path("dotenv.txt").read_text().strip()
print("keys:", [k for k in API_KEY_VARS if os.environ.get(k)], keys())
"""


def test_a_replay_sets_placeholder_keys_only_for_the_variables_the_recording_had(tmp_path: Path) -> None:
    """A replay set every provider's API-key variable to a placeholder: a program that picks its
    provider by which key is set took another branch and diverged (and google-genai warned that two
    of its keys were set). Only the variables the recording had get one, those the program set
    while it ran (from a .env file) included."""
    from forkpoint.replay import API_KEY_VARS

    (tmp_path / "keys.py").write_text(KEYS_SCRIPT)
    (tmp_path / "dotenv.txt").write_text("sk-from-dotenv-file\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_") and k not in API_KEY_VARS}
    store = str(tmp_path / "store")
    recorded = run(
        [*FORKPOINT, "record", "--store", store, "--no-workspace", "--", sys.executable, "keys.py"],
        tmp_path,
        env,
    )
    assert recorded.returncode == 0, recorded.stderr
    assert "keys: ['OPENAI_API_KEY'] ['OPENAI_API_KEY']" in recorded.stdout
    (tmp_path / "dotenv.txt").unlink()  # not on the machine that replays
    replayed = run([*FORKPOINT, "replay", "last", "--store", store], tmp_path, env)
    assert replayed.returncode == 0, replayed.stderr
    assert "keys: ['OPENAI_API_KEY'] ['OPENAI_API_KEY']" in replayed.stdout, replayed.stdout
    # In Python, the same; and the placeholder is gone after the block.
    session = Session.load(next(p for p in Path(store).iterdir() if (p / LOG_NAME).is_file()))
    assert session.header["api_keys"] == [] and [n["data"] for n in session.by_type("note")] == [
        {"api_keys": ["OPENAI_API_KEY"]}
    ]
    saved = {k: os.environ.pop(k) for k in API_KEY_VARS if k in os.environ}
    try:
        with forkpoint.replay(session):
            assert [k for k in API_KEY_VARS if os.environ.get(k)] == ["OPENAI_API_KEY"]
        assert not any(os.environ.get(k) for k in API_KEY_VARS)
    finally:
        os.environ.update(saved)


def test_show_lists_a_tool_run_inside_a_stream_after_the_model_call_that_asked_for_it(tmp_path: Path) -> None:
    """A tool the program ran while still reading a streamed answer ends, so is written, before the
    model call: show listed it first, under the turn before, with the next turn's tool under it."""
    from tests.views.streamed import record_tool_inside_stream

    path = record_tool_inside_stream(tmp_path)
    events = Session.load(path).events
    assert [e["type"] for e in events[:4]] == ["tool_call", "model_call", "tool_call", "model_call"]
    r = cli("show", str(path))
    assert r.exit_code == 0, r.output
    rows = [line.split() for line in r.output.splitlines() if " model " in line or " tool " in line]
    kinds = [("model" if "model" in row else "tool") for row in rows]
    assert kinds == ["model", "tool", "model", "tool"], r.output
    assert "turn  1 #2" in r.output and "turn  2 #4" in r.output
    assert r.output.index("lookup(q=q1)") < r.output.index("turn  2") < r.output.index("lookup(q=q2)")


def test_a_python_program_the_recorded_one_starts_is_said_and_the_replay_is_incomplete(
    tmp_path: Path,
) -> None:
    """The recorded program's Python subprocess is not recorded (its activation is taken out of the
    environment); it said nothing, and the replay said "replay ok" while it ran live again. The
    recording names it, ``show`` prints the note, and the replay's verdict is "ok, but incomplete",
    naming it."""
    (tmp_path / "starts.py").write_text(
        "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'print(41 + 1)'], check=True)\n"
    )
    rec, store, env = record_here(tmp_path, "starts.py")
    assert rec.returncode == 0 and rec.stdout.split() == ["42"], rec.stderr
    said = flat(rec.stderr)
    assert (
        f"started 1 Python program forkpoint does not record ({sys.executable} -c print(41 + 1))" in said
    ), said
    shown = run([*FORKPOINT, "show", "last", "--store", store], tmp_path, env)
    assert f"Python programs forkpoint did not record: {sys.executable} -c print(41 + 1)" in flat(
        shown.stdout
    )
    rep = run([*FORKPOINT, "replay", "last", "--store", store], tmp_path, env)
    assert rep.returncode == 0 and rep.stdout.split() == ["42"], rep.stderr
    said = flat(rep.stderr)
    assert "replay ok, but incomplete" in said, said
    assert (
        f"the recording started 1 Python program it did not record, which ran again as without forkpoint: {sys.executable} -c print(41 + 1)"
        in said
    )


def test_a_what_if_run_names_the_python_programs_it_started_in_its_session(tmp_path: Path) -> None:
    """`forkpoint replay --tools live` records its run as a what-if session; the Python program the
    run started was noted only under a recorder, so that session lacked the note, and its own
    replay said "replay ok" while the program ran again live."""
    (tmp_path / "starts.py").write_text(
        "import subprocess, sys\nimport forkpoint\n\n\n@forkpoint.tool\ndef lookup(q: str) -> str:\n"
        "    return q\n\n\nlookup('a')\nsubprocess.run([sys.executable, '-c', 'pass'], check=True)\n"
    )
    rec, store, env = record_here(tmp_path, "starts.py")
    assert rec.returncode == 0, rec.stderr
    what_if = run([*FORKPOINT, "replay", "last", "--store", store, "--tools", "live"], tmp_path, env)
    assert what_if.returncode == 0, what_if.stderr
    child = flat(what_if.stderr).split("this run was recorded as ")[1].split()[0].rstrip(".;")
    shown = run([*FORKPOINT, "show", child, "--store", store], tmp_path, env)
    assert f"Python programs forkpoint did not record: {sys.executable} -c pass" in flat(shown.stdout), (
        shown.stdout
    )


@pytest.mark.slow
def test_a_what_if_without_the_api_key_does_not_go_live_with_the_placeholder(
    tmp_path: Path, server: LocalServer
) -> None:
    """A replay without the recording's OPENAI_API_KEY sets a placeholder so that the SDK starts;
    under --on-divergence live the diverging call went upstream with ``Bearer
    forkpoint-replay-no-key`` (a real provider's 401, taken for the model's answer) and the replay
    exited with the program's code as if the what-if had run. Now it is not sent, the verdict says
    which key is missing, and the replay exits 3."""
    (tmp_path / "agent.py").write_text(
        "import sys\nimport openai\n\n"
        f"client = openai.OpenAI(base_url={server.openai_base_url!r}, max_retries=0)\n"
        "reply = client.chat.completions.create(model='m', messages=[{'role': 'user', 'content': sys.argv[1]}])\n"
        "print(reply.choices[0].message.content)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    store = str(tmp_path / "store")
    cmd = [*FORKPOINT, "record", "--store", store, "--no-workspace", "--", sys.executable, "agent.py", "hi"]
    rec = run(cmd, tmp_path, {**env, "OPENAI_API_KEY": "sk-proj-" + "A" * 40})
    assert rec.returncode == 0, rec.stderr
    env.pop("OPENAI_API_KEY", None)
    what_if = [*FORKPOINT, "replay", "last", "--store", store, "--on-divergence", "live"]
    rep = run([*what_if, "--", sys.executable, "agent.py", "changed"], tmp_path, env)
    assert len(server.requests) == 1, [r["headers"].get("authorization") for r in server.requests]
    assert rep.returncode == 3, rep.stderr
    said = flat(rep.stderr)
    assert "(not sent: authorization carried the placeholder key set for OPENAI_API_KEY)" in said, said


def test_a_credential_given_to_the_command_as_an_option_is_not_stored(tmp_path: Path) -> None:
    """``forkpoint record -- python agent.py --token VALUE`` stored VALUE in the session's header
    (and the store's index, and ``ls``) as it was: no pattern of a secret's text finds a token of
    no known shape. The value of an option whose name says it carries a credential is kept as a
    placeholder, said at record time; a replay given the command passes the real one."""
    secret, other = "k8s-Zq1wV9xT", "hunter2hunter2"
    (tmp_path / "agent.py").write_text("import sys\nprint(sys.argv[1:])\n")
    args = [
        "agent.py",
        "--token",
        secret,
        f"--db-password={other}",
        "--max-tokens",
        "100",
        "--no-password",
        "x",
    ]
    rec, store, env = record_here(tmp_path, *args)
    assert rec.returncode == 0, rec.stderr
    said = flat(rec.stderr)
    assert "the values of --token, --db-password in the command are kept as placeholders" in said, said
    assert "--max-tokens" not in said
    for path in (tmp_path / "store").rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert secret.encode() not in data and other.encode() not in data, path
    header = Session.load(next((tmp_path / "store").glob(f"*/{LOG_NAME}")).parent).header
    argv = header["argv"][1:]
    assert argv[:2] == ["agent.py", "--token"] and argv[2].startswith("[REDACTED:secret-option:")
    assert argv[3].startswith("--db-password=[REDACTED:secret-option:")
    assert argv[4:] == ["--max-tokens", "100", "--no-password", "x"]
    listed = run([*FORKPOINT, "ls", "--store", store], tmp_path, env)
    assert secret not in listed.stdout and "--max-tokens 100" in flat(listed.stdout)
    rep = run([*FORKPOINT, "replay", "last", "--store", store, "--", sys.executable, *args], tmp_path, env)
    assert rep.returncode == 0, rep.stderr
    assert secret in rep.stdout


def test_a_credential_options_value_with_an_equals_sign_is_said(monkeypatch: pytest.MonkeyPatch) -> None:
    """A base64 token ends in ``=`` (``--token dGVzdA==``): its value was kept as a placeholder but
    not said at record time (an argument with ``=`` was read as an ``--option=VALUE`` of its own), so
    a replay of the recorded command passed the placeholder with no word of it."""
    from forkpoint import orchestrate

    said: list[str] = []
    monkeypatch.setattr(orchestrate, "say", said.append)
    orchestrate._say_secret_options(["python", "agent.py", "--token", "dGVzdA==", "--db-password=a=b"], "S")
    assert len(said) == 1 and "the values of --token, --db-password in the command" in said[0], said


@pytest.mark.slow
def test_a_forkpoint_record_recorded_by_another_says_so_and_its_replay_refuses_to_run_it(
    tmp_path: Path,
) -> None:
    """``forkpoint record -- forkpoint record -- python agent.py``: the inner one records the run, the
    outer session gets no call, and nothing said so. Replaying the outer one ran the inner forkpoint
    record, which ran the agent live (its tools too) and recorded a new session, under "replay ok:
    0/0". The inner one now says so while recording, and in a replay it does not run."""
    (tmp_path / "agent.py").write_text(
        QUOTE_AGENT.replace("    return", "    open('ran', 'a').write('x')\n    return")
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    store = str(tmp_path / "store")
    inner = [
        *FORKPOINT,
        "record",
        "--store",
        store,
        "--no-workspace",
        "--",
        sys.executable,
        "agent.py",
        "a b",
    ]
    rec = run([*FORKPOINT, "record", "--store", store, "--no-workspace", "--", *inner], tmp_path, env)
    assert rec.returncode == 0 and rec.stdout.split() == ["101"], rec.stderr
    said = flat(rec.stderr)
    assert "this forkpoint record runs inside another one" in said and "gets none of its calls" in said, said
    assert f"records `{sys.executable} agent.py 'a b'` in a session of its own" in said, said  # (as typed)
    sessions = list_sessions(store).rows
    (outer,) = [s for s in sessions if "record" in s.header["argv"]]
    (tmp_path / "ran").unlink()

    rep = run([*FORKPOINT, "replay", str(outer.path)], tmp_path, env)
    said = flat(rep.stderr)
    assert rep.returncode == 1 and "replay ok" not in said, said
    assert "which would run" in said and "live and record it in a new session" in said, said
    assert not (tmp_path / "ran").exists()  # (no tool ran live)
    assert len(list_sessions(store).rows) == len(sessions)  # (no new session was recorded)


def test_show_keeps_the_spaces_inside_a_tool_calls_arguments() -> None:
    """``show`` printed ``write_file({"content": "def add(a, b):\\n return a + b\\n"})`` for
    arguments whose code was indented by four spaces: one line looked like the model's JSON and was
    not (every run of spaces made one). Line breaks become a space; other spaces stay."""
    from forkpoint.show import _short

    arguments = '{"path": "calc.py", "content": "def add(a, b):\\n    return a + b\\n"}'
    assert _short(arguments, 200) == arguments
    assert _short("The tests\n   pass now.\n", 200) == "The tests pass now."
    assert _short({"content": "    x"}, 200) == '{"content":"    x"}'


@pytest.mark.parametrize("columns", ["80", "120"])
def test_no_help_breaks_a_name_across_lines(columns: str) -> None:
    """``record --help`` gave the mini-swe-agent example as a module path longer than the help
    column, and click broke it inside the name: ``mini sweagent.environments.local:LocalEnvironment.
    execute=bash``, which a user copied wrong."""
    out = CliRunner().invoke(main, ["record", "--help"], env={"COLUMNS": columns}).output
    assert "LocalEnvironment.execute=bash" in " ".join(out.split()), out
    assert "mini sweagent" not in " ".join(out.split()), out


@pytest.mark.parametrize("command", ["check", "fork", "sweep"])
def test_the_outcome_timeouts_default_reads_as_a_default(command: str) -> None:
    """click puts a string default in parentheses: ``--outcome-timeout``'s help said
    ``[default: (600 s); x>=0.001]``."""
    out = " ".join(CliRunner().invoke(main, [command, "--help"], env={"COLUMNS": "120"}).output.split())
    assert "[default: (" not in out, out
    assert "(it then counts as a failure; default: 600 s)" in out, out


@pytest.mark.parametrize("workspace", [[], ["--no-workspace"]])
def test_a_removed_current_directory_is_said_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workspace: list[str]
) -> None:
    """A shell left in a folder that was removed since (a checkout, an rm -rf): forkpoint record
    died with a traceback, FileNotFoundError from os.getcwd(), naming no file."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    res = CliRunner().invoke(main, ["record", *workspace, "--store", str(tmp_path / "s"), "--", "true"])
    assert res.exit_code == 1, res.output
    assert "the current directory no longer exists" in res.output, res.output
    assert not (tmp_path / "s").exists()
