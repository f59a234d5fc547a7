"""Appending to a session log: one whole line per ``write(2)``, under an exclusive ``flock``.

Several processes can record into one session. Nothing ever truncates or rewrites a log: a process
killed mid-write leaves at most one incomplete last line (a *torn* line), which readers ignore (and
report as ``truncated``); the next writer closes it with a newline and declares it in its own event
(``"torn": {"offset", "bytes", "sha256"}``), so the remnant stays on disk, covered by the chain.

Every event is scrubbed (:meth:`forkpoint.redact.Scrubber.event`) before it is encoded, whoever
calls :meth:`SessionWriter.append`: the log is the last line of defence against a secret reaching disk.
"""

from __future__ import annotations

import contextlib
import fcntl
import operator
import os
import secrets
import threading
import weakref
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from ..canonical import sha256_hex
from ..errors import SessionError
from ..events import new_session_id, now_iso
from .blobs import BlobStore, fsync_path
from .codec import (
    BLOB_DIR,
    DELTA_SET_FROM,
    FORMAT,
    FORMAT_VERSION,
    LOG_NAME,
    PACKED_FROM,
    SAME_FIELDS,
    Deltas,
    SentBack,
    blob_refs,
    delta_container,
    delta_form,
    dumps,
    encode,
    encode_exotic,
    encode_field,
    json_blobs,
    line_hash,
    same_item,
    same_refs,
    valid_line,
)
from .crypto import CLEAR_EVENT, ENC, FILES, Cipher, header_cipher, seal_header
from .packing import PACK_DICT, PACKED, Packer
from .reader import read_header

#: How many recent model calls a new request is compared with to find its delta base.
_DELTA_WINDOW = 16
#: At most this many items a ``$delta`` replaces (``set``). It replaces any only when that spares
#: more items than it replaces: a message stamped with the time at the start, not a cache marker
#: moving along the last few (each replaced item stays beside a loaded list's shared slots,
#: :class:`~forkpoint.deltalist.DeltaList`, and costs a lookup there).
_DELTA_SET_MAX = 4
#: Among how many recent tool calls a new request's strings are looked up (``$dumps``).
_DUMPS_WINDOW = 64
#: The fields of an event whose strings may be stored as ``$dumps`` of an earlier tool call: what
#: an agent sends the model (a request) or carries (a checkpoint's context).
_DUMPS_FIELDS = frozenset({"request", "context"})
#: The log's own fields of a line: whatever an event passes for them is not taken (a loaded event
#: has the first four); an event that has one of the markers of a sealed or packed line (or of a
#: sealed line's payload: ``$files``, which a reader takes as the payload's blob map) is refused.
_LOG_FIELDS = frozenset({"seq", "prev", "hash", "torn", ENC, FILES, PACKED, PACK_DICT})
_LINE_MARKERS = (ENC, FILES, PACKED, PACK_DICT)
#: The fsync policies (``FORKPOINT_FSYNC``).
FSYNC_POLICIES = ("event", "close", "never")


