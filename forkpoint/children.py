"""Waiting on a child process: its captured output read to the end, the process stopped when a
watch gives a reason (a timeout), and what it left running with that output open not waited on
(a server in the background would be waited on forever). Used for the programs forkpoint runs
(:mod:`forkpoint.orchestrate`) and for outcome commands (:mod:`forkpoint.outcome`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

#: How long, once the child ended, forkpoint waits for what it started to close its captured output.
LEFT_OPEN_S = 2.0


def say(message: str) -> None:
    """A line for the person running forkpoint (stderr: stdout belongs to the program)."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def wait_child(
    proc: subprocess.Popen[Any],
    watch: Callable[[], str | None] | None,
    *,
    own_group: bool = False,
    what: str = "the program",
) -> tuple[Any, Any]:
    """``proc.communicate()``, stopping ``proc`` (``what`` it runs, in messages) when ``watch``
    gives a reason (a timeout; :func:`forkpoint.orchestrate.run_child`):
    SIGTERM, then SIGKILL 3 s later; with ``own_group`` (it leads a process group of its own) to
    all of its group, and what is left of the group once it ended is killed, so nothing it started
    changes its folder after it was stopped (an outcome is measured there next). Once it is
    stopped, a process it started in a session of its own (out of reach of its group's SIGKILL)
    that still holds the captured output open is not waited for: what was read is kept. So it is
    when the program ended by itself and what it left running holds its output open
    (:data:`LEFT_OPEN_S` later; with ``own_group``, that group is killed)."""
    if watch is None:
        return proc.communicate()
    stop_at: float | None = None
    ended_at: float | None = None
    while True:
        try:
            ended = proc.communicate(timeout=0.5)
        except subprocess.TimeoutExpired as exc:
            partial = exc
        else:
            if stop_at is not None and own_group:
                signal_group(proc.pid, signal.SIGKILL)
            return ended
        if stop_at is None and proc.poll() is not None:
            # The program ended, and what it started and left running (a server in the background)
            # still holds its captured output open: not waited for (it may never end), and, in a
            # group of its own, stopped, so that nothing changes its folder while an outcome is measured.
            ended_at = ended_at if ended_at is not None else time.monotonic()
            if time.monotonic() > ended_at + LEFT_OPEN_S:
                say(
                    f"forkpoint: {what} ended, and a process it started still holds its output open: "
                    + ("its process group is stopped; " if own_group else "")
                    + "not waited for"
                )
                if own_group:
                    signal_group(proc.pid, signal.SIGKILL)
                return _abandoned(proc, partial)
            continue
        if stop_at is None:
            why = watch()
            if why is not None:
                say(f"forkpoint: {why}: stopping it")
                if own_group:
                    signal_group(proc.pid, signal.SIGTERM)
                else:
                    proc.send_signal(signal.SIGTERM)
                stop_at = time.monotonic() + 3
        elif time.monotonic() > stop_at + 3 and proc.poll() is not None:
            say(
                f"forkpoint: a process {what} started outside its process group still holds its output open: "
                "not waited for"
            )
            return _abandoned(proc, partial)
        elif time.monotonic() > stop_at:
            try:  # (a child with a group of its own, an executor task's: what it started goes too)
                if os.getpgid(proc.pid) == proc.pid:
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    proc.kill()
            except ProcessLookupError:
                pass


def _abandoned(proc: subprocess.Popen[Any], partial: subprocess.TimeoutExpired) -> tuple[Any, Any]:
    """What was read of ``proc``'s captured output when ``communicate`` last timed out; its pipes,
    which a process it started still holds open, are closed: not waited on any longer."""
    out, err = _text(partial.output, proc.stdout), _text(partial.stderr, proc.stderr)
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    return out, err


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to process group ``pgid`` (gone already: nothing to do)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _text(data: bytes | str | None, pipe: Any) -> str | None:
    """What ``communicate`` had read of ``pipe`` when it timed out, as text (None: not captured)."""
    if pipe is None:
        return None
    return data.decode(errors="replace") if isinstance(data, bytes) else data or ""
