"""Extension points that third-party packages fill through entry points (importers, framework
integrations): one way to find the built-in implementations and the installed ones."""

from __future__ import annotations

import importlib
import warnings
from importlib.metadata import entry_points
from typing import Any, TypeVar

T = TypeVar("T")


def load(builtin: tuple[str, ...], attr: str, group: str, kind: type[T], what: str) -> list[T]:
    """The ``attr`` object of each ``builtin`` module, then those of the packages registered under
    the entry-point ``group`` (an entry point names a module with ``attr``, or the object itself).

    A plugin that cannot be loaded is left out with a :class:`RuntimeWarning` naming it (``what``
    says what it is, e.g. ``"importer"``): a broken plugin must not hide the others or break the
    agent. Entry points: https://packaging.python.org/en/latest/specifications/entry-points/
    """
    found: list[T] = [getattr(importlib.import_module(m), attr) for m in builtin]
    for ep in entry_points(group=group):
        try:
            obj: Any = ep.load()
            found.append(obj if isinstance(obj, kind) else getattr(obj, attr))
        except Exception as exc:
            warnings.warn(
                f"forkpoint: the {what} {ep.name!r} ({ep.value}) cannot be loaded: {exc}",
                RuntimeWarning,
                stacklevel=3,
            )
    return found
