"""MCP, built in: an agent that gets its tools from an MCP server through the mcp SDK's
``ClientSession`` is recorded with each request (``initialize``, ``tools/list``, ``tools/call``,
``resources/read``, ``prompts/get``…) as a tool call, and replayed with the server neither started
nor contacted: the server appends every start and every call to a ledger, which a replay must
leave as it was.

The servers are the SDK's own (``mcp_calc_server.py``), on stdio or on 127.0.0.1 (SSE, streamable
HTTP), started by the tests. The mcp modules are imported here before forkpoint is active, as in an
agent that imports them at the top: the integration reaches the names bound already.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import io
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# mcp is in the test extra; this only keeps the rest of the suite running where it is not installed.
pytest.importorskip("mcp")

from mcp import Client, ClientSession, StdioServerParameters, types  # noqa: E402
from mcp.client.sse import sse_client  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402
from rich.console import Console  # noqa: E402

import forkpoint  # noqa: E402
from forkpoint.replay import summary_line  # noqa: E402
from forkpoint.show import render  # noqa: E402
from tests.modelserver import LocalServer  # noqa: E402

SERVER_SCRIPT = Path(__file__).with_name("mcp_calc_server.py")
API_KEY = "sk-proj-" + "m" * 40


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def mcp_server(transport: str, ledger: Path, script: Path = SERVER_SCRIPT) -> Iterator[str | None]:
    """The test server (``script``, run as ``script LEDGER TRANSPORT PORT``) on ``transport``: for
    stdio nothing is started here (the client spawns it) and None is yielded; for SSE and streamable
    HTTP a process listening on 127.0.0.1, and its URL. Stopped on leaving."""
    if transport == "stdio":
        yield None
        return
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, str(script), str(ledger), transport, str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the MCP test server ({transport}) did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}" + ("/sse" if transport == "sse" else "/mcp")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.asynccontextmanager
async def connect(transport: str, ledger: Path, url: str | None) -> Any:
    """A ClientSession to the test server, as an agent opens one (not initialized yet)."""
    if transport == "stdio":
        params = StdioServerParameters(command=sys.executable, args=[str(SERVER_SCRIPT), str(ledger)])
        opened = stdio_client(params)
    elif transport == "sse":
        opened = sse_client(str(url))
    else:
        opened = streamable_http_client(str(url))
    async with opened as streams, ClientSession(streams[0], streams[1]) as session:
        yield session


def dump(value: Any) -> Any:
    return value.model_dump(mode="json", by_alias=True)


async def lookup_x(ledger: Path, name: str) -> str:
    """Start the calculator server as ``name`` over stdio and ask its ``lookup`` for ``x``."""
    params = StdioServerParameters(
        command=sys.executable, args=[str(SERVER_SCRIPT), str(ledger), f"--name={name}"]
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("lookup", {"key": "x"})
    return str(result.content[0].text)  # type: ignore[union-attr]


async def use_everything(transport: str, ledger: Path, url: str | None) -> list[Any]:
    """Every kind of request an agent makes; what it got back, each with the class it came as."""
    out: list[Any] = []
    async with connect(transport, ledger, url) as session:
        init = await session.initialize()
        out.append((type(init).__name__, init.server_info.name))
        tools = await session.list_tools()
        out.append((type(tools).__name__, sorted(t.name for t in tools.tools)))
        added = await session.call_tool("add", {"a": 2, "b": 3})
        out.append((type(added).__name__, dump(added)))
        failed = await session.call_tool("divide", {"a": 1, "b": 0})
        out.append((type(failed).__name__, failed.is_error, dump(failed)))
        resources = await session.list_resources()
        out.append([str(r.uri) for r in resources.resources])
        note = await session.read_resource("notes://today")
        out.append((type(note).__name__, dump(note)))
        prompt = await session.get_prompt("review", {"code": "print(1)"})
        out.append((type(prompt).__name__, dump(prompt)))
        try:
            await session.read_resource("notes://nowhere")
        except MCPError as exc:
            out.append((type(exc).__name__, exc.error.code, exc.error.message))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["stdio", "sse", "streamable-http"])
def test_an_mcp_session_replays_without_its_server(transport: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.log"
    with mcp_server(transport, ledger) as url:
        with forkpoint.record(store=tmp_path / "store") as rec:
            live = asyncio.run(use_everything(transport, ledger, url))
    ran = ledger.read_text()
    assert ran.splitlines() == [
        f"started {transport}",
        "add 2 3",
        "divide 1.0 0.0",
        "read notes://today",
        "prompt review",
    ]
    assert live[0] == ("InitializeResult", "calc")
    assert live[2][1]["structuredContent"] == {"result": 5} and live[3][1] is True
    assert live[-1][0] == "MCPError"

    # The server is gone (stdio: it would have to be spawned again).
    with forkpoint.replay(rec.session_path) as rp:
        again = asyncio.run(use_everything(transport, ledger, url))
    assert again == live  # the same classes with the same contents, the error included
    assert ledger.read_text() == ran  # not started, no tool ran
    report = rp.report()
    assert report["reproduced"], report
    assert report["network_blocked"] == []

    session = forkpoint.Session.load(rec.session_path)
    assert session.by_type("model_call") == []  # the HTTP transports' requests are not recorded twice
    notes = session.by_type("note")  # type: ignore[call-overload]
    assert [n for n in notes if "unrecorded_connections" in n["data"]] == []  # nor missed
    events = session.by_type("tool_call")
    assert [e["tool"] for e in events] == [
        "mcp:initialize",
        "mcp:tools/list",
        "add",
        "divide",
        "mcp:resources/list",
        "mcp:resources/read",
        "mcp:prompts/get",
        "mcp:resources/read",
    ]
    # (the transport: the stdio server's command line, the URL of one over HTTP)
    via = url or f"{sys.executable} {SERVER_SCRIPT} {ledger}"
    assert events[0]["mcp"] == {"server": "calc", "method": "initialize", "via": via}  # (named by its answer)
    add = events[2]
    assert add["mcp"] == {"server": "calc", "method": "tools/call", "via": via}
    assert add["args"] == {"a": 2, "b": 3}
    assert add["result"]["structuredContent"] == {"result": 5}
    assert add["result"]["content"] == [{"type": "text", "text": "5"}]
    assert events[3]["result"]["isError"] is True
    assert events[6]["args"] == {"name": "review", "arguments": {"code": "print(1)"}}
    assert events[7]["result"]["$mcp_error"]["type"] == "MCPError"


def test_the_server_a_stdio_transport_starts_is_not_named_an_unrecorded_program(tmp_path: Path) -> None:
    """The MCP server a stdio transport starts is a Python program, but its requests are recorded as
    MCP calls and a replay does not start it: neither the recording nor the replay's verdict may call
    it a program forkpoint did not record ("ok, but incomplete", "ran again as without forkpoint")."""
    ledger = tmp_path / "ledger.log"

    async def run() -> Any:
        async with connect("stdio", ledger, None) as session:
            await session.initialize()
            return dump(await session.call_tool("add", {"a": 2, "b": 3}))

    with forkpoint.record(store=tmp_path / "store") as rec:
        live = asyncio.run(run())
    notes = forkpoint.Session.load(rec.session_path).by_type("note")  # type: ignore[call-overload]
    assert [n["data"] for n in notes if "unrecorded_programs" in n["data"]] == []
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(run()) == live
    report = rp.report()
    assert report["reproduced"] and report["unrecorded_programs"] == [], report
    assert ledger.read_text() == "started stdio\nadd 2 3\n"  # (the server ran once: when recorded)


def test_an_mcp_tool_that_answered_is_error_is_a_failed_tool_call_in_show_diff_html_and_export(
    tmp_path: Path,
) -> None:
    """An MCP tool that fails answers with ``isError`` instead of raising: ``show`` printed its
    answer as a result, ``diff`` counted no tool error, the HTML page showed no failure and the
    export's span had no error status (the MCP semantic conventions' ``error.type`` is
    ``tool_error``)."""
    from rich.console import Console

    from forkpoint.diff import totals
    from forkpoint.html import view_model
    from forkpoint.otel import plan
    from forkpoint.show import render

    ledger = tmp_path / "ledger.log"

    async def run() -> None:
        async with connect("stdio", ledger, None) as session:
            await session.initialize()
            await session.call_tool("add", {"a": 2, "b": 3})
            await session.call_tool("divide", {"a": 1, "b": 0})

    with forkpoint.record(store=tmp_path / "store") as rec:
        asyncio.run(run())
    session = forkpoint.Session.load(rec.session_path)
    console = Console(record=True, width=200)
    render(session, console)
    shown = console.export_text()
    assert "failed (MCP isError): Error executing tool divide" in shown, shown
    assert totals(session)["tool_errors"] == 1
    views = {v.get("tool"): v for v in view_model(session)["events"] if v.get("type") == "tool_call"}
    assert views["divide"]["mcp_error"] == "Error executing tool divide" and "mcp_error" not in views["add"]
    spans = {p.name: p for p in plan(session, content=True)}
    divide, add = spans["execute_tool divide"], spans["execute_tool add"]
    assert (divide.status, divide.attributes["error.type"]) == ("error", "tool_error")
    assert divide.status_message == "Error executing tool divide"
    assert add.status == "unset" and "error.type" not in add.attributes
    assert next(p for p in plan(session) if p.name == "execute_tool divide").status_message == "tool_error"


async def agent(base_url: str, ledger: Path) -> str:
    """A hand-written agent loop: the model's tools are the MCP server's, its tool calls are made
    with ``session.call_tool``, and their text goes back to the model."""
    client = AsyncOpenAI(base_url=base_url, api_key=API_KEY, max_retries=0)
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER_SCRIPT), str(ledger)])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        listed = await session.list_tools()
        tools: Any = [
            {"type": "function", "function": {"name": t.name, "parameters": t.input_schema}}
            for t in listed.tools
        ]
        messages: list[Any] = [{"role": "user", "content": "What is 2 + 3?"}]
        while True:
            reply = await client.chat.completions.create(model="m", messages=messages, tools=tools)
            message = reply.choices[0].message
            if not message.tool_calls:
                return str(message.content)
            messages.append(message.model_dump(exclude_none=True))
            for call in message.tool_calls:
                result = await session.call_tool(call.function.name, json.loads(call.function.arguments))
                text = "".join(b.text for b in result.content if isinstance(b, types.TextContent))
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})


@pytest.mark.slow
def test_an_agent_with_mcp_tools_replays_offline(tmp_path: Path) -> None:
    """The issue's case: recorded, this agent showed "0 tool calls" and its replay started the MCP
    server again and ran the tool live. Now the tool call is in the session under the MCP tool's
    name, and the replay, with the model server stopped too, gets the same answer offline."""
    ledger = tmp_path / "ledger.log"
    script = [[("add", {"a": 2, "b": 3})], "2 + 3 = 5"]
    with LocalServer(chat_script=script) as server:
        with forkpoint.record(store=tmp_path / "store") as rec:
            live = asyncio.run(agent(server.openai_base_url, ledger))
        sent = [m for r in server.requests for m in r["body"]["messages"] if m["role"] == "tool"]
    assert live == "2 + 3 = 5" and sent[0]["content"] == "5"
    ran = ledger.read_text()
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(agent(server.openai_base_url, ledger)) == live
    assert ledger.read_text() == ran == "started stdio\nadd 2 3\n"
    assert rp.report()["reproduced"], rp.report()
    session = forkpoint.Session.load(rec.session_path)
    calls = [e["tool"] for e in session.by_type("tool_call") if e["mcp"]["method"] == "tools/call"]
    assert calls == ["add"]
    # (the initialize request's event too: its own answer names the server)
    assert {(e["mcp"]["method"], e["mcp"]["server"]) for e in session.by_type("tool_call")} == {
        ("initialize", "calc"),
        ("tools/list", "calc"),
        ("tools/call", "calc"),
    }
    assert len(session.by_type("model_call")) == 2
    shown = io.StringIO()
    render(session, Console(file=shown, width=200))
    assert "add(a=2, b=3) (MCP server calc)" in shown.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("api", ["ClientSession", "Client"])
def test_a_call_that_goes_live_after_a_divergence_reaches_the_server_the_replay_started(
    api: str, tmp_path: Path
) -> None:
    """After a divergence under ``--on-divergence live`` every later call is live (and so after a
    fork's checkpoint, and in pytest's mode ``record``), but the replay had served the MCP session
    with no server behind it: the call failed with ``McpServerNotStarted``, so an MCP agent could
    not be forked, nor its cassette re-recorded. Now such a replay starts the server, keeps it apart
    while the session is served, and introduces the session to it (its recorded ``initialize``) at
    the first live call. The same through mcp 2.x's ``Client``, which hands its session a dispatcher
    instead of the streams (and negotiates with ``server/discover``)."""
    ledger = tmp_path / "ledger.log"

    async def run(b: int) -> Any:
        if api == "Client":
            params = StdioServerParameters(command=sys.executable, args=[str(SERVER_SCRIPT), str(ledger)])
            async with Client(params) as client:
                return dump(await client.call_tool("add", {"a": 2, "b": b}))
        async with connect("stdio", ledger, None) as session:
            await session.initialize()
            await session.send_ping()  # served while the session is: never sent to the server
            return dump(await session.call_tool("add", {"a": 2, "b": b}))

    with forkpoint.record(store=tmp_path / "store") as rec:
        live = asyncio.run(run(3))
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(run(3)) == live
    assert rp.report()["reproduced"], rp.report()
    assert ledger.read_text() == "started stdio\nadd 2 3\n"  # a replay that cannot go live starts none
    with forkpoint.replay(rec.session_path, on_divergence="live") as rp:
        again = asyncio.run(asyncio.wait_for(run(4), 120))  # a hang fails as a TimeoutError
    assert again["structuredContent"] == {"result": 6} and again["isError"] is False
    assert rp.report()["divergence"]["name"] == "add"
    assert ledger.read_text() == "started stdio\nadd 2 3\nstarted stdio\nadd 2 4\n"


@pytest.mark.slow
def test_a_replay_that_may_go_live_serves_a_session_whose_server_cannot_start_here(tmp_path: Path) -> None:
    """A replay that may go live starts the agent's stdio server; where that server is not
    installed (another machine, CI), starting it raised FileNotFoundError in the agent, so a replay
    under --on-divergence live that never diverged failed where a plain replay passed. Now the
    session is served as the recording has it, and only a call made live fails, saying why."""
    ledger = tmp_path / "ledger.log"

    async def run(command: str, b: int) -> Any:
        params = StdioServerParameters(command=command, args=[str(SERVER_SCRIPT), str(ledger)])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return dump(await session.call_tool("add", {"a": 2, "b": b}))

    with forkpoint.record(store=tmp_path / "store") as rec:
        live = asyncio.run(run(sys.executable, 3))
    missing = str(tmp_path / "not-installed")
    with forkpoint.replay(rec.session_path, on_divergence="live") as rp:
        assert asyncio.run(run(missing, 3)) == live
    assert rp.report()["reproduced"], rp.report()
    with forkpoint.replay(rec.session_path, on_divergence="live"):
        with pytest.raises(ExceptionGroup) as raised:  # through the session's task group
            asyncio.run(asyncio.wait_for(run(missing, 4), 120))
    assert raised.group_contains(
        forkpoint.McpServerNotStarted, match=r"server 'calc'.*could not start that server \(FileNotFoundError"
    )
    assert ledger.read_text() == "started stdio\nadd 2 3\n"


@pytest.mark.slow
def test_a_call_made_live_on_a_standby_server_that_ended_says_it_ended(tmp_path: Path) -> None:
    """A stdio server the replay started on standby that ended before the replay went live (it
    exits at once here, as one missing its configuration would): the live call said the server
    'did not accept the session's recorded initialize request: None'. It says the server ended."""
    ledger = tmp_path / "ledger.log"

    async def run(args: list[str], b: int) -> Any:
        params = StdioServerParameters(command=sys.executable, args=args)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            return dump(await session.call_tool("add", {"a": 2, "b": b}))

    with forkpoint.record(store=tmp_path / "store") as rec:
        asyncio.run(run([str(SERVER_SCRIPT), str(ledger)], 3))
    with forkpoint.replay(rec.session_path, on_divergence="live"):
        with pytest.raises(ExceptionGroup) as raised:  # through the session's task group
            asyncio.run(asyncio.wait_for(run(["-c", "pass"], 4), 120))
    assert raised.group_contains(
        forkpoint.McpServerNotStarted,
        match=r"server ended before it answered \(the session's recorded initialize",
    )


