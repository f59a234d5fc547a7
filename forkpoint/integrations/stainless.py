"""Stainless-generated SDKs (openai, anthropic): the first requests of a fresh async client reach
the HTTP layer in the order the program made them.

Patched: ``<sdk>._base_client.AsyncAPIClient.request``. On its first request an async client
looks up the platform for its telemetry headers in a worker thread (``await
asyncify(get_platform)()``). Requests gathered at once on a fresh client each take that hop, and
come back from it in whatever order the threads finish: identical requests (best-of-n sampling)
would then be sent, recorded and answered on replay in an order the program does not reproduce.
While forkpoint is active the platform is looked up at once, in the caller (a few small file
reads, once per client), so every request goes on in the order it was made, live and on replay.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from .. import runtime


def patch(module: ModuleType) -> None:
    """Wrap ``AsyncAPIClient.request`` of a ``<sdk>._base_client`` module (see the module docstring)."""
    cls = getattr(module, "AsyncAPIClient", None)
    get_platform = getattr(module, "get_platform", None)
    original = getattr(cls, "request", None)
    if cls is None or get_platform is None or original is None:
        raise AttributeError("no AsyncAPIClient.request / get_platform")
    if getattr(original, "__forkpoint_integration__", False):
        return

    @functools.wraps(original)
    async def request(self: Any, *args: Any, **kwargs: Any) -> Any:
        if runtime.active() is not None and getattr(self, "_platform", False) is None:
            self._platform = get_platform()
        return await original(self, *args, **kwargs)

    request.__forkpoint_integration__ = True  # type: ignore[attr-defined]
    cls.request = request
