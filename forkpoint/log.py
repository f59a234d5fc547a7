"""The session log: an append-only JSONL file with a hash chain, and a content-addressed blob folder.

Layout of a session directory (format 1, documented in ``docs/format.md``)::

    <session-id>/
        session.jsonl          line 1: header; then one event per line
        blobs/ab/cdef…         content-addressed payloads, named by the SHA-256 of their bytes

Every line carries ``hash`` = SHA-256 of its own canonical JSON without ``hash``; every event also
carries ``prev`` = the ``hash`` of the line before it. Changing a byte anywhere breaks the chain.

Two encodings keep storage linear in the length of a conversation although an agent resends its
whole history at every turn:

* ``{"$blob": "<sha256>", "size": n}`` stands for a string of ``n`` bytes (UTF-8) kept in ``blobs/``;
  with ``"bytes": true`` for binary data. Equal payloads are stored once.
* ``{"$delta": {"base": S, "keep": K, "add": [...]}}`` stands for a list of a model call's request
  body (or a checkpoint's carried context): the first ``K`` items of the same field of event ``S``,
  then ``add``.

Reading resolves both; the in-memory (resolved) form represents binary data as :class:`bytes`.
Writers append one whole line per ``write(2)`` under an exclusive ``flock``, so several processes
can record into one session; a process killed mid-write leaves at most one incomplete last line,
which readers ignore (and report as ``truncated``) and the next writer removes before it appends.
"""

from __future__ import annotations

import base64
import fcntl
import os
import secrets
import threading
import time
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
#: Strings at least this long (UTF-8 bytes) are stored as blobs.
BLOB_MIN_BYTES = 1024
#: Binary payloads at least this long are stored as blobs rather than base64 in the line.
BLOB_MIN_BINARY = 256
_RESERVED = frozenset({"$blob", "$b64", "$delta", "$lit"})
#: How many recent model calls a new request is compared with to find its delta base.
_DELTA_WINDOW = 16


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


# --------------------------------------------------------------------------- blobs


