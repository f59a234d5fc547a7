"""Retention and legal hold: removing sessions (``forkpoint rm``, ``forkpoint prune``) and holds
that keep a session from being removed or rewritten (``forkpoint hold`` / ``release``).

A hold is a small JSON file ``index/holds/<id>.json`` of the store (``{"session_id", "reason",
"since", "by"}``), written and deleted through the same operations as the index
(:class:`~forkpoint.store.index.IndexIO`), so a hold on a remote store is seen by every machine. On
an S3 store whose bucket has Object Lock enabled, a hold also puts the S3 *legal hold* on every
object of the session (``PutObjectLegalHold``, see the AWS S3 API reference), and ``release``
lifts it: then not even a user with delete rights can delete those object versions while held.

Removing a session renames its directory away first (one atomic step: ``ls`` and readers no longer
see it), then deletes the files, then drops its index entry; a process killed in between leaves a
dot-named folder that the next removal clears.
"""

from __future__ import annotations

import getpass
import os
import re
import secrets
import shutil
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from ..errors import SessionError
from ..events import now_iso, parse_time
from ..log import LOG_NAME
from ..text import visible
from .base import SessionInfo, Store, pick
from .fsspec import RemoteStore
from .index import ENTRIES, IndexIO, consolidate, entry_name, read_index, stored_id
from .local import LocalStore

#: The folder of holds, under the store's ``index/``.
HOLDS = "holds"
#: Prefix of a session directory being removed (skipped by listings: it starts with a dot).
REMOVING = ".rm-"

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class HeldError(SessionError):
    """A session under legal hold was asked to be removed or rewritten."""


def parse_age(text: str, where: str = "--older-than") -> timedelta:
    """A duration such as ``30d``, ``12h``, ``2w``, ``90m``, ``45s`` as a :class:`timedelta`.
    Raises :class:`SessionError` naming ``where`` for anything else."""
    m = _DURATION.match(str(text))
    if not m:
        raise SessionError(
            f"{where}: {text!r} is not a duration: a number and a unit, s, m, h, d or w (e.g. 30d)"
        )
    try:
        age = timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])
        datetime.now(UTC) - age  # (the cutoff a prune computes from it must be a date)
    except OverflowError:
        raise SessionError(
            f"{where}: {text!r} is too long a duration: no date is that long before now"
        ) from None
    return age


def _io(store: Store) -> IndexIO:
    if isinstance(store, LocalStore | RemoteStore):
        return store.io
    raise SessionError(f"{store!r}: this store keeps no holds")  # pragma: no cover - two kinds


def holds(store: Store) -> dict[str, dict[str, Any]]:
    """Every hold of ``store``, by session id: ``{"session_id", "reason", "since", "by"}``."""
    io = _io(store)
    out: dict[str, dict[str, Any]] = {}
    for name, data in io.read_many(HOLDS, [n for n in io.names(HOLDS) if n.endswith(".json")]).items():
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            doc = None
        sid = name[: -len(".json")]
        # An unreadable hold file still holds: a hold is never lost to damage.
        out[sid] = doc if isinstance(doc, dict) else {"session_id": sid, "reason": "(unreadable hold file)"}
    return out


def held(store: Store, session_id: str) -> dict[str, Any] | None:
    """The hold on session ``session_id`` of ``store``, or None."""
    io = _io(store)
    got = io.read_many(HOLDS, [entry_name(session_id)]).get(entry_name(session_id))
    if got is None:
        return None
    try:
        doc = orjson.loads(got)
    except orjson.JSONDecodeError:
        doc = None
    return doc if isinstance(doc, dict) else {"session_id": session_id, "reason": "(unreadable hold file)"}


def hold_reason(h: Mapping[str, Any]) -> str:
    """The reason of the hold ``h``, to print: on one line, its line breaks and other control
    characters escaped (:func:`~forkpoint.text.visible`), as other user text is printed: a second
    line would read as another message of forkpoint's."""
    return visible(str(h.get("reason")), one_line=True)


def refuse_if_held(store: Store, session_id: str, action: str) -> None:
    """Raise :class:`HeldError` when session ``session_id`` is under legal hold (``action`` is what
    was asked: "remove", "scrub")."""
    h = held(store, session_id)
    if h is not None:
        raise HeldError(
            f"session {session_id} is under legal hold ({hold_reason(h)}, since {h.get('since')}); "
            f"refusing to {action} it (forkpoint release {session_id} lifts the hold)"
        )


