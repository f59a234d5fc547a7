"""Source state: the tracked files as a git tree, and the canonical diff of that tree against the base
commit, taken incrementally with a private index (see the package docstring).
"""

from __future__ import annotations

import binascii
import hashlib
import os
import shutil
import stat
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import redact
from ..canonical import sha256_hex
from ..errors import CheckpointError, SessionError
from ..files import scratch_dir
from ..log.blobs import open_regular
from ..patterns import compiled_later_bytes
from .git import (
    HEX,
    PATHS_MAX,
    fsync_wanted,
    git,
    git_finish,
    git_start,
    loose_path,
    user_config,
    user_settings,
    write_loose,
)
from .workspace import StatCache, stat_key

RAW_DIFF = ["diff-tree", "-r", "-t", "-z", "--no-renames", "--no-abbrev"]
_DIFF_OPTS = (
    "--binary",
    "--full-index",
    "--no-renames",
    "--no-ext-diff",
    "--no-textconv",
    "--no-color",
    "--diff-algorithm=myers",
)


def _parse_index_listing(raw: bytes) -> dict[bytes, bytes]:
    """``git ls-files -s -v -z`` output → path → its record(s) (``tag mode sha stage``, stages joined)."""
    out: dict[bytes, bytes] = {}
    for rec in raw.split(b"\0"):
        if not rec:
            continue
        meta, _, path = rec.partition(b"\t")
        out[path] = out[path] + b"|" + meta if path in out else meta
    return out


#: The object id of empty content, by hash algorithm: what an intent-to-add entry lists as its own.
_EMPTY_BLOB = {
    "sha1": "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391",
    "sha256": "473a0f4c3be8a93681a267e3b1e9a7dcda1185436fe141f7749120a303721813",
}


def intent_to_add(repo: Path, entries: dict[bytes, bytes], algo: str) -> list[str]:
    """The paths of ``entries`` (:func:`_parse_index_listing`) that ``git add -N`` marked
    intent-to-add, sorted: listed as empty staged files, they are in no staged tree, and ``git
    status`` and ``git diff`` show them as not staged. Only entries of empty content can be one."""
    empty = _EMPTY_BLOB[algo].encode()
    candidates = [p for p, meta in entries.items() if meta.split(b" ")[2:3] == [empty]]
    if not candidates:
        return []
    # (an intent-to-add entry is the one kind diff-files shows as added: the others are in the index)
    out = git(
        ["diff-files", "--name-only", "--diff-filter=A", "-z", "--", *map(os.fsdecode, candidates)], repo
    )
    return sorted(p for p in out.split("\0") if p)


def _index_info_line(path: bytes, meta: bytes) -> bytes:
    """An ``update-index --index-info`` record for a stage-0 entry from a listing record."""
    _tag, mode, sha, _stage = meta.split(b"|", 1)[0].split(b" ")
    return mode + b" " + sha + b" 0\t" + path


def parse_raw_diff(raw: bytes) -> list[tuple[str, str, str, str, bytes]]:
    """``git diff-tree -r -z --raw`` output → ``(old_mode, new_mode, old_sha, new_sha, path)``."""
    parts = raw.split(b"\0")
    out = []
    i = 0
    while i + 1 < len(parts):
        meta = parts[i]
        if not meta.startswith(b":"):
            i += 1
            continue
        om, nm, osha, nsha, _status = meta[1:].decode().split(" ")
        out.append((om, nm, osha, nsha, parts[i + 1]))
        i += 2
    return out


def _split_patch(patch: bytes) -> list[bytes]:
    """A patch cut into the sections of its paths: a typechange's two ``diff --git`` sections (same
    header) stay together. Text lines start with `` ``/``+``/``-``/``@``/``\\``, binary data is base85,
    so only a path's header line can start with ``diff --git``."""
    if not patch:
        return []
    starts = [0] if patch.startswith(b"diff --git ") else []
    pos = patch.find(b"\ndiff --git ")
    while pos >= 0:
        starts.append(pos + 1)
        pos = patch.find(b"\ndiff --git ", pos + 1)
    if not starts or starts[0] != 0:
        return [patch]
    sections = [patch[a:b] for a, b in zip(starts, [*starts[1:], len(patch)], strict=False)]
    grouped: list[bytes] = []
    for s in sections:
        header = s.split(b"\n", 1)[0]
        if grouped and grouped[-1].split(b"\n", 1)[0] == header:
            grouped[-1] += s
        else:
            grouped.append(s)
    return grouped


