"""Checking a session's checkpoints: what the log's own verification cannot judge.

Each workspace manifest against its fingerprint and each of its files against its blob, each
carried context against its digest, every git object in ``git-objects`` against its name, and (when
the recorded repository is still there) that every checkpoint's source tree is complete.
:func:`verify_session` is the whole check of a session: the log's (:func:`forkpoint.log.verify`)
with this one handed in.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import zlib
from functools import partial
from pathlib import Path
from typing import Any

from ..canonical import digest
from ..errors import IdentityError, SessionError
from ..log import (
    BLOB_DIR,
    GIT_OBJECTS,
    LOG_NAME,
    BlobStore,
    Session,
    StoredLine,
    Verification,
    read_header,
    to_json,
    verify,
)
from ..log.blobs import is_leftover, open_regular
from ..log.codec import decode


def verify_session(
    path: Path | str, *, git: bool = True, deep: bool = True, values: bool = True
) -> Verification:
    """Check a session without trusting any of it; reads only, never writes.

    The log (header, lines, hash chain, deltas, blobs: :func:`forkpoint.log.verify`), then, with
    ``deep``, every checkpoint (:func:`check_checkpoints`); with ``git`` also that each source tree
    is complete in the recorded repository; with ``values``, when all that holds, that every stored
    value decodes (``$int``, ``$u``, ``$kv``…) as a replay reads it (an encrypted session's only
    with its identity at hand: the log's check notes what it could not open).
    """
    v = verify(path, deep=deep, checks={"checkpoint": partial(check_checkpoints, git=git)})
    if values and v.ok:
        try:
            Session.load(Path(path), derived=False, share_lists=True)
        except IdentityError:
            pass
        except SessionError as exc:
            v.problems.append(str(exc))
    return v


def check_checkpoints(path: Path, lines: list[StoredLine], result: Verification, *, git: bool = True) -> None:
    """The :data:`forkpoint.log.Check` of checkpoint events: manifests and their files, carried
    contexts, git objects, and (with ``git``) source trees. Adds to ``result``."""
    log_path = path / LOG_NAME
    problems = result.problems
    checkpoints = [(line.lineno, line.seq, line.event) for line in lines]
    manifest_refs: dict[str, tuple[int, int, int]] = {}  # blob → (size, lineno, seq)
    blobs = None if problems else _blobs(path, checkpoints, problems)
    if blobs is not None:
        _verify_checkpoints(path, log_path, blobs, checkpoints, problems, manifest_refs)
    for h, (size, lineno, seq) in sorted(manifest_refs.items(), key=lambda kv: kv[1][1]):
        assert blobs is not None
        problem, actual = blobs.check(h)
        if problem:
            problems.append(f"{problem} (workspace file of checkpoint seq {seq}, {log_path}:{lineno})")
        elif actual != size:
            problems.append(
                f"{blobs.path(h)}: {actual} bytes, but checkpoint seq {seq} ({log_path}:{lineno}) says {size}"
            )
    result.blobs += len(manifest_refs)
    result.checkpoints = len(checkpoints)
    result.git_objects = _verify_git_objects(path / GIT_OBJECTS, problems, result.notes)
    sealed = [seq for _, seq, obj in checkpoints if "git_objects" in obj]
    if git and not problems and sealed:
        result.notes.append(
            f"the git objects of {len(sealed)} checkpoint(s) are sealed blobs (an encrypted session): checked "
            "as blobs; the source trees' completeness was not checked"
        )
    elif git and not problems:
        _verify_trees(path, checkpoints, problems, result.notes)


def _blobs(
    path: Path, checkpoints: list[tuple[int, int, dict[str, Any]]], problems: list[str]
) -> BlobStore | None:
    """The session's blobs for the checks of its checkpoints. An encrypted session's only when its
    lines were opened (the log's check did that, with the identity; else it said what it skipped)."""
    head = read_header(path / LOG_NAME)
    if head.get("encryption") is None:
        return BlobStore(path / BLOB_DIR)
    if not any("workspace" in obj or "context" in obj for _, _, obj in checkpoints):
        return None  # sealed lines: nothing of theirs to check
    try:
        return Session.blobs_of(path)
    except SessionError as exc:
        problems.append(str(exc))
        return None


def _verify_checkpoints(
    path: Path,
    log_path: Path,
    blobs: BlobStore,
    checkpoints: list[tuple[int, int, dict[str, Any]]],
    problems: list[str],
    manifest_refs: dict[str, tuple[int, int, int]],
) -> None:
    """Each manifest against its fingerprint (collecting its files' blobs), each carried context
    against its digest."""
    if not checkpoints:
        return
    # (what reads a manifest, and the git it loads: only for a session with checkpoints, not in
    # every replaying parent, which verifies every session it replays)
    from .workspace import MANIFEST_FIELDS, manifest_rows

    session: Session | None = None
    by_seq: dict[Any, Any] | None = None
    for lineno, seq, obj in checkpoints:
        ws = obj.get("workspace")
        if isinstance(ws, dict) and not ws.keys().isdisjoint(MANIFEST_FIELDS):
            try:
                rows = manifest_rows(decode(ws, blobs, f" (checkpoint seq {seq}, {log_path}:{lineno})"))
                ok = digest(rows, exotic=True) == ws.get("fingerprint")
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
                    session = Session.load(path, share_lists=True)
                except SessionError as exc:
                    problems.append(str(exc))
                    return
            if by_seq is None:  # (a scan of the events per checkpoint: quadratic in the length)
                by_seq = {}
                for e in session.events:
                    by_seq.setdefault(e.get("seq"), e)
            event = by_seq.get(seq)
            try:
                ok = event is not None and _context_digest(event.get("context")) == obj["context_digest"]
            except TypeError:
                ok = False
            if not ok:
                problems.append(
                    f"{log_path}:{lineno}: checkpoint seq {seq}: the carried context does not match its digest"
                )
                return


def _context_digest(context: Any) -> str:
    """The digest of a carried context as :func:`~forkpoint.checkpoint.take` wrote it: of its plain
    JSON form (bytes as ``{"$b64": …}``). Hashed as it is when it holds no bytes (the encoder then
    raises): :func:`to_json` would copy it whole in Python first, and each checkpoint carries the
    conversation so far (shared with the others when loaded), quadratic in its length."""
    try:
        return digest(context)
    except TypeError:
        return digest(to_json(context))


#: File contents (git blobs) larger than this are not searched for secrets by verify.
SCAN_LIMIT = 16 << 20


def _verify_git_objects(objects: Path, problems: list[str], notes: list[str]) -> int:
    """Every loose object of ``objects`` against its SHA-1 name, and every file content (blob) and
    folder (tree: its files' names) of up to :data:`SCAN_LIMIT` bytes searched for secrets with the
    rules in force (a note names each one that holds some: the promise is that none does). Returns
    how many objects were checked."""
    if not objects.is_dir():
        return 0
    from .. import redact  # here: a session without checkpoints is verified without it

    scrubber = redact.current()
    count = 0
    for sub in sorted(objects.iterdir()):
        if is_leftover(sub.name):
            continue  # an interrupted write's temp file: verify notes it (forkpoint.log.verify)
        if not (sub.is_dir() and len(sub.name) == 2 and all(c in "0123456789abcdef" for c in sub.name)):
            if sub.name not in ("info", "pack"):
                problems.append(f"{sub}: not a git object folder")
            continue
        for obj in sorted(sub.iterdir()):
            if is_leftover(obj.name):
                continue  # the temp file of a write (forkpoint's or git's) that was killed
            count += 1
            name = sub.name + obj.name
            h = hashlib.sha1()
            kept: list[bytes] = []
            size = 0
            try:
                d = zlib.decompressobj()
                with open_regular(obj) as f:
                    while chunk := f.read(1 << 20):
                        part = d.decompress(chunk)
                        h.update(part)
                        size += len(part)
                        if size <= SCAN_LIMIT:
                            kept.append(part)
                    part = d.flush()
                    h.update(part)
                    kept.append(part)
                ok = d.eof and not d.unused_data and h.hexdigest() == name
            except SessionError as exc:  # a FIFO or a device in an object's place: never opened blocking
                problems.append(str(exc))
                continue
            except (OSError, zlib.error):
                ok = False
            if not ok:
                problems.append(
                    f"{obj}: git object is damaged (its content does not match its name {name[:12]}…)"
                )
            elif size <= SCAN_LIMIT:
                head, _, content = b"".join(kept).partition(b"\0")
                found = head.startswith((b"blob ", b"tree ")) and scrubber.find(
                    content.decode("utf-8", "surrogateescape")
                )
                if found:
                    kinds = ", ".join(sorted({kind for _, _, kind in found}))
                    notes.append(f"{obj}: git object {name[:12]}… holds what looks like a secret ({kinds})")
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
