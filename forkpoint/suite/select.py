"""Which sessions a ``forkpoint check`` runs: sessions, stores and folders of cassettes named on the
command line, narrowed by tags and creation time.

Listing a store reads its index, never every log; a folder that is not a store (``tests/cassettes``)
is walked for session logs. What-if runs and fork arms found in a store are left out (they replay
their parent's prefix in another directory, so their recorded command does not stand alone),
unless named one by one. A session that cannot be checked (unreadable, or without an ``end`` event)
is kept, with the reason, so it shows as an error rather than vanishing from the suite.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..log import LOG_NAME
from ..redact import scrub_tags
from ..store import INDEX_DIR, SessionInfo, is_store, is_url, open_store, resolve, store_dir
from ..store.base import scan
from ..text import plural

#: Folders of a session directory (or of a cassette folder) that never hold sessions of their own.
_NOT_SESSIONS = ("blobs", "git-objects", INDEX_DIR)


@dataclass
class Candidate:
    """A session selected for a check: how a task finds it (``ref``, see
    :func:`forkpoint.orchestrate.load_ref`) and what the table shows of it."""

    ref: dict[str, Any]
    session_id: str
    name: str | None
    tags: dict[str, str]
    created: str | None
    location: str
    #: Why it cannot be checked; None when it can.
    problem: str | None = None


@dataclass
class Selection:
    """The sessions to check, in the order given (a store's oldest first), and what was left out."""

    sessions: list[Candidate] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def parse_since(text: str) -> datetime:
    """``--since``: an ISO date (``2026-11-01``, midnight UTC) or date and time (``2026-11-01T12:00``,
    UTC unless it names a zone). Raises :class:`~forkpoint.errors.UsageError`."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--since {text!r}: expected a date (2026-11-01) or date and time (2026-11-01T12:00)"
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def _created(row: SessionInfo) -> datetime | None:
    text = row.header.get("created")
    if isinstance(text, str):
        try:
            return datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            pass
    try:  # ids start with their UTC creation time
        return datetime.strptime(row.session_id[:15], "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None


def _candidate(row: SessionInfo, store: str | None) -> Candidate:
    problem = None
    if row.error is not None:
        problem = f"cannot read the session: {row.error}"
    elif not row.complete:
        problem = "the session has no end event: it is still being recorded, or its recorder was killed"
    tags = {str(k): str(v) for k, v in (row.header.get("tags") or {}).items() if v is not None}
    path = str(Path(row.path).absolute())
    return Candidate(
        ref={"path": path, "store": store, "id": row.session_id},
        session_id=row.session_id,
        name=row.header.get("name"),
        tags=tags,
        created=row.header.get("created"),
        location=row.location or path,
        problem=problem,
    )


def _cassettes(folder: Path) -> list[SessionInfo]:
    """The sessions under ``folder``, however deep (``<dir>/<module>/<test>/``); recordings of failed
    tests (``<test>.failed``) and unfinished temporary recordings (``.<test>.recording-…``) left out."""
    found = []
    # (os.walk names every entry: rglob passes over a session.jsonl that is a broken or looping link)
    for top, folders, files in os.walk(folder):
        folders[:] = [
            d for d in folders if not (d in _NOT_SESSIONS or d.startswith(".") or d.endswith(".failed"))
        ]
        if LOG_NAME in files or LOG_NAME in folders:
            found.append(Path(top))
    # (one that cannot be read is a row saying why, not the end)
    return [scan(path) for path in sorted(found)]


def select(
    args: Sequence[str],
    *,
    store: str | None = None,
    tags: dict[str, str] | None = None,
    since: datetime | None = None,
) -> Selection:
    """The sessions ``args`` name (see the module docstring): each a session directory, an id, id
    prefix, name or ``last`` in ``store``, a store (a directory with an index, or a URL), or a folder
    of sessions; none means the whole of ``store`` (default ``$FORKPOINT_STORE`` or ``.forkpoint``).
    Only sessions with every tag in ``tags`` and created at or after ``since`` are kept. Raises
    :class:`~forkpoint.errors.SessionError` for a reference that names nothing."""
    chosen: list[tuple[SessionInfo, str | None, bool]] = []  # (row, store URL, named one by one)
    for arg in args or [store or ""]:
        path = Path(arg) if arg else store_dir(None)
        if arg and (path / LOG_NAME).is_file():
            chosen.append((scan(path), None, True))
        elif is_url(arg) or is_store(path) or (not arg and path.is_dir()):
            found = open_store(arg or path)
            url = found.url if is_url(found.url) else None
            chosen.extend((row, url, False) for row in found.listing().rows)
        elif arg and path.is_dir():
            chosen.extend((row, None, False) for row in _cassettes(path))
        elif not arg:
            continue  # the default store does not exist yet: nothing in it
        else:
            found_path = resolve(arg, store)
            url = open_store(store).url if store and is_url(store) else None
            chosen.append((scan(found_path), url, True))
    selection = Selection()
    wanted = scrub_tags(tags or {})  # (as the recording stored them: a credential's placeholder)
    seen: set[str] = set()
    children = filtered = 0
    for row, url, named in chosen:
        key = str(Path(row.path).absolute())
        if key in seen:
            continue
        seen.add(key)
        if not named and row.header.get("parent"):
            children += 1
            continue
        row_tags = row.header.get("tags") or {}
        created = _created(row)
        if any(str(row_tags.get(k)) != v for k, v in wanted.items()) or (
            since is not None and (created is None or created < since)
        ):
            filtered += 1
            continue
        selection.sessions.append(_candidate(row, url))
    if children:
        selection.notes.append(
            f"left out {plural(children, 'session')} made by what-if runs or fork arms (name one to check it)"
        )
    if filtered:
        selection.notes.append(f"left out {plural(filtered, 'session')} that --tag/--since exclude")
    return selection
