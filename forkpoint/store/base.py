"""The store interface: where sessions live, and the life cycle of a session written into one.

A :class:`Store` is a directory of session directories on this machine (for a remote store, the
local mirror it records into and downloads to) plus an index. Its implementations are
:class:`~forkpoint.store.local.LocalStore` and :class:`~forkpoint.store.fsspec.RemoteStore`; what
they share is here: the life cycle (:meth:`Store.create` → :class:`Recording`), the rows of
``forkpoint ls`` (:class:`SessionInfo`) and how a reference names a session (:func:`pick`).
"""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import orjson

from ..errors import CannotRecord, SessionError, SigningError
from ..events import EndDivergence, EndEvent, ErrorRecord, Header, error_record
from ..log import LOG_NAME, SessionWriter, check_header
from ..log.blobs import open_regular
from ..text import say

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
    #: The ``end`` says the recording stopped early (a write failed): the run is not all there.
    incomplete: bool = False
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
            "incomplete": self.incomplete,
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
            incomplete=bool(entry.get("incomplete")),
            checkpoints=int(entry.get("checkpoints") or 0),
            truncated=bool(entry.get("truncated")),
            log_size=int(entry.get("log_size") or 0),
            log_sha256=str(entry.get("log_sha256") or ""),
            location=location or str(local),
        )


