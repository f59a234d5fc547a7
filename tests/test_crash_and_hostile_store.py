"""Crash and hostile input (issue 14, item 6): leftovers of an interrupted write are not damage; a
failed write (a full disk) never raises into the agent; YAML aliases and import sizes are bounded;
FIFOs in a session are refused, never opened blocking; a store another user could tamper with is
refused; everything forkpoint creates is owner-only whatever the umask."""

from __future__ import annotations

import errno
import os
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

import forkpoint
from forkpoint.checkpoint import verify_session
from forkpoint.cli import main
from forkpoint.errors import ImportFormatError
from forkpoint.importers import base as import_base
from forkpoint.importers import import_file
from forkpoint.log import LOG_NAME, Session, SessionError
from forkpoint.store import info, open_store
from forkpoint.store.retention import hold
from tests.cliutil import record_script
from tests.gitutil import git
from tests.logutil import take_over_descriptor


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "250"}, catch_exceptions=False)


def within(seconds: float, fn: Callable[[], Any]) -> Any:
    """``fn()``'s result, or a test failure if it has not returned after ``seconds`` (a blocked open
    of a FIFO would hang the test otherwise: the thread is a daemon, left behind)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # handed to the test
            out["error"] = exc

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():
        pytest.fail(f"still blocked after {seconds} s")
    if "error" in out:
        raise out["error"]
    return out["value"]


def repo_with_change(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "app.py").write_text("x = 1\n")
    git(repo, "add", "app.py")
    git(repo, "commit", "-q", "-m", "base")
    (repo / "app.py").write_text("x = 2\n")  # a modified tracked file: its objects go to git-objects
    (repo / "notes.txt").write_text("untracked\n" * 100)
    return repo


@forkpoint.tool
def lookup(q: str) -> dict[str, Any]:
    return {"q": q, "answer": 42}


# ----------------------------------------------------------------------------- leftovers


def test_leftovers_of_an_interrupted_write_are_reported_not_corrupt(store: Path, tmp_path: Path) -> None:
    repo = repo_with_change(tmp_path)
    with forkpoint.record("leftovers", store=store, workspace=repo) as rec:
        forkpoint.checkpoint()
        lookup("a" * 2000)  # a blob
    path = rec.session_path
    objects = next(p for p in (path / "git-objects").iterdir() if len(p.name) == 2)
    (objects / ".tmp-4242-140001-0123456789abcdef0123456789abcdef012345").write_bytes(b"x\x9c half")
    blobs = next(p for p in (path / "blobs").iterdir() if p.is_dir())
    (blobs / ".deadbeef.4242.0a0b0c0d.tmp").write_bytes(b"half a blob")

    v = verify_session(path)
    assert v.ok and v.status == "ok", v.problems
    assert sum("left over by an interrupted write" in n for n in v.notes) == 2, v.notes
    r = cli("verify", str(path))
    assert r.exit_code == 0 and "left over by an interrupted write" in r.output
    with forkpoint.replay(path):  # replay proceeds (it refuses a session that fails verification)
        assert lookup("a" * 2000) == {"q": "a" * 2000, "answer": 42}


# ----------------------------------------------------------------------------- a full disk


def _fail_log_writes(monkeypatch: pytest.MonkeyPatch, armed: list[bool]) -> None:
    real = os.write

    def write(fd: int, data: Any) -> int:
        if armed[0] and os.readlink(f"/proc/self/fd/{fd}").endswith(LOG_NAME):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


def test_a_full_disk_stops_recording_and_the_agent_goes_on(
    store: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    armed = [False]
    _fail_log_writes(monkeypatch, armed)
    with forkpoint.record("full", store=store) as rec:
        assert lookup("before") == {"q": "before", "answer": 42}
        armed[0] = True
        assert lookup("during") == {"q": "during", "answer": 42}  # no OSError raised into the agent
        assert lookup("again") == {"q": "again", "answer": 42}
        assert forkpoint.note("more") is None
        armed[0] = False  # the disk has room again: the end is written, and says so
    err = capsys.readouterr().err
    assert err.count("recording of session") == 1 and "No space left on device" in err
    s = Session.load(rec.session_path)
    assert [e.get("args", {}).get("q") for e in s.events if e["type"] == "tool_call"] == ["before"]
    end = s.events[-1]
    assert end["type"] == "end" and "No space left on device" in end["incomplete"]
    v = verify_session(rec.session_path)
    assert v.ok and any("the recording stopped before the run ended" in n for n in v.notes)
    # Every view says it (show, ls, the HTML page's data, the exported root span), not verify and
    # replay alone: a session cut short looked like a whole run that ended with exit code 0.
    from forkpoint.html import view_model
    from forkpoint.otel.spans import plan

    shown = CliRunner().invoke(main, ["show", str(rec.session_path)], env={"COLUMNS": "200"})
    assert "INCOMPLETE: recording stopped early (OSError: [Errno 28] No space left" in shown.output
    listed = CliRunner().invoke(main, ["ls", "--store", str(store)])
    (row,) = [line for line in listed.output.splitlines() if s.id in line]
    assert " 0 incomplete " in row, listed.output
    (page_end,) = [e for e in view_model(s)["events"] if e["type"] == "end"]
    assert "No space left on device" in page_end["incomplete"]
    root = plan(s)[0]
    assert root.status == "error" and "recording incomplete" in str(root.status_message)
    assert "No space left" in root.attributes["forkpoint.incomplete"]


def test_a_replay_past_where_a_full_disk_stopped_the_recording_says_so(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run repeated a call after the disk filled: its replay, served the recorded one, then
    asked again, said "the run asked once more than it did when recorded", which is false (it asked
    as often; the recording had stopped), and did not say that the recording stopped early."""
    armed = [False]
    _fail_log_writes(monkeypatch, armed)
    with forkpoint.record("full", store=store) as rec:
        lookup("same")
        armed[0] = True
        lookup("same")
        armed[0] = False
    with pytest.raises(forkpoint.Divergence) as exc, forkpoint.replay(rec.session_path):
        assert lookup("same") == {"q": "same", "answer": 42}
        lookup("same")
    said = str(exc.value)
    assert "the recording stopped early (OSError: [Errno 28] No space left on device" in said, said
    assert "asked once more" not in said, said


