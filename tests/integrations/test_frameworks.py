"""Agent frameworks, unmodified: a pydantic-ai agent, an OpenAI Agents SDK agent and a LangGraph
agent, each with two tools, recorded against the demo model server and replayed with the server
stopped.

The tools are declared the framework's way (``@agent.tool_plain``, ``@function_tool``, LangChain's
``@tool``) at import
time, before forkpoint is active, and nothing in them mentions forkpoint: the built-in
integrations (``forkpoint/integrations/``) patch the frameworks' tool-call entry points. Model
calls go through the HTTP capture. On replay no tool body runs: the side-effect log they append to
stays as it was.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import datetime
import decimal
import ipaddress
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any

import orjson
import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("agents")
pytest.importorskip("langgraph")

import agents  # noqa: E402
from agents import Agent as SdkAgent  # noqa: E402
from agents import (  # noqa: E402
    GuardrailFunctionOutput,
    OpenAIChatCompletionsModel,
    Runner,
    function_tool,
    input_guardrail,
    set_tracing_disabled,  # noqa: E402
)
from langchain_core.messages import ToolMessage  # noqa: E402
from langchain_core.tools import BaseTool, InjectedToolCallId, ToolException  # noqa: E402
from langchain_core.tools import tool as langchain_tool  # noqa: E402
from langchain_openai import ChatOpenAI  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, ToolRuntime, tools_condition  # noqa: E402
from langgraph.types import Command, Send  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402
from pydantic import BaseModel  # noqa: E402
from pydantic_ai import Agent, ToolReturn  # noqa: E402
from pydantic_ai.messages import BinaryContent, ToolReturnPart  # noqa: E402
from pydantic_ai.models.openai import OpenAIChatModel  # noqa: E402
from pydantic_ai.providers.openai import OpenAIProvider  # noqa: E402

import forkpoint  # noqa: E402
from forkpoint import integrations, values  # noqa: E402
from forkpoint.demo.server import ModelServer  # noqa: E402
from tests.integrations.rolls import asked_a_then_b, next_roll, replayed_ok, roll_then_say  # noqa: E402
from tests.modelserver import LocalServer  # noqa: E402

set_tracing_disabled(True)  # the Agents SDK would otherwise export traces over the network

TASK = "Reproduce the bug in calc.py with a scratch test, then run the test suite."
API_KEY = "sk-proj-" + "k" * 40
WORKDIR: dict[str, Path] = {}  # where the tools work: set per test


def _workdir() -> Path:
    return WORKDIR["path"]


def _side_effect(line: str) -> None:
    with open(_workdir() / "side_effects.log", "a", encoding="utf-8") as f:
        f.write(line + "\n")


# --------------------------------------------------------------------------- pydantic-ai agent

pa_agent = Agent(instructions="You are a careful coding agent. Use the tools, then summarize.")


@pa_agent.tool_plain
def write_file(path: str, content: str) -> dict[str, Any]:
    """Write a UTF-8 file in the working directory."""
    (_workdir() / path).write_text(content, encoding="utf-8")
    _side_effect(f"write_file {path}")
    return {"path": path, "bytes": len(content.encode())}


@pa_agent.tool_plain
def run_tests() -> dict[str, int]:
    """Run the test suite."""
    _side_effect("run_tests")
    return {"passed": len(list(_workdir().glob("*.py"))), "failed": 0}


def run_pydantic_ai(base_url: str) -> str:
    model = OpenAIChatModel("demo-model", provider=OpenAIProvider(base_url=base_url + "/v1", api_key=API_KEY))
    return str(pa_agent.run_sync(TASK, model=model).output)


# --------------------------------------------------------------------------- OpenAI Agents SDK agent


# The framework knows these by the names the model sees, not by their Python names.
@function_tool(name_override="write_file")
def sdk_write_file(path: str, content: str) -> str:
    """Write a UTF-8 file in the working directory."""
    (_workdir() / path).write_text(content, encoding="utf-8")
    _side_effect(f"sdk_write_file {path}")
    return json.dumps({"path": path, "bytes": len(content.encode())})


@function_tool(name_override="run_tests")
def sdk_run_tests() -> dict[str, int]:
    """Run the test suite."""
    _side_effect("sdk_run_tests")
    return {"passed": len(list(_workdir().glob("*.py"))), "failed": 0}


def run_agents_sdk(base_url: str) -> str:
    client = AsyncOpenAI(base_url=base_url + "/v1", api_key=API_KEY, max_retries=0)
    agent = SdkAgent(
        name="coder",
        instructions="You are a careful coding agent. Use the tools, then summarize.",
        model=OpenAIChatCompletionsModel(model="demo-model", openai_client=client),
        tools=[sdk_write_file, sdk_run_tests],
    )
    return str(Runner.run_sync(agent, TASK).final_output)


# --------------------------------------------------------------------------- LangGraph agent


@langchain_tool("write_file")
def lg_write_file(path: str, content: str) -> dict[str, Any]:
    """Write a UTF-8 file in the working directory."""
    (_workdir() / path).write_text(content, encoding="utf-8")
    _side_effect(f"lg_write_file {path}")
    return {"path": path, "bytes": len(content.encode())}


@langchain_tool("run_tests")
async def lg_run_tests() -> dict[str, int]:
    """Run the test suite."""
    _side_effect("lg_run_tests")
    return {"passed": len(list(_workdir().glob("*.py"))), "failed": 0}


def run_langgraph(base_url: str) -> str:
    """The LangGraph tutorial's agent: a model node and a ``ToolNode``, looping while the model calls
    tools. Run with ``ainvoke``: the sync tool runs in a worker thread, the async one on the loop."""
    tools = [lg_write_file, lg_run_tests]
    model = ChatOpenAI(model="demo-model", base_url=base_url + "/v1", api_key=API_KEY, max_retries=0)
    model = model.bind_tools(tools)

    async def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    out = asyncio.run(tool_graph(call_model, tools).compile().ainvoke({"messages": [("user", TASK)]}))
    return str(out["messages"][-1].content)


def tool_graph(call_model: Callable[[MessagesState], Any], tools: list[Any]) -> StateGraph[Any]:
    """The LangGraph tutorial's graph: ``call_model`` as the model node and a ``ToolNode`` of
    ``tools``, looping while the model calls tools."""
    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph


def chat_node(base_url: str, tool: Any) -> Callable[[MessagesState], dict[str, Any]]:
    """A model node: ChatOpenAI at ``base_url`` (the demo model), bound to ``tool``."""
    model = ChatOpenAI(model="demo-model", base_url=base_url, api_key=API_KEY, max_retries=0)
    return lambda state: {"messages": [model.bind_tools([tool]).invoke(state["messages"])]}


def run_both(url: str, agent: Agent, sdk_tool: Any) -> list[str]:
    """Ask ``agent`` (pydantic-ai) and an Agents SDK agent with ``sdk_tool`` to "Go."; their answers."""
    model = OpenAIChatModel("demo-model", provider=OpenAIProvider(base_url=url + "/v1", api_key=API_KEY))
    client = AsyncOpenAI(base_url=url + "/v1", api_key=API_KEY, max_retries=0)
    sdk_agent = SdkAgent(
        name="s", model=OpenAIChatCompletionsModel(model="demo-model", openai_client=client), tools=[sdk_tool]
    )
    return [
        str(agent.run_sync("Go.", model=model).output),
        str(Runner.run_sync(sdk_agent, "Go.").final_output),
    ]


#: framework → (run the agent against a base URL, the Python functions its tools run, in order)
FRAMEWORKS: dict[str, tuple[Callable[[str], str], list[str]]] = {
    "pydantic-ai": (run_pydantic_ai, ["write_file", "run_tests"]),
    "openai-agents": (run_agents_sdk, ["sdk_write_file", "sdk_run_tests"]),
    "langgraph": (run_langgraph, ["lg_write_file", "lg_run_tests"]),
}


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "work"
    path.mkdir()
    WORKDIR["path"] = path
    yield path
    WORKDIR.pop("path", None)


def _snapshot(path: Path) -> dict[str, tuple[int, bytes]]:
    return {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(path.iterdir())}


@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_framework_agent_record_then_replay(framework: str, workdir: Path, tmp_path: Path) -> None:
    run, functions = FRAMEWORKS[framework]
    with ModelServer(turns=2) as server:
        url = server.base_url
        with forkpoint.record(store=tmp_path / "store") as rec:
            live = run(url)
        n_requests = len(server.requests)
    assert n_requests == 3  # write_file, run_tests, then the final answer
    log = (workdir / "side_effects.log").read_text()
    assert [line.split()[0] for line in log.splitlines()] == functions
    before = _snapshot(workdir)

    with forkpoint.replay(rec.session_path) as rp:
        replayed = run(url)
    assert replayed == live
    report = rp.report()
    assert report["matched"] == report["recorded"] == n_requests + 2
    assert report["unused"] == [] and report["divergence"] is None
    assert report["network_blocked"] == []
    assert _snapshot(workdir) == before  # no tool body ran: no file written, nothing logged

    session = forkpoint.Session.load(rec.session_path)
    tools = session.by_type("tool_call")
    assert [t["tool"] for t in tools] == ["write_file", "run_tests"]
    model_calls = session.by_type("model_call")
    # Each tool call has exactly the arguments the model asked for in the turn before it.
    for tool_event, call in zip(tools, model_calls, strict=False):
        (asked,) = call["summary"]["tool_calls"]
        assert asked["name"] == tool_event["tool"]
        assert json.loads(asked["arguments"]) == tool_event["args"]
    write = tools[0]
    assert set(write["args"]) == {"path", "content"} and write["args"]["path"].endswith(".py")
    assert "error" not in write and "result" in write
    assert tools[1]["args"] == {} and tools[1]["result"] == {"passed": 1, "failed": 0}
    assert model_calls[-1]["summary"]["stop_reason"] == "stop"
    assert {"pydantic_ai.toolsets.function", "agents.tool", "langchain_core.tools.base"} <= set(
        integrations.installed()
    )


def test_replay_serves_a_recorded_tool_error(workdir: Path, tmp_path: Path) -> None:
    """A tool that raised is recorded with its error; on replay the SDK turns the re-raised error
    into the same model-visible text, and the run takes the same path."""
    calls: list[str] = []

    @function_tool
    def flaky(path: str) -> str:
        """Check a path."""
        calls.append(path)
        raise ValueError(f"cannot read {path}")

    def run(url: str) -> list[Any]:
        client = AsyncOpenAI(base_url=url + "/v1", api_key=API_KEY, max_retries=0)
        agent = SdkAgent(
            name="checker",
            model=OpenAIChatCompletionsModel(model="demo-model", openai_client=client),
            tools=[flaky],
        )
        result = Runner.run_sync(agent, "Check the file.")
        return [result.final_output, [getattr(i, "output", None) for i in result.new_items]]

    with ModelServer(turns=1) as server, forkpoint.record(store=tmp_path) as rec:
        live = run(server.base_url)
    assert len(calls) == 1
    with forkpoint.replay(rec.session_path) as rp:
        replayed = run(server.base_url)
    assert replayed == live and len(calls) == 1
    assert rp.report()["unused"] == [] and rp.report()["divergence"] is None
    (event,) = forkpoint.Session.load(rec.session_path).by_type("tool_call")
    assert event["tool"] == "flaky"
    assert event["error"].pop("frames")[-1][2] == "flaky"
    assert event["error"] == {
        "type": "ValueError",
        "module": "builtins",
        "message": f"cannot read {calls[0]}",
    }


def test_a_tool_also_wrapped_with_forkpoint_tool_is_recorded_once(tmp_path: Path) -> None:
    """``@forkpoint.tool`` under the framework's decorator records itself; the integration steps
    aside, so each call is one event and replay leaves nothing unused."""
    ran: list[str] = []

    agent = Agent(instructions="Use the tool.")

    @agent.tool_plain
    @forkpoint.tool
    def lookup(query: str) -> str:
        """Look something up."""
        ran.append("pydantic-ai")
        return f"found {query}"

    @function_tool
    @forkpoint.tool
    def search(query: str) -> str:
        """Search for something."""
        ran.append("agents")
        return f"found {query}"

    def run(url: str) -> list[str]:
        return run_both(url, agent, search)

    with ModelServer(turns=1) as server, forkpoint.record(store=tmp_path) as rec:
        live = run(server.base_url)
    assert ran == ["pydantic-ai", "agents"]
    with forkpoint.replay(rec.session_path) as rp:
        assert run(server.base_url) == live
    assert ran == ["pydantic-ai", "agents"]
    assert rp.report()["unused"] == [] and rp.report()["divergence"] is None
    tools = forkpoint.Session.load(rec.session_path).by_type("tool_call")
    assert [t["tool"] for t in tools] == ["lookup", "search"]


@dataclasses.dataclass
class Report:
    path: str
    lines: tuple[int, int]
    when: datetime.date


def pai_model_and_sdk_agent(url: str, *tools: Any) -> tuple[Any, Any]:
    """A pydantic-ai model and an Agents SDK agent with ``tools``, both on the demo server at ``url``."""
    model = OpenAIChatModel("demo-model", provider=OpenAIProvider(base_url=url + "/v1", api_key=API_KEY))
    client = AsyncOpenAI(base_url=url + "/v1", api_key=API_KEY, max_retries=0)
    sdk_model = OpenAIChatCompletionsModel(model="demo-model", openai_client=client)
    return model, SdkAgent(name="s", model=sdk_model, tools=list(tools))


def test_rich_return_values_replay_as_themselves(tmp_path: Path) -> None:
    """Tools returning a dataclass with a tuple and a date: pydantic-ai sends the model their
    pydantic JSON, the Agents SDK their ``str()``. They were stored as that JSON or text, so on
    replay the application got a ``dict`` or a ``str`` where it had got a ``Report``, and the replay
    said ok. They are stored typed: the application gets a ``Report`` again, and the model the same
    tool-result message (a different one would be a divergence)."""
    agent = Agent(instructions="Use the tool.")

    @agent.tool_plain
    def inspect_file(path: str) -> Report:
        """Inspect a file."""
        return Report(path, (1, 2), datetime.date(2026, 1, 2))

    @function_tool
    def sdk_inspect_file(path: str) -> Report:
        """Inspect a file."""
        return Report(path, (1, 2), datetime.date(2026, 1, 2))

    def run(url: str) -> list[Any]:
        model, sdk_agent = pai_model_and_sdk_agent(url, sdk_inspect_file)
        got = agent.run_sync("Go.", model=model)
        parts = [p for m in got.all_messages() for p in m.parts if p.part_kind == "tool-return"]
        sdk = Runner.run_sync(sdk_agent, "Go.")
        outputs = [i.output for i in sdk.new_items if i.type == "tool_call_output_item"]
        return [str(got.output), str(sdk.final_output), [p.content for p in parts], outputs]

    with ModelServer(turns=1) as server, forkpoint.record(store=tmp_path) as rec:
        live = run(server.base_url)
        sent = [m["content"] for r in server.requests for m in r["body"]["messages"] if m["role"] == "tool"]
    with forkpoint.replay(rec.session_path) as rp:
        replayed = run(server.base_url)
    assert replayed == live
    assert [type(v) for v in replayed[2] + replayed[3]] == [Report, Report]
    assert rp.report()["unused"] == [] and rp.report()["divergence"] is None
    tools = forkpoint.Session.load(rec.session_path).by_type("tool_call")
    path = tools[0]["args"]["path"]
    assert json.loads(sent[0]) == {"path": path, "lines": [1, 2], "when": "2026-01-02"}
    assert sent[1] == str(Report(tools[1]["args"]["path"], (1, 2), datetime.date(2026, 1, 2)))
    assert [t["result"]["kind"] for t in tools] == ["dataclass", "dataclass"]


def test_an_override_giving_plain_json_for_a_datetime_inside_a_tools_dict_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Tools returning a dict that holds a datetime, overridden with that datetime as its ISO text:
    the agent got a ``str`` where the tool had returned a datetime, and nothing said so; only a
    typed value at the top of the result (a dataclass, a datetime) was said."""
    agent = Agent(instructions="Use the tool.")
    built = {"key": "build", "at": datetime.datetime(2024, 5, 1, 12, 0, tzinfo=datetime.UTC), "ok": True}

    @agent.tool_plain
    def build_info(key: str) -> dict[str, Any]:
        """Build info."""
        return dict(built)

    @function_tool(name_override="build_info")
    def sdk_build_info(key: str) -> dict[str, Any]:
        """Build info."""
        return dict(built)

    def run(url: str, framework: str) -> Any:
        model, sdk_agent = pai_model_and_sdk_agent(url, sdk_build_info)
        if framework == "pydantic-ai":
            got = agent.run_sync("Go.", model=model).all_messages()
            return next(p.content for m in got for p in m.parts if p.part_kind == "tool-return")
        sdk = Runner.run_sync(sdk_agent, "Go.")
        return next(i.output for i in sdk.new_items if i.type == "tool_call_output_item")

    given = '{"key": "build", "at": "2000-01-01T00:00:00+00:00", "ok": false}'
    spec = f"tool:build_info.result={given}"
    for framework in ("pydantic-ai", "openai-agents"):
        with LocalServer(chat_script=[[("build_info", {"key": "build"})], "done"]) as server:
            with forkpoint.record(store=tmp_path) as rec:
                assert run(server.url, framework) == built
            capsys.readouterr()
            with forkpoint.replay(
                rec.session_path, overrides=[spec], on_divergence="live", record_child=False
            ):
                assert run(server.url, framework)["at"] == "2000-01-01T00:00:00+00:00"  # (allowed: said)
        said = " ".join(capsys.readouterr().err.split())
        assert (
            f"override {spec!r}: build_info returned a datetime.datetime at $.at when recorded; this value "
            "is plain JSON there, so the agent gets a plain str instead" in said
        ), (framework, said)


