"""Content-addressed blobs of a session (``<session>/blobs/ab/cdef…``), zstd-compressed when that pays."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from ..canonical import sha256_hex
from ..errors import SessionError
from ..files import write_private
from ..patterns import compiled_later
from .crypto import Cipher

#: Blobs of at least this many bytes are stored zstd-compressed (when that saves a tenth).
COMPRESS_MIN = 512
ZSTD_SUFFIX = ".zst"


#: Names of temporary files an interrupted write may leave in a session's folders: forkpoint's own
#: blob and git-object temps (``.<name>.<pid>.<hex>.tmp``, ``.tmp-<pid>-…``) and git's (``tmp_obj_…``).
_LEFTOVER = compiled_later(r"^(\.tmp-.*|\..*\.tmp|tmp_.*)$")


def is_leftover(name: str) -> bool:
    """True when a file named ``name`` in ``blobs/`` or ``git-objects/`` is the temp file of a write
    that was interrupted (never part of a session: a write renames its temp into place as its last step)."""
    return bool(_LEFTOVER.match(name))


def open_regular(path: Path | str) -> BinaryIO:
    """Open ``path`` for reading if it is a regular file (binary, blocking reads).

    Opened with ``O_NONBLOCK`` so a FIFO or a device put in its place never blocks the open, and
    ``O_NOFOLLOW`` so a planted symlink is not followed; then checked with ``fstat`` (no race with a
    swap between a check and the open). Raises :class:`FileNotFoundError` and
    :class:`IsADirectoryError` as :func:`open` would, and :class:`SessionError` for a symlink, a
    FIFO, a socket or a device.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SessionError(f"{path}: is a symbolic link; refusing to follow it") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
        if not stat.S_ISREG(mode):
            raise SessionError(f"{path}: is a {_kind(mode)}, not a regular file; refusing to read it")
        os.set_blocking(fd, True)
        return open(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def fsync_path(path: Path) -> None:
    """fsync a file or a directory by path (a directory's entries become durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class BlobStore:
    """Content-addressed files under ``<session>/blobs``. Writes are atomic (temp file + rename).

    With ``durable`` (the writer's fsync policy is not ``never``), every file written is remembered
    until :meth:`sync` makes it and its directory entries durable: the writer calls that before it
    writes a line that may refer to them (policy ``event``), or once at the end (``close``).

    With a ``cipher`` (an encrypted session, :mod:`.crypto`), a blob is still *referred to* by the
    SHA-256 of its bytes, but its file is an age file of the (possibly compressed) bytes, named by
    the SHA-256 of the file: a name on disk tells nothing about the content. Which file holds which
    blob is kept inside the sealed lines (``$files``): the writer reports the files it wrote
    (:meth:`take_written`), a reader hands back what it opened (:meth:`learn`).
    """

    def __init__(self, root: Path, *, durable: bool = False, cipher: Cipher | None = None) -> None:
        self.root = root
        self.durable = durable
        self.cipher = cipher
        #: The decoded blobs read last, by (name, as bytes, size), handed back as the same objects
        #: when referred to again (:data:`~forkpoint.log.codec.RECENT_BLOBS`); None: not kept.
        self.recent: dict[tuple[str, bool, Any], bytes | str] | None = None
        self._pending: set[Path] = set()
        self._lock = threading.Lock()
        #: encrypted store: blob name (SHA-256 of the bytes) → its file's name (SHA-256 of the file)
        self._files: dict[str, str] = {}
        self._written: dict[str, str] = {}

    def path(self, h: str) -> Path:
        """Where the blob named ``h`` (64 hex) lives: ``ab/cdef…``, or ``ab/cdef….zst`` when stored
        zstd-compressed (the name is always the SHA-256 of the uncompressed bytes). In an encrypted
        store, the file of blob ``h`` (see the class doc), or a path that does not exist."""
        if self.cipher is not None:
            h = self._files.get(h, h)
        raw = self.root / h[:2] / h[2:]
        if raw.exists():
            return raw
        packed = raw.with_name(raw.name + ZSTD_SUFFIX)
        return packed if packed.exists() else raw

    def put(self, data: bytes) -> str:
        """Store ``data`` once; return its SHA-256 hex name. Blobs of :data:`COMPRESS_MIN` bytes or
        more are stored zstd-compressed when that saves a tenth or more."""
        h = sha256_hex(data)
        target = self.path(h)
        if not target.exists():
            if len(data) >= COMPRESS_MIN:
                packed = zstd_compress(data)
                if len(packed) < 0.9 * len(data):
                    data, target = packed, target.with_name(target.name + ZSTD_SUFFIX)
            if self.cipher is not None:
                data = self.cipher.seal(data)
                name = sha256_hex(data)
                target = self.root / name[:2] / (name[2:] + target.name[len(h) - 2 :])
                with self._lock:
                    self._files[h] = self._written[h] = name
            self._write(target, data)
        return h

    def learn(self, files: Any, where: str) -> None:
        """Take ``files`` (a sealed line's ``$files``: blob name → file name) into this store's map.
        Raises :class:`SessionError` naming ``where`` when it is not such a map."""
        if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()
        ):
            raise SessionError(f"{where}: its $files is not a map of blob names to file names")
        self._files.update(files)

    def file_of(self, h: str) -> str | None:
        """The file name of blob ``h`` in an encrypted store, if known."""
        return self._files.get(h)

    def take_written(self) -> dict[str, str]:
        """The blobs (name → file name) this store wrote since the last call (encrypted store)."""
        with self._lock:
            written, self._written = self._written, {}
        return written

    def _write(self, target: Path, data: bytes) -> None:
        """Write ``target`` atomically (temp file + rename), owner-only, remembered for :meth:`sync`."""
        # mkdir(parents=True) gives parents the default mode: create blobs/ itself owner-only too.
        new_root = not self.root.exists()
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        new_dir = not target.parent.exists()
        target.parent.mkdir(exist_ok=True, mode=0o700)
        write_private(target, data)  # a failed write (a full disk) leaves no temp file behind
        if self.durable:
            with self._lock:
                self._pending.add(target)
                if new_dir:
                    self._pending.add(target.parent.parent)
                if new_root:
                    self._pending.add(self.root.parent)

    def sync(self) -> None:
        """Make every blob written since the last call durable: the files, then their folders."""
        with self._lock:
            pending, self._pending = self._pending, set()
        if not pending:
            return
        dirs = {p.parent for p in pending if p.is_file()} | {p for p in pending if p.is_dir()}
        for p in sorted(p for p in pending if p.is_file()):
            fsync_path(p)
        for d in sorted(dirs, key=lambda d: len(d.parts), reverse=True):
            fsync_path(d)

    def get(self, h: str, *, where: str = "", size: int | None = None) -> bytes:
        """The bytes of blob ``h``; raises :class:`SessionError` if missing or not matching its name.
        ``size``, the length its reference gives, bounds what is read and decompressed: a blob that
        holds more (a hostile session's compression bomb) is refused before it fills the memory."""
        target = self.path(h)
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
            raise SessionError(f"{target}: the reference to blob {h[:12]}… gives no valid size{where}")
        try:
            with open_regular(target) as f:
                if size is not None and not target.name.endswith(ZSTD_SUFFIX) and self.cipher is None:
                    if os.fstat(f.fileno()).st_size > size:
                        raise SessionError(
                            f"{target}: blob {h[:12]}… holds more than the {size} bytes its reference says{where}"
                        )
                data = f.read()
        except FileNotFoundError:
            raise SessionError(f"{target}: blob {h[:12]}… is missing{where}") from None
        except OSError as exc:
            raise SessionError(f"{target}: blob {h[:12]}… cannot be read ({exc}){where}") from None
        if self.cipher is not None:
            name = self._files.get(h)
            if name is None:
                raise SessionError(f"{self.root}: blob {h[:12]}… is not listed by any line read{where}")
            if sha256_hex(data) != name:
                raise SessionError(f"{target}: blob file does not match its name{where}")
            data = self.cipher.open(data, f"{target}{where}")
        if target.name.endswith(ZSTD_SUFFIX):
            try:
                data = _decompressed(data, None if size is None else size + 1)
            except Exception as exc:  # zstandard.ZstdError and friends: a damaged frame
                raise SessionError(
                    f"{target}: compressed blob cannot be decompressed ({exc}){where}"
                ) from None
        if size is not None and len(data) > size:
            raise SessionError(
                f"{target}: blob {h[:12]}… holds more than the {size} bytes its reference says{where}"
            )
        if sha256_hex(data) != h:
            raise SessionError(f"{target}: blob content does not match its hash{where}")
        return data

    def check(self, h: str) -> tuple[str | None, int]:
        """(a problem, or None; the size in bytes) of blob ``h``, reading it in pieces (any size). In
        an encrypted store, ``h`` is a blob whose file is known (opened and checked whole), or a
        file name (the file is checked against it, unopened; the size is the file's)."""
        if self.cipher is not None and h in self._files:
            try:  # an encrypted store with its map learned: the whole check, content opened
                return None, len(self.get(h))
            except SessionError as exc:
                return str(exc), 0
        target = self.path(h)
        if not isinstance(h, str) or len(h) != 64 or any(c not in "0123456789abcdef" for c in h):
            return f"{self.root}: {h!r} is not a blob name (64 lowercase hex digits)", 0
        hasher = hashlib.sha256()
        size = 0
        try:
            with open_regular(target) as f:
                pieces = (
                    zstd_chunks(f)
                    if target.name.endswith(ZSTD_SUFFIX) and self.cipher is None
                    else iter(lambda: f.read(1 << 20), b"")
                )
                for chunk in pieces:
                    hasher.update(chunk)
                    size += len(chunk)
        except FileNotFoundError:
            return f"{target}: blob {h[:12]}… is missing", 0
        except OSError as exc:
            return f"{target}: blob {h[:12]}… cannot be read ({exc})", 0
        except SessionError as exc:  # a FIFO, a device or a symlink in its place
            return str(exc), 0
        except Exception as exc:  # a damaged zstd frame
            return f"{target}: compressed blob cannot be decompressed ({exc})", size
        if hasher.hexdigest() != h:
            return f"{target}: blob content does not match its hash", size
        return None, size


#: From this size on, blobs are compressed at zstd level 1 instead of 10: on a 20 MB tool result
#: level 10 takes ~1.6 s of CPU against ~0.06 s (and saves little more), far longer than writing it.
HUGE_BLOB = 1 << 20


def zstd_compress(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=10 if len(data) < HUGE_BLOB else 1).compress(data)


def _decompressed(data: bytes, limit: int | None) -> bytes:
    """The zstd stream ``data`` decompressed, its first ``limit`` bytes at most (None: all)."""
    out: list[bytes] = []
    n = 0
    for chunk in zstd_chunks(io.BytesIO(data)):
        out.append(chunk)
        n += len(chunk)
        if limit is not None and n >= limit:
            break
    joined = b"".join(out)
    return joined if limit is None else joined[:limit]


def zstd_chunks(f: Any) -> Iterator[bytes]:
    """Decompressed pieces of a zstd stream, 1 MiB at a time: a huge or hostile blob is hashed
    without being held in memory whole."""
    import zstandard

    with zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True) as reader:
        while chunk := reader.read(1 << 20):
            yield chunk
