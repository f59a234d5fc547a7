"""More providers: the real google-genai SDK (Gemini), and OpenAI-compatible servers reached through
the openai SDK, recorded against demo model servers and replayed with the servers stopped.

google-genai sends its requests with httpx2, and its async ones with aiohttp when aiohttp is
installed: forkpoint captures both, and the SDK keeps its choice. Automatic function calling (Python functions as
tools, run by the SDK itself) is recorded as tool calls, and not run on replay.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.genai")

import httpx2  # noqa: E402
import openai  # noqa: E402
import pydantic  # noqa: E402
from google import genai  # noqa: E402
from google.genai import errors as genai_errors  # noqa: E402
from google.genai import types  # noqa: E402

import forkpoint  # noqa: E402
from forkpoint.demo.server import ModelServer  # noqa: E402
from forkpoint.events import in_start_order  # noqa: E402
from forkpoint.replay import unrecorded_tools  # noqa: E402
from forkpoint.store import session_dirs  # noqa: E402
from tests.modelserver import LocalServer, Reply, Stream, json_reply  # noqa: E402

#: What google-genai raises when the server is unreachable (it sends with httpx2, or httpx).
ConnectionError_ = (httpx2.ConnectError, genai_errors.APIError)
API_KEY = "AIza" + "g" * 35  # shaped like a Google API key: must never reach disk
MODEL = "gemini-demo-flash"
TASK = "Reproduce the bug in calc.py with a scratch test, then run the test suite."

TOOLS = [
    types.Tool(
        function_declarations=[
            types.FunctionDeclaration(
                name="write_file",
                description="Write a file.",
                parameters=types.Schema(
                    type="OBJECT",
                    properties={"path": types.Schema(type="STRING"), "content": types.Schema(type="STRING")},
                    required=["path", "content"],
                ),
            ),
            types.FunctionDeclaration(
                name="run_tests",
                description="Run the test suite.",
                parameters_json_schema={"type": "object", "properties": {}},
            ),
        ]
    )
]
CONFIG = types.GenerateContentConfig(
    tools=TOOLS,
    temperature=0.25,
    top_p=0.9,
    seed=7,
    max_output_tokens=256,
    automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
)


def client(url: str) -> genai.Client:
    return genai.Client(api_key=API_KEY, http_options=types.HttpOptions(base_url=url))


def dump(response: Any) -> Any:
    """The parsed response as JSON data, minus the two transport headers forkpoint does not keep
    (``content-length``, ``transfer-encoding``: the stored body is decoded and re-framed)."""
    data = response.model_dump(mode="json")
    headers = (data.get("sdk_http_response") or {}).get("headers") or {}
    for name in [n for n in headers if n.lower() in ("content-length", "transfer-encoding")]:
        del headers[name]  # (aiohttp keeps the server's spelling: Transfer-Encoding)
    return data


def tool_result(call: types.FunctionCall) -> dict[str, Any]:
    if call.name == "run_tests":
        return {"passed": 3, "failed": 1}
    return {"path": (call.args or {}).get("path"), "written": True}


def turn(contents: list[types.Content], response: types.GenerateContentResponse) -> None:
    """Append the model's turn and the results of the functions it called."""
    contents.append(response.candidates[0].content)
    contents.append(
        types.Content(
            role="user",
            parts=[
                types.Part.from_function_response(name=call.name, response={"result": tool_result(call)})
                for call in response.function_calls or []
            ],
        )
    )


def gemini_sync(url: str) -> list[Any]:
    """A function-calling conversation: write_file, run_tests, then a streamed final answer."""
    c = client(url)
    contents = [types.Content(role="user", parts=[types.Part(text=TASK)])]
    first = c.models.generate_content(model=MODEL, contents=contents, config=CONFIG)
    turn(contents, first)
    chunks = list(c.models.generate_content_stream(model=MODEL, contents=contents, config=CONFIG))
    merged = types.Content(role="model", parts=[p for ch in chunks for p in ch.candidates[0].content.parts])
    turn(contents, types.GenerateContentResponse(candidates=[types.Candidate(content=merged)]))
    final = list(c.models.generate_content_stream(model=MODEL, contents=contents, config=CONFIG))
    return [dump(first), [dump(ch) for ch in chunks], [dump(ch) for ch in final]]


