"""Reading a session log: the header, then every event in resolved form, torn regions handled."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeGuard, cast, overload

import orjson

from ..canonical import sha256_hex
from ..errors import SessionError
from ..events import (
    Call,
    CheckpointEvent,
    EndEvent,
    Event,
    Header,
    ModelCallEvent,
    NoteEvent,
    OutcomeEvent,
    ToolCallEvent,
    envelope_problem,
    header_problem,
)
from .blobs import BlobStore, open_regular
from .codec import (
    BLOB_DIR,
    DUMPS_MAX,
    FORMAT,
    LOG_NAME,
    READ_VERSIONS,
    SAME_FIELDS,
    Deltas,
    Repeats,
    decode_fields,
    delta_container,
    may_hold_stored_form,
    resolve_deltas,
)
from .crypto import FILES, Cipher, header_cipher, open_event, open_header
from .packing import Unpacker

#: Functions that add derived fields to every event as it is loaded. The log knows nothing of
#: providers: :mod:`forkpoint.providers` hands in the one that adds a model call's ``summary``.
_DERIVERS: list[Callable[[dict[str, Any]], None]] = []


def add_deriver(derive: Callable[[dict[str, Any]], None]) -> None:
    """Call ``derive(event)`` on every event :meth:`Session.load` reads from now on (once per function;
    it must not raise for an event it does not understand)."""
    if derive not in _DERIVERS:
        _DERIVERS.append(derive)


#: The longest header line read (a real one is a few KiB): a hostile log of one line without a
#: newline is refused as incomplete once this much of it is read, never read whole into memory.
HEADER_MAX = 1 << 24


def read_header(log_path: Path) -> dict[str, Any]:
    """Parse and check line 1 of a session log, as stored: an encrypted session's sealed fields are
    not opened (:func:`open_session_header`). Raises :class:`SessionError` naming the problem."""
    try:
        with open_regular(log_path) as f:
            first = f.readline(HEADER_MAX)
    except FileNotFoundError:
        raise SessionError(f"{log_path}: no such session log") from None
    except IsADirectoryError:
        raise SessionError(f"{log_path}: is a directory, not a session log") from None
    return check_header(first, log_path)


def has_end(log_path: Path) -> bool:
    """True when the last complete line of the log is the ``end`` event (read from its tail)."""
    try:
        with open_regular(log_path) as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - (1 << 16)))
            tail = f.read()
    except (OSError, SessionError):
        return False
    lines = tail.split(b"\n")[:-1]
    return bool(lines) and b'"type":"end"' in lines[-1][:80]


#: What a session id may be: ``20261129-181029-3f9a1c`` (:func:`forkpoint.events.new_session_id`),
#: or any name of letters, digits, ``.``, ``_`` and ``-`` that starts with a letter or digit.
_SESSION_ID = re.compile(r"[0-9A-Za-z][0-9A-Za-z._-]{0,127}")


def is_session_id(value: object) -> TypeGuard[str]:
    """True when ``value`` is a session id (:data:`_SESSION_ID`): one name, never a path."""
    return isinstance(value, str) and _SESSION_ID.fullmatch(value) is not None


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
    if head.get("version") not in READ_VERSIONS:
        raise SessionError(
            f"{log_path}:1: session format version {head.get('version')!r} is not supported "
            f"(this forkpoint reads versions {', '.join(map(str, READ_VERSIONS))})"
        )
    sid = head.get("session_id")
    if not is_session_id(sid):
        # (an id names files of the store: its index entry, a fetched copy)
        raise SessionError(f"{log_path}:1: the header's session_id {sid!r:.80} is not a session id")
    problem = header_problem(head)
    if problem is not None:
        raise SessionError(f"{log_path}:1: the header's {problem}")
    return head


def open_session_header(log_path: Path) -> dict[str, Any]:
    """The whole header of the session log ``log_path``, an encrypted one's sealed fields opened
    with the identity of ``$FORKPOINT_IDENTITY``. Raises :class:`SessionError` (an
    :class:`~forkpoint.errors.IdentityError` when an encrypted session cannot be opened)."""
    head = read_header(log_path)
    return open_header(head, header_cipher(head, log_path), log_path)


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
        with open_regular(log_path) as f:
            first = f.readline(HEADER_MAX)
            if first:
                yield 1, 0, first
            if not first.endswith(b"\n"):
                return  # (an incomplete header: check_header refuses it)
            offset = len(first)
            for lineno, raw in enumerate(f, start=2):
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
    if type(obj["seq"]) is not int:
        # (verify said "event seq 1 out of order (expected seq 1)" of a seq "1")
        return None, f"not an event: its seq {obj['seq']!r:.80} is not a whole number"
    return obj, None


def event_lines(log_path: Path, recovered: list[dict[str, Any]]) -> Iterator[_Line]:
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


class _Resolver:
    """Turns the stored lines of one session log, in order, into events in resolved form: packed
    lines unpacked, blobs read, ``$same`` fields and ``$delta`` lists rebuilt (from the earlier
    lines it saw), derived fields added."""

    def __init__(
        self,
        path: Path,
        cipher: Cipher | None,
        version: int,
        *,
        derived: bool = True,
        share: bool = False,
        handed_out: bool = False,
    ) -> None:
        self.log_path = path / LOG_NAME
        self.version = version  # (the header's: what its lines may hold)
        self.share = share
        #: Each event is its caller's before the next lines are read (LogTail): what those build on
        #: is kept as a copy of its own (:meth:`_kept`), which a change to the event leaves as read.
        self.handed_out = handed_out
        self.derivers = _DERIVERS if derived else []
        self.cipher = cipher
        self.blobs = BlobStore(path / BLOB_DIR, cipher=cipher)
        self.blobs.recent = {}  # (a base manifest that checkpoints after it share: read once)
        self.lists: dict[int, dict[str, Sequence[Any]]] = {}
        #: By seq, the lists of each event that were stored as a ``$delta`` (:func:`.codec.resolve_deltas`).
        self.deltas: dict[int, Deltas] = {}
        self.tools: dict[int, dict[str, Any]] = {}  # tool calls by seq, for ``$dumps``
        self.repeats = Repeats()
        self.unpacker = Unpacker()

    def event(self, obj: dict[str, Any], lineno: int, raw: bytes | None = None) -> dict[str, Any]:
        """The resolved event of the stored line ``obj`` (line ``lineno``, whose bytes are ``raw``
        when known). Raises :class:`SessionError` naming the line when it cannot be unpacked, or a
        blob, a delta base or a ``$same`` field cannot be read (or decrypted:
        :class:`~forkpoint.errors.IdentityError` without a usable identity)."""
        obj, payload = self.unpacker.open(obj, f"{self.log_path}:{lineno}")
        text = raw if payload is None else payload
        if text is not None and not may_hold_stored_form(text) and str(obj.get("type")) not in SAME_FIELDS:
            # Every stored form (blob, delta, escape, sealed field) is an object key that starts
            # with "$": a line (a packed line's payload) without one is its resolved event already,
            # however large it is. (orjson writes "$" as it is; a line that writes it "\u0024" is
            # the same line, of the same hash, and decoded.) Not a checkpoint's: the fields later
            # lines refer to as ``$same`` are kept as stored (Repeats), so its event gets a copy of
            # them, which its reader may change (a LogTail's, before those lines are read).
            event = obj
        else:
            event = self._decoded(obj, lineno)
        event.pop("torn", None)
        deltas = resolve_deltas(
            event, self.lists, self.log_path, lineno, share=self.share, version=self.version
        )
        if deltas:
            self.deltas[event["seq"]] = deltas
        body = delta_container(event)
        if body is not None:
            self.lists[event["seq"]] = {
                k: list(v) if self.handed_out else v for k, v in body.items() if isinstance(v, list)
            }
        problem = envelope_problem(event)
        if problem is not None:
            raise SessionError(
                f"{self.log_path}:{lineno}: event {event.get('seq')} ({event.get('type')}): {problem}"
            )
        for derive in self.derivers:
            derive(event)
        if event.get("type") == "tool_call":
            self.tools[event["seq"]] = self._kept(event) if self.handed_out else event
        return event

    @staticmethod
    def _kept(tool_call: dict[str, Any]) -> dict[str, Any]:
        """A tool call's ``args`` and ``result`` as a later ``$dumps`` reads them, copied (as their
        JSON) where a writer may refer to them: plain JSON of at most :data:`.codec.DUMPS_MAX` bytes,
        what :class:`.codec.SentBack` keeps."""
        kept = dict(tool_call)
        for name in ("args", "result"):
            if name not in tool_call:
                continue
            try:
                data = orjson.dumps(tool_call[name])
            except TypeError:  # (bytes, lone surrogates, huge integers: never referred to)
                continue
            if len(data) <= DUMPS_MAX:
                kept[name] = orjson.loads(data)
        return kept

    def _decoded(self, obj: dict[str, Any], lineno: int) -> dict[str, Any]:
        where = f" (referenced from {self.log_path}:{lineno})"
        obj = open_event(obj, self.cipher, f"{self.log_path}:{lineno}")
        if FILES in obj:
            self.blobs.learn(obj.pop(FILES), f"{self.log_path}:{lineno}")
        obj = self.repeats.resolve(obj, f"{self.log_path}:{lineno}")
        try:
            return decode_fields(
                obj, self.blobs, where, self.tools, whole=SAME_FIELDS.get(str(obj.get("type")), ())
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise SessionError(f"{self.log_path}:{lineno}: cannot decode the event ({exc})") from None


class LogTail:
    """Follows a session log while it is being written (by this process or others).

    Each :meth:`read` returns the events whose lines were completed since the last call, in
    resolved form (as :meth:`Session.load` gives them). A line still being written is left for the
    next call; a complete line that is no event (the remnant of a writer killed mid-line, which the
    next writer declares as ``torn``) is skipped and counted in :attr:`skipped`.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.log_path = self.path / LOG_NAME
        stored = read_header(self.log_path)
        cipher = header_cipher(stored, self.log_path)
        self.header: dict[str, Any] = open_header(stored, cipher, self.log_path)
        self.skipped = 0
        self._resolver = _Resolver(self.path, cipher, stored["version"], handed_out=True)
        self._offset = 0
        self._lineno = 0

    def read(self) -> list[dict[str, Any]]:
        """The events completed since the last call, in ``seq`` order. Raises
        :class:`SessionError` when the log is gone or a completed event cannot be decoded."""
        try:
            with open_regular(self.log_path) as f:
                f.seek(self._offset)
                data = f.read()
        except OSError as exc:
            raise SessionError(f"{self.log_path}: cannot read it ({exc.strerror or exc})") from None
        end = data.rfind(b"\n") + 1
        events: list[dict[str, Any]] = []
        for raw in data[:end].splitlines(keepends=True):
            self._lineno += 1
            if self._lineno == 1:
                continue  # the header, read when the tail was opened
            obj, _ = _parse_event(raw)
            if obj is None:
                self.skipped += 1
                continue
            events.append(self._resolver.event(obj, self._lineno, raw))
        self._offset += end
        return events