@pytest.mark.slow
def test_a_standby_server_that_ended_before_the_session_went_live_says_it_ended(tmp_path: Path) -> None:
    """The same server, ended well before the first call made live (an agent that asks its model
    first): its end closed the session's receive loop, and so the stream the session writes to,
    and going live raised a bare EndOfStream reading what the session had sent meanwhile (5 of 12
    runs of the test above with short sleeps at the standby's awaits). It says the server ended."""
    ledger = tmp_path / "ledger.log"
    ended = f"open({str(ledger)!r}, 'a').write('ended\\n')"

    async def run(args: list[str], b: int) -> Any:
        params = StdioServerParameters(command=sys.executable, args=args)
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            while args[0] == "-c" and "ended" not in (ledger.read_text() if ledger.exists() else ""):
                await asyncio.sleep(0.05)
            await asyncio.sleep(1)  # (its end reaches the session's receive loop meanwhile)
            return dump(await session.call_tool("add", {"a": 2, "b": b}))

    with forkpoint.record(store=tmp_path / "store") as rec:
        asyncio.run(run([str(SERVER_SCRIPT), str(ledger)], 3))
    with forkpoint.replay(rec.session_path, on_divergence="live"):
        with pytest.raises(ExceptionGroup) as raised:  # through the session's task group
            asyncio.run(asyncio.wait_for(run(["-c", ended], 4), 120))
    assert raised.group_contains(
        forkpoint.McpServerNotStarted,
        match=r"server ended before it answered \(the session's recorded initialize",
    ), raised.value.exceptions


