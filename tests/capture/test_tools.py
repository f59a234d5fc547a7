"""Tool calls at the function boundary: ``@forkpoint.tool``, replay without running bodies, the import hook."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import datetime
import functools
import os
import secrets
import sys
import textwrap
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import orjson
import pydantic
import pydantic_core
import pytest

import forkpoint
from forkpoint.capture import targets as targets_mod
from forkpoint.capture import tools as tools_mod
from forkpoint.log import Session, SessionError
from forkpoint.providers import PLACEHOLDER_KEY


class QuotaExceeded(Exception):
    """A tool's own exception class, defined in the test module."""


@dataclasses.dataclass
class Hit:
    title: str
    score: float


def make_tools(side: Path) -> Any:
    """Fresh tools whose bodies append a line to ``side`` each time they really run."""

    def touch(line: str) -> None:
        with open(side, "a") as f:
            f.write(line + "\n")

    counter = {"n": 0}

    @forkpoint.tool
    def search(query: str, limit: int = 2, *, lang: str = "en") -> list[dict[str, Any]]:
        """Search things."""
        touch(f"search {query}")
        time.sleep(0.03)
        return [{"title": f"{query} #{i}", "lang": lang} for i in range(limit)]

    @forkpoint.tool(name="next_id")
    def next_id_impl(prefix: str) -> str:
        touch("next_id")
        counter["n"] += 1
        return f"{prefix}-{counter['n']}"

    @forkpoint.tool
    def fail(kind: str) -> None:
        touch(f"fail {kind}")
        if kind == "value":
            raise ValueError("bad input: 'x' is not a number")
        if kind == "quota":
            raise QuotaExceeded("quota of 10 calls reached for sk-proj-" + "Q" * 40)
        raise KeyError(kind)

    @forkpoint.tool
    async def fetch(url: str, timeout: float = 1.5) -> dict[str, Any]:
        touch(f"fetch {url}")
        await asyncio.sleep(0.03)
        return {"url": url, "status": 200, "timeout": timeout}

    @forkpoint.tool
    async def afail(code: int) -> None:
        touch("afail")
        await asyncio.sleep(0)
        raise QuotaExceeded(f"async quota {code}")

    @forkpoint.tool
    def best(query: str) -> Hit:
        touch("best")
        return Hit(query, 0.5)

    return search, next_id_impl, fail, fetch, afail, best


def test_wrapper_keeps_name_doc_and_signature(tmp_path: Path) -> None:
    search = make_tools(tmp_path / "side.txt")[0]
    assert search.__name__ == "search" and search.__doc__ == "Search things."
    import inspect

    assert list(inspect.signature(search).parameters) == ["query", "limit", "lang"]
    # Outside a recording or replay the body just runs.
    assert search("x", 1) == [{"title": "x #0", "lang": "en"}]
    assert (tmp_path / "side.txt").read_text() == "search x\n"


def test_sync_tool_records_name_args_result_duration(tmp_path: Path, store: Path) -> None:
    search, next_id, *_ = make_tools(tmp_path / "side.txt")
    with forkpoint.record(store=store) as rec:
        out = search("cats", lang="fr")
        ident = next_id("run")
    assert out == [{"title": "cats #0", "lang": "fr"}, {"title": "cats #1", "lang": "fr"}]
    assert ident == "run-1"
    calls = Session.load(rec.session_path).by_type("tool_call")
    assert [c["tool"] for c in calls] == ["search", "next_id"]
    assert calls[0]["args"] == {"query": "cats", "limit": 2, "lang": "fr"}  # default filled in
    assert calls[0]["result"] == out
    assert calls[0]["duration_ms"] >= 30
    assert "error" not in calls[0]
    assert calls[1]["args"] == {"prefix": "run"} and calls[1]["result"] == "run-1"


def test_two_functions_recorded_under_one_tool_name_each_get_their_own_results(store: Path) -> None:
    """Two agents' tools answer to ``search``, each its own function (``@forkpoint.tool(name=…)``,
    or ``--tool MODULE:QUALNAME=search``), called with the same arguments. Their calls had one
    match key and were served in recorded order, so a program that calls them in another order (the
    agents run the other way round now) got each other's results under "replay ok". Each call now
    records its function, and identical calls are served to their own function first."""

    @forkpoint.tool(name="search")
    def web(q: str) -> str:
        return "web: " + q

    @forkpoint.tool(name="search")
    async def docs(q: str) -> str:
        return "docs: " + q

    with forkpoint.record(store=store) as rec:
        assert [web("x"), asyncio.run(docs("x")), web("x")] == ["web: x", "docs: x", "web: x"]
    events = Session.load(rec.session_path).by_type("tool_call")
    assert [e["function"].rsplit(".", 1)[-1] for e in events] == ["web", "docs", "web"]
    with forkpoint.replay(rec.session_path) as rp:
        assert [asyncio.run(docs("x")), web("x"), web("x")] == ["docs: x", "web: x", "web: x"]
    assert rp.report()["reproduced"], rp.report()


def test_a_function_of_a_shared_tool_name_is_served_the_call_that_sent_its_own_key(store: Path) -> None:
    """Identical calls are served to their own function first, and of those, to the one that sent
    this call's secret (a key counts a secret by its kind only). Serving by function came before
    the secrets and replaced them: a function checking two keys in another order on replay was
    served each other's answers under "replay ok" when another function shared its tool's name."""
    good, bad = "sk-proj-" + "A" * 48, "sk-proj-" + "B" * 48

    @forkpoint.tool(name="check")
    def primary(api_key: str) -> str:
        return "valid" if api_key == good else "revoked"

    @forkpoint.tool(name="check")
    def backup(api_key: str) -> str:
        return "backup valid" if api_key == good else "backup revoked"

    with forkpoint.record(store=store) as rec:
        assert [primary(good), primary(bad), backup(good)] == ["valid", "revoked", "backup valid"]
    with forkpoint.replay(rec.session_path) as rp:
        assert [primary(bad), primary(good), backup(good)] == ["revoked", "valid", "backup valid"]
    assert rp.report()["reproduced"], rp.report()


def replays_alike(store: Path, run: Callable[[], Any], expected: Any) -> None:
    """``run`` recorded, then replayed: each run gives ``expected``, and the replay reproduced."""
    with forkpoint.record(store=store) as rec:
        assert run() == expected
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == expected
    assert rp.report()["reproduced"], rp.report()


def search_tools() -> tuple[Callable[[str], str], Callable[[str], str]]:
    """``web`` and ``docs``: two functions recorded as the one tool ``search``."""

    @forkpoint.tool(name="search")
    def web(q: str) -> str:
        return "web: " + q

    @forkpoint.tool(name="search")
    def docs(q: str) -> str:
        return "docs: " + q

    return web, docs


def test_a_function_is_not_served_another_functions_call_of_its_tool_name(store: Path) -> None:
    """``web`` and ``docs`` both answer to ``search``; the recording has one call of each. A replay
    in which ``web`` is called twice (the program now asks the web where it asked the docs) was
    served docs' recorded answer for the second, a result ``web`` never gives, under "replay ok", as
    was ``web("y")``, recorded of ``docs`` only. A function the recording knows under that name is
    served its own calls only."""

    web, docs = search_tools()

    with forkpoint.record(store=store) as rec:
        assert [web("x"), docs("x"), docs("y")] == ["web: x", "docs: x", "docs: y"]
    with forkpoint.replay(rec.session_path) as rp:
        assert web("x") == "web: x"
        with pytest.raises(forkpoint.Divergence, match=r"by \S+web were already served"):
            web("x")
    assert not rp.report()["reproduced"]
    with forkpoint.replay(rec.session_path) as rp, pytest.raises(forkpoint.Divergence) as raised:
        web("y")
    assert "a call of another function of that tool name" in str(raised.value)
    assert not rp.report()["reproduced"]


def test_a_function_is_not_served_the_call_another_function_made_for_its_ask(store: Path) -> None:
    """A framework runs the model's ask ``c1`` with ``web`` and ``c2`` with ``docs``, both tools
    named ``search`` (its integration hands each call the ask's id: ``runtime.asked_as``). A
    replay in which ``docs`` answers ``c1`` was served ``web``'s recorded call, whose id it named:
    ``docs`` returned "web: x" under "replay ok". The ask's id is looked for among the function's
    own calls only."""
    from forkpoint import runtime

    web, docs = search_tools()

    def asked(ask: str, fn: Callable[[str], str]) -> str:
        runtime.asked_as.set(ask)
        return fn("x")

    with forkpoint.record(store=store) as rec:
        assert [asked("c1", web), asked("c2", docs)] == ["web: x", "docs: x"]
    with forkpoint.replay(rec.session_path) as rp, pytest.raises(forkpoint.Divergence) as raised:
        asked("c1", docs)
    assert "a call of another function of that tool name" in str(raised.value)
    assert not rp.report()["reproduced"]


class Index:
    """A tool that is a method: its object (``self``) decides the answer."""

    def __init__(self, name: str, source: dict[str, str] | None = None) -> None:
        self.name = name
        self.source = source if source is not None else {}

    @forkpoint.tool(name="search")
    def search(self, q: str) -> str:
        return f"{self.source.get('name', self.name)}:{q}"


def test_each_object_of_a_method_tool_is_served_its_own_calls(store: Path) -> None:
    """``web.search("x")`` then ``docs.search("x")`` recorded, asked in the other order on replay (a
    set ordered them otherwise): each object got the other's recorded answer under "replay ok".
    The recording tells the objects apart by their attributes at their first call."""
    from forkpoint.replay.report import summary_line

    with forkpoint.record(store=store) as rec:
        web, docs = Index("web"), Index("docs")
        assert [web.search("x"), docs.search("x"), web.search("y")] == ["web:x", "docs:x", "web:y"]
    with forkpoint.replay(rec.session_path) as rp:
        web, docs = Index("web"), Index("docs")
        assert [docs.search("x"), web.search("x"), web.search("y")] == ["docs:x", "web:x", "web:y"]
    assert summary_line(rp.report()).startswith("replay ok: "), summary_line(rp.report())
    # web, now seen to be the object that made no call of docs.search("z"), is not served it
    with forkpoint.record(store=store) as rec:
        web, docs = Index("web"), Index("docs")
        assert [web.search("x"), docs.search("z")] == ["web:x", "docs:z"]
    with forkpoint.replay(rec.session_path) as rp, pytest.raises(forkpoint.Divergence) as raised:
        Index("web").search("z")
    assert "another object" in str(raised.value), str(raised.value)
    assert not rp.report()["reproduced"]


@pytest.mark.parametrize(
    "mark",
    [
        {"n": "1", "fp": "a"},
        {"n": 1.0, "fp": "a"},
        {"n": True, "fp": "a"},
        {"n": -1, "fp": "a"},
        {"n": [1], "fp": "a"},
    ]
    + [{"n": 1, "fp": ["a"]}, {"n": 1}, {"n": 1, "fp": "a", "first": {}}, {"n": 1, "fp": "a", "alone": 1}]
    + [["n", 1]],
)
def test_a_session_whose_objects_are_malformed_is_refused_naming_the_event(store: Path, mark: Any) -> None:
    """A session is data from anywhere: an ``instance`` whose ordinal is no whole number (``"1"``,
    an edited session's) was taken for the first object's, 0, silently, and served it that object's
    calls; one whose ordinal or fingerprint is a list, as a mark without them. Such a session is
    refused when read, as one with another malformed field is, naming the line and the event."""
    from forkpoint.capture.tools import function_name
    from forkpoint.log import SessionWriter

    writer = SessionWriter.create(store, {"argv": ["agent.py"]}, fsync="never")
    for answer, made in (("web:x", {"n": 0, "fp": "a"}), ("docs:x", mark)):
        writer.append(
            {
                "type": "tool_call",
                "tool": "search",
                "args": {"q": "x"},
                "result": answer,
                "function": function_name(Index.search),
                "instance": made,
            }
        )
    writer.append({"type": "end", "exit_code": 0})
    writer.close()
    with pytest.raises(SessionError, match=r"session\.jsonl:3: event 2 \(tool_call\): its instance is not"):
        with forkpoint.replay(writer.path):
            pass


def test_a_session_whose_method_calls_name_no_process_replays(store: Path) -> None:
    """A session is data from anywhere: a method tool's calls whose ``pid`` is a list or a dict
    stopped the replay at its start with ``TypeError: unhashable type``. Such a call's process is
    not known, and each object is still served its own calls."""
    with forkpoint.record(store=store) as rec:
        assert [Index("web").search("x"), Index("docs").search("x")] == ["web:x", "docs:x"]
    log = Path(rec.session_path) / "session.jsonl"
    events = [orjson.loads(line) for line in log.read_bytes().splitlines()]
    for e, pid in zip((e for e in events if e["type"] == "tool_call"), ([1], {"a": 1}), strict=True):
        e["pid"] = pid
    log.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    (Path(rec.session_path) / "signature.json").unlink(missing_ok=True)
    with forkpoint.replay(rec.session_path) as rp:
        assert [Index("docs").search("x"), Index("web").search("x")] == ["docs:x", "web:x"]
    assert rp.report()["reproduced"] and not rp.report()["objects_untold"], rp.report()


def test_alike_objects_made_one_per_call_are_looked_up_once(store: Path) -> None:
    """A program making an alike object for each call (``Index("web").search(q)`` in a loop) is
    replayed without going through all the recorded objects at each call: the objects a fingerprint
    stands for are worked out once (each call gathered them all again: 10,000 calls on 10,000 objects
    replayed in 6 s, where they had taken 0.5 s)."""
    with forkpoint.record(store=store) as rec:
        answers = [Index("web").search(f"q{i}") for i in range(20)]
    function, fp = tools_mod.function_name(Index.search), tools_mod._fingerprint(Index("web"))
    with forkpoint.replay(rec.session_path) as rp:
        assert [Index("web").search(f"q{i}") for i in range(20)] == answers
        told = rp._told(function, fp)
        assert told is not None and len(told[0]) == 20 and told is rp._told(function, fp)
    assert rp.report()["reproduced"] and not rp.report()["objects_untold"]


