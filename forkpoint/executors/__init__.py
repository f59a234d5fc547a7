"""Executors: where many replays or fork arms run (``--executor local|ray[:ADDRESS]``).

One interface (:class:`~forkpoint.executors.base.Executor`: map a task over specs, results as they
finish), one module per implementation, one line each in :data:`EXECUTORS`. This package imports
nothing of forkpoint but its errors: the tasks themselves are handed in.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import UsageError
from .base import Executor, Task, run_task
from .local import LocalExecutor

__all__ = ["EXECUTORS", "Executor", "LocalExecutor", "Task", "open_executor", "run_task"]


def _ray(address: str | None = None, *, jobs: int | None = None) -> Executor:
    from .ray import RayExecutor  # Ray is optional: imported when asked for

    return RayExecutor(address, jobs=jobs)


#: ``--executor`` names and how to make each: ``(address or None, jobs=) → Executor``.
EXECUTORS: dict[str, Callable[..., Executor]] = {
    "local": LocalExecutor,
    "ray": _ray,
}


def open_executor(spec: str = "local", *, jobs: int | None = None) -> Executor:
    """The executor ``spec`` names: ``NAME`` or ``NAME:ADDRESS`` (``local``, ``ray``,
    ``ray:auto``, ``ray:127.0.0.1:6379``, ``ray:ray://head:10001``). ``jobs`` caps the tasks run at
    once by a local executor (and the CPUs of a Ray instance started here). Raises
    :class:`~forkpoint.errors.UsageError` for an unknown name or a cluster that cannot be reached."""
    name, _, address = spec.partition(":")
    make = EXECUTORS.get(name)
    if make is None:
        raise UsageError(
            f"--executor {spec!r}: expected one of {', '.join(EXECUTORS)}, optionally NAME:ADDRESS"
        )
    return make(address or None, jobs=jobs)
