"""Words in messages: counts with their noun, ordinals, paths, and recorded text made safe to
print. (A foundation: it imports only :mod:`forkpoint.patterns`.)"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .patterns import compiled_later

#: Control characters but tab and newline, and the line and paragraph separators.
_CONTROL = compiled_later("[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f\\u2028\\u2029]")
_ONE_LINE = compiled_later("[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029]")


#: The kinds of HTTP call (:mod:`forkpoint.providers.kinds`), as messages name them.
KIND_NAMES = {"model": "model", "mcp": "MCP", "telemetry": "telemetry", "http": "plain HTTP"}


def plural(n: int, noun: str) -> str:
    """``"1 model call"``, ``"2 model calls"``: ``n`` and the noun, made plural with an ``s``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ``11th``, ``21st``…"""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def visible(text: str, *, one_line: bool = False) -> str:
    """``text`` with its control characters written as ``\\x1b``-style escapes, for plain output:
    recorded text (a command, a session's name) holding a carriage return or an escape sequence
    would otherwise hide or rewrite what is printed before it. ``one_line``: tabs and newlines too
    (a table's cell)."""
    pattern = _ONE_LINE if one_line else _CONTROL
    return pattern.sub(lambda m: m.group().encode("unicode_escape").decode(), text)


def short(text: str | None, width: int = 70, start: int = 0) -> str:
    """``text`` in one line for a table's cell (its runs of whitespace one space, None ``—``), from
    character ``start`` of that line and at most ``width`` characters long, each cut marked ``…``."""
    line = " ".join((text or "—").split())
    if start > 0:
        line = "…" + line[start:]
    return line if len(line) <= width else line[: width - 1] + "…"


def apart(a: str | None, b: str | None, width: int = 70) -> tuple[str, str]:
    """Two texts side by side, each for a table's cell as :func:`short` makes it; when they differ
    after a long common start, both start shortly before where they part (the common start says
    nothing, and would push the difference past the cut)."""
    one, two = (" ".join((t or "").split()) for t in (a, b))
    common = len(os.path.commonprefix([one, two]))
    start = common - 20 if common > width // 2 and one != two else 0
    return short(a, width, start if a else 0), short(b, width, start if b else 0)


def escape(text: str) -> str:
    """``text`` for a rich console: its markup escaped (rich.markup.escape), and its control
    characters written as ``\\x1b``-style escapes (a recorded output holding an escape sequence or a
    carriage return would otherwise move, recolour or clear the terminal of whoever reads it)."""
    from rich.markup import escape as escape_markup  # (rich: imported where text is printed)

    return escape_markup(visible(text))


def say(text: str) -> None:
    """Write ``text`` and a newline to stderr for the person running the program, never raising:
    forkpoint says things inside the program's own calls, and the program's stderr may be closed,
    None, a pipe nobody reads or a full disk. A live run that never wrote there went on; recorded,
    it must go on too."""
    stream, real = sys.stderr, sys.__stderr__
    try:
        if real is not None and stream is real:
            # Past Python's buffer, to the descriptor: a line that could not be written (a full
            # disk) left in the buffer fails again as the interpreter exits, which then exits 120
            # where the program, never writing there, exited with its own code.
            real.flush()
            data = (text + "\n").encode(real.encoding or "utf-8", "backslashreplace")
            fd = real.fileno()
            while data:
                data = data[os.write(fd, data) :]
        else:
            stream.write(text + "\n")
            stream.flush()
    except Exception:  # (whatever the program put in sys.stderr's place may raise anything)
        pass


def shown_path(path: Path, base: Path) -> str:
    """``path`` for a message read in ``base`` (where the user is: the current directory, where
    pytest ran): relative to it when below it, else absolute. (For pytest, not the rootdir: ``pytest
    examples`` from a repository root has its rootdir in ``examples/`` when that folder has an ini
    file, and the user is not there.)"""
    for p, b in ((path, base), (path.resolve(), base.resolve())):
        try:
            return str(p.relative_to(b))
        except ValueError:
            continue
    return str(path.resolve())
