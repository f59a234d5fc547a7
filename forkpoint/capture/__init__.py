"""Capture: where forkpoint sees a run's calls.

* HTTP libraries, one adapter each (:data:`HTTP_ADAPTERS`): :mod:`.httpx` (httpx and httpx2, at
  their transport seam), :mod:`.urllib3` (urllib3, so ``requests`` and botocore), :mod:`.httpclient`
  (the standard library's ``http.client``, so ``urllib.request``) and :mod:`.aiohttp` (aiohttp's
  client). An adapter is a module with ``install() -> list[str]`` (patch what is importable,
  idempotent; returns what it patched), ``installed() -> list[str]`` and ``uninstall()``; it hands
  plain values to :mod:`.exchange`, which decides what is stored and how a replay answers, and
  checks the private names it patches with :mod:`.seam`. Only the adapters touch private names of
  the libraries.
* Connections no adapter recorded: :mod:`.connections` names them at the end of a recording;
  Python programs the recording started and does not record, :mod:`.programs`.
* Tool calls, at the function boundary: :mod:`.tools` (``@forkpoint.tool``, ``--tool``).

Framework tool integrations (:mod:`forkpoint.integrations`) sit beside this package and build on
:mod:`.tools`.
"""

from __future__ import annotations

import importlib
import sys
import threading
import warnings
from types import ModuleType

from . import connections, imports, programs

#: The HTTP library adapters, by module, with the libraries each patches (its ``LIBRARIES``).
HTTP_ADAPTERS = {
    "forkpoint.capture.httpx": ("httpx", "httpx2"),
    "forkpoint.capture.urllib3": ("urllib3",),
    "forkpoint.capture.httpclient": ("http.client",),
    "forkpoint.capture.aiohttp": ("aiohttp",),
}

_lock = threading.Lock()


def install() -> list[str]:
    """Install every HTTP adapter (idempotent); returns the libraries patched now.

    An adapter whose libraries are not imported yet is itself imported only when one of them is
    (:func:`.imports.when_imported`): a program that makes no HTTP request does not pay for
    forkpoint's capture layer (issue 15: start-up)."""
    done: list[str] = []
    connections.install()
    programs.install()
    with _lock:
        for name, libraries in HTTP_ADAPTERS.items():
            if name in sys.modules or any(lib in sys.modules for lib in libraries):
                done.extend(importlib.import_module(name).install())
            else:
                for lib in libraries:
                    imports.when_imported(lib, _adapter_installer(name))
    return done


def _adapter_installer(adapter: str) -> imports.ModuleHook:
    def install_adapter(library: ModuleType) -> None:
        try:
            importlib.import_module(adapter).install()  # patches the library just imported
        except Exception as exc:  # never into the program's import: it goes on, unrecorded
            warnings.warn(
                f"forkpoint cannot capture {library.__name__}: {adapter} failed ({type(exc).__name__}: {exc})",
                RuntimeWarning,
                stacklevel=2,
            )

    return install_adapter


def installed() -> list[str]:
    """The HTTP libraries captured in this process."""
    return sorted(lib for name in HTTP_ADAPTERS for lib in importlib.import_module(name).installed())


def uninstall() -> None:
    """Restore every patched library (for tests of the capture layer itself)."""
    with _lock:
        for name in HTTP_ADAPTERS:
            importlib.import_module(name).uninstall()
