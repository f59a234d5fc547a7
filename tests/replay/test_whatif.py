"""What-if replay: overrides, per-kind sources (models/tools live or replayed), divergence policies,
the divergence report, the child session, and the ``forkpoint replay --override`` CLI.

Every scenario records the bundled demo agent (or a real SDK) against the demo model server, stops
the server, and replays. With ``ModelServer(turns=2)`` the demo agent always takes the same path:

    seq 1 model call  (system, user)                   -> write_file(scratch_….py)
    seq 2 tool call   write_file
    seq 3 model call  (+ assistant, tool)              -> run_tests()
    seq 4 tool call   run_tests
    seq 5 model call  (+ assistant, tool)              -> final text answer

so the 3rd model call's request carries the run_tests result as ``messages[5].content``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pydantic
import pytest
import requests
from click.testing import CliRunner

import forkpoint
from forkpoint.cli import main
from forkpoint.demo.agent import run_agent
from forkpoint.demo.server import ModelServer
from forkpoint.errors import NetworkBlocked
from forkpoint.log import Session
from forkpoint.override import OverrideError
from forkpoint.replay import API_KEY_VARS, EXIT_DIVERGENCE, PLACEHOLDER_KEY, summary_line
from forkpoint.store import session_dirs
from tests.modelserver import LocalServer, Stream, json_reply

FAILING = {"passed": 0, "failed": 2, "output": "FAIL"}
FAILING_SPEC = 'tool:run_tests.result={"passed":0,"failed":2,"output":"FAIL"}'
DEAD_URL = "http://127.0.0.1:9"  # nothing listens here; a replay must never need it


@dataclass
class Recording:
    session: Session
    answer: str
    workdir: Path
    lines: list[str]  # what the agent printed while recorded


def record_demo(store: Path, workdir: Path, *, seed: int = 11, stream: bool = True) -> Recording:
    """Record the demo agent in-process against a seeded local model; the server is stopped after."""
    lines: list[str] = []
    with ModelServer(turns=2, seed=seed) as srv, forkpoint.record(store=store) as rec:
        answer = run_agent(srv.base_url, workdir, stream=stream, echo=lines.append)
    session = Session.load(rec.session_path)
    shape = [e["type"] if e["type"] != "tool_call" else e["tool"] for e in session.events]
    assert shape == ["model_call", "write_file", "model_call", "run_tests", "model_call", "end"]
    return Recording(session, answer, workdir, lines)


def calls_of(session: Session) -> list[dict[str, Any]]:
    return [e for e in session.events if e["type"] in ("model_call", "tool_call")]


def child_of(report: dict[str, Any]) -> Session:
    assert report["child_session"] is not None
    return Session.load(report["child_session"])


def log_lines(workdir: Path) -> int:
    """Lines of the demo's test_log.txt: one per real run of the run_tests body."""
    path = workdir / "test_log.txt"
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path, bool], Recording]:
    """``copy(tmp_path, stream)``: a private copy (store and workdir) of a demo recording made once
    per module and streaming mode, so each test starts from the same untouched recording."""
    made: dict[bool, Recording] = {}

    def copy(tmp_path: Path, stream: bool = True) -> Recording:
        if stream not in made:
            base = tmp_path_factory.mktemp("recorded")
            made[stream] = record_demo(base / "store", base / "work", stream=stream)
        t = made[stream]
        shutil.copytree(t.session.path.parent, tmp_path / "store")
        shutil.copytree(t.workdir, tmp_path / "work")
        session = Session.load(tmp_path / "store" / t.session.id)
        return Recording(session, t.answer, tmp_path / "work", list(t.lines))

    return copy


@pytest.fixture
def rec(recordings: Callable[[Path, bool], Recording], tmp_path: Path) -> Recording:
    return recordings(tmp_path, True)


# --------------------------------------------------------------------------- 1. an override that changes the path


def test_tool_override_diverges_at_the_third_model_call(rec: Recording) -> None:
    recorded_models = rec.session.by_type("model_call")
    last_model = recorded_models[-1]
    # The recorded 3rd model request carries the real run_tests result as messages[5].
    msgs = last_model["request"]["body"]["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool", "assistant", "tool"]
    real_result = rec.session.by_type("tool_call")[1]["result"]
    assert json.loads(msgs[5]["content"]) == real_result
    assert real_result != FAILING
    lines_before = log_lines(rec.workdir)

    lines: list[str] = []
    with pytest.raises(forkpoint.Divergence) as caught:
        with forkpoint.replay(rec.session, overrides=[FAILING_SPEC]) as rp:
            run_agent(DEAD_URL, rec.workdir, echo=lines.append)
    # The agent saw the overridden result, then its next model call matched nothing.
    assert lines == [rec.lines[0], "turn 2: run_tests() -> 0 passed, 2 failed"]
    assert log_lines(rec.workdir) == lines_before  # no tool body ran

    div = caught.value.report
    assert div == rp.report()["divergence"]
    assert (div["kind"], div["position"], div["endpoint"]) == ("model_call", 3, "POST /v1/chat/completions")
    assert div["expected"]["seq"] == last_model["seq"] == 5
    assert div["nearest"]["seq"] == 5
    assert div["diff"] == [
        {
            "op": "changed",
            "path": "$.body.messages[5].content",
            "expected": json.dumps(real_result, sort_keys=True),
            "actual": json.dumps(FAILING, sort_keys=True),
        }
    ]
    assert "3rd model call" in str(caught.value) and "$.body.messages[5].content" in str(caught.value)

    report = rp.report()
    assert report["overrides"] == [
        {"spec": FAILING_SPEC, "field": "result", "value": FAILING, "seq": 4, "applied": True}
    ]
    assert report["matched"] == 4 and report["unused"] == [5]

    child = child_of(report)
    assert child.path.parent == rec.session.path.parent
    assert child.header["parent"]["session_id"] == rec.session.id
    assert child.header["replay"] == {
        "models": "replay",
        "tools": "replay",
        "on_divergence": "stop",
        "overrides": [FAILING_SPEC],
    }
    got = [(e["type"], e.get("source"), e.get("recorded_seq")) for e in calls_of(child)]
    assert got == [
        ("model_call", "replay", 1),
        ("tool_call", "replay", 2),
        ("model_call", "replay", 3),
        ("tool_call", "override", 4),
    ]
    overridden = calls_of(child)[3]
    assert overridden["tool"] == "run_tests" and overridden["result"] == FAILING
    assert overridden["override"] == FAILING_SPEC
    end = child.end()
    assert end is not None and end["exit_code"] == 1  # the block raised Divergence
    # `forkpoint diff parent child` shows how the what-if parted, though its last request was not
    # written (the run stopped at it): it said only "only in A".
    res = CliRunner().invoke(main, ["diff", str(rec.session.path), str(child.path)], env={"COLUMNS": "300"})
    said = " ".join(res.output.split())
    assert "only in A" in said and "B stopped there, its request not recorded" in said, res.output
    assert "$.body.messages[5].content" in said, res.output


@pytest.mark.parametrize(
    ("spec", "position", "message", "sent"),
    [
        # An exception instead of a result: the agent reports it to the model as an error.
        (
            'tool:run_tests.error={"type":"TimeoutError","message":"took too long"}',
            3,
            5,
            {"error": "TimeoutError: took too long"},
        ),
        # By event seq: seq 2 is the write_file call.
        ('seq:2={"path":"other.py","bytes":1}', 2, 3, {"bytes": 1, "path": "other.py"}),
    ],
    ids=["tool-error", "by-seq"],
)
def test_tool_override_error_and_by_seq(
    rec: Recording, spec: str, position: int, message: int, sent: dict[str, Any]
) -> None:
    with pytest.raises(forkpoint.Divergence) as caught:
        with forkpoint.replay(rec.session, overrides=[spec]):
            run_agent(DEAD_URL, rec.workdir, echo=None)
    div = caught.value.report
    assert (div["kind"], div["position"]) == ("model_call", position)
    assert div["expected"]["seq"] == rec.session.by_type("model_call")[position - 1]["seq"]
    (change,) = div["diff"]
    assert change["path"] == f"$.body.messages[{message}].content"
    assert json.loads(change["actual"]) == sent


# --------------------------------------------------------------------------- 2. an override that changes nothing


def test_override_with_equal_content_does_not_diverge(rec: Recording) -> None:
    written = rec.session.by_type("tool_call")[0]
    assert written["tool"] == "write_file"
    # Same content, keys in another order: the agent sends json.dumps(result, sort_keys=True) back.
    same = dict(reversed(list(written["result"].items())))
    assert list(same) != list(written["result"]) and same == written["result"]
    spec = "tool:write_file#1.result=" + json.dumps(same)

    with forkpoint.replay(rec.session, overrides=[spec]) as rp:
        answer = run_agent(DEAD_URL, rec.workdir, echo=None)
    assert answer == rec.answer
    report = rp.report()
    assert report["divergence"] is None and report["drift"] == []
    assert report["unused"] == [] and report["matched"] == report["recorded"] == 5
    assert [(o["seq"], o["applied"]) for o in report["overrides"]] == [(written["seq"], True)]
    child = child_of(report)
    sources = [e["source"] for e in calls_of(child)]
    assert sources == ["replay", "override", "replay", "replay", "replay"]