@pytest.mark.slow
def test_a_server_message_after_the_session_left_a_standby_transport_is_dropped(tmp_path: Path) -> None:
    """A stdio server a replay started on standby, then went live on, may still write once the
    agent's session has left (a log message after its tool answered) while its transport is open:
    the relay handed it to the session's closed stream, and its BrokenResourceError cancelled the
    agent's task, ended the transport in an ExceptionGroup, and left the server running. The stdio
    transport drops such a message; the replay of the same run does too."""
    ledger = tmp_path / "ledger.log"

    async def run(b: int) -> Any:
        params = StdioServerParameters(command=sys.executable, args=[str(SERVER_SCRIPT), str(ledger)])
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                added = dump(await session.call_tool("add", {"a": 2, "b": b}))
                await session.call_tool("kick", {})
            for _ in range(600):  # until the server wrote its log message, the session gone
                if ledger.read_text().count("kicked earlier") == ledger.read_text().count("kick\n"):
                    break
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)  # (and the transport read it)
        return added

    with forkpoint.record(store=tmp_path / "store") as rec:
        assert asyncio.run(run(3))["structuredContent"] == {"result": 5}
    with forkpoint.replay(rec.session_path, on_divergence="live") as rp:
        assert asyncio.run(run(4))["structuredContent"] == {"result": 6}
    assert rp.report()["divergence"]["name"] == "add"
    assert ledger.read_text().count("kicked earlier") == 2


@pytest.mark.slow
def test_a_call_that_must_go_live_on_a_session_over_a_socket_says_it_was_never_connected(
    tmp_path: Path,
) -> None:
    """A server reached over a socket (SSE) is not connected to while the replay serves its session
    (sockets stay closed until the replay goes live): the live call fails saying so, and how to
    connect from the start, instead of waiting forever for an answer."""
    ledger = tmp_path / "ledger.log"
    with mcp_server("sse", ledger) as url:

        async def run(b: int) -> Any:
            async with connect("sse", ledger, url) as session:
                await session.initialize()
                return dump(await session.call_tool("add", {"a": 2, "b": b}))

        with forkpoint.record(store=tmp_path / "store") as rec:
            asyncio.run(run(3))
        with forkpoint.replay(rec.session_path, on_divergence="live"):
            with pytest.raises(ExceptionGroup) as raised:  # through the session's task group
                asyncio.run(asyncio.wait_for(run(4), 120))  # a hang fails as a TimeoutError
    assert raised.group_contains(
        forkpoint.McpServerNotStarted, match=r"server 'calc'.*never connected.*--tools live.*model answer"
    )
    assert ledger.read_text() == "started sse\nadd 2 3\n"


@pytest.mark.slow
def test_a_what_if_run_keeps_its_served_mcp_calls_as_mcp_calls(tmp_path: Path) -> None:
    """A what-if run (or a fork's arm) wrote the MCP requests it served without their ``mcp``
    (server, method, and the progress the server sent meanwhile): ``forkpoint show`` of it named no
    server, and a replay of it handed the tool's progress to nobody. They are kept as recorded."""
    ledger = tmp_path / "ledger.log"
    heard: list[Any] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        heard.append((done, message))

    async def run() -> Any:
        async with connect("stdio", ledger, None) as session:
            await session.initialize()
            await session.call_tool("count", {"n": 2}, progress_callback=progress)
            return dump(await session.call_tool("add", {"a": 2, "b": 3}))

    with forkpoint.record(store=tmp_path / "store") as rec:
        asyncio.run(run())
    answer = '{"content": [{"type": "text", "text": "7"}], "structuredContent": {"result": 7}}'
    with forkpoint.replay(rec.session_path, overrides=[f"tool:add.result={answer}"]) as rp:
        asyncio.run(run())
    child = forkpoint.Session.load(rp.report()["child_session"])
    recorded = {e["tool"]: e for e in forkpoint.Session.load(rec.session_path).by_type("tool_call")}
    served = {e["tool"]: e for e in child.by_type("tool_call")}
    assert served["count"]["mcp"] == recorded["count"]["mcp"]
    assert served["count"]["mcp"]["received"] and served["count"]["mcp"]["server"] == "calc"
    assert served["add"]["mcp"] == recorded["add"]["mcp"]  # (the overridden one too)
    heard.clear()
    with forkpoint.replay(child.path) as again:
        asyncio.run(run())
    assert again.report()["reproduced"], again.report()
    assert heard == [(1.0, "step 1"), (2.0, "step 2")]


