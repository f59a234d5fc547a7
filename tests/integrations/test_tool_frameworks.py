"""smolagents, the anthropic SDK's tool runner, strands-agents, agno and DSPy, each with its own agent
loop and its own kind of tool, unmodified: recorded against the tests' model server, then replayed
with the server stopped. Every tool body appends to a ledger; the replay must leave it unchanged,
give the same output, and leave no recorded call unused. Each tool call is recorded under the
tool's own name (not under the framework's generic entry point) with the model's arguments.

The model answers from a script (``tests/modelserver.py``): first the tool calls, then the final
text, so a run's path does not depend on chance.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import json
import os
import shutil
import sys
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import forkpoint
from forkpoint.cli import main
from forkpoint.diff import totals
from forkpoint.errors import UsageError
from forkpoint.replay import summary_line
from forkpoint.store import session_dirs
from tests.modelserver import LocalServer, Reply, Request, Stream, chat_chunks, chat_completion, json_reply

API_KEY = "sk-proj-" + "f" * 40
LEDGER: dict[str, Path] = {}
TASK = "What is 2 + 3?"


def ledger(line: str) -> None:
    with open(LEDGER["path"], "a", encoding="utf-8") as f:
        f.write(line + "\n")


@dataclasses.dataclass
class Total:
    """What some tools return, as users write them: the frameworks send the model its ``str()``, so
    a replay must hand them a ``Total`` again (its JSON form would print as another message)."""

    value: int


# --------------------------------------------------------------------------- smolagents


def run_smolagents(url: str) -> str:
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    @tool
    def add(a: int, b: int) -> dict:  # type: ignore[type-arg]
        """Add two integers.

        Args:
            a: The first integer.
            b: The second integer.
        """
        ledger(f"smolagents add {a} {b}")
        return {"total": Total(a + b)}

    model = OpenAIServerModel(
        model_id="m", api_base=url + "/v1", api_key=API_KEY, client_kwargs={"max_retries": 0}
    )
    agent = ToolCallingAgent(tools=[add], model=model, max_steps=3, verbosity_level=0)
    return str(agent.run(TASK))


# --------------------------------------------------------------------------- anthropic tool runner


def run_anthropic(url: str) -> str:
    from anthropic import Anthropic, beta_tool

    @beta_tool
    def add(a: int, b: int) -> str:
        """Add two integers."""
        ledger(f"anthropic add {a} {b}")
        return str(a + b)

    client = Anthropic(base_url=url, api_key=API_KEY, max_retries=0)
    runner = client.beta.messages.tool_runner(
        model="claude-test", max_tokens=64, tools=[add], messages=[{"role": "user", "content": TASK}]
    )
    return "".join(getattr(b, "text", "") for b in runner.until_done().content)


def run_anthropic_async(url: str) -> str:
    from anthropic import AsyncAnthropic, beta_async_tool

    @beta_async_tool
    async def add(a: int, b: int) -> str:
        """Add two integers."""
        ledger(f"anthropic-async add {a} {b}")
        return str(a + b)

    async def main() -> str:
        client = AsyncAnthropic(base_url=url, api_key=API_KEY, max_retries=0)
        runner = client.beta.messages.tool_runner(
            model="claude-test", max_tokens=64, tools=[add], messages=[{"role": "user", "content": TASK}]
        )
        return "".join(getattr(b, "text", "") for b in (await runner.until_done()).content)

    return asyncio.run(main())


# --------------------------------------------------------------------------- strands-agents


def run_strands(url: str) -> str:
    """A sync tool and a streaming one (an async generator: its last item is the result)."""
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    @tool
    def add(a: int, b: int) -> Total:
        """Add two integers."""
        ledger(f"strands add {a} {b}")
        return Total(a + b)

    @tool
    async def count(n: int) -> Any:
        """Count up to n, reporting each number."""
        for i in range(1, n + 1):
            ledger(f"strands count {i}")
            yield f"at {i}"
        yield {"status": "success", "content": [{"text": f"counted to {n}"}]}

    streamed: list[Any] = []

    def callback(**event: Any) -> None:
        if "tool_stream_event" in event:
            streamed.append(event["tool_stream_event"].get("data"))

    model = OpenAIModel(
        client_args={"base_url": url + "/v1", "api_key": API_KEY, "max_retries": 0}, model_id="m"
    )
    agent = Agent(model=model, tools=[add, count], callback_handler=callback)
    out = str(agent("What is 2 + 3? Then count to 2.")).strip()
    results = [c["toolResult"] for m in agent.messages for c in m["content"] if "toolResult" in c]
    return json.dumps([out, streamed, sorted(results, key=lambda r: r["toolUseId"])], default=str)


# --------------------------------------------------------------------------- agno


def run_agno(url: str) -> str:
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat

    def add(a: int, b: int) -> Total:
        """Add two integers."""
        ledger(f"agno add {a} {b}")
        return Total(a + b)

    model = OpenAIChat(id="m", base_url=url + "/v1", api_key=API_KEY, max_retries=0)
    agent = Agent(model=model, tools=[add], telemetry=False)
    return str(agent.run(TASK).content)


# --------------------------------------------------------------------------- DSPy


def dspy_route(request: Request) -> Reply:
    """DSPy's ReAct sends each step as a fresh conversation with the trajectory in the user message
    (no assistant turns to count), so this route reads the trajectory: call ``add``, then finish,
    then the extraction step answers."""
    body = request["body"]
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    if "next_tool_name" not in system:
        text = "[[ ## reasoning ## ]]\n2 + 3 is 5.\n\n[[ ## answer ## ]]\n5\n\n[[ ## completed ## ]]"
    elif "observation_0" not in user:
        text = (
            "[[ ## next_thought ## ]]\nAdd them.\n\n[[ ## next_tool_name ## ]]\nadd\n\n"
            '[[ ## next_tool_args ## ]]\n{"a": 2, "b": 3}\n\n[[ ## completed ## ]]'
        )
    else:
        text = (
            "[[ ## next_thought ## ]]\nDone.\n\n[[ ## next_tool_name ## ]]\nfinish\n\n"
            "[[ ## next_tool_args ## ]]\n{}\n\n[[ ## completed ## ]]"
        )
    return json_reply(chat_completion(f"chatcmpl-{len(user)}", str(body.get("model")), text=text))


def run_dspy(url: str, fail: bool = False, cache: bool = False) -> str:
    """DSPy's ReAct adding 2 and 3 (with ``fail``, its tool raises; with ``cache``, DSPy's cache of
    model answers on)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # litellm fetches prices otherwise
    import dspy

    def add(a: int, b: int) -> int:
        """Add two integers."""
        ledger(f"dspy add {a} {b}")
        if fail:
            raise ValueError(f"cannot add {a} and {b}")
        return a + b

    # DSPy's default engine (lm15) sends requests over its own sockets, which forkpoint does not
    # capture; its litellm engine goes through the openai SDK.
    lm = dspy.LM(
        "openai/m", api_base=url + "/v1", api_key=API_KEY, cache=cache, num_retries=0, engine="litellm"
    )
    react = dspy.ReAct("question -> answer", tools=[add], max_iters=3)
    with dspy.context(lm=lm):
        return str(react(question=TASK).answer)


# --------------------------------------------------------------------------- CrewAI


def run_crewai(url: str) -> str:
    os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    from crewai import LLM, Agent, Crew, Task
    from crewai.tools import tool

    @tool("add")
    def add(a: int, b: int) -> int:
        """Add two integers."""
        ledger(f"crewai add {a} {b}")
        return a + b

    llm = LLM(model="openai/m", base_url=url + "/v1", api_key=API_KEY, max_retries=0)
    agent = Agent(role="calculator", goal="Add numbers", backstory="You add.", tools=[add], llm=llm)
    task = Task(description=TASK, expected_output="The sum.", agent=agent)
    return str(Crew(agents=[agent], tasks=[task]).kickoff())