# --------------------------------------------------------------------------- 3. model overrides, real SDKs


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_model_override_tool_calls_on_demo_agent(
    recordings: Callable[[Path, bool], Recording], tmp_path: Path, stream: bool
) -> None:
    rec = recordings(tmp_path, stream)
    spec = 'model#1.tool_calls=[{"name":"run_tests","arguments":{}}]'
    lines: list[str] = []
    with pytest.raises(forkpoint.Divergence) as caught:
        with forkpoint.replay(rec.session, overrides=[spec]) as rp:
            run_agent(DEAD_URL, rec.workdir, stream=stream, echo=lines.append)
    recorded_result = rec.session.by_type("tool_call")[1]["result"]
    # The SDK parsed the rewritten response: the agent ran run_tests first (served from seq 4).
    assert lines == [
        f"turn 1: run_tests() -> {recorded_result['passed']} passed, {recorded_result['failed']} failed"
    ]
    div = caught.value.report
    assert (div["kind"], div["position"], div["expected"]["seq"]) == ("model_call", 2, 3)
    changes = {c["path"]: c for c in div["diff"]}
    name = changes["$.body.messages[2].tool_calls[0].function.name"]
    assert (name["expected"], name["actual"]) == ("write_file", "run_tests")
    assert changes["$.body.messages[2].tool_calls[0].function.arguments"]["actual"] == "{}"
    report = rp.report()
    assert report["overrides"][0]["seq"] == 1 and report["overrides"][0]["applied"] is True
    assert [e.get("recorded_seq") for e in calls_of(child_of(report))] == [1, 4]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_model_override_equal_to_the_recorded_tool_calls_does_not_diverge(
    recordings: Callable[[Path, bool], Recording], tmp_path: Path, stream: bool
) -> None:
    """The override gives no ids: each call takes the recorded id of the call in its place, so the
    next request (which carries those ids back) matches the recording."""
    rec = recordings(tmp_path, stream)
    calls = rec.session.by_type("model_call")[0]["summary"]["tool_calls"]
    assert calls and all(c["id"] for c in calls)
    same = [{"name": c["name"], "arguments": json.loads(c["arguments"])} for c in calls]
    with forkpoint.replay(rec.session, overrides=["model#1.tool_calls=" + json.dumps(same)]) as rp:
        assert run_agent(DEAD_URL, rec.workdir, stream=stream, echo=None) == rec.answer
    report = rp.report()
    assert report["divergence"] is None and report["unused"] == []
    assert report["matched"] == report["recorded"]


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_model_override_text_on_demo_agent(
    recordings: Callable[[Path, bool], Recording], tmp_path: Path, stream: bool
) -> None:
    rec = recordings(tmp_path, stream)
    # The last answer rewritten: the run still matches, the agent returns the new text.
    with forkpoint.replay(rec.session, overrides=['model#3.text="Overridden: all done."']) as rp:
        assert run_agent(DEAD_URL, rec.workdir, stream=stream, echo=None) == "Overridden: all done."
    report = rp.report()
    assert report["divergence"] is None and report["unused"] == []
    # The first answer rewritten to text: the agent stops at once, the rest is unused, and an
    # override of a later call is reported as never reached.
    overrides = ['model#1.text="Nothing to do."', FAILING_SPEC]
    with forkpoint.replay(rec.session, overrides=overrides) as rp:
        assert run_agent(DEAD_URL, rec.workdir, stream=stream, echo=None) == "Nothing to do."
    report = rp.report()
    assert report["divergence"] is None and report["unused"] == [2, 3, 4, 5]
    assert [(o["seq"], o["applied"]) for o in report["overrides"]] == [(1, True), (4, False)]


TOOLS_ANTHROPIC = [
    {
        "name": "write_file",
        "description": "Write a file.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            "required": ["path", "content"],
        },
    }
]
MSG = [{"role": "user", "content": "Reproduce the bug with a scratch file."}]


def anthropic_calls(url: str) -> tuple[Any, Any]:
    """One whole and one streamed Messages API call; returns the two parsed messages."""
    c = anthropic.Anthropic(base_url=url, api_key="sk-ant-demo", max_retries=0)
    whole = c.messages.create(model="claude-demo", max_tokens=256, messages=MSG, tools=TOOLS_ANTHROPIC)
    with c.messages.stream(model="claude-demo", max_tokens=200, messages=MSG, tools=TOOLS_ANTHROPIC) as s:
        streamed = s.get_final_message()
    return whole, streamed


@pytest.mark.parametrize("text_on", [1, 2], ids=["text-whole+calls-streamed", "calls-whole+text-streamed"])
def test_model_override_anthropic_messages(tmp_path: Path, text_on: int) -> None:
    with ModelServer(turns=1, seed=5) as srv:
        url = srv.base_url
        with forkpoint.record(store=tmp_path) as rec:
            live = anthropic_calls(url)
    assert [m.stop_reason for m in live] == ["tool_use", "tool_use"]
    calls_on = 3 - text_on
    overrides = [
        f'model#{text_on}.text="Overridden answer {text_on}."',
        f'model#{calls_on}.tool_calls=[{{"name":"run_tests","arguments":{{"verbose":true}},"id":"toolu_fp_1"}}]',
    ]
    with forkpoint.replay(rec.session_path, overrides=overrides) as rp:
        got = anthropic_calls(url)
    assert rp.report()["divergence"] is None
    assert all(o["applied"] for o in rp.report()["overrides"])
    text_msg, calls_msg = got[text_on - 1], got[calls_on - 1]
    assert [(b.type, b.text) for b in text_msg.content] == [("text", f"Overridden answer {text_on}.")]
    assert text_msg.stop_reason == "end_turn"
    assert [(b.type, b.id, b.name, b.input) for b in calls_msg.content if b.type == "tool_use"] == [
        ("tool_use", "toolu_fp_1", "run_tests", {"verbose": True})
    ]
    # The text the model said alongside its calls is kept.
    said = "".join(b.text for b in live[calls_on - 1].content if b.type == "text")
    assert "".join(b.text for b in calls_msg.content if b.type == "text") == said
    assert calls_msg.stop_reason == "tool_use"
    # What was not overridden is kept: the id and usage of the recorded message.
    assert [m.id for m in got] == [m.id for m in live]
    assert got[1].usage.output_tokens == live[1].usage.output_tokens


THINKING_ANSWER = [
    {"type": "thinking", "thinking": "The user wants the tests run.", "signature": "sig-abc"},
    {"type": "redacted_thinking", "data": "opaque-xyz"},
    {"type": "text", "text": "Running them."},
    {"type": "tool_use", "id": "toolu_1", "name": "write_file", "input": {"path": "a", "content": "b"}},
]


def thinking_reply(request: Any) -> Any:
    """An Anthropic answer that thinks before it asks for a tool, whole or streamed as asked."""
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "usage": {}}
    if not request["body"].get("stream"):
        return json_reply({**message, "content": THINKING_ANSWER, "stop_reason": "tool_use"})

    def event(payload: dict[str, Any]) -> bytes:
        return f"event: {payload['type']}\ndata: {json.dumps(payload)}\n\n".encode()

    events = [event({"type": "message_start", "message": {**message, "content": []}})]
    for n, block in enumerate(THINKING_ANSWER):
        delta = {
            "thinking": [{"type": "thinking_delta", "thinking": block.get("thinking")}]
            + [{"type": "signature_delta", "signature": block.get("signature")}],
            "text": [{"type": "text_delta", "text": block.get("text")}],
            "tool_use": [{"type": "input_json_delta", "partial_json": json.dumps(block.get("input"))}],
        }.get(block["type"], [])
        empty = {"thinking": "", "signature": ""} if block["type"] == "thinking" else {"text": ""}
        start = {**block, **empty, "input": {}} if block["type"] == "tool_use" else {**block, **empty}
        start = block if block["type"] == "redacted_thinking" else start
        events.append(event({"type": "content_block_start", "index": n, "content_block": start}))
        events += [event({"type": "content_block_delta", "index": n, "delta": d}) for d in delta]
        events.append(event({"type": "content_block_stop", "index": n}))
    events.append(event({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {}}))
    return Stream([*events, event({"type": "message_stop"})])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_tool_calls_override_keeps_the_anthropic_thinking(tmp_path: Path, stream: bool) -> None:
    """An answer asked to call other tools keeps the thinking it came with: with extended thinking,
    the Messages API requires the thinking blocks of the answer that used tools to be sent back in
    the next request (a what-if going on live would have it refused without them), and the override asked
    to change the calls only. They were dropped, with nothing said."""

    def call(url: str) -> Any:
        c = anthropic.Anthropic(base_url=url, api_key="sk-ant-demo", max_retries=0)
        kw: dict[str, Any] = {"model": "m", "max_tokens": 2048, "messages": MSG, "tools": TOOLS_ANTHROPIC}
        kw["thinking"] = {"type": "enabled", "budget_tokens": 1024}
        if not stream:
            return c.messages.create(**kw)
        with c.messages.stream(**kw) as s:
            return s.get_final_message()

    with LocalServer() as server:
        server.route("/v1/messages", thinking_reply, method="POST")
        with forkpoint.record(store=tmp_path) as rec:
            live = call(server.url)
    spec = 'model#1.tool_calls=[{"name":"run_tests","arguments":{"verbose":true},"id":"toolu_fp_1"}]'
    with forkpoint.replay(rec.session_path, overrides=[spec]) as rp:
        got = call(server.url)
    assert rp.report()["divergence"] is None and rp.report()["overrides"][0]["applied"]
    kept = [b.model_dump() for b in live.content if b.type in ("thinking", "redacted_thinking", "text")]
    assert [b.model_dump() for b in got.content][:3] == kept
    assert [(b.type, b.id, b.name, b.input) for b in got.content[3:]] == [
        ("tool_use", "toolu_fp_1", "run_tests", {"verbose": True})
    ]
    # An answer in text alone (".text") still drops them: it asks for no tool.
    with forkpoint.replay(rec.session_path, overrides=['model#1.text="Done."']):
        assert [b.type for b in call(server.url).content] == ["text"]


