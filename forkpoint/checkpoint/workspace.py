"""Workspace state: the untracked files of a checkpoint, as a content-addressed manifest."""

from __future__ import annotations

import os
import stat
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, Generic, TypeVar

from ..canonical import canonical_json, sha256_hex
from ..errors import SessionError
from ..log import BLOB_MIN_BINARY, BlobStore, read_json_text
from ..log.blobs import open_regular
from .git import git_finish, git_start, repo_root, user_excludes_file

#: Folder, inside a restored directory, holding the checkpoint's expectations and carried messages.
META_DIR = ".forkpoint-checkpoint"
#: The files a restore writes in ``META_DIR`` (a workspace that is a restored checkpoint has them).
META_FILES = frozenset(f"{META_DIR}/{name}" for name in ("checkpoint.json", "messages.json", "manifest.json"))
#: The folder of forkpoint's default store (``store.DEFAULT_STORE``), at a workspace's top.
STORE_DIR = ".forkpoint"
#: Never part of a workspace (at its top): git's own folder, forkpoint's store and restore metadata.
ALWAYS_EXCLUDED = (".git", STORE_DIR, META_DIR)
#: A workspace manifest whose canonical JSON is bigger than this is stored as one content-addressed
#: blob (``manifest_json``) instead of inline rows, so each state's rows are stored once and a line
#: refers to them (about 100 bytes). Below it (a file or two) rows are cheaper than a reference, and
#: binary data that short would be inlined as base64 anyway (``BLOB_MIN_BINARY``).
MANIFEST_INLINE_MAX = BLOB_MIN_BINARY
#: The fields a checkpoint's ``workspace`` may hold its manifest in (see :class:`Manifests`).
MANIFEST_FIELDS = ("manifest", "manifest_json", "manifest_base", "manifest_changes")


def unrestorable(rel: str) -> str | None:
    """Why restore refuses to write a workspace path, or None. Restore writes nothing outside its
    folder and nothing git or forkpoint would read as their own (``.git`` in any case: on a
    case-insensitive disk ``.Git`` is ``.git``), whatever a session holds; a checkpoint leaves such
    files out, and says so, rather than hold a state no restore can write."""
    p = PurePosixPath(rel)
    if not rel or p.is_absolute() or rel.startswith(("\\", "/")) or ".." in p.parts or "\0" in rel:
        return "points outside the target directory"
    if p.parts[0] == META_DIR or ".git" in {q.lower() for q in p.parts} or str(p) != rel:
        return "is not a normal workspace path"
    return None


def excluded(rel: str, extra: tuple[str, ...]) -> bool:
    """``rel`` is never part of a workspace (:data:`ALWAYS_EXCLUDED`), or lies in ``extra``."""
    return rel.split("/", 1)[0] in ALWAYS_EXCLUDED or _within(rel, extra)


def _within(rel: str, folders: tuple[str, ...]) -> bool:
    return any(rel == e or rel.startswith(e.rstrip("/") + "/") for e in folders)