ADD = [("add", {"a": 2, "b": 3})]
#: framework → (agent, the server's chat script, the route it needs, the tool calls recorded)
FRAMEWORKS: dict[str, tuple[Callable[[str], str], Any, Any, list[tuple[str, dict[str, Any]]]]] = {
    "smolagents": (
        run_smolagents,
        [ADD, [("final_answer", {"answer": "2 + 3 = 5"})]],
        None,
        [("add", {"a": 2, "b": 3}), ("final_answer", {"answer": "2 + 3 = 5"})],
    ),
    "anthropic": (run_anthropic, [ADD, "2 + 3 = 5"], None, ADD),
    "anthropic-async": (run_anthropic_async, [ADD, "2 + 3 = 5"], None, ADD),
    "strands": (run_strands, [[*ADD, ("count", {"n": 2})], "2 + 3 = 5, and I counted to 2."], None, []),
    "agno": (run_agno, [ADD, "2 + 3 = 5"], None, ADD),
    "dspy": (run_dspy, None, dspy_route, [("add", {"a": 2, "b": 3}), ("finish", {})]),
    "crewai": (run_crewai, [ADD, "2 + 3 = 5"], None, ADD),
}
IMPORTS = {
    "smolagents": "smolagents",
    "anthropic": "anthropic.lib.tools",
    "anthropic-async": "anthropic.lib.tools",
    "strands": "strands",
    "agno": "agno.agent",
    "dspy": "dspy",
    "crewai": "crewai",
}


@pytest.fixture
def ledger_file(tmp_path: Path) -> Iterator[Path]:
    LEDGER["path"] = tmp_path / "ledger.log"
    yield LEDGER["path"]
    LEDGER.pop("path", None)


@pytest.mark.slow
@pytest.mark.parametrize("framework", list(FRAMEWORKS))
def test_framework_tools_record_and_replay_offline(framework: str, ledger_file: Path, tmp_path: Path) -> None:
    pytest.importorskip(
        IMPORTS[framework],
        # CrewAI pins openai<3 and mcp<2; the test extra needs openai>=3 (the Agents SDK) and mcp>=2:
        # it cannot be installed beside them, so this suite does not test its integration.
        reason="crewai is not installed: it pins openai<3 and mcp<2, which the test extra cannot take"
        if framework == "crewai"
        else None,
    )
    run, script, route, expected = FRAMEWORKS[framework]
    with LocalServer(chat_script=script) as server:
        if route is not None:
            server.route("/v1/chat/completions", route, method="POST")
        with forkpoint.record(store=tmp_path / "store") as rec:
            live = run(server.url)
    ran = ledger_file.read_text()
    assert ran, "no tool ran while recording"

    with forkpoint.replay(rec.session_path) as rp:
        replayed = run(server.url)
    assert replayed == live
    assert ledger_file.read_text() == ran  # no tool body ran on replay
    report = rp.report()
    assert report["reproduced"], report

    tools = forkpoint.Session.load(rec.session_path).by_type("tool_call")
    if framework == "strands":  # two tools called at once: the order they ended in may vary
        assert sorted((t["tool"], t["args"]) for t in tools) == [
            ("add", {"a": 2, "b": 3}),
            ("count", {"n": 2}),
        ]
        (count,) = [t for t in tools if t["tool"] == "count"]
        assert count["result"][:2] == ["at 1", "at 2"]  # every item of the stream, in order
        assert json.loads(live)[1][:2] == ["at 1", "at 2"]  # the stream reached the agent, live
    else:
        assert [(t["tool"], t["args"]) for t in tools] == expected


#: A CodeAgent's model reads the clock, a uuid and the random generator in the code it writes.
CLOCK_CODE = [
    "Thought: the time.\n<code>\nimport datetime, random, uuid\nfrom time import time\n"
    "print(datetime.datetime.now(), time(), uuid.uuid4(), random.random())\n</code>",
    "Thought: done.\n<code>\nfinal_answer('ok')\n</code>",
]


def test_the_clock_read_by_a_smolagents_code_agent_s_code_is_replayed_under_deterministic(
    tmp_path: Path,
) -> None:
    """The code a ``CodeAgent``'s model writes is the agent's own, but its executor imports the
    modules through ``importlib``, past forkpoint's stand-ins: recorded ``deterministic``, the time
    it printed was read live on replay, and every replay diverged at the next model call, whose
    request holds what it printed, with advice (``--deterministic-module smolagents``) that changed
    nothing. Now the modules that code imports are the stand-ins, and a replay reproduces."""
    pytest.importorskip("smolagents")
    from smolagents import CodeAgent, OpenAIServerModel

    def run(url: str) -> list[str]:
        model = OpenAIServerModel(
            model_id="m", api_base=url + "/v1", api_key=API_KEY, client_kwargs={"max_retries": 0}
        )
        agent = CodeAgent(
            tools=[], model=model, additional_authorized_imports=["uuid"], max_steps=3, verbosity_level=0
        )
        answer = agent.run(TASK)
        return [str(answer), *(str(s.observations) for s in agent.memory.steps if hasattr(s, "observations"))]

    # (this module only: the server, in this process too, reads uuids of its own)
    with (
        LocalServer(chat_script=CLOCK_CODE) as server,
        forkpoint.record(store=tmp_path, deterministic=[__name__]) as rec,
    ):
        live = run(server.url)
    assert live[0] == "ok" and "Execution logs:" in live[1], live
    with forkpoint.replay(rec.session_path) as rp:
        assert run(server.url) == live
    assert summary_line(rp.report()).startswith("replay ok: "), summary_line(rp.report())


@pytest.mark.slow
def test_the_final_answer_of_a_smolagents_run_is_what_it_gave_its_final_answer_tool(
    ledger_file: Path, tmp_path: Path
) -> None:
    """smolagents ends a run by the model calling its ``final_answer`` tool with the answer, after
    no model text: ``forkpoint diff`` said "final answer —" for every smolagents run (and so did
    ``check --models live``'s A/B rows, read from the same ``totals``), and its exported trace's
    root span had no ``output.value``."""
    pytest.importorskip("smolagents")
    sessions = []
    for answer in ("2 + 3 = 5", "five"):
        with LocalServer(chat_script=[ADD, [("final_answer", {"answer": answer})]]) as server:
            with forkpoint.record(store=tmp_path / "store") as rec:
                assert run_smolagents(server.url) == answer
        sessions.append(rec.session_path)
    assert [totals(forkpoint.Session.load(p))["final_answer"] for p in sessions] == ["2 + 3 = 5", "five"]
    res = CliRunner().invoke(main, ["diff", *map(str, sessions)])
    row = next((line for line in res.output.splitlines() if "final answer" in line), "")
    assert row.split() == ["final", "answer", "2", "+", "3", "=", "5", "five"], res.output
    # (the trace's root span, the answer out: what Phoenix's trace list shows)
    res = CliRunner().invoke(
        main, ["export", str(sessions[1]), "--content", "--file", str(tmp_path / "otel.json")]
    )
    assert res.exit_code == 0, res.output
    spans = [
        span
        for line in (tmp_path / "otel.json").read_text().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for span in ss["spans"]
    ]
    (root,) = [span for span in spans if not span.get("parentSpanId")]
    out = {a["key"]: a["value"] for a in root["attributes"]}.get("output.value")
    assert out == {"stringValue": "five"}, root


def managed_route(request: Request) -> Reply:
    """The manager (offered ``weather``, the managed agent) asks it for the weather, then answers;
    the managed agent calls ``add``, then answers: each by whether its conversation has a tool call."""
    body = request["body"]
    offered = [t["function"]["name"] for t in body.get("tools") or []]
    called = "Calling tools:" in json.dumps(body["messages"])
    if "weather" in offered:
        step = [("final_answer", {"answer": "sunny"})] if called else [("weather", {"task": "Paris?"})]
    else:
        step = [("final_answer", {"answer": "5"})] if called else ADD
    return json_reply(chat_completion(f"chatcmpl-{called}", str(body.get("model")), tool_calls=step))