def test_a_full_disk_until_the_end_leaves_the_session_without_end(
    store: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    armed = [False]
    _fail_log_writes(monkeypatch, armed)
    with forkpoint.record("full", store=store) as rec:
        armed[0] = True
        assert lookup("x") == {"q": "x", "answer": 42}
    armed[0] = False
    assert "could not write the end of session" in capsys.readouterr().err
    assert verify_session(rec.session_path).status == "incomplete"


def test_a_line_cut_short_by_a_full_disk_says_why(
    store: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A disk that fills up during a line's write (or a file size limit) writes part of it and says
    nothing of why: the error was 'short write (275 of 546 bytes)'. The write after it says why."""
    real, room = os.write, [-1]  # (bytes the disk has left; -1: plenty)

    def write(fd: int, data: Any) -> int:
        if room[0] >= 0 and os.readlink(f"/proc/self/fd/{fd}").endswith(LOG_NAME):
            if not room[0]:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            data, room[0] = bytes(data)[: room[0]], 0
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)
    with forkpoint.record("cut", store=store) as rec:
        assert lookup("before") == {"q": "before", "answer": 42}
        room[0] = 100
        assert lookup("during") == {"q": "during", "answer": 42}
        room[0] = -1
    err = " ".join(capsys.readouterr().err.split())
    assert "short write (" in err and "bytes: No space left on device)" in err, err
    assert verify_session(rec.session_path).status != "corrupt"


def test_a_program_that_closes_the_logs_descriptor_and_reuses_its_number_keeps_its_file(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A program that closes the descriptors it did not open (``os.closerange(3, …)``, as a daemon
    does) and then opens a file gets the log's number for it: the next event was appended to the
    program's file, and the end of the recording closed it under the program. Recording stops,
    said, and the program's file is left as the program wrote it, and open."""
    mine = tmp_path / "program.log"
    with forkpoint.record("closer", store=store) as rec:
        assert lookup("before") == {"q": "before", "answer": 42}
        log_fd = take_over_descriptor(LOG_NAME, mine)
        os.write(log_fd, b"the program's own line\n")
        assert lookup("after") == {"q": "after", "answer": 42}
    os.write(log_fd, b"and another\n")  # still open: the recording's end did not close it
    os.close(log_fd)
    assert mine.read_bytes() == b"the program's own line\nand another\n"
    assert "closed the log's file descriptor" in capsys.readouterr().err
    s = Session.load(rec.session_path)
    assert [e.get("args", {}).get("q") for e in s.events if e["type"] == "tool_call"] == ["before"]


@pytest.mark.slow
def test_output_a_full_disk_cuts_short_is_named_in_a_line_not_a_traceback(
    store: Path, tmp_path: Path
) -> None:
    """A file size limit (``ulimit -f``) or a full disk while ``show --html`` wrote its page,
    ``make-test`` copied the cassette or a replayed process wrote its report: each ended in a
    Python traceback (a write error names no file; copytree's error is a list)."""
    import resource
    import subprocess

    from tests.cliutil import FORKPOINT, QUOTE_AGENT, with_this_path

    script = tmp_path / "agent.py"
    script.write_text(QUOTE_AGENT)
    assert record_script(store, script).returncode == 0
    (path,) = [p for p in store.iterdir() if (p / LOG_NAME).is_file()]

    def limited(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*FORKPOINT, *args],
            cwd=tmp_path,
            env=with_this_path(),
            capture_output=True,
            text=True,
            timeout=90,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024)),
        )

    page = limited("show", str(path), "--html", str(tmp_path / "page.html"))
    assert page.returncode == 1 and "page.html: File too large" in page.stderr, page.stderr
    made = limited("make-test", str(path), "--into", str(tmp_path / "t"))
    assert made.returncode == 1 and "cannot copy" in made.stderr and "File too large" in made.stderr, (
        made.stderr
    )
    replayed = limited("replay", str(path))
    assert "could not write this process's replay report" in replayed.stderr, replayed.stderr
    # (the parent says that process ran and why it left no report, not that forkpoint did not start)
    assert "could not write its report (File too large)" in replayed.stderr, replayed.stderr
    assert "did not start forkpoint" not in replayed.stderr, replayed.stderr
    for r in (page, made, replayed):
        assert "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "page.html").exists()
    cassettes = tmp_path / "t" / "cassettes"
    assert not cassettes.exists() or list(cassettes.iterdir()) == []  # (no half-copied cassette)


