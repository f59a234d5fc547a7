"""Replayable checkpoints on real git repositories: take, restore, validate, fork.

Agents here are real: a small hand-written tool loop on the ``openai`` SDK (tools decorated with
``@forkpoint.tool``) against the tests' local server answering from a script (``chat_script``: it
can ask for two tool calls in one response, which the demo server never does), and the bundled demo
agent against ``forkpoint.demo.server.ModelServer`` for the end-to-end fork through the CLI.
"""

from __future__ import annotations

import collections
import json
import os
import random
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
from click.testing import CliRunner

import forkpoint
from forkpoint.canonical import digest, sha256_hex
from forkpoint.checkpoint import (
    META_DIR,
    CheckpointError,
    Workspace,
    checkpoint_event,
    manifest_rows,
    patch_bytes,
    referenced_paths,
    restore,
    untracked_files,
    validate,
    verify_session,
)
from forkpoint.checkpoint.source import SourceTracker
from forkpoint.cli import main
from forkpoint.demo.server import ModelServer
from forkpoint.errors import UsageError
from forkpoint.html import view_model
from forkpoint.log import BlobStore, Session, SessionWriter, line_hash
from forkpoint.orchestrate import fork_arms
from forkpoint.record import make_header
from forkpoint.store import session_dirs
from tests.logutil import growing_workspace_session, stored_lines
from tests.modelserver import LocalServer

# --------------------------------------------------------------------------- git helpers

GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Test",
    "GIT_AUTHOR_EMAIL": "test@example.com",
    "GIT_COMMITTER_NAME": "Test",
    "GIT_COMMITTER_EMAIL": "test@example.com",
}


@pytest.fixture(autouse=True)
def clean_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME without git config, no system config, and a cwd outside the project's repository."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    monkeypatch.delenv("FORKPOINT_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    return home


def sh_git(repo: Path, *args: str, check: bool = True) -> str:
    """Run the *user's* git (their config, as HOME says) in ``repo``."""
    env = {**os.environ, **GIT_IDENTITY, "GIT_OPTIONAL_LOCKS": "0"}
    proc = subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"git {args} failed: {proc.stderr.decode()}")
    return proc.stdout.decode("utf-8", "surrogateescape")


def make_repo(path: Path, files: dict[str, bytes | str]) -> Path:
    path.mkdir(parents=True)
    sh_git(path, "init", "-q", "-b", "main")
    for rel, data in files.items():
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data.encode() if isinstance(data, str) else data)
    sh_git(path, "add", "-A")
    sh_git(path, "commit", "-q", "-m", "base")
    return path


def status(repo: Path) -> str:
    return sh_git(repo, "-c", "core.quotepath=false", "status", "--porcelain", "--untracked-files=all")


def tree_snapshot(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every file and symlink under ``root`` except git's and forkpoint's folders: kind, mode, bytes
    (a symlink's target)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames if d not in (".git", META_DIR)]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            full = os.path.join(dirpath, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("symlink", 0, os.readlink(full).encode())
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), Path(full).read_bytes())
    return out


def git_dir_snapshot(repo: Path) -> dict[str, Any]:
    """What would show that something wrote into ``repo/.git``."""
    files = {}
    for dirpath, _dirnames, filenames in os.walk(repo / ".git"):
        for name in filenames:
            full = Path(dirpath, name)
            st = full.lstat()
            files[str(full.relative_to(repo))] = (st.st_size, st.st_mtime_ns)
    objects = sorted(p for p in files if p.startswith(".git/objects/"))
    return {
        "files": files,
        "objects": objects,
        "head": (repo / ".git" / "HEAD").read_text(),
        "index_mtime": (repo / ".git" / "index").stat().st_mtime_ns,
    }


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def checks_by_name(root: Path) -> dict[str, Any]:
    return {c.name: c for c in validate(root)}


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


# --------------------------------------------------------------------------- a small coding agent

_WORKDIR: list[Path] = []


def _here() -> Path:
    return _WORKDIR[-1]


@forkpoint.tool
def cp_write_file(path: str, content: str) -> dict[str, Any]:
    """Write a text file under the working directory."""
    target = _here() / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(content)
    return {"path": path, "bytes": len(content.encode())}


@forkpoint.tool
def cp_run_python(path: str) -> dict[str, Any]:
    """Run a Python file in the working directory (no bytecode files) and return its output."""
    proc = subprocess.run(
        [sys.executable, "-B", path], cwd=_here(), capture_output=True, text=True, timeout=30
    )
    return {"path": path, "returncode": proc.returncode, "output": (proc.stdout + proc.stderr)[-500:]}


TOOLS = {"cp_write_file": cp_write_file, "cp_run_python": cp_run_python}
TOOL_SPECS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": fn.__doc__,
            "parameters": {"type": "object", "properties": {}, "additionalProperties": True},
        },
    }
    for name, fn in TOOLS.items()
]


def run_agent(base_url: str, workdir: Path, task: str = "Fix add() in calc.py.") -> str:
    """A plain tool loop: every tool call the model asks for runs, its result goes back."""
    client = openai.OpenAI(base_url=base_url, api_key="sk-test-not-real", max_retries=0)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": task},
    ]
    _WORKDIR.append(workdir)
    try:
        for _ in range(10):
            msg = (
                client.chat.completions.create(model="m", messages=messages, tools=TOOL_SPECS)
                .choices[0]
                .message
            )  # type: ignore[arg-type]
            entry: dict[str, Any] = {"role": "assistant", "content": msg.content}
            calls = [c for c in msg.tool_calls or [] if c.type == "function"]
            if calls:
                entry["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.function.name, "arguments": c.function.arguments},
                    }
                    for c in calls
                ]
            messages.append(entry)
            if not calls:
                return msg.content or ""
            for c in calls:
                result = TOOLS[c.function.name](**json.loads(c.function.arguments))
                messages.append({"role": "tool", "tool_call_id": c.id, "content": json.dumps(result)})
    finally:
        _WORKDIR.pop()
        client.close()
    raise AssertionError("no final answer")


CALC_BUGGY = "def add(a, b):\n    return a - b\n"
CALC_FIXED = "def add(a, b):\n    return a + b\n"
SCRATCH = "from calc import add\n\nassert add(2, 3) == 5, add(2, 3)\nprint('ok from {name}')\n"


def fix_script(scratch: str) -> list[Any]:
    return [
        [("cp_write_file", {"path": scratch, "content": SCRATCH.format(name=scratch)})],
        [("cp_write_file", {"path": "calc.py", "content": CALC_FIXED})],
        [("cp_run_python", {"path": scratch})],
        f"Fixed add(); {scratch} passes.",
    ]


def record_agent(store: Path, repo: Path, script: list[Any], **kw: Any) -> Session:
    with LocalServer(chat_script=script) as srv, forkpoint.record(store=store, workspace=repo, **kw) as rec:
        run_agent(srv.openai_base_url, repo)
    return Session.load(rec.session_path)


# --------------------------------------------------------------------------- (a) and (b)


@dataclass
class Runs:
    store: Path
    origin: Path
    sessions: dict[str, Session]  # scratch file name -> session
    repos: dict[str, Path]


RUN_NAMES = ("test_repro.py", "reproduce_issue.py", "repro.py")


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    """Three runs from one base commit: the same fix to calc.py, each with its own scratch file."""
    tmp = tmp_path_factory.mktemp("runs")
    mp = pytest.MonkeyPatch()
    home = tmp / "home"
    home.mkdir()
    mp.setenv("HOME", str(home))
    mp.setenv("GIT_CONFIG_NOSYSTEM", "1")
    mp.chdir(tmp)
    origin = make_repo(tmp / "origin", {"calc.py": CALC_BUGGY, "README.md": "# calc\n"})
    sessions, repos = {}, {}
    for name in RUN_NAMES:
        repo = tmp / f"run-{name.split('.')[0]}"
        sh_git(tmp, "clone", "-q", str(origin), str(repo))
        sessions[name] = record_agent(tmp / "store", repo, fix_script(name))
        repos[name] = repo
    yield Runs(tmp / "store", origin, sessions, repos)
    mp.undo()


def final_checkpoint(session: Session) -> dict[str, Any]:
    return session.by_type("checkpoint")[-1]


def test_same_source_state_different_workspaces(three_runs: Runs) -> None:
    finals = {name: final_checkpoint(s) for name, s in three_runs.sessions.items()}
    # Every run: a resumable checkpoint before each of its four model calls.
    for s in three_runs.sessions.values():
        cps = s.by_type("checkpoint")
        assert [c["boundary"] for c in cps] == ["resumable"] * 4
        assert all(not c.get("error") for c in cps)
    trees = {cp["source"]["tree"] for cp in finals.values()}
    diffs = {cp["source"]["diff_hash"] for cp in finals.values()}
    patches = {patch_bytes(cp["source"]) for cp in finals.values()}
    assert len(trees) == 1 and len(diffs) == 1 and len(patches) == 1
    patch = patches.pop()
    assert b"-    return a - b\n+    return a + b\n" in patch
    assert all(cp["source"]["changed"] == ["calc.py"] for cp in finals.values())
    fingerprints = {cp["workspace"]["fingerprint"] for cp in finals.values()}
    assert len(fingerprints) == 3
    for name, cp in finals.items():
        assert [r[0] for r in manifest_rows(cp["workspace"])] == [name]  # only the scratch file differs
        assert name in cp["referenced"]
    # The first checkpoint of every run is the untouched base.
    firsts = {s.by_type("checkpoint")[0]["source"]["tree"] for s in three_runs.sessions.values()}
    assert len(firsts) == 1 and firsts != {
        final_checkpoint(three_runs.sessions["repro.py"])["source"]["tree"]
    }


def test_source_of_one_run_with_messages_of_another_fails_validation(
    three_runs: Runs, tmp_path: Path
) -> None:
    a, b = three_runs.sessions["test_repro.py"], three_runs.sessions["reproduce_issue.py"]
    cp_a, cp_b = final_checkpoint(a), final_checkpoint(b)
    into = tmp_path / "a-with-b"
    restore(a, cp_a["seq"], into)
    assert all(c.ok for c in validate(into)), validate(into)
    assert (into / "test_repro.py").exists() and not (into / "reproduce_issue.py").exists()
    # Run A's source state, run B's carried context.
    (into / META_DIR / "messages.json").write_bytes(orjson.dumps(cp_b["context"]))
    checks = checks_by_name(into)
    assert checks["source tree hash"].ok  # the same tracked diff: this check alone would pass
    assert checks["workspace fingerprint"].ok
    assert not checks["message digest"].ok
    assert checks["message digest"].expected == cp_a["context_digest"]
    assert checks["message digest"].actual == cp_b["context_digest"]
    assert not checks["referenced files exist"].ok
    assert checks["referenced files exist"].actual == {"missing": ["reproduce_issue.py"]}
    result = cli("validate", str(into))
    assert result.exit_code == 1
    assert "reproduce_issue.py" in result.output and "FAIL" in result.output


def test_restore_cli_validates_and_never_writes_into_the_recorded_repo(
    three_runs: Runs, tmp_path: Path
) -> None:
    s = three_runs.sessions["repro.py"]
    repo = three_runs.repos["repro.py"]
    before = git_dir_snapshot(repo)
    cp = final_checkpoint(s)
    listing = cli("checkpoints", str(s.path))
    assert listing.exit_code == 0 and "resumable" in listing.output
    result = cli("restore", f"{s.path}@{cp['seq']}", "--into", str(tmp_path / "r"))
    assert result.exit_code == 0, result.output
    assert result.output.count("pass") == 6
    assert git_dir_snapshot(repo) == before
    assert tree_snapshot(tmp_path / "r") == tree_snapshot(repo)
    assert status(tmp_path / "r") == status(repo)
    # What runs in it (a fork arm's agent) cannot push into the recorded repository either: a
    # `git push -f origin HEAD:main` there rewrote the user's branch.
    sh_git(tmp_path / "r", "commit", "-q", "--allow-empty", "-m", "an arm's commit")
    pushed = subprocess.run(
        ["git", "push", "-f", "origin", "HEAD:refs/heads/main", "HEAD:refs/heads/arm"],
        cwd=tmp_path / "r", capture_output=True, text=True,
    )  # fmt: skip
    assert pushed.returncode != 0 and "pushing-from-a-restored-checkpoint" in pushed.stderr, pushed.stderr
    assert git_dir_snapshot(repo) == before
    bad = cli("restore", f"{s.path}@999", "--into", str(tmp_path / "x"))
    assert bad.exit_code != 0 and "no checkpoint at seq 999" in bad.output
    # A failing check says what differs in words, not as Python dicts.
    (tmp_path / "r" / "repro.py").write_text("changed\n")
    failed = cli("validate", str(tmp_path / "r"))
    assert failed.exit_code != 0 and "FAIL" in failed.output
    assert "repro.py" in failed.output and "{'" not in failed.output


@pytest.mark.parametrize(
    "change",
    [
        ["commit", "-q", "--allow-empty", "-m", "moved"],
        ["checkout", "-q", "-b", "other"],
        ["checkout", "-q", "--detach"],
        ["add", "repro.py"],
    ],
    ids=["head", "branch", "detached", "index"],
)
def test_validate_checks_where_head_is_and_what_is_staged(
    three_runs: Runs, tmp_path: Path, change: list[str]
) -> None:
    """A restore sets HEAD, its branch and the staged state as they were (the checkpoint keeps
    them), but validate did not look: a commit, another branch, a detached HEAD or a change to the
    index in the restored directory passed."""
    s = three_runs.sessions["repro.py"]
    cp = final_checkpoint(s)
    assert cli("restore", f"{s.path}@{cp['seq']}", "--into", str(tmp_path / "r")).exit_code == 0
    if change[0] == "add":  # (a change to the staged state alone: the file's text stays)
        sh_git(
            tmp_path / "r", "update-index", "--add", "--cacheinfo", "100644", "0" * 39 + "1", "staged-only"
        )
    else:
        sh_git(tmp_path / "r", *change)
    failed = cli("validate", str(tmp_path / "r"))
    assert failed.exit_code != 0 and "FAIL" in failed.output and "git HEAD, branch and index" in failed.output
    lines = [line for line in failed.output.splitlines() if "FAIL" in line]
    assert len(lines) == 1 and "git HEAD" in lines[0], failed.output


# --------------------------------------------------------------------------- (c) observable checkpoints


