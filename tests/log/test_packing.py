"""Packed lines (format 2): what an agent's turn costs on disk, packed lines read as the same events
as plain ones (a torn line closed by one included), sessions of format 1 still read and replay, and
packed lines that are damaged or forged are refused, naming the line."""

from __future__ import annotations

import base64
import json
import random
import shutil
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest
import zstandard

import forkpoint
from forkpoint import verify
from forkpoint.deltalist import json_default
from forkpoint.demo.agent import run_agent
from forkpoint.demo.server import ModelServer
from forkpoint.log import LOG_NAME, Session, SessionError, SessionWriter, line_hash, packing, to_json, writer
from forkpoint.log.packing import PACK_DICT, PACK_MAX, PACKED
from tests.logutil import stored_lines
from tests.modelserver import LocalServer, Stream

#: A session the demo agent recorded (4 turns, streamed) with the forkpoint of format 1: chunks and
#: request headers as ``$json`` blobs, ``$delta`` and ``$dumps``, no packed line.
FORMAT_1 = Path(__file__).parent / "format1" / "20261202-031047-a1c00a"
#: Recorded by forkpoint at f1fb80b (format 2): the SDK-less loop of benchmarks/bench_targets.py with
#: the time in its system prompt (``sdkless-stamp``), 5 turns; its signature left out.
FORMAT_2 = Path(__file__).parent / "format2" / "20261203-164417-d4850d"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "save",
            "parameters": {"type": "object", "properties": {"path": {}, "content": {}}},
        },
    }
]


def _noise(turn: int) -> str:
    """~700 characters no compressor can shrink much: each turn's arguments are new to the log."""
    return random.Random(turn).randbytes(525).hex()[:700]


def _streamed_tool_calls(server: LocalServer, turns: int) -> None:
    """``…/chat/completions`` streams, until ``turns`` tool results, a ``save`` call whose arguments
    come in 32-character pieces, one SSE event each (as OpenAI streams them); then a text answer."""

    def chat(request: dict[str, Any]) -> Stream:
        turn = sum(1 for m in request["body"]["messages"] if m["role"] == "assistant")
        head = {"id": f"chatcmpl-{turn}", "object": "chat.completion.chunk", "created": 1, "model": "m"}

        def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
            body = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            return f"data: {json.dumps(body)}\n\n".encode()

        if turn >= turns:
            events = [event({"role": "assistant", "content": "done"}), event({}, "stop")]
        else:
            args = json.dumps({"path": f"notes/{turn}.txt", "content": _noise(turn)})
            call = {"index": 0, "id": f"call_{turn}", "type": "function"}
            events = [event({"role": "assistant", "tool_calls": [{**call, "function": {"name": "save"}}]})]
            for i in range(0, len(args), 32):
                events.append(
                    event({"tool_calls": [{"index": 0, "function": {"arguments": args[i : i + 32]}}]})
                )
            events.append(event({}, "tool_calls"))
        return Stream([*events, b"data: [DONE]\n\n"])

    server.route("*/chat/completions", chat)


def _agent(base_url: str) -> str:
    """A plain tool loop on the openai SDK, streamed: every turn's whole conversation is sent again."""

    @forkpoint.tool
    def save(path: str, content: str) -> dict[str, Any]:
        return {"path": path, "saved": len(content)}

    client = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Save the notes."}]
    while True:
        calls: dict[int, dict[str, Any]] = {}
        text = ""
        for chunk in client.chat.completions.create(model="m", messages=messages, tools=TOOLS, stream=True):  # type: ignore[arg-type]
            delta = chunk.choices[0].delta
            text += delta.content or ""
            for tc in delta.tool_calls or []:
                call = calls.setdefault(tc.index, {"id": tc.id, "name": "", "arguments": ""})
                call["name"] += (tc.function and tc.function.name) or ""
                call["arguments"] += (tc.function and tc.function.arguments) or ""
        if not calls:
            return text
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": c["arguments"]},
                    }
                    for c in calls.values()
                ],
            }
        )
        for c in calls.values():
            result = save(**json.loads(c["arguments"]))
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": json.dumps(result)})


def test_a_streamed_turn_costs_its_tool_arguments_about_once(tmp_path: Path, server: LocalServer) -> None:
    """The ~700 characters of arguments a model streams each turn (no compressor makes them smaller
    than ~390 bytes) reach the log three times: in the stream's chunks, as the tool call's ``args``,
    in the next request. A turn costs ~1.8 KB, the chain and ids of its two lines included (3.5 KB
    in sessions of format 1, which stored them about three times)."""
    turns = 30
    _streamed_tool_calls(server, turns)
    with forkpoint.record(store=tmp_path / "store") as rec:
        assert _agent(server.openai_base_url) == "done"
    assert len(Session.load(rec.session_path).by_type("tool_call")) == turns
    assert verify(rec.session_path).ok
    size = sum(f.stat().st_size for f in rec.session_path.rglob("*") if f.is_file())
    assert size < turns * 2400, size
    with forkpoint.replay(rec.session_path) as rp:
        assert _agent(server.openai_base_url) == "done"
    assert rp.report()["matched"] == 2 * turns + 1


