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
from the layers that define them. It imports them when they are first used (PEP 562): ``import
forkpoint`` costs next to nothing, so a process that is not recorded or replayed (every Python
subprocess of a recorded command starts forkpoint's bootstrap) pays nothing for it.

PYTEST_DONT_REWRITE: under ``forkpoint record/replay -- pytest …`` this package is imported before
pytest loads its plugin entry point, which would otherwise warn that it cannot rewrite it.
"""

from __future__ import annotations

from ._lazy import exports
from ._version import __version__

# Not typing.TYPE_CHECKING: typing alone would double what importing the package costs (mypy
# treats any constant of this name the same way).
TYPE_CHECKING = False
if TYPE_CHECKING:
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

#: Each public name: (the module that defines it, its name there).
_PUBLIC: dict[str, tuple[str, str]] = {
    "checkpoint": ("forkpoint.api", "checkpoint"),
    "note": ("forkpoint.api", "note"),
    "record": ("forkpoint.api", "record"),
    "replay": ("forkpoint.api", "replay"),
    "register_encoder": ("forkpoint.capture.tools", "register_encoder"),
    "tool": ("forkpoint.capture.tools", "tool"),
    "verify": ("forkpoint.checkpoint", "verify_session"),
    "Divergence": ("forkpoint.errors", "Divergence"),
    "ForkpointError": ("forkpoint.errors", "ForkpointError"),
    "McpServerNotStarted": ("forkpoint.errors", "McpServerNotStarted"),
    "NetworkBlocked": ("forkpoint.errors", "NetworkBlocked"),
    "RecordedToolError": ("forkpoint.errors", "RecordedToolError"),
    "SessionError": ("forkpoint.errors", "SessionError"),
    "ToolResultError": ("forkpoint.errors", "ToolResultError"),
    "Session": ("forkpoint.log", "Session"),
    "ProgramRun": ("forkpoint.program", "ProgramRun"),
    "run_command": ("forkpoint.program", "run_command"),
    "Recorder": ("forkpoint.record", "Recorder"),
    "Replayer": ("forkpoint.replay", "Replayer"),
    "active": ("forkpoint.runtime", "active"),
}

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


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


#: Public functions named like a submodule (``forkpoint/record.py``, ``replay/``, ``checkpoint/``):
#: importing the submodule binds it as an attribute of the package, which would hide the function.
_SHADOWED = ("record", "replay", "checkpoint")

#: A public name, imported from its module on first use (then kept in the package).
__getattr__ = exports(__name__, _PUBLIC, shadowed=_SHADOWED)