def _walk(root: Path, rel_dir: str = "") -> list[str]:
    """Files and symlinks under ``root/rel_dir`` (relative to ``root``), never into a ``.git``; a
    symlink to a directory is listed as the link it is, not followed."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root / rel_dir if rel_dir else root):
        rel = os.path.relpath(dirpath, root)
        rel = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        keep = []
        for d in dirnames:
            if d == ".git":
                continue
            if os.path.islink(os.path.join(dirpath, d)):
                out.append(rel + d)
            else:
                keep.append(d)
        dirnames[:] = keep
        out.extend(rel + f for f in filenames if f != ".git")
    return out


def start_listing(
    root: Path, listing: str, include_ignored: bool, *, user_excludes: bool = True
) -> subprocess.Popen[bytes] | None:
    if listing == "plain":
        return None
    args = ["ls-files", "-z", "--others"]
    if listing == "git-nocommit":
        args.append("--cached")  # no commit to diff against: every file is workspace
    if not include_ignored:
        args.append("--exclude-standard")
    # (user_excludes: this user's own ignore file, the one their config names or else git's default,
    # ~/.config/git/ignore; False: only the repository's rules)
    own = user_excludes_file() if user_excludes else ""
    return git_start(args, root, config=() if own is None else (f"core.excludesFile={own}",))


def finish_listing(
    root: Path,
    proc: subprocess.Popen[bytes] | None,
    exclude: tuple[str, ...],
    nested: Sequence[str] = (),
    *,
    meta: list[str] | None = None,
    store: list[str] | None = None,
) -> tuple[list[str], list[str]]:
    """(the workspace's files, the repositories nested in it). A nested repository git lists as a
    folder: every file in it is workspace (its own ignore rules aside, its ``.git`` left out).
    ``nested``: folders to list whole, whatever git says of them (those that were nested repositories
    when a checkpoint was taken: restored, they are plain folders, and git would apply their own
    ``.gitignore`` to them). ``meta``: receives the files listed under the top's ``META_DIR`` that
    are left out, but for a restore's own (:data:`META_FILES`). ``store``: receives the files listed
    under the top's :data:`STORE_DIR` that are left out, but for those in ``exclude`` (the session's
    store)."""
    walked = list(nested)
    if proc is None:
        paths = _walk(root)
    else:
        paths = []
        for p in git_finish(proc, "ls-files --others").decode("utf-8", "surrogateescape").split("\0"):
            if not p:
                continue
            if p.endswith("/"):  # a nested repository: git lists the folder
                walked.append(p.rstrip("/"))
            else:
                paths.append(p)
        if walked:
            under = tuple(d + "/" for d in walked)
            paths = [p for p in paths if not p.startswith(under)]
            for d in dict.fromkeys(walked):
                paths.extend(_walk(root, d))
    # (a file of that name too: it is left out as the folder is)
    if meta is not None:
        meta += sorted(p for p in paths if _within(p, (META_DIR,)) and p not in META_FILES)
    if store is not None:
        store += sorted(p for p in paths if _within(p, (STORE_DIR,)) and not _within(p, exclude))
    return sorted({p for p in paths if not excluded(p, exclude)}), sorted(set(walked))


def untracked_files(
    root: Path,
    *,
    include_ignored: bool = False,
    exclude: tuple[str, ...] = (),
    listing: str | None = None,
    user_excludes: bool = True,
    nested: Sequence[str] = (),
) -> list[str]:
    """Relative paths of the workspace's untracked files, sorted (every file of a plain folder;
    every file of each ``nested`` folder, see :func:`finish_listing`).

    ``listing``: ``git`` (untracked files of the repository at ``root``), ``git-nocommit`` (every
    file of a repository without commits), ``plain`` (walk the folder); default: ``git`` when
    ``root`` is the top of a repository, else ``plain``. ``user_excludes`` False: the running
    user's own ignore file (``core.excludesFile``) does not apply, only the repository's rules.
    """
    root = Path(root)
    if listing is None:
        top = repo_root(root)
        listing = "git" if top is not None and top.resolve() == root.resolve() else "plain"
    proc = start_listing(root, listing, include_ignored, user_excludes=user_excludes)
    return finish_listing(root, proc, exclude, nested)[0]


K = TypeVar("K")
V = TypeVar("V")


def stat_key(st: os.stat_result) -> tuple[int, ...]:
    """What says a file is unchanged: its size, mtime, inode, ctime and mode."""
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, st.st_mode)


class StatCache(Generic[K, V]):
    """What was found of a file (its sha256; whether a checkout gives back its bytes) by its
    :func:`stat_key`, so an unchanged file is not read again. A file whose ctime is less than 2 s
    old when read is not cached (it may change again within the same tick)."""

    def __init__(self) -> None:
        self.entries: dict[K, tuple[tuple[int, ...], V]] = {}

    def get(self, name: K, key: tuple[int, ...]) -> V | None:
        hit = self.entries.get(name)
        return hit[1] if hit is not None and hit[0] == key else None

    def put(self, name: K, key: tuple[int, ...], value: V, read_at_ns: int) -> None:
        if key[3] < read_at_ns - 2_000_000_000:
            self.entries[name] = (key, value)
        else:
            self.entries.pop(name, None)


class SpecialFiles:
    """The FIFOs, sockets and devices in the folders of a git workspace: git lists none of them (it
    lists files and symbolic links only), so a checkpoint leaves them out with no listing naming
    them. A folder is read again only when its stat data changed since it was read (an entry made
    or removed changes it): a stat of each folder asked about, no walk."""

    def __init__(self) -> None:
        self._read: dict[str, tuple[int, ...]] = {}  # folder -> its stat data when read

    def find(self, root: Path, folders: set[str]) -> list[str]:
        """The special files (paths relative to ``root``, sorted) in the ``folders`` (relative to
        ``root``; "" for the top) changed since they were read here, but in a ``.git``."""
        found = []
        now = time.time_ns()
        for rel in sorted(folders):
            full = os.path.join(root, rel) if rel else str(root)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            key = stat_key(st)
            if not stat.S_ISDIR(st.st_mode) or self._read.get(rel) == key:
                continue
            if key[3] < now - 2_000_000_000:  # (changed within the same tick again: read next time too)
                self._read[rel] = key
            try:
                with os.scandir(full) as entries:
                    for e in entries:
                        if e.name != ".git" and not (
                            e.is_file(follow_symlinks=False)
                            or e.is_dir(follow_symlinks=False)
                            or e.is_symlink()
                        ):
                            found.append(f"{rel}/{e.name}" if rel else e.name)
            except OSError:
                continue
        return sorted(found)


def folders_of(paths: Sequence[str], into: set[str]) -> set[str]:
    """``into`` with the folders holding each of ``paths`` (relative ones, ``/``-separated), up to
    the top (``""``)."""
    for p in paths:
        while "/" in p:
            p = p.rpartition("/")[0]
            if p in into:
                break
            into.add(p)
    into.add("")
    return into


def manifest_of(
    root: Path,
    paths: list[str],
    blobs: BlobStore | None,
    cache: StatCache[str, str] | None,
    *,
    scrub: bool = True,
) -> list[list[Any]]:
    """The manifest rows of ``paths`` under ``root`` (``[path, kind, mode, size, sha256]``), their
    contents scrubbed first (secrets never reach the blobs), unless ``scrub`` is False: a restored
    workspace holds the stored bytes, scrubbed already, and the rules in force now may differ."""
    from ..redact import scrub_file as scrubbed  # here: verifying a session reads manifests, and never scrubs

    scrub_file: Callable[[bytes], bytes] = scrubbed if scrub else (lambda data: data)

    rows: list[list[Any]] = []
    for rel in paths:
        full = os.path.join(root, rel)
        try:
            st = os.lstat(full)
            now = time.time_ns()
            if stat.S_ISLNK(st.st_mode):
                data = scrub_file(os.readlink(full).encode("utf-8", "surrogateescape"))
                rows.append(
                    [rel, "symlink", 0o777, len(data), blobs.put(data) if blobs else sha256_hex(data)]
                )
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            key = stat_key(st)
            h = cache.get(rel, key) if cache is not None else None
            if h is None:
                try:
                    # (swapped for a FIFO or a device since the lstat: refused, never waited on)
                    with open_regular(full) as f:
                        data = scrub_file(f.read())  # secrets never reach the blobs (docs/security.md)
                except SessionError:
                    continue
                h = blobs.put(data) if blobs is not None else sha256_hex(data)
                size = len(data)
                if cache is not None and size == st.st_size:
                    cache.put(rel, key, h, now)
            else:
                size = st.st_size
        except (FileNotFoundError, NotADirectoryError):  # deleted while we looked
            continue
        rows.append([rel, "file", stat.S_IMODE(st.st_mode) & 0o777, size, h])
    return rows


def manifest_changes(base: list[list[Any]], rows: list[list[Any]]) -> dict[str, list[Any]]:
    """What turns the manifest ``base`` into ``rows``: ``drop``, the paths gone, and ``put``, the
    rows added or changed."""
    before = {r[0]: r for r in base}
    paths = {r[0] for r in rows}
    return {"drop": [p for p in before if p not in paths], "put": [r for r in rows if before.get(r[0]) != r]}


def apply_changes(base: list[list[Any]], changes: Any) -> list[list[Any]]:
    """The manifest ``base`` with ``changes`` (of :func:`manifest_changes`) made: its rows by path,
    sorted. Raises :class:`SessionError` for changes of another shape."""
    drop, put = (changes.get(k) if isinstance(changes, dict) else None for k in ("drop", "put"))
    if not (
        isinstance(drop, list)
        and isinstance(put, list)
        and all(isinstance(p, str) for p in drop)
        and all(isinstance(r, list) and r and isinstance(r[0], str) for r in [*base, *put])
    ):
        raise SessionError("the workspace's manifest_changes (or its manifest_base) are malformed")
    rows = {r[0]: r for r in base}
    for path in drop:
        rows.pop(path, None)
    rows.update((r[0], r) for r in put)
    return [rows[p] for p in sorted(rows)]


class Manifests:
    """How the manifests of one session's checkpoints are stored: inline rows when short, else
    the canonical JSON as a blob (``manifest_json``) — or, while that pays, as the changes
    (``manifest_changes``) to the last manifest stored whole (``manifest_base``, the same blob).

    A manifest where one file of a thousand changed costs that row, not a new blob of all of them.
    The changes to one base grow with every checkpoint, so a manifest is stored whole again (the new
    base) once the changes written since the base add up to half its JSON: about what a whole one
    costs compressed, past which a new base is cheaper than changes that keep growing.
    """

    def __init__(self) -> None:
        self.base: tuple[bytes, list[list[Any]]] | None = None
        self.spent = 0
        self.last: tuple[bytes, dict[str, Any]] | None = None

    def fields(self, rows: list[list[Any]]) -> dict[str, Any]:
        """The ``workspace`` fields that store the manifest ``rows``. (A file name that is not UTF-8
        holds lone surrogates, which only the ``exotic`` JSON writes: :func:`_parsed` reads it.)"""
        encoded = canonical_json(rows, exotic=True)
        if len(encoded) <= MANIFEST_INLINE_MAX:
            return {"manifest": rows}
        if self.last is not None and self.last[0] == encoded:
            return self.last[1]  # unchanged: the log stores the same fields as a reference
        out: dict[str, Any] = {"manifest_json": encoded}  # bytes: one content-addressed blob
        if self.base is not None:
            changes = manifest_changes(self.base[1], rows)
            cost = len(canonical_json(changes, exotic=True))
            # (the rows rebuilt exactly, their order included: else the fingerprint would not hold)
            if (
                self.spent + cost < len(self.base[0]) // 2
                and canonical_json(apply_changes(self.base[1], changes), exotic=True) == encoded
            ):
                self.spent += cost
                out = {"manifest_base": self.base[0], "manifest_changes": changes}
        if "manifest_json" in out:
            self.base, self.spent = (encoded, rows), 0
        self.last = (encoded, out)
        return out


def manifest_rows(workspace: dict[str, Any] | None) -> list[list[Any]]:
    """The manifest rows of a checkpoint's ``workspace`` field (resolved form: inline, as
    ``manifest_json``, or as ``manifest_changes`` to ``manifest_base``). Raises
    :class:`SessionError` for changes of another shape."""
    if not workspace:
        return []
    if "manifest_json" in workspace:
        return _parsed(workspace["manifest_json"])
    if "manifest_base" in workspace:
        return apply_changes(_parsed(workspace["manifest_base"]), workspace.get("manifest_changes"))
    return list(workspace.get("manifest") or [])


def _parsed(raw: Any) -> list[list[Any]]:
    rows: list[list[Any]] = read_json_text(raw if isinstance(raw, bytes | str) else b"[]")
    return rows
