"""Stainless-generated SDKs (openai, anthropic, and others built the same way): the order of a fresh
async client's first requests, and no retry wait after a failure served from the recording.

**Order.** Patched: ``<sdk>._base_client.AsyncAPIClient.request``. On its first request an async
client looks up the platform for its telemetry headers in a worker thread (``await
asyncify(get_platform)()``). Requests gathered at once on a fresh client each take that hop, and
come back from it in whatever order the threads finish: identical requests (best-of-n sampling)
would then be sent, recorded and answered on replay in an order the program does not reproduce.
While forkpoint is active the platform is looked up at once, in the caller (a few small file
reads, once per client), so every request goes on in the order it was made, live and on replay.

**Retry waits.** Patched: ``<sdk>._base_client.BaseClient._calculate_retry_timeout``. The SDKs
sleep before a retry (``retry-after``/``retry-after-ms`` or backoff). When the failed attempt was
served from the recording, or was a divergence that stopped the replay (anthropic retries it as a
connection error), that wait is zero; the original still runs first, so the SDK reads the
same headers and draws the same jitter from ``random`` as it did live, and the run stays on its
recorded path, only faster.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from .. import runtime
from .base import Integration, replace


def patch(module: ModuleType) -> None:
    """Patch the ``_base_client`` of openai or anthropic (see the module docstring); a version whose
    internals moved raises, and the integration seam says so."""
    _patch_platform_lookup(module)
    _patch_retry_wait(module)


def patch_if_stainless(module: ModuleType) -> None:
    """Patch any other ``<sdk>._base_client`` module that looks like a Stainless one; leave others be."""
    if all(hasattr(module, name) for name in ("AsyncAPIClient", "BaseClient", "get_platform")):
        patch(module)


def _patch_platform_lookup(module: ModuleType) -> None:
    cls = getattr(module, "AsyncAPIClient", None)
    get_platform = getattr(module, "get_platform", None)
    original = getattr(cls, "request", None)
    if cls is None or get_platform is None or original is None:
        raise AttributeError("no AsyncAPIClient.request / get_platform")

    @functools.wraps(original)
    async def request(self: Any, *args: Any, **kwargs: Any) -> Any:
        if runtime.active() is not None and getattr(self, "_platform", False) is None:
            self._platform = get_platform()
        return await original(self, *args, **kwargs)

    replace(cls, "request", request)


def _patch_retry_wait(module: ModuleType) -> None:
    base = getattr(module, "BaseClient", None)
    original = getattr(base, "_calculate_retry_timeout", None)
    if base is None or not callable(original):
        return

    @functools.wraps(original)
    def _calculate_retry_timeout(self: Any, *args: Any, **kwargs: Any) -> Any:
        timeout = original(self, *args, **kwargs)
        rt = runtime.active()
        replaying = rt is not None and rt.mode == "replay"
        served = runtime.served_from_recording.get() and replaying
        # (a divergence the SDK took for a connection error: no wait, its retry is told the same)
        stopped = (
            replaying and getattr(rt, "divergence", None) is not None and getattr(rt, "policy", "") == "stop"
        )
        return 0.0 if served or stopped else timeout

    replace(base, "_calculate_retry_timeout", _calculate_retry_timeout)


INTEGRATION = Integration(
    "stainless",
    {"openai._base_client": patch, "anthropic._base_client": patch, "*._base_client": patch_if_stainless},
)
