"""The session log: round trip, header, hash chain, crash tolerance, linear storage, concurrency."""

from __future__ import annotations

import copy
import importlib.metadata
import json
import multiprocessing
import os
import platform
import re
import stat
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

import forkpoint
from forkpoint import providers, redact, verify
from forkpoint.canonical import digest
from forkpoint.deltalist import MAX_OVERLAY, DeltaList, json_default
from forkpoint.log import LOG_NAME, BlobStore, LogTail, Session, SessionError, SessionWriter, line_hash
from forkpoint.log import verify as verify_log
from tests.gitutil import git
from tests.logutil import stored_lines

# ----------------------------------------------------------------------------- helpers

_CHAIN_FIELDS = ("seq", "prev", "hash", "ts")


def _payload(event: dict[str, Any]) -> dict[str, Any]:
    """An event without the fields the log assigns (or derives on load: a model call's summary)."""
    return {k: v for k, v in event.items() if k not in _CHAIN_FIELDS and k != "summary"}


def _model_call(body: Any, **extra: Any) -> dict[str, Any]:
    return {
        "type": "model_call",
        "request": {
            "method": "POST",
            "url": "https://api.example.com/v1/chat/completions",
            "headers": [["content-type", "application/json"]],
            "body_kind": "json",
            "body": body,
        },
        "response": {"status": 200, "headers": [], "body_kind": "json", "body": {"ok": True}},
        **extra,
    }


def _sample_events() -> list[dict[str, Any]]:
    big = "the quick brown fox ✓ " * 300  # > 1 KiB: stored as a blob
    return [
        _model_call({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, duration_ms=1.5),
        {"type": "tool_call", "tool": "search", "args": {"q": "ünïcode", "n": 3}, "result": [1, 2.5, None]},
        {"type": "note", "text": "big one", "data": {"big": big, "raw": b"\x00\x01\xff" * 200}},
        _model_call(
            {"model": "m", "messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": big}]}
        ),
        {"type": "note", "text": "small bytes", "data": {"raw": b"\x00binary\xfe"}},
        {"type": "end", "exit_code": 0, "duration_ms": 12.0, "reason": None},
    ]


def _write_session(store: Path, events: list[dict[str, Any]], **kw: Any) -> Path:
    w = SessionWriter.create(store, {"argv": ["python", "agent.py"], "tags": {}}, fsync="never", **kw)
    for e in events:
        w.append(e)
    w.close()
    return w.path


# ----------------------------------------------------------------------------- round trip and header


def test_create_append_load_round_trip(store: Path) -> None:
    events = _sample_events()
    w = SessionWriter.create(store, {"argv": ["x"], "name": "rt"}, fsync="never")
    seqs = [w.append(e) for e in events]
    w.close()
    assert seqs == list(range(1, len(events) + 1))

    s = Session.load(w.path)
    assert s.id == w.session_id == w.path.name
    assert s.truncated is False
    assert [e["seq"] for e in s.events] == seqs
    assert [_payload(e) for e in s.events] == events
    assert s.end() is not None and s.end()["exit_code"] == 0
    assert [e["seq"] for e in s.by_type("model_call")] == [1, 4]
    assert verify(w.path).ok


@pytest.mark.parametrize("marker", ["$enc", "$files", "$zstd", "$dict"])
def test_an_event_with_a_line_marker_for_a_field_is_refused_not_dropped(store: Path, marker: str) -> None:
    """It was dropped without a word (a property test found ``{"$enc": None}`` loaded as nothing;
    ``{"$files": {}}`` too, taken for a sealed line's blob map)."""
    w = SessionWriter.create(store, {"argv": ["x"]}, fsync="never")
    w.append({"type": "note", "text": "kept"})
    with pytest.raises(ValueError, match=rf"an event cannot have a field '\{marker}': it marks a line"):
        w.append({"type": "note", "text": "x", marker: None})
    assert w.append({"type": "note", "text": "next"}) == 2
    w.close()
    assert [e["text"] for e in Session.load(w.path).events] == ["kept", "next"]


def test_an_object_whose_key_is_not_valid_unicode_is_kept(store: Path) -> None:
    """A file name decoded with surrogateescape as a key (``{name: size}`` from ``os.listdir``) stopped
    the recording: the log had no form for it. Beside it, keys that are encodings' names (escaped
    user data) and a user object that is literally ``{"$kv": ...}`` must keep their meaning."""
    odd = "caf\udce9.txt"
    values: list[Any] = [
        {odd: 1, "ok": [2, {"\ud800": 2**70}]},
        {odd: {"$blob": "x"}, "$b64": "aGVsbG8="},  # escaped ($lit) user data holding such a key
        {"$kv": [["a", 1]]},  # user data that looks like the new form
        {"$kv": [[odd, 1]], odd: None},
        [{odd: {odd: odd}}],
        {"$lit": {odd: 1}},  # user data that looks like an escape, holding such a key
        {"$lit": {"$lit": {odd: 1}}},
        [{"$lit": {odd: {"$lit": {odd: 2}}}}],
        {"$kv": [[{"$u": "YQ=="}, 1]], "x": {odd: 0}},
    ]
    # each one small (a plain line) and beside a long field (a packed line)
    events = [
        {"type": "tool_call", "tool": "ls", "args": {"dir": odd, **pad}, "result": v}
        for v in values
        for pad in ({}, {"pad": "listing " * 400})
    ]
    path = _write_session(store, events)
    assert [e["result"] for e in Session.load(path).events] == [v for v in values for _ in (0, 1)]
    assert verify(path).ok
    raw = (path / LOG_NAME).read_bytes()
    assert b'"$zstd"' in raw and b'"$kv"' in raw  # both kinds of line, the new form in plain ones


def test_kv_is_read_only_as_a_writer_writes_it(tmp_path: Path) -> None:
    """A ``$kv`` is written only for a key that is not valid Unicode, so it holds a ``$u`` key: anything
    else under ``$kv`` is data (a forkpoint from before ``$kv`` wrote such user data unescaped), and
    a forged one that does hold a ``$u`` must be right or refused, naming where."""
    from forkpoint.log.codec import decode

    blobs = BlobStore(tmp_path)
    for data in ({"$kv": [["a", 1], ["b", 2]]}, {"$kv": "text"}, {"$kv": [["a"]]}, {"$kv": [[1, 2]]}):
        assert decode(data, blobs, " (line 2)") == data
    assert decode({"$kv": [[{"$u": "YVx4"}, 1], ["b", {"$int": "1" * 30}]]}, blobs, "") == {
        "a\\x": 1,
        "b": int("1" * 30),
    }
    with pytest.raises(SessionError, match=r"a \$kv gives the key 'a' twice \(line 2\)"):
        decode({"$kv": [[{"$u": "YQ=="}, 1], ["a", 2]]}, blobs, " (line 2)")
    with pytest.raises(SessionError, match=r"a \$u holds '!!!', not base64 of a string \(line 2\)"):
        decode({"$kv": [[{"$u": "!!!"}, 1]]}, blobs, " (line 2)")


