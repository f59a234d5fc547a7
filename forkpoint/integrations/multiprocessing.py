"""``multiprocessing`` workers started with ``spawn`` or ``forkserver``: recorded and replayed with
the process that starts them.

A worker that ``multiprocessing`` forks is a copy of its parent, forkpoint included (see
:mod:`forkpoint._boot`). One it *spawns* is a fresh interpreter, which ``forkpoint record`` and
``replay`` do not start (they take their variables out of the environment, so that the programs
an agent runs, its test suite, are not recorded). A pool's workers run the program's own functions:
their model and tool calls were missing from the recording, and ran live on replay.

So the interpreters ``multiprocessing`` starts (``multiprocessing.util.spawnv_passfds``: a spawned
worker, or the fork server whose forks the workers are) start forkpoint first, with this process's
activation (:func:`forkpoint._boot.spawned`). A worker of a
program that records or replays itself (``forkpoint.record()``, ``forkpoint.replay()``) is not
started so, and that is said on stderr, once.
"""

from __future__ import annotations

import functools
import json
from types import ModuleType
from typing import Any

from .. import _boot, runtime
from ..text import say
from .base import Integration, replace

_warned: list[bool] = []

#: Run before ``spawn_main`` in the worker (its ``-c`` program): forkpoint's activation, handed over
#: as JSON in the last argument (taken off ``sys.argv`` again), or why it cannot start. A constant
#: program: the activation (paths, options) is data, never made into code.
_PRELUDE = """\
import sys as _forkpoint_sys
_forkpoint_activation = _forkpoint_sys.argv.pop()
try:
    from forkpoint import _boot as _forkpoint_boot
except ImportError as _forkpoint_exc:
    _forkpoint_sys.stderr.write(
        f"forkpoint: cannot import forkpoint in a multiprocessing worker ({_forkpoint_exc}); "
        "it is not recorded or replayed\\n"
    )
else:
    import json as _forkpoint_json
    _forkpoint_boot.start(_forkpoint_json.loads(_forkpoint_activation))
"""


#: The ``-c`` programs of the interpreters ``multiprocessing`` starts: a spawned worker, and the
#: fork server (whose workers are forks of it, so they are started with it).
_PROGRAMS = ("from multiprocessing.spawn import spawn_main", "from multiprocessing.forkserver import main")


def patch(module: ModuleType) -> None:
    original = module.spawnv_passfds

    @functools.wraps(original)
    def spawnv_passfds(path: Any, args: Any, passfds: Any) -> Any:
        args = list(args)
        at = args.index("-c") + 1 if "-c" in args[:-1] else None
        if at is not None and str(args[at]).startswith(_PROGRAMS):
            activation = _boot.spawned()
            if activation is not None:
                args[at] = _PRELUDE + args[at]
                args.append(json.dumps(activation))
            elif runtime.active() is not None and not _warned:
                _warned.append(True)
                say(
                    "forkpoint: a multiprocessing worker started with 'spawn' or 'forkserver' is not recorded or "
                    "replayed by forkpoint.record() or forkpoint.replay(): its calls are made live. Run the "
                    "program under `forkpoint record -- ...` (and `forkpoint replay`), which start its workers too"
                )
        return original(path, args, passfds)

    replace(module, "spawnv_passfds", spawnv_passfds)


def patch_prepare(module: ModuleType) -> None:
    """In a spawned worker, ``prepare`` runs the parent's script as ``__mp_main__``: its
    ``--tool __main__:…`` targets are wrapped right after (:func:`~forkpoint.capture.targets.main_prepared`)."""
    original = module.prepare

    @functools.wraps(original)
    def prepare(*args: Any, **kwargs: Any) -> Any:
        out = original(*args, **kwargs)
        from ..capture.targets import main_prepared

        main_prepared()
        return out

    replace(module, "prepare", prepare)


INTEGRATION = Integration(
    "multiprocessing", {"multiprocessing.util": patch, "multiprocessing.spawn": patch_prepare}
)
