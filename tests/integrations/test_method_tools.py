"""A bound method handed to a framework as a tool (google-genai's automatic function calling with
``tools=[inventory.count]``, the anthropic SDK's ``beta_tool(notes.add)``, a smolagents ``Tool``
subclass, an agno ``Toolkit``'s method, a strands ``@tool`` method) that keeps state in its object, or a tool that changes the run's context the framework
hands it (the Agents SDK's ``RunContextWrapper.context``, pydantic-ai's ``ctx.deps``, agno's
``run_context.session_state``, strands' ``agent.state``): a replay does
not run its body, so the object stays as it was and the program may go another way under "replay
ok". Recording says so, as it does for a ``@forkpoint.tool`` method or argument."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

import forkpoint
from forkpoint.demo.server import ModelServer
from tests.modelserver import LocalServer

try:  # (module level: the tools' annotations are read in this module's globals)
    from agents import RunContextWrapper
except ImportError:
    RunContextWrapper = None
try:
    from pydantic_ai import RunContext
except ImportError:
    RunContext = None
try:
    from strands import ToolContext
except ImportError:
    ToolContext = None

SAID = "changed self.calls in place while it ran"


class Inventory:
    def __init__(self) -> None:
        self.calls = 0

    def count_items(self, sku: str) -> int:
        """Count the items of a sku."""
        self.calls += 1
        return 7

    async def count_later(self, sku: str) -> int:
        """Count the items of a sku, later."""
        self.calls += 1
        return 7

    def peek(self, sku: str) -> int:
        """Read only."""
        return self.calls


def test_a_gemini_method_tool_that_changes_its_object_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("google.genai")
    from google import genai
    from google.genai import types

    inv, reader = Inventory(), Inventory()
    with ModelServer(turns=2) as server, forkpoint.record(store=tmp_path) as rec:
        client = genai.Client(api_key="fake", http_options=types.HttpOptions(base_url=server.base_url))
        config = types.GenerateContentConfig(tools=[inv.count_items, reader.peek])
        client.models.generate_content(model="gemini-demo", contents="count", config=config)
    assert inv.calls == 1
    tools = [e["tool"] for e in forkpoint.Session.load(rec.session_path).by_type("tool_call")]
    assert tools == ["count_items", "peek"]
    said = " ".join(capsys.readouterr().err.split())
    assert f"tool 'count_items' {SAID}" in said, said
    assert "'peek'" not in said


def test_an_anthropic_beta_tool_method_that_changes_its_object_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("anthropic")
    from anthropic import Anthropic, AsyncAnthropic, beta_async_tool, beta_tool

    inv = Inventory()
    with ModelServer(turns=1) as server, forkpoint.record(store=tmp_path):
        client = Anthropic(base_url=server.base_url, api_key="sk-ant-fake", max_retries=0)
        client.beta.messages.tool_runner(
            model="claude-demo",
            max_tokens=64,
            tools=[beta_tool(inv.count_items)],
            messages=[{"role": "user", "content": "count"}],
        ).until_done()

        async def main() -> None:
            aclient = AsyncAnthropic(base_url=server.base_url, api_key="sk-ant-fake", max_retries=0)
            await aclient.beta.messages.tool_runner(
                model="claude-demo",
                max_tokens=64,
                tools=[beta_async_tool(inv.count_later)],
                messages=[{"role": "user", "content": "count"}],
            ).until_done()

        asyncio.run(main())
    assert inv.calls == 2
    said = " ".join(capsys.readouterr().err.split())
    assert f"tool 'count_items' {SAID}" in said, said
    assert f"tool 'count_later' {SAID}" in said, said


@dataclasses.dataclass
class Booking:
    """The run's context, as the Agents SDK's customer service example keeps it."""

    seat: str | None = None
    looked: int = 0


SEAT = [[("update_seat", {"seat": "12A"}), ("look", {})], "Done."]


def _said(capsys: pytest.CaptureFixture[str]) -> str:
    return " ".join(capsys.readouterr().err.split())


def test_an_agents_sdk_tool_that_changes_the_run_context_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``update_seat`` sets ``context.seat`` (the SDK's own example does): a replay leaves the
    context as it was, and the program that reads it after the run prints another seat. Two tools
    the model asked for at once run side by side: which changed the context cannot be told, so
    both are named."""
    pytest.importorskip("agents")
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    @function_tool
    async def update_seat(ctx: RunContextWrapper[Booking], seat: str) -> str:
        await asyncio.sleep(0.05)  # (look runs meanwhile)
        ctx.context.seat = seat
        return f"Seat {seat}."

    @function_tool
    async def look(ctx: RunContextWrapper[Booking]) -> str:
        return str(ctx.context.seat)

    booking = Booking()
    with LocalServer(chat_script=SEAT) as server, forkpoint.record(store=tmp_path):
        client = AsyncOpenAI(base_url=server.openai_base_url, api_key="sk-x", max_retries=0)
        model = OpenAIChatCompletionsModel(model="m", openai_client=client)
        agent = Agent[Booking](name="a", model=model, tools=[update_seat, look])
        assert Runner.run_sync(agent, "Seat 12A, please.", context=booking).final_output == "Done."
    assert booking.seat == "12A"
    said = _said(capsys)
    assert (
        "tool 'update_seat' (or 'look', which ran at the same time) changed context.seat in place while it ran"
        in said
    ), said
    assert said.count("in place while it ran") == 1, said  # (look changed nothing itself: checked alone)