def test_packed_lines_open_to_the_same_events_and_are_checked_like_any_line(tmp_path: Path) -> None:
    big = "def f(x):\n    return x * 2  # the same text in every line\n" * 10
    w = SessionWriter.create(tmp_path / "store", {"argv": ["a"]}, fsync="never")
    for i in range(6):
        w.append({"type": "tool_call", "tool": "t", "args": {"i": i, "code": big}, "result": {"ok": i}})
    w.append({"type": "end", "exit_code": 0})
    w.close()
    raw = [orjson.loads(line) for line in (w.path / LOG_NAME).read_bytes().splitlines()]
    assert raw[0]["version"] == 3
    assert all(PACKED in line for line in raw[1:-1]) and PACKED not in raw[-1]  # `end` is never packed
    assert raw[1].get(PACK_DICT) is None and raw[2][PACK_DICT] == [1] and raw[6][PACK_DICT] == [3, 4, 5]
    assert max(len(x) for x in (w.path / LOG_NAME).read_bytes().splitlines()[2:-1]) < len(big) // 2
    events = Session.load(w.path).events
    assert [e["args"] for e in events[:-1]] == [{"i": i, "code": big} for i in range(6)]
    assert verify(w.path).ok

    log = w.path / LOG_NAME
    lines = log.read_bytes().splitlines(keepends=True)

    def forged(lineno: int, **change: Any) -> None:
        """Line ``lineno`` changed, its hash made to match (a forgery, not damage)."""
        obj = {**raw[lineno - 1], **change}
        obj.pop("hash")
        obj["hash"] = line_hash(obj)
        log.write_bytes(b"".join(lines[: lineno - 1]) + orjson.dumps(obj) + b"\n" + b"".join(lines[lineno:]))

    frame = base64.b64decode(raw[3][PACKED])  # line 4: seq 3, packed against seqs 1 and 2
    cases = [
        # Packed against no line: the frame reads before its start. (Against line 1 alone, the frame
        # reads line 2's text where line 1 has the same: the line opens as written, and line 5 names
        # the hash that changed.)
        ({PACK_DICT: []}, "cannot be decompressed|not JSON"),
        ({PACK_DICT: [2, 9]}, "packed against line seq 9, which is no packed line"),
        ({PACKED: "not base64!"}, r"\$zstd is not base64"),
        ({PACKED: base64.b64encode(frame[:-3]).decode()}, "cannot be decompressed"),
        (
            {PACKED: base64.b64encode(zstandard.ZstdCompressor().compress(b'{"seq":1}')).decode()},
            "not an object",
        ),
    ]
    for change, problem in cases:
        forged(4, **{PACK_DICT: raw[3][PACK_DICT], **change})
        with pytest.raises(SessionError, match=rf"{LOG_NAME}:4: .*({problem})"):
            Session.load(w.path)
        v = verify(w.path)
        assert not v.ok and f"{LOG_NAME}:4:" in v.problems[0], (change, v.problems)
    # A frame that says it unpacks to more than a line may hold is not even opened.
    start = zstandard.ZstdCompressor().compressobj(size=PACK_MAX + 1)  # the frame's start says so
    bomb = start.compress(b" " * 1000) + start.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
    forged(4, **{PACKED: base64.b64encode(bomb).decode()})
    with pytest.raises(SessionError, match=f"at most {PACK_MAX} bytes"):
        Session.load(w.path)


