"""A store at any fsspec URL (``s3://bucket/prefix``, ``gs://…``, ``memory://…``) as a session store.

An object store cannot append to a file or lock it, and a session log is written with ``O_APPEND``
and ``flock``. So a session of a remote store is recorded into a local **mirror** directory of that
store, and uploaded when it ends:

1. every file of the session but the log (``blobs/``, ``git-objects/``), skipping those already
   there (one listing), then a second listing checks every one is there with the right size;
2. the log, with create-if-absent (S3 ``If-None-Match: *``): a session whose log exists remotely is
   complete, and an existing session is never overwritten; the log is read back and compared;
3. the session's index entry ``index/entries/<id>.json``;
4. the local copy is marked ``.remote`` (it now *is* the complete remote session, immutable, and
   serves later reads as the cache); until then it is a *staged* session, and a crash at any step
   leaves it staged. ``forkpoint ls`` and every recording into the store upload staged sessions
   whose recording has ended (or whose recorder has died).

Reading a session downloads it into the mirror (log first, then the files the log may refer to)
and loads it from there; a downloaded session is complete and never changes, so it is fetched once.

The mirror lives in ``$FORKPOINT_CACHE`` (or ``$XDG_CACHE_HOME/forkpoint``, or
``~/.cache/forkpoint``) under ``stores/<scheme>_<url>-<hash>/`` (the hash of the URL and of its
endpoint, when the options or botocore's environment name one). ``$FORKPOINT_STORE_OPTIONS`` (JSON)
is passed to fsspec, e.g. ``{"client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}``.
``memory://`` stores live in one process only (for tests). See ``docs/store.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from ..batches import by_size
from ..errors import SessionError
from ..events import now_iso
from ..files import lock_held, private_dirs, user_temp_dir, write_private
from ..log import LOG_NAME, MIRROR_DONE, MIRROR_RECORDING, has_end
from ..text import say
from .base import REMOTE_MARKER, Listing, SessionInfo, Store, pick, scan, session_order, summarize_log
from .index import ENTRIES, INDEX_DIR, consolidate, entry_bytes, entry_name, max_loose_entries, read_index

#: In a mirror, a session directory holding this file is a complete copy of the remote session.
DONE = MIRROR_DONE
#: Held (flock) by the process recording a staged session, from creation until its upload.
RECORDING = MIRROR_RECORDING
#: Held (flock) while a staged session is being uploaded.
UPLOAD_LOCK = ".upload.lock"

_FULL_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{6}$")
#: The lock file descriptor of each session this process is recording, and the file it was opened
#: on (device, inode): see :func:`_close_lock`.
_recording: dict[str, tuple[int, tuple[int, int]]] = {}
_recording_lock = threading.Lock()


def _normalize(url: str) -> str:
    return url if url.endswith("://") else url.rstrip("/")


def cache_root() -> Path:
    """Where forkpoint keeps the mirrors of remote stores."""
    env = os.environ.get("FORKPOINT_CACHE")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "forkpoint"


def check_available(url: str) -> None:
    """Raise :class:`SessionError` now, not when the recording ends, if the packages that ``url``
    needs are not installed (looked up without importing them)."""
    from importlib.util import find_spec

    scheme = url.partition("://")[0].lower()
    hint = "pip install 'forkpoint[remote]'"
    if find_spec("fsspec") is None:
        raise SessionError(f"--store {url}: a remote store needs fsspec: {hint}")
    from fsspec.registry import known_implementations, registry

    impl = known_implementations.get(scheme)
    if scheme in registry or impl is None:
        return  # registered at run time, or unknown here: fsspec says more when it is used
    module = str(impl.get("class", "")).split(".")[0]
    if module and find_spec(module) is None:
        why = impl.get("err") or f"needs the {module} package"
        raise SessionError(f"--store {url}: {why}" + (f" ({hint})" if module == "s3fs" else ""))


def store_options() -> dict[str, Any]:
    """``$FORKPOINT_STORE_OPTIONS``, parsed: the keyword arguments fsspec gets for the URL."""
    try:
        options = json.loads(os.environ.get("FORKPOINT_STORE_OPTIONS") or "{}")
    except ValueError as exc:
        raise SessionError(f"FORKPOINT_STORE_OPTIONS is not valid JSON ({exc})") from None
    if not isinstance(options, dict):
        raise SessionError("FORKPOINT_STORE_OPTIONS must be a JSON object of fsspec's options")
    return options


def endpoint(url: str) -> str | None:
    """The server the store at ``url`` is on, when it is not the protocol's default: the options'
    ``endpoint_url`` (top level or in ``client_kwargs``), or for S3 botocore's
    ``$AWS_ENDPOINT_URL_S3``/``$AWS_ENDPOINT_URL``."""
    options = store_options()
    client = options.get("client_kwargs")
    found = (client.get("endpoint_url") if isinstance(client, dict) else None) or options.get("endpoint_url")
    if not found and url.partition("://")[0].lower() in ("s3", "s3a"):
        found = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return str(found).rstrip("/") if found else None


def mirror_dir(url: str) -> Path:
    """The local mirror directory of the remote store ``url`` on its endpoint (created, owner-only,
    on first use). One bucket name on two servers (MinIO and AWS, staging and production) is two
    stores: one mirror would serve the sessions cached from one as the other's, and upload what was
    staged for one into the other."""
    url = _normalize(url)
    check_available(url)
    server = endpoint(url)
    scheme, _, rest = url.partition("://")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", rest).strip("_.")[:60] or "root"
    # (without an endpoint the name is the URL's alone, as before endpoints were told apart)
    ident = url if server is None else f"{url}\n{server}"
    name = f"{scheme.lower()}_{slug}-{hashlib.sha256(ident.encode()).hexdigest()[:12]}"
    # (the fallback is this user's own folder of the shared temporary folder: another user's folder
    # or link of that name there would hold, or swap, the sessions mirrored into it)
    for root in (cache_root, lambda: user_temp_dir("forkpoint")):
        try:
            d = root() / "stores" / name
            marker = d / REMOTE_MARKER
            if marker.is_file():
                return d
            private_dirs(d)  # (the cache and its stores/ too, under umask 000)
            write_private(
                marker, orjson.dumps({"format": "forkpoint.mirror", "url": url, "endpoint": server})
            )
            return d
        except PermissionError:
            continue
    raise SessionError(f"no writable cache directory for {url} (set FORKPOINT_CACHE)")


# --------------------------------------------------------------------------- local locks


def recording_started(path: Path) -> None:
    """Mark the staged session ``path`` as being recorded by this process until it is finished.

    The lock file is created already locked (a temp file, locked, then renamed), so another process
    never sees it unlocked while this recorder lives; when the recorder dies, the kernel drops the
    lock and ``forkpoint ls`` knows the session will not grow any more. The lock is shared: each
    process of the recorded program takes it too (``forkpoint._boot._join_recording``), so the
    session is not taken for finished while one of them still appends to it; :func:`_recorder_gone`
    asks for it exclusively.
    """
    tmp = path / f"{RECORDING}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)
    os.write(fd, str(os.getpid()).encode())
    os.rename(tmp, path / RECORDING)
    st = os.fstat(fd)
    with _recording_lock:
        old = _recording.pop(str(path), None)
        _recording[str(path)] = fd, (st.st_dev, st.st_ino)
    if old is not None:
        _close_lock(*old)


def _recording_done(path: Path) -> None:
    with _recording_lock:
        held = _recording.pop(str(path), None)
    if held is not None:
        _close_lock(*held)


def _close_lock(fd: int, file: tuple[int, int]) -> None:
    """Close the lock file descriptor ``fd`` if it is still open on ``file`` (device, inode). A
    program that closes the descriptors it did not open (``os.closerange(3, …)``, as a daemon does)
    and then opens a file gets its number: closing it would close the program's file under it (the
    lock went with the program's close). As :meth:`forkpoint.log.SessionWriter._ours` does."""
    try:
        st = os.fstat(fd)
    except OSError:
        return
    if (st.st_dev, st.st_ino) == file:
        os.close(fd)