TOOLS_RESPONSES = [
    {
        "type": "function",
        "name": "write_file",
        "description": "Write a file.",
        "parameters": TOOLS_ANTHROPIC[0]["input_schema"],
    }
]


def test_model_override_openai_responses(tmp_path: Path) -> None:
    def call(url: str) -> Any:
        c = openai.OpenAI(base_url=url + "/v1", api_key="sk-demo", max_retries=0)
        return c.responses.create(model="demo-model", input="Reproduce the bug.", tools=TOOLS_RESPONSES)

    with ModelServer(turns=1, seed=5) as srv:
        url = srv.base_url
        with forkpoint.record(store=tmp_path) as rec:
            live = call(url)
    assert [o.type for o in live.output] == ["function_call"]

    with forkpoint.replay(rec.session_path, overrides=['model#1.text="Responses override."']) as rp:
        got = call(url)
    assert rp.report()["divergence"] is None
    assert got.output_text == "Responses override."
    assert [o.type for o in got.output] == ["message"]
    assert got.id == live.id

    # The recorded call again, without ids: the response is the recorded one, item ids included.
    (recorded,) = live.output
    same = [{"name": recorded.name, "arguments": json.loads(recorded.arguments)}]
    with forkpoint.replay(rec.session_path, overrides=["model#1.tool_calls=" + json.dumps(same)]):
        assert call(url).output == live.output

    spec = 'model#1.tool_calls=[{"name":"run_tests","arguments":{"k":2},"id":"call_fp_9"}]'
    with forkpoint.replay(rec.session_path, overrides=[spec]):
        got = call(url)
    (fc,) = got.output
    assert (fc.type, fc.name, fc.call_id, json.loads(fc.arguments)) == (
        "function_call",
        "run_tests",
        "call_fp_9",
        {"k": 2},
    )
    assert got.output_text == ""


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_model_override_of_an_answer_of_two_choices_keeps_the_second(
    server: LocalServer, tmp_path: Path, stream: bool
) -> None:
    """``n=2``: ``model#1.text`` gave the agent one choice instead of the two it asked for, the
    second dropped without a word, and the replay said the override did not change its path. The
    override is choice 0's (the answer summaries read); the other stays as recorded."""

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": index, "delta": delta, "finish_reason": finish}
        return (
            b"data: "
            + json.dumps(
                {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
            ).encode()
            + b"\n\n"
        )

    usage = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}

    def two(request: dict[str, Any]) -> Any:
        if not request["body"].get("stream"):
            choices = [
                {
                    "index": k,
                    "message": {"role": "assistant", "content": f"take {k}"},
                    "finish_reason": "stop",
                }
                for k in (0, 1)
            ]
            return json_reply(
                {"id": "c1", "object": "chat.completion", "model": "m", "choices": choices, "usage": usage}
            )
        events = [chunk(k, {"content": f"take {k}"}) for k in (0, 1)] + [chunk(k, {}, "stop") for k in (0, 1)]
        last = {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [], "usage": usage}
        return Stream([*events, b"data: " + json.dumps(last).encode() + b"\n\n", b"data: [DONE]\n\n"])

    server.route("/v1/chat/completions", two)

    def ask() -> tuple[list[str], int | None]:
        client = openai.OpenAI(base_url=server.openai_base_url, api_key="sk-test", max_retries=0)
        kwargs: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "go"}], "n": 2}
        if not stream:
            got = client.chat.completions.create(**kwargs)
            return [str(c.message.content) for c in got.choices], got.usage and got.usage.total_tokens
        texts: dict[int, str] = {}
        total = None
        for part in client.chat.completions.create(
            **kwargs, stream=True, stream_options={"include_usage": True}
        ):
            for c in part.choices:
                texts[c.index] = texts.get(c.index, "") + (c.delta.content or "")
            total = part.usage.total_tokens if part.usage else total
        return [texts[k] for k in sorted(texts)], total

    with forkpoint.record(store=tmp_path) as rec:
        assert ask() == (["take 0", "take 1"], 7)
    with forkpoint.replay(rec.session_path, overrides=['model#1.text="instead"']) as rp:
        assert ask() == (["instead", "take 1"], 7)
    assert rp.report()["reproduced"] is True
    spec = 'model#1.tool_calls=[{"name": "look", "arguments": {"q": "x"}, "id": "call_1"}]'
    with forkpoint.replay(rec.session_path, overrides=[spec]):
        assert ask()[0][1:] == ["take 1"]


# --------------------------------------------------------------------------- 4. / 5. per-kind sources


def test_models_live_tools_replayed(rec: Recording) -> None:
    recorded_tools = rec.session.by_type("tool_call")
    recorded_write, recorded_run = recorded_tools
    before = log_lines(rec.workdir)
    assert before == 1
    with ModelServer(turns=2, seed=999) as srv:
        with forkpoint.replay(rec.session, models="live", tools="replay") as rp:
            answer = run_agent(srv.base_url, rec.workdir, echo=None)
        asked = len(srv.requests)
    report = rp.report()
    # Every model call went to the new model: three turns.
    assert asked == 3 and report["live_calls"] == {"models": 3, "tools": 0}
    assert log_lines(rec.workdir) == before  # run_tests was served: its body did not run

    # The new model wrote another scratch file: a tool call the recording does not have. Under the
    # policy "stop" that is a divergence on the tool, raised in the tool call (the demo agent hands
    # tool exceptions to the model as an error result and carries on).
    div = report["divergence"]
    assert (div["kind"], div["name"], div["position"]) == ("tool_call", "write_file", 1)
    assert div["expected"]["seq"] == recorded_write["seq"]
    assert any(c["path"] == "$.args.path" for c in div["diff"])
    assert report["policy"] == "stop"
    new_path = div["actual"]["args"]["path"]
    assert new_path != recorded_write["args"]["path"]
    assert not (rec.workdir / new_path).exists()  # write_file's body did not run either
    # run_tests() matched the recording and was served; the live model read its recorded result.
    assert report["unused"] == [1, 2, 3, 5]
    passed, failed = recorded_run["result"]["passed"], recorded_run["result"]["failed"]
    assert f"Last run: {passed} passed, {failed} failed." in answer
    assert new_path in answer

    child = child_of(report)
    assert child.header["replay"]["models"] == "live" and child.header["replay"]["tools"] == "replay"
    got = [(e["type"], e["source"], e.get("recorded_seq")) for e in calls_of(child)]
    assert got == [
        ("model_call", "live", None),
        ("model_call", "live", None),
        ("tool_call", "replay", recorded_run["seq"]),
        ("model_call", "live", None),
    ]
    live_model = calls_of(child)[0]
    assert live_model["request"]["url"].startswith(srv.base_url)
    assert live_model["summary"]["tool_calls"][0]["name"] == "write_file"
    # The 2nd live request carried the divergence as the write_file tool's error result.
    sent = calls_of(child)[1]["request"]["body"]["messages"][3]["content"]
    assert json.loads(sent)["error"].startswith("Divergence: replay diverged at the 1st tool call")


def test_tools_live_models_replayed(rec: Recording) -> None:
    assert log_lines(rec.workdir) == 1
    (rec.workdir / next(rec.workdir.glob("*.py")).name).unlink()  # write_file must write it again
    with forkpoint.replay(rec.session, models="replay", tools="live") as rp:
        answer = run_agent(DEAD_URL, rec.workdir, echo=None)
    assert answer == rec.answer  # the recorded model decisions, served
    assert log_lines(rec.workdir) == 2  # run_tests' body ran
    written = rec.session.by_type("tool_call")[0]
    assert (rec.workdir / written["args"]["path"]).read_text() == written["args"]["content"]
    report = rp.report()
    assert report["divergence"] is None
    assert report["live_calls"] == {"models": 0, "tools": 2}
    assert report["unused"] == [2, 4]  # the recorded tool results were not needed
    got = [(e["type"], e["source"], e.get("recorded_seq")) for e in calls_of(child_of(report))]
    assert got == [
        ("model_call", "replay", 1),
        ("tool_call", "live", None),
        ("model_call", "replay", 3),
        ("tool_call", "live", None),
        ("model_call", "replay", 5),
    ]
    live_run = calls_of(child_of(report))[3]
    assert live_run["result"] == rec.session.by_type("tool_call")[1]["result"]


