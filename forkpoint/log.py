"""The session log: an append-only JSONL file with a hash chain, and a content-addressed blob folder.

Layout of a session directory (format 1, documented in ``docs/format.md``)::

    <session-id>/
        session.jsonl          line 1: header; then one event per line
        blobs/ab/cdef…         content-addressed payloads, named by the SHA-256 of their bytes
        git-objects/           git objects of checkpoints' source trees (see checkpoint.py)

Every line carries ``hash`` = SHA-256 of its own canonical JSON without ``hash``; every event also
carries ``prev`` = the ``hash`` of the line before it. Changing a byte anywhere breaks the chain.

Encodings that keep storage linear in the length of a conversation although an agent resends its
whole history at every turn, and that let any value round-trip:

* ``{"$blob": "<sha256>", "size": n}`` stands for a string of ``n`` bytes (UTF-8) kept in ``blobs/``;
  with ``"bytes": true`` for binary data. Equal payloads are stored once.
* ``{"$delta": {"base": S, "keep": K, "add": [...]}}`` stands for a list of a model call's request
  body (or a checkpoint's carried context): the first ``K`` items of the same field of event ``S``,
  then ``add``.
* ``{"$b64": "…"}`` is short binary data; ``{"$u": "<base64>"}`` a string that is not valid Unicode
  (lone surrogates); ``{"$int": "<digits>"}`` an integer outside 64 bits; ``{"$lit": {…}}`` user
  data that itself has one of these keys.

Reading resolves all of them; the in-memory (resolved) form represents binary data as :class:`bytes`.

Every event is scrubbed (:func:`forkpoint.redact.scrub_event`) before it is encoded, whoever calls
:meth:`SessionWriter.append`: the log is the last line of defence against a secret reaching disk.

Writers append one whole line per ``write(2)`` under an exclusive ``flock``, so several processes
can record into one session. Nothing ever truncates or rewrites a log: a process killed mid-write
leaves at most one incomplete last line (a *torn* line), which readers ignore (and report as
``truncated``); the next writer closes it with a newline and declares it in its own event
(``"torn": {"offset", "bytes", "sha256"}``), so the remnant stays on disk, covered by the chain.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import io
import os
import secrets
import threading
import time
import zlib
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from .canonical import digest, sha256_hex

FORMAT = "forkpoint.session"
FORMAT_VERSION = 1
LOG_NAME = "session.jsonl"
BLOB_DIR = "blobs"
GIT_OBJECTS = "git-objects"
#: Strings at least this long (UTF-8 bytes) are stored as blobs.
BLOB_MIN_BYTES = 1024
#: Binary payloads at least this long are stored as blobs rather than base64 in the line.
BLOB_MIN_BINARY = 256
_RESERVED = frozenset({"$blob", "$b64", "$delta", "$lit", "$u", "$int", "$json"})
#: Blobs of at least this many bytes are stored zstd-compressed (when that saves a tenth).
COMPRESS_MIN = 512
ZSTD_SUFFIX = ".zst"
#: Parts of an event stored as a ``$json`` blob once their JSON reaches :data:`JSON_BLOB_MIN` bytes:
#: a stream's chunks (every SSE frame repeats ids and model names, so they compress ~10x) and the
#: request headers (the same at every call, so stored once).
JSON_BLOB_FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "model_call": (("response", "chunks"), ("request", "headers")),
}
JSON_BLOB_MIN = 256
#: How many recent model calls a new request is compared with to find its delta base.
_DELTA_WINDOW = 16
#: The fsync policies (``FORKPOINT_FSYNC``).
FSYNC_POLICIES = ("event", "close", "never")
_INT_RANGE = (-(1 << 63), (1 << 64) - 1)  # what orjson writes as a JSON integer


class SessionError(Exception):
    """A session cannot be read or written; the message names the file and the place."""


def now_iso() -> str:
    """The current UTC time as ISO 8601 with milliseconds, e.g. ``2026-11-29T18:10:29.123Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_session_id() -> str:
    """A new session id: UTC time then 6 random hex digits, e.g. ``20261129-181029-3f9a1c``.

    Ids sort by creation time, and any unique prefix names a session on the command line.
    """
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def new_span_id() -> str:
    """A random 64-bit span id as 16 hex digits (the OpenTelemetry span id shape)."""
    return secrets.token_hex(8)


