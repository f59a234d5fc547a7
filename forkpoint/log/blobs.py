"""Content-addressed blobs of a session (``<session>/blobs/ab/cdef…``), zstd-compressed when that pays."""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..canonical import sha256_hex
from ..errors import SessionError
from .crypto import Cipher

#: Blobs of at least this many bytes are stored zstd-compressed (when that saves a tenth).
COMPRESS_MIN = 512
ZSTD_SUFFIX = ".zst"


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
        tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(data)
        os.replace(tmp, target)
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

    def get(self, h: str, *, where: str = "") -> bytes:
        """The bytes of blob ``h``; raises :class:`SessionError` if missing or not matching its name."""
        target = self.path(h)
        try:
            data = target.read_bytes()
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
                data = b"".join(zstd_chunks(io.BytesIO(data)))
            except Exception as exc:  # zstandard.ZstdError and friends: a damaged frame
                raise SessionError(
                    f"{target}: compressed blob cannot be decompressed ({exc}){where}"
                ) from None
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
            with open(target, "rb") as f:
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
        except Exception as exc:  # a damaged zstd frame
            return f"{target}: compressed blob cannot be decompressed ({exc})", size
        if hasher.hexdigest() != h:
            return f"{target}: blob content does not match its hash", size
        return None, size


def zstd_compress(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=10).compress(data)


def zstd_chunks(f: Any) -> Iterator[bytes]:
    """Decompressed pieces of a zstd stream, 1 MiB at a time: a huge or hostile blob is hashed
    without being held in memory whole."""
    import zstandard

    with zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True) as reader:
        while chunk := reader.read(1 << 20):
            yield chunk