# --------------------------------------------------------------------------- 6. policies after a divergence


def test_policy_stop_raises(rec: Recording) -> None:
    with pytest.raises(forkpoint.Divergence) as caught:
        with forkpoint.replay(rec.session, overrides=[FAILING_SPEC], on_divergence="stop") as rp:
            run_agent(DEAD_URL, rec.workdir, echo=None)
    report = rp.report()
    assert report["divergence"] == caught.value.report
    assert report["live_calls"] == {"models": 0, "tools": 0} and report["drift"] == []
    assert report["policy"] == "stop"


def test_policy_live_continues_against_a_running_server(rec: Recording) -> None:
    with ModelServer(turns=2, seed=3) as srv:
        with forkpoint.replay(rec.session, overrides=[FAILING_SPEC], on_divergence="live") as rp:
            answer = run_agent(srv.base_url, rec.workdir, echo=None)
        asked = [r["path"] for r in srv.requests]
    assert asked == ["/v1/chat/completions"]  # only the divergent call went live
    # The live model read the overridden result.
    assert "Last run: 0 passed, 2 failed." in answer
    report = rp.report()
    div = report["divergence"]
    assert (div["kind"], div["position"], div["expected"]["seq"]) == ("model_call", 3, 5)
    assert report["live_calls"] == {"models": 1, "tools": 0}
    assert report["unused"] == [5]
    child = child_of(report)
    got = [(e["type"], e["source"]) for e in calls_of(child)]
    assert got == [
        ("model_call", "replay"),
        ("tool_call", "replay"),
        ("model_call", "replay"),
        ("tool_call", "override"),
        ("model_call", "live"),
    ]
    live_call = calls_of(child)[4]
    assert "recorded_seq" not in live_call
    assert live_call["request"]["url"].startswith(srv.base_url)
    assert live_call["summary"]["stop_reason"] == "stop"
    end = child.end()
    assert end is not None and end["exit_code"] == 0


def _ask(provider: str, base_url: str, prompt: str) -> None:
    """One model call as users write it: the SDK (or ``requests``) reads its key from the environment."""
    if provider == "openai":
        openai.OpenAI(base_url=base_url + "/v1", max_retries=0).chat.completions.create(
            model="demo-model", messages=[{"role": "user", "content": prompt}]
        )
    elif provider == "anthropic":
        anthropic.Anthropic(base_url=base_url, max_retries=0).messages.create(
            model="claude-demo", max_tokens=64, messages=[{"role": "user", "content": prompt}]
        )
    elif provider == "gemini":
        from google import genai
        from google.genai import types

        client = genai.Client(
            http_options=types.HttpOptions(base_url=base_url)
        )  # (kept: closes when collected)
        client.models.generate_content(model="gemini-demo", contents=prompt)
    else:  # the key in the query string (?key=), as Gemini's REST API takes it
        import requests

        requests.post(
            f"{base_url}/v1beta/models/gemini-demo:generateContent",
            params={"key": os.environ["GEMINI_API_KEY"]},
            json={"contents": [{"role": "user", "parts": [{"text": prompt}]}]},
            timeout=10,
        ).raise_for_status()


@pytest.mark.parametrize(
    ("provider", "var"),
    [
        ("openai", "OPENAI_API_KEY"),
        ("anthropic", "ANTHROPIC_API_KEY"),
        ("gemini", "GEMINI_API_KEY"),
        ("query", "GEMINI_API_KEY"),
    ],
)
def test_policy_live_never_sends_the_placeholder_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, provider: str, var: str
) -> None:
    """A replay without the recording's API key sets a placeholder so that the SDK starts; a call
    that goes live after a divergence would send that placeholder upstream (a 401 the run takes for
    the model's answer). It is not sent: the program gets NetworkBlocked, and the report names the
    key that is missing."""
    for k in API_KEY_VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv(var, "AIzaSy" + "Q" * 33 if var == "GEMINI_API_KEY" else "sk-real-key-123456789")
    with ModelServer(turns=0, seed=1) as srv:
        with forkpoint.record(store=tmp_path) as rec:
            _ask(provider, srv.base_url, "hello")
        monkeypatch.delenv(var)
        with forkpoint.replay(rec.session_path, on_divergence="live") as rp:
            with pytest.raises(Exception) as caught:
                _ask(provider, srv.base_url, "changed")
        sent = srv.requests[1:]
    assert sent == [], f"sent upstream with {PLACEHOLDER_KEY!r}"
    # (the SDKs wrap it: openai's and anthropic's as the cause, requests' among its arguments)
    said = " ".join(repr(e) for e in (caught.value, caught.value.__cause__, caught.value.__context__))
    assert 'NetworkBlocked("forkpoint replay did not send POST' in said and var in said
    report = rp.report()
    assert report["divergence"] is not None and not report["reproduced"]
    assert report["live_calls"]["models"] == 0
    assert [f"{var}" in b and "not sent" in b for b in report["network_blocked"]] == [True]


def test_a_replay_leaves_no_placeholder_key_in_openais_module_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``openai.chat.completions.create`` (the module-level client) is built once, from the
    environment, and keeps its key in ``openai.api_key`` for the process. Built inside a replay
    without the recording's key, it kept the placeholder: a live call after the block went out with
    ``Bearer forkpoint-replay-no-key`` (a 401), though the environment then had a key."""
    for k in API_KEY_VARS:
        monkeypatch.delenv(k, raising=False)
    for name, value in {"api_key": None, "_client": None, "max_retries": 0}.items():
        monkeypatch.setattr(openai, name, value)  # (a module client of this test's own, undone after)
    ask: Any = {"model": "demo-model", "messages": [{"role": "user", "content": "hello"}]}
    with LocalServer(chat_script=["hi", "hi"]) as srv:
        monkeypatch.setattr(openai, "base_url", srv.url + "/v1/")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-record-key-123456789")
        with forkpoint.record(store=tmp_path) as rec:
            _ask("openai", srv.url, "hello")
        monkeypatch.delenv("OPENAI_API_KEY")
        with forkpoint.replay(rec.session_path) as rp:
            openai.chat.completions.create(**ask)
        assert rp.report()["reproduced"], rp.report()
        monkeypatch.setenv("OPENAI_API_KEY", "sk-live-key-123456789")
        openai.chat.completions.create(**ask)
        sent = [r["headers"].get("authorization") for r in srv.requests]
    assert sent == ["Bearer sk-record-key-123456789", "Bearer sk-live-key-123456789"]


def test_models_live_without_the_api_key_does_not_say_its_refused_call_was_made_live(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under models live, a call that carried the placeholder key was refused, never sent, yet the
    verdict said "1 of them model calls this run made live"."""
    for k in API_KEY_VARS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-real-key-123456789")
    with ModelServer(turns=0, seed=1) as srv:
        with forkpoint.record(store=tmp_path) as rec:
            _ask("openai", srv.base_url, "hello")
        monkeypatch.delenv("OPENAI_API_KEY")
        with forkpoint.replay(rec.session_path, models="live") as rp:
            with pytest.raises(NetworkBlocked):
                _ask("openai", srv.base_url, "hello")
        assert srv.requests[1:] == []
    report = rp.report()
    assert report["live_calls"]["models"] == 0 and len(report["unused"]) == 1
    line = summary_line(report)
    assert "left unused" in line and "made live" not in line, line


def test_a_live_call_with_a_scrubbed_secrets_placeholder_as_its_key_is_not_sent(tmp_path: Path) -> None:
    """A key a tool fetched (a vault) is stored as its placeholder, and a replay hands the program
    that: under models live, the client built with it sent ``Bearer [REDACTED:openai-key:…]``
    upstream, and the run took the provider's 401 for the model's answer ("replay finished with
    models live", exit 0). It is not sent: NetworkBlocked, said in the report."""

    @forkpoint.tool
    def fetch_key() -> str:
        return "sk-proj-" + "A" * 48

    def ask(base_url: str) -> None:
        client = openai.OpenAI(api_key=fetch_key(), base_url=base_url + "/v1", max_retries=0)
        client.chat.completions.create(model="demo-model", messages=[{"role": "user", "content": "hi"}])

    with ModelServer(turns=0, seed=1) as srv:
        with forkpoint.record(store=tmp_path) as rec:
            ask(srv.base_url)
        with forkpoint.replay(rec.session_path, models="live") as rp:
            with pytest.raises(NetworkBlocked, match="placeholder of a secret scrubbed when recorded"):
                ask(srv.base_url)
        assert srv.requests[1:] == []
    report = rp.report()
    assert report["live_calls"]["models"] == 0 and report["placeholders_served"] == [1]
    (blocked,) = report["network_blocked"]
    assert "(not sent: authorization carried [REDACTED:openai-key:" in blocked, blocked