def test_checkpoint_between_two_tool_calls_of_one_turn_is_observable_and_fork_refuses_it(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC_BUGGY})
    script: list[Any] = [
        [
            ("cp_write_file", {"path": "first.txt", "content": "one\n"}),
            ("cp_write_file", {"path": "second.txt", "content": "two\n"}),
        ],
        "Wrote both files.",
    ]
    s = record_agent(tmp_path / "store", repo, script)
    kinds = [(e["type"], e.get("boundary") or e.get("tool")) for e in s.events]
    assert kinds == [
        ("checkpoint", "resumable"),
        ("model_call", None),
        ("tool_call", "cp_write_file"),
        ("checkpoint", "observable"),
        ("tool_call", "cp_write_file"),
        ("checkpoint", "resumable"),
        ("model_call", None),
        ("end", None),
    ]
    observable = s.events[3]
    assert [r[0] for r in manifest_rows(observable["workspace"])] == ["first.txt"]
    assert len(s.events[1]["summary"]["tool_calls"]) == 2

    arms = tmp_path / "arms"
    result = cli("fork", f"{s.path}@{observable['seq']}", "--arms", "2", "--into", str(arms), "--", "true")
    assert result.exit_code != 0
    assert "observable" in result.output and "speak twice" in result.output
    assert not arms.exists()

    # Restoring it is allowed (it is a real environment state), but it does not validate as resumable.
    restore(s, observable["seq"], tmp_path / "obs")
    checks = checks_by_name(tmp_path / "obs")
    assert not checks["resumable boundary"].ok and checks["resumable boundary"].actual == "observable"
    assert checks["source tree hash"].ok and checks["workspace fingerprint"].ok
    assert (tmp_path / "obs" / "first.txt").exists() and not (tmp_path / "obs" / "second.txt").exists()
    # `forkpoint restore` of it exited 1, as if the restore had failed: it says what it is, and passes.
    shown = cli("restore", f"{s.path}@{observable['seq']}", "--into", str(tmp_path / "obs2"))
    assert shown.exit_code == 0, shown.output
    assert "pass  observable boundary (to look at; fork resumes only at a resumable one)" in shown.output
    assert cli("validate", str(tmp_path / "obs2")).exit_code == 0