@pytest.mark.slow
def test_the_progress_a_tool_reports_reaches_the_callback_again_on_replay(tmp_path: Path) -> None:
    """A tool's progress notifications go to the progress callback the agent gave ``call_tool``:
    recorded with the call, they are handed to that callback again when the replay serves it (they
    were lost: the replay printed no progress, and said "replay ok")."""
    ledger = tmp_path / "ledger.log"

    async def run() -> tuple[Any, list[Any]]:
        heard: list[Any] = []

        async def progress(done: float, total: float | None, message: str | None) -> None:
            heard.append((done, total, message))

        async with connect("stdio", ledger, None) as session:
            await session.initialize()
            result = await session.call_tool("count", {"n": 3}, progress_callback=progress)
        return dump(result), heard

    with forkpoint.record(store=tmp_path / "store") as rec:
        live = asyncio.run(run())
    assert live[1] == [(1.0, 3.0, "step 1"), (2.0, 3.0, "step 2"), (3.0, 3.0, "step 3")]
    ran = ledger.read_text()
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(run()) == live
    assert ledger.read_text() == ran == "started stdio\ncount 3\n"
    assert rp.report()["reproduced"], rp.report()
    (count,) = [
        e for e in forkpoint.Session.load(rec.session_path).by_type("tool_call") if e["tool"] == "count"
    ]
    assert count["mcp"]["received"][0] == {
        "method": "notifications/progress",
        "params": {"progress": 1.0, "total": 3.0, "message": "step 1"},
        "to": "progress_callback",
    }


def client_callbacks(base_url: str, seen: list[Any]) -> dict[str, Any]:
    """A ClientSession's callbacks for what the server asks and logs, each noting in ``seen`` what
    it got: sampling answers with a model of ``base_url``, elicitation accepts."""
    client = AsyncOpenAI(base_url=base_url, api_key=API_KEY, max_retries=0)

    async def sampling(context: Any, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        question = params.messages[0].content.text  # type: ignore[union-attr]
        reply = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": question}]
        )
        seen.append(("sampled", question))
        text = types.TextContent(type="text", text=str(reply.choices[0].message.content))
        return types.CreateMessageResult(role="assistant", content=text, model="m")

    async def elicitation(context: Any, params: Any) -> types.ElicitResult:
        seen.append(("elicited", params.message))
        return types.ElicitResult(action="accept", content={"ok": True})

    async def logged(params: types.LoggingMessageNotificationParams) -> None:
        seen.append(("logged", params.data))

    return {"sampling_callback": sampling, "elicitation_callback": elicitation, "logging_callback": logged}


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["stdio", "sse", "streamable-http"])
def test_what_the_server_asks_and_logs_during_a_call_reaches_the_callbacks_again_on_replay(
    transport: str, tmp_path: Path
) -> None:
    """During a tool call the server logs a message, asks the client's model (sampling: the
    callback calls a model) and asks the user (elicitation). Replayed, the callbacks were never
    called: the model call made in the sampling callback was left unused ("DID NOT REPRODUCE") and
    the elicitation went unseen under "replay ok". Now these messages are recorded with the call
    and handed to the same callbacks when the replay serves it; the model call is served. Over
    streamable HTTP that model call was not even recorded (the callback ran in the context of the
    MCP request, whose HTTP is left to the integration): "0 model calls", and its host:port named
    as a connection forkpoint did not record."""
    ledger = tmp_path / "ledger.log"

    async def run(base_url: str, url: str | None) -> list[Any]:
        seen: list[Any] = []
        params = StdioServerParameters(command=sys.executable, args=[str(SERVER_SCRIPT), str(ledger)])
        opened = (
            stdio_client(params)
            if url is None
            else sse_client(url)
            if transport == "sse"
            else streamable_http_client(url)
        )
        callbacks = client_callbacks(base_url, seen)
        async with opened as streams, ClientSession(streams[0], streams[1], **callbacks) as session:
            await session.initialize()
            result = await session.call_tool("ask", {"question": "ready"})
        return [*sorted(seen), result.content[0].text]  # type: ignore[union-attr]

    with LocalServer() as server, mcp_server(transport, ledger) as url:
        with forkpoint.record(store=tmp_path / "store") as rec:
            live = asyncio.run(run(server.openai_base_url, url))
    assert live == [
        ("elicited", "send ready?"),
        ("logged", "asking ready"),
        ("sampled", "ready"),
        "reply 1 to: ready (accept)",
    ]
    ran = ledger.read_text()
    with forkpoint.replay(rec.session_path) as rp:  # (both servers are gone)
        assert asyncio.run(run(server.openai_base_url, url)) == live
    assert ledger.read_text() == ran == f"started {transport}\nask ready\n"
    assert rp.report()["reproduced"], rp.report()
    session = forkpoint.Session.load(rec.session_path)
    assert len(session.by_type("model_call")) == 1
    notes = session.by_type("note")  # type: ignore[call-overload]
    assert [n for n in notes if "unrecorded_connections" in n["data"]] == []
    (ask,) = [e for e in session.by_type("tool_call") if e["tool"] == "ask"]
    # In the order they came: the log message may come on another stream than the requests over
    # streamable HTTP (seen after the sampling request once), the requests one after the other.
    methods = [m["method"] for m in ask["mcp"]["received"]]
    assert sorted(methods) == ["elicitation/create", "notifications/message", "sampling/createMessage"]
    assert methods.index("sampling/createMessage") < methods.index("elicitation/create"), methods
    shown = io.StringIO()
    render(session, Console(file=shown, width=200))
    assert f"the server sent meanwhile: {', '.join(methods)}" in shown.getvalue()


@pytest.mark.slow
def test_server_messages_while_several_requests_are_in_flight_make_the_verdict_not_certain(
    tmp_path: Path,
) -> None:
    """Two tool calls at once (asyncio.gather): what the server sends meanwhile does not say which
    request it came for, so it is kept with the latest one in flight and handed back when that one
    is served, maybe in another order than it came. The replay said a plain "replay ok"; now the
    messages are marked shared and the verdict is "ok, but not certain", naming the calls."""
    ledger = tmp_path / "ledger.log"

    async def run(base_url: str) -> list[Any]:
        seen: list[Any] = []
        callbacks = client_callbacks(base_url, seen)

        async def progress(done: float, total: float | None, message: str | None) -> None:
            seen.append(("progress", message))

        params = StdioServerParameters(command=sys.executable, args=[str(SERVER_SCRIPT), str(ledger)])
        async with stdio_client(params) as (read, write), ClientSession(read, write, **callbacks) as session:
            await session.initialize()
            results = await asyncio.gather(
                session.call_tool("ask", {"question": "ready"}),
                session.call_tool("count", {"n": 2}, progress_callback=progress),
            )
        return [sorted(seen), [dump(r)["content"] for r in results]]

    with LocalServer() as server:
        with forkpoint.record(store=tmp_path / "store") as rec:
            live = asyncio.run(run(server.openai_base_url))
        assert live[0] == [
            ("elicited", "send ready?"),
            ("logged", "asking ready"),
            ("progress", "step 1"),
            ("progress", "step 2"),
            ("sampled", "ready"),
        ]
        with forkpoint.replay(rec.session_path) as rp:
            assert asyncio.run(run(server.openai_base_url)) == live
    report = rp.report()
    assert report["reproduced"], report
    # (the requests in flight when the server spoke: the two calls, or the tools/list the client
    # sends meanwhile to validate a result, whichever was the latest: it varies from run to run)
    requests = {e["seq"] for e in forkpoint.Session.load(rec.session_path).by_type("tool_call") if "mcp" in e}
    assert report["mcp_shared"] and set(report["mcp_shared"]) <= requests
    line = summary_line(report)
    assert line.startswith("replay ok, but not certain: an MCP server sent messages"), line
    assert f"(seq {', '.join(map(str, report['mcp_shared']))})" in line