def test_a_live_call_with_a_token_a_plain_login_served_says_what_is_true_of_any_server(
    tmp_path: Path, server: LocalServer
) -> None:
    """A login server (no model provider) hands out a token, served on replay as its placeholder;
    the call that bears it, gone live after a divergence, is not sent. Its refusal said "the
    provider would refuse" of a login server; and the call, not made, is counted as no live call of
    any kind."""
    server.route("/login", lambda r: json_reply({"token": "sk-proj-" + "a1B2c3D4e5" * 5}))
    server.route("/api/*", lambda r: json_reply({"items": [1, 2]}))

    def run(item: str) -> None:
        token = httpx.post(f"{server.url}/login", json={"user": "ann"}).json()["token"]
        httpx.get(f"{server.url}/api/{item}", headers={"Authorization": f"Bearer {token}"})

    with forkpoint.record(store=tmp_path) as rec:
        run("a")
    with forkpoint.replay(rec.session_path, on_divergence="live") as rp:
        with pytest.raises(NetworkBlocked) as refused:
            run("b")
    assert "the server would refuse" in str(refused.value) and "provider" not in str(refused.value)
    assert len(server.requests) == 2  # the recorded two
    report = rp.report()
    assert report["live_calls"] == {"models": 0, "tools": 0}, report["live_calls"]
    (blocked,) = report["network_blocked"]
    assert "(not sent: authorization carried [REDACTED:openai-key:" in blocked, blocked


def test_a_live_call_with_a_cookie_a_served_set_cookie_set_is_not_sent(
    tmp_path: Path, server: LocalServer
) -> None:
    """A replayed login's Set-Cookie hands the client ``sid=REDACTED-…`` (its value is scrubbed):
    the next call, gone live after a divergence, sent that cookie upstream and took the server's
    401 under 'replay DIVERGED, then went live as asked', exit 0. It is not sent: NetworkBlocked,
    said in the report."""
    sessions = {"s3cr3t-session-id"}
    server.route(
        "/login",
        lambda r: json_reply({"ok": True}, headers=[("Set-Cookie", "sid=s3cr3t-session-id; Path=/")]),
    )
    server.route(
        "/api/*",
        lambda r: (
            json_reply({"path": r["path"]})
            if r["headers"].get("cookie", "")[4:] in sessions
            else json_reply({}, 401)
        ),
    )

    def run(item: str) -> None:
        with httpx.Client(base_url=server.url) as client:
            client.post("/login", data={"user": "bob"})
            client.get(f"/api/{item}").raise_for_status()

    with forkpoint.record(store=tmp_path) as rec:
        run("a")
    with forkpoint.replay(rec.session_path, on_divergence="live") as rp:
        with pytest.raises(NetworkBlocked, match="sid=REDACTED-[0-9a-f]{8}, the placeholder of a cookie"):
            run("b")
    assert [r["path"] for r in server.requests] == ["/login", "/api/a"]
    (blocked,) = rp.report()["network_blocked"]
    assert "(not sent: cookie carried sid=REDACTED-" in blocked, blocked


@forkpoint.tool
def vault() -> dict[str, str]:
    """A login's credentials, as a tool that fetched them from a vault would return them."""
    return {"user": "bob", "password": "hunter22-correct-horse"}


@pytest.mark.parametrize("multipart", [False, True])
def test_a_live_login_with_a_served_placeholder_as_its_form_password_is_not_sent(
    tmp_path: Path, server: LocalServer, multipart: bool
) -> None:
    """A password a tool fetched (a vault) is served as its placeholder; a login form posting it,
    gone live after a divergence, sent ``password=%5BREDACTED%3Asecret-field%3A…%5D`` (or the field
    of a multipart form) upstream under 'replay DIVERGED, then went live as asked', exit 0. It is
    not sent: NetworkBlocked, said in the report."""
    server.route("/login", lambda r: json_reply({"ok": True}))

    def login(note: str) -> None:
        creds = vault()
        files = {"f": ("a.txt", b"x")} if multipart else None
        httpx.post(f"{server.url}/login", data={**creds, "note": note}, files=files).raise_for_status()

    with forkpoint.record(store=tmp_path) as rec:
        login("a")
    with forkpoint.replay(rec.session_path, on_divergence="live") as rp:
        with pytest.raises(
            NetworkBlocked, match="its form field 'password' carried \\[REDACTED:secret-field:"
        ):
            login("b")
    assert len(server.requests) == 1
    (blocked,) = rp.report()["network_blocked"]
    assert "(not sent: its form field 'password' carried [REDACTED:secret-field:" in blocked, blocked


@pytest.mark.parametrize("how", ["auth", "url"])
def test_a_live_call_with_a_served_placeholder_as_its_basic_password_is_not_sent(
    tmp_path: Path, server: LocalServer, how: str
) -> None:
    """A password a tool fetched is served as its placeholder; a call gone live after a divergence
    with it as basic auth (``auth=(user, password)``, or a URL's ``user:password@``) sent
    ``Authorization: Basic`` of ``bob:[REDACTED:…]`` upstream, base64 hiding it from the check of
    headers. It is not sent: NetworkBlocked, said in the report."""
    server.route("/api/*", lambda r: json_reply({"ok": True}))

    @forkpoint.tool
    def vault() -> dict[str, str]:
        return {
            "password": "hunter22-correct-horse",
            "url": f"http://bob:hunter22-correct-horse@{server.url[7:]}/api",
        }

    def call(note: str) -> None:
        creds = vault()
        if how == "auth":
            httpx.post(f"{server.url}/api", auth=("bob", creds["password"]), json={"n": note})
        else:
            httpx.post(creds["url"], json={"n": note})

    with forkpoint.record(store=tmp_path) as rec:
        call("a")
    with forkpoint.replay(rec.session_path, on_divergence="live") as rp:
        with pytest.raises(NetworkBlocked, match="authorization carried \\[REDACTED:"):
            call("b")
    assert len(server.requests) == 1
    (blocked,) = rp.report()["network_blocked"]
    assert blocked.startswith(f"{server.url[7:]} (not sent: authorization carried [REDACTED:"), blocked


def test_a_live_call_with_a_served_placeholder_in_its_url_as_requests_encodes_it_is_not_sent(
    tmp_path: Path, server: LocalServer
) -> None:
    """requests (and aiohttp) leave a placeholder's colons unencoded in a URL
    (``?key=%5BREDACTED:google-api-key:…%5D``), which the URL check did not read as a placeholder:
    a key a tool fetched, put in ``?key=`` of a call gone live after a divergence, went upstream.
    It is not sent, said in the report."""
    server.route("/api", lambda r: json_reply({"ok": True}))

    @forkpoint.tool
    def vault() -> str:
        return "AIzaSyD" + "x" * 32

    def call(note: str) -> None:
        requests.get(f"{server.url}/api?key={vault()}&n={note}").raise_for_status()

    with forkpoint.record(store=tmp_path) as rec:
        call("a")
    with forkpoint.replay(rec.session_path, on_divergence="live") as rp:
        with pytest.raises(requests.ConnectionError, match="its URL carried \\[REDACTED:google-api-key:"):
            call("b")
    assert len(server.requests) == 1
    (blocked,) = rp.report()["network_blocked"]
    assert "(not sent: its URL carried [REDACTED:google-api-key:" in blocked, blocked


def test_a_live_login_with_a_served_placeholder_as_its_json_password_is_not_sent(
    tmp_path: Path, server: LocalServer
) -> None:
    """As a form's, a JSON login's password (``httpx.post(url, json=creds)``, an API's way) a tool
    fetched is served as its placeholder, and gone live it was sent upstream as
    ``{"password": "[REDACTED:secret-field:…]"}``: it is not sent. A placeholder in a member of a
    list (a model request's messages: what the model sees) is no credential sent, and is."""
    server.route("/login", lambda r: json_reply({"ok": True}))

    def login(note: str) -> None:
        creds = vault()
        httpx.post(f"{server.url}/login", json={"messages": [creds], "note": note}).raise_for_status()
        httpx.post(f"{server.url}/login", json={"auth": creds, "note": note}).raise_for_status()

    with forkpoint.record(store=tmp_path) as rec:
        login("a")
    with forkpoint.replay(rec.session_path, on_divergence="live") as rp:
        with pytest.raises(
            NetworkBlocked, match="its JSON field 'password' carried \\[REDACTED:secret-field:"
        ):
            login("b")
    assert len(server.requests) == 3  # (the recorded two, and the messages gone live)
    (blocked,) = rp.report()["network_blocked"]
    assert "(not sent: its JSON field 'password' carried [REDACTED:secret-field:" in blocked, blocked


def test_policy_fifo_serves_the_next_recorded_call(rec: Recording) -> None:
    with forkpoint.replay(rec.session, overrides=[FAILING_SPEC], on_divergence="fifo") as rp:
        answer = run_agent(DEAD_URL, rec.workdir, echo=None)
    assert answer == rec.answer  # the recorded answer, though the request differed
    report = rp.report()
    (drift,) = report["drift"]
    assert (drift["kind"], drift["position"], drift["served_seq"]) == ("model_call", 3, 5)
    assert [c["path"] for c in drift["diff"]] == ["$.body.messages[5].content"]
    assert json.loads(drift["diff"][0]["actual"]) == FAILING
    assert report["divergence"]["served_seq"] == 5
    assert report["unused"] == [] and report["live_calls"] == {"models": 0, "tools": 0}
    got = [(e.get("source"), e.get("recorded_seq")) for e in calls_of(child_of(report))]
    assert got == [("replay", 1), ("replay", 2), ("replay", 3), ("override", 4), ("replay", 5)]


