"""Request bodies that resend an earlier one with items appended: parsed by what they add.

An agent posts its whole conversation at every call, so parsing each request body whole
(``orjson.loads``) is quadratic in the conversation's length, and for a long one every parse also
takes a fresh body-sized buffer from the system (page faults at every call). :func:`loads` parses a
body whole only where it cannot show that the body is a body kept for the same endpoint (the last
of its conversation) with items appended to one top-level list; then it parses just those items.

Why that is exact. JSON is read left to right, and what a byte means depends only on the bytes
before it. Let ``end`` be the offset, in a kept body ``P``, right after the last item of the
top-level list ``key`` (before its ``]``), and ``rest = P[end:]``. A new body ``B`` that begins with
``P[:end]``, ends with ``rest`` and holds ``M`` between them is read, up to ``end``, exactly as ``P``
is: inside that list, after its last item. If ``[`` + ``M`` without its leading comma + ``]`` is a
JSON array, ``M`` is a comma and complete values (JSON values mean the same in any context), after
which the reader is again right after an item of that list, where ``rest`` reads as it did in ``P``.
So ``B`` is ``P``'s value with those values appended to ``key``. Everything else falls back to the
whole parse.

``end`` is found once per conversation, on its second body, from where that body first differs from
the kept body it shares the longest prefix with, and proven by parsing ``P`` once with a marker
inserted there (:func:`_list_end`): the offset is right after the last item of a top-level list
exactly when the parse is ``P``'s value with the marker appended to that list. A marker inserted in
a string, or anywhere else, changes something else. The last body of each of a few conversations is
kept per endpoint (:data:`BODIES_KEPT`), so conversations interleaved on one endpoint each go on
from their own.

A body may also change some of the list's last items before it appends (a cache marker that moves
on to the newest message, as coding agents use Anthropic's prompt caching): it then begins as ``P``
up to an earlier item end ``e`` of the list, and the argument above holds from ``e``, the items from
there on parsed. A body keeps the end of the last item each splice added; where a later body changes
an item among the ones a splice added, those bytes are cut at the commas a scan finds outside
strings and brackets, and each piece is parsed alone (:func:`_cut`). Pieces that each parse as one
value are what the whole reads as (JSON has one reading), whatever the scan found: the scan
proposes, the parse proves. Where the change comes before every known end, the list around it is
found by a scan of the whole body, once, its start (and end) proven by a probe (:func:`_scanned`).

A body may instead replace the list's first item and append (a prompt stamped with the time at
every call): it reads as ``P`` up to the list's start; the bytes up to the first comma a scan finds
there must parse as one value, after which the reader is right after the list's first item, as in
``P`` at that item's end; ``P``'s other items follow byte for byte, then the values appended, then
``P`` after the list (:func:`_first_replaced`). The new first item and the appended values are
parsed; the items between are ``P``'s own.

Values returned share their unchanged parts with the last body's value: treat them as read-only
(as the scrubber's results already are).
"""

from __future__ import annotations

import bisect
import os
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import orjson

from .decoding import loads_exact

#: Endpoints whose bodies are kept.
ENDPOINTS_KEPT = 8
#: Bodies kept per endpoint (each its bytes and value), the last of each conversation sent there:
#: an agent that interleaves conversations on one endpoint (a planner and its workers, a one-off
#: title request between two turns) goes on from each one's own last body.
BODIES_KEPT = 4
#: Failed attempts to find the growing list of an endpoint's bodies before backing off (each costs
#: one whole parse of a body): after that, one attempt every 2, 4, ... up to :data:`BACKOFF_MAX`
#: bodies, so bodies that are not a resent conversation stop paying it, and a conversation that
#: begins after some that were not is still found.
PROBES_KEPT = 3
BACKOFF_MAX = 64
#: Item ends kept per body (see :class:`_Body`): a body that changes an item further back than
#: these is parsed whole.
ENDS_KEPT = 64
#: :func:`_common_prefix` compares this many bytes at a time.
_CHUNK = 1 << 16
#: A JSON string (escapes skipped whole) or a bracket, brace or comma: what the scans look for.
_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},]')

_WHITESPACE = b" \t\r\n"


