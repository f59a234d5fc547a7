"""The active runtime: which recorder or replayer, if any, the capture hooks report to.

One runtime is active per process at a time (recording and replaying at once is a later feature:
per-kind sources). The capture hooks (HTTP clients, tool wrappers) are installed once and do nothing
but call through while no runtime is active.
"""

from __future__ import annotations

import contextvars
import itertools
import threading
import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .record import Recorder
    from .replay import Replayer

_lock = threading.Lock()
_active: Recorder | Replayer | None = None

#: The span the code running now belongs to (a tool call's span while its body runs).
current_span: contextvars.ContextVar[str | None] = contextvars.ContextVar("forkpoint_span", default=None)


_sent_lock = threading.Lock()
_sent_counters: weakref.WeakKeyDictionary[Any, Iterator[int]] = weakref.WeakKeyDictionary()


def next_sent(rt: Recorder | Replayer) -> int:
    """1, 2, 3… per runtime: the order in which its calls (model and tool) were *started*.

    Events are written when a call ends; this ordinal lets a replay answer identical concurrent
    calls in the order they began (see :func:`forkpoint.match.in_send_order`)."""
    with _sent_lock:
        counter = _sent_counters.get(rt)
        if counter is None:
            counter = _sent_counters[rt] = itertools.count(1)
        return next(counter)


class ForkpointError(Exception):
    """Base class of errors forkpoint raises on purpose."""


def active() -> Recorder | Replayer | None:
    """The active recorder or replayer, or None."""
    return _active


def activate(rt: Recorder | Replayer) -> None:
    """Make ``rt`` the active runtime. Raises :class:`ForkpointError` if another one is active."""
    global _active
    with _lock:
        if _active is not None and _active is not rt:
            raise ForkpointError(
                f"a forkpoint {_active.mode} is already active in this process; "
                "finish it before starting another"
            )
        from . import capture, integrations

        capture.install()
        integrations.install()  # framework tool integrations: pydantic-ai, OpenAI Agents SDK, google-genai
        _active = rt


def deactivate(rt: Recorder | Replayer) -> None:
    """Clear the active runtime if it is ``rt``."""
    global _active
    with _lock:
        if _active is rt:
            _active = None