def test_a_load_without_derived_fields_is_the_same_but_the_summaries_asked_for_later(store: Path) -> None:
    """``Session.load(path, derived=False)`` (a replay's: it rarely reads a summary) gives the same
    events without ``summary``, and :func:`forkpoint.providers.summary` derives the same one on demand."""
    from forkpoint.providers import summary

    path = _write_session(store, _sample_events())
    whole, bare = Session.load(path), Session.load(path, derived=False)
    calls = [e for e in whole.events if e["type"] == "model_call"]
    assert len(calls) == 2 and all("summary" in e for e in calls)
    assert not any("summary" in e for e in bare.events)
    assert [{k: v for k, v in e.items() if k != "summary"} for e in whole.events] == bare.events
    assert [summary(e) for e in bare.events if e["type"] == "model_call"] == [e["summary"] for e in calls]


def test_tail_reads_what_was_appended_since_last_time(store: Path) -> None:
    """LogTail (live export) gives each completed event once, resolved as Session.load gives it
    (blobs read, $delta lists rebuilt, the summary derived), and leaves a line being written for later."""
    events = _sample_events()
    w = SessionWriter.create(store, {"argv": ["x"]}, fsync="never")
    tail = LogTail(w.path)
    assert tail.header["session_id"] == w.session_id and tail.read() == []
    w.append(events[0])
    w.append(events[1])
    first = tail.read()
    assert [e["seq"] for e in first] == [1, 2] and tail.read() == []
    for e in events[2:]:
        w.append(e)
    with open(w.path / LOG_NAME, "ab") as f:  # a line still being written: not an event yet
        f.write(b'{"seq": 99, "type": "no')
    rest = tail.read()
    w.close()
    loaded = Session.load(w.path)
    assert loaded.truncated
    assert first + rest == loaded.records()  # same values: blobs, deltas, summaries
    assert all("summary" in e for e in first + rest if e["type"] == "model_call")
    assert tail.skipped == 0


def test_header_fields_in_a_git_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "feature-x")
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "first")
    commit = git(repo, "rev-parse", "HEAD")
    (repo / "untracked.txt").write_text("untracked files do not make the tree dirty\n")
    monkeypatch.chdir(repo)

    argv = ["python", "agent.py", "--flag"]
    with forkpoint.record(
        name="hdr", store=tmp_path / "store", tags={"agent_version": "3", "team": "x"}, argv=argv
    ) as rec:
        pass
    h = Session.load(rec.session_path).header
    assert h["format"] == "forkpoint.session"
    assert h["version"] == 3
    assert h["session_id"] == rec.session_path.name
    assert h["name"] == "hdr"
    assert h["argv"] == argv
    assert h["cwd"] == str(repo.resolve())
    assert h["tags"]["agent_version"] == "3"
    assert h["tags"]["team"] == "x"
    assert "prompt_version" in h["tags"] and h["tags"]["prompt_version"] is None
    assert h["versions"]["python"] == platform.python_version()
    assert h["versions"]["forkpoint"] == forkpoint.__version__
    assert h["versions"]["httpx"] == importlib.metadata.version("httpx")
    assert h["versions"]["openai"] == importlib.metadata.version("openai")
    assert h["git"] == {"commit": commit, "branch": "feature-x", "dirty": False}

    (repo / "a.txt").write_text("changed\n")
    with forkpoint.record(store=tmp_path / "store", tags={"prompt_version": "p7"}) as rec2:
        pass
    h2 = Session.load(rec2.session_path).header
    assert h2["git"]["dirty"] is True
    assert h2["git"]["commit"] == commit
    assert h2["tags"] == {"agent_version": None, "prompt_version": "p7"}


def test_header_git_state_of_a_detached_head_and_of_a_repository_without_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    monkeypatch.chdir(repo)
    with forkpoint.record(store=tmp_path / "store") as rec:  # no commit yet: no state to name
        pass
    assert Session.load(rec.session_path).header["git"] is None
    (repo / "a.txt").write_text("one\n")
    git(repo, "add", "a.txt")
    git(repo, "commit", "-q", "-m", "first")
    commit = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "--detach")
    (repo / "a.txt").write_text("two\n")
    with forkpoint.record(store=tmp_path / "store") as rec:
        pass
    assert Session.load(rec.session_path).header["git"] == {"commit": commit, "branch": None, "dirty": True}


def test_header_outside_git_has_no_git_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.chdir(plain)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    with forkpoint.record(store=tmp_path / "store") as rec:
        pass
    assert Session.load(rec.session_path).header["git"] is None


