"""A store's index: ``index/entries/<id>.json`` written once per session, consolidated into
``index/snapshots/*.json``, so that ``forkpoint ls`` reads a few files instead of every log.

Why concurrent writers and consolidators never lose an entry is in ``docs/store.md``; the operations
a store must offer the index are :class:`IndexIO`.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeGuard

import orjson

from ..errors import SessionError
from ..events import now_iso
from ..log import is_session_id
from .base import SessionInfo

#: The index folder of a store (beside the session directories).
INDEX_DIR = "index"
ENTRIES = "entries"
SNAPSHOTS = "snapshots"
INDEX_FORMAT = "forkpoint.index"
INDEX_VERSION = 1


def max_loose_entries() -> int:
    """Loose index entries a store may gather before a writer or ``ls`` consolidates them into a
    snapshot (``$FORKPOINT_INDEX_MAX_LOOSE``, default 16)."""
    try:
        return max(1, int(os.environ.get("FORKPOINT_INDEX_MAX_LOOSE") or 16))
    except ValueError:
        return 16


class IndexIO(Protocol):
    """The few operations the index needs from a store: names in a folder, read, create-if-absent,
    delete. ``folder`` is :data:`ENTRIES` or :data:`SNAPSHOTS` under the store's ``index/``."""

    def names(self, folder: str) -> list[str]:
        """Names of the files in ``folder`` (none when it does not exist)."""
        ...

    def read_many(self, folder: str, names: list[str]) -> dict[str, bytes]:
        """The bytes of each named file that exists (a missing one is left out)."""
        ...

    def create(self, folder: str, name: str, data: bytes) -> bool:
        """Write a new file, atomically, unless one of that name exists (then return False)."""
        ...

    def delete(self, folder: str, names: list[str]) -> None:
        """Delete the named files (missing ones are fine)."""
        ...


@dataclass
class IndexState:
    """What a reader of the index saw: the merged entries by session id, and the loose entry and
    snapshot files it read (and parsed) to get them."""

    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    loose: list[str] = field(default_factory=list)
    snapshots: list[str] = field(default_factory=list)


def stored_id(value: object) -> TypeGuard[str]:
    """True when ``value`` can be the id of a session of a store: a session id
    (:func:`~forkpoint.log.is_session_id`) that is not the name of the store's own index folder
    (:data:`INDEX_DIR`, where the holds are too; in any case: a case-insensitive file system, macOS's,
    takes ``Index`` for it), which the files of a session of that id would be."""
    return is_session_id(value) and value.lower() != INDEX_DIR


def _merge(into: dict[str, dict[str, Any]], entries: Iterable[dict[str, Any]]) -> None:
    # A log only grows, so of two entries for one session the one that saw more bytes is newer.
    for e in entries:
        sid = e.get("session_id")
        header = e.get("header") or {"session_id": sid}
        # An entry names the files of its session (removed by rm and prune, fetched into the mirror):
        # an id that is no session id ("", "..", a path, the index folder's name) or a header saying
        # another one is not taken.
        if not stored_id(sid) or not isinstance(header, dict) or header.get("session_id", sid) != sid:
            continue
        old = into.get(sid)
        if old is None or int(e.get("log_size") or 0) > int(old.get("log_size") or 0):
            into[sid] = e


def _parse_entry(data: bytes) -> dict[str, Any] | None:
    try:
        e = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return e if isinstance(e, dict) and isinstance(e.get("session_id"), str) else None


def _parse_snapshot(data: bytes) -> list[dict[str, Any]] | None:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or doc.get("format") != INDEX_FORMAT or doc.get("version") != INDEX_VERSION:
        return None
    sessions = doc.get("sessions")
    return [e for e in sessions if isinstance(e, dict)] if isinstance(sessions, list) else None


def read_index(io: IndexIO, *, attempts: int = 50) -> IndexState:
    """Read the index: every loose entry, then every snapshot, merged by session id.

    Loose entries are read first: one that a consolidator deletes meanwhile is, by then, in a
    snapshot that exists, and the snapshots are listed afterwards. A snapshot that disappears
    between listing and reading was superseded by a newer one containing it: list again.
    """
    state = IndexState()
    loose = io.read_many(ENTRIES, sorted(n for n in io.names(ENTRIES) if n.endswith(".json")))
    for name, data in loose.items():
        e = _parse_entry(data)
        if e is not None:
            state.loose.append(name)
            _merge(state.entries, [e])
    seen: set[str] = set()
    for _ in range(attempts):
        names = sorted(n for n in io.names(SNAPSHOTS) if n.endswith(".json") and n not in seen)
        if not names:
            break
        got = io.read_many(SNAPSHOTS, names)
        for name, data in got.items():
            seen.add(name)
            sessions = _parse_snapshot(data)
            if sessions is not None:
                state.snapshots.append(name)
                _merge(state.entries, sessions)
        if len(got) == len(names):
            break
    else:
        raise SessionError("the store's index is being consolidated too fast to read; try again")
    return state


def snapshot_name() -> str:
    """A new, unique snapshot name: UTC time (sorts by age) and 64 random bits."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + f"-{secrets.token_hex(8)}.json"


def consolidate(
    io: IndexIO,
    state: IndexState,
    *,
    extra: Iterable[dict[str, Any]] = (),
    authoritative: Iterable[dict[str, Any]] | None = None,
) -> str:
    """Fold what ``state`` read (plus ``extra`` entries) into one new snapshot; returns its name.

    Only after the new snapshot has been written under a fresh unique name *and read back intact*
    are the loose entries and snapshots that ``state`` read deleted — each of them is then contained
    in a snapshot that exists. With ``authoritative`` (a rebuild from a walk of the store), the new
    snapshot holds exactly those entries instead.
    """
    sessions: dict[str, dict[str, Any]] = {}
    if authoritative is not None:
        _merge(sessions, authoritative)
    else:
        sessions = dict(state.entries)
        _merge(sessions, extra)
    rows = sorted(sessions.values(), key=lambda e: str(e["session_id"]))
    doc = {"format": INDEX_FORMAT, "version": INDEX_VERSION, "created": now_iso(), "sessions": rows}
    data = orjson.dumps(doc)
    name = snapshot_name()
    if not io.create(SNAPSHOTS, name, data):  # pragma: no cover - 64 random bits
        raise SessionError(f"index snapshot {name} exists already")
    back = io.read_many(SNAPSHOTS, [name]).get(name)
    # Gone already: another consolidator read it intact and deleted it only after persisting a
    # snapshot that contains it, so what this one read is still in a snapshot that exists.
    if back is not None and back != data:
        raise SessionError(f"index snapshot {name} did not read back as written; nothing was deleted")
    io.delete(ENTRIES, state.loose)
    io.delete(SNAPSHOTS, [n for n in state.snapshots if n != name])
    return name


def entry_bytes(row: SessionInfo) -> bytes:
    """The bytes of a session's loose index entry."""
    return orjson.dumps(row.to_entry())


def entry_name(session_id: str) -> str:
    """The file name of a session's loose index entry."""
    return f"{session_id}.json"