def test_manual_checkpoint(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    assert forkpoint.checkpoint() is None  # nothing recorded
    with forkpoint.record(store=tmp_path / "store") as rec:
        assert forkpoint.checkpoint() is None  # no workspace: said, once
        assert forkpoint.checkpoint() is None
    err = capfd.readouterr().err
    assert err.count("forkpoint.checkpoint() took no checkpoint: this recording has no workspace") == 1, err
    assert "--workspace DIR" in err
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        (repo / "a.txt").write_text("b\n")
        seq = forkpoint.checkpoint("after edit")
    cp = Session.load(rec.session_path).events[seq - 1]
    assert cp["type"] == "checkpoint" and cp["boundary"] == "resumable" and cp["reason"] == "after edit"
    assert cp["source"]["changed"] == ["a.txt"] and cp["context"] is None
    # Inside a tool's body the tool is unfinished: not an agent boundary.
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        inner = cp_checkpoint_inside()["seq"]
    events = Session.load(rec.session_path).events
    assert events[inner - 1]["boundary"] == "observable" and events[inner]["type"] == "tool_call"


@pytest.mark.timeout(60)  # (it deadlocked: fail it, not the run)
# (the timeout is raised in the collector's close of the generator, which Python reports, not raises)
@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
def test_a_tool_call_the_collector_ends_inside_a_checkpoint_is_recorded_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recorded generator tool the program left open in a reference cycle is closed by the
    garbage collector, which may run at any allocation: inside a checkpoint, its call was recorded
    there, and the tool call's tally waited for the lock the checkpoint held, in the same thread:
    the program hung for ever. The collector is run here where a checkpoint begins."""
    import gc
    import importlib

    checkpoints = importlib.import_module("forkpoint.checkpoint")  # (the package, not the function)
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    taken = checkpoints.checkpoint_event

    def collected_first(*args: Any, **kwargs: Any) -> Any:
        gc.collect()  # (as the collector may, at an allocation here)
        return taken(*args, **kwargs)

    @forkpoint.tool
    def numbers() -> Iterator[int]:
        yield 1
        yield 2

    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        left = {"items": numbers()}
        assert next(left["items"]) == 1
        left["self"] = left  # (a cycle: only the collector frees it, and closes the generator)
        del left
        monkeypatch.setattr(checkpoints, "checkpoint_event", collected_first)
        seq = forkpoint.checkpoint("after the loop")
    events = Session.load(rec.session_path).events
    assert events[seq - 1]["type"] == "checkpoint"
    assert [(e["tool"], e["result"]["ended"]) for e in events if e["type"] == "tool_call"] == [
        ("numbers", "closed")
    ]


@pytest.mark.parametrize("many", [False, True], ids=["inline", "blob"])
def test_a_file_name_that_is_not_utf8_is_checkpointed_and_restored(tmp_path: Path, many: bool) -> None:
    """An untracked ``caf\\xe9.csv`` (Latin-1 bytes) made taking every checkpoint fail, without a
    word at record time: each held no state, source included, and restore refused it."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    names = [b"caf\xe9.csv"] + ([f"pad-{i:03}.txt".encode() for i in range(30)] if many else [])
    for name in names:  # (many: the manifest is stored as a blob, not inline)
        (repo / os.fsdecode(name)).write_bytes(b"x")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        (repo / "a.txt").write_text("b\n")
        seq = forkpoint.checkpoint("after edit")
    cp = Session.load(rec.session_path).events[seq - 1]
    assert "error" not in cp and cp["source"]["changed"] == ["a.txt"], cp.get("error")
    out = tmp_path / "out"
    restored = cli("restore", f"{rec.session_path}@{seq}", "--into", str(out))
    assert restored.exit_code == 0, restored.output
    assert (out / os.fsdecode(b"caf\xe9.csv")).read_bytes() == b"x" and (out / "a.txt").read_text() == "b\n"
    assert all(c.ok for c in validate(out))
    assert cli("verify", str(rec.session_path)).exit_code == 0


def test_a_checkpoint_that_cannot_be_taken_is_said_at_record_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every checkpoint of a run held no state (taking it failed) and the recording said nothing:
    the user learnt it when a restore refused, days later. Said once, as it happens."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})

    def broken(self: Workspace, blobs: BlobStore) -> dict[str, Any]:
        raise OSError("disk on fire")

    monkeypatch.setattr(Workspace, "capture", broken)
    with forkpoint.record(store=tmp_path / "store", workspace=repo):
        first, second = forkpoint.checkpoint(), forkpoint.checkpoint()
    said = " ".join(capsys.readouterr().err.split())
    assert said.count("WARNING: a checkpoint of") == 1, said
    assert (
        "could not be taken (OSError: disk on fire): it holds no state, and restore and fork refuse it"
        in said
    )
    assert first is not None and second is not None


def test_a_checkpoint_whose_commit_is_gone_is_not_restored_at_another(tmp_path: Path) -> None:
    """The agent committed, then the user reset and garbage-collected that commit: restore put HEAD
    at the base commit instead, the agent's commit missing and its change staged, and validate said
    ok. It refuses, naming the commit."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        (repo / "a.txt").write_text("b\n")
        sh_git(repo, "commit", "-qam", "the agent's fix")
        seq = forkpoint.checkpoint()
    head = Session.load(rec.session_path).events[seq - 1]["source"]["head"]
    sh_git(repo, "reset", "-q", "--hard", "HEAD~1")
    sh_git(repo, "reflog", "expire", "--expire=now", "--all")
    sh_git(repo, "gc", "-q", "--prune=now")
    with pytest.raises(CheckpointError, match=f"does not have the commit HEAD was at .*{head[:12]}"):
        restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_restore_has_the_checkpoints_branch_not_the_one_the_repository_is_on_today(tmp_path: Path) -> None:
    """The agent went on to `git checkout -b feature` after the checkpoint: a restore of it had a
    local branch `feature` (the clone's, of the branch the recorded repository was on by then),
    validate said ok, and an arm's agent doing what the recording did failed ("a branch named
    'feature' already exists"). The local branches are the checkpoint's, without the clone's upstream."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        (repo / "a.txt").write_text("b\n")
        seq = forkpoint.checkpoint()
        sh_git(repo, "checkout", "-q", "-b", "feature")
        sh_git(repo, "commit", "-qam", "later work")
    for at, branch in ((seq, "main"), (None, None)):
        out = tmp_path / f"out-{branch}"
        session = Session.load(rec.session_path)
        if at is None:  # (a checkpoint on the branch the repository is on today keeps it)
            with forkpoint.record(store=tmp_path / "store", workspace=repo) as again:
                at = forkpoint.checkpoint()
            session, branch = Session.load(again.session_path), "feature"
        restore(session, at, out)
        want = "refs/heads/feature\nrefs/heads/main\n" if branch == "feature" else "refs/heads/main\n"
        assert sh_git(out, "for-each-ref", "--format=%(refname)", "refs/heads/") == want
        assert sh_git(out, "symbolic-ref", "HEAD") == f"refs/heads/{branch}\n"
        assert sh_git(out, "config", "--get-regexp", r"^branch\.", check=False) == ""
        assert all(c.ok for c in validate(out))
    sh_git(tmp_path / "out-main", "checkout", "-q", "-b", "feature")  # as the agent did


def test_a_restore_has_the_stash_the_checkpoint_had(tmp_path: Path) -> None:
    """The agent stashed its work (`git stash -u`, to run the tests on the original code), and the
    checkpoint before its `git stash pop` was restored without the stash: validate said ok, and an
    arm's `git stash pop` found nothing, the stashed edit and untracked file lost to the arm. The
    stash list is put back (from the recorded repository's objects) and validated."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        sh_git(repo, "stash", "-q", "-m", "older")  # (nothing to stash yet: no entry)
        (repo / "a.txt").write_text("first\n")
        sh_git(repo, "stash", "-q", "-m", "first try")
        (repo / "a.txt").write_text("b\n")
        (repo / "new.txt").write_text("untracked\n")
        sh_git(repo, "stash", "-q", "-u")
        seq = forkpoint.checkpoint()
        sh_git(repo, "stash", "pop", "-q")
        sh_git(repo, "stash", "drop", "-q")
    out = tmp_path / "out"
    restore(Session.load(rec.session_path), seq, out)
    assert all(c.ok for c in validate(out))
    assert sh_git(out, "stash", "list", "--format=%gs").splitlines() == [
        "WIP on main: " + sh_git(repo, "log", "-1", "--format=%h %s").strip(),
        "On main: first try",
    ]
    sh_git(out, "stash", "pop", "-q")  # as the agent did
    assert (out / "a.txt").read_text() == "b\n" and (out / "new.txt").read_text() == "untracked\n"
    assert not checks_by_name(out)["git HEAD, branch and index"].ok  # (one entry fewer now)


def test_a_restore_has_the_branches_and_tags_the_checkpoint_had(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent made a branch `attempt` with a commit, went back to main, and next turn merged it and
    tagged v1. A restore of the checkpoint between the two (after the user deleted `attempt`) had no
    `attempt` (the arm's merge failed: "not something we can merge"), had tag v1 made only later (an
    arm's `git tag v1` failed), and the recorded repository's later commits as `origin/*`; validate
    said ok. The branches and tags are the checkpoint's, from the recorded repository's objects, and
    validated; a commit gone from there is refused, naming it."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        sh_git(repo, "tag", "v0")
        sh_git(repo, "checkout", "-q", "-b", "attempt")
        (repo / "x.txt").write_text("x\n")
        sh_git(repo, "add", "x.txt")
        sh_git(repo, "commit", "-qm", "attempt")
        sh_git(repo, "checkout", "-q", "main")
        seq = forkpoint.checkpoint()
        sh_git(repo, "merge", "-q", "--no-edit", "attempt")
        sh_git(repo, "tag", "v1")
    attempt = sh_git(repo, "rev-parse", "attempt").strip()
    sh_git(repo, "branch", "-q", "-D", "attempt")
    out = tmp_path / "out"
    restore(Session.load(rec.session_path), seq, out)
    assert all(c.ok for c in validate(out))
    assert sh_git(out, "branch", "-a", "--format=%(refname)").split() == [
        "refs/heads/attempt",
        "refs/heads/main",
    ]
    assert sh_git(out, "tag").split() == ["v0"]
    base = sh_git(repo, "rev-parse", "v0").strip()
    assert sorted(sh_git(out, "log", "--all", "--format=%H").split()) == sorted([base, attempt])
    # (main, HEAD's branch, is `branch` at `head`: a commit on it leaves `refs` as it was)
    cp = Session.load(rec.session_path).events[seq - 1]
    assert cp["source"]["refs"] == {"refs/heads/attempt": attempt, "refs/tags/v0": base}
    sh_git(out, "merge", "-q", "--no-edit", "attempt")  # as the agent did
    sh_git(out, "tag", "v1")
    assert not checks_by_name(out)["git HEAD, branch and index"].ok  # (main moved, v1 is new)
    # a session recorded before the branches and tags were kept restores and validates as before
    capture = SourceTracker.capture
    monkeypatch.setattr(SourceTracker, "capture", lambda self: {**capture(self), "refs": None})
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as old:
        old_seq = forkpoint.checkpoint()
    monkeypatch.undo()
    restore(Session.load(old.session_path), old_seq, tmp_path / "old")
    assert all(c.ok for c in validate(tmp_path / "old"))
    # the commit of a branch the checkpoint had is gone from the recorded repository: refused
    sh_git(repo, "reset", "-q", "--hard", "v0")
    sh_git(repo, "tag", "-d", "v1")
    sh_git(repo, "reflog", "expire", "--expire=now", "--all")
    sh_git(repo, "gc", "-q", "--prune=now")
    with pytest.raises(CheckpointError, match=f"branch attempt the checkpoint had \\({attempt[:12]}\\)"):
        restore(Session.load(rec.session_path), seq, tmp_path / "out2")
    assert not (tmp_path / "out2").exists()


def test_a_symbolic_branch_is_restored_as_one(tmp_path: Path) -> None:
    """`git symbolic-ref refs/heads/trunk refs/heads/main` (a branch that names another): a restore
    made trunk a branch of its own at main's commit, which stayed behind when an arm committed on
    main, and validation passed. It is a symbolic ref again, and validated as one."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    sh_git(repo, "symbolic-ref", "refs/heads/trunk", "refs/heads/main")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert sh_git(out, "symbolic-ref", "refs/heads/trunk") == "refs/heads/main\n"
    assert all(c.ok for c in validate(out)), validate(out)
    (out / "a.txt").write_text("b\n")
    sh_git(out, "commit", "-qam", "arm")
    assert sh_git(out, "rev-parse", "trunk") == sh_git(out, "rev-parse", "main")
    sh_git(out, "update-ref", "--no-deref", "refs/heads/trunk", "HEAD~1")  # a plain branch again
    assert not checks_by_name(out)["git HEAD, branch and index"].ok


def test_a_restore_has_the_remote_tracking_refs_notes_and_replace_refs_the_checkpoint_had(
    tmp_path: Path,
) -> None:
    """The recorded repository (a clone of an upstream) had its own `origin/main`, a note on its
    commit and a replace ref. A restore had none of them: `git log origin/main..` in an arm, the
    agent's way to see its own commits, failed, `git notes show` found nothing, and validation
    passed. They are the checkpoint's, under their own names (its `origin/main` as it was then, not
    as a later fetch moved it), and validated."""
    upstream = make_repo(tmp_path / "upstream", {"a.txt": "a\n"})
    repo = tmp_path / "repo"
    sh_git(tmp_path, "clone", "-q", str(upstream), str(repo))
    base = sh_git(repo, "rev-parse", "HEAD").strip()
    sh_git(repo, "notes", "add", "-m", "reviewed", "HEAD")
    old_blob = sh_git(repo, "rev-parse", "HEAD:a.txt").strip()
    (tmp_path / "replaced.txt").write_text("replaced\n")
    new_blob = sh_git(repo, "hash-object", "-w", str(tmp_path / "replaced.txt")).strip()
    sh_git(repo, "replace", old_blob, new_blob)
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        (repo / "b.txt").write_text("b\n")
        sh_git(repo, "add", "b.txt")
        sh_git(repo, "commit", "-qm", "agent")
        (repo / "a.txt").write_text("edited\n")
        seq = forkpoint.checkpoint()
    (upstream / "a.txt").write_text("later\n")
    sh_git(upstream, "commit", "-qam", "later")
    sh_git(repo, "fetch", "-q")  # (origin/main moves on after the checkpoint)
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert all(c.ok for c in validate(out)), validate(out)
    assert sh_git(out, "rev-parse", "refs/remotes/origin/main").strip() == base
    assert sh_git(out, "symbolic-ref", "refs/remotes/origin/HEAD") == "refs/remotes/origin/main\n"
    assert sh_git(out, "log", "--format=%s", "origin/main..").split() == ["agent"]
    assert sh_git(out, "notes", "show", base) == "reviewed\n"
    assert sh_git(out, "replace", "-l") == f"{old_blob}\n"
    # (the diff against the base is of the objects as stored, not as the replace ref shows one)
    assert b"\n-a\n+edited\n" in patch_bytes(Session.load(rec.session_path).events[seq - 1]["source"])
    assert (out / "a.txt").read_text() == "edited\n" and status(out) == status(repo) == " M a.txt\n"
    sh_git(out, "notes", "remove", base)
    assert not checks_by_name(out)["git HEAD, branch and index"].ok


def test_a_shallow_clones_remote_tracking_refs_are_restored(tmp_path: Path) -> None:
    """A shallow clone of every branch (`git clone --depth 1 --no-single-branch`, as CI makes them):
    a restore clones it by fetching, which copies the objects of its branches and tags only, so
    its `origin/feat`'s commit was missing and every restore failed, saying the recorded repository
    lacked it."""
    upstream = make_repo(tmp_path / "upstream", {"a.txt": "a\n"})
    sh_git(upstream, "checkout", "-q", "-b", "feat")
    (upstream / "f.txt").write_text("f\n")
    sh_git(upstream, "add", "f.txt")
    sh_git(upstream, "commit", "-qm", "feat")
    sh_git(upstream, "checkout", "-q", "main")
    repo = tmp_path / "repo"
    sh_git(tmp_path, "clone", "-q", "--depth", "1", "--no-single-branch", f"file://{upstream}", str(repo))
    (repo / "a.txt").write_text("edited\n")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert sh_git(out, "rev-parse", "origin/feat") == sh_git(repo, "rev-parse", "origin/feat")
    assert sh_git(out, "for-each-ref", "--format=%(refname)") == sh_git(
        repo, "for-each-ref", "--format=%(refname)"
    )
    assert status(out) == status(repo) == " M a.txt\n"
    assert all(c.ok for c in validate(out)), validate(out)


def test_a_fifo_in_a_plain_folder_workspace_is_said_to_be_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A named pipe the agent made in a plain folder (a FIFO has no bytes to keep) was silently
    missing from the restore. (In a repository git lists no FIFO: it is no file of the work tree.)"""
    import os

    repo = tmp_path / "work"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    os.mkfifo(repo / "events.pipe")
    with forkpoint.record(store=tmp_path / "store", workspace=repo):
        forkpoint.checkpoint()
        forkpoint.checkpoint()
    said = " ".join(capsys.readouterr().err.split())
    assert (
        said.count("leave out 'events.pipe': they are no regular files (a FIFO, a socket, a device)") == 1
    ), said


def test_a_fifo_or_socket_in_a_git_workspace_is_said_to_be_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """git lists no FIFO or socket (no file of the work tree to it), so one in a repository was
    silently missing from every checkpoint's restore. Said once each, at the first checkpoint (one
    there before) or the first after the agent made it, in a folder of its files; an ignored one is
    left out like any ignored file, without a word."""
    import socket

    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n", "src/b.py": "b\n", ".gitignore": "*.ignored\n"})
    os.mkfifo(repo / "src" / "events.pipe")
    os.mkfifo(repo / "quiet.ignored")
    with forkpoint.record(store=tmp_path / "store", workspace=repo):
        forkpoint.checkpoint()
        (repo / "new").mkdir()
        (repo / "new" / "notes.txt").write_text("n\n")
        sock = socket.socket(socket.AF_UNIX)
        try:
            sock.bind(str(repo / "new" / "agent.sock"))
            forkpoint.checkpoint()
            forkpoint.checkpoint()
        finally:
            sock.close()
    said = " ".join(capsys.readouterr().err.split())
    for name in ("src/events.pipe", "new/agent.sock"):
        assert said.count(f"leave out '{name}': they are no regular files") == 1, said
    assert "quiet.ignored" not in said


def test_files_under_the_restore_folder_name_are_said_to_be_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Files the agent wrote under a top-level `.forkpoint-checkpoint/` (the folder a restore writes
    its description in) were dropped from every checkpoint without a word; a restore's own files
    there (a restored folder recorded again) are not named."""
    for listing in ("git", "plain"):
        work = tmp_path / listing
        if listing == "git":
            make_repo(work, {"a.txt": "a\n"})
        else:
            work.mkdir()
        (work / META_DIR).mkdir()
        (work / META_DIR / "notes.md").write_text("plan\n")
        (work / META_DIR / "checkpoint.json").write_text("{}\n")
        with forkpoint.record(store=tmp_path / f"store-{listing}", workspace=work):
            forkpoint.checkpoint()
            forkpoint.checkpoint()
        said = " ".join(capsys.readouterr().err.split())
        assert said.count(f"leave out '{META_DIR}/notes.md': {META_DIR}/ at the top") == 1, said
        assert "checkpoint.json" not in said


def test_files_under_a_forkpoint_folder_that_is_no_store_are_said_to_be_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Files the agent (or the user) kept under a top-level `.forkpoint/` that holds no store (the
    name of forkpoint's default store, left out of every workspace) were missing from every restore
    without a word. Said once; a `.forkpoint/` that is a store (the session's own, or another) is
    left out silently."""
    for listing in ("git", "plain"):
        work = tmp_path / listing
        if listing == "git":
            make_repo(work, {"a.txt": "a\n"})
        else:
            work.mkdir()
        (work / ".forkpoint").mkdir()
        (work / ".forkpoint" / "plan.md").write_text("plan\n")
        with forkpoint.record(store=tmp_path / f"store-{listing}", workspace=work):
            forkpoint.checkpoint()
            forkpoint.checkpoint()
        said = " ".join(capsys.readouterr().err.split())
        assert said.count("leave out '.forkpoint/plan.md': .forkpoint/ at the top of a workspace") == 1, said
        (work / ".forkpoint" / "plan.md").unlink()
        (work / ".forkpoint").rmdir()
        for store in (work / ".forkpoint", tmp_path / f"other-{listing}"):  # its own store; another
            with forkpoint.record(store=store, workspace=work):
                forkpoint.checkpoint()
            said = capsys.readouterr().err
            assert "leave out" not in said, said


def test_a_file_named_as_the_store_or_restore_folder_is_said_to_be_left_out(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file (not a folder) named `.forkpoint` or `.forkpoint-checkpoint` at the top of a workspace
    is left out of every checkpoint as the folders of those names are; only files under the folders
    were said to be, so it went missing from every restore without a word."""
    for listing in ("git", "plain"):
        work = tmp_path / listing
        if listing == "git":
            make_repo(work, {"a.txt": "a\n"})
        else:
            work.mkdir()
        (work / ".forkpoint").write_text("notes\n")
        (work / META_DIR).write_text("notes\n")
        with forkpoint.record(store=tmp_path / f"store-{listing}", workspace=work):
            forkpoint.checkpoint()
        said = " ".join(capsys.readouterr().err.split())
        assert "leave out '.forkpoint': .forkpoint/ at the top of a workspace" in said, said
        assert f"leave out '{META_DIR}': {META_DIR}/ at the top" in said, said


def test_a_restore_applies_the_info_exclude_of_the_recording_not_of_today(tmp_path: Path) -> None:
    """The user added ``*.csv`` to ``.git/info/exclude`` after recording: every restore copied
    today's rules, and validation failed ("missing: results.csv", though restored): fork refused
    every arm. The rules in force when the session was recorded are kept in its header."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    (repo / "results.csv").write_text("1,2\n")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    with open(repo / ".git" / "info" / "exclude", "a") as f:
        f.write("*.csv\n")
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert (out / "results.csv").read_text() == "1,2\n"
    assert all(c.ok for c in validate(out)), [(c.name, c.actual) for c in validate(out) if not c.ok]
    assert "*.csv" not in (out / ".git" / "info" / "exclude").read_text()


def test_a_restore_validates_whatever_the_validating_users_own_ignore_file(
    tmp_path: Path, clean_home: Path
) -> None:
    """Validated by a user whose ~/.config/git/ignore has ``*.log``, a faithful restore failed:
    "workspace fingerprint … missing: run.log", though the file was there (a fork on another
    machine, or under another user, the same)."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    (repo / "run.log").write_text("the agent's log\n")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    (clean_home / ".config" / "git").mkdir(parents=True)
    (clean_home / ".config" / "git" / "ignore").write_text("*.log\n")
    checks = {c.name: c for c in validate(out)}
    assert (out / "run.log").exists() and checks["workspace fingerprint"].ok, checks["workspace fingerprint"]


def test_a_checkpoint_leaves_out_what_the_users_own_ignore_file_ignores(
    tmp_path: Path, clean_home: Path
) -> None:
    """A user whose ~/.gitconfig names an ignore file (``core.excludesFile``) with ``.env`` in it:
    their git ignores .env, but the checkpoint kept it (its bytes in a blob of the session, the key
    in it too short to look like one), and applied ~/.config/git/ignore instead, which their git
    does not read when the config names another."""
    from forkpoint.checkpoint.git import user_excludes_file

    (clean_home / "ignores").write_text(".env\n")
    (clean_home / ".gitconfig").write_text(f"[core]\n\texcludesFile = {clean_home / 'ignores'}\n")
    (clean_home / ".config" / "git").mkdir(parents=True)
    (clean_home / ".config" / "git" / "ignore").write_text(
        "*.secret\n"
    )  # (not theirs: the config names another)
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    (repo / ".env").write_text("API_KEY=abc\n")
    (repo / "x.secret").write_text("kept\n")
    assert sh_git(repo, "status", "--short").split() == ["??", "x.secret"]  # what their git sees
    user_excludes_file.cache_clear()
    try:
        with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
            seq = forkpoint.checkpoint()
    finally:
        user_excludes_file.cache_clear()
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert (out / "x.secret").exists() and not (out / ".env").exists()
    assert not [p for p in rec.session_path.rglob("*") if p.is_file() and b"API_KEY=abc" in p.read_bytes()]


def test_a_restore_names_the_symlinks_that_lead_out_of_it(tmp_path: Path) -> None:
    """An absolute symlink into the original repository is restored as it was: faithful, but an
    arm that appended through it changed the original's file, with no word of it anywhere."""
    repo = make_repo(tmp_path / "repo", {"data.txt": "data\n"})
    (repo / "abs-link").symlink_to(repo / "data.txt")
    (repo / "inside").symlink_to("data.txt")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    checks = validate(out)
    assert all(c.ok for c in checks), checks
    said = [c.name for c in checks if c.name.startswith("symlinks that lead out")]
    assert said == [
        f"symlinks that lead out of this folder: abs-link → {repo / 'data.txt'} (writing through one changes "
        "what it leads to)"
    ]


def test_a_restore_names_the_paths_the_messages_name_that_it_does_not_hold(tmp_path: Path) -> None:
    """The agent wrote an ignored log and told the model: the checkpoint left it out (as documented)
    and knew the messages name it, yet restore and validate said only "pass referenced files exist",
    and a fork's arm ran without it, with no word of it anywhere."""
    repo = make_repo(tmp_path / "repo", {".gitignore": "*.log\n", "a.txt": "a\n"})
    (repo / "debug.log").write_text("written by the agent\n")
    args = json.dumps({"path": "debug.log", "content": "written by the agent"})
    call = {"id": "c1", "type": "function", "function": {"name": "write_file", "arguments": args}}
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
    ]
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = rec.checkpoint(context={"messages": messages})
    assert seq is not None
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert not (out / "debug.log").exists()
    checks = validate(out)
    assert all(c.ok for c in checks), checks
    assert checks[-1].name == (
        "paths the messages name that this folder does not hold: debug.log (there when recorded, not "
        "archived: ignored files are kept only with record --include-ignored, empty folders never)"
    )


def test_a_restore_from_a_session_missing_its_git_objects_names_the_session(tmp_path: Path) -> None:
    """The session's git-objects lost the tree of a checkpoint: restore said only "git read-tree -u
    --reset failed in OUT: fatal: failed to unpack tree object …", naming the new folder, not the
    session whose archive is damaged (as a missing workspace blob is said)."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    (repo / "a.txt").write_text("changed\n")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    assert seq is not None
    objects = rec.session_path / "git-objects"
    shutil.rmtree(objects)
    objects.mkdir()
    with pytest.raises(CheckpointError) as err:
        restore(Session.load(rec.session_path), seq, tmp_path / "out")
    said = str(err.value)
    assert said.startswith("the session's archive is damaged: it lacks objects of source tree"), said
    assert f"forkpoint verify {rec.session_path}" in said, said
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("damage", [{"referenced": [1]}, {"tree": 123}, {"tree": "ab" * 20, "base": None}])
def test_validate_of_a_damaged_description_says_so(tmp_path: Path, damage: dict[str, Any]) -> None:
    """A damaged .forkpoint-checkpoint/checkpoint.json gave a TypeError or KeyError traceback."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    described = out / META_DIR / "checkpoint.json"
    described.write_bytes(orjson.dumps({**orjson.loads(described.read_bytes()), **damage}))
    with pytest.raises(CheckpointError, match="is not a checkpoint description"):
        validate(out)


def test_tracked_files_a_checkout_converts_are_restored_as_they_were(tmp_path: Path) -> None:
    """With ``*.txt text eol=crlf`` and ``ident`` in .gitattributes, a restore wrote every such file
    as a checkout converts it (``\\r\\n``, ``$Id: <oid> $``), not as the agent left it, and
    validation passed: the tree hash is of git's normalized content."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "one\ntwo\n", "b.txt": "$Id$\n", "w.md": "x\n"})
    (repo / ".gitattributes").write_text("*.txt text eol=crlf\nb.txt ident\n*.md text\n")
    sh_git(repo, "add", ".gitattributes")
    sh_git(repo, "commit", "-q", "-m", "attributes")  # a.txt and b.txt stay as they were checked out
    (repo / "c.txt").write_bytes(b"new\nfile\n")  # as an agent writes a file: "\n"
    sh_git(repo, "add", "c.txt")
    (repo / "w.md").write_bytes(b"x\r\ny\r\n")  # git stores "x\ny\n"
    (repo / "plain.py").write_bytes(b"untracked\r\n")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        first = forkpoint.checkpoint()
        (repo / "a.txt").write_bytes(b"one\r\ntwo\r\nthree\n")  # mixed: not what a checkout writes
        second = forkpoint.checkpoint()
    session = Session.load(rec.session_path)
    for seq in (first, second):
        out = restore(session, seq, tmp_path / f"out-{seq}")
        want = {p: (repo / p).read_bytes() for p in ("b.txt", "c.txt", "w.md", "plain.py")}
        want["a.txt"] = b"one\ntwo\n" if seq == first else b"one\r\ntwo\r\nthree\n"
        assert {p: (out / p).read_bytes() for p in want} == want
        checks = validate(out)
        assert all(c.ok for c in checks), checks
        if seq == second:
            assert status(out) == status(repo)
    # A converted file changed after the restore is named.
    (out / "c.txt").write_bytes(b"new\r\nfile\r\n")
    ws = {c.name: c for c in validate(out)}["workspace fingerprint"]
    assert not ws.ok and ws.actual["changed"] == ["c.txt"]


@pytest.mark.slow
def test_more_converted_files_than_a_command_line_holds_are_restored_as_they_were(tmp_path: Path) -> None:
    """2,100 converted files: checked out through stdin, and restored (past 2,000 paths a restore
    reads its index whole rather than name them on a command line)."""
    files = {f"d{i // 100}/f{i}.txt": f"line {i}\n" for i in range(2100)}
    repo = make_repo(tmp_path / "repo", {".gitattributes": "* text=auto\n", **files})
    for rel in files:  # as a Windows editor saves them: git stores "\n", a checkout writes "\n"
        (repo / rel).write_bytes((repo / rel).read_bytes().replace(b"\n", b"\r\n"))
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert (out / "d20/f2099.txt").read_bytes() == b"line 2099\r\n"
    assert all(c.ok for c in validate(out)), validate(out)
    # git reads them as unchanged (the recorded repository's index, older than the files, had
    # `git status` name them until a refresh: a restore's index is refreshed)
    assert status(out) == "" and sh_git(repo, "diff", "--stat") == ""


def test_a_skip_worktree_files_edits_are_restored_and_marked_again(tmp_path: Path) -> None:
    """A file marked ``--skip-worktree`` (a local config the user edits and never commits): git does
    not look at it, so its edits were in no checkpoint; a restore wrote the committed version and
    validation passed."""
    repo = make_repo(tmp_path / "repo", {"config.ini": "debug = false\n", "a.py": "x = 1\n"})
    sh_git(repo, "update-index", "--skip-worktree", "config.ini")
    (repo / "config.ini").write_text("debug = true\n")
    (repo / "a.py").write_text("x = 2\n")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    cp = Session.load(rec.session_path).events[seq - 1]
    assert cp["source"]["skip_worktree"] == ["config.ini"]
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert (out / "config.ini").read_text() == "debug = true\n"
    assert all(c.ok for c in validate(out)), validate(out)
    assert status(out) == status(repo) == " M a.py\n"
    assert sh_git(out, "ls-files", "-v", "config.ini") == "S config.ini\n"


def test_a_sparse_checkouts_left_out_files_are_left_out_and_marked_on_restore(tmp_path: Path) -> None:
    """A sparse checkout (`git sparse-checkout set src`): the files outside it are marked
    skip-worktree and absent. A restore's checkout wrote them all back, unmarked, with no
    sparse-checkout settings (an arm's `git status` and `git sparse-checkout list` were another
    repository's), and validation passed. They are left out and marked again, the settings are the
    recording's, and validation compares both."""
    repo = make_repo(tmp_path / "repo", {"src/a.py": "a\n", "docs/big.md": "d\n", "top.txt": "t\n"})
    sh_git(repo, "sparse-checkout", "set", "src")
    assert not (repo / "docs").exists()
    (repo / "src" / "a.py").write_text("b\n")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert not (out / "docs").exists() and (out / "src" / "a.py").read_text() == "b\n"
    assert (
        sh_git(out, "ls-files", "-v")
        == sh_git(repo, "ls-files", "-v")
        == "S docs/big.md\nH src/a.py\nH top.txt\n"
    )
    assert sh_git(out, "sparse-checkout", "list") == sh_git(repo, "sparse-checkout", "list") == "src\n"
    assert status(out) == status(repo) == " M src/a.py\n"
    assert all(c.ok for c in validate(out)), validate(out)
    sh_git(out, "sparse-checkout", "disable")  # the left-out files written back: not the checkpoint's
    assert (out / "docs" / "big.md").exists()
    assert not checks_by_name(out)["git HEAD, branch and index"].ok


def test_a_submodule_a_sparse_checkout_left_out_is_left_out_on_restore(tmp_path: Path) -> None:
    """A clone whose submodule was never initialized, then made sparse: the submodule is one of
    the left-out entries. The restore's checkout made its folder, empty, and taking it out again
    (a file's unlink) failed: no checkpoint of such a repository could be restored."""
    sub = make_repo(tmp_path / "sub", {"s.txt": "s\n"})
    upstream = make_repo(tmp_path / "upstream", {"src/a.py": "a\n"})
    sh_git(upstream, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "libs/sub")
    sh_git(upstream, "commit", "-qm", "sub")
    repo = tmp_path / "repo"
    sh_git(tmp_path, "clone", "-q", str(upstream), str(repo))
    sh_git(repo, "sparse-checkout", "set", "--no-cone", "/src/", "/.gitmodules")
    assert sh_git(repo, "ls-files", "-v", "libs") == "S libs/sub\n" and not (repo / "libs").exists()
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert not (out / "libs").exists()
    assert sh_git(out, "ls-files", "-v") == sh_git(repo, "ls-files", "-v")
    assert status(out) == status(repo) == ""
    assert checks_by_name(out)["git HEAD, branch and index"].ok


def test_sparse_checkout_settings_changed_mid_run_are_the_checkpoints(tmp_path: Path) -> None:
    """The agent turns the sparse index on (`git config index.sparse true`) and edits the patterns
    between two checkpoints: neither changes an entry of the index, and the settings were read once
    per change of the index, so the second checkpoint kept the first one's, its restore had them,
    and validation (against them) passed."""
    repo = make_repo(tmp_path / "repo", {"src/a.py": "a\n", "docs/big.md": "d\n"})
    sh_git(repo, "sparse-checkout", "set", "--no-cone", "/src/")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        forkpoint.checkpoint()
        sh_git(repo, "config", "index.sparse", "true")
        (repo / ".git" / "info" / "sparse-checkout").write_text("/src/\n/more/\n")
        seq = forkpoint.checkpoint()
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert sh_git(out, "config", "index.sparse") == "true\n"
    assert (
        sh_git(out, "sparse-checkout", "list") == sh_git(repo, "sparse-checkout", "list") == "/src/\n/more/\n"
    )
    assert all(c.ok for c in validate(out)), validate(out)


def test_assume_unchanged_files_are_marked_again(tmp_path: Path) -> None:
    """Files marked ``--assume-unchanged`` and then edited or deleted: ``git status`` in the
    recorded repository named neither, a restore's named both (` M`, ` D`: the bits were not kept),
    and validation passed. They are marked again, and validated."""
    repo = make_repo(tmp_path / "repo", {"local.cfg": "a\n", "gone.txt": "g\n", "a.py": "x = 1\n"})
    sh_git(repo, "update-index", "--assume-unchanged", "local.cfg", "gone.txt")
    (repo / "local.cfg").write_text("mine\n")
    (repo / "gone.txt").unlink()
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert (out / "local.cfg").read_text() == "mine\n" and not (out / "gone.txt").exists()
    assert status(out) == status(repo) == ""
    assert all(c.ok for c in validate(out)), validate(out)
    sh_git(out, "update-index", "--no-assume-unchanged", "local.cfg")
    assert not checks_by_name(out)["git HEAD, branch and index"].ok


def test_intent_to_add_entries_are_marked_again(tmp_path: Path) -> None:
    """A file added with ``git add -N`` is listed in the index as empty: a restore had it staged
    as an empty file with the content unstaged (``AM``, where the recording's ``git status`` said
    `` A``, and ``git diff`` showed none of it), and validation passed. It is marked again, and
    validated; a staged empty file is left as it is."""
    repo = make_repo(tmp_path / "repo", {"a.py": "x = 1\n"})
    (repo / "new.py").write_text("y = 2\n")
    (repo / "empty.py").write_text("")
    sh_git(repo, "add", "-N", "new.py")
    sh_git(repo, "add", "empty.py")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert status(out) == status(repo)
    assert sh_git(out, "diff") == sh_git(repo, "diff") != ""
    assert all(c.ok for c in validate(out)), validate(out)
    sh_git(out, "update-index", "--force-remove", "new.py")
    sh_git(
        out,
        "update-index",
        "--add",
        "--cacheinfo",
        f"100644,{sh_git(out, 'hash-object', 'empty.py').strip()},new.py",
    )
    assert not checks_by_name(out)["git HEAD, branch and index"].ok


def test_a_file_a_checkout_expands_does_not_garble_the_look_at_the_next(tmp_path: Path) -> None:
    """``cat-file --batch --filters`` (git 2.39) heads a blob with its size before the checkout's
    conversion: read by that size, the expanded ``$Id$`` of a.txt ran into b.txt's answer, which
    then matched the "\\n" the agent wrote to b.txt. b.txt was not kept, a restore wrote "\\r\\n",
    and validation passed. (With other bytes, ``int()`` of a header failed: no checkpoint at all.)"""
    a = "$Id$\n" + "q blob 2\nh\n" + "x" * 30 + "\n"  # its expansion's last bytes: a header and "h\n"
    repo = make_repo(tmp_path / "repo", {".gitattributes": "a.txt ident\nb.txt eol=crlf\n", "a.txt": a})
    (repo / "b.txt").write_bytes(b"h\r\n")
    sh_git(repo, "add", "b.txt")
    sh_git(repo, "commit", "-q", "-m", "b")
    (repo / "b.txt").write_bytes(b"h\n")
    (repo / "c.txt").write_bytes(b"l\n" * 7 + b"a b c\n")  # its expansion's last bytes: "a b c\r\n"
    sh_git(repo, "add", "c.txt")
    (repo / ".gitattributes").write_text("a.txt ident\nb.txt eol=crlf\nc.txt eol=crlf\nd.txt eol=crlf\n")
    (repo / "d.txt").write_bytes(b"d\r\n")  # as a checkout writes it
    sh_git(repo, "add", ".gitattributes", "d.txt")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    session = Session.load(rec.session_path)
    cp = session.events[seq - 1]
    assert "error" not in cp
    assert [r[0] for r in manifest_rows(cp["workspace"])] == ["a.txt", "b.txt", "c.txt"]
    out = restore(session, seq, tmp_path / "out")
    assert all(c.ok for c in validate(out))
    assert {p: (out / p).read_bytes() for p in ("a.txt", "b.txt", "c.txt", "d.txt")} == {
        p: (repo / p).read_bytes() for p in ("a.txt", "b.txt", "c.txt", "d.txt")
    }


def test_an_untracked_gitattributes_file_does_not_change_the_bytes_restored(tmp_path: Path) -> None:
    """An untracked ``.gitattributes`` (``*.txt eol=crlf``) makes git store a.txt's "\\r\\n" as
    "\\n"; a restore's checkout writes the tracked files before the untracked ones, without it:
    a.txt came back with "\\n", and validation (with the .gitattributes restored) passed."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\nb\n"})
    (repo / ".gitattributes").write_text("*.txt eol=crlf\n")
    (repo / "a.txt").write_bytes(b"a\r\nb\r\nc\r\n")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert all(c.ok for c in validate(out))
    assert (out / "a.txt").read_bytes() == b"a\r\nb\r\nc\r\n"


def test_a_tracked_file_is_stored_again_when_the_attributes_change(tmp_path: Path) -> None:
    """A file hashed under ``eol=crlf`` (git stores "\\n") kept that content once the attributes were
    gone, since its stat data had not changed: a restore then wrote "\\n" for the agent's
    "\\r\\n", and validation passed (the tree was the stale one)."""
    repo = make_repo(tmp_path / "repo", {"a.txt": b"a\r\nb\r\n"})
    (repo / ".gitattributes").write_text("*.txt eol=crlf\n")
    sh_git(repo, "add", ".gitattributes")
    os.utime(repo / "a.txt", ns=(1, 1))  # its stat changed: the first checkpoint hashes it again
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        first = forkpoint.checkpoint()
        sh_git(repo, "rm", "-q", "--cached", ".gitattributes")
        (repo / ".gitattributes").unlink()
        second = forkpoint.checkpoint()
    session = Session.load(rec.session_path)
    for seq in (first, second):
        out = restore(session, seq, tmp_path / f"out-{seq}")
        assert (out / "a.txt").read_bytes() == b"a\r\nb\r\n", seq
        assert all(c.ok for c in validate(out)), validate(out)


def test_a_repository_whose_info_attributes_convert_restores_and_validates(tmp_path: Path) -> None:
    """``.git/info/attributes`` (``*.txt eol=crlf``) changes how git stores a file: the restored
    bytes were right, but validation hashed them without it and failed on the source tree hash."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    (repo / ".git" / "info" / "attributes").write_text("*.txt eol=crlf\n")
    (repo / "a.txt").write_bytes(b"a\r\nb\r\n")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert (out / "a.txt").read_bytes() == b"a\r\nb\r\n"
    assert all(c.ok for c in validate(out)), validate(out)
    assert (out / ".git" / "info" / "attributes").read_text() == "*.txt eol=crlf\n"


def test_without_attributes_a_checkpoint_keeps_no_tracked_file_as_a_workspace_file(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\r\n", "b.txt": "$Id$\n"})
    (repo / "a.txt").write_bytes(b"a\nb\r\n")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    cp = Session.load(rec.session_path).events[seq - 1]
    assert cp["workspace"]["files"] == 0 and cp["source"]["changed"] == ["a.txt"]
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert (out / "a.txt").read_bytes() == b"a\nb\r\n"


def test_a_tracked_file_with_a_newline_in_its_name_validates(tmp_path: Path) -> None:
    """A modified tracked file named "two\\nlines.txt", restored byte for byte, failed validation
    ("source tree hash … files: two\\nlines.txt"): git's verbose output was read line by line."""
    name = "two\nlines.txt"
    repo = make_repo(tmp_path / "repo", {name: "x\n"})
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        (repo / name).write_text("x\ny\n")
        seq = forkpoint.checkpoint()
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert (out / name).read_text() == "x\ny\n"
    checks = {c.name: c for c in validate(out)}
    assert checks["source tree hash"].ok, checks["source tree hash"]


def test_files_a_restore_could_not_write_back_are_left_out_and_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An untracked ``\\notes.txt`` or ``data/.Git/x`` was recorded into every checkpoint, and restore
    then refused each whole ("points outside the target directory", "not a normal workspace
    path"): nothing of them could be restored or forked. They are left out, and said once."""
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    (repo / "\\notes.txt").write_text("n")
    (repo / "data" / ".Git").mkdir(parents=True)
    (repo / "data" / ".Git" / "x").write_text("x")
    (repo / "scratch.py").write_text("print(1)\n")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        forkpoint.checkpoint()
        second = forkpoint.checkpoint()
    said = " ".join(capsys.readouterr().err.split())
    assert said.count("leave out") == 1 and "'\\\\notes.txt'" in said and "'data/.Git/x'" in said, said
    cp = Session.load(rec.session_path).events[second - 1]
    assert cp["workspace"]["left_out"] == ["\\notes.txt", "data/.Git/x"]
    out = restore(Session.load(rec.session_path), second, tmp_path / "out")
    assert (out / "scratch.py").exists() and not (out / "\\notes.txt").exists()
    assert all(c.ok for c in validate(out))


def test_a_submodules_working_tree_is_said_to_be_left_out_and_its_restore_fails_validation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A checkpoint keeps a submodule's commit, not its files: the restore had an empty ``lib/``
    where the agent had edited files, and validate said every check passed. Said at record time,
    and validation fails, naming the submodule."""
    lib = make_repo(tmp_path / "lib", {"lib.txt": "v1\n"})
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    sh_git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "vendor/lib")
    sh_git(repo, "commit", "-qm", "add lib")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        (repo / "vendor" / "lib" / "lib.txt").write_text("changed by the agent\n")
        forkpoint.checkpoint()
        seq = forkpoint.checkpoint()
    said = " ".join(capsys.readouterr().err.split())
    assert said.count("leave out the working trees of submodules 'vendor/lib'") == 1, said
    assert Session.load(rec.session_path).events[seq - 1]["source"]["submodules"] == ["vendor/lib"]
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert not (out / "vendor" / "lib" / "lib.txt").exists()
    checks = {c.name: c for c in validate(out)}
    assert [n for n, c in checks.items() if not c.ok] == ["submodule working trees"]
    assert checks["submodule working trees"].expected == ["vendor/lib"]
    # A repository without submodules has no such check.
    plain = make_repo(tmp_path / "plain", {"a.txt": "a\n"})
    with forkpoint.record(store=tmp_path / "store", workspace=plain) as rec:
        seq = forkpoint.checkpoint()
    assert "submodules" not in Session.load(rec.session_path).events[seq - 1]["source"]
    assert all(c.ok for c in validate(restore(Session.load(rec.session_path), seq, tmp_path / "out2")))


def test_a_repository_inside_the_workspace_restores_as_its_files_and_validates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An agent clones a library into ``vendor/lib`` and builds it (``lib.o``, which the library's
    own ``.gitignore`` ignores). The checkpoint keeps every file of it, not its ``.git``: that was
    never said, and validate of every restore failed ("missing: vendor/lib/lib.o", though it was
    there: restored as a plain folder, git applied the library's ``.gitignore``), so fork refused
    every arm. Said once when recording; the restore validates."""
    lib = make_repo(tmp_path / "lib", {"lib.c": "v1\n", ".gitignore": "*.o\n"})
    repo = make_repo(tmp_path / "repo", {"README.md": "# app\n"})
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        sh_git(repo, "clone", "-q", str(lib), "vendor/lib")
        (repo / "vendor" / "lib" / "lib.o").write_bytes(b"obj")
        forkpoint.checkpoint()
        seq = forkpoint.checkpoint()
    said = " ".join(capsys.readouterr().err.split())
    assert said.count("leave out the .git of the repositories 'vendor/lib' inside it") == 1, said
    cp = Session.load(rec.session_path).events[seq - 1]
    assert cp["workspace"]["nested"] == ["vendor/lib"]
    out = restore(Session.load(rec.session_path), seq, tmp_path / "out")
    assert (out / "vendor" / "lib" / "lib.o").read_bytes() == b"obj"
    assert not (out / "vendor" / "lib" / ".git").exists()
    checks = validate(out)
    assert all(c.ok for c in checks), [(c.name, c.actual) for c in checks if not c.ok]
    (out / "vendor" / "lib" / "lib.o").unlink()  # (and a file of it that goes missing still fails)
    assert [c.name for c in validate(out) if not c.ok] == ["workspace fingerprint"]


def test_a_store_and_workspace_given_as_relative_paths_take_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`record(store="st", workspace="repo")` from the folder holding both: git runs inside the
    repository, so a relative object folder would point nowhere and every checkpoint fail."""
    make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    monkeypatch.chdir(tmp_path)
    with forkpoint.record(store="st", workspace="repo") as rec:
        Path("repo/a.txt").write_text("b\n")
        seq = forkpoint.checkpoint("after edit")
    cp = Session.load(rec.session_path).events[seq - 1]
    assert cp.get("error") is None and cp["source"]["changed"] == ["a.txt"]


#: An agent that forks a worker which ends normally (its exit handlers run), then edits and checkpoints.
FORKING_AGENT = """
import os
import sys

import forkpoint

forkpoint.checkpoint("before the worker")
pid = os.fork()
if pid == 0:
    sys.exit(0)
os.waitpid(pid, 0)
with open("a.txt", "w") as f:
    f.write("b")
forkpoint.checkpoint("after the worker")
"""


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_a_forked_worker_that_exits_leaves_the_parents_checkpoints_working(
    tmp_path: Path, encrypted: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The forked child ran its copy of the exit-time removal of the recording's private git index
    (encrypted: of its scratch object folder too), so every later checkpoint of the parent failed:
    "Unable to create '/tmp/forkpoint-index-…/index.lock'"."""
    from pyrage import x25519

    from forkpoint.log import IDENTITY_ENV
    from tests.cliutil import forkpoint_cli, with_this_path

    repo = make_repo(tmp_path / "repo", {"a.txt": "a"})
    (tmp_path / "agent.py").write_text(FORKING_AGENT)
    me = x25519.Identity.generate()
    (tmp_path / "me.key").write_text(f"{me}\n")
    encrypt = ["--encrypt-to", str(me.to_public())] if encrypted else []
    store = tmp_path / "store"
    cmd = ["record", "--store", str(store), *encrypt, "--", sys.executable, str(tmp_path / "agent.py")]
    run = forkpoint_cli(cmd, repo, with_this_path())
    assert run.returncode == 0 and "could not be taken" not in run.stderr, run.stderr
    monkeypatch.setenv(IDENTITY_ENV, str(tmp_path / "me.key"))
    (path,) = session_dirs(store)
    after = [e for e in Session.load(path).events if e.get("reason") == "after the worker"]
    assert len(after) == 1 and "error" not in after[0], after
    assert after[0]["source"]["changed"] == ["a.txt"]


def test_a_tracked_file_deleted_then_written_again_is_in_the_next_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent deletes a tracked file, then writes it again (a common edit: remove, regenerate).
    Each checkpoint holds the file as it is at that moment: gone, back with new content, edited,
    gone again, back as a symlink. Restoring each checkpoint gives exactly that state."""
    repo = make_repo(tmp_path / "repo", {"gen.txt": "v0\n", "keep.txt": "k\n"})
    monkeypatch.chdir(repo)
    states: list[dict[str, Any]] = []
    seqs = []

    def step() -> None:
        seqs.append(forkpoint.checkpoint())
        states.append(tree_snapshot(repo))

    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        (repo / "gen.txt").unlink()
        step()
        (repo / "gen.txt").write_text("v1\n")
        step()
        (repo / "gen.txt").write_text("v1\nv2\n")
        step()
        (repo / "gen.txt").unlink()
        step()
        (repo / "gen.txt").symlink_to("keep.txt")
        step()
    session = Session.load(rec.session_path)
    changed = [session.events[seq - 1]["source"]["changed"] for seq in seqs]
    assert changed == [["gen.txt"], ["gen.txt"], ["gen.txt"], ["gen.txt"], ["gen.txt"]]
    for i, (seq, state) in enumerate(zip(seqs, states, strict=True)):
        into = tmp_path / f"at-{i}"
        restore(session, seq, into)
        assert tree_snapshot(into) == state, f"checkpoint {i}"
        assert all(c.ok for c in validate(into))
    assert "gen.txt" not in states[0] and "gen.txt" not in states[3]


@forkpoint.tool
def cp_checkpoint_inside() -> dict[str, Any]:
    """A tool that takes a checkpoint while it runs."""
    return {"seq": forkpoint.checkpoint("inside a tool")}


# --------------------------------------------------------------------------- (d) round trip


def test_restore_round_trip_of_binary_modes_deletions_and_symlinks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(7)
    repo = make_repo(
        tmp_path / "repo",
        {
            "README.md": "# project\n",
            "bin.dat": bytes(rng.randrange(256) for _ in range(3000)),
            "run.sh": "#!/bin/sh\necho hi\n",
            "old.txt": "to be deleted\n",
            "staged.txt": "v1\n",
            "dir with space/ünïcode.txt": "x\n",
        },
    )
    (repo / "link").symlink_to("README.md")
    sh_git(repo, "add", "link")
    sh_git(repo, "commit", "-q", "-m", "tracked symlink")
    # Tracked changes: binary content, an executable bit, a deletion, a retargeted symlink, staged
    # and partly staged edits.
    (repo / "bin.dat").write_bytes(b"\x00\xff\r\n" + bytes(rng.randrange(256) for _ in range(5000)))
    (repo / "run.sh").chmod(0o755)
    (repo / "old.txt").unlink()
    (repo / "link").unlink()
    (repo / "link").symlink_to("run.sh")
    (repo / "staged.txt").write_text("v2\n")
    sh_git(repo, "add", "staged.txt")
    (repo / "new_staged.txt").write_text("staged\n")
    sh_git(repo, "add", "new_staged.txt")
    (repo / "new_staged.txt").write_text("staged, then edited\n")
    (repo / "dir with space/ünïcode.txt").write_text("y\n")
    # Untracked: binary, executable, symlinks (one dangling, one to a folder), nested folders.
    (repo / "u.bin").write_bytes(bytes(range(256)) * 4)
    (repo / "tool.sh").write_text("#!/bin/sh\n")
    (repo / "tool.sh").chmod(0o750)
    (repo / "ulink").symlink_to("bin.dat")
    (repo / "dangling").symlink_to("does/not/exist")
    (repo / "udir" / "deep").mkdir(parents=True)
    (repo / "udir" / "deep" / "n.txt").write_text("nested\n")
    (repo / "dirlink").symlink_to("udir")
    original_status = status(repo)
    original_files = tree_snapshot(repo)
    assert " D old.txt" in original_status and "M  staged.txt" in original_status
    assert "AM new_staged.txt" in original_status and "?? u.bin" in original_status

    monkeypatch.chdir(repo)  # the session header looks at the repository too
    before = git_dir_snapshot(repo)
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    session = Session.load(rec.session_path)
    cp = session.events[seq - 1]
    assert git_dir_snapshot(repo) == before, "taking a checkpoint wrote into the repository"
    assert sorted(cp["source"]["changed"]) == sorted(
        ["bin.dat", "run.sh", "old.txt", "link", "staged.txt", "new_staged.txt", "dir with space/ünïcode.txt"]
    )
    assert b"GIT binary patch" in patch_bytes(cp["source"])
    assert b"old mode 100644\nnew mode 100755" in patch_bytes(cp["source"])
    rows = {r[0]: r for r in manifest_rows(cp["workspace"])}
    assert set(rows) == {"u.bin", "tool.sh", "ulink", "dangling", "udir/deep/n.txt", "dirlink"}
    assert rows["tool.sh"][2] == 0o750 and rows["ulink"][1] == "symlink" and rows["dirlink"][1] == "symlink"

    into = tmp_path / "restored"
    restore(session, seq, into)
    checks = validate(into)
    assert all(c.ok for c in checks), checks
    assert tree_snapshot(into) == original_files
    assert status(into) == original_status
    assert sh_git(into, "rev-parse", "HEAD") == sh_git(repo, "rev-parse", "HEAD")
    assert sh_git(into, "symbolic-ref", "HEAD") == "refs/heads/main\n"
    assert sh_git(into, "diff", "--cached", "--binary") == sh_git(repo, "diff", "--cached", "--binary")
    # The original repository was only read.
    assert git_dir_snapshot(repo) == before
    assert tree_snapshot(repo) == original_files and status(repo) == original_status

    # A change in the restored directory is caught, and named.
    (into / "u.bin").write_bytes(b"changed")
    (into / "run.sh").chmod(0o644)
    checks = checks_by_name(into)
    assert not checks["source tree hash"].ok
    assert not checks["workspace fingerprint"].ok
    assert checks["workspace fingerprint"].actual["changed"] == ["u.bin"]


def test_restore_refuses_a_non_empty_target(three_runs: Runs, tmp_path: Path) -> None:
    s = three_runs.sessions["repro.py"]
    target = tmp_path / "busy"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(CheckpointError, match="not empty"):
        restore(s, final_checkpoint(s)["seq"], target)
    assert [p.name for p in target.iterdir()] == ["keep.txt"]
    result = cli("restore", f"{s.path}@{final_checkpoint(s)['seq']}", "--into", str(target))
    assert result.exit_code != 0 and "not empty" in result.output


def test_a_fork_refuses_an_override_past_its_checkpoint_before_restoring(
    three_runs: Runs, tmp_path: Path
) -> None:
    """An override of a call recorded after the fork's checkpoint (live in every arm) was refused
    only after each arm had been restored and validated, its table said "invalid", and an empty
    child session was left in the store."""
    s = three_runs.sessions["repro.py"]
    first = next(c for c in s.by_type("checkpoint") if c["boundary"] == "resumable")
    before = session_dirs(three_runs.store)
    with pytest.raises(UsageError, match=f"recorded after checkpoint seq {first['seq']}.*would never apply"):
        fork_arms(
            s,
            first["seq"],
            ["true"],
            arms=1,
            into=tmp_path / "arms",
            overrides=["tool:cp_write_file.result={}"],
        )
    assert not (tmp_path / "arms").exists() and session_dirs(three_runs.store) == before


@pytest.mark.parametrize("target", ["dangling symlink", "under a file", "a file"])
def test_restore_into_what_cannot_be_a_new_directory_says_so(
    three_runs: Runs, tmp_path: Path, target: str
) -> None:
    """A dangling symlink or a path under a file gave a Python traceback; a file, "is not empty"."""
    s = three_runs.sessions["repro.py"]
    (tmp_path / "file").write_text("mine")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    into = {"dangling symlink": "dangling", "under a file": "file/sub", "a file": "file"}[target]
    result = cli("restore", f"{s.path}@{final_checkpoint(s)['seq']}", "--into", str(tmp_path / into))
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and "Traceback" not in said, said
    assert "is not a directory" in said or "cannot make the directory to restore into" in said, said
    assert (tmp_path / "file").read_text() == "mine" and not (tmp_path / "nowhere").exists()


# --------------------------------------------------------------------------- hostile archives


def crafted_session(store: Path, rows: list[list[Any]], blobs: dict[str, bytes]) -> Session:
    writer = SessionWriter.create(store, make_header(argv=["crafted"]))
    for data in blobs.values():
        writer.blobs.put(data)
    seq = writer.append(
        {
            "type": "checkpoint",
            "boundary": "resumable",
            "reason": "crafted",
            "turn": 1,
            "source": None,
            # its true fingerprint, as an attacker would write it (restore checks it)
            "workspace": {"root": "/nowhere", "fingerprint": digest(rows), "manifest": rows},
            "context": None,
            "context_digest": None,
        }
    )
    writer.close()
    assert seq == 1
    return Session.load(writer.path)


def test_a_manifest_that_does_not_match_its_fingerprint_restores_nothing(tmp_path: Path) -> None:
    """What restore would write must be the state that was taken: a manifest whose rows do not hash
    to the checkpoint's fingerprint (damaged, or rebuilt wrong from an earlier one) is refused,
    naming the checkpoint, before anything is written."""
    data = b"print('hi')\n"
    rows = [["a.py", "file", 0o644, len(data), sha256_hex(data)]]
    session = crafted_session(tmp_path / "store", rows, {"a": data})
    event = session.by_type("checkpoint")[0]
    event["workspace"]["fingerprint"] = digest([["b.py", *rows[0][1:]]])  # taken of another state
    into = tmp_path / "into"
    with pytest.raises(CheckpointError, match=r"@1: its workspace manifest does not match its fingerprint"):
        restore(session, 1, into)
    assert not into.exists()
    event["workspace"]["fingerprint"] = digest(rows)
    restore(session, 1, into)
    assert (into / "a.py").read_bytes() == data


@pytest.mark.parametrize("case", ["dotdot", "absolute", "under-symlink", "through-dotgit", "nested-dotdot"])
def test_hostile_manifest_is_refused_and_nothing_is_written_outside(tmp_path: Path, case: str) -> None:
    from forkpoint.canonical import sha256_hex

    evil = b"pwned\n"
    outside = tmp_path / "outside"
    outside.mkdir()
    h = sha256_hex(evil)
    link_target = str(outside).encode()
    rows = {
        "dotdot": [["../evil", "file", 0o644, len(evil), h]],
        "absolute": [[str(tmp_path / "abs_evil.txt"), "file", 0o644, len(evil), h]],
        "under-symlink": [
            ["escape", "symlink", 0o777, len(link_target), sha256_hex(link_target)],
            ["escape/evil.txt", "file", 0o644, len(evil), h],
        ],
        "through-dotgit": [[".git/hooks/post-checkout", "file", 0o755, len(evil), h]],
        "nested-dotdot": [
            ["ok.txt", "file", 0o644, len(evil), h],
            ["a/../../evil", "file", 0o644, len(evil), h],
        ],
    }[case]
    session = crafted_session(tmp_path / "store", rows, {"e": evil, "l": link_target})
    parent = tmp_path / "parent"
    parent.mkdir()
    with pytest.raises(CheckpointError, match="refusing"):
        restore(session, 1, parent / "into")
    assert list(parent.iterdir()) == []  # the half-made target is gone too
    assert list(outside.iterdir()) == []
    assert not (tmp_path / "abs_evil.txt").exists() and not (tmp_path / "evil").exists()
    result = cli("restore", f"{session.path}@1", "--into", str(parent / "into"))
    assert result.exit_code != 0 and "refusing" in result.output


def test_a_tracked_symlink_pointing_outside_cannot_be_written_through(tmp_path: Path) -> None:
    """The archive's rows are fine on their own, but the restored tree has a symlink leaving it."""
    from forkpoint.canonical import sha256_hex

    outside = tmp_path / "outside"
    outside.mkdir()
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    (repo / "out").symlink_to(outside)
    sh_git(repo, "add", "out")
    sh_git(repo, "commit", "-q", "-m", "link")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    # Tamper: add a row under the tracked symlink (the log is rewritten by hand, hash chain aside).
    log = rec.session_path / "session.jsonl"
    lines = log.read_bytes().splitlines()
    event = stored_lines(rec.session_path)[seq]
    evil = b"pwned\n"
    BlobStore(rec.session_path / "blobs").put(evil)
    event["workspace"]["manifest"] = [["out/evil.txt", "file", 0o644, len(evil), sha256_hex(evil)]]
    event["workspace"]["fingerprint"] = digest(event["workspace"]["manifest"])  # as an attacker would
    lines[seq] = orjson.dumps(event)  # (a plain line: it was packed, maybe)
    log.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(CheckpointError, match="symlink outside"):
        restore(Session.load(rec.session_path), seq, tmp_path / "into")
    assert list(outside.iterdir()) == [] and not (tmp_path / "into").exists()


# --------------------------------------------------------------------------- options and plain folders


def test_include_ignored(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {".gitignore": "*.log\nbuild/\n", "a.py": "x = 1\n"})
    (repo / "run.log").write_text("log line\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.bin").write_bytes(b"\x00\x01")
    (repo / "scratch.py").write_text("print(1)\n")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        plain = forkpoint.checkpoint()
    with forkpoint.record(store=tmp_path / "store", workspace=repo, include_ignored=True) as rec2:
        full = forkpoint.checkpoint()
    cp_plain = Session.load(rec.session_path).events[plain - 1]
    cp_full = Session.load(rec2.session_path).events[full - 1]
    assert [r[0] for r in manifest_rows(cp_plain["workspace"])] == ["scratch.py"]
    assert [r[0] for r in manifest_rows(cp_full["workspace"])] == ["build/out.bin", "run.log", "scratch.py"]
    assert cp_full["workspace"]["include_ignored"] is True
    into = tmp_path / "full"
    restore(Session.load(rec2.session_path), full, into)
    assert all(c.ok for c in validate(into)), validate(into)
    assert (into / "build" / "out.bin").read_bytes() == b"\x00\x01"
    assert status(into) == status(repo)


@pytest.mark.slow
def test_include_ignored_through_the_cli(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {".gitignore": "*.log\n", "a.py": "x = 1\n"})
    (repo / "ignored.log").write_text("x\n")
    code = (
        "import forkpoint, pathlib; pathlib.Path('new.txt').write_text('n'); "
        "print('SEQ', forkpoint.checkpoint())"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "forkpoint.cli", "record", "--store", str(tmp_path / "store"),
         "--workspace", str(repo), "--include-ignored", "--", sys.executable, "-c", code],
        cwd=repo, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (session_dir,) = session_dirs(tmp_path / "store")
    cp = Session.load(session_dir).by_type("checkpoint")[0]
    assert [r[0] for r in manifest_rows(cp["workspace"])] == ["ignored.log", "new.txt"]


def test_plain_folder_checkpoints_and_restores(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    (folder / "sub").mkdir(parents=True)
    (folder / "notes.txt").write_text("hello\n")
    (folder / "sub" / "data.bin").write_bytes(bytes(range(256)))
    (folder / "run.sh").write_text("#!/bin/sh\n")
    (folder / "run.sh").chmod(0o755)
    (folder / "link").symlink_to("notes.txt")
    (folder / "sublink").symlink_to("sub")
    with forkpoint.record(store=folder / ".forkpoint", workspace=folder) as rec:
        seq = forkpoint.checkpoint()
    session = Session.load(rec.session_path)
    cp = session.events[seq - 1]
    assert cp["source"] is None and cp["workspace"]["listing"] == "plain"
    assert [r[0] for r in manifest_rows(cp["workspace"])] == [
        "link",
        "notes.txt",
        "run.sh",
        "sub/data.bin",
        "sublink",
    ]
    into = tmp_path / "back"
    restore(session, seq, into)
    assert all(c.ok for c in validate(into)), validate(into)
    expected = {k: v for k, v in tree_snapshot(folder).items() if not k.startswith(".forkpoint")}
    assert tree_snapshot(into) == expected
    (into / "notes.txt").write_text("changed\n")
    (into / "extra.txt").write_text("new\n")
    fp = checks_by_name(into)["workspace fingerprint"]
    assert not fp.ok and fp.actual["changed"] == ["notes.txt"] and fp.actual["extra"] == ["extra.txt"]


def test_a_repository_without_commits_is_a_workspace(tmp_path: Path) -> None:
    repo = tmp_path / "fresh"
    repo.mkdir()
    sh_git(repo, "init", "-q")
    (repo / ".gitignore").write_text("*.tmp\n")
    (repo / "a.py").write_text("a\n")
    (repo / "b.tmp").write_text("ignored\n")
    sh_git(repo, "add", "a.py")  # staged, but there is no commit to diff against
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    cp = Session.load(rec.session_path).events[seq - 1]
    assert cp["source"] is None
    assert [r[0] for r in manifest_rows(cp["workspace"])] == [".gitignore", "a.py"]
    restore(Session.load(rec.session_path), seq, tmp_path / "r")
    assert all(c.ok for c in validate(tmp_path / "r"))
    # Restored inside another repository, it is a repository of its own, as it was: a plain folder
    # there had an arm's `git add -A && git commit` commit into the other one.
    outer = make_repo(tmp_path / "outer", {"x.txt": "x\n"})
    inner = restore(Session.load(rec.session_path), seq, outer / "arm")
    assert sh_git(inner, "rev-parse", "--show-toplevel").strip() == str(inner)
    assert "??" in status(inner) and all(c.ok for c in validate(inner))
    assert status(outer) == "?? arm/\n"


# --------------------------------------------------------------------------- independence from git config


def test_user_git_config_changes_neither_tree_nor_patch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(
        tmp_path / "repo",
        {"crlf.txt": b"one\r\ntwo\r\n", "plain.txt": "alpha\nbeta\n", "b.txt": "b\n"},
    )
    (repo / "crlf.txt").write_bytes(b"one\r\nTWO\r\nthree\r\n")
    (repo / "plain.txt").write_text("alpha\nBETA\ngamma\n")
    (repo / "b.txt").rename(repo / "c.txt")  # a rename git would detect with diff.renames

    def take(n: int) -> dict[str, Any]:
        ws = Workspace.open(repo, tmp_path / f"store{n}")
        ws.objects = tmp_path / f"objects{n}"
        event = checkpoint_event(
            ws, BlobStore(tmp_path / f"blobs{n}"), boundary="resumable", turn=1, context=None, reason="t"
        )
        assert not event.get("error"), event.get("error")
        return event["source"]

    reference = take(0)
    assert b"\r\n" in patch_bytes(reference)  # no line-ending conversion in the canonical diff
    plain_diff = sh_git(repo, "diff")

    diffy = tmp_path / "home-diff"  # only diff settings: the user's stat cache is still trusted
    diffy.mkdir()
    (diffy / ".gitconfig").write_text(
        "[diff]\n\texternal = /bin/false\n\tnoprefix = true\n\trenames = copies\n\talgorithm = patience\n"
        '[diff "upper"]\n\ttextconv = tr a-z A-Z\n[core]\n\tquotepath = true\n'
    )
    evil = tmp_path / "home-crlf"  # line-ending conversion and an attributes file of the user's
    evil.mkdir()
    (evil / ".gitconfig").write_text(
        (diffy / ".gitconfig").read_text() + f"\tautocrlf = true\n\tattributesFile = {evil / 'attributes'}\n"
    )
    (evil / "attributes").write_text("*.txt diff=upper\n")
    for n, home in enumerate((diffy, evil), start=1):
        monkeypatch.setenv("HOME", str(home))
        # The user's own git is affected by this config ...
        assert sh_git(repo, "diff", check=False) != plain_diff
        sh_git(repo, "status")  # ... and refreshes the index's stat cache under it
        if home is evil:
            crlf = sh_git(repo, "hash-object", "crlf.txt").strip()
            assert crlf != sh_git(repo, "-c", "core.autocrlf=false", "hash-object", "crlf.txt").strip()
            sh_git(repo, "add", "-u")  # stage with CRLF → LF conversion: stat cache and content disagree
        source = take(n)
        assert source["tree"] == reference["tree"]
        assert patch_bytes(source) == patch_bytes(reference)
        assert source["diff_hash"] == reference["diff_hash"]
        assert source["changed"] == ["b.txt", "crlf.txt", "plain.txt"]


# --------------------------------------------------------------------------- storage


def test_checkpoints_cost_what_changed_not_the_whole_state(tmp_path: Path) -> None:
    rng = random.Random(3)

    def text(n: int) -> str:
        return "".join(f"{rng.getrandbits(64):016x}\n" for _ in range(n // 17))

    repo = make_repo(
        tmp_path / "repo", {**{f"src/m{i}.py": text(3000) for i in range(30)}, "data.txt": "v0\n"}
    )
    for i in range(10):  # a sizeable diff that then stays put
        (repo / f"src/m{i}.py").write_text(text(3000))
    for i in range(20):  # and scratch files
        (repo / f"scratch_{i}.txt").write_text(text(3000))
    changed = 16_000
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        session_dir = rec.session_path
        base = dir_bytes(session_dir)
        (repo / "data.txt").write_text(text(changed))
        rec.checkpoint()
        first = dir_bytes(session_dir) - base
        for _ in range(19):
            (repo / "data.txt").write_text(text(changed))  # one file changes, entirely
            rec.checkpoint()
        total = dir_bytes(session_dir) - base
    per_checkpoint = (total - first) / 19
    print(f"storage: first {first}, then {per_checkpoint:.0f} per checkpoint, total {total}")
    assert per_checkpoint < 2 * changed + 8_000, (first, per_checkpoint)
    assert total < 20 * first / 3, (first, total)
    cps = Session.load(session_dir).by_type("checkpoint")
    assert len(cps) == 20 and len({c["source"]["tree"] for c in cps}) == 20
    assert len({c["workspace"]["fingerprint"] for c in cps}) == 1
    # Each checkpoint still restores to exactly its own state.
    restore(Session.load(session_dir), cps[4]["seq"], tmp_path / "r4")
    assert all(c.ok for c in validate(tmp_path / "r4"))


def test_an_unchanged_checkpoint_costs_references(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    for i in range(29):  # the untracked files of a real agent's repository (5.5 KB of manifest)
        (repo / "notes" / f"n{i % 3}").mkdir(parents=True, exist_ok=True)
        (repo / "notes" / f"n{i % 3}" / f"scratch_note_{i:02d}.md").write_text(f"note {i}\n" * 20)
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        for _ in range(10):
            rec.checkpoint()
    lines = stored_lines(rec.session_path)
    # (each line's size as stored, packed or not: what the encodings leave, before packing)
    stored = [(x, len(orjson.dumps(x))) for x in lines if x.get("type") == "checkpoint"]
    assert len(stored) == 10
    (first, first_size), rest = stored[0], stored[1:]
    # The first checkpoint refers to the manifest's blob; no line carries the rows (nor a file name).
    assert "manifest" not in first["workspace"] and "$blob" in first["workspace"]["manifest_json"]
    assert not any("scratch_note" in orjson.dumps(x).decode() for x in lines)
    # Each unchanged one refers to the line that holds its state: the envelope and two references.
    for line, size in rest:
        assert line["source"] == line["workspace"] == {"$same": first["seq"]}
        assert size < 550 < first_size - 500, (size, first_size)
    session = Session.load(rec.session_path)
    cps = session.by_type("checkpoint")
    assert all(c["source"] == cps[0]["source"] and c["workspace"] == cps[0]["workspace"] for c in cps)
    assert len(manifest_rows(cps[-1]["workspace"])) == 29
    assert verify_session(rec.session_path).ok
    restore(Session.load(rec.session_path), cps[-1]["seq"], tmp_path / "by-ref")
    assert tree_snapshot(tmp_path / "by-ref")["notes/n1/scratch_note_28.md"][2] == b"note 28\n" * 20
    assert all(c.ok for c in validate(tmp_path / "by-ref"))
    # The same state as sessions recorded before kept it (whole fields in every line, the manifest
    # as a blob or inline) loads, verifies and restores to exactly the same files.
    monkeypatch.setattr(sys.modules["forkpoint.log.writer"], "SAME_FIELDS", {})
    for form in ("manifest_json", "manifest"):
        if form == "manifest":
            monkeypatch.setattr(sys.modules["forkpoint.checkpoint.workspace"], "MANIFEST_INLINE_MAX", 1 << 20)
        with forkpoint.record(store=tmp_path / "store", workspace=repo) as old:
            old.checkpoint()
            old.checkpoint()
        cp_lines = [x for x in stored_lines(old.session_path) if x.get("type") == "checkpoint"]
        assert len(cp_lines) == 2 and all(form in x["workspace"] and "repo" in x["source"] for x in cp_lines)
        cp = Session.load(old.session_path).by_type("checkpoint")[-1]
        assert manifest_rows(cp["workspace"]) == manifest_rows(cps[-1]["workspace"])
        assert cp["workspace"]["fingerprint"] == cps[-1]["workspace"]["fingerprint"]
        assert verify_session(old.session_path).ok
        restore(Session.load(old.session_path), cp["seq"], tmp_path / form)
        assert tree_snapshot(tmp_path / "by-ref") == tree_snapshot(tmp_path / form)
        assert all(c.ok for c in validate(tmp_path / form))


def test_a_changed_manifest_costs_its_changed_rows(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    notes = repo / "notes"
    notes.mkdir()
    for i in range(300):  # 30 KB of manifest
        (notes / f"n{i:03d}.md").write_text(f"note {i}\n")
    states: list[dict[str, bytes]] = []
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        for turn in range(30):  # an agent's turn: one file written, one edited, one removed
            (repo / f"scratch_{turn:02d}.py").write_text(f"print({turn})\n")
            (notes / f"n{turn:03d}.md").write_text(f"note {turn}, edited\n")
            (notes / f"n{299 - turn:03d}.md").unlink()
            rec.checkpoint()
            states.append({p: (repo / p).read_bytes() for p in untracked_files(repo)})
    lines = [x for x in stored_lines(rec.session_path) if x.get("type") == "checkpoint"]
    raw = [orjson.dumps(x) for x in lines]  # (as stored, packed or not: what the encodings leave)
    cps = Session.load(rec.session_path).by_type("checkpoint")
    assert len(lines) == len(cps) == 30
    for cp, state in zip(cps, states, strict=True):
        rows = manifest_rows(cp["workspace"])
        assert {r[0]: r[4] for r in rows} == {p: sha256_hex(data) for p, data in state.items()}
        assert digest(rows) == cp["workspace"]["fingerprint"]
    # The second checkpoint holds what changed since the first (three rows), and the first's blob.
    first, second = lines[0]["workspace"], lines[1]["workspace"]
    assert "manifest_json" in first
    assert second["manifest_base"] == first["manifest_json"]
    assert [len(second["manifest_changes"][k]) for k in ("drop", "put")] == [1, 2]
    assert len(raw[1]) < 1_500 and first["manifest_json"]["size"] > 25_000
    # Changes pile up on one base until they cost about what the whole manifest does: then whole again.
    rebased = [i for i, line in enumerate(lines) if "manifest_json" in line["workspace"]]
    assert rebased[0] == 0 and 1 < len(rebased) < 6, rebased
    manifests = sum(len(x) for x in raw if b'"manifest_changes"' in x or b'"manifest_json"' in x) + sum(
        f.stat().st_size for f in (rec.session_path / "blobs").rglob("*") if f.name.endswith(".zst")
    )
    assert manifests < 150_000  # whole at each of them: 30 x 12 KB, compressed
    assert verify_session(rec.session_path).ok
    restore(Session.load(rec.session_path), cps[-2]["seq"], tmp_path / "restored")
    restored = tree_snapshot(tmp_path / "restored")
    assert {p: restored[p][2] for p in states[-2]} == states[-2]
    assert all(c.ok for c in validate(tmp_path / "restored"))


def test_a_forged_manifest_change_fails_verify_naming_the_checkpoint(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    for i in range(20):
        (repo / f"n{i:02d}.md").write_text(f"note {i}\n")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        rec.checkpoint()
        (repo / "n00.md").write_text("edited\n")
        rec.checkpoint()
    log = rec.session_path / "session.jsonl"
    lines = stored_lines(rec.session_path)  # (written back as plain lines)
    (forged,) = [x for x in lines if "manifest_changes" in x.get("workspace", {})]
    forged["workspace"]["manifest_changes"]["put"][0][4] = sha256_hex(b"note 0\n")  # the file as it was
    prev = ""
    for obj in lines:  # the chain made whole again: only what the checkpoint layer checks is wrong
        if "seq" in obj:
            obj["prev"] = prev
        obj.pop("hash")
        obj["hash"] = line_hash(obj)
        prev = obj["hash"]
    log.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in lines))
    v = verify_session(rec.session_path)
    assert v.problems == [
        f"{log}:{lines.index(forged) + 1}: checkpoint seq {forged['seq']}: "
        "the workspace manifest does not match its fingerprint"
    ]


# --------------------------------------------------------------------------- fork, end to end

FORKPOINT_CLI = [sys.executable, "-m", "forkpoint.cli"]


def demo_agent(srv: ModelServer) -> list[str]:
    """The command of the bundled demo agent against ``srv``, working in its current directory."""
    return [sys.executable, "-m", "forkpoint.demo.agent", "--base-url", srv.base_url, "--workdir", "."]


def record_demo(store: Path, agent: list[str], cwd: Path, *options: str) -> None:
    """``forkpoint record --store STORE OPTIONS -- AGENT`` run in ``cwd``; it must succeed."""
    rec = subprocess.run(
        [*FORKPOINT_CLI, "record", "--store", str(store), *options, "--", *agent],
        cwd=cwd, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert rec.returncode == 0, rec.stderr


@pytest.mark.slow
def test_fork_two_arms_end_to_end(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC_BUGGY, ".gitignore": "__pycache__/\n"})
    store = tmp_path / "store"
    fp = FORKPOINT_CLI
    with ModelServer(turns=3) as srv:
        agent = demo_agent(srv)
        record_demo(store, agent, repo, "--workspace", str(repo))
        (parent_dir,) = session_dirs(store)
        parent = Session.load(parent_dir)
        resumable = [c for c in parent.by_type("checkpoint") if c["boundary"] == "resumable"]
        assert len(resumable) == 4
        cp = resumable[1]  # after the first tool call: one scratch file exists
        scratch = [r[0] for r in manifest_rows(cp["workspace"])]
        assert len(scratch) == 1 and scratch[0].endswith(".py")
        original = tree_snapshot(repo)
        arms = tmp_path / "arms"
        fork = subprocess.run(
            [*fp, "fork", f"{parent.id}@{cp['seq']}", "--arms", "2", "--into", str(arms), "--store", str(store),
             "--", *agent],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        # Without --into, every fork gets a folder of its own: forking the same checkpoint again works.
        tmp = tmp_path / "tmp"
        tmp.mkdir()
        again = [
            subprocess.run(
                [*fp, "fork", f"{parent.id}@{cp['seq']}", "--arms", "1", "--store", str(store), "--", *agent],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=120,
                env={**os.environ, "TMPDIR": str(tmp)},
            )  # fmt: skip
            for _ in range(2)
        ]
    assert [r.returncode for r in again] == [0, 0], [r.stderr for r in again]
    folders = sorted((tmp / f"forkpoint-forks-{os.getuid()}").iterdir())
    assert len(folders) == 2 and all(f.name.startswith(f"{parent.id}@{cp['seq']}-") for f in folders)
    assert all((f / "arm-1" / scratch[0]).exists() for f in folders)
    assert fork.returncode == 0, fork.stdout + fork.stderr
    assert fork.stderr.count("pass  source tree hash") == 2
    assert fork.stderr.count("pass  referenced files exist") == 2
    assert "FAIL" not in fork.stderr
    assert "fork of" in fork.stdout and fork.stdout.count("valid") >= 2
    # Each arm's directory, and beside it what its agent printed.
    assert sorted(p.name for p in arms.iterdir()) == ["arm-1", "arm-1.log", "arm-2", "arm-2.log"]
    assert all("final:" in (arms / f"arm-{i}.log").read_text() for i in (1, 2))
    children = [Session.load(d) for d in session_dirs(store) if d != parent_dir]
    assert len(children) == 4  # two arms, then one arm twice
    listed = subprocess.run(
        [*fp, "checkpoints", str(children[0].path)], capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 1
    assert f"it is a replay of session {parent.id}" in " ".join(listed.stderr.split())
    for child in children:
        assert child.header["parent"] == {"session_id": parent.id, "seq": cp["seq"]}
        assert (child.end() or {}).get("exit_code") == 0
    # Each arm's session says where it ran: its own folder (it said the original repository's).
    assert sorted(str(Path(c.header["cwd"]).relative_to(arms)) for c in children[:2]) == ["arm-1", "arm-2"]
    for arm in ("arm-1", "arm-2"):
        d = arms / arm
        assert (d / scratch[0]).exists()  # restored from the checkpoint
        assert (d / "test_log.txt").exists()  # the live continuation ran the tests there
        assert (d / META_DIR / "checkpoint.json").exists()
    assert tree_snapshot(repo) == original  # the arms ran in their own directories


@pytest.mark.slow
def test_an_arm_that_made_no_call_from_its_checkpoint_is_not_measured(tmp_path: Path) -> None:
    """From the first checkpoint (no recorded call before it to leave unasked), a command that does
    not run the agent (``python -c pass``) made no call at all: fork said "0 replayed, 0 model + 0
    tool live", measured its outcome, "1/1 passed", exited 0, and sweep called the checkpoint the
    last recoverable one. The demo agent resumed there goes live, and is measured."""
    repo = make_repo(tmp_path / "repo", {"calc.py": CALC_BUGGY, ".gitignore": "__pycache__/\n"})
    store = tmp_path / "store"
    nothing = [sys.executable, "-c", "pass"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*FORKPOINT_CLI, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120,
            env=os.environ | {"COLUMNS": "400"},
        )  # fmt: skip

    with ModelServer(turns=2) as srv:
        agent = demo_agent(srv)
        record_demo(store, agent, repo)
        (parent_dir,) = session_dirs(store)
        parent = Session.load(parent_dir)
        first = min(c["seq"] for c in parent.by_type("checkpoint") if c["boundary"] == "resumable")
        fork = run("fork", f"{parent.id}@{first}", "--store", str(store), "--into", str(tmp_path / "idle"),
                   "--outcome", "true", "--", *nothing)  # fmt: skip
        page = tmp_path / "sweep.html"
        sweep = run("sweep", parent.id, "--store", str(store), "--to", str(first), "--arms", "2",
                    "--into", str(tmp_path / "sweep"), "--outcome", "true", "--html", str(page), "--", *nothing)  # fmt: skip
        # (no arm of the store measured anything: the page draws the sweep's arms, and why)
        unmeasured = view_model(parent)["sweep"]
        live = run("fork", f"{parent.id}@{first}", "--store", str(store), "--into", str(tmp_path / "live"),
                   "--outcome", "true", "--", *agent)  # fmt: skip
    said, text = " ".join(fork.stderr.split()), " ".join(fork.stdout.split())
    assert fork.returncode == 1, fork.stdout + fork.stderr
    assert (
        f"arm 1: the command made no call from checkpoint seq {first} on (exit code 0), so it never went "
        f"live: does it run the recorded agent? What it printed: {tmp_path / 'idle' / 'arm-1.log'}" in said
    ), fork.stderr
    assert "outcome: no run measured; 1 arm(s) never went live (not measured)" in text, text
    rows = [line.split() for line in sweep.stdout.splitlines() if line.startswith("@")]
    assert sweep.returncode == 1, sweep.stdout + sweep.stderr
    assert [(r[0], r[3]) for r in rows] == [(f"@{first}", "0/0")], sweep.stdout
    assert "last recoverable" not in sweep.stdout
    assert (
        "no arm was measured, from any checkpoint: nothing says whether the run was recoverable"
        in " ".join(sweep.stdout.split())
    )
    assert sweep.stderr.count(f"not measured: the command made no call from checkpoint seq {first} on") == 2
    embedded = re.search(r'id="forkpoint-data">(.*?)</script>', page.read_text(), re.S)
    assert embedded is not None
    drawn = json.loads(embedded.group(1))["sweep"]
    assert [(p["seq"], p["passed"], p["ran"]) for p in drawn["points"]] == [(first, 0, 0)]
    assert drawn["last_recoverable"] is None
    (point,) = drawn["points"]
    assert [why.split(" (exit code")[0] for why in point["not_measured"]] == [
        f"the command made no call from checkpoint seq {first} on"
    ] * 2, point
    assert [(p["seq"], p["ran"], p["not_measured"]) for p in unmeasured["points"]] == [
        (first, 0, ["it made no call from its checkpoint on"] * 2)
    ], unmeasured
    assert "1 arm(s) of 1 other fork(s) or sweep(s) are left out" in unmeasured["note"], unmeasured
    drawn = view_model(parent)["sweep"]
    assert drawn is not None and [(p["seq"], p["passed"], p["ran"]) for p in drawn["points"]] == [
        (first, 1, 1)
    ]  # only the live arm, measured
    assert live.returncode == 0, live.stdout + live.stderr
    assert "outcome: 1/1 passed" in live.stdout and "0 model + 0 tool live" not in live.stdout, live.stdout
    assert "final:" in (tmp_path / "live" / "arm-1.log").read_text()


def test_a_fork_runs_where_the_recording_ran_and_replaces_nothing_beside_its_arms(tmp_path: Path) -> None:
    """Recorded from a folder of the repository (``repo/sub``), an arm ran at the arm's root: the
    recorded command did not find its script, or its tools wrote elsewhere than when recorded. And
    ``--into DIR`` overwrote a file of the user's named ``arm-1.log``, through a symlink too."""
    repo = make_repo(tmp_path / "repo", {"sub/calc.py": CALC_BUGGY, ".gitignore": "__pycache__/\n"})
    store = tmp_path / "store"
    fp = FORKPOINT_CLI
    with ModelServer(turns=2) as srv:
        agent = demo_agent(srv)
        record_demo(store, agent, repo / "sub")
        (parent_dir,) = session_dirs(store)
        cp = [c for c in Session.load(parent_dir).by_type("checkpoint") if c["boundary"] == "resumable"][1]
        assert cp["cwd"] == "sub"
        arms = tmp_path / "arms"
        arms.mkdir()
        (arms / "arm-1.log").write_text("MY NOTES")
        (tmp_path / "victim.txt").write_text("KEEP")
        (arms / "arm-2.log").symlink_to(tmp_path / "victim.txt")
        fork = [
            *fp,
            "fork",
            f"{parent_dir.name}@{cp['seq']}",
            "--arms",
            "2",
            "--store",
            str(store),
            "--",
            *agent,
        ]
        refused = subprocess.run(
            [*fork[:4], "--into", str(arms), *fork[4:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert refused.returncode == 2 and "already holds arm-1.log, arm-2.log" in refused.stderr, (
            refused.stderr
        )
        assert (arms / "arm-1.log").read_text() == "MY NOTES" and (
            tmp_path / "victim.txt"
        ).read_text() == "KEEP"
        assert sorted(p.name for p in arms.iterdir()) == ["arm-1.log", "arm-2.log"]  # nothing restored
        ran = subprocess.run(
            [*fork[:4], "--into", str(tmp_path / "fresh"), *fork[4:]],
            cwd=tmp_path, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    for i in (1, 2):
        arm = tmp_path / "fresh" / f"arm-{i}"
        assert (arm / "sub" / "test_log.txt").exists() and not (arm / "test_log.txt").exists()
        assert stat.S_IMODE((tmp_path / "fresh" / f"arm-{i}.log").stat().st_mode) == 0o600


def test_a_users_json_paths_leave_a_checkpoints_own_hashes_alone(tmp_path: Path) -> None:
    """JSON paths are for payloads; the log writer applied them to a checkpoint's ``source`` and
    ``workspace`` too: with ``$..fingerprint``, ``$..manifest`` or ``$..tree`` (a device fingerprint,
    a tree of a payload's), every checkpoint was recorded without a word with its hashes replaced,
    failed verify and never restored."""
    from forkpoint import redact

    repo = make_repo(tmp_path / "repo", {"a.py": "x = 1\n"})
    (repo / "a.py").write_text("x = 2\n")
    (repo / "notes.txt").write_text("untracked\n")
    rules = redact.Rules(json_paths=("$..fingerprint", "$..manifest", "$..tree", "$..base"))
    with redact.use_rules(rules), forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    assert seq is not None and verify_session(rec.session_path).ok, verify_session(rec.session_path).problems
    into = tmp_path / "restored"
    restore(Session.load(rec.session_path), seq, into)
    assert (into / "a.py").read_text() == "x = 2\n" and (into / "notes.txt").read_text() == "untracked\n"
    assert all(c.ok for c in validate(into)), validate(into)


def test_a_restored_workspace_validates_under_other_redaction_rules(tmp_path: Path) -> None:
    """Validation scrubbed the restored files again under the rules in force where it ran (a
    forkpoint.toml in the current directory): a file a new rule matched "changed", and a faithful
    restore was reported FAIL. The restored files are the stored bytes, hashed as they are."""
    from forkpoint import redact

    repo = make_repo(tmp_path / "repo", {"a.py": "x = 1\n"})
    (repo / "notes.txt").write_text("turn 1: ask for the order\n")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = forkpoint.checkpoint()
    into = tmp_path / "restored"
    restore(Session.load(rec.session_path), seq, into)
    with redact.use_rules(redact.Rules(patterns=(("turnword", r"turn [0-9]"),))):
        checks = validate(into)
    assert all(c.ok for c in checks), checks
    assert (into / "notes.txt").read_text() == "turn 1: ask for the order\n"


def test_restore_fork_and_sweep_of_a_what_if_run_name_its_parent(tmp_path: Path) -> None:
    """After ``forkpoint fork``, ``last`` is a fork arm, which takes no checkpoints: ``restore``,
    ``fork`` and ``sweep`` of it say so and name the session whose checkpoints to use, as
    ``checkpoints`` does, instead of "no checkpoint at seq 7 (checkpoints: none)"."""
    store = tmp_path / "store"
    parent = SessionWriter.create(store, make_header(argv=["python", "agent.py"]))
    parent.append({"type": "end", "exit_code": 0})
    parent.close()
    arm = SessionWriter.create(
        store, make_header(argv=["python", "agent.py"], parent={"session_id": parent.session_id, "seq": 7})
    )
    arm.append({"type": "end", "exit_code": 0})
    arm.close()
    hint = f"it is a replay of session {parent.session_id}"
    for args in (
        ["checkpoints", "last"],
        ["restore", "last@7", "--into", str(tmp_path / "at-7")],
        ["fork", "last@7", "--", "python", "agent.py"],
        ["sweep", "last", "--outcome", "true", "--", "python", "agent.py"],
    ):
        res = cli(args[0], "--store", str(store), *args[1:])
        assert res.exit_code != 0, (args, res.output)
        assert hint in res.output and f"use {parent.session_id}'s checkpoints" in res.output, (
            args,
            res.output,
        )
    # A session recorded outside a workspace says how to get checkpoints.
    res = cli("restore", f"{parent.session_id}@1", "--into", str(tmp_path / "at-1"), "--store", str(store))
    assert res.exit_code != 0 and "record with --workspace DIR" in res.output, res.output
    assert not (tmp_path / "at-1").exists() and not (tmp_path / "at-7").exists()


def test_each_carried_message_is_scanned_for_paths_once_not_at_every_checkpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every checkpoint of a recording carries the conversation so far, and each scanned all of it
    for the files it mentions: quadratic in the turns (300 turns with 10 KB tool results: 16 s of
    scanning, 0.9 s now). Counted as the conversation objects looked at; the paths are the same."""
    from forkpoint.checkpoint import context

    looked = [0]
    real = context.is_tool_result

    def counting(node: dict[str, Any]) -> bool:
        looked[0] += 1
        return real(node)

    # (nothing remembered from other tests)
    monkeypatch.setattr(context, "_SCANNED", collections.OrderedDict(), raising=False)
    monkeypatch.setattr(context, "is_tool_result", counting)
    turns = 60
    messages: list[dict[str, Any]] = [{"role": "user", "content": "fix calc.py"}]
    found = []
    for t in range(turns):
        call = {
            "id": f"c{t}",
            "type": "function",
            "function": {"name": "edit", "arguments": f'{{"path": "m{t}.py"}}'},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{t}", "content": f"ran /w/src/t{t}.txt: ok"})
        found = referenced_paths({"messages": json.loads(json.dumps(messages))}, root="/w")
    assert looked[0] <= 4 * 2 * turns, looked[0]  # (each message and its call once; was ~turns² * 2)
    expected = sorted({f"m{t}.py" for t in range(turns)} | {f"src/t{t}.txt" for t in range(turns)})
    assert found == expected
    # A scan from nothing agrees.
    monkeypatch.setattr(context, "_SCANNED", collections.OrderedDict(), raising=False)
    assert referenced_paths({"messages": messages}, root="/w") == expected


def test_verify_walks_the_carried_contexts_linearly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each checkpoint carries the conversation so far: verify hashes it without copying it whole in
    Python first (the items walked grew with the square of the length: 2,000 turns took 33 s)."""
    import importlib

    import httpx2

    verify_mod = importlib.import_module("forkpoint.checkpoint.verify")
    codec = importlib.import_module("forkpoint.log.codec")

    def answer(request: httpx2.Request) -> httpx2.Response:
        turn = sum(1 for m in json.loads(request.read())["messages"] if m["role"] == "assistant")
        msg = {"role": "assistant", "content": f"step {turn} " + "x" * 50}
        return httpx2.Response(200, json={"id": "x", "model": "m", "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]})  # fmt: skip

    def session(turns: int) -> Path:
        ws = tmp_path / f"ws{turns}"
        ws.mkdir()
        (ws / "a.txt").write_text("a\n")
        messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        with forkpoint.record(store=tmp_path / f"s{turns}", workspace=ws) as rec:
            with httpx2.Client(transport=httpx2.MockTransport(answer)) as c:
                for _ in range(turns):
                    body = {"model": "m", "messages": messages}
                    r = c.post("http://127.0.0.1:9/v1/chat/completions", json=body)
                    messages.append(r.json()["choices"][0]["message"])
                    messages.append({"role": "user", "content": "more"})
        return rec.session_path

    walked = 0
    real = codec.to_json

    def counted(value: Any, **kw: Any) -> Any:
        nonlocal walked
        walked += 1
        return real(value, **kw)

    monkeypatch.setattr(codec, "to_json", counted)
    monkeypatch.setattr(verify_mod, "to_json", counted)
    per_turn = {}
    for turns in (15, 60):
        path = session(turns)
        assert sum(1 for e in Session.load(path).events if e.get("context_digest")) >= turns
        walked = 0
        assert verify_session(path).ok
        per_turn[turns] = walked / turns
    assert per_turn[60] <= 1.5 * per_turn[15] + 1, per_turn


def test_loading_reads_a_shared_base_manifest_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoints after a base manifest store their changes to it: loading reads that base
    once and shares it, not a copy per checkpoint (a workspace growing a file a turn: the bytes read
    and held grew with the square of the length; 2,000 turns held 587 MB for `checkpoints`)."""

    def session(turns: int) -> Path:
        return growing_workspace_session(
            tmp_path / f"s{turns}", tmp_path / f"ws{turns}", turns, "module_number"
        )

    read = 0
    real = BlobStore.get

    def counted(self: BlobStore, *args: Any, **kw: Any) -> bytes:
        nonlocal read
        data = real(self, *args, **kw)
        read += len(data)
        return data

    monkeypatch.setattr(BlobStore, "get", counted)
    per_turn = {}
    for turns in (50, 200):
        path = session(turns)
        read = 0
        events = Session.load(path).events
        assert any("manifest_base" in (e.get("workspace") or {}) for e in events)
        per_turn[turns] = read / turns
    # The bases themselves grow (a new one when the changes since add up to half of it): with the
    # sharing, the bytes read a turn grow as the square root of the length; without, linearly.
    assert per_turn[200] < 3 * per_turn[50], per_turn


def test_fork_and_sweep_refuse_an_override_naming_no_call_before_any_arm(tmp_path: Path) -> None:
    """``forkpoint sweep --override 'tool:nosuch.result=…'`` restored and validated an arm from every
    checkpoint, then refused the override in each ("not run"), exit 1; ``fork`` refused it before
    any arm but exited 1, where ``replay`` says it as a usage error (exit 2). Both refuse it first,
    as a usage error naming the spec, and leave no arm behind."""
    path = growing_workspace_session(tmp_path / "store", tmp_path / "ws", 3)
    seq = next(c["seq"] for c in Session.load(path).by_type("checkpoint"))
    spec = 'tool:nosuch.result="x"'
    runner = CliRunner()
    for args in (
        ["fork", f"{path}@{seq}", "--into", str(tmp_path / "fork")],
        ["sweep", str(path), "--outcome", "true", "--into", str(tmp_path / "sweep")],
    ):
        r = runner.invoke(main, [*args, "--override", spec, "--", sys.executable, "-c", "pass"])
        assert r.exit_code == 2, (args[0], r.output)
        assert f"override {spec!r}: the session has 0 call(s) of tool 'nosuch'" in r.output, r.output
        assert not Path(args[-1]).exists(), r.output


def test_fork_and_sweep_refuse_a_usage_error_before_announcing_arms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An override naming no recorded call, a bad rule in the ``forkpoint.toml`` where they run, or
    an ``--into`` holding an arm was refused only after "forkpoint: 1 arm on local" (or "1 arm
    per checkpoint") had announced arms that never started; the bad rule, after the arms' folder
    had been made, and left behind."""
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    path = growing_workspace_session(tmp_path / "store", tmp_path / "ws", 2)
    seq = next(c["seq"] for c in Session.load(path).by_type("checkpoint"))
    taken = tmp_path / "taken"
    mine = [taken / "arm-1" / "mine.txt", taken / f"seq-{seq}" / "arm-1" / "mine.txt"]  # fork's, sweep's
    for f in mine:
        f.parent.mkdir(parents=True)
        f.write_text("mine\n")
    monkeypatch.chdir(tmp_path)
    bad_rule = '[match]\nignore = [{ path = "$.body[" }]\n'
    runner = CliRunner()
    for command in (["fork", f"{path}@{seq}"], ["sweep", str(path), "--outcome", "true", "--to", str(seq)]):
        for options, config, said in (
            (["--override", 'model#9.text="x"'], None, "the session has 2 model call(s)"),
            (["--into", str(taken)], None, f"{taken} already holds"),
            ([], bad_rule, "forkpoint.toml"),
        ):
            if config is not None:
                (tmp_path / "forkpoint.toml").write_text(config)
            r = runner.invoke(main, [*command, *options, "--", sys.executable, "-c", "pass"])
            (tmp_path / "forkpoint.toml").unlink(missing_ok=True)
            assert r.exit_code in (1, 2) and said in " ".join(r.output.split()), (command, options, r.output)
            assert " arm " not in r.output and "arms" not in r.output, (command, options, r.output)
    assert all(f.read_text() == "mine\n" for f in mine)
    assert [p for p in temp.rglob("*") if "@" in p.name] == []  # no folder made for arms


def test_fork_from_a_missing_checkpoint_announces_no_arms(tmp_path: Path) -> None:
    """``fork SESSION@5`` where no checkpoint 5 is printed "forkpoint: 1 arm on local (2 at a
    time)" (after starting the executor: Ray, with ``--executor ray``), then the error, whose hint
    fits a session forkpoint.record() made."""
    with forkpoint.record(store=tmp_path / "s") as rec:  # (no workspace: no checkpoints)
        pass
    result = CliRunner().invoke(main, ["fork", f"{rec.session_path}@5", "--", "true"])
    assert result.exit_code != 0 and "has no checkpoint at seq 5" in result.output, result.output
    assert "arm on" not in result.output, result.output
    # Recorded in a git repository (this one), but by forkpoint.record(), which takes it only when
    # given: the hint said "record … inside a git repository", as this one was.
    assert "record with forkpoint.record(workspace=DIR)" in result.output, result.output
