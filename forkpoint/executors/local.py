"""The local executor: tasks in a pool of threads of this process.

A task spends its time waiting for a child process (the replayed program, a fork arm's agent, an
outcome command), so threads are enough to keep every core busy: ``jobs`` tasks (default: the
number of cores) run at once, each driving its own child.

A task's child runs in a process group of its own (:func:`task_child`), so Ctrl-C, SIGTERM and
SIGHUP sent to forkpoint reach every process each child started (an arm's ``sh`` and what it
runs) through :meth:`LocalExecutor.map`, which passes them on: tasks not started yet never start,
and those running end as their children do, with what they did reported.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .base import Executor, Task, run_task

if TYPE_CHECKING:  # (a record or replay runs no pool: it loads this module for in_task alone)
    import queue

#: The children the tasks of this process are running (each the leader of its process group).
_children: set[subprocess.Popen[Any]] = set()
_children_lock = threading.Lock()
#: The pools' threads now running tasks (:meth:`LocalExecutor.map`).
_task_threads: set[threading.Thread] = set()
#: The signals this process was sent while tasks ran (passed on to their children).
_interrupted: list[int] = []


def interrupted() -> signal.Signals | None:
    """The signal (SIGINT, SIGTERM, SIGHUP) this process was sent while a local executor's tasks
    ran, or None: a task's child that ended after it was stopped, not finished (its outcome is no
    measure of the run)."""
    return signal.Signals(_interrupted[-1]) if _interrupted else None


def in_task() -> bool:
    """True in a thread running an executor's task (:func:`run_as_task`): a child it starts runs in
    a process group of its own (:func:`task_child`), which a local executor passes signals on to."""
    return threading.current_thread() in _task_threads


def _run_in_pool(fn: Task, spec: dict[str, Any], stopping: list[int]) -> dict[str, Any] | None:
    """``fn(spec)`` in a thread of the pool; None, without running it, once the executor was told to
    stop (``stopping``): a thread that ended a task takes the next at once, before
    :meth:`LocalExecutor.map` could cancel it (an arm restored, to be killed as its child starts)."""
    if stopping:
        return None
    return run_as_task(fn, spec)


def run_as_task(fn: Task, spec: dict[str, Any]) -> dict[str, Any]:
    """:func:`~forkpoint.executors.base.run_task` as an executor's task, here or on a Ray worker: a
    child it starts runs in a process group of its own (:func:`in_task`), so stopping it (an arm's
    timeout, the task cancelled) stops everything it started, not the child alone."""
    me = threading.current_thread()
    with _children_lock:
        _task_threads.add(me)
    try:
        return run_task(fn, spec)
    finally:
        with _children_lock:
            _task_threads.discard(me)


def _done(finished: queue.SimpleQueue[int], index: int, _future: object) -> None:
    finished.put(index)


#: A task child's guard: it waits on a pipe that only the task's process writes to. The end of the
#: pipe without the line :func:`task_child` writes once the child was waited for means that process
#: died (a Ray worker killed by the OOM killer, ``forkpoint`` itself killed): the guard then stops the
#: child's process group, which would otherwise run on, orphaned (an arm's agent calling the live
#: model and writing into its folder and session after the arm was said lost). The shell started
#: leaves the guard in the background and exits: Ray kills a dead job's workers' own children, and
#: the guard must outlive them. (A background command's input is /dev/null: the pipe goes as fd 3.)
_GUARD = 'exec 3<&0; { read -r _ <&3 || kill -s KILL -- "-$1"; } >/dev/null 2>&1 & exit 0'
#: The guard of each child in :data:`_children`.
_guards: dict[subprocess.Popen[Any], subprocess.Popen[bytes]] = {}


def _guard(proc: subprocess.Popen[Any]) -> subprocess.Popen[bytes] | None:
    try:
        guard = subprocess.Popen(
            ["/bin/sh", "-c", _GUARD, "forkpoint-guard", str(proc.pid)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            # (out of the task's process group: whatever stops that one must not end the guard too)
            start_new_session=True,
        )
    except OSError:  # (no process left to start: the child runs unguarded, as it always did)
        return None
    guard.wait()  # (the shell that left it running)
    return guard


def _release(guard: subprocess.Popen[bytes]) -> None:
    assert guard.stdin is not None
    try:
        guard.stdin.write(b"done\n")
        guard.stdin.close()
    except BrokenPipeError:  # (it was killed: nothing to release)
        pass


def task_child(proc: subprocess.Popen[Any], *, done: bool = False) -> None:
    """Keep track of ``proc``, a task's child started in a session of its own, until ``done``. A
    child started after the executor passed a signal on (its task was running, restoring a
    checkpoint say, or the child ran before its thread got here) gets that signal now: it would
    otherwise run to its end, and forkpoint wait for it. Until ``done``, a guard (:data:`_GUARD`)
    stops the child's process group if this process dies."""
    if done:
        with _children_lock:
            _children.discard(proc)
            guard = _guards.pop(proc, None)
        if guard is not None:
            _release(guard)
        return
    guard = _guard(proc)
    with _children_lock:
        _children.add(proc)
        if guard is not None:
            _guards[proc] = guard
        # (under the lock: a signal handled after this finds the child in _children instead)
        late = _interrupted[-1] if _interrupted else None
    if late is not None:
        try:
            os.killpg(proc.pid, late)
        except (ProcessLookupError, PermissionError):
            pass


def _signal_children(signum: int) -> None:
    with _children_lock:
        children = list(_children)
    for proc in children:
        try:
            os.killpg(proc.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


class LocalExecutor(Executor):
    """Run tasks on this machine, ``jobs`` at a time (default: ``os.cpu_count()``)."""

    name = "local"

    def __init__(self, address: str | None = None, *, jobs: int | None = None) -> None:
        if address:
            from ..errors import UsageError

            raise UsageError(f"--executor local:{address}: the local executor takes no address")
        self.workers = max(1, jobs or os.cpu_count() or 1)

    def map(self, fn: Task, specs: Sequence[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
        # (here: `forkpoint record` and `replay` import this module for in_task alone, and
        # concurrent.futures loads logging: ~3.5 ms of their start)
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="forkpoint-task")
        stopping: list[int] = []
        _interrupted.clear()  # (a signal an earlier map passed on says nothing of these tasks)

        def stop(signum: int, _frame: object) -> None:
            stopping.append(signum)
            _interrupted.append(signum)
            _signal_children(signum)

        old = {}
        if threading.current_thread() is threading.main_thread():
            old = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        try:
            futures = [pool.submit(_run_in_pool, fn, spec, stopping) for spec in specs]
            # Each future says when it is done (or cancelled) here: waiting on the set of pending
            # futures instead costs a pass over all of them per result, quadratic in a large check.
            import queue

            finished: queue.SimpleQueue[int] = queue.SimpleQueue()
            for i, future in enumerate(futures):
                future.add_done_callback(functools.partial(_done, finished, i))
            left, cancelled = len(futures), False
            while left:
                if stopping and not cancelled:
                    # Tasks not started never start (a cancelled future is done: it comes through
                    # `finished` too); the running ones end with their children.
                    cancelled = True
                    for future in futures:
                        future.cancel()
                try:
                    i = finished.get(timeout=0.5)
                except queue.Empty:
                    continue
                left -= 1
                result = None if futures[i].cancelled() else futures[i].result()
                if result is not None:  # (None: it never started)
                    yield i, result
        finally:
            # The caller stopped reading (or an error): tasks not started never start; the running
            # ones finish.
            pool.shutdown(wait=True, cancel_futures=True)
            for sig, handler in old.items():
                signal.signal(sig, handler)
