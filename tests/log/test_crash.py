"""Crash safety: a recording killed with SIGKILL at any moment leaves a session that loads, replays
up to its last complete event, and verifies as truncated or incomplete, never corrupt; a torn line is
closed and declared by the next writer, and no operation ever truncates or rewrites a log.

The main test records the bundled demo agent (real ``openai`` SDK, streamed answers, two tools,
checkpoints in a third of the trials) under ``forkpoint record`` against the demo model server and
kills it at random moments over its whole lifetime, 60 times: half the time only the agent process
(``forkpoint record`` then writes the ``end`` event, exit code 137), half the time the whole process
group (no ``end`` event at all).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest

import forkpoint
from forkpoint import verify
from forkpoint.demo.agent import run_agent
from forkpoint.demo.server import ModelServer
from forkpoint.log import LOG_NAME, Session, SessionError, SessionWriter
from forkpoint.replay import Divergence
from tests.gitutil import git

pytestmark = [
    pytest.mark.slow,  # every test here kills or crashes a process
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and process groups"),
]

TRIALS = 60
TURNS = 3
FORKPOINT = [sys.executable, "-c", "from forkpoint.cli import main; main()"]


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return []


def _trial(root: Path, base_url: str, i: int, delay: float, mode: str) -> dict[str, Any]:
    """Start a recording, kill it after ``delay`` s (``mode``: the agent only, or the whole group)."""
    store, work = root / "store", root / "work"
    root.mkdir()
    cmd = [*FORKPOINT, "record", "--store", str(store)]
    if i % 3 == 0:  # checkpoints too: blobs and git objects being written when the kill comes
        git(root, "init", "-q", "-b", "main")
        (root / "README").write_text("x\n")
        git(root, "add", "README")
        git(root, "commit", "-q", "-m", "init")
        cmd += ["--workspace", str(root)]
    else:
        cmd += ["--no-workspace"]
    cmd += [
        "--",
        sys.executable,
        "-m",
        "forkpoint.demo.agent",
        "--base-url",
        base_url,
        "--workdir",
        str(work),
    ]
    env = dict(os.environ, FORKPOINT_FSYNC="never" if i % 4 == 3 else "event")
    proc = subprocess.Popen(
        cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    # ``delay`` counts from the first event (a negative one from the start): the kills land over
    # the part of the run that writes, not mostly in the interpreter's start-up.
    t0 = time.monotonic()
    deadline = t0 - delay if delay < 0 else None
    killed_at = None
    while proc.poll() is None:
        now = time.monotonic()
        if deadline is None:
            logs = list(store.glob("2*/" + LOG_NAME)) if store.is_dir() else []
            if logs and logs[0].read_bytes().count(b"\n") >= 2:
                deadline = now + delay
            else:
                time.sleep(0.002)
                continue
        children = _children(proc.pid)
        if now >= deadline and (children or mode == "group"):
            if mode == "group":
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                os.kill(children[0], signal.SIGKILL)
            killed_at = now
            break
        time.sleep(0.002)
    code = proc.wait(30)
    return {
        "i": i,
        "mode": mode,
        "delay": delay,
        "killed": killed_at is not None,
        "code": code,
        "store": store,
    }


def _sessions(store: Path) -> list[Path]:
    """The sessions in ``store``: a kill between creating a session's folder and linking its log
    into place leaves a folder with no log, which is no session (listing skips it too)."""
    return [d for d in store.iterdir() if (d / LOG_NAME).is_file()] if store.is_dir() else []


def _check(result: dict[str, Any], tmp: Path) -> str:
    """The session of one trial loads, verifies (not corrupt) and replays up to its last event."""
    store: Path = result["store"]
    sessions = _sessions(store)
    if not sessions:
        assert result["mode"] == "group", result  # killed before the session existed: nothing to check
        return "none"
    (path,) = sessions
    try:
        s = Session.load(path)
    except SessionError as exc:
        raise AssertionError(f"trial {result}: the session does not load: {exc}") from None
    v = verify(path)
    assert v.ok, (result, v.problems)
    if result["mode"] == "child":
        # forkpoint record always ends the session; 137 unless the kill came after the agent's exit
        end = s.end()
        assert end is not None and end["exit_code"] in (0, 128 + signal.SIGKILL), (result, end)
        assert v.complete
    # Replay the agent against the session: every recorded call is served, in order, and the run
    # diverges only where the recording stops.
    recorded = [e for e in s.events if e["type"] in ("model_call", "tool_call")]
    work = tmp / f"replay-{result['i']}"
    with forkpoint.replay(s) as rp:
        try:
            run_agent("http://127.0.0.1:9", work, echo=None)
        except Divergence:
            pass
    report = rp.report()
    assert report["matched"] == report["recorded"] == len(recorded), (result, report["divergence"])
    return v.status


def test_sigkill_at_random_moments_never_corrupts_a_session(tmp_path: Path) -> None:
    rng = random.Random(20261129)
    with ModelServer(turns=TURNS, seed=11) as server:
        full = _trial(tmp_path / "full", server.base_url, 1, 1e9, "child")
        assert full["code"] == 0 and not full["killed"]
        assert _check(full, tmp_path) == "ok"
        log = next(full["store"].glob("2*/" + LOG_NAME))
        times = [orjson.loads(line)["ts"] for line in log.read_bytes().splitlines()[1:]]
        first, last = (
            time.mktime(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S")) + float(t[19:23])
            for t in (times[0], times[-1])
        )
        active = max(0.3, last - first)
        plans = [
            (
                i,
                -rng.uniform(0.05, 1.0) if i % 10 == 0 else rng.uniform(0, 1.5 * active),
                "child" if i % 2 else "group",
            )
            for i in range(TRIALS)
        ]
        with ThreadPoolExecutor(max_workers=3) as pool:
            results = list(
                pool.map(lambda p: _trial(tmp_path / f"t{p[0]}", server.base_url, p[0], p[1], p[2]), plans)
            )
    statuses = Counter(_check(r, tmp_path) for r in results)
    ends = Counter(
        (Session.load(d).end() or {}).get("exit_code", "none") for r in results for d in _sessions(r["store"])
    )
    assert ends[128 + signal.SIGKILL] + ends["none"] >= TRIALS * 0.7, ends  # really killed mid-run
    print("statuses", dict(statuses), "ends", dict(ends))
    assert statuses["corrupt"] == 0
    # the kills landed all over the run: before the first event, between events, after the last
    assert statuses["ok"] >= 10 and statuses["incomplete"] + statuses["truncated"] >= 5, statuses
    events = Counter(len(Session.load(d).events) for r in results for d in _sessions(r["store"]))
    print("events per session", dict(sorted(events.items())))
    assert len(events) >= 5, events


# ----------------------------------------------------------------------------- torn lines


def _events(n: int) -> list[dict[str, Any]]:
    return [{"type": "note", "text": f"note {i}", "data": {"i": i, "pad": "x" * (i * 40)}} for i in range(n)]


def _write(store: Path, events: list[dict[str, Any]]) -> Path:
    w = SessionWriter.create(store, {"argv": ["a"]}, fsync="never")
    for e in events:
        w.append(e)
    w.close()
    return w.path


_APPEND = """
import sys
from pathlib import Path
from forkpoint.log import SessionWriter
w = SessionWriter.open(Path(sys.argv[1]), fsync="event")
w.append({"type": "end", "exit_code": 137})
w.close()
"""


@pytest.mark.parametrize("cut", ["one-byte", "half", "all-but-newline"])
def test_a_torn_line_is_closed_and_declared_never_cut(tmp_path: Path, cut: str) -> None:
    path = _write(tmp_path / "store", _events(5))
    log = path / LOG_NAME
    data = log.read_bytes()
    torn = orjson.dumps({"seq": 6, "type": "note", "text": "cut off by a crash"})
    keep = {"one-byte": 1, "half": len(torn) // 2, "all-but-newline": len(torn)}[cut]
    log.write_bytes(data + torn[:keep])
    before = log.read_bytes()
    s = Session.load(path)
    assert s.truncated and len(s.events) == 5
    v = verify(path)
    assert v.ok and v.truncated and v.status == "truncated"

    subprocess.run([sys.executable, "-c", _APPEND, str(path)], check=True)
    after = log.read_bytes()
    assert after.startswith(before)  # nothing was cut or rewritten: the torn bytes are still there
    s = Session.load(path)
    assert not s.truncated and [e["type"] for e in s.events] == ["note"] * 5 + ["end"]
    assert [e["seq"] for e in s.events] == list(range(1, 7))
    assert s.recovered and s.recovered[0]["offset"] == len(data)
    v = verify(path)
    assert v.ok and v.complete and v.status == "ok", v.problems
    assert any("cut off by a crash, closed and declared by event seq 6" in n for n in v.notes)
    # tampering with the declared remnant is detected like any other change
    tampered = bytearray(after)
    tampered[len(data)] ^= 0x01
    log.write_bytes(bytes(tampered))
    assert not verify(path).ok
    with pytest.raises(SessionError, match=rf"{LOG_NAME}:7:"):
        Session.load(path)


def test_a_second_crash_while_closing_a_torn_line_is_declared_as_one_region(tmp_path: Path) -> None:
    path = _write(tmp_path / "store", _events(3))
    log = path / LOG_NAME
    data = log.read_bytes()
    # first crash: half a line; second crash: the next writer got its newline and half its line out
    log.write_bytes(data + b'{"seq":4,"type":"no' + b"\n" + b'{"seq":4,"type":"end","exi')
    assert Session.load(path).truncated and verify(path).ok
    subprocess.run([sys.executable, "-c", _APPEND, str(path)], check=True)
    s = Session.load(path)
    assert [e["type"] for e in s.events] == ["note"] * 3 + ["end"] and len(s.recovered) == 1
    assert verify(path).ok


def test_a_writer_refuses_to_append_after_a_damaged_last_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "store", _events(3))
    log = path / LOG_NAME
    lines = log.read_bytes().splitlines(keepends=True)
    lines[-1] = lines[-1].replace(b'"type":"note"', b'"type":"nope"')  # complete, its hash no longer matching
    log.write_bytes(b"".join(lines))
    before = log.read_bytes()
    w = SessionWriter.open(path, fsync="never")
    with pytest.raises(SessionError, match="not a valid event; refusing to append"):
        w.append({"type": "end", "exit_code": 0})
    w.close()
    assert log.read_bytes() == before


_BIG_WRITER = """
import os, sys
from pathlib import Path
import orjson
from forkpoint.log import LOG_NAME, SessionWriter, line_hash
w = SessionWriter.open(Path(sys.argv[1]), fsync="never")
w._sync_tail()
line = {"seq": w._last_seq + 1, "type": "note", "text": "big", "data": {"pad": ["x" * 60] * 1_000_000}}
line["prev"] = w._last_hash
line["hash"] = line_hash(line)
data = orjson.dumps(line) + b"\\n"  # one ~64 MB line, written by one write(2) as the writer does
fd = os.open(Path(sys.argv[1]) / LOG_NAME, os.O_WRONLY | os.O_APPEND)
print("ready", flush=True)
os.write(fd, data)
print("written", flush=True)
"""


def test_sigkill_during_a_huge_write(tmp_path: Path) -> None:
    """A kill in the middle of one big ``write(2)`` (the kernel stops copying at a page boundary)
    leaves a torn line; the session still loads, verifies, and takes the next append."""
    rng = random.Random(5)
    torn_seen = 0
    for trial in range(5):
        path = _write(tmp_path / f"store{trial}", _events(2))
        proc = subprocess.Popen(
            [sys.executable, "-c", _BIG_WRITER, str(path)], stdout=subprocess.PIPE, text=True
        )
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.03))
        proc.kill()
        proc.wait()
        before = (path / LOG_NAME).read_bytes()
        torn_seen += not before.endswith(b"\n")
        s = Session.load(path)
        v = verify(path, git=False)
        assert v.ok and v.truncated == (not before.endswith(b"\n")), v.problems
        w = SessionWriter.open(path, fsync="never")
        w.append({"type": "end", "exit_code": 137})
        w.close()
        assert (path / LOG_NAME).read_bytes().startswith(before)
        s2 = Session.load(path)
        assert len(s2.events) == len(s.events) + 1 and s2.end() is not None
        assert verify(path, git=False).ok
        shutil.rmtree(path)
    print("torn writes", torn_seen, "of 5")
    # the kernel did cut a write short at least once (if not, the other tests still cover torn lines)
    if torn_seen == 0:
        pytest.skip("no write was cut short on this system; torn lines are covered by the other tests")
