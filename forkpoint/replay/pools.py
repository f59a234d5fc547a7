"""A thread pool's results taken as they finish (``concurrent.futures.as_completed``) come back on
replay in the order they finished.

Live, a pool's calls are still running when the program starts waiting on them, and ``as_completed``
hands each future back as it finishes. Served from the recording, they finish within a millisecond
or two of one another (in the order they finished live: :func:`~forkpoint.replay.release_order`),
often all before the program waits; ``as_completed`` hands back the futures already finished in the
order of a set, which is arbitrary: an agent that sends the results on in the order it got them
would send another request (a divergence), or print another output under "replay ok". So while a
replay is active, futures already finished are handed back in the order they finished, as live.

CPython's ``as_completed`` yields finished futures through ``concurrent.futures._base.
_yield_finished_futures(fs, waiter, ref_collect)`` (3.8 to 3.13), popping them from the end of the
list ``fs``: that function, looked up at every call, is wrapped to sort ``fs`` first, which also
covers a program that imported ``as_completed`` before the replay began. Each future is stamped as
it finishes (``Future.set_result``, ``set_exception``). Where the function is not there (another
Python, a later CPython), nothing is wrapped, the order is a set's, and the replay says so on
stderr when it installs its hooks (once per process).
"""

from __future__ import annotations

import concurrent.futures._base as futures_base
import functools
import itertools
from collections.abc import Callable, Iterator
from typing import Any

from .. import runtime
from ..text import say

#: The attribute a finished future holds its place in the order futures finished in, in this process.
_FINISHED = "_forkpoint_finished"
_finishing = itertools.count()  # (next() on it is atomic under the GIL: pool threads finish at once)

#: Whether this process has said that ``as_completed``'s order cannot be held (:func:`install`).
_unheld_said = False


def install() -> None:
    """Wrap ``as_completed``'s yielding of finished futures, and stamp futures as they finish
    (idempotent; straight through while no replay is active)."""
    global _unheld_said
    real = getattr(futures_base, "_yield_finished_futures", None)
    if real is None:
        if not _unheld_said:
            _unheld_said = True
            say(
                "forkpoint: WARNING: this Python's concurrent.futures has no _yield_finished_futures: a "
                "replay cannot hand back a thread pool's finished futures (concurrent.futures.as_completed) "
                "in the order they finished live, and a program that takes results as they come may see "
                "them in another order"
            )
        return
    if getattr(real, "__forkpoint_pools__", False):
        return
    future = futures_base.Future
    for name in ("set_result", "set_exception"):
        setattr(future, name, _stamping(getattr(future, name)))

    @functools.wraps(real)
    def yielded(fs: list[Any], waiter: Any, ref_collect: Any) -> Iterator[Any]:
        rt = runtime.active()
        if rt is not None and rt.mode == "replay" and len(fs) > 1:
            fs.sort(key=_finished_at, reverse=True)  # (popped from the end: the first finished first)
        return real(fs, waiter, ref_collect)  # type: ignore[no-any-return]

    yielded.__forkpoint_pools__ = True  # type: ignore[attr-defined]
    futures_base._yield_finished_futures = yielded  # type: ignore[attr-defined]


def _stamping(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def finish(self: futures_base.Future[Any], *args: Any) -> Any:
        setattr(self, _FINISHED, next(_finishing))  # (before it is done: whoever sees it done sees it)
        return method(self, *args)

    return finish


def _finished_at(future: futures_base.Future[Any]) -> int:
    # (a future finished before this was installed, or cancelled, first: no call it stands for was served)
    return getattr(future, _FINISHED, -1)