@pytest.mark.slow
def test_two_servers_asked_the_same_tool_at_once_each_get_their_own_answers_on_replay(tmp_path: Path) -> None:
    """Two servers (alpha, beta), each with a tool ``lookup``, asked the same lookup at once: the
    server was in no match key, so the two ``initialize`` requests (sent before either server named
    itself) and the two lookups were identical calls answered differently, and the replay said "ok,
    but not certain" of both pairs. Now a request's key has its server's name, and its transport
    (the server's command line) tells the two ``initialize`` requests apart: "replay ok"."""
    ledger = tmp_path / "ledger.log"

    async def run() -> list[str]:
        return list(await asyncio.gather(lookup_x(ledger, "alpha"), lookup_x(ledger, "beta")))

    with forkpoint.record(store=tmp_path / "store") as rec:
        live = asyncio.run(run())
    assert live == ["alpha has x", "beta has x"]
    calls = forkpoint.Session.load(rec.session_path).by_type("tool_call")
    assert {(e["tool"], e["mcp"]["server"]) for e in calls} >= {("lookup", "alpha"), ("lookup", "beta")}
    assert {e["mcp"]["via"].rsplit(" ", 1)[-1] for e in calls} == {"--name=alpha", "--name=beta"}
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(run()) == live
    report = rp.report()
    assert summary_line(report).startswith("replay ok: "), summary_line(report)


@pytest.mark.slow
def test_a_server_asked_once_more_is_not_served_another_servers_session(tmp_path: Path) -> None:
    """Recorded: servers alpha and beta each asked ``lookup``. A replay whose program opens beta
    twice was served beta's ``initialize``, then alpha's for the second (identical requests, the
    transport only a preference), so the second session was alpha's and its lookup answered
    "alpha has x" where a live run says "beta has x", under "replay ok". A transport the recording
    told its ``initialize`` apart by is served its own only: the second is a divergence."""
    ledger = tmp_path / "ledger.log"

    async def run(names: list[str]) -> list[str]:
        return [await lookup_x(ledger, name) for name in names]

    with forkpoint.record(store=tmp_path / "store") as rec:
        assert asyncio.run(run(["alpha", "beta"])) == ["alpha has x", "beta has x"]
    with forkpoint.replay(rec.session_path) as rp, pytest.raises(BaseException) as raised:
        asyncio.run(run(["beta", "beta"]))
    report = rp.report()
    assert not report["reproduced"], raised.value
    assert "--name=beta were already served" in report["divergence"]["reason"], report["divergence"]


@pytest.mark.slow
def test_the_progress_of_calls_in_flight_at_once_is_kept_with_the_call_its_token_names(
    tmp_path: Path,
) -> None:
    """Two tools reporting progress at once: the progress notifications the session hands its
    message handler were kept with whichever request was in flight latest, marked shared, so a
    replay handed one call's progress in the other's turn and said "not certain: which each came for
    cannot be told". Now each is kept with the request its ``progressToken`` names: every call's
    handler and callback get their own progress again, in order, and the verdict says only that the
    two calls' messages are not interleaved as they came."""
    ledger = tmp_path / "ledger.log"

    async def run() -> dict[str, list[Any]]:
        seen: dict[str, list[Any]] = {}

        async def handled(message: Any) -> None:
            if isinstance(message, types.ProgressNotification):
                seen.setdefault(f"token {message.params.progress_token}", []).append(message.params.message)

        def progress(tag: str) -> Any:
            async def progressed(done: float, total: float | None, message: str | None) -> None:
                seen.setdefault(tag, []).append(message)

            return progressed

        params = StdioServerParameters(command=sys.executable, args=[str(SERVER_SCRIPT), str(ledger)])
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, message_handler=handled) as s,
        ):
            await s.initialize()
            await asyncio.gather(
                s.call_tool("count", {"n": 3}, progress_callback=progress("three")),
                s.call_tool("count", {"n": 2}, progress_callback=progress("two")),
            )
        return seen

    with forkpoint.record(store=tmp_path / "store") as rec:
        live = asyncio.run(run())
    assert live["three"] == ["step 1", "step 2", "step 3"] and live["two"] == ["step 1", "step 2"], live
    counts = [
        e for e in forkpoint.Session.load(rec.session_path).by_type("tool_call") if e["tool"] == "count"
    ]
    for call in counts:  # (each call's own progress only: the handler's copies have its token)
        received = call["mcp"]["received"]
        assert {m["params"]["total"] for m in received} == {call["args"]["n"]}, received
        assert not any(m.get("shared") for m in received), received
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(run()) == live
    report = rp.report()
    assert report["reproduced"] and not report["mcp_shared"], report
    line = summary_line(report)
    assert "which each came for cannot be told" not in line, line
    assert "not interleaved with the other requests' messages and results as they came" in line, line


@pytest.mark.slow
def test_listings_count_only_an_mcp_tools_call_as_a_tool_call(tmp_path: Path) -> None:
    """An agent that initializes an MCP session and calls one tool (the SDK lists the tools to check
    its result): ``forkpoint ls``, ``show`` and the HTML page counted or labelled the session's
    ``initialize`` and ``tools/list`` as tool calls (3). Now only the ``tools/call`` is one; the
    others are MCP session requests."""
    from forkpoint.html import view_model
    from forkpoint.store import info

    ledger = tmp_path / "ledger.log"

    async def run() -> None:
        params = StdioServerParameters(command=sys.executable, args=[str(SERVER_SCRIPT), str(ledger)])
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.call_tool("add", {"a": 2, "b": 3})

    with forkpoint.record(store=tmp_path / "store") as rec:
        asyncio.run(run())
    session = forkpoint.Session.load(rec.session_path)
    requests = [e["mcp"]["method"] for e in session.by_type("tool_call")]
    assert requests.count("tools/call") == 1 and {"initialize", "tools/list"} <= set(requests), requests
    assert info(rec.session_path).tool_calls == 1  # (forkpoint ls)
    stats = view_model(session)["stats"]
    assert (stats["tool_calls"], stats["mcp_requests"]) == (1, len(requests) - 1)
    shown = io.StringIO()
    render(session, Console(file=shown, width=300))
    rows = [line.split()[1:3] for line in shown.getvalue().splitlines() if line.strip().startswith("#")]
    assert ["tool", "add(a=2,"] in rows, rows
    assert any(r[0] == "mcp" and r[1].startswith("mcp:initialize(") for r in rows), rows


