"""The agent's own clock and randomness (deterministic): recorded as values, served back in order,
only for the agent's own modules; libraries keep the real clock."""

from __future__ import annotations

import datetime
import importlib
import random
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import forkpoint
from forkpoint.capture import clock

AGENT = """
import random
import time
import uuid
from datetime import datetime, timezone
from random import choice


def stamp():
    import datetime as dt  # an import in a function body, after the recording started

    return {
        "now": datetime.now().isoformat(),
        "utc": datetime.now(timezone.utc).isoformat(),
        "zoned": dt.datetime.now(TZ),
        "today": dt.datetime.today().isoformat(),
        "time": time.time(),
        "uuid": str(uuid.uuid4()),
        "random": random.random(),
        "choice": choice("abcdefghijklmnop"),
        "shuffled": random.sample(range(20), 5),
        "made": datetime(2020, 1, 1),
        "isinstance": isinstance(datetime.now(), dt.datetime),
    }
"""


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """A module of the agent's own code, imported before any recording starts."""
    name = f"clock_agent_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(AGENT)
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module(name)
    module.TZ = ZoneInfo("Europe/Paris")  # type: ignore[attr-defined]
    yield module
    sys.modules.pop(name, None)


def test_values_are_recorded_and_served_back_in_order(agent: ModuleType, store: Path) -> None:
    with forkpoint.record(store=store, deterministic=[agent.__name__]) as rec:
        first = agent.stamp()
    assert type(first["made"]) is datetime.datetime and first["isinstance"] is True
    session = forkpoint.Session.load(rec.session_path)
    fns = [e["fn"] for e in session.by_type("value")]  # type: ignore[call-overload]
    assert fns[:6] == [
        "datetime.now",
        "datetime.now",
        "datetime.now",
        "datetime.today",
        "time.time",
        "uuid.uuid4",
    ]
    assert {"random.random", "random.getrandbits"} <= set(fns)
    assert session.header["deterministic"] == [agent.__name__]

    time.sleep(0.01)
    with forkpoint.replay(rec.session_path) as rp:
        again = agent.stamp()
    assert again == first
    assert again["zoned"].tzinfo is agent.TZ  # the caller's own zone object, as live
    report = rp.report()
    assert report["reproduced"] and report["matched"] == len(fns)
    # Outside a recording the agent's code reads the real clock again.
    assert agent.stamp()["uuid"] != first["uuid"]


def test_one_read_more_than_recorded_is_a_divergence(agent: ModuleType, store: Path) -> None:
    with forkpoint.record(store=store, deterministic=[agent.__name__]) as rec:
        agent.time.time()
    with forkpoint.replay(rec.session_path) as rp:
        agent.time.time()
        with pytest.raises(forkpoint.Divergence, match=r"2nd value of this run \(time.time\)"):
            agent.time.time()
    assert not rp.report()["reproduced"]
    with forkpoint.replay(rec.session_path) as rp:
        pass  # read fewer times: the recorded value went unused
    assert rp.report()["unserved"] and not rp.report()["reproduced"]


def test_library_code_keeps_the_real_clock(agent: ModuleType, store: Path) -> None:
    import email.utils

    with forkpoint.record(store=store, deterministic=[agent.__name__]) as rec:
        # The modules themselves are untouched: the stdlib and every library read the real clock.
        assert time.time is clock._REAL_TIME and datetime.datetime is clock._REAL_DATETIME
        assert uuid.uuid4 is clock._REAL_UUID4 and random.random.__self__ is clock._SHARED
        email.utils.formatdate()
        random.random()
        agent_time = agent.time
    assert forkpoint.Session.load(rec.session_path).by_type("value") == []  # type: ignore[call-overload]
    assert agent_time is not time and agent.time is time  # the stand-in is gone after the block
    assert agent.datetime is datetime.datetime and agent.choice == random.choice


def test_reads_inside_a_tool_are_the_tools_own(agent: ModuleType, store: Path) -> None:
    @forkpoint.tool
    def now() -> float:
        return agent.time.time()

    with forkpoint.record(store=store, deterministic=[agent.__name__]) as rec:
        recorded = now()
    session = forkpoint.Session.load(rec.session_path)
    assert [e["type"] for e in session.events] == ["tool_call", "end"]
    with forkpoint.replay(rec.session_path) as rp:
        assert now() == recorded
    assert rp.report()["reproduced"]