def test_alike_objects_made_one_per_call_answered_differently_replay_ok_in_recorded_order(
    store: Path,
) -> None:
    """A loop making a fresh, alike object for each call (``Searcher(cfg).search(q)``), answered
    differently each time, replayed in recorded order was said "ok, but not certain": each object
    is served the calls of the recorded object of its own ordinal, as certain as a plain function's
    repeated calls. Serving one the call of another ordinal's object is still said."""
    from forkpoint.replay.report import summary_line

    answers = iter(range(100))

    class Searcher:
        def __init__(self, cfg: str) -> None:
            self.cfg = cfg

        @forkpoint.tool(name="search")
        def search(self, q: str) -> str:
            return f"{self.cfg}:{q}:{next(answers)}"

    with forkpoint.record(store=store) as rec:
        got = [Searcher("c").search("x") for _ in range(3)]
    with forkpoint.replay(rec.session_path) as rp:
        assert [Searcher("c").search("x") for _ in range(3)] == got
    assert summary_line(rp.report()).startswith("replay ok: "), summary_line(rp.report())
    # the 1st object asking twice is served the 2nd's call at its 2nd: said
    with forkpoint.replay(rec.session_path) as rp:
        one = Searcher("c")
        assert [one.search("x"), one.search("x"), Searcher("c").search("x")] == got
    assert "not certain" in summary_line(rp.report()), summary_line(rp.report())
    # the 1st asking what only the 2nd asked: the ordinals its "x" was served by do not hold, said
    with forkpoint.record(store=store) as rec:
        one, two = Searcher("c"), Searcher("c")
        got = [one.search("x"), two.search("x"), two.search("y")]
    with forkpoint.replay(rec.session_path) as rp:
        one, two = Searcher("c"), Searcher("c")
        assert [one.search("x"), one.search("y"), two.search("x")] == [got[0], got[2], got[1]]
    assert "not certain" in summary_line(rp.report()), summary_line(rp.report())


def test_alike_objects_asking_alike_calls_are_not_sorted_at_each_call(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program making an alike object for each call, asking the same each time
    (``Index("web").search("x")`` in a loop, or ``web`` and ``docs`` in turn), is served without
    reading each recorded call of that request again at each call, which object it was made on and
    what it answered: a replay of 5,000 such calls took 7 s (24 s in turn), where it had taken 0.9 s."""
    from forkpoint.replay import replayer as replayer_mod

    def asked() -> list[str]:
        return [Index(name).search("x") for _ in range(20) for name in ("web", "docs", "web")]

    with forkpoint.record(store=store) as rec:
        answers = asked()
    looked: list[int] = []

    def counted(read: Callable[[Any], Any]) -> Callable[[Any], Any]:
        def count(event: Any) -> Any:
            looked.append(1)
            return read(event)

        return count

    for name in ("_object", "_answer"):
        monkeypatch.setattr(replayer_mod, name, counted(getattr(replayer_mod, name)))
    with forkpoint.replay(rec.session_path) as rp:
        looked.clear()  # (those of reading the recording, once)
        assert asked() == answers
    assert len(looked) <= 2 * len(answers), len(looked)  # (a few per call, not each recorded call's)
    assert rp.report()["reproduced"] and not rp.report()["objects_untold"]


def test_objects_asking_alike_calls_in_turn_are_not_read_again_at_each_call(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Index("web")`` and ``Index("docs")`` made for each call, asking ``search("x")`` in turn: each
    replayed call copied every recorded call of that request left (its function's) and looked up
    the object of each, and 5,000 of them took 1.5 s of CPU more than 9794f93's 1 s. The calls are
    not copied when they are all the function's, and the calls of an object are known once."""
    from forkpoint.replay import replayer as replayer_mod

    def asked() -> list[str]:
        return [Index(name).search("x") for _ in range(30) for name in ("web", "docs")]

    with forkpoint.record(store=store) as rec:
        answers = asked()
    copied: list[int] = []
    same_function = replayer_mod._same_function

    def counted(queue: Any, *args: Any) -> Any:
        mine = same_function(queue, *args)
        copied.append(0 if mine is None or mine is queue else len(mine))
        return mine

    class Counted(dict[int, Any]):
        looked = 0

        def __getitem__(self, seq: int) -> Any:
            Counted.looked += 1
            return super().__getitem__(seq)

    monkeypatch.setattr(replayer_mod, "_same_function", counted)
    with forkpoint.replay(rec.session_path) as rp:
        rp._made_on = Counted(rp._made_on)
        assert asked() == answers
    assert sum(copied) == 0 and Counted.looked <= 2 * len(answers), (sum(copied), Counted.looked)
    assert rp.report()["reproduced"] and not rp.report()["objects_untold"]


def test_objects_told_apart_asking_alike_calls_in_turn_are_not_filtered_again_at_each_call(
    store: Path,
) -> None:
    """``web`` and ``docs`` (told apart by their attributes) asking ``search("x")`` in turn: each
    replayed call kept, of every recorded call of that request left, those made on its object, so a
    replay of 5,000 such calls took 1 s of CPU and one of 20,000 12 s. The calls left of each object
    are known once, and kept as calls are served."""

    def asked() -> list[str]:
        objects = [Index(name) for name in ("web", "docs", "wiki")]
        return [objects[i % 3].search("x") for i in range(60)]

    with forkpoint.record(store=store) as rec:
        answers = asked()

    class Counted(set[int]):
        looked = 0

        def __contains__(self, seq: object) -> bool:
            Counted.looked += 1
            return super().__contains__(seq)

    class Kept(dict[Any, set[int]]):
        def __setitem__(self, k: Any, seqs: set[int]) -> None:
            super().__setitem__(k, Counted(seqs))

    with forkpoint.replay(rec.session_path) as rp:
        rp._told_seqs = Kept()
        assert asked() == answers
    assert Counted.looked <= 2 * len(answers), Counted.looked  # (once per call at most, not each left)
    assert rp.report()["reproduced"] and not rp.report()["objects_untold"]


def test_objects_of_a_class_with_slots_are_told_apart_by_them(store: Path) -> None:
    """Objects with ``__slots__`` (no ``__dict__``, no weak reference) are told apart by their
    slots' values, and one made where another was, gone since (at its address, as a temporary's
    is), is not taken for it: the recording kept them as one object, served in recorded order. One
    whose count each call changes stays one object."""

    class Slotted:
        __slots__ = ("name", "count")

        def __init__(self, name: str) -> None:
            self.name, self.count = name, 0

        @forkpoint.tool(name="lookup")
        def lookup(self, q: str) -> str:
            self.count += 1
            return f"{self.name}:{q}"

    with forkpoint.record(store=store) as rec:
        a = Slotted("a")
        assert [a.lookup("x"), a.lookup("x")] == ["a:x", "a:x"]
    assert not any("instance" in e for e in Session.load(rec.session_path).by_type("tool_call"))
    with forkpoint.record(store=store) as rec:
        a, b = Slotted("a"), Slotted("b")
        assert [a.lookup("x"), b.lookup("x"), a.lookup("x")] == ["a:x", "b:x", "a:x"]
        assert [Slotted("c").lookup("y"), Slotted("d").lookup("y")] == ["c:y", "d:y"]
    with forkpoint.replay(rec.session_path) as rp:
        a, b = Slotted("a"), Slotted("b")
        assert [b.lookup("x"), a.lookup("x"), a.lookup("x")] == ["b:x", "a:x", "a:x"]
        assert [Slotted("d").lookup("y"), Slotted("c").lookup("y")] == ["d:y", "c:y"]
    assert rp.report()["reproduced"] and not rp.report()["objects_untold"]


class Modulus:
    """A tool that is a method of an object holding an integer too long to write in decimal."""

    def __init__(self, n: int) -> None:
        self.n = n

    @forkpoint.tool(name="digits")
    def digits(self, q: str) -> str:
        return f"{self.n.bit_length()}:{q}"


def test_an_object_holding_an_integer_too_long_to_write_in_decimal_runs_its_tool(store: Path) -> None:
    """An object holding an integer longer than Python writes in decimal (4,300 digits) runs its
    method tool as it does without forkpoint: its fingerprint raised ValueError ("Exceeds the limit
    (4300 digits) for integer string conversion") into the program's call. Such objects are told
    apart as others are."""
    with forkpoint.record(store=store) as rec:
        assert [Modulus(10**5000).digits("x"), Modulus(10**6000).digits("x")] == ["16610:x", "19932:x"]
    with forkpoint.replay(rec.session_path) as rp:
        assert [Modulus(10**6000).digits("x"), Modulus(10**5000).digits("x")] == ["19932:x", "16610:x"]
    assert rp.report()["reproduced"] and not rp.report()["objects_untold"]


class OddKeys:
    """A tool that is a method of an object whose ``__dict__`` holds keys that are no strings."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.__dict__[1] = "one"
        self.__dict__[("k",)] = 2

    @forkpoint.tool(name="look")
    def look(self, q: str) -> str:
        return f"{self.name}:{q}"


def test_an_object_whose_attributes_have_keys_that_are_no_strings_runs_its_tool(store: Path) -> None:
    """An object whose ``__dict__`` has a key that is no string (``obj.__dict__[1] = "x"``) runs its
    method tool as it does without forkpoint: reading its attributes (to say what the call changed
    in place) raised 'TypeError: attribute name must be string' into the program's call. Such
    objects are told apart as others are."""
    with forkpoint.record(store=store) as rec:
        assert [OddKeys("a").look("x"), OddKeys("b").look("x")] == ["a:x", "b:x"]
    with forkpoint.replay(rec.session_path) as rp:
        assert [OddKeys("b").look("x"), OddKeys("a").look("x")] == ["b:x", "a:x"]
    assert rp.report()["reproduced"] and not rp.report()["objects_untold"], rp.report()


class KeyedClient:
    """A tool that is a method of a client holding its API key, as SDK clients do."""

    def __init__(self, name: str, api_key: str) -> None:
        self.name, self.api_key = name, api_key

    @forkpoint.tool(name="search")
    def search(self, q: str) -> str:
        return f"{self.name}:{q}"


@pytest.mark.parametrize("replayed", [f"sk-proj-{secrets.token_hex(24)}", PLACEHOLDER_KEY])
def test_clients_holding_another_key_on_replay_are_told_apart(store: Path, replayed: str) -> None:
    """Objects holding an API key are told apart by their other attributes on a replay with
    another key (a teammate's, CI's) or none (the placeholder a replay sets): the key counted in
    their fingerprint by its digest, so no object had a recorded one's, and ``docs`` asked first
    was served ``web``'s answer (said not certain; in recorded order, a run that reproduced exactly
    was said so too)."""
    recorded = f"sk-proj-{secrets.token_hex(24)}"
    with forkpoint.record(store=store) as rec:
        assert [KeyedClient(n, recorded).search("x") for n in ("web", "docs")] == ["web:x", "docs:x"]
    with forkpoint.replay(rec.session_path) as rp:
        assert [KeyedClient(n, replayed).search("x") for n in ("docs", "web")] == ["docs:x", "web:x"]
    assert rp.report()["reproduced"] and not rp.report()["objects_untold"], rp.report()


class Briefed:
    """A tool that is a method of an object holding a long text (a prompt, a document) beside its name."""

    def __init__(self, name: str, brief: str) -> None:
        self.name, self.brief = name, brief

    @forkpoint.tool(name="search")
    def search(self, q: str) -> str:
        return f"{self.name}:{q}"


def test_a_long_text_attribute_is_scrubbed_once_for_all_its_objects(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Objects holding one long text (a 1 MB prompt, with an API key in it), one made for each call,
    had it scrubbed again for each object's fingerprint (~44 ms each): it is scrubbed once, and a
    replay with another key in it still tells the objects apart by their names."""
    brief = "lorem ipsum " * 20_000 + "key: sk-proj-{}"
    recorded = brief.format(secrets.token_hex(24))
    scrubbed: list[str] = []

    def counted(value: Any, **kw: Any) -> Any:
        if isinstance(value, dict):
            scrubbed.extend(k for k, v in value.items() if isinstance(v, str) and len(v) > 1000)
        return scrub_json(value, **kw)

    scrub_json = tools_mod.scrub_json
    monkeypatch.setattr(tools_mod, "scrub_json", counted)
    with forkpoint.record(store=store) as rec:
        assert [Briefed(n, recorded).search("x") for n in ("web", "docs", "web")] == [
            "web:x",
            "docs:x",
            "web:x",
        ]
    assert scrubbed == ["brief"]
    with forkpoint.replay(rec.session_path) as rp:
        replayed = brief.format(secrets.token_hex(24))
        assert [Briefed(n, replayed).search("x") for n in ("docs", "web", "web")] == [
            "docs:x",
            "web:x",
            "web:x",
        ]
    assert rp.report()["reproduced"] and not rp.report()["objects_untold"], rp.report()


class Endpoint(NamedTuple):
    """A tool that is a named tuple's method: its fields are its items, not attributes."""

    name: str

    @forkpoint.tool(name="search")
    def search(self, q: str) -> str:
        return f"{self.name}:{q}"


def test_named_tuples_of_a_method_tool_are_told_apart_by_their_items(store: Path) -> None:
    """Named tuples made for one call each (no attributes, no weak reference) are told apart by
    their items: ``Endpoint("web")`` and ``Endpoint("docs")``, one after the other at one address,
    were kept as one object, and asked the other way round each was served the other's answer
    under "replay ok"."""
    with forkpoint.record(store=store) as rec:
        assert [Endpoint("web").search("x"), Endpoint("docs").search("x")] == ["web:x", "docs:x"]
    with forkpoint.replay(rec.session_path) as rp:
        assert [Endpoint("docs").search("x"), Endpoint("web").search("x")] == ["docs:x", "web:x"]
    assert rp.report()["reproduced"] and not rp.report()["objects_untold"]


def test_an_object_with_slots_called_from_threads_at_once_stays_one_object(store: Path) -> None:
    """An object with ``__slots__`` (no weak reference) whose calls run at once in threads, each
    changing its count, is one object: a call starting while another ran found its attributes
    changed, took it for another object at its address, and the replay, where no body changes
    them, diverged at its 2nd call ('on another object ... made no such call when recorded')."""

    class Counted:
        __slots__ = ("name", "count")

        def __init__(self, name: str) -> None:
            self.name, self.count = name, 0

        @forkpoint.tool(name="lookup")
        def lookup(self, q: str, inside: threading.Barrier) -> str:
            self.count += 1
            inside.wait(timeout=10)  # (every call is running when any returns)
            return f"{self.name}:{q}"

    def asked() -> list[str]:
        one, inside = Counted("web"), threading.Barrier(3)
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            return list(pool.map(lambda q: one.lookup(q, inside), "abc"))

    replays_alike(store, asked, ["web:a", "web:b", "web:c"])