def test_header_starts_no_git_process_outside_a_work_tree_and_reads_a_linked_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No folder up from the current one holds a ``.git``: the header's git state and the default
    workspace are known to be none without asking git (two processes at every record); a linked work
    tree (its ``.git`` a file) is still read."""
    import subprocess

    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.chdir(plain)
    started: list[list[str]] = []
    real_run = subprocess.run

    def run(cmd: Any, *args: Any, **kwargs: Any) -> Any:
        started.append(list(cmd))
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(subprocess, "run", run)
    from forkpoint.checkpoint import repo_root

    assert repo_root(plain) is None
    with forkpoint.record(store=tmp_path / "store") as rec:
        pass
    assert Session.load(rec.session_path).header["git"] is None
    assert not [c for c in started if c and c[0] == "git"], started

    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "commit", "-q", "--allow-empty", "-m", "first")
    git(repo, "worktree", "add", "-q", str(tmp_path / "linked"))
    assert (tmp_path / "linked" / ".git").is_file()
    (tmp_path / "linked" / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "linked" / "sub")
    assert repo_root(Path.cwd()) == (tmp_path / "linked").resolve()
    with forkpoint.record(store=tmp_path / "store") as rec:
        pass
    state = Session.load(rec.session_path).header["git"]
    assert state is not None and state["commit"] == git(repo, "rev-parse", "HEAD")


def test_forked_processes_appending_at_once_keep_the_log_whole(tmp_path: Path) -> None:
    """A process forked inside a recording (a worker) appends through the writer it inherited. The
    file lock belongs to the open file description, which fork shares: each process needs one of
    its own, or parent and children append with the same seqs and the log cannot be read."""

    @forkpoint.tool
    def save(text: str) -> int:
        return len(text)

    with forkpoint.record(store=tmp_path / "store") as rec:
        pids = []
        for k in range(3):
            pid = os.fork()
            if pid == 0:  # a worker: records its calls, leaves at once
                code = 0
                try:
                    for i in range(60):
                        save(f"{k}-{i}")
                except BaseException:
                    code = 1
                os._exit(code)
            pids.append(pid)
        for i in range(60):
            save(f"parent-{i}")
        assert all(os.waitpid(pid, 0)[1] == 0 for pid in pids)
    events = Session.load(rec.session_path).events
    calls = [e for e in events if e["type"] == "tool_call"]
    assert len(calls) == 240
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert sorted(e["args"]["text"] for e in calls) == sorted(
        [f"parent-{i}" for i in range(60)] + [f"{k}-{i}" for k in range(3) for i in range(60)]
    )
    assert verify_log(rec.session_path).ok


def test_create_refuses_an_existing_session(store: Path) -> None:
    path = _write_session(store, _sample_events()[:2], session_id="20260101-000000-abcdef")
    before = (path / LOG_NAME).read_bytes()
    with pytest.raises(SessionError, match="exists"):
        SessionWriter.create(store, {"argv": []}, session_id="20260101-000000-abcdef")
    assert (path / LOG_NAME).read_bytes() == before


def test_permissions_owner_only(store: Path) -> None:
    path = _write_session(store, _sample_events())
    assert stat.S_IMODE((path / LOG_NAME).stat().st_mode) == 0o600
    dirs = [path, *[p for p in path.rglob("*") if p.is_dir()]]
    assert len(dirs) >= 3  # the session, blobs/ and at least one blobs/xx/
    for d in dirs:
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d
    for f in (path / "blobs").rglob("*"):
        if f.is_file():
            assert stat.S_IMODE(f.stat().st_mode) & 0o077 == 0, f


# ----------------------------------------------------------------------------- hash chain


def test_flipping_any_byte_of_any_line_fails_verify_naming_the_line(store: Path) -> None:
    path = _write_session(store, _sample_events())
    log = path / LOG_NAME
    original = log.read_bytes()
    assert verify(path).ok
    lines = original.splitlines(keepends=True)
    offset = 0
    checked = 0
    for lineno, line in enumerate(lines, start=1):
        for i in range(0, len(line) - 1, 3):  # every third byte, the newline excluded
            data = bytearray(original)
            data[offset + i] ^= 0x01
            log.write_bytes(bytes(data))
            v = verify(path)
            assert not v.ok, f"flip at line {lineno} byte {i} not detected"
            assert v.problems and f"{LOG_NAME}:{lineno}:" in v.problems[0], (lineno, i, v.problems)
            checked += 1
        offset += len(line)
    log.write_bytes(original)
    assert verify(path).ok
    assert checked > 200


def test_flipping_a_byte_of_a_blob_fails_verify_naming_the_blob(store: Path) -> None:
    path = _write_session(store, _sample_events())
    blobs = [p for p in (path / "blobs").rglob("*") if p.is_file()]
    assert len(blobs) >= 2
    for blob in blobs:
        original = blob.read_bytes()
        data = bytearray(original)
        data[len(data) // 2] ^= 0x01
        os.chmod(blob, 0o600)
        blob.write_bytes(bytes(data))
        v = verify(path)
        assert not v.ok
        # a raw blob hashes wrong; a compressed one (.zst) usually fails to decompress first
        assert any(
            str(blob) in p and ("does not match" in p or "cannot be decompressed" in p) for p in v.problems
        ), v.problems
        with pytest.raises(SessionError, match="does not match|cannot be decompressed"):
            Session.load(path)
        blob.write_bytes(original)
    assert verify(path).ok
    blobs[0].unlink()
    v = verify(path)
    assert not v.ok and any("missing" in p for p in v.problems)


def test_reordered_lines_fail_verify(store: Path) -> None:
    path = _write_session(store, _sample_events())
    log = path / LOG_NAME
    lines = log.read_bytes().splitlines(keepends=True)
    lines[2], lines[3] = lines[3], lines[2]
    log.write_bytes(b"".join(lines))
    v = verify(path)
    assert not v.ok and f"{LOG_NAME}:3:" in v.problems[0]


# ----------------------------------------------------------------------------- crashes and bad input


def test_torn_last_line_is_truncation_not_corruption(store: Path) -> None:
    events = _sample_events()
    path = _write_session(store, events)
    log = path / LOG_NAME
    data = log.read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    for cut in (last_start + 1, (last_start + len(data)) // 2, len(data) - 1):
        log.write_bytes(data[:cut])
        s = Session.load(path)
        assert s.truncated is True
        assert [_payload(e) for e in s.events] == events[:-1]
        v = verify(path)
        assert v.ok and v.truncated and v.problems == []
        assert v.events == len(events) - 1


def test_appending_after_a_torn_line_keeps_the_log_readable(store: Path) -> None:
    """A recorded child killed mid-write leaves a torn line; ``forkpoint record`` then appends
    the ``end`` event. The log must stay readable and its chain valid."""
    events = _sample_events()[:-1]
    path = _write_session(store, events)
    log = path / LOG_NAME
    data = log.read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    log.write_bytes(data[: (last_start + len(data)) // 2])

    w = SessionWriter.open(path, fsync="never")
    seq = w.append({"type": "end", "exit_code": 137})
    w.close()
    assert seq == len(events)  # the torn event never got a place in the chain
    s = Session.load(path)
    assert [e["type"] for e in s.events] == [e["type"] for e in events[:-1]] + ["end"]
    assert [e["seq"] for e in s.events] == list(range(1, len(events) + 1))
    assert verify(path).ok


def test_unknown_format_version_names_file_and_line(store: Path) -> None:
    path = _write_session(store, _sample_events()[:2])
    log = path / LOG_NAME
    lines = log.read_bytes().splitlines(keepends=True)
    head = orjson.loads(lines[0])
    head["version"] = 99
    head.pop("hash")
    head["hash"] = digest(head)
    log.write_bytes(orjson.dumps(head) + b"\n" + b"".join(lines[1:]))
    with pytest.raises(SessionError) as exc:
        Session.load(path)
    assert f"{log}:1:" in str(exc.value) and "99" in str(exc.value)
    v = verify(path)
    assert not v.ok and f"{log}:1:" in v.problems[0]


@pytest.mark.parametrize("garbage", [b'{"seq": 2, "type": "no', b"[1, 2, 3]", b'{"hello": "world"}'])
def test_malformed_middle_line_names_file_and_line(store: Path, garbage: bytes) -> None:
    path = _write_session(store, _sample_events())
    log = path / LOG_NAME
    lines = log.read_bytes().splitlines(keepends=True)
    lines[2] = garbage + b"\n"
    log.write_bytes(b"".join(lines))
    with pytest.raises(SessionError) as exc:
        Session.load(path)
    assert f"{log}:3:" in str(exc.value)


def test_not_a_session(tmp_path: Path) -> None:
    with pytest.raises(SessionError, match="no such session log"):
        Session.load(tmp_path)
    (tmp_path / LOG_NAME).write_bytes(b'{"format": "something-else"}\n')
    with pytest.raises(SessionError, match=":1: not a forkpoint session header"):
        Session.load(tmp_path)


# ----------------------------------------------------------------------------- linear storage


SYSTEM_PROMPT = "".join(f"Rule {i}: be precise, cite sources, never invent an API. " for i in range(100))


def _record_conversation(store: Path, server_url: str, turns: int) -> tuple[Path, list[Any]]:
    """Record ``turns`` chat calls, each resending the whole history; returns (session, bodies sent)."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "Task 0: " + "describe the repository layout in detail. " * 3},
    ]
    sent: list[Any] = []
    with forkpoint.record(store=store) as rec, httpx.Client(base_url=server_url) as client:
        for i in range(turns):
            body = {"model": "gpt-test", "temperature": 0.2, "messages": messages}
            sent.append(orjson.loads(orjson.dumps(body)))
            reply = client.post("/v1/chat/completions", json=body).json()
            messages = [
                *messages,
                reply["choices"][0]["message"],
                {"role": "user", "content": f"Turn {i + 1}: " + f"now look at module_{i}.py closely. " * 4},
            ]
    return rec.session_path, sent