@dataclass
class Session:
    """A loaded session: its header and its events in resolved form, in ``seq`` order.

    ``truncated`` is true when the log ends in an incomplete line (a recording that was killed);
    ``recovered`` lists torn regions that a later writer closed and declared (see the module doc).
    ``cipher`` is an encrypted session's (None otherwise): :meth:`blob_store` reads its blobs.
    """

    path: Path
    header: Header
    events: list[Event] = field(default_factory=list)
    truncated: bool = False
    recovered: list[dict[str, Any]] = field(default_factory=list)
    cipher: Cipher | None = None
    _blobs: BlobStore | None = field(default=None, repr=False, compare=False)
    #: By seq, the lists of an event that the log stored as a ``$delta`` of an earlier event's:
    #: field name → (base seq, keep). ``events`` holds them rebuilt whole (sharing their items).
    deltas: dict[int, Deltas] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """The session id."""
        return str(self.header["session_id"])

    @classmethod
    def load(cls, path: Path | str, *, derived: bool = True, share_lists: bool = False) -> Session:
        """Read and resolve a session directory. Raises :class:`SessionError` on bad input, naming
        the file and the line (or the blob and the line that refers to it). ``derived=False`` leaves
        out the derived fields (a model call's ``summary``: :func:`forkpoint.providers.summary`
        derives it where it is asked for), which a replay mostly never reads.

        ``share_lists=True`` gives each model call's request lists that the log stored as a
        ``$delta`` as a read-only :class:`~forkpoint.deltalist.DeltaList` that shares its items'
        slots with the other calls of the conversation: memory linear in the conversation's length
        instead of quadratic (traced: 53 → 23 MiB at 2,000 turns of the SDK-less benchmark loop).
        Such a list passes ``isinstance(x, list)`` but is not one to C encoders: ``json.dumps`` and
        ``orjson.dumps`` need ``default=forkpoint.deltalist.json_default``. forkpoint's own
        readers (replay, ``show``, ``diff``, ``export``, forks) load this way."""
        path = Path(path)
        log_path = path / LOG_NAME
        if not path.is_dir():
            raise SessionError(f"{path}: no such session directory")
        resolver: _Resolver | None = None
        recovered: list[dict[str, Any]] = []
        session: Session | None = None
        for line in event_lines(log_path, recovered):
            if line.lineno == 1:
                stored = check_header(line.raw, log_path)
                cipher = header_cipher(stored, log_path)
                header = open_header(stored, cipher, log_path)
                resolver = _Resolver(path, cipher, stored["version"], derived=derived, share=share_lists)
                session = cls(path=path, header=cast(Header, header), cipher=cipher, _blobs=resolver.blobs)
                continue
            assert session is not None and resolver is not None
            if line.error == "truncated":
                session.truncated = True
                break
            if line.obj is None:
                raise SessionError(f"{log_path}:{line.lineno}: malformed event line: {line.error}")
            session.events.append(cast(Event, resolver.event(line.obj, line.lineno, line.raw)))
        if session is None or resolver is None:
            raise SessionError(f"{log_path}: empty session log")
        session.recovered = recovered
        session.deltas = resolver.deltas
        return session

    def blob_store(self) -> BlobStore:
        """The session's blobs (an encrypted session's: with its cipher, and which file holds each
        blob, as its lines said)."""
        return self._blobs if self._blobs is not None else BlobStore(self.path / BLOB_DIR, cipher=self.cipher)

    @classmethod
    def blobs_of(cls, path: Path | str) -> BlobStore:
        """The blobs of session directory ``path``; an encrypted session is loaded for them (its
        lines say which file holds which blob), which needs its identity. Raises
        :class:`SessionError` (:class:`~forkpoint.errors.IdentityError`)."""
        path = Path(path)
        log_path = path / LOG_NAME
        head = read_header(log_path)
        if head.get("encryption") is None:
            return BlobStore(path / BLOB_DIR)
        return cls.load(path, share_lists=True).blob_store()

    @classmethod
    def header_only(cls, path: Path | str) -> Session:
        """The session with its header read and checked but no events: for a caller that only hands
        the session on (to a process that loads it itself); an encrypted session's header is opened
        (its command is shown before a replay runs it). Raises :class:`SessionError` as
        :meth:`load` does for a missing directory, a bad header or a missing identity."""
        path = Path(path)
        if not path.is_dir():
            raise SessionError(f"{path}: no such session directory")
        return cls(path=path, header=cast(Header, open_session_header(path / LOG_NAME)))

    @overload
    def by_type(self, kind: Literal["model_call"]) -> list[ModelCallEvent]: ...
    @overload
    def by_type(self, kind: Literal["tool_call"]) -> list[ToolCallEvent]: ...
    @overload
    def by_type(self, kind: Literal["checkpoint"]) -> list[CheckpointEvent]: ...
    @overload
    def by_type(self, kind: Literal["note"]) -> list[NoteEvent]: ...
    @overload
    def by_type(self, kind: Literal["outcome"]) -> list[OutcomeEvent]: ...
    @overload
    def by_type(self, kind: Literal["end"]) -> list[EndEvent]: ...
    def by_type(self, kind: str) -> list[Any]:
        """Events of one type (``model_call``, ``tool_call``, ``checkpoint``, ``note``, ``outcome``,
        ``end``)."""
        return [e for e in self.events if e.get("type") == kind]

    def records(self) -> list[dict[str, Any]]:
        """The events as plain JSON objects (the same dicts as :attr:`events`), for readers that take
        every field as it comes, defensively: a session may have been edited or made by another tool."""
        return cast(list[dict[str, Any]], self.events)

    def calls(self) -> list[Call]:
        """The model and tool calls, in log order."""
        return [e for e in self.events if e["type"] == "model_call" or e["type"] == "tool_call"]

    def end(self) -> EndEvent | None:
        """The ``end`` event, if the recording finished."""
        ends = self.by_type("end")
        return ends[-1] if ends else None