async def _gemini_async(url: str) -> list[Any]:
    c = client(url)
    whole = await c.aio.models.generate_content(model=MODEL, contents=TASK, config=CONFIG)
    stream = await c.aio.models.generate_content_stream(model=MODEL, contents="Say hello.")
    return [dump(whole), [dump(ch) async for ch in stream]]


def gemini_async(url: str) -> list[Any]:
    return asyncio.run(_gemini_async(url))


SCENARIOS: dict[str, Callable[[str], list[Any]]] = {"sync": gemini_sync, "async": gemini_async}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_gemini_record_then_replay_offline(name: str, tmp_path: Path) -> None:
    scenario = SCENARIOS[name]
    with ModelServer(turns=2) as server:
        url = server.base_url
        with forkpoint.record(store=tmp_path) as rec:
            live = scenario(url)
        n_requests = len(server.requests)
    c = client(url)
    with pytest.raises(ConnectionError_):  # the server is gone: only the session can answer
        c.models.generate_content(model=MODEL, contents="hi")

    with forkpoint.replay(rec.session_path) as rp:
        replayed = scenario(url)
    assert replayed == live
    report = rp.report()
    assert report["matched"] == report["recorded"] == n_requests
    assert report["unused"] == [] and report["divergence"] is None and report["network_blocked"] == []

    calls = forkpoint.Session.load(rec.session_path).by_type("model_call")
    assert len(calls) == n_requests
    for call in calls:
        s = call["summary"]
        assert (s["provider"], s["api"], s["model"], s["response_model"]) == (
            "gemini",
            "generateContent",
            MODEL,
            MODEL,
        )
        assert call["request"]["url"].split("?")[0].endswith((":generateContent", ":streamGenerateContent"))
        if s["stream"]:
            assert call["request"]["url"].endswith("?alt=sse")
            assert call["response"]["body_kind"] == "stream"
    data = b"".join(p.read_bytes() for p in rec.session_path.rglob("*") if p.is_file())
    assert b"g" * 35 not in data  # the API key never reaches disk


def test_gemini_summary_of_a_function_calling_turn(tmp_path: Path) -> None:
    with ModelServer(turns=2, seed=3) as server, forkpoint.record(store=tmp_path) as rec:
        live = gemini_sync(server.base_url)
    first, chunks, final = live
    calls = forkpoint.Session.load(rec.session_path).by_type("model_call")
    assert [c["summary"]["stream"] for c in calls] == [False, True, True]

    s = calls[0]["summary"]
    assert (s["temperature"], s["top_p"], s["seed"], s["max_tokens"]) == (0.25, 0.9, 7, 256)
    assert s["n_messages"] == 1 and s["n_tools"] == 2
    (fc,) = [p["function_call"] for p in first["candidates"][0]["content"]["parts"]]
    assert fc["name"] == "write_file" and fc["args"]["path"].endswith(".py")
    assert [(t["name"], json.loads(t["arguments"])) for t in s["tool_calls"]] == [("write_file", fc["args"])]
    usage = first["usage_metadata"]
    assert s["usage"] == {
        "input_tokens": usage["prompt_token_count"],
        "output_tokens": usage["candidates_token_count"],
    }
    assert s["stop_reason"] == "STOP" and first["candidates"][0]["finish_reason"] == "STOP"

    # The streamed turn: a run_tests call, in one chunk, with usage.
    s = calls[1]["summary"]
    assert s["n_messages"] == 3
    assert [t["name"] for t in s["tool_calls"]] == ["run_tests"]
    assert s["usage"]["output_tokens"] == chunks[-1]["usage_metadata"]["candidates_token_count"]
    # The final answer, streamed a few words per chunk: text, no tool call, the last run's numbers.
    s = calls[2]["summary"]
    assert s["tool_calls"] == [] and s["stop_reason"] == "STOP" and len(final) > 1
    text = "".join(p["text"] for ch in final for p in ch["candidates"][0]["content"]["parts"])
    assert "Last run: 3 passed, 1 failed." in text
    assert s["usage"]["output_tokens"] == final[-1]["usage_metadata"]["candidates_token_count"]


