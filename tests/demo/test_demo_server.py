"""The bundled demo model server and example agent, driven through the real SDKs.

Seeded-server contract tested here: with the same seed, the same request gets byte-identical
answers (ids, texts, and ``created`` timestamps, which a seeded server derives from a fixed epoch
instead of the clock); without a seed, ids, file names and contents differ from run to run.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import orjson
import pytest
from click.testing import CliRunner
from rich.console import Console

from forkpoint.cli import main
from forkpoint.demo import agent as demo_agent
from forkpoint.demo import server as demo_server
from forkpoint.demo.agent import run_agent
from forkpoint.demo.run import run_demo
from forkpoint.demo.server import ModelServer

REPO = Path(__file__).resolve().parents[2]

CHAT_TOOLS = demo_agent.TOOL_SPECS
RESP_TOOLS = [{"type": "function", **spec["function"]} for spec in CHAT_TOOLS]
ANTH_TOOLS = [
    {
        "name": spec["function"]["name"],
        "description": spec["function"]["description"],
        "input_schema": spec["function"]["parameters"],
    }
    for spec in CHAT_TOOLS
]
USER = [{"role": "user", "content": "Reproduce the bug in calc.py, then run the tests."}]


@pytest.fixture
def server() -> Any:
    with ModelServer(turns=2) as srv:
        yield srv


def _oa(srv: ModelServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=srv.openai_base_url, api_key="sk-test", max_retries=0)


def _an(srv: ModelServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=srv.base_url, api_key="sk-ant-test", max_retries=0)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    return env


def _tool_names(srv: ModelServer) -> list[str]:
    """Tool calls the model made, in order, read from the agent's final request."""
    last = srv.requests[-1]["body"]["messages"]
    return [c["function"]["name"] for m in last for c in m.get("tool_calls") or []]


# --------------------------------------------------------------------------- the agent


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "no-stream"])
@pytest.mark.parametrize("turns", [2, 5])
def test_agent_runs_against_server(tmp_path: Path, turns: int, stream: bool) -> None:
    lines: list[str] = []
    with ModelServer(turns=turns) as srv:
        answer = run_agent(srv.base_url, tmp_path, stream=stream, echo=lines.append)
        names = _tool_names(srv)
        bodies = [r["body"] for r in srv.requests]

    assert len(bodies) == turns + 1  # one model call per tool call, plus the final answer
    assert all(bool(b.get("stream")) is stream for b in bodies)
    if stream:
        assert all(b["stream_options"] == {"include_usage": True} for b in bodies)
    assert len(names) == turns
    assert names[0] == "write_file"
    if turns == 2:
        assert names == ["write_file", "run_tests"]
    for prev, cur in zip(names, names[1:], strict=False):
        assert prev != "write_file" or cur == "run_tests"  # a write is always followed by a run
    assert "run_tests" * 3 not in "".join(names)  # at most one extra run in a row

    written = sorted(p.name for p in tmp_path.glob("*.py"))
    assert len(written) == names.count("write_file")
    for name in written:
        assert name in answer or "more files" in answer
    assert answer.startswith(("Done.", "All set.", "Finished.", "Here is what I did.", "That's"))
    assert "ran the test suite" in answer
    log = (tmp_path / "test_log.txt").read_text().splitlines()
    assert len(log) == names.count("run_tests")

    assert len(lines) == turns + 1
    assert lines[0].startswith("turn 1: write_file(") and lines[0].endswith(".py)")
    assert lines[1].startswith("turn 2: run_tests() -> ")
    assert lines[-1] == f"turn {turns + 1}: answer"


def test_agent_accepts_httpx_and_httpx2_clients(tmp_path: Path, server: ModelServer) -> None:
    with httpx2.Client() as client2:
        assert "ran the test suite once" in run_agent(
            server.openai_base_url, tmp_path / "a", stream=False, http_client=client2, echo=None
        )
    with httpx.Client() as client1:
        assert "ran the test suite once" in run_agent(
            server.base_url, tmp_path / "b", http_client=client1, echo=None
        )


def test_agent_max_turns(tmp_path: Path) -> None:
    with ModelServer(turns=5) as srv:
        with pytest.raises(demo_agent.MaxTurnsExceeded):
            run_agent(srv.base_url, tmp_path, max_turns=2, echo=None)
        assert len(srv.requests) == 2


