"""forkpoint's own exceptions cross process boundaries whole: a ``multiprocessing`` worker's
exception is handed to the process waiting for its result (a pool that cannot rebuild it waits for
ever)."""

from __future__ import annotations

import inspect
import multiprocessing

import forkpoint.errors as errors
from forkpoint.store.retention import HeldError

REPORT = {"kind": "tool_call", "position": 2, "reason": "no recorded request has the same match key"}

#: One instance of each exception class that takes more than a message.
MADE = [
    errors.Divergence(REPORT, "replay diverged at the 3rd tool call"),
    errors.RecordedToolError("QuotaExceeded", "agent.tools", "quota of 10 calls reached"),
    errors.RecordedError({"type": "ReadTimeout", "module": "httpx", "message": "timed out"}),
    errors.ToolResultError("cannot store a socket", type_name="socket.socket", where='["conn"]'),
]


def all_errors() -> list[BaseException]:
    """An instance of every error class forkpoint raises on purpose."""
    made = {type(e): e for e in MADE}
    classes = [
        c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.ForkpointError)
    ]
    return [made.get(c) or c("what went wrong") for c in [*classes, HeldError]]


def raise_one(index: int) -> None:
    """Run in a pool's worker: raise the ``index``-th of :func:`all_errors`."""
    raise all_errors()[index]


def test_every_error_reaches_the_process_that_waits_for_a_worker_whole() -> None:
    """A Divergence raised in a pool's worker could not be rebuilt (its __init__ takes two
    arguments): the pool's result thread died and ``pool.map`` waited for ever."""
    expected = all_errors()
    with multiprocessing.get_context("fork").Pool(1) as pool:
        for i, exc in enumerate(expected):
            got = pool.apply_async(raise_one, (i,))
            try:
                got.get(timeout=20)
            except errors.ForkpointError as back:
                assert type(back) is type(exc) and str(back) == str(exc), type(exc)
                assert vars(back) == vars(exc), type(exc)
            else:
                raise AssertionError(f"{type(exc).__name__} was not raised")
