"""The resolved form of a ``$delta`` list: a read-only view that shares its items' slots with the
other calls of the same conversation.

Each model call of an agent loop resends the whole conversation, and the log stores each list as
the previous call's first ``keep`` items plus what was added (:mod:`.codec`). Rebuilding every call's
list as a ``list`` of its own costs a pointer per item per call — quadratic in the conversation's
length (31 of 53 MiB when loading a 2,000-turn session). Calls that only append share one growing
backing list instead; a call that also replaces a few earlier items (a system prompt stamped with
the time at every call) shares it too, the replaced items held beside it (its ``overlay``); a call
whose list drops earlier items gets a backing list of its own (one copy, at that point of the
conversation).

A :class:`DeltaList` is a :class:`~collections.abc.Sequence` that answers ``list`` to
``isinstance``, as :mod:`unittest.mock` objects answer their spec: every reader that asks
``isinstance(x, list)`` of a request (providers' parsers, the scrubber, the divergence diff, the
exporters) takes it for the list it stands for. It has ``len``, indexing, slicing (a slice is a new
``list``), iteration, ``==`` with lists, ``+`` with lists, and copies (as a ``list``). What
only a real list does fails loudly rather than reading it wrong: it cannot be changed in place
(``append`` and item assignment raise; writing into a list other calls share would change them
too), and C encoders that look at the type (orjson, ``json``'s) raise ``TypeError`` unless given a
``default`` such as :func:`json_default`, as :func:`forkpoint.canonical.canonical_json` gives
(:func:`forkpoint.log.codec.to_json` takes it as a list).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from itertools import islice
from typing import Any, overload

#: Past this many replaced items a view copies its items to a backing list of its own: reading
#: through the overlay costs a lookup per item, and an overlay only grows along a conversation.
MAX_OVERLAY = 16


class DeltaList(Sequence[Any]):
    """The first ``n`` items of the append-only list ``store`` (shared with other views), with
    the items at the indices of ``overlay`` (each ``< n``) replaced by its values."""

    __slots__ = ("_store", "_n", "_overlay")
    __hash__ = None  # type: ignore[assignment]  # like a list: equal to it, so not hashable

    def __init__(self, store: list[Any], n: int, overlay: dict[int, Any] | None = None) -> None:
        self._store = store
        self._n = n
        self._overlay = overlay or None

    @classmethod
    def from_delta(
        cls, base: Sequence[Any], keep: int, add: list[Any], replace: Sequence[tuple[int, Any]] = ()
    ) -> DeltaList:
        """The list ``base[:keep] + add`` with item ``i`` replaced by ``v`` for each ``(i, v)`` of
        ``replace`` (each ``i < keep``), appending to ``base``'s backing list when ``base`` is a
        view of all of it (the conversation only grew), else on a backing list of its own."""
        # (all of a view's items, and nothing added unless it views all of its backing list)
        if isinstance(base, DeltaList) and keep == base._n and (not add or keep == len(base._store)):
            overlay = dict(base._overlay or ())
            overlay.update(replace)
            if len(overlay) <= MAX_OVERLAY:
                base._store.extend(add)
                return cls(base._store, keep + len(add), overlay)
        store = list(islice(base, keep))
        for i, v in replace:
            store[i] = v
        store.extend(add)
        return cls(store, len(store))

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # the answer isinstance() asks for; type() still says DeltaList
        return list

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return self._items()[index]
        if index < 0:
            index += self._n
        if not 0 <= index < self._n:
            raise IndexError("DeltaList index out of range")
        if self._overlay and index in self._overlay:
            return self._overlay[index]
        return self._store[index]

    def _items(self) -> list[Any]:
        items = self._store[: self._n]
        for i, v in (self._overlay or {}).items():
            items[i] = v
        return items

    def __iter__(self) -> Iterator[Any]:
        if self._overlay:
            return iter(self._items())
        return islice(self._store, self._n)

    def __reversed__(self) -> Iterator[Any]:
        return (self[i] for i in range(self._n - 1, -1, -1))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, DeltaList):
            if other._store is self._store and self._overlay is None and other._overlay is None:
                return other._n == self._n
            return self._n == other._n and self[:] == other[:]
        if isinstance(other, list):
            return self._n == len(other) and self[:] == other
        return NotImplemented

    def __add__(self, other: object) -> list[Any]:
        if not isinstance(other, list):  # (a DeltaList is one too)
            return NotImplemented
        return self[:] + list(other)

    def __radd__(self, other: object) -> list[Any]:
        if not isinstance(other, list):
            return NotImplemented
        return list(other) + self[:]

    def copy(self) -> list[Any]:
        """A ``list`` of the items (as ``list.copy`` gives)."""
        return self[:]

    def __repr__(self) -> str:
        return repr(self[:])

    def __copy__(self) -> list[Any]:
        return self[:]

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return copy.deepcopy(self[:], memo)


def json_default(value: Any) -> list[Any]:
    """A ``default=`` for ``json.dumps`` and ``orjson.dumps``: a :class:`DeltaList` as a ``list``.
    Raises ``TypeError`` for anything else, as the encoders do without one."""
    if isinstance(value, DeltaList):
        return value[:]
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