#: What is known of a body's growing list: its key, and offsets in the body each proven to be right
#: after an item of it (``ends[i]`` after its first ``counts[i]`` items; the last after all of
#: them). One tuple, replaced whole, so a thread never reads the ends of one and the counts of another.
_Grown = tuple[str, list[int], list[int]]


class _Body:
    """A JSON object body sent to an endpoint, and its growing list (None while unknown)."""

    __slots__ = ("data", "value", "grown", "scanned")

    def __init__(self, data: bytes, value: dict[str, Any], grown: _Grown | None = None) -> None:
        self.data, self.value, self.grown = data, value, grown
        #: Whether its list's item ends were all looked for (:func:`_scanned`).
        self.scanned = False


class _Endpoint:
    """The bodies kept for one endpoint, the latest first, and the probes' back-off: attempts to
    find a growing list that failed in a row, and bodies since the last attempt."""

    __slots__ = ("bodies", "failed", "waited")

    def __init__(self) -> None:
        self.bodies: list[_Body] = []
        self.failed = 0
        self.waited = 0


_lock = threading.Lock()
#: The kept bodies of each endpoint, by the recording or replay that sent them (held no longer).
_kept: weakref.WeakKeyDictionary[Any, OrderedDict[str, _Endpoint]] = weakref.WeakKeyDictionary()


def loads(data: bytes, endpoint: str, owner: object | None) -> Any:
    """:func:`~.decoding.loads_exact` of ``data`` (orjson's, with an integer beyond 64 bits exact),
    for a request body sent to ``endpoint`` (any string naming where it goes: the capture layer
    gives the method and the URL) by ``owner`` (the active recording or replay; None parses whole):
    equal value, same errors (:class:`orjson.JSONDecodeError`). See the module docstring for what
    is parsed."""
    if owner is None or not isinstance(data, bytes):
        return loads_exact(data)
    with _lock:
        endpoints = _kept.get(owner)
        if endpoints is None:
            endpoints = _kept[owner] = OrderedDict()
        kept = endpoints.get(endpoint)
        if kept is None:
            kept = endpoints[endpoint] = _Endpoint()
        endpoints.move_to_end(endpoint)
        while len(endpoints) > ENDPOINTS_KEPT:
            endpoints.popitem(last=False)
        bodies = list(kept.bodies)
    got = _appended(kept, bodies, data)
    source: _Body | None
    if got is not None:
        new, source, shared = got
        kept.failed = kept.waited = 0
        if not _same_conversation(source, new, shared):
            source = None  # (another conversation that begins as that one did: kept beside it)
    else:
        new = _Body(data, loads_exact(data))
        source = next((b for b in bodies if _same_conversation(b, new)), None)
    if isinstance(new.value, dict):
        with _lock:
            if source is not None and source in kept.bodies:
                kept.bodies.remove(source)
            kept.bodies.insert(0, new)
            del kept.bodies[BODIES_KEPT:]
    return new.value


