"""Items in groups bounded by their total size: what one request, one line of a file or one read
into memory holds (an OTLP export's spans, a remote session's files)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

_T = TypeVar("_T")


def by_size(
    items: Iterable[_T], size: Callable[[_T], int], limit: int, most: int | None = None
) -> Iterator[list[_T]]:
    """``items`` in order, in groups of at most ``limit`` in total ``size`` (an item larger than
    that is a group of its own) and, with ``most``, of at most that many items."""
    group: list[_T] = []
    total = 0
    for item in items:
        n = size(item)
        if group and (total + n > limit or len(group) == most):
            yield group
            group, total = [], 0
        group.append(item)
        total += n
    if group:
        yield group