AGENT = """
import errno, os, sys
import forkpoint

real = os.write
def write(fd, data):
    if os.readlink(f"/proc/self/fd/{fd}").endswith("session.jsonl"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return real(fd, data)

@forkpoint.tool
def lookup(q):
    return q.upper()

print(lookup("one"))
os.write = write  # the disk is full from here on
print(lookup("two"))
sys.exit(5)
"""


#: A program whose disk is full once it made a tool call, for the files forkpoint's bootstrap writes
#: to its CLI (a report, an ending: written through a temporary file, which cannot be made; an empty
#: file still can, as on a full disk): it then execs into its second part (``exec``, exits 3) or
#: leaves through ``os._exit(7)``.
FULL_BEFORE_LEAVING = """
import errno, os, sys
import forkpoint

@forkpoint.tool
def lookup(q):
    return q.upper()

real_open = os.open
def full(path, *args, **kwargs):
    name = os.fspath(path)
    if "/forkpoint-re" in name and name.endswith(".tmp"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    return real_open(path, *args, **kwargs)

if len(sys.argv) > 2:  # the program it became
    print(lookup("two"))
    sys.exit(3)
print(lookup("one"), flush=True)
os.open = full
if sys.argv[1] == "exec":
    os.execv(sys.executable, [sys.executable, __file__, "exec", "again"])
os._exit(7)
"""