def _disk_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def test_storage_grows_linearly_with_the_conversation(
    tmp_path: Path, server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FORKPOINT_FSYNC", "never")
    p50, sent50 = _record_conversation(tmp_path / "s50", server.url, 50)
    p100, sent100 = _record_conversation(tmp_path / "s100", server.url, 100)
    b50, b100 = _disk_bytes(p50), _disk_bytes(p100)
    history_bytes = sum(len(orjson.dumps(b)) for b in sent100)  # what a naive log would store
    assert b100 < history_bytes / 5, (b100, history_bytes)
    assert b100 / b50 < 2.5, (b50, b100)

    # The system prompt is stored exactly once, as a blob, and never inline in the log.
    prompt = SYSTEM_PROMPT.encode()
    blobs = [p for p in (p100 / "blobs").rglob("*") if p.is_file()]
    store = BlobStore(p100 / "blobs")
    names = [b.parent.name + b.name.removesuffix(".zst") for b in blobs]
    assert sum(1 for h in names if store.get(h) == prompt) == 1
    assert prompt[:200] not in (p100 / LOG_NAME).read_bytes()

    # ...and the log still gives back every request exactly as it was sent.
    s = Session.load(p100)
    assert [e["request"]["body"] for e in s.by_type("model_call")] == sent100
    assert verify(p100).ok


@pytest.mark.parametrize("share_lists", [False, True], ids=["own-lists", "shared-lists"])
def test_delta_encoding_round_trips_exactly(store: Path, share_lists: bool) -> None:
    big = "long tool output line\n" * 100
    a = {"role": "system", "content": big}
    b = {"role": "user", "content": "question"}
    c = {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "function": {"name": "f"}}]}
    d = {"role": "tool", "tool_call_id": "1", "content": big + "more"}
    reserved = [
        {"role": "user", "content": {"$blob": 1}},
        {"role": "user", "content": {"$delta": {"base": 1, "keep": 5, "add": []}}},
        {"$lit": {"$b64": "aGVsbG8="}},
        {"$b64": "aGVsbG8=", "size": 5},
        {"$blob": "0" * 64, "size": 3, "bytes": True},
    ]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"$ref": "#/x"}}}]
    bodies: list[Any] = [
        {"model": "m", "messages": [a, b], "tools": tools},
        {"model": "m", "messages": [a, b, c, d], "tools": tools},  # appended
        {"model": "m", "messages": [a, {**b, "content": "edited"}, c], "tools": tools},  # edited
        {"model": "m", "messages": [b], "tools": []},  # shrunk
        {"model": "m", "messages": [a, b, c, d, b], "tools": tools},  # extends an older call
        {"model": "m", "messages": [a, b, c, d, b, *reserved], "tools": tools},
        {"model": "m", "messages": [a, b, c, d, b, *reserved, b], "tools": [*tools, *reserved]},
        {"$blob": 1, "messages": [a, b, c], "$lit": [1]},  # reserved keys at the top of a body
        {"$delta": {"x": 1}, "messages": [a, b, c, d]},
        [a, b, c],  # a body that is a list
    ]
    events = [
        _model_call(body, response={"status": 200, "body_kind": "bytes", "body": bytes([i]) * (i * 60)})
        for i, body in enumerate(bodies)
    ]
    path = _write_session(store, events)
    stored = orjson.dumps(stored_lines(path))
    assert stored.count(b'"$delta":{"base"') >= 4  # the delta encoding really was used

    s = Session.load(path, share_lists=share_lists)
    assert [e["request"]["body"] for e in s.events] == bodies
    assert [_payload(e) for e in s.events] == events
    # Every list is what was sent, as JSON too (the shared form through json_default).
    assert [orjson.dumps(e["request"]["body"], default=json_default) for e in s.events] == [
        orjson.dumps(b) for b in bodies
    ]
    assert any(type(e["request"]["body"]["messages"]) is DeltaList for e in s.events[:7]) == share_lists
    assert verify(path).ok


def test_shared_lists_of_a_growing_conversation_hold_one_slot_per_item(store: Path) -> None:
    """Loaded with ``share_lists``, a conversation that only grows keeps one backing list for all
    its calls (memory linear in its length), and so does one that rewrites its first message (its
    calls hold the rewritten one beside it); a conversation that drops earlier items gets its own,
    and the calls before it still read what they sent."""
    items = [{"role": "user", "content": f"turn {i}"} for i in range(60)]
    bodies = [{"model": "m", "messages": items[: 2 * i + 1]} for i in range(30)]
    edited = [{"role": "user", "content": "rewritten"}, *items[1:59]]
    bodies += [{"model": "m", "messages": edited}, {"model": "m", "messages": [*edited, items[59]]}]
    bodies.append({"model": "m", "messages": items[:59]})  # a retry of call 29: its base is extended already
    window = items[20:50]  # the oldest turns dropped, then the window grows
    bodies += [{"model": "m", "messages": window}, {"model": "m", "messages": [*window, items[50]]}]
    path = _write_session(store, [_model_call(b) for b in bodies])
    stored = stored_lines(path)
    # (line 31 is call 30: the rewritten message replaces call 29's first; call 31 only appends)
    assert stored[31]["request"]["body"]["messages"]["$delta"] == {
        "base": 30,
        "keep": 59,
        "set": [[0, edited[0]]],
        "add": [],
    }
    assert stored[32]["request"]["body"]["messages"]["$delta"] == {"base": 31, "keep": 59, "add": [items[59]]}

    shared = [e["request"]["body"]["messages"] for e in Session.load(path, share_lists=True).events]
    assert shared == [b["messages"] for b in bodies]
    stores = {id(m._store): len(m._store) for m in shared if type(m) is DeltaList}
    slots = sum(stores.values())
    # The growth's list, the rewritten conversation's on it (the retry of call 29 asks for nothing
    # beyond call 29's list, so it shares it too), and the window's (stored whole, its successor
    # copies it once).
    assert sorted(stores.values()) == [31, 60], stores
    assert shared[32]._store is shared[29]._store is shared[30]._store is shared[1]._store
    assert (shared[30][0], shared[31][0], shared[32][0], shared[29][0]) == (
        edited[0],
        edited[0],
        items[0],
        items[0],
    )
    assert shared[31][1:] == items[1:60] and list(reversed(shared[31]))[-1] == edited[0]
    own = [e["request"]["body"]["messages"] for e in Session.load(path).events]
    assert all(type(m) is list for m in own) and own == shared
    assert sum(len(m) for m in own) > 10 * slots  # 1,166 slots: what each call holding its own list costs