def _fsync_path(path: Path) -> None:
    """fsync a file or a directory by path (a directory's entries become durable)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------- blobs


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
                packed = _zstd_compress(data)
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
            _fsync_path(p)
        for d in sorted(dirs, key=lambda d: len(d.parts), reverse=True):
            _fsync_path(d)

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
                data = b"".join(_zstd_chunks(io.BytesIO(data)))
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
                    _zstd_chunks(f)
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


def _summary(event: dict[str, Any]) -> dict[str, Any]:
    from .record import summary_of

    try:
        return summary_of(event)
    except (KeyError, TypeError, AttributeError):  # a hand-made or foreign event: no summary, not an error
        return {}


def _zstd_compress(data: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=10).compress(data)


def _zstd_chunks(f: Any) -> Iterator[bytes]:
    """Decompressed pieces of a zstd stream, 1 MiB at a time: a huge or hostile blob is hashed
    without being held in memory whole."""
    import zstandard

    with zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True) as reader:
        while chunk := reader.read(1 << 20):
            yield chunk


# --------------------------------------------------------------------------- encoding


def _encode(value: Any, blobs: BlobStore | None) -> Any:
    """Resolved form → stored form: big strings and bytes to blobs, reserved keys escaped.
    With ``blobs`` None everything stays inline (the content of a ``$json`` blob)."""
    if isinstance(value, str):
        if blobs is not None and len(value) >= BLOB_MIN_BYTES // 4:  # cheap pre-check before encoding
            raw = value.encode("utf-8", "surrogatepass")
            if len(raw) >= BLOB_MIN_BYTES:
                return {"$blob": blobs.put(raw), "size": len(raw)}
        return value
    if isinstance(value, dict):
        enc = {k: _encode(v, blobs) for k, v in value.items()}
        return {"$lit": enc} if _RESERVED.intersection(value) else enc
    if isinstance(value, list | tuple):
        return [_encode(v, blobs) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(value)
        if blobs is not None and len(raw) >= BLOB_MIN_BINARY:
            return {"$blob": blobs.put(raw), "size": len(raw), "bytes": True}
        return {"$b64": base64.b64encode(raw).decode()}
    return value


def _json_blobs(stored: dict[str, Any], event: dict[str, Any], blobs: BlobStore) -> None:
    """Move the big, repetitive parts of a model call (see :data:`JSON_BLOB_FIELDS`) into ``$json``
    blobs: compressed, and stored once when identical (request headers usually are)."""
    for outer, inner in JSON_BLOB_FIELDS.get(stored["type"], ()):
        part = event.get(outer)
        if not isinstance(part, dict) or inner not in part or not isinstance(part[inner], list):
            continue
        data = orjson.dumps(_encode(part[inner], None))
        if len(data) >= JSON_BLOB_MIN:
            stored[outer] = {**stored[outer], inner: {"$json": blobs.put(data), "size": len(data)}}


def _encode_exotic(value: Any, where: str) -> Any:
    """Stored form with the values orjson cannot write made writable: strings with lone
    surrogates as ``$u``, integers outside 64 bits as ``$int``. Only used when a line failed."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return {"$u": base64.b64encode(value.encode("utf-8", "surrogatepass")).decode()}
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if _INT_RANGE[0] <= value <= _INT_RANGE[1] else {"$int": str(value)}
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise SessionError(f"{where}: object key {k!r} is not a string")
            try:
                k.encode("utf-8")
            except UnicodeEncodeError:
                raise SessionError(f"{where}: object key {k!r} is not valid Unicode") from None
            out[k] = _encode_exotic(v, where)
        return out
    if isinstance(value, list):
        return [_encode_exotic(v, where) for v in value]
    raise SessionError(f"{where}: a {type(value).__name__} is not JSON data")


def _decode(value: Any, blobs: BlobStore, where: str) -> Any:
    """Stored form → resolved form (the inverse of :func:`_encode`; ``$delta`` is handled by the reader)."""
    if isinstance(value, dict):
        if "$blob" in value:
            data = blobs.get(str(value["$blob"]), where=where)
            if value.get("bytes"):
                return data
            return data.decode("utf-8", "surrogatepass")
        if "$b64" in value:
            return base64.b64decode(value["$b64"])
        if "$u" in value and len(value) == 1:
            return base64.b64decode(value["$u"]).decode("utf-8", "surrogatepass")
        if "$int" in value and len(value) == 1:
            return int(value["$int"])
        if "$json" in value and isinstance(value["$json"], str):
            try:
                inner = orjson.loads(blobs.get(value["$json"], where=where))
            except orjson.JSONDecodeError as exc:
                raise SessionError(
                    f"{blobs.path(value['$json'])}: JSON blob is not JSON ({exc}){where}"
                ) from None
            return _decode(inner, blobs, where)
        if "$delta" in value:
            d = value["$delta"]
            return _Delta(int(d["base"]), int(d["keep"]), _decode(d.get("add", []), blobs, where))
        if "$lit" in value and len(value) == 1:
            return {k: _decode(v, blobs, where) for k, v in value["$lit"].items()}
        return {k: _decode(v, blobs, where) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v, blobs, where) for v in value]
    return value


def to_json(value: Any) -> Any:
    """Resolved form → plain JSON (``bytes`` become ``{"$b64": …}``), e.g. for ``show --json``."""
    if isinstance(value, bytes):
        return {"$b64": base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    return value


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value)


def _line_hash(obj: dict[str, Any]) -> str:
    return digest({k: v for k, v in obj.items() if k != "hash"})