# --------------------------------------------------------------------------- 6./7. the CLI


def flat(text: str) -> str:
    """Rich wraps long lines at the terminal width: compare with whitespace collapsed."""
    return " ".join(text.split())


def final_line(stdout: str) -> str:
    return next(line for line in stdout.splitlines() if line.startswith("final: "))


@pytest.fixture
def in_store(rec: Recording, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Recording:
    """The in-process recording, with ``tmp_path`` as working directory and its store as default."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FORKPOINT_STORE", str(rec.session.path.parent))
    return rec


@pytest.fixture
def cli_rec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A demo run recorded by ``forkpoint record -- python -m forkpoint.demo.agent``: (store, workdir).
    The server is stopped afterwards; the working directory is ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FORKPOINT_STORE", str(tmp_path / "store"))
    work = tmp_path / "work"
    with ModelServer(turns=2, seed=21) as srv:
        cmd = [
            sys.executable,
            "-m",
            "forkpoint.demo.agent",
            "--base-url",
            srv.base_url,
            "--workdir",
            str(work),
        ]
        res = CliRunner().invoke(main, ["record", "--", *cmd])
        assert res.exit_code == 0, res.output
    return tmp_path / "store", work


@pytest.mark.slow
def test_cli_override_from_file_with_report(cli_rec: tuple[Path, Path]) -> None:
    store, work = cli_rec
    (parent,) = session_dirs(store)
    Path("override.json").write_text(json.dumps(FAILING))
    res = CliRunner().invoke(
        main, ["replay", "last", "--override", "tool:run_tests.result=@override.json", "--report", "r.json"]
    )
    assert res.exit_code == EXIT_DIVERGENCE, res.output
    assert log_lines(work) == 1
    report = json.loads(Path("r.json").read_text())
    assert report["overrides"] == [
        {
            "spec": "tool:run_tests.result=@override.json",
            "field": "result",
            "value": FAILING,
            "seq": 4,
            "applied": True,
        }
    ]
    div = report["divergence"]
    assert (div["kind"], div["position"], div["expected"]["seq"]) == ("model_call", 3, 5)
    assert "$.body.messages[5].content" in [c["path"] for c in div["diff"]]
    said = flat(res.output)
    assert "replay diverged at the 3rd model call" in said
    assert "override tool:run_tests.result=@override.json → event seq 4: applied" in said
    # The what-if run is a child session of the recorded one.
    child_dir = [d for d in session_dirs(store) if d != parent]
    assert [str(d) for d in child_dir] == [report["child_session"]]
    child = Session.load(child_dir[0])
    assert child.header["parent"]["session_id"] == parent.name
    assert [e["source"] for e in calls_of(child)] == ["replay", "replay", "replay", "override"]


@pytest.mark.slow
def test_cli_override_of_the_last_call_does_not_claim_the_path_was_unchanged(
    cli_rec: tuple[Path, Path],
) -> None:
    """An override of the run's last model call said "the override(s) did not change the agent's
    path: every later call matched the recording", where no later call came to match."""
    store, _ = cli_rec
    (recorded,) = session_dirs(store)
    last = sum(1 for e in Session.load(recorded).events if e["type"] == "model_call")
    res = CliRunner().invoke(main, ["replay", recorded.name, "--override", f'model#{last}.text="I give up."'])
    said = flat(res.output)
    assert res.exit_code == 0, res.output
    assert "did not change the agent's path" not in said, res.output
    assert "no call came after the override of event seq" in said and "(the run's last call)" in said, (
        res.output
    )


@pytest.mark.slow
def test_cli_override_that_ends_the_run_early_is_the_answer_not_a_failure(cli_rec: tuple[Path, Path]) -> None:
    """``model#1.text="I give up."``: the agent stops after its first call, as the experiment asked.
    The run did not diverge (every call it made matched), so the replay exits with the agent's own
    code and says it ended early after the override, rather than "did not reproduce" and exit 3. A
    plain replay that ends early is still a failure."""
    store, work = cli_rec
    (recorded,) = session_dirs(store)
    res = CliRunner().invoke(main, ["replay", recorded.name, "--override", 'model#1.text="I give up."'])
    said = flat(res.output)
    assert res.exit_code == 0, res.output
    assert "replay ok, ended early after the override" in said and "4 recorded events left unused" in said
    assert "did not change the agent's path" not in said
    assert log_lines(work) == 1
    plain = CliRunner().invoke(main, ["replay", recorded.name, "--", sys.executable, "-c", "pass"])
    assert plain.exit_code == EXIT_DIVERGENCE
    assert "DID NOT REPRODUCE (the run ended before asking for every recorded call)" in flat(plain.output)


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["stop", "live", "fifo"])
def test_cli_policies(in_store: Recording, policy: str, capfd: pytest.CaptureFixture[str]) -> None:
    work, recorded = in_store.workdir, in_store.session
    capfd.readouterr()
    with ModelServer(turns=2, seed=4) as srv:
        cmd = [
            sys.executable,
            "-m",
            "forkpoint.demo.agent",
            "--base-url",
            srv.base_url,
            "--workdir",
            str(work),
        ]
        res = CliRunner().invoke(
            main,
            [
                "replay",
                "last",
                "--override",
                FAILING_SPEC,
                "--on-divergence",
                policy,
                "--report",
                "r.json",
                "--",
                *cmd,
            ],
        )
        asked = len(srv.requests)
    agent_out = capfd.readouterr().out  # the replayed agent's own stdout
    said = flat(res.output)  # forkpoint's report lines
    report = json.loads(Path("r.json").read_text())
    assert report["divergence"]["position"] == 3 and report["policy"] == policy
    child = Session.load(report["child_session"])
    sources = [e["source"] for e in calls_of(child)]
    if policy == "stop":
        assert res.exit_code == EXIT_DIVERGENCE and asked == 0
        assert sources == ["replay", "replay", "replay", "override"]
    elif policy == "live":
        assert res.exit_code == 0 and asked == 1
        assert sources == ["replay", "replay", "replay", "override", "live"]
        assert "Last run: 0 passed, 2 failed." in final_line(agent_out)
        assert "live calls: 1 model, 0 tool" in said
    else:
        # The recorded answer was served to a request that drifted: not a reproduction (exit 3);
        # --accept-drift is the user's way to say that is what they want (tests/replay/test_verdicts.py).
        assert res.exit_code == EXIT_DIVERGENCE and asked == 0
        assert sources == ["replay", "replay", "replay", "override", "replay"]
        assert report["drift"][0]["served_seq"] == 5
        assert "1 request(s) drifted (fifo)" in said
        # The recorded final answer was served, though the request had the overridden result.
        recorded_result = recorded.by_type("tool_call")[1]["result"]
        final = final_line(agent_out)
        assert f"Last run: {recorded_result['passed']} passed, {recorded_result['failed']} failed." in final
    assert log_lines(work) == 1  # no tool body ran under any policy


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        # (a typo: the tools the session has are named, or the user must go and look)
        ("tool:nosuch=1", "the session has 0 call(s) of tool 'nosuch'; its tools: run_tests, write_file"),
        ("tool:run_tests#9=1", "the session has 1 call(s) of tool 'run_tests'"),
        ('tool:run_tests.result={"passed":', "value is not JSON"),
        ('model#7.text="x"', "the session has 3 model call(s)"),
        ("tool:run_tests.bogus=1", "a tool call's field is one of result, error"),
        ("tool:run_tests.result=@missing.json", "cannot read"),
        # Values that do not fit the call are refused before the agent starts, not inside it.
        ('model#1.tool_calls=[{"bad":1}]', 'tool_calls is a list of {"name": …, "arguments": …}'),
        ("model#1.text=42", "text is a JSON string"),
        (
            'model#1.tool_calls=[{"name":"run_tests","arguments":5}]',
            "are an object or a JSON string, not int",
        ),
        (
            'model#1.tool_calls=[{"name":"run_tests","arguments":"{oops"}]',
            "a string that is not a JSON object",
        ),
        ('model#1.body={"not": "chunks"}', "a streamed body is a list of raw chunk strings"),
    ],
)
def test_cli_bad_override_spec(in_store: Recording, spec: str, problem: str) -> None:
    store, work = in_store.session.path.parent, in_store.workdir
    before = session_dirs(store)
    res = CliRunner().invoke(main, ["replay", "last", "--override", spec])
    assert res.exit_code == 2, res.output
    assert problem in flat(res.output) and "--override" in res.output
    if "call(s)" in problem:  # (which session `last` was: a what-if since is `last` too)
        assert f"(session {in_store.session.id})" in flat(res.output), res.output
    assert session_dirs(store) == before  # no child session written
    assert log_lines(work) == 1


