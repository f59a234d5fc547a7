"""Put on PYTHONPATH by ``forkpoint record`` / ``forkpoint replay``: starts forkpoint in the agent's
interpreter before its own code runs (the way coverage and ddtrace-run bootstrap a process), then
hands over to any other ``sitecustomize`` further down ``sys.path``."""

import os
import sys

try:
    from forkpoint import _boot
except ImportError as exc:
    if os.environ.get("FORKPOINT_MODE"):
        sys.stderr.write(
            f"forkpoint: cannot import forkpoint in {sys.executable} ({exc}); install forkpoint into the "
            "agent's environment. This process is not recorded or replayed.\n"
        )
else:
    _boot.start()


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    saved = list(sys.path)
    mine = sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        import importlib

        try:
            importlib.import_module("sitecustomize")
        except ImportError:
            pass
    finally:
        sys.path[:] = saved
        if mine is not None:
            sys.modules["sitecustomize"] = mine


_chain()