def _appended(kept: _Endpoint, bodies: list[_Body], data: bytes) -> tuple[_Body, _Body, int] | None:
    """(``data`` as a kept body, the kept body it goes on from, the bytes they share) when ``data``
    is one of ``bodies`` with items appended to a top-level list, after some of its last items were
    changed or dropped (see :func:`_spliced`); else None. (Counts, in ``kept``, the attempts to find
    a list that failed, and the bodies that waited; a race between threads loses a count: harmless.)"""
    # (the latest first: usually the one; only those that end as the new body does can be spliced)
    known = [(b, grown) for b in bodies if (grown := b.grown) is not None and _ends_as(b, grown[1][-1], data)]
    for body, grown in known:  # appended to as it was sent: the common case
        if data.startswith(memoryview(body.data)[: grown[1][-1]]):
            spliced = _spliced(body, grown, len(grown[1]) - 1, data)
            if spliced is not None:
                return spliced
    # Some of its last items changed (a cache marker that moved on): the body that keeps the most
    # items, and only where it keeps one (else it is no more than a whole parse).
    most, best = 0, None
    for body, grown in known:
        grown, i = _last_end_before(body, grown, _common_prefix(body.data, data))
        if i >= 0 and grown[2][i] > most:
            most, best = grown[2][i], (body, grown, i)
    if best is not None:
        spliced = _spliced(*best, data=data)
        if spliced is not None:
            return spliced
    for body, grown in known:  # its first item changed (a prompt stamped with the time)
        spliced = _first_replaced(body, grown, data)
        if spliced is not None:
            return spliced
    if not bodies:
        return None
    if kept.failed >= PROBES_KEPT and kept.waited + 1 < min(2 ** (kept.failed - 2), BACKOFF_MAX):
        kept.waited += 1
        return None
    kept.waited = 0
    prefixes = {i: _common_prefix(b.data, data) for i, b in enumerate(bodies) if len(data) >= len(b.data)}
    # (the probe parses a kept body whole: only the one the new body shares most with, and only
    # where the new one also ends as it does)
    first = max(prefixes, key=prefixes.__getitem__, default=None)
    if first is not None:
        body, at = bodies[first], prefixes[first]
        if data.endswith(memoryview(body.data)[at:]):  # (items appended: the end of a list?)
            found = _list_end(body.data, body.value, at)
            if found is not None:
                key, end = found
                spliced = _spliced(body, (key, [end], [len(body.value[key])]), 0, data)
                if spliced is not None:
                    return spliced
        if not body.scanned:  # (or an item changed first: the list around it)
            body.scanned = True
            around = _scanned(body, None, at)
            if around is not None:
                body.grown = around
                if _ends_as(body, around[1][-1], data):
                    around, i = _last_end_before(body, around, at)
                    spliced = _spliced(body, around, i, data) if i >= 0 and around[2][i] > 0 else None
                    if spliced is None and i == 0:
                        spliced = _first_replaced(body, around, data)
                    if spliced is not None:
                        return spliced
    kept.failed += 1
    return None


def _ends_as(body: _Body, end: int, data: bytes) -> bool:
    """Whether ``data`` ends as ``body`` does from offset ``end`` on."""
    return len(data) >= len(body.data) - end and data.endswith(memoryview(body.data)[end:])


def _last_end_before(body: _Body, grown: _Grown, shared: int) -> tuple[_Grown, int]:
    """``grown`` (``body``'s list) and the index in its ends of the last one at most ``shared``
    (the bytes a new body shares with ``body``), or -1; with what was learnt on the way (kept in
    ``body`` too): where the change comes before every known end, the list's start
    (:func:`_scanned`, once), and where it comes within items whose ends are not known, theirs
    (:func:`_cut`)."""
    i = bisect.bisect_right(grown[1], shared) - 1
    if i < 0 and not body.scanned:
        body.scanned = True
        found = _scanned(body, grown, shared)
        if found is not None:
            body.grown = grown = found
            i = bisect.bisect_right(grown[1], shared) - 1
    if 0 <= i < len(grown[1]) - 1 and grown[2][i + 1] - grown[2][i] > 1:
        cut = _cut(body, grown, i)
        if cut is not None:
            body.grown = grown = cut
            i = bisect.bisect_right(grown[1], shared) - 1
    return grown, i


def _cut(body: _Body, grown: _Grown, i: int) -> _Grown | None:
    """``grown`` with the ends of the items between its ``i``-th and next known end, which a
    splice parsed as one: the bytes between are cut where a scan finds commas and each piece is
    parsed alone (:func:`_items`), and must come to as many items as lie there. None where not."""
    key, ends, counts = grown
    got = _items(body.data, ends[i], ends[i + 1], first=counts[i] == 0, cut=True)
    if got is None or len(got[1]) != counts[i + 1] - counts[i]:
        return None
    inner = [ends[i] + e for e in got[1][:-1]]
    return (
        key,
        [*ends[: i + 1], *inner, *ends[i + 1 :]],
        [*counts[: i + 1], *range(counts[i] + 1, counts[i + 1]), *counts[i + 1 :]],
    )