@pytest.mark.parametrize(
    ("source", "spec", "problem"),
    [
        (
            ["--tools", "live"],
            'tool:run_tests.result={"passed": true}',
            "(--tools live: every tool runs for real)",
        ),
        (["--models", "live"], 'model#2.text="done"', "(--models live: every model call is made for real)"),
    ],
)
def test_cli_override_of_a_call_the_run_makes_live_is_refused(
    in_store: Recording, source: list[str], spec: str, problem: str
) -> None:
    """Under --tools live (--models live) a tool (model) override was never applied, and the report
    said the run "went another way first", though it made that very call, live."""
    store, work = in_store.session.path.parent, in_store.workdir
    before = session_dirs(store)
    res = CliRunner().invoke(main, ["replay", "last", *source, "--override", spec])
    said = flat(res.output)
    assert res.exit_code == 2 and problem in said and "it would never apply" in said, res.output
    assert session_dirs(store) == before and log_lines(work) == 1  # nothing ran, no child written


@pytest.mark.parametrize("spec", ["tool:nosuch=1", "tool:run_tests#9=1", "seq:99=1", "tool:run_tests={"])
def test_api_bad_override_spec_writes_no_child(rec: Recording, spec: str) -> None:
    store = rec.session.path.parent
    before = session_dirs(store)
    with pytest.raises(OverrideError):
        with forkpoint.replay(rec.session, overrides=[spec]):
            pass
    assert session_dirs(store) == before
    assert forkpoint.active() is None


# --------------------------------------------------------------------------- tool names with dots


@forkpoint.tool(name="db.query")
def db_query(sql: str) -> list[dict[str, Any]]:
    """A tool whose recorded name has a dot, as ``--tool module:Class.method`` tools do."""
    return [{"sql": sql, "rows": 1}]


def test_override_a_tool_whose_name_has_a_dot(tmp_path: Path) -> None:
    with forkpoint.record(store=tmp_path) as rec:
        first, second = db_query("select 1"), db_query("select 2")
    assert second == [{"sql": "select 2", "rows": 1}]
    overrides = ['tool:db.query=[{"rows": 0}]', 'tool:db.query#2.error={"type": "TimeoutError"}']
    with forkpoint.replay(rec.session_path, overrides=overrides) as rp:
        assert db_query("select 1") == [{"rows": 0}]
        with pytest.raises(TimeoutError):
            db_query("select 2")
    assert [(o["seq"], o["applied"]) for o in rp.report()["overrides"]] == [(1, True), (2, True)]
    assert first == [{"sql": "select 1", "rows": 1}]


def test_show_of_a_what_if_run_marks_each_calls_source(rec: Recording) -> None:
    """The text timeline of a what-if session says, per call, whether it was replayed, overridden or
    live, and names its parent and the overrides (the HTML viewer shows the same)."""
    from rich.console import Console

    from forkpoint.show import render

    spec = 'tool:run_tests.result={"passed":0,"failed":2,"output":"FAIL"}'
    with ModelServer(turns=2, seed=11) as srv:
        with forkpoint.replay(rec.session, overrides=[spec], on_divergence="live") as rp:
            run_agent(srv.base_url, rec.workdir, echo=None)
    child = child_of(rp.report())
    console = Console(record=True, width=250)
    render(child, console)
    text = console.export_text()
    assert f"parent   {rec.session.id}\n" in text and f"what-if  {spec}" in text
    run_tests = next(e for e in calls_of(child) if e.get("source") == "override")
    lines = text.splitlines()
    assert any(
        f"#{run_tests['seq']}" in ln and f"OVERRIDE of #{run_tests['recorded_seq']}" in ln for ln in lines
    )
    assert sum("replayed of #" in ln for ln in lines) == sum(e["source"] == "replay" for e in calls_of(child))
    assert (
        sum(ln.rstrip().endswith("LIVE") for ln in lines)
        == sum(e["source"] == "live" for e in calls_of(child))
        > 0
    )
    assert "{'session_id'" not in text


def test_an_override_of_an_mcp_tools_result_must_be_a_call_tool_result() -> None:
    """``tool:now.result="frozen"`` on an MCP tool was served as it was: the agent's MCP client
    failed validating it (a pydantic ValidationError traceback, or "An error occurred while running
    the tool" sent to the model). It is refused before anything runs, saying the shape it needs;
    a tool with an output schema needs its ``structuredContent`` too."""
    from forkpoint.override import parse, resolve

    events = [
        {
            "seq": 3,
            "type": "tool_call",
            "tool": "now",
            "args": {},
            "mcp": {"server": "clock", "method": "tools/call"},
            "result": {
                "content": [{"type": "text", "text": "12:00"}],
                "structuredContent": {"result": "12:00"},
            },
        }
    ]
    with pytest.raises(OverrideError, match=r"now is an MCP tool: its result is a CallToolResult"):
        resolve([parse('tool:now.result="frozen"')], events)
    with pytest.raises(OverrideError, match=r"now has an output schema .*give structuredContent too"):
        resolve([parse('tool:now.result={"content": [{"type": "text", "text": "frozen"}]}')], events)
    whole = '{"content": [{"type": "text", "text": "frozen"}], "structuredContent": {"result": "frozen"}}'
    assert list(resolve([parse(f"tool:now.result={whole}")], events)) == [3]
    # A recorded error answer has no structuredContent: the server's recorded listing says the tool
    # has an output schema (the client requires structuredContent of a result that is no error).
    failed = {**events[0], "result": {"content": [{"type": "text", "text": "down"}], "isError": True}}
    listing = {
        "seq": 2,
        "type": "tool_call",
        "tool": "mcp:tools/list",
        "args": {},
        "mcp": {"server": "clock", "method": "tools/list"},
        "result": {"tools": [{"name": "now", "inputSchema": {}, "outputSchema": {"type": "object"}}]},
    }
    bare = 'tool:now.result={"content": [{"type": "text", "text": "frozen"}]}'
    with pytest.raises(OverrideError, match=r"now has an output schema \(its server listed one\)"):
        resolve([parse(bare)], [listing, failed])
    assert list(resolve([parse(bare)], [failed])) == [3]  # (no listing recorded: nothing to go by)
    still_failing = 'tool:now.result={"content": [{"type": "text", "text": "x"}], "isError": true}'
    assert list(resolve([parse(still_failing)], [listing, failed])) == [3]


def test_an_override_of_an_mcp_answer_is_checked_as_the_sdks_class_of_it() -> None:
    """``seq:N.result={"tools": []}`` on the recorded ``tools/list`` ("what if the server had listed
    no tools?") was refused as "not a CallToolResult", the class of a tool's result, not of this
    request's answer; and a value of the right outline that the session does not accept
    (``{"tools": 5}``, a content item of an unknown type) was said "applied" while the agent got a
    pydantic ValidationError. Each is checked as the mcp SDK's class of its answer, before the run."""
    from forkpoint.override import parse, resolve

    pytest.importorskip("mcp")
    listing = {
        "seq": 2,
        "type": "tool_call",
        "tool": "mcp:tools/list",
        "args": {},
        "mcp": {"server": "clock", "method": "tools/list"},
        "result": {"tools": [{"name": "now", "inputSchema": {"type": "object"}}]},
    }
    call = {
        "seq": 3,
        "type": "tool_call",
        "tool": "now",
        "args": {},
        "mcp": {"server": "clock", "method": "tools/call"},
        "result": {"content": [{"type": "text", "text": "12:00"}]},
    }
    assert list(resolve([parse('seq:2.result={"tools": []}')], [listing, call])) == [2]
    with pytest.raises(OverrideError, match=r"mcp:tools/list is the MCP request tools/list: .*JSON object"):
        resolve([parse("seq:2.result=[]")], [listing, call])
    with pytest.raises(OverrideError, match=r"not a ListToolsResult.*tools: Input should be a valid list"):
        resolve([parse('seq:2.result={"tools": 5}')], [listing, call])
    with pytest.raises(OverrideError, match=r"not a CallToolResult.*content\.0"):
        resolve([parse('tool:now.result={"content": [{"type": "bogus"}]}')], [listing, call])


class Stock(pydantic.BaseModel):
    symbol: str = pydantic.Field(alias="ticker")
    price: float
    at: dt.datetime