def test_gemini_errors_are_replayed(tmp_path: Path) -> None:
    def go(url: str) -> tuple[int, str]:
        c = genai.Client(
            api_key=API_KEY,
            http_options=types.HttpOptions(base_url=url, headers={"x-demo-fail": "429"}),
        )
        with pytest.raises(genai_errors.ClientError) as info:
            c.models.generate_content(model=MODEL, contents="hi")
        return info.value.code, str(info.value.status)

    with ModelServer() as server, forkpoint.record(store=tmp_path) as rec:
        live = go(server.base_url)
    assert live == (429, "RESOURCE_EXHAUSTED")
    with forkpoint.replay(rec.session_path) as rp:
        assert go(server.base_url) == live
    assert rp.report()["unused"] == []
    (call,) = forkpoint.Session.load(rec.session_path).by_type("model_call")
    assert call["summary"]["provider"] == "gemini" and call["summary"]["error"]


@pytest.mark.skipif(importlib.util.find_spec("aiohttp") is None, reason="aiohttp not installed")
def test_async_gemini_keeps_aiohttp_under_forkpoint(tmp_path: Path) -> None:
    """With aiohttp installed the SDK sends async requests through it, and forkpoint captures them
    there. forkpoint made it take its httpx fallback while recording: an agent that catches
    aiohttp's errors got httpx's instead (and the SDK's retries of them changed), without a word."""
    import aiohttp

    retry_once = types.HttpRetryOptions(attempts=1)

    async def ask(url: str) -> str:
        c = genai.Client(
            api_key=API_KEY, http_options=types.HttpOptions(base_url=url, retry_options=retry_once)
        )
        try:
            r = await c.aio.models.generate_content(model=MODEL, contents=TASK, config=CONFIG)
        except aiohttp.ClientError as e:
            return type(e).__name__
        return str(r.text or r.function_calls)

    with ModelServer() as server:
        dead = f"http://127.0.0.1:{server.port}"
    assert asyncio.run(ask(dead)) == "ClientConnectorError"  # without forkpoint
    with forkpoint.record(store=tmp_path) as rec:
        assert asyncio.run(ask(dead)) == "ClientConnectorError"
        with ModelServer(turns=2, seed=3) as server:
            live = asyncio.run(ask(server.base_url))
    session = forkpoint.Session.load(rec.session_path)
    errors, answered = session.by_type("model_call")
    assert "ClientConnectorError" in json.dumps(errors["error"]) and answered["response"]["status"] == 200
    with forkpoint.replay(session.path) as rp:
        assert asyncio.run(ask(dead)) == "ClientConnectorError"
        assert asyncio.run(ask(server.base_url)) == live
    assert rp.report()["reproduced"], rp.report()


# --------------------------------------------------------------------------- automatic function calling

SIDE_EFFECTS: list[str] = []


def write_file(path: str, content: str) -> dict[str, Any]:
    """Write a file to the workspace.

    Args:
        path: where to write.
        content: what to write.
    """
    SIDE_EFFECTS.append(f"write_file {path}")
    return {"path": path, "bytes": len(content)}


def run_tests() -> dict[str, int]:
    """Run the test suite."""
    SIDE_EFFECTS.append("run_tests")
    return {"passed": 2, "failed": 0}


def gemini_afc(url: str) -> list[Any]:
    """The SDK runs the Python functions itself between model calls."""
    config = types.GenerateContentConfig(tools=[write_file, run_tests])
    c = client(url)  # keep it: a collected genai.Client closes its HTTP client
    response = c.models.generate_content(model=MODEL, contents=TASK, config=config)
    history = [c.model_dump(mode="json") for c in response.automatic_function_calling_history or []]
    return [response.text, history]


