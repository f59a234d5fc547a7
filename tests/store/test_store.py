"""Stores: the local index, and remote stores (memory://, and S3 on a local moto server).

Every S3 request goes to a moto server these tests start on 127.0.0.1: the AWS variables point
botocore at it with dummy credentials (no profile, no config file, no instance metadata), and in
this process name resolution of anything but loopback raises, so nothing can reach AWS.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import multiprocessing
import os
import secrets
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import forkpoint
from forkpoint import store, verify
from forkpoint.cli import main
from forkpoint.log import LOG_NAME, Session, SessionError, SessionWriter
from forkpoint.store import fsspec as remote
from forkpoint.store import list_sessions, resolve
from forkpoint.store.index import ENTRIES, SNAPSHOTS, consolidate, read_index
from forkpoint.store.local import LocalIO
from tests.logutil import take_over_descriptor
from tests.modelserver import LocalServer

pytest.importorskip("fsspec")

FORKPOINT = [str(Path(sys.executable).with_name("forkpoint"))]
if not Path(FORKPOINT[0]).exists():  # pragma: no cover - forkpoint not installed as a script
    FORKPOINT = [sys.executable, "-m", "forkpoint.cli"]

SYSTEM = "You are a careful agent. " * 60  # > 1 KiB: stored as a blob, so uploads have blobs

AGENT = """
import os
import sys

import openai

client = openai.OpenAI(base_url=os.environ["AGENT_BASE_URL"], api_key="sk-test-not-a-real-key", max_retries=0)
system = "You are a careful agent. " * 60
r = client.chat.completions.create(
    model="demo-model",
    messages=[{"role": "system", "content": system}, {"role": "user", "content": sys.argv[1]}],
)
print("answer:", r.choices[0].message.content)
"""

CRASH = """
import os
import sys

import openai

import forkpoint
from forkpoint.store import fsspec as remote


def crash(self, key, data):
    os._exit(17)  # the process dies after the blobs are uploaded, before the log is


remote.RemoteStore._put_log = crash
client = openai.OpenAI(base_url=os.environ["AGENT_BASE_URL"], api_key="sk-test-not-a-real-key", max_retries=0)
with forkpoint.record("crash", store=sys.argv[1]) as rec:
    print(rec.session_path.name, flush=True)
    client.chat.completions.create(
        model="demo-model",
        messages=[{"role": "system", "content": "You are a careful agent. " * 60}, {"role": "user", "content": "hi"}],
    )
"""


KILLED = """
import os
import sys

import openai

import forkpoint

client = openai.OpenAI(base_url=os.environ["AGENT_BASE_URL"], api_key="sk-test-not-a-real-key", max_retries=0)
with forkpoint.record("killed", store=sys.argv[1]) as rec:
    print(rec.session_path.name, flush=True)
    client.chat.completions.create(model="demo-model", messages=[{"role": "user", "content": "hi"}])
    os._exit(9)  # killed mid-recording: no end event, and the recording lock dies with it
"""


OUTLIVES = """
import os
import sys
import time
from pathlib import Path

import openai

here = Path(sys.argv[1])
client = openai.OpenAI(base_url=os.environ["AGENT_BASE_URL"], api_key="sk-test-not-a-real-key", max_retries=0)
client.chat.completions.create(model="demo-model", messages=[{"role": "user", "content": "one"}])
(here / "first-call-done").write_text(str(os.getpid()))
for _ in range(6000):  # until the test says go (at most 60 s)
    if (here / "go").exists():
        break
    time.sleep(0.01)
client.chat.completions.create(model="demo-model", messages=[{"role": "user", "content": "two"}])
"""


def cli(*args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "250", **(env or {})}, catch_exceptions=False)


def ls_ids(output: str) -> list[str]:
    return [line.split()[0] for line in output.splitlines()[1:] if line.strip() and line[:8].isdigit()]


# ----------------------------------------------------------------------------- fixtures

_LOOPBACK = {"127.0.0.1", "localhost", "::1", None}


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No name outside loopback resolves in this process, and every test has its own cache."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else host
        if name not in _LOOPBACK:
            raise socket.gaierror(f"test_store: refusing to resolve {name!r} (loopback only)")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setenv("FORKPOINT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("FORKPOINT_STORE", raising=False)
    monkeypatch.delenv("FORKPOINT_INDEX_MAX_LOOSE", raising=False)


@pytest.fixture(scope="module")
def model(make_server: Callable[..., LocalServer]) -> LocalServer:
    """The tests' local model server (tests/modelserver.py), shared by the module."""
    return make_server()


def remote_fs(url: str) -> tuple[Any, str]:
    rs = store.open_store(url)
    return rs.fs, rs.root


def chat(model: LocalServer, text: str) -> str:
    import openai

    client = openai.OpenAI(base_url=model.openai_base_url, api_key="sk-test-not-a-real-key", max_retries=0)
    r = client.chat.completions.create(
        model="demo-model",
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
    )
    return str(r.choices[0].message.content)


def record_one(url: str, model: LocalServer, name: str) -> tuple[str, str]:
    with forkpoint.record(name, store=url) as rec:
        answer = chat(model, f"question from {name}")
    return rec.session_path.name, answer


def fresh_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str = "other-machine") -> Path:
    """Another machine: an empty mirror, nothing staged."""
    d = tmp_path / name
    monkeypatch.setenv("FORKPOINT_CACHE", str(d))
    return d


def make_session(root: Path, name: str, *, end: bool = True) -> Path:
    """A small local session without any model: one note, and ``end`` unless told not to."""
    w = SessionWriter.create(root, {"name": name, "argv": ["python", f"{name}.py"]}, fsync="never")
    w.append({"type": "note", "text": name, "data": {}})
    if end:
        w.append({"type": "end", "exit_code": 0, "duration_ms": 1.0, "reason": None})
    w.close()
    return w.path


# ----------------------------------------------------------------------------- naming stores