@pytest.mark.parametrize(
    "c_api", ["yes", "no", "changed"], ids=["one-context", "no-cffi", "bindings-changed"]
)
def test_a_writers_lines_are_packed_and_a_readers_opened_in_one_zstd_context(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, c_api: str
) -> None:
    """A writer compresses each line against its dictionary, referenced as a prefix, in the one zstd
    context it keeps, and a reader decompresses each in the one it keeps: no ``ZstdCompressor`` or
    ``ZstdDecompressor`` a line (making a context asks the CPU for its features, a trap to the
    hypervisor in a virtual machine). Without zstd's C API (python-zstandard's cffi bindings), or
    with bindings that are not what forkpoint calls (they are python-zstandard's private module:
    another release may change them), a compressor and a decompressor a line, and the recording goes
    on. Either way the lines read back as written."""
    if c_api == "changed":
        monkeypatch.setattr(packing, "_ZSTD_C", False)

        def changed(*args: Any) -> bytes:
            raise AttributeError("lib has no attribute 'ZSTD_CCtx_refPrefix_advanced'")

        monkeypatch.setattr(packing._Context, "compress", changed)
    elif c_api == "yes":
        import cffi  # noqa: F401 - (comes with cryptography, a dependency: zstd's C API is there)

        def refused(*args: Any, **kwargs: Any) -> None:
            raise AssertionError("a zstandard.ZstdCompressor or ZstdDecompressor made for a line")

        monkeypatch.setattr(zstandard, "ZstdCompressor", refused)
        monkeypatch.setattr(zstandard, "ZstdDecompressor", refused)
    else:
        monkeypatch.setattr(packing, "_ZSTD_C", None)
    code = "def f(x):\n    return x * 2  # the same text in every line\n" * 10
    w = SessionWriter.create(tmp_path / "store", {"argv": ["a"]}, fsync="never")
    for i in range(6):
        w.append({"type": "tool_call", "tool": "t", "args": {"i": i, "code": code}, "result": {"ok": i}})
    w.close()
    lines = (w.path / LOG_NAME).read_bytes().splitlines()[1:]
    raw = [orjson.loads(line) for line in lines]
    assert all(PACKED in line for line in raw) and [line.get(PACK_DICT) for line in raw][-1] == [3, 4, 5]
    assert max(len(line) for line in lines[1:]) < len(code) // 2  # (packed against the lines before)
    assert [e["args"] for e in Session.load(w.path).events] == [{"i": i, "code": code} for i in range(6)]
    assert verify(w.path).ok
    if c_api == "changed":
        assert packing._ZSTD_C is None  # (tried once, not at every line)