def test_a_frameworks_own_tools_are_not_said_to_be_unrecorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pydantic-ai's output tool (``final_result``, for ``output_type=``) and an Agents SDK handoff
    (``transfer_to_billing``) have no function to record: every such recording warned that "the
    model asked for tools that were never recorded" and told the user to name them."""
    from pydantic import BaseModel

    from tests.modelserver import LocalServer

    class Weather(BaseModel):
        city: str
        summary: str

    structured = Agent(instructions="Report the weather.", output_type=Weather)

    @structured.tool_plain
    def get_weather(city: str) -> str:
        """The weather of a city."""
        return "sunny"

    pai: Any = [
        [("get_weather", {"city": "Paris"})],
        [("final_result", {"city": "Paris", "summary": "sunny"})],
    ]
    sdk: Any = [[("transfer_to_billing", {})], "Billing here: done."]
    with (
        LocalServer(chat_script=pai) as srv,
        LocalServer(chat_script=sdk) as srv2,
        forkpoint.record(store=tmp_path) as rec,
    ):
        model = OpenAIChatModel("m", provider=OpenAIProvider(base_url=srv.openai_base_url, api_key=API_KEY))
        assert structured.run_sync("Weather?", model=model).output == Weather(city="Paris", summary="sunny")
        sdk_model = OpenAIChatCompletionsModel(
            model="m",
            openai_client=AsyncOpenAI(base_url=srv2.openai_base_url, api_key=API_KEY, max_retries=0),
        )
        billing = SdkAgent(name="billing", instructions="billing", model=sdk_model)
        triage = SdkAgent(name="triage", instructions="triage", model=sdk_model, handoffs=[billing])
        assert Runner.run_sync(triage, "refund please").last_agent.name == "billing"
    said = capsys.readouterr().err
    assert "never recorded" not in said, said
    end = forkpoint.Session.load(rec.session_path).end()
    assert end is not None and not end.get("unrecorded_tools")


def test_the_final_answer_of_a_run_with_an_output_type_is_its_output(tmp_path: Path) -> None:
    """pydantic-ai takes an ``output_type=`` by its output tool (``final_result``, no model text):
    ``forkpoint diff``, ``check --models live``'s A/B rows (``totals``) said "final answer —"; it
    is the arguments the model gave the tool. (The Agents SDK asks for a JSON answer as text.)"""
    from pydantic import BaseModel

    from forkpoint.diff import totals
    from tests.modelserver import LocalServer

    class Weather(BaseModel):
        city: str
        summary: str

    answer = {"city": "Paris", "summary": "sunny"}
    with (
        LocalServer(chat_script=[[("final_result", answer)]]) as srv,
        forkpoint.record(store=tmp_path) as pai,
    ):
        model = OpenAIChatModel("m", provider=OpenAIProvider(base_url=srv.openai_base_url, api_key=API_KEY))
        assert Agent(output_type=Weather).run_sync("Weather?", model=model).output == Weather(**answer)
    with LocalServer(chat_script=[json.dumps(answer)]) as srv, forkpoint.record(store=tmp_path) as sdk:
        client = AsyncOpenAI(base_url=srv.openai_base_url, api_key=API_KEY, max_retries=0)
        agent = SdkAgent(
            name="w", model=OpenAIChatCompletionsModel(model="m", openai_client=client), output_type=Weather
        )
        assert Runner.run_sync(agent, "Weather?").final_output == Weather(**answer)
    for rec in (pai, sdk):
        assert json.loads(totals(forkpoint.Session.load(rec.session_path))["final_answer"]) == answer