def test_a_replay_that_diverges_after_a_tool_changed_the_run_context_says_it_may_be_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``set_tier`` sets ``context.tier`` and the instructions read it: on replay the body does not
    run, so the next request says another tier and the replay diverges. Recording said so, but the
    divergence showed only "Tier gold → Tier basic", naming no tool: the recording now keeps a note
    of it, and the divergence names the tool and what it changed."""
    pytest.importorskip("agents")
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    @function_tool
    def set_tier(ctx: RunContextWrapper[Booking], seat: str) -> str:
        ctx.context.seat = seat
        return "ok"

    def instructions(ctx: RunContextWrapper[Booking], agent: Any) -> str:
        return f"Seat: {ctx.context.seat}."

    def run(url: str) -> str:
        model = OpenAIChatCompletionsModel(
            model="m", openai_client=AsyncOpenAI(base_url=url, api_key="sk-x", max_retries=0)
        )
        agent = Agent[Booking](name="a", instructions=instructions, model=model, tools=[set_tier])
        return str(Runner.run_sync(agent, "Seat 12A, please.", context=Booking()).final_output)

    with LocalServer(chat_script=[[("set_tier", {"seat": "12A"})], "Done."]) as server:
        with forkpoint.record(store=tmp_path) as rec:
            assert run(server.openai_base_url) == "Done."
        capsys.readouterr()
        with forkpoint.replay(rec.session_path) as rp, pytest.raises(forkpoint.Divergence) as caught:
            run(server.openai_base_url)
    said = " ".join(str(caught.value).split())
    assert "Seat: 12A. → Seat: None." in said, said
    assert (
        "When recorded, tool 'set_tier' changed context.seat in place: a replay does not run the tool's body"
        in said
    ), said
    assert rp.report()["divergence"]["changed_in_place"] == [
        {"tool": "set_tier", "changed": ["context.seat"], "beside": []}
    ]


def test_a_pydantic_ai_tool_that_changes_the_agents_deps_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pydantic_ai")
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    agent = Agent(deps_type=Booking)

    @agent.tool
    def update_seat(ctx: RunContext[Booking], seat: str) -> str:
        ctx.deps.seat = seat
        return f"Seat {seat}."

    @agent.tool
    def look(ctx: RunContext[Booking]) -> str:
        return str(ctx.deps.seat)

    booking = Booking()
    with LocalServer(chat_script=[[("update_seat", {"seat": "12A"})], [("look", {})], "Done."]) as server:
        model = OpenAIChatModel("m", provider=OpenAIProvider(base_url=server.openai_base_url, api_key="sk-x"))
        with forkpoint.record(store=tmp_path):
            assert agent.run_sync("Seat 12A, please.", model=model, deps=booking).output == "Done."
    assert booking.seat == "12A"
    said = _said(capsys)
    assert "tool 'update_seat' changed ctx.deps.seat in place while it ran" in said, said
    assert "'look'" not in said


def test_a_smolagents_tool_that_keeps_state_in_itself_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("smolagents")
    from smolagents import OpenAIServerModel, Tool, ToolCallingAgent

    class Notes(Tool):
        name = "note"
        description = "Keep a note."
        inputs: Any = {"text": {"type": "string", "description": "The note."}}
        output_type = "string"

        def __init__(self) -> None:
            super().__init__()
            self.kept: list[str] = []

        def forward(self, text: str) -> str:
            self.kept.append(text)
            return "kept"

    notes = Notes()
    script: Any = [[("note", {"text": "buy milk"})], [("final_answer", {"answer": "ok"})]]
    with LocalServer(chat_script=script) as server, forkpoint.record(store=tmp_path):
        model = OpenAIServerModel(model_id="m", api_base=server.openai_base_url, api_key="sk-x")
        ToolCallingAgent(tools=[notes], model=model, max_steps=3, verbosity_level=0).run("Note it.")
    assert notes.kept == ["buy milk"]
    said = _said(capsys)
    assert "tool 'note' changed self.kept in place while it ran" in said, said


def test_watching_a_tools_object_runs_none_of_its_attributes_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """To see a change made in place, recording read the length of each attribute of a tool's
    object (and of the run context a framework hands it) before and after the call: a lazy query's
    ``__len__`` (Django's QuerySet) ran the query twice and kept its rows, which only recording did.
    Only Python's own containers are measured; a list grown in place is still said."""

    class LazyRows:
        def __init__(self) -> None:
            self.queries = 0

        def __len__(self) -> int:
            self.queries += 1
            return 1

    class Agent:
        def __init__(self) -> None:
            self.rows = LazyRows()
            self.seen: list[str] = []

        @forkpoint.tool
        def lookup(self, q: str) -> str:
            self.seen.append(q)
            return q

    agent = Agent()
    with forkpoint.record(store=tmp_path):
        agent.lookup("x")
    assert agent.rows.queries == 0
    assert "tool 'lookup' changed self.seen in place while it ran" in _said(capsys)


def test_two_agents_method_tools_of_one_name_each_say_their_own_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two agents' tools answer to ``search``, methods of two classes that each keep state in their
    object. A change was said once per tool name: the second agent's ``self.cache`` was never said,
    at recording nor in the replay's verdict, which named only the first's. Each function now says
    its own."""
    from forkpoint.replay import summary_line

    class Web:
        def __init__(self) -> None:
            self.history: list[str] = []

        @forkpoint.tool(name="search")
        def search(self, q: str) -> str:
            self.history.append(q)
            return "web"

    class Docs:
        def __init__(self) -> None:
            self.cache: dict[str, str] = {}

        @forkpoint.tool(name="search")
        def search(self, q: str) -> str:
            self.cache[q] = "docs"
            return "docs"

    def run() -> None:
        Web().search("a")
        Docs().search("b")

    with forkpoint.record(store=tmp_path) as rec:
        run()
    said = _said(capsys)
    assert "tool 'search' changed self.history in place" in said, said
    assert "tool 'search' changed self.cache in place" in said, said
    with forkpoint.replay(rec.session_path) as rp:
        run()
    line = " ".join(summary_line(rp.report()).split())
    assert "changed self.history" in line and "changed self.cache" in line, line


COUNT = [[("count_items", {"sku": "a1"})], "Done."]


def _bedrock_client(server: LocalServer) -> Any:
    import boto3

    return boto3.client(
        "bedrock-runtime", region_name="us-east-1", endpoint_url=server.url,
        aws_access_key_id="AKIAIOSFODNN7EXAMPLE", aws_secret_access_key="x" * 40,
    )  # fmt: skip


def test_an_agno_toolkit_method_that_changes_its_object_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An agno ``Toolkit``'s tools are its methods (agno wraps each in pydantic's ``validate_call``):
    one that kept a count in ``self`` was not said, and a replay ended with the count at 0 under
    "replay ok"."""
    pytest.importorskip("agno")
    from agno.agent import Agent
    from agno.models.aws import AwsBedrock
    from agno.tools import Toolkit

    class Shop(Toolkit):
        def __init__(self) -> None:
            super().__init__(name="shop", tools=[self.count_items])
            self.calls = 0

        def count_items(self, sku: str) -> str:
            """Count the items of a sku."""
            self.calls += 1
            return "7"

    shop = Shop()
    with LocalServer(chat_script=COUNT) as server, forkpoint.record(store=tmp_path):
        model = AwsBedrock(id="m", client=_bedrock_client(server))
        Agent(model=model, tools=[shop], telemetry=False).run("count a1")
    assert shop.calls == 1
    assert f"tool 'count_items' {SAID}" in _said(capsys)


def test_a_strands_method_tool_that_changes_its_object_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """strands' ``@tool`` on a method: the same, for a strands agent."""
    pytest.importorskip("strands")
    from strands import Agent, tool
    from strands.models import BedrockModel

    class Shop:
        def __init__(self) -> None:
            self.calls = 0

        @tool
        def count_items(self, sku: str) -> str:
            """Count the items of a sku."""
            self.calls += 1
            return "7"

    shop = Shop()
    with LocalServer(chat_script=COUNT) as server, forkpoint.record(store=tmp_path):
        import boto3

        session = boto3.Session(
            aws_access_key_id="AKIAIOSFODNN7EXAMPLE", aws_secret_access_key="x" * 40, region_name="us-east-1"
        )
        model = BedrockModel(model_id="m", boto_session=session, endpoint_url=server.url)
        Agent(model=model, tools=[shop.count_items], callback_handler=None)("count a1")
    assert shop.calls == 1
    assert f"tool 'count_items' {SAID}" in _said(capsys)


def test_a_replay_that_did_not_redo_a_change_in_place_is_not_plain_ok(tmp_path: Path) -> None:
    """The recording said that ``count`` changed ``self.calls``; the replay, which does not run the
    tool's body, ends with ``calls`` at 0 where the recorded run had 2, and said "replay ok" as if
    it had reproduced. It says what it did not redo."""
    from forkpoint.replay import summary_line

    class Shop:
        def __init__(self) -> None:
            self.calls = 0

        @forkpoint.tool
        def count(self, sku: str) -> int:
            self.calls += 1
            return 7

    def run() -> int:
        shop = Shop()
        shop.count("a1")
        shop.count("b2")
        return shop.calls

    with forkpoint.record(store=tmp_path) as rec:
        assert run() == 2
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == 0
    report = rp.report()
    assert report["divergence"] is None
    line = " ".join(summary_line(report).split())
    assert line.startswith(
        "replay ok, but not certain: when recorded, tool 'count' changed self.calls in place"
    ), line
    with forkpoint.replay(rec.session_path, tools="live") as live:
        assert run() == 2
    assert "in place" not in summary_line(live.report())


def _shopping_list_change_is_said(
    run: Any, changed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``run`` (an agent on the server at the URL it is given, whose tool ``add_item`` puts the item
    the model asks for in a shopping list the framework keeps) recorded: the list is ``["milk"]``,
    and the recording says the tool changed ``changed``; replayed: the list stays empty (the tool
    did not run), and the verdict is "ok, but not certain", not plain "ok"."""
    from forkpoint.replay import summary_line

    with LocalServer(chat_script=[[("add_item", {"item": "milk"})], "Added."]) as server:
        with forkpoint.record(store=tmp_path) as rec:
            assert run(server.url) == ["milk"]
        said = _said(capsys)
        assert f"tool 'add_item' changed {changed} in place" in said, said
        with forkpoint.replay(rec.session_path) as rp:
            assert run(server.url) == []
    line = " ".join(summary_line(rp.report()).split())
    assert line.startswith("replay ok, but not certain: when recorded, tool 'add_item' changed"), line


def test_an_agno_tool_that_changes_the_session_state_is_said_and_its_replay_is_not_plain_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """agno hands a tool the run's context (``run_context: RunContext``), whose ``session_state``
    its docs have tools change (``run_context.session_state["shopping_list"].append(item)``): the
    recording did not say it, and a replay, which does not run the tool, ended with the list empty
    where the recorded run had ``["milk"]``, under "replay ok"."""
    # (the test extra installs it: skipped, saying so, only in an install without it)
    pytest.importorskip("agno")
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat

    def add_item(run_context: Any, item: str) -> str:  # (agno hands it by its name: a RunContext)
        """Add an item to the shopping list."""
        run_context.session_state["shopping_list"].append(item)
        return f"added {item}"

    def run(url: str) -> Any:
        model = OpenAIChat(id="m", base_url=url + "/v1", api_key="sk-x", max_retries=0)
        agent = Agent(model=model, tools=[add_item], session_state={"shopping_list": []}, telemetry=False)
        return (agent.run("Add milk.").session_state or {})["shopping_list"]

    _shopping_list_change_is_said(run, "run_context.session_state['shopping_list']", tmp_path, capsys)


def test_a_strands_tool_that_changes_the_agents_state_is_said_and_its_replay_is_not_plain_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """strands hands a ``@tool(context=True)`` its ``ToolContext``, through which its docs have tools
    keep state in the agent (``tool_context.agent.state.set(...)``): the recording did not say it,
    and a replay, which does not run the tool, ended with the list empty, under "replay ok"."""
    # (the test extra installs it: skipped, saying so, only in an install without it)
    pytest.importorskip("strands")
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    @tool(context=True)
    def add_item(item: str, tool_context: ToolContext) -> str:
        """Add an item to the shopping list.

        Args:
            item: the item
        """
        tool_context.agent.state.set("shopping_list", [*tool_context.agent.state.get("shopping_list"), item])
        return f"added {item}"

    def run(url: str) -> Any:
        model = OpenAIModel(
            client_args={"base_url": url + "/v1", "api_key": "sk-x", "max_retries": 0}, model_id="m"
        )
        agent = Agent(model=model, tools=[add_item], callback_handler=None, state={"shopping_list": []})
        agent("Add milk.")
        return agent.state.get("shopping_list")

    _shopping_list_change_is_said(run, "agent.state['shopping_list']", tmp_path, capsys)


def test_a_strands_tool_that_changes_the_invocation_state_is_said_and_its_replay_is_not_plain_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """strands hands a tool the dict the program passed as ``agent(..., invocation_state=state)``
    (``tool_context.invocation_state``, the very dict), which its docs have tools read and write:
    the recording did not say the tool changed it, and a replay, which does not run the tool, ended
    with the program's list empty where the recorded run had ``["milk"]``, under "replay ok"."""
    # (the test extra installs it: skipped, saying so, only in an install without it)
    pytest.importorskip("strands")
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    @tool(context=True)
    def add_item(item: str, tool_context: ToolContext) -> str:
        """Add an item to the shopping list.

        Args:
            item: the item
        """
        tool_context.invocation_state["shopping_list"].append(item)
        return f"added {item}"

    def run(url: str) -> Any:
        model = OpenAIModel(
            client_args={"base_url": url + "/v1", "api_key": "sk-x", "max_retries": 0}, model_id="m"
        )
        state: dict[str, Any] = {"shopping_list": []}
        Agent(model=model, tools=[add_item], callback_handler=None)("Add milk.", invocation_state=state)
        return state["shopping_list"]

    _shopping_list_change_is_said(run, "invocation_state['shopping_list']", tmp_path, capsys)