def session_order(row: SessionInfo) -> tuple[str, str, str]:
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
    complete = incomplete = False
    lines = rest.split(b"\n")
    truncated = bool(lines[-1])
    for lineno, raw in enumerate(lines[:-1], 2):
        events += 1
        # Cheap type sniffing: the type is always the second key of a line.
        head = raw[:80]
        # (a header's first key: a log joined to another, which readers refuse)
        if head.startswith(b'{"type":"header"'):
            raise SessionError(
                f"{log_path}:{lineno}: not an event: a second header (two logs joined into one?)"
            )
        if b'"type":"model_call"' in head:
            models += 1
        elif b'"type":"tool_call"' in head:
            tools += 1
        elif b'"type":"checkpoint"' in head:
            checkpoints += 1
        elif b'"type":"end"' in head:
            complete = True
            try:
                end = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            exit_code, incomplete = end.get("exit_code"), bool(end.get("incomplete"))
            other = end.get("other_calls")
            if isinstance(other, dict):  # (telemetry, MCP, plain HTTP: logged as model_call events)
                models -= sum(n for n in other.values() if isinstance(n, int) and n > 0)
            mcp = end.get("mcp_requests")
            if isinstance(mcp, int) and mcp > 0:  # (an MCP session's initialize, tools/list…)
                tools -= mcp
    return SessionInfo(
        local=path,
        header=header,
        events=events,
        model_calls=models,
        tool_calls=tools,
        exit_code=exit_code,
        complete=complete,
        incomplete=incomplete,
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
        with open_regular(path / LOG_NAME) as f:
            data = f.read()
    except FileNotFoundError:
        raise SessionError(f"{path / LOG_NAME}: no such session log") from None
    except IsADirectoryError:
        raise SessionError(f"{path / LOG_NAME}: is a directory, not a session log") from None
    return summarize_log(data, path)


@dataclass
class Listing:
    """What ``forkpoint ls`` shows: the sessions oldest first, and notes about the store."""

    rows: list[SessionInfo]
    notes: list[str] = field(default_factory=list)
    #: The store, as the user names it (a directory or a URL).
    store: str = ""


def scan(d: Path) -> SessionInfo:
    """:func:`info` of ``d``, or, when its log cannot be read (damaged, not a regular file, not
    readable by this user), a row whose ``error`` says why: one bad session never hides the others."""
    try:
        return info(d)
    except (SessionError, OSError) as exc:
        why = str(exc) if isinstance(exc, SessionError) else f"{d / LOG_NAME}: {exc.strerror or exc}"
        return SessionInfo(d, {"session_id": d.name}, 0, 0, 0, None, False, location=str(d), error=why)


def entry_mismatch(row: SessionInfo, real: SessionInfo) -> str | None:
    """How the index row ``row`` misdescribes the session log it names (``real``, a scan of it),
    or None when it describes it (or describes an older, shorter state of it: a stale entry)."""
    if row.log_size != real.log_size:
        return None
    for k in ENTRY_HEADER_FIELDS:
        if row.header.get(k) != real.header.get(k):
            return f"its {k} is {row.header.get(k)!r}, the log's is {real.header.get(k)!r}"
    if row.log_sha256 != real.log_sha256:
        return "its log_sha256 is not the log's"
    return None


def _confirmed(row: SessionInfo, where: str) -> SessionInfo:
    """``row`` once the log it names says the same: an index entry is a cache anyone who can write
    the store can forge, and a forged one would change what a name resolves to. A session not on
    this machine yet (a remote one) is checked when it is read."""
    if row.error is not None or not row.log_sha256:
        return row
    try:
        real = info(row.path)
    except SessionError:
        return row
    problem = entry_mismatch(row, real)
    if problem is not None:
        from ..log import verify  # (here: only a store whose index disagrees reads a log whole)

        damaged = verify(row.path, deep=False).problems
        if damaged:  # the log itself was changed, not (only) its index entry
            # (the index entry still describes the log as recorded, so every name of it is refused,
            # rm's too: reindexed, the log is read as it now is, and fails its own checks loudly)
            raise SessionError(
                f"session {real.session_id} in {where} has been changed or damaged since it was recorded: "
                f"{damaged[0]}. To remove it, or read it as it now is: forkpoint ls --reindex "
                f"(the index then takes the log as it is), then forkpoint rm {real.session_id}"
            )
        raise SessionError(
            f"the index of {where} does not describe session {real.session_id} as its log does ({problem}): "
            "the index was changed or damaged; forkpoint ls --reindex rebuilds it from the logs"
        )
    return row


#: What a session name may be, said with each name refused (:func:`name_problem`).
NAME_RULE = (
    "a session name is what forkpoint replay, show and fork find the session by: text, not empty, "
    "with no control character (NUL, newline…), no space at either end, not starting with '-' (an "
    "option) and not 'last' (the newest session)"
)


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a session's name (:data:`NAME_RULE`): no one could name the session
    by it (:func:`pick` takes ``last`` for the newest, a command line ``-x`` for an option), or
    None."""
    if not name.strip():
        return "is empty"
    if name != name.strip():
        return "starts or ends with a space"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "has a control character"
    if name.startswith("-"):
        return "starts with '-'"
    if name == "last":
        return "is the word for the newest session"
    return None


def pick(text: str, ref: str | Path, rows: list[SessionInfo], where: str) -> SessionInfo:
    """The row ``text`` names among ``rows`` (a full id, an id prefix, ``last`` or a ``--name``),
    checked against its log (:func:`_confirmed`). Raises :class:`~forkpoint.errors.SessionError`."""
    return _confirmed(_pick(text, ref, rows, where), where)


def _pick(text: str, ref: str | Path, rows: list[SessionInfo], where: str) -> SessionInfo:
    if not text.strip():
        raise SessionError("no session given: name one by path, id, id prefix, `last` or its --name")
    if text == "last":
        if not rows:
            raise SessionError(f"{where}: no sessions in this store")
        return rows[-1]
    hits = [r for r in rows if r.session_id.startswith(text)]
    named = [r for r in rows if r.error is None and r.header.get("name") == text]
    if len(hits) == 1 and named and named != hits:
        # either reading leaves a session no one could name by this text: say so, pick neither
        raise SessionError(
            f"{ref!r} is ambiguous in {where}: the start of the id of {hits[0].session_id}, and the "
            f"name of {named[-1].session_id}: name it by its id"
        )
    if len(hits) == 1:
        return hits[0]
    if named:  # a name given with --name wins over an ambiguous id prefix ("2026")
        return named[-1]  # a name recorded again (a nightly run): its newest session
    if len(hits) > 1:
        names = ", ".join(r.session_id for r in hits[:5])
        raise SessionError(f"{ref!r} is ambiguous in {where}: {names}{' …' if len(hits) > 5 else ''}")
    hint = ""
    if "@" in text:
        hint = f" ({text} looks like a checkpoint, SESSION@SEQ: see forkpoint checkpoints / restore)"
    else:
        import difflib  # (only when a session is not found: not at start-up)

        given = [str(r.header["name"]) for r in rows if r.error is None and r.header.get("name")]
        close = difflib.get_close_matches(text, list(dict.fromkeys(given[::-1])), n=3, cutoff=0.6)
        close += [
            i for i in difflib.get_close_matches(text, [r.session_id for r in rows], n=3) if i not in close
        ]
        if close:
            hint = f"; did you mean {', '.join(repr(c) for c in close[:3])}?"
    raise SessionError(
        f"no session {ref!r}: not a session directory, and no id in {where} starts with it "
        f"and no session there has that name{hint}"
    )


class Recording:
    """One session being written into a store, from :meth:`Store.create` until it is finished.

    It owns the life cycle every writer of a session follows: the log created (header as line 1),
    events appended (:attr:`writer`, or by other processes), then exactly one ``end`` event
    (:meth:`end`), the log closed, and the store told (:meth:`close`: the index entry is written,
    a remote store uploads the session). As a context manager it ends the session when the block
    exits: exit code 0, or 1 and the exception's type when the block raised.
    """

    def __init__(self, store: Store, writer: SessionWriter) -> None:
        self.store = store
        self.writer = writer
        self.started = time.perf_counter()
        self.location: str | None = None
        #: Say nothing when handing the session to its store fails (the caller reports it).
        self.quiet = False
        #: Called once the session has ended, before its log is closed and handed to the store (a
        #: live export sends the last spans); what they raise does not keep the session from closing.
        self.on_close: list[Callable[[], object]] = []
        #: Why the recording stopped early (a process's write failed), for the ``end`` event.
        self.incomplete: str | None = None
        #: The tools the model asked for that were never recorded (:meth:`forkpoint.record.Lacks.unrecorded_tools`).
        self.unrecorded_tools: dict[str, int] = {}
        #: The tools answered more often than recorded (:meth:`forkpoint.record.Lacks.fewer_calls`).
        self.fewer_calls: dict[str, int] = {}
        #: The exchanges recorded as ``model_call`` events that are no model's, by kind (:class:`EndEvent`).
        self.other_calls: dict[str, int] = {}
        #: The ``tool_call`` events that are MCP session requests, no tool's call (:class:`EndEvent`).
        self.mcp_requests = 0
        #: Once closed: why the session is not in its store (a remote store's upload failed, so it
        #: stays staged in :attr:`path`, on this machine only), else None (:attr:`Store.not_stored`).
        self.not_stored: str | None = None
        #: Why the ``end`` event could not be written (a full disk: the session stays incomplete), else None.
        self.unended: str | None = None
        self._ended = False

    @property
    def path(self) -> Path:
        """The session directory."""
        return self.writer.path

    @property
    def session_id(self) -> str:
        """The session id."""
        return self.writer.session_id

    def end(
        self,
        exit_code: int | None,
        *,
        reason: str | None = None,
        timed: bool = True,
        ts: str | None = None,
        uncaught: list[ErrorRecord] | None = None,
        divergence: EndDivergence | None = None,
    ) -> None:
        """Append the ``end`` event (once; later calls do nothing): how the run ended (exit code,
        and the exceptions that ended it uncaught, when known: ``[]`` says there were none), where a
        what-if run diverged from its parent, and (when ``timed``) its wall time since the session
        was created, else ``null``; ``ts`` is its time (default now: an import gives the time the
        imported run ended). When :attr:`incomplete` says why the recording stopped early, the event
        says so too. A failed write (a full disk) is a warning on stderr, never an exception: the
        session then stays without an ``end`` (incomplete)."""
        if self._ended:
            return
        self._ended = True
        event: EndEvent = {
            "type": "end",
            "exit_code": exit_code,
            "duration_ms": round((time.perf_counter() - self.started) * 1000, 3) if timed else None,
            "reason": reason,
        }
        if uncaught is not None:
            event["uncaught"] = uncaught
        if divergence is not None:
            event["divergence"] = divergence
        if ts is not None:
            event["ts"] = ts
        if self.incomplete is not None:
            event["incomplete"] = self.incomplete
        if self.unrecorded_tools:
            event["unrecorded_tools"] = self.unrecorded_tools
        if self.fewer_calls:
            event["fewer_calls"] = self.fewer_calls
        if self.other_calls:
            event["other_calls"] = self.other_calls
        if self.mcp_requests:
            event["mcp_requests"] = self.mcp_requests
        try:
            self.writer.append(event)
        except (OSError, SessionError) as exc:
            self.unended = str(exc)
            _warn(f"could not write the end of session {self.session_id} ({exc}): it stays incomplete")

    def close(self, *, quiet: bool = False) -> str:
        """Close the log and hand the finished session to its store; returns where it now lives (its
        directory, or its URL in a remote store). Safe to call twice."""
        if self.location is None:
            try:
                for hook in self.on_close:
                    hook()
            finally:
                try:
                    self.writer.close()
                except OSError as exc:  # the final sync on a full disk: what is written stays readable
                    _warn(f"could not sync session {self.session_id} to disk ({exc})")
            self._sign(quiet)
            self.location = self.store.finished(self.path, quiet=quiet)
            self.not_stored = self.store.not_stored
        return self.location

    def discard(self) -> None:
        """Remove this session instead of finishing it: its writer failed before it held what it was
        written for (an import that could not be written to its end), and a session ended with exit
        code 1 would look like a run that failed. Nothing of it is left, in the store or staged. Only
        before :meth:`close`."""
        if self.location is not None:
            raise SessionError(f"session {self.session_id} was handed to its store already")
        self._ended = True
        with contextlib.suppress(OSError, SessionError):
            self.writer.close()
        self.store.abandoned(self.path)
        shutil.rmtree(self.path, ignore_errors=True)
        self.location = ""

    def _sign(self, quiet: bool) -> None:
        """Sign the closed session with this user's key (:mod:`forkpoint.signing`). A key that cannot
        be used, or a cryptography package that cannot load, leaves the session unsigned, said unless
        ``quiet``: its recorded command then replays only with ``--trust`` or when named, and it forks
        and sweeps only with ``--trust``."""
        try:
            from ..signing import sign_session  # cryptography: imported where a session closes

            sign_session(self.path, self.session_id)
        except Exception as exc:  # (the session is written and ended: only its signature is missing)
            why = str(exc) if isinstance(exc, SigningError) else f"{type(exc).__name__}: {exc}"
            if not quiet:
                say(
                    f"forkpoint: WARNING: session {self.session_id} is not signed ({why}): its recorded "
                    "command will replay only with --trust or when named after --, and it will fork or sweep "
                    "only with --trust"
                )

    def __enter__(self) -> Recording:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None:
            self.end(0, uncaught=[])
        else:
            self.end(1, reason=type(exc).__name__, uncaught=[error_record(exc)])
        self.close(quiet=self.quiet)


def _warn(text: str) -> None:
    say(f"forkpoint: WARNING: {text}")


class Store(ABC):
    """Where sessions live. ``path`` is the local directory sessions are written to and read from;
    ``url`` the store as the user names it (a directory, or a URL)."""

    path: Path
    url: str
    #: Why the session :meth:`finished` was last handed is not in the store, else None: a remote
    #: store's upload failed (it stays staged in the mirror here; warned unless ``quiet``).
    not_stored: str | None = None

    def create(
        self, header: Header | dict[str, Any], *, session_id: str | None = None, fsync: str | None = None
    ) -> Recording:
        """A new session in this store with ``header`` as line 1 (see
        :meth:`~forkpoint.log.SessionWriter.create`), naming the key that signs it when it closes
        (:func:`forkpoint.signing.promise`); never overwrites one. Raises
        :class:`~forkpoint.errors.CannotRecord` (a :class:`~forkpoint.errors.SessionError`) naming
        the store and why when the session cannot be created there."""
        header = dict(header)
        # (a cryptography that cannot load: the session closes unsigned, said then by _sign)
        with contextlib.suppress(Exception):
            from ..signing import promise  # cryptography: the key that will sign it at close

            promise(header)
        try:
            self.prepare()
            writer = SessionWriter.create(self.path, header, session_id=session_id, fsync=fsync)
        except OSError as exc:
            raise CannotRecord(f"cannot create a session in {self.path} ({exc.strerror or exc})") from None
        self.started(writer.path)
        return Recording(self, writer)

    def abandoned(self, path: Path) -> None:  # noqa: B027 - a hook with nothing to do by default
        """Called before the new session ``path`` is removed unfinished (:meth:`Recording.discard`)."""

    def prepare(self) -> None:  # noqa: B027 - a hook with nothing to do by default
        """Called before a session is created in this store (the local store makes its folder)."""

    def started(self, path: Path) -> None:  # noqa: B027 - a hook with nothing to do by default
        """Called once session ``path`` is created in this store. Nothing to do for a local store;
        a remote store marks the staged session as being recorded by this process."""

    @abstractmethod
    def finished(self, path: Path, *, quiet: bool = False) -> str:
        """Called once session ``path`` is complete and closed; returns where it now lives. Never
        raises for an I/O problem (the recording itself is safe on disk): warns unless ``quiet``."""

    @abstractmethod
    def listing(self, *, reindex: bool = False) -> Listing:
        """Every session of the store, oldest first."""

    @abstractmethod
    def reindex(self) -> object:
        """Rebuild the index from a walk of every session of the store."""

    @abstractmethod
    def resolve(self, ref: str | Path, *, refresh: bool = False) -> Path:
        """The local directory of the session ``ref`` names: a path, a full id, a unique id prefix,
        ``last``, or a session name (the newest session of that ``--name``), fetched first when it is
        not here (again with ``refresh``). Raises :class:`~forkpoint.errors.SessionError` saying what
        was tried when nothing (or more than one) matches."""

    @abstractmethod
    def fetch(self, session_id: str, *, refresh: bool = False) -> Path | None:
        """The local directory of session ``session_id`` (downloaded first from a remote store), or
        None when the store has no such session."""