@pytest.mark.slow
def test_a_server_message_sent_while_no_request_is_in_flight_is_said_recorded_and_in_the_verdict(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A log message the server sends after its tool answered reaches the agent's logging callback
    with no request in flight, so no recorded call carries it and the replay cannot hand it back.
    That was silent, and the replay said a plain "replay ok" although the callback never ran; now
    the recording says it, notes it in the session, and the verdict names it."""
    ledger = tmp_path / "ledger.log"

    async def run(recording: bool) -> list[Any]:
        heard: list[Any] = []

        async def logged(params: types.LoggingMessageNotificationParams) -> None:
            heard.append(params.data)

        params = StdioServerParameters(command=sys.executable, args=[str(SERVER_SCRIPT), str(ledger)])
        async with (
            stdio_client(params) as (read, write),
            ClientSession(read, write, logging_callback=logged) as s,
        ):
            await s.initialize()
            result = await s.call_tool("kick", {})
            for _ in range(600 if recording else 0):  # (until the message came, while recording)
                if heard:
                    break
                await asyncio.sleep(0.05)
        return [result.content[0].text, heard]  # type: ignore[union-attr]

    with forkpoint.record(store=tmp_path / "store") as rec:
        assert asyncio.run(run(True)) == ["kicked", ["kicked earlier"]]
    said = capfd.readouterr().err
    assert "MCP server 'calc' sent notifications/message while no request of the agent was in flight" in said
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(run(False)) == ["kicked", []]
    report = rp.report()
    assert report["unrecorded_mcp"] == [{"server": "calc", "method": "notifications/message"}]
    line = summary_line(report)
    assert line.startswith("replay ok, but incomplete:"), line
    assert (
        "not handed to the agent's callbacks on this replay: notifications/message from MCP server 'calc'"
        in line
    )


@pytest.mark.slow
def test_a_request_sent_past_send_request_is_said_recorded_and_refused_on_replay_not_waited_for(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """mcp 2.x's ``Client.listen`` sends its ``subscriptions/listen`` request through the session's
    dispatcher, not ``ClientSession.send_request``: it was not recorded, nothing said so, and a
    replay waited for the server's acknowledgment forever (no server answers a replay's session;
    one on standby hears nothing until the replay goes live), where the live run had it at once.
    Now the recording says it and notes it, a replay answers the request at once with an error
    naming it, and the verdict names it."""
    ledger = tmp_path / "ledger.log"

    async def run() -> tuple[Any, Any]:
        params = StdioServerParameters(command=sys.executable, args=[str(SERVER_SCRIPT), str(ledger)])
        async with Client(params) as client:
            try:
                async with client.listen(tools_list_changed=True) as sub:
                    listened: Any = sub.honored.tools_list_changed
            except MCPError as exc:
                listened = exc.error.message
            return listened, dump(await client.call_tool("add", {"a": 2, "b": 3}))

    with forkpoint.record(store=tmp_path / "store") as rec:
        live = asyncio.run(asyncio.wait_for(run(), 120))
    assert live[0] is True
    said = capfd.readouterr().err
    assert "MCP request subscriptions/listen to server 'calc' was not recorded" in said, said
    for options in ({}, {"on_divergence": "live"}):
        with forkpoint.replay(rec.session_path, **options) as rp:
            replayed = asyncio.run(asyncio.wait_for(run(), 60))  # a hang fails as a TimeoutError
        assert "subscriptions/listen" in replayed[0] and "not recorded" in replayed[0], replayed
        assert replayed[1] == live[1]
        report = rp.report()
        assert report["unrecorded_mcp"] == [
            {"server": "calc", "method": "subscriptions/listen", "request": True}
        ]
        line = summary_line(report)
        assert "subscriptions/listen to MCP server 'calc'" in line, line
        assert not line.startswith("replay ok:"), line
    # (the replay that may go live started the server on standby; neither asked it anything)
    assert ledger.read_text() == "started stdio\nadd 2 3\nstarted stdio\n"


@pytest.mark.slow
def test_a_ping_is_not_said_to_be_a_request_forkpoint_did_not_record(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A ``ping`` goes to the server past what forkpoint records, as ``subscriptions/listen`` does,
    but a replay answers it (its answer is empty): the recording does not say it unrecorded, and
    the replay is a plain 'replay ok'."""
    ledger = tmp_path / "ledger.log"

    async def run() -> Any:
        async with connect("stdio", ledger, None) as session:
            await session.initialize()
            await session.send_ping()
            return dump(await session.call_tool("add", {"a": 2, "b": 3}))

    with forkpoint.record(store=tmp_path / "store") as rec:
        live = asyncio.run(asyncio.wait_for(run(), 120))
    said = capfd.readouterr().err
    assert "ping" not in said, said
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(asyncio.wait_for(run(), 60)) == live
    assert summary_line(rp.report()).startswith("replay ok:"), summary_line(rp.report())


@pytest.mark.slow
def test_the_answers_a_tool_call_retries_with_are_part_of_its_match_key(tmp_path: Path) -> None:
    """Under protocol 2026-07-28 a server asks for input by answering ``input_required``; the
    client asks the user (its elicitation callback) and calls the tool again with the answers
    (``inputResponses``). Those answers were left out of the call's args: a replay whose user
    answered no was served the recorded "removed db" under "replay ok". Now they are in the args
    (``$inputResponses``), and another answer diverges there."""
    pytest.importorskip("mcp.server.mcpserver.resolve")
    ledger = tmp_path / "ledger.log"

    async def run(ok: bool) -> str:
        async def answer(context: Any, params: Any) -> types.ElicitResult:
            return types.ElicitResult(action="accept", content={"ok": ok})

        params = StdioServerParameters(command=sys.executable, args=[str(SERVER_SCRIPT), str(ledger)])
        async with Client(params, elicitation_callback=answer) as client:
            return str(dump(await client.call_tool("remove", {"what": "db"}))["content"][0]["text"])

    with forkpoint.record(store=tmp_path / "store") as rec:
        assert asyncio.run(run(True)) == "removed db"
    ran = ledger.read_text()
    calls = [
        e for e in forkpoint.Session.load(rec.session_path).by_type("tool_call") if e["tool"] == "remove"
    ]
    assert [sorted(e["args"]) for e in calls] == [["what"], ["$inputResponses", "$requestState", "what"]]
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(run(True)) == "removed db"
    assert rp.report()["reproduced"], rp.report()
    with forkpoint.replay(rec.session_path) as rp, pytest.raises(ExceptionGroup) as raised:
        asyncio.run(run(False))  # (through the session's task group)
    assert raised.group_contains(forkpoint.Divergence)
    divergence = rp.report()["divergence"]
    assert divergence["name"] == "remove"
    assert [c["path"] for c in divergence["diff"]] == [
        "$.args['$inputResponses']['__main__:ask_ok'].content.ok"
    ]
    assert ledger.read_text() == ran == "started stdio\nremove db True\n"


AGENT_SCRIPT = """
import asyncio, sys
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main():
    params = StdioServerParameters(command=sys.executable, args=sys.argv[1:])
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("add", {"a": 2, "b": 3})
        print(type(result).__name__, result.structured_content)


asyncio.run(main())
"""


@pytest.mark.slow
def test_forkpoint_record_and_replay_an_mcp_agent_from_the_command_line(tmp_path: Path) -> None:
    """``forkpoint record -- python agent.py`` and ``forkpoint replay last``, no change to the agent:
    the integration patches the mcp modules as the agent imports them."""
    script, ledger = tmp_path / "agent.py", tmp_path / "ledger.log"
    script.write_text(AGENT_SCRIPT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-c", "from forkpoint.cli import main; main()", *args]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    rec = cli(
        "record", "--store", "store", "--", sys.executable, str(script), str(SERVER_SCRIPT), str(ledger)
    )
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout == "CallToolResult {'result': 5}\n", rec.stderr
    # (initialize and tools/list are the session's requests, no tool the agent called: it said "3 tool calls")
    assert "(0 model calls, 1 tool call, 2 MCP session requests)" in rec.stderr, rec.stderr
    ran = ledger.read_text()
    rep = cli("replay", "last", "--store", "store")
    assert rep.returncode == 0, rep.stderr
    assert rep.stdout == rec.stdout and "replay ok" in rep.stderr
    assert ledger.read_text() == ran == "started stdio\nadd 2 3\n"


# --------------------------------------------------------------------------- frameworks over MCP


def stdio_params(ledger: Path) -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(SERVER_SCRIPT), str(ledger)]}


