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
import random
from datetime import datetime


class Stamp(datetime):
    def label(self):
        return "stamp " + self.strftime("%Y")


def run():
    made, now = Stamp(2020, 1, 2), Stamp.now()
    random.seed(1)
    first = random.gauss(0, 1)
    random.seed(1)
    return {
        "made": (type(made).__name__, made.label()),
        "now": (type(now).__name__, now.label()[:6], now.isoformat()),
        "gauss again after seed": random.gauss(0, 1) == first,
    }
"""


def test_the_agents_datetime_subclass_and_a_seeded_gauss_are_as_live_while_deterministic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: Path
) -> None:
    """A datetime subclass defined by the agent's code while deterministic made plain datetimes
    (no .label()), and random.gauss after random.seed gave another value than live: its cached
    second value was the stand-in generator's, which seed() did not clear."""
    run = importer(tmp_path, monkeypatch, "clock_subclass", SUBCLASS)

    plain = run()
    with forkpoint.record(store=store, deterministic=True) as rec:
        live = run()
    assert live["made"] == plain["made"] == ("Stamp", "stamp 2020")
    assert live["now"][:2] == ("Stamp", "stamp ") and live["gauss again after seed"] is True
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    assert rp.report()["divergence"] is None
