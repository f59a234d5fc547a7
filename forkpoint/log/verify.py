"""Checking a session log without trusting any of it: header, lines, hash chain, ``$delta`` links, blobs.

What the log does not know about (a checkpoint's workspace manifest, its git objects) is checked by
the checks a higher layer hands in (:func:`forkpoint.checkpoint.verify_session` hands in the
checkpoint's).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import IdentityError, SessionError
from .blobs import BlobStore, is_leftover
from .codec import (
    BLOB_DIR,
    DELTA_SET_FROM,
    FORMAT_VERSION,
    GIT_OBJECTS,
    LOG_NAME,
    MIRROR_DONE,
    MIRROR_RECORDING,
    SESSION_ENTRIES,
    Repeats,
    blob_refs,
    foreign,
    line_hash,
)
from .crypto import ENC, FILES, Cipher, header_cipher, open_event
from .packing import Unpacker
from .reader import check_header, event_lines


@dataclass
class Verification:
    """Result of :func:`verify`.

    ``ok`` unless a check failed; ``problems`` name the file and line (event seq) or blob or git
    object, the first failure first. ``truncated``: the log ends in a cut-off line. ``complete``:
    the last event is ``end``. ``notes`` say what is not a failure but worth knowing (recovered torn
    writes, a session that did not end, checks that could not run). ``blobs`` counts the blobs
    checked; ``checkpoints`` and ``git_objects`` are filled in by the checkpoint check.
    """

    events: int = 0
    blobs: int = 0
    truncated: bool = False
    problems: list[str] = field(default_factory=list)
    complete: bool = False
    notes: list[str] = field(default_factory=list)
    checkpoints: int = 0
    git_objects: int = 0

    @property
    def ok(self) -> bool:
        """True when no check failed."""
        return not self.problems

    @property
    def status(self) -> str:
        """``corrupt``, ``truncated`` (cut off mid-write), ``incomplete`` (no ``end`` event) or ``ok``."""
        if not self.ok:
            return "corrupt"
        if self.truncated:
            return "truncated"
        return "ok" if self.complete else "incomplete"


@dataclass(frozen=True)
class StoredLine:
    """One event line of a log as it is stored, for a :data:`Check`: its encodings not resolved,
    except that its ``$same`` fields are whole (as stored in the line they refer to)."""

    lineno: int
    seq: int
    event: dict[str, Any]


#: A check of what the log alone cannot judge, handed in by a higher layer: called (on a deep
#: verification) with the session directory, the lines of the event type it was registered for,
#: and the result so far, to which it adds problems, notes and counts.
Check = Callable[[Path, list[StoredLine], Verification], None]


def _stored_list_len(value: Any) -> int | None:
    if isinstance(value, list):
        return len(value)
    if isinstance(value, dict) and isinstance(value.get("$delta"), dict):
        d = value["$delta"]
        keep, add = d.get("keep"), d.get("add")
        if isinstance(keep, int) and isinstance(add, list):
            return keep + len(add)
    return None


def _valid_set(replaced: Any, keep: int) -> bool:
    """Whether a ``$delta``'s ``set`` is ``[index, item]`` pairs at ascending indices below ``keep``."""
    if not isinstance(replaced, list) or not all(isinstance(p, list) and len(p) == 2 for p in replaced):
        return False
    at = [p[0] for p in replaced]
    return all(type(i) is int and 0 <= i < keep for i in at) and at == sorted(set(at))


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


def _sealed_note(cipher: Cipher, why: str) -> str:
    return (
        f"session {cipher.session} is encrypted and {why}: its chain, lines and every blob's ciphertext "
        "were checked; what is inside them (deltas, checkpoints' manifests, contexts) was not"
    )


def _foreign_files(session: Path) -> list[Path]:
    """What the session folder holds besides a session's own entries (:func:`.codec.foreign`):
    its top, and ``blobs/`` and ``git-objects/`` two levels deep, sorted."""
    found: list[Path] = []
    for folder in ("", BLOB_DIR, GIT_OBJECTS):
        top = session / folder
        try:
            names = sorted(os.listdir(top))
        except OSError:
            continue
        found += [top / n for n in foreign(folder, names)]
        if folder:
            for sub in names:
                if os.path.isdir(top / sub) and not os.path.islink(top / sub):
                    try:
                        inner = sorted(os.listdir(top / sub))
                    except OSError:
                        continue
                    found += [top / sub / n for n in foreign(f"{folder}/{sub}", inner)]
    return sorted(found)