def test_gemini_automatic_function_calling_tools_are_recorded(tmp_path: Path) -> None:
    SIDE_EFFECTS.clear()
    with ModelServer(turns=2) as server, forkpoint.record(store=tmp_path) as rec:
        live = gemini_afc(server.base_url)
    assert [s.split()[0] for s in SIDE_EFFECTS] == ["write_file", "run_tests"]
    assert "Last run: 2 passed, 0 failed." in live[0]

    with forkpoint.replay(rec.session_path) as rp:
        replayed = gemini_afc(server.base_url)
    assert replayed == live
    assert len(SIDE_EFFECTS) == 2  # no function body ran on replay
    report = rp.report()
    assert report["matched"] == report["recorded"] == 5 and report["unused"] == []

    session = forkpoint.Session.load(rec.session_path)
    tools = session.by_type("tool_call")
    assert [t["tool"] for t in tools] == ["write_file", "run_tests"]
    assert set(tools[0]["args"]) == {"path", "content"} and tools[1]["result"] == {"passed": 2, "failed": 0}
    asked = session.by_type("model_call")[0]["summary"]["tool_calls"][0]
    assert json.loads(asked["arguments"]) == tools[0]["args"]


def test_a_streamed_function_calling_run_with_live_models_lines_up_with_its_recording(tmp_path: Path) -> None:
    """The SDK runs a function while the streamed answer that asked for it is still open, so the
    tool is logged before that model call. Replayed with the model live (``check --models live``),
    the served tools had no start ordinal beside the live model calls, so show and diff put each
    before the model call that asked for it: diff paired every model call with the one before it,
    and called the same run changed ("seq 3 ↔ —")."""
    from forkpoint.diff import diff_sessions

    def afc_stream(url: str) -> list[str | None]:
        config = types.GenerateContentConfig(tools=[write_file, run_tests])
        c = client(url)
        return [ch.text for ch in c.models.generate_content_stream(model=MODEL, contents=TASK, config=config)]

    with ModelServer(turns=2, seed=5) as server, forkpoint.record(store=tmp_path) as rec:
        live = afc_stream(server.base_url)
    with ModelServer(turns=2, seed=5) as server, forkpoint.replay(rec.session_path, models="live") as rp:
        assert afc_stream(server.base_url) == live
    report = rp.report()
    assert report["divergence"] is None and report["live_calls"] == {"models": 3, "tools": 0}, report
    child = forkpoint.Session.load(report["child_session"])
    started = [e["type"] for e in in_start_order(child.events) if e["type"] in ("model_call", "tool_call")]
    assert started == ["model_call", "tool_call", "model_call", "tool_call", "model_call"]
    result = diff_sessions(forkpoint.Session.load(rec.session_path), child)
    assert result.equivalent and result.first_change is None, [
        result.describe(i) for i in range(len(result.pairs))
    ]


class VaultLocked(Exception):
    """A tool's own exception: the SDK sends the model its text inside a ``FunctionInvocationError``'s."""


def open_vault(name: str) -> dict[str, Any]:
    """Open a vault."""
    raise VaultLocked(f"vault {name} is locked")


async def open_vault_async(name: str) -> dict[str, Any]:
    """Open a vault."""
    raise VaultLocked(f"vault {name} is locked")


def sent_error(server: ModelServer) -> str:
    """The error text the SDK sent the model in the function response of the last request."""
    parts = [p for c in server.requests[-1]["body"]["contents"] for p in c.get("parts") or []]
    return str([p for p in parts if "functionResponse" in p][-1]["functionResponse"]["response"]["error"])


@pytest.mark.parametrize("tool", [open_vault, open_vault_async], ids=["sync", "async"])
def test_a_function_the_sdk_calls_is_recorded_raising_its_own_exception(
    tool: Callable[..., Any], tmp_path: Path
) -> None:
    """The integration recorded the SDK's ``invoke_function_from_dict_args`` whole: the event said
    the tool raised the SDK's ``FunctionInvocationError`` (not the function's exception), and a
    what-if ``.error`` was raised past the SDK's wrapping, so the model was sent the bare message
    where a function raising it live sends the SDK's sentence around it."""

    def run(url: str) -> str | None:
        config = types.GenerateContentConfig(tools=[tool])
        if tool is open_vault:
            c = client(url)  # (kept: a collected genai.Client closes its HTTP client)
            return c.models.generate_content(model=MODEL, contents=TASK, config=config).text

        async def main() -> str | None:
            c = client(url)
            return (await c.aio.models.generate_content(model=MODEL, contents=TASK, config=config)).text

        return asyncio.run(main())

    with ModelServer(turns=1, seed=3) as server:
        with forkpoint.record(store=tmp_path) as rec:
            live = run(server.base_url)
        recorded_error = sent_error(server)
        [event] = forkpoint.Session.load(rec.session_path).by_type("tool_call")
        assert event["error"]["type"] == "VaultLocked", event["error"]
        assert "Failed to invoke function" in recorded_error and recorded_error.endswith("is locked")

        with forkpoint.replay(rec.session_path) as rp:
            assert run(server.base_url) == live
        assert rp.report()["unused"] == [] and rp.report()["divergence"] is None

        what_if = 'tool:open_vault{}.error={{"type": "PermissionError", "message": "denied"}}'
        spec = what_if.format("_async" if tool is open_vault_async else "")
        with forkpoint.replay(rec.session_path, overrides=[spec], on_divergence="live"):
            run(server.base_url)
        sentence = recorded_error.rsplit(" because of error ", 1)[0]
        assert sent_error(server) == sentence + " because of error denied"