def _valid_line(raw: bytes) -> dict[str, Any] | None:
    """The parsed line if it is a JSON object whose ``hash`` matches its content, else None."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("hash"), str):
        return None
    try:
        return obj if obj["hash"] == _line_hash(obj) else None
    except TypeError:
        return None


# --------------------------------------------------------------------------- writer


class SessionWriter:
    """Appends events to a session log. Thread-safe, and safe for several processes at once.

    Use :meth:`create` for a new session and :meth:`open` to append to an existing one (a recorded
    child process does that). ``fsync`` (default ``$FORKPOINT_FSYNC``, else ``"event"``):

    * ``"event"``: before each line is written, the blobs it may refer to are synced (files and
      folders), and the line is ``fdatasync``-ed after: every complete event survives a machine crash;
    * ``"close"``: one sync of everything at :meth:`close`;
    * ``"never"``: left to the operating system (a killed *process* still loses nothing written).

    Every event (and the header) is scrubbed with the redaction rules in force when the writer was
    opened (:func:`forkpoint.redact.current`).
    """

    def __init__(self, path: Path, *, fsync: str | None = None) -> None:
        from . import redact

        self.path = Path(path)
        self.log_path = self.path / LOG_NAME
        self.fsync = fsync or os.environ.get("FORKPOINT_FSYNC") or "event"
        if self.fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be 'event', 'close' or 'never', not {self.fsync!r}")
        self.scrubber = redact.current()
        self.blobs = BlobStore(self.path / BLOB_DIR, durable=self.fsync != "never")
        self._fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND)
        self._lock = threading.Lock()
        self._known_size = -1
        self._last_seq = 0
        self._last_hash = ""
        self._torn: dict[str, Any] | None = None
        self._close_torn = b""
        # Item digests of request-body lists of this writer's recent model calls, for delta encoding.
        self._recent: deque[tuple[int, dict[str, list[str]]]] = deque(maxlen=_DELTA_WINDOW)
        self.header = read_header(self.log_path)

    @classmethod
    def create(
        cls, store: Path, header: dict[str, Any], *, session_id: str | None = None, fsync: str | None = None
    ) -> SessionWriter:
        """Create ``<store>/<id>/`` (owner-only permissions) with ``header`` as line 1.

        ``header`` gets ``format``, ``version``, ``session_id``, ``created``, ``redaction`` and
        ``hash`` filled in (a ``created`` given is kept), and is scrubbed. The log appears complete
        or not at all (written beside, then linked into place). Raises :class:`SessionError` if the
        directory exists: a session is never overwritten.
        """
        from . import redact

        policy = fsync or os.environ.get("FORKPOINT_FSYNC") or "event"
        if policy not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be 'event', 'close' or 'never', not {policy!r}")
        scrubber = redact.current()
        sid = session_id or new_session_id()
        store = Path(store)
        store.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = store / sid
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            raise SessionError(f"{path}: a session with this id exists; refusing to overwrite it") from None
        head: dict[str, Any] = {
            "type": "header",
            "format": FORMAT,
            "version": FORMAT_VERSION,
            "session_id": sid,
            "created": now_iso(),
            "redaction": {"rules": scrubber.rules.digest(), "config": scrubber.rules.source},
            **{k: v for k, v in header.items() if k != "hash"},
        }
        head = scrubber.event(head)
        head["session_id"], head["format"], head["version"] = sid, FORMAT, FORMAT_VERSION
        head["hash"] = _line_hash(head)
        tmp = path / f".{LOG_NAME}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, _dumps(head) + b"\n")
            if policy != "never":
                os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path / LOG_NAME)  # fails if a log appeared meanwhile: never overwrite
        except FileExistsError:
            raise SessionError(f"{path}: a session log exists; refusing to overwrite it") from None
        finally:
            os.unlink(tmp)
        if policy != "never":
            _fsync_path(path)
            _fsync_path(store)
        return cls(path, fsync=policy)

    @classmethod
    def open(cls, path: Path, *, fsync: str | None = None) -> SessionWriter:
        """Append to the existing session at ``path``."""
        if not (Path(path) / LOG_NAME).is_file():
            raise SessionError(f"{path}: not a session directory (no {LOG_NAME})")
        return cls(Path(path), fsync=fsync)

    @property
    def session_id(self) -> str:
        """This session's id."""
        return str(self.header["session_id"])

    def _sync_tail(self) -> None:
        """Under the file lock: learn the last seq and hash if another process has appended, and
        notice a torn tail (a writer killed mid-write), to close and declare with the next event."""
        size = os.fstat(self._fd).st_size
        if size == self._known_size:
            return
        obj, end, ends_with_newline = _last_valid_line(self.log_path, size)
        self._last_seq = int(obj.get("seq", 0))
        self._last_hash = str(obj["hash"])
        self._known_size = size
        self._torn, self._close_torn = None, b""
        if not ends_with_newline:
            self._close_torn = b"\n"
        if end < size:
            with open(self.log_path, "rb") as f:
                f.seek(end)
                region = f.read(size - end) + self._close_torn
            self._torn = {"offset": end, "bytes": len(region), "sha256": sha256_hex(region)}

    def append(self, event: dict[str, Any]) -> int:
        """Append one event (resolved form); returns its ``seq``.

        ``event`` needs ``type``; ``ts`` defaults to now. ``seq``, ``prev``, ``hash`` (and ``torn``)
        are assigned here. The event is scrubbed first. A ``model_call`` request body's top-level
        lists are delta-encoded against this writer's recent model calls.
        """
        with self._lock:
            if self._fd < 0:
                raise SessionError(f"{self.log_path}: this writer is closed")
            stored = {"type": event["type"], "ts": event.get("ts") or now_iso()}
            stored.update((k, v) for k, v in event.items() if k not in ("seq", "prev", "hash", "torn"))
            stored = self.scrubber.event(stored)
            lists = _body_lists(stored)
            # field by field: the line itself is never an encoding, whatever its keys
            scrubbed = stored
            stored = {k: _encode(v, self.blobs) for k, v in stored.items()}
            _json_blobs(stored, scrubbed, self.blobs)
            if self.fsync == "event":
                self.blobs.sync()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                self._sync_tail()
                seq = self._last_seq + 1
                if lists:
                    self._delta_encode(stored, lists, seq)
                line_obj = {"seq": seq, **stored}
                if self._torn is not None:
                    line_obj["torn"] = self._torn
                line_obj["prev"] = self._last_hash
                try:
                    line_obj["hash"] = _line_hash(line_obj)
                except TypeError:  # lone surrogates or huge integers: store them in their own way
                    line_obj = _encode_exotic(line_obj, f"{self.log_path}: event seq {seq}")
                    line_obj["hash"] = _line_hash(line_obj)
                data = self._close_torn + _dumps(line_obj) + b"\n"
                written = os.write(self._fd, data)
                if written != len(data):
                    self._known_size = -1  # the next append looks at the tail again
                    raise SessionError(f"{self.log_path}: short write ({written} of {len(data)} bytes)")
                if self.fsync == "event":
                    os.fdatasync(self._fd)
                self._known_size = os.fstat(self._fd).st_size
                self._last_seq = seq
                self._last_hash = line_obj["hash"]
                self._torn, self._close_torn = None, b""
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            return seq

    def _delta_encode(self, stored: dict[str, Any], lists: dict[str, list[str]], seq: int) -> None:
        body = stored["request"]["body"] if stored["type"] == "model_call" else stored["context"]
        if "$lit" in body and len(body) == 1:  # a body with reserved keys is escaped as {"$lit": {...}}
            body = body["$lit"]
        for name, items in lists.items():
            best_seq, best_keep = 0, 0
            for base_seq, base_lists in self._recent:
                base = base_lists.get(name)
                if not base or len(base) > len(items):
                    continue
                keep = 0
                for a, b in zip(base, items, strict=False):
                    if a != b:
                        break
                    keep += 1
                if keep > best_keep:
                    best_seq, best_keep = base_seq, keep
            if best_keep:
                body[name] = {"$delta": {"base": best_seq, "keep": best_keep, "add": body[name][best_keep:]}}
        self._recent.append((seq, lists))

    def close(self) -> None:
        """Flush to disk (policies ``event`` and ``close``) and close. Safe to call twice."""
        with self._lock:
            if self._fd >= 0:
                if self.fsync != "never":
                    self.blobs.sync()
                    os.fsync(self._fd)
                os.close(self._fd)
                self._fd = -1