def _same_log(path: Path, data: bytes) -> bool:
    """Whether the log at ``path`` holds ``data`` (a missing or unreadable one: nothing to keep)."""
    try:
        if path.stat().st_size != len(data):
            return False
        return path.read_bytes() == data
    except OSError:
        return True


def _recorder_gone(path: Path) -> bool:
    """True when the staged session was recorded by processes that have since died (its lock is free:
    neither the recorder that created it nor a process of the recorded program holds it)."""
    return lock_held(path / RECORDING) is False


@contextlib.contextmanager
def _upload_lock(path: Path, *, blocking: bool) -> Iterator[bool]:
    fd = os.open(path / UPLOAD_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if blocking else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- fsspec helpers


#: Bytes of a session's files a download holds in memory at once, about (one file may be more).
FETCH_BYTES = 64 << 20


def _cat_many(fs: Any, paths: list[str]) -> dict[str, bytes]:
    """The bytes of each path that exists, fetched concurrently on an async filesystem (s3fs)."""
    if not paths:
        return {}
    if getattr(fs, "async_impl", False):
        from fsspec.asyn import sync

        async def gather() -> list[tuple[str, bytes | None]]:
            sem = asyncio.Semaphore(32)

            async def one(p: str) -> tuple[str, bytes | None]:
                async with sem:
                    try:
                        return p, await fs._cat_file(p)
                    except FileNotFoundError:
                        return p, None

            return list(await asyncio.gather(*(one(p) for p in paths)))

        results = sync(fs.loop, gather)
    else:
        results = []
        for p in paths:
            try:
                results.append((p, fs.cat_file(p)))
            except FileNotFoundError:
                results.append((p, None))
    return {p: d for p, d in results if d is not None}


def _put_new(fs: Any, path: str, data: bytes) -> bool:
    """Create ``path`` with ``data`` unless it exists (then False): S3 ``If-None-Match: *``, or an
    exclusive open; a filesystem that offers neither gets a check, then a put."""
    try:
        fs.pipe_file(path, data, mode="create")
        return True
    except FileExistsError:
        return False
    except (TypeError, NotImplementedError, ValueError):
        if fs.exists(path):
            return False
        fs.pipe_file(path, data)
        return True


def _rm_quiet(fs: Any, paths: list[str]) -> None:
    if not paths:
        return
    try:
        fs.rm(paths)
    except FileNotFoundError:
        for p in paths:
            with contextlib.suppress(FileNotFoundError):
                fs.rm_file(p)


def _basename(p: str) -> str:
    return p.rstrip("/").rsplit("/", 1)[-1]


class FsspecIO:
    """:class:`~forkpoint.store.index.IndexIO` on an fsspec filesystem (``<root>/index/…``)."""

    def __init__(self, fs: Any, root: str) -> None:
        self.fs = fs
        self.base = f"{root}/{INDEX_DIR}"

    def names(self, folder: str) -> list[str]:
        try:
            paths = self.fs.ls(f"{self.base}/{folder}", detail=False)
        except FileNotFoundError:
            return []
        return [n for n in map(_basename, paths) if n and not n.startswith(".")]

    def read_many(self, folder: str, names: list[str]) -> dict[str, bytes]:
        paths = {f"{self.base}/{folder}/{n}": n for n in names}
        return {paths[p]: d for p, d in _cat_many(self.fs, list(paths)).items()}

    def create(self, folder: str, name: str, data: bytes) -> bool:
        return _put_new(self.fs, f"{self.base}/{folder}/{name}", data)

    def delete(self, folder: str, names: list[str]) -> None:
        _rm_quiet(self.fs, [f"{self.base}/{folder}/{n}" for n in names])


def _safe_rel(rel: str) -> bool:
    parts = rel.split("/")
    return all(p and p not in (".", "..") and not p.startswith(".") for p in parts)


# --------------------------------------------------------------------------- the store


class RemoteStore(Store):
    """A store at an fsspec URL, read and written through its local mirror directory ``path``."""

    def __init__(self, url: str, path: Path | None = None) -> None:
        self.url = _normalize(url)
        self.path = Path(path) if path is not None else mirror_dir(self.url)
        self._fs: Any = None
        self._root = ""

    @classmethod
    def from_mirror(cls, path: Path) -> RemoteStore:
        """The remote store whose mirror directory is ``path``."""
        try:
            url = json.loads((Path(path) / REMOTE_MARKER).read_text())["url"]
        except (OSError, ValueError, KeyError) as exc:
            raise SessionError(f"{path}: not a forkpoint mirror of a remote store ({exc})") from None
        return cls(url, Path(path))

    def __repr__(self) -> str:
        return f"RemoteStore({self.url!r})"

    # -- the filesystem

    def _connect(self) -> None:
        try:
            import fsspec
        except ImportError:
            raise SessionError(
                f"{self.url}: a remote store needs fsspec (and s3fs for s3://): pip install 'forkpoint[remote]'"
            ) from None
        options = {"use_listings_cache": False, **store_options()}
        if fsspec.utils.get_protocol(self.url) in ("file", "local"):
            # (fsspec's local filesystem makes no parent folder by itself: every upload failed)
            options = {"auto_mkdir": True, **options}
        try:
            fs, root = fsspec.url_to_fs(self.url, **options)
        except (ImportError, ValueError) as exc:
            raise SessionError(f"{self.url}: {exc} (pip install 'forkpoint[remote]')") from None
        self._fs, self._root = fs, str(root).rstrip("/")

    @property
    def fs(self) -> Any:
        """The fsspec filesystem of the store (connected on first use)."""
        if self._fs is None:
            self._connect()
        return self._fs

    @property
    def root(self) -> str:
        """The store's path within :attr:`fs`."""
        if self._fs is None:
            self._connect()
        return self._root

    @property
    def io(self) -> FsspecIO:
        """The index's view of the store."""
        return FsspecIO(self.fs, self.root)

    def location(self, sid: str) -> str:
        """The URL of session ``sid``."""
        return f"{self.url}/{sid}"

    def _key(self, sid: str, rel: str = "") -> str:
        return f"{self.root}/{sid}" + (f"/{rel}" if rel else "")

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Turn the filesystem's errors (network, credentials, missing bucket) into SessionError."""
        try:
            yield
        except SessionError:
            raise
        except Exception as exc:
            raise SessionError(f"{self.url}: {what} failed: {type(exc).__name__}: {exc}") from exc

    def _sizes(self, prefix: str) -> dict[str, int]:
        """Size of every object under ``prefix/``, by path relative to it (one listing)."""
        try:
            found = self.fs.find(prefix, detail=True)
        except FileNotFoundError:
            return {}
        start = prefix + "/"
        return {
            name[len(start) :]: int(meta.get("size") or 0)
            for name, meta in found.items()
            if name.startswith(start) and meta.get("type", "file") != "directory"
        }

    # -- writing

    def _staged(self) -> list[Path]:
        """Session directories of the mirror not uploaded yet, oldest id first."""
        out = []
        try:
            entries = sorted(os.scandir(self.path), key=lambda e: e.name)
        except FileNotFoundError:
            return []
        for e in entries:
            if e.name.startswith(".") or not e.is_dir():
                continue
            d = Path(e.path)
            if (d / LOG_NAME).is_file() and not (d / DONE).exists():
                out.append(d)
        return out

    def started(self, path: Path) -> None:
        """Mark the new staged session ``path`` as being recorded by this process."""
        recording_started(path)

    def abandoned(self, path: Path) -> None:
        """The staged session ``path`` is removed unfinished: no longer being recorded here."""
        _recording_done(path)

    def finished(self, path: Path, *, quiet: bool = False) -> str:
        """Upload the finished staged session ``path`` (then any other staged session that is ready);
        returns its URL, or its local path when the upload failed (a warning says why)."""
        path = Path(path)
        self.not_stored = None
        try:
            where = self.upload(path, blocking=True) or str(path)
        except (SessionError, OSError) as exc:
            self.not_stored = str(exc)
            if not quiet:
                say(
                    f"forkpoint: {exc}\nforkpoint: the session stays staged in {path}; the next "
                    f"`forkpoint ls --store {self.url}` or recording into that store uploads it"
                )
            return str(path)  # the store is unreachable: leave the other staged sessions be
        finally:
            _recording_done(path)
        with contextlib.suppress(SessionError, OSError):
            self.upload_pending()
        return where

    def upload(self, path: Path, *, blocking: bool = True) -> str | None:
        """Upload the staged session ``path`` (see the module docstring for the order); returns its
        URL, or None when another process is uploading it right now (``blocking`` False)."""
        path = Path(path)
        sid = path.name
        with _upload_lock(path, blocking=blocking) as locked:
            if not locked:
                return None
            if (path / DONE).is_file():
                return self.location(sid)
            data = (path / LOG_NAME).read_bytes()
            row = summarize_log(data, path)
            if row.session_id != sid:
                raise SessionError(f"{path}: the log's session id is {row.session_id!r}, not {sid!r}")
            log_key = self._key(sid, LOG_NAME)
            with self._errors(f"uploading session {sid}"):
                remote_log = _cat_many(self.fs, [log_key]).get(log_key)
                if remote_log is None:
                    self._upload_files(path, sid)
                    if not self._put_log(log_key, data):
                        remote_log = _cat_many(self.fs, [log_key]).get(log_key)
                if remote_log is not None and remote_log != data:
                    raise SessionError(
                        f"{self.location(sid)} exists with other content (two sessions with one id); "
                        "it is not overwritten"
                    )
            # (the log is in the store from here on: readable by its id, but listed nowhere until
            # its entry is written, by this upload or the next one)
            with self._errors(
                f"indexing session {sid} (its log is in the store, but `forkpoint ls` elsewhere "
                f"does not list it until this upload is retried, or `forkpoint ls --reindex`)"
            ):
                if _cat_many(self.fs, [log_key]).get(log_key) != data:
                    raise SessionError(
                        f"{self.location(sid)}: the uploaded log does not read back as written"
                    )
                self.io.create(ENTRIES, entry_name(sid), entry_bytes(row))
            write_private(
                path / DONE,
                orjson.dumps(
                    {"url": self.location(sid), "log_sha256": row.log_sha256, "uploaded": now_iso()}
                ),
            )
        with contextlib.suppress(SessionError, OSError), self._errors("consolidating the index"):
            if len(self.io.names(ENTRIES)) >= max_loose_entries():
                consolidate(self.io, read_index(self.io))
        return self.location(sid)

    def _upload_files(self, path: Path, sid: str) -> None:
        """Put every file of the session but the log and dotfiles, skipping those already there; then
        check that every one is there with its size."""
        local: dict[str, tuple[str, int]] = {}
        for dirpath, dirnames, filenames in os.walk(path):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for f in filenames:
                if f.startswith("."):
                    continue
                full = os.path.join(dirpath, f)
                rel = os.path.relpath(full, path).replace(os.sep, "/")
                if rel != LOG_NAME:
                    local[rel] = (full, os.path.getsize(full))
        prefix = self._key(sid)
        present = self._sizes(prefix) if local else {}
        for rel, (_, size) in local.items():
            if rel in present and present[rel] != size:
                raise SessionError(
                    f"{self.location(sid)}/{rel} exists with another size; it is not overwritten"
                )
        todo = [rel for rel in local if rel not in present]
        if todo:
            self.fs.put([local[r][0] for r in todo], [f"{prefix}/{r}" for r in todo])
            after = self._sizes(prefix)
            bad = [rel for rel, (_, size) in local.items() if after.get(rel) != size]
            if bad:
                raise SessionError(f"{self.location(sid)}/{bad[0]} is missing after the upload")

    def _put_log(self, key: str, data: bytes) -> bool:
        """Create the session's log remotely; False if it exists already. The last write of an upload."""
        return _put_new(self.fs, key, data)

    def upload_pending(self) -> list[str]:
        """Upload every staged session that is ready: its recording ended, or its recorder died.
        Returns notes for ``forkpoint ls``."""
        notes: list[str] = []
        waiting: list[str] = []
        for d in self._staged():
            if not (has_end(d / LOG_NAME) or _recorder_gone(d)):
                waiting.append(d.name)
                continue
            try:
                where = self.upload(d, blocking=False)
            except (SessionError, OSError) as exc:
                notes.append(f"could not upload staged session {d.name}: {exc}; it stays in {d}")
            else:
                if where:
                    notes.append(f"uploaded staged session {d.name} to {where}")
        if waiting:
            notes.append(
                f"{len(waiting)} session(s) recorded on this machine are still being recorded (or were "
                f"left unfinished by a process that did not say so) and are not uploaded yet: "
                + ", ".join(waiting[:5])
                + (" …" if len(waiting) > 5 else "")
            )
        return notes

    # -- reading

    def listing(self, *, reindex: bool = False, upload: bool = True) -> Listing:
        """Every session of the store, oldest first, from the index (a few requests, not a walk),
        plus the sessions staged here that are not uploaded yet (``staged``).

        First uploads staged sessions that are ready (``upload``). When the index is missing but the
        store has sessions, or with ``reindex``, rebuilds it from a walk of the store.
        """
        notes = self.upload_pending() if upload else []
        with self._errors("reading the index"):
            if reindex:
                entries = self.reindex()
            else:
                state = read_index(self.io)
                entries = state.entries
                if not state.loose and not state.snapshots:
                    if self._has_sessions():
                        entries = self.reindex()
                        notes.append(f"{self.url} had no index: rebuilt it from a walk of the store")
                    else:
                        self._check_bucket()
                elif len(state.loose) >= max_loose_entries() or len(state.snapshots) > 1:
                    try:
                        consolidate(self.io, state)
                    except Exception as exc:  # read-only credentials still list
                        notes.append(f"could not consolidate the index of {self.url}: {exc}")
        base = str(self.path)
        rows = [
            SessionInfo.from_entry(e, local=os.path.join(base, sid), location=f"{self.url}/{sid}")
            for sid, e in entries.items()
        ]
        for d in self._staged():
            if d.name not in entries:
                row = scan(d)
                row.staged = True
                rows.append(row)
        rows.sort(key=session_order)
        return Listing(rows, notes, self.url)

    def _check_bucket(self) -> None:
        """Raise :class:`SessionError` when the store's bucket does not exist (or these credentials
        cannot see it): its folders then list as empty, and a typo in the bucket's name read as a
        store with no sessions. Only for filesystems with buckets (s3fs, gcsfs, adlfs)."""
        split = getattr(self.fs, "split_path", None)
        if split is None:
            return
        bucket = str(split(self.root)[0])
        if bucket and not self.fs.exists(bucket):
            raise SessionError(
                f"{self.url}: the bucket {bucket!r} does not exist, or these credentials cannot see it"
            )

    def _has_sessions(self) -> bool:
        try:
            names = self.fs.ls(self.root, detail=False)
        except FileNotFoundError:
            return False
        return any(_basename(n) != INDEX_DIR for n in names)

    def reindex(self) -> dict[str, dict[str, Any]]:
        """Rebuild the index from a walk of the store: every ``<id>/session.jsonl``. An entry whose
        recorded log size matches is kept; every other log is downloaded and summarized. Returns
        the entries by session id."""
        with self._errors("rebuilding the index"):
            state = read_index(self.io)  # before the walk: everything it read is in the walk too
            prefix = self.root
            logs: dict[str, int] = {}
            for rel, size in self._sizes(prefix).items():
                parts = rel.split("/")
                if len(parts) == 2 and parts[1] == LOG_NAME and parts[0] != INDEX_DIR:
                    logs[parts[0]] = size
            entries: dict[str, dict[str, Any]] = {}
            todo = []
            for sid, size in logs.items():
                e = state.entries.get(sid)
                if e is not None and int(e.get("log_size") or -1) == size:
                    entries[sid] = e
                else:
                    todo.append(sid)
            got = _cat_many(self.fs, [self._key(sid, LOG_NAME) for sid in todo])
            for sid in todo:
                data = got.get(self._key(sid, LOG_NAME))
                if data is None:
                    continue
                try:
                    entries[sid] = summarize_log(data, self.path / sid).to_entry()
                except SessionError:
                    continue  # unreadable: not indexed (verify names the problem)
            consolidate(self.io, state, authoritative=entries.values())
        return entries

    def resolve(self, ref: str | Path, *, refresh: bool = False) -> Path:
        """The local copy of the session ``ref`` names (full id, unique prefix, ``last``), downloaded
        first if needed (again with ``refresh``)."""
        text = str(ref)
        if text != "last" and "/" not in text:
            local = self.path / text
            if (local / LOG_NAME).is_file() and not (refresh and (local / DONE).is_file()):
                return local
            if _FULL_ID.match(text):
                got = self.fetch(text, refresh=refresh)
                if got is not None:
                    return got
        row = pick(text, ref, self.listing(upload=False).rows, self.url)
        if row.staged:
            return row.path
        got = self.fetch(row.session_id, refresh=refresh)
        if got is None:
            raise SessionError(
                f"{self.location(row.session_id)}: in the index but not in the store "
                f"(deleted?); `forkpoint ls --reindex --store {self.url}` rebuilds the index"
            )
        return got

    def fetch(self, sid: str, *, refresh: bool = False) -> Path | None:
        """Download session ``sid`` into the mirror (unless there already); None if the store has no
        such session. The log is read first: once it exists, every file it refers to does."""
        local = self.path / sid
        done = (local / DONE).is_file()
        if (local / LOG_NAME).is_file() and (not done or not refresh):
            return local
        prefix = self._key(sid)
        with self._errors(f"downloading session {sid}"):
            log_key = f"{prefix}/{LOG_NAME}"
            log = _cat_many(self.fs, [log_key]).get(log_key)
            if log is None:
                return None
            sizes = {r: n for r, n in self._sizes(prefix).items() if r != LOG_NAME and _safe_rel(r)}
        tmp = self.path / f".fetch-{sid}-{secrets.token_hex(4)}"
        try:
            tmp.mkdir(mode=0o700)
            for rels in by_size(
                sizes, sizes.__getitem__, FETCH_BYTES
            ):  # (a session's blobs may not fit in memory at once)
                with self._errors(f"downloading session {sid}"):
                    files = _cat_many(self.fs, [f"{prefix}/{r}" for r in rels])
                for r in rels:
                    data = files.pop(f"{prefix}/{r}", None)
                    if data is None:
                        continue  # deleted meanwhile: verify reports the missing blob
                    target = tmp / r
                    private_dirs(target.parent)  # (blobs/ too, under umask 000)
                    with open(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                        f.write(data)
            with open(os.open(tmp / LOG_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(log)
            write_private(tmp / DONE, orjson.dumps({"url": self.location(sid), "downloaded": now_iso()}))
            if local.exists():
                old = self.path / f".old-{sid}-{secrets.token_hex(4)}"
                os.rename(local, old)
                os.rename(tmp, local)
                if _same_log(old / LOG_NAME, log):
                    shutil.rmtree(old, ignore_errors=True)
                else:  # (a process appended after the upload): never the only copy deleted
                    kept = self.path / f".kept-{sid}-{secrets.token_hex(4)}"
                    os.rename(old, kept)
                    say(
                        f"forkpoint: WARNING: the copy of session {sid} here differed from the store's "
                        f"(a process wrote to it after it was uploaded?): kept in {kept}"
                    )
            else:
                try:
                    os.rename(tmp, local)
                except OSError:  # another process downloaded it first: same bytes
                    pass
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return local
