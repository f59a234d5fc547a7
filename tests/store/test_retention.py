"""Retention and legal hold: rm, prune (and the configured retention), hold/release (refused by rm,
prune and scrub; shown by ls and show), the S3 object legal hold on a bucket with Object Lock
(moto on 127.0.0.1), the .gitignore of a new store, and FORKPOINT_SESSION_ID."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import forkpoint
from forkpoint.cli import main
from forkpoint.log import LOG_NAME, Session
from forkpoint.scrub import scrub_session
from forkpoint.store import info, open_store
from forkpoint.store.retention import HeldError, hold, prune_candidates
from tests.cliutil import record_script

OLD = "2020-01-01T00:00:00.000Z"


def cli(*args: str, cwd: Path | None = None) -> Any:
    runner = CliRunner()
    if cwd is None:
        return runner.invoke(main, list(args), env={"COLUMNS": "250"}, catch_exceptions=False)
    here = os.getcwd()
    os.chdir(cwd)
    try:
        return runner.invoke(main, list(args), env={"COLUMNS": "250"}, catch_exceptions=False)
    finally:
        os.chdir(here)


@pytest.fixture(autouse=True)
def own_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FORKPOINT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("FORKPOINT_STORE", raising=False)


def session(
    store: Path | str, *, created: str | None = None, exit_code: int | None = 0, name: str = "s"
) -> str:
    header: dict[str, Any] = {"argv": ["agent"], "name": name}
    if created:
        header["created"] = created
    rec = open_store(store).create(header)
    rec.writer.append({"type": "note", "text": "x" * 3000})  # a blob, so files go too
    if exit_code is not None:
        rec.end(exit_code)
    rec.close(quiet=True)
    return rec.session_id


def test_rm_removes_a_session_and_refuses_one_under_legal_hold(store: Path) -> None:
    a, b = session(store), session(store)
    assert cli("hold", b, "--reason", "incident INC-7", "--store", str(store)).exit_code == 0

    ls = cli("ls", "--store", str(store))
    assert f"{b} HELD" in ls.stdout and f"{a} HELD" not in ls.stdout
    shown = cli("show", b, "--store", str(store))
    assert "LEGAL HOLD incident INC-7" in shown.stdout, shown.output
    assert (
        json.loads(cli("show", b, "--json", "--store", str(store)).stdout)["hold"]["reason"]
        == "incident INC-7"
    )

    r = cli("rm", a, b, "--store", str(store))
    assert r.exit_code == 1
    assert (
        f"removed {a}" in r.stdout and f"refused to remove {b}: under legal hold (incident INC-7" in r.stderr
    )
    assert not (store / a).exists() and (store / b / LOG_NAME).is_file()
    assert a not in cli("ls", "--store", str(store)).stdout  # gone from the index too
    assert not [p for p in store.iterdir() if p.name.startswith(".rm-")]

    assert cli("release", b, "--store", str(store)).exit_code == 0
    assert cli("release", b, "--store", str(store)).exit_code == 1  # not held any more
    assert cli("rm", b, "--store", str(store)).exit_code == 0
    assert not (store / b).exists()


def test_rm_of_a_session_folder_that_is_a_link_removes_the_link_not_what_it_points_to(
    store: Path, tmp_path: Path
) -> None:
    """A session folder that is a symbolic link to another store's session: ``rm`` said "removed",
    and left the link behind as a hidden ``.rm-…`` entry (``rmtree`` refuses a link). The link goes;
    the session it pointed to stays."""
    elsewhere = tmp_path / "other-store"
    sid, mine = session(elsewhere), session(store)
    (store / sid).symlink_to(elsewhere / sid)
    r = cli("rm", sid, "--store", str(store), "--force")
    assert r.exit_code == 0 and f"removed {sid}" in r.stdout, r.output
    assert [p.name for p in store.iterdir() if p.name.startswith((".rm-", sid))] == []
    assert (elsewhere / sid / LOG_NAME).is_file() and (store / mine / LOG_NAME).is_file()


def test_prune_lists_the_store_once_not_once_per_session(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each removed session listed the whole store again (looking for ``.rm-`` leftovers): a prune
    of N sessions read N listings of up to N names (4,000 sessions: 4.2 s, 2.6 s of it listdir). A
    removal lists the store once; leftovers of an interrupted one are still cleared."""
    sids = [session(store, created=OLD) for _ in range(12)]
    (store / ".rm-leftover-1234").mkdir()
    listed: list[str] = []
    real = os.listdir

    def counting(path: Any = ".") -> list[str]:
        if Path(path) == store:
            listed.append(str(path))
        return real(path)

    monkeypatch.setattr(os, "listdir", counting)
    r = cli("prune", "--older-than", "30d", "--store", str(store))
    assert r.exit_code == 0 and sorted(r.stdout.split()[1::2]) == sorted(sids), r.output
    monkeypatch.setattr(os, "listdir", real)
    assert len(listed) <= 3, listed  # (ls before the prune lists it too)
    assert sorted(p.name for p in store.iterdir()) == [".gitignore", "index"]
    assert "no sessions" in cli("ls", "--store", str(store)).output