class _Trees:
    """The tree objects of an index's entries, updated incrementally: git's ``write-tree`` in Python,
    so that no git command that writes objects has to see the user's repository (git touches an
    object it finds instead of writing it), and only the trees of changed folders are recomputed."""

    def __init__(self, algo: str) -> None:
        self.algo = algo
        self.files: dict[bytes, tuple[bytes, bytes]] = {}  # path -> (mode, raw object id)
        self.dirs: dict[bytes, dict[bytes, tuple[bytes, bytes]]] = {b"": {}}  # folder -> name -> entry
        self.ids: dict[bytes, bytes] = {}  # folder -> raw tree id
        self.dirty: set[bytes] = {b""}

    def copy(self) -> _Trees:
        """An independent copy (the folders' entry maps are copied, the rest is immutable)."""
        other = _Trees(self.algo)
        other.files = dict(self.files)
        other.dirs = {d: dict(v) for d, v in self.dirs.items()}
        other.ids = dict(self.ids)
        other.dirty = set(self.dirty)
        return other

    def _mark(self, d: bytes) -> None:
        while d not in self.dirty:  # a dirty folder's parents are dirty already
            self.dirty.add(d)
            if not d:
                break
            d = d.rpartition(b"/")[0]

    def _folder(self, d: bytes) -> dict[bytes, tuple[bytes, bytes]]:
        if d not in self.dirs:
            parent, _, name = d.rpartition(b"/")
            self._folder(parent)[name] = (b"40000", b"")
            self.dirs[d] = {}
            self._mark(parent)
        return self.dirs[d]

    def update(self, files: dict[bytes, tuple[bytes, bytes]], only: set[bytes] | None = None) -> None:
        """Make the entries ``files`` (all of them, or just the paths ``only`` when given)."""
        old = self.files
        if not old and only is None:  # the first build: no removals, no comparisons
            for path, entry in files.items():
                d, _, name = path.rpartition(b"/")
                folder = self.dirs.get(d)
                (folder if folder is not None else self._folder(d))[name] = entry
            self.files = dict(files)
            self.dirty = set(self.dirs)
            return
        paths = only if only is not None else old.keys() | files.keys()
        for path in paths:  # removals first: a file may become a folder and the other way round
            if path in old and path not in files:
                d, _, name = path.rpartition(b"/")
                del self.dirs[d][name]
                del old[path]
                while d and not self.dirs[d]:
                    del self.dirs[d]
                    self.ids.pop(d, None)
                    self.dirty.discard(d)
                    d, _, name = d.rpartition(b"/")
                    del self.dirs[d][name]
                self._mark(d)
        for path in paths:
            new = files.get(path)
            if new is not None and old.get(path) != new:
                d, _, name = path.rpartition(b"/")
                self._folder(d)[name] = new
                old[path] = new
                self._mark(d)

    def root(self, write: Callable[[str, bytes], None]) -> str:
        """The root tree's id; ``write(id, content)`` is called for every tree computed anew."""
        for d in sorted(self.dirty, key=lambda d: d.count(b"/") + 1 if d else 0, reverse=True):
            if d not in self.dirs:
                continue
            ents = []
            for name, (mode, oid) in self.dirs[d].items():
                if mode == b"40000":
                    ents.append((name + b"/", mode, name, self.ids[d + b"/" + name if d else name]))
                else:
                    ents.append((name, mode, name, oid))
            ents.sort()
            content = b"".join(m + b" " + n + b"\0" + o for _, m, n, o in ents)
            oid = hashlib.new(self.algo, b"tree %d\0" % len(content) + content).digest()
            self.ids[d] = oid
            write(oid.hex(), content)
        self.dirty.clear()
        return self.ids[b""].hex()


def _entries_of(listing: bytes) -> dict[bytes, tuple[bytes, bytes]] | None:
    """``git ls-files --stage -z`` output → path → (mode, raw id); None when a path is unmerged."""
    out = {}
    for rec in listing.split(b"\0"):
        if rec:
            meta, _, path = rec.partition(b"\t")
            mode, oid, stage = meta.split(b" ")
            if stage != b"0":
                return None
            out[path] = (mode, binascii.a2b_hex(oid))
    return out


_VERBOSE_ADD = compiled_later_bytes(rb"^(?:add|remove) '(.*)'$")