@pytest.mark.parametrize(("how", "code", "printed"), [("exec", 3, "ONE\nTWO\n"), ("exit", 7, "ONE\n")])
def test_a_full_disk_as_the_program_execs_or_leaves_is_said_and_changes_nothing(
    store: Path, tmp_path: Path, how: str, code: int, printed: str
) -> None:
    """The ending a recorded process writes, and the report a replayed one writes, before an exec
    and at ``os._exit``: on a full disk the exec raised the OSError into the program (which then
    ended with a traceback instead of becoming its second part), and a replay's parent said the
    process "did not start forkpoint". The program goes on as it would; the failure is said once
    by the process, and the parent says that process could not write it, and why."""
    from tests.cliutil import forkpoint_cli, with_this_path

    script = tmp_path / "agent.py"
    script.write_text(FULL_BEFORE_LEAVING)
    rec = forkpoint_cli(
        ["record", "--store", str(store), "--no-workspace", "--", sys.executable, str(script), how],
        cwd=tmp_path,
        env=with_this_path(),
    )
    assert rec.returncode == code and rec.stdout == printed, rec.stderr
    assert rec.stderr.count("could not write how this process's recording ended") == 1, rec.stderr
    assert "No space left on device" in rec.stderr and "Traceback" not in rec.stderr
    (path,) = [p for p in store.iterdir() if (p / LOG_NAME).is_file()]
    end = Session.load(path).events[-1]
    assert "could not write how its recording ended (No space left on device)" in end["incomplete"]

    rep = forkpoint_cli(["replay", str(path), "--store", str(store)], cwd=tmp_path, env=with_this_path())
    assert rep.returncode == code and rep.stdout == printed, rep.stderr
    said = " ".join(rep.stderr.split())
    assert said.count("could not write this process's replay report") == 1, said
    assert "ran, replayed, but could not write its report (No space left on device)" in said, said
    assert "did not start forkpoint" not in said and "Traceback" not in said and "replay ok" not in said


def record_that_runs_unrecorded(store: Path, tmp_path: Path) -> str:
    """``forkpoint record`` of a command that leaves a mark and exits 5, where no session can be
    made: the command ran (its mark, its exit code); what forkpoint said, on one line."""
    marker = tmp_path / "ran"
    r = cli(
        "record",
        "--store",
        str(store),
        "--no-workspace",
        "--",
        sys.executable,
        "-c",
        f"open({str(marker)!r}, 'w').write('x'); raise SystemExit(5)",
    )
    assert r.exit_code == 5, r.output
    assert marker.exists()
    return " ".join(r.output.split())


