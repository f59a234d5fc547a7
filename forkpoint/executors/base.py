"""The executor interface: run one function over many task specs, somewhere, and hand back each
result as it finishes.

A task is a module-level function of forkpoint (importable by name wherever it runs, so a Ray
worker can load it) taking one spec and returning one result, both JSON data: what a task needs
from the machine it runs on (the session, the agent's code) it finds by path or store URL in its
spec, and what it leaves behind (fork arms, what-if runs) goes to the store the spec names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Any

#: A task: JSON spec in, JSON result out. It must be defined at the top level of a forkpoint module.
Task = Callable[[dict[str, Any]], dict[str, Any]]


def run_task(fn: Task, spec: dict[str, Any]) -> dict[str, Any]:
    """``fn(spec)``; an exception becomes ``{"error": "Type: message"}`` — one task that fails is
    one failed result, never the end of the others."""
    try:
        return fn(spec)
    except Exception as exc:  # reported as the task's result, with its type
        return {"error": f"{type(exc).__name__}: {exc}"}


class Executor(ABC):
    """Where tasks run. ``name`` is how ``--executor`` names it; ``workers`` how many tasks run at
    once. Use it as a context manager (or call :meth:`close`) to release what it started."""

    name: str
    workers: int

    @abstractmethod
    def map(self, fn: Task, specs: Sequence[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
        """Run ``fn`` on every spec (see :func:`run_task`); yield ``(index of the spec, result)``
        as each task finishes, in the order they finish."""

    def close(self) -> None:  # noqa: B027 - nothing to release by default
        """Release what this executor started (threads, a local Ray instance)."""

    def __enter__(self) -> Executor:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