def test_which_code_is_the_agents(tmp_path: Path) -> None:
    assert clock.is_agent("my_agent", str(tmp_path / "my_agent.py"))
    assert clock.is_agent("__main__", None)  # python -c
    assert clock.is_agent("__main__", str(tmp_path / "agent"))  # ./agent, by its #! line
    assert not clock.is_agent("fast", str(tmp_path / "fast.cpython-311-x86_64-linux-gnu.so"))
    assert not clock.is_agent("json", "/usr/lib/python3/json/__init__.py")
    assert not clock.is_agent("openai", openai_file())
    assert not clock.is_agent("forkpoint.demo.agent", forkpoint.__file__)
    assert not clock.is_agent("x", "/somewhere/site-packages/x.py")
    assert clock.is_agent("pkg.sub", None, ["pkg"]) and not clock.is_agent("pkg2", None, ["pkg"])


def openai_file() -> str:
    import openai

    return str(openai.__file__)


def importer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prefix: str, source: str) -> Any:
    """A function that imports ``source`` as a module of the agent's own code (afresh each time: the
    import runs inside the recording or replay of the moment) and returns what its ``run()`` does."""
    name = f"{prefix}_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))

    def run() -> dict[str, object]:
        try:
            return dict(importlib.import_module(name).run())
        finally:
            sys.modules.pop(name, None)

    return run


MODELS = """
from datetime import date, datetime

import pydantic


class Meeting(pydantic.BaseModel):
    at: datetime
    day: date


def run():
    meeting = Meeting(at=datetime.now(), day=date(2026, 1, 2))
    back = Meeting.model_validate_json(meeting.model_dump_json())
    now = datetime.now()
    return {
        "at": back.at.isoformat(),
        "schema": Meeting.model_json_schema()["properties"]["at"],
        "same type": type(now) == datetime,
        "by class": {datetime: "a datetime"}.get(type(now)),
    }
"""


def test_the_agents_pydantic_models_with_datetime_fields_work_while_deterministic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: Path
) -> None:
    """A pydantic model with a ``datetime`` field, defined by the agent's code while a deterministic
    recording ran (``forkpoint record --deterministic -- python agent.py``), failed to build: its
    field's class was forkpoint's stand-in, which pydantic did not know. Recording changed the run."""
    run = importer(tmp_path, monkeypatch, "clock_models", MODELS)

    with forkpoint.record(store=store, deterministic=True) as rec:
        live = run()
    assert live["schema"] == {"format": "date-time", "title": "At", "type": "string"}
    assert live["same type"] is True and live["by class"] == "a datetime"
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    assert rp.report()["matched"] == 2 and rp.report()["divergence"] is None


SUBCLASS = """
import datetime as dt
import random
from datetime import date, datetime


class Stamp(datetime):
    def label(self):
        return "stamp " + self.strftime("%Y")


class Day(date):
    pass


def run():
    made, now, day = Stamp(2020, 1, 2), Stamp.now(), Day.today()
    random.seed(1)
    first = random.gauss(0, 1)
    random.seed(1)
    return {
        "made": (type(made).__name__, made.label()),
        "now": (type(now).__name__, now.label()[:6], now.isoformat()),
        "day": (type(day).__name__, day.isoformat()),
        "gauss again after seed": random.gauss(0, 1) == first,
        # what the classes say of each other and of the real ones
        "classes": [
            isinstance(datetime.now(), Stamp),
            isinstance(date.today(), Day),
            issubclass(dt.datetime, Stamp),
            Stamp == dt.datetime,
            {dt.datetime: 1, Stamp: 2, Day: 3, date: 4}[Stamp],
            isinstance(now, Stamp) and isinstance(now, dt.datetime) and isinstance(now, date),
            issubclass(datetime, date) and isinstance(datetime.now(), date),
        ],
    }
"""


def test_the_agents_datetime_subclass_and_a_seeded_gauss_are_as_live_while_deterministic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: Path
) -> None:
    """A datetime subclass defined by the agent's code while deterministic made plain datetimes
    (no .label()), and random.gauss after random.seed gave another value than live: its cached
    second value was the stand-in generator's, which seed() did not clear. And every real datetime
    was an instance of such a subclass, which was a superclass of datetime and hashed as it."""
    run = importer(tmp_path, monkeypatch, "clock_subclass", SUBCLASS)

    plain = run()
    assert plain["classes"] == [False, False, False, False, 2, True, True]
    with forkpoint.record(store=store, deterministic=True) as rec:
        live = run()
    assert live["classes"] == plain["classes"]
    assert live["made"] == plain["made"] == ("Stamp", "stamp 2020") and live["day"][0] == "Day"
    assert live["now"][:2] == ("Stamp", "stamp ") and live["gauss again after seed"] is True
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    assert rp.report()["divergence"] is None


