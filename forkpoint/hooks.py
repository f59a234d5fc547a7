"""Installing the hooks a run is captured through: the HTTP library adapters
(:mod:`forkpoint.capture`), the framework integrations (:mod:`forkpoint.integrations`), the
connection watch of a recording and the network guard of a replay. Each is installed once per
process and calls straight through while no runtime is active (:mod:`forkpoint.runtime`)."""

from __future__ import annotations

from typing import Any, Literal


def install(mode: Literal["record", "replay"]) -> None:
    """Install every hook for a ``mode`` run (idempotent). Cheap: adapters and integrations are
    imported only when the library or framework they patch is."""
    import sys

    from . import capture, integrations, runtime

    capture.install()
    runtime.watch_threads()  # (when a thread was started tells racing callers apart: Replayer._raced)
    capture.programs.reset()  # (a replay notes them too, for the what-if session it records)
    if mode == "record":
        capture.connections.reset()
    integrations.install()
    from .replay import pools

    pools.install(mode)  # (a pool's results served at once, taken in the order and number they finished)

    def on_asyncio(aio: Any) -> None:
        runtime.watch_tasks(aio)  # (how its tasks are made names their callers: runtime.caller)
        pools.install_asyncio(aio, mode)  # (asyncio.wait's finished tasks, as a pool's)

    if "asyncio" in sys.modules:
        on_asyncio(sys.modules["asyncio"])
    else:  # (one callback per module: both in it)
        capture.imports.when_imported("asyncio", on_asyncio)
    if mode == "replay":
        from .replay import install_network_guard

        install_network_guard()