def test_prune_keeps_a_session_put_under_legal_hold_while_it_removed_others(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The holds were read once, before the first removal: a hold placed while a prune went through
    the store (hundreds of sessions on S3, a few requests each) was not seen, and the held session
    was deleted. Each session's hold is looked at again just before it is removed."""
    from forkpoint.store import retention

    sids = sorted(session(store, created=OLD) for _ in range(3))
    real = retention._remove_local

    def removing(target: Any, sid: str) -> None:
        if sid == sids[0]:  # while the prune is on its first session, someone holds the last one
            hold(open_store(store), sids[-1], "sev-1")
        real(target, sid)

    monkeypatch.setattr(retention, "_remove_local", removing)
    r = cli("prune", "--older-than", "30d", "--store", str(store))
    assert f"kept {sids[-1]}: under legal hold (sev-1" in r.output, r.output
    assert (store / sids[-1] / LOG_NAME).is_file(), r.output
    assert not (store / sids[0]).exists() and not (store / sids[1]).exists()


def test_rm_refuses_a_session_without_end_unless_forced(store: Path) -> None:
    sid = session(store, exit_code=None)
    r = cli("rm", sid, "--store", str(store))
    assert r.exit_code == 1 and "may still be recording" in r.output and (store / sid).is_dir()
    assert cli("rm", sid, "--force", "--store", str(store)).exit_code == 0
    assert not (store / sid).exists()


def test_rm_of_an_unreadable_session_says_why_it_is_refused(store: Path) -> None:
    """A session whose log cannot be read (emptied) was refused as one that "has no end event: it
    may still be recording": rm now names what cannot be read, and --force still removes it."""
    sid = session(store)
    (store / sid / LOG_NAME).write_bytes(b"")
    r = cli("rm", sid, "--store", str(store))
    assert r.exit_code == 1 and (store / sid).is_dir(), r.output
    assert f"session {sid} cannot be read (" in r.output, r.output
    assert f"{sid}/{LOG_NAME}:1: header line is incomplete)" in r.output, r.output
    assert "may still be recording" not in r.output and "--force" in r.output
    assert cli("rm", sid, "--force", "--store", str(store)).exit_code == 0
    assert not (store / sid).exists()


def test_scrub_refuses_a_session_under_legal_hold(store: Path) -> None:
    sid = session(store)
    hold(open_store(store), sid, "sev-1")
    before = (store / sid / LOG_NAME).read_bytes()
    with pytest.raises(HeldError, match="under legal hold"):
        scrub_session(store / sid)
    r = cli("scrub", sid, "--store", str(store))
    assert r.exit_code == 1 and "legal hold" in r.output
    assert (store / sid / LOG_NAME).read_bytes() == before


def test_scrub_refuses_a_session_put_under_legal_hold_while_it_copied_it(store: Path) -> None:
    """The hold was looked at only before the copy was written: one placed meanwhile (a scrub of
    a long session takes a while) was not seen, and the held session was rewritten."""
    sid = session(store)
    before = (store / sid / LOG_NAME).read_bytes()

    def hook(step: str) -> None:
        if step == "verify":
            hold(open_store(store), sid, "sev-1")

    with pytest.raises(HeldError, match="under legal hold"):
        scrub_session(store / sid, hook=hook)
    assert (store / sid / LOG_NAME).read_bytes() == before
    assert not (store / ".forkpoint-tmp").exists()


def test_a_reason_of_several_lines_is_printed_on_one_line_everywhere(store: Path) -> None:
    """A hold's reason with a line break (or an escape sequence) was printed as it was by hold, rm,
    prune and scrub (show escaped the escape sequence but kept the line break): its second line read
    as another message. Each prints it on one line, escaped as other user text is; --json keeps it."""
    sid = session(store, created=OLD)
    reason = "INC-7\nforkpoint: released\x1b[2J"
    one_line = "INC-7\\nforkpoint: released\\x1b[2J"
    held = cli("hold", sid, "--reason", reason, "--store", str(store))
    shown = cli("show", sid, "--store", str(store))
    rm = cli("rm", sid, "--store", str(store))
    pruned = cli("prune", "--older-than", "1d", "--store", str(store))
    scrubbed = cli("scrub", sid, "--store", str(store))
    for r in (held, shown, rm, pruned, scrubbed):
        assert one_line in r.output and "\x1b" not in r.output, r.output
        assert not [line for line in r.output.splitlines() if line.startswith("forkpoint: released")], (
            r.output
        )
    assert f"held {sid}: {one_line} (since" in held.stdout
    assert f"LEGAL HOLD {one_line} (since" in shown.stdout
    assert json.loads(cli("show", sid, "--json", "--store", str(store)).stdout)["hold"]["reason"] == reason


def test_hold_and_scrub_on_a_store_they_cannot_write_say_which_file_in_a_line(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a read-only store ``hold`` and ``scrub`` ended in an OSError traceback (``rm`` said it in a
    line). Every command names the file it could not write, and exits 1."""
    import errno

    sid = session(store)
    before = (store / sid / LOG_NAME).read_bytes()
    real_open = os.open

    def read_only(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    for args in (["hold", sid, "--reason", "sev-1"], ["scrub", sid]):
        r = cli(*args, "--store", str(store))
        assert r.exit_code == 1, r.output
        assert f"Error: {store}" in r.output and "Read-only file system" in r.output, r.output
        assert "Traceback" not in r.output
    monkeypatch.undo()
    assert (store / sid / LOG_NAME).read_bytes() == before


def test_prune_older_than_keeps_new_held_failed_and_unfinished(store: Path) -> None:
    old_ok = session(store, created=OLD)
    old_failed = session(store, created=OLD, exit_code=2)
    old_held = session(store, created=OLD)
    old_open = session(store, created=OLD, exit_code=None)
    new = session(store)
    hold(open_store(store), old_held, "legal")

    dry = cli("prune", "--older-than", "30d", "--keep-failed", "--dry-run", "--store", str(store))
    assert dry.exit_code == 0 and f"would remove {old_ok}" in dry.stdout and (store / old_ok).exists()

    r = cli("prune", "--older-than", "30d", "--keep-failed", "--store", str(store))
    assert r.exit_code == 0, r.output
    assert r.stdout.split() == ["removed", old_ok]
    assert f"kept {old_held}: under legal hold (legal)" in r.stderr
    assert f"kept {old_failed}: failed (exit 2)" in r.stderr
    assert f"kept {old_open}: incomplete" in r.stderr
    left = {p.name for p in store.iterdir() if (p / LOG_NAME).is_file()}
    assert left == {old_failed, old_held, old_open, new}

    r = cli("prune", "--older-than", "30d", "--store", str(store))  # failed ones go without --keep-failed
    assert r.stdout.split() == ["removed", old_failed]
    # (the count of what stays names the newer sessions too: "kept 2" read as all that was left)
    assert f"prune removed 1 session older than 30d from {store}; kept 2 older (said above) and 1 newer" in (
        " ".join(r.stderr.split())
    )
    r = cli("prune", "--older-than", "9999d", "--store", str(store))
    assert "prune removed 0 sessions older than 9999d" in r.stderr and "; kept 3 newer" in r.stderr


def test_prune_takes_the_configured_retention(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FORKPOINT_CONFIG", raising=False)
    old, new = session(store, created=OLD), session(store)
    project = tmp_path / "project"
    project.mkdir()
    r = cli("prune", "--store", str(store), cwd=project)
    assert r.exit_code == 2 and "[store] retention" in r.output  # no age anywhere: a usage error
    (project / "forkpoint.toml").write_text('[store]\nretention = "90d"\n')
    r = cli("prune", "--store", str(store), cwd=project)
    assert r.exit_code == 0 and r.stdout.split() == ["removed", old], r.output
    assert (store / new).is_dir()
    (project / "forkpoint.toml").write_text('[store]\nretention = "soon"\n')
    r = cli("prune", "--store", str(store), cwd=project)
    assert r.exit_code == 2 and "'soon' is not a duration" in r.output and "forkpoint.toml" in r.output


@pytest.mark.parametrize("age", ["99999999999d", "999999999d", "3000000w"])
def test_prune_with_an_age_too_long_for_a_date_is_a_usage_error(store: Path, age: str) -> None:
    """An age no date is that long before now (a typo, a retention of "999999999d") ended
    ``forkpoint prune`` in an OverflowError traceback; it is a usage error naming the option."""
    session(store, created=OLD)
    r = cli("prune", "--older-than", age, "--dry-run", "--store", str(store))
    assert r.exit_code == 2, r.output
    assert f"--older-than: '{age}' is too long a duration" in r.output and "Traceback" not in r.output


def test_a_new_local_store_is_git_ignored(store: Path, tmp_path: Path) -> None:
    session(store)
    ignore = store / ".gitignore"
    assert ignore.read_text().splitlines()[-1] == "*"
    assert ignore.stat().st_mode & 0o777 == 0o600
    existing = tmp_path / "existing"
    existing.mkdir()
    session(existing)  # a directory the user made: left as it is
    assert not (existing / ".gitignore").exists()
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    status = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert "store/" not in status.stdout and "existing/" in status.stdout


CHILD = """
import os, subprocess, sys
print("agent", os.environ.get("FORKPOINT_SESSION_ID"))
print(subprocess.run([sys.executable, "-c", "import os; print('child', os.environ.get('FORKPOINT_SESSION_ID'))"],
                     capture_output=True, text=True).stdout.strip())
"""


@pytest.mark.slow
def test_every_recorded_process_gets_its_session_id(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FORKPOINT_SESSION_ID", raising=False)
    script = tmp_path / "agent.py"
    script.write_text(CHILD)
    out = record_script(store, script)
    assert out.returncode == 0, out.stderr
    (sid,) = [p.name for p in store.iterdir() if (p / LOG_NAME).is_file()]
    assert out.stdout.split() == ["agent", sid, "child", sid]

    with forkpoint.record("api", store=store) as rec:
        assert os.environ["FORKPOINT_SESSION_ID"] == rec.session_path.name
    assert "FORKPOINT_SESSION_ID" not in os.environ


# ----------------------------------------------------------------------------- S3 Object Lock (moto)


@pytest.mark.slow
def test_hold_sets_the_s3_object_legal_hold_on_a_bucket_with_object_lock(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    bucket = "fp-worm"
    s3.create_bucket(Bucket=bucket, ObjectLockEnabledForBucket=True)
    url = f"s3://{bucket}/sessions"
    sid = session(url)
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket, Prefix=f"sessions/{sid}/")["Contents"]]
    assert f"sessions/{sid}/{LOG_NAME}" in keys and any("/blobs/" in k for k in keys)

    def status(key: str) -> str:
        return str(s3.get_object_legal_hold(Bucket=bucket, Key=key)["LegalHold"]["Status"])

    r = cli("hold", sid, "--reason", "sev-1 INC-9", "--store", url)
    assert r.exit_code == 0, r.output
    assert {status(k) for k in keys} == {"ON"}
    assert "HELD" in cli("ls", "--store", url).stdout
    r = cli("rm", sid, "--store", url)
    assert r.exit_code == 1 and "under legal hold" in r.stderr
    assert s3.head_object(Bucket=bucket, Key=f"sessions/{sid}/{LOG_NAME}")  # still there

    assert cli("release", sid, "--store", url).exit_code == 0
    assert {status(k) for k in keys} == {"OFF"}
    assert cli("rm", sid, "--store", url).exit_code == 0
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix=f"sessions/{sid}/")
    assert sid not in cli("ls", "--store", url).stdout


def test_hold_on_a_bucket_without_object_lock_is_kept_in_the_store(s3_url: str, tmp_path: Path) -> None:
    sid = session(s3_url)
    assert cli("hold", sid, "--reason", "audit", "--store", s3_url).exit_code == 0
    r = cli("rm", sid, "--store", s3_url)
    assert r.exit_code == 1 and "under legal hold (audit" in r.stderr


def test_a_removal_that_fails_midway_says_what_went_and_drops_it_from_the_index(
    s3_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prune whose third session could not be deleted (access denied, the network gone) ended
    with the error alone: the sessions it had deleted were never said, and stayed in the index, so
    ``ls`` listed them and reading one said "in the index but not in the store"."""
    for _ in range(4):
        session(s3_url, created=OLD)
    sids = [r.session_id for r in open_store(s3_url).listing().rows]  # (the order prune goes in)
    fs = open_store(s3_url).fs  # (fsspec's cached instance: the one the command gets too)
    real = fs.rm_file

    def denied(path: str, **kw: Any) -> Any:
        if sids[2] in path:
            raise PermissionError("AccessDenied")
        return real(path, **kw)

    monkeypatch.setattr(fs, "rm_file", denied)
    r = cli("prune", "--older-than", "30d", "--store", s3_url)
    monkeypatch.setattr(fs, "rm_file", real)
    assert r.exit_code == 1, r.output
    assert r.stdout.split() == ["removed", sids[0], "removed", sids[1]]
    assert f"removing session {sids[2]} failed: PermissionError: AccessDenied" in r.stderr
    assert "prune removed 2 sessions" in r.stderr
    listed = cli("ls", "--store", s3_url).stdout
    assert [s for s in sids if s in listed] == sids[2:]
    assert cli("show", sids[3], "--store", s3_url).exit_code == 0


CASSETTE_2023 = """interactions:
- request:
    body: '{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
    headers:
      Content-Type: [application/json]
    method: POST
    uri: http://127.0.0.1:9/v1/chat/completions
  response:
    body:
      string: '{"choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}]}'
    headers:
      Content-Type: [application/json]
      Date: ['Tue, 14 Nov 2023 10:00:00 GMT']
    status: {code: 200, message: OK}
version: 1
"""


def test_a_cassette_imported_now_is_not_old_and_its_unknown_exit_is_no_failure(
    store: Path, tmp_path: Path
) -> None:
    """An imported session's ``created`` is the time of the run it records (the cassette's Date):
    ``prune --older-than 30d`` removed a cassette imported a minute ago, while ``ls`` and ``last``
    had it as the newest. Its age runs from its import. And ``--keep-failed`` kept an old imported
    one as "failed (exit None)": its exit code is unknown, not a failure."""
    cassette = tmp_path / "chat.yaml"
    cassette.write_text(CASSETTE_2023)
    done = cli("import", str(cassette), "--store", str(store))
    assert done.exit_code == 0, done.output
    (sid,) = [p.name for p in store.iterdir() if (p / LOG_NAME).is_file()]
    assert Session.load(store / sid).header["created"].startswith("2023-11-14")
    r = cli("prune", "--older-than", "30d", "--keep-failed", "--store", str(store))
    assert r.exit_code == 0, r.output
    assert (store / sid / LOG_NAME).is_file() and "removed" not in r.stdout
    later = datetime.now(UTC) + timedelta(days=31)
    rows = [info(store / sid)]
    gone, kept = prune_candidates(rows, timedelta(days=30), keep_failed=True, now=later)
    assert [row.session_id for row in gone] == [sid] and kept == {}