def delta_container(event: dict[str, Any]) -> dict[str, Any] | None:
    """The dict whose top-level lists are delta-encoded: a model call's JSON request body, or a
    checkpoint's carried ``context``. None for other events."""
    if event.get("type") == "model_call":
        request = event.get("request") or {}
        body = request.get("body")
        return body if request.get("body_kind") == "json" and isinstance(body, dict) else None
    if event.get("type") == "checkpoint":
        context = event.get("context")
        return context if isinstance(context, dict) else None
    return None


def _body_lists(event: dict[str, Any]) -> dict[str, list[str]]:
    body = delta_container(event)
    if body is None:
        return {}
    try:
        return {k: [digest(to_json(i)) for i in v] for k, v in body.items() if isinstance(v, list) and v}
    except TypeError:  # values canonical JSON cannot hold: no delta encoding for this event
        return {}


def _last_valid_line(path: Path, size: int) -> tuple[dict[str, Any], int, bool]:
    """The last line within the first ``size`` bytes of ``path`` that is a valid line (JSON object,
    hash matching), the offset just after it, and whether the file ends with a newline.

    Lines after it are a torn region, allowed only when the file does not end with a newline (a
    write was cut off). Raises :class:`SessionError` when the log ends in a complete line that is
    not valid: that is damage, not a crash, and appending would hide it.
    """
    block = 1 << 16
    with open(path, "rb") as f:
        while True:
            start = max(0, size - block)
            f.seek(start)
            buf = f.read(size - start)
            ends_with_newline = buf.endswith(b"\n")
            pos = len(buf) - (1 if ends_with_newline else 0)
            first = True
            while True:
                nl = buf.rfind(b"\n", 0, pos)
                if nl < 0 and start > 0:
                    break  # the line may begin before this block: read more
                line = buf[nl + 1 : pos + 1]
                complete = line.endswith(b"\n")
                if complete or first:
                    # (a whole valid line that only lacks its newline is adopted: closing it makes it
                    # the event it was meant to be)
                    obj = _valid_line(line)
                    if obj is not None:
                        return obj, start + nl + 1 + len(line), ends_with_newline
                    if first and complete:
                        raise SessionError(
                            f"{path}: the last line is complete but not a valid event; refusing to append "
                            "after it (run forkpoint verify)"
                        )
                first = False
                if nl < 0:
                    raise SessionError(f"{path}: no valid line to continue the hash chain from")
                pos = nl
            block *= 4


def read_header(log_path: Path) -> dict[str, Any]:
    """Parse and check line 1 of a session log. Raises :class:`SessionError` naming the problem."""
    try:
        with open(log_path, "rb") as f:
            first = f.readline(1 << 24)
    except FileNotFoundError:
        raise SessionError(f"{log_path}: no such session log") from None
    except IsADirectoryError:
        raise SessionError(f"{log_path}: is a directory, not a session log") from None
    return check_header(first, log_path)