def test_an_overridden_pydantic_result_is_validated_as_its_model(tmp_path: Path) -> None:
    """An override's pydantic value was rebuilt without validation, as a recorded one is: the agent
    got ``price='12.5'`` (and doubled it into ``'12.512.5'``), a string for a datetime, or a model
    missing a required field. It is validated: converted to the field types, or refused, loudly. Its
    fields are named as a model is stored, by name, an aliased one too (``symbol``, not ``ticker``)."""

    @forkpoint.tool
    def get_stock(symbol: str) -> Stock:
        return Stock(ticker=symbol, price=10.0, at=dt.datetime(2026, 1, 1))

    with forkpoint.record(store=tmp_path / "s") as rec:
        get_stock("ACME")
    ref = f"{Stock.__module__}:{Stock.__qualname__}"
    given = {"symbol": "X", "price": "12.5", "at": "2026-01-02T00:00:00Z"}
    value = json.dumps({"$type": ref, "kind": "pydantic", "value": given})
    with forkpoint.replay(rec.session_path, overrides=[f"tool:get_stock.result={value}"]):
        stock = get_stock("ACME")
    assert stock.price * 2 == 25.0 and stock.at == dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    assert stock.symbol == "X"
    short = json.dumps({"$type": ref, "kind": "pydantic", "value": {"symbol": "X"}})
    with pytest.raises(Exception, match=r"does not validate as one: price: Field required"):
        with forkpoint.replay(rec.session_path, overrides=[f"tool:get_stock.result={short}"]) as rp:
            get_stock("ACME")
    # The program got a divergence, not the value: the report said "applied" all the same.
    (state,) = rp.report()["overrides"]
    assert not state["applied"] and "price: Field required" in state["refused"]


def test_an_overridden_generators_items_are_validated_as_a_result_is(tmp_path: Path) -> None:
    """A generator tool's overridden items were rebuilt without validation: the agent got a
    ``Stock`` without its ``price`` (a string price stayed a string), and the report said applied."""

    @forkpoint.tool
    def stocks(n: int) -> Iterator[Stock]:
        for i in range(n):
            yield Stock(ticker=f"S{i}", price=1.0, at=dt.datetime(2026, 1, 1))

    with forkpoint.record(store=tmp_path / "s") as rec:
        assert len(list(stocks(2))) == 2
    ref = f"{Stock.__module__}:{Stock.__qualname__}"

    def spec(*items: dict[str, Any]) -> str:
        nodes = [{"$type": ref, "kind": "pydantic", "value": v} for v in items]
        node = {"$type": "builtins:generator", "kind": "generator", "value": nodes, "ended": "complete"}
        return f"tool:stocks.result={json.dumps(node)}"

    given = {"symbol": "X", "price": "12.5", "at": "2026-01-02T00:00:00Z"}
    with forkpoint.replay(rec.session_path, overrides=[spec(given)]):
        (got,) = list(stocks(2))
    assert got.price * 2 == 25.0 and got.symbol == "X"
    with pytest.raises(Exception, match=r"does not validate as one: price: Field required"):
        with forkpoint.replay(rec.session_path, overrides=[spec({"symbol": "X"})]) as rp:
            list(stocks(2))
    (state,) = rp.report()["overrides"]
    assert not state["applied"] and "price: Field required" in state["refused"]


@dataclasses.dataclass
class Reading:
    temp: float
    when: dt.datetime
    unit: str = "C"
    notes: list[str] = dataclasses.field(default_factory=list)


def test_an_overridden_dataclass_result_has_its_fields_and_only_them(tmp_path: Path) -> None:
    """An override's dataclass value was rebuilt without ``__init__``, as a recorded one is: a value
    lacking a required field gave the agent a ``Reading`` without ``when`` (an AttributeError later,
    far from the override), and a misspelt field was set as an attribute, silently. A field without
    a default is required, an unknown name refused, loudly; the defaults are filled in."""

    @forkpoint.tool
    def read_sensor(name: str) -> Reading:
        return Reading(21.5, dt.datetime(2026, 1, 1))

    with forkpoint.record(store=tmp_path / "s") as rec:
        read_sensor("a")
    ref = f"{Reading.__module__}:{Reading.__qualname__}"

    def spec(value: dict[str, Any]) -> str:
        node = {"$type": ref, "kind": "dataclass", "value": value}
        return f"tool:read_sensor.result={json.dumps(node)}"

    with forkpoint.replay(rec.session_path, overrides=[spec({"temp": 30.0, "when": 5})]):
        got = read_sensor("a")
    assert (got.temp, got.when, got.unit, got.notes) == (30.0, 5, "C", [])
    with pytest.raises(Exception, match=r"lacks its field 'when'"):
        with forkpoint.replay(rec.session_path, overrides=[spec({"temp": 30.0})]):
            read_sensor("a")
    with pytest.raises(Exception, match=r"has no field 'tmp'"):
        with forkpoint.replay(rec.session_path, overrides=[spec({"tmp": 30.0, "when": 5})]):
            read_sensor("a")


def test_a_refused_override_is_not_called_a_recording_that_could_not_be_handed_back(
    tmp_path: Path,
) -> None:
    """An override whose dataclass value lacked a field: the verdict said "asked for but served
    nothing, as what was recorded could not be handed back", blaming the recording, which was
    never offered. It names the override's value instead."""

    @forkpoint.tool
    def read_sensor(name: str) -> Reading:
        return Reading(21.5, dt.datetime(2026, 1, 1))

    with forkpoint.record(store=tmp_path / "s") as rec:
        read_sensor("a")
    node = {
        "$type": f"{Reading.__module__}:{Reading.__qualname__}",
        "kind": "dataclass",
        "value": {"temp": 3.0},
    }
    with pytest.raises(Exception, match=r"lacks its field 'when'"):
        with forkpoint.replay(
            rec.session_path, overrides=[f"tool:read_sensor.result={json.dumps(node)}"]
        ) as rp:
            read_sensor("a")
    report = rp.report()
    seq = Session.load(rec.session_path).by_type("tool_call")[0]["seq"]
    assert report["unservable"] == [seq], report
    said = summary_line(report)
    assert "what was recorded could not be handed back" not in said, said
    assert (
        f"asked for but served nothing, as the override's value could not be handed back: 1 call (seq {seq})"
        in said
    ), said


def test_plain_json_given_for_a_typed_result_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tool that returned a dataclass, overridden with a JSON object: the agent got a ``dict``, a
    value the tool could never return, and nothing said so (docs/overrides.md shows the typed form)."""

    @forkpoint.tool
    def read_sensor(name: str) -> Reading:
        return Reading(21.5, dt.datetime(2026, 1, 1))

    @forkpoint.tool
    def read_all() -> list[Reading]:
        return [Reading(1.0, dt.datetime(2026, 1, 1))]

    with forkpoint.record(store=tmp_path / "s") as rec:
        read_sensor("a"), read_all()
    capsys.readouterr()
    ref = f"{Reading.__module__}:{Reading.__qualname__}"
    plain = ['tool:read_sensor.result={"temp": 30.0, "when": 5}', 'tool:read_all=[{"temp": 2.0}]']
    with forkpoint.replay(rec.session_path, overrides=plain):
        assert type(read_sensor("a")) is dict and type(read_all()[0]) is dict  # (allowed: said)
    said = " ".join(capsys.readouterr().err.split())
    assert (
        f"override {plain[0]!r}: read_sensor returned a {ref.replace(':', '.')} when recorded; this value is "
        "plain JSON, so the agent gets a plain dict instead" in said
    ), said
    assert f"override {plain[1]!r}: read_all returned a {ref.replace(':', '.')}" in said, said
    assert f'To give it the recorded Reading: {{"$type": "{ref}", "kind": "dataclass"' in said, said
    when = {"$type": "datetime:datetime", "kind": "datetime", "value": "2026-02-01T00:00:00"}
    typed = json.dumps({"$type": ref, "kind": "dataclass", "value": {"temp": 30.0, "when": when}})
    with forkpoint.replay(rec.session_path, overrides=[f"tool:read_sensor.result={typed}"]):
        assert isinstance(read_sensor("a"), Reading)
    assert "plain JSON" not in capsys.readouterr().err
    # (a field of a typed value given as plain JSON where it was typed is said too, by its path)
    typed = json.dumps({"$type": ref, "kind": "dataclass", "value": {"temp": 30.0, "when": 5}})
    with forkpoint.replay(rec.session_path, overrides=[f"tool:read_sensor.result={typed}"]):
        assert read_sensor("a").when == 5
    said = " ".join(capsys.readouterr().err.split())
    assert "read_sensor returned a datetime.datetime at $.when when recorded" in said, said


def test_a_plain_scalar_given_for_a_typed_result_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tool that returned a datetime, overridden with a date string: the agent got a ``str`` (an
    AttributeError later, in the agent) and nothing said so, docs/overrides.md says it is; the hint
    gave a datetime's value as an object."""

    @forkpoint.tool
    def now() -> dt.datetime:
        return dt.datetime(2026, 1, 1, 12, 0)

    @forkpoint.tool
    def maybe() -> Reading | None:
        return Reading(1.0, dt.datetime(2026, 1, 1))

    with forkpoint.record(store=tmp_path / "s") as rec:
        now(), maybe()
    capsys.readouterr()
    spec = 'tool:now.result="2020-01-01"'
    with forkpoint.replay(rec.session_path, overrides=[spec, "tool:maybe.result=null"]):
        assert now() == "2020-01-01" and maybe() is None  # (allowed: said, but null is no mistake)
    said = " ".join(capsys.readouterr().err.split())
    assert (
        f"override {spec!r}: now returned a datetime.datetime when recorded; this value is plain "
        'JSON, so the agent gets a plain str instead. To give it the recorded datetime: {"$type": "datetime:datetime", '
        '"kind": "datetime", "value": "…"}' in said
    ), said
    assert "maybe" not in said, said