def hold(store: Store, session_id: str, reason: str) -> dict[str, Any]:
    """Put session ``session_id`` (a full id of ``store``) under legal hold with ``reason``; returns
    the hold. On an S3 bucket with Object Lock, also sets the object legal hold of each of its
    objects. Holding a held session again keeps the first hold. Raises :class:`SessionError` for
    an empty reason, or when the store cannot be written."""
    if not reason.strip():
        raise SessionError("a hold needs a reason (--reason TEXT): who asked, which incident")
    doc = {"session_id": session_id, "reason": reason, "since": now_iso(), "by": _user()}
    if isinstance(store, RemoteStore):  # first: a hold that cannot be set in S3 is not recorded either
        _object_lock(store, session_id, on=True)
    if not _io(store).create(HOLDS, entry_name(session_id), orjson.dumps(doc)):
        doc = held(store, session_id) or doc
    return doc


def release(store: Store, session_id: str) -> bool:
    """Lift the legal hold on session ``session_id``; False when it was not held. On an S3 bucket
    with Object Lock, lifts the object legal holds first (a failure leaves the hold in place)."""
    if held(store, session_id) is None:
        return False
    if isinstance(store, RemoteStore):
        _object_lock(store, session_id, on=False)
    _io(store).delete(HOLDS, [entry_name(session_id)])
    return True


def find(store: Store, refs: list[str] | tuple[str, ...]) -> list[SessionInfo]:
    """The sessions of ``store`` that ``refs`` name (a session directory of this store, an id, a
    unique id prefix, ``last`` or a name), each once, in the order given. Raises
    :class:`SessionError` for a reference that names nothing (or a directory of another store)."""
    rows = store.listing().rows
    out: dict[str, SessionInfo] = {}
    for ref in refs:
        text = ref
        as_path = Path(ref)
        if (as_path / LOG_NAME).is_file():
            if as_path.resolve().parent != store.path.resolve():
                raise SessionError(f"{ref}: this session is not in the store {store.url}")
            text = as_path.resolve().name
        row = pick(text, ref, rows, store.url)
        out.setdefault(row.session_id, row)
    return list(out.values())


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        return str(os.getuid())


def _object_lock(store: RemoteStore, session_id: str, *, on: bool) -> bool:
    """Set (or lift) the S3 object legal hold on every object of the session, when the store is on
    S3 and its bucket has Object Lock enabled; returns whether it did. Raises :class:`SessionError`
    when the bucket has Object Lock and a hold cannot be set: a hold the user asked for is never
    silently only half in force."""
    fs = store.fs
    protocol = getattr(fs, "protocol", None)
    if "s3" not in (protocol if isinstance(protocol, tuple | list) else (protocol,)):
        return False
    bucket, _, prefix = store.root.partition("/")
    with store._errors(f"{'setting' if on else 'lifting'} the S3 legal hold of session {session_id}"):
        try:
            conf = fs.call_s3("get_object_lock_configuration", Bucket=bucket)
        except Exception as exc:  # no Object Lock configuration on this bucket: nothing more to do
            if "ObjectLockConfigurationNotFound" in f"{type(exc).__name__} {exc}":
                return False
            raise
        if (conf.get("ObjectLockConfiguration") or {}).get("ObjectLockEnabled") != "Enabled":
            return False
        keys = sorted(fs.find(store._key(session_id)))
        if not keys:
            raise SessionError(f"{store.location(session_id)}: no objects to hold (not uploaded yet?)")
        for key in keys:
            fs.call_s3(
                "put_object_legal_hold",
                Bucket=bucket,
                Key=key.partition("/")[2],
                LegalHold={"Status": "ON" if on else "OFF"},
            )
    return True


@dataclass
class Removed:
    """What a removal did: the sessions removed, those kept with why (by session id), and the error
    that stopped it before the rest (``failed``: the sessions after it were not touched)."""

    removed: list[str] = field(default_factory=list)
    kept: dict[str, str] = field(default_factory=dict)
    failed: str | None = None


