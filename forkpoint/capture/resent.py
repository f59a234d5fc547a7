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

Values returned share their unchanged parts with the last body's value: treat them as read-only
(as the scrubber's results already are).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from typing import Any

import orjson

#: Endpoints whose bodies are kept.
ENDPOINTS_KEPT = 8
#: Bodies kept per endpoint (each its bytes and value), the last of each conversation sent there:
#: an agent that interleaves conversations on one endpoint (a planner and its workers, a one-off
#: title request between two turns) goes on from each one's own last body.
BODIES_KEPT = 4
#: A body parsed whole takes the place of the kept body it shares the longest prefix with when that
#: prefix is at least this fraction of the kept body (the same conversation, which could not be
#: spliced: the kept body would never begin a later one again); else it is kept beside the others.
SAME_CONVERSATION = 0.5
#: Failed attempts to find the growing list of an endpoint's bodies before backing off (each costs
#: one whole parse of a body): after that, one attempt every 2, 4, ... up to :data:`BACKOFF_MAX`
#: bodies, so bodies that are not a resent conversation stop paying it, and a conversation that
#: begins after some that were not is still found.
PROBES_KEPT = 3
BACKOFF_MAX = 64
#: :func:`_common_prefix` compares this many bytes at a time.
_CHUNK = 1 << 16

_WHITESPACE = b" \t\r\n"


class _Body:
    """A JSON object body sent to an endpoint, and what is known of its growing list."""

    __slots__ = ("data", "value", "key", "end")

    def __init__(self, data: bytes, value: dict[str, Any], key: str | None, end: int) -> None:
        self.data = data
        self.value = value
        #: The top-level key whose list grows, and the offset right after its last item (``end`` is
        #: -1 while unknown).
        self.key = key
        self.end = end


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
    """``orjson.loads(data)``, for a request body sent to ``endpoint`` (any string naming where
    it goes: the capture layer gives the method and the URL) by ``owner`` (the active recording or replay;
    None parses whole): equal value, same errors (:class:`orjson.JSONDecodeError`). See the module
    docstring for what is parsed."""
    if owner is None:
        return orjson.loads(data)
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
    prefixes: dict[int, int] = {}  # (by index in bodies, where worked out)
    got = _appended(kept, bodies, data, prefixes)
    source: _Body | None
    if got is not None:
        value, key, end, source = got
        kept.failed = kept.waited = 0
    else:
        value = orjson.loads(data)
        key, end, source = None, -1, _continued(bodies, data, prefixes)
    if isinstance(value, dict):
        with _lock:
            if source is not None and source in kept.bodies:
                kept.bodies.remove(source)
            kept.bodies.insert(0, _Body(data, value, key, end))
            del kept.bodies[BODIES_KEPT:]
    return value


def _appended(
    kept: _Endpoint, bodies: list[_Body], data: bytes, prefixes: dict[int, int]
) -> tuple[dict[str, Any], str, int, _Body] | None:
    """(``data``'s value, the growing key, the offset after its last item, the kept body it goes on
    from) when ``data`` is one of ``bodies`` with items appended to a top-level list; else None.
    Where it looks for that list, the common prefixes it worked out are left in ``prefixes``.
    (Counts, in ``kept``, the attempts to find a list that failed, and the bodies that waited; a
    race between threads loses a count: harmless.)"""
    for body in bodies:  # (the latest first: an agent usually goes on with its last conversation)
        if body.key is not None:
            spliced = _spliced(body, data, body.key, body.end)
            if spliced is not None:
                return (*spliced, body)
    if not bodies:
        return None
    if kept.failed >= PROBES_KEPT and kept.waited + 1 < min(2 ** (kept.failed - 2), BACKOFF_MAX):
        kept.waited += 1
        return None
    kept.waited = 0
    for i, body in enumerate(bodies):
        if len(data) >= len(body.data):
            prefixes[i] = _common_prefix(body.data, data)
    # (the probe parses a kept body whole: only the one the new body shares most with, and only
    # where the new one also ends as it does)
    best = max(prefixes, key=prefixes.__getitem__, default=None)
    if best is not None:
        body, at = bodies[best], prefixes[best]
        found = _list_end(body.data, body.value, at) if data.endswith(memoryview(body.data)[at:]) else None
        spliced = _spliced(body, data, *found) if found is not None else None
        if spliced is not None:
            return (*spliced, body)
    kept.failed += 1
    return None


def _continued(bodies: list[_Body], data: bytes, prefixes: dict[int, int]) -> _Body | None:
    """The kept body that ``data``, parsed whole, takes the place of (see :data:`SAME_CONVERSATION`),
    if any; common prefixes not in ``prefixes`` are worked out."""
    best, longest = None, 0.0
    for i, body in enumerate(bodies):
        at = prefixes[i] if i in prefixes else _common_prefix(body.data, data)
        share = at / len(body.data) if body.data else 0.0
        if share >= SAME_CONVERSATION and share > longest:
            best, longest = body, share
    return best


def _spliced(last: _Body, data: bytes, key: str, end: int) -> tuple[dict[str, Any], str, int] | None:
    """:func:`_appended` once the growing list's key and end are known."""
    old = last.data
    view = memoryview(old)
    if not (data.startswith(view[:end]) and data.endswith(view[end:])):
        return None
    tail = len(old) - end
    items = _items(data[end : len(data) - tail], first=not last.value[key])
    if items is None:
        return None
    value = {k: v + items if k == key else v for k, v in last.value.items()}
    return value, key, len(data) - tail


def _items(added: bytes, *, first: bool) -> list[Any] | None:
    """The values ``added`` appends to a list: after an item (``first`` false) a comma and values,
    in an empty list values alone; None when it is not that."""
    body = added.strip(_WHITESPACE)
    if not body:
        return []
    if not first:
        if body[:1] != b",":
            return None
        body = body[1:]
    try:  # (at the depth they have in the body, inside its object and list: orjson limits depth)
        items = orjson.loads(b"[[" + body + b"]]")[0]
    except orjson.JSONDecodeError:
        return None
    return items if items else None  # "[ ]" from a lone comma is not an item


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
    marker = "forkpoint-marker-" + os.urandom(8).hex()
    items = value[lists[0]] if len(lists) == 1 else None
    insert = b'"' + marker.encode() + b'"'
    # An item before the marker needs a comma; an empty list does not. Which one: try both forms.
    for sep in (b",", b""):
        if items is not None and bool(items) != bool(sep):
            continue
        try:
            probed = orjson.loads(data[:at] + sep + insert + data[at:])
        except orjson.JSONDecodeError:
            continue
        if not isinstance(probed, dict) or probed.keys() != value.keys():
            continue
        try:
            grown = [k for k in lists if probed[k] == [*value[k], marker]]
            same = len(grown) == 1 and all(probed[k] == value[k] for k in value if k != grown[0])
        except RecursionError:  # (values nested deeper than Python compares: parsed whole)
            return None
        if same and bool(value[grown[0]]) == bool(sep):
            return grown[0], at
    return None