def check_header(first: bytes, log_path: Path) -> dict[str, Any]:
    """Parse and check a session log's first line. Raises :class:`SessionError` naming the problem."""
    if not first.endswith(b"\n"):
        raise SessionError(f"{log_path}:1: header line is incomplete")
    try:
        head = orjson.loads(first)
    except orjson.JSONDecodeError as exc:
        raise SessionError(f"{log_path}:1: header is not valid JSON ({exc})") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise SessionError(f"{log_path}:1: not a forkpoint session header")
    if head.get("version") != FORMAT_VERSION:
        raise SessionError(
            f"{log_path}:1: session format version {head.get('version')!r} is not supported "
            f"(this forkpoint reads version {FORMAT_VERSION})"
        )
    return head


# --------------------------------------------------------------------------- reading lines


@dataclass
class _Line:
    lineno: int
    offset: int
    raw: bytes
    obj: dict[str, Any] | None = None
    error: str | None = None


def _iter_lines(log_path: Path) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, raw line) of every line, the last one possibly without newline."""
    try:
        with open(log_path, "rb") as f:
            offset = 0
            for lineno, raw in enumerate(f, start=1):
                yield lineno, offset, raw
                offset += len(raw)
    except FileNotFoundError:
        raise SessionError(f"{log_path}: no such session log") from None
    except IsADirectoryError:
        raise SessionError(f"{log_path}: is a directory, not a session log") from None


def _parse_event(raw: bytes) -> tuple[dict[str, Any] | None, str | None]:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc})"
    if not isinstance(obj, dict) or "type" not in obj or "seq" not in obj or "hash" not in obj:
        return None, "not an event (needs 'type', 'seq' and 'hash')"
    return obj, None


def _event_lines(log_path: Path, recovered: list[dict[str, Any]]) -> Iterator[_Line]:
    """The header line, then every event line in order, with torn regions handled:

    * lines that are not events are held back; the next event must declare exactly those bytes
      (``torn``), else the first of them is returned with its ``error`` (the caller reports it);
    * a last line without newline, and invalid lines before it, are a cut-off write: the last item
      is then a ``_Line`` with ``obj`` None and ``error`` ``"truncated"``.
    """
    held: list[_Line] = []
    for lineno, offset, raw in _iter_lines(log_path):
        if lineno == 1:
            yield _Line(lineno, offset, raw)
            continue
        if not raw.endswith(b"\n"):
            yield _Line(lineno, offset, raw, error="truncated")
            return
        obj, error = _parse_event(raw)
        if obj is None:
            held.append(_Line(lineno, offset, raw, error=error))
            continue
        if held:
            region = b"".join(h.raw for h in held)
            declared = obj.get("torn")
            expected = {"offset": held[0].offset, "bytes": len(region), "sha256": sha256_hex(region)}
            if declared != expected:
                yield held[0]
                return
            recovered.append({**expected, "line": held[0].lineno, "declared_by": obj.get("seq")})
            held = []
        yield _Line(lineno, offset, raw, obj=obj)
    if held:
        yield held[0]


# --------------------------------------------------------------------------- reader


@dataclass
class Session:
    """A loaded session: its header and its events in resolved form, in ``seq`` order.

    ``truncated`` is true when the log ends in an incomplete line (a recording that was killed);
    ``recovered`` lists torn regions that a later writer closed and declared (see the module doc).
    """

    path: Path
    header: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)
    truncated: bool = False
    recovered: list[dict[str, Any]] = field(default_factory=list)

    @property
    def id(self) -> str:
        """The session id."""
        return str(self.header["session_id"])

    @classmethod
    def load(cls, path: Path | str) -> Session:
        """Read and resolve a session directory. Raises :class:`SessionError` on bad input, naming
        the file and the line (or the blob and the line that refers to it)."""
        path = Path(path)
        log_path = path / LOG_NAME
        if not path.is_dir():
            raise SessionError(f"{path}: no such session directory")
        blobs = BlobStore(path / BLOB_DIR)
        recovered: list[dict[str, Any]] = []
        session: Session | None = None
        resolved_lists: dict[int, dict[str, list[Any]]] = {}
        for line in _event_lines(log_path, recovered):
            if line.lineno == 1:
                session = cls(path=path, header=check_header(line.raw, log_path))
                continue
            assert session is not None
            if line.error == "truncated":
                session.truncated = True
                break
            if line.obj is None:
                raise SessionError(f"{log_path}:{line.lineno}: malformed event line: {line.error}")
            where = f" (referenced from {log_path}:{line.lineno})"
            try:
                event = {k: _decode(v, blobs, where) for k, v in line.obj.items()}
            except (ValueError, TypeError, KeyError) as exc:
                raise SessionError(f"{log_path}:{line.lineno}: cannot decode the event ({exc})") from None
            event.pop("torn", None)
            _resolve_deltas(event, resolved_lists, log_path, line.lineno)
            body = delta_container(event)
            if body is not None:
                resolved_lists[event["seq"]] = {k: v for k, v in body.items() if isinstance(v, list)}
            if (
                event.get("type") == "model_call"
                and "summary" not in event
                and isinstance(event.get("request"), dict)
            ):
                event["summary"] = _summary(event)  # derived, not stored (importers may store their own)
            session.events.append(event)
        if session is None:
            raise SessionError(f"{log_path}: empty session log")
        session.recovered = recovered
        return session

    def by_type(self, kind: str) -> list[dict[str, Any]]:
        """Events of one type (``model_call``, ``tool_call``, ``checkpoint``, ``note``, ``end``)."""
        return [e for e in self.events if e.get("type") == kind]

    def end(self) -> dict[str, Any] | None:
        """The ``end`` event, if the recording finished."""
        ends = self.by_type("end")
        return ends[-1] if ends else None


@dataclass(frozen=True)
class _Delta:
    """A decoded ``$delta``: the first ``keep`` items of field of event ``base``, then ``add``."""

    base: int
    keep: int
    add: list[Any]


def _resolve_deltas(
    event: dict[str, Any], lists: dict[int, dict[str, list[Any]]], log_path: Path, lineno: int
) -> None:
    body = delta_container(event)
    if body is None:
        return
    for name, value in body.items():
        if isinstance(value, _Delta):
            base = lists.get(value.base, {}).get(name)
            if base is None or len(base) < value.keep or value.keep < 0:
                raise SessionError(
                    f"{log_path}:{lineno}: request field {name!r} refers to event {value.base}, "
                    "which is missing or shorter than the delta says"
                )
            body[name] = base[: value.keep] + value.add


# --------------------------------------------------------------------------- verify


@dataclass
class Verification:
    """Result of :func:`verify`.

    ``ok`` unless a check failed; ``problems`` name the file and line (event seq) or blob or git
    object, the first failure first. ``truncated``: the log ends in a cut-off line. ``complete``:
    the last event is ``end``. ``notes`` say what is not a failure but worth knowing (recovered torn
    writes, a session that did not end, checks that could not run).
    """

    ok: bool
    events: int
    blobs: int
    truncated: bool
    problems: list[str]
    complete: bool = False
    notes: list[str] = field(default_factory=list)
    checkpoints: int = 0
    git_objects: int = 0

    @property
    def status(self) -> str:
        """``corrupt``, ``truncated`` (cut off mid-write), ``incomplete`` (no ``end`` event) or ``ok``."""
        if not self.ok:
            return "corrupt"
        if self.truncated:
            return "truncated"
        return "ok" if self.complete else "incomplete"


def _blob_refs(value: Any, out: dict[str, int], lineno: int) -> None:
    if isinstance(value, dict):
        if "$lit" in value and len(value) == 1 and isinstance(value["$lit"], dict):
            # Escaped user data: its keys are literal ({"$blob": ...} there is no reference).
            for v in value["$lit"].values():
                _blob_refs(v, out, lineno)
            return
        for ref in ("$blob", "$json"):
            if ref in value:
                out.setdefault(str(value[ref]), lineno)
        for v in value.values():
            _blob_refs(v, out, lineno)
    elif isinstance(value, list):
        for v in value:
            _blob_refs(v, out, lineno)


def _stored_list_len(value: Any) -> int | None:
    if isinstance(value, list):
        return len(value)
    if isinstance(value, dict) and isinstance(value.get("$delta"), dict):
        d = value["$delta"]
        if isinstance(d.get("keep"), int) and isinstance(d.get("add"), list):
            return d["keep"] + len(d["add"])
    return None


def _stored_container(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The stored (encoded) counterpart of :func:`delta_container`."""
    if obj.get("type") == "model_call":
        req = obj.get("request")
        body = req.get("body") if isinstance(req, dict) and req.get("body_kind") == "json" else None
    elif obj.get("type") == "checkpoint":
        body = obj.get("context")
    else:
        return None
    if isinstance(body, dict) and "$lit" in body and len(body) == 1 and isinstance(body["$lit"], dict):
        body = body["$lit"]
    return body if isinstance(body, dict) else None


