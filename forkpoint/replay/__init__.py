"""Replay: serving every model and tool call of a run from its session, offline.

:mod:`.replayer` (the runtime and its policies), :mod:`.report` (divergence reports, the verdict and
its exit code), :mod:`.ledger` (processes that share one replay), :mod:`.guard` (no network),
:mod:`.whatif` (what-if runs recorded as child sessions). Starting a replay in this process is
:func:`forkpoint.api.replay`; running a recorded command under replay is
:func:`forkpoint.orchestrate.replay_command`.
"""

from typing import TYPE_CHECKING

from .._lazy import exports, from_submodules
from ..errors import Divergence, NetworkBlocked, RecordedError
from ..runtime import POLICIES, SOURCES

if TYPE_CHECKING:
    from ..providers import PLACEHOLDER_KEY
    from .guard import install_network_guard
    from .ledger import Ledger, open_ledger
    from .replayer import API_KEY_VARS, Replayer, drop_placeholder_env, label, placeholder_env, release_order
    from .report import (
        EXIT_DIVERGENCE,
        blocked_text,
        caveat,
        conclude,
        divergence,
        ended_by_override,
        format_divergence,
        merge_reports,
        problems,
        summary_line,
        unrecorded_tools,
        verdict,
        write_report,
    )
    from .whatif import create_child, end_divergence

# Imported when first used: the parent of `forkpoint replay` reads the verdict (.report) and never
# loads the replayer, the guard or what-if runs.
_SUBMODULES = {
    ".guard": ["install_network_guard"],
    ".ledger": ["Ledger", "open_ledger"],
    ".replayer": [
        "API_KEY_VARS",
        "PLACEHOLDER_KEY",
        "Replayer",
        "drop_placeholder_env",
        "label",
        "placeholder_env",
        "release_order",
    ],
    ".report": [
        "EXIT_DIVERGENCE",
        "blocked_text",
        "caveat",
        "conclude",
        "divergence",
        "ended_by_override",
        "format_divergence",
        "merge_reports",
        "problems",
        "summary_line",
        "unrecorded_tools",
        "verdict",
        "write_report",
    ],
    ".whatif": ["create_child", "end_divergence"],
}
__getattr__ = exports(__name__, from_submodules(_SUBMODULES))

__all__ = [
    "API_KEY_VARS",
    "EXIT_DIVERGENCE",
    "PLACEHOLDER_KEY",
    "POLICIES",
    "SOURCES",
    "Divergence",
    "Ledger",
    "NetworkBlocked",
    "RecordedError",
    "Replayer",
    "blocked_text",
    "caveat",
    "conclude",
    "create_child",
    "divergence",
    "drop_placeholder_env",
    "end_divergence",
    "ended_by_override",
    "format_divergence",
    "install_network_guard",
    "label",
    "merge_reports",
    "open_ledger",
    "placeholder_env",
    "problems",
    "release_order",
    "summary_line",
    "unrecorded_tools",
    "verdict",
    "write_report",
]