def test_an_object_with_slots_changed_by_its_other_tool_stays_one_object(store: Path) -> None:
    """An object with ``__slots__`` (no weak reference) that another of its method tools changes
    between two calls of one (``load`` sets ``ready``) is one object: the second call found its
    attributes changed and took it for another object at its address, and the replay, where
    ``load`` changes nothing, diverged at that call ('on another object ... made no such call when
    recorded') where 9794f93 replayed it."""

    class Loaded:
        __slots__ = ("name", "ready")

        def __init__(self, name: str) -> None:
            self.name, self.ready = name, False

        @forkpoint.tool(name="load")
        def load(self) -> str:
            self.ready = True
            return "loaded"

        @forkpoint.tool(name="lookup")
        def lookup(self, q: str) -> str:
            return f"{self.name}:{q}"

    def asked() -> list[str]:
        one = Loaded("web")
        return [one.lookup("a"), one.load(), one.lookup("b")]

    replays_alike(store, asked, ["web:a", "loaded", "web:b"])


class Db:
    """Method tools of one object, one changing it before the other's first call."""

    def __init__(self, name: str) -> None:
        self.name, self.connected = name, False

    @forkpoint.tool(name="connect")
    def connect(self) -> str:
        self.connected = True
        return "connected"

    @forkpoint.tool(name="query")
    def query(self, q: str) -> str:
        return f"{self.name}:{q}"


def test_an_object_changed_by_its_other_tool_before_a_tools_first_call_is_told_apart(store: Path) -> None:
    """``db.connect()`` (setting ``connected``) then ``db.query(q)``, on two objects: ``query``'s
    fingerprint was taken at its own first call, after ``connect`` had changed the object, which a
    replay's served ``connect`` does not: no recorded object had the replay's, and asked in the other
    order each was served the other's answer ("not certain"). An object's fingerprint is taken at
    the first call of any of its method tools, for all of them."""
    from forkpoint.replay.report import summary_line

    def asked(order: str) -> list[str]:
        dbs = {n: Db(n) for n in "ab"}
        for n in order:
            dbs[n].connect()
        return [dbs[n].query("x") for n in order]

    with forkpoint.record(store=store) as rec:
        assert asked("ab") == ["a:x", "b:x"]
    with forkpoint.replay(rec.session_path) as rp:
        assert asked("ba") == ["b:x", "a:x"]
    line = summary_line(rp.report())
    assert rp.report()["reproduced"] and not rp.report()["objects_untold"], line


def test_each_object_of_an_async_method_tool_is_served_its_own_calls(store: Path) -> None:
    """As :func:`test_each_object_of_a_method_tool_is_served_its_own_calls`, for a coroutine method."""

    class Remote:
        def __init__(self, name: str) -> None:
            self.name = name

        @forkpoint.tool(name="fetch")
        async def fetch(self, q: str) -> str:
            return f"{self.name}:{q}"

    async def asked(first: str, second: str) -> list[str]:
        objects = {"web": Remote("web"), "docs": Remote("docs")}
        return [await objects[first].fetch("x"), await objects[second].fetch("x")]

    with forkpoint.record(store=store) as rec:
        assert asyncio.run(asked("web", "docs")) == ["web:x", "docs:x"]
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(asked("docs", "web")) == ["docs:x", "web:x"]
    assert rp.report()["reproduced"]


def test_objects_of_a_method_tool_are_told_apart_in_each_process(store: Path) -> None:
    """A worker forked before any call and the program each call ``search`` on a ``web`` and a
    ``docs`` object, in opposite orders: each process numbers its objects on its own (the worker's
    1st is web, the program's docs), so a replay that took the numbers for one count served the
    worker's web the worker's docs answer. An object is told by its process and number."""

    def worker(first: str, second: str) -> str:
        objects = {"web": Index("web"), "docs": Index("docs")}
        return ",".join([objects[first].search("x"), objects[second].search("x")])

    def run() -> tuple[str, str]:
        forked = os.fork()
        if forked == 0:  # (the worker: its answers are its exit status, read by the program)
            os._exit(0 if worker("web", "docs") == "web:x,docs:x" else 1)
        _, status = os.waitpid(forked, 0)
        return str(os.waitstatus_to_exitcode(status)), worker("docs", "web")

    with forkpoint.record(store=store) as rec:
        assert run() == ("0", "docs:x,web:x")
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == ("0", "docs:x,web:x")
    # (the worker's calls were served in the worker, which hands this report nothing)
    assert rp.report()["divergence"] is None and not rp.report()["objects_untold"], rp.report()


def test_alike_objects_served_another_process_objects_calls_are_said(store: Path) -> None:
    """Alike objects of a forked worker and of the program, each process numbering its own: a replay
    whose program asks before the worker, served the worker's recorded calls (its objects of the same
    ordinals), said "replay ok". An object is served as its own ordinal's only in a recording whose
    objects of its fingerprint are of one process."""
    from forkpoint.replay.report import summary_line

    main, counts = os.getpid(), {"n": 0}

    class Searcher:
        def __init__(self, cfg: str) -> None:
            self.cfg = cfg

        @forkpoint.tool(name="search")
        def search(self, q: str) -> str:
            counts["n"] += 1
            return f"{'main' if os.getpid() == main else 'worker'}{counts['n']}:{q}"

    def asked() -> list[str]:
        return [Searcher("c").search("x") for _ in range(2)]

    def run(program_first: bool) -> list[str]:
        got = asked() if program_first else []
        forked = os.fork()
        if forked == 0:
            asked()
            os._exit(0)
        os.waitpid(forked, 0)
        return got or asked()

    with forkpoint.record(store=store) as rec:
        assert run(False) == ["main1:x", "main2:x"]
    with forkpoint.replay(rec.session_path) as rp:
        assert run(True) == ["worker1:x", "worker2:x"]
    # (the worker's calls were served in the worker, which hands this report nothing)
    assert rp.report()["objects_untold"] == ["search"], summary_line(rp.report())


def test_objects_of_a_method_tool_that_cannot_be_told_apart_are_said(store: Path) -> None:
    """Two objects whose plain attributes are alike (their answers come from a dict), or one whose
    attributes differ from every recorded object's, are served as before, in the recorded order:
    when one is served another's call than that of the recorded object of its ordinal (the order of
    their calls departed), the verdict says the tool's objects could not be told apart, not a plain
    "replay ok"."""
    from forkpoint.replay.report import summary_line

    with forkpoint.record(store=store) as rec:
        web, docs = Index("i", {"name": "web"}), Index("i", {"name": "docs"})
        assert [web.search("x"), docs.search("x"), web.search("x")] == ["web:x", "docs:x", "web:x"]
    with forkpoint.replay(rec.session_path) as rp:
        web = Index("i", {"name": "web"})
        got = [web.search("x"), web.search("x"), web.search("x")]
        assert got == ["web:x", "web:x", "docs:x"]  # (its own ordinal's, then the recorded order)
    line = summary_line(rp.report())
    assert rp.report()["reproduced"] and "not certain" in line and "'search'" in line, line
    with forkpoint.record(store=store) as rec:
        assert [Index("web").search("x"), Index("docs").search("x")] == ["web:x", "docs:x"]
    with forkpoint.replay(rec.session_path) as rp:
        assert [Index("Docs").search("x"), Index("Web").search("x")] == ["web:x", "docs:x"]
    line = summary_line(rp.report())
    assert "not certain" in line and "'search'" in line and "could not be told apart" in line, line
    # web, told, finds its call served to docs, which was not: the divergence says it may have been
    with forkpoint.replay(rec.session_path) as rp, pytest.raises(forkpoint.Divergence) as raised:
        assert Index("Docs").search("x") == "web:x"
        Index("web").search("x")
    assert "another object of" in str(raised.value) and "could not be told apart" in str(raised.value)
    # two alike objects are not served the call of a third object they can be told from
    with forkpoint.record(store=store) as rec:
        got = [Index(n, {"name": s}).search("x") for n, s in (("o", "o"), ("i", "web"), ("i", "docs"))]
        assert got == ["o:x", "web:x", "docs:x"]
    with forkpoint.replay(rec.session_path) as rp:
        got = [Index(n, {"name": s}).search("x") for n, s in (("i", "web"), ("i", "docs"), ("o", "o"))]
        assert got == ["web:x", "docs:x", "o:x"]
    line = summary_line(rp.report())
    assert rp.report()["reproduced"] and "not certain" in line and "'search'" in line, line


def test_alike_objects_asking_in_their_recorded_order_each_are_served_their_own_calls(
    store: Path,
) -> None:
    """Two objects that cannot be told apart by their attributes, each asking as it did when recorded
    but interleaved otherwise: an object whose own ordinal's call came after the other's first call
    left was served the other's answer, though each object's calls were asked in their recorded
    order. It is served its own ordinal's call; one asking what its own ordinal did not ask is
    served in recorded order. Both are said "not certain": objects alive together are known only by
    the order of their first calls, and the program may have changed it (nothing in its calls
    tells)."""
    from forkpoint.replay.report import summary_line

    def made() -> tuple[Index, Index]:
        return Index("i", {"name": "web"}), Index("i", {"name": "docs"})

    with forkpoint.record(store=store) as rec:
        web, docs = made()
        got = [web.search("x"), docs.search("x"), docs.search("x"), web.search("x")]
        assert got == ["web:x", "docs:x", "docs:x", "web:x"]
    with forkpoint.replay(rec.session_path) as rp:
        web, docs = made()
        got = [web.search("x"), docs.search("x"), web.search("x"), docs.search("x")]
    assert got == ["web:x", "docs:x", "web:x", "docs:x"], got
    assert rp.report()["objects_untold"] == ["search"], summary_line(rp.report())
    with forkpoint.replay(rec.session_path) as rp:
        web, docs = made()
        got = [web.search("x"), web.search("x"), web.search("x"), docs.search("x")]
    assert got == ["web:x", "web:x", "docs:x", "docs:x"], got
    assert rp.report()["objects_untold"] == ["search"], summary_line(rp.report())


def test_alike_objects_alive_together_asked_in_another_order_than_recorded_are_said(store: Path) -> None:
    """``web = Index(...)`` and ``docs = Index(...)``, alike in their attributes (their answers come
    from a dict), recorded ``web`` first; a replay in which ``docs`` asks first: an alike object is
    known only by the order of its first call, so ``docs`` was served ``web``'s recorded answer,
    ``web`` ``docs``'s, under "replay ok", a run that reads exactly as one in recorded order. Objects
    alive together can be asked in any order: an answer chosen among theirs by that order is not
    certain, and said. A loop making an alike object for each call, each gone before the next is
    asked, is recorded so (``alone``) and replays ok."""
    from forkpoint.replay.report import summary_line

    def made() -> tuple[Index, Index]:
        return Index("i", {"name": "web"}), Index("i", {"name": "docs"})

    with forkpoint.record(store=store) as rec:
        web, docs = made()
        assert [web.search("x"), docs.search("x")] == ["web:x", "docs:x"]
    marks = [e.get("instance") for e in Session.load(rec.session_path).by_type("tool_call")]
    assert marks[0] is None and marks[1] is not None and "alone" not in marks[1], marks
    with forkpoint.replay(rec.session_path) as rp:
        web, docs = made()
        assert [docs.search("x"), web.search("x")] == ["web:x", "docs:x"]  # (by their first calls' order)
    line = summary_line(rp.report())
    assert rp.report()["objects_untold"] == ["search"] and "not certain" in line, line
    with forkpoint.record(store=store) as rec:
        got = [Index("i", {"name": n}).search("x") for n in ("web", "docs", "wiki")]
    marks = [e.get("instance") for e in Session.load(rec.session_path).by_type("tool_call")]
    assert [m and m.get("alone") for m in marks] == [None, True, True], marks
    with forkpoint.replay(rec.session_path) as rp:
        assert [Index("i", {"name": n}).search("x") for n in ("web", "docs", "wiki")] == got
    assert summary_line(rp.report()).startswith("replay ok: "), summary_line(rp.report())


def test_alike_objects_served_their_own_calls_past_others_do_not_read_them_at_each_call(
    store: Path,
) -> None:
    """Two alike objects, one's calls all recorded before the other's, the other asking first on
    replay: each of its calls is served its own ordinal's without going through the first one's
    calls left before them again (20,000 such calls took 37 s of CPU, 5,000 2 s); not certain, as
    objects alive together are known only by the order of their first calls."""
    from forkpoint.replay.report import summary_line

    def asked(order: list[int]) -> list[str]:
        objects = [Index("i", {"name": "web"}), Index("i", {"name": "docs"})]
        return [objects[i].search("x") for i in order]

    with forkpoint.record(store=store) as rec:
        assert asked([0] * 30 + [1] * 30) == ["web:x"] * 30 + ["docs:x"] * 30

    class Counted(dict[int, Any]):
        looked = 0

        def __getitem__(self, seq: int) -> Any:
            Counted.looked += 1
            return super().__getitem__(seq)

    with forkpoint.replay(rec.session_path) as rp:
        rp._made_on = Counted(rp._made_on)
        assert asked([0] + [1] * 30 + [0] * 29) == ["web:x"] + ["docs:x"] * 30 + ["web:x"] * 29
    assert Counted.looked <= 4 * 60, Counted.looked  # (a few per call, not each call left)
    assert rp.report()["objects_untold"] == ["search"], summary_line(rp.report())


class Read(dict[str, Any]):
    """A recorded event that counts each time the replayer reads a field of it or compares it."""

    reads = 0

    def __getitem__(self, field: str) -> Any:
        Read.reads += 1
        return super().__getitem__(field)

    def get(self, field: str, default: Any = None) -> Any:
        Read.reads += 1
        return super().get(field, default)

    def __eq__(self, other: object) -> bool:
        Read.reads += 1
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]


def ask_objects(order: list[int], alike: bool) -> list[str]:
    """``search("x")`` asked of ``web`` (0) and ``docs`` (1) in ``order``: objects ``alike`` in
    their attributes or told apart by them."""
    objects = [Index("i", {"name": n}) if alike else Index(n) for n in ("web", "docs")]
    return [objects[i].search("x") for i in order]


def ask_functions(order: list[int]) -> list[str]:
    """``search("x")`` asked of ``web`` (0) and ``docs`` (1), two functions of that tool name."""
    functions = search_tools()
    return [functions[i]("x") for i in order]


def ask_by_ids(order: list[int]) -> list[str]:
    """``check("x")`` asked once for each of the model's ids ``c{i}``, ``i`` in ``order``, each
    answered its own."""
    from forkpoint import runtime

    asking = {"id": ""}

    @forkpoint.tool(name="check")
    def check(q: str) -> str:
        return f"{asking['id']}:{q}"

    got = []
    for i in order:
        asking["id"] = f"c{i}"
        runtime.asked_as.set(asking["id"])
        got.append(check("x"))
    return got