@pytest.mark.slow
def test_a_smolagents_managed_agent_is_not_said_to_be_an_unrecorded_tool(
    ledger_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A managed agent is run by the model asking for it by name, as a tool: its own model and tool
    calls are recorded one by one, and it has no body to record. The recording said the model
    asked for a tool that was never recorded and told the user to name it, and every replay of it,
    every call served, was "ok, but incomplete"."""
    pytest.importorskip("smolagents")
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first integer.
            b: The second integer.
        """
        ledger(f"add {a} {b}")
        return a + b

    def run(url: str) -> str:
        model = OpenAIServerModel(model_id="m", api_base=url + "/v1", api_key=API_KEY)
        helper = ToolCallingAgent(
            tools=[add], model=model, name="weather", description="Finds the weather.", verbosity_level=0
        )
        manager = ToolCallingAgent(tools=[], model=model, managed_agents=[helper], verbosity_level=0)
        return str(manager.run("Weather in Paris?"))

    with LocalServer() as server:
        server.route("/v1/chat/completions", managed_route, method="POST")
        with forkpoint.record(store=tmp_path / "store") as rec:
            live = run(server.url)
    assert live == "sunny" and ledger_file.read_text() == "add 2 3\n"
    assert "never recorded" not in capsys.readouterr().err
    end = forkpoint.Session.load(rec.session_path).end()
    assert end is not None and not end.get("unrecorded_tools"), end
    with forkpoint.replay(rec.session_path) as rp:
        assert run(server.url) == live
    assert summary_line(rp.report()).startswith("replay ok: "), summary_line(rp.report())


def strands_own_route(request: Request) -> Stream:
    """The orchestrator (offered ``helper``, an agent as a tool) asks it, then answers through the
    structured output tool ``Sum``; the helper calls ``add``, then answers: each by how many tool
    results its conversation holds (strands streams every answer)."""
    body = request["body"]
    results = sum(1 for m in body["messages"] if m.get("role") == "tool")
    offered = [t["function"]["name"] for t in body.get("tools") or []]
    steps: list[Any] = (
        [[("helper", {"input": TASK})], [("Sum", {"total": 5})]] if "helper" in offered else [ADD]
    )
    if results < len(steps):
        answer = chat_completion("chatcmpl-1", "m", tool_calls=steps[results], call_ids=[f"call_{results}"])
    else:
        answer = chat_completion("chatcmpl-1", "m", text="5")
    return Stream(chat_chunks(answer))


@pytest.mark.slow
def test_strands_own_tools_are_not_said_to_be_unrecorded(
    ledger_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """strands' own tools have no function to record: an agent as a tool (an ``Agent`` in
    ``tools=``), whose model and tool calls are recorded one by one, and the structured output
    tool (``structured_output_model=``, named after the output model), which only validates the
    model's answer. The recording said the model asked for tools that were never recorded and told
    the user to name them, and every replay of it, every call served, was "ok, but incomplete"."""
    pytest.importorskip("strands")
    from pydantic import BaseModel
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    class Sum(BaseModel):
        """The answer."""

        total: int

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        ledger(f"add {a} {b}")
        return a + b

    def run(url: str) -> Any:
        model = OpenAIModel(client_args={"base_url": url + "/v1", "api_key": API_KEY}, model_id="m")
        helper = Agent(name="helper", description="Adds.", model=model, tools=[add], callback_handler=None)
        agent = Agent(model=model, tools=[helper], callback_handler=None)
        return agent(TASK, structured_output_model=Sum).structured_output

    with LocalServer() as server:
        server.route("/v1/chat/completions", strands_own_route, method="POST")
        with forkpoint.record(store=tmp_path / "store") as rec:
            live = run(server.url)
    assert live == Sum(total=5) and ledger_file.read_text() == "add 2 3\n"
    assert "never recorded" not in capsys.readouterr().err
    end = forkpoint.Session.load(rec.session_path).end()
    assert end is not None and not end.get("unrecorded_tools"), end
    with forkpoint.replay(rec.session_path) as rp:
        assert run(server.url) == live
    assert summary_line(rp.report()).startswith("replay ok: "), summary_line(rp.report())


class VaultLocked(Exception):
    """A tool's own exception."""


class Unprintable(VaultLocked):
    """A tool's exception whose repr fails (agno's wrapper logs the exception's repr)."""

    def __repr__(self) -> str:
        raise RuntimeError("no repr for this one")


def vault_route(request: Request) -> Reply:
    """``open_vault`` first, then text once the conversation holds its (failed) result."""
    if any(m.get("role") == "tool" for m in request["body"]["messages"]):
        return json_reply(chat_completion("chatcmpl-1", "m", text="It is locked."))
    return json_reply(chat_completion("chatcmpl-1", "m", tool_calls=[("open_vault", {"name": "main"})]))


def run_agno_vault(url: str, kind: str, tracebacks: bool) -> tuple[list[str], str]:
    """An agno agent whose ``@tool`` raises, sync or async: what agno logged (its lines, with their
    level and the tracebacks it logs, with ``tracebacks`` more of them), and what the model was sent."""
    import logging

    from agno.agent import Agent
    from agno.models.openai import OpenAIChat
    from agno.tools import Toolkit, tool
    from agno.utils import log

    tools: list[Any]
    if kind == "sync":

        @tool
        def open_vault(name: str) -> str:
            """Open a vault."""
            raise VaultLocked(f"vault {name} is locked")

        tools = [open_vault]
    elif kind == "async":

        @tool
        async def open_vault(name: str) -> str:
            """Open a vault."""
            raise VaultLocked(f"vault {name} is locked")

        tools = [open_vault]
    elif kind == "unprintable":

        @tool
        def open_vault(name: str) -> str:
            """Open a vault."""
            raise Unprintable(f"vault {name} is locked")

        tools = [open_vault]
    elif kind == "nested":  # a tool that calls another @tool's entry

        @tool
        def unlock(name: str) -> str:
            """Unlock a vault."""
            raise VaultLocked(f"vault {name} is locked")

        @tool
        def open_vault(name: str) -> str:
            """Open a vault."""
            return str(unlock.entrypoint(name=name))  # type: ignore[misc]

        tools = [open_vault]
    else:  # a toolkit's @tool method, which agno binds to its object

        class Vaults(Toolkit):
            def __init__(self) -> None:
                super().__init__(name="vaults", tools=[self.open_vault])

            @tool
            def open_vault(self, name: str) -> str:
                """Open a vault."""
                raise VaultLocked(f"vault {name} is locked")

        tools = [Vaults()]

    lines: list[str] = []
    handler = logging.Handler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.emit = lambda record: lines.append(handler.format(record))  # type: ignore[method-assign]
    log.logger.addHandler(handler)
    log.set_log_tracebacks(tracebacks)
    try:
        model = OpenAIChat(id="m", base_url=url + "/v1", api_key=API_KEY, max_retries=0)
        agent = Agent(model=model, tools=tools, telemetry=False)
        out = asyncio.run(agent.arun(TASK)) if kind == "async" else agent.run(TASK)
    finally:
        log.logger.removeHandler(handler)
        log.set_log_tracebacks(False)
    sent = [str(m.content) for m in out.messages or [] if m.role == "tool"]
    return lines, " | ".join(sent)


@pytest.mark.parametrize("tracebacks", [False, True], ids=["", "tracebacks"])
@pytest.mark.parametrize("kind", ["sync", "async", "toolkit"])
def test_an_agno_tool_that_raises_logs_on_replay_as_it_did_live(
    tmp_path: Path, kind: str, tracebacks: bool
) -> None:
    """agno's ``@tool`` wraps the function in a wrapper that logs its exception ("Error in tool
    'open_vault': VaultLocked(...)") and raises it on, under pydantic's ``validate_call``; forkpoint
    records that whole entry point, so a replay raised the recorded exception past agno's wrapper:
    the line the live run logged was missing, and the replay said "replay ok". (With agno's
    tracebacks on, the line logs the tool's traceback, which no frame of forkpoint's may join.) A
    toolkit's ``@tool`` method is that entry point bound to its object, by a function of agno's."""
    pytest.importorskip("agno")
    with LocalServer() as server:
        server.route("/v1/chat/completions", vault_route, method="POST")
        with forkpoint.record(store=tmp_path) as rec:
            live = run_agno_vault(server.url, kind, tracebacks)
    assert any("Error in" in line and "VaultLocked('vault main is locked')" in line for line in live[0]), live
    with forkpoint.replay(rec.session_path) as rp:
        assert run_agno_vault(server.url, kind, tracebacks) == live
    assert summary_line(rp.report()).startswith("replay ok: "), summary_line(rp.report())


@pytest.mark.parametrize("kind", ["unprintable", "nested"])
def test_an_agno_tool_wrapper_logs_on_replay_only_what_it_logged_live(tmp_path: Path, kind: str) -> None:
    """agno's wrapper is run again over an exception the tool's function raised, not over one its
    own handler raised: the repr of the tool's exception failed, live it logged nothing, and a
    replay logged the repr's error as the tool's. A tool that calls another ``@tool``'s entry has
    that one's wrapper below its own: the outer one is run again, over the whole traceback below
    it, as live (the inner one's line, logged inside what is recorded, is not logged again)."""
    pytest.importorskip("agno")
    with LocalServer() as server:
        server.route("/v1/chat/completions", vault_route, method="POST")
        with forkpoint.record(store=tmp_path) as rec:
            live = run_agno_vault(server.url, kind, tracebacks=True)
    with forkpoint.replay(rec.session_path) as rp:
        again = run_agno_vault(server.url, kind, tracebacks=True)
    if kind == "unprintable":
        assert not any(line.startswith("ERROR Error in") for line in live[0]) and again == live, (live, again)
    else:
        assert live[0][0].startswith("ERROR Error in tool 'unlock'"), live
        assert again == (live[0][1:], live[1]), (live, again)
    assert summary_line(rp.report()).startswith("replay ok: "), summary_line(rp.report())


def agno_team_route(request: Request) -> Reply:
    """The team's leader hands the task to its member ``adder``, which calls ``add``; each answers
    with text once its conversation holds a tool result."""
    body = request["body"]
    offered = [t["function"]["name"] for t in body.get("tools") or []]
    if any(m.get("role") == "tool" for m in body["messages"]):
        return json_reply(chat_completion("chatcmpl-1", "m", text="5"))
    delegate = ("delegate_task_to_member", {"member_id": "adder", "task": TASK})
    step = [delegate] if "delegate_task_to_member" in offered else ADD
    return json_reply(chat_completion("chatcmpl-1", "m", tool_calls=step, call_ids=["call_1"]))


def run_agno_team(url: str) -> str:
    """A team whose leader hands the task to its member ``adder`` (``agno_team_route``)."""
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat
    from agno.team import Team

    def add(a: int, b: int) -> Total:
        """Add two integers."""
        ledger(f"add {a} {b}")
        return Total(a + b)

    model = OpenAIChat(id="m", base_url=url + "/v1", api_key=API_KEY, max_retries=0)
    member = Agent(name="adder", id="adder", role="Adds", model=model, tools=[add], telemetry=False)
    return str(Team(members=[member], model=model, telemetry=False).run(TASK).content)


def record_agno_team(store: Path) -> tuple[forkpoint.Session, str]:
    """The team's run recorded in ``store`` (its session, and the stopped server's URL)."""
    pytest.importorskip("agno")
    with LocalServer() as server:
        server.route("/v1/chat/completions", agno_team_route, method="POST")
        with forkpoint.record(store=store) as rec:
            assert run_agno_team(server.url) == "5"
    assert LEDGER["path"].read_text() == "add 2 3\n"
    return forkpoint.Session.load(rec.session_path), server.url


#: What if the member's ``add`` had returned 6?
ADD_6 = 'tool:add.result={"$type": "tests.integrations.test_tool_frameworks:Total", "kind": "dataclass", "value": {"value": 6}}'


def refused_inside(said: str, session: forkpoint.Session) -> None:
    """``said`` refuses ``ADD_6`` as made inside the leader's ``delegate_task_to_member``."""
    delegate, inner = (
        next(e for e in session.by_type("tool_call") if e["tool"] == n)
        for n in ("delegate_task_to_member", "add")
    )
    said = " ".join(said.split())
    assert (
        f"names event seq {inner['seq']}, a tool call made inside tool call delegate_task_to_member (seq {delegate['seq']})"
        in said
    ), said
    assert f"it would never apply. Override that call's result instead (seq:{delegate['seq']})" in said, said


@pytest.mark.slow
def test_an_override_of_a_tool_call_inside_an_agno_team_member_is_refused(
    ledger_file: Path, tmp_path: Path
) -> None:
    """An agno team's member runs inside the leader's tool call ``delegate_task_to_member``, which
    a replay serves whole: an override of the member's tool call never applied, the replay said
    "replay ok" and that the override was "never reached (the run went another way first)", though
    the run went no other way. It is refused before anything runs, naming the call it is part of."""
    session, _ = record_agno_team(tmp_path / "store")
    # (a command: the session recorded itself here; refused before it starts, it never runs)
    command = ["--", sys.executable, "-c", "pass"]
    res = CliRunner().invoke(main, ["replay", str(session.path), "--override", ADD_6, *command])
    assert res.exit_code == 2, res.output
    refused_inside(res.output, session)
    assert session_dirs(tmp_path / "store") == [session.path]  # nothing ran: no what-if session


@pytest.mark.slow
def test_an_override_inside_an_agno_team_member_applies_in_python_only_when_the_leaders_tool_runs_live(
    ledger_file: Path, tmp_path: Path
) -> None:
    """In Python, ``forkpoint.replay(overrides=[…])`` of the member's tool call ran the team, said
    "replay ok" and that the override did not apply: it is refused as ``forkpoint replay`` refuses
    it, before anything runs. With ``live_tools=["delegate_task_to_member"]`` the leader's tool runs
    for real, so the member's call is asked for and the override applies (the member's model then
    sees 6, which the recording never sent)."""
    session, url = record_agno_team(tmp_path / "store")
    with pytest.raises(UsageError) as refused:
        with forkpoint.replay(session.path, overrides=[ADD_6]):
            run_agno_team(url)
    refused_inside(str(refused.value), session)
    assert session_dirs(tmp_path / "store") == [session.path]  # nothing ran: no what-if session

    with forkpoint.replay(session.path, overrides=[ADD_6], live_tools=["delegate_task_to_member"]) as rp:
        run_agno_team(url)
    report = rp.report()
    assert [o["applied"] for o in report["overrides"]] == [True], report["overrides"]
    assert report["divergence"]["diff"] == [
        {
            "op": "changed",
            "path": "$.body.messages[3].content",
            "expected": "Total(value=5)",
            "actual": "Total(value=6)",
        }
    ], report["divergence"]
    assert ledger_file.read_text() == "add 2 3\n"  # (the member's add was served, not run)

    # Under tools="live" what a live tool's body calls is live too: an override of the member's
    # model call is refused as made live; with live_tools it is served, and the override applies.
    answer = report["divergence"]["expected"]["seq"]  # (the member's answer to add's result)
    spec = f'seq:{answer}.text="6"'
    refused_live = f"names event seq {answer}, a model call this run makes live"
    with (
        pytest.raises(UsageError, match=refused_live),
        forkpoint.replay(session.path, overrides=[spec], tools="live"),
    ):
        run_agno_team(url)
    with forkpoint.replay(session.path, overrides=[spec], live_tools=["delegate_task_to_member"]) as rp:
        run_agno_team(url)
    report = rp.report()
    assert [o["applied"] for o in report["overrides"]] == [True], report["overrides"]
    assert [(d["path"], d["actual"]) for d in report["divergence"]["diff"]] == [
        ("$.body.messages[3].content", "6")
    ]


def run_agno_cached(url: str, cache: Path) -> str:
    """An agno agent whose tool keeps its results in agno's cache (``cache_results=True``, in
    ``cache``), as agno's docs show; what the model was sent of the tool's result, and its answer."""
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat
    from agno.tools import tool

    @tool(cache_results=True, cache_dir=str(cache))
    def add(a: int, b: int) -> str:
        """Add two integers."""
        ledger(f"agno add {a} {b}")
        return str(a + b)

    model = OpenAIChat(id="m", base_url=url + "/v1", api_key=API_KEY, max_retries=0)
    run = Agent(model=model, tools=[add], telemetry=False).run(TASK)
    return json.dumps([[m.content for m in run.messages or [] if m.role == "tool"], run.content])


@pytest.mark.slow
def test_an_agno_tool_whose_result_agno_cached_replays_from_the_session_alone(
    ledger_file: Path, tmp_path: Path
) -> None:
    """agno's result cache (``@tool(cache_results=True)``) answered tool calls out of the session:
    a replay right after recording found the live run's result there, never asked for the recorded
    call and did not reproduce; a recording the cache answered had no call of the tool (told to
    name a tool forkpoint already recorded), and its replay elsewhere diverged. A cache answer is
    recorded as the tool's call, a replay serves every call from the session whatever agno's cache
    holds, and leaves that cache as it was (an override's answer never reaches it)."""
    # (the test extra installs it: skipped, saying so, only in an install without it)
    pytest.importorskip("agno")
    cache = tmp_path / "agno-cache"
    with LocalServer(chat_script=[ADD, "2 + 3 = 5"]) as server:
        with forkpoint.record(store=tmp_path / "store") as cold:  # (the tool runs, agno caches it)
            live = run_agno_cached(server.url, cache)
        with forkpoint.record(store=tmp_path / "store") as warm:  # (agno's cache answers)
            assert run_agno_cached(server.url, cache) == live
    assert ledger_file.read_text() == "agno add 2 3\n"

    def cached() -> list[bytes]:
        return sorted(p.read_bytes() for p in cache.rglob("*.json"))

    kept = cached()
    assert len(kept) == 1, kept
    for rec in (cold, warm):
        tools = forkpoint.Session.load(rec.session_path).by_type("tool_call")
        assert [(t["tool"], t["args"]) for t in tools] == ADD, rec.session_path

    # Replayed with the live run's answer in agno's cache, then with none there.
    for rec, expected_cache in ((cold, kept), (warm, []), (cold, [])):
        if not expected_cache:
            shutil.rmtree(cache, ignore_errors=True)
        with forkpoint.replay(rec.session_path) as rp:
            assert run_agno_cached(server.url, cache) == live
        assert rp.report()["reproduced"], summary_line(rp.report())
        assert ledger_file.read_text() == "agno add 2 3\n"  # (no tool body ran on replay)
        assert cached() == expected_cache  # (nothing a replay served was written to agno's cache)

    with (
        forkpoint.replay(cold.session_path, overrides=['tool:add.result="6"']) as rp,
        contextlib.suppress(Exception),
    ):
        run_agno_cached(server.url, cache)
    assert [o["applied"] for o in rp.report()["overrides"]] == [True], rp.report()["overrides"]
    assert cached() == []  # (the what-if's 6 is not agno's answer to a later live run)


def run_agno_model_cached(url: str, cache: Path) -> str:
    """An agno agent whose model keeps its answers in agno's cache (``cache_response=True``, in
    ``cache``), as agno's docs show; its answer (a cached one has no tool messages)."""
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat

    def add(a: int, b: int) -> str:
        """Add two integers."""
        ledger(f"agno add {a} {b}")
        return str(a + b)

    model = OpenAIChat(
        id="m",
        base_url=url + "/v1",
        api_key=API_KEY,
        max_retries=0,
        cache_response=True,
        cache_dir=str(cache),
    )
    return str(Agent(model=model, tools=[add], telemetry=False).run(TASK).content)


@pytest.mark.slow
def test_agno_s_cache_of_model_answers_is_said_when_recording_and_replaying(
    ledger_file: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """agno's cache of model answers (``cache_response=True``, on disk) answers a whole response,
    its tool calls included, out of the session. A recording it answered held no call at all and
    said nothing ("0 model calls, 0 tool calls"); its replay said "replay ok: 0/0" while the cache
    held the answer (and diverged without it); a replay right after a recording found the live
    run's answer there and said only that recorded calls went unused. Both say what agno's cache
    answered, as for DSPy's, and a replay's answers never reach agno's disk."""
    # (the test extra installs it: skipped, saying so, only in an install without it)
    pytest.importorskip("agno")
    cache = tmp_path / "agno-cache"
    with LocalServer(chat_script=[ADD, "2 + 3 = 5"]) as server:
        with forkpoint.record(store=tmp_path / "store") as cold:  # (agno caches the answer)
            live = run_agno_model_cached(server.url, cache)
        assert "cache" not in capfd.readouterr().err
        with forkpoint.replay(cold.session_path) as rp:  # (agno's cache answers, not the session)
            assert run_agno_model_cached(server.url, cache) == live
        report = rp.report()
        assert not report["reproduced"]
        assert "agno answered 1 request from its own cache" in summary_line(report), summary_line(report)
        with forkpoint.record(store=tmp_path / "store") as warm:
            assert run_agno_model_cached(server.url, cache) == live
        assert len(server.requests) == 2  # (the cache answered the last two runs)
    err = capfd.readouterr().err
    assert "agno answered 1 request from its own cache" in err, err
    session = forkpoint.Session.load(warm.session_path)
    assert session.by_type("model_call") == session.by_type("tool_call") == []
    assert [n["data"] for n in session.by_type("note")] == [{"answered_from_cache": {"agno": 1}}]
    with forkpoint.replay(warm.session_path) as rp:
        assert run_agno_model_cached(server.url, cache) == live
    said = summary_line(rp.report())
    assert said.startswith("replay ok, but incomplete: ") and "agno answered 1 request" in said, said

    shutil.rmtree(cache)
    with forkpoint.replay(cold.session_path) as rp:
        assert run_agno_model_cached(server.url, cache) == live
    assert rp.report()["reproduced"], summary_line(rp.report())
    assert not any(cache.rglob("*.json"))  # (what a replay was served is not agno's answer to a live run)
    assert ledger_file.read_text() == "agno add 2 3\n"


@pytest.mark.slow
def test_a_dspy_tool_that_raised_replays(ledger_file: Path, tmp_path: Path) -> None:
    """DSPy's ReAct tells the model a tool failed with the first five frames of its traceback, the
    last of them forkpoint's own: ``result = body()`` live, the line that served the recorded
    exception on replay. The next request differed, and every such replay diverged. A recorded
    exception is raised again through frames that format as the live ones did. And recording
    itself put forkpoint's frames in those five (its patch of ``Tool.__call__``, the recording, the
    body's lambda), so the model was told something else than without forkpoint: the prompts of a
    run recorded are those of the same run without forkpoint."""
    pytest.importorskip("dspy")
    with LocalServer() as server:
        server.route("/v1/chat/completions", dspy_route, method="POST")
        run_dspy(server.url, fail=True)
        plain = [r["body"]["messages"][-1]["content"] for r in server.requests]
        server.requests.clear()
        with forkpoint.record(store=tmp_path / "store") as rec:
            live = run_dspy(server.url, fail=True)
        asked = [r["body"]["messages"][-1]["content"] for r in server.requests]
    assert any("Execution error in add" in text and "Traceback" in text for text in asked), asked
    assert asked == plain
    with forkpoint.replay(rec.session_path) as rp:
        assert run_dspy(server.url, fail=True) == live
    assert rp.report()["reproduced"], rp.report()


@pytest.mark.slow
def test_dspy_cache_answers_are_said_when_recording_and_replaying(
    ledger_file: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """DSPy answers a request it has answered before from its cache (in memory and on disk, on by
    default): no model call is made, so none is recorded, and a replay that finds its answers there
    asks for none of the recorded ones. Both were silent: a recording of a warm cache held no model
    call at all, and the replay said only that recorded calls went unused. Now the recording says
    how many requests DSPy's cache answered (and notes it in the session), and so does the replay."""
    dspy = pytest.importorskip("dspy")
    before = dspy.cache
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True)  # a fresh cache, in memory
    try:
        with LocalServer() as server:
            server.route("/v1/chat/completions", dspy_route, method="POST")
            with forkpoint.record(store=tmp_path / "store") as cold:
                live = run_dspy(server.url, cache=True)  # a cold cache: every call made, recorded
            assert len(server.requests) == 3
            assert "cache" not in capfd.readouterr().err
            with forkpoint.replay(cold.session_path) as rp:  # the cache answers now
                assert run_dspy(server.url, cache=True) == live
            report = rp.report()
            assert not report["reproduced"]
            assert report["answered_from_cache"] == {"DSPy": 3}
            assert "DSPy answered 3 requests from its own cache" in summary_line(report)
            with forkpoint.record(store=tmp_path / "store") as warm:
                assert run_dspy(server.url, cache=True) == live
            assert len(server.requests) == 3  # the cache answered: no request reached the server
        err = capfd.readouterr().err
        assert "DSPy answered 3 requests from its own cache" in err, err
        session = forkpoint.Session.load(warm.session_path)
        assert session.by_type("model_call") == []
        assert [n["data"] for n in session.by_type("note")] == [{"answered_from_cache": {"DSPy": 3}}]
    finally:
        dspy.cache = before


def test_a_strands_streaming_tools_exception_has_the_traceback_it_has_without_forkpoint(
    tmp_path: Path,
) -> None:
    """strands hands a failed tool's exception on with its error result (hooks and the program read
    it). A streaming tool's came out of forkpoint's recording task and left through forkpoint's
    stream, its frames in, recorded and replayed; it has the tool's frames only now."""
    pytest.importorskip("strands")
    from strands import tool

    @tool
    async def count(n: int) -> Any:
        """Count up to n."""
        yield "at 1"
        raise RuntimeError(f"cannot count to {n}")

    async def failed() -> str:
        async for event in count.stream({"toolUseId": "t1", "name": "count", "input": {"n": 2}}, {}):
            if getattr(event, "exception", None) is not None:
                return "".join(traceback.format_exception(event.exception))
        raise AssertionError("the tool did not fail")

    plain = asyncio.run(failed())
    with forkpoint.record(store=tmp_path) as rec:
        assert asyncio.run(failed()) == plain
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(failed()) == plain
    assert rp.report()["reproduced"], rp.report()


def test_a_strands_gemini_agent_replays_the_tool_call_ids_strands_made_up(tmp_path: Path) -> None:
    """Gemini answers a function call without an id; strands' Gemini model makes one up
    (``secrets.token_urlsafe``) and sends it back with the tool's result: every replay diverged at
    the second model call on ``functionCall.id``, ``--deterministic`` or not. With
    ``deterministic`` the ids are recorded and served as the agent's own uuids are."""
    pytest.importorskip("strands")
    from strands import Agent, tool
    from strands.models.gemini import GeminiModel

    from forkpoint.demo.server import ModelServer

    @tool
    def lookup(city: str) -> str:
        """Look a city up."""
        return f"{city}: sunny"

    def run(url: str) -> str:
        model = GeminiModel(
            client_args={"api_key": "fake", "http_options": {"base_url": url}}, model_id="gemini-demo"
        )
        return str(Agent(model=model, tools=[lookup], callback_handler=None)("Weather?"))

    with ModelServer(turns=2, seed=5) as server, forkpoint.record(store=tmp_path, deterministic=True) as rec:
        recorded = run(server.base_url)
    with forkpoint.replay(rec.session_path) as rp:
        assert run("http://127.0.0.1:9") == recorded
    assert rp.report()["reproduced"], rp.report()


@pytest.fixture
def dspy_memory_cache() -> Iterator[Any]:
    """DSPy with a fresh cache of model answers, in memory only (its default cache is on disk too)."""
    dspy = pytest.importorskip("dspy")
    before = dspy.cache
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=True)
    yield dspy
    dspy.cache = before


@pytest.mark.slow
def test_a_replay_dspy_s_cache_answered_is_not_plain_ok(
    ledger_file: Path, tmp_path: Path, dspy_memory_cache: Any
) -> None:
    """A recording made with DSPy's cache warm has no model call (the cache answered them all), and
    a replay on the same machine finds every answer in that cache again: it asked for every recorded
    call, so it said "replay ok", and nothing of the answers that came from the cache, not from the
    session (a replay elsewhere, or after the cache is cleared, makes those requests). Now it says
    "ok, but incomplete", and which cache answered how many."""
    with LocalServer() as server:
        server.route("/v1/chat/completions", dspy_route, method="POST")
        live = run_dspy(server.url, cache=True)  # warms the cache
        with forkpoint.record(store=tmp_path / "store") as warm:
            assert run_dspy(server.url, cache=True) == live
    assert forkpoint.Session.load(warm.session_path).by_type("model_call") == []
    with forkpoint.replay(warm.session_path) as rp:
        assert run_dspy(server.url, cache=True) == live
    line = summary_line(rp.report())
    assert line.startswith("replay ok, but incomplete:"), line
    assert "DSPy answered 3 requests from its own cache, not from the session" in line, line


@pytest.mark.slow
def test_a_replay_missing_a_request_dspy_s_cache_answered_when_recording_says_so(
    ledger_file: Path, tmp_path: Path, dspy_memory_cache: Any
) -> None:
    """A replay without the cache that answered the recording's requests makes them, and the
    recording does not have them: the divergence said only that the recording has no model call
    left (or that no recorded request has the same match key), though the session notes that DSPy's
    cache answered them. Now the reason says so."""
    with LocalServer() as server:
        server.route("/v1/chat/completions", dspy_route, method="POST")
        live = run_dspy(server.url, cache=True)
        with forkpoint.record(store=tmp_path / "store") as warm:
            assert run_dspy(server.url, cache=True) == live
        dspy_memory_cache.cache.reset_memory_cache()
        with forkpoint.replay(warm.session_path) as rp, pytest.raises(Exception, match="replay diverged"):
            run_dspy(server.url, cache=True)
    divergence = rp.report()["divergence"]
    assert divergence is not None and divergence["kind"] == "model_call", rp.report()
    assert (
        "when recorded, DSPy answered 3 requests from its own cache, never made, so not in the session"
        in (divergence["reason"])
    ), divergence


@pytest.mark.slow
def test_an_overridden_dspy_answer_is_not_left_in_dspy_s_disk_cache(
    ledger_file: Path, tmp_path: Path
) -> None:
    """DSPy stores every answer it gets in its cache on disk (on by default), the answers a replay is
    served too: a what-if replay's made-up answer (``model#3.text``) stayed there, and the next live
    run of the agent, without forkpoint, was given it and asked the model nothing. Now a replay keeps
    what it stores in DSPy's cache in memory, and the live run asks the model again."""
    dspy = pytest.importorskip("dspy")
    before = dspy.cache
    dspy.configure_cache(
        enable_disk_cache=True, enable_memory_cache=True, disk_cache_dir=str(tmp_path / "dspy")
    )
    try:
        with LocalServer() as server:
            server.route("/v1/chat/completions", dspy_route, method="POST")
            with forkpoint.record(store=tmp_path / "store") as rec:
                assert run_dspy(server.url) == "5"  # the cache off: nothing stored
            made_up = "[[ ## reasoning ## ]]\nmade up\n\n[[ ## answer ## ]]\n42\n\n[[ ## completed ## ]]"
            with forkpoint.replay(rec.session_path, overrides=[f"model#3.text={json.dumps(made_up)}"]):
                assert run_dspy(server.url, cache=True) == "42"
            dspy.cache.reset_memory_cache()  # as a new process would start
            server.requests.clear()
            assert run_dspy(server.url, cache=True) == "5"
            assert len(server.requests) == 3
    finally:
        dspy.cache = before


# --------------------------------------------------------------------------- concurrent runs


def _replayed_in_the_other_order(tmp_path: Path, server: Any, runs: Callable[[str], dict[str, Any]]) -> None:
    """``runs(first)`` runs a and b at once, ``first`` asking for its roll first
    (:mod:`tests.integrations.rolls`, the server routed to its model): recorded a first, each run's roll answered differently and
    recorded with the model's id for it; replayed b first, each gets its own roll and "replay ok"
    (at most "but not certain" of the order model answers came in, when live one came before that
    of a call sent earlier: a replay answers each at once)."""
    from tests.integrations.rolls import asked_a_then_b, replayed_ok

    with forkpoint.record(store=tmp_path / "store") as rec:
        live = runs("a")
    rolls = [t for t in forkpoint.Session.load(rec.session_path).by_type("tool_call") if t["tool"] == "roll"]
    assert asked_a_then_b(live) and len({r["result"] for r in rolls}) == 2, rolls
    assert all(r.get("call_id") for r in rolls), rolls
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        assert runs("b") == live
    assert replayed_ok(rp.report()), summary_line(rp.report())


def test_concurrent_strands_runs_asking_the_same_tool_each_get_their_own_answer_on_replay(
    tmp_path: Path, server: Any
) -> None:
    """Two strands agents gathered on one loop asked for the same roll, answered differently (run a
    first); replayed, b asked first and got a's answer. The model's id for each call
    (``toolUseId``) now chooses the recorded call."""
    pytest.importorskip("strands")
    from strands import Agent, tool
    from strands.hooks import AfterToolCallEvent, BeforeToolCallEvent
    from strands.models.openai import OpenAIModel

    from tests.integrations.rolls import next_roll, roll_then_say

    server.route("/v1/chat/completions", roll_then_say)

    @tool
    def roll(sides: int) -> int:
        """Roll a die."""
        return next_roll()

    def runs(first: str) -> dict[str, Any]:
        async def both() -> dict[str, Any]:
            turns = {"a": asyncio.Event(), "b": asyncio.Event()}
            turns[first].set()

            async def run(name: str, then: str) -> str:
                model = OpenAIModel(
                    client_args={"base_url": server.openai_base_url, "api_key": API_KEY, "max_retries": 0},
                    model_id="m",
                )
                agent = Agent(model=model, tools=[roll], callback_handler=None)

                async def mine(event: Any) -> None:  # (this run calls its tool at its turn)
                    await turns[name].wait()

                async def done(event: Any) -> None:
                    turns[then].set()

                agent.hooks.add_callback(BeforeToolCallEvent, mine)
                agent.hooks.add_callback(AfterToolCallEvent, done)
                return str(await agent.invoke_async(name)).strip()

            return dict(zip("ab", await asyncio.gather(run("a", "b"), run("b", "a")), strict=True))

        return asyncio.run(both())

    _replayed_in_the_other_order(tmp_path, server, runs)


def test_concurrent_agno_runs_asking_the_same_tool_each_get_their_own_answer_on_replay(
    tmp_path: Path, server: Any
) -> None:
    """Two agno agents gathered on one loop asked for the same roll, answered differently (run a
    first); replayed, b asked first and got a's answer. The model's id for each call
    (``FunctionCall.call_id``) now chooses the recorded call."""
    pytest.importorskip("agno")
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat

    from tests.integrations.rolls import next_roll, roll_then_say

    server.route("/v1/chat/completions", roll_then_say)

    def roll(sides: int) -> int:
        """Roll a die."""
        return next_roll()

    def runs(first: str) -> dict[str, Any]:
        async def both() -> dict[str, Any]:
            turns = {"a": asyncio.Event(), "b": asyncio.Event()}
            turns[first].set()

            async def run(name: str, then: str) -> str:
                async def in_turn(function_call: Any, arguments: dict[str, Any]) -> Any:
                    await turns[name].wait()  # (this run calls its tool at its turn)
                    out = function_call(**arguments)
                    out = await out if inspect.isawaitable(out) else out
                    turns[then].set()
                    return out

                model = OpenAIChat(id="m", base_url=server.openai_base_url, api_key=API_KEY, max_retries=0)
                agent = Agent(model=model, tools=[roll], tool_hooks=[in_turn], telemetry=False)
                return str((await agent.arun(name)).content)

            return dict(zip("ab", await asyncio.gather(run("a", "b"), run("b", "a")), strict=True))

        return asyncio.run(both())

    _replayed_in_the_other_order(tmp_path, server, runs)


def test_concurrent_anthropic_tool_runners_asking_the_same_tool_each_get_their_own_answer_on_replay(
    tmp_path: Path, server: Any
) -> None:
    """Two tool runners of the anthropic SDK gathered on one loop asked for the same roll, answered
    differently (run a first); replayed, b asked first and got a's answer. The model's id for
    each call (its ``tool_use`` block's) now chooses the recorded call."""
    from anthropic import AsyncAnthropic, beta_async_tool

    from tests.integrations.rolls import next_roll, roll_then_say_anthropic

    server.route("/v1/messages", roll_then_say_anthropic)

    @beta_async_tool
    async def roll(sides: int) -> str:
        """Roll a die."""
        return str(next_roll())

    def runs(first: str) -> dict[str, Any]:
        async def both() -> dict[str, Any]:
            turns = {"a": asyncio.Event(), "b": asyncio.Event()}
            turns[first].set()
            client = AsyncAnthropic(base_url=server.url, api_key=API_KEY, max_retries=0)

            async def run(name: str, then: str) -> str:
                runner = client.beta.messages.tool_runner(
                    model="claude-test",
                    max_tokens=64,
                    tools=[roll],
                    messages=[{"role": "user", "content": name}],
                )
                said = ""
                async for message in runner:
                    if message.stop_reason == "tool_use":
                        await turns[name].wait()  # (this run calls its tool at its turn)
                    else:
                        turns[then].set()
                        said = "".join(getattr(b, "text", "") for b in message.content)
                return said

            return dict(zip("ab", await asyncio.gather(run("a", "b"), run("b", "a")), strict=True))

        return asyncio.run(both())

    _replayed_in_the_other_order(tmp_path, server, runs)


def test_concurrent_smolagents_runs_asking_the_same_tool_each_get_their_own_answer_on_replay(
    tmp_path: Path, server: Any
) -> None:
    """Two smolagents ``ToolCallingAgent`` runs in two threads asked for the same roll, answered
    differently (run a first); replayed, b asked first and got a's answer. The model's id for
    each call (its ``ToolCall.id``) now chooses the recorded call."""
    import threading

    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    from tests.integrations.rolls import next_roll, roll_then_answer

    server.route("/v1/chat/completions", roll_then_answer)

    @tool
    def roll(sides: int) -> int:
        """Roll a die.

        Args:
            sides: The number of sides.
        """
        return next_roll()

    class InTurn(OpenAIServerModel):  # (each run calls its tool at its turn)
        def __init__(self, mine: threading.Event, then: threading.Event) -> None:
            super().__init__(
                model_id="m",
                api_base=server.openai_base_url,
                api_key=API_KEY,
                client_kwargs={"max_retries": 0},
            )
            self.mine, self.then = mine, then

        def generate(self, messages: Any, *args: Any, **kwargs: Any) -> Any:
            if len(messages) > 2:  # (its roll is done: the other's turn)
                self.then.set()
            answer = super().generate(messages, *args, **kwargs)
            if len(messages) <= 2:
                self.mine.wait(30)
            return answer

    def runs(first: str) -> dict[str, Any]:
        turns = {"a": threading.Event(), "b": threading.Event()}
        got: dict[str, Any] = {}

        def user(name: str, then: str) -> None:
            agent = ToolCallingAgent(
                tools=[roll], model=InTurn(turns[name], turns[then]), max_steps=3, verbosity_level=0
            )
            try:
                got[name] = str(agent.run(name))
            except Exception as exc:  # (a divergence: said in the comparison)
                got[name] = exc
                turns[then].set()

        workers = [threading.Thread(target=user, args=(n, "b" if n == "a" else "a")) for n in "ab"]
        for w in workers:
            w.start()
        turns[first].set()
        for w in workers:
            w.join(60)
        return got

    _replayed_in_the_other_order(tmp_path, server, runs)


# --------------------------------------------------------------------------- state kept on disk


def run_strands_with_a_session_file(url: str, state: Path) -> str:
    """A strands agent whose conversation strands keeps on disk (``FileSessionManager``, as its docs
    have it): a second run with the same session id starts from the first run's conversation."""
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel
    from strands.session.file_session_manager import FileSessionManager

    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    model = OpenAIModel(
        client_args={"base_url": url + "/v1", "api_key": API_KEY, "max_retries": 0}, model_id="m"
    )
    manager = FileSessionManager(session_id="user-1", storage_dir=str(state))
    return str(Agent(model=model, tools=[add], callback_handler=None, session_manager=manager)("2 + 3?"))


def run_agno_with_a_database(url: str, state: Path) -> str:
    """An agno agent whose sessions agno keeps in a SQLite file (``SqliteDb``, as its docs have it),
    with the history in the context: a second run of session ``user-1`` starts from the first's."""
    from agno.agent import Agent
    from agno.db.sqlite import SqliteDb
    from agno.models.openai import OpenAIChat

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    model = OpenAIChat(id="m", base_url=url + "/v1", api_key=API_KEY, max_retries=0)
    db = SqliteDb(db_file=str(state / "agent.db"))
    agent = Agent(
        model=model, tools=[add], db=db, session_id="user-1", add_history_to_context=True, telemetry=False
    )
    return str(agent.run(TASK).content)


STORED: dict[str, tuple[Callable[[str, Path], str], str, str]] = {
    "strands": (run_strands_with_a_session_file, "strands' FileSessionManager", "session_user-1"),
    "agno": (run_agno_with_a_database, "agno's SqliteDb", "agent.db"),
}


@pytest.mark.parametrize("framework", sorted(STORED))
@pytest.mark.parametrize("before", ["left by the recorded run", "removed, though the recorded run found one"])
def test_a_replay_diverging_where_the_framework_s_stored_state_differs_says_so(
    tmp_path: Path, before: str, framework: str
) -> None:
    """A replay in the directory of the recording finds the conversation the recorded run stored
    (or, recorded on top of an earlier run's, does not find it): the agent sent another history, and
    the divergence said only that no recorded request has the same match key. Now it names the
    framework's stored state as what differs from when the run was recorded."""
    # (the test extra installs them: skipped, saying so, only in an install without one)
    pytest.importorskip(framework)
    run, store, name = STORED[framework]
    state = tmp_path / "state"
    with LocalServer(chat_script=[ADD, "5", ADD, "5"]) as server:
        if before.startswith("removed"):
            run(server.url, state)
        with forkpoint.record(store=tmp_path / "store") as rec:
            run(server.url, state)
        if before.startswith("removed"):
            shutil.rmtree(state)
        # (agno hands the program the divergence as the run's error content, strands raises it)
        with forkpoint.replay(rec.session_path) as rp, contextlib.suppress(forkpoint.Divergence):
            run(server.url, state)
    divergence = rp.report()["divergence"]
    assert divergence is not None and divergence["kind"] == "model_call", rp.report()
    said = (
        "absent when recorded, there now" if before.startswith("left") else "there when recorded, absent now"
    )
    assert f"{store}'s stored state at {state / name} was {said}" in divergence["reason"], divergence


def test_a_pipe_in_the_folder_of_strands_stored_state_does_not_hang_the_recorded_run(tmp_path: Path) -> None:
    """Reading the folder strands keeps a session in opened a named pipe there to digest it, which
    blocks until a writer comes: the program hung in ``FileSessionManager(...)``, which strands alone
    opens at once (it reads only its own files there)."""
    import threading

    # (the test extra installs it: skipped, saying so, only in an install without it)
    pytest.importorskip("strands")
    from strands.session.file_session_manager import FileSessionManager

    FileSessionManager("user-1", storage_dir=str(tmp_path / "state"))  # (the session, as a first run left it)
    folder = tmp_path / "state" / "session_user-1"
    os.mkfifo(folder / "events.pipe")
    opened: list[object] = []
    with forkpoint.record(store=tmp_path / "store"):
        opening = threading.Thread(
            target=lambda: opened.append(FileSessionManager("user-1", storage_dir=str(tmp_path / "state"))),
            daemon=True,
        )
        opening.start()
        opening.join(timeout=20)
        hung = opening.is_alive()
        if hung:  # (let the blocked open go: a writer that closes at once)
            os.close(os.open(folder / "events.pipe", os.O_WRONLY))
            opening.join()
    assert not hung and len(opened) == 1


def test_a_file_named_in_no_utf8_in_the_folder_of_strands_stored_state_is_no_error(tmp_path: Path) -> None:
    """A file whose name is not UTF-8 (bytes a Latin-1 system wrote) in the folder strands keeps a
    session in: the digest of its name raised UnicodeEncodeError, a ValueError, which the wrapper
    took for strands refusing the session id: the state went unnoted, and a replay that diverged
    where it differed could not name it."""
    # (the test extra installs it: skipped, saying so, only in an install without it)
    pytest.importorskip("strands")
    from forkpoint.log import Session

    state = str(tmp_path / "state")
    with forkpoint.record(store=tmp_path / "store"):  # (the session, as a first run left it)
        from strands.session.file_session_manager import FileSessionManager

        FileSessionManager("user-1", storage_dir=state)
    (tmp_path / "state" / "session_user-1" / os.fsdecode(b"notes-\xe9t\xe9.txt")).write_text("x")
    with forkpoint.record(store=tmp_path / "store") as rec:
        FileSessionManager("user-1", storage_dir=state)
    (note,) = [n for n in Session.load(rec.session_path).by_type("note") if n["data"].get("stored_state")]
    assert note["data"]["stored_state"]["digest"], note


def test_a_store_the_program_opens_again_after_writing_to_it_is_not_said_to_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """agno opened again after a run wrote its session there (an agent per question): the replay
    started from the state the recording did, but the divergence of a later call said the stored
    state was different from when recorded, comparing what this replay's own run wrote (its times,
    its ids) with what the recorded run's wrote, and said it once for every time it was opened."""
    # (the test extra installs it: skipped, saying so, only in an install without it)
    pytest.importorskip("agno")
    state = tmp_path / "state"
    with LocalServer(chat_script=[ADD, "5", ADD, "5", ADD, "5"]) as server:
        with forkpoint.record(store=tmp_path / "store") as rec:
            run_agno_with_a_database(server.url, state)
            run_agno_with_a_database(server.url, state)
        shutil.rmtree(state)  # (as the recording found it: absent)
        with forkpoint.replay(rec.session_path) as rp, contextlib.suppress(forkpoint.Divergence):
            run_agno_with_a_database(server.url, state)
            monkeypatch.setattr(sys.modules[__name__], "TASK", "What is 4 + 4?")  # (the later call differs)
            run_agno_with_a_database(server.url, state)
    divergence = rp.report()["divergence"]
    assert divergence is not None and divergence["kind"] == "model_call", rp.report()
    assert "stored state" not in divergence["reason"], divergence["reason"]
