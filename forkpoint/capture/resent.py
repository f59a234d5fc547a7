"""Request bodies that resend the previous one with items appended: parsed by what they add.

An agent posts its whole conversation at every call, so parsing each request body whole
(``orjson.loads``) is quadratic in the conversation's length, and for a long one every parse also
takes a fresh body-sized buffer from the system (page faults at every call). :func:`loads` parses a
body whole only where it cannot show that the body is the last body of the same endpoint with
items appended to one top-level list; then it parses just those items.

Why that is exact. JSON is read left to right, and what a byte means depends only on the bytes
before it. Let ``end`` be the offset, in the last body ``P``, right after the last item of the
top-level list ``key`` (before its ``]``), and ``rest = P[end:]``. A new body ``B`` that begins with
``P[:end]``, ends with ``rest`` and holds ``M`` between them is read, up to ``end``, exactly as ``P``
is: inside that list, after its last item. If ``[`` + ``M`` without its leading comma + ``]`` is a
JSON array, ``M`` is a comma and complete values (JSON values mean the same in any context), after
which the reader is again right after an item of that list, where ``rest`` reads as it did in ``P``.
So ``B`` is ``P``'s value with those values appended to ``key``. Everything else falls back to the
whole parse.

``end`` is found once per endpoint, on its second body, from where the two bodies first differ, and
proven by parsing ``P`` once with a marker inserted there (:func:`_list_end`): the offset is right
after the last item of a top-level list exactly when the parse is ``P``'s value with the marker
appended to that list. A marker inserted in a string, or anywhere else, changes something else.

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

#: Endpoints whose last body is kept (each holds that body's bytes and value).
ENDPOINTS_KEPT = 8
#: Failed attempts to find the growing list of an endpoint's bodies before backing off (each costs
#: one whole parse of a body): after that, one attempt every 2, 4, ... up to :data:`BACKOFF_MAX`
#: bodies, so bodies that are not a resent conversation stop paying it, and a conversation that
#: begins after some that were not is still found.
PROBES_KEPT = 3
BACKOFF_MAX = 64

_WHITESPACE = b" \t\r\n"


class _Body:
    """The last JSON object body sent to an endpoint, and what is known of its growing list."""

    __slots__ = ("data", "value", "key", "end", "failed", "waited")

    def __init__(
        self, data: bytes, value: dict[str, Any], key: str | None, end: int, failed: int, waited: int
    ) -> None:
        self.data = data
        self.value = value
        #: The top-level key whose list grows, and the offset right after its last item (``end`` is
        #: -1 while unknown).
        self.key = key
        self.end = end
        #: Attempts to find them that failed in a row, and bodies since the last attempt.
        self.failed = failed
        self.waited = waited


_lock = threading.Lock()
#: The last body of each endpoint, by the recording or replay that sent it (held no longer).
_kept: weakref.WeakKeyDictionary[Any, OrderedDict[str, _Body]] = weakref.WeakKeyDictionary()


def loads(data: bytes, endpoint: str, owner: object | None) -> Any:
    """``orjson.loads(data)``, for a request body sent to ``endpoint`` (any string naming where
    it goes: the capture layer gives the method and the URL) by ``owner`` (the active recording or replay;
    None parses whole): equal value, same errors (:class:`orjson.JSONDecodeError`). See the module
    docstring for what is parsed."""
    if owner is None:
        return orjson.loads(data)
    with _lock:
        bodies = _kept.get(owner)
        if bodies is None:
            bodies = _kept[owner] = OrderedDict()
        last = bodies.get(endpoint)
    got = _appended(last, data) if last is not None else None
    if got is not None:
        value, key, end = got
        failed = waited = 0
    else:
        value = orjson.loads(data)
        key, end = None, -1
        failed, waited = (last.failed, last.waited) if last is not None else (0, 0)
    with _lock:
        if isinstance(value, dict):
            bodies[endpoint] = _Body(data, value, key, end, failed, waited)
            bodies.move_to_end(endpoint)
            while len(bodies) > ENDPOINTS_KEPT:
                bodies.popitem(last=False)
        else:
            bodies.pop(endpoint, None)
    return value


def _appended(last: _Body, data: bytes) -> tuple[dict[str, Any], str, int] | None:
    """(``data``'s value, the growing key, the offset after its last item) when ``data`` is
    ``last`` with items appended to a top-level list; else None. (Counts, in ``last``, the attempts
    to find that list that failed, and the bodies that waited; a race between threads loses a
    count: harmless.)"""
    old = last.data
    if len(data) < len(old):
        return None
    key, end = last.key, last.end
    if key is None:
        if last.failed >= PROBES_KEPT and last.waited + 1 < min(2 ** (last.failed - 2), BACKOFF_MAX):
            last.waited += 1
            return None
        last.waited = 0
        at = _common_prefix(old, data)
        # (the probe parses the last body whole: only where the new one also ends as it does)
        found = _list_end(old, last.value, at) if data.endswith(memoryview(old)[at:]) else None
        spliced = _spliced(last, data, *found) if found is not None else None
        if spliced is None:
            last.failed += 1
        return spliced
    return _spliced(last, data, key, end)


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
    """The length of the longest common prefix of ``a`` and ``b`` (a binary search of C
    comparisons: ``startswith`` on a view copies nothing)."""
    view = memoryview(a)
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if b.startswith(view[:mid]):
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
