"""forkpoint: record AI agent sessions and replay them offline, deterministically.

Public API::

    with forkpoint.record(name="incident-42") as rec:   # every model call and @tool call is logged
        run_agent()
    with forkpoint.replay("last") as rp:                 # served from the session: no network, no tool bodies
        run_agent()
    print(rp.report())

    run = forkpoint.run_command(["python", "agent.py"])  # a Python command, in this process

    @forkpoint.tool
    def search(query: str) -> list[dict]: ...

The package is built in layers (``docs/design.md``); this module only re-exports the names above
from the layers that define them.

PYTEST_DONT_REWRITE: under ``forkpoint record/replay -- pytest …`` this package is imported before
pytest loads its plugin entry point, which would otherwise warn that it cannot rewrite it.
"""

from __future__ import annotations

from ._version import __version__
from .api import checkpoint, note, record, replay
from .capture.tools import register_encoder, tool
from .checkpoint import verify_session as verify
from .errors import (
    Divergence,
    ForkpointError,
    McpServerNotStarted,
    NetworkBlocked,
    RecordedToolError,
    SessionError,
    ToolResultError,
)
from .log import Session
from .program import ProgramRun, run_command
from .record import Recorder
from .replay import Replayer
from .runtime import active

__all__ = [
    "Divergence",
    "ForkpointError",
    "McpServerNotStarted",
    "NetworkBlocked",
    "ProgramRun",
    "RecordedToolError",
    "Recorder",
    "Replayer",
    "Session",
    "SessionError",
    "ToolResultError",
    "__version__",
    "active",
    "checkpoint",
    "note",
    "record",
    "register_encoder",
    "replay",
    "run_command",
    "tool",
    "verify",
]