def test_an_exception_a_replay_cannot_rebuild_reaches_the_model_with_its_recorded_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A function raised an exception of a module it imports in its body, which a replay (running
    no body, importing no module to find a class) does not have: it came back a
    ``RecordedToolError`` whose text had the class's name in front, the SDK sent that text to the
    model, and the replay diverged at the next model call."""
    (tmp_path / "prefs_format.py").write_text("class BadPrefs(Exception):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "prefs_format", raising=False)

    def read_prefs(path: str) -> dict[str, Any]:
        """Read a preferences file."""
        import prefs_format

        raise prefs_format.BadPrefs(f"{path}: not a preferences file")

    def run(url: str) -> list[Any]:
        config = types.GenerateContentConfig(tools=[read_prefs])
        c = client(url)  # (kept: a collected genai.Client closes its HTTP client)
        response = c.models.generate_content(model=MODEL, contents=TASK, config=config)
        return [c.model_dump(mode="json") for c in response.automatic_function_calling_history or []]

    with ModelServer(turns=1, seed=3) as server:
        with forkpoint.record(store=tmp_path / "store") as rec:
            live = run(server.base_url)
        del sys.modules["prefs_format"]
        with forkpoint.replay(rec.session_path) as rp:
            assert run(server.base_url) == live
    assert rp.report()["divergence"] is None and "prefs_format" not in sys.modules


class Query(pydantic.BaseModel):
    text: str


def search(query: Query) -> list[str]:
    """Search the docs."""
    raise AssertionError("the SDK refuses the model's arguments: never called")


def test_arguments_the_sdk_refuses_are_no_tool_call_missing_from_the_recording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The SDK converts the model's arguments to the function's parameters, and answers the model
    with the error itself when they do not convert (here ``{}`` for a ``Query``): the function never
    ran, yet the recording said the model asked for a tool that was never recorded ("if the agent
    ran them, a replay runs them for real"), and the replay that reproduced it was "ok, but
    incomplete"."""

    def run(url: str) -> list[Any]:
        c = client(url)  # (kept: a collected genai.Client closes its HTTP client)
        config = types.GenerateContentConfig(tools=[search])
        response = c.models.generate_content(model=MODEL, contents=TASK, config=config)
        return [c.model_dump(mode="json") for c in response.automatic_function_calling_history or []]

    with ModelServer(turns=1, seed=3) as server, forkpoint.record(store=tmp_path) as rec:
        live = run(server.base_url)
    assert "Failed to parse parameter query" in json.dumps(live)
    assert "never recorded" not in capsys.readouterr().err
    with forkpoint.replay(rec.session_path) as rp:
        assert run(server.base_url) == live
    report = rp.report()
    assert report["divergence"] is None and unrecorded_tools(report) == {}, report


# --------------------------------------------------------------------------- OpenAI-compatible providers

CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look something up.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }
]
MSG = [{"role": "user", "content": "What is the capital of France?"}]


def _compatible_server() -> ModelServer:
    """A second provider on another loopback address (as Groq, Together or vLLM would be on
    another host), or on ``localhost`` where 127.0.0.2 cannot be bound."""
    try:
        return ModelServer(host="127.0.0.2", turns=1).start()
    except OSError:
        return ModelServer(host="localhost", turns=1).start()