def _stamped_conversation(turns: int, *, stamped: bool = True) -> list[dict[str, Any]]:
    """The request bodies of an agent that puts the time in its system prompt at every call."""
    history: list[dict[str, Any]] = [{"role": "user", "content": "Refactor the package."}]
    bodies = []
    for i in range(turns):
        now = f"2026-12-03T10:{i // 60:02d}:{i % 60:02d}Z" if stamped else "today"
        system = {"role": "system", "content": f"It is {now}. " + "You edit files. " * 20}
        bodies.append({"model": "m", "messages": [system, *history]})
        history = [
            *history,
            {"role": "assistant", "content": f"step {i}"},
            {"role": "tool", "content": f"ok {i} " * 40},
        ]
    return bodies


def test_a_prompt_stamped_with_the_time_at_every_call_costs_only_what_each_call_adds(tmp_path: Path) -> None:
    """A system prompt that changes at every call is stored as the one item a ``$delta`` replaces:
    the log stays linear in the conversation (it was stored whole at every call, quadratic), and
    every request reads back exactly, as lists of its own and as shared lists."""
    sizes = {}
    for turns, stamped in ((40, True), (80, True), (80, False)):
        bodies = _stamped_conversation(turns, stamped=stamped)
        path = _write_session(tmp_path / f"{turns}-{stamped}", [_model_call(b) for b in bodies])
        sizes[turns, stamped] = (path / LOG_NAME).stat().st_size
        if stamped:
            deltas = [x["request"]["body"]["messages"]["$delta"] for x in stored_lines(path)[3:]]
            assert all(d["keep"] == len(b["messages"]) - 2 for d, b in zip(deltas, bodies[2:], strict=True))
            assert all(d["set"][0][0] == 0 and len(d["set"]) == 1 for d in deltas)
        for share in (False, True):
            loaded = [e["request"]["body"] for e in Session.load(path, share_lists=share).events]
            assert [orjson.dumps(b, default=json_default) for b in loaded] == [
                orjson.dumps(b) for b in bodies
            ]
        assert verify(path).ok
    assert sizes[80, True] / sizes[40, True] < 2.2, sizes
    assert sizes[80, True] < 1.2 * sizes[80, False], sizes


def test_a_moving_cache_marker_keeps_the_prefix_form(store: Path) -> None:
    """Items changed at the end of a resent list (a cache marker moving on) are stored as the
    prefix before them plus the rest, as before ``set``: replacing them would spare nothing."""
    items = [{"role": "user", "content": f"turn {i}"} for i in range(12)]
    marked = {"type": "ephemeral"}
    bodies = [
        {"messages": [*items[: n - 2], *({**m, "cache_control": marked} for m in items[n - 2 : n])]}
        for n in range(4, 13, 2)
    ]
    path = _write_session(store, [_model_call(b) for b in bodies])
    deltas = [x["request"]["body"]["messages"]["$delta"] for x in stored_lines(path)[2:]]
    assert [(d["keep"], len(d["add"]), "set" in d) for d in deltas] == [
        (n - 4, 4, False) for n in range(6, 13, 2)
    ]
    assert [e["request"]["body"] for e in Session.load(path, share_lists=True).events] == bodies


def test_a_shared_list_reads_as_a_list_and_cannot_be_changed() -> None:
    base = ["a", {"b": 1}, 2.0]
    view = DeltaList.from_delta(base, 2, [None, True])
    assert (
        isinstance(view, list) and view == ["a", {"b": 1}, None, True] and ["a", {"b": 1}, None, True] == view
    )
    assert view != ["a", {"b": 1}, None] and view != ("a", {"b": 1}, None, True)
    assert (len(view), view[0], view[-1], view[1:3], list(reversed(view))) == (
        4,
        "a",
        True,
        [{"b": 1}, None],
        [True, None, {"b": 1}, "a"],
    )
    with pytest.raises(IndexError):
        view[4]
    with pytest.raises(IndexError):
        view[-5]
    assert view + [1] == ["a", {"b": 1}, None, True, 1] and [0] + view == [0, "a", {"b": 1}, None, True]
    assert type(view.copy()) is list and view.copy() == view and view + view == view[:] * 2
    with pytest.raises(TypeError):
        view + "cd"  # as a list: only a list adds to it
    with pytest.raises(TypeError):
        ("x",) + view  # type: ignore[operator]
    with pytest.raises(AttributeError):
        view.append(1)  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        view[0] = "x"  # type: ignore[index]
    assert type(copy.deepcopy(view)) is list and copy.deepcopy(view) == view
    # C encoders see no list: loud without the default, exact with it (and the content hash too).
    with pytest.raises(TypeError):
        orjson.dumps(view)
    with pytest.raises(TypeError):
        json.dumps(view)
    assert json.dumps(view, default=json_default) == json.dumps(view[:])
    assert digest({"m": view}) == digest({"m": view[:]})
    assert base == ["a", {"b": 1}, 2.0]  # the list it was taken from is untouched


def test_a_shared_list_reads_the_items_it_replaces_and_copies_past_its_overlay_limit() -> None:
    base = DeltaList.from_delta([], 0, ["a", "b", "c"])
    v1 = DeltaList.from_delta(base, 3, ["d"], [(0, "A")])
    assert v1._store is base._store and base == ["a", "b", "c"] and v1 == ["A", "b", "c", "d"]
    assert (v1[0], v1[-4], v1[1], v1[:2], list(reversed(v1)), [*v1], v1.copy()) == (
        "A",
        "A",
        "b",
        ["A", "b"],
        ["d", "c", "b", "A"],
        ["A", "b", "c", "d"],
        ["A", "b", "c", "d"],
    )
    v2 = DeltaList.from_delta(v1, 4, ["e"], [(1, "B")])
    assert v2 == ["A", "B", "c", "d", "e"] and v1 == ["A", "b", "c", "d"] and v2._store is base._store
    retry = DeltaList.from_delta(v1, 4, [])  # asks for nothing beyond v1: shares its slots
    assert retry == v1 and retry._store is base._store and retry != v2[:4]
    assert json.dumps(v2, default=json_default) == json.dumps(["A", "B", "c", "d", "e"])
    # Each call replacing another item: past MAX_OVERLAY replaced items, a backing list of its own.
    items = [f"m{i}" for i in range(40)]
    view = DeltaList.from_delta([], 0, items[:20])
    first = view._store
    expected = items[:20]
    for i in range(20):
        expected = [*expected[:i], f"r{i}", *expected[i + 1 :], items[20 + i]]
        view = DeltaList.from_delta(view, len(view), [items[20 + i]], [(i, f"r{i}")])
        assert view == expected
        assert len(view._overlay or ()) <= MAX_OVERLAY
    assert view._store is not first and len(view._store) == len(view) == 40