def _same_conversation(old: _Body, new: _Body, shared: int = 0) -> bool:
    """Whether ``new`` goes on the conversation ``old`` was the last body of, so takes its place
    (``old`` would never begin a later body again) rather than being kept beside it: they share
    (``shared`` bytes of prefix, where known) at least half of ``old``; or a top-level list of
    ``old`` grew in ``new`` and the item in its middle is the same (its first, or its last few, may
    change at every call: a prompt stamped with the time, a cache marker)."""
    if 2 * shared >= len(old.data):
        return True
    if not isinstance(new.value, dict):
        return False
    for key, items in old.value.items():
        grown = new.value.get(key)
        if isinstance(items, list) and isinstance(grown, list) and len(grown) > len(items) >= 2:
            try:
                if grown[(len(items) - 1) // 2] == items[(len(items) - 1) // 2]:
                    return True
            except RecursionError:  # (nested deeper than Python compares)
                pass
    return False


def _spliced(body: _Body, grown: _Grown, i: int, data: bytes) -> tuple[_Body, _Body, int] | None:
    """``data`` as a kept body, when it begins as ``body`` does up to the ``i``-th item end of its
    list ``grown`` and ends as it does after its last (the caller checked both), with values
    between (parsed here): ``body``'s list up to that item, and those values after it. Returns it
    with ``body`` and that item end's offset; None where what lies between is not values."""
    key, ends, counts = grown
    at, stop = ends[i], len(data) - (len(body.data) - ends[-1])
    got = _items(data, at, stop, first=counts[i] == 0) if stop >= at else None
    if got is None:
        return None
    items = got[0]
    kept = body.value[key][: counts[i]]
    value = {k: kept + items if k == key else v for k, v in body.value.items()}
    # (parsed as one: the end of the last item is known, those of the others when needed: _cut)
    new_ends, new_counts = ends[: i + 1], counts[: i + 1]
    if items:
        new_ends, new_counts = [*new_ends, stop], [*new_counts, counts[i] + len(items)]
    return _Body(data, value, (key, new_ends[-ENDS_KEPT:], new_counts[-ENDS_KEPT:])), body, at


def _first_replaced(body: _Body, grown: _Grown, data: bytes) -> tuple[_Body, _Body, int] | None:
    """``data`` as a kept body, when it is ``body`` with the first item of its list ``grown``
    replaced and values appended after its last (a prompt stamped with the time at every call);
    returned with ``body`` and the offset of the list's start. None where not, or where ``grown``
    does not know where the list starts and its first item ends.

    Exact as a splice is (module docstring): ``data`` reads as ``body.data`` up to the list's
    start; the bytes up to the first comma a scan finds there must parse as one value, after which
    the reader is right after the list's first item, as in ``body.data`` at that item's end; the
    rest of ``body``'s items follow byte for byte, then values appended (:func:`_items`), then
    ``body.data`` after the list's last item."""
    key, ends, counts = grown
    if counts[:2] != [0, 1]:
        return None
    start, first_end, last_end = ends[0], ends[1], ends[-1]
    if not data.startswith(memoryview(body.data)[:start]) or not _ends_as(body, last_end, data):
        return None
    comma = -1  # (the first item's end, as a scan finds it: the parse below proves it)
    for token, char, depth in _structure(data, start):
        if depth < 0:  # the list's "]": it holds one item, none to keep
            return None
        if depth == 0 and char == 0x2C:
            comma = token.start()
            break
    if comma < 0:
        return None
    kept = memoryview(body.data)[first_end:last_end]  # the items after the first, each with its comma
    if not data.startswith(kept, comma):
        return None
    item = _values(data[start:comma])
    after = comma + len(kept)
    stop = len(data) - (len(body.data) - last_end)
    added = _items(data, after, stop, first=False) if stop >= after else None
    if item is None or len(item) != 1 or added is None:
        return None
    old = body.value[key]
    value = {k: [item[0], *old[1 : counts[-1]], *added[0]] if k == key else v for k, v in body.value.items()}
    shift = comma - first_end
    new_ends = [start, comma, *(e + shift for e, c in zip(ends, counts, strict=True) if c > 1)]
    new_counts = [0, 1, *(c for c in counts if c > 1)]
    if added[0]:
        new_ends, new_counts = [*new_ends, stop], [*new_counts, counts[-1] + len(added[0])]
    # (the list's start and its first item's end kept, for the next call's)
    new_ends = [*new_ends[:2], *new_ends[2:][-(ENDS_KEPT - 2) :]]
    new_counts = [*new_counts[:2], *new_counts[2:][-(ENDS_KEPT - 2) :]]
    return _Body(data, value, (key, new_ends, new_counts)), body, start


def _items(
    data: bytes, at: int, stop: int, *, first: bool, cut: bool = False
) -> tuple[list[Any], list[int]] | None:
    """The values ``data[at:stop]`` appends to a list (after an item, ``first`` false: a comma and
    values; in an empty list: values alone), and where they end, as offsets from ``at``: the last
    one's, or, ``cut``, each one's; None when it is not that. To cut, a scan finds the commas
    outside strings and brackets and each piece between is parsed alone: whatever the scan found,
    pieces that each parse as one value are exactly what the whole reads as (JSON has one reading),
    so the scan need not be trusted."""
    added = data[at:stop]
    if not added.strip(_WHITESPACE):
        return [], []
    cuts = _commas(added) if cut else None
    if cuts is None:  # (one parse: the items, and where the last ends)
        body = added.strip(_WHITESPACE)
        if not first:
            if body[:1] != b",":
                return None
            body = body[1:]
        items = _values(body)
        return (items, [len(added)]) if items else None  # "[ ]" from a lone comma is not an item
    if first:
        starts, stops = [0, *(c + 1 for c in cuts)], [*cuts, len(added)]
    else:  # (a comma, then an item after each cut)
        if not cuts or added[: cuts[0]].strip(_WHITESPACE):
            return None
        starts, stops = [c + 1 for c in cuts], [*cuts[1:], len(added)]
    items = []
    for start, end in zip(starts, stops, strict=True):
        one = _values(added[start:end])
        if one is None or len(one) != 1:
            return None
        items.append(one[0])
    return items, stops


def _values(text: bytes) -> list[Any] | None:
    """The values ``text`` holds as the inside of a JSON array (``1, "a"``), or None where it is
    not one. Parsed as ``[[text]]``, at the depth the items have in a body (inside its object and
    list: orjson limits depth); the outer array must hold one array alone, so ``text`` cannot close
    the inner one early and go on (``1],[2``)."""
    try:
        outer = loads_exact(b"[[" + text + b"]]")
    except orjson.JSONDecodeError:
        return None
    return outer[0] if len(outer) == 1 else None


def _scanned(body: _Body, grown: _Grown | None, at: int) -> _Grown | None:
    """``body``'s list ``grown`` with its start, or where ``grown`` is None, the top-level list
    around offset ``at`` with its start and its end (:func:`_cut` finds the ends between when
    needed). The scan of the body that finds them is not trusted: the start is proven by a probe
    (:func:`_list_start`), and so is the end (:func:`_list_end`). None where it fails."""
    data, value = body.data, body.value
    found = next(
        (
            (name, start, stop)
            for name, start, stop in _top_lists(data)
            if (name == grown[0] if grown is not None else start <= at <= stop)
        ),
        None,
    )
    if found is None:
        return None
    name, start, stop = found
    items = value.get(name)
    if not isinstance(items, list) or not _list_start(data, value, name, start):
        return None
    if grown is not None:
        return name, [start, *grown[1]], [0, *grown[2]]
    if _list_end(data, value, stop) != (name, stop):
        return None
    return name, [start, stop], [0, len(items)]


def _top_lists(data: bytes) -> Iterator[tuple[str, int, int]]:
    """The lists of the top-level object in ``data``, as a scan (not proven) finds them: (key, the
    offset right after its ``[``, the offset of its ``]``)."""
    name, after_key, start = None, False, -1
    for token, char, depth in _structure(data):
        if depth != 1:  # (the top-level object's members only)
            continue
        if char == 0x22:  # a string: a key where it follows "{" or ","
            if not after_key:
                try:
                    name = orjson.loads(token.group())
                except orjson.JSONDecodeError:
                    return
                after_key = True
        elif char == 0x5B:
            if after_key and isinstance(name, str):
                start = token.end()
        elif char == 0x5D:
            if start >= 0 and isinstance(name, str):
                yield name, start, token.start()
            start = -1
        elif char == 0x7D:
            start = -1
        else:  # a comma between members
            after_key = False


def _list_start(data: bytes, value: dict[str, Any], key: str, at: int) -> bool:
    """Whether offset ``at`` of ``data`` (whose value is ``value``) is at the start of the top-level
    list ``key``, right after its ``[``: proven as :func:`_list_end` proves an end, by parsing
    ``data`` with a marker inserted there, which must come out first in that list and nowhere else."""
    marker = _marker()
    probed = _probe(data, value, at, b'"' + marker.encode() + b'"' + (b"," if value[key] else b""))
    try:
        return probed is not None and probed[key] == [marker, *value[key]] and _same_but(probed, value, key)
    except RecursionError:  # (values nested deeper than Python compares)
        return False


def _commas(added: bytes) -> list[int]:
    """The offsets of the commas in ``added`` outside its strings, brackets and braces."""
    return [token.start() for token, char, depth in _structure(added) if char == 0x2C and depth == 0]


def _structure(data: bytes, start: int = 0) -> Iterator[tuple[re.Match[bytes], int, int]]:
    """Each string, bracket, brace and comma of ``data`` from offset ``start`` on (escapes in
    strings skipped whole), with its first byte and the depth it is at: inside how many brackets and
    braces from there (an opening one counts itself out, a closing one too)."""
    depth = 0
    for token in _TOKEN.finditer(data, start):
        char = data[token.start()]
        if char in b"]}":
            depth -= 1
        yield token, char, depth
        if char in b"[{":
            depth += 1


def _common_prefix(a: bytes, b: bytes) -> int:
    """The length of the longest common prefix of ``a`` and ``b``: compared :data:`_CHUNK` bytes
    at a time, then a binary search in the chunk that differs (``startswith`` on a view compares
    in C and copies nothing), so it costs about the prefix's length."""
    view = memoryview(a)
    n = min(len(a), len(b))
    base = 0
    while base < n and b.startswith(view[base : min(base + _CHUNK, n)], base):
        base += _CHUNK
    if base >= n:
        return n
    lo, hi = base, min(base + _CHUNK, n) - 1  # equal up to base; the prefix ends in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if b.startswith(view[base:mid], base):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _list_end(data: bytes, value: dict[str, Any], at: int) -> tuple[str, int] | None:
    """(key, ``at``) when offset ``at`` of ``data`` (whose value is ``value``) is right after the
    last item of the top-level list ``key``, or at the start of it while empty; else None. Proven by
    parsing ``data`` with a marker inserted at ``at`` (module docstring)."""
    lists = [k for k, v in value.items() if isinstance(v, list)]
    if not lists:
        return None
    marker = _marker()
    items = value[lists[0]] if len(lists) == 1 else None
    insert = b'"' + marker.encode() + b'"'
    # An item before the marker needs a comma; an empty list does not. Which one: try both forms.
    for sep in (b",", b""):
        if items is not None and bool(items) != bool(sep):
            continue
        probed = _probe(data, value, at, sep + insert)
        if probed is None:
            continue
        try:
            grown = [k for k in lists if probed[k] == [*value[k], marker]]
            same = len(grown) == 1 and _same_but(probed, value, grown[0])
        except RecursionError:  # (values nested deeper than Python compares: parsed whole)
            return None
        if same and bool(value[grown[0]]) == bool(sep):
            return grown[0], at
    return None


def _marker() -> str:
    """A string no body holds by chance, to insert where a probe looks."""
    return "forkpoint-marker-" + os.urandom(8).hex()


def _probe(data: bytes, value: dict[str, Any], at: int, text: bytes) -> dict[str, Any] | None:
    """``data`` (whose value is ``value``) parsed with ``text`` inserted at offset ``at``, where
    that is an object with the same keys; else None."""
    try:
        probed = orjson.loads(data[:at] + text + data[at:])
    except orjson.JSONDecodeError:
        return None
    return probed if isinstance(probed, dict) and probed.keys() == value.keys() else None


def _same_but(probed: dict[str, Any], value: dict[str, Any], key: str) -> bool:
    """Whether ``probed`` holds what ``value`` does under every key but ``key`` (raises
    RecursionError for values nested deeper than Python compares)."""
    return all(probed[k] == value[k] for k in value if k != key)
