"""Structured differences between two JSON documents, by JSONPath-like path: what a divergence
report, ``forkpoint diff`` and a fifo replay's drift show."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from .canonical import canonical_json, python_json
from .log import to_json


@dataclass(frozen=True)
class Change:
    """One difference between two JSON documents.

    ``op`` is ``"added"`` (only in actual), ``"removed"`` (only in expected), ``"changed"``, or
    ``"reordered"``: a list holding the same items in another order (``expected`` the items' labels
    as recorded, ``actual`` as now: a name when they have one, else their recorded positions);
    ``path`` is a JSONPath-like string such as ``$.body.messages[3].content``. ``ignored`` marks a
    difference that the match key does not see (an ignore rule took it out).
    """

    op: str
    path: str
    expected: Any = None
    actual: Any = None
    ignored: bool = False

    def to_json(self) -> dict[str, Any]:
        """This change as JSON data (``ignored`` only when true)."""
        out: dict[str, Any] = {"op": self.op, "path": self.path}
        if self.op != "added":
            out["expected"] = self.expected
        if self.op != "removed":
            out["actual"] = self.actual
        if self.ignored:
            out["ignored"] = True
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Change:
        """A change from :meth:`to_json`'s form."""
        return cls(
            data["op"], data["path"], data.get("expected"), data.get("actual"), bool(data.get("ignored"))
        )


class EqualPairs:
    """Pairs of containers (dicts, lists) :func:`json_diff` found equal, known by identity, for a
    series of diffs of documents that share their parts: two sessions' requests, each resending
    its whole conversation as the same item objects (the scrubber's), compare each pair of
    messages once, not once per call (quadratic in the conversation's length). Holds the pairs, so
    their ids stay theirs, but only those of the last two diffs (:meth:`next` starts a diff): a
    conversation's items come back at the next call, and the memory stays that of one call's."""

    __slots__ = ("_pairs", "_last")

    def __init__(self) -> None:
        self._pairs: dict[tuple[int, int], tuple[Any, Any]] = {}
        self._last: dict[tuple[int, int], tuple[Any, Any]] = {}

    def next(self) -> None:
        """Start the next diff of the series: forget the pairs the last one did not meet again."""
        self._last, self._pairs = self._pairs, {}

    def __contains__(self, pair: tuple[Any, Any]) -> bool:
        key = (id(pair[0]), id(pair[1]))
        if key in self._pairs:
            return True
        held = self._last.get(key)
        if held is None:
            return False
        self._pairs[key] = held
        return True

    def add(self, expected: Any, actual: Any) -> None:
        self._pairs[(id(expected), id(actual))] = (expected, actual)


def json_diff(
    expected: Any, actual: Any, path: str = "$", *, equal: EqualPairs | None = None
) -> list[Change]:
    """Every difference between two JSON values, by path, in document order.

    Lists are compared item by item (a list that grew shows ``added`` items at the end). ``equal``:
    the pairs of containers found equal so far in a series of diffs (:class:`EqualPairs`), skipped
    and added to.
    """
    if isinstance(expected, dict) and isinstance(actual, dict):
        if equal is not None and (expected, actual) in equal:
            return []
        out: list[Change] = []
        for k in expected:
            sub = f"{path}.{k}" if k.isidentifier() else f"{path}[{k!r}]"
            if k not in actual:
                out.append(Change("removed", sub, expected=expected[k]))
            else:
                out.extend(json_diff(expected[k], actual[k], sub, equal=equal))
        for k in actual:
            if k not in expected:
                sub = f"{path}.{k}" if k.isidentifier() else f"{path}[{k!r}]"
                out.append(Change("added", sub, actual=actual[k]))
        if equal is not None and not out:
            equal.add(expected, actual)
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if equal is not None and (expected, actual) in equal:
            return []
        out = []
        for i in range(max(len(expected), len(actual))):
            sub = f"{path}[{i}]"
            if i >= len(actual):
                out.append(Change("removed", sub, expected=expected[i]))
            elif i >= len(expected):
                out.append(Change("added", sub, actual=actual[i]))
            else:
                e, a = expected[i], actual[i]
                if equal is not None and (e, a) in equal:  # (without a call: most items of a resent list)
                    continue
                out.extend(json_diff(e, a, sub, equal=equal))
        if out and len(expected) == len(actual) > 1:
            moved = _reordered(expected, actual, path)
            if moved is not None:
                return [moved]
        if equal is not None and not out:
            equal.add(expected, actual)
        return out
    if type(expected) is not type(actual) or expected != actual:
        return [Change("changed", path, expected=expected, actual=actual)]
    return []


def _reordered(expected: list[Any], actual: list[Any], path: str) -> Change | None:
    """One ``reordered`` change when ``actual`` holds ``expected``'s very items in another order (a
    tool list reordered read as a change of every field of every tool), else None."""
    before = [canonical_json(x, exotic=True) for x in expected]
    after = [canonical_json(x, exotic=True) for x in actual]
    if sorted(before) != sorted(after):
        return None
    places: dict[bytes, list[int]] = {}
    for i, text in enumerate(before):
        places.setdefault(text, []).append(i)
    order = [places[text].pop(0) for text in after]  # (each item's recorded position, as now)
    labels = [_label(x) for x in expected]
    if len(set(labels)) != len(labels) or None in labels:
        return Change("reordered", path, expected=list(range(len(order))), actual=order)
    return Change("reordered", path, expected=labels, actual=[labels[i] for i in order])