@pytest.mark.parametrize(
    "paths", [(), ("$.messages",), ("$.messages[*].name",)], ids=["no-path", "list", "items"]
)
def test_shared_lists_scrub_and_summarize_as_their_own_lists_do(store: Path, paths: tuple[str, ...]) -> None:
    """What forkpoint's readers do with a loaded request (scrub it again for an export, summarize
    it, serialize it) gives the same answer for shared lists as for lists of their own, and what
    the scrubber returns is plain JSON (a clean list past 1 MiB, which it may return as given, too)."""
    key = "sk-proj-" + "Ab3xY9" * 8
    items = [{"role": "user", "content": f"turn {i}", "name": "ann"} for i in range(6)]
    items[0]["content"] = "clean words " * 100_000  # 1.2 MB
    items[3]["content"] = f"use {key} here"
    bodies = [{"model": "m", "messages": items[: i + 1], "tools": [{"type": "function"}]} for i in range(6)]
    path = _write_session(store, [_model_call(b) for b in bodies])
    loaded = {share: Session.load(path, share_lists=share).by_type("model_call") for share in (False, True)}
    assert type(loaded[True][-1]["request"]["body"]["messages"]) is DeltaList
    rules = redact.Rules(json_paths=paths)
    for own, shared in zip(loaded[False], loaded[True], strict=True):
        for scrubber in (redact.Scrubber(rules), redact.Scrubber(rules, cache=False)):
            out = orjson.dumps(scrubber.json(shared["request"]["body"]))
            assert out == orjson.dumps(redact.Scrubber(rules).json(own["request"]["body"]))
        assert providers.summary(shared) == providers.summary(own)


def test_delta_keeps_values_that_are_equal_but_not_the_same_json(store: Path) -> None:
    # Python's == takes 1, 1.0 and True for one another; the log must give back each as it was.
    first = [{"role": "user", "content": "x", "n": 1}, {"role": "user", "content": "y", "flag": False}]
    second = [{"role": "user", "content": "x", "n": 1.0}, {"role": "user", "content": "y", "flag": 0}]
    path = _write_session(store, [_model_call({"messages": first}), _model_call({"messages": second})])
    bodies = [e["request"]["body"]["messages"] for e in Session.load(path).events]
    assert [orjson.dumps(b) for b in bodies] == [orjson.dumps(first), orjson.dumps(second)]


def test_an_event_the_writer_refuses_is_no_base_for_later_deltas(store: Path) -> None:
    """A refused event (a key that is not a string) takes no seq: the next event takes the seq it
    would have had, so its lists must not stand in the delta bases under that seq, or a later
    request of the first conversation would be rebuilt from the other conversation's list."""
    a = [{"role": "user", "content": "conversation A"}]
    b = [*a, {"role": "assistant", "content": "B reply"}]
    w = SessionWriter.create(store, {"argv": ["a"], "tags": {}}, fsync="never")
    w.append(_model_call({"messages": a}))
    with pytest.raises(SessionError):
        w.append(_model_call({"messages": [*b, {"role": "user", 7: "x"}]}))
    other = [{"role": "user", "content": f"another conversation {i}"} for i in range(3)]
    w.append(_model_call({"messages": other}))
    w.append(_model_call({"messages": [*b, {"role": "user", "content": "D"}]}))
    w.close()
    loaded = [e["request"]["body"]["messages"] for e in Session.load(w.path).events]
    assert loaded == [a, other, [*b, {"role": "user", "content": "D"}]]


