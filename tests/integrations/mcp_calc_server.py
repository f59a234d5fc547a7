"""An MCP server for the tests, built with the mcp SDK's own server (FastMCP in 1.x, MCPServer in
2.x): six tools (one rolling a die that a counter answers, one reporting progress, one asking the
client's model and user, one logging after it answered, and in 2.x one asking the user for an argument), a resource and a prompt. Everything it does is appended to a ledger file, its
start included, so a test sees whether the server ran at all.

Run: ``python mcp_calc_server.py LEDGER [stdio | sse PORT | streamable-http PORT] [--name=NAME]``
(HTTP on 127.0.0.1 only; NAME, default ``calc``: the server's name, which ``lookup`` answers with).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Annotated

from mcp import types
from pydantic import BaseModel

try:
    from mcp.server.fastmcp import Context
    from mcp.server.fastmcp import FastMCP as Server
except ImportError:  # mcp 2.x
    from mcp.server.mcpserver import Context  # type: ignore[no-redef,assignment]
    from mcp.server.mcpserver import MCPServer as Server  # type: ignore[no-redef]

NAME = next((a.removeprefix("--name=") for a in sys.argv if a.startswith("--name=")), "calc")
argv = [a for a in sys.argv if not a.startswith("--name=")]
LEDGER = argv[1]
TRANSPORT = argv[2] if len(argv) > 2 else "stdio"
PORT = int(argv[3]) if len(argv) > 3 else 0


def note(line: str) -> None:
    with open(LEDGER, "a", encoding="utf-8") as f:
        f.write(line + "\n")


note(f"started {TRANSPORT}")
options = {"host": "127.0.0.1", "port": PORT} if TRANSPORT != "stdio" and Server.__name__ == "FastMCP" else {}
server = Server(NAME, **options)


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    note(f"add {a} {b}")
    return a + b


@server.tool()
async def lookup(key: str) -> str:
    """Look key up: this server's answer names the server."""
    note(f"lookup {key}")
    await asyncio.sleep(0.05)  # (two servers asked at once answer while both are asked)
    return f"{NAME} has {key}"


rolled = 0


@server.tool()
def roll(sides: int) -> int:
    """Roll a die: each roll one more than the one before."""
    global rolled
    note(f"roll {sides}")
    rolled += 1
    return rolled - 1


@server.tool()
def divide(a: float, b: float) -> float:
    """Divide a by b."""
    note(f"divide {a} {b}")
    if b == 0:
        raise ValueError("division by zero")
    return a / b


@server.tool()
async def count(n: int, ctx: Context) -> int:
    """Count to n, reporting progress at each step."""
    note(f"count {n}")
    for i in range(1, n + 1):
        await ctx.report_progress(i, n, f"step {i}")
    return n


class Confirmation(BaseModel):
    ok: bool


@server.tool()
async def ask(question: str, ctx: Context) -> str:
    """Ask the client's model (sampling), after a log message, then the user (elicitation)."""
    note(f"ask {question}")
    await ctx.info(f"asking {question}")
    sampled = await ctx.session.create_message(
        messages=[types.SamplingMessage(role="user", content=types.TextContent(type="text", text=question))],
        max_tokens=20,
    )
    confirmed = await ctx.elicit(f"send {question}?", Confirmation)
    return f"{sampled.content.text} ({confirmed.action})"  # type: ignore[union-attr]


later: list[asyncio.Task[None]] = []


@server.tool()
async def kick(ctx: Context) -> str:
    """Answer at once, and send a log message a moment later: while no request is in flight."""
    note("kick")
    session = ctx.session

    async def log_later() -> None:
        await asyncio.sleep(0.2)
        await session.send_log_message("info", "kicked earlier")
        note("kicked earlier")

    later.append(asyncio.get_running_loop().create_task(log_later()))
    return "kicked"


try:  # mcp 2.x: a tool whose argument the user gives (an InputRequiredResult under 2026-07-28)
    from mcp.server.mcpserver.resolve import Elicit, Resolve
except ImportError:
    Resolve = None  # type: ignore[assignment,misc]

if Resolve is not None:

    def ask_ok(what: str) -> Elicit[Confirmation]:
        return Elicit(f"remove {what}?", Confirmation)

    @server.tool()
    def remove(what: str, ok: Annotated[Confirmation, Resolve(ask_ok)]) -> str:
        """Remove what, if the user confirms."""
        note(f"remove {what} {ok.ok}")
        return f"removed {what}" if ok.ok else f"kept {what}"


@server.resource("notes://today")
def today() -> str:
    """Today's note."""
    note("read notes://today")
    return "buy milk"


@server.prompt()
def review(code: str) -> str:
    """Ask for a code review."""
    note("prompt review")
    return f"Review this code:\n{code}"


if TRANSPORT == "stdio" or Server.__name__ == "FastMCP":
    server.run(transport=TRANSPORT)  # type: ignore[arg-type]
else:
    server.run(transport=TRANSPORT, host="127.0.0.1", port=PORT)  # type: ignore[call-overload]
