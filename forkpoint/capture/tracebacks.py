"""A tool's exception raised again on replay with the traceback it had live.

Frameworks show the model where a tool failed: DSPy's ReAct puts the first frames of the traceback
in the next prompt, others log it. The tool's body does not run on replay, so the recorded
exception would be raised from forkpoint's own code instead, and that prompt differed from the
recording. The frames below the tool call are recorded (file, line, function and the column span
``traceback`` underlines), and a replay raises the exception through frames made to look the same:
each is a tiny function compiled under the recorded file name, its call placed at the recorded
lines and columns, so ``traceback`` reads the same source lines from the same files and underlines
the same spans. No code of the session runs: the code compiled is forkpoint's own ``_(…)`` call,
only its file name, function name and positions come from the session.

Recording must not change the traceback either: forkpoint's own frames between the program's call
of a tool and the tool's body (the ``@forkpoint.tool`` wrapper, a framework integration's patch,
the recording itself) are taken out of a tool's exception as it leaves them (:data:`hidden`), so
the program (and a model DSPy shows it to) reads the traceback it would read without forkpoint.
"""

from __future__ import annotations

import itertools
import os
import sys
from types import CodeType, FunctionType, TracebackType
from typing import Any, Literal

from ..errors import ForkpointError, RecordedToolError

#: At most this many frames are kept (the outermost: those a framework shows first).
MAX_FRAMES = 64
#: A position beyond this many lines or columns is not reproduced (the frame keeps its line only).
_MAX_SPAN = 4096


#: The folders of the code that stands between a program and its tools: tool calls
#: (``capture/tools.py``) and the framework integrations that patch them.
_OWN = tuple(
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), folder) + os.sep
    for folder in ("capture", "integrations")
)


def _own(tb: TracebackType) -> bool:
    return tb.tb_frame.f_code.co_filename.startswith(_OWN)


def _visible(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without forkpoint's own entries (relinked in place), or None when none is left."""
    head: TracebackType | None = None
    last: TracebackType | None = None
    while tb is not None:
        if not _own(tb):
            if last is None:
                head = tb
            else:
                last.tb_next = tb
            last = tb
        tb = tb.tb_next
    if last is not None:
        last.tb_next = None
    return head


def hide_own_frames(exc: BaseException) -> None:
    """Take forkpoint's own frames out of the traceback of ``exc``, a tool's exception (raised by
    its body live, or its recorded one on replay); forkpoint's own errors (a divergence) keep
    theirs. Python adds no entry when an exception is raised again by a bare ``raise`` or leaves a
    ``with`` block, so the outermost of forkpoint's frames can take itself out too."""
    if not isinstance(exc, ForkpointError) or isinstance(exc, RecordedToolError):
        exc.__traceback__ = _visible(exc.__traceback__)


class _Hidden:
    """``with hidden:`` around forkpoint's outermost frame between a program and a tool's body:
    a tool's exception leaves it without forkpoint's frames (:func:`hide_own_frames`). Stateless,
    so one object serves every block, nested and in every thread."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> Literal[False]:
        if exc is not None:
            hide_own_frames(exc)
        return False


hidden = _Hidden()


def frames_of(tb: TracebackType | None) -> list[list[Any]]:
    """The frames of ``tb`` that are not forkpoint's own, outermost first, as ``[file, line,
    function, end line, column, end column]`` (the last three null when Python does not know them)."""
    out: list[list[Any]] = []
    while tb is not None and len(out) < MAX_FRAMES:
        code = tb.tb_frame.f_code
        if not _own(tb):
            # The failing instruction's position, as ``traceback`` reads it (tb_lasti counts bytes).
            where = next(itertools.islice(code.co_positions(), tb.tb_lasti // 2, None), None)
            _, end, col, end_col = where if where is not None else (None, None, None, None)
            out.append([code.co_filename, tb.tb_lineno, code.co_name, end, col, end_col])
        tb = tb.tb_next
    return out


class _Marker(Exception):
    """Raised by the call in a made frame, to get hold of that frame."""


def _raise() -> None:
    raise _Marker


def _int(value: Any) -> int | None:
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_SPAN else None
    )


def _source(line: int, end_line: Any, col: Any, end_col: Any) -> tuple[str, int]:
    """Source of a function whose ``_(…)`` call spans the recorded position, and the line the
    function's code must start at for the call to be on ``line``; a call on the function's own
    line when the position is unknown or cannot be made (the frame keeps its line, not its span)."""
    end, start, stop = _int(end_line), _int(col), _int(end_col)
    if end is None or start is None or stop is None or end < line or end - line > _MAX_SPAN or line < 3:
        return "def f(): _()", line
    if end == line:
        if stop - start < 3:
            return "def f(): _()", line
        call = "_(" + " " * (stop - start - 3) + ")"
    else:
        if stop < 1:
            return "def f(): _()", line
        call = "_(" + "\n" * (end - line) + " " * (stop - 1) + ")"
    # (inside parentheses a line may start at any column, the first one included)
    return "def f():\n (\n" + " " * start + call + ")", line - 2


def _may_read(filename: str) -> bool:
    """Whether ``traceback`` may show lines of ``filename``, a session's word: a name of the
    program's own code, as Python names it (``<stdin>``; a relative path without ``..``, which
    ``linecache`` looks up along ``sys.path``; an absolute one under the current folder or a folder
    of ``sys.path``), never another file of this machine's (``/etc/passwd``, ``../../.ssh/id_rsa``),
    whose lines a replayed program's traceback would then print, and DSPy send to a model."""
    if filename.startswith("<"):
        return True
    if ".." in filename.replace("\\", "/").split("/"):
        return False
    if not os.path.isabs(filename):
        return True
    real = os.path.realpath(filename)
    roots = {os.path.realpath(p or ".") for p in (os.getcwd(), *sys.path)}
    return any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots if r != os.sep)


def _made(frame: Any) -> TracebackType | None:
    """A traceback entry that formats as the recorded ``frame``, or None when it is not one."""
    if not isinstance(frame, list) or len(frame) != 6:
        return None
    filename, line, name = frame[0], frame[1], frame[2]
    if not isinstance(filename, str) or not isinstance(name, str) or not isinstance(line, int) or line < 1:
        return None
    if not _may_read(filename):
        import linecache  # (here: every bootstrapped process imports this module; linecache loads tokenize)

        # An entry of no lines, never checked against the file (no time): traceback shows none.
        linecache.cache[filename] = (0, None, [], filename)
    try:
        source, first = _source(line, *frame[3:])
        (code,) = (
            c
            for c in compile(source, filename, "exec", dont_inherit=True).co_consts
            if isinstance(c, CodeType)
        )
        code = code.replace(co_name=name, co_qualname=name, co_firstlineno=first)
        FunctionType(code, {"_": _raise})()
    except _Marker as exc:
        made = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        return None if made is None else TracebackType(None, made.tb_frame, made.tb_lasti, made.tb_lineno)
    except Exception:  # (a position Python refuses, a line number beyond what a code object holds)
        return None
    return None


def recorded_traceback(frames: Any) -> TracebackType | None:
    """A traceback through made frames that formats as the recorded ``frames`` (:func:`frames_of`)
    do; None when there are none (a frame that cannot be made is left out)."""
    if not isinstance(frames, list):
        return None
    head: TracebackType | None = None
    for frame in reversed(frames[:MAX_FRAMES]):
        made = _made(frame)
        if made is not None:
            made.tb_next = head
            head = made
    return head