def test_store_names(tmp_path: Path) -> None:
    assert store.store_dir(str(tmp_path / "a")) == tmp_path / "a"
    assert store.store_dir(f"file://{tmp_path}/b") == tmp_path / "b"
    assert isinstance(store.open_store(f"file://{tmp_path}/b"), store.LocalStore)
    mirror = store.store_dir("memory://x/y/")
    assert mirror == store.store_dir("memory://x/y")  # one mirror per store
    assert mirror.is_relative_to(tmp_path / "cache")
    rs = store.open_store(mirror)
    assert isinstance(rs, remote.RemoteStore) and rs.url == "memory://x/y"
    assert oct(mirror.stat().st_mode & 0o777) == "0o700"
    from importlib.util import find_spec

    if find_spec("gcsfs") is None:  # said when the store is named, not after a recording
        with pytest.raises(SessionError, match="gcsfs"):
            store.store_dir("gs://bucket/sessions")
        r = cli("record", "--store", "gs://bucket/sessions", "--", "true")
        assert r.exit_code == 1 and "gcsfs" in r.output


# ----------------------------------------------------------------------------- memory://


def test_a_store_that_cannot_take_the_session_says_so_without_raising_into_the_program(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The store is unreachable as the recording ends, in a program that closed its stderr: the
    "stays staged" warning was written to stderr directly (not through ``say``) and raised
    ValueError out of ``forkpoint.record()`` into the program."""

    def unreachable(self: Any, path: Path, *, blocking: bool = True) -> str | None:
        raise OSError(errno.ECONNREFUSED, "Connection refused")

    monkeypatch.setattr(remote.RemoteStore, "upload", unreachable)
    gone = open(os.devnull, "w")  # noqa: SIM115 (closed on purpose)
    gone.close()
    with monkeypatch.context() as m:
        m.setattr(sys, "stderr", gone)
        with forkpoint.record(store=f"memory:///fp-{secrets.token_hex(4)}/sessions") as rec:
            pass
    assert (rec.session_path / LOG_NAME).is_file()  # staged, for the next upload


def test_a_program_that_closes_the_recording_lock_and_reuses_its_number_keeps_its_file(
    tmp_path: Path,
) -> None:
    """A remote store's ``forkpoint.record()`` holds a lock on the staged session (``.recording``)
    until it ends. A program that closes the descriptors it did not open (``os.closerange(3, …)``,
    as a daemon does) and then opens a file gets the lock's number: the end of the recording closed
    the program's file under it. It is closed only while it is still the lock file."""
    mine = tmp_path / "program.log"
    with forkpoint.record(store=f"memory:///fp-{secrets.token_hex(4)}/sessions"):
        lock_fd = take_over_descriptor(remote.RECORDING, mine)
        os.write(lock_fd, b"the program's own line\n")
    os.write(lock_fd, b"and another\n")  # still open: the recording's end did not close it
    os.close(lock_fd)
    assert mine.read_bytes() == b"the program's own line\nand another\n"


def test_memory_store_record_replay_show_ls_verify(
    model: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"memory:///fp-{secrets.token_hex(4)}/sessions"
    sid, answer = record_one(url, model, "first")
    sid2, _ = record_one(url, model, "second")
    fs, root = remote_fs(url)
    keys = fs.find(root)
    assert f"{root}/{sid}/{LOG_NAME}" in keys and f"{root}/index/entries/{sid}.json" in keys
    assert any(k.startswith(f"{root}/{sid}/blobs/") for k in keys)  # the long system prompt

    fresh_cache(monkeypatch, tmp_path)  # another machine reads it
    r = cli("ls", "--store", url)
    assert r.exit_code == 0, r.output
    assert ls_ids(r.stdout) == [sid, sid2]
    assert "first" in r.stdout.splitlines()[1]

    shown = cli("show", sid[:-2], "--json", "--store", url)  # an id prefix resolves through the index
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert data["header"]["session_id"] == sid
    assert data["events"][0]["request"]["body"]["messages"][0]["content"] == SYSTEM

    v = cli("verify", "last", "--store", url)
    assert v.exit_code == 0 and "verify ok" in v.stdout
    # (the mirror's own mark of a complete copy was reported as a stranger in every remote session)
    assert "not part of the session" not in v.output, v.output

    with forkpoint.replay(sid, store=url) as rp:
        assert chat(model, "question from first") == answer
    assert rp.report()["matched"] == 1 and rp.report()["divergence"] is None


def test_memory_store_through_forkpoint_store_variable(
    model: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"memory:///fp-{secrets.token_hex(4)}"
    monkeypatch.setenv("FORKPOINT_STORE", url)
    sid, _ = record_one("", model, "via-env")  # store "" / None: $FORKPOINT_STORE
    r = cli("ls")
    assert ls_ids(r.stdout) == [sid]
    # What-if children of a remote session are recorded into the same store and uploaded.
    with forkpoint.replay(sid, overrides=['model#1.text="changed"']) as rp:
        assert chat(model, "question from via-env") == "changed"
    child = Path(rp.report()["child_session"]).name
    assert ls_ids(cli("ls").stdout) == [sid, child]


@pytest.mark.slow
def test_memory_store_cli_record_and_replay(
    model: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"memory:///fp-{secrets.token_hex(4)}/cli"
    agent = tmp_path / "agent.py"
    agent.write_text(textwrap.dedent(AGENT))
    monkeypatch.setenv("AGENT_BASE_URL", model.openai_base_url)
    r = cli("record", "--store", url, "--no-workspace", "--", sys.executable, str(agent), "via the cli")
    assert r.exit_code == 0, r.output
    (sid,) = ls_ids(cli("ls", "--store", url).stdout)
    fs, root = remote_fs(url)
    assert fs.exists(f"{root}/{sid}/{LOG_NAME}")
    fresh_cache(monkeypatch, tmp_path)
    rp = cli("replay", sid, "--store", url)
    assert rp.exit_code == 0 and "replay ok: 1/1" in rp.stderr, rp.output


def test_a_local_url_store_makes_its_folders(
    model: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``local://`` goes through fsspec's local filesystem, which makes no parent folder unless told
    to: every upload failed (the session stayed staged, said on stderr)."""
    url = f"local://{tmp_path}/shared/sessions"
    agent = tmp_path / "agent.py"
    agent.write_text(textwrap.dedent(AGENT))
    monkeypatch.setenv("AGENT_BASE_URL", model.openai_base_url)
    r = cli("record", "--store", url, "--no-workspace", "--", sys.executable, str(agent), "to a local url")
    assert r.exit_code == 0 and "failed" not in r.stderr, r.output
    (sid,) = ls_ids(cli("ls", "--store", url).stdout)
    assert (tmp_path / "shared" / "sessions" / sid / LOG_NAME).is_file()
    fresh_cache(monkeypatch, tmp_path)
    rp = cli("replay", sid, "--store", url)
    assert rp.exit_code == 0 and "replay ok: 1/1" in rp.stderr, rp.output


def test_scrub_refuses_a_session_of_a_remote_store(model: LocalServer) -> None:
    """``forkpoint scrub SESSION --store URL`` scrubbed this machine's copy of the session and said
    the original was replaced: the store kept the secret, and the copy, its mark of a complete copy
    gone, was uploaded again at every ``ls``, refused as another session with that id."""
    from forkpoint import redact

    url = f"memory:///fp-{secrets.token_hex(4)}"
    sid, _ = record_one(url, model, "to-scrub")
    fs, root = remote_fs(url)
    before = fs.cat(f"{root}/{sid}/{LOG_NAME}")
    with redact.use_rules(redact.Scrubber(redact.Rules(patterns=(("q", "question from"),)))):
        r = cli("scrub", sid, "--store", url)
        dry = cli("scrub", sid, "--store", url, "--dry-run")
    assert r.exit_code == 1 and "forkpoint cannot scrub a session of a remote store" in r.output, r.output
    assert dry.exit_code == 0 and "would change 1 of" in dry.output, dry.output
    assert fs.cat(f"{root}/{sid}/{LOG_NAME}") == before
    listed = cli("ls", "--store", url)
    assert listed.exit_code == 0 and "could not upload" not in listed.output, listed.output


@pytest.mark.parametrize("bad", ["", "..", "../x", "a/b", "index", "Index"])
def test_an_index_entry_whose_id_is_no_session_id_is_not_taken(model: LocalServer, bad: str) -> None:
    """An index entry of a remote store (anyone who may write the bucket can put one there) with
    the session id "" named the whole store as that session's files: ``forkpoint prune
    --older-than 1d`` deleted every session of the store and said it removed none. With the id
    "index", the store's index folder, holds and all."""
    url = f"memory:///fp-{secrets.token_hex(4)}"
    sid, _ = record_one(url, model, "kept")
    fs, root = remote_fs(url)
    header = {"session_id": bad, "name": "evil", "created": "2020-01-01T00:00:00.000Z", "argv": ["x"]}
    entry = {
        "session_id": bad,
        "header": header,
        "events": 1,
        "exit_code": 0,
        "complete": True,
        "log_size": 1,
    }
    fs.pipe(f"{root}/index/entries/evil.json", json.dumps(entry).encode())
    other = {**entry, "session_id": "20200101-000000-abcdef"}  # (its header says another id)
    fs.pipe(f"{root}/index/entries/other.json", json.dumps(other).encode())
    assert cli("hold", sid, "--reason", "litigation", "--store", url).exit_code == 0
    assert ls_ids(cli("ls", "--store", url).stdout) == [sid]
    pruned = cli("prune", "--older-than", "1d", "--store", url)
    assert pruned.exit_code == 0, pruned.output
    assert cli("rm", "evil", "--store", url).exit_code == 1
    assert fs.exists(f"{root}/{sid}/{LOG_NAME}")
    assert ls_ids(cli("ls", "--store", url).stdout) == [sid]
    # (an entry with id "index" named the store's index folder: prune deleted it, holds and all, and
    # the held session could then be removed)
    assert fs.exists(f"{root}/index/holds/{sid}.json")
    assert cli("rm", sid, "--store", url).exit_code == 1


def test_a_recording_in_progress_is_not_uploaded(model: LocalServer) -> None:
    url = f"memory:///fp-{secrets.token_hex(4)}"
    with forkpoint.record("live", store=url) as rec:
        chat(model, "one")
        listing = list_sessions(url)  # ls while recording: shown as staged, not uploaded
        (row,) = listing.rows
        assert row.staged and row.session_id == rec.session_path.name and not row.complete
        assert any("still being recorded" in n for n in listing.notes)
        fs, root = remote_fs(url)
        assert not fs.exists(f"{root}/{row.session_id}/{LOG_NAME}")
    (row,) = list_sessions(url).rows
    assert not row.staged and row.complete and row.model_calls == 1


def test_a_session_id_that_exists_remotely_is_never_overwritten(model: LocalServer, tmp_path: Path) -> None:
    url = f"memory:///fp-{secrets.token_hex(4)}"
    sid, _ = record_one(url, model, "original")
    fs, root = remote_fs(url)
    before = fs.cat_file(f"{root}/{sid}/{LOG_NAME}")
    # A different session under the same id, staged in the mirror (an id collision).
    other = make_session(tmp_path / "elsewhere", "impostor")
    mirror = store.store_dir(url)
    (mirror / sid).rename(tmp_path / "cached-original")
    text = (other / LOG_NAME).read_text().replace(other.name, sid)
    (mirror / sid).mkdir()
    (mirror / sid / LOG_NAME).write_text(text)
    listing = list_sessions(url)
    assert any("not overwritten" in n for n in listing.notes)
    assert fs.cat_file(f"{root}/{sid}/{LOG_NAME}") == before
    assert (mirror / sid / LOG_NAME).read_text() == text  # the staged copy is kept


# ----------------------------------------------------------------------------- S3 (moto)


@pytest.mark.slow
def test_s3_cli_record_then_replay_show_ls_verify(
    s3_url: str, model: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    workdir = tmp_path / "agent"
    workdir.mkdir()
    (workdir / "agent.py").write_text(textwrap.dedent(AGENT))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_",))}
    env["AGENT_BASE_URL"] = model.openai_base_url
    env["COLUMNS"] = "250"  # rich does not wrap the "recorded session … in URL" line
    script = [sys.executable, "agent.py"]

    def run(*args: str, cache: str = "recorder") -> subprocess.CompletedProcess[str]:
        e = {**env, "FORKPOINT_CACHE": str(tmp_path / cache)}
        return subprocess.run(
            [*FORKPOINT, *args], cwd=workdir, env=e, capture_output=True, text=True, timeout=60
        )

    rec = run("record", "--store", s3_url, "--name", "s3-run", "--no-workspace", "--", *script, "hello s3")
    assert rec.returncode == 0, rec.stderr
    assert f"in {s3_url}/" in rec.stderr
    sid = rec.stderr.split(f"in {s3_url}/")[1].split()[0]
    fs, root = remote_fs(s3_url)
    assert fs.exists(f"{root}/{sid}/{LOG_NAME}") and fs.exists(f"{root}/index/entries/{sid}.json")
    staged = tmp_path / "recorder"
    assert (next(staged.glob(f"stores/*/{sid}")) / remote.DONE).is_file()  # verified, then marked

    # Another machine: an empty cache. ls, show, verify (here, in-process) and replay read the store.
    fresh_cache(monkeypatch, tmp_path, "reader")
    ls = cli("ls", "--store", s3_url)
    assert ls.exit_code == 0, ls.output
    assert ls_ids(ls.stdout) == [sid] and "s3-run" in ls.stdout
    show = cli("show", sid, "--json", "--store", s3_url)
    assert show.exit_code == 0, show.output
    assert json.loads(show.stdout)["events"][0]["summary"]["model"] == "demo-model"
    v = cli("verify", "last", "--store", s3_url)
    assert v.exit_code == 0 and "verify ok: 2 events, 1 blob" in v.stdout, v.output
    rp = run("replay", sid, "--store", s3_url, cache="reader")
    assert rp.returncode == 0, rp.stderr
    assert rp.stdout == rec.stdout  # the recorded answer, served offline
    assert "replay ok: 1/1" in rp.stderr


def _record_worker(url: str, base_url: str, i: int, env: dict[str, str]) -> str:
    os.environ.update(env)
    import openai

    client = openai.OpenAI(base_url=base_url, api_key="sk-test-not-a-real-key", max_retries=0)
    with forkpoint.record(f"worker-{i}", store=url) as rec:
        client.chat.completions.create(
            model="demo-model",
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"worker {i}"}],
        )
    return rec.session_path.name


@pytest.mark.slow
def test_eight_processes_record_into_one_s3_store(
    s3_url: str, model: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every upload consolidates the index (threshold 2): concurrent consolidators, concurrent writers.
    monkeypatch.setenv("FORKPOINT_INDEX_MAX_LOOSE", "2")
    env = {k: v for k, v in os.environ.items() if k.startswith(("AWS_", "FORKPOINT_"))}
    caches = [str(tmp_path / "machine-a"), str(tmp_path / "machine-b")]  # 4 processes share each
    # A fork server that has imported forkpoint, openai and s3fs once: 8 clean processes, no
    # threads inherited from this one (moto, the model server), and no 8 cold imports on 2 cores.
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(
        ["forkpoint", "forkpoint.store.fsspec", "openai", "s3fs", "tests.store.test_store"]
    )
    jobs = [(s3_url, model.openai_base_url, i, {**env, "FORKPOINT_CACHE": caches[i % 2]}) for i in range(8)]
    with ctx.Pool(8) as pool:
        sids = pool.starmap(_record_worker, jobs)
    assert len(set(sids)) == 8
    fresh_cache(monkeypatch, tmp_path)
    rs = store.open_store(s3_url)
    state = read_index(rs.io)
    assert set(state.entries) == set(sids)  # nothing lost by the concurrent consolidations
    r = cli("ls", "--store", s3_url)
    assert sorted(ls_ids(r.stdout)) == sorted(sids)
    names = {line.split()[1] for line in r.stdout.splitlines()[1:]}
    assert names == {f"worker-{i}" for i in range(8)}
    for sid in sids:
        v = verify(resolve(sid, s3_url))
        assert v.ok and v.events == 2 and v.blobs == 1, v.problems
    after = read_index(rs.io)  # ls consolidated what was left into one snapshot
    assert len(after.snapshots) == 1 and not after.loose and set(after.entries) == set(sids)


@pytest.mark.slow
def test_crash_between_blob_upload_and_log_upload(
    s3_url: str, model: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {**os.environ, "AGENT_BASE_URL": model.openai_base_url}
    p = subprocess.run(
        [sys.executable, "-c", CRASH, s3_url], env=env, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 17, p.stderr
    sid = p.stdout.split()[0]
    fs, root = remote_fs(s3_url)
    keys = fs.find(f"{root}/{sid}")
    assert any("/blobs/" in k for k in keys) and f"{root}/{sid}/{LOG_NAME}" not in keys
    staged = store.store_dir(s3_url) / sid
    assert (staged / LOG_NAME).is_file() and not (staged / remote.DONE).exists()

    recorder_cache = os.environ["FORKPOINT_CACHE"]
    fresh_cache(monkeypatch, tmp_path)  # from anywhere else the session does not exist
    assert sid not in [r.session_id for r in list_sessions(s3_url).rows]
    with pytest.raises(SessionError, match="no session"):
        resolve(sid, s3_url)

    monkeypatch.setenv("FORKPOINT_CACHE", recorder_cache)  # back on the machine that crashed
    r = cli("ls", "--store", s3_url)
    assert f"uploaded staged session {sid}" in r.stderr
    assert ls_ids(r.stdout) == [sid]
    assert (staged / remote.DONE).is_file()
    fresh_cache(monkeypatch, tmp_path, "third-machine")
    v = cli("verify", sid, "--store", s3_url)
    assert v.exit_code == 0 and "verify ok: 2 events, 1 blob" in v.stdout, v.output


@pytest.mark.slow
def test_a_killed_recorder_leaves_an_unfinished_session_that_ls_uploads(
    s3_url: str, model: LocalServer
) -> None:
    env = {**os.environ, "AGENT_BASE_URL": model.openai_base_url}
    p = subprocess.run(
        [sys.executable, "-c", KILLED, s3_url], env=env, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 9, p.stderr
    sid = p.stdout.split()[0]
    (row,) = list_sessions(s3_url).rows  # the recorder is gone: upload it as it is
    assert row.session_id == sid and not row.staged and not row.complete and row.model_calls == 1


def _wait_for(what: Callable[[], bool], why: str) -> None:
    for _ in range(6000):
        if what():
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"gave up waiting: {why}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return not Path(f"/proc/{pid}/stat").read_text().split(") ")[-1].startswith("Z")


@contextlib.contextmanager
def _killed_at_first_call(cmd: list[str], here: Path, env: dict[str, str]) -> Iterator[int]:
    """Run the forkpoint command ``cmd`` (its program: :data:`OUTLIVES` in ``here``) and SIGKILL it
    once the program made its first call; yields the program's pid. The program goes on (its
    second call) when the block ends."""
    proc = subprocess.Popen(cmd, cwd=here, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        done = here / "first-call-done"
        # (its pid written: the file exists, empty, a moment before; read then, the test failed)
        _wait_for(
            lambda: (done.exists() and done.read_text().strip() != "") or proc.poll() is not None,
            "first call",
        )
        pid = int(done.read_text())
        proc.kill()
        proc.wait()
        yield pid
    finally:
        (here / "go").write_text("")


@pytest.mark.slow
def test_a_killed_forkpoint_record_whose_program_goes_on_is_not_uploaded_until_the_program_ends(
    s3_url: str, model: LocalServer, tmp_path: Path
) -> None:
    # forkpoint record is SIGKILLed (OOM killer, kill -9 of the wrapper) while the program it
    # recorded goes on appending to the staged session: ls must not upload it half-way (the rest
    # would never reach the store, and the mirror's copy would no longer be what the store holds).
    (tmp_path / "agent.py").write_text(textwrap.dedent(OUTLIVES))
    env = {**os.environ, "AGENT_BASE_URL": model.openai_base_url}
    cmd = [
        *FORKPOINT,
        "record",
        "--store",
        s3_url,
        "--no-workspace",
        "--",
        sys.executable,
        "agent.py",
        str(tmp_path),
    ]
    with _killed_at_first_call(cmd, tmp_path, env) as agent_pid:
        listing = list_sessions(s3_url)  # the program still records: staged, not uploaded
        (row,) = listing.rows
        assert row.staged, listing.notes
        assert any("still being recorded" in n for n in listing.notes), listing.notes
    _wait_for(lambda: not _alive(agent_pid), "the program to end")
    listing = list_sessions(s3_url)  # now its processes are all gone: uploaded, whole
    (row,) = listing.rows
    assert not row.staged and row.model_calls == 2, listing.notes
    fs, root = remote_fs(s3_url)
    local = store.store_dir(s3_url) / row.session_id / LOG_NAME
    assert fs.cat_file(f"{root}/{row.session_id}/{LOG_NAME}") == local.read_bytes()


@pytest.mark.slow
def test_s3_index_rebuild_when_missing_or_stale(
    s3_url: str, model: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sids = [record_one(s3_url, model, f"s{i}")[0] for i in range(3)]
    fs, root = remote_fs(s3_url)
    fs.rm(f"{root}/index", recursive=True)
    fresh_cache(monkeypatch, tmp_path)
    r = cli("ls", "--store", s3_url)  # no index: rebuilt from a walk
    assert ls_ids(r.stdout) == sids and "rebuilt it from a walk" in r.stderr
    assert len(read_index(store.open_store(s3_url).io).snapshots) == 1

    # Stale: one session deleted behind forkpoint's back, one copied in without an index entry.
    fs.rm(f"{root}/{sids[0]}", recursive=True)
    extra = make_session(tmp_path / "local", "copied-in")
    fs.put(str(extra / LOG_NAME), f"{root}/{extra.name}/{LOG_NAME}")
    assert ls_ids(cli("ls", "--store", s3_url).stdout) == sids  # the index does not walk
    r = cli("ls", "--reindex", "--store", s3_url)
    assert ls_ids(r.stdout) == [*sids[1:], extra.name]
    state = read_index(store.open_store(s3_url).io)
    assert len(state.snapshots) == 1 and not state.loose and set(state.entries) == {*sids[1:], extra.name}


# ----------------------------------------------------------------------------- local index


def test_local_ls_reads_the_index_not_the_logs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "store"
    dirs = [make_session(root, f"s{i}") for i in range(3)]
    running = make_session(root, "running", end=False)  # no end: never indexed, always scanned
    order = [d.name for d in store.session_dirs(root)]  # by creation time (ms), then id
    r = cli("ls", "--store", str(root))  # first ls: no index yet, so a walk; it writes the entries
    assert ls_ids(r.stdout) == order
    assert sorted(LocalIO(root).names(ENTRIES)) == sorted(f"{d.name}.json" for d in dirs)

    real = store.summarize_log

    def no_scan(data: bytes, path: Path) -> Any:
        assert path.name == running.name, f"ls read the log of {path.name}"
        return real(data, path)

    monkeypatch.setattr(store, "summarize_log", no_scan)
    r = cli("ls", "--store", str(root))
    assert ls_ids(r.stdout) == order
    (row,) = [line.split() for line in r.stdout.splitlines() if line.startswith(running.name)]
    assert row[5] == "—"  # not finished
    monkeypatch.setattr(store, "summarize_log", real)

    # A session that grew after its entry was written is rescanned and its entry replaced.
    w = SessionWriter.open(dirs[0], fsync="never")
    w.append({"type": "note", "text": "late", "data": {}})
    w.close()
    (row,) = [x for x in list_sessions(root).rows if x.session_id == dirs[0].name]
    assert row.events == 3
    assert read_index(LocalIO(root)).entries[dirs[0].name]["events"] == 3

    # No index at all: the walk lists everything, and rebuilds it.
    import shutil

    shutil.rmtree(root / "index")
    assert [x.session_id for x in list_sessions(root).rows] == order
    assert len(read_index(LocalIO(root)).entries) == 3


def test_ls_says_a_log_joined_to_another_is_unreadable_as_show_does(tmp_path: Path) -> None:
    """A log concatenated with itself (``cat log log > log``): show refused it (line 4 is not an
    event), while ls listed it with every count doubled, from a fresh scan as from a rebuilt index."""
    root = tmp_path / "store"
    d = make_session(root, "twice")
    assert cli("ls", "--store", str(root)).exit_code == 0  # (indexed as recorded)
    log = d / LOG_NAME
    log.write_bytes(log.read_bytes() * 2)
    shown = cli("show", str(d))
    assert shown.exit_code != 0 and f"{log}:4" in " ".join(shown.output.split()), shown.output
    for args in ([], ["--reindex"]):
        r = cli("ls", "--store", str(root), *args)
        said = " ".join(r.output.split())
        assert f"unreadable: {log}:4: not an event: a second header" in said, said


@pytest.mark.parametrize("damage", ["fifo", "directory"])
def test_an_index_file_that_is_no_regular_file_is_skipped_and_said(tmp_path: Path, damage: str) -> None:
    """An index entry replaced by a FIFO made ``ls``, ``show last`` and ``ls --reindex`` hang
    forever; one replaced by a directory made each end in a traceback, so the store could not be
    repaired. The entry is skipped, said, and its session read from its log."""
    root = tmp_path / "store"
    dirs = [make_session(root, f"s{i}") for i in range(3)]
    order = [d.name for d in store.session_dirs(root)]  # (made within a millisecond: then by id)
    assert ls_ids(cli("ls", "--store", str(root)).stdout) == order
    entry = root / "index" / ENTRIES / f"{dirs[1].name}.json"
    entry.unlink()
    os.mkfifo(entry) if damage == "fifo" else entry.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    for args in (["ls"], ["show", "last"], ["ls", "--reindex"]):
        done = subprocess.run(
            [sys.executable, "-m", "forkpoint.cli", *args, "--store", str(root)],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        assert done.returncode == 0, (args, done.stderr)
        if args == ["ls"]:
            assert ls_ids(done.stdout) == order
            assert "skipped a damaged index file" in done.stderr and entry.name in done.stderr


def test_local_reindex_and_record_writes_entries(model: LocalServer, tmp_path: Path) -> None:
    root = tmp_path / "store"
    sid, _ = record_one(str(root), model, "recorded")
    assert LocalIO(root).names(ENTRIES) == [f"{sid}.json"]  # written when the recording ended
    others = [make_session(root, f"s{i}") for i in range(2)]
    # A stale snapshot naming a session that is gone.
    io = LocalIO(root)
    ghost = {"session_id": "20000101-000000-000000", "header": {}, "log_size": 1}
    consolidate(io, read_index(io), extra=[ghost])
    assert "20000101-000000-000000" in read_index(io).entries
    r = cli("ls", "--reindex", "--store", str(root))
    assert ls_ids(r.stdout) == [d.name for d in store.session_dirs(root)]
    assert len(ls_ids(r.stdout)) == 3
    state = read_index(io)
    assert set(state.entries) == {sid, *(d.name for d in others)}
    assert len(state.snapshots) == 1 and not state.loose
    assert Session.load(resolve("last", root)).id == store.session_dirs(root)[-1].name


def test_consolidators_racing_writers_never_lose_an_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORKPOINT_FSYNC", "never")
    io = LocalIO(tmp_path)
    written: list[str] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def writer(k: int) -> None:
        for i in range(60):
            sid = f"20260101-0000{k:02d}-{i:06x}"
            io.create(ENTRIES, f"{sid}.json", json.dumps({"session_id": sid, "log_size": 1}).encode())
            written.append(sid)

    def consolidator() -> None:
        try:
            while not stop.is_set():
                consolidate(io, read_index(io))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        try:
            while not stop.is_set():
                seen = set(written)  # everything written before this read started
                assert seen <= set(read_index(io).entries)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    background = [threading.Thread(target=consolidator) for _ in range(3)] + [threading.Thread(target=reader)]
    for t in background + threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    for t in background:
        t.join()
    assert not errors, errors[0]
    final = read_index(io)
    assert set(final.entries) == set(written) and len(written) == 240
    consolidate(io, final)
    assert len(io.names(SNAPSHOTS)) == 1 and set(read_index(io).entries) == set(written)


def test_a_remote_stores_mirror_is_owner_only_under_umask_000(
    model: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under umask 000 the cache folders above a mirror and a downloaded session's ``blobs/`` were
    made world-writable (``mkdir(parents=True)`` gives the folders above the default mode)."""
    url = f"memory:///fp-{secrets.token_hex(4)}/sessions"
    sid, _ = record_one(url, model, "first")
    cache = fresh_cache(monkeypatch, tmp_path / "deep" / "er")
    old = os.umask(0)
    try:
        assert cli("verify", sid, "--store", url).exit_code == 0  # downloads it, blobs/ and all
    finally:
        os.umask(old)
    made = [p for p in (tmp_path / "deep", *(tmp_path / "deep").rglob("*")) if p.is_dir()]
    assert cache in made and any(p.name == "blobs" for p in made)
    assert {str(p): oct(p.stat().st_mode & 0o777) for p in made if p.stat().st_mode & 0o077} == {}


def _no_space(*args: Any, **kwargs: Any) -> Any:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_an_index_write_that_fails_leaves_no_file_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a full disk every index write left its empty temp file in ``index/entries`` (each ``ls``
    added one). A failed write leaves nothing, and the entry that was there stays as it was."""
    index = LocalIO(tmp_path)
    assert index.create(ENTRIES, "first.json", b"{}")
    monkeypatch.setattr(os, "fsync", _no_space)
    with pytest.raises(OSError, match="No space left"):
        index.create(ENTRIES, "second.json", b'{"a": 1}')
    with pytest.raises(OSError, match="No space left"):
        index.replace(ENTRIES, "first.json", b'{"b": 2}')
    folder = tmp_path / "index" / ENTRIES
    assert [p.name for p in folder.iterdir()] == ["first.json"]
    assert (folder / "first.json").read_bytes() == b"{}"


def test_a_hold_or_index_write_a_full_disk_fails_is_named_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write error names no file: ``forkpoint hold`` and ``ls --reindex`` on a full disk ended in an
    OSError traceback. The error names the file it was writing, which the command line says."""
    path = make_session(tmp_path / "store", "held")
    monkeypatch.setattr(os, "fsync", _no_space)
    monkeypatch.setenv("FORKPOINT_FSYNC", "event")
    for args in (["hold", path.name, "--reason", "sev-1"], ["ls", "--reindex"]):
        r = CliRunner().invoke(main, [*args, "--store", str(tmp_path / "store")])
        assert r.exit_code == 1 and not isinstance(r.exception, OSError), r.output
        assert "index/" in r.output and "No space left on device" in r.output, r.output


def test_an_entry_written_without_hard_links_is_removed_when_its_write_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A filesystem without hard links (vfat): the entry is created exclusively, then written; a
    failed write left it truncated, for every reader to take as the entry."""
    real_open = open
    files = []

    class Full(io.BytesIO):
        def write(self, data: Any) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def second_write_fails(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, int) and "w" in mode:
            files.append(file)
            if len(files) == 2:  # (the first is the temp file, written whole)
                os.close(file)
                return Full()
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(os, "link", _no_space)
    monkeypatch.setattr("builtins.open", second_write_fails)
    with pytest.raises(OSError, match="No space left"):
        LocalIO(tmp_path).create(ENTRIES, "entry.json", b'{"a": 1}')
    monkeypatch.undo()
    assert list((tmp_path / "index" / ENTRIES).iterdir()) == []


def test_a_refreshed_download_keeps_a_local_copy_that_differs_from_the_stores(
    s3_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``verify`` downloads a remote session again: the local copy was renamed aside and deleted,
    without a word, though a process had written to it after the upload (the only full copy)."""
    fresh_cache(monkeypatch, tmp_path, "machine-a")
    with forkpoint.record(store=s3_url, workspace=None) as rec:
        forkpoint.note("one")
    local, sid = rec.session_path, rec.session_path.name
    uploaded = (local / LOG_NAME).read_bytes()
    with (local / LOG_NAME).open("ab") as f:
        f.write(b'{"written": "after the upload"}\n')
    capsys.readouterr()
    assert store.open_store(s3_url).fetch(sid, refresh=True) == local
    assert (local / LOG_NAME).read_bytes() == uploaded
    (kept,) = local.parent.glob(f".kept-{sid}-*")
    assert (kept / LOG_NAME).read_bytes().endswith(b'after the upload"}\n')
    assert f"the copy of session {sid} here differed from the store's" in capsys.readouterr().err
    # The same bytes: replaced without a word, nothing kept.
    assert store.open_store(s3_url).fetch(sid, refresh=True) == local
    assert len(list(local.parent.glob(f".kept-{sid}-*"))) == 1 and "differed" not in capsys.readouterr().err


def test_an_upload_cut_off_after_its_log_says_the_session_is_in_the_store_but_not_listed(
    s3_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The network failed after the log's put, before the index entry: the warning said the upload
    failed and the session stayed staged, though other machines could read it by its id, and
    their ``ls`` did not list it (nor said why)."""
    fresh_cache(monkeypatch, tmp_path, "machine-a")
    with forkpoint.record("before", store=s3_url, workspace=None):
        forkpoint.note("an index exists")
    put_log = remote.RemoteStore._put_log

    def cut_off(self: remote.RemoteStore, key: str, data: bytes) -> bool:
        created = put_log(self, key, data)
        monkeypatch.setattr(remote, "_cat_many", cut)
        return created

    def cut(fs: Any, paths: list[str]) -> dict[str, bytes]:
        raise ConnectionError("the network is gone")

    monkeypatch.setattr(remote.RemoteStore, "_put_log", cut_off)
    capsys.readouterr()
    with forkpoint.record("cut-off", store=s3_url, workspace=None) as rec:
        forkpoint.note("uploaded, not indexed")
    sid = rec.session_path.name
    err = capsys.readouterr().err
    assert f"indexing session {sid} (its log is in the store, but `forkpoint ls` elsewhere" in err, err
    monkeypatch.undo()
    fresh_cache(monkeypatch, tmp_path, "machine-b")
    assert sid not in ls_ids(cli("ls", "--store", s3_url).stdout)
    assert sid in ls_ids(cli("ls", "--reindex", "--store", s3_url).stdout)


@pytest.mark.slow
def test_one_bucket_name_on_two_servers_is_two_stores(
    s3_url: str, s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mirror was named by the URL alone: with the endpoint switched from staging to production,
    ``show`` served a session only staging has, and ``ls`` uploaded into production a session staged
    for staging (its server was down)."""
    # (a server of its own process: the in-process moto servers share one state)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    other = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        staging = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            assert other.poll() is None and time.monotonic() < deadline, "moto did not start"
            time.sleep(0.05)
        bucket = s3_url.split("/")[2]
        remote.RemoteStore(s3_url)  # (fsspec's import, before the options change)
        import s3fs

        s3fs.S3FileSystem(client_kwargs={"endpoint_url": staging}, use_listings_cache=False).mkdir(bucket)
        options = {
            "client_kwargs": {"endpoint_url": staging},
            "config_kwargs": {"retries": {"max_attempts": 1}},
        }
        monkeypatch.setenv("FORKPOINT_STORE_OPTIONS", json.dumps(options))
        with forkpoint.record("on-staging", store=s3_url, workspace=None) as rec:
            forkpoint.note("staging")
        uploaded = rec.session_path.name
        other.terminate()
        other.wait(30)
        with forkpoint.record("staged-for-staging", store=s3_url, workspace=None) as rec:
            forkpoint.note("staging is down")
        staged = rec.session_path.name
        assert not (rec.session_path / remote.DONE).exists()
    finally:
        other.kill()
        other.wait(30)
    monkeypatch.setenv(
        "FORKPOINT_STORE_OPTIONS", json.dumps({"client_kwargs": {"endpoint_url": s3_endpoint}})
    )
    ls = cli("ls", "--store", s3_url)
    assert ls.exit_code == 0, ls.output
    assert ls_ids(ls.stdout) == [] and "uploaded staged session" not in ls.output
    fs, root = remote_fs(s3_url)
    assert not fs.exists(f"{root}/{staged}")
    show = cli("show", uploaded, "--store", s3_url)
    assert show.exit_code == 1 and uploaded in show.output, show.output


def test_a_killed_what_if_replay_whose_program_goes_on_is_not_uploaded_until_the_program_ends(
    s3_url: str, model: LocalServer, tmp_path: Path
) -> None:
    """As for a recording: the what-if session a replay writes is the replaying program's to finish."""
    (tmp_path / "agent.py").write_text(textwrap.dedent(OUTLIVES))
    (tmp_path / "go").write_text("")
    env = {**os.environ, "AGENT_BASE_URL": model.openai_base_url}
    agent = [sys.executable, "agent.py", str(tmp_path)]
    done = subprocess.run(
        [*FORKPOINT, "record", "--store", s3_url, "--no-workspace", "--", *agent],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (recorded,) = list_sessions(s3_url).rows
    for name in ("go", "first-call-done"):
        (tmp_path / name).unlink()
    cmd = [
        *FORKPOINT,
        "replay",
        recorded.session_id,
        "--store",
        s3_url,
        "--on-divergence",
        "fifo",
        "--",
        *agent,
    ]
    with _killed_at_first_call(cmd, tmp_path, env) as agent_pid:
        listing = list_sessions(s3_url)
        child = next(r for r in listing.rows if r.session_id != recorded.session_id)
        assert child.staged, listing.notes
    _wait_for(lambda: not _alive(agent_pid), "the program to end")
    listing = list_sessions(s3_url)
    child = next(r for r in listing.rows if r.session_id != recorded.session_id)
    assert not child.staged and child.model_calls == 2, listing.notes


def test_the_viewer_counts_the_fork_arms_other_machines_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pass rate by checkpoint drawn by ``show --html`` read each arm from this machine's mirror
    of a remote store only: the arms of a sweep that ran on Ray workers (other mirrors) were left
    out, all of them or all but those run here, and the rate drawn was of that subset (or none)."""
    from forkpoint.html import view_model

    url = f"memory:///fp-{secrets.token_hex(4)}/sessions"
    rec = store.open_store(url).create({"argv": ["agent"], "name": "parent"})
    rec.end(0)
    rec.close(quiet=True)
    for i in range(4):
        fresh_cache(monkeypatch, tmp_path, f"worker-{i}")  # each arm on a worker of its own
        arm = store.open_store(url).create(
            {"argv": ["agent"], "name": f"arm {i}", "parent": {"session_id": rec.session_id, "seq": 3}}
        )
        arm.writer.append({"type": "outcome", "command": "true", "passed": i != 1, "exit_code": 0})
        arm.end(0)
        arm.close(quiet=True)
    fresh_cache(monkeypatch, tmp_path)  # the machine that looks at the result
    drawn = view_model(Session.load(resolve(rec.session_id, url)))["sweep"]
    assert drawn is not None
    assert [(p["seq"], p["passed"], p["ran"]) for p in drawn["points"]] == [(3, 3, 4)]


def test_a_mirror_outside_the_cache_goes_to_this_users_own_temporary_folder_never_anothers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the cache cannot be written, a remote store's mirror went to ``$TMPDIR/forkpoint-UID``
    made through any folder or link of that name already there: another user could plant one and
    read, or swap, the sessions mirrored into it. Such a folder is now refused."""
    import tempfile

    from forkpoint.store import fsspec as fsspec_store

    cache, real = tmp_path / "cache", fsspec_store.private_dirs

    def private_dirs(path: Path) -> Path:
        if path.is_relative_to(cache):
            raise PermissionError(f"{path}: the cache cannot be written")
        return real(path)

    monkeypatch.setattr(fsspec_store, "cache_root", lambda: cache)
    monkeypatch.setattr(fsspec_store, "private_dirs", private_dirs)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    elsewhere = tmp_path / "planted"
    elsewhere.mkdir()
    (tmp_path / f"forkpoint-{os.getuid()}").symlink_to(elsewhere)
    with pytest.raises(SessionError, match="no writable cache directory"):
        fsspec_store.mirror_dir(f"memory:///fp-{secrets.token_hex(4)}/sessions")
    assert list(elsewhere.iterdir()) == []

    (tmp_path / f"forkpoint-{os.getuid()}").unlink()  # this user's own folder is made and used
    mirror = fsspec_store.mirror_dir(f"memory:///fp-{secrets.token_hex(4)}/sessions")
    assert mirror.is_relative_to(tmp_path / f"forkpoint-{os.getuid()}")
    assert (tmp_path / f"forkpoint-{os.getuid()}").stat().st_mode & 0o777 == 0o700


def test_a_download_holds_a_few_of_the_sessions_files_in_memory_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading a remote session read every file of it into memory before writing any (a session of
    checkpoints of a large workspace: all its blobs at once). Files come in groups of about
    FETCH_BYTES now, and the session arrives whole."""
    url = f"memory:///fp-{secrets.token_hex(4)}/sessions"
    work = tmp_path / "work"
    work.mkdir()
    for i in range(6):
        (work / f"data{i}.bin").write_bytes(os.urandom(300_000))  # (incompressible: a blob each)
    with forkpoint.record(store=url, workspace=work) as rec:
        forkpoint.checkpoint("files")
    sid = rec.session_path.name
    fresh_cache(monkeypatch, tmp_path)
    monkeypatch.setattr(remote, "FETCH_BYTES", 700_000, raising=False)
    fetched: list[int] = []
    real = remote._cat_many

    def counting(fs: Any, paths: list[str]) -> dict[str, bytes]:
        got = real(fs, paths)
        fetched.append(sum(len(b) for b in got.values()))
        return got

    monkeypatch.setattr(remote, "_cat_many", counting)
    local = store.open_store(url).fetch(sid)
    assert local is not None and len(fetched) > 3, fetched
    assert max(fetched) <= 700_000, fetched  # (two of the 300 KB files at a time, and the small ones)
    assert cli("verify", str(local)).exit_code == 0
    restored = tmp_path / "restored"
    (cp,) = Session.load(local).by_type("checkpoint")
    r = cli("restore", f"{local}@{cp['seq']}", "--into", str(restored))
    assert r.exit_code == 0, r.output
    assert all(
        (restored / f"data{i}.bin").read_bytes() == (work / f"data{i}.bin").read_bytes() for i in range(6)
    )


def test_a_bucket_that_does_not_exist_is_said_not_listed_as_an_empty_store(
    s3_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A typo in the bucket's name (or credentials that cannot see it) listed as a store without
    sessions: ``ls`` said "no sessions in s3://…" and ``check`` "nothing was selected", as for an
    empty prefix of a bucket that exists, which still lists as empty."""
    fresh_cache(monkeypatch, tmp_path)
    typo = s3_url.replace("s3://fp-", "s3://fq-", 1)
    with pytest.raises(
        SessionError, match=r"the bucket 'fq-\w+' does not exist, or these credentials cannot see it"
    ):
        list_sessions(typo)
    r = CliRunner().invoke(main, ["ls", "--store", typo])
    assert r.exit_code == 1 and "does not exist" in r.output and "no sessions" not in r.output, r.output
    assert list_sessions(s3_url + "/nothing-yet").rows == []
    assert list_sessions(f"memory:///fp-{secrets.token_hex(4)}/sessions").rows == []