@pytest.mark.slow
def test_cli_record_on_a_full_disk_exits_as_the_agent_would(store: Path, tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    out = record_script(store, script)
    assert out.returncode == 5, out.stderr
    assert out.stdout.split() == ["ONE", "TWO"]
    assert "recording of session" in out.stderr and "No space left on device" in out.stderr
    assert "Traceback" not in out.stderr
    (path,) = [p for p in store.iterdir() if (p / LOG_NAME).is_file()]
    end = Session.load(path).events[-1]
    assert end["type"] == "end" and end["exit_code"] == 5 and "No space left" in end["incomplete"]


@pytest.mark.slow
def test_cli_record_on_a_disk_full_before_the_first_call_does_not_say_no_call_was_made(
    store: Path, tmp_path: Path
) -> None:
    """A disk full (or ``ulimit -f`` reached) before the first call could be written: the command made
    its calls, unrecorded; ``forkpoint record`` said it "exited 5 before it made any model or tool
    call: the session holds its end only", which is false, and suggested removing the session."""
    script = tmp_path / "agent.py"
    script.write_text(
        AGENT.replace('print(lookup("one"))\nos.write = write', 'os.write = write\nprint(lookup("one"))')
    )
    out = record_script(store, script)
    assert out.returncode == 5 and out.stdout.split() == ["ONE", "TWO"], out.stderr
    said = " ".join(out.stderr.split())
    assert "recording of session" in said and "No space left on device" in said, said
    assert "before it made any model or tool call" not in said and "Traceback" not in said, said


def test_cli_record_on_a_store_it_cannot_create_a_session_in_runs_the_command_unrecorded(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store on a full (or read-only) disk when the recording started: ``forkpoint record`` ended
    in an OSError traceback, exit 1, and the agent never ran. It runs, unrecorded, and that is said."""
    from forkpoint.log import SessionWriter

    def full(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(SessionWriter, "create", full)
    said = record_that_runs_unrecorded(store, tmp_path)
    assert "cannot create a session in" in said and "No space left on device" in said
    assert "the command runs unrecorded" in said and "Traceback" not in said


def test_python_record_on_a_store_path_through_a_file_raises_the_session_error_it_documents(
    tmp_path: Path,
) -> None:
    """``forkpoint.record(store=...)`` where the store cannot be made (a path through a file) raised
    the bare NotADirectoryError of ``mkdir``; its docstring promises a SessionError, naming the store,
    before the block runs and before anything is written."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    ran = []
    with pytest.raises(SessionError, match=r"cannot create a session in .*a-file/store \(Not a directory\)"):
        with forkpoint.record(store=blocker / "store"):
            ran.append(1)
    assert ran == [] and blocker.read_text() == "x"


# ----------------------------------------------------------------------------- YAML and import sizes


def laughs(levels: int) -> str:
    lines = ["interactions: []", 'lol0: &l0 "lol"']
    for i in range(1, levels + 1):
        lines.append(f"lol{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


def test_a_billion_laughs_cassette_is_refused(tmp_path: Path, store: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(laughs(9))  # 10**9 strings from ~1 KB
    assert bomb.stat().st_size < 1500
    with pytest.raises(ImportFormatError, match="billion laughs"):
        import_file(bomb, store=store)
    r = cli("import", str(bomb), "--store", str(store))
    assert r.exit_code == 1 and "YAML aliases expand to more than" in r.output and "Traceback" not in r.output
    assert not store.exists() or not any((p / LOG_NAME).exists() for p in store.iterdir())


@pytest.mark.parametrize("name", ["cassette.yaml", "trajectory.json"])
def test_an_integer_of_more_digits_than_python_reads_is_named_not_a_traceback(
    tmp_path: Path, store: Path, name: str
) -> None:
    """An integer of more than 4,300 digits (what Python converts, ``sys.get_int_max_str_digits()``)
    in a file to import, YAML or JSON (which orjson refuses, so it is read as YAML): ``forkpoint
    import`` ended in a ValueError traceback. It names the file and the line."""
    big = "7" * 5000
    f = tmp_path / name
    f.write_text(
        f"interactions:\n- request: {{}}\n  response: {{x: {big}}}\n"
        if name.endswith(".yaml")
        else f'{{"history": [1,\n{big}]}}'
    )
    r = cli("import", str(f), "--store", str(store))
    said = " ".join(r.output.split())
    line = 3 if name.endswith(".yaml") else 2
    assert r.exit_code == 1 and f"{f}: line {line}: an integer of 5,000 digits" in said, said
    assert "Traceback" not in r.output
    assert not store.exists() or not any((p / LOG_NAME).exists() for p in store.iterdir())
    assert import_base.load_yaml(f, "a: 0x1F\nb: 1_000\nc: 12345678901234567890123\n", "x") == {
        "a": 31,
        "b": 1000,
        "c": 12345678901234567890123,
    }


def test_yaml_aliases_of_a_normal_size_still_load(tmp_path: Path) -> None:
    doc = import_base.load_yaml(tmp_path / "x.yaml", laughs(4), "a cassette")  # 10**4 strings
    assert len(doc["lol4"]) == 10 and doc["lol4"][0][0][0][0] == "lol"
    with pytest.raises(ImportFormatError, match="refers to a node that contains it"):
        import_base.load_yaml(tmp_path / "x.yaml", "a: &a [1, *a]\n", "a cassette")


def test_a_trajectory_beyond_the_step_limit_is_refused_before_converting(tmp_path: Path, store: Path) -> None:
    steps = import_base.MAX_ITEMS + 1
    messages = [{"role": "system", "content": "s"}] + [
        {"role": "assistant" if i % 2 else "user", "content": f"step {i}"} for i in range(steps)
    ]
    doc = {"trajectory_format": "mini-swe-agent-1", "messages": messages, "info": {}}
    traj = tmp_path / "big.traj.json"
    traj.write_bytes(orjson.dumps(doc))
    with pytest.raises(ImportFormatError, match=f"{steps + 1:,} steps/messages"):
        import_file(traj, store=store)


# ----------------------------------------------------------------------------- special files


def _session_with_blob(store: Path) -> Path:
    with forkpoint.record("fifo", store=store) as rec:
        lookup("b" * 3000)
    return rec.session_path


def test_a_fifo_in_place_of_a_blob_is_refused_not_waited_on(store: Path) -> None:
    path = _session_with_blob(store)
    blob = next(p for p in (path / "blobs").rglob("*") if p.is_file())
    blob.unlink()
    os.mkfifo(blob)
    v = within(10, lambda: verify_session(path))
    assert not v.ok and "FIFO" in v.problems[0], v.problems
    with pytest.raises(SessionError, match="FIFO"):
        within(10, lambda: Session.load(path))
    r = within(20, lambda: cli("show", str(path)))
    assert r.exit_code == 1 and "FIFO" in r.output


def test_a_fifo_in_place_of_the_log_or_an_imported_file_is_refused(store: Path, tmp_path: Path) -> None:
    path = _session_with_blob(store)
    (path / LOG_NAME).unlink()
    os.mkfifo(path / LOG_NAME)
    with pytest.raises(SessionError, match="FIFO"):
        within(10, lambda: info(path))
    with pytest.raises(SessionError, match="FIFO"):
        within(10, lambda: Session.load(path))
    v = within(10, lambda: verify_session(path))
    assert not v.ok and "FIFO" in v.problems[0]
    fifo = tmp_path / "cassette.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ImportFormatError, match="FIFO"):
        within(10, lambda: import_file(fifo, store=store))


def test_check_of_a_folder_reports_a_fifo_a_damaged_or_an_unreadable_log_as_a_row_and_checks_the_others(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``forkpoint check DIR`` walks DIR for session logs: a FIFO named session.jsonl, a log whose
    header is not JSON or one this user cannot read ended the whole run ("Error: …is a FIFO…"), and
    no session was checked. Each is a row saying why; the good one is checked."""
    import shutil

    from forkpoint.store import base as store_base
    from forkpoint.suite import select
    from tests.cliutil import QUOTE_AGENT

    script = tmp_path / "agent.py"
    script.write_text(QUOTE_AGENT)
    # (recorded where it is checked: a command recorded in this checkout, whose .venv may hold the
    # interpreter, is checked elsewhere with its paths under the checkout made relative)
    assert record_script(store, script, cwd=tmp_path).returncode == 0
    (good,) = [p for p in store.iterdir() if (p / LOG_NAME).is_file()]
    suite = tmp_path / "suite"
    shutil.copytree(good, suite / "good")
    (suite / "fifo").mkdir()
    os.mkfifo(suite / "fifo" / LOG_NAME)
    shutil.copytree(good, suite / "damaged")
    (suite / "damaged" / LOG_NAME).write_bytes(b"not json\n")
    shutil.copytree(good, suite / "locked")
    (suite / "looping").mkdir()  # (a link to itself: rglob passed over it, and nothing was selected)
    (suite / "looping" / LOG_NAME).symlink_to(Path("looping") / LOG_NAME)
    real = store_base.open_regular

    def open_regular(path: Path | str) -> Any:  # (as root, a mode of 000 would not stop the read)
        if Path(path).parent.name == "locked":
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real(path)

    monkeypatch.setattr(store_base, "open_regular", open_regular)
    problems = {Path(c.ref["path"]).name: c.problem for c in select([str(suite)]).sessions}
    assert problems["good"] is None and set(problems) == {"good", "fifo", "damaged", "locked", "looping"}
    assert "FIFO" in str(problems["fifo"]) and "not valid JSON" in str(problems["damaged"])
    assert "Permission denied" in str(problems["locked"]), problems
    assert "is a symbolic link" in str(problems["looping"]), problems
    monkeypatch.chdir(tmp_path)
    r = cli("check", str(suite))
    assert r.exit_code == 3, r.output
    assert "1 reproduced" in r.output and "4 error" in r.output and "FIFO" in r.output, r.output


# ----------------------------------------------------------------------------- shared stores


def test_a_store_others_may_write_or_own_is_refused_unless_allowed(store: Path, tmp_path: Path) -> None:
    _session_with_blob(store)
    os.chmod(store, 0o777)
    r = cli("ls", "--store", str(store))
    assert (
        r.exit_code == 1 and "every user may write into it" in r.output and "--allow-shared-store" in r.output
    )
    with pytest.raises(SessionError, match="every user may write"):
        open_store(store)
    r = cli("--allow-shared-store", "ls", "--store", str(store))
    assert r.exit_code == 0 and "fifo" in r.stdout
    os.environ.pop("FORKPOINT_ALLOW_SHARED_STORE", None)  # the flag set it for this process
    os.chmod(store, 0o700)

    planted = tmp_path / "planted"
    planted.mkdir()
    (store / "index").rename(tmp_path / "real-index")
    (store / "index").symlink_to(planted)
    r = cli("ls", "--store", str(store))
    assert r.exit_code == 1 and "its index is a symbolic link" in r.output
    assert not any(planted.iterdir())
    (store / "index").unlink()

    if os.getuid() == 0:  # root can give the store to another user; others cannot make one
        os.chown(store, 4242, 4242)
        r = cli("ls", "--store", str(store))
        assert r.exit_code == 1 and "owned by user id 4242" in r.output


def test_the_arms_of_a_fork_go_to_a_temporary_folder_of_this_users_only(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --into, the arms go under $TMPDIR/forkpoint-forks-UID: the temporary folder is shared, so
    a folder of that name that is a symlink or another user's (made there first) is refused, and
    nothing is written through it."""
    repo = repo_with_change(tmp_path)
    with forkpoint.record("fork", store=store, workspace=repo) as rec:
        lookup("a")
        forkpoint.checkpoint()
    seq = next(
        c["seq"] for c in Session.load(rec.session_path).by_type("checkpoint") if c["boundary"] == "resumable"
    )
    tmp = tmp_path / "tmp"
    tmp.mkdir(mode=0o777)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    planted = tmp_path / "planted"
    planted.mkdir(mode=0o777)
    (tmp / f"forkpoint-forks-{os.getuid()}").symlink_to(planted)
    fork = ["fork", f"{rec.session_path}@{seq}", "--store", str(store), "--", sys.executable, "-c", "pass"]
    r = cli(*fork)
    assert r.exit_code != 0 and f"forkpoint-forks-{os.getuid()} is not a folder of this user's" in r.output
    assert "--into" in r.output and not any(planted.iterdir()) and not (tmp / "forkpoint-forks").exists()
    (tmp / f"forkpoint-forks-{os.getuid()}").unlink()
    if os.getuid() == 0:  # root can make a folder of another user's; others cannot
        mine = tmp / f"forkpoint-forks-{os.getuid()}"
        mine.mkdir()
        os.chown(mine, 4242, 4242)
        r = cli(*fork)
        assert r.exit_code != 0 and "is not a folder of this user's" in r.output and not any(mine.iterdir())
        mine.rmdir()
    # Its own folder, made under a loose umask, is made owner-only, and the arm goes there.
    old = os.umask(0)
    try:
        r = cli(*fork)
    finally:
        os.umask(old)
    assert "fork of" in r.output, r.output  # (the command makes no call: the arm never goes live)
    (base,) = [p for p in tmp.iterdir() if p.name.startswith("forkpoint-forks")]
    assert base.name == f"forkpoint-forks-{os.getuid()}" and base.stat().st_mode & 0o777 == 0o700
    (arms,) = base.iterdir()
    assert arms.name.startswith(f"{rec.session_path.name}@{seq}-") and (arms / "arm-1" / "app.py").exists()


# ----------------------------------------------------------------------------- permissions


def test_everything_forkpoint_creates_is_owner_only_under_umask_000(store: Path, tmp_path: Path) -> None:
    repo = repo_with_change(tmp_path)
    # a secret in a modified tracked file: its git object is rewritten scrubbed in git-objects
    (repo / "app.py").write_text('TOKEN = "ghp_' + "A1b2" * 9 + '"\n')
    old = os.umask(0)
    try:
        with forkpoint.record("umask", store=store, workspace=repo) as rec:
            forkpoint.checkpoint()
            lookup("c" * 3000)
        hold(open_store(store), rec.session_path.name, "audit")
        assert cli("ls", "--store", str(store)).exit_code == 0  # index entries, snapshots
    finally:
        os.umask(old)
    assert (store / rec.session_path.name / "git-objects").is_dir()
    loose = [
        (str(p.relative_to(store)), oct(p.lstat().st_mode & 0o777))
        for p in [store, *store.rglob("*")]
        if p.lstat().st_mode & 0o077
    ]
    assert loose == []


@pytest.mark.parametrize("text", ["30d", "12h", "2w", "90m", "45s", "1.5d"])
def test_durations(text: str) -> None:
    from forkpoint.store.retention import parse_age

    assert parse_age(text).total_seconds() > 0


def test_a_bad_duration_is_named() -> None:
    from forkpoint.store.retention import parse_age

    with pytest.raises(SessionError, match="--older-than: '30 days' is not a duration"):
        parse_age("30 days")


def test_a_value_the_log_cannot_hold_is_unrecorded_and_the_agent_goes_on(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An integer of more than 4,300 digits (Python will not write one in decimal) raised ValueError
    from the writer into the agent's own tool call: recording changed the live run. Then it stopped
    the whole recording; now that call alone is unrecorded, and said."""
    import math

    @forkpoint.tool
    def factorial(n: int) -> int:
        return math.factorial(n)

    with forkpoint.record("huge", store=store) as rec:
        assert factorial(5) == 120
        assert factorial(2000) == math.factorial(2000)  # no ValueError raised into the agent
        assert factorial(6) == 720
    err = capsys.readouterr().err
    assert "tool 'factorial' returned an integer of more than 4,000 digits" in err, err
    s = Session.load(rec.session_path)
    assert [e["args"]["n"] for e in s.by_type("tool_call")] == [5, 2000, 6]
    assert "incomplete" not in s.events[-1]


@pytest.mark.slow
def test_a_session_removed_while_it_was_recorded_leaves_the_commands_exit_code(tmp_path: Path) -> None:
    """``forkpoint rm --force`` of a session while it was recorded: the program ran to its end,
    exit 0, but ``forkpoint record`` ended with ``Error: … no such session log``, exit 1."""
    store = tmp_path / "store"
    script = tmp_path / "agent.py"
    script.write_text(
        "import os, shutil, sys\n"
        f"shutil.rmtree(os.path.join({str(store)!r}, os.environ['FORKPOINT_SESSION_ID']))\n"
        "print('the agent went on')\nsys.exit(4)\n"
    )
    out = record_script(store, script)
    assert out.returncode == 4, out.stderr
    assert out.stdout == "the agent went on\n"
    said = " ".join(out.stderr.split())
    assert "could not be finished" in said and "no such session log" in said and "Error:" not in said


def test_cli_record_when_the_header_is_cut_short_runs_the_command_unrecorded_and_leaves_no_session(
    store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file size limit (``ulimit -f``) or a disk filling up while the header was written: the
    write came back short, the half header was linked into place as the session's log, and
    ``forkpoint record`` stopped with "header line is incomplete" (exit 1) without running the
    command, leaving an unreadable session in the store. The command runs, unrecorded, and the
    store holds no session."""
    real = os.write

    def write(fd: int, data: Any) -> int:
        name = os.readlink(f"/proc/self/fd/{fd}")
        if os.path.basename(name).startswith(f".{LOG_NAME}.") and name.endswith(".tmp"):
            if os.fstat(fd).st_size:  # (what the kernel does past RLIMIT_FSIZE)
                raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))
            return real(fd, bytes(data)[:100])
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)
    said = record_that_runs_unrecorded(store, tmp_path)
    assert "cannot create a session in" in said and "File too large" in said, said
    assert "the command runs unrecorded" in said
    assert [p.name for p in store.iterdir() if not p.name.startswith(".")] == []


def test_a_report_marker_whose_error_number_is_no_number_is_a_failed_write(tmp_path: Path) -> None:
    """The ``unreported-<pid>.<errno>`` markers of a replay's report folder are read by the parent:
    a name whose number ``str.isdigit`` takes but ``int`` does not (``²``) ended the replay in a
    ValueError traceback instead of the line saying that process could not write its report."""
    from forkpoint.orchestrate import _unreported

    (tmp_path / "unreported-12.28").touch()
    (tmp_path / "unreported-13.²").touch()
    assert _unreported(tmp_path) == [
        f"process 12 ran, replayed, but could not write its report ({os.strerror(28)})",
        "process 13 ran, replayed, but could not write its report (a write failed)",
    ]