@pytest.mark.parametrize(
    ("asked", "recorded", "replayed"),
    [
        (functools.partial(ask_objects, alike=True), [0] * 100 + [1] * 100, [0] + [1] * 100 + [0] * 99),
        (functools.partial(ask_objects, alike=False), [0] * 100 + [1] * 100, [1] * 100 + [0] * 100),
        (ask_functions, [0, 1] * 100, [0, 1] * 100),
        (ask_functions, [0] * 100 + [1] * 100, [1] * 100 + [0] * 100),
        (ask_by_ids, list(range(200)), list(range(200))[::-1]),
    ],
    ids=["alike-objects-one-first", "objects-one-first", "functions-in-turn", "functions-one-first", "ids"],
)
def test_the_call_to_serve_of_many_identical_ones_is_found_without_reading_each(
    store: Path, asked: Callable[[list[int]], list[str]], recorded: list[int], replayed: list[int]
) -> None:
    """Of many identical calls left (one match key), the one to serve is its object's, its
    function's or its model's id's: each replayed call read every call left to find its function's
    (two functions of one tool name) or its id's, and took the one found out of all those left at
    the cost of its place among them (an object's calls all recorded after another's), so 20,000
    such calls took 2.6 s (an object's), 16 s (functions in turn) or more. Each call reads a few
    recorded calls, however many are left, and is served what it was before."""
    from forkpoint.log import Session

    expected = asked(replayed)  # (live: what the program gets without forkpoint)
    with forkpoint.record(store=store) as rec:
        asked(recorded)
    session = Session.load(rec.session_path)
    session.events[:] = [Read(e) for e in session.events]
    with forkpoint.replay(session) as rp:
        Read.reads = 0
        assert asked(replayed) == expected
        reads = Read.reads
    assert reads <= 40 * len(replayed), reads / len(replayed)  # (a few per call, not each left)
    assert rp.report()["reproduced"], rp.report()


def test_one_object_or_objects_alike_in_their_answers_replay_as_before(store: Path) -> None:
    """One object of a method tool, or several whose calls answer the same, replay ok with nothing
    said, and one object's calls are recorded as before; so do two objects whose counter each call
    changes (each told apart by its attributes as at its first call)."""
    from forkpoint.replay.report import summary_line

    with forkpoint.record(store=store) as rec:
        web = Index("web")
        assert [web.search("x"), web.search("x"), web.search("y")] == ["web:x", "web:x", "web:y"]
    assert not any("instance" in e for e in Session.load(rec.session_path).by_type("tool_call"))
    with forkpoint.replay(rec.session_path) as rp:
        web = Index("web")
        assert [web.search("x"), web.search("x"), web.search("y")] == ["web:x", "web:x", "web:y"]
    assert summary_line(rp.report()).startswith("replay ok: "), summary_line(rp.report())
    with forkpoint.record(store=store) as rec:
        assert [Index("a", {"name": "n"}).search("x"), Index("a", {"name": "n"}).search("x")] == ["n:x"] * 2
    with forkpoint.replay(rec.session_path) as rp:
        assert [Index("a", {"name": "n"}).search("x"), Index("a", {"name": "n"}).search("x")] == ["n:x"] * 2
    assert summary_line(rp.report()).startswith("replay ok: "), summary_line(rp.report())

    class Tally:
        def __init__(self, name: str) -> None:
            self.name, self.count = name, 0

        @forkpoint.tool(name="tally")
        def add(self) -> str:
            self.count += 1
            return f"{self.name}{self.count}"

    with forkpoint.record(store=store) as rec:
        a, b = Tally("a"), Tally("b")
        assert [a.add(), b.add(), a.add(), b.add()] == ["a1", "b1", "a2", "b2"]
    with forkpoint.replay(rec.session_path) as rp:
        a, b = Tally("a"), Tally("b")
        assert [b.add(), a.add(), a.add(), b.add()] == ["b1", "a1", "a2", "b2"]
    line = summary_line(rp.report())
    assert rp.report()["reproduced"] and "told apart" not in line, line


def test_a_child_sessions_served_calls_keep_their_function(store: Path) -> None:
    """A what-if run's child session keeps the calls served from the recording and those made live:
    the served ones were kept without their function, so replaying the child took ``web("a")``,
    served, for another function's call than ``web``'s, whose live call it has (a divergence
    naming function None). They keep the function that asked for them now."""
    web, _ = search_tools()

    with forkpoint.record(store=store) as rec:
        assert web("a") == "web: a"
    with forkpoint.replay(rec.session_path, on_divergence="live", record_child=True) as rp:
        assert [web("a"), web("b")] == ["web: a", "web: b"]
    child = rp.report()["child_session"]
    with forkpoint.replay(child) as rp:
        assert [web("a"), web("b")] == ["web: a", "web: b"]
    assert rp.report()["reproduced"], rp.report()


def test_a_child_sessions_served_calls_keep_their_object(store: Path) -> None:
    """As :func:`test_a_child_sessions_served_calls_keep_their_function`, for two objects of a method
    tool: the child's served calls were kept without their object, so replaying the child in another
    order served ``a`` the answer ``b`` was served, silently. They keep the object that asked."""
    with forkpoint.record(store=store) as rec:
        a, b = Index("a"), Index("b")
        assert [a.search("x"), b.search("x")] == ["a:x", "b:x"]
    with forkpoint.replay(rec.session_path, on_divergence="live", record_child=True) as rp:
        a, b = Index("a"), Index("b")
        assert [b.search("x"), a.search("x"), b.search("y")] == ["b:x", "a:x", "b:y"]
    child = rp.report()["child_session"]
    with forkpoint.replay(child) as rp:
        a, b = Index("a"), Index("b")
        assert [a.search("x"), b.search("x"), b.search("y")] == ["a:x", "b:x", "b:y"]
    assert rp.report()["reproduced"], rp.report()


def test_a_tool_without_a_signature_records_its_args_as_given(store: Path) -> None:
    # A builtin such as max has no signature to bind against: its arguments are stored as given,
    # and replay serves them back.
    top = forkpoint.tool(max, name="max")
    with forkpoint.record(store=store) as rec:
        assert (top(3, 4), top(3, 9, key=abs)) == (4, 9)
    calls = Session.load(rec.session_path).by_type("tool_call")
    assert [c["args"] for c in calls] == [
        {"args": [3, 4], "kwargs": {}},
        {"args": [3, 9], "kwargs": {"key": {"$type": "builtins.builtin_function_or_method"}}},
    ]
    with forkpoint.replay(rec.session_path) as rp:
        assert (top(3, 4), top(3, 9, key=abs)) == (4, 9)
    assert rp.report()["matched"] == 2 and rp.report()["divergence"] is None


def test_a_tools_arguments_are_bound_to_its_signature_as_it_is_at_each_call(store: Path) -> None:
    # A test that patches a tool's defaults (or its class's __call__) after a first call: each call
    # is recorded with the defaults it ran with.
    # (Signatures are kept between calls: each change is seen.)
    @forkpoint.tool
    def search(q: str, limit: int = 10, *, lang: str = "en") -> str:
        return f"{q}:{limit}:{lang}"

    with forkpoint.record(store=store) as rec:
        assert search("a") == "a:10:en"
        search.__wrapped__.__defaults__ = (20,)
        assert search("b") == "b:20:en"
        search.__wrapped__.__kwdefaults__ = {"lang": "fr"}
        assert search("c") == "c:20:fr"
        search.__wrapped__.__kwdefaults__["lang"] = "de"  # (the same dict, changed in place)
        assert search("d") == "d:20:de"
    calls = Session.load(rec.session_path).by_type("tool_call")
    assert [c["args"] for c in calls] == [
        {"q": "a", "limit": 10, "lang": "en"},
        {"q": "b", "limit": 20, "lang": "en"},
        {"q": "c", "limit": 20, "lang": "fr"},
        {"q": "d", "limit": 20, "lang": "de"},
    ]


def test_async_tool_records_and_replays(tmp_path: Path, store: Path) -> None:
    side = tmp_path / "side.txt"
    _, _, _, fetch, afail, _ = make_tools(side)

    async def agent() -> tuple[Any, Any, str]:
        a = await fetch("https://example.com/a")
        b = await asyncio.gather(fetch("https://example.com/b", timeout=3.0), fetch("https://example.com/c"))
        try:
            await afail(7)
        except QuotaExceeded as exc:
            return a, b, str(exc)
        raise AssertionError("afail did not raise")

    with forkpoint.record(store=store) as rec:
        recorded = asyncio.run(agent())
    calls = Session.load(rec.session_path).by_type("tool_call")
    assert sorted(c["args"]["url"] for c in calls if c["tool"] == "fetch") == [
        "https://example.com/a",
        "https://example.com/b",
        "https://example.com/c",
    ]
    first = next(c for c in calls if c["args"]["url"].endswith("/a"))
    assert first["args"]["timeout"] == 1.5 and first["result"]["status"] == 200
    assert first["duration_ms"] >= 30
    err = next(c for c in calls if c["tool"] == "afail")["error"]
    assert [f[2] for f in err.pop("frames")] == ["afail"]  # (the function it was raised in)
    assert err == {"type": "QuotaExceeded", "module": __name__, "message": "async quota 7"}

    before = side.read_text()
    with forkpoint.replay(rec.session_path) as rp:
        replayed = asyncio.run(agent())
    assert replayed == recorded
    assert side.read_text() == before  # no tool body ran
    assert rp.report()["matched"] == 4 and rp.report()["unused"] == []


def test_exceptions_are_recorded_and_reraised(tmp_path: Path, store: Path) -> None:
    side = tmp_path / "side.txt"
    fail = make_tools(side)[2]
    with forkpoint.record(store=store) as rec:
        with pytest.raises(ValueError, match="is not a number"):
            fail("value")
        with pytest.raises(QuotaExceeded):
            fail("quota")
        with pytest.raises(KeyError):
            fail("other")
    errors = [c["error"] for c in Session.load(rec.session_path).by_type("tool_call")]
    assert errors[0].pop("frames")[-1][2] == "fail"
    assert errors[0] == {
        "type": "ValueError",
        "module": "builtins",
        "message": "bad input: 'x' is not a number",
    }
    assert errors[1]["type"] == "QuotaExceeded" and errors[1]["module"] == __name__
    assert "sk-proj-" not in errors[1]["message"] and "[REDACTED:openai-key:" in errors[1]["message"]
    assert errors[2]["type"] == "KeyError"

    before = side.read_text()
    with forkpoint.replay(rec.session_path):
        with pytest.raises(ValueError, match="is not a number") as e1:
            fail("value")
        with pytest.raises(QuotaExceeded) as e2:
            fail("quota")
        with pytest.raises(KeyError):
            fail("other")
    assert type(e1.value) is ValueError and type(e2.value) is QuotaExceeded
    assert side.read_text() == before