def _linked_entries(session: Path) -> list[Path]:
    """The session's own entries (its log, ``blobs/``, ``git-objects/``, their fan-out folders,
    the signature) that are symbolic links: a session writes none."""
    out = [session / n for n in sorted(SESSION_ENTRIES) if os.path.islink(session / n)]
    for folder in (BLOB_DIR, GIT_OBJECTS):
        top = session / folder
        if top in out or not top.is_dir():
            continue
        try:
            out += [top / n for n in sorted(os.listdir(top)) if os.path.islink(top / n)]
        except OSError:
            continue
    return out


def verify(path: Path | str, *, deep: bool = True, checks: Mapping[str, Check] | None = None) -> Verification:
    """Check a session log without trusting any of it. Reads only; never writes.

    * the header (format, version, hash), and every line: valid JSON, its ``hash``, its ``prev``
      link, ``seq`` order, its packed fields (:mod:`.packing`), ``$same`` and ``$delta``
      references; torn regions only where a later event declares their exact bytes;
    * with ``deep`` (the default), every blob a line refers to (content against its name), then
      each of ``checks`` (event type → :data:`Check`) with the lines of its event type.

    With ``deep=False`` only the log is checked (header, lines, chain): what a reader that only
    shows a session needs, in one pass over the log and no blob read.

    Stops reading lines at the first broken one (later lines cannot be trusted once the chain is
    broken). A log cut off mid-write is ``truncated``, not corrupt; one without an ``end`` event is
    reported in ``notes`` (still running, killed, or its last events removed).

    An encrypted session (:mod:`.crypto`) is checked the same way on its stored form, without any
    identity: header, lines, chain, and every blob file against its name. With an identity at hand
    (``$FORKPOINT_IDENTITY``) its lines are opened too, and their deltas and the ``checks`` run on
    them; without one, ``notes`` say what was not checked.
    """
    path = Path(path)
    log_path = path / LOG_NAME
    blobs = BlobStore(path / BLOB_DIR)
    result = Verification()
    problems, notes = result.problems, result.notes
    checks = dict(checks or {})
    refs: dict[str, int] = {}
    checked: dict[str, list[StoredLine]] = {kind: [] for kind in checks}
    lengths: dict[int, dict[str, int]] = {}
    repeats = Repeats()
    cipher: Cipher | None = None
    opened = False
    prev_hash = ""
    prev_seq = 0
    last_type = None
    last_pid = None
    recovered: list[dict[str, Any]] = []
    unpacker = Unpacker()
    version = FORMAT_VERSION  # (the header's, once read)
    if not path.is_dir():
        problems.append(f"{path}: no such session directory")
        return result
    try:
        for line in event_lines(log_path, recovered):
            lineno, raw = line.lineno, line.raw
            if line.error == "truncated":
                result.truncated = True
                break
            if lineno == 1:
                try:
                    obj = check_header(raw, log_path)
                    cipher = header_cipher(obj, log_path)
                    version = obj["version"]
                except SessionError as exc:
                    problems.append(str(exc))
                    break
                if cipher is not None:
                    blobs = BlobStore(path / BLOB_DIR, cipher=cipher)
                    opened = cipher.can_open()
                    if not opened:
                        notes.append(_sealed_note(cipher, "no identity is at hand ($FORKPOINT_IDENTITY)"))
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
                hash_ok = obj.get("hash") == line_hash(obj)
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
            result.events += 1
            seq = prev_seq = int(obj["seq"])
            try:
                obj = unpacker.open(obj, f"{log_path}:{lineno}")[0]
            except SessionError as exc:
                problems.append(str(exc))
                break
            if ENC in obj:
                sealed_refs = obj.get("blobs")
                if not isinstance(sealed_refs, list) or not all(isinstance(h, str) for h in sealed_refs):
                    problems.append(
                        f"{log_path}:{lineno}: {label}: encrypted, but its 'blobs' is not a list of names"
                    )
                    break
                for h in sealed_refs:
                    refs.setdefault(h, lineno)
                if opened and cipher is not None:
                    try:
                        obj = open_event(obj, cipher, f"{log_path}:{lineno}")
                    except IdentityError as exc:
                        opened = False
                        notes.append(_sealed_note(cipher, str(exc)))
                    except SessionError as exc:
                        problems.append(str(exc))
                        break
                    else:
                        files = obj.pop(FILES, {})
                        try:
                            blobs.learn(files, f"{log_path}:{lineno}")
                        except SessionError as exc:
                            problems.append(str(exc))
                            break
                        if not set(files.values()) <= set(sealed_refs):
                            problems.append(
                                f"{log_path}:{lineno}: {label}: names blob files its line does not list"
                            )
                            break
                        inner: dict[str, int] = {}
                        for value in obj.values():
                            blob_refs(value, inner, lineno)
                        unknown = [h for h in inner if blobs.file_of(h) is None]
                        if unknown:
                            problems.append(
                                f"{log_path}:{lineno}: {label}: refers to blob {unknown[0][:12]}…, which no line lists"
                            )
                            break
            try:
                obj = repeats.resolve(obj, f"{log_path}:{lineno}")
            except SessionError as exc:
                problems.append(str(exc))
                break
            last_type, last_pid = obj.get("type"), obj.get("pid")
            if last_type == "end" and obj.get("incomplete"):
                notes.append(
                    f"{log_path}:{lineno}: the recording stopped before the run ended ({obj['incomplete']}): "
                    "what the run did after that is not in the session"
                )
            if cipher is None:  # (an encrypted line's blobs are its files, listed above)
                for value in obj.values():
                    blob_refs(value, refs, lineno)
            container = _stored_container(obj)
            if container is not None:
                mine: dict[str, int] = {}
                for name, value in container.items():
                    n = _stored_list_len(value)
                    if isinstance(value, dict) and "$delta" in value:
                        d = value["$delta"]
                        base = d.get("base") if isinstance(d, dict) else None
                        base_len = lengths.get(base, {}).get(name) if isinstance(base, int) else None
                        if (
                            n is None
                            or base is None
                            or base_len is None
                            or base >= seq
                            or d["keep"] > base_len
                        ):
                            problems.append(
                                f"{log_path}:{lineno}: {label}: field {name!r} refers to event "
                                f"{d.get('base') if isinstance(d, dict) else '?'}, which is missing, later, "
                                "or shorter than the delta says"
                            )
                        elif "set" in d and version < DELTA_SET_FROM:
                            problems.append(
                                f'{log_path}:{lineno}: {label}: field {name!r}: the delta has a "set", which '
                                f"came with format version {DELTA_SET_FROM}, in a version-{version} session"
                            )
                        elif not _valid_set(d.get("set", []), d["keep"]):
                            problems.append(
                                f'{log_path}:{lineno}: {label}: field {name!r}: the delta\'s "set" is not '
                                f"[index, item] pairs at ascending indices below its keep ({d['keep']})"
                            )
                    if n is not None:
                        mine[name] = n
                lengths[seq] = mine
            kind = obj.get("type")
            if kind in checked:
                checked[kind].append(StoredLine(lineno, seq, obj))
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
    if deep:
        for h, lineno in sorted(refs.items(), key=lambda kv: kv[1]):
            problem, _ = blobs.check(h)
            if problem:
                problems.append(f"{problem} (referenced from {log_path}:{lineno})")
        result.blobs = len(refs)
        for kind, check in checks.items():
            check(path, checked[kind], result)
        found = _foreign_files(path)  # (one walk: an interrupted write's temp file is one of them)
        for link in _linked_entries(path):
            problems.append(
                f"{link}: a symbolic link where a session holds its own data (a copy of the session, "
                "make-test's cassette, would hold the link and not the data)"
            )
        left = [p for p in found if p.parent != path and is_leftover(p.name) and not p.is_dir()]
        for p in left[:5]:
            notes.append(f"{p}: left over by an interrupted write: not part of the session (safe to delete)")
        if len(left) > 5:
            notes.append(f"… and {len(left) - 5} more files left over by interrupted writes")
        said = set(left)
        mirror = (MIRROR_DONE, MIRROR_RECORDING)  # (a remote store's own marks: see codec)
        alien = [p for p in found if p not in said and not (p.parent == path and p.name in mirror)]
        for p in alien[:5]:
            notes.append(
                f"{p}: not part of the session (forkpoint never writes it there, never reads it, and leaves "
                "it out of the copies it makes: make-test's cassette)"
            )
        if len(alien) > 5:
            notes.append(f"… and {len(alien) - 5} more files that are not part of the session")
    result.complete = last_type == "end"
    if not problems and not result.truncated and not result.complete:
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
    return result