def _label(item: Any) -> str | None:
    """A list item's name (a tool's, a message's), for saying a list was reordered."""
    if not isinstance(item, dict):
        return None
    for holder in (item, item.get("function"), item.get("toolSpec")):
        if isinstance(holder, dict) and isinstance(holder.get("name"), str):
            return str(holder["name"])
    return None


def similarity(a: Any, b: Any) -> float:
    """0..1 closeness of two JSON values (1.0 = same), for picking the nearest recorded request."""
    if a == b:
        return 1.0
    import difflib  # (only when a divergence is explained: not at start-up)

    sa, sb = canonical_json(a, exotic=True), canonical_json(b, exotic=True)
    matcher = difflib.SequenceMatcher(None, sa, sb, autojunk=False)
    # quick_ratio is an upper bound that is cheap; exact ratio only for short documents.
    return matcher.ratio() if len(sa) + len(sb) < 20_000 else matcher.quick_ratio()


def _short(value: Any, limit: int = 160, *, quoted: bool = False) -> str:
    # Values in their resolved form: a tool result may hold bytes (shown as {"$b64": …}). A string
    # is shown as it is, unless ``quoted`` or it is not valid Unicode (a file name's lone surrogate,
    # which a terminal shows as the text "\udce9"): then as JSON, escaped and in quotes.
    if isinstance(value, str) and not quoted and _printable(value):
        text = value
    elif isinstance(value, str):  # ASCII: a line or paragraph separator, a control character shows
        text = python_json(value).decode()
    else:
        text = canonical_json(to_json(value), exotic=True).decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _printable(text: str) -> bool:
    """Whether ``text`` prints as itself: no lone surrogate (a file name's, which a terminal shows
    as the text "\\udce9"), no control character (an escape sequence the terminal would obey) and
    no line or paragraph separator; tabs are fine."""
    return text.replace("\t", " ").isprintable()


def _first_difference(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def _clip_lines(diff: list[str], width: int = 160) -> list[str]:
    """Unified-diff lines cut to ``width`` characters around the first column where a changed line
    differs from its counterpart, so a long single-line prompt does not print twice in full."""
    removed = [d[1:] for d in diff if d.startswith("-")]
    added = [d[1:] for d in diff if d.startswith("+")]
    out = []
    for d in diff:
        text = d[1:]
        if len(text) <= width:
            out.append(d)
            continue
        others = added if d[0] == "-" else removed if d[0] == "+" else []
        col = max((_first_difference(text, o) for o in others), default=0)
        start = max(0, col - width // 3)
        clipped = ("…" if start else "") + text[start : start + width]
        out.append(d[0] + clipped + ("…" if start + width < len(text) else ""))
    return out


def format_changes(changes: list[Change], limit: int = 20) -> str:
    """Human-readable lines for a diff; long strings are shown as a compact text diff. A change an
    ignore rule took out of the match key is marked ``(ignored)``."""
    lines: list[str] = []
    for c in changes[:limit]:
        mark = "  (ignored)" if c.ignored else ""
        if c.op == "added":
            lines.append(f"  + {c.path}: {_short(c.actual)}{mark}")
        elif c.op == "removed":
            lines.append(f"  - {c.path}: {_short(c.expected)}{mark}")
        elif c.op == "reordered":
            n = len(c.actual) if isinstance(c.actual, list) else 0
            lines.append(
                f"  ↕ {c.path}: the same {n} items in another order: {_short(c.expected)} → {_short(c.actual)}{mark}"
            )
        elif (
            isinstance(c.expected, str)
            and isinstance(c.actual, str)
            and (len(c.expected) > 80 or len(c.actual) > 80)
        ):
            import difflib

            diff: list[str] = []
            split = c.expected.splitlines(), c.actual.splitlines()
            if all(_printable(line) for lines_of in split for line in lines_of):
                diff = list(difflib.unified_diff(*split, "recorded", "actual", n=1, lineterm=""))[2:14]
            if not diff:  # or only line endings differ (a final "\n", CRLF): each as one line of JSON
                diff = [
                    f"{sign}{_short(v, sys.maxsize, quoted=True)}"
                    for sign, v in (("-", c.expected), ("+", c.actual))
                ]
            lines.append(f"  ~ {c.path}:{mark}")
            lines.extend(f"      {d}" for d in _clip_lines(diff))
        else:
            # Both sides quoted when one must be (a lone surrogate and the text "\udce9" read the
            # same), and a string beside another type ("5" and 5, "null" and None).
            sides = (c.expected, c.actual)
            quoted = any(isinstance(v, str) and not _printable(v) for v in sides) or (
                isinstance(c.expected, str) != isinstance(c.actual, str)
            )
            lines.append(
                f"  ~ {c.path}: {_short(c.expected, quoted=quoted)} → {_short(c.actual, quoted=quoted)}{mark}"
            )
    if len(changes) > limit:
        lines.append(f"  … and {len(changes) - limit} more differences")
    return "\n".join(lines)
