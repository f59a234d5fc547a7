"""Request bodies parsed by what they add to the last one (forkpoint.capture.resent): always the
value a whole parse gives, and only the added items parsed where the body resends the last one."""

from __future__ import annotations

import gc
import json
import sys
import threading
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from forkpoint.capture import resent
from forkpoint.redact import Scrubber
from tests.test_properties import JSON, SETTINGS


class Owner:
    """Stands for a recording: what is kept of its bodies lives as long as it does."""


SERIALIZERS = {
    "json": lambda v: json.dumps(v).encode(),
    "compact": lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False).encode(),
    "indented": lambda v: json.dumps(v, indent=1).encode(),
    "orjson": orjson.dumps,
}

# A string that looks like the structure around it: a marker or a splice inside it must not pass;
# and a secret, which the scrubber must take out of whatever it shares between bodies.
SECRET = "sk-proj-" + "Q7vT2xLm9RkP4wZs" * 3
TRICKY = st.sampled_from(['"]', "],", '\\",', "}]", '"},{"role":"tool"}]', "\\\\", "\u2028", "", SECRET])
ITEM = JSON | st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "tool"]), "content": TRICKY | st.text()}
)

STEP = st.one_of(
    st.tuples(st.just("append"), st.lists(ITEM, min_size=1, max_size=3)),
    st.tuples(st.just("edit-last"), TRICKY | st.text(max_size=5)),
    # an item a few back changed (a cache marker that moves on), or dropped with those after it
    st.tuples(st.just("edit-back"), st.tuples(st.integers(1, 4), TRICKY | st.text(max_size=5))),
    st.tuples(st.just("drop-back"), st.integers(1, 3)),
    # the first item changed (a prompt stamped with the time), then maybe items appended
    st.tuples(st.just("edit-first"), st.tuples(TRICKY | st.text(max_size=5), st.lists(ITEM, max_size=2))),
    st.tuples(st.just("other"), JSON),
    st.tuples(st.just("replace"), st.lists(ITEM, max_size=3)),
    st.tuples(st.just("same"), st.none()),
    # another conversation on the same endpoint from here on (each goes on from its own last body),
    # or one body of none between two
    st.tuples(st.just("switch"), st.none()),
    st.tuples(st.just("one-off"), JSON),
)


def strict(value: Any) -> bytes:
    """The value as orjson writes it: 1, 1.0 and true differ, and so does the order of keys."""
    return orjson.dumps(value)


@SETTINGS
@given(
    st.lists(ITEM, max_size=3),
    JSON,
    st.booleans(),
    st.sampled_from(sorted(SERIALIZERS)),
    st.lists(STEP, max_size=8),
)
def test_every_body_reads_and_scrubs_as_a_whole_parse_does(
    messages: list[Any], tools: Any, messages_first: bool, serializer: str, steps: list[tuple[str, Any]]
) -> None:
    # ... and scrubbed as parsed data (items shared by identity with the last body's) as a whole
    # parse is scrubbed afresh.
    owner, scrubber, fresh = Owner(), Scrubber(), Scrubber(cache=False)
    dump = SERIALIZERS[serializer]
    doc: dict[str, Any] = {"messages": messages, "tools": tools} if messages_first else {"model": "m"}
    doc.update({"messages": messages, "tools": tools})
    other: dict[str, Any] = {"model": "other", "messages": [{"role": "user", "content": "title?"}]}
    for op, arg in [("same", None), *steps]:
        if op == "switch":
            doc, other = other, doc
        if op == "append":
            doc["messages"] = [*doc["messages"], *arg]
        elif op == "edit-last" and doc["messages"]:
            last = doc["messages"][-1]
            doc["messages"] = [*doc["messages"][:-1], {"edited": arg, "was": last}]
        elif op == "edit-back" and len(doc["messages"]) >= arg[0]:
            n, text = arg
            messages = list(doc["messages"])
            messages[-n] = {"edited": text, "was": messages[-n]}
            doc["messages"] = messages
        elif op == "edit-first" and doc["messages"]:
            text, more = arg
            doc["messages"] = [{"edited": text, "was": doc["messages"][0]}, *doc["messages"][1:], *more]
        elif op == "drop-back":
            doc["messages"] = doc["messages"][: -arg or None]
        elif op == "other":
            doc["tools"] = arg
        elif op == "replace":
            doc["messages"] = arg
        body = dump({"title": arg} if op == "one-off" else doc)
        value = resent.loads(body, "POST http://127.0.0.1/v1", owner)
        assert strict(value) == strict(orjson.loads(body))
        scrubbed = strict(scrubber.json(value, parsed=True))
        assert scrubbed == strict(fresh.json(orjson.loads(body))) and SECRET.encode() not in scrubbed


