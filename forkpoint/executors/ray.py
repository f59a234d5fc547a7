"""The Ray executor: every task is a Ray task (``--executor ray`` or ``ray:ADDRESS``).

``ray:ADDRESS`` connects to a running cluster (``auto``, ``HOST:PORT`` of its head, or a
``ray://HOST:PORT`` client address); plain ``ray`` connects to ``$RAY_ADDRESS`` when it is set, else
starts a Ray instance on this machine, on loopback (``jobs`` CPUs, default all), and stops it
when done. Each task
asks for one CPU. Every worker needs forkpoint and the agent's code installed, and access to the
store the tasks read and write (``docs/scale.md``). Ray is the optional extra ``forkpoint[ray]``.
Usage statistics are not sent unless ``RAY_USAGE_STATS_ENABLED`` says otherwise.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

from ..errors import UsageError
from .base import Executor, Task
from .local import run_as_task

#: What happened to a task, by the Ray error its result raised (Ray's own text says less: a worker
#: that died "unexpectedly" is one killed by a signal, the kernel's OOM killer's SIGKILL say).
LOST = {
    "WorkerCrashedError": "the worker process running it died, killed by a signal or with its node "
    "(Ray does not say which)",
    "OutOfMemoryError": "Ray killed the worker running it, its node being low on memory",
    "NodeDiedError": "the node running it died",
    "LocalRayletDiedError": "the Ray node running it stopped",
    "TaskCancelledError": "it was cancelled",
    "ObjectLostError": "its result was lost with the node that held it",
}


def _reachable(address: str | None) -> None:
    """Refuse a ``HOST:PORT`` cluster address where nothing listens (a typo in the port, a head not
    started): Ray's client retries connecting for minutes, saying nothing forkpoint can report."""
    if not address or "://" in address:  # (``auto``, Ray Client: Ray's own errors say what is wrong)
        return
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        return
    import socket

    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=10).close()
    except OSError as exc:
        raise UsageError(
            f"--executor ray: cannot connect to the Ray cluster at {address}: {exc.strerror or exc}"
        ) from None


class RayExecutor(Executor):
    """Run tasks as Ray tasks on the cluster at ``address`` (see the module docstring)."""

    name = "ray"

    def __init__(self, address: str | None = None, *, jobs: int | None = None) -> None:
        try:
            import ray as ray_module
        except ImportError:
            raise UsageError(
                "--executor ray needs Ray, which is not installed: pip install 'forkpoint[ray]'"
            ) from None
        ray: Any = ray_module
        self._ray = ray
        # forkpoint never opts anyone into telemetry: Ray's usage reports stay off unless asked for.
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        self._started = False
        if not ray.is_initialized():
            options: dict[str, Any] = {"include_dashboard": False, "logging_level": logging.WARNING}
            _reachable(address or os.environ.get("RAY_ADDRESS"))
            try:
                if address:
                    ray.init(address=address, **options)
                elif os.environ.get("RAY_ADDRESS"):
                    ray.init(**options)
                else:
                    # A Ray for this process alone: on loopback, where no other machine can join it
                    # (Ray's own switch: with it off, Ray takes 127.0.0.1 as this node's address).
                    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
                    # "local": a new instance, never a cluster some earlier `ray start` left behind.
                    ray.init(address="local", num_cpus=jobs or os.cpu_count() or 1, **options)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                where = f"the Ray cluster at {address}" if address else "Ray"
                raise UsageError(f"--executor ray: cannot connect to {where}: {exc}") from None
            self._started = True
        self.workers = max(1, int(ray.cluster_resources().get("CPU", 1)))
        # A task is not idempotent (an arm restores into its folder and writes a session): Ray's retry
        # of a task whose worker died would fail on what the first attempt left, hiding the crash. Its
        # children lead process groups, as a local task's do: an arm stopped at its timeout (or a
        # cancelled task) leaves nothing its agent started running on the worker.
        self._remote = ray.remote(num_cpus=1, max_retries=0)(run_as_task)

    def map(self, fn: Task, specs: Sequence[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
        ray = self._ray
        refs = {self._remote.remote(fn, spec): i for i, spec in enumerate(specs)}
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                for ref in done:
                    try:
                        result = ray.get(ref)
                    except ray.exceptions.RayError as exc:  # a worker died, or could not run the task
                        kind = type(exc).__name__
                        what = f"{LOST[kind]}: " if kind in LOST else ""
                        result = {"error": f"{what}the Ray task failed: {kind}: {exc}"}
                    yield refs[ref], result
        finally:
            for ref in pending:  # interrupted: what has not run yet never runs
                ray.cancel(ref)

    def close(self) -> None:
        if self._started:
            self._ray.shutdown()
            self._started = False