STAMPS = """
import time
from datetime import date


def run():
    return {
        "today": date.today().isoformat(),
        "strftime": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "ctime": time.ctime(),
        "asctime": time.asctime(),
        "localtime": list(time.localtime()),
        "gmtime": time.gmtime().tm_zone,
        "time_ns": time.time_ns(),
        "given a time": time.strftime("%H:%M %Z", time.localtime(0)),
    }
"""


def test_a_prompt_stamped_with_the_date_or_the_local_time_replays_in_another_time_zone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: Path
) -> None:
    """``date.today()``, ``time.strftime(fmt)``, ``ctime()``, ``asctime()``, ``localtime()``,
    ``gmtime()`` and ``time.time_ns()`` read the clock too: a prompt stamped with one of them did
    not replay the next day. The local time is kept broken down, zone included, so a replay in
    another zone reads what the recording read; a time the code passes itself is converted as live."""
    run = importer(tmp_path, monkeypatch, "clock_stamps", STAMPS)

    with forkpoint.record(store=store, deterministic=True) as rec:
        live = run()
    fns = [e["fn"] for e in forkpoint.Session.load(rec.session_path).by_type("value")]  # type: ignore[call-overload]
    assert fns == ["date.today", *["time.localtime"] * 4, "time.gmtime", "time.time_ns"]

    monkeypatch.setenv("TZ", "Asia/Tokyo" if time.strftime("%Z") != "JST" else "America/New_York")
    time.tzset()
    try:
        time.sleep(1.01)  # another second: a clock read live would show it
        with forkpoint.replay(rec.session_path) as rp:
            again = run()
    finally:
        monkeypatch.undo()
        time.tzset()
    assert again["given a time"] != live["given a time"]  # (the zone did change)
    del again["given a time"], live["given a time"]
    assert again == live
    assert rp.report()["reproduced"]


def test_a_session_recorded_before_the_local_time_was_recorded_replays_as_it_did(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: Path
) -> None:
    """A ``deterministic`` session recorded by a forkpoint that read ``date.today()``,
    ``strftime`` and the local time for real has no values of them: its replay diverged at the
    first such read ("the recording has no value left") since they are recorded. Its header does
    not name what it recorded (``deterministic_reads``): those reads are made for real again."""
    import orjson

    from forkpoint.log import LOG_NAME
    from forkpoint.log.codec import line_hash

    run = importer(tmp_path, monkeypatch, "clock_old_stamps", STAMPS)
    real_read = clock.read

    recorded_then = {"time.time", "datetime.now", "datetime.utcnow", "datetime.today", "uuid.uuid4"}

    def old_read(fn: str, live: Any, *args: Any, **kwargs: Any) -> Any:
        return real_read(fn, live, *args, **kwargs) if fn in recorded_then else live()

    with monkeypatch.context() as m:  # (the forkpoint of then)
        m.setattr(clock, "read", old_read)
        with forkpoint.record(store=store, deterministic=True) as rec:
            live = run()
    log = rec.session_path / LOG_NAME
    lines = [orjson.loads(raw) for raw in log.read_bytes().splitlines()]
    assert not [e for e in lines if e.get("type") == "value"]
    lines[0].pop("deterministic_reads", None)  # (a header of then)
    for i, obj in enumerate(lines):
        if i:
            obj["prev"] = lines[i - 1]["hash"]
        obj["hash"] = line_hash(obj)
    log.write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in lines))

    with forkpoint.replay(rec.session_path) as rp:
        again = run()
    assert again["today"] == live["today"] and rp.report()["reproduced"]