def test_packed_lines_read_as_the_same_events_as_plain_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unpacking happens where lines are read: every reader (replay, show, the exporters) gets the
    events, field for field and in the same order, that lines written unpacked give."""
    with ModelServer(turns=3, seed=3) as server:
        with forkpoint.record(store=tmp_path / "store") as rec:
            run_agent(server.base_url, tmp_path / "work", echo=None)
    recorded = Session.load(rec.session_path).events
    monkeypatch.setattr(writer, "Packer", lambda: None)  # the same writer, packing nothing
    w = SessionWriter.create(tmp_path / "plain", {"argv": ["a"]}, fsync="never")
    for e in recorded:
        w.append({k: v for k, v in e.items() if k not in ("seq", "prev", "hash", "summary")})
    w.close()
    packed_log, plain_log = (rec.session_path / LOG_NAME).read_bytes(), (w.path / LOG_NAME).read_bytes()
    assert packed_log.count(PACKED.encode()) == len(recorded) - 1  # all but `end`
    assert PACKED.encode() not in plain_log and b'"$json"' in plain_log

    def events(path: Path) -> list[bytes]:
        return [
            orjson.dumps({k: v for k, v in e.items() if k not in ("prev", "hash")}, default=to_json)
            for e in Session.load(path).events
        ]

    assert events(rec.session_path) == events(w.path)


def test_a_packed_line_that_closes_a_torn_one_declares_it(tmp_path: Path) -> None:
    w = SessionWriter.create(tmp_path / "store", {"argv": ["a"]}, fsync="never")
    w.append({"type": "note", "text": "before", "data": {"pad": "padding " * 60}})
    w.close()
    log = w.path / LOG_NAME
    size = log.stat().st_size
    with open(log, "ab") as f:
        f.write(b'{"seq":2,"type":"note","ts":"2026-')  # a writer killed mid-line
    w = SessionWriter.open(w.path, fsync="never")
    w.append({"type": "note", "text": "after", "data": {"pad": "padding " * 60}})
    w.close()
    line = orjson.loads(log.read_bytes().splitlines()[-1])
    assert PACKED in line and line["torn"]["offset"] == size
    s = Session.load(w.path)
    assert [e["text"] for e in s.events] == ["before", "after"] and s.recovered[0]["offset"] == size
    assert "torn" not in s.events[1] and verify(w.path).ok


def test_lines_are_packed_only_against_their_own_writers_lines(tmp_path: Path) -> None:
    """Two writers append to one session in turn: each packs against its own earlier lines."""
    first = SessionWriter.create(tmp_path / "store", {"argv": ["a"]}, fsync="never")
    second = SessionWriter.open(first.path, fsync="never")
    for i in range(4):
        for name, w in (("first", first), ("second", second)):
            w.append({"type": "note", "text": f"{name} {i}", "data": {"pad": f"{name} padding " * 40}})
    first.close()
    second.close()
    raw = [orjson.loads(line) for line in (first.path / LOG_NAME).read_bytes().splitlines()[1:]]
    assert [line.get(PACK_DICT) for line in raw] == [
        None,
        None,
        [1],
        [2],
        [1, 3],
        [2, 4],
        [1, 3, 5],
        [2, 4, 6],
    ]
    s = Session.load(first.path)
    assert [e["text"] for e in s.events] == [f"{n} {i}" for i in range(4) for n in ("first", "second")]
    assert verify(first.path).ok


def test_a_session_of_format_1_loads_verifies_replays_and_stays_format_1(tmp_path: Path) -> None:
    path = tmp_path / FORMAT_1.name
    shutil.copytree(FORMAT_1, path)
    before = (path / LOG_NAME).read_bytes()
    assert orjson.loads(before.split(b"\n", 1)[0])["version"] == 1 and b'"$json"' in before
    s = Session.load(path)
    calls = s.by_type("model_call")
    assert [e["type"] for e in s.events].count("tool_call") == 4 and len(calls) == 5
    for call in calls:  # $json blobs, $delta and $dumps resolved as ever
        assert call["response"]["chunks"][-1][1] == "data: [DONE]\n\n"
        assert ["content-type", "application/json"] in call["request"]["headers"]
        assert call["request"]["body"]["messages"][0]["role"] == "system"
    sent_back = calls[1]["request"]["body"]["messages"][2]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(sent_back) == s.by_type("tool_call")[0]["args"]
    assert verify(path).ok
    with forkpoint.replay(s) as rp:
        answer = run_agent("http://127.0.0.1:9", tmp_path / "work", echo=None)
    assert answer.startswith("Here is what I did.") and rp.report()["matched"] == 9

    w = SessionWriter.open(path, fsync="never")  # a new writer keeps the session's format
    w.append({"type": "note", "text": "appended", "data": {"pad": "padding " * 60}})
    w.close()
    added = (path / LOG_NAME).read_bytes()[len(before) :]
    assert PACKED.encode() not in added and b"padding padding" in added
    assert Session.load(path).events[-1]["text"] == "appended" and verify(path).ok


def test_a_format_2_session_reads_as_written_and_is_appended_to_in_format_2(tmp_path: Path) -> None:
    """A session a forkpoint of format 2 recorded (each stamped request stored whole) reads as it
    was sent, and a new writer appends to it in its format: packed, and a stamped request stored
    without ``set``, which that forkpoint would read as the list without its new first message."""
    path = tmp_path / FORMAT_2.name
    shutil.copytree(FORMAT_2, path)
    before = (path / LOG_NAME).read_bytes()
    assert orjson.loads(before.split(b"\n", 1)[0])["version"] == 2 and PACKED.encode() in before
    own, shared = Session.load(path), Session.load(path, share_lists=True)
    calls = own.by_type("model_call")
    assert len(calls) == 6 and len(own.by_type("tool_call")) == 5
    for i, call in enumerate(calls):
        messages = call["request"]["body"]["messages"]
        assert len(messages) == 2 + 2 * i
        assert messages[0]["content"].startswith(f"The time is 2026-12-03T10:00:0{i}+00:00. You edit files.")
    assert [orjson.dumps(e, default=json_default) for e in shared.events] == [
        orjson.dumps(e, default=json_default) for e in own.events
    ]
    assert verify(path).ok

    last = calls[-1]["request"]
    messages = last["body"]["messages"]
    bodies = [
        {**last["body"], "messages": [{**messages[0], "content": f"The time is {t}."}, *messages[1:], *more]}
        for t, more in (("later", []), ("later still", [{"role": "user", "content": "go on"}]))
    ]
    w = SessionWriter.open(path, fsync="never")
    for body in bodies:
        w.append({"type": "model_call", "request": {**last, "body": body}, "response": calls[-1]["response"]})
    w.close()
    added = stored_lines(path)[-1]  # (the first of the two is its base: a format-3 writer would set)
    assert PACKED.encode() in (path / LOG_NAME).read_bytes()[len(before) :]
    assert isinstance(added["request"]["body"]["messages"], list)  # whole, as format 2 stores it
    assert [e["request"]["body"] for e in Session.load(path).events[-2:]] == bodies and verify(path).ok


def test_an_encrypted_session_seals_its_lines_unpacked(tmp_path: Path) -> None:
    import pyrage  # in the test extra, like every encryption test's

    identity = pyrage.x25519.Identity.generate()
    w = SessionWriter.create(
        tmp_path / "store",
        {"argv": ["a"], "encryption": {"scheme": "age", "recipients": [str(identity.to_public())]}},
        fsync="never",
    )
    w.append({"type": "note", "text": "secret plans", "data": {"pad": "padding " * 60}})
    w.close()
    line = orjson.loads((w.path / LOG_NAME).read_bytes().splitlines()[1])
    assert "$enc" in line and PACKED not in line
    assert verify(w.path).ok