class SourceTracker:
    """The source state of one repository, taken again and again cheaply (see the module docstring).

    ``objects`` receives the new git objects (trees, and blobs the repository does not have, or has
    only unreachable: they are copied so the session never depends on the user's garbage).
    """

    def __init__(
        self,
        repo: Path,
        base: str,
        objects: Path,
        *,
        config: tuple[str, ...] | None = None,
        durable: bool | None = None,
        fresh: bool = False,
    ) -> None:
        self.repo = Path(repo)
        self.base = base
        self.durable = fsync_wanted() if durable is None else durable
        # fresh: the working tree was written just now (a restore), so git sees every file as racily
        # clean and `add` would store each again; a dry run first names the really changed ones.
        self.fresh = fresh
        # Absolute: git runs in the repository, and a store given relative to here would miss.
        self.objects = Path(objects).absolute()
        try:
            git_dir, common, self.base_tree = git(
                ["rev-parse", "--path-format=absolute", "--git-dir", "--git-common-dir", f"{base}^{{tree}}"],
                self.repo,
            ).splitlines()
        except ValueError:
            raise CheckpointError(f"{self.repo}: cannot read the base commit {base}") from None
        self.git_dir = Path(git_dir)
        self.user_index = self.git_dir / "index"
        self.repo_objects = Path(common) / "objects"
        filters, self._config_trusted = user_settings(self.repo, self.git_dir)
        self.config = filters if config is None else config
        self.algo = "sha256" if len(self.base_tree) == 64 else "sha1"
        self._known: set[str] | None = None  # the base commit's trees: in the repository already
        self._work = _Trees(self.algo)  # trees of the private index (the working tree's state)
        self._staged = _Trees(self.algo)  # trees of the user's index (the staged state)
        self._work_built = False
        tmp, self._finalizer = scratch_dir(self, "forkpoint-index-")
        self.private = tmp / "index"
        self._entries: dict[bytes, bytes] | None = None
        #: (the entries they were found in, the submodule paths among them)
        self._submodules: tuple[dict[bytes, bytes] | None, list[str]] = (None, [])
        self._index_stat: tuple[int, ...] | None = None
        self._index_tree: str | None = None
        self._trust: bool | None = None
        self._tree: str | None = None
        self._changes: list[tuple[str, str, str, str, bytes]] = []
        self._sections: dict[tuple[str, str, str, str, bytes], bytes] = {}
        self._patch: list[bytes] = []
        self._ensured: set[str] = set()
        self._last_written: str | None = None
        # Tracked files `add --update` dropped from the private index because they were deleted.
        self._gone: set[bytes] = set()
        # Raw object id of a tracked file's content that held a secret -> its scrubbed object's id.
        self._scrubbed: dict[bytes, bytes] = {}
        # skip_worktree(): the entries it was found in, the paths marked.
        self._skipped: tuple[dict[bytes, bytes] | None, list[bytes]] = (None, [])
        # sparse_checkout(): the entries and the stat data of the files it was read at, what it found.
        self._sparse: tuple[dict[bytes, bytes] | None, tuple[Any, ...], dict[str, Any] | None] = (
            None,
            (),
            None,
        )
        # intent_to_add(): the entries it was found in, the paths marked.
        self._ita: tuple[dict[bytes, bytes] | None, list[str]] = (None, [])
        # assume_unchanged(): the entries it was found in, the paths marked.
        self._assumed: tuple[dict[bytes, bytes] | None, list[bytes]] = (None, [])
        # converted(): the attributes files' stat data and the tracked paths they were read for,
        # each candidate's conversions, and whether its bytes differ, by the file's stat data.
        self._attr_files: tuple[dict[bytes, bytes] | None, list[Path]] = (None, [])
        self._attr_stats: tuple[tuple[int, ...], ...] | None = None
        self._tree_attrs: tuple[tuple[int, ...], ...] | None = None  # (as tree() last saw them)
        self._attr_entries: dict[bytes, bytes] | None = None
        self._attrs: dict[bytes, tuple[str, bool, bool]] = {}
        self._differs: StatCache[bytes, bool] = StatCache()
        # stash(): the stash reflog's stat data, and the entries read at it.
        self._stash: tuple[tuple[int, ...] | None, list[tuple[str, str]]] = (None, [])
        # refs(): the stat data of the ref files, and the refs read at it.
        self._refs: tuple[tuple[tuple[Any, ...], ...] | None, dict[str, str], dict[str, str]] = (None, {}, {})

    def close(self) -> None:
        """Remove the private index."""
        self._finalizer()

    def _env(self, index: Path | None = None, *, read: bool = True) -> dict[str, str]:
        env = {"GIT_INDEX_FILE": str(index or self.private), "GIT_OBJECT_DIRECTORY": str(self.objects)}
        if read:
            env["GIT_ALTERNATE_OBJECT_DIRECTORIES"] = str(self.repo_objects)
        return env

    def _git(self, args: list[str], *, index: Path | None = None, **kw: Any) -> Any:
        """git reading the repository's objects (as alternates): for commands that write none."""
        return git(args, self.repo, self._env(index), config=self.config, **kw)

    def _git_w(self, args: list[str], *, index: Path | None = None, **kw: Any) -> Any:
        """git for commands that may write objects. It does not see the repository's objects: git
        "freshens" (touches) an object it was about to write when it finds it, alternates included,
        and nothing of the user's repository may change. New objects all land in ``objects``."""
        sync = ("core.fsync=loose-object", "core.fsyncMethod=fsync") if self.durable else ()
        return git(args, self.repo, self._env(index, read=False), config=(*self.config, *sync), **kw)

    def tracked(self) -> set[bytes]:
        """Paths of the user's index at the last :meth:`sync` (the tracked files)."""
        return set(self._entries or ())

    def submodules(self) -> list[str]:
        """Paths of the submodules (gitlinks) in the user's index at the last :meth:`sync`: the
        tree holds each one's commit, not its files."""
        if self._submodules[0] is not self._entries:  # (once per change of the user's index)
            found = sorted(
                p.decode("utf-8", "surrogateescape")
                for p, meta in (self._entries or {}).items()
                if meta.split(b" ", 2)[1:2] == [b"160000"]
            )
            self._submodules = (self._entries, found)
        return self._submodules[1]

    # -- keeping the private index in step with the user's

    def _user_index_stat(self) -> tuple[int, ...]:
        try:
            st = self.user_index.stat()
        except FileNotFoundError:
            return (0,)
        return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def sync(self) -> set[bytes] | None:
        """Bring the private index's entry list in line with the user's index (its stat cache stays).
        Returns the paths whose private entries it changed (None: all may have)."""
        st = self._user_index_stat()
        if st == self._index_stat and self.private.exists():
            return set()
        raw = git(["ls-files", "--stage", "-v", "-z"], self.repo, binary=True)
        entries = _parse_index_listing(raw)
        if self._entries is None:
            if self._trust is None:
                self._trust = self.user_index.exists() and self._config_trusted
            if self._trust:
                # The user's stat cache holds under the pinned settings: start from a copy of it, so
                # the first `add --update` rehashes only the files changed since the user's last git.
                # (copy2: git's racy-entry check compares entries with the index file's mtime.)
                shutil.copy2(self.user_index, self.private)
                self._index_tree = self._staged_tree(entries)
                assumed = [p for p, meta in entries.items() if meta[:1].islower()]
                if assumed:
                    self._git_w(
                        ["update-index", "--no-assume-unchanged", "-z", "--stdin"],
                        input=b"\0".join(assumed) + b"\0",
                    )
                # Entries git "smudged" as racily clean (size 0: a checkout in the same second) count as
                # modified for `add`, which would store every one of them again; --refresh checks
                # their content and writes nothing.
                self._git_w(["update-index", "-q", "--refresh"], check=False)
                self._entries, self._index_stat = entries, st
                if self._index_tree is not None:  # the private index is the user's: so are its trees
                    self._work = self._staged.copy()
                    self._work_built = True
                    return set()
                return None
            # Not trusted: start from the base tree, apply the user's index on top, then let
            # `update-index --refresh` hash every file: an entry whose content matches gets its stat
            # data without any object written, so only really changed files are added later.
            self._git(["read-tree", self.base_tree])
            old = {}
            listing = self._git(["ls-tree", "-r", "-z", "--full-tree", self.base_tree], binary=True)
            for rec in listing.split(b"\0"):
                if rec:
                    meta, _, path = rec.partition(b"\t")
                    mode, _kind, sha = meta.split(b" ")
                    old[path] = b"H " + mode + b" " + sha + b" 0"
            changed = [p for p, meta in entries.items() if old.get(p) != meta]
            removed = [p for p in old if p not in entries]
            refresh = True
        else:
            old = self._entries
            changed = [p for p, meta in entries.items() if old.get(p) != meta]
            removed = [p for p in old if p not in entries]
            refresh = False
        info = [_index_info_line(p, entries[p]) for p in changed]
        info += [b"0 " + b"0" * len(old[p].split(b" ")[2]) + b"\t" + p for p in removed]
        if info:
            self._git_w(["update-index", "-z", "--index-info"], input=b"\0".join(info) + b"\0")
        skip = [p for p in changed if entries[p][:1] in (b"S", b"s")]
        if skip:
            self._git_w(["update-index", "--skip-worktree", "-z", "--stdin"], input=b"\0".join(skip) + b"\0")
        if refresh:
            self._git_w(["update-index", "-q", "--refresh"], check=False)
        self._index_tree = self._staged_tree(entries) if self.user_index.exists() else None
        self._entries, self._index_stat = entries, st
        return None if refresh else set(changed) | set(removed)

    @property
    def staged_tree(self) -> str | None:
        """The tree of the staged state as of the last :meth:`sync` (what ``index_tree`` records),
        or None (no index, or unmerged entries)."""
        return self._index_tree

    def _staged_tree(self, entries: dict[bytes, bytes]) -> str | None:
        """The tree of the staged state (the user's index as it is), or None (unmerged entries).
        Intent-to-add entries count as empty files (``git write-tree`` would leave them out)."""
        files = {}
        for path, meta in entries.items():
            _tag, mode, oid, stage = meta.split(b" ", 3)
            if stage != b"0":
                return None
            files[path] = (mode, binascii.a2b_hex(oid))
        self._staged.update(files)
        return self._staged.root(self._write_tree)

    def _write_tree(self, oid: str, content: bytes) -> None:
        if self._known is None:
            listing = self._git(["ls-tree", "-r", "-d", "-z", "--full-tree", self.base_tree], binary=True)
            self._known = {self.base_tree}
            for rec in listing.split(b"\0"):
                if rec[:7] == b"040000 ":
                    self._known.add(rec.split(b" ")[2].split(b"\t")[0].decode())
        if oid not in self._known:
            write_loose(self.objects, oid, b"tree", content, self.durable)

    # -- taking the state

    def _add_back(self) -> list[bytes]:
        """Tracked files that were deleted (so `add --update` dropped them from the private index)
        and exist again: add them back, since `add --update` only looks at entries still there.
        Returns their paths."""
        entries = self._entries or {}
        self._gone &= set(entries)  # no longer tracked by the user: not ours to bring back
        back = [
            p for p in sorted(self._gone) if os.path.lexists(self.repo / p.decode("utf-8", "surrogateescape"))
        ]
        if back:
            # -f: a tracked file may match .gitignore; it is tracked all the same.
            self._git_w(["add", "-f", "--", *(p.decode("utf-8", "surrogateescape") for p in back)])
            self._gone -= set(back)
        return back

    def tree(self) -> str:
        """Hash of the tree of the tracked files as they are in the working tree now."""
        self.objects.mkdir(parents=True, exist_ok=True, mode=0o700)
        touched = self.sync()
        back = self._add_back()
        if touched is not None:
            touched.update(back)
        # --verbose names every entry it updates, so only those are read back from the index.
        if self.fresh:
            updated = self._git_w(["add", "--dry-run", "--update", "--verbose"], binary=True)
            lines = updated.splitlines()
            named = [m.group(1) for m in map(_VERBOSE_ADD.match, lines) if m]
            if len(named) != len(lines):  # (a name holding a newline: its line cannot be read) all of them
                self._git_w(["add", "--update"])
            elif named:
                self._git_w(["add", "--update", "--", *(p.decode("utf-8", "surrogateescape") for p in named)])
        else:
            # Attributes changed since the last tree: a file git stores otherwise now (eol, text)
            # may keep its stat data, and `add --update` would keep its old content.
            attrs = tuple(_stat_key(f) for f in self._attribute_files())
            again = self._tree_attrs is not None and attrs != self._tree_attrs
            self._tree_attrs = attrs
            # (--renormalize: every tracked file hashed again; it wants a pathspec, this folder: the top)
            add = ["--renormalize", "--verbose", "--", "."] if again else ["--update", "--verbose"]
            updated = self._git_w(["add", *add], binary=True)
            if again:
                touched = None  # (it does not name every entry it changed: all are read back)
        # git writes the object of a file it re-hashes (a racily clean entry) even when the content is
        # the one indexed, and names it nowhere: an unscrubbed object removed before comes back.
        for raw in self._scrubbed:
            loose_path(self.objects, raw.hex()).unlink(missing_ok=True)
        for line in updated.splitlines():
            m = _VERBOSE_ADD.match(line)
            if m is not None and line.startswith(b"remove "):
                self._gone.add(m.group(1))
            if m is None or touched is None:
                touched = None
            else:
                touched.add(m.group(1))
        if touched is not None and not touched and self._last_written is not None:
            return self._last_written
        only: set[bytes] | None = None
        args = ["ls-files", "--stage", "-z"]
        if self._work_built and touched is not None and len(touched) <= PATHS_MAX:
            only = touched
            args += ["--", *(p.decode("utf-8", "surrogateescape") for p in touched)]
        entries = _entries_of(self._git_w(args, binary=True)) if only is None or only else {}
        if entries is None:  # unmerged entries left: let git say what it makes of them
            self._work_built = False
            self._last_written = self._git_w(["write-tree", "--missing-ok"]).strip()
            return self._last_written
        entries = scrub_tracked_entries(self.objects, entries, self.algo, self._scrubbed)  # docs/security.md
        self._work.update(entries, only)
        self._work_built = True
        self._last_written = self._work.root(self._write_tree)
        return self._last_written

    def skip_worktree(self) -> list[bytes]:
        """Tracked paths marked skip-worktree (``git update-index --skip-worktree`` over a local
        config file; a sparse checkout's files left out) that are in the working tree, sorted: git
        does not look at them, so their edits are in no tree. A checkpoint keeps their bytes, and a
        restore marks them again. Call after :meth:`tree`."""
        entries = self._entries or {}
        if self._skipped[0] is not entries:  # (once per change of the user's index)
            self._skipped = (entries, sorted(p for p, meta in entries.items() if meta[:1] in (b"S", b"s")))
        return [p for p in self._skipped[1] if os.path.lexists(self.repo / os.fsdecode(p))]

    def skip_worktree_absent(self) -> list[bytes]:
        """Tracked paths marked skip-worktree that are not in the working tree (a sparse checkout's
        files left out), sorted: a restore's checkout writes every tracked file, so it takes them
        out again and marks them. Call after :meth:`skip_worktree`."""
        return [p for p in self._skipped[1] if not os.path.lexists(self.repo / os.fsdecode(p))]

    def sparse_checkout(self) -> dict[str, Any] | None:
        """The repository's sparse-checkout settings when any skip-worktree entry is there: its
        ``patterns`` (``info/sparse-checkout``, None when there is none) and its ``config``
        (``core.sparseCheckout``, ``core.sparseCheckoutCone``, ``index.sparse``: key → value). A
        restore that marked the entries without them had an arm's ``git checkout`` write the left-out
        files back, or ``git sparse-checkout`` know of no checkout. None when none is set."""
        entries = self._entries or {}
        if not self._skipped[1] or self._skipped[0] is not entries:
            return None
        # (read again when the index changed, or the config or the patterns did: `git config
        # index.sparse true` or an edit of info/sparse-checkout changes no entry of the index)
        common = self.repo_objects.parent
        files = (
            common / "config",
            self.git_dir / "config.worktree",
            self.git_dir / "info" / "sparse-checkout",
        )
        stats = tuple(_stat_key(f) for f in files)
        if self._sparse[0] is not entries or self._sparse[1] != stats:
            config = {
                key.lower(): value
                for scope, key, value in user_config(
                    self.repo, r"^(core\.sparsecheckout|core\.sparsecheckoutcone|index\.sparse)$"
                )
                if scope in ("local", "worktree")
            }
            try:
                patterns: str | None = (self.git_dir / "info" / "sparse-checkout").read_text(errors="replace")
            except OSError:
                patterns = None
            found = {"config": config, "patterns": patterns} if config or patterns is not None else None
            self._sparse = (entries, stats, found)
        return self._sparse[2]

    def intent_to_add(self) -> list[str]:
        """Tracked paths marked intent-to-add (:func:`intent_to_add`): a restore marks them again,
        or its ``git status`` and ``git diff`` showed them staged, empty. Call after :meth:`tree`."""
        entries = self._entries or {}
        if self._ita[0] is not entries:  # (once per change of the user's index)
            self._ita = (entries, intent_to_add(self.repo, entries, self.algo))
        return list(self._ita[1])

    def assume_unchanged(self) -> list[bytes]:
        """Tracked paths marked assume-unchanged (``git update-index --assume-unchanged``), sorted: git
        does not look at them, so ``git status`` names none of their edits (the tree holds what is in
        the working tree: a restore marks them again, or its ``git status`` named files the recorded
        repository's did not). Call after :meth:`tree`."""
        entries = self._entries or {}
        if self._assumed[0] is not entries:  # (once per change of the user's index)
            self._assumed = (entries, sorted(p for p, meta in entries.items() if meta[:1].islower()))
        return list(self._assumed[1])

    def converted(self, untracked: list[str] | tuple[str, ...] = ()) -> list[bytes]:
        """Tracked files (paths, sorted) whose bytes a checkout of their content would not give
        back: the repository's ``.gitattributes`` convert line endings (``text``, ``eol``), expand
        ``$Id$`` (``ident``) or re-encode (``working-tree-encoding``), and the file is not as a
        checkout writes it (an ``eol=crlf`` file an agent wrote with ``\\n``, a ``$Id$`` never
        expanded, a ``text=auto`` file with ``\\r\\n``). The tree holds their content as git
        stores it; a checkpoint keeps their bytes too. Files with a ``filter`` driver are not looked
        at (see :func:`.git.user_settings`), nor attributes files git does not track. Call after
        :meth:`tree`.

        Costs nothing in a repository without attributes files; else one ``git check-attr`` when
        they or the tracked paths changed, a read of each candidate file when its stat data
        changed, and one ``git checkout-index`` (into a scratch folder) for those that may differ.
        The conversions are gitattributes(5)'s "Effects".

        ``untracked``: the working tree's untracked files (its paths relative to the repository's
        top). Their ``.gitattributes`` files change how git stores a tracked file too, not how a
        restore's checkout writes it (it writes them later)."""
        entries = self._entries or {}
        extra = [self.repo / p for p in untracked if p.rsplit("/", 1)[-1] == ".gitattributes"]
        stats = tuple(_stat_key(f) for f in [*self._attribute_files(), *extra])
        if not any(stats):
            return []
        if stats != self._attr_stats:
            self._differs = StatCache()  # other attributes: every verdict is taken again
        if stats != self._attr_stats or entries is not self._attr_entries:
            self._attrs = self._conversions(entries)
            self._attr_stats, self._attr_entries = stats, entries
        found: set[bytes] = set()
        exact: dict[bytes, tuple[tuple[int, ...], int, bytes]] = {}
        differs = self._differs
        for path, (full, crlf, other) in self._attrs.items():
            try:
                st = os.lstat(full)
            except OSError:
                continue  # deleted: the tree says so
            key = stat_key(st)
            cached = differs.get(path, key)
            if cached is not None:
                if cached:
                    found.add(path)
                continue
            if not stat.S_ISREG(st.st_mode):
                continue  # no longer a file: the tree says what it is
            now = time.time_ns()
            try:
                with open_regular(full) as f:
                    raw = f.read()
            except (OSError, SessionError):
                continue
            if crlf or other or b"\r" in raw:
                exact[path] = (key, now, raw)
            else:  # a checkout writes it as git stores it
                differs.put(path, key, False, now)
        for path, checked_out in self._checked_out(list(exact)).items():
            key, now, raw = exact[path]
            differs.put(path, key, checked_out != raw, now)
            if checked_out != raw:
                found.add(path)
        return sorted(found)

    def _attribute_files(self) -> list[Path]:
        """The repository's ``info/attributes`` and its tracked ``.gitattributes`` files (which may
        not exist)."""
        entries = self._entries or {}
        if self._attr_files[0] is not entries:  # (once per change of the user's index)
            named = [p for p in entries if p.rsplit(b"/", 1)[-1] == b".gitattributes"]
            info = self.repo_objects.parent / "info" / "attributes"
            self._attr_files = (entries, [info, *(self.repo / os.fsdecode(p) for p in named)])
        return self._attr_files[1]

    def _conversions(self, entries: dict[bytes, bytes]) -> dict[bytes, tuple[str, bool, bool]]:
        """The tracked regular files a checkout converts, by ``git check-attr``: path → (its full
        path, its line endings become ``\\r\\n``, it is expanded or re-encoded). ``text``/``eol=lf``
        files are there too, (…, False, False): a checkout gives back their bytes unless they hold
        ``\\r``."""
        files = [p for p, meta in entries.items() if meta.split(b" ", 2)[1:2] in ([b"100644"], [b"100755"])]
        if not files:
            return {}
        out = self._git(
            ["check-attr", "-z", "--stdin", "text", "eol", "ident", "working-tree-encoding", "filter"],
            binary=True,
            input=b"\0".join(files) + b"\0",
        )
        attrs: dict[bytes, dict[bytes, bytes]] = {}
        parts = out.split(b"\0")
        for i in range(0, len(parts) - 2, 3):
            attrs.setdefault(parts[i], {})[parts[i + 1]] = parts[i + 2]
        none = (b"unspecified", b"unset")
        found = {}
        for path, a in attrs.items():
            if a.get(b"filter", b"unspecified") not in none:
                continue
            eol = a.get(b"eol", b"unspecified")
            crlf = eol == b"crlf" and a.get(b"text") != b"unset"
            other = a.get(b"ident") == b"set" or a.get(b"working-tree-encoding", b"unspecified") not in none
            text = a.get(b"text") in (b"set", b"auto") or eol == b"lf"
            if crlf or other or text:
                found[path] = (os.path.join(self.repo, os.fsdecode(path)), crlf, other)
        return found

    def _checked_out(self, paths: list[bytes]) -> dict[bytes, bytes]:
        """What a restore's checkout writes for each of ``paths``: its content in the private index
        through the conversions the ``.gitattributes`` files of that index ask for, the only ones a
        restore's checkout has (not an untracked one, not ``info/attributes``); no filter driver is
        run. ``git checkout-index`` into a scratch folder of a scratch repository (``cat-file --batch
        --filters`` heads each blob with its size before the conversion in git 2.39: read by it,
        a file expanded on checkout ran into the next one's answer). A path not checked out maps
        to nothing anyone wrote: it counts as differing."""
        out: dict[bytes, bytes] = {}
        if not paths:
            return out
        scratch = Path(tempfile.mkdtemp(prefix="forkpoint-checkout-"))
        try:
            work, written = scratch / "work", scratch / "out"
            init = [
                "init",
                "-q",
                "--template=",
                *(["--object-format=sha256"] if self.algo == "sha256" else []),
            ]
            git([*init, str(work)], scratch)
            env = {**self._env(), "GIT_DIR": str(work / ".git"), "GIT_WORK_TREE": str(work)}
            # (no `config`: a restore runs no filter driver either)
            git(
                ["checkout-index", "-z", "--stdin", f"--prefix={written}/"],
                work,
                env,
                check=False,
                input=b"".join(p + b"\0" for p in paths),
            )
            for path in paths:
                try:
                    with open_regular(os.path.join(written, os.fsdecode(path))) as f:
                        out[path] = f.read()
                except (OSError, SessionError):
                    out[path] = b"\0(not checked out)"
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return out

    def capture(self) -> dict[str, Any]:
        """``{"base", "head", "branch", "tree", "index_tree", "changed", "patch" (sections),
        "diff_hash"}``, and ``"submodules"`` when the index has any. Raises :class:`CheckpointError`."""
        head_proc = git_start(["rev-parse", "HEAD", "--symbolic-full-name", "HEAD"], self.repo)
        try:
            tree = self.tree()
            if tree != self._tree:
                self._diff(tree)
            index_tree = self._index_tree
            if index_tree and index_tree not in self._ensured:
                raw = self._git(RAW_DIFF + [self.base_tree, index_tree], binary=True)
                self._ensure_objects([index_tree] + [c[3] for c in parse_raw_diff(raw)])
                self._ensured.add(index_tree)
        finally:
            head: str | None
            try:
                head, ref = git_finish(head_proc, "rev-parse HEAD").decode().split()
            except (CheckpointError, ValueError):
                head, ref = None, "HEAD"
        patch = b"".join(self._patch)
        submodules = self.submodules()
        stash = self.stash()
        return {
            **({"submodules": submodules} if submodules else {}),
            **({"stash": stash} if stash else {}),
            # (but the branch HEAD is on: it is `branch` at `head`, and moves with every commit)
            "refs": {name: oid for name, oid in self.refs().items() if name != ref},
            **({"symrefs": symrefs} if (symrefs := self.symrefs()) else {}),
            "base": self.base,
            "head": head,
            "branch": ref[len("refs/heads/") :] if ref.startswith("refs/heads/") else None,
            "tree": tree,
            "index_tree": index_tree,
            "changed": [c[4].decode("utf-8", "surrogateescape") for c in self._changes],
            "patch": list(self._patch),
            "diff_hash": sha256_hex(patch),
        }

    def stash(self) -> list[list[str]]:
        """The repository's stash list, newest first: ``[commit, message]`` of each entry (``git
        stash list``). A restore puts it back (its commits are the repository's, as HEAD's are), so an
        agent's ``git stash pop`` in a fork arm finds what the recording's found. Costs a stat when
        there is no stash (one git when the refs are in a reftable)."""
        common = self.repo_objects.parent
        log = common / "logs" / "refs" / "stash"
        try:
            st = log.stat()
        except OSError:
            if not (common / "reftable").is_dir():
                return []
            st = None
        key = (st.st_ino, st.st_size, st.st_mtime_ns) if st is not None else None
        if key is not None and self._stash[0] == key:
            return [list(e) for e in self._stash[1]]
        out = git(["reflog", "show", "--format=%H %gs", "refs/stash", "--"], self.repo, check=False)
        found = []
        for line in out.splitlines():
            commit, _, message = line.partition(" ")
            if HEX.match(commit):
                found.append((commit, message))
        self._stash = (key, found)
        return [list(e) for e in found]

    def refs(self) -> dict[str, str]:
        """The repository's refs but the stash (its own list, :meth:`stash`): ref name → object id
        (``git for-each-ref refs/``): the local branches and tags, and the remote-tracking refs,
        notes and replace refs. A restore makes exactly these (from the objects of the recorded
        repository it copies), so an arm's agent merges the branch the recording merged, tags what it
        tagged, compares with the ``origin/main`` it compared with and reads the notes it read,
        without those made or fetched later. Costs a stat of each loose ref file and of
        ``packed-refs`` while none changed; one git when one did (or the refs are in a reftable)."""
        return dict(self._read_refs()[0])

    def symrefs(self) -> dict[str, str]:
        """The repository's symbolic refs (``git symbolic-ref refs/heads/alias refs/heads/main``;
        ``refs/remotes/origin/HEAD``): ref name → the ref it names. :meth:`refs` has none of them: a
        restore makes each a symbolic ref again, not a branch of its own that stays behind when the
        other moves. Costs what :meth:`refs` does (one listing reads both)."""
        return dict(self._read_refs()[1])

    def _read_refs(self) -> tuple[dict[str, str], dict[str, str]]:
        key = _refs_key(self.repo_objects.parent, self.git_dir)
        if key is not None and self._refs[0] == key:
            return self._refs[1], self._refs[2]
        out = git(["for-each-ref", "--format=%(objectname) %(refname) %(symref)", "refs/"], self.repo)
        found, symbolic = {}, {}
        for line in out.splitlines():
            oid, _, rest = line.partition(" ")
            name, _, target = rest.partition(" ")
            if name == "refs/stash":
                continue
            if target:
                symbolic[name] = target
            elif HEX.match(oid) and name:
                found[name] = oid
        # (the key taken before: a ref changed meanwhile is read again next time)
        self._refs = (key, found, symbolic)
        return found, symbolic

    def _diff(self, tree: str) -> None:
        raw = self._git(RAW_DIFF + [self.base_tree, tree], binary=True)
        records = parse_raw_diff(raw)
        self._ensure_objects([tree] + [r[3] for r in records])
        changes = [r for r in records if "040000" not in (r[0], r[1])]
        needed = [c for c in changes if c not in self._sections]
        if needed:
            args = ["diff-tree", "-p", *_DIFF_OPTS, self.base_tree, tree]
            pathspec = [c[4] for c in needed]
            partial = len(needed) < len(changes) and sum(len(p) for p in pathspec) < 100_000
            if partial:
                args += ["--", *(p.decode("utf-8", "surrogateescape") for p in pathspec)]
            groups = _split_patch(self._git(args, binary=True))
            want = needed if partial else changes
            if len(groups) == len(want) and all(
                _header_matches(g, c[4]) for g, c in zip(groups, want, strict=True)
            ):
                self._sections.update(zip(want, groups, strict=True))
            else:  # cannot tell the sections apart: keep the whole patch as one section
                whole = self._git(["diff-tree", "-p", *_DIFF_OPTS, self.base_tree, tree], binary=True)
                self._tree, self._changes, self._patch = tree, changes, [whole] if whole else []
                return
        self._tree, self._changes = tree, changes
        self._patch = [self._sections[c] for c in changes]
        if len(self._sections) > 4 * len(changes) + 1000:  # forget sections of long-gone states
            keep = set(changes)
            self._sections = {k: v for k, v in self._sections.items() if k in keep}

    def _ensure_objects(self, shas: list[str]) -> None:
        """Copy into ``objects`` those objects of ``shas`` it lacks (they exist only in the repository,
        where nothing may keep them: a stash that was dropped, a file staged then unstaged)."""
        missing = [
            s
            for s in dict.fromkeys(shas)
            if HEX.match(s) and s.strip("0") and not loose_path(self.objects, s).exists()
        ]
        if not missing:
            return
        out = git(
            ["cat-file", "--batch"],
            self.repo,
            {
                "GIT_OBJECT_DIRECTORY": str(self.objects),
                "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(self.repo_objects),
            },
            binary=True,
            input=("\n".join(missing) + "\n").encode(),
        )
        pos = 0
        for _ in missing:
            nl = out.index(b"\n", pos)
            header = out[pos:nl].split(b" ")
            pos = nl + 1
            if len(header) != 3:  # "<sha> missing": a submodule commit, or already gone
                continue
            sha, kind, size = header[0].decode(), header[1], int(header[2])
            data = out[pos : pos + size]
            pos += size + 1
            write_loose(self.objects, sha, kind, data, self.durable)