class SessionWriter:
    """Appends events to a session log. Thread-safe, and safe for several processes at once.

    Use :meth:`create` for a new session and :meth:`open` to append to an existing one (a recorded
    child process does that). ``fsync`` (default ``$FORKPOINT_FSYNC``, else ``"event"``):

    * ``"event"``: before each line is written, the blobs it may refer to are synced (files and
      folders), and the line is ``fdatasync``-ed after: every complete event survives a machine crash
      (a ``value`` the agent's code read is synced with the next event, or at close: a loop polling
      the clock is not slowed to the disk's pace);
    * ``"close"``: one sync of everything at :meth:`close`;
    * ``"never"``: left to the operating system (a killed *process* still loses nothing written).

    Every event (and the header) is scrubbed with the redaction rules in force when the writer was
    opened (:func:`forkpoint.redact.current`). When the header has an ``encryption`` table, every
    line's content and every blob is sealed for its recipients (:mod:`.crypto`); no identity is needed.
    """

    def __init__(self, path: Path, *, fsync: str | None = None) -> None:
        from .. import redact

        self.path = Path(path)
        self.log_path = self.path / LOG_NAME
        self.fsync = fsync or os.environ.get("FORKPOINT_FSYNC") or "event"
        if self.fsync not in FSYNC_POLICIES:
            raise ValueError(f"fsync must be 'event', 'close' or 'never', not {self.fsync!r}")
        self.scrubber = redact.current()
        #: The stored header (an encrypted session's sealed fields are not opened).
        self.header = read_header(self.log_path)
        self.cipher = header_cipher(self.header, self.log_path)
        self.blobs = BlobStore(self.path / BLOB_DIR, durable=self.fsync != "never", cipher=self.cipher)
        self._fd = _open_log(self.log_path)
        self._file = _identity(self._fd)
        self._lock = threading.Lock()
        self._closed_why = "this writer is closed"
        _OPEN.add(self)
        self._known_size = -1
        self._last_seq = 0
        self._last_hash = ""
        self._torn: dict[str, Any] | None = None
        self._close_torn = b""
        self._ended = self._seen_open = False
        # The request-body lists (scrubbed, resolved) of this writer's recent model calls, for delta
        # encoding; newest first.
        self._recent: deque[tuple[int, dict[str, list[Any]]]] = deque(maxlen=_DELTA_WINDOW)
        # This writer's recent tool calls' args and results, for ``$dumps``.
        self._sent_back = SentBack(_DUMPS_WINDOW)
        # By event type, the :data:`~.codec.SAME_FIELDS` of the last event of that type this writer
        # wrote (stored form) with the seq of the line that holds each: what the next one refers to
        # as ``$same`` (the line a reference names holds the value, not another reference to it).
        self._same: dict[str, dict[str, tuple[int, Any]]] = {}
        # Lines are packed in sessions of the format that has packed lines (an older session keeps
        # its format whoever appends to it), and not sealed: compressed against other lines, a sealed
        # line's length would tell how much it shares with them.
        version = self.header.get("version", 1)
        self._packer = Packer() if self.cipher is None and version >= PACKED_FROM else None
        self._sets = version >= DELTA_SET_FROM

    @classmethod
    def create(
        cls, store: Path, header: dict[str, Any], *, session_id: str | None = None, fsync: str | None = None
    ) -> SessionWriter:
        """Create ``<store>/<id>/`` (owner-only permissions) with ``header`` as line 1.

        ``header`` gets ``format``, ``version``, ``session_id``, ``created``, ``redaction`` and
        ``hash`` filled in (a ``created`` given is kept), and is scrubbed. With ``encryption``
        (``{"scheme": "age", "recipients": ["age1…", …]}``) the session is encrypted: the header
        keeps only :data:`~.crypto.CLEAR_HEADER` readable, and so every line. The log appears complete
        or not at all (written beside, then linked into place). Raises :class:`SessionError` if the
        directory exists: a session is never overwritten.
        """
        from .. import redact

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
        if header.get("encryption") is not None:
            head["encryption"] = header["encryption"]  # public keys: not for the scrubber to rewrite
            cipher = header_cipher(head, path / LOG_NAME)
            if cipher is not None:
                head = seal_header(head, cipher)
        head["hash"] = line_hash(head)
        tmp = path / f".{LOG_NAME}.{secrets.token_hex(4)}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                _write_all(fd, dumps(head) + b"\n")
                if policy != "never":
                    os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException:  # (a full disk: no half-written header linked into place, no folder left)
            tmp.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                path.rmdir()
            raise
        try:
            os.link(tmp, path / LOG_NAME)  # fails if a log appeared meanwhile: never overwrite
        except FileExistsError:
            raise SessionError(f"{path}: a session log exists; refusing to overwrite it") from None
        finally:
            os.unlink(tmp)
        if policy != "never":
            fsync_path(path)
            fsync_path(store)
        return cls(path, fsync=policy)

    @classmethod
    def open(cls, path: Path, *, fsync: str | None = None, joined: bool = False) -> SessionWriter:
        """Append to the existing session at ``path``. ``joined``: the session was open when this
        process started (a process of the command ``forkpoint record`` or ``replay`` runs, which
        ends the session): one that has ended by the time this writer appends raises
        :class:`SessionError` (the process outlived the recording), as once it saw it open."""
        if not (Path(path) / LOG_NAME).is_file():
            raise SessionError(f"{path}: not a session directory (no {LOG_NAME})")
        writer = cls(Path(path), fsync=fsync)
        writer._seen_open = joined
        return writer

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
        # Another process ended the session this writer saw open (a forked child that outlived the
        # recording). A writer opened on an ended session may add to it, as before.
        ended = obj.get("type") == "end"
        self._ended = ended and self._seen_open
        self._seen_open = self._seen_open or not ended
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

    def last_seq(self) -> int:
        """The ``seq`` of the last event in the log now, whoever appended it (this writer, another
        process, or a line whose sync failed here after it reached the file). 0 for none."""
        with self._lock:
            if not self._ours():
                return self._last_seq
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                self._sync_tail()
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            return self._last_seq

    def append(self, event: Mapping[str, Any]) -> int:
        """Append one event (resolved form); returns its ``seq``.

        ``event`` needs ``type``; ``ts`` defaults to now. ``seq``, ``prev``, ``hash`` (and ``torn``)
        are assigned here; a field named as a sealed or packed line's marker (``$enc``, ``$files``,
        ``$zstd``, ``$dict``) raises ``ValueError``, as it could not be read back. The event is scrubbed first.
        A ``model_call`` request body's top-level lists are delta-encoded against this writer's
        recent model calls (before anything is encoded: only the new items are); a checkpoint's
        fields that repeat this writer's last checkpoint's are ``$same`` references
        (:func:`~.codec.same_refs`).
        """
        return self.write(event)[0]

    def write(self, event: Mapping[str, Any]) -> tuple[int, dict[str, Any]]:
        """:meth:`append`, returning the ``seq`` and the event as the session holds it: scrubbed,
        in resolved form (what a reader gets back, without ``seq``, ``prev`` and ``hash``)."""
        marker = next((k for k in _LINE_MARKERS if k in event), None)
        if marker is not None:
            raise ValueError(
                f"{self.log_path}: an event cannot have a field {marker!r}: it marks a line of the log"
            )
        with self._lock:
            if not self._ours():
                raise SessionError(f"{self.log_path}: {self._closed_why}")
            stored = {"type": event["type"], "ts": event.get("ts") or now_iso()}
            stored.update((k, v) for k, v in event.items() if k not in _LOG_FIELDS)
            stored = self.scrubber.event(stored)
            scrubbed = stored
            body = delta_container(stored)
            lists = {k: v for k, v in body.items() if isinstance(v, list) and v} if body else {}
            deltas = self._delta_bases(lists)
            if deltas:
                stored = _trimmed(stored, deltas)
            # field by field: the line itself is never an encoding, whatever its keys
            sent_back = self._sent_back if event["type"] in ("model_call", "checkpoint") else None
            # A tool call's fields may be stored as they are (codec.encode_field); a model call's
            # request is encoded into new containers, which the delta encoding below changes.
            enc = encode_field if event["type"] == "tool_call" else encode
            stored = {
                k: enc(v, self.blobs, sent_back if k in _DUMPS_FIELDS else None) for k, v in stored.items()
            }
            if self._packer is None:  # (a packed line compresses these better than a blob of their own)
                json_blobs(stored, scrubbed, self.blobs)
            names = SAME_FIELDS.get(stored["type"], ())
            whole = {k: stored[k] for k in names if k in stored}
            bases = self._same.get(stored["type"], {})
            stored, referred = same_refs(stored, bases)
            # (taken before the sync: every blob file a line lists is durable before the line)
            new_files = self.blobs.take_written() if self.cipher is not None else {}
            if self.fsync == "event":
                self.blobs.sync()
            fcntl.flock(self._fd, fcntl.LOCK_EX)
            try:
                self._sync_tail()
                if self._ended:
                    raise SessionError(
                        f"{self.log_path}: the session has ended (event seq {self._last_seq} is its end, written "
                        "by another process): a process that outlived the recording cannot add to it"
                    )
                seq = self._last_seq + 1
                if deltas:
                    _delta_encode(stored, deltas)
                where = f"{self.log_path}: event seq {seq}"
                packed = None
                if self.cipher is not None:
                    stored = _seal_event(stored, new_files, self.blobs, self.cipher, where)
                elif self._packer is not None:
                    packed = self._packer.pack(seq, stored, where)
                line_obj = {"seq": seq, **(packed[0] if packed else stored)}
                if self._torn is not None:
                    line_obj["torn"] = self._torn
                line_obj["prev"] = self._last_hash
                try:
                    line_obj["hash"] = line_hash(line_obj)
                except TypeError:  # lone surrogates or huge integers: store them in their own way
                    line_obj = encode_exotic(line_obj, where)
                    line_obj["hash"] = line_hash(line_obj)
                data = self._close_torn + dumps(line_obj) + b"\n"
                written = _write_rest(self._fd, data)
                if written[0] != len(data):
                    self._known_size = -1  # the next append looks at the tail again
                    raise SessionError(
                        f"{self.log_path}: short write ({written[0]} of {len(data)} bytes: {written[1]})"
                    )
                # A value the agent's code read (deterministic) is synced by the next event's sync, or
                # at close: a loop that polls time.time() would otherwise wait on the disk each time.
                if self.fsync == "event" and event["type"] != "value":
                    os.fdatasync(self._fd)
                self._known_size = os.fstat(self._fd).st_size
                self._seen_open = True
                self._last_seq = seq
                self._last_hash = line_obj["hash"]
                if lists:  # (only once written: a refused event's seq is the next one's)
                    self._recent.appendleft((seq, lists))
                if packed and self._packer is not None:  # (written: later lines may unpack against it)
                    self._packer.keep(seq, scrubbed["type"], packed[1])
                if scrubbed["type"] == "tool_call":
                    self._sent_back.remember(seq, scrubbed)
                if names:
                    self._same[scrubbed["type"]] = {
                        k: bases[k] if k in referred else (seq, v) for k, v in whole.items()
                    }
                self._torn, self._close_torn = None, b""
            finally:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
            return seq, scrubbed

    def _delta_bases(self, lists: dict[str, list[Any]]) -> Deltas:
        """For each list of a new request body: (base seq, items kept, indices of the kept items
        replaced) against the recent call whose same list leaves the fewest items to store, when
        one leaves fewer than all. The scrubber hands back an item it has seen as the same object
        (:meth:`~forkpoint.redact.Scrubber.json`), so a resent history is compared by identity;
        other items by their exact JSON."""
        out: Deltas = {}
        for name, items in lists.items():
            best: tuple[int, int, tuple[int, ...]] | None = None
            cost = len(items)  # items stored: those added, and those replaced
            for base_seq, base_lists in self._recent:
                base = base_lists.get(name)
                if not base or len(base) > len(items) or len(items) - len(base) >= cost:
                    continue
                keep, at = self._kept(base, items)
                if keep and len(items) - keep + len(at) < cost:
                    best, cost = (base_seq, keep, at), len(items) - keep + len(at)
            if best is not None:
                out[name] = best
        return out

    def _kept(self, base: list[Any], items: list[Any]) -> tuple[int, tuple[int, ...]]:
        """How many of ``base``'s items ``items`` keeps, and the indices of those it replaces: its
        common prefix, or (format 3) all of ``base`` with up to :data:`_DELTA_SET_MAX` replaced."""
        n = len(base)
        if all(map(operator.is_, base, items)):  # the common case, at C speed
            return n, ()
        keep = 0
        for a, b in zip(base, items, strict=False):
            if not same_item(a, b):
                break
            keep += 1
        if not self._sets or n - keep < 3:  # (one replaced, one spared: not worth it)
            return keep, ()
        at = [keep]
        start = keep + 1
        same = list(map(operator.is_, base[start:], items[start:n]))
        k = 0
        while len(at) <= _DELTA_SET_MAX:
            try:
                k = same.index(False, k)
            except ValueError:
                break
            if not same_item(base[start + k], items[start + k]):
                at.append(start + k)
            k += 1
        if len(at) > _DELTA_SET_MAX or n - keep - len(at) <= len(at):
            return keep, ()
        return n, tuple(at)

    def sync(self) -> None:
        """Flush to disk (policies ``event`` and ``close``), staying open."""
        with self._lock:
            if self._ours():
                self._sync()

    def close(self) -> None:
        """Flush to disk (policies ``event`` and ``close``) and close. Safe to call twice."""
        with self._lock:
            if self._ours():
                self._sync()
                os.close(self._fd)
                self._fd = -1
        _OPEN.discard(self)

    def _ours(self) -> bool:
        """Whether this writer's descriptor is still open on its log. A program that closes the
        descriptors it did not open (``os.closerange(3, …)``, as a daemon does) and then opens a
        file gets the log's number for it: appending, locking or closing through it would write
        into, unlock or close the program's file. Then the descriptor is this writer's no more
        (not closed here), and it writes nothing else."""
        if self._fd < 0:
            return False
        try:
            if _identity(self._fd) == self._file:
                return True
        except OSError:
            pass
        self._fd = -1
        self._closed_why = (
            "the program closed the log's file descriptor (its number may name one of the program's "
            "files now): nothing more is written"
        )
        return False

    def _sync(self) -> None:
        if self._fd >= 0 and self.fsync != "never":
            self.blobs.sync()
            os.fsync(self._fd)

    def _forked(self) -> None:
        """In a child forked while this writer was open: a file description of its own. The lock
        ``append`` takes (``flock``) belongs to the open file description, which fork shares, so
        without one parent and child would append at once, with the same seqs."""
        self._lock = threading.Lock()  # (a thread of the parent may have held it as it forked)
        if not self._ours():
            return
        try:
            fd = _open_log(self.log_path)
            self._file = _identity(fd)
        except OSError as exc:  # appending through the shared one could break the log: stop, loudly
            fd = -1
            self._closed_why = f"a forked process could not open the log for itself ({exc})"
        os.close(self._fd)
        self._fd, self._known_size = fd, -1


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd``: a short write (a file size limit, a disk that fills up
    during the write) is followed by another, which raises the ``OSError`` that says why."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _write_rest(fd: int, data: bytes) -> tuple[int, str]:
    """Write ``data`` to ``fd`` as :func:`_write_all` does, but once part of it is written, a
    failure is returned, not raised: (how many bytes were written, why the rest was not, in words;
    ``""`` when all was). Raises the ``OSError`` of a first write that wrote nothing. A short write
    alone says nothing of why (a file size limit, a full disk): the write after it does."""
    view, written = memoryview(data), 0
    try:
        while written < len(data):
            written += os.write(fd, view[written:])
    except OSError as exc:
        if not written:
            raise
        return written, exc.strerror or str(exc)
    return written, ""