def conversation(turns: int) -> list[bytes]:
    """The bodies an agent loop posts: its whole conversation at every call, tools after it."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You edit files."}]
    tools = [{"type": "function", "function": {"name": "edit", "parameters": {"type": "object"}}}]
    bodies = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f'turn {turn}: fix ] and ", then go on'})
        bodies.append(json.dumps({"model": "m", "messages": messages, "tools": tools}).encode())
    return bodies


def test_a_resent_conversation_is_parsed_by_what_it_adds() -> None:
    owner = Owner()
    values = [resent.loads(body, "POST /v1", owner) for body in conversation(6)]
    assert [strict(v) for v in values] == [strict(orjson.loads(b)) for b in conversation(6)]
    # From the second body on (where the growing list is found), the items already read are the
    # last value's own: not parsed again.
    for before, after in zip(values, values[1:], strict=False):
        assert all(a is b for a, b in zip(before["messages"], after["messages"], strict=False))
        assert after["tools"] is before["tools"] and after["messages"] is not before["messages"]


def test_bodies_are_kept_per_endpoint_and_owner_and_go_with_the_owner() -> None:
    bodies = conversation(3)
    gc.collect()
    before = len(resent._kept)  # (owners of earlier tests in this worker that are still alive)
    first, second = Owner(), Owner()
    a = [resent.loads(b, "POST /v1", first) for b in bodies]
    # another endpoint, another owner, no owner: each starts from a whole parse
    other = resent.loads(bodies[2], "POST /v2", first)
    theirs = resent.loads(bodies[2], "POST /v1", second)
    unowned = resent.loads(bodies[2], "POST /v1", None)
    for v in (other, theirs, unowned):
        assert strict(v) == strict(a[2]) and v["messages"][0] is not a[2]["messages"][0]
    assert len(resent._kept) == before + 2
    del first, second
    gc.collect()
    assert len(resent._kept) == before


def test_a_body_that_is_not_json_raises_as_a_whole_parse_does() -> None:
    owner = Owner()
    bodies = conversation(3)
    for b in bodies:
        resent.loads(b, "POST /v1", owner)
    broken = bodies[2][:-1] + b',{"role": "user"' + bodies[2][-1:]
    with pytest.raises(orjson.JSONDecodeError):
        resent.loads(broken, "POST /v1", owner)


def test_bodies_nested_deep_read_as_a_whole_parse_does() -> None:
    # Items nested as deep as orjson allows at the top of a list, one level short of it in the body;
    # and a value nested deeper than Python compares at its default limit, beside the growing list.
    # (Found by a helper: the first body was read although orjson refuses it, the second raised
    # RecursionError.)
    deep = b"[" * 1023 + b"]" * 1023
    deeper = b"[" * 992 + b"]" * 992
    cases = [
        [b'{"m":[1]}', b'{"m":[1,' + deep + b"]}"],
        [b'{"x":' + deeper + b',"m":[1]}', b'{"x":' + deeper + b',"m":[1,2]}'],
    ]
    for bodies in cases:
        owner = Owner()
        resent.loads(bodies[0], "POST /v1", owner)
        try:
            expected = orjson.loads(bodies[1])
        except orjson.JSONDecodeError:
            with pytest.raises(orjson.JSONDecodeError):
                resent.loads(bodies[1], "POST /v1", owner)
            continue
        got = resent.loads(bodies[1], "POST /v1", owner)
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(10_000)  # (to compare the values here)
        try:
            assert got == expected
        finally:
            sys.setrecursionlimit(limit)


def test_a_conversation_after_other_bodies_is_still_found() -> None:
    # Bodies that are not a resent conversation first (each probe fails), then one that is: probes
    # back off but go on, so the conversation's items are soon taken from the last value again.
    owner = Owner()
    for i in range(12):
        resent.loads(b'{"system":"prompt %d","m":[1]}' % i + b" " * i, "POST /v1", owner)
    values = [resent.loads(body, "POST /v1", owner) for body in conversation(40)]
    assert [strict(v) for v in values] == [strict(orjson.loads(b)) for b in conversation(40)]
    assert values[-1]["messages"][0] is values[-2]["messages"][0]


def test_conversations_interleaved_on_one_endpoint_each_go_on_from_their_own() -> None:
    # A planner and a worker posting to one endpoint in turn, and a one-off title request now and
    # then: each conversation's items are taken from its own last value, not parsed again.
    owner = Owner()
    planner, worker = conversation(20), conversation(20)
    worker = [b.replace(b"You edit files.", b"You plan.").replace(b"turn", b"task") for b in worker]
    last: dict[str, Any] = {}
    for turn in range(20):
        for name, bodies in (("planner", planner), ("worker", worker)):
            value = resent.loads(bodies[turn], "POST /v1", owner)
            assert strict(value) == strict(orjson.loads(bodies[turn]))
            if turn >= 2:
                assert all(a is b for a, b in zip(last[name]["messages"], value["messages"], strict=False))
            last[name] = value
        if turn % 3 == 0:
            resent.loads(
                b'{"model":"small","messages":[{"role":"user","content":"a title"}]}', "POST /v1", owner
            )


def test_a_conversation_whose_first_message_changes_at_every_call_is_parsed_by_what_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A prompt stamped with the time (of another length now and then: 9:59 to 10:00): each body
    # after the first few parses its new first message and what it appends, the items between are
    # the last value's own, and it takes the place of the last body.
    owner, parsed = Owner(), []
    loads = orjson.loads
    monkeypatch.setattr(resent.orjson, "loads", lambda data: parsed.append(len(data)) or loads(data))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Refactor. " * 20}]
    values = []
    for turn in range(40):
        messages.append({"role": "assistant", "content": f"turn {turn}: " + "edit ] and }, " * 10})
        system = {
            "role": "system",
            "content": f"It is {9 + turn // 30}:{(turn * 2) % 60:02d}. You edit files.",
        }
        body = json.dumps({"model": "m", "messages": [system, *messages], "tools": []}).encode()
        parsed.clear()
        values.append(resent.loads(body, "POST /v1", owner))
        assert strict(values[-1]) == strict(loads(body))
    assert sum(parsed) < 2 * len(json.dumps([system, messages[-1]])) + 100 < len(body) // 10
    assert all(a is b for a, b in zip(values[-2]["messages"][1:], values[-1]["messages"][1:-1], strict=True))
    assert len(resent._kept[owner]["POST /v1"].bodies) == 1


def test_a_cache_marker_that_moves_on_is_parsed_from_where_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    # Anthropic's prompt caching, as coding agents use it: the last two tool results carry a cache
    # marker, so each body changes the message that had it, then appends. Only the items from that
    # message on are parsed; those before are the last value's own.
    owner, parsed = Owner(), []
    loads = orjson.loads
    monkeypatch.setattr(resent.orjson, "loads", lambda data: parsed.append(len(data)) or loads(data))
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You edit files. " * 50}]
    values = []
    for turn in range(30):
        messages.append({"role": "assistant", "content": f"step {turn}: " + "edit ] and }, " * 10})
        messages.append({"role": "tool", "content": f"result {turn} " * 20})
        marked = [dict(m) for m in messages]
        for m in [m for m in marked if m["role"] == "tool"][-2:]:
            m["cache_control"] = {"type": "ephemeral"}
        body = json.dumps({"model": "m", "messages": marked, "system": "s"}).encode()
        parsed.clear()
        values.append(resent.loads(body, "POST /v1", owner))
        assert strict(values[-1]) == strict(loads(body))
    # the last body: from its changed message on (the last five), and the last body's added items
    # once more, alone, to find where the changed one ends: a small part of the whole
    assert sum(parsed) < 2 * len(json.dumps(marked[-5:])) + 100 < len(body) // 5
    assert all(a is b for a, b in zip(values[-2]["messages"][:-4], values[-1]["messages"], strict=False))


@pytest.mark.parametrize(
    "shared", [0, 1, 7, resent._CHUNK - 1, resent._CHUNK, resent._CHUNK + 1, 3 * resent._CHUNK + 5]
)
def test_the_common_prefix_is_found_across_chunks(shared: int) -> None:
    a = bytes(range(256)) * (4 * resent._CHUNK // 256)
    b = a[:shared] + bytes([a[shared] ^ 1]) + a[shared + 1 :]
    assert resent._common_prefix(a, b) == resent._common_prefix(b, a) == shared
    assert resent._common_prefix(a, a[:shared]) == resent._common_prefix(a[:shared], a) == shared


def test_threads_on_one_endpoint_read_as_a_whole_parse_does() -> None:
    # Four agents in threads of one recording, each its own conversation (two with a moving cache
    # marker) on one endpoint: what a thread reads never mixes in what another changed.
    owner = Owner()
    failures: list[str] = []

    def agent(n: int) -> None:
        messages: list[dict[str, Any]] = [{"role": "system", "content": f"agent {n} " * 30}]
        for turn in range(60):
            messages.append({"role": "tool", "content": f"agent {n} result {turn} ], " * 5})
            sent = [dict(m) for m in messages]
            if n % 2:
                for m in sent[-2:]:
                    m["cache_control"] = {"type": "ephemeral"}
            body = json.dumps({"model": "m", "messages": sent}).encode()
            if strict(resent.loads(body, "POST /v1", owner)) != strict(orjson.loads(body)):
                failures.append(f"agent {n} turn {turn}")

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(4)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # (threads switch often: a race shows)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert failures == []


@pytest.mark.parametrize(
    "bodies",
    [
        [b'{"m":[1]}', b'{"m":[1,2],[3]}'],
        [b'{"m":[]}', b'{"m":[2],[3]}'],
        [b'{"m":[1]}', b'{"m":[1,2]}', b'{"m":[1,2,3],4,[5]}'],
    ],
)
def test_added_bytes_that_close_the_list_early_raise_as_a_whole_parse_does(bodies: list[bytes]) -> None:
    # (Found by a helper: "2],[3" reads as values inside "[[...]]", where it closes the inner list
    # and opens another; in the body it closes the list and leaves a list where a key must be.)
    owner = Owner()
    for body in bodies[:-1]:
        assert strict(resent.loads(body, "POST /v1", owner)) == strict(orjson.loads(body))
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(bodies[-1])
    with pytest.raises(orjson.JSONDecodeError):
        resent.loads(bodies[-1], "POST /v1", owner)


def test_a_body_given_as_a_view_or_text_reads_as_a_whole_parse_does() -> None:
    owner = Owner()
    resent.loads(b'{"m":[1]}', "POST /v1", owner)
    for body in (memoryview(b'{"m":[1,2]}'), '{"m":[1,2]}', bytearray(b'{"m":[1,2]}')):
        assert resent.loads(body, "POST /v1", owner) == {"m": [1, 2]}  # type: ignore[arg-type]