async def langgraph_agent(base_url: str, ledger: Path) -> str:
    """LangGraph's prebuilt agent with the MCP server's tools from langchain-mcp-adapters."""
    from langchain_mcp_adapters.client import MultiServerMCPClient
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent

    client = MultiServerMCPClient({"calc": {**stdio_params(ledger), "transport": "stdio"}})
    tools = await client.get_tools()
    model = ChatOpenAI(model="m", base_url=base_url, api_key=API_KEY, max_retries=0)
    out = await create_react_agent(model, tools).ainvoke({"messages": [("user", "What is 2 + 3?")]})
    return str(out["messages"][-1].content)


async def agents_sdk_agent(base_url: str, ledger: Path) -> str:
    """An OpenAI Agents SDK agent with ``mcp_servers=[MCPServerStdio(...)]``."""
    from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
    from agents.mcp import MCPServerStdio

    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key=API_KEY, max_retries=0)
    async with MCPServerStdio(params=stdio_params(ledger)) as server:
        sdk_agent = Agent(
            name="calc",
            model=OpenAIChatCompletionsModel(model="m", openai_client=client),
            mcp_servers=[server],
        )
        return str((await Runner.run(sdk_agent, "What is 2 + 3?")).final_output)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
@pytest.mark.parametrize("framework", ["langgraph", "openai-agents"])
def test_frameworks_reaching_mcp_through_the_session_are_recorded_once(
    framework: str, tmp_path: Path
) -> None:
    """langchain-mcp-adapters and the Agents SDK's MCP servers call the MCP tool through
    ``ClientSession.call_tool``; their own integrations record framework tools too. Each MCP tool
    call must be one event (the MCP request, with its full result), or the replay, which serves
    the outer one and never makes the inner one, would leave a recorded call unused."""
    # The Agents SDK is in the test extra; langchain-mcp-adapters cannot be (it requires mcp<2).
    pytest.importorskip(
        "langchain_mcp_adapters" if framework == "langgraph" else "agents",
        reason="langchain-mcp-adapters is not installed: it requires mcp<2, and the test extra installs mcp>=2"
        if framework == "langgraph"
        else None,
    )
    run = langgraph_agent if framework == "langgraph" else agents_sdk_agent
    ledger = tmp_path / "ledger.log"
    with LocalServer(chat_script=[[("add", {"a": 2, "b": 3})], "2 + 3 = 5"]) as server:
        with forkpoint.record(store=tmp_path / "store") as rec:
            live = asyncio.run(run(server.openai_base_url, ledger))
    assert live == "2 + 3 = 5"
    ran = ledger.read_text()
    assert ran.count("add 2 3") == 1
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(run(server.openai_base_url, ledger)) == live
    assert ledger.read_text() == ran
    assert rp.report()["reproduced"], rp.report()
    events = forkpoint.Session.load(rec.session_path).by_type("tool_call")
    adds = [e for e in events if e["tool"] == "add"]
    assert len(adds) == 1 and adds[0]["mcp"]["server"] == "calc" and adds[0]["mcp"]["method"] == "tools/call"
    assert all("mcp" in e for e in events)  # nothing recorded by the framework's integration


#: An MCP server a pydantic-ai test writes (``python weather_server.py LEDGER [stdio | streamable-http
#: PORT]``): one tool whose result is a pydantic model holding the time it was made, so that a tool
#: run again would answer otherwise. Every start and call is appended to the ledger.
WEATHER_SERVER = """
import datetime
import sys

from mcp.server.mcpserver import MCPServer
from pydantic import BaseModel

LEDGER, TRANSPORT = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "stdio"


def note(line):
    with open(LEDGER, "a", encoding="utf-8") as f:
        f.write(line + "\\n")


class Forecast(BaseModel):
    city: str
    temp_c: float
    issued: datetime.datetime


server = MCPServer("weather")


@server.tool()
def forecast(city: str) -> Forecast:
    \"\"\"Tomorrow's weather in a city.\"\"\"
    note(f"forecast {city}")
    return Forecast(city=city, temp_c=21.5, issued=datetime.datetime.now(datetime.UTC))


note(f"started {TRANSPORT}")
if TRANSPORT == "stdio":
    server.run()
else:
    server.run(transport=TRANSPORT, host="127.0.0.1", port=int(sys.argv[3]))
"""


