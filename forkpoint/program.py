"""Running a recorded Python command in this process, as ``python …`` would run it: the way a test
made by ``forkpoint make-test`` runs an agent's entry point under the pytest plugin's recorder or
replayer (which live in the test's process).

Only the two forms that name code on disk are taken: ``python [OPTIONS] FILE.py ARGS`` (or
``FILE.py ARGS``) and ``python [OPTIONS] -m MODULE ARGS``. Any ``python``, ``python3``, ``python3.12``
or path to one stands for this interpreter; its options that take no value are skipped.
"""

from __future__ import annotations

import io
import runpy
import sys
import traceback
from collections.abc import Sequence
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from . import runtime
from .capture.targets import install_import_hook
from .errors import UsageError

#: Interpreter options without a value (``-u``, ``-B``…), skipped; ``-X``/``-W`` take one.
_FLAGS = frozenset("bBdEhiIOqsSuvVxR")


@dataclass
class ProgramRun:
    """How a program run by :func:`run_command` ended: its ``exit_code`` (as the interpreter would
    exit: 0, ``sys.exit``'s code as the process's status, 0 to 255, 1 for an uncaught exception,
    130 for ``KeyboardInterrupt``), what it printed to ``sys.stdout`` (``output``; it was also
    printed as usual), and the exception that ended it uncaught (``uncaught``), if one did."""

    exit_code: int
    output: str
    uncaught: BaseException | None = None


class _Tee(io.TextIOBase):
    def __init__(self, target: TextIO) -> None:
        self.target = target
        self.buffer_ = io.StringIO()

    def write(self, text: str) -> int:
        self.buffer_.write(text)
        return self.target.write(text)

    def flush(self) -> None:
        self.target.flush()


def parse_command(argv: Sequence[str]) -> tuple[str, str, list[str]]:
    """``("module", NAME, ARGS)`` or ``("file", PATH, ARGS)`` for a Python command line. Raises
    :class:`~forkpoint.errors.UsageError` for anything else (a shell script, ``-c CODE``)."""
    args = list(argv)
    if not args:
        raise UsageError("no command to run")
    head = Path(args[0]).name
    if head.endswith(".py"):
        return "file", args[0], args[1:]
    if not (head == "python" or head.startswith("python3") or head.startswith("python2")):
        raise UsageError(
            f"{' '.join(argv)}: only a Python program (python FILE.py …, python -m MODULE …) can run in "
            "the test's process; give the Python command that runs the agent"
        )
    i = 1
    while i < len(args) and args[i].startswith("-") and args[i] != "-":
        opt = args[i]
        if opt == "-m" and i + 1 < len(args):
            return "module", args[i + 1], args[i + 2 :]
        if opt in ("-X", "-W"):
            i += 2
            continue
        if opt.startswith(("-X", "-W")) or set(opt[1:]) <= _FLAGS:
            i += 1
            continue
        raise UsageError(
            f"{' '.join(argv)}: the interpreter option {opt} cannot be run in the test's process "
            "(only a file or -m MODULE)"
        )
    if i < len(args):
        return "file", args[i], args[i + 1 :]
    raise UsageError(f"{' '.join(argv)}: names no file or module to run")


def _code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        # The status the interpreter exits with, which a recording keeps: the low byte of the code
        # as a C long (sys.exit(-1) exits 255, sys.exit(256) 0), 255 past a C long.
        return int(exc.code) & 0xFF if -(2**63) <= exc.code < 2**63 else 255
    print(exc.code, file=sys.stderr)  # sys.exit("message") prints it and exits 1
    return 1


def run_command(argv: Sequence[str], *, tools: Sequence[str] = ()) -> ProgramRun:
    """Run the Python program ``argv`` names in this process, as ``__main__``, with ``sys.argv``
    and ``sys.path[0]`` as the interpreter would set them (both restored afterwards), and the
    functions ``tools`` names (``module:qualname``, as ``forkpoint record --tool``) recorded or
    served as tools. Its exit is caught: returns how it ended (:class:`ProgramRun`); an uncaught
    exception prints its traceback, as the interpreter would, and gives exit code 1 (130 for a
    ``KeyboardInterrupt`` a replay raised from the recording; a real Ctrl-C is raised on).

    Raises :class:`~forkpoint.errors.UsageError` for a command that is not a Python program.
    """
    kind, target, args = parse_command(argv)
    install_import_hook(list(tools))
    saved_argv, saved_path = list(sys.argv), list(sys.path)
    tee = _Tee(sys.stdout)
    try:
        with redirect_stdout(tee):
            if kind == "module":
                sys.argv = [target, *args]  # runpy sets argv[0] to the module's file
                sys.path.insert(0, str(Path.cwd()))
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                sys.argv = [target, *args]
                sys.path.insert(0, str(Path(target).resolve().parent))
                runpy.run_path(target, run_name="__main__")
        code, uncaught = 0, None
    except SystemExit as exc:
        code, uncaught = _code(exc), None
    except (Exception, KeyboardInterrupt) as exc:
        # (a KeyboardInterrupt a replay raised, a tool that Ctrl-C stopped when recorded, is the
        # program's ending, as the interpreter's exit by SIGINT: 130; a real Ctrl-C stops the caller)
        if isinstance(exc, KeyboardInterrupt) and not runtime.replayed_interrupt(exc):
            raise
        traceback.print_exc()
        code, uncaught = 130 if isinstance(exc, KeyboardInterrupt) else 1, exc
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
    return ProgramRun(code, tee.buffer_.getvalue(), uncaught)