def test_only_the_new_items_of_a_resent_history_are_encoded(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The items a delta keeps are never encoded again (their strings never hashed into blobs).
    old = [{"role": "user", "content": f"message {i}: " + "words " * 300} for i in range(3)]
    new = {"role": "user", "content": "the new one: " + "words " * 300}
    w = SessionWriter.create(store, {"argv": ["a"], "tags": {}}, fsync="never")
    w.append(_model_call({"model": "m", "messages": old}))
    put: list[bytes] = []
    original = BlobStore.put

    def counting(self: BlobStore, data: bytes) -> str:
        put.append(data)
        return original(self, data)

    monkeypatch.setattr(BlobStore, "put", counting)
    w.append(_model_call({"model": "m", "messages": [*old, new]}))
    w.close()
    assert put == [new["content"].encode()]
    assert stored_lines(w.path)[-1]["request"]["body"]["messages"]["$delta"]["keep"] == 3
    assert [e["request"]["body"]["messages"] for e in Session.load(w.path).events] == [old, [*old, new]]


def test_tool_values_sent_back_to_the_model_are_stored_once(store: Path) -> None:
    """What an agent sends back (a tool call's arguments and result as ``json.dumps`` text) refers
    to the tool call (``$dumps``); text that would not come back byte for byte stays literal."""
    code = "def add(a, b):\n    return a + b  # ✓ fixed\n" * 8
    args = {"path": "calc.py", "content": code}
    result = {"passed": 3, "failed": 0, "output": "PASS test_calc.py\n" * 4}
    odd = {"path": "x.py", "content": code, "ratio": float("nan")}  # NaN is stored as null
    events: list[dict[str, Any]] = [
        {"type": "tool_call", "tool": "write_file", "args": args, "result": result},
        {"type": "tool_call", "tool": "write_file", "args": odd, "result": {"ok": True}},
    ]
    sent = [
        json.dumps(args, separators=(",", ":")),  # as a model would send its arguments
        json.dumps(result, sort_keys=True),  # as the agent sends the result back
        json.dumps(args, ensure_ascii=False),
        json.dumps(args, indent=1),  # a style that is not referenced
        json.dumps(odd),  # "NaN": a reader would rebuild "null"
        json.dumps(args) + " ",  # almost the same text
        {"$dumps": {"seq": 1, "of": "args", "style": ""}},  # user data that looks like the encoding
    ]
    messages = [{"role": "tool", "content": text} for text in sent]
    events.append(_model_call({"model": "m", "messages": messages}))
    path = _write_session(store, events)
    lines = stored_lines(path)
    stored = lines[3]["request"]["body"]["messages"]
    assert [m["content"] for m in stored[:3]] == [
        {"$dumps": {"seq": 1, "of": "args", "style": "c"}},
        {"$dumps": {"seq": 1, "of": "result", "style": "s"}},
        {"$dumps": {"seq": 1, "of": "args", "style": "u"}},
    ]
    assert [m["content"] for m in stored[3:6]] == sent[3:6]  # literal
    assert "$lit" in stored[6]["content"]
    assert code.encode() not in orjson.dumps(lines[3])
    s = Session.load(path)
    assert [m["content"] for m in s.events[2]["request"]["body"]["messages"]] == sent
    assert verify(path).ok
    # A reference to no earlier tool call is refused, naming the line.
    forged = dict(lines[3])
    forged["request"]["body"]["messages"][0]["content"] = {"$dumps": {"seq": 3, "of": "args", "style": "c"}}
    forged.pop("hash")
    from forkpoint.log.codec import line_hash

    forged["hash"] = line_hash(forged)
    raw = (path / LOG_NAME).read_bytes().splitlines(keepends=True)
    (path / LOG_NAME).write_bytes(b"".join(raw[:3]) + orjson.dumps(forged) + b"\n")  # a plain line
    with pytest.raises(SessionError, match=r"no earlier tool call.*session.jsonl:4"):
        Session.load(path)


def _checkpoint(tree: str, files: list[str], **extra: Any) -> dict[str, Any]:
    """A checkpoint event as the checkpoint layer writes one (the log knows its fields only by name;
    what they mean is checked by the checkpoint layer's tests)."""
    return {
        "type": "checkpoint",
        "boundary": "resumable",
        "reason": "before model call",
        "source": {
            "repo": "/home/me/agent",
            "base": "a" * 40,
            "head": "a" * 40,
            "branch": "main",
            "tree": tree,
            "index_tree": "b" * 40,
            "changed": [],
            "patch": [],
            "diff_hash": "c" * 64,
        },
        "workspace": {
            "root": "/home/me/agent",
            "listing": "git",
            "include_ignored": False,
            "fingerprint": digest(files),
            "files": len(files),
            "manifest": [[f, "file", 0o644, 10, "d" * 64] for f in files],
        },
        "context": {"messages": [{"role": "user", "content": tree}]},
        "mentioned_absent": files,
        "span_id": "0123456789abcdef",
        **extra,
    }


def test_unchanged_checkpoint_fields_are_references_to_the_line_that_holds_them(store: Path) -> None:
    notes = [f"notes/n{i}.md" for i in range(8)]
    events = [
        _checkpoint("1" * 40, notes),
        _checkpoint("1" * 40, notes),  # nothing changed
        {"type": "note", "text": "between"},
        _checkpoint("2" * 40, notes),  # one key of the source changed
        _checkpoint("2" * 40, [*notes, "new.md"], error=None),  # the workspace changed
        {**_checkpoint("2" * 40, notes), "workspace": {"root": "/home/me/agent", "files": 0}},  # keys gone
        _checkpoint("2" * 40, notes),
    ]
    path = _write_session(store, events)
    lines = stored_lines(path)[1:]
    assert b'"$' not in orjson.dumps(lines[0])  # (remembered as it is, its event a copy)
    assert lines[1]["source"] == {"$same": 1} and lines[1]["workspace"] == {"$same": 1}
    assert lines[1]["mentioned_absent"] == {"$same": 1}
    assert len(orjson.dumps(lines[1])) < 550  # the envelope, the context and three references
    assert len(orjson.dumps(lines[0])) > 1000
    assert lines[3]["source"] == {"$same": 1, "tree": "2" * 40}
    assert lines[3]["workspace"] == {"$same": 1}  # the line that holds it, not the one that referred to it
    assert lines[4]["source"] == {"$same": 4}
    assert set(lines[4]["workspace"]) == {"$same", "fingerprint", "files", "manifest"}
    assert isinstance(lines[4]["mentioned_absent"], list)  # a list is the same, or whole
    assert lines[5]["workspace"] == {"root": "/home/me/agent", "files": 0}  # a key removed: whole
    assert lines[6]["workspace"]["$same"] == 6 and "root" not in lines[6]["workspace"]
    s = Session.load(path)
    assert [_payload(e) for e in s.events] == events
    assert verify_log(path).ok
    tail = LogTail(path)
    assert [_payload(e) for e in tail.read()] == events


def test_a_line_is_walked_where_it_holds_stored_forms_and_read_as_parsed_elsewhere(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading a line decodes the parts of it that hold a stored form (a ``$delta``, bytes, a lone
    surrogate, an integer beyond 64 bits, one, two or three levels down) and takes the others as
    parsed: a model call's response and request headers are not walked when only its body holds a
    ``$delta``. The events are those written, field for field, either way; and checkpoints that
    share a field (``$same``) each get their own copy of it."""
    from forkpoint.log import codec, reader

    stream = [[1.5, f'data: {{"n": {i}, "text": "a chunk of the answer"}}\n\n'] for i in range(8)]
    first = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    again = {"model": "m", "messages": [*first["messages"], {"role": "assistant", "content": "hello"}]}
    response = {"status": 200, "headers": [["x-served-by", "s1"]], "body_kind": "stream", "chunks": stream}
    notes = ["notes/a.md", "notes/b.md"]
    events = [
        _model_call(first, response=response),
        _model_call(again, response=response),  # (its body a $delta of the first's)
        {"type": "tool_call", "tool": "t", "args": {"x": {"raw": b"\x00\xff"}}, "result": {"n": 2**70}},
        {"type": "tool_call", "tool": "t", "args": {"s": "lone \udc80"}, "result": [[{"deep": b"\x01"}]]},
        _checkpoint("1" * 40, notes),
        _checkpoint("1" * 40, notes),
    ]
    path = _write_session(store, events)
    assert b'"$delta"' in (path / LOG_NAME).read_bytes() or b'"$zstd"' in (path / LOG_NAME).read_bytes()
    walked: list[Any] = []
    real = codec.decode

    def counting(value: Any, *args: Any, **kwargs: Any) -> Any:
        walked.append(value)
        return real(value, *args, **kwargs)

    monkeypatch.setattr(codec, "decode", counting)
    monkeypatch.setattr(reader, "decode", counting, raising=False)
    s = Session.load(path)
    assert [_payload(e) for e in s.events] == events
    assert not any(v == stream or v == response for v in walked)  # (the response has no stored form)
    checkpoints = [e for e in s.events if e["type"] == "checkpoint"]
    assert checkpoints[0]["source"] == checkpoints[1]["source"]
    assert checkpoints[0]["source"] is not checkpoints[1]["source"]
    assert [_payload(e) for e in LogTail(path).read()] == events


def test_a_checkpoint_changed_by_a_reader_of_a_log_tail_is_not_what_later_lines_refer_to(
    store: Path,
) -> None:
    """The fields of a checkpoint that LogTail hands out are its reader's to change: the next
    checkpoints, whose lines refer to them (``$same``), read as they were written all the same."""
    notes = ["notes/a.md", "notes/b.md"]
    events = [_checkpoint("1" * 40, notes), _checkpoint("1" * 40, notes), _checkpoint("2" * 40, notes)]
    w = SessionWriter.create(store, {"argv": ["python", "agent.py"], "tags": {}}, fsync="never")
    w.append(events[0])
    tail = LogTail(w.path)
    [first] = tail.read()
    assert _payload(first) == events[0]
    first["source"]["tree"] = "changed by the reader"
    first["workspace"]["files"] = -1
    first["mentioned_absent"].append("added by the reader")
    for e in events[1:]:
        w.append(e)
    w.close()
    assert [_payload(e) for e in tail.read()] == events[1:]


def test_a_model_call_read_by_a_log_tail_is_as_written_whatever_its_reader_changed_before(
    store: Path,
) -> None:
    """A later model call's body is built from what LogTail handed out already (a ``$delta`` of the
    earlier call's messages, a ``$dumps`` of a tool call's arguments): a reader that changed those
    events in between still reads it as it was written, as Session.load does."""
    args = {"query": "what is the weather in Paris today", "units": "metric", "limit": 10}
    first = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    again = {"model": "m", "messages": [*first["messages"], {"role": "tool", "content": json.dumps(args)}]}
    events = [
        _model_call(first),
        {"type": "tool_call", "tool": "search", "args": args, "result": {"n": 1}},
        _model_call(again),
    ]
    w = SessionWriter.create(store, {"argv": ["python", "agent.py"], "tags": {}}, fsync="never")
    w.append(events[0])
    w.append(events[1])
    tail = LogTail(w.path)
    call, tool = tail.read()
    call["request"]["body"]["messages"][0] = {"role": "user", "content": "replaced by the reader"}
    tool["args"]["units"] = "changed by the reader"
    w.append(events[2])
    w.close()
    stored = stored_lines(w.path)[3]["request"]["body"]["messages"]
    assert "$delta" in stored and "$dumps" in stored["$delta"]["add"][0]["content"]
    assert [_payload(e) for e in tail.read()] == events[2:]
    assert [_payload(e) for e in Session.load(w.path).events] == events


def _bytes_result_edited(store: Path, result: bytes, old: bytes, new: bytes) -> Path:
    """A session of one tool call whose ``result`` is bytes, with ``old`` (once in its log) written
    as ``new``."""
    path = _write_session(store, [{"type": "tool_call", "tool": "t", "args": {"x": 1}, "result": result}])
    log = path / LOG_NAME
    data = log.read_bytes()
    assert data.count(old) == 1
    log.write_bytes(data.replace(old, new))
    return path


def test_a_stored_form_whose_dollar_is_written_escaped_is_decoded(store: Path) -> None:
    """JSON may write the ``$`` of a stored form's key as ``\\u0024``: the same line, of the same
    hash (verify says ok), so it loads as the same event, its bytes as bytes, not a dict of data."""
    path = _bytes_result_edited(store, b"\x00\x01", b'"$b64"', b'"\\u0024b64"')
    assert verify_log(path).ok
    assert [e["result"] for e in Session.load(path).events] == [b"\x00\x01"]


def test_a_damaged_b64_is_refused_naming_the_line(store: Path) -> None:
    """Base64 skips what is not of its alphabet: a damaged ``$b64`` read so would be other bytes,
    silently (``"AAEC...."`` read as ``b"\\x00\\x01\\x02"`` where ``b"\\x00\\x01\\x02\\x03"`` was written)."""
    path = _bytes_result_edited(store, b"\x00\x01\x02\x03", b'"$b64":"AAECAw=="', b'"$b64":"AAEC...."')
    with pytest.raises(
        SessionError, match=rf"a \$b64 holds 'AAEC\.\.\.\.', not base64 \(referenced from .*{LOG_NAME}:2\)"
    ):
        Session.load(path)


def test_a_checkpoint_field_that_refers_to_no_earlier_checkpoint_is_refused(store: Path) -> None:
    path = _write_session(
        store, [_checkpoint("1" * 40, ["a"]), {"type": "note"}, _checkpoint("1" * 40, ["a"])]
    )
    raw = (path / LOG_NAME).read_bytes().splitlines(keepends=True)
    lines = stored_lines(path)
    assert lines[3]["source"] == {"$same": 1}
    for target in (2, 3, 9, "1"):  # a note, the line itself, a line after it, not a seq
        lines[3]["source"] = {"$same": target}
        prev = lines[2]["hash"]
        lines[3]["prev"] = prev
        lines[3].pop("hash")
        lines[3]["hash"] = line_hash(lines[3])  # forged with the chain intact: only the reference is wrong
        (path / LOG_NAME).write_bytes(b"".join(raw[:3]) + orjson.dumps(lines[3]) + b"\n")  # (a plain line)
        expected = rf"session.jsonl:4: event seq 3: field 'source' refers to event {target!r}, which is no earlier checkpoint"
        with pytest.raises(SessionError, match=expected):
            Session.load(path)
        problems = verify_log(path).problems
        assert len(problems) == 1 and re.search(expected, problems[0]), problems


# ----------------------------------------------------------------------------- concurrency


def _append_many(path: str, tag: str, n: int, barrier: Any) -> None:
    w = SessionWriter.open(Path(path), fsync="never")
    barrier.wait()
    for i in range(n):
        payload: dict[str, Any] = {"type": "note", "text": f"{tag}-{i}", "data": {"i": i, "tag": tag}}
        if i % 10 == 0:
            payload["data"]["pad"] = f"{tag} padding " * (i + 1)  # some lines are long, some blobs
        w.append(payload)
    w.close()


@pytest.mark.slow
def test_two_processes_append_to_one_session(store: Path) -> None:
    path = _write_session(store, [])
    ctx = multiprocessing.get_context("fork")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_append_many, args=(str(path), tag, 200, barrier)) for tag in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
        assert p.exitcode == 0

    raw = (path / LOG_NAME).read_bytes()
    assert raw.endswith(b"\n")
    for line in raw.splitlines():
        orjson.loads(line)  # no torn or interleaved line
    s = Session.load(path)
    assert s.truncated is False
    assert [e["seq"] for e in s.events] == list(range(1, 401))
    for tag in ("a", "b"):
        mine = [e["data"]["i"] for e in s.events if e["data"]["tag"] == tag]
        assert mine == list(range(200))
    v = verify(path)
    assert v.ok and v.events == 400, v.problems


@pytest.mark.parametrize("twist", ["plain", "reserved key", "long string", "bytes"])
def test_a_large_tool_result_is_stored_as_it_is_only_when_nothing_in_it_needs_a_stored_form(
    tmp_path: Path, twist: str
) -> None:
    """A tool result of more than a megabyte of JSON is checked in its JSON text: stored as it is
    when plain, and encoded as any value when one part needs it (a reserved key, a string long
    enough for a blob, binary data). Each comes back whole from the session."""
    rows: list[Any] = [{"id": i, "name": f"row {i}", "tags": ["a", "b"]} for i in range(30_000)]
    if twist == "reserved key":
        rows[123] = {"$blob": "not a reference", "$same": 4}
    elif twist == "long string":
        rows[123] = {"text": "x" * 5000}
    elif twist == "bytes":
        rows[123] = {"data": b"\x00\x01" * 10}

    @forkpoint.tool
    def fetch() -> list[Any]:
        return rows

    with forkpoint.record(store=tmp_path) as rec:
        fetch()
    line = orjson.dumps(stored_lines(rec.session_path)[1])  # (as stored, packed or not)
    assert (b'"$' in line) == (twist != "plain")
    assert Session.load(rec.session_path).events[0]["result"] == rows
    with forkpoint.replay(rec.session_path):
        assert fetch() == rows