def verify(path: Path | str, *, git: bool = True, deep: bool = True) -> Verification:
    """Check a session without trusting any of it. Reads only; never writes.

    * the header (format, version, hash), and every line: valid JSON, its ``hash``, its ``prev``
      link, ``seq`` order, ``$delta`` references; torn regions only where a later event declares
      their exact bytes;
    * every blob a line refers to, and every file of every checkpoint's workspace manifest
      (content against its name, size against the manifest), each manifest against its
      fingerprint, each carried context against its digest;
    * every git object in ``git-objects`` against its name, and (with ``git``, when the recorded
      repository is there) that every checkpoint's source tree is complete.

    With ``deep=False`` only the log is checked (header, lines, chain): what a reader that only
    shows a session needs, in one pass over the log and no blob read.

    Stops reading lines at the first broken one (later lines cannot be trusted once the chain is
    broken). A log cut off mid-write is ``truncated``, not corrupt; one without an ``end`` event is
    reported in ``notes`` (still running, killed, or its last events removed).
    """
    path = Path(path)
    log_path = path / LOG_NAME
    blobs = BlobStore(path / BLOB_DIR)
    problems: list[str] = []
    notes: list[str] = []
    refs: dict[str, int] = {}
    manifest_refs: dict[str, tuple[int, int, int]] = {}  # blob → (size, lineno, seq)
    checkpoints: list[tuple[int, int, dict[str, Any]]] = []
    lengths: dict[int, dict[str, int]] = {}
    events = 0
    truncated = False
    prev_hash = ""
    prev_seq = 0
    last_type = None
    last_pid = None
    recovered: list[dict[str, Any]] = []
    if not path.is_dir():
        return Verification(False, 0, 0, False, [f"{path}: no such session directory"])
    try:
        for line in _event_lines(log_path, recovered):
            lineno, raw = line.lineno, line.raw
            if line.error == "truncated":
                truncated = True
                break
            if lineno == 1:
                try:
                    obj = check_header(raw, log_path)
                except SessionError as exc:
                    problems.append(str(exc))
                    break
                label = "header"
            else:
                if line.obj is None:
                    problems.append(f"{log_path}:{lineno}: {line.error}")
                    break
                obj = line.obj
                label = f"event seq {obj.get('seq')}"
                if obj.get("prev") != prev_hash:
                    problems.append(
                        f"{log_path}:{lineno}: {label} does not link to the line before it (hash chain broken)"
                    )
                    break
                if obj.get("seq") != prev_seq + 1:
                    problems.append(
                        f"{log_path}:{lineno}: {label} out of order (expected seq {prev_seq + 1})"
                    )
                    break
            try:
                hash_ok = obj.get("hash") == _line_hash(obj)
            except TypeError:
                hash_ok = False
            if not hash_ok:
                problems.append(
                    f"{log_path}:{lineno}: {label} was modified (its hash does not match its content)"
                )
                break
            prev_hash = str(obj["hash"])
            if lineno == 1:
                continue
            events += 1
            seq = prev_seq = int(obj["seq"])
            last_type, last_pid = obj.get("type"), obj.get("pid")
            for value in obj.values():
                _blob_refs(value, refs, lineno)
            container = _stored_container(obj)
            if container is not None:
                mine: dict[str, int] = {}
                for name, value in container.items():
                    n = _stored_list_len(value)
                    if isinstance(value, dict) and "$delta" in value:
                        d = value["$delta"]
                        base_len = lengths.get(d.get("base"), {}).get(name) if isinstance(d, dict) else None
                        if n is None or base_len is None or d["base"] >= seq or d["keep"] > base_len:
                            problems.append(
                                f"{log_path}:{lineno}: {label}: field {name!r} refers to event "
                                f"{d.get('base') if isinstance(d, dict) else '?'}, which is missing, later, "
                                "or shorter than the delta says"
                            )
                    if n is not None:
                        mine[name] = n
                lengths[seq] = mine
            if obj.get("type") == "checkpoint":
                checkpoints.append((lineno, seq, obj))
            if problems:
                break
    except SessionError as exc:
        problems.append(str(exc))
    if not problems and not prev_hash:
        # Not even a header: nothing here can be trusted or replayed. (A new log is linked into
        # place whole, so a real session never looks like this, even after a crash.)
        problems.append(f"{log_path}: empty: a session log starts with its header")
    for r in recovered:
        notes.append(
            f"{log_path}:{r['line']}: {r['bytes']} bytes of a write cut off by a crash, closed and declared "
            f"by event seq {r['declared_by']}"
        )
    if not deep:
        refs.clear()
        checkpoints = []
    for h, lineno in sorted(refs.items(), key=lambda kv: kv[1]):
        problem, _ = blobs.check(h)
        if problem:
            problems.append(f"{problem} (referenced from {log_path}:{lineno})")
    if not problems:
        _verify_checkpoints(path, log_path, checkpoints, problems, manifest_refs)
    for h, (size, lineno, seq) in sorted(manifest_refs.items(), key=lambda kv: kv[1][1]):
        problem, actual = blobs.check(h)
        if problem:
            problems.append(f"{problem} (workspace file of checkpoint seq {seq}, {log_path}:{lineno})")
        elif actual != size:
            problems.append(
                f"{blobs.path(h)}: {actual} bytes, but checkpoint seq {seq} ({log_path}:{lineno}) says {size}"
            )
    git_objects = _verify_git_objects(path / GIT_OBJECTS, problems) if deep else 0
    if git and not problems:
        _verify_trees(path, checkpoints, problems, notes)
    complete = last_type == "end"
    if not problems and not truncated and not complete:
        running = ""
        if isinstance(last_pid, int) and last_pid > 0:
            try:
                os.kill(last_pid, 0)
                running = f"; process {last_pid}, which wrote the last event, is still running"
            except (ProcessLookupError, PermissionError, OverflowError):
                running = ""
        notes.append(
            f"{log_path}: no end event: the recording is still running, was killed between two events, "
            f"or its last events were removed{running}"
        )
    return Verification(
        not problems,
        events,
        len(refs) + len(manifest_refs),
        truncated,
        problems,
        complete=complete,
        notes=notes,
        checkpoints=len(checkpoints),
        git_objects=git_objects,
    )