def _identity(fd: int) -> tuple[int, int]:
    """The file open at ``fd``: (device, inode). Raises ``OSError`` when ``fd`` is not open."""
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _open_log(path: Path) -> int:
    """``path`` opened to append, on a descriptor above 2: in a program that closed its stdout or
    stderr, the log would take that number, and the program's prints and forkpoint's warnings
    would be written into it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    if fd > 2:
        return fd
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    finally:
        os.close(fd)


#: The writers open in this process, given their own file description in a forked child.
_OPEN: weakref.WeakSet[SessionWriter] = weakref.WeakSet()


def _after_fork() -> None:
    for writer in list(_OPEN):
        writer._forked()


os.register_at_fork(after_in_child=_after_fork)


def _seal_event(
    stored: dict[str, Any], written: dict[str, str], blobs: BlobStore, cipher: Cipher, where: str
) -> dict[str, Any]:
    """An encrypted session's line: the envelope (:data:`~.crypto.CLEAR_EVENT`), the names of the
    blob files it accounts for (``blobs``: so that ``verify`` checks them without the identity), and
    ``$enc``: the other fields sealed, with ``$files`` (blob name → file name) of the blobs they
    refer to and of those ``written`` since the last line (a checkpoint's workspace files)."""
    payload = {k: v for k, v in stored.items() if k not in CLEAR_EVENT}
    refs: dict[str, int] = {}
    blob_refs(payload, refs, 0)
    files = dict(written)
    for h in refs:
        name = blobs.file_of(h)
        if name is not None:
            files[h] = name
    payload[FILES] = files
    try:
        sealed = cipher.seal_json(payload)
    except TypeError:  # lone surrogates or huge integers: store them in their own way
        sealed = cipher.seal_json(encode_exotic(payload, where))
    out = {k: v for k, v in stored.items() if k in CLEAR_EVENT}
    out[ENC] = sealed
    out["blobs"] = sorted(set(files.values()))
    return out


def _trimmed(event: dict[str, Any], deltas: Deltas) -> dict[str, Any]:
    """``event`` with each list of its delta container that ``deltas`` names cut to what its delta
    stores: the items it replaces, then those after the ones it keeps (copies of the dicts on the
    way: the scrubbed event may share them with others)."""
    body = dict(cast(dict[str, Any], delta_container(event)))
    for name, (_, keep, at) in deltas.items():
        items = body[name]
        body[name] = [items[i] for i in at] + items[keep:]
    if event["type"] == "model_call":
        return {**event, "request": {**event["request"], "body": body}}
    return {**event, "context": body}


def _delta_encode(stored: dict[str, Any], deltas: Deltas) -> None:
    """Wrap the trimmed (:func:`_trimmed`), encoded lists of ``stored``'s delta container as
    ``$delta``."""
    body = stored["request"]["body"] if stored["type"] == "model_call" else stored["context"]
    if "$lit" in body and len(body) == 1:  # a body with reserved keys is escaped as {"$lit": {...}}
        body = body["$lit"]
    for name, (base, keep, at) in deltas.items():
        trimmed = body[name]  # (the items replaced first, then those added)
        body[name] = {"$delta": delta_form(base, keep, zip(at, trimmed, strict=False), trimmed[len(at) :])}


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
                    obj = valid_line(line)
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