def test_reading_the_clock_while_recording_does_not_wait_on_the_disk(
    agent: ModuleType, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each value read was one event synced to the disk: a loop polling ``time.time()`` ran some
    10,000 times slower while recorded. Values are synced with the next event (or at close), and
    all are in the session."""
    import os

    syncs = []
    real = os.fdatasync
    monkeypatch.setenv("FORKPOINT_FSYNC", "event")
    monkeypatch.setattr(os, "fdatasync", lambda fd: (syncs.append(fd), real(fd))[1])
    with forkpoint.record(store=store, deterministic=[agent.__name__]) as rec:
        before = len(syncs)
        for _ in range(50):
            agent.time.time()
        assert len(syncs) == before
    values = forkpoint.Session.load(rec.session_path).by_type("value")
    assert len(values) == 50


def test_a_replay_reading_the_clock_many_times_does_work_in_proportion_to_the_reads(
    agent: ModuleType, store: Path
) -> None:
    """Each value served looked at every value of its kind served before it (are two callers
    racing?), and the report compared them pairwise once more: a test reading the clock 40,000
    times, recorded in 5 s, took 78 s to replay. Counted in Python calls into the replayer (each
    step of a generator is one), not in time: a fixed number per read, however many were before."""
    reads = 1500
    with forkpoint.record(store=store, deterministic=[agent.__name__]) as rec:
        first = [agent.time.time() for _ in range(reads)]
    steps = 0
    replay_code = str(Path(forkpoint.__file__).parent / "replay")

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal steps
        if event == "call" and frame.f_code.co_filename.startswith(replay_code):
            steps += 1

    with forkpoint.replay(rec.session_path) as rp:
        sys.setprofile(count)
        try:
            again = [agent.time.time() for _ in range(reads)]
            report = rp.report()
        finally:
            sys.setprofile(None)
    assert again == first and report["reproduced"] and not report["ambiguous"]
    assert steps < 60 * reads, f"{steps} calls into the replayer for {reads} reads"


def test_the_aware_local_now_replays_in_another_time_zone_as_recorded(tmp_path: Path) -> None:
    """``datetime.now().astimezone()`` (the usual "aware local now") and ``fromtimestamp(time())``
    convert a served value with the replay's own zone: recorded in New York, replayed in Tokyo, they
    named another instant under "replay ok". A replay runs the program in the recording's zone."""
    import os
    import subprocess

    (tmp_path / "agent.py").write_text(
        "import datetime, time, forkpoint\n"
        "@forkpoint.tool\n"
        "def weather() -> str:\n"
        "    return 'sunny'\n"
        "print(weather(), datetime.datetime.now().astimezone().isoformat())\n"
        "print(datetime.datetime.fromtimestamp(time.time()).isoformat())\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}

    def forkpoint_cli(*args: str, zone: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "forkpoint.cli", *args], cwd=tmp_path, env={**env, "TZ": zone},
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    rec = forkpoint_cli(
        "record", "--store", "s", "--deterministic", "--", sys.executable, "agent.py", zone="America/New_York"
    )
    assert rec.returncode == 0, rec.stderr
    rep = forkpoint_cli("replay", "last", "--store", "s", zone="Asia/Tokyo")
    assert rep.returncode == 0 and "replay ok" in rep.stderr, rep.stderr
    assert rep.stdout == rec.stdout and ("-05:00" in rec.stdout or "-04:00" in rec.stdout), rec.stdout
    assert "runs in the recording's time zone, America/New_York (not TZ=Asia/Tokyo)" in rep.stderr
    # A what-if of it, made in Tokyo, ran in New York too: its session says so, and replays there.
    whatif = forkpoint_cli(
        "replay", "last", "--store", "s", "--override", 'tool:weather.result="rainy"', zone="Asia/Tokyo"
    )
    assert whatif.returncode == 0 and whatif.stdout.startswith("rainy "), whatif.stderr
    # (the what-if: ids of one second sort by their random part, so found by its parent, not by name)
    (child,) = [d for d in (tmp_path / "s").glob("2*") if forkpoint.Session.load(d).header.get("parent")]  # type: ignore[attr-defined]
    assert forkpoint.Session.load(child).header["timezone"] == "America/New_York"  # type: ignore[attr-defined]
    again = forkpoint_cli("replay", child.name, "--store", "s", zone="Asia/Tokyo")
    assert again.returncode == 0 and again.stdout == whatif.stdout, again.stderr


def test_a_script_without_py_in_its_name_is_the_agents_own_code(tmp_path: Path) -> None:
    """``forkpoint record --deterministic -- ./agent`` (a script run by its ``#!`` line, no ``.py``):
    the script was taken for compiled code and kept the real clock, so its replay diverged at the
    time it sent, while the hint said the session recorded "the reads of the script"."""
    import os
    import stat
    import subprocess

    script = tmp_path / "agent"
    script.write_text(
        f"#!{sys.executable}\n"
        "import datetime, forkpoint\n"
        "@forkpoint.tool\n"
        "def note(at: str) -> str:\n"
        "    return 'noted'\n"
        "print(note(datetime.datetime.now().isoformat()))\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}

    def forkpoint_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "forkpoint.cli", *args], cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    rec = forkpoint_cli("record", "--store", "s", "--deterministic", "--", "./agent")
    assert rec.returncode == 0 and rec.stdout == "noted\n", rec.stderr
    (session,) = (tmp_path / "s").glob("2*")
    events = forkpoint.Session.load(session).events  # type: ignore[attr-defined]
    assert [e["fn"] for e in events if e["type"] == "value"] == ["datetime.now"]
    rep = forkpoint_cli("replay", "last", "--store", "s")
    assert rep.returncode == 0 and "replay ok" in rep.stderr, rep.stderr
