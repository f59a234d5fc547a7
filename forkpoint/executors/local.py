"""The local executor: tasks in a pool of threads of this process.

A task spends its time waiting for a child process (the replayed program, a fork arm's agent, an
outcome command), so threads are enough to keep every core busy: ``jobs`` tasks (default: the
number of cores) run at once, each driving its own child.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from .base import Executor, Task, run_task


class LocalExecutor(Executor):
    """Run tasks on this machine, ``jobs`` at a time (default: ``os.cpu_count()``)."""

    name = "local"

    def __init__(self, address: str | None = None, *, jobs: int | None = None) -> None:
        if address:
            from ..errors import UsageError

            raise UsageError(f"--executor local:{address}: the local executor takes no address")
        self.workers = max(1, jobs or os.cpu_count() or 1)

    def map(self, fn: Task, specs: Sequence[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
        pool = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="forkpoint-task")
        try:
            futures: dict[Future[dict[str, Any]], int] = {
                pool.submit(run_task, fn, spec): i for i, spec in enumerate(specs)
            }
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    yield futures[future], future.result()
        finally:
            # Interrupted (Ctrl-C, or the caller stopped reading): tasks not started never start;
            # the running ones finish, as their children were told by the terminal.
            pool.shutdown(wait=True, cancel_futures=True)
