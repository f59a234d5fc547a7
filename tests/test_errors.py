"""forkpoint's own exceptions cross process boundaries whole: ``multiprocessing`` pickles a worker's
exception to hand it to the process waiting for its result."""

from __future__ import annotations

import inspect
import pickle

import pytest

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


def all_classes() -> list[type[BaseException]]:
    found = [
        c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, errors.ForkpointError)
    ]
    return [*found, HeldError]


@pytest.mark.parametrize("exc", MADE, ids=lambda e: type(e).__name__)
def test_an_error_with_its_own_arguments_pickles_whole(exc: BaseException) -> None:
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc) and str(back) == str(exc)
    assert vars(back) == vars(exc)


def test_every_error_class_pickles() -> None:
    made = {type(e) for e in MADE}
    for cls in all_classes():
        exc = next((e for e in MADE if type(e) is cls), None) if cls in made else cls("what went wrong")
        back = pickle.loads(pickle.dumps(exc))
        assert type(back) is cls and str(back) == str(exc), cls
