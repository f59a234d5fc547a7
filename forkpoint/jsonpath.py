"""JSON paths: the small JSONPath subset the user's rules are written in, and the automaton that
finds what a set of them selects while a JSON document is walked once.

Used by the redaction rules (``[redact] json_paths``, :mod:`forkpoint.redact`) and the match
rules (``[match] ignore``, :mod:`forkpoint.match`). The subset (after Goessner's JSONPath):
``$`` the document, ``.name`` or ``['name']`` / ``["name"]`` a member, ``[3]`` an item (``[-1]``
the last), ``[*]`` / ``.*`` every member or item, ``..name`` / ``..[*]`` descendants at any depth.
No filters, slices or unions.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import RuleError
from .patterns import compiled_later

#: One parsed step: ``("child" | "desc", key)``, key a member name, an item index or ``"*"``.
Step = tuple[str, Any]
#: A parsed path: its steps after ``$``.
Path = tuple[Step, ...]
#: Where a walk is: ``(path index, step index)`` pairs, the steps still to match.
States = tuple[tuple[int, int], ...]

_TOKEN = compiled_later(
    r"(\.\.|\.)(?:([A-Za-z_][A-Za-z0-9_\-]*)|(\*))"
    r"|(\.\.)?\[(?:(-?\d+)|(\*)|'([^']*)'|\"([^\"]*)\")\]"
)


def parse(path: str) -> Path:
    """``$.a[0]..b[*]`` → ``(("child", "a"), ("child", 0), ("desc", "b"), ("child", "*"))``.

    Raises :class:`~forkpoint.errors.RuleError` naming the path and the part that cannot be read,
    and for ``$`` alone (a rule must name a part of the document)."""
    if not path.startswith("$"):
        raise RuleError(f"JSON path {path!r} must start with '$'")
    steps: list[Step] = []
    i = 1
    while i < len(path):
        m = _TOKEN.match(path, i)
        if not m:
            raise RuleError(f"JSON path {path!r}: cannot read {path[i:]!r}")
        if m.group(1):
            mode = "desc" if m.group(1) == ".." else "child"
            key: Any = m.group(2) if m.group(2) is not None else "*"
        else:
            mode = "desc" if m.group(4) else "child"
            if m.group(5) is not None:
                key = int(m.group(5))
            elif m.group(6):
                key = "*"
            else:
                key = m.group(7) if m.group(7) is not None else m.group(8)
        steps.append((mode, key))
        i = m.end()
    if not steps:
        raise RuleError(f"JSON path {path!r} selects the whole payload; name a part of it")
    return tuple(steps)


def roots(paths: Sequence[Path]) -> States:
    """The states at the top of a document: every path at its first step."""
    return tuple((r, 0) for r in range(len(paths)))


def step(paths: Sequence[Path], states: States, key: Any, length: int) -> tuple[tuple[int, ...], States]:
    """Descend into member ``key`` (a str) or item ``key`` (an int, of a list of ``length``):
    the indices of the paths that end there (they select that value), and the states below it."""
    out: list[tuple[int, int]] = []
    done: list[int] = []
    for r, j in states:
        steps = paths[r]
        mode, want = steps[j]
        if isinstance(key, int):
            hit = want == "*" or (isinstance(want, int) and (want == key or want + length == key))
        else:
            hit = want == "*" or want == key
        if mode == "desc":
            out.append((r, j))
        if hit:
            if j + 1 == len(steps):
                done.append(r)
            else:
                out.append((r, j + 1))
    return tuple(done), tuple(dict.fromkeys(out))
