"""Where sessions live: a store (a local directory, or any fsspec URL), its index, and finding a
session by path, id, prefix or ``last``.

A store is named by ``--store``, ``$FORKPOINT_STORE`` or defaults to ``./.forkpoint``:

* a directory path (or a ``file://`` URL): sessions are written there directly (``O_APPEND`` +
  ``flock``, see ``docs/format.md``);
* any other fsspec URL (``s3://bucket/prefix``, ``memory://…``): sessions are recorded into a local
  *mirror* directory (under ``$FORKPOINT_CACHE``, ``$XDG_CACHE_HOME/forkpoint`` or
  ``~/.cache/forkpoint``) and uploaded when they end; reading one downloads it into the same mirror.
  See :mod:`forkpoint.remote` and ``docs/store.md``.

Every store has an **index** (``index/entries/<id>.json`` written once per session, consolidated into
``index/snapshots/*.json``) so that ``forkpoint ls`` reads a few files instead of every log. The
algorithm, and why concurrent writers and consolidators never lose an entry, is in ``docs/store.md``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import secrets
import shlex
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlsplit

import orjson

from .log import LOG_NAME, SessionError, check_header, now_iso, read_header

if TYPE_CHECKING:
    from .remote import RemoteStore

#: Default store, relative to the current directory, unless ``FORKPOINT_STORE`` is set.
DEFAULT_STORE = ".forkpoint"
#: The index folder of a store (beside the session directories).
INDEX_DIR = "index"
ENTRIES = "entries"
SNAPSHOTS = "snapshots"
INDEX_FORMAT = "forkpoint.index"
INDEX_VERSION = 1
#: A mirror directory of a remote store holds this file, naming the store's URL.
REMOTE_MARKER = ".forkpoint-remote.json"
#: Header fields kept in an index entry (what ``ls`` shows, and what a filter may want).
ENTRY_HEADER_FIELDS = (
    "session_id",
    "name",
    "created",
    "argv",
    "cwd",
    "tags",
    "parent",
    "replay",
    "git",
    "platform",
)
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def max_loose_entries() -> int:
    """Loose index entries a store may gather before a writer or ``ls`` consolidates them into a
    snapshot (``$FORKPOINT_INDEX_MAX_LOOSE``, default 16)."""
    try:
        return max(1, int(os.environ.get("FORKPOINT_INDEX_MAX_LOOSE") or 16))
    except ValueError:
        return 16


# --------------------------------------------------------------------------- naming a store


def is_url(spec: str | Path) -> bool:
    """True when ``spec`` is a URL (``scheme://…``) rather than a path."""
    return isinstance(spec, str) and bool(_URL.match(spec))


def store_dir(spec: str | Path | None = None) -> Path:
    """The local directory that sessions of store ``spec`` are written to and read from.

    ``spec`` is a path, a ``file://`` URL (that directory), another fsspec URL (its local mirror,
    created on first use), or None for ``$FORKPOINT_STORE`` or ``./.forkpoint``.
    """
    if spec is None or spec == "":
        spec = os.environ.get("FORKPOINT_STORE") or DEFAULT_STORE
    if isinstance(spec, Path):
        return _directory(spec)
    if is_url(spec):
        parts = urlsplit(spec)
        if parts.scheme.lower() == "file":
            if parts.netloc not in ("", "localhost"):
                raise SessionError(f"{spec}: a file:// store must be on this machine (file:///path)")
            return Path(unquote(parts.path))
        from .remote import mirror_dir

        return mirror_dir(spec)
    return _directory(Path(spec))


def _directory(path: Path) -> Path:
    if path.exists() and not path.is_dir():
        raise SessionError(f"{path}: the store must be a directory, and this is a file")
    return path


def default_store() -> Path:
    """The directory of ``$FORKPOINT_STORE`` (a path or URL, see :func:`store_dir`) or ``./.forkpoint``."""
    return store_dir(None)


def open_store(spec: str | Path | None = None) -> LocalStore | RemoteStore:
    """The store ``spec`` names (see :func:`store_dir`): a :class:`LocalStore`, or a
    :class:`~forkpoint.remote.RemoteStore` when ``spec`` is a URL or a remote store's mirror."""
    path = store_dir(spec)
    if (path / REMOTE_MARKER).is_file():
        from .remote import RemoteStore

        return RemoteStore.from_mirror(path)
    return LocalStore(path)


def session_started(path: Path) -> None:
    """Call right after creating session ``path``: in a remote store's mirror, marks the session as
    being recorded by this process (so no other process uploads it before it ends)."""
    if (path.parent / REMOTE_MARKER).is_file():
        from .remote import recording_started

        recording_started(path)


def session_finished(path: Path, *, quiet: bool = False) -> str:
    """Call once session ``path`` is complete and closed; returns where it now lives.

    In a local store this writes the session's index entry. In a remote store's mirror it uploads
    the session (blobs and git objects first, the log last, then the index entry); when that fails,
    a warning says so (unless ``quiet``) and the session stays staged, to be uploaded by the next
    ``forkpoint ls`` or recording into that store. Never raises for an I/O problem: the recording
    itself is safe on disk either way.
    """
    path = Path(path)
    try:
        store = open_store(path.parent)
        return store.finished(path, quiet=quiet)
    except SessionError as exc:
        if not quiet:
            sys.stderr.write(f"forkpoint: {exc}\n")
        return str(path)


# --------------------------------------------------------------------------- session summaries


@dataclass
class SessionInfo:
    """One row of ``forkpoint ls``: a session's header fields and counts (from the index or a scan).

    ``local`` is where the session is (or, for a remote session not downloaded yet, would be) on
    this machine; :attr:`path` is the same as a :class:`~pathlib.Path` (made on first use: a listing
    of 10,000 sessions should not build 10,000 paths it does not show).
    """

    local: Path | str
    header: dict[str, Any]
    events: int
    model_calls: int
    tool_calls: int
    exit_code: int | None
    complete: bool
    checkpoints: int = 0
    truncated: bool = False
    log_size: int = 0
    log_sha256: str = ""
    #: Where the session lives: its directory, or its URL in a remote store.
    location: str = ""
    #: Recorded into a remote store's mirror and not uploaded yet.
    staged: bool = False
    #: Why the session could not be read (then the counts are 0).
    error: str | None = None

    @property
    def path(self) -> Path:
        """The session's local directory."""
        if not isinstance(self.local, Path):
            self.local = Path(self.local)
        return self.local

    @property
    def session_id(self) -> str:
        """The session id."""
        sid = self.header.get("session_id")
        return sid if isinstance(sid, str) else self.path.name

    def to_entry(self) -> dict[str, Any]:
        """This summary as an index entry (JSON data)."""
        return {
            "session_id": self.session_id,
            "header": {k: self.header[k] for k in ENTRY_HEADER_FIELDS if k in self.header},
            "events": self.events,
            "model_calls": self.model_calls,
            "tool_calls": self.tool_calls,
            "checkpoints": self.checkpoints,
            "exit_code": self.exit_code,
            "complete": self.complete,
            "truncated": self.truncated,
            "log_size": self.log_size,
            "log_sha256": self.log_sha256,
        }

    @classmethod
    def from_entry(cls, entry: dict[str, Any], *, local: Path | str, location: str = "") -> SessionInfo:
        """The summary an index entry describes; ``local`` is where the session is (or would be) here."""
        return cls(
            local=local,
            header=entry.get("header") or {"session_id": entry["session_id"]},
            events=int(entry.get("events") or 0),
            model_calls=int(entry.get("model_calls") or 0),
            tool_calls=int(entry.get("tool_calls") or 0),
            exit_code=entry.get("exit_code"),
            complete=bool(entry.get("complete")),
            checkpoints=int(entry.get("checkpoints") or 0),
            truncated=bool(entry.get("truncated")),
            log_size=int(entry.get("log_size") or 0),
            log_sha256=str(entry.get("log_sha256") or ""),
            location=location or str(local),
        )


def _order(row: SessionInfo) -> tuple[str, str, str]:
    # Ids start with the creation time to the second only (then random hex), so sessions made within
    # one second are ordered by their header's ``created`` time (milliseconds), then by id.
    sid = row.session_id
    return sid[:15], str(row.header.get("created") or ""), sid


def summarize_log(data: bytes, path: Path) -> SessionInfo:
    """Summarize a session log's bytes (header, counts, end) without resolving blobs."""
    log_path = path / LOG_NAME
    first, nl, rest = data.partition(b"\n")
    header = check_header(first + nl, log_path)
    events = models = tools = checkpoints = 0
    exit_code: int | None = None
    complete = False
    lines = rest.split(b"\n")
    truncated = bool(lines[-1])
    for raw in lines[:-1]:
        events += 1
        # Cheap type sniffing: the type is always the second key of a line.
        head = raw[:80]
        if b'"type":"model_call"' in head:
            models += 1
        elif b'"type":"tool_call"' in head:
            tools += 1
        elif b'"type":"checkpoint"' in head:
            checkpoints += 1
        elif b'"type":"end"' in head:
            complete = True
            try:
                exit_code = orjson.loads(raw).get("exit_code")
            except orjson.JSONDecodeError:
                pass
    return SessionInfo(
        local=path,
        header=header,
        events=events,
        model_calls=models,
        tool_calls=tools,
        exit_code=exit_code,
        complete=complete,
        checkpoints=checkpoints,
        truncated=truncated,
        log_size=len(data),
        log_sha256=hashlib.sha256(data).hexdigest(),
        location=str(path),
    )


def info(path: Path) -> SessionInfo:
    """Summarize the session directory ``path`` by scanning its log, without resolving blobs."""
    path = Path(path)
    try:
        data = (path / LOG_NAME).read_bytes()
    except FileNotFoundError:
        raise SessionError(f"{path / LOG_NAME}: no such session log") from None
    except IsADirectoryError:
        raise SessionError(f"{path / LOG_NAME}: is a directory, not a session log") from None
    return summarize_log(data, path)


def session_dirs(store: Path) -> list[Path]:
    """Session directories present in the local directory ``store``, oldest first (reads every header;
    ``forkpoint ls`` uses the index instead)."""
    if not store.is_dir():
        return []
    return sorted((p for p in store.iterdir() if (p / LOG_NAME).is_file()), key=_creation_order)


def _creation_order(path: Path) -> tuple[str, str, str]:
    try:
        created = str(read_header(path / LOG_NAME).get("created") or "")
    except SessionError:
        created = ""
    return path.name[:15], created, path.name


# --------------------------------------------------------------------------- the index


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


def _merge(into: dict[str, dict[str, Any]], entries: Iterable[dict[str, Any]]) -> None:
    # A log only grows, so of two entries for one session the one that saw more bytes is newer.
    for e in entries:
        sid = e.get("session_id")
        if not isinstance(sid, str):
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


# --------------------------------------------------------------------------- local stores


def _fsync_wanted() -> bool:
    return os.environ.get("FORKPOINT_FSYNC", "event") != "never"


class LocalIO:
    """:class:`IndexIO` on a local directory: create-if-absent is a hard link of a complete temp file
    (atomic: a reader never sees a partial file)."""

    def __init__(self, root: Path) -> None:
        self.base = Path(root) / INDEX_DIR

    def names(self, folder: str) -> list[str]:
        try:
            return [n for n in os.listdir(self.base / folder) if not n.startswith(".")]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def read_many(self, folder: str, names: list[str]) -> dict[str, bytes]:
        out = {}
        for n in names:
            try:
                out[n] = (self.base / folder / n).read_bytes()
            except FileNotFoundError:
                pass
        return out

    def _folder(self, folder: str) -> Path:
        d = self.base / folder
        if not d.is_dir():
            self.base.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.base.mkdir(exist_ok=True, mode=0o700)
            d.mkdir(exist_ok=True, mode=0o700)
        return d

    def _temp(self, d: Path, name: str, data: bytes) -> Path:
        tmp = d / f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(data)
            f.flush()
            if _fsync_wanted():
                os.fsync(f.fileno())
        return tmp

    def create(self, folder: str, name: str, data: bytes) -> bool:
        d = self._folder(folder)
        tmp = self._temp(d, name, data)
        try:
            os.link(tmp, d / name)
        except FileExistsError:
            return False
        except OSError:  # a filesystem without hard links: exclusive create, then write
            try:
                fd = os.open(d / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                return False
            with open(fd, "wb") as f:
                f.write(data)
        finally:
            tmp.unlink(missing_ok=True)
        self._sync_dir(d)
        return True

    def replace(self, folder: str, name: str, data: bytes) -> None:
        """Overwrite a loose entry (a local session that grew after its entry was written)."""
        d = self._folder(folder)
        os.replace(self._temp(d, name, data), d / name)

    def delete(self, folder: str, names: list[str]) -> None:
        for n in names:
            (self.base / folder / n).unlink(missing_ok=True)

    @staticmethod
    def _sync_dir(d: Path) -> None:
        if not _fsync_wanted():
            return
        with contextlib.suppress(OSError):
            fd = os.open(d, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


@dataclass
class Listing:
    """What ``forkpoint ls`` shows: the sessions oldest first, and notes about the store."""

    rows: list[SessionInfo]
    notes: list[str] = field(default_factory=list)
    #: The store, as the user names it (a directory or a URL).
    store: str = ""


class LocalStore:
    """A store that is a directory on this machine: session directories, and ``index/``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.io = LocalIO(self.path)

    @property
    def url(self) -> str:
        """The store as the user would name it."""
        return str(self.path)

    def __repr__(self) -> str:
        return f"LocalStore({str(self.path)!r})"

    def _names(self) -> list[str]:
        try:
            return [n for n in os.listdir(self.path) if not n.startswith(".") and n != INDEX_DIR]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def listing(self, *, reindex: bool = False) -> Listing:
        """Every session of the store, oldest first.

        The index gives each session's row; the directory's top-level names (one ``listdir``, one
        ``stat`` per session, no log read) catch what the index does not know yet or no longer
        describes: a session still being recorded, one whose recorder was killed, one written by an
        older forkpoint or copied in, one that grew after its entry was written. Those are scanned,
        and the finished ones get entries (consolidated into a snapshot when there are many), so the
        next ``ls`` is fast again. ``reindex`` rebuilds the index from a scan of every log.
        """
        if reindex:
            return Listing(self.reindex(), store=self.url)
        state = read_index(self.io)
        rows: list[SessionInfo] = []
        fresh: list[SessionInfo] = []
        stale: list[SessionInfo] = []
        base = str(self.path)
        for name in self._names():
            d = os.path.join(base, name)
            try:
                size = os.stat(os.path.join(d, LOG_NAME)).st_size
            except OSError:
                continue
            e = state.entries.get(name)
            if e is not None and e.get("log_size") == size:
                rows.append(SessionInfo.from_entry(e, local=d))
                continue
            row = _scan(Path(d))
            rows.append(row)
            if row.complete and row.error is None:
                (stale if e is not None else fresh).append(row)
        notes: list[str] = []
        try:
            self._keep_index(state, fresh, stale)
        except (OSError, SessionError) as exc:  # a read-only store still lists
            notes.append(f"could not update the index of {self.path}: {exc}")
        rows.sort(key=_order)
        return Listing(rows, notes, self.url)

    def _keep_index(self, state: IndexState, fresh: list[SessionInfo], stale: list[SessionInfo]) -> None:
        new = fresh + stale
        loose = len(state.loose) + len(new)
        if loose >= max_loose_entries() or len(state.snapshots) > 1:
            consolidate(self.io, state, extra=[r.to_entry() for r in new])
            return
        for row in fresh:
            self.io.create(ENTRIES, entry_name(row.session_id), entry_bytes(row))
        for row in stale:
            self.io.replace(ENTRIES, entry_name(row.session_id), entry_bytes(row))

    def reindex(self) -> list[SessionInfo]:
        """Rebuild the index from a scan of every session log; returns every session, oldest first."""
        state = read_index(self.io)
        rows = []
        for name in self._names():
            d = self.path / name
            if (d / LOG_NAME).is_file():
                rows.append(_scan(d))
        consolidate(self.io, state, authoritative=[r.to_entry() for r in rows if r.complete and not r.error])
        rows.sort(key=_order)
        return rows

    def finished(self, path: Path, *, quiet: bool = False) -> str:
        """Write the index entry of the finished session ``path``; returns its directory."""
        try:
            row = info(path)
            if row.complete:
                self.io.create(ENTRIES, entry_name(row.session_id), entry_bytes(row))
                if len(self.io.names(ENTRIES)) >= max_loose_entries():
                    consolidate(self.io, read_index(self.io))
        except (OSError, SessionError) as exc:
            # The index is a cache: `forkpoint ls` finds the session anyway and indexes it then.
            if not quiet:
                sys.stderr.write(f"forkpoint: could not index {path}: {exc}\n")
        return str(path)

    def resolve(self, ref: str | Path, *, refresh: bool = False) -> Path:
        """The session directory ``ref`` names: a path, a full id, a unique id prefix, ``last``, or a
        session name (``--name``; the newest session of that name)."""
        as_path = Path(ref)
        if (as_path / LOG_NAME).is_file():
            return as_path
        text = str(ref)
        if text != "last" and "/" not in text and (self.path / text / LOG_NAME).is_file():
            return self.path / text
        return _pick(text, ref, self.listing().rows, str(self.path)).path


def _scan(d: Path) -> SessionInfo:
    try:
        return info(d)
    except SessionError as exc:
        return SessionInfo(d, {"session_id": d.name}, 0, 0, 0, None, False, location=str(d), error=str(exc))


def _pick(text: str, ref: str | Path, rows: list[SessionInfo], where: str) -> SessionInfo:
    if not text.strip():
        raise SessionError("no session given: name one by path, id, id prefix, `last` or its --name")
    if text == "last":
        if not rows:
            raise SessionError(f"{where}: no sessions in this store")
        return rows[-1]
    hits = [r for r in rows if r.session_id.startswith(text)]
    if len(hits) == 1:
        return hits[0]
    named = [r for r in rows if r.error is None and r.header.get("name") == text]
    if named:  # a name given with --name wins over an ambiguous id prefix ("2026")
        return named[-1]  # a name recorded again (a nightly run): its newest session
    if len(hits) > 1:
        names = ", ".join(r.session_id for r in hits[:5])
        raise SessionError(f"{ref!r} is ambiguous in {where}: {names}{' …' if len(hits) > 5 else ''}")
    hint = ""
    if "@" in text:
        hint = f" ({text} looks like a checkpoint, SESSION@SEQ: see forkpoint checkpoints / restore)"
    raise SessionError(
        f"no session {ref!r}: not a session directory, and no id in {where} starts with it "
        f"and no session there has that name{hint}"
    )


# --------------------------------------------------------------------------- module-level API


def resolve(ref: str | Path, store: str | Path | None = None, *, refresh: bool = False) -> Path:
    """The local session directory that ``ref`` names: a path, a full id, a unique id prefix,
    ``last``, or a session name (the newest session recorded with ``--name`` ``ref``), in ``store`` (a path or URL; default ``$FORKPOINT_STORE`` or ``.forkpoint``).

    A session of a remote store is downloaded into the local mirror first (once: a complete session
    never changes); ``refresh`` downloads it again (``forkpoint verify`` checks what the store holds).
    Raises :class:`SessionError` saying what was tried when nothing (or more than one) matches.
    """
    as_path = Path(ref)
    if (as_path / LOG_NAME).is_file():
        return as_path
    return open_store(store).resolve(ref, refresh=refresh)


def list_sessions(store: str | Path | None = None, *, reindex: bool = False) -> Listing:
    """The sessions of ``store``, oldest first, from its index (see :meth:`LocalStore.listing`)."""
    return open_store(store).listing(reindex=reindex)


def render_listing(rows: list[SessionInfo]) -> str:
    """The ``forkpoint ls`` table as plain text (fast for tens of thousands of rows)."""
    cols = ("session", "name", "created", "model", "tool", "exit", "command")
    table = [cols]
    for r in rows:
        if r.error is not None:
            table.append((r.session_id, f"unreadable: {r.error}", "", "", "", "", ""))
            continue
        table.append(
            (
                r.session_id,
                str(r.header.get("name") or ""),
                str(r.header.get("created") or "")[:19],
                str(r.model_calls),
                str(r.tool_calls),
                "—" if not r.complete else "?" if r.exit_code is None else str(r.exit_code),
                # the last column: shown whole (a cut would hide the arguments), quoted as a shell
                # would (an imported session shows the `forkpoint import` that made it)
                shlex.join(str(a) for a in r.header.get("argv") or []),
            )
        )
    widths = [max(len(row[i]) for row in table) for i in range(len(cols) - 1)]
    out = []
    for row in table:
        cells = [c.ljust(w) for c, w in zip(row, widths, strict=False)]
        out.append(("  ".join(cells) + "  " + row[-1]).rstrip())
    return "\n".join(out)
