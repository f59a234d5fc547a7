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
    """

    def __init__(self, root: Path, *, durable: bool = False) -> None:
        self.root = root
        self.durable = durable
        self._pending: set[Path] = set()
        self._lock = threading.Lock()

    def path(self, h: str) -> Path:
        """Where the blob named ``h`` (64 hex) lives: ``ab/cdef…``, or ``ab/cdef….zst`` when stored
        zstd-compressed (the name is always the SHA-256 of the uncompressed bytes)."""
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
        return h

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
        """(a problem, or None; the size in bytes) of blob ``h``, reading it in pieces (any size)."""
        target = self.path(h)
        if not isinstance(h, str) or len(h) != 64 or any(c not in "0123456789abcdef" for c in h):
            return f"{self.root}: {h!r} is not a blob name (64 lowercase hex digits)", 0
        hasher = hashlib.sha256()
        size = 0
        try:
            with open(target, "rb") as f:
                pieces = (
                    zstd_chunks(f)
                    if target.name.endswith(ZSTD_SUFFIX)
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


#: From this size on, blobs are compressed at zstd level 1 instead of 10: on a 20 MB tool result
#: level 10 takes ~1.6 s of CPU against ~0.06 s (and saves little more), far longer than writing it.
HUGE_BLOB = 1 << 20


def zstd_compress(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=10 if len(data) < HUGE_BLOB else 1).compress(data)


def zstd_chunks(f: Any) -> Iterator[bytes]:
    """Decompressed pieces of a zstd stream, 1 MiB at a time: a huge or hostile blob is hashed
    without being held in memory whole."""
    import zstandard

    with zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True) as reader:
        while chunk := reader.read(1 << 20):
            yield chunk