def _stat_key(path: Path) -> tuple[int, ...]:
    """:func:`.workspace.stat_key` of ``path`` not followed, or () when there is none."""
    try:
        return stat_key(os.lstat(path))
    except OSError:
        return ()


def _refs_key(common: Path, git_dir: Path) -> tuple[tuple[Any, ...], ...] | None:
    """What says the refs of the repository whose git folder is ``common`` (and of its worktree whose
    own is ``git_dir``: ``refs/bisect``, ``refs/worktree``) are unchanged: the stat data of
    ``packed-refs`` and of each loose ref file under ``refs`` (git writes a ref as a new file
    renamed into place: a new inode, and a changed ctime). None when the refs are in a reftable (no
    file per ref: git is asked every time)."""
    if (common / "reftable").is_dir():
        return None
    found: list[tuple[Any, ...]] = [("packed-refs", *_stat_key(common / "packed-refs"))]
    stack = list(dict.fromkeys([str(common / "refs"), str(git_dir / "refs")]))
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for e in entries:
                if e.is_dir(follow_symlinks=False):
                    stack.append(e.path)
                    continue
                try:
                    found.append((e.path, *stat_key(e.stat(follow_symlinks=False))))
                except OSError:
                    continue
    return tuple(sorted(found))


def _header_matches(section: bytes, path: bytes) -> bool:
    header = section.split(b"\n", 1)[0]
    if header.startswith(b'diff --git "'):
        return True  # a quoted path: the order alone says which it is
    return header == b"diff --git a/" + path + b" b/" + path


