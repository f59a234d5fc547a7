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

    def on_futures(_futures: Any) -> None:
        from .replay import pools

        pools.install(mode)  # (a pool's results served at once, taken in the order and number they finished)

    def on_asyncio(aio: Any) -> None:
        from .replay import pools

        runtime.watch_tasks(aio)  # (how its tasks are made names their callers: runtime.caller)
        pools.install_asyncio(aio, mode)  # (asyncio.wait's finished tasks, as a pool's)

    # (when the program imports them, if ever: a program that makes no call loads nothing more;
    # one callback per module, so asyncio's does both)
    for name, then in (("concurrent.futures._base", on_futures), ("asyncio", on_asyncio)):
        if name in sys.modules:
            then(sys.modules[name])
        else:
            capture.imports.when_imported(name, then)
    if mode == "replay":
        from .replay import install_network_guard

        install_network_guard()