def remove(store: Store, rows: list[SessionInfo]) -> Removed:
    """Remove the sessions ``rows`` from ``store`` (files and index entries); a session under legal
    hold is kept (its reason is in :attr:`Removed.kept`; each session's hold is read again just
    before it is removed, so one placed while the removal ran is seen), and so is one still being recorded
    (incomplete, with a live recorder is not knowable here: the caller decides what to pass). A
    session that cannot be removed (the store unreachable, access denied) stops the removal, said in
    :attr:`Removed.failed`; the sessions removed before it are gone from the index too."""
    done = Removed()
    on_hold = holds(store)
    try:
        for row in rows:
            sid = row.session_id
            if not stored_id(sid):  # (the files of "", "..", a path, index/ are not one session's)
                raise SessionError(f"{sid!r:.80} is not a session id; not removing anything by it")
            # (looked at again just before: a hold placed while earlier sessions went counts too)
            h = on_hold.get(sid) or held(store, sid)
            if h is not None:
                done.kept[sid] = f"under legal hold ({hold_reason(h)}, since {h.get('since')})"
                continue
            if isinstance(store, RemoteStore) and not row.staged:
                with store._errors(f"removing session {sid}"):
                    # The log first: without it the rest is not a session (listings skip it).
                    log = store._key(sid, LOG_NAME)
                    if store.fs.exists(log):
                        store.fs.rm_file(log)
                    if store.fs.exists(store._key(sid)):
                        store.fs.rm(store._key(sid), recursive=True)
            _remove_local(store, sid)
            done.removed.append(sid)
    except SessionError as exc:
        done.failed = str(exc)
    finally:
        # Once per removal, not per session: each pass lists the whole store (quadratic in a prune).
        clear_leftovers(store)
        # Whatever stopped the loop: an entry left for a removed session lists it as there.
        if done.removed:
            try:
                _drop_entries(_io(store), done.removed)
            except (SessionError, OSError) as exc:
                done.failed = (
                    f"{done.failed + '; ' if done.failed else ''}the index still lists the removed sessions "
                    f"({exc}): forkpoint ls --reindex rebuilds it"
                )
    return done


def _remove_local(store: Store, sid: str) -> None:
    local = store.path / sid
    if not local.exists():
        return
    away = store.path / f"{REMOVING}{sid}-{secrets.token_hex(4)}"
    try:
        os.rename(local, away)  # one step: from here on no reader finds the session
    except OSError as exc:
        raise SessionError(f"{local}: cannot remove it ({exc.strerror})") from None
    _delete(away)


def _delete(path: Path) -> None:
    """Delete a removed session's folder; one that is a symbolic link is the link only (what it
    points to is not this store's), which ``rmtree`` refused, leaving it behind."""
    if path.is_symlink():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path, ignore_errors=True)


def clear_leftovers(store: Store) -> None:
    """Delete what an interrupted removal left (dot-named ``.rm-*`` folders of the store)."""
    try:
        names = [n for n in os.listdir(store.path) if n.startswith(REMOVING)]
    except OSError:
        return
    for n in names:
        _delete(store.path / n)


def _drop_entries(io: IndexIO, sids: list[str]) -> None:
    state = read_index(io)
    io.delete(ENTRIES, [entry_name(s) for s in sids])
    dropped = set(sids)  # (a prune drops thousands: a list here made the filters quadratic)
    if not dropped.isdisjoint(state.entries):
        state.loose = [n for n in state.loose if n[: -len(".json")] not in dropped]
        consolidate(io, state, authoritative=[e for s, e in state.entries.items() if s not in dropped])


def _id_time(session_id: str) -> datetime | None:
    """The UTC time a session id starts with (:func:`~forkpoint.events.new_session_id`), or None."""
    try:
        return datetime.strptime(session_id[:15], "%Y%m%d-%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None


def prune_candidates(
    rows: list[SessionInfo], older_than: timedelta, *, keep_failed: bool, now: datetime | None = None
) -> tuple[list[SessionInfo], dict[str, str]]:
    """Of ``rows``, those created more than ``older_than`` ago that may go, and the old ones kept
    with why: incomplete sessions (still recording, or killed: remove them by id) and, with
    ``keep_failed``, sessions that ended with a non-zero exit code (an imported one's exit code is
    unknown: not a failure). A session whose creation time cannot be read is kept. An imported
    session's age runs from its import (the time in its id), not from the run it records: a
    cassette of 2023 imported a minute ago is a minute old."""
    cutoff = (now or datetime.now(UTC)) - older_than
    out: list[SessionInfo] = []
    kept: dict[str, str] = {}
    for row in rows:
        created = parse_time(row.header.get("created"))
        if created is None:
            if row.error is None:
                kept[row.session_id] = "its creation time cannot be read"
            continue
        tags = row.header.get("tags")
        if isinstance(tags, dict) and tags.get("imported_from") is not None:  # (the index keeps tags)
            imported = _id_time(row.session_id)
            created = max(created, imported) if imported is not None else created
        if created > cutoff:
            continue
        if not row.complete or row.error is not None:
            kept[row.session_id] = "incomplete (still recording, or killed): remove it by id"
        elif keep_failed and row.exit_code not in (0, None):
            kept[row.session_id] = f"failed (exit {row.exit_code}) and --keep-failed"
        else:
            out.append(row)
    return out, kept