def _manifest_of(ws: dict[str, Any], blobs: BlobStore, where: str) -> Any:
    """A stored checkpoint workspace's manifest rows (inline, or in a ``manifest_json`` blob)."""
    if "manifest" in ws:
        return ws["manifest"]
    ref = ws.get("manifest_json")
    data = _decode(ref, blobs, where)
    return orjson.loads(data) if isinstance(data, bytes | str) else None


def _verify_checkpoints(
    path: Path,
    log_path: Path,
    checkpoints: list[tuple[int, int, dict[str, Any]]],
    problems: list[str],
    manifest_refs: dict[str, tuple[int, int, int]],
) -> None:
    """Each manifest against its fingerprint (collecting its files' blobs), each carried context
    against its digest."""
    if not checkpoints:
        return
    blobs = BlobStore(path / BLOB_DIR)
    session: Session | None = None
    for lineno, seq, obj in checkpoints:
        ws = obj.get("workspace")
        if isinstance(ws, dict) and ("manifest" in ws or "manifest_json" in ws):
            try:
                rows = _manifest_of(ws, blobs, f" (checkpoint seq {seq}, {log_path}:{lineno})")
                ok = digest(rows) == ws.get("fingerprint")
            except (SessionError, TypeError, ValueError) as exc:
                problems.append(
                    f"{log_path}:{lineno}: checkpoint seq {seq}: cannot read its manifest ({exc})"
                )
                return
            if not ok:
                problems.append(
                    f"{log_path}:{lineno}: checkpoint seq {seq}: the workspace manifest does not match its fingerprint"
                )
                return
            for row in rows if isinstance(rows, list) else []:
                if isinstance(row, list) and len(row) == 5 and isinstance(row[4], str):
                    manifest_refs.setdefault(row[4], (row[3], lineno, seq))
        if obj.get("context") is not None and obj.get("context_digest") is not None:
            if session is None:
                try:
                    session = Session.load(path)
                except SessionError as exc:
                    problems.append(str(exc))
                    return
            event = next((e for e in session.events if e.get("seq") == seq), None)
            try:
                ok = event is not None and digest(to_json(event.get("context"))) == obj["context_digest"]
            except TypeError:
                ok = False
            if not ok:
                problems.append(
                    f"{log_path}:{lineno}: checkpoint seq {seq}: the carried context does not match its digest"
                )
                return