class BlobStore:
    """Content-addressed files under ``<session>/blobs``. Writes are atomic (temp file + rename)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path(self, h: str) -> Path:
        """Where the blob named ``h`` (64 hex) lives."""
        return self.root / h[:2] / h[2:]

    def put(self, data: bytes) -> str:
        """Store ``data`` once; return its SHA-256 hex name."""
        h = sha256_hex(data)
        target = self.path(h)
        if not target.exists():
            # mkdir(parents=True) gives parents the default mode: create blobs/ itself owner-only too.
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            target.parent.mkdir(exist_ok=True, mode=0o700)
            tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        return h

    def get(self, h: str, *, where: str = "") -> bytes:
        """The bytes of blob ``h``; raises :class:`SessionError` if missing or not matching its name."""
        target = self.path(h)
        try:
            data = target.read_bytes()
        except FileNotFoundError:
            raise SessionError(f"{target}: blob {h[:12]}… is missing{where}") from None
        if sha256_hex(data) != h:
            raise SessionError(f"{target}: blob content does not match its hash{where}")
        return data


# --------------------------------------------------------------------------- encoding


def _encode(value: Any, blobs: BlobStore) -> Any:
    """Resolved form → stored form: big strings and bytes to blobs, reserved keys escaped."""
    if isinstance(value, str):
        if len(value) >= BLOB_MIN_BYTES // 4:  # cheap pre-check before encoding
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
        if len(raw) >= BLOB_MIN_BINARY:
            return {"$blob": blobs.put(raw), "size": len(raw), "bytes": True}
        return {"$b64": base64.b64encode(raw).decode()}
    return value


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


# --------------------------------------------------------------------------- writer


class SessionWriter:
    """Appends events to a session log. Thread-safe, and safe for several processes at once.

    Use :meth:`create` for a new session and :meth:`open` to append to an existing one (a recorded
    child process does that). ``fsync`` is ``"event"`` (fsync after every event: durable at event
    boundaries even across a machine crash), ``"close"`` or ``"never"``; the default comes from
    ``FORKPOINT_FSYNC`` and is ``"event"``.
    """

    def __init__(self, path: Path, *, fsync: str | None = None) -> None:
        self.path = Path(path)
        self.log_path = self.path / LOG_NAME
        self.blobs = BlobStore(self.path / BLOB_DIR)
        self.fsync = fsync or os.environ.get("FORKPOINT_FSYNC", "event")
        if self.fsync not in ("event", "close", "never"):
            raise ValueError(f"fsync must be 'event', 'close' or 'never', not {self.fsync!r}")
        self._fd = os.open(self.log_path, os.O_WRONLY | os.O_APPEND)
        self._lock = threading.Lock()
        self._known_size = -1
        self._last_seq = 0
        self._last_hash = ""
        # Item digests of request-body lists of this writer's recent model calls, for delta encoding.
        self._recent: deque[tuple[int, dict[str, list[str]]]] = deque(maxlen=_DELTA_WINDOW)
        self.header = read_header(self.log_path)

    @classmethod
    def create(
        cls, store: Path, header: dict[str, Any], *, session_id: str | None = None, fsync: str | None = None
    ) -> SessionWriter:
        """Create ``<store>/<id>/`` (owner-only permissions) with ``header`` as line 1.

        ``header`` gets ``format``, ``version``, ``session_id``, ``created`` and ``hash`` filled in.
        Raises :class:`SessionError` if the directory exists: a session is never overwritten.
        """
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
            **header,
        }
        head["hash"] = _line_hash(head)
        fd = os.open(path / LOG_NAME, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, _dumps(head) + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        return cls(path, fsync=fsync)

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
        """Under the file lock: learn the last seq and hash if another process has appended."""
        size = os.fstat(self._fd).st_size
        if size == self._known_size:
            return
        line, end = _last_complete_line(self.log_path, size)
        if end < size:
            # A writer died mid-line: drop the torn bytes, or this append would glue onto them and
            # leave a malformed line in the middle of the log.
            os.ftruncate(self._fd, end)
            size = end
        obj = orjson.loads(line)
        self._last_seq = int(obj.get("seq", 0))
        self._last_hash = str(obj["hash"])
        self._known_size = size

    def append(self, event: dict[str, Any]) -> int:
        """Append one event (resolved form); returns its ``seq``.

        ``event`` needs ``type``; ``ts`` defaults to now. ``seq``, ``prev`` and ``hash`` are assigned
        here. A ``model_call`` request body's top-level lists are delta-encoded against this writer's
        recent model calls.
        """
        with self._lock:
            stored = {"type": event["type"], "ts": event.get("ts") or now_iso()}
            stored.update((k, v) for k, v in event.items() if k not in ("seq", "prev", "hash"))
            lists = _body_lists(event)
            stored = _encode(stored, self.blobs)
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                self._sync_tail()
                seq = self._last_seq + 1
                if lists:
                    self._delta_encode(stored, lists, seq)
                line_obj = {"seq": seq, **stored, "prev": self._last_hash}
                line_obj["hash"] = _line_hash(line_obj)
                data = _dumps(line_obj) + b"\n"
                written = os.write(self._fd, data)
                if written != len(data):
                    raise SessionError(f"{self.log_path}: short write ({written} of {len(data)} bytes)")
                if self.fsync == "event":
                    os.fdatasync(self._fd)
                self._known_size = os.fstat(self._fd).st_size
                self._last_seq = seq
                self._last_hash = line_obj["hash"]
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
        """Flush to disk and close. Safe to call twice."""
        with self._lock:
            if self._fd >= 0:
                if self.fsync != "never":
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
    return {k: [digest(to_json(i)) for i in v] for k, v in body.items() if isinstance(v, list) and v}


def _last_complete_line(path: Path, size: int) -> tuple[bytes, int]:
    """The last newline-terminated line within the first ``size`` bytes of ``path``, and the offset
    just after it (``size`` unless the file ends in a torn line).

    A torn last line (a writer killed mid-write) is skipped: the line before it is returned.
    """
    block = 1 << 16
    with open(path, "rb") as f:
        while True:
            start = max(0, size - block)
            f.seek(start)
            buf = f.read(size - start)
            end = buf.rfind(b"\n")
            if end >= 0:
                begin = buf.rfind(b"\n", 0, end)
                if begin >= 0 or start == 0:
                    return buf[begin + 1 : end + 1], start + end + 1
            elif start == 0:
                raise SessionError(f"{path}: no complete line")
            block *= 2


def read_header(log_path: Path) -> dict[str, Any]:
    """Parse and check line 1 of a session log. Raises :class:`SessionError` naming the problem."""
    try:
        with open(log_path, "rb") as f:
            first = f.readline()
    except FileNotFoundError:
        raise SessionError(f"{log_path}: no such session log") from None
    return _check_header(first, log_path)


def _check_header(first: bytes, log_path: Path) -> dict[str, Any]:
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


# --------------------------------------------------------------------------- reader


@dataclass
class Session:
    """A loaded session: its header and its events in resolved form, in ``seq`` order.

    ``truncated`` is true when the log ends in an incomplete line (a recording that was killed).
    """

    path: Path
    header: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)
    truncated: bool = False

    @property
    def id(self) -> str:
        """The session id."""
        return str(self.header["session_id"])

    @classmethod
    def load(cls, path: Path | str) -> Session:
        """Read and resolve a session directory. Raises :class:`SessionError` on bad input."""
        path = Path(path)
        log_path = path / LOG_NAME
        blobs = BlobStore(path / BLOB_DIR)
        lines = list(_iter_lines(log_path))
        if not lines:
            raise SessionError(f"{log_path}: empty session log")
        header = _check_header(lines[0][1], log_path)
        session = cls(path=path, header=header)
        resolved_lists: dict[int, dict[str, list[Any]]] = {}
        for lineno, raw in lines[1:]:
            if not raw.endswith(b"\n"):
                session.truncated = True
                break
            where = f" (referenced from {log_path}:{lineno})"
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                raise SessionError(f"{log_path}:{lineno}: malformed event line ({exc})") from None
            if not isinstance(obj, dict) or "type" not in obj or "seq" not in obj:
                raise SessionError(f"{log_path}:{lineno}: not an event (needs 'type' and 'seq')")
            event = _decode(obj, blobs, where)
            _resolve_deltas(event, resolved_lists, log_path, lineno)
            body = delta_container(event)
            if body is not None:
                resolved_lists[event["seq"]] = {k: v for k, v in body.items() if isinstance(v, list)}
            session.events.append(event)
        return session

    def by_type(self, kind: str) -> list[dict[str, Any]]:
        """Events of one type (``model_call``, ``tool_call``, ``note``, ``end``)."""
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
            if base is None or len(base) < value.keep:
                raise SessionError(
                    f"{log_path}:{lineno}: request field {name!r} refers to event {value.base}, "
                    "which is missing or shorter than the delta says"
                )
            body[name] = base[: value.keep] + value.add


def _iter_lines(log_path: Path) -> Iterator[tuple[int, bytes]]:
    try:
        with open(log_path, "rb") as f:
            yield from enumerate(f, start=1)
    except FileNotFoundError:
        raise SessionError(f"{log_path}: no such session log") from None
    except IsADirectoryError:
        raise SessionError(f"{log_path}: is a directory, not a session log") from None


# --------------------------------------------------------------------------- verify


@dataclass
class Verification:
    """Result of :func:`verify`: ``ok`` unless a check failed; ``problems`` name file, line and seq."""

    ok: bool
    events: int
    blobs: int
    truncated: bool
    problems: list[str]


def _blob_refs(value: Any, out: set[str]) -> None:
    if isinstance(value, dict):
        if "$lit" in value and len(value) == 1 and isinstance(value["$lit"], dict):
            # Escaped user data: its keys are literal ({"$blob": ...} there is no reference).
            for v in value["$lit"].values():
                _blob_refs(v, out)
            return
        if "$blob" in value and isinstance(value["$blob"], str):
            out.add(value["$blob"])
        for v in value.values():
            _blob_refs(v, out)
    elif isinstance(value, list):
        for v in value:
            _blob_refs(v, out)


def verify(path: Path | str) -> Verification:
    """Check a session's header, every line's hash, the chain of ``prev`` links, ``seq`` order and
    every referenced blob against its name. Stops at the first broken line (later lines cannot be
    trusted once the chain is broken); a torn last line is reported as truncation, not corruption.
    """
    path = Path(path)
    log_path = path / LOG_NAME
    blobs = BlobStore(path / BLOB_DIR)
    problems: list[str] = []
    refs: set[str] = set()
    events = 0
    truncated = False
    prev_hash = ""
    prev_seq = 0
    for lineno, raw in _iter_lines(log_path):
        if not raw.endswith(b"\n"):
            truncated = True
            break
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            problems.append(f"{log_path}:{lineno}: not valid JSON ({exc})")
            break
        if not isinstance(obj, dict):
            problems.append(f"{log_path}:{lineno}: not a JSON object")
            break
        label = "header" if lineno == 1 else f"event seq {obj.get('seq')}"
        if lineno == 1:
            try:
                _check_header(raw, log_path)
            except SessionError as exc:
                problems.append(str(exc))
                break
        elif obj.get("prev") != prev_hash:
            problems.append(
                f"{log_path}:{lineno}: {label} does not link to the line before it (hash chain broken)"
            )
            break
        elif obj.get("seq") != prev_seq + 1:
            problems.append(f"{log_path}:{lineno}: {label} out of order (expected seq {prev_seq + 1})")
            break
        if obj.get("hash") != _line_hash(obj):
            problems.append(
                f"{log_path}:{lineno}: {label} was modified (its hash does not match its content)"
            )
            break
        if lineno > 1:
            events += 1
            prev_seq = int(obj["seq"])
        prev_hash = str(obj["hash"])
        _blob_refs(obj, refs)
    for h in sorted(refs):
        try:
            blobs.get(h)
        except SessionError as exc:
            problems.append(str(exc))
    return Verification(not problems, events, len(refs), truncated, problems)
