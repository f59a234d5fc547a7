"""Capture: where forkpoint sees a run's calls.

* HTTP libraries, one adapter each (:data:`HTTP_ADAPTERS`): :mod:`.httpx` (httpx and httpx2, at
  their transport seam), :mod:`.urllib3` (urllib3, so ``requests`` and botocore), :mod:`.httpclient`
  (the standard library's ``http.client``, so ``urllib.request``) and :mod:`.aiohttp` (aiohttp's
  client). An adapter is a module with ``install() -> list[str]`` (patch what is importable,
  idempotent; returns what it patched), ``installed() -> list[str]`` and ``uninstall()``; it hands
  plain values to :mod:`.exchange`, which decides what is stored and how a replay answers, and
  checks the private names it patches with :mod:`.seam`. Only the adapters touch private names of
  the libraries.
* Connections no adapter recorded: :mod:`.connections` names them at the end of a recording.
* Tool calls, at the function boundary: :mod:`.tools` (``@forkpoint.tool``, ``--tool``).

Framework tool integrations (:mod:`forkpoint.integrations`) sit beside this package and build on
:mod:`.tools`.
"""

from __future__ import annotations

import importlib
import threading

from . import connections

#: The HTTP library adapters, by module.
HTTP_ADAPTERS = (
    "forkpoint.capture.httpx",
    "forkpoint.capture.urllib3",
    "forkpoint.capture.httpclient",
    "forkpoint.capture.aiohttp",
)

_lock = threading.Lock()


def install() -> list[str]:
    """Install every HTTP adapter (idempotent); returns the libraries patched now."""
    done: list[str] = []
    connections.install()
    with _lock:
        for name in HTTP_ADAPTERS:
            done.extend(importlib.import_module(name).install())
    return done


def installed() -> list[str]:
    """The HTTP libraries captured in this process."""
    return sorted(lib for name in HTTP_ADAPTERS for lib in importlib.import_module(name).installed())


def uninstall() -> None:
    """Restore every patched library (for tests of the capture layer itself)."""
    with _lock:
        for name in HTTP_ADAPTERS:
            importlib.import_module(name).uninstall()