def _verify_git_objects(objects: Path, problems: list[str]) -> int:
    """Every loose object of ``objects`` against its SHA-1 name. Returns how many were checked."""
    if not objects.is_dir():
        return 0
    count = 0
    for sub in sorted(objects.iterdir()):
        if not (sub.is_dir() and len(sub.name) == 2 and all(c in "0123456789abcdef" for c in sub.name)):
            if sub.name not in ("info", "pack"):
                problems.append(f"{sub}: not a git object folder")
            continue
        for obj in sorted(sub.iterdir()):
            if obj.name.startswith("tmp_"):
                continue  # a temporary file of a git process that was killed
            count += 1
            name = sub.name + obj.name
            h = hashlib.sha1()
            try:
                d = zlib.decompressobj()
                with open(obj, "rb") as f:
                    while chunk := f.read(1 << 20):
                        h.update(d.decompress(chunk))
                    h.update(d.flush())
                ok = d.eof and not d.unused_data and h.hexdigest() == name
            except (OSError, zlib.error):
                ok = False
            if not ok:
                problems.append(
                    f"{obj}: git object is damaged (its content does not match its name {name[:12]}…)"
                )
    pack = objects / "pack"
    if pack.is_dir() and any(pack.iterdir()):
        problems.append(f"{pack}: packed objects are not expected in a session (only loose objects)")
    return count


def _verify_trees(
    path: Path, checkpoints: list[tuple[int, int, dict[str, Any]]], problems: list[str], notes: list[str]
) -> None:
    """Every checkpoint's source tree is complete: all its objects are in the session's git-objects
    or in the recorded repository."""
    trees: dict[str, tuple[int, str]] = {}
    for _, seq, obj in checkpoints:
        src = obj.get("source")
        if isinstance(src, dict) and isinstance(src.get("tree"), str):
            trees.setdefault(src["tree"], (seq, str(src.get("repo") or "")))
    if not trees:
        return
    import subprocess

    objects = (path / GIT_OBJECTS).resolve()
    for tree, (seq, repo) in trees.items():
        if not repo or not Path(repo).is_dir():
            notes.append(
                f"checkpoint seq {seq}: the recorded repository {repo or '?'} is gone: the session's own git "
                "objects were checked, the tree's completeness was not"
            )
            continue
        env = {
            **os.environ,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_OBJECT_DIRECTORY": str(objects),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": _repo_objects(Path(repo)),
            "LC_ALL": "C",
        }
        try:
            listing = subprocess.run(
                ["git", "ls-tree", "-r", "-t", "-z", "--full-tree", tree],
                cwd=repo,
                env=env,
                capture_output=True,
                timeout=120,
            )
            oids = [entry.split(b"\t", 1)[0].split()[2] for entry in listing.stdout.split(b"\0") if entry]
            check = subprocess.run(
                ["git", "cat-file", "--batch-check"],
                cwd=repo,
                env=env,
                input=b"\n".join([tree.encode(), *oids]) + b"\n",
                capture_output=True,
                timeout=120,
            )
        except (OSError, subprocess.SubprocessError, IndexError) as exc:
            notes.append(f"checkpoint seq {seq}: git could not check source tree {tree[:12]} ({exc})")
            continue
        missing = [ln.split()[0].decode() for ln in check.stdout.splitlines() if ln.endswith(b" missing")]
        if listing.returncode != 0 or missing:
            what = ", ".join(m[:12] for m in missing[:5]) or listing.stderr.decode(errors="replace").strip()
            problems.append(
                f"{objects}: source tree {tree[:12]} of checkpoint seq {seq} is incomplete (missing: {what})"
            )
            return


def _repo_objects(repo: Path) -> str:
    import subprocess

    try:
        out = subprocess.run(
            ["git", "rev-parse", "--path-format=absolute", "--git-common-dir"],
            cwd=repo,
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return str(Path(out) / "objects") if out else ""