def openai_and_compatible(openai_url: str, compatible_url: str) -> list[Any]:
    official = openai.OpenAI(base_url=openai_url + "/v1", api_key="sk-proj-" + "o" * 40, max_retries=0)
    other = openai.OpenAI(base_url=compatible_url + "/v1", api_key="gsk_" + "c" * 40, max_retries=0)
    a = official.chat.completions.create(model="gpt-demo", messages=MSG, tools=CHAT_TOOLS)
    b = other.chat.completions.create(model="llama-3.3-70b", messages=MSG, tools=CHAT_TOOLS)
    c = other.chat.completions.create(
        model="llama-3.3-70b", messages=MSG, stream=True, stream_options={"include_usage": True}
    )
    return [a.model_dump(mode="json"), b.model_dump(mode="json"), [ch.model_dump(mode="json") for ch in c]]


def test_openai_compatible_provider_is_recorded_and_told_apart(tmp_path: Path) -> None:
    compatible = _compatible_server()
    try:
        with ModelServer(turns=1) as server, forkpoint.record(store=tmp_path) as rec:
            live = openai_and_compatible(server.base_url, compatible.base_url)
    finally:
        compatible.stop()
    assert len(compatible.requests) == 2
    with forkpoint.replay(rec.session_path) as rp:
        replayed = openai_and_compatible(server.base_url, compatible.base_url)
    assert replayed == live
    assert rp.report()["matched"] == rp.report()["recorded"] == 3 and rp.report()["unused"] == []

    calls = forkpoint.Session.load(rec.session_path).by_type("model_call")
    summaries = [c["summary"] for c in calls]
    # The same wire shape (provider "openai", api chat.completions); the host says which server.
    assert {(s["provider"], s["api"]) for s in summaries} == {("openai", "chat.completions")}
    hosts = [s["host"] for s in summaries]
    assert hosts[0] == f"127.0.0.1:{server.port}"
    assert hosts[1] == hosts[2] == compatible.base_url.removeprefix("http://")
    assert hosts[0] != hosts[1]
    assert [s["model"] for s in summaries] == ["gpt-demo", "llama-3.3-70b", "llama-3.3-70b"]
    assert summaries[1]["tool_calls"][0]["name"] == "lookup" and summaries[1]["stop_reason"] == "tool_calls"
    assert summaries[2]["stream"] is True and summaries[2]["usage"]["output_tokens"] > 0
    data = b"".join(p.read_bytes() for p in rec.session_path.rglob("*") if p.is_file())
    assert b"o" * 40 not in data and b"c" * 40 not in data


SIGNATURE = "c2lnbmVkLXRob3VnaHQ="  # (base64: the SDK hands it over as bytes)


