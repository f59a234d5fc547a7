"""A store that is a directory on this machine: session directories side by side, and ``index/``.

The index is written with hard links of complete temp files (create-if-absent is atomic, a reader
never sees a partial file); the algorithm is in :mod:`forkpoint.store.index` and ``docs/store.md``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

from ..errors import SessionError
from ..log import LOG_NAME, read_header
from ..log.blobs import open_regular
from ..text import say
from .base import Listing, SessionInfo, Store, info, pick, scan, session_order
from .index import (
    ENTRIES,
    INDEX_DIR,
    IndexState,
    consolidate,
    entry_bytes,
    entry_name,
    max_loose_entries,
    read_index,
)

#: Written into a new local store: its sessions are not for version control unless the user says so.
GITIGNORE = ".gitignore"


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
            path = self.base / folder / n
            try:
                with open_regular(path) as f:  # (a FIFO put there would block ls forever)
                    out[n] = f.read()
            except FileNotFoundError:
                pass
            except (SessionError, IsADirectoryError) as exc:
                # The index is derived data: the session it described is read from its log instead.
                why = exc if isinstance(exc, SessionError) else f"{path}: is a directory"
                say(f"forkpoint: WARNING: skipped a damaged index file ({why}); remove it")
        return out

    def _folder(self, folder: str) -> Path:
        d = self.base / folder
        if not d.is_dir():
            self.base.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self.base.mkdir(exist_ok=True, mode=0o700)
            d.mkdir(exist_ok=True, mode=0o700)
        return d

    def _temp(self, d: Path, name: str, data: bytes) -> Path:
        """A new temporary file in ``d`` holding ``data`` (synced, by the policy); one whose write
        failed (a full disk) is removed before the error goes on."""
        tmp = d / f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(data)
                f.flush()
                if _fsync_wanted():
                    os.fsync(f.fileno())
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            if exc.filename is None and exc.strerror:  # (a write that failed: named, as its file)
                raise OSError(exc.errno, exc.strerror, str(d / name)) from None
            raise
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
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
            try:
                with open(fd, "wb") as f:
                    f.write(data)
            except BaseException:  # (never a half-written entry where a reader would take it whole)
                (d / name).unlink(missing_ok=True)
                raise
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


class LocalStore(Store):
    """A store that is a directory on this machine: session directories, and ``index/``."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.url = str(self.path)
        self.io = LocalIO(self.path)

    def __repr__(self) -> str:
        return f"LocalStore({str(self.path)!r})"

    def prepare(self) -> None:
        """A store created now gets a ``.gitignore`` of ``*`` first, so its sessions are not
        committed by accident (a store that exists is left as it is: its owner may want it committed)."""
        try:
            self.path.mkdir(parents=True, mode=0o700)
        except FileExistsError:
            pass
        else:
            fd = os.open(self.path / GITIGNORE, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with open(fd, "wb") as f:
                f.write(
                    b"# forkpoint sessions hold what the model and the tools saw: never committed by default\n*\n"
                )

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
            row = scan(Path(d))
            rows.append(row)
            if row.complete and row.error is None:
                (stale if e is not None else fresh).append(row)
        notes: list[str] = []
        try:
            self._keep_index(state, fresh, stale)
        except (OSError, SessionError) as exc:  # a read-only store still lists
            notes.append(f"could not update the index of {self.path}: {exc}")
        rows.sort(key=session_order)
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
                rows.append(scan(d))
        consolidate(self.io, state, authoritative=[r.to_entry() for r in rows if r.complete and not r.error])
        rows.sort(key=session_order)
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
                say(f"forkpoint: could not index {path}: {exc}")
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
        return pick(text, ref, self.listing().rows, str(self.path)).path

    def fetch(self, session_id: str, *, refresh: bool = False) -> Path | None:
        """The directory of session ``session_id`` when it is in this store, else None."""
        path = self.path / session_id
        return path if (path / LOG_NAME).is_file() else None
