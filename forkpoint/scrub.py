"""Re-scrub a recorded session with the redaction rules in force now: ``forkpoint scrub SESSION``.

A session is never overwritten or truncated in place. Scrubbing one:

1. takes the log's ``flock`` (no writer can append meanwhile) and refuses a session that does not
   verify, its signature included (a copy would launder the damage), or has no ``end`` event (it
   may still be recording: ``force`` overrides that);
2. writes a complete scrubbed copy, with the **same id**, in ``<store>/.forkpoint-tmp/scrub-…/``:
   every event through :meth:`forkpoint.redact.Scrubber.event`, match keys recomputed, every workspace
   file of every checkpoint scrubbed into new blobs (manifest and fingerprint recomputed), the digest
   of a checkpoint's carried messages recomputed where they changed, the hash
   chain recomputed from a new header (which records ``scrubbed``: when, with which rules);
3. verifies the copy;
4. swaps the two directories in one atomic step (``renameat2(RENAME_EXCHANGE)`` on Linux; elsewhere
   two renames, which :func:`recover` completes or undoes after a crash);
5. removes the old directory, so the secrets are gone from the store (not from backups, snapshots or
   free disk blocks: forkpoint does not shred);
6. signs the copy with this user's key, only when a key this user trusts signed the original.

Killed at any point, the store holds the original session, intact, or the verified scrubbed copy;
leftovers in ``.forkpoint-tmp`` are removed by the next ``forkpoint scrub`` (:func:`recover`).
Git objects of checkpoints' source trees are copied as they are (see docs/security.md).
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from . import redact
from ._version import __version__
from .canonical import canonical_json, digest
from .checkpoint import MANIFEST_FIELDS, manifest_rows, verify_session
from .errors import ScrubError, SigningError
from .events import Event, Header
from .files import exchange_dirs as _exchange
from .log import (
    GIT_OBJECTS,
    LOG_NAME,
    MIRROR_DONE,
    SIGNATURE_NAME,
    BlobStore,
    Session,
    SessionError,
    SessionWriter,
    now_iso,
    read_header,
    to_json,
)
from .match import event_key
from .signing import SIGNER, promise, sign_session, signature
from .store import open_store
from .store.retention import HeldError, refuse_if_held

#: Folder of a store holding scrubs in progress (and, after a crash, their leftovers).
TMP_DIR = ".forkpoint-tmp"


@dataclass
class ScrubReport:
    """What :func:`scrub_session` did (or, with ``dry_run``, would do)."""

    session_id: str
    path: Path
    events: int
    events_changed: list[int] = field(default_factory=list)
    files_changed: int = 0
    rules: str = ""
    dry_run: bool = False
    swapped: bool = False
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """True when the rules replaced something."""
        return bool(self.events_changed or self.files_changed)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def recover(store: Path) -> list[str]:
    """Clean up after scrubs that were killed: an original moved aside and not replaced is put back;
    everything else in ``<store>/.forkpoint-tmp`` not in use by a running scrub is removed.
    Returns what was done, one line each."""
    done: list[str] = []
    tmp = Path(store) / TMP_DIR
    if not tmp.is_dir():
        return done
    for work in sorted(tmp.iterdir()):
        if not work.name.startswith("scrub-") or not work.is_dir():
            continue
        lock = work / ".lock"
        try:
            fd = os.open(lock, os.O_RDONLY)
        except FileNotFoundError:
            fd = -1
        try:
            if fd >= 0:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a scrub is running there
            sid = work.name[len("scrub-") :].rsplit("-", 1)[0]
            old = work / "old"
            target = Path(store) / sid
            if (old / LOG_NAME).is_file() and not target.exists():
                os.rename(old, target)
                done.append(f"{target}: put the original back (a scrub was killed between its two renames)")
            shutil.rmtree(work, ignore_errors=True)
            done.append(f"{work}: removed the leftovers of an interrupted scrub")
        finally:
            if fd >= 0:
                os.close(fd)
    return done


def rescrubbed(session: Session) -> Session:
    """A copy of ``session`` (in memory) with its header and every event scrubbed by the rules in
    force now: what exporters hand out, so a rule added after a recording applies to exports too.
    ``session`` itself when it was last written whole, by one process (``forkpoint scrub``, or its
    own program's ``forkpoint.record()``), under these very rules by this very forkpoint (scrubbing
    is idempotent: it would come back the same, at the cost of scrubbing every resent conversation
    again, half of ``show --html``'s time at 2,000 turns)."""
    scrubber = redact.current()
    header = session.header
    scrubs = header.get("scrubbed")
    last_scrub = scrubs[-1] if isinstance(scrubs, list) and scrubs and isinstance(scrubs[-1], dict) else None
    written_by = (
        last_scrub.get("forkpoint")
        if last_scrub is not None
        else (header.get("versions") or {}).get("forkpoint")
    )
    # The header's rules are those of the process that wrote it: the programs a `forkpoint record
    # -- CMD` runs each append under their own folder's rules, which may lack a rule of the header's.
    one_writer = last_scrub is not None or header.get("records_itself") is True
    if (
        one_writer
        and (header.get("redaction") or {}).get("rules") == scrubber.rules.digest()
        and written_by == __version__
    ):
        return session
    return dataclasses.replace(
        session,
        header=cast(Header, scrubber.event(session.header)),
        events=[cast(Event, scrubber.event(e)) for e in session.events],
    )


def _scrub_workspace(
    event: dict[str, Any],
    old: BlobStore,
    new: BlobStore,
    scrubber: redact.Scrubber,
    done: dict[str, tuple[int, str, bool]] | None = None,
) -> int:
    """Scrub the files of a checkpoint's workspace into ``new``; returns how many changed. A
    manifest that changed is written whole (inline, or as ``manifest_json``), as the checkpoint
    layer writes a first one. ``done``: the file contents scrubbed so far in this session, by
    their blob's hash (size, new hash, changed): each checkpoint lists every file of the
    workspace, most of them as the checkpoint before, so reading and scrubbing each listed file
    again would cost the number of checkpoints times the number of files."""
    if done is None:
        done = {}
    ws = event.get("workspace")
    if not isinstance(ws, dict) or ws.keys().isdisjoint(MANIFEST_FIELDS):
        return 0
    rows = manifest_rows(ws)
    changed = 0
    out = []
    for row in rows:
        if not (isinstance(row, list) and len(row) == 5 and isinstance(row[4], str)):
            out.append(row)
            continue
        rel, kind, mode, _size, h = row
        known = done.get(h)
        if known is None:
            data = old.get(h, where=f" (workspace file {rel!r} of checkpoint seq {event.get('seq')})")
            clean = scrubber.file(data)
            known = done[h] = (len(clean), new.put(clean), clean != data)
        changed += known[2]
        out.append([scrubber.text(rel) if isinstance(rel, str) else rel, kind, mode, known[0], known[1]])
    if out == rows:
        return 0
    inline = "manifest" in ws
    ws = {k: v for k, v in ws.items() if k not in MANIFEST_FIELDS}
    ws["fingerprint"] = digest(out)
    if inline:
        ws["manifest"] = out
    else:
        ws["manifest_json"] = canonical_json(out)
    if "bytes" in ws:
        ws["bytes"] = sum(r[3] for r in out if isinstance(r, list) and len(r) == 5)
    event["workspace"] = ws
    return changed


def _rekey(event: dict[str, Any]) -> None:
    """Recompute a call's match key from its (scrubbed) request or arguments."""
    if (event.get("type") == "model_call" and isinstance(event.get("request"), dict)) or (
        event.get("type") == "tool_call" and "tool" in event
    ):
        try:
            event["key"] = event_key(event)
        except (KeyError, TypeError, ValueError):
            pass


def scrub_session(
    path: Path | str,
    *,
    dry_run: bool = False,
    force: bool = False,
    scrubber: redact.Scrubber | None = None,
    hook: Callable[[str], None] | None = None,
) -> ScrubReport:
    """Re-scrub the session at ``path`` with ``scrubber`` (default: the rules in force), replacing it
    by a verified scrubbed copy with the same id (see the module docstring). With ``dry_run``, report
    what would change and leave everything as it is. ``hook`` is called with a step name before each
    step (``"copy"``, ``"event"``, ``"verify"``, ``"swap"``, ``"between-renames"`` (only without an
    atomic exchange), ``"remove"``): tests use it to interrupt.
    Raises :class:`ScrubError` (or :class:`~forkpoint.log.SessionError` for an unreadable session,
    :class:`~forkpoint.store.retention.HeldError` for a session under legal hold, unless ``dry_run``).
    """
    path = Path(path).absolute()
    if not (path / LOG_NAME).is_file():
        raise ScrubError(f"{path}: not a session directory (no {LOG_NAME})")
    if path.is_symlink():
        # (the swap would replace the link by the copy: the session it points to, secrets and all,
        # would stay as it was, in a store whose holds were not looked at)
        raise ScrubError(
            f"{path}: is a symbolic link to {path.resolve()}; a session is scrubbed where it is: "
            "name that directory instead"
        )
    # The id is the header's: a session's folder may have another name (a pytest cassette's).
    head = read_header(path / LOG_NAME)
    store, sid = path.parent, str(head["session_id"])
    if not dry_run and (path / MIRROR_DONE).exists():
        # (swapped here, the copy would also lose its mark and be uploaded again, refused there
        # as another session with that id, at every ls)
        raise ScrubError(
            f"{path}: is this machine's copy of session {sid} of the remote store "
            f"{open_store(store).url}, whose sessions are written once: scrubbing the copy would leave "
            "the store's session as it is; forkpoint cannot scrub a session of a remote store"
        )
    if not dry_run:  # a session under legal hold is kept as it was recorded
        refuse_if_held(open_store(store), sid, "scrub")
    step = hook or (lambda _name: None)
    recover(store)
    scrubber = scrubber or redact.current()
    lock_fd = os.open(path / LOG_NAME, os.O_RDONLY)
    swapped = False
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX)  # writers wait; the copy sees the log as it is
        before = verify_session(path, values=False)  # (its values are read, and checked, just below)
        if not before.ok:
            # (no option scrubs it anyway: a copy that verifies would hide that it was changed)
            raise ScrubError(
                f"{path}: the session does not verify, refusing to copy it: {before.problems[0]}. "
                f"forkpoint verify {path} names what fails; to be rid of what it holds, put back an intact "
                f"copy of it and scrub that, or remove it (forkpoint rm {sid}; when rm says it was changed, "
                "forkpoint ls --reindex first, so that the index describes it as it is now)"
            )
        signed = signature(path, sid)
        if signed.state == "bad":  # (its copy, signed with this user's key, would be trusted)
            raise ScrubError(
                f"{path}: {signed.describe()}, refusing to copy it; to scrub it all the same into an unsigned "
                f"copy (whose recorded command replays only with --trust"
                f"{', and which says it lost its signature' if head.get(SIGNER) else ''}), remove "
                f"{path / SIGNATURE_NAME} first"
            )
        if not before.complete and not force:
            raise ScrubError(
                f"{path}: the session has no end event: it may still be recording (scrubbing it now would "
                "lose what it writes next). Wait for it to end, or pass --force if it was killed."
            )
        session = Session.load(path, share_lists=True)
        report = ScrubReport(sid, path, len(session.events), rules=scrubber.rules.digest(), dry_run=dry_run)
        report.notes += before.notes
        work = (
            store / TMP_DIR / f"scrub-{path.name}-{secrets.token_hex(4)}"
        )  # (recover() puts it back by name)
        work.mkdir(parents=True, mode=0o700)
        os.chmod(work.parent, 0o700)
        work_lock = os.open(work / ".lock", os.O_WRONLY | os.O_CREAT, 0o600)
        fcntl.flock(work_lock, fcntl.LOCK_EX)
        try:
            step("copy")
            with redact.use_rules(scrubber):
                # (without ``keys``: the keys are computed again here, under other rules)
                header = {k: v for k, v in session.header.items() if k not in ("hash", "redaction", "keys")}
                # The copy names the key that signs it as the original did: this user's when it is
                # signed anew (below), none for a stranger's (left unsigned), and a lost signature's
                # key still, so that the copy too says it lost its signature.
                if signed.trusted:
                    promise(header)
                elif signed.state == "signed":
                    header.pop(SIGNER, None)
                header["scrubbed"] = [
                    *(session.header.get("scrubbed") or []),
                    {"at": now_iso(), "rules": scrubber.rules.digest(), "forkpoint": __version__},
                ]
                writer = SessionWriter.create(work, header, session_id=sid, fsync="close")
                if (path / GIT_OBJECTS).is_dir():
                    shutil.copytree(path / GIT_OBJECTS, writer.path / GIT_OBJECTS, symlinks=True)
                old_blobs = session.blob_store()
                files: dict[str, tuple[int, str, bool]] = {}  # (each file content scrubbed once)
                try:
                    for event in session.events:
                        step("event")
                        clean = scrubber.event(event)
                        if clean.get("type") == "checkpoint":
                            report.files_changed += _scrub_workspace(
                                clean, old_blobs, writer.blobs, scrubber, files
                            )
                            if clean.get("context") != event.get("context"):  # (the messages it carries)
                                clean["context_digest"] = digest(to_json(clean["context"]))
                        # (a key that differs only because the match rules in force here do is a
                        # cache's change, not a redaction: not counted)
                        if clean != event:
                            report.events_changed.append(int(event["seq"]))
                        _rekey(clean)
                        writer.append(clean)
                finally:
                    writer.close()
            step("verify")
            after = verify_session(writer.path)
            if not after.ok:
                raise ScrubError(
                    f"the scrubbed copy does not verify ({after.problems[0]}); the session is unchanged"
                )
            if dry_run:
                return report
            # Again: a hold placed while the copy was written (which takes a while) is seen here.
            refuse_if_held(open_store(store), sid, "scrub")
            step("swap")
            _fsync_dir(writer.path.parent)
            if _exchange(path, writer.path):
                swapped = True
            else:  # two renames; recover() puts the original back if we die between them
                os.rename(path, work / "old")
                step("between-renames")
                os.rename(writer.path, path)
                swapped = True
            _fsync_dir(store)
            report.swapped = True
            if not signed.trusted:  # (signed by this user, its recorded command would replay without --trust)
                report.notes.append(
                    f"the scrubbed session is not signed (the original was {signed.describe()}): your key "
                    "does not vouch for what it holds, and its recorded command replays only with --trust, as before"
                )
            else:  # the old signature was over the old log: the scrubbed one is signed anew, by this user
                try:
                    sign_session(path, sid)
                except SigningError as exc:
                    report.notes.append(f"the scrubbed session is not signed: {exc}")
            step("remove")
        finally:
            if (work / "old" / LOG_NAME).is_file() and not path.exists():
                # (stopped between the two renames: an exception, not a kill, which recover() handles)
                os.rename(work / "old", path)
            os.close(work_lock)
            shutil.rmtree(work, ignore_errors=True)
            try:
                work.parent.rmdir()  # only when no other scrub is using it
            except OSError:
                pass
    except HeldError:
        raise
    except SessionError as exc:
        raise ScrubError(str(exc)) from None
    except OSError as exc:  # (a full disk while the copy was written: said, not a traceback)
        where = f" ({exc.filename})" if exc.filename else ""
        raise ScrubError(
            f"{path}: the scrub failed: {exc.strerror or exc}{where}; "
            + ("the scrubbed copy replaced the session" if swapped else "the session is unchanged")
        ) from None
    finally:
        os.close(lock_fd)
    if report.swapped and (store / "index").is_dir():
        # The store's index keeps header fields (the command line…) of every session: rebuild it from
        # the logs, so no copy of what was just scrubbed stays there.
        try:
            open_store(store).reindex()
        except (OSError, SessionError, ValueError) as exc:
            report.notes.append(
                f"{store}: could not rebuild the store's index ({exc}); run forkpoint ls --reindex"
            )
    return report