class ApiError(Exception):
    """A typical custom exception: its own constructor, attributes the agent reads."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status, self.detail = status, detail


class Refused(Exception):
    """A constructor the recorded values cannot call: rebuilt without it."""

    def __init__(self, *, reason: str) -> None:
        super().__init__(f"refused: {reason}")
        self.reason = reason


def test_custom_exceptions_come_back_whole(store: Path) -> None:
    """``except ApiError as e: if e.status == 429`` must take the same branch on replay: the
    exception is rebuilt as its own class with its attributes (not a generic RecordedToolError)."""

    @forkpoint.tool
    def fetch(url: str) -> str:
        if "limit" in url:
            raise ApiError(429, "slow down")
        raise Refused(reason="robots.txt")

    def run() -> list[tuple[type, str, dict[str, Any]]]:
        out = []
        for url in ("https://example.com/limit", "https://example.com/private"):
            try:
                fetch(url)
            except Exception as exc:  # noqa: BLE001 - what the agent would see
                out.append((type(exc), str(exc), dict(vars(exc))))
        return out

    with forkpoint.record(store=store) as rec:
        live = run()
    assert live[0] == (ApiError, "HTTP 429: slow down", {"status": 429, "detail": "slow down"})
    with forkpoint.replay(rec.session_path):
        assert run() == live
    errors = [e["error"] for e in Session.load(rec.session_path).by_type("tool_call")]
    assert "args" not in errors[0]  # the same as the message: not stored twice
    assert errors[0]["attrs"] == {"status": 429, "detail": "slow down"}
    assert errors[1]["attrs"] == {"reason": "robots.txt"}


class Order(pydantic.BaseModel):
    qty: int
    note: str = ""
    sizes: list[int] = []

    @pydantic.field_validator("note")
    @classmethod
    def _polite(cls, value: str) -> str:
        if value == "rude":
            raise ValueError("a rude {note}")  # (braces: a template's, not this text's)
        if value == "custom":
            raise pydantic_core.PydanticCustomError("tone", "tone {n} is off", {"n": 3})
        return value


class Hidden(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(hide_input_in_errors=True)
    qty: int


def test_a_pydantic_validation_error_comes_back_as_itself(store: Path) -> None:
    """A tool that validates with pydantic raises its ``ValidationError``, which has no constructor:
    it came back a ``RecordedToolError`` whose text had the class's name in front, so pydantic-ai
    (which turns a tool's ``ValidationError`` into a retry prompt) and LangChain
    (``handle_validation_error``) let it out of the run on replay, and an ``except
    ValidationError`` did not take it. It comes back as itself: the same text, the same errors."""

    @forkpoint.tool
    def parse(data: Any, as_json: bool = False, hidden: bool = False) -> Any:
        model = Hidden if hidden else Order
        return model.model_validate_json(data) if as_json else model.model_validate(data)

    calls: list[tuple[Any, ...]] = [
        ({"qty": "many", "note": "rude", "sizes": [1, "x"]},),
        ('{"qty": 1, "note": "custom"}', True),
        ("{not json", True),
        ({"qty": object()},),
        ({"qty": "k"}, False, True),
        ({"qty": b"\xff"},),
    ]

    def run() -> list[tuple[Any, ...]]:
        out = []
        for call in calls:
            try:
                parse(*call)
            except pydantic.ValidationError as exc:
                out.append((str(exc), exc.title, [(e["type"], e["loc"], e["msg"]) for e in exc.errors()]))
        return out

    with forkpoint.record(store=store) as rec:
        live = run()
    assert len(live) == len(calls)
    with forkpoint.replay(rec.session_path):
        assert run() == live


def test_an_exception_group_comes_back_with_its_exceptions(store: Path) -> None:
    """A tool that fans out with ``asyncio.TaskGroup`` raises an ``ExceptionGroup``. Its parts are
    no JSON, so it was rebuilt as a RecordedToolError: an agent's ``except* ApiError`` took
    another branch on replay, and the replay still said it reproduced. It comes back as its class,
    holding its exceptions (each whole, a group inside a group too)."""

    async def fail(exc: Exception) -> None:
        raise exc

    @forkpoint.tool
    async def fan_out(n: int) -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(fail(ApiError(429, "slow down")))
            tg.create_task(fail(ValueError(f"bad page {n}")))
            tg.create_task(fail(ExceptionGroup("inner", [KeyError("k")])))

    def run() -> list[Any]:
        seen: list[Any] = []
        try:
            asyncio.run(fan_out(3))
        except* ApiError as group:
            seen += [
                ("api", type(group).__name__, group.message, [(e.status, str(e)) for e in group.exceptions])
            ]
        except* ValueError as group:
            seen += [("value", [str(e) for e in group.exceptions])]
        except* KeyError as group:
            inner = group.exceptions[0]
            assert isinstance(inner, ExceptionGroup)
            seen += [("key", inner.message, [type(e).__name__ for e in inner.exceptions])]
        return seen

    with forkpoint.record(store=store) as rec:
        live = run()
    assert live == [
        ("api", "ExceptionGroup", "unhandled errors in a TaskGroup", [(429, "HTTP 429: slow down")]),
        ("value", ["bad page 3"]),
        ("key", "inner", ["KeyError"]),
    ]
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    assert rp.report()["reproduced"] is True
    (error,) = [e["error"] for e in Session.load(rec.session_path).by_type("tool_call")]
    assert error["type"] == "ExceptionGroup" and error["group_message"] == "unhandled errors in a TaskGroup"
    assert [e["type"] for e in error["exceptions"]] == ["ApiError", "ValueError", "ExceptionGroup"]


class Failures(ExceptionGroup):  # type: ignore[type-arg]
    """A library's group with a constructor of its own (no message argument)."""

    def __new__(cls, errors: list[Exception]) -> Failures:
        return super().__new__(cls, f"{len(errors)} failed", errors)

    def __init__(self, errors: list[Exception]) -> None:
        super().__init__(f"{len(errors)} failed", errors)


def test_an_exception_group_subclass_with_its_own_constructor_comes_back(store: Path) -> None:
    """``Failures(errors)`` takes no message, so neither ``cls(message, parts)`` nor
    ``cls(message)`` nor ``cls.__new__(cls)`` rebuilt it: the replay raised a RecordedToolError,
    and the agent's ``except* ValueError`` took another branch, without a word at recording."""

    @forkpoint.tool
    def check(n: int) -> None:
        raise Failures([ValueError(f"bad {n}"), OSError(2, "gone")])

    def run() -> list[Any]:
        seen: list[Any] = []
        try:
            check(1)
        except Failures as group:
            seen += [(type(group).__name__, str(group), len(group.exceptions))]
        try:
            check(2)
        except* ValueError as group:
            seen += [("value", [str(e) for e in group.exceptions])]
        except* OSError as group:
            seen += [("os", [(e.errno, e.strerror) for e in group.exceptions])]
        except* Exception as group:
            seen += [("other", repr(group))]
        return seen

    with forkpoint.record(store=store) as rec:
        live = run()
    assert live == [
        ("Failures", "2 failed (2 sub-exceptions)", 2),
        ("value", ["bad 2"]),
        ("os", [(2, "gone")]),
    ]
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    assert rp.report()["reproduced"] is True


class RateLimited(Exception):
    def __init__(self, retry_at: Any) -> None:
        super().__init__("rate limited")
        self.retry_at = retry_at


def test_an_os_error_comes_back_with_its_errno_and_filename_and_a_lost_attribute_is_said(
    tmp_path: Path, store: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A tool's ``open()`` of a missing file came back as a FileNotFoundError with errno and
    filename None (an OSError keeps filename outside ``__dict__``), and an attribute with no JSON
    form (a datetime) was left out without a word, "replay ok"."""
    missing = str(tmp_path / "nonexistent" / "app.toml")

    @forkpoint.tool
    def read_config(path: str) -> str:
        return Path(path).read_text()

    @forkpoint.tool
    def search(q: str) -> str:
        raise RateLimited(time.gmtime(0))

    def run() -> tuple[Any, ...]:
        try:
            read_config(missing)
        except FileNotFoundError as exc:
            got: tuple[Any, ...] = (exc.errno, exc.filename, str(exc))
        with pytest.raises(RateLimited):
            search("cats")
        return got

    with forkpoint.record(store=store) as rec:
        live = run()
    assert live[:2] == (2, missing)
    said = " ".join(capfd.readouterr().err.split())
    assert (
        "tool 'search' raised RateLimited with attributes forkpoint cannot store: retry_at (struct_time)"
        in said
    )
    assert "read_config" not in said
    with forkpoint.replay(rec.session_path):
        assert run() == live


@dataclasses.dataclass
class Pause:
    """What a framework's control-flow exception carries (LangGraph's ``GraphInterrupt`` holds its
    ``Interrupt`` objects as its args)."""

    question: str
    id: str


class Paused(Exception):
    def __init__(self, pauses: tuple[Pause, ...] = ()) -> None:
        super().__init__(pauses)


def test_exception_args_with_no_json_form_come_back_typed_and_ones_with_no_stored_form_are_said(
    store: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """An exception whose args are not JSON (a tuple of dataclasses) came back on replay with its
    message as its only arg, under "replay ok" and without a word: a LangGraph tool that called
    ``interrupt()`` raised a ``GraphInterrupt`` whose interrupts were strings on replay, and the
    program reading them failed."""

    @forkpoint.tool
    def ask(q: str) -> str:
        raise Paused((Pause(q, "p1"),))

    @forkpoint.tool
    def locked(q: str) -> str:
        raise Paused((Pause(q, "p2"), time.gmtime(0)))  # type: ignore[arg-type]

    def run() -> list[Any]:
        seen: list[Any] = []
        for tool in (ask, locked):
            with pytest.raises(Paused) as caught:
                tool("go?")
            seen.append((caught.value.args, str(caught.value)))
        return seen

    with forkpoint.record(store=store) as rec:
        live = run()
    said = " ".join(capfd.readouterr().err.split())
    assert "tool 'ask'" not in said, said
    assert "tool 'locked' raised Paused with arguments forkpoint cannot store: " in said, said
    with forkpoint.replay(rec.session_path) as rp:
        replayed = run()
    assert replayed[0] == live[0] and replayed[0][0] == ((Pause("go?", "p1"),),)
    assert replayed[1][1] == live[1][1]  # (made from its message: what it said live)
    assert rp.report()["reproduced"], rp.report()


def test_exception_args_holding_a_tuple_or_nan_come_back_as_they_were(store: Path) -> None:
    """Args that JSON holds only as something else (a tuple, a list; NaN, null) were stored so:
    rebuilt with them the exception said another message, so it was made from its message alone,
    its args one string, under "replay ok". They are stored typed, as args JSON has no form for."""

    @forkpoint.tool
    def fail(i: int) -> str:
        raise Paused(((1, 2), float("nan"), float("inf"))[i])  # type: ignore[arg-type]

    def run() -> list[str]:
        seen = []
        for i in range(3):
            with pytest.raises(Paused) as caught:
                fail(i)
            seen.append(repr(caught.value.args))
        return seen

    with forkpoint.record(store=store) as rec:
        live = run()
    assert live == ["((1, 2),)", "(nan,)", "(inf,)"]
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    assert rp.report()["reproduced"], rp.report()


@dataclasses.dataclass
class Quota:
    limit: int
    resets: datetime.datetime


def test_exception_attributes_with_no_json_form_come_back_as_they_were(store: Path) -> None:
    """An exception's attributes were stored as JSON only: a tuple came back a list, NaN None, and
    a datetime or a dataclass was left out (said), so a replay handed the program an exception
    without them under "replay ok". Those are stored typed, as its args are."""
    resets = datetime.datetime(2026, 12, 6, 12, 0, tzinfo=datetime.UTC)

    @forkpoint.tool
    def search(q: str) -> str:
        exc = RateLimited(resets)
        exc.window = (60, "s")  # type: ignore[attr-defined]
        exc.score = float("nan")  # type: ignore[attr-defined]
        exc.quota = Quota(100, resets)  # type: ignore[attr-defined]
        raise exc

    def run() -> str:
        with pytest.raises(RateLimited) as caught:
            search("cats")
        e: Any = caught.value
        return repr((e.retry_at, e.window, e.score, e.quota))

    with forkpoint.record(store=store) as rec:
        live = run()
    assert live == repr((resets, (60, "s"), float("nan"), Quota(100, resets)))
    [event] = forkpoint.Session.load(rec.session_path).by_type("tool_call")
    assert set(event["error"]["typed_attrs"]) == {"retry_at", "window", "score", "quota"}
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    assert rp.report()["reproduced"], rp.report()


class PathErr(Exception):
    """A constructor with a default: called with the message alone it would mean something else."""

    def __init__(self, path: str, reason: str = "unknown") -> None:
        super().__init__(path, reason)
        self.path, self.reason = path, reason

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@pytest.mark.slow
def test_rebuilt_exceptions_say_what_they_said_live(store: Path, tmp_path: Path) -> None:
    """An agent often sends ``str(exc)`` to the model: the rebuilt exception must say exactly what
    the live one said — builtins with extra state (an OSError's file name, a decode error's
    position), constructors with defaults, bytes attributes (a failed subprocess's stderr) — or
    the replay diverges at the next model call."""
    import subprocess

    missing = tmp_path / "missing.txt"

    @forkpoint.tool
    def fail(kind: str) -> str:
        if kind == "open":
            return open(missing).read()
        if kind == "path":
            raise PathErr("/a", "denied")
        if kind == "decode":
            return b"ok \xff".decode("utf-8")
        if kind == "shell":
            subprocess.run([sys.executable, "-c", "import sys; sys.stderr.write('bad'); sys.exit(3)"],
                           check=True, capture_output=True)  # fmt: skip
        raise ExceptionGroup("several", [ValueError("one"), KeyError("two")])

    kinds = ["open", "path", "decode", "shell", "group"]

    def run() -> list[tuple[type, str, Any]]:
        out = []
        for kind in kinds:
            try:
                fail(kind)
            except Exception as exc:  # noqa: BLE001 - what the agent would see
                out.append((type(exc), str(exc), getattr(exc, "stderr", None)))
        return out

    with forkpoint.record(store=store) as rec:
        live = run()
    assert [t for t, _, _ in live] == [
        FileNotFoundError,
        PathErr,
        UnicodeDecodeError,
        subprocess.CalledProcessError,
        ExceptionGroup,
    ]
    assert live[3][2] == b"bad"
    with forkpoint.replay(rec.session_path):
        again = run()
    assert again == live  # same class, same text, stderr bytes again; the group holding its parts


def test_replay_serves_results_without_running_bodies(tmp_path: Path, store: Path) -> None:
    side = tmp_path / "side.txt"
    search, next_id, *_ = make_tools(side)
    with forkpoint.record(store=store) as rec:
        r1 = search("dogs")
        ids = [next_id("a"), next_id("a"), next_id("a")]  # identical calls, different results
    assert ids == ["a-1", "a-2", "a-3"]
    side.write_text("")

    with forkpoint.replay(rec.session_path) as rp:
        assert search("dogs") == r1
        assert [next_id("a"), next_id("a"), next_id("a")] == ids  # recorded order
        with pytest.raises(forkpoint.Divergence) as exc:
            next_id("a")  # one more than recorded
    assert side.read_text() == ""
    msg = str(exc.value)
    assert "5th tool call" in msg and "(next_id)" in msg and "seq 2" in msg
    assert "already served" in msg and "once more" in msg
    assert exc.value.report["kind"] == "tool_call"
    assert rp.report()["matched"] == 4


def test_tool_called_with_other_arguments_diverges_with_a_diff(tmp_path: Path, store: Path) -> None:
    search = make_tools(tmp_path / "side.txt")[0]
    with forkpoint.record(store=store) as rec:
        search("dogs", limit=1)
    with forkpoint.replay(rec.session_path), pytest.raises(forkpoint.Divergence) as exc:
        search("cats", limit=1)
    msg = str(exc.value)
    assert "1st tool call" in msg and "seq 1" in msg
    assert "$.args.query" in msg and "dogs" in msg and "cats" in msg


def test_arguments_json_has_but_orjson_refuses_are_recorded_and_matched(store: Path) -> None:
    """A file name decoded with surrogateescape, an integer beyond 64 bits: recorded as given (they
    were stored as their type, so any other such argument matched them at replay), served at
    replay, and another one diverges with a diff that names both."""

    @forkpoint.tool
    def stat(path: str, inode: int) -> dict[str, Any]:
        return {"path": path, "inode": inode}

    with forkpoint.record(store=store) as rec:
        live = stat("caf\udce9.txt", 2**70)
    event = Session.load(rec.session_path).by_type("tool_call")[0]
    assert event["args"] == {"path": "caf\udce9.txt", "inode": 2**70}
    with forkpoint.replay(rec.session_path) as rp:
        assert stat("caf\udce9.txt", 2**70) == live
    assert rp.report()["matched"] == 1
    with forkpoint.replay(rec.session_path), pytest.raises(forkpoint.Divergence) as exc:
        stat("caf\udce8.txt", 2**70 + 1)
    msg = str(exc.value)
    assert '$.args.path: "caf\\udce9.txt" → "caf\\udce8.txt"' in msg  # (as JSON: no lone surrogate printed)
    assert f"$.args.inode: {2**70} → {2**70 + 1}" in msg


def test_objects_keyed_by_names_json_cannot_hold_are_recorded_and_matched(store: Path) -> None:
    """``{file name: size}`` with a name decoded with surrogateescape, in the arguments and the result:
    the recording stopped there (the log had no form for such a key); now it is recorded, served at
    replay, and another name diverges with a diff naming both."""

    @forkpoint.tool
    def sizes(names: dict[str, int]) -> dict[str, int]:
        return {name + ".bak": size * 2 for name, size in names.items()}

    with forkpoint.record(store=store) as rec:
        live = sizes({"caf\udce9.txt": 1, "ok": 2})
        after = sizes({"ok": 3})
    assert [e["result"] for e in Session.load(rec.session_path).by_type("tool_call")] == [live, after]
    with forkpoint.replay(rec.session_path) as rp:
        assert sizes({"caf\udce9.txt": 1, "ok": 2}) == live == {"caf\udce9.txt.bak": 2, "ok.bak": 4}
        assert sizes({"ok": 3}) == after
    assert rp.report()["matched"] == 2
    with forkpoint.replay(rec.session_path), pytest.raises(forkpoint.Divergence) as exc:
        sizes({"caf\udce8.txt": 1, "ok": 2})
    msg = str(exc.value).encode("utf-8", "backslashreplace").decode()
    assert "$.args.names['caf\\udce9.txt']" in msg and "$.args.names['caf\\udce8.txt']" in msg


@pytest.mark.parametrize(
    ("recorded", "other"),
    [
        (Path("caf\udce9.txt"), Path("caf\udce8.txt")),  # (a Path was stored as its type)
        ({2**70}, {2**70 + 1}),
        (frozenset({"caf\udce9.txt"}), frozenset({"other\udcff"})),
        ([2**70, {"k": "caf\udce9"}], [2**70, {"k": "caf\udce8"}]),
    ],
)
def test_a_value_converted_for_json_that_holds_such_values_is_matched_too(
    store: Path, recorded: Any, other: Any
) -> None:
    @forkpoint.tool
    def read(p: Any) -> str:
        return f"content of {p!s}"

    with forkpoint.record(store=store) as rec:
        live = read(recorded)
    with forkpoint.replay(rec.session_path):
        assert read(recorded) == live
    with forkpoint.replay(rec.session_path), pytest.raises(forkpoint.Divergence):
        read(other)


def _nested(depth: int) -> list[Any]:
    """A list nested ``depth`` lists deep."""
    outer: list[Any] = []
    inner = outer
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return outer


def test_an_argument_that_contains_itself_or_is_nested_deep_is_recorded_not_raised_into_the_program(
    store: Path,
) -> None:
    """A list that holds itself, a dict that holds itself, a list nested 3,000 deep: building the
    call's arguments walked into them until RecursionError, raised into the program while
    recording. Now what orjson cannot write of them is kept as its type only, and they replay."""
    looped: list[Any] = [1]
    looped.append(looped)
    mapped: dict[str, Any] = {"a": 1}
    mapped["self"] = mapped
    deep = _nested(3000)

    @forkpoint.tool
    def size(x: Any) -> str:
        return type(x).__name__

    calls = [looped, mapped, deep]
    with forkpoint.record(store=store) as rec:
        live = [size(x) for x in calls]
    assert live == ["list", "dict", "list"]
    args = [e["args"]["x"] for e in Session.load(rec.session_path).by_type("tool_call")]
    assert args[0] == [1, {"$type": "builtins.list"}]
    assert args[1] == {"a": 1, "self": {"$type": "builtins.dict"}}
    with forkpoint.replay(rec.session_path) as rp:
        assert [size(x) for x in calls] == live
    assert rp.report()["reproduced"]


@pytest.mark.parametrize("depth", [254, 300])
def test_an_argument_orjson_writes_but_the_log_cannot_hold_is_cut_to_its_type(
    store: Path, depth: int
) -> None:
    """An argument nested 254 or 300 deep: orjson wrote it (or the part below its limit), but the
    event around it went past orjson's 254 levels, so the log refused the event and the whole
    recording stopped. Now containers past 120 levels are kept as their type only."""

    @forkpoint.tool
    def size(x: Any) -> int:
        return 1

    with forkpoint.record(store=store) as rec:
        assert size(_nested(depth)) == size([1]) == 1
    assert rec.failure is None
    assert len(Session.load(rec.session_path).by_type("tool_call")) == 2
    with forkpoint.replay(rec.session_path) as rp:
        assert size(_nested(depth)) == size([1]) == 1
    assert rp.report()["reproduced"]


@pytest.mark.parametrize("leaf", ["tuples", 2**70, "\udc80"], ids=["tuples", "big-int", "surrogate"])
def test_an_argument_of_deep_tuples_or_with_values_only_pythons_json_writes_is_cut_too(
    store: Path, leaf: Any
) -> None:
    """Tuples nested 253 deep, or lists nested 260 deep around an integer beyond 64 bits or a lone
    surrogate: orjson's depth check let the tuples through, and Python's json (which writes the
    other two) has none, so the argument came back whole, the log refused the event around it, and
    the whole recording stopped. The depth is now checked on what was written, however it was."""
    if leaf == "tuples":
        value: Any = []
        for _ in range(253):
            value = (value,)
    else:
        value = _nested(260)
        inner = value
        while inner:
            inner = inner[0]
        inner.append(leaf)

    @forkpoint.tool
    def size(x: Any) -> int:
        return 1

    with forkpoint.record(store=store) as rec:
        assert size(value) == size([1]) == 1
    assert rec.failure is None
    assert len(Session.load(rec.session_path).by_type("tool_call")) == 2
    with forkpoint.replay(rec.session_path) as rp:
        assert size(value) == size([1]) == 1
    assert rp.report()["reproduced"]


def test_a_result_nested_deeper_than_the_log_holds_is_unrecorded_and_the_recording_goes_on(
    store: Path,
) -> None:
    """A result nested 300 lists deep: the log's writer (orjson) refused the event, which stopped the
    whole recording, so every later call was lost too. Now that call alone is unrecorded, said, and
    the replay stops at it."""

    @forkpoint.tool
    def tree() -> list[Any]:
        return _nested(300)

    @forkpoint.tool
    def leaf() -> int:
        return 1

    with forkpoint.record(store=store) as rec:
        assert len(tree()) == 1 and leaf() == 1
    assert rec.failure is None
    first, second = Session.load(rec.session_path).by_type("tool_call")
    assert first["unrecorded"]["type"] == "(too deep)" and second["result"] == 1
    with forkpoint.replay(rec.session_path), pytest.raises(forkpoint.Divergence, match="nested more than"):
        tree()


@pytest.mark.parametrize("limit", [4300, 0])
def test_an_integer_of_more_digits_than_a_reader_converts_is_unrecorded_and_the_recording_goes_on(
    store: Path, limit: int
) -> None:
    """A result of 10**5000. Under Python's default limit (4,300 digits) its ``$int`` could not be
    written: the whole recording stopped. In a program that lifted the limit
    (``sys.set_int_max_str_digits(0)``) it was written, and no reader could read it back: verify
    failed and the replay could not start. Now that call alone is unrecorded, said, and the session reads."""
    before = sys.get_int_max_str_digits()

    @forkpoint.tool
    def huge() -> int:
        return 10**5000

    @forkpoint.tool
    def leaf() -> int:
        return 1

    sys.set_int_max_str_digits(limit)
    try:
        with forkpoint.record(store=store) as rec:
            assert huge() == 10**5000 and leaf() == 1
    finally:
        sys.set_int_max_str_digits(before)
    assert rec.failure is None
    first, second = Session.load(rec.session_path).by_type("tool_call")
    assert first["unrecorded"]["type"] == "(int too long)" and second["result"] == 1
    with (
        forkpoint.replay(rec.session_path),
        pytest.raises(forkpoint.Divergence, match="more than 4,000 digits"),
    ):
        huge()


def test_a_line_holding_an_integer_no_reader_converts_is_refused() -> None:
    """The log's own check, for what reaches it past the tool wrapper (a note's data)."""
    from forkpoint.log.codec import encode_exotic

    assert encode_exotic({"n": 10**4000}, "here") == {"n": {"$int": str(10**4000)}}
    with pytest.raises(SessionError, match="here: an integer of more than 4,000 digits"):
        encode_exotic({"n": 10**5000}, "here")


@pytest.mark.parametrize(("recorded", "other"), [(10**20, 1e20), (2**70, float(2**70)), (1, True), (1, 1.0)])
def test_a_call_with_defaults_left_out_matches_by_json_not_by_python_equality(
    store: Path, recorded: Any, other: Any
) -> None:
    """The fallback for a tool that gained a parameter compared values with ``==``, which takes
    ``10**20`` for ``1e20`` and ``1`` for ``True``: the match key tells them apart, and now so does it."""

    @forkpoint.tool
    def f(x: Any, unit: str = "b") -> str:
        return repr(x)

    with forkpoint.record(store=store) as rec:
        f(recorded)
    with forkpoint.replay(rec.session_path), pytest.raises(forkpoint.Divergence):
        f(other)


def test_a_tool_that_gained_an_optional_parameter_still_matches_its_recording(store: Path) -> None:
    """Agent code evolves: a tool gets a new parameter with a default, the call sites stay as they
    were. The recordings made before must still replay (a regression suite should not break
    because a tool grew an option), while a call that passes the new parameter is a different call."""

    @forkpoint.tool(name="quote")
    def quote_v1(ticker: str) -> float:
        return 1.0

    @forkpoint.tool(name="quote")
    def quote_v2(ticker: str, exchange: str = "NYSE") -> float:
        raise AssertionError("not run on replay")

    with forkpoint.record(store=store) as rec:
        assert quote_v1("ACME") == 1.0
    with forkpoint.replay(rec.session_path) as rp:
        assert quote_v2("ACME") == 1.0  # the default is not part of what the caller asked
    assert rp.report()["matched"] == 1
    with forkpoint.replay(rec.session_path), pytest.raises(forkpoint.Divergence) as exc:
        quote_v2("ACME", exchange="LSE")
    assert "$.args.exchange" in str(exc.value)
    with forkpoint.replay(rec.session_path), pytest.raises(forkpoint.Divergence):
        quote_v2("ACME", "NYSE")  # passed explicitly, even with the default's value: asked for

    # A tool that already had an optional parameter gains another: the recorded call still matches,
    # the one it had being recorded (and equal), the new one left out.
    @forkpoint.tool(name="search")
    def search_v1(q: str, k: int = 5) -> list[str]:
        return ["r1"]

    @forkpoint.tool(name="search")
    def search_v2(q: str, k: int = 5, lang: str = "en") -> list[str]:
        raise AssertionError("not run on replay")

    with forkpoint.record(store=store) as rec:
        assert search_v1("x") == ["r1"]
    with forkpoint.replay(rec.session_path) as rp:
        assert search_v2("x") == ["r1"]
    assert rp.report()["matched"] == 1
    with forkpoint.replay(rec.session_path), pytest.raises(forkpoint.Divergence):
        search_v2("x", k=9)  # a different k than recorded: another call


def test_dataclass_results_come_back_as_dataclasses(tmp_path: Path, store: Path) -> None:
    """An agent that reads ``hit.title`` off a tool's dataclass must not get a dict on replay (an
    AttributeError the live run never had)."""
    best = make_tools(tmp_path / "side.txt")[5]
    with forkpoint.record(store=store) as rec:
        assert best("q") == Hit("q", 0.5)
    with forkpoint.replay(rec.session_path):
        again = best("q")
    assert type(again) is Hit and again == Hit("q", 0.5) and again.title == "q"


# ----------------------------------------------------------------------------- import hook


@pytest.fixture
def hook_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A package ``<pkg>`` with ``mod.f``, ``mod.C.m`` and ``user`` (which does ``from .mod import``)."""
    pkg = f"fp_hook_{secrets.token_hex(4)}"
    root = tmp_path / "src"
    (root / pkg).mkdir(parents=True)
    side = tmp_path / "hook_side.txt"
    (root / pkg / "__init__.py").write_text("")
    (root / pkg / "mod.py").write_text(
        textwrap.dedent(
            f"""
            SIDE = {str(side)!r}

            def f(x, y=2):
                with open(SIDE, "a") as fh:
                    fh.write("f\\n")
                return {{"sum": x + y}}

            class C:
                def __init__(self, base):
                    self.base = base

                def m(self, x):
                    with open(SIDE, "a") as fh:
                        fh.write("m\\n")
                    return [self.base, x]
            """
        )
    )
    (root / pkg / "user.py").write_text(
        f"from {pkg}.mod import C, f\n\n\ndef use():\n    return f(1), f(5, y=10), C(7).m(3)\n"
    )
    monkeypatch.syspath_prepend(str(root))
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    yield pkg, side
    for name in [m for m in sys.modules if m == pkg or m.startswith(pkg + ".")]:
        del sys.modules[name]


