"""Activation of forkpoint inside a process started by the CLI, driven by environment variables.

``FORKPOINT_MODE`` (``record`` or ``replay``), ``FORKPOINT_SESSION`` (session directory),
``FORKPOINT_TOOLS`` (comma-separated ``module:qualname`` targets) and, for replay,
``FORKPOINT_REPORT`` (where to write the JSON report at exit). The variables are removed once read,
so subprocesses of the agent are not recorded or replayed (documented in docs/format.md).
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path

from . import runtime

#: Variables that carry the activation; see module docstring.
ENV_VARS = ("FORKPOINT_MODE", "FORKPOINT_SESSION", "FORKPOINT_TOOLS", "FORKPOINT_REPORT")
BOOTSTRAP_DIR = Path(__file__).parent / "_bootstrap"


def start() -> None:
    """Activate recording or replay as the environment says; do nothing when it says nothing."""
    env = {k: os.environ.pop(k, "") for k in ENV_VARS}
    mode, session = env["FORKPOINT_MODE"], env["FORKPOINT_SESSION"]
    if not mode or not session:
        return
    from .tools import install_import_hook

    if env["FORKPOINT_TOOLS"]:
        install_import_hook([t for t in env["FORKPOINT_TOOLS"].split(",") if t])
    if mode == "record":
        from .log import SessionWriter
        from .record import Recorder

        rec = Recorder(SessionWriter.open(Path(session)))
        runtime.activate(rec)
        atexit.register(rec.close)
    elif mode == "replay":
        from .log import Session
        from .replay import API_KEY_VARS, PLACEHOLDER_KEY, Replayer, install_network_guard, write_report

        rp = Replayer(Session.load(Path(session)))
        install_network_guard()
        for k in API_KEY_VARS:
            os.environ.setdefault(k, PLACEHOLDER_KEY)
        runtime.activate(rp)
        report = env["FORKPOINT_REPORT"]
        if report:
            atexit.register(lambda: write_report(Path(report), rp.report()))


def child_env(mode: str, session: Path, *, tools: list[str], report: Path | None = None) -> dict[str, str]:
    """The environment for a child process that forkpoint should record or replay."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOTSTRAP_DIR), env.get("PYTHONPATH", "")) if p)
    env["FORKPOINT_MODE"] = mode
    env["FORKPOINT_SESSION"] = str(Path(session).resolve())
    env["FORKPOINT_TOOLS"] = ",".join(tools)
    if report is not None:
        env["FORKPOINT_REPORT"] = str(report)
    return env