def _signed_answer(request: Any) -> Reply | Stream:
    """A thinking model's answer: its thoughts, a text, and two parallel calls, the first signed
    (Gemini signs the first call of a step), whole or streamed in two chunks."""

    def chunk(*parts: dict[str, Any]) -> dict[str, Any]:
        candidate = {"content": {"role": "model", "parts": list(parts)}, "finishReason": "STOP", "index": 0}
        return {"candidates": [candidate], "modelVersion": "gemini-2.5-flash", "responseId": "r-1"}

    thought, said = {"text": "Write it, then test.", "thought": True}, {"text": "On it."}
    write = {"functionCall": {"name": "write_file", "args": {"path": "t.py", "content": "x"}}}
    calls = [{**write, "thoughtSignature": SIGNATURE}, {"functionCall": {"name": "run_tests", "args": {}}}]
    if request["path"].endswith(":generateContent"):
        return json_reply(chunk(thought, said, *calls))
    return Stream([f"data: {json.dumps(c)}\r\n\r\n".encode() for c in (chunk(thought, said), chunk(*calls))])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_tool_calls_override_keeps_the_thought_signature_or_says_it_is_dropped(
    tmp_path: Path, stream: bool
) -> None:
    """A thinking Gemini model signs its call (``thoughtSignature``), and Gemini requires the
    signature back with the next request. An override asking for the recorded calls gave them with
    no signature, and dropped the thoughts; one asking for other calls dropped it too, with nothing
    said. Now what stays keeps its signature, and what cannot (another call) is said with the override."""

    def ask(url: str) -> list[dict[str, Any]]:
        c = client(url)  # (kept: a collected genai.Client closes its HTTP client)
        kw: dict[str, Any] = {"model": MODEL, "contents": TASK, "config": CONFIG}
        if not stream:
            return [p.model_dump(mode="json") for p in c.models.generate_content(**kw).parts or []]
        chunks = c.models.generate_content_stream(**kw)
        return [p.model_dump(mode="json") for ch in chunks for p in ch.parts or []]

    with LocalServer() as server:
        server.route("*", _signed_answer, method="POST")
        with forkpoint.record(store=tmp_path) as rec:
            live = ask(server.url)
    assert live[2]["thought_signature"] and not live[3]["thought_signature"]

    same = [{"name": "write_file", "arguments": {"path": "t.py", "content": "x"}}, {"name": "run_tests"}]
    with forkpoint.replay(rec.session_path, overrides=["model#1.tool_calls=" + json.dumps(same)]) as rp:
        assert ask(server.url) == live
    assert rp.report()["divergence"] is None and "losses" not in rp.report()["overrides"][0]

    other = 'model#1.tool_calls=[{"name": "run_tests"}]'
    with forkpoint.replay(rec.session_path, overrides=[other]) as rp:
        got = ask(server.url)
    assert got[:2] == live[:2]  # the thoughts and the text
    assert [(p["function_call"]["name"], p["thought_signature"]) for p in got[2:]] == [("run_tests", None)]
    (o,) = rp.report()["overrides"]
    assert o["applied"] and o["losses"] == [
        'the thought signature of the recorded call write_file({"path":"t.py","content":"x"}), which Gemini '
        "requires back with the next request, is dropped with it (no other call can carry it)"
    ]


def asking_script(folder: Path, calls: int) -> Path:
    """``ask.py`` in ``folder``: the google-genai SDK asks the server at ``argv[1]`` ``calls`` times,
    printing the names of the functions each answer calls."""
    script = folder / "ask.py"
    script.write_text(
        "import sys\n"
        "from google import genai\n"
        "from google.genai import types\n"
        "c = genai.Client(api_key='demo-key', http_options=types.HttpOptions(base_url=sys.argv[1]))\n"
        f"for _ in range({calls}):\n"
        "    print([f.name for f in c.models.generate_content(model='m', contents='go').function_calls])\n"
    )
    return script