def test_tools_directly(tmp_path: Path) -> None:
    token = demo_agent._workdir.set(tmp_path)
    try:
        assert demo_agent.write_file("sub/ok.py", "assert 1 + 1 == 2\n") == {
            "path": "sub/ok.py",
            "bytes": 18,
        }
        for bad in ("../escape.py", "/etc/passwd", "sub/../../x.py", "."):
            with pytest.raises(ValueError, match="escapes"):
                demo_agent.write_file(bad, "x")
        demo_agent.write_file("good.py", "print('fine')\n")
        demo_agent.write_file("bad.py", "assert 2 + 2 == 5, 'math'\n")
        demo_agent.write_file("broken.py", "raise KeyError('boom')\n")
        result = demo_agent.run_tests()
        assert result["passed"] == 1 and result["failed"] == 2
        assert "FAIL bad.py AssertionError: math" in result["output"]
        assert "ERROR broken.py KeyError" in result["output"]
        assert "PASS good.py" in result["output"]
        demo_agent.run_tests()
        assert len((tmp_path / "test_log.txt").read_text().splitlines()) == 2
    finally:
        demo_agent._workdir.reset(token)


@pytest.mark.slow
def test_cli_server_and_agent(tmp_path: Path) -> None:
    env = _env()
    proc = subprocess.Popen(
        [sys.executable, "-m", "forkpoint.demo.server", "--turns", "2", "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        done = subprocess.run(
            [sys.executable, "-m", "forkpoint.demo.agent", "--base-url", url]
            + ["--workdir", str(tmp_path), "--no-stream"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        out = done.stdout.splitlines()
        assert out[0].startswith("turn 1: write_file(")
        assert out[1].startswith("turn 2: run_tests() -> 1 passed, 0 failed") or out[1].startswith(
            "turn 2: run_tests() -> 0 passed, 1 failed"
        )
        assert out[2] == "turn 3: answer"
        assert out[3].startswith("final: ") and "ran the test suite once" in out[3]
        assert len(list(tmp_path.glob("*.py"))) == 1
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


# --------------------------------------------------------------------------- randomness


def test_unseeded_runs_differ(tmp_path: Path) -> None:
    seen = []
    for name in ("one", "two"):
        with ModelServer(turns=2) as srv:
            run_agent(srv.base_url, tmp_path / name, stream=False, echo=None)
            call = srv.requests[1]["body"]["messages"][2]["tool_calls"][0]
        seen.append((call["id"], call["function"]["arguments"]))
    (id1, args1), (id2, args2) = seen
    assert id1 != id2
    assert args1 != args2  # file name and content are the model's random picks


def test_seeded_runs_are_identical(tmp_path: Path) -> None:
    runs = []
    for name in ("one", "two"):
        with ModelServer(turns=5, seed=1234) as srv:
            answer = run_agent(srv.base_url, tmp_path / name, echo=None)
            bodies = [r["body"] for r in srv.requests]
        files = {p.name: p.read_text() for p in (tmp_path / name).glob("*.py")}
        runs.append((answer, bodies, files))
    assert runs[0] == runs[1]


def _raw_answers(srv: ModelServer) -> list[bytes]:
    requests = [
        ("/v1/chat/completions", {"model": "m", "messages": USER, "tools": CHAT_TOOLS}),
        ("/v1/chat/completions", {"model": "m", "messages": USER}),
        ("/v1/responses", {"model": "m", "input": USER, "tools": RESP_TOOLS}),
        ("/v1/messages", {"model": "c", "max_tokens": 99, "messages": USER, "tools": ANTH_TOOLS}),
    ]
    out = []
    with httpx2.Client(base_url=srv.base_url) as client:
        for path, body in requests:
            for stream in (False, True, False):  # the repeat differs from the first, reproducibly
                response = client.post(path, content=orjson.dumps({**body, "stream": stream}))
                assert response.status_code == 200
                out.append(response.content)
    return out


def test_seeded_bodies_are_byte_identical_unseeded_are_not() -> None:
    with ModelServer(seed=7) as a, ModelServer(seed=7) as b, ModelServer(seed=8) as c:
        answers_a, answers_b, answers_c = _raw_answers(a), _raw_answers(b), _raw_answers(c)
    assert answers_a == answers_b
    assert answers_a[0] != answers_a[2]  # same request twice: different (but reproducible) answer
    assert all(x != y for x, y in zip(answers_a, answers_c, strict=True))
    with ModelServer() as d, ModelServer() as e:
        answers_d, answers_e = _raw_answers(d), _raw_answers(e)
    assert all(x != y for x, y in zip(answers_d, answers_e, strict=True))


def test_policy_sometimes_runs_the_tests_twice() -> None:
    conv = demo_server._Conversation(
        tools={"write_file": {}, "run_tests": {}},
        calls=[("write_file", {"path": "a.py"}), ("run_tests", {})],
        results=["{}", "{}"],
    )
    picks = [demo_server._decide(conv, 5, random.Random(i)).calls[0].name for i in range(400)]
    reruns = picks.count("run_tests") / len(picks)
    assert 0.2 < reruns < 0.4
    conv.calls.append(("run_tests", {}))
    conv.results.append("{}")
    assert {demo_server._decide(conv, 5, random.Random(i)).calls[0].name for i in range(50)} == {"write_file"}


# --------------------------------------------------------------------------- OpenAI chat


def test_openai_chat_sync(server: ModelServer) -> None:
    client = _oa(server)
    first = client.chat.completions.create(model="demo-model", messages=USER, tools=CHAT_TOOLS)
    assert first.object == "chat.completion" and first.id.startswith("chatcmpl-")
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call = choice.message.tool_calls[0]
    assert call.id.startswith("call_") and call.function.name == "write_file"
    args = json.loads(call.function.arguments)
    assert args["path"].endswith(".py") and "def test_add" in args["content"]
    assert first.usage.prompt_tokens > 0 and first.usage.completion_tokens > 0

    plain = client.chat.completions.create(model="demo-model", messages=USER)
    assert plain.choices[0].finish_reason == "stop" and plain.choices[0].message.content

    chunks = list(
        client.chat.completions.create(
            model="demo-model",
            messages=USER,
            tools=CHAT_TOOLS,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    fragments = [
        tc.function.arguments
        for c in chunks[:-1]
        for tc in c.choices[0].delta.tool_calls or []
        if tc.function and tc.function.arguments
    ]
    assert len(fragments) >= 2
    assert json.loads("".join(fragments))["path"].endswith(".py")

    without_usage = list(client.chat.completions.create(model="demo-model", messages=USER, stream=True))
    assert all(c.usage is None and c.choices for c in without_usage)
    text = "".join(c.choices[0].delta.content or "" for c in without_usage)
    assert text and without_usage[-1].choices[0].finish_reason == "stop"

    with client.chat.completions.stream(model="demo-model", messages=USER, tools=CHAT_TOOLS) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.tool_calls[0].function.name == "write_file"

    assert server.requests[0]["path"] == "/v1/chat/completions"
    assert server.requests[0]["body"]["messages"] == USER


def test_openai_chat_async(server: ModelServer) -> None:
    async def go() -> tuple[str, str]:
        async with openai.AsyncOpenAI(
            base_url=server.openai_base_url, api_key="sk-test", max_retries=0
        ) as client:
            whole = await client.chat.completions.create(model="m", messages=USER)
            parts = []
            stream = await client.chat.completions.create(
                model="m", messages=USER, stream=True, stream_options={"include_usage": True}
            )
            async for chunk in stream:
                if chunk.choices:
                    parts.append(chunk.choices[0].delta.content or "")
            return whole.choices[0].message.content or "", "".join(parts)

    whole, streamed = asyncio.run(go())
    assert whole and streamed


def test_openai_chat_tool_loop_ends_with_text(server: ModelServer) -> None:
    client = _oa(server)
    messages: list[dict[str, Any]] = list(USER)
    for _ in range(2):
        msg = (
            client.chat.completions.create(model="m", messages=messages, tools=CHAT_TOOLS).choices[0].message
        )
        messages.append(msg.model_dump(exclude_none=True))
        for call in msg.tool_calls:
            result = {"passed": 3, "failed": 1} if call.function.name == "run_tests" else {}
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    final = client.chat.completions.create(model="m", messages=messages, tools=CHAT_TOOLS)
    assert final.choices[0].finish_reason == "stop"
    assert "Last run: 3 passed, 1 failed." in final.choices[0].message.content


# --------------------------------------------------------------------------- OpenAI responses


def test_openai_responses(server: ModelServer) -> None:
    client = _oa(server)
    first = client.responses.create(model="demo-model", input=USER, tools=RESP_TOOLS)
    assert first.object == "response" and first.id.startswith("resp_")
    assert first.status == "completed"
    (item,) = first.output
    assert item.type == "function_call" and item.name == "write_file"
    assert item.call_id.startswith("call_") and json.loads(item.arguments)["path"].endswith(".py")

    # Chain with previous_response_id: the server remembers the earlier output items.
    second = client.responses.create(
        model="demo-model",
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": item.call_id, "output": "{}"}],
        tools=RESP_TOOLS,
    )
    assert second.output[0].type == "function_call" and second.output[0].name == "run_tests"
    third = client.responses.create(
        model="demo-model",
        previous_response_id=second.id,
        input=[
            {
                "type": "function_call_output",
                "call_id": second.output[0].call_id,
                "output": '{"passed": 1, "failed": 0}',
            }
        ],
        tools=RESP_TOOLS,
    )
    assert third.output[0].type == "message"
    assert "ran the test suite once" in third.output_text

    plain = client.responses.create(model="demo-model", input="Say something.")
    assert plain.output_text and plain.usage.total_tokens > 0


def test_openai_responses_stream(server: ModelServer) -> None:
    client = _oa(server)
    events = list(client.responses.create(model="m", input=USER, tools=RESP_TOOLS, stream=True))
    types = [e.type for e in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert "response.output_item.added" in types and "response.output_item.done" in types
    assert types.count("response.function_call_arguments.delta") >= 2
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].response.id == events[0].response.id

    with client.responses.stream(model="m", input=USER, tools=RESP_TOOLS) as stream:
        final = stream.get_final_response()
    assert final.output[0].type == "function_call"
    assert json.loads(final.output[0].arguments)["content"]

    with client.responses.stream(model="m", input="hello") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert len(deltas) >= 2 and "".join(deltas) == final.output_text


# --------------------------------------------------------------------------- Anthropic


def test_anthropic_messages_sync(server: ModelServer) -> None:
    client = _an(server)
    msg = client.messages.create(model="c", max_tokens=256, messages=USER, tools=ANTH_TOOLS)
    assert msg.type == "message" and msg.id.startswith("msg_") and msg.stop_reason == "tool_use"
    tool_use = [b for b in msg.content if b.type == "tool_use"][0]
    assert tool_use.name == "write_file" and tool_use.id.startswith("toolu_")
    assert tool_use.input["path"].endswith(".py")
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens > 0

    messages = [
        *USER,
        {"role": "assistant", "content": [b.model_dump() for b in msg.content]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": tool_use.id, "content": "ok"}],
        },
    ]
    with client.messages.stream(model="c", max_tokens=256, messages=messages, tools=ANTH_TOOLS) as stream:
        kinds = {event.type for event in stream}
        final = stream.get_final_message()
    assert {"message_start", "content_block_start", "content_block_stop"} <= kinds
    assert final.stop_reason == "tool_use"
    assert [b.name for b in final.content if b.type == "tool_use"] == ["run_tests"]

    raw = list(client.messages.create(model="c", max_tokens=256, messages=USER, stream=True))
    kinds_in_order = [e.type for e in raw]
    assert kinds_in_order[0] == "message_start" and kinds_in_order[-1] == "message_stop"
    assert kinds_in_order[-2] == "message_delta" and raw[-2].delta.stop_reason == "end_turn"
    text = "".join(e.delta.text for e in raw if e.type == "content_block_delta")
    assert text

    with client.messages.stream(model="c", max_tokens=256, messages=USER, tools=ANTH_TOOLS) as stream:
        deltas = [e for e in stream if e.type == "content_block_delta"]
        final = stream.get_final_message()
    json_parts = [d.delta.partial_json for d in deltas if d.delta.type == "input_json_delta"]
    assert len([p for p in json_parts if p]) >= 2
    tool_use = [b for b in final.content if b.type == "tool_use"][0]
    assert tool_use.input == json.loads("".join(json_parts))


def test_anthropic_messages_async(server: ModelServer) -> None:
    async def go() -> tuple[str, str]:
        async with anthropic.AsyncAnthropic(base_url=server.base_url, api_key="k", max_retries=0) as client:
            msg = await client.messages.create(model="c", max_tokens=64, messages=USER)
            async with client.messages.stream(model="c", max_tokens=64, messages=USER) as stream:
                final = await stream.get_final_message()
            return msg.content[0].text, final.content[0].text

    whole, streamed = asyncio.run(go())
    assert whole and streamed


# --------------------------------------------------------------------------- errors, lifecycle


@pytest.mark.parametrize(
    ("status", "exc"),
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
def test_openai_error_status(server: ModelServer, status: int, exc: type[Exception]) -> None:
    client = _oa(server)
    headers = {"x-demo-fail": str(status)}
    with pytest.raises(exc) as info:
        client.chat.completions.create(model="m", messages=USER, extra_headers=headers)
    assert info.value.status_code == status
    assert "x-demo-fail" in info.value.body["message"]
    with pytest.raises(exc):
        client.responses.create(model="m", input="hi", stream=True, extra_headers=headers)


@pytest.mark.parametrize(
    ("status", "exc", "kind"),
    [
        (429, anthropic.RateLimitError, "rate_limit_error"),
        (500, anthropic.InternalServerError, "api_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
    ],
)
def test_anthropic_error_status(server: ModelServer, status: int, exc: type[Exception], kind: str) -> None:
    client = _an(server)
    headers = {"x-demo-fail": str(status)}
    with pytest.raises(exc) as info:
        client.messages.create(model="c", max_tokens=9, messages=USER, extra_headers=headers)
    assert info.value.body["error"]["type"] == kind
    with pytest.raises(exc):
        with client.messages.stream(model="c", max_tokens=9, messages=USER, extra_headers=headers) as stream:
            stream.get_final_message()


GEMINI_MODEL = "gemini-demo-flash"


def test_gemini_wire_shapes() -> None:
    """Without ``alt=sse`` a stream is one JSON array of chunks; other methods are Google-shaped 404s."""
    with ModelServer(turns=1, seed=1) as server:
        url = server.base_url + f"/v1beta/models/{GEMINI_MODEL}"
        body = {"contents": [{"role": "user", "parts": [{"text": "Say hello."}]}]}
        whole = httpx2.post(url + ":generateContent", json=body).json()
        chunks = httpx2.post(url + ":streamGenerateContent", json=body).json()
        sse = httpx2.post(url + ":streamGenerateContent?alt=sse", json=body)
        missing = httpx2.post(url + ":countTokens", json=body)
    assert isinstance(chunks, list) and len(chunks) > 1
    assert all(c["responseId"] == chunks[0]["responseId"] for c in chunks)
    assert [c["candidates"][0].get("finishReason") for c in chunks] == [None] * (len(chunks) - 1) + ["STOP"]
    assert chunks[-1]["usageMetadata"]["candidatesTokenCount"] > 0
    assert whole["modelVersion"] == GEMINI_MODEL and whole["usageMetadata"]["totalTokenCount"] > 0
    assert whole["candidates"][0]["content"]["role"] == "model"
    assert sse.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in sse.text.splitlines() if line.startswith("data: ")]
    assert len(events) > 1 and events[-1]["candidates"][0]["finishReason"] == "STOP"
    assert missing.status_code == 404 and missing.json()["error"]["status"] == "NOT_FOUND"


def test_unknown_path_is_404_json(server: ModelServer) -> None:
    with pytest.raises(openai.NotFoundError):
        _oa(server).models.list()
    response = httpx2.post(server.base_url + "/v2/nothing", json={})
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/json"
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_stop_refuses_connections() -> None:
    srv = ModelServer().start()
    client = _oa(srv)
    client.chat.completions.create(model="m", messages=USER)  # leaves a pooled keep-alive socket
    port = srv.port
    srv.stop()
    assert not srv.running
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=USER)
    srv.stop()  # idempotent


def test_sdk_retries_are_fast_and_recorded(server: ModelServer) -> None:
    client = openai.OpenAI(base_url=server.openai_base_url, api_key="sk-test", max_retries=2)
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(
            model="m", messages=USER, extra_headers={"x-demo-fail": "500"}, timeout=5
        )
    assert [r["path"] for r in server.requests] == ["/v1/chat/completions"] * 3
    assert server.requests[-1]["headers"]["x-stainless-retry-count"] == "2"


def test_stop_during_a_stream_does_not_hang() -> None:
    srv = ModelServer(turns=2).start()
    client = _oa(srv)
    stream = client.chat.completions.create(model="m", messages=USER, stream=True)
    next(iter(stream))
    started = time.monotonic()
    srv.stop()
    assert time.monotonic() - started < 2
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="m", messages=USER)
    stream.close()


def test_the_demo_counts_one_call_in_the_singular(tmp_path: Path) -> None:
    """``forkpoint demo --turns 0`` said "recorded session …: 1 model calls, 0 tool calls"."""
    out = io.StringIO()
    assert run_demo(store=tmp_path / "s", turns=0, console=Console(file=out, width=200)) == 0
    assert ": 1 model call, 0 tool calls, exit code 0" in out.getvalue(), out.getvalue()


def test_a_negative_turns_for_the_demo_is_a_usage_error(tmp_path: Path) -> None:
    """``forkpoint demo --turns -1`` ended in a ValueError traceback from the model server."""
    result = CliRunner().invoke(main, ["demo", "--store", str(tmp_path / "s"), "--turns", "-1"])
    assert result.exit_code == 2, result.output
    assert "Invalid value for '--turns': -1 is not in the range x>=0." in result.output
    assert not (tmp_path / "s").exists()


def test_the_standalone_server_refuses_a_negative_turns(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m forkpoint.demo.server --turns -1`` ended in a ValueError traceback."""
    with pytest.raises(SystemExit) as exited:
        demo_server.main(["--turns", "-1"])
    assert exited.value.code == 2
    assert "error: argument --turns: must be 0 or more, not -1" in capsys.readouterr().err
