"""forkpoint: record AI agent sessions and replay them offline, deterministically.

Public API::

    with forkpoint.record(name="incident-42") as rec:   # every model call and @tool call is logged
        run_agent()
    with forkpoint.replay("last") as rp:                 # served from the session: no network, no tool bodies
        run_agent()
    print(rp.report())

    @forkpoint.tool
    def search(query: str) -> list[dict]: ...

PYTEST_DONT_REWRITE: under ``forkpoint record/replay -- pytest …`` this package is imported before
pytest loads its plugin entry point, which would otherwise warn that it cannot rewrite it.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .log import Session, SessionError  # noqa: E402
from .record import Recorder, record  # noqa: E402
from .replay import Divergence, NetworkBlocked, Replayer, replay  # noqa: E402
from .runtime import ForkpointError, active  # noqa: E402
from .tools import RecordedToolError, ToolResultError, register_encoder, tool  # noqa: E402


def note(text: str, **data: object) -> int | None:
    """Add a ``note`` event (free text plus JSON ``data``) to the session being recorded.

    Returns its seq, or None when nothing is being recorded.
    """
    rt = active()
    if isinstance(rt, Recorder):
        return rt.note(text, **data)
    return None


# Loaded now so that importing the submodule later cannot rebind ``forkpoint.checkpoint`` (the
# function below) to the module; use ``from forkpoint.checkpoint import ...`` for the module's API.
from . import checkpoint as _checkpoint_module  # noqa: E402, F401


def checkpoint(reason: str = "manual") -> int | None:
    """Take a checkpoint of the recorded workspace now (see :mod:`forkpoint.checkpoint`).

    Resumable unless tool calls of the last model response are still outstanding, or it is taken
    inside a tool's body (then observable). Returns its seq, or None when nothing is being recorded
    or the recording has no workspace.
    """
    rt = active()
    if isinstance(rt, Recorder):
        return rt.checkpoint(reason=reason)
    return None


__all__ = [
    "Divergence",
    "ForkpointError",
    "NetworkBlocked",
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
    "tool",
]