def patch_bytes(source: dict[str, Any] | None) -> bytes:
    """The canonical diff of a checkpoint's ``source`` field, as one patch (``git apply`` reads it)."""
    patch = (source or {}).get("patch") or b""
    return b"".join(patch) if isinstance(patch, list) else bytes(patch)


_BLOB_MODES = (b"100644", b"100755", b"120000")


def scrub_tracked_entries(
    objects: Path,
    entries: dict[bytes, tuple[bytes, bytes]],
    algo: str = "sha1",
    scrubbed: dict[bytes, bytes] | None = None,
) -> dict[bytes, tuple[bytes, bytes]]:
    """Tracked files whose content was just stored in the session's git ``objects`` (a loose blob
    that ``git add`` wrote there: content the repository does not have) and holds a secret: their
    blob is replaced by a scrubbed one, and the entry (``path -> (mode, raw oid)``) points at it.

    The unscrubbed object is deleted, so the secret is not kept, compressed, in ``git-objects``; the
    tree built from the entries, its diff and every hash derived from them describe the scrubbed
    files (a restore writes them with placeholders; validating it scrubs again and agrees).
    ``scrubbed`` (raw object id -> scrubbed object id) remembers the replacements across calls: an
    entry naming a raw object deleted before (the private index keeps it) gets its scrubbed object.
    """
    scrubber = redact.current()
    memo: dict[bytes, bytes] = {} if scrubbed is None else scrubbed
    out: dict[bytes, tuple[bytes, bytes]] | None = None
    for path, (mode, oid) in entries.items():
        if mode not in _BLOB_MODES:
            continue
        hexoid = oid.hex()
        known = memo.get(oid)
        if known is not None:
            loose_path(objects, hexoid).unlink(missing_ok=True)
            if out is None:
                out = dict(entries)
            out[path] = (mode, known)
            continue
        loose = objects / hexoid[:2] / hexoid[2:]
        try:
            raw = zlib.decompress(loose.read_bytes())
        except (FileNotFoundError, NotADirectoryError, zlib.error):
            continue  # the repository's own object, or one being written by another process
        header, _, data = raw.partition(b"\0")
        if not header.startswith(b"blob "):
            continue
        clean = scrubber.file(data)
        if clean is data or clean == data:
            continue
        framed = b"blob %d\0" % len(clean) + clean
        new = hashlib.new(algo, framed).digest()
        write_loose(objects, new.hex(), b"blob", clean, fsync_wanted())
        loose.unlink(missing_ok=True)
        memo[oid] = new
        if out is None:
            out = dict(entries)
        out[path] = (mode, new)
    return entries if out is None else out