def test_an_agents_sdk_tool_the_program_did_not_call_is_not_said_to_need_naming(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The model asked for an ``@function_tool`` the run did not call (a tool guardrail rejected the
    call here; an input guardrail that stops a streamed run while the model asks for tools does
    the same): the recording said it was "never recorded" and told the user to put
    ``@forkpoint.tool`` on it, though forkpoint records every call of it. It now says the program
    never called it."""
    from agents import ToolGuardrailFunctionOutput, tool_input_guardrail

    from tests.modelserver import LocalServer

    @tool_input_guardrail
    def refuse(data: Any) -> ToolGuardrailFunctionOutput:
        return ToolGuardrailFunctionOutput.reject_content("not allowed")

    script: Any = [[("lookup", {"q": "x"})], "Could not look it up."]
    with LocalServer(chat_script=script) as srv, forkpoint.record(store=tmp_path):

        @function_tool(tool_input_guardrails=[refuse])
        def lookup(q: str) -> str:
            """Look something up."""
            return "found"

        model = OpenAIChatCompletionsModel(
            model="m", openai_client=AsyncOpenAI(base_url=srv.openai_base_url, api_key=API_KEY, max_retries=0)
        )
        agent = SdkAgent(name="a", instructions="a", model=model, tools=[lookup])
        assert Runner.run_sync(agent, "Look x up.").final_output == "Could not look it up."
    said = " ".join(capsys.readouterr().err.split())
    assert "the model asked for tools the program never called: lookup (1 call)" in said, said
    assert "never recorded" not in said and "@forkpoint.tool" not in said, said


def test_an_agents_sdk_agent_used_as_a_tool_is_not_said_to_be_unrecorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An agent used as a tool (``agent.as_tool()``) is recorded as its own model and tool calls, one
    by one: the recording warned that "the model asked for tools that were never recorded" and told
    the user to put ``@forkpoint.tool`` on it, and its unchanged replay said "ok, but incomplete"."""
    from tests.modelserver import LocalServer

    outer_script: Any = [[("ask_expert", {"input": "time?"})], "The expert says noon."]
    with (
        LocalServer(chat_script=outer_script) as srv,
        LocalServer(chat_script=["It is noon."]) as srv2,
        forkpoint.record(store=tmp_path) as rec,
    ):

        def model(url: str) -> OpenAIChatCompletionsModel:
            client = AsyncOpenAI(base_url=url, api_key=API_KEY, max_retries=0)
            return OpenAIChatCompletionsModel(model="m", openai_client=client)

        expert = SdkAgent(name="expert", instructions="Tell the time.", model=model(srv2.openai_base_url))
        tool = expert.as_tool(tool_name="ask_expert", tool_description="Ask the expert.")
        boss = SdkAgent(name="boss", instructions="Ask.", model=model(srv.openai_base_url), tools=[tool])
        assert Runner.run_sync(boss, "What time is it?").final_output == "The expert says noon."
    said = " ".join(capsys.readouterr().err.split())
    assert "never recorded" not in said and "@forkpoint.tool" not in said, said
    end = forkpoint.Session.load(rec.session_path).end()
    assert end is not None and not end.get("unrecorded_tools"), end


def test_pydantic_ai_tools_of_prefixed_and_renamed_toolsets_are_not_said_to_be_unrecorded(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A toolset ``.prefixed("north")`` or ``.renamed({...})`` (two MCP servers with tools of one
    name, the way pydantic-ai tells them apart) has the model ask for ``north_stock``, while the call
    is recorded under the name the tool or MCP server knows, ``stock``: the recording warned that the
    model asked for tools that were never recorded, told the user to name them, and every replay
    said they "ran for real in this replay", though they were served."""
    from pydantic_ai import FunctionToolset

    def stock(item: str) -> int:
        """How many are in stock."""
        return 7

    def price(item: str) -> float:
        """What one costs."""
        return 1.25

    script: Any = [[("north_stock", {"item": "apple"}), ("cost", {"item": "apple"})], "7 at 1.25."]
    with LocalServer(chat_script=script) as srv, forkpoint.record(store=tmp_path) as rec:
        model = OpenAIChatModel("m", provider=OpenAIProvider(base_url=srv.openai_base_url, api_key=API_KEY))
        north = FunctionToolset([stock]).prefixed("north")
        cost = FunctionToolset([price]).prefixed("south").renamed({"cost": "south_price"})
        agent = Agent(model, toolsets=[north, cost])
        assert agent.run_sync("Apples?").output == "7 at 1.25."
    said = " ".join(capsys.readouterr().err.split())
    assert "never recorded" not in said and "@forkpoint.tool" not in said, said
    end = forkpoint.Session.load(rec.session_path).end()
    assert end is not None and not end.get("unrecorded_tools"), end


class Handle:
    """A result type with no stored form (no encoder registered)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return f"handle {self.name}"


def test_a_framework_tool_result_with_no_stored_form_is_said_and_never_replayed_as_another_type(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pydantic-ai tool returning an ``IPv4Address`` was stored as its JSON text, an Agents SDK
    tool returning a plain object as its ``str()``, without a word: the replay handed the program a
    ``str`` where it had had the object, and said "replay ok". Such a result is said while
    recording, as a plain tool's is, and the replay stops at it instead of serving another type."""
    agent = Agent(instructions="Use the tool.")

    @agent.tool_plain
    def lookup_host(path: str) -> ipaddress.IPv4Address:
        """Look a host up."""
        return ipaddress.IPv4Address("127.0.0.7")

    @function_tool
    def sdk_open(path: str) -> Handle:
        """Open a file."""
        return Handle(path)

    def run(url: str) -> None:
        model, sdk_agent = pai_model_and_sdk_agent(url, sdk_open)
        agent.run_sync("Go.", model=model)
        Runner.run_sync(sdk_agent, "Go.")

    with ModelServer(turns=1) as server, forkpoint.record(store=tmp_path) as rec:
        run(server.base_url)
    said = " ".join(capsys.readouterr().err.split())
    assert "tool 'lookup_host' returned" in said and "ipaddress.IPv4Address" in said, said
    assert "tool 'sdk_open' returned" in said and "Handle" in said, said
    tools = forkpoint.Session.load(rec.session_path).by_type("tool_call")
    assert [bool(t.get("unrecorded")) for t in tools] == [True, True]
    with forkpoint.replay(rec.session_path) as rp:
        with contextlib.suppress(Exception):
            run(server.base_url)
    assert not rp.report()["reproduced"]


def test_an_agents_sdk_tool_returning_bytes_that_are_not_utf8_replays_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An Agents SDK tool returning bytes that are not UTF-8 (a file's raw content) was said to have
    "returned UnicodeDecodeError" and left unrecorded, with the advice to register an encoder for
    bytes, a type forkpoint stores itself: the JSON form of the result was made before the typed
    one, and pydantic has none for such bytes. It is recorded, and the replay hands back the bytes."""
    raw = b"\x89\xff\x00raw"

    @function_tool
    def read_raw(path: str) -> bytes:
        """Read a file's bytes."""
        return raw

    def run(url: str) -> list[Any]:
        _, sdk_agent = pai_model_and_sdk_agent(url, read_raw)
        sdk = Runner.run_sync(sdk_agent, "Go.")
        return [i.output for i in sdk.new_items if i.type == "tool_call_output_item"]

    with ModelServer(turns=1) as server, forkpoint.record(store=tmp_path) as rec:
        live = run(server.base_url)
    assert "cannot record" not in capsys.readouterr().err
    with forkpoint.replay(rec.session_path) as rp:
        assert run(server.base_url) == live == [raw]
    assert rp.report()["reproduced"], rp.report()


def test_an_agents_sdk_tools_exception_with_no_failure_handler_has_the_traceback_it_has_without_forkpoint(
    tmp_path: Path,
) -> None:
    """A ``function_tool`` with no failure handler raises its exception to the program. It left
    through the frame of forkpoint's patch of the SDK's invoker, recorded and replayed, so the
    program's traceback named forkpoint where it has none without it."""

    def divide(a: int, b: int) -> float:
        """Divide."""
        return a / b

    tool = function_tool(divide, failure_error_function=None)

    def run() -> str:
        ctx = agents.tool_context.ToolContext(
            context=None, tool_name="divide", tool_call_id="c1", tool_arguments='{"a": 1, "b": 0}'
        )
        try:
            asyncio.run(tool.on_invoke_tool(ctx, '{"a": 1, "b": 0}'))
        except ZeroDivisionError as exc:
            return "".join(traceback.format_exception(exc))
        raise AssertionError("the tool did not raise")

    plain = run()
    with forkpoint.record(store=tmp_path) as rec:
        assert run() == plain
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == plain
    assert rp.report()["reproduced"], rp.report()


def test_pydantic_ai_tool_return_and_images_replay_as_the_model_saw_them(tmp_path: Path) -> None:
    """pydantic-ai tools may return a ``ToolReturn`` (a value for the tool result, extra content for
    the model, metadata for the application) or multimodal content such as an image. On replay the
    agent gets the same objects back, so the requests the model would see are the same (an image
    part in the next request included) and the application reads the same metadata."""
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(64))
    ran: list[str] = []
    agent = Agent(instructions="Use the tool.")

    @agent.tool_plain
    def screenshot(path: str) -> ToolReturn:
        """Take a screenshot of a file."""
        ran.append(path)
        return ToolReturn(
            return_value={"path": path, "pixels": 64},
            content=["Here is the screenshot:", BinaryContent(data=png, media_type="image/png")],
            metadata={"taken_at": "2026-01-02T03:04:05Z"},
        )

    def run(url: str) -> tuple[str, list[Any]]:
        model = OpenAIChatModel("demo-model", provider=OpenAIProvider(base_url=url + "/v1", api_key=API_KEY))
        result = agent.run_sync("Go.", model=model)
        returns = [
            (p.content, p.metadata)
            for m in result.all_messages()
            for p in getattr(m, "parts", [])
            if isinstance(p, ToolReturnPart)
        ]
        return str(result.output), returns

    with ModelServer(turns=1) as server, forkpoint.record(store=tmp_path) as rec:
        live = run(server.base_url)
        images = [r for r in server.requests if "data:image/png;base64" in json.dumps(r["body"])]
    assert len(ran) == 1 and images  # the image reached the model as a part of the next request
    assert live[1] == [({"path": ran[0], "pixels": 64}, {"taken_at": "2026-01-02T03:04:05Z"})]
    with forkpoint.replay(rec.session_path) as rp:
        assert run(server.base_url) == live
    assert len(ran) == 1  # the tool body did not run again
    assert rp.report()["unused"] == [] and rp.report()["divergence"] is None
    (event,) = forkpoint.Session.load(rec.session_path).by_type("tool_call")
    stored = event["result"]["$pydantic_ai_tool_return"]
    assert stored["return_value"] == {"path": ran[0], "pixels": 64}
    assert stored["content"][1]["$pydantic_ai"]["kind"] == "binary"


def test_pydantic_ai_mixed_lists_keep_every_item() -> None:
    """A list with multimodal parts beside plain values: each part is rebuilt as its class and the
    plain values stay as they were (a dict among images came back as a CachePoint)."""
    from pydantic_ai.messages import ImageUrl

    from forkpoint.integrations.pydantic_ai import decode_result, encode_result

    value = [
        "text",
        ImageUrl(url="http://127.0.0.1:9/a.png"),
        BinaryContent(data=b"%PDF-1.7", media_type="application/pdf"),
        {"k": 1},
    ]
    # What the tool wrapper stores (values.encode of it), as the log holds it, served back.
    stored = values.decode(orjson.loads(orjson.dumps(values.encode(encode_result(value)))))
    back = decode_result(stored)
    assert back[0] == "text" and back[3] == {"k": 1}
    assert isinstance(back[1], ImageUrl) and back[1].url == value[1].url
    assert isinstance(back[2], BinaryContent) and back[2].data == b"%PDF-1.7"
    assert back[2].media_type == "application/pdf"


def test_langchain_tool_shapes_replay_as_the_model_saw_them(tmp_path: Path) -> None:
    """LangChain tools return more than JSON: a message, content with an artifact, an error that
    ``handle_tool_error`` turns into text, a ``BaseTool`` subclass's own ``_run``. Each replays to
    the same ``ToolMessage`` the model was sent live, with no body running; the tool call id the
    graph injects is not a recorded argument (it is not the model's choice)."""
    ran: list[str] = []

    @langchain_tool
    def reply(text: str, call_id: Annotated[str, InjectedToolCallId]) -> ToolMessage:
        """Answer with a message of its own."""
        ran.append("reply")
        return ToolMessage(f"echo {text}", tool_call_id=call_id, name="reply", artifact={"n": 1})

    @langchain_tool(response_format="content_and_artifact")
    def search(query: str) -> tuple[str, dict[str, Any]]:
        """Search, keeping the raw hits as the artifact."""
        ran.append("search")
        return f"2 hits for {query}", {"hits": [query, query.upper()]}

    @langchain_tool
    def broken(path: str) -> str:
        """Always fails."""
        ran.append("broken")
        raise ToolException(f"no such file: {path}")

    broken.handle_tool_error = True

    class Clock(BaseTool):
        name: str = "clock"
        description: str = "The time in a city."

        def _run(self, city: str) -> Report:
            ran.append("clock")
            return Report(city, (1, 2), datetime.date(2026, 1, 2))  # no JSON form: sent as its text

    @langchain_tool
    def handoff(reason: str, call_id: Annotated[str, InjectedToolCallId]) -> Command:
        """Hand the task to the reviewer (a LangGraph handoff: a Command, not a message)."""
        ran.append("handoff")
        done = ToolMessage(f"handing off: {reason}", tool_call_id=call_id)
        return Command(goto=[Send("reviewer", {"why": reason})], update={"messages": [done], "hops": (1, 2)})

    calls = [
        (reply, {"text": "hi"}),
        (search, {"query": "bug"}),
        (broken, {"path": "a.py"}),
        (Clock(), {"city": "Oslo"}),
        (handoff, {"reason": "needs review"}),
    ]

    def run() -> list[Any]:
        out = []
        for i, (t, args) in enumerate(calls):
            msg = t.invoke({"type": "tool_call", "name": t.name, "args": args, "id": f"call_{i}"})
            if isinstance(msg, ToolMessage):
                out.append((type(msg), msg.content, msg.tool_call_id, msg.status, msg.artifact))
            else:
                out.append(msg)
        return out

    with forkpoint.record(store=tmp_path) as rec:
        live = run()
    assert ran == ["reply", "search", "broken", "clock", "handoff"]
    assert isinstance(live[4], Command) and live[4].update["messages"][0].tool_call_id == "call_4"
    assert live[2][1:4] == ("no such file: a.py", "call_2", "error")
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    assert len(ran) == 5  # no body ran on replay
    assert rp.report()["unused"] == [] and rp.report()["divergence"] is None
    events = forkpoint.Session.load(rec.session_path).by_type("tool_call")
    assert [e["args"] for e in events] == [args for _, args in calls]  # no call_id
    assert events[1]["result"] == {"$content_and_artifact": ["2 hits for bug", {"hits": ["bug", "BUG"]}]}
    assert events[2]["error"]["type"] == "ToolException"
    # (typed, so that a direct invoke gets the same value back, not the text the model was sent)
    assert values.decode(events[3]["result"]) == Report("Oslo", (1, 2), datetime.date(2026, 1, 2))


def test_a_langchain_tool_invoked_directly_returns_the_same_typed_value_on_replay(tmp_path: Path) -> None:
    """A body's value with no JSON form was stored as the text LangChain sends the model: a direct
    ``invoke`` got a dict with a date live and that dict's ``str`` on replay, and an artifact's date
    came back as its ISO text, "replay ok"."""

    @langchain_tool
    def plain(sym: str) -> dict[str, Any]:
        """A result with a date and a tuple."""
        return {"at": datetime.date(2024, 1, 2), "px": (1, 2)}

    @langchain_tool(response_format="content_and_artifact")
    def quote(sym: str) -> tuple[str, dict[str, Any]]:
        """A quote, its raw data as the artifact."""
        return f"{sym} quoted", {
            "at": datetime.datetime(2024, 1, 1, 9, 30),
            "price": decimal.Decimal("101.25"),
        }

    def run() -> list[Any]:
        msg = quote.invoke({"type": "tool_call", "name": "quote", "args": {"sym": "ACME"}, "id": "c1"})
        return [plain.invoke({"sym": "X"}), msg.content, msg.artifact]

    with forkpoint.record(store=tmp_path) as rec:
        live = run()
    assert live[0] == {"at": datetime.date(2024, 1, 2), "px": (1, 2)}
    with forkpoint.replay(rec.session_path) as rp:
        again = run()
    assert again == live and type(again[0]["px"]) is tuple and type(again[2]["price"]) is decimal.Decimal
    assert rp.report()["reproduced"]


class Rows(list):  # type: ignore[type-arg]
    """A list of the program's own (a result set), as some tools return."""


def test_a_live_tool_result_reaches_the_program_as_it_was_while_recording(tmp_path: Path) -> None:
    """The LangChain and pydantic-ai integrations read every result back from its stored form,
    the live one too: while recording, a ``Counter`` a LangChain tool returned reached the program
    a plain dict (and a replay, rebuilding the ``Counter``, made a dict of it again), and a list of
    the program's own class a pydantic-ai tool returned reached it a plain list (and was stored as
    one, for a replay to hand back so under "replay ok")."""
    from pydantic_ai.models.test import TestModel

    @langchain_tool
    def letters(text: str) -> dict[str, int]:
        """Count the letters."""
        return collections.Counter(text)

    agent = Agent(TestModel())
    kept = Rows([1, 2])

    @agent.tool_plain
    def rows() -> list[int]:
        """The rows."""
        return kept

    def run() -> list[Any]:
        got = agent.run_sync("Go.")
        (part,) = [p for m in got.all_messages() for p in m.parts if p.part_kind == "tool-return"]
        return [letters.invoke({"text": "aab"}), part.content]

    assert [type(v) for v in run()] == [collections.Counter, Rows]  # (without forkpoint)
    with forkpoint.record(store=tmp_path) as rec:
        live = run()
    assert [type(v) for v in live] == [collections.Counter, Rows] and live[1] is kept
    with forkpoint.replay(rec.session_path) as rp:
        again = letters.invoke({"text": "aab"})
    assert type(again) is collections.Counter and again == live[0]
    assert rp.report()["divergence"] is None
    (rows_call,) = [
        e for e in forkpoint.Session.load(rec.session_path).by_type("tool_call") if e["tool"] == "rows"
    ]
    assert "unrecorded" in rows_call  # (no stored form: said, not stored as a plain list)


def test_a_langchain_result_recorded_as_its_text_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A LangChain tool's result with no stored form (a ``deque``) is recorded as the text LangChain
    sends the model: exact for the model and a ``ToolNode``, but a caller of ``invoke`` got a
    ``str`` on replay, and nothing said so."""

    @langchain_tool
    def window(n: int) -> list[int]:
        """The last n readings."""
        return collections.deque(range(n))

    with forkpoint.record(store=tmp_path) as rec:
        live = [window.invoke({"n": 2}), window.invoke({"n": 3})]
    assert live == [collections.deque([0, 1]), collections.deque([0, 1, 2])]
    said = " ".join(capsys.readouterr().err.split())
    assert said.count("tool 'window' returned a collections.deque") == 1, said  # (once per tool)
    assert "on replay a caller of the tool's invoke() gets that text, not a deque" in said, said
    with forkpoint.replay(rec.session_path):
        assert window.invoke({"n": 2}) == "deque([0, 1])"  # (what was said)


def test_a_langchain_result_with_one_part_that_has_no_stored_form_names_that_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A LangChain tool returning a dict of which one value has no stored form (a ``complex``): the
    recording said the tool "returned a builtins.dict, which forkpoint cannot store as itself" and
    told the user to register an encoder for ``dict``. It names the part, where it is, and its type."""

    @langchain_tool
    def reading(sensor: str) -> dict:
        """A sensor's reading."""
        return {"sensor": sensor, "at": datetime.datetime(2026, 1, 2, 3, 4), "impedance": complex(1, 2)}

    with forkpoint.record(store=tmp_path) as rec:
        live = reading.invoke({"sensor": "t1"})
    said = " ".join(capsys.readouterr().err.split())
    assert (
        "tool 'reading' returned a builtins.dict holding a builtins.complex (at result['impedance'])" in said
    )
    assert "forkpoint.register_encoder(complex, " in said and "register_encoder(dict" not in said, said
    with forkpoint.replay(rec.session_path):
        assert reading.invoke({"sensor": "t1"}) == str(live)  # (recorded as its text, as said)


def _react_agent(url: str, tools: list[Any]) -> Any:
    """LangGraph's prebuilt agent on ChatOpenAI, as its tutorial builds it."""
    from langgraph.prebuilt import create_react_agent

    model = ChatOpenAI(model="m", base_url=url + "/v1", api_key=API_KEY, max_retries=0)
    with warnings.catch_warnings():  # (create_react_agent moved to langchain.agents: still there)
        warnings.simplefilter("ignore")
        return create_react_agent(model, tools)


def test_what_a_langgraph_tool_writes_to_its_stream_writer_is_written_again_on_replay(tmp_path: Path) -> None:
    """A tool writing progress to LangGraph's stream writer (``get_stream_writer()``, and a
    ``ToolRuntime``'s), typed values included, run with ``stream_mode=["custom", "updates"]``: the
    replay, which runs no tool body, streams the same custom chunks, in the same place, as live.
    A what-if of the tool's result writes them again as recorded."""
    from langgraph.config import get_stream_writer

    ran: list[str] = []

    @langchain_tool
    def lookup(city: str) -> str:
        """Look up the weather in a city."""
        ran.append("lookup")
        write = get_stream_writer()
        write({"progress": f"looking up {city}", "at": datetime.datetime(2026, 1, 2, 3, 4)})
        write(Report("weather.txt", (1, 2), datetime.date(2026, 1, 2)))
        return f"sunny in {city}"

    @langchain_tool
    async def forecast(city: str, runtime: ToolRuntime) -> str:
        """Forecast the weather in a city."""
        ran.append("forecast")
        runtime.stream_writer({"forecast": city})
        return f"rain in {city}"

    script: Any = [[("lookup", {"city": "Oslo"})], [("forecast", {"city": "Bergen"})], "done"]

    async def run(url: str) -> list[Any]:
        seen: list[Any] = []
        agent = _react_agent(url, [lookup, forecast])
        async for mode, chunk in agent.astream(
            {"messages": [("user", "Weather?")]}, stream_mode=["custom", "updates"]
        ):
            seen.append(chunk if mode == "custom" else sorted(chunk))
        return seen

    with LocalServer(chat_script=script) as srv:
        with forkpoint.record(store=tmp_path) as rec:
            live = asyncio.run(run(srv.url))
        assert ran == ["lookup", "forecast"]
        assert live[1:3] == [
            {"progress": "looking up Oslo", "at": datetime.datetime(2026, 1, 2, 3, 4)},
            Report("weather.txt", (1, 2), datetime.date(2026, 1, 2)),
        ]
        assert {"forecast": "Bergen"} in live
        srv.stop()
        with forkpoint.replay(rec.session_path) as rp:
            assert asyncio.run(run(srv.url)) == live
        assert ran == ["lookup", "forecast"]  # no body ran on replay
        assert rp.report()["reproduced"] is True
        events = forkpoint.Session.load(rec.session_path).by_type("tool_call")
        assert events[1]["emitted"] == [{"to": "stream_writer", "value": {"forecast": "Bergen"}}]

        with forkpoint.replay(
            rec.session_path, overrides=['tool:lookup.result="snow"'], on_divergence="fifo"
        ):
            assert asyncio.run(run(srv.url))[1:3] == live[1:3]


def test_what_a_subgraph_a_langgraph_tool_runs_writes_is_written_again_under_its_namespace(
    tmp_path: Path,
) -> None:
    """A tool that runs a subgraph, streamed with ``subgraphs=True``: the subgraph node's chunks
    come under the subgraph's namespace (below the tool's task), on replay as live."""
    from typing import TypedDict

    from langgraph.config import get_stream_writer

    class Query(TypedDict):
        city: str

    def fetch(state: Query) -> Query:
        get_stream_writer()({"fetching": state["city"]})
        return state

    inner = StateGraph(Query)
    inner.add_node("fetch", fetch)
    inner.add_edge(START, "fetch")
    subgraph = inner.compile()

    @langchain_tool
    def lookup(city: str) -> str:
        """Look up the weather in a city."""
        get_stream_writer()({"tool": city})
        subgraph.invoke({"city": city})
        return f"sunny in {city}"

    def run(url: str) -> list[Any]:
        agent = _react_agent(url, [lookup])
        chunks = agent.stream({"messages": [("user", "Weather?")]}, stream_mode="custom", subgraphs=True)
        # (a namespace names tasks by ids LangGraph makes afresh each run: its nodes are compared)
        return [([part.split(":")[0] for part in ns], chunk) for ns, chunk in chunks]

    with LocalServer(chat_script=[[("lookup", {"city": "Oslo"})], "done"]) as srv:
        with forkpoint.record(store=tmp_path) as rec:
            live = run(srv.url)
        assert live == [([], {"tool": "Oslo"}), (["tools"], {"fetching": "Oslo"})]
        srv.stop()
        with forkpoint.replay(rec.session_path) as rp:
            assert run(srv.url) == live
        assert rp.report()["reproduced"] is True


def test_custom_events_a_langchain_tool_dispatches_reach_astream_events_on_replay(tmp_path: Path) -> None:
    """``dispatch_custom_event`` (a sync tool, run in a worker thread) and ``adispatch_custom_event``
    (an async tool) under ``astream_events``: the replay dispatches the same events again."""
    from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event

    @langchain_tool
    def lookup(city: str) -> str:
        """Look up the weather in a city."""
        dispatch_custom_event("lookup_started", {"city": city, "on": datetime.date(2026, 1, 2)})
        return f"sunny in {city}"

    @langchain_tool
    async def forecast(city: str) -> str:
        """Forecast the weather in a city."""
        await adispatch_custom_event("forecast_started", {"city": city})
        await adispatch_custom_event("forecast_done", [1, 2])
        return f"rain in {city}"

    script: Any = [[("lookup", {"city": "Oslo"})], [("forecast", {"city": "Bergen"})], "done"]

    async def run(url: str) -> list[Any]:
        agent = _react_agent(url, [lookup, forecast])
        return [
            (e["name"], e["data"])
            async for e in agent.astream_events({"messages": [("user", "Weather?")]}, version="v2")
            if e["event"] == "on_custom_event"
        ]

    with LocalServer(chat_script=script) as srv:
        with forkpoint.record(store=tmp_path) as rec:
            live = asyncio.run(run(srv.url))
        assert live == [
            ("lookup_started", {"city": "Oslo", "on": datetime.date(2026, 1, 2)}),
            ("forecast_started", {"city": "Bergen"}),
            ("forecast_done", [1, 2]),
        ]
        srv.stop()
        with forkpoint.replay(rec.session_path) as rp:
            assert asyncio.run(run(srv.url)) == live
        assert rp.report()["reproduced"] is True


def test_a_custom_event_a_run_inside_a_langchain_tool_dispatched_makes_the_replay_not_certain(
    tmp_path: Path,
) -> None:
    """A custom event dispatched by a chain the tool runs carries that chain's run (ids, tags,
    metadata) live; a replay, running no tool body, dispatches it from the tool's run: the same
    name and data, said in the verdict, never a bare "replay ok"."""
    from langchain_core.callbacks.manager import dispatch_custom_event
    from langchain_core.runnables import RunnableLambda

    from forkpoint.replay import summary_line

    def fetch(city: str) -> str:
        dispatch_custom_event("fetching", {"city": city})
        return city

    chain = RunnableLambda(fetch)

    @langchain_tool
    def lookup(city: str) -> str:
        """Look up the weather in a city."""
        dispatch_custom_event("looking", {"city": city})
        return f"sunny in {chain.invoke(city)}"

    async def run(url: str) -> list[Any]:
        agent = _react_agent(url, [lookup])
        return [
            (e["name"], e["data"])
            async for e in agent.astream_events({"messages": [("user", "Weather?")]}, version="v2")
            if e["event"] == "on_custom_event"
        ]

    with LocalServer(chat_script=[[("lookup", {"city": "Oslo"})], "done"]) as srv:
        with forkpoint.record(store=tmp_path) as rec:
            live = asyncio.run(run(srv.url))
        assert live == [("looking", {"city": "Oslo"}), ("fetching", {"city": "Oslo"})]
        srv.stop()
        with forkpoint.replay(rec.session_path) as rp:
            assert asyncio.run(run(srv.url)) == live
    report = rp.report()
    assert report["reproduced"] is True
    seq = forkpoint.Session.load(rec.session_path).by_type("tool_call")[0]["seq"]
    assert report["emitted_inner"] == [{"seq": seq, "tool": "lookup", "events": 1}]
    line = summary_line(report)
    assert line.startswith("replay ok, but not certain:") and "1 custom event of tool 'lookup'" in line


def test_what_a_forkpoint_tool_run_as_a_langchain_tool_streams_is_written_again_on_replay(
    tmp_path: Path,
) -> None:
    """A ``@forkpoint.tool`` function run as a LangChain tool records itself: what it writes to the
    stream writer and the custom events it dispatches go with its own call, and come back on replay."""
    from langchain_core.callbacks.manager import dispatch_custom_event
    from langgraph.config import get_stream_writer

    @langchain_tool
    @forkpoint.tool
    def lookup(city: str) -> str:
        """Look up the weather in a city."""
        get_stream_writer()({"progress": city})
        dispatch_custom_event("looked", {"city": city})
        return f"sunny in {city}"

    def run(url: str) -> list[Any]:
        agent = _react_agent(url, [lookup])
        return list(agent.stream({"messages": [("user", "Weather?")]}, stream_mode="custom"))

    with LocalServer(chat_script=[[("lookup", {"city": "Oslo"})], "done"]) as srv:
        with forkpoint.record(store=tmp_path) as rec:
            live = run(srv.url)
        assert live == [{"progress": "Oslo"}]
        srv.stop()
        with forkpoint.replay(rec.session_path) as rp:
            assert run(srv.url) == live
        assert rp.report()["reproduced"] is True
    (event,) = forkpoint.Session.load(rec.session_path).by_type("tool_call")
    assert event["emitted"] == [
        {"to": "stream_writer", "value": {"progress": "Oslo"}},
        {"to": "custom_event", "name": "looked", "value": {"city": "Oslo"}},
    ]


def test_a_stream_write_forkpoint_cannot_store_is_said_and_stops_the_replay(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A chunk with no stored form is said while recording, and the replay stops at that call
    rather than stream less under "replay ok"."""
    from langgraph.config import get_stream_writer

    class Opaque:
        pass

    @langchain_tool
    def lookup(city: str) -> str:
        """Look up the weather in a city."""
        get_stream_writer()(Opaque())
        return f"sunny in {city}"

    async def run(url: str) -> list[Any]:
        agent = _react_agent(url, [lookup])
        return [c async for c in agent.astream({"messages": [("user", "Weather?")]}, stream_mode="custom")]

    with LocalServer(chat_script=[[("lookup", {"city": "Oslo"})], "done"]) as srv:
        with forkpoint.record(store=tmp_path) as rec:
            asyncio.run(run(srv.url))
        assert "tool 'lookup' emitted a " in capfd.readouterr().err
        srv.stop()
        with pytest.raises(forkpoint.Divergence), forkpoint.replay(rec.session_path) as rp:
            asyncio.run(run(srv.url))
        assert "cannot be emitted again" in str(rp.report()["divergence"])


def test_integrations_call_through_when_inactive(workdir: Path) -> None:
    """Outside record/replay the patched entry points change nothing."""
    with ModelServer(turns=2) as server:
        out = run_pydantic_ai(server.base_url)
        out_sdk = run_agents_sdk(server.base_url)
    assert out and out_sdk
    assert len((workdir / "side_effects.log").read_text().splitlines()) == 4
    assert forkpoint.active() is None


# --------------------------------------------------------------------------- under the CLI

AGENT_SCRIPT = '''
"""Both agents, as a user would write them: no forkpoint anywhere."""
import json
import sys
from pathlib import Path

from agents import Agent as SdkAgent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

BASE_URL, WORKDIR = sys.argv[1], Path(sys.argv[2])
set_tracing_disabled(True)


def side_effect(line):
    with open(WORKDIR / "side_effects.log", "a") as f:
        f.write(line + "\\n")


agent = Agent(instructions="You are a careful coding agent.")


@agent.tool_plain
def write_file(path: str, content: str) -> dict:
    """Write a file."""
    (WORKDIR / path).write_text(content)
    side_effect("write_file")
    return {"path": path, "bytes": len(content)}


@agent.tool_plain
def run_tests() -> dict:
    """Run the tests."""
    side_effect("run_tests")
    return {"passed": 1, "failed": 0}


@function_tool(name_override="write_file")
def sdk_write_file(path: str, content: str) -> str:
    """Write a file."""
    (WORKDIR / path).write_text(content)
    side_effect("sdk_write_file")
    return "ok"


@function_tool(name_override="run_tests")
def sdk_run_tests() -> str:
    """Run the tests."""
    side_effect("sdk_run_tests")
    return "1 passed"


model = OpenAIChatModel("demo-model", provider=OpenAIProvider(base_url=BASE_URL + "/v1", api_key="sk-x"))
print("pydantic-ai:", agent.run_sync("Fix the bug.", model=model).output)
client = AsyncOpenAI(base_url=BASE_URL + "/v1", api_key="sk-x", max_retries=0)
sdk_agent = SdkAgent(
    name="coder",
    model=OpenAIChatCompletionsModel(model="demo-model", openai_client=client),
    tools=[sdk_write_file, sdk_run_tests],
)
print("agents:", Runner.run_sync(sdk_agent, "Fix the bug.").final_output)
'''


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    return subprocess.run(
        [sys.executable, "-c", "from forkpoint.cli import main; main()", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_cli_record_and_replay_bootstrapped_framework_agents(tmp_path: Path) -> None:
    """``forkpoint record -- python agent.py`` then ``forkpoint replay last``: the integrations
    install themselves in the child as the frameworks are imported; no code change."""
    script = tmp_path / "agent.py"
    script.write_text(textwrap.dedent(AGENT_SCRIPT))
    work = tmp_path / "work"
    work.mkdir()
    store = tmp_path / "store"
    with ModelServer(turns=2) as server:
        rec = _cli(
            "record", "--store", str(store), "--", sys.executable, str(script), server.base_url, str(work),
            cwd=tmp_path,
        )  # fmt: skip
    assert rec.returncode == 0, rec.stderr
    assert (work / "side_effects.log").read_text().split() == [
        "write_file",
        "run_tests",
        "sdk_write_file",
        "sdk_run_tests",
    ]
    before = _snapshot(work)

    report_file = tmp_path / "report.json"
    rep = _cli("replay", "last", "--store", str(store), "--report", str(report_file), cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    assert rep.stdout == rec.stdout and "pydantic-ai: " in rep.stdout and "agents: " in rep.stdout
    report = json.loads(report_file.read_text())
    assert report["matched"] == report["recorded"] == 10  # 6 model calls, 4 tool calls
    assert report["unused"] == [] and report["divergence"] is None and report["network_blocked"] == []
    assert _snapshot(work) == before

    (session_dir,) = [p for p in store.iterdir() if (p / "session.jsonl").is_file()]
    session = forkpoint.Session.load(session_dir)
    tools = session.by_type("tool_call")
    assert [t["tool"] for t in tools] == ["write_file", "run_tests"] * 2
    assert set(tools[0]["args"]) == {"path", "content"} and tools[2]["result"] == "ok"
    assert session.header["versions"].get("openai-agents") == agents.__version__


Pair = collections.namedtuple("Pair", "a b")


def test_a_pydantic_ai_tool_returning_a_tuple_replays_a_tuple(tmp_path: Path) -> None:
    """A tuple (or a named tuple) a pydantic-ai tool returned came back a list on replay, under
    "replay ok": pydantic-ai's list-of-parts handling took every tuple for one."""
    from pydantic_ai.models.test import TestModel

    agent = Agent(TestModel())

    @agent.tool_plain
    def span() -> tuple[int, str]:
        """A span."""
        return (1, "a")

    @agent.tool_plain
    def pair() -> Pair:
        """A pair."""
        return Pair(1, 2)

    def run() -> list[Any]:
        got = agent.run_sync("Go.")
        return [p.content for m in got.all_messages() for p in m.parts if p.part_kind == "tool-return"]

    with forkpoint.record(store=tmp_path) as rec:
        live = run()
    with forkpoint.replay(rec.session_path) as rp:
        again = run()
    assert sorted(map(repr, again)) == sorted(map(repr, live)) == ["(1, 'a')", "Pair(a=1, b=2)"]
    assert rp.report()["reproduced"]


class Quantity(BaseModel):
    qty: int


def test_a_pydantic_ai_tool_raising_a_validation_error_retries_on_replay_as_it_did_live(
    tmp_path: Path,
) -> None:
    """pydantic-ai turns a tool's ``ValidationError`` into a retry prompt for the model. On replay
    the recorded one came back a ``RecordedToolError``, which pydantic-ai let out of the run: the
    replay ended with an uncaught exception where the recording went on."""
    from pydantic_ai.models.test import TestModel

    agent = Agent(TestModel())
    calls: list[int] = []

    @agent.tool_plain
    def order(text: str) -> int:
        """Parse an order."""
        calls.append(1)
        return Quantity.model_validate({"qty": "many" if len(calls) == 1 else 2}).qty

    def run() -> list[Any]:
        got = agent.run_sync("Go.")
        return [
            (p.part_kind, p.content)
            for m in got.all_messages()
            for p in m.parts
            if p.part_kind in ("retry-prompt", "tool-return")
        ]

    with forkpoint.record(store=tmp_path) as rec:
        live = run()
    assert len(calls) == 2 and live[0][1][0]["type"] == "int_parsing" and live[1] == ("tool-return", 2)
    with forkpoint.replay(rec.session_path) as rp:
        again = run()
    assert len(calls) == 2
    assert again == live
    assert rp.report()["reproduced"]


def _clock_instructions(ctx: Any, agent: Any) -> str:
    return f"You are a careful coding agent. It is {datetime.datetime.now().isoformat()}."


@input_guardrail
async def _allow(ctx: Any, agent: Any, given: Any) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered=False)


def sdk_clock_run(base_url: str) -> str:
    """An Agents SDK run whose dynamic instructions read the time, with an input guardrail."""
    client = AsyncOpenAI(base_url=base_url + "/v1", api_key=API_KEY, max_retries=0)
    agent = SdkAgent(
        name="coder",
        instructions=_clock_instructions,
        model=OpenAIChatCompletionsModel(model="demo-model", openai_client=client),
        tools=[sdk_write_file, sdk_run_tests],
        input_guardrails=[_allow],
    )
    return str(Runner.run_sync(agent, TASK).final_output)


#: :func:`sdk_clock_run` recorded deterministic and replayed (argv: the store, the tools' folder);
#: prints the session's path and the replay's verdict.
SDK_CLOCK = """
import sys
from pathlib import Path

import forkpoint
from forkpoint.demo.server import ModelServer
from forkpoint.replay import summary_line
from tests.integrations import test_frameworks as t

t.WORKDIR["path"] = Path(sys.argv[2])
with ModelServer(turns=2) as server:
    with forkpoint.record(store=sys.argv[1], deterministic=[t.__name__]) as rec:
        live = t.sdk_clock_run(server.base_url)
    with forkpoint.replay(rec.session_path) as rp:
        assert t.sdk_clock_run(server.base_url) == live
print(rec.session_path)
print(summary_line(rp.report()))
"""


def _in_own_interpreter(script: str, *args: str) -> tuple[str, str]:
    """Run ``script`` (which records and replays an Agents SDK run, then prints the session's path
    and the replay's verdict) in an interpreter of its own: asyncio numbers every thread's tasks
    from one counter, and a thread an earlier test left running a loop in this one (the full
    suite's worker) moved the names between the recording and the replay ("not certain", rightly).
    Returns the session's path and the verdict."""
    here = Path(__file__).resolve().parents[2]
    ran = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True, text=True, timeout=300, cwd=here, env={**os.environ, "PYTHONPATH": str(here)},
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    session_path, said = ran.stdout.strip().splitlines()[-2:]
    return session_path, said


def test_clock_reads_of_an_agents_sdk_run_replay_certain_and_a_langgraph_fan_outs_not(tmp_path: Path) -> None:
    """Under ``deterministic``, an Agents SDK run's dynamic instructions read the time in a task
    its ``gather_with_cancel`` makes beside the input guardrails' (a gather awaited through
    ``asyncio.wait``), once a turn, before the task first waits, and before its sibling starts.
    Replayed, every read got its own answer, but the verdict said "replay ok, but not certain": no
    task name was written for them. LangGraph's parallel nodes each read it in a task their own
    node's task makes (``asyncio.wait`` inside the graph's ``astream`` awaits the nodes' tasks):
    when the first reads, the other nodes' tasks wait on tasks they made that have not started,
    which is also what two branches that each woke and made a task, in an order timing chose,
    leave: their names tell nothing, and the verdict stays "not certain"."""
    from langgraph.graph import END

    from forkpoint.replay import summary_line

    session_path, said = _in_own_interpreter(SDK_CLOCK, str(tmp_path / "sdk-store"), str(tmp_path))
    reads = forkpoint.Session.load(session_path).by_type("value")
    assert len(reads) == 3 and all(r.get("caller") for r in reads), reads
    assert said.startswith("replay ok: "), said

    class Stamps(MessagesState):
        stamps: Annotated[list[str], lambda a, b: a + b]

    def node(name: str) -> Callable[[Stamps], Any]:
        async def read(state: Stamps) -> dict[str, list[str]]:
            stamp = datetime.datetime.now().isoformat()
            await asyncio.sleep(0.01)  # (then waits, as a model call would)
            return {"stamps": [f"{name} {stamp}"]}

        return read

    def graph_run(base_url: str) -> str:
        graph = StateGraph(Stamps)
        for name in ("a", "b", "c"):
            graph.add_node(name, node(name))
            graph.add_edge(START, name)
            graph.add_edge(name, END)
        return str(asyncio.run(graph.compile().ainvoke({"messages": [], "stamps": []}))["stamps"])

    with ModelServer(turns=2) as server:
        with forkpoint.record(store=tmp_path / "store", deterministic=[__name__]) as rec:
            live = graph_run(server.base_url)
        with forkpoint.replay(rec.session_path) as rp:
            assert graph_run(server.base_url) == live
    assert len(forkpoint.Session.load(rec.session_path).by_type("value")) == 3
    assert summary_line(rp.report()).startswith("replay ok, but not certain: 3 identical")


@function_tool(name_override="roll")
def sdk_roll(sides: int) -> int:
    """Roll a die."""
    return next_roll()


def sdk_rolls_run(base_url: str) -> str:
    """An Agents SDK run whose model asks for the same roll in two turns, one after the other."""
    client = AsyncOpenAI(base_url=base_url, api_key=API_KEY, max_retries=0)
    agent = SdkAgent(
        name="roller",
        instructions="Roll the die when asked.",
        model=OpenAIChatCompletionsModel(model="demo-model", openai_client=client),
        tools=[sdk_roll],
    )
    return str(Runner.run_sync(agent, "Roll a die, then roll it again.").final_output)


#: :func:`sdk_rolls_run` recorded and replayed (argv: the store); prints the session's path and
#: the replay's verdict.
SDK_ROLLS = """
import sys

import forkpoint
from forkpoint.replay import summary_line
from tests.integrations import test_frameworks as t
from tests.modelserver import LocalServer

roll = [("roll", {"sides": 6})]
with LocalServer(chat_script=[roll, roll, "Rolled twice."]) as server:
    with forkpoint.record(store=sys.argv[1]) as rec:
        live = t.sdk_rolls_run(server.openai_base_url)
    with forkpoint.replay(rec.session_path) as rp:
        assert t.sdk_rolls_run(server.openai_base_url) == live
print(rec.session_path)
print(summary_line(rp.report()))
"""


@pytest.mark.slow
def test_an_agents_sdk_tool_asked_for_in_turn_after_turn_replays_certain(tmp_path: Path) -> None:
    """The Agents SDK runs each function tool in a task of its own, which the task that made it
    awaits through ``asyncio.shield``: a wait forkpoint took for one that anything may end, so
    the tool's task was never named, and a run asking for the same roll twice, turn after turn
    (answered 0, then 1), replayed "ok, but not certain" (served to several asyncio tasks) though
    nothing ran beside it."""
    session_path, said = _in_own_interpreter(SDK_ROLLS, str(tmp_path / "store"))
    rolls = forkpoint.Session.load(session_path).by_type("tool_call")
    assert [r["result"] for r in rolls] == [0, 1] and all(r.get("caller") for r in rolls), rolls
    assert said.startswith("replay ok: "), said


@langchain_tool("roll")
def lg_roll(sides: int) -> int:
    """Roll a die."""
    return next_roll()


@langchain_tool("roll")
@forkpoint.tool(name="roll")
def lg_self_recorded_roll(sides: int) -> int:
    """Roll a die (a function that records itself, made a LangChain tool)."""
    return next_roll()


@langchain_tool("dice")
@forkpoint.tool
def lg_self_recorded_dice(sides: int) -> int:
    """Roll a die (recorded under its function's name, asked for by LangChain's)."""
    return next_roll()


def test_a_langchain_tool_whose_function_records_itself_under_another_name_is_not_said_unrecorded(
    tmp_path: Path, make_server: Callable[..., Any], capsys: pytest.CaptureFixture[str]
) -> None:
    """A LangChain tool named ``dice`` whose function is a ``@forkpoint.tool`` (recorded as
    ``lg_self_recorded_dice``): the recording warned that the model asked for a tool never recorded,
    ``dice``, and told the user to put ``@forkpoint.tool`` on the function, which they had; the replay
    then said "ok, but incomplete"."""
    from forkpoint.replay import summary_line

    srv = make_server(chat_script=[[("dice", {"sides": 6})], "Rolled."])

    def run() -> list[Any]:
        graph = tool_graph(chat_node(srv.openai_base_url, lg_self_recorded_dice), [lg_self_recorded_dice])
        return [m.content for m in graph.compile().invoke({"messages": [("user", "Roll.")]})["messages"]]

    with forkpoint.record(store=tmp_path / "store") as rec:
        live = run()
    said = capsys.readouterr().err
    assert "never recorded" not in said, said
    end = forkpoint.Session.load(rec.session_path).end()
    assert end is not None and not end.get("unrecorded_tools"), end
    assert [e["tool"] for e in forkpoint.Session.load(rec.session_path).by_type("tool_call")] == [
        "lg_self_recorded_dice"
    ]
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    assert summary_line(rp.report()).startswith("replay ok: "), summary_line(rp.report())


def test_a_langgraph_tool_asked_for_step_after_step_replays_certain(
    tmp_path: Path, make_server: Callable[..., Any]
) -> None:
    """LangGraph's ``ToolNode`` runs a step's tool calls in a thread pool it makes for that step
    (``invoke``): a run asking for the same roll twice, step after step (answered differently),
    replayed "ok, but not certain" (served to several threads), though the second thread was
    started after the first call had ended, when recorded and when replayed."""
    roll = [("roll", {"sides": 6})]
    srv = make_server(chat_script=[roll, roll, "Rolled twice."])

    def run() -> list[Any]:
        graph = tool_graph(chat_node(srv.openai_base_url, lg_roll), [lg_roll])
        return [
            m.content for m in graph.compile().invoke({"messages": [("user", "Roll twice.")]})["messages"]
        ]

    from forkpoint.replay import summary_line

    with forkpoint.record(store=tmp_path / "store") as rec:
        live = run()
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    rolls = forkpoint.Session.load(rec.session_path).by_type("tool_call")
    assert len({r["result"] for r in rolls}) == len(rolls) == 2, rolls
    assert summary_line(rp.report()).startswith("replay ok: "), summary_line(rp.report())


#: Set when the tool call for Oslo has ended and been recorded: Paris's call waits for it.
OSLO_DONE = threading.Event()


@langchain_tool("city_time")
def lg_city_time(city: str) -> str:
    """The time in a city."""
    if city == "Paris":
        assert OSLO_DONE.wait(30), "Oslo's call never ended"
    return f"noon in {city}"


def test_tool_k_in_a_what_if_counts_a_langgraph_steps_parallel_calls_as_show_lists_them(
    tmp_path: Path, make_server: Callable[..., Any]
) -> None:
    """``tool:NAME#K`` is the K-th call as ``forkpoint show`` lists the calls, in the order they
    started (docs/overrides.md). A ``ToolNode`` asked for Paris, then Oslo, in one answer, and Oslo
    finished first: ``tool:city_time#2``, the Oslo call in ``show``, replaced Paris's result."""
    from langchain_core.callbacks import BaseCallbackHandler

    class OsloDone(BaseCallbackHandler):
        def on_tool_end(self, output: Any, **kwargs: Any) -> None:
            if "Oslo" in str(getattr(output, "content", output)):
                OSLO_DONE.set()

    srv = make_server(
        chat_script=[[("city_time", {"city": "Paris"}), ("city_time", {"city": "Oslo"})], "Done."]
    )

    def run() -> list[Any]:
        graph = tool_graph(chat_node(srv.openai_base_url, lg_city_time), [lg_city_time])
        out = graph.compile().invoke({"messages": [("user", "Times?")]}, {"callbacks": [OsloDone()]})
        return [m.content for m in out["messages"]]

    OSLO_DONE.clear()
    with forkpoint.record(store=tmp_path / "store") as rec:
        run()
    calls = forkpoint.Session.load(rec.session_path).by_type("tool_call")
    assert [c["args"]["city"] for c in calls] == ["Oslo", "Paris"], calls  # (in the order they ended)
    spec = 'tool:city_time#2.result="midnight"'
    with forkpoint.replay(rec.session_path, overrides=[spec], on_divergence="live", record_child=False):
        got = run()
    assert got[2:4] == ["noon in Paris", "midnight"], got


@langchain_tool("approve")
def lg_approve(action: str) -> str:
    """Ask a human to approve an action."""
    from langgraph.types import interrupt

    return f"{action}: {interrupt({'question': f'allow {action}?'})}"


def test_a_langgraph_tool_that_interrupts_for_a_human_replays_its_interrupt(
    tmp_path: Path, make_server: Callable[..., Any]
) -> None:
    """A tool that calls LangGraph's ``interrupt()`` (human in the loop) raises ``GraphInterrupt``
    holding its ``Interrupt`` objects: on replay they were strings (the exception rebuilt from its
    message), and the program reading the pending interrupt's value failed."""
    from langgraph.checkpoint.memory import InMemorySaver

    srv = make_server(chat_script=[[("approve", {"action": "deploy"})], "Deployed."])

    def run() -> list[Any]:
        graph = tool_graph(chat_node(srv.openai_base_url, lg_approve), [lg_approve])
        app = graph.compile(checkpointer=InMemorySaver())
        config: Any = {"configurable": {"thread_id": "t1"}}
        app.invoke({"messages": [("user", "Deploy.")]}, config)
        asked = [i.value for task in app.get_state(config).tasks for i in task.interrupts]
        out = app.invoke(Command(resume="yes"), config)
        return [asked, [m.content for m in out["messages"]]]

    with forkpoint.record(store=tmp_path / "store") as rec:
        live = run()
    assert live[0] == [{"question": "allow deploy?"}] and live[1][-2:] == ["deploy: yes", "Deployed."]
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    assert rp.report()["reproduced"], rp.report()


@pytest.mark.parametrize("roll", [lg_roll, lg_self_recorded_roll], ids=["langchain", "forkpoint-tool"])
def test_concurrent_langgraph_runs_asking_the_same_tool_each_get_their_own_answer_on_replay(
    tmp_path: Path, server: Any, roll: BaseTool
) -> None:
    """Two LangGraph runs in two threads (two users of one service) asked for the same roll,
    answered differently (run a first: 0, then run b: 1). Replayed, b asked first and got a's
    answer, as identical calls are served in the order they were recorded: the model's id for each
    call (``tool_call_id``, served back with its recorded answer) was not in what chose the
    recorded call, so the runs could not be told apart. So too for a ``@forkpoint.tool`` function
    made a LangChain tool, which records itself: LangChain's id is handed to its record."""
    import threading

    server.route("/v1/chat/completions", roll_then_say)

    def run(first: str) -> dict[str, Any]:
        turns = {"a": threading.Event(), "b": threading.Event()}
        got: dict[str, Any] = {}

        def user(name: str, then: str) -> None:
            model = ChatOpenAI(model="m", base_url=server.openai_base_url, api_key=API_KEY, max_retries=0)

            def call_model(state: MessagesState) -> dict[str, Any]:
                if len(state["messages"]) == 1:
                    turns[name].wait(30)  # (this run asks for its roll at its turn)
                else:
                    turns[then].set()  # (its roll is done: the other's turn)
                return {"messages": [model.bind_tools([roll]).invoke(state["messages"])]}

            try:
                got[name] = (
                    tool_graph(call_model, [roll])
                    .compile()
                    .invoke({"messages": [("user", name)]})["messages"][-1]
                    .content
                )
            except Exception as exc:
                got[name] = exc
                turns[then].set()

        workers = [threading.Thread(target=user, args=(n, "b" if n == "a" else "a")) for n in "ab"]
        for w in workers:
            w.start()
        turns[first].set()
        for w in workers:
            w.join(60)
        return got

    from forkpoint.replay import summary_line

    with forkpoint.record(store=tmp_path / "store") as rec:
        live = run(first="a")
    rolls = forkpoint.Session.load(rec.session_path).by_type("tool_call")
    assert asked_a_then_b(live) and len({r["result"] for r in rolls}) == 2, rolls
    assert all(r.get("call_id") for r in rolls), rolls
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        replayed = run(first="b")
    assert replayed == live, replayed
    assert replayed_ok(rp.report()), summary_line(rp.report())


def test_concurrent_agents_sdk_runs_asking_the_same_tool_each_get_their_own_answer_on_replay(
    tmp_path: Path, server: Any
) -> None:
    """Two Agents SDK runs gathered on one loop asked for the same roll, answered differently (run
    a first: 0, then run b: 1); replayed, b asked first and got a's answer. The model's id for
    each call (``ToolContext.tool_call_id``) now chooses the recorded call."""
    from forkpoint.replay import summary_line

    server.route("/v1/chat/completions", roll_then_say)
    client = AsyncOpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0)
    roller = SdkAgent(
        name="roller",
        model=OpenAIChatCompletionsModel(model="m", openai_client=client),
        tools=[sdk_roll],
    )

    class Turns(agents.RunHooks[Any]):  # (each run asks for its roll at its turn)
        def __init__(self, mine: asyncio.Event, then: asyncio.Event) -> None:
            self.mine, self.then = mine, then

        async def on_tool_start(self, context: Any, agent: Any, tool: Any) -> None:
            await self.mine.wait()

        async def on_tool_end(self, context: Any, agent: Any, tool: Any, result: Any) -> None:
            self.then.set()

    async def runs(first: str) -> dict[str, Any]:
        turns = {"a": asyncio.Event(), "b": asyncio.Event()}
        turns[first].set()
        done = await asyncio.gather(
            *(Runner.run(roller, n, hooks=Turns(turns[n], turns["b" if n == "a" else "a"])) for n in "ab")
        )
        return {n: r.final_output for n, r in zip("ab", done, strict=True)}

    with forkpoint.record(store=tmp_path / "store") as rec:
        live = asyncio.run(runs("a"))
    rolls = forkpoint.Session.load(rec.session_path).by_type("tool_call")
    assert asked_a_then_b(live) and len({r["result"] for r in rolls}) == 2, rolls
    assert all(r.get("call_id") for r in rolls), rolls
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(runs("b")) == live
    assert replayed_ok(rp.report()), summary_line(rp.report())


@pytest.mark.parametrize("self_recorded", [False, True], ids=["pydantic-ai", "forkpoint-tool"])
def test_concurrent_pydantic_ai_runs_asking_the_same_tool_each_get_their_own_answer_on_replay(
    tmp_path: Path, server: Any, self_recorded: bool
) -> None:
    """Two pydantic-ai runs gathered on one loop, stepped through with ``Agent.iter``, asked for the
    same roll, answered differently (run a first); replayed, b asked first and got a's answer. The
    model's id for each call (``RunContext.tool_call_id``) now chooses the recorded call, and is
    handed to a ``@forkpoint.tool`` function given as the tool, which records itself."""
    from pydantic_ai import CallToolsNode

    from forkpoint.replay import summary_line

    server.route("/v1/chat/completions", roll_then_say)
    roller = Agent(
        OpenAIChatModel("m", provider=OpenAIProvider(base_url=server.openai_base_url, api_key=API_KEY))
    )

    def roll(sides: int) -> int:
        """Roll a die."""
        return next_roll()

    roller.tool_plain(forkpoint.tool(roll) if self_recorded else roll)

    async def runs(first: str) -> dict[str, Any]:
        turns = {"a": asyncio.Event(), "b": asyncio.Event()}
        turns[first].set()

        async def run(name: str, then: str) -> Any:
            async with roller.iter(name) as steps:
                async for step in steps:
                    if isinstance(step, CallToolsNode) and step.model_response.tool_calls:
                        await turns[name].wait()  # (this run calls its tools at its turn)
                    elif len(steps.ctx.state.message_history) > 2:
                        turns[then].set()
            assert steps.result is not None
            return steps.result.output

        return dict(zip("ab", await asyncio.gather(run("a", "b"), run("b", "a")), strict=True))

    with forkpoint.record(store=tmp_path / "store") as rec:
        live = asyncio.run(runs("a"))
    rolls = forkpoint.Session.load(rec.session_path).by_type("tool_call")
    assert asked_a_then_b(live) and len({r["result"] for r in rolls}) == 2, rolls
    assert all(r.get("call_id") for r in rolls), rolls
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(runs("b")) == live
    assert replayed_ok(rp.report()), summary_line(rp.report())


def test_a_tool_s_body_awaiting_asyncio_to_thread_is_not_said_to_leave_an_order_unheld(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pydantic-ai runs each tool call of a turn in a task and takes them by ``asyncio.wait``; an
    async tool that awaits ``asyncio.to_thread`` for its blocking work (as its docs write it) made
    the recording say that the futures asyncio made of a thread pool's were taken as they finished
    and that the replay's verdict would say so. The tool's body is not run on replay: its task ends
    as its served call is released, in the order the calls finished live; the replay said plain
    "replay ok" after the warning."""
    from forkpoint.replay import summary_line

    agent = Agent()

    def blocking(name: str, delay: float) -> str:
        time.sleep(delay)
        return f"{name} done"

    @agent.tool_plain
    async def slow(x: int) -> str:
        """A slow lookup."""
        return await asyncio.to_thread(blocking, "slow", 0.3)

    @agent.tool_plain
    async def fast(x: int) -> str:
        """A fast lookup."""
        return await asyncio.to_thread(blocking, "fast", 0.01)

    script: Any = [[("slow", {"x": 1}), ("fast", {"x": 2})], "done"]
    with LocalServer(chat_script=script) as srv:
        model = OpenAIChatModel("m", provider=OpenAIProvider(base_url=srv.openai_base_url, api_key=API_KEY))
        with forkpoint.record(store=tmp_path) as rec:
            assert agent.run_sync("Go.", model=model).output == "done"
        said = " ".join(capsys.readouterr().err.split())
        assert "thread pool" not in said, said
        notes = forkpoint.Session.load(rec.session_path).by_type("note")
        assert not [n for n in notes if "thread_pools" in (n.get("data") or {})], notes
        with forkpoint.replay(rec.session_path, record_child=False) as rep:
            assert agent.run_sync("Go.", model=model).output == "done"
    assert summary_line(rep.report()).startswith("replay ok: "), summary_line(rep.report())


def test_agent_runs_one_after_the_other_reading_the_time_replay_as_certain(
    tmp_path: Path, server: Any
) -> None:
    """Two runs of one agent in turn (the Agents SDK's ``Runner.run`` then ``Runner.run_streamed``;
    two awaited pydantic-ai ``Agent.run``), each asking a tool for the time, with the id the model
    gives a conversation's first call (``call_1`` each time): the identical calls, answered
    differently, replayed as "ok, but not certain" (served to several asyncio tasks), though each
    run's task was made after the other run's call had ended."""
    import datetime

    from forkpoint.replay import summary_line
    from tests.modelserver import Stream, chat_chunks, chat_completion, json_reply

    def time_then_say(request: dict[str, Any]) -> Any:
        body = request["body"]
        last = body["messages"][-1]
        if last["role"] == "tool":
            answer = chat_completion("chatcmpl-2", body["model"], text=f"it is {last['content']}")
        else:
            answer = chat_completion(
                "chatcmpl-1", body["model"], tool_calls=[("now", {})], call_ids=["call_1"]
            )
        return Stream(chat_chunks(answer)) if body.get("stream") else json_reply(answer)

    server.route("/v1/chat/completions", time_then_say)

    async def now() -> str:
        """The time now."""
        return datetime.datetime.now().isoformat()

    client = AsyncOpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0)
    sdk_agent = SdkAgent(
        name="clock",
        model=OpenAIChatCompletionsModel(model="m", openai_client=client),
        tools=[function_tool(now)],
    )
    pa = Agent(
        OpenAIChatModel("m", provider=OpenAIProvider(base_url=server.openai_base_url, api_key=API_KEY))
    )
    pa.tool_plain(now)

    async def agents_sdk() -> list[str]:
        first = await Runner.run(sdk_agent, "what time is it?")
        second = Runner.run_streamed(sdk_agent, "what time is it?")
        async for _ in second.stream_events():
            pass
        return [str(first.final_output), str(second.final_output)]

    async def pydantic_ai() -> list[str]:
        return [str((await pa.run("what time is it?")).output) for _ in range(2)]

    for program in (agents_sdk, pydantic_ai):
        with forkpoint.record(store=tmp_path / "store") as rec:
            live = asyncio.run(program())
        times = forkpoint.Session.load(rec.session_path).by_type("tool_call")
        assert len({t["result"] for t in times}) == 2 and {t.get("call_id") for t in times} == {"call_1"}, (
            times
        )
        with forkpoint.replay(rec.session_path) as rp:
            assert asyncio.run(program()) == live
        said = summary_line(rp.report())
        assert rp.report()["ambiguous"] == [] and said.startswith("replay ok: 6/6"), (program, said)