async def pydantic_ai_agent(base_url: str, toolset: Any) -> tuple[str, list[Any]]:
    """A pydantic-ai agent, defaults on, whose tools are an MCP server's (``MCPToolset``), with the
    time in its instructions; its output and what each tool returned to it."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    model = OpenAIChatModel("m", provider=OpenAIProvider(base_url=base_url, api_key=API_KEY))
    pa_agent = Agent(model, toolsets=[toolset], instructions=f"Now: {datetime.datetime.now()}")
    result = await pa_agent.run("Weather in Paris tomorrow?")
    returns = [p.content for m in result.all_messages() for p in m.parts if p.part_kind == "tool-return"]
    return str(result.output), returns


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
def test_a_pydantic_ai_agent_with_an_mcp_toolset_replays_without_its_server(
    transport: str, tmp_path: Path
) -> None:
    """pydantic-ai's ``MCPToolset`` reaches MCP through fastmcp's client, which drives the mcp SDK's
    ``ClientSession``: each MCP request is recorded once, and a replay gets the same tool result
    with the server gone (stdio: its script broken; HTTP: stopped). An override of the tool's result
    reaches the model call that sees it."""
    pytest.importorskip("fastmcp", reason="pydantic-ai's MCPToolset needs pydantic-ai-slim[mcp] (fastmcp)")
    from fastmcp.client.transports import StdioTransport
    from pydantic_ai.mcp import MCPToolset

    script, ledger = tmp_path / "weather_server.py", tmp_path / "ledger.log"
    script.write_text(WEATHER_SERVER)

    def toolset(url: str | None) -> Any:
        stdio = StdioTransport(command=sys.executable, args=[str(script), str(ledger)])
        return MCPToolset(url or stdio)

    with LocalServer(chat_script=[[("forecast", {"city": "Paris"})], "Sunny, 21.5 °C"]) as model_server:
        with mcp_server(transport, ledger, script) as url:
            with forkpoint.record(store=tmp_path / "store", deterministic=[__name__]) as rec:
                live = asyncio.run(pydantic_ai_agent(model_server.openai_base_url, toolset(url)))
        sent = [m for r in model_server.requests for m in r["body"]["messages"] if m["role"] == "tool"]
    assert live[0] == "Sunny, 21.5 °C" and live[1][0]["city"] == "Paris"
    assert json.loads(sent[0]["content"]) == live[1][0]
    ran = ledger.read_text()
    assert ran == f"started {transport}\nforecast Paris\n"
    script.write_text("import sys\nopen(sys.argv[1], 'a').write('started on replay\\n')\nsys.exit(1)\n")

    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(pydantic_ai_agent(model_server.openai_base_url, toolset(url))) == live
    assert summary_line(rp.report()).startswith("replay ok:"), rp.report()
    assert ledger.read_text() == ran
    events = forkpoint.Session.load(rec.session_path).by_type("tool_call")
    forecasts = [e for e in events if e["tool"] == "forecast"]
    assert len(forecasts) == 1
    # (via: the stdio server's command line, or the HTTP server's URL: what the session was opened on)
    assert forecasts[0]["mcp"] == {
        "server": "weather",
        "method": "tools/call",
        "via": forecasts[0]["mcp"]["via"],
    }
    assert str(url if transport == "streamable-http" else script) in forecasts[0]["mcp"]["via"]
    assert all("mcp" in e for e in events)  # (pydantic-ai's own integration left the MCP tool alone)

    frost = {"city": "Paris", "temp_c": -5.0, "issued": live[1][0]["issued"]}
    answer = json.dumps(
        {"content": [{"type": "text", "text": json.dumps(frost)}], "structuredContent": frost}
    )
    with (
        pytest.raises(forkpoint.Divergence),
        forkpoint.replay(rec.session_path, overrides=[f"tool:forecast.result={answer}"]) as whatif,
    ):
        asyncio.run(pydantic_ai_agent(model_server.openai_base_url, toolset(url)))
    (changed,) = whatif.report()["divergence"]["diff"]
    assert json.loads(changed["actual"]) == frost and changed["path"].endswith(".content")
    assert ledger.read_text() == ran


@pytest.mark.slow
def test_the_trace_context_a_client_adds_to_an_mcp_request_is_no_part_of_what_it_asks(
    tmp_path: Path,
) -> None:
    """fastmcp's client (under pydantic-ai's ``MCPToolset``) puts the current OpenTelemetry trace
    context in each request's ``_meta`` (``traceparent``, ``tracestate``): new in every run, as an
    HTTP request's trace headers, which the match key leaves out. A resource read while the agent
    served a traced request was recorded with it, and its replay diverged on the trace id."""
    pytest.importorskip("fastmcp", reason="pydantic-ai's MCPToolset needs pydantic-ai-slim[mcp] (fastmcp)")
    from fastmcp.client.transports import StdioTransport
    from opentelemetry import context, propagate
    from pydantic_ai.mcp import MCPToolset

    ledger = tmp_path / "ledger.log"

    async def read() -> Any:
        incoming = {
            "traceparent": f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01",
            "tracestate": f"vendor={os.urandom(4).hex()}",
        }
        token = context.attach(propagate.extract(incoming))  # (the traced request it serves)
        try:
            toolset = MCPToolset(
                StdioTransport(command=sys.executable, args=[str(SERVER_SCRIPT), str(ledger)])
            )
            async with toolset:
                return await toolset.read_resource("notes://today")
        finally:
            context.detach(token)

    with forkpoint.record(store=tmp_path / "store") as rec:
        live = asyncio.run(read())
    assert live == "buy milk"
    ran = ledger.read_text()
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(read()) == live
    assert rp.report()["reproduced"], rp.report()
    assert ledger.read_text() == ran == "started stdio\nread notes://today\n"
    (event,) = [
        e for e in forkpoint.Session.load(rec.session_path).by_type("tool_call") if "uri" in e["args"]
    ]
    assert event["args"] == {"uri": "notes://today"}


def test_uninstalling_gives_the_session_back_its_own_methods() -> None:
    """Uninstalling the integrations puts back what ``ClientSession`` had: in mcp 2.x its own
    ``send_request`` (and ``send_discover``); in 1.x, which inherits ``send_request`` from
    BaseSession, the inherited one shows again (the attribute is removed, not set to None)."""
    from forkpoint import integrations

    integrations.install()
    try:
        wrappers = {
            name: vars(ClientSession)[name]
            for name in ("send_request", "send_notification", "send_discover")
            if name in vars(ClientSession)
        }
        assert "send_request" in wrappers
        assert all(getattr(w, "__forkpoint_integration__", False) for w in wrappers.values())
        integrations.uninstall()
        for name, wrapper in wrappers.items():
            assert getattr(ClientSession, name) is wrapper.__wrapped__, name
    finally:
        integrations.install()


def test_concurrent_agents_sdk_runs_asking_the_same_mcp_tool_each_get_their_own_answer_on_replay(
    tmp_path: Path, server: Any
) -> None:
    """Two Agents SDK runs gathered on one loop, sharing one MCP server, asked for the same roll
    (a counter on the server answers), answered differently (run a first); replayed, b asked first
    and got a's answer: the MCP request is recorded by the MCP integration, which the model's id
    for the call (``ToolContext.tool_call_id``) did not reach. Now the Agents SDK hands it on."""
    agents = pytest.importorskip("agents")
    from agents.mcp import MCPServerStdio

    from tests.integrations.rolls import asked_a_then_b, replayed_ok, roll_then_say

    agents.set_tracing_disabled(True)
    server.route("/v1/chat/completions", roll_then_say)
    ledger = tmp_path / "ledger.log"

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
        client = AsyncOpenAI(base_url=server.openai_base_url, api_key=API_KEY, max_retries=0)
        async with MCPServerStdio(params=stdio_params(ledger)) as calc:  # type: ignore[arg-type]
            roller = agents.Agent(
                name="roller",
                model=agents.OpenAIChatCompletionsModel(model="m", openai_client=client),
                mcp_servers=[calc],
            )
            done = await asyncio.gather(
                *(
                    agents.Runner.run(roller, n, hooks=Turns(turns[n], turns["b" if n == "a" else "a"]))
                    for n in "ab"
                )
            )
        return {n: r.final_output for n, r in zip("ab", done, strict=True)}

    with forkpoint.record(store=tmp_path / "store") as rec:
        live = asyncio.run(runs("a"))
    rolls = [t for t in forkpoint.Session.load(rec.session_path).by_type("tool_call") if t["tool"] == "roll"]
    assert asked_a_then_b(live) and len({json.dumps(r["result"]) for r in rolls}) == 2, rolls
    assert all(r.get("call_id") for r in rolls), rolls
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(runs("b")) == live
    assert replayed_ok(rp.report()), summary_line(rp.report())


def test_concurrent_strands_agents_asking_the_same_mcp_tool_each_get_their_own_answer_on_replay(
    tmp_path: Path, server: Any
) -> None:
    """Two strands agents gathered on one loop, sharing one ``MCPClient``, asked for the same roll
    (a counter on the server answers), answered differently (run a first); replayed, b asked first
    and got a's answer: the client's ``tool_use_id`` did not reach the MCP request's record."""
    pytest.importorskip("strands")
    from mcp import StdioServerParameters
    from strands import Agent
    from strands.hooks import AfterToolCallEvent, BeforeToolCallEvent
    from strands.models.openai import OpenAIModel
    from strands.tools.mcp import MCPClient

    from tests.integrations.rolls import asked_a_then_b, replayed_ok, roll_then_say

    server.route("/v1/chat/completions", roll_then_say)
    ledger = tmp_path / "ledger.log"

    def runs(first: str) -> dict[str, Any]:
        calc = MCPClient(lambda: stdio_client(StdioServerParameters(**stdio_params(ledger))))

        async def both(tools: list[Any]) -> dict[str, Any]:
            turns = {"a": asyncio.Event(), "b": asyncio.Event()}
            turns[first].set()

            async def run(name: str, then: str) -> str:
                model = OpenAIModel(
                    client_args={"base_url": server.openai_base_url, "api_key": API_KEY, "max_retries": 0},
                    model_id="m",
                )
                agent = Agent(model=model, tools=tools, callback_handler=None)

                async def mine(event: Any) -> None:  # (this run calls its tool at its turn)
                    await turns[name].wait()

                async def done(event: Any) -> None:
                    turns[then].set()

                agent.hooks.add_callback(BeforeToolCallEvent, mine)
                agent.hooks.add_callback(AfterToolCallEvent, done)
                return str(await agent.invoke_async(name)).strip()

            return dict(zip("ab", await asyncio.gather(run("a", "b"), run("b", "a")), strict=True))

        with calc:
            return asyncio.run(both(calc.list_tools_sync()))

    with forkpoint.record(store=tmp_path / "store") as rec:
        live = runs("a")
    rolls = [t for t in forkpoint.Session.load(rec.session_path).by_type("tool_call") if t["tool"] == "roll"]
    assert asked_a_then_b(live) and len({json.dumps(r["result"]) for r in rolls}) == 2, rolls
    assert all(r.get("call_id") for r in rolls), rolls
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        assert runs("b") == live
    assert replayed_ok(rp.report()), summary_line(rp.report())