def test_import_hook_wraps_before_from_import_sees_it(hook_package: Any, store: Path) -> None:
    pkg, side = hook_package
    assert f"{pkg}.mod" not in sys.modules
    targets_mod.install_import_hook([f"{pkg}.mod:f", f"{pkg}.mod:C.m"])
    user = __import__(f"{pkg}.user", fromlist=["use"])
    assert getattr(user.f, "__forkpoint_tool__", None) == "f"
    assert getattr(user.C.m, "__forkpoint_tool__", None) == "C.m"

    with forkpoint.record(store=store) as rec:
        recorded = user.use()
    assert recorded == ({"sum": 3}, {"sum": 15}, [7, 3])
    calls = Session.load(rec.session_path).by_type("tool_call")
    assert [(c["tool"], c["args"]) for c in calls] == [
        ("f", {"x": 1, "y": 2}),
        ("f", {"x": 5, "y": 10}),
        ("C.m", {"x": 3}),
    ]
    assert side.read_text() == "f\nf\nm\n"

    with forkpoint.replay(rec.session_path) as rp:
        assert user.use() == recorded
    assert side.read_text() == "f\nf\nm\n"  # no body ran on replay
    assert rp.report()["matched"] == 3


def test_import_hook_on_an_already_imported_module(
    hook_package: Any, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pkg, side = hook_package
    mod = __import__(f"{pkg}.mod", fromlist=["f"])
    targets_mod.install_import_hook([f"{pkg}.mod:f"])
    assert getattr(mod.f, "__forkpoint_tool__", None) == "f"
    with pytest.raises(ValueError, match="MODULE:FUNCTION"):
        targets_mod.install_import_hook(["no_colon_here"])
    # A typo must not crash the program being recorded: it is reported on stderr instead.
    targets_mod.install_import_hook([f"{pkg}.mod:nope"])
    assert "has no nope" in capsys.readouterr().err


def test_a_target_imported_by_name_before_recording_began_is_recorded_there_too(
    hook_package: Any, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``from pkg.mod import f`` ran before ``forkpoint.record(tools=["pkg.mod:f"])``: the wrapper
    replaced ``mod.f`` only, the program's ``f`` stayed the function, and its calls were neither
    recorded nor said (the recording claimed the program never called it). The names modules
    imported it by get the wrapper too."""
    pkg, side = hook_package
    user = __import__(f"{pkg}.user", fromlist=["use"])
    with forkpoint.record(store=store, tools=[f"{pkg}.mod:f"]) as rec:
        recorded = user.use()
    calls = Session.load(rec.session_path).by_type("tool_call")
    assert [(c["tool"], c["args"]) for c in calls] == [("f", {"x": 1, "y": 2}), ("f", {"x": 5, "y": 10})]
    assert "took this function" not in capsys.readouterr().err
    with forkpoint.replay(rec.session_path, tool_targets=[f"{pkg}.mod:f"]) as rp:
        assert user.use() == recorded
    assert side.read_text() == "f\nf\nm\nm\n"  # (f ran when recorded only; C.m, no tool, twice)
    assert rp.report()["reproduced"] is True


@contextlib.contextmanager
def _scratch_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> Iterator[Any]:
    """A module of ``source``, imported under a name of its own, and forgotten afterwards."""
    name = f"fp_scratch_{secrets.token_hex(4)}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield __import__(name)
    finally:
        sys.modules.pop(name, None)


def test_a_target_held_under_another_name_of_its_module_is_recorded_there_too(
    tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The names other modules imported a target by got the wrapper, but not another name of its
    own module (``lookup = search``): calls through it were neither recorded nor said."""
    source = "def search(q):\n    return 'found ' + q\n\nlookup = search\n"
    with _scratch_module(tmp_path, monkeypatch, source) as aliased:
        with forkpoint.record(store=store, tools=[f"{aliased.__name__}:search"]) as rec:
            assert aliased.lookup("a") == "found a"
    assert "took this function" not in capsys.readouterr().err
    assert [c["args"] for c in Session.load(rec.session_path).by_type("tool_call")] == [{"q": "a"}]


def test_a_method_target_a_module_took_by_name_is_recorded_there_too(
    hook_package: Any, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``m = C.m`` (or a static method's function) in a module before ``tools=["mod:C.m"]``: the
    names other modules imported a function target by got the wrapper, a method's were only said,
    as "a dict"."""
    pkg, _ = hook_package
    mod = __import__(f"{pkg}.mod", fromlist=["C"])
    took = {"m": mod.C.m, "__builtins__": __builtins__}  # (a module's globals)
    with forkpoint.record(store=store, tools=[f"{pkg}.mod:C.m"]) as rec:
        assert took["m"](mod.C(7), 3) == [7, 3]
    assert "took this function" not in capsys.readouterr().err
    assert [c["args"] for c in Session.load(rec.session_path).by_type("tool_call")] == [{"x": 3}]


def test_a_bound_method_target_keeps_its_instance(
    tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A target that is a bound method (``search = Client().search``) was wrapped as its function:
    the program's call lost ``self`` and raised TypeError (missing argument 'q')."""
    source = (
        "class Client:\n    base = 'http://127.0.0.1:9'\n\n    def search(self, q):\n        return self.base + '?q=' + q\n\n"
        "search = Client().search\n"
    )
    with _scratch_module(tmp_path, monkeypatch, source) as mod:
        with forkpoint.record(store=store, tools=[f"{mod.__name__}:search"]) as rec:
            assert mod.search("a") == "http://127.0.0.1:9?q=a"
    assert [c["args"] for c in Session.load(rec.session_path).by_type("tool_call")] == [{"q": "a"}]


class Query:
    def __init__(self, text: str) -> None:
        self.text = text


def test_an_argument_of_the_programs_own_class_kept_as_its_type_only_is_said_once(
    store: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """An argument with no JSON form is kept as its type: ``search(Query("cats"))`` recorded and
    ``search(Query("dogs"))`` replayed was served the cats' result, and nothing was said. A class
    of the program's own is now said once, with how to match on it; a library's object (a lock,
    a framework's context) is not."""
    import threading

    @forkpoint.tool
    def search(q: Query, lock: Any = None) -> str:
        return f"results for {q.text}"

    with forkpoint.record(store=store):
        search(Query("cats"), threading.Lock())
        search(Query("birds"), threading.Lock())
    said = " ".join(capfd.readouterr().err.split())
    assert said.count("argument 'q' is a tests.capture.test_tools.Query, which has no JSON form") == 1, said
    assert "forkpoint.register_encoder(Query, to_json)" in said and "'lock'" not in said, said


def test_a_tool_written_above_staticmethod_or_classmethod_records_and_replays(store: Path) -> None:
    """``@forkpoint.tool`` over ``@staticmethod`` or ``@classmethod`` raised a raw TypeError."""
    ran: list[str] = []

    class Shell:
        @forkpoint.tool
        @staticmethod
        def ls(path: str) -> str:
            ran.append(path)
            return "listing " + path

        @forkpoint.tool
        @classmethod
        def kind(cls, x: int) -> str:
            ran.append(str(x))
            return f"{cls.__name__}{x}"

    def run() -> list[str]:
        return [Shell.ls("/etc"), Shell().ls("/usr"), Shell.kind(1)]

    with forkpoint.record(store=store) as rec:
        live = run()
    assert live == ["listing /etc", "listing /usr", "Shell1"] and len(ran) == 3
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    assert len(ran) == 3 and rp.report()["matched"] == 3


class Halt(BaseException):
    """A program's own BaseException: not an error, an exit or a cancellation forkpoint knows."""


def test_a_tool_that_exits_or_is_interrupted_is_recorded_and_does_so_again_on_replay(
    store: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A ``finish`` tool that calls ``sys.exit`` ended the recorded run, unrecorded and unsaid; the
    replay then diverged there. An exit and a Ctrl-C inside a tool are recorded and raised again."""
    ran: list[str] = []

    @forkpoint.tool
    def finish(code: int) -> None:
        ran.append("finish")
        sys.exit(code)

    @forkpoint.tool
    def slow() -> None:
        ran.append("slow")
        raise KeyboardInterrupt

    @forkpoint.tool
    def halt() -> None:
        ran.append("halt")
        raise Halt

    def run() -> list[Any]:
        out: list[Any] = []
        with pytest.raises(SystemExit) as exited:
            finish(3)
        out.append(exited.value.code)
        with pytest.raises(KeyboardInterrupt):
            slow()
        return out

    with forkpoint.record(store=store) as rec:
        live = run()
        with pytest.raises(Halt):
            halt()
    assert live == [3] and ran == ["finish", "slow", "halt"]
    said = " ".join(capfd.readouterr().err.split())
    assert f"the call of tool 'halt' was interrupted by {__name__}.Halt: it is not recorded" in said
    errors = [c["error"] for c in Session.load(rec.session_path).by_type("tool_call")]
    assert [(e["type"], e["module"]) for e in errors] == [
        ("SystemExit", "builtins"),
        ("KeyboardInterrupt", "builtins"),
    ]
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    assert ran == ["finish", "slow", "halt"]  # no body ran
    assert rp.report()["matched"] == 2 and rp.report()["divergence"] is None


def test_a_tool_call_cancelled_by_the_programs_timeout_times_out_again_on_replay(store: Path) -> None:
    """An async tool cancelled by ``asyncio.wait_for`` was not recorded, so a replay of the run that
    went on after the timeout diverged at it. It is recorded as cancelled, and on replay the call
    waits until the program's own timeout cancels it again."""
    ran: list[str] = []

    @forkpoint.tool
    async def crawl(url: str) -> str:
        ran.append(url)
        await asyncio.sleep(30)
        return "never"

    @forkpoint.tool
    async def summarize(text: str) -> str:
        ran.append("summarize")
        return text.upper()

    async def agent(timeout: float | None) -> str:
        try:
            page = await asyncio.wait_for(crawl("http://127.0.0.1:9/slow"), timeout)
        except TimeoutError:
            page = "timed out"
        return await summarize(page)

    with forkpoint.record(store=store) as rec:
        assert asyncio.run(agent(0.2)) == "TIMED OUT"
    (cancelled, _) = Session.load(rec.session_path).by_type("tool_call")
    assert (
        cancelled["error"]["type"] == "CancelledError"
        and cancelled["error"]["module"] == "asyncio.exceptions"
    )
    # wait_for arms its timer before the tool's task first runs, so the recorded span can fall a
    # little short of 200 ms; what matters is that it lasted until the timeout, not 30 s or 0.
    assert 100 <= cancelled["duration_ms"] < 5000

    with forkpoint.replay(rec.session_path) as rp:
        t0 = time.monotonic()
        assert asyncio.run(agent(0.2)) == "TIMED OUT"
        took = time.monotonic() - t0
    assert ran == ["http://127.0.0.1:9/slow", "summarize"]  # no body ran
    assert rp.report()["matched"] == 2 and rp.report()["divergence"] is None
    assert took < 5  # the program's own timeout, not the tool's 30 s

    # A run that no longer times out is told so, in a bounded time, not left waiting.
    with forkpoint.replay(rec.session_path):
        with pytest.raises(
            forkpoint.Divergence, match=r"cancelled this call after \d+ ms, before it returned"
        ):
            asyncio.run(agent(None))
    assert ran == ["http://127.0.0.1:9/slow", "summarize"]


class _Slotted:
    """A result with no stored form: forkpoint says so on stderr while recording."""

    __slots__ = ("n",)

    def __init__(self) -> None:
        self.n = 1


@pytest.mark.parametrize("stderr", ["closed", "none"])
def test_what_forkpoint_says_on_a_stderr_the_program_closed_or_removed_does_not_raise_into_it(
    store: Path, monkeypatch: pytest.MonkeyPatch, stderr: str
) -> None:
    """A program that closed ``sys.stderr`` or set it to None (a daemon, pythonw) never writes there;
    forkpoint's warning about a result it cannot store did, and raised ValueError or
    AttributeError out of the tool call into the program."""

    @forkpoint.tool
    def make() -> _Slotted:
        return _Slotted()

    gone = open(os.devnull, "w")  # noqa: SIM115 (closed on purpose)
    gone.close()
    monkeypatch.setattr(sys, "stderr", gone if stderr == "closed" else None)
    with forkpoint.record(store=store) as rec:
        assert make().n == 1
    monkeypatch.undo()
    assert Session.load(rec.session_path).by_type("tool_call")[0]["unrecorded"]


class Rejected(Exception):
    """A tool's exception carrying what it was given, as ``.payload``."""

    def __init__(self, message: str, payload: Any) -> None:
        super().__init__(message)
        self.payload = payload


def test_a_tool_exception_holding_a_value_that_contains_itself_is_recorded_without_it(store: Path) -> None:
    """An exception whose args or attributes hold a list that contains itself: the walk over them
    ran into RecursionError, the whole call went unrecorded ("nested too deeply") and a replay
    stopped there. Now what has no JSON form is left out, as for any such attribute, and it replays."""
    looped: list[Any] = ["x"]
    looped.append(looped)

    @forkpoint.tool
    def check(which: str) -> None:
        if which == "args":
            raise ValueError(looped)
        raise Rejected("rejected", {"seen": looped})

    def run() -> list[tuple[str, str]]:
        out = []
        for which in ("args", "attrs"):
            with pytest.raises(Exception) as exc:
                check(which)
            out.append((type(exc.value).__name__, str(exc.value)))
        return out

    with forkpoint.record(store=store) as rec:
        live = run()
    assert [e["error"]["type"] for e in Session.load(rec.session_path).by_type("tool_call")] == [
        "ValueError",
        "Rejected",
    ]
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live == [("ValueError", "['x', [...]]"), ("Rejected", "rejected")]
    assert rp.report()["reproduced"]


class FlakyError(Exception):
    """A custom exception whose ``__str__`` needs what its subclass's ``__init__`` never set."""

    def __init__(self, response: dict[str, Any]) -> None:
        self.response = response

    def __str__(self) -> str:
        return f"API error {self.response['status']}"


class QuotaError(FlakyError):
    def __init__(self) -> None:  # forgets super().__init__: str() of it raises AttributeError
        pass


def test_a_tool_exception_that_cannot_be_printed_or_a_mock_argument_leave_the_run_as_it_was(
    store: Path,
) -> None:
    """Recording an exception whose str() raised replaced it by that AttributeError, so the
    program's own ``except FlakyError`` no longer caught it; a MagicMock argument (it answers
    model_dump with another mock) recursed for half a minute, then raised RecursionError."""
    from unittest import mock

    @forkpoint.tool
    def fetch(url: str) -> str:
        raise QuotaError

    @forkpoint.tool
    def search(client: Any, query: str) -> str:
        return f"{len(client.search(query))} hits"

    def run() -> list[str]:
        out = []
        try:
            fetch("http://127.0.0.1:9/")
        except FlakyError as exc:
            out.append(type(exc).__name__)
        client = mock.MagicMock()
        client.search.return_value = [1, 2, 3]
        out.append(search(client, "cats"))
        return out

    with forkpoint.record(store=store) as rec:
        t0 = time.monotonic()
        live = run()
        assert time.monotonic() - t0 < 5
    assert live == ["QuotaError", "3 hits"]
    error, searched = Session.load(rec.session_path).by_type("tool_call")
    assert error["error"]["message"].startswith("<str() of this QuotaError raised AttributeError")
    assert searched["args"] == {"client": {"$type": "unittest.mock.MagicMock"}, "query": "cats"}
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    assert rp.report()["matched"] == 2


def test_a_tool_exception_comes_back_raised_from_its_cause(store: Path) -> None:
    """``raise ValueError("wrapped") from exc``: retry logic reads ``__cause__``, which was None on
    replay."""

    @forkpoint.tool
    def lookup(key: str) -> str:
        try:
            return {}[key]
        except KeyError as exc:
            raise ApiError(404, f"no {key}") from exc

    def run() -> tuple[Any, ...]:
        try:
            lookup("k")
        except ApiError as exc:
            cause = exc.__cause__
            return type(exc), exc.status, type(cause), str(cause), exc.__suppress_context__
        raise AssertionError("lookup did not raise")

    with forkpoint.record(store=store) as rec:
        live = run()
    assert live == (ApiError, 404, KeyError, "'k'", True)
    (event,) = Session.load(rec.session_path).by_type("tool_call")
    assert [f[2] for f in event["error"]["cause"].pop("frames")] == ["lookup"]
    assert event["error"]["cause"] == {
        "type": "KeyError",
        "module": "builtins",
        "message": "'k'",
        "args": ["k"],
    }
    with forkpoint.replay(rec.session_path):
        assert run() == live


def test_a_cancellation_from_inside_a_tool_is_raised_again_at_once(store: Path) -> None:
    """A tool that cancelled its own subtask let the CancelledError out, and its caller caught it;
    nobody had cancelled the caller. The replay waited to be cancelled, as for a timeout, and
    diverged a second later."""

    @forkpoint.tool
    async def fetch(url: str) -> str:
        sub = asyncio.ensure_future(asyncio.sleep(10))
        await asyncio.sleep(0)
        sub.cancel()
        await sub  # raises CancelledError out of the tool
        return "never"

    async def agent() -> str:
        try:
            return await fetch("http://127.0.0.1:9/")
        except asyncio.CancelledError:
            return "the fetch was cancelled"

    with forkpoint.record(store=store) as rec:
        assert asyncio.run(agent()) == "the fetch was cancelled"
    (event,) = Session.load(rec.session_path).by_type("tool_call")
    assert event["error"]["type"] == "CancelledError" and event["error"]["inside"] is True
    t0 = time.monotonic()
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(agent()) == "the fetch was cancelled"
    assert time.monotonic() - t0 < 0.9 and rp.report()["divergence"] is None


def test_a_tool_that_changes_its_arguments_in_place_is_said_while_recording(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tool that adds to a dict it was given: on replay its body does not run, the dict stays as
    it was, and the program went another way under "replay ok" without a word. Recording says so,
    once per tool; a tool that leaves its arguments alone says nothing."""

    @forkpoint.tool
    def remember(notes: dict[str, str], key: str) -> bool:
        notes[key] = "seen"
        return True

    @forkpoint.tool
    async def look(notes: dict[str, str], key: str) -> bool:
        return key in notes

    notes: dict[str, str] = {}
    with forkpoint.record(store=store):
        remember(notes, "a")
        remember(notes, "b")
        asyncio.run(look(notes, "a"))
    said = capsys.readouterr().err
    assert said.count("changed its argument") == 1, said
    assert "tool 'remember' changed its argument 'notes' in place" in " ".join(said.split())
    assert "look" not in said


def test_a_method_tool_whose_class_has_a_failing_dict_property_runs_as_without_forkpoint(store: Path) -> None:
    """A class of the program's whose ``__dict__`` is a property that raises: its method, a tool,
    raised that error into the program while recording (forkpoint read the object's attributes),
    which it does not without forkpoint. Its calls now run, and replay, as they would."""

    class Odd:
        @property
        def __dict__(self) -> dict[str, Any]:  # type: ignore[override]
            raise RuntimeError("no attributes here")

        @forkpoint.tool
        def echo(self, q: str) -> str:
            return q

    replays_alike(store, lambda: [Odd().echo("x"), Odd().echo("y")], ["x", "y"])


def test_a_method_tool_that_changes_its_object_is_said_while_recording(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A method tool that keeps a history in ``self`` (``Cart.add``, a ``Shell.run`` that appends to
    ``self.history``): on replay the body does not run and the object stays as it was, under
    "replay ok". Recording says so, as it does for an argument; a method that only reads says
    nothing."""

    class Cart:
        def __init__(self) -> None:
            self.items: list[str] = []
            self.total = 0

        @forkpoint.tool
        def add(self, item: str) -> int:
            self.items.append(item)
            return len(self.items)

        @forkpoint.tool
        async def count(self) -> int:
            return len(self.items)

        @forkpoint.tool
        def charge(self, amount: int) -> int:
            self.total += amount
            return self.total

    class Closed:
        def __len__(self) -> int:
            raise RuntimeError("connection closed")

    class Searcher:
        def __init__(self) -> None:
            self.rows = Closed()  # (its length cannot be read: the tool still runs as it would)

        @functools.cached_property
        def index(self) -> dict[str, int]:
            return {"a": 1}

        @forkpoint.tool
        def search(self, q: str) -> int:
            return self.index.get(q, 0)  # (fills a cache: no change a replay misses)

    cart = Cart()
    with forkpoint.record(store=store):
        cart.add("x")
        cart.add("y")
        asyncio.run(cart.count())
        cart.charge(5)
        assert Searcher().search("a") == 1
    said = " ".join(capsys.readouterr().err.split())
    assert said.count("in place while it ran") == 2, said
    assert (
        "tool 'add' changed self.items in place" in said
        and "tool 'charge' changed self.total in place" in said
    )
    assert "'count'" not in said and "'search'" not in said


def _check(value: str) -> str:
    if not value.isdigit():
        raise ValueError(f"{value!r} is not a number")
    return value


def test_a_replayed_tool_exception_has_the_traceback_it_had_live(store: Path) -> None:
    """A recorded exception was raised again from forkpoint's serving code: its traceback named
    forkpoint's lines where the tool's had been, and a framework that shows the model (or a log)
    the traceback sent something else on replay. It is raised through frames that format as the
    live ones: the same files, lines, functions and underlined spans, its cause's too."""

    @forkpoint.tool
    def parse(value: str) -> int:
        try:
            return int(_check(value))
        except ValueError as exc:
            raise LookupError(f"no number in {value!r}") from exc

    @forkpoint.tool
    async def aparse(value: str) -> int:
        await asyncio.sleep(0)
        return {"one": 1}[value]

    def run() -> list[str]:
        out = []
        for call in (lambda: parse("x"), lambda: asyncio.run(aparse("two"))):
            try:
                call()
            except Exception as exc:
                out.append("".join(traceback.format_exception(exc)))
        return out

    with forkpoint.record(store=store) as rec:
        live = run()
    assert "_check(value)" in live[0] and "direct cause" in live[0] and 'return {"one": 1}[value]' in live[1]
    with forkpoint.replay(rec.session_path) as rp:
        again = run()
    assert again == live
    assert rp.report()["reproduced"]


def formatted(call: Any) -> str:
    """The traceback ``call()`` raised, as ``traceback`` prints it."""
    try:
        call()
    except Exception as exc:
        return "".join(traceback.format_exception(exc))
    raise AssertionError("the tool did not raise")


def test_a_failing_tools_traceback_is_the_same_with_forkpoint_recording_or_not(store: Path) -> None:
    """Recording put forkpoint's frames (the wrapper, the call's recording, the body's lambda)
    between the program's call of a tool and the tool's body, so a traceback the program logs, or
    sends a model as DSPy does, read otherwise than it does without forkpoint. A tool's exception
    leaves forkpoint without them, recorded, replayed or neither; one raised by a builtin made a
    tool has the caller's frame only, as when the builtin is called directly."""
    import math

    @forkpoint.tool
    def parse(value: str) -> int:
        return int(_check(value))

    @forkpoint.tool
    async def aparse(value: str) -> int:
        await asyncio.sleep(0)
        return {"one": 1}[value]

    sqrt = forkpoint.tool(math.sqrt, name="sqrt")

    def run() -> list[str]:
        return [
            formatted(lambda: parse("x")),
            formatted(lambda: asyncio.run(aparse("two"))),
            formatted(lambda: sqrt(-1)),
        ]

    plain = run()
    # (the frames: the test's, its lambda's, and the tool's body's)
    assert [text.count('File "') for text in plain] == [4, 6, 2], plain
    ours = os.path.dirname(forkpoint.__file__)
    assert not any(ours in text for text in plain), plain[0]
    with forkpoint.record(store=store) as rec:
        live = run()
    assert live == plain
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == plain
    assert rp.report()["reproduced"]


def test_a_generator_tools_traceback_midway_is_the_same_with_forkpoint_recording_or_not(
    store: Path,
) -> None:
    """A generator tool that raised midway left its exception with forkpoint's frames in (the
    wrapper's ``yield from``, the recording's step), recorded or not, and its replay raised it from
    forkpoint's ``raise end`` with none of the tool's frames (they were not recorded). It reads as
    the generator's own does now: the tool's frames only, on replay made again from the record."""

    def numbers(value: str) -> Any:
        yield 1
        yield int(_check(value))

    async def anumbers(value: str) -> Any:
        yield 1
        yield int(_check(value))

    async def consumed(agen: Any) -> list[Any]:
        return [item async for item in agen]

    def run(gen: Any, agen: Any) -> list[str]:
        return [formatted(lambda: list(gen("x"))), formatted(lambda: asyncio.run(consumed(agen("x"))))]

    plain = run(numbers, anumbers)
    tools = forkpoint.tool(numbers), forkpoint.tool(anumbers)
    assert run(*tools) == plain
    with forkpoint.record(store=store) as rec:
        assert run(*tools) == plain
    with forkpoint.replay(rec.session_path) as rp:
        assert run(*tools) == plain
    assert rp.report()["reproduced"]


def test_a_replayed_tool_exception_keeps_what_it_was_raised_while_handling(store: Path) -> None:
    """A tool that raises while handling another exception (``except KeyError: raise ValueError``)
    has a traceback that shows that one first ("During handling of the above exception…"), and DSPy
    sends it to the model. Only a ``from`` cause was recorded, so a replay showed nothing before,
    or the program's own exception when it called the tool from an ``except`` block, and a tool's
    ``raise … from None`` showed the program's there too."""

    @forkpoint.tool
    def lookup(key: str) -> int:
        try:
            return {"one": 1}[key]
        except KeyError:
            if key == "none":
                raise ValueError("none") from None
            raise ValueError(f"no {key!r}")  # noqa: B904 - the point: the KeyError is its context

    def formatted(key: str, handling: bool) -> str:
        try:
            if handling:
                try:
                    raise OSError("the program's own")
                except OSError:
                    lookup(key)
            lookup(key)
        except ValueError as exc:
            return "".join(traceback.format_exception(exc))
        raise AssertionError("the tool did not raise")

    def run() -> list[str]:
        return [formatted(key, handling) for key in ("two", "none") for handling in (False, True)]

    plain = run()
    assert [text.count("During handling") for text in plain] == [1, 2, 0, 0], plain
    with forkpoint.record(store=store) as rec:
        assert run() == plain
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == plain
    assert rp.report()["reproduced"]


def test_recorded_frames_that_cannot_be_made_are_left_out() -> None:
    """A session's frames are data: a bad one (wrong shape, a line no code object holds, a NUL in
    a file name) is left out, never raised on; columns beyond reach leave the frame its line."""
    from forkpoint.capture.tracebacks import recorded_traceback

    good = ["/nowhere/agent.py", 7, "run", 7, 4, 9]
    junk: list[Any] = [
        "x",
        [1, 2, 3],
        ["f.py", 0, "g", None, None, None],
        ["f.py", 2**40, "g", None, None, None],
        ["f\x00.py", 5, "g", 5, 0, 3],
        ["f.py", 5, None, 5, 0, 3],
    ]
    tb = recorded_traceback([*junk, good, *junk])
    assert tb is not None and tb.tb_next is None
    assert (tb.tb_frame.f_code.co_filename, tb.tb_lineno, tb.tb_frame.f_code.co_name) == tuple(good[:3])
    assert recorded_traceback("frames") is None and recorded_traceback(junk) is None
    far = recorded_traceback([["f.py", 5, "g", 5, 10**9, 10**9 + 5]])  # (its line, without the span)
    assert far is not None and (far.tb_lineno, far.tb_frame.f_code.co_name) == (5, "g")


def test_recorded_frames_show_no_lines_of_files_outside_the_programs_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recorded frame names a file, and ``traceback`` prints that file's line: a session naming
    ``/etc/passwd`` or ``../../.ssh/id_rsa`` got lines of this machine's files into a replayed
    program's traceback (which DSPy sends a model). Lines are shown of the program's own code only:
    a file under the current folder or a folder of ``sys.path``, or a relative name without ``..``."""
    from forkpoint.capture.tracebacks import recorded_traceback

    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir(), outside.mkdir()
    (work / "agent.py").write_text("OWN_LINE = 1\n")
    (outside / "notes.py").write_text("TOPSECRET = 1\n")
    monkeypatch.chdir(work)

    def shown(filename: str) -> str:
        exc = ValueError("x").with_traceback(recorded_traceback([[filename, 1, "f", 1, 0, 5]]))
        return "".join(traceback.format_exception(exc))

    assert "OWN_LINE = 1" in shown(str(work / "agent.py")) and "OWN_LINE = 1" in shown("agent.py")
    for hostile in (
        str(outside / "notes.py"),
        "../outside/notes.py",
        str(work / ".." / "outside" / "notes.py"),
    ):
        text = shown(hostile)
        assert "TOPSECRET" not in text and f'File "{hostile}", line 1, in f' in text


def test_a_huge_binary_result_is_scrubbed_once_and_stored_scrubbed(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool's result is scrubbed when the call returns and again in the event that logs it: a
    result past the scrubber's cache (4 MiB) was scanned twice (2.3 s for 20 MB of binary data,
    0.9 s scanned once). One that held a secret is scrubbed again, as a smaller one is: a second
    pass may find more (``#longtail`` of a quoted password was stored in the clear)."""
    from forkpoint import redact

    key = "sk-proj-" + "A1b2C3d4" * 6
    clean = bytes(range(256)) * 20_000
    blob = clean + key.encode() + b"\xff" * 10
    config, pad = 'password="hunter2#longtail"\n', "x" * (5 << 20) + "\n"
    scanned: list[int] = []
    find = redact.Scrubber.find

    def counted(self: redact.Scrubber, text: str) -> list[tuple[int, int, str]]:
        if len(text) > redact.CACHE_MAX_CHARS:
            scanned.append(len(text))
        return find(self, text)

    monkeypatch.setattr(redact.Scrubber, "find", counted)

    @forkpoint.tool
    def download(secret: bool) -> bytes:
        return blob if secret else clean

    @forkpoint.tool
    def read(huge: bool) -> str:
        return pad * huge + config

    with forkpoint.record(store=store) as rec:
        assert download(False) == clean
        assert scanned == [len(clean)]
        assert download(True) == blob
        assert read(False) == config and read(True).endswith(config)
    calls = Session.load(rec.session_path).by_type("tool_call")
    stored = calls[1]["result"]
    assert isinstance(stored, bytes) and key.encode() not in stored and b"[REDACTED:" in stored
    assert stored.startswith(clean)
    small, huge = calls[2]["result"], calls[3]["result"]
    assert "longtail" not in small and huge == pad + small


def test_a_tool_given_an_argv_list_with_a_credential_is_recorded_without_it_and_replays_ok(
    store: Path,
) -> None:
    """A coding agent's shell tool takes its command as an argv list; its items were scrubbed one
    by one, so ``["deploy", "--token", VALUE]`` and ``["curl", "-u", "admin:PW"]`` were stored in
    clear text. They are kept as placeholders now, and the replay (whose match key is scrubbed
    by the same scrubber) serves the recorded result: replay ok."""
    token, password = "Zx8kP2qLm9RtV4wN7sY3", "Qm4vT8wLz2Kp9Rx"

    @forkpoint.tool
    def run(cmd: list[str]) -> str:
        return f"ran {cmd[0]} with {len(cmd)} words"

    commands = [
        ["deploy", "--token", token, "--env", "prod"],
        ["curl", "-u", "admin:" + password, "http://127.0.0.1/"],
    ]
    with forkpoint.record(store=store) as rec:
        live = [run(c) for c in commands]
    for path in store.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert token.encode() not in data and password.encode() not in data, path
    calls = Session.load(rec.session_path).by_type("tool_call")
    assert calls[0]["args"]["cmd"][2].startswith("[REDACTED:secret-option:"), calls[0]["args"]
    assert calls[1]["args"]["cmd"][2].startswith("admin:[REDACTED:command-password:"), calls[1]["args"]
    with forkpoint.replay(rec.session_path) as rp:
        assert [run(c) for c in commands] == live
    assert rp.report()["reproduced"], rp.report()
