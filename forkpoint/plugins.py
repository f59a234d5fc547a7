"""Extension points that third-party packages fill through entry points (importers, framework
integrations): one way to find the built-in implementations and the installed ones."""

from __future__ import annotations

import importlib
import os
import re
import sys
import warnings
from collections.abc import Iterable, Iterator
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
    if not declared(group):
        return found
    from importlib.metadata import entry_points

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


def distributions() -> Iterator[os.DirEntry[str]]:
    """The installed distributions' metadata folders (``*.dist-info``, ``*.egg-info``) on
    ``sys.path``, in path order (the first of a name is the one Python imports). Raises nothing."""
    for folder in sys.path:
        try:
            entries = os.scandir(folder or ".")
        except OSError:
            continue
        with entries:
            for entry in entries:
                if entry.name.endswith((".dist-info", ".egg-info")):
                    yield entry


def versions(names: Iterable[str]) -> dict[str, str]:
    """The installed version of each of ``names`` (distribution names) that is installed.

    Read from the folder names (``name-version.dist-info``, the wheel spec's form:
    https://packaging.python.org/en/latest/specifications/recording-installed-packages/), in one
    scan of ``sys.path``; importlib.metadata only for a distribution whose folder name does not
    say (an ``.egg-info`` of a development install), as it reads every distribution it passes."""
    wanted = {_normalized(n): n for n in names}
    out: dict[str, str] = {}
    unsure: list[str] = []
    for entry in distributions():
        stem, _, suffix = entry.name.rpartition(".")
        name, sep, version = stem.partition("-")
        key = _normalized(name)
        if key not in wanted or wanted[key] in out or wanted[key] in unsure:
            continue
        if suffix == "dist-info" and sep and version:
            out[wanted[key]] = version
        else:
            unsure.append(wanted[key])
    if unsure:
        from importlib import metadata

        for name in unsure:
            try:
                out[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                pass
    return {n: out[n] for n in names if n in out}


def _normalized(name: str) -> str:
    # The spec's normalization of a distribution name, as a folder name spells it.
    return re.sub(r"[-_.]+", "_", name).lower()


def declared(group: str) -> bool:
    """Whether any distribution on ``sys.path`` may declare entry points in ``group``: a scan of the
    ``entry_points.txt`` files for the group's section header. A few milliseconds where
    ``importlib.metadata.entry_points`` takes tens (it reads every distribution's metadata), and it
    runs at every bootstrapped start; the entry points themselves are still read by importlib."""
    if any(os.path.isfile(folder) for folder in sys.path):  # a zip archive: only importlib reads those
        return True
    header = f"[{group}]".encode()
    for entry in distributions():
        try:
            with open(os.path.join(entry.path, "entry_points.txt"), "rb") as f:
                if header in f.read():
                    return True
        except OSError:
            continue
    return False