def test_forkpoint_replay_says_which_thought_signature_an_override_drops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``forkpoint replay --override`` says the signature a replaced call drops under the override's
    line (the report's ``losses``), where the run goes on as a what-if, not with the line alone."""
    from click.testing import CliRunner

    from forkpoint.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("FORKPOINT_STORE", str(tmp_path / "store"))
    script = asking_script(tmp_path, calls=1)
    with LocalServer() as server:
        server.route("*", _signed_answer, method="POST")
        res = CliRunner().invoke(main, ["record", "--", sys.executable, str(script), server.url])
        assert res.exit_code == 0, res.output
    res = CliRunner().invoke(
        main, ["replay", "last", "--override", 'model#1.tool_calls=[{"name": "run_tests"}]']
    )
    said = " ".join(res.output.split())
    assert res.exit_code == 0, said
    assert (
        "→ event seq 1: applied but the thought signature of the recorded call "
        'write_file({"path":"t.py","content":"x"}), which Gemini requires back with the next request, is dropped'
    ) in said, said


def _signed_text(request: Any) -> Reply | Stream:
    """A thinking model's answer that asks for no call: Gemini signs its text (streamed, the last
    chunk's empty text)."""

    def chunk(part: dict[str, Any]) -> dict[str, Any]:
        candidate = {"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}
        return {"candidates": [candidate], "modelVersion": "gemini-3-flash", "responseId": "r-2"}

    if request["path"].endswith(":generateContent"):
        return json_reply(chunk({"text": "Done.", "thoughtSignature": SIGNATURE}))
    chunks = [chunk({"text": "Done."}), chunk({"text": "", "thoughtSignature": SIGNATURE})]
    return Stream([f"data: {json.dumps(c)}\r\n\r\n".encode() for c in chunks])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_a_call_asked_for_where_a_signed_answer_asked_for_none_is_said_to_lack_its_signature(
    tmp_path: Path, stream: bool
) -> None:
    """ "What if the model had called a tool instead of answering?": the signed answer (its text)
    becomes one whose first call carries no signature, which Gemini refuses with the next request
    (``Function call is missing a thought_signature``). No recorded call was dropped, so nothing
    was said: now the override's losses say so."""

    def ask(url: str) -> list[dict[str, Any]]:
        c = client(url)  # (kept: a collected genai.Client closes its HTTP client)
        kw: dict[str, Any] = {"model": MODEL, "contents": TASK, "config": CONFIG}
        if not stream:
            return [p.model_dump(mode="json") for p in c.models.generate_content(**kw).parts or []]
        return [
            p.model_dump(mode="json") for ch in c.models.generate_content_stream(**kw) for p in ch.parts or []
        ]

    with LocalServer() as server:
        server.route("*", _signed_text, method="POST")
        with forkpoint.record(store=tmp_path) as rec:
            live = ask(server.url)
    with forkpoint.replay(rec.session_path, overrides=['model#1.tool_calls=[{"name": "run_tests"}]']) as rp:
        got = ask(server.url)
    assert got[: len(live)] == live  # the signed text, as it was
    assert [(p["function_call"]["name"], p["thought_signature"]) for p in got[len(live) :]] == [
        ("run_tests", None)
    ]
    (o,) = rp.report()["overrides"]
    assert o["applied"] and o["losses"] == [
        "the call run_tests({}) comes first with no thought signature, which Gemini requires on an answer's "
        "first call back with the next request (the recorded answer is signed, on no call asked for again)"
    ]


def test_an_override_that_asks_for_no_call_says_no_signature_is_required(tmp_path: Path) -> None:
    """``tool_calls=[]`` (like ``.text``) leaves an answer without calls, which Gemini takes back
    without a signature: the signed call it drops is no loss, and saying it is required was wrong."""
    with LocalServer() as server:
        server.route("*", _signed_answer, method="POST")
        c = client(server.url)  # (kept: a collected genai.Client closes its HTTP client)
        with forkpoint.record(store=tmp_path) as rec:
            c.models.generate_content(model=MODEL, contents=TASK, config=CONFIG)
    for spec in ("model#1.tool_calls=[]", 'model#1.text="No."'):
        with forkpoint.replay(rec.session_path, overrides=[spec]) as rp:
            got = c.models.generate_content(model=MODEL, contents=TASK, config=CONFIG)
        assert not got.function_calls
        (o,) = rp.report()["overrides"]
        assert o["applied"] and "losses" not in o, o


@pytest.mark.slow
def test_forkpoint_fork_says_which_thought_signature_an_override_drops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork's arms send the request after the override live, where Gemini refuses the dropped
    signature, and print no replay report: ``forkpoint fork --override`` said nothing of it (its
    arm failed with Gemini's 400 alone). Now it is said once, before the arms run."""
    from click.testing import CliRunner

    from forkpoint.cli import main

    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("FORKPOINT_STORE", str(tmp_path / "store"))
    script = asking_script(work, calls=2)
    with LocalServer() as server:
        server.route("*", _signed_answer, method="POST")
        res = CliRunner().invoke(
            main, ["record", "--workspace", ".", "--", sys.executable, str(script), server.url]
        )
        assert res.exit_code == 0, res.output
    (session,) = session_dirs(tmp_path / "store")
    second = forkpoint.Session.load(session).by_type("checkpoint")[-1]
    res = CliRunner().invoke(
        main,
        [
            "fork",
            f"last@{second['seq']}",
            "--into",
            str(tmp_path / "arms"),
            "--override",
            'model#1.tool_calls=[{"name": "run_tests"}]',
            "--",
            sys.executable,
            "-c",
            "pass",
        ],
    )
    said = " ".join(res.output.split())
    assert (
        'override model#1.tool_calls=[{"name": "run_tests"}] → event seq 2: the thought signature of the recorded '
        'call write_file({"path":"t.py","content":"x"}), which Gemini requires back with the next request, is dropped'
    ) in said, said
