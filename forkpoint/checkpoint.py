"""Replayable checkpoints of a coding agent's state: take, restore in a fresh directory, validate.

A checkpoint holds the three layers a coherent continuation needs:

* **source state** — the tracked files (the entries of the repository's index) as they are in the
  working tree, as a git *tree*, and the canonical diff of that tree against the base commit (one
  section per changed path, each content-addressed, so a checkpoint where one file changed stores that
  file's section only). The tree is built with a private index and new objects go to the session's
  own object folder (``<session>/git-objects``; the repository's objects are only read, as
  alternates), so taking a checkpoint never writes into the user's repository. The tree hash names
  the state exactly (modes, symlinks, binary content, deletions) and does not depend on the user's
  git config: global and system config are ignored, the settings that change hashing or diffing are
  pinned, and no rename detection, external diff or textconv driver is used. Filter drivers (e.g.
  git-lfs) are the one exception: the repository's ``.gitattributes`` names them, so the user's
  ``filter.*`` settings are passed through. The staged state (``index_tree``) and HEAD are kept too,
  so a restored repository shows the same ``git status``.
* **workspace state** — the untracked files (``.gitignore`` respected unless ignored files are asked
  for; a plain folder when there is no repository), as a manifest of
  ``[path, "file"|"symlink", mode, size, sha256]`` sorted by path, with every file's bytes in the
  session's content-addressed blob store. The fingerprint is the SHA-256 of the canonical JSON of the
  manifest. There are no owners or times in it.
* **carried context** — the message prefix the agent carries (the request body's ``messages`` /
  ``input`` / ``contents`` and its ``system`` / ``instructions``) and its digest, plus the files those
  messages refer to that existed at the checkpoint (they must exist after a restore).

A checkpoint is **resumable** only at an agent boundary: right before a model call, when every tool
result of the previous turn is in. One taken after a tool call that is not the last of its turn is
**observable**: a valid environment state, but resuming there would make the agent speak twice.

Taking a checkpoint is incremental and never writes into the user's repository: the private index
keeps its stat cache between checkpoints (``git add --update`` rehashes only files that changed; the
first checkpoint starts from a copy of the user's index when their git config cannot make its stat
data mean something else), git commands that write objects never see the repository's objects (git
would touch them instead of writing), trees are built in Python from the index entries (only the
folders that changed; the base commit's trees are never copied), the diff is recomputed only for
paths whose content changed, and untracked files that did not change are not read again. Objects
are synced to disk like the log (``FORKPOINT_FSYNC``).

Limits: a merge conflict's stages are not kept (a restored conflict is a plain modification), an
intent-to-add entry counts as an empty staged file, and paths that are not valid UTF-8 cannot be
checkpointed (the event then says ``error``).
"""

from __future__ import annotations

import binascii
import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import time
import weakref
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import orjson

from . import __version__
from .canonical import canonical_json, digest, sha256_hex
from .log import BlobStore, Session, SessionError
from .redact import scrub_file
from .runtime import ForkpointError
from .scrub import scrub_tracked_entries

#: Folder, inside a restored directory, holding the checkpoint's expectations and carried messages.
META_DIR = ".forkpoint-checkpoint"
#: Never part of a workspace (at its top): git's own folder, forkpoint's store and restore metadata.
ALWAYS_EXCLUDED = (".git", ".forkpoint", META_DIR)
#: Request-body fields that make up the carried context, per provider shape.
CONTEXT_FIELDS = ("system", "instructions", "systemInstruction", "messages", "input", "contents")
#: A workspace manifest whose canonical JSON is bigger than this is stored as one content-addressed
#: blob (``manifest_json``) instead of inline rows, so an unchanged big workspace costs nothing.
MANIFEST_INLINE_MAX = 8192
# git settings that could change what a tree, a diff or a checkout looks like, or make git write
# where it should not; pinned so the user's config cannot.
_GIT_CONFIG = (
    "core.autocrlf=false",
    "core.eol=lf",
    "core.safecrlf=false",
    "core.filemode=true",
    "core.symlinks=true",
    "core.ignorecase=false",
    "core.precomposeunicode=false",
    "core.quotepath=false",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.splitIndex=false",
    "core.preloadIndex=true",
    "core.checkStat=default",
    "core.trustctime=true",
    "core.ignoreStat=false",
    "diff.renames=false",
    "diff.algorithm=myers",
    "diff.noprefix=false",
    "diff.mnemonicPrefix=false",
    "submodule.recurse=false",
    "protocol.ext.allow=never",
    "gc.auto=0",
    "maintenance.auto=false",
    "advice.detachedHead=false",
)
_HEX = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_RAW_DIFF = ["diff-tree", "-r", "-t", "-z", "--no-renames", "--no-abbrev"]
_DIFF_OPTS = (
    "--binary",
    "--full-index",
    "--no-renames",
    "--no-ext-diff",
    "--no-textconv",
    "--no-color",
    "--diff-algorithm=myers",
)


class CheckpointError(ForkpointError):
    """A checkpoint cannot be taken, restored or validated; the message says which and why."""


# --------------------------------------------------------------------------- running git


def _git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of forkpoint's git commands: no inherited ``GIT_*`` variable (an agent run
    from a git hook has ``GIT_INDEX_FILE`` set), no global or system config, no optional locks."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_TERMINAL_PROMPT="0",
        GIT_OPTIONAL_LOCKS="0",
        GIT_LITERAL_PATHSPECS="1",
        LC_ALL="C",
    )
    env.update(extra or {})
    return env


def _git_cmd(args: list[str], config: Iterable[str] = ()) -> list[str]:
    cmd = ["git"]
    for c in (*_GIT_CONFIG, *config):
        cmd += ["-c", c]
    return cmd + args


def git(
    args: list[str],
    cwd: Path,
    env: dict[str, str] | None = None,
    *,
    check: bool = True,
    binary: bool = False,
    input: bytes | None = None,  # noqa: A002 - subprocess's name
    config: Iterable[str] = (),
) -> Any:
    """Run git with the user's global/system config ignored and the pinned settings applied.

    Returns stdout (str, or bytes with ``binary``). Raises :class:`CheckpointError` on failure
    (unless ``check`` is false).
    """
    try:
        proc = subprocess.run(
            _git_cmd(args, config), cwd=cwd, env=_git_env(env), input=input, capture_output=True, timeout=600
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise CheckpointError(f"git {' '.join(args[:2])} could not run in {cwd}: {exc}") from None
    if check and proc.returncode != 0:
        raise CheckpointError(
            f"git {' '.join(args[:3])} failed in {cwd}: {proc.stderr.decode(errors='replace').strip()}"
        )
    return proc.stdout if binary else proc.stdout.decode("utf-8", "surrogateescape")


def _git_start(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, config: Iterable[str] = ()
) -> subprocess.Popen[bytes]:
    """Start git (see :func:`git`) without waiting; finish with :func:`_git_finish`."""
    try:
        return subprocess.Popen(
            _git_cmd(args, config),
            cwd=cwd,
            env=_git_env(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError as exc:
        raise CheckpointError(f"git {' '.join(args[:2])} could not run in {cwd}: {exc}") from None


def _git_finish(proc: subprocess.Popen[bytes], what: str) -> bytes:
    out, errs = proc.communicate(timeout=600)
    if proc.returncode != 0:
        raise CheckpointError(f"git {what} failed: {errs.decode(errors='replace').strip()}")
    return out


def _user_git_env() -> dict[str, str]:
    """The user's own git environment (their config), without variables that point git elsewhere."""
    drop = {"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR"}
    env = {k: v for k, v in os.environ.items() if k not in drop and k != "GIT_ALTERNATE_OBJECT_DIRECTORIES"}
    env["LC_ALL"] = "C"
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


def _user_config(repo: Path, pattern: str) -> list[tuple[str, str, str]]:
    """``(scope, key, value)`` of the user's effective git config entries matching ``pattern``."""
    try:
        proc = subprocess.run(
            ["git", "config", "--show-scope", "--get-regexp", pattern],
            cwd=repo,
            env=_user_git_env(),
            capture_output=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return []
    out = []
    for line in proc.stdout.decode("utf-8", "surrogateescape").splitlines():
        scope, _, rest = line.partition("\t")
        key, _, value = rest.partition(" ")
        out.append((scope, key, value))
    return out


def _user_settings(repo: Path, git_dir: Path) -> tuple[tuple[str, ...], bool]:
    """What forkpoint takes from the user's git config (one ``git config`` call):

    * their ``filter.*`` settings (not in the repository's own config), as ``-c`` values:
      ``.gitattributes`` names filter drivers (git-lfs), and hashing without them would see every
      filtered file as changed;
    * whether the stat cache of their index means the same under the pinned settings: no
      line-ending conversion, no attributes file or ``ignoreStat`` of their own, no split index.
    """
    filters = []
    trusted = not any(git_dir.glob("sharedindex.*"))
    for scope, key, value in _user_config(repo, r"^(filter\..*|core\.(autocrlf|attributesfile|ignorestat))$"):
        low = key.lower()
        if low.startswith("filter."):
            if scope not in ("local", "worktree"):
                filters.append(f"{key}={value}")
        elif low == "core.attributesfile":
            trusted = trusted and scope in ("local", "worktree")
        elif value.lower() not in ("false", "no", "off", "0"):  # autocrlf, ignorestat
            trusted = False
    return tuple(filters), trusted


def repo_root(path: Path) -> Path | None:
    """The top of the git work tree containing ``path``, or None."""
    try:
        out = git(["rev-parse", "--show-toplevel"], Path(path))
    except (CheckpointError, OSError):
        return None
    return Path(out.strip()) if out.strip() else None


# --------------------------------------------------------------------------- source state


def _loose_path(objects: Path, sha: str) -> Path:
    return objects / sha[:2] / sha[2:]


def _parse_index_listing(raw: bytes) -> dict[bytes, bytes]:
    """``git ls-files -s -v -z`` output → path → its record(s) (``tag mode sha stage``, stages joined)."""
    out: dict[bytes, bytes] = {}
    for rec in raw.split(b"\0"):
        if not rec:
            continue
        meta, _, path = rec.partition(b"\t")
        out[path] = out[path] + b"|" + meta if path in out else meta
    return out


def _index_info_line(path: bytes, meta: bytes) -> bytes:
    """An ``update-index --index-info`` record for a stage-0 entry from a listing record."""
    _tag, mode, sha, _stage = meta.split(b"|", 1)[0].split(b" ")
    return mode + b" " + sha + b" 0\t" + path


def _parse_raw_diff(raw: bytes) -> list[tuple[str, str, str, str, bytes]]:
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
            entry = files.get(path)
            if entry is not None and old.get(path) != entry:
                d, _, name = path.rpartition(b"/")
                self._folder(d)[name] = entry
                old[path] = entry
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


_VERBOSE_ADD = re.compile(rb"^(?:add|remove) '(.*)'$")


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
        self.durable = _durable() if durable is None else durable
        # fresh: the working tree was written just now (a restore), so git sees every file as racily
        # clean and `add` would store each again; a dry run first names the really changed ones.
        self.fresh = fresh
        self.objects = Path(objects)
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
        filters, self._config_trusted = _user_settings(self.repo, self.git_dir)
        self.config = filters if config is None else config
        self.algo = "sha256" if len(self.base_tree) == 64 else "sha1"
        self._known: set[str] | None = None  # the base commit's trees: in the repository already
        self._work = _Trees(self.algo)  # trees of the private index (the working tree's state)
        self._staged = _Trees(self.algo)  # trees of the user's index (the staged state)
        self._work_built = False
        tmp = tempfile.mkdtemp(prefix="forkpoint-index-")
        self._finalizer = weakref.finalize(self, shutil.rmtree, tmp, True)
        self.private = Path(tmp) / "index"
        self._entries: dict[bytes, bytes] | None = None
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
            _write_loose(self.objects, oid, b"tree", content, self.durable)

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
            named = [m.group(1) for m in map(_VERBOSE_ADD.match, updated.splitlines()) if m]
            if named:
                self._git_w(["add", "--update", "--", *(p.decode("utf-8", "surrogateescape") for p in named)])
        else:
            updated = self._git_w(["add", "--update", "--verbose"], binary=True)
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
        if self._work_built and touched is not None and len(touched) <= 2000:
            only = touched
            args += ["--", *(p.decode("utf-8", "surrogateescape") for p in touched)]
        entries = _entries_of(self._git_w(args, binary=True)) if only is None or only else {}
        if entries is None:  # unmerged entries left: let git say what it makes of them
            self._work_built = False
            self._last_written = self._git_w(["write-tree", "--missing-ok"]).strip()
            return self._last_written
        entries = scrub_tracked_entries(self.objects, entries, self.algo)  # docs/security.md
        self._work.update(entries, only)
        self._work_built = True
        self._last_written = self._work.root(self._write_tree)
        return self._last_written

    def capture(self) -> dict[str, Any]:
        """``{"base", "head", "branch", "tree", "index_tree", "changed", "patch" (sections),
        "diff_hash"}``. Raises :class:`CheckpointError`."""
        head_proc = _git_start(["rev-parse", "HEAD", "--symbolic-full-name", "HEAD"], self.repo)
        try:
            tree = self.tree()
            if tree != self._tree:
                self._diff(tree)
            index_tree = self._index_tree
            if index_tree and index_tree not in self._ensured:
                raw = self._git(_RAW_DIFF + [self.base_tree, index_tree], binary=True)
                self._ensure_objects([index_tree] + [c[3] for c in _parse_raw_diff(raw)])
                self._ensured.add(index_tree)
        finally:
            head: str | None
            try:
                head, ref = _git_finish(head_proc, "rev-parse HEAD").decode().split()
            except (CheckpointError, ValueError):
                head, ref = None, "HEAD"
        patch = b"".join(self._patch)
        return {
            "base": self.base,
            "head": head,
            "branch": ref[len("refs/heads/") :] if ref.startswith("refs/heads/") else None,
            "tree": tree,
            "index_tree": index_tree,
            "changed": [c[4].decode("utf-8", "surrogateescape") for c in self._changes],
            "patch": list(self._patch),
            "diff_hash": sha256_hex(patch),
        }

    def _diff(self, tree: str) -> None:
        raw = self._git(_RAW_DIFF + [self.base_tree, tree], binary=True)
        records = _parse_raw_diff(raw)
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
            if _HEX.match(s) and s.strip("0") and not _loose_path(self.objects, s).exists()
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
            _write_loose(self.objects, sha, kind, data, self.durable)


def _header_matches(section: bytes, path: bytes) -> bool:
    header = section.split(b"\n", 1)[0]
    if header.startswith(b'diff --git "'):
        return True  # a quoted path: the order alone says which it is
    return header == b"diff --git a/" + path + b" b/" + path


def _durable() -> bool:
    """Objects are synced to disk like the log's events (``FORKPOINT_FSYNC``, default ``event``), so
    a checkpoint line that survived a crash has its objects too."""
    return os.environ.get("FORKPOINT_FSYNC", "event") == "event"


def _write_loose(objects: Path, sha: str, kind: bytes, data: bytes, durable: bool = True) -> None:
    target = _loose_path(objects, sha)
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".tmp-{os.getpid()}-{threading.get_ident()}-{target.name}")
    with open(tmp, "wb") as f:
        f.write(zlib.compress(kind + b" %d\0" % len(data) + data, 1))
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.chmod(tmp, 0o444)
    os.replace(tmp, target)


def source_state(repo: Path, base: str, objects: Path) -> dict[str, Any]:
    """Tree hash and canonical diff of ``repo``'s tracked files against commit ``base`` (one-off; a
    :class:`Workspace` keeps a :class:`SourceTracker` to take many). ``patch`` is the whole diff as
    bytes here. Raises :class:`CheckpointError`."""
    tracker = SourceTracker(repo, base, objects)
    try:
        s = tracker.capture()
    finally:
        tracker.close()
    return {**s, "patch": b"".join(s["patch"])}


# --------------------------------------------------------------------------- workspace state


def _excluded(rel: str, extra: tuple[str, ...]) -> bool:
    first = rel.split("/", 1)[0]
    return first in ALWAYS_EXCLUDED or any(rel == e or rel.startswith(e.rstrip("/") + "/") for e in extra)


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


def _start_listing(root: Path, listing: str, include_ignored: bool) -> subprocess.Popen[bytes] | None:
    if listing == "plain":
        return None
    args = ["ls-files", "-z", "--others"]
    if listing == "git-nocommit":
        args.append("--cached")  # no commit to diff against: every file is workspace
    if not include_ignored:
        args.append("--exclude-standard")
    return _git_start(args, root)


def _finish_listing(root: Path, proc: subprocess.Popen[bytes] | None, exclude: tuple[str, ...]) -> list[str]:
    if proc is None:
        paths = _walk(root)
    else:
        paths = []
        for p in _git_finish(proc, "ls-files --others").decode("utf-8", "surrogateescape").split("\0"):
            if not p:
                continue
            if p.endswith("/"):  # a nested repository: git lists the folder; its files are workspace
                paths.extend(_walk(root, p.rstrip("/")))
            else:
                paths.append(p)
    return sorted({p for p in paths if not _excluded(p, exclude)})


def untracked_files(
    root: Path, *, include_ignored: bool = False, exclude: tuple[str, ...] = (), listing: str | None = None
) -> list[str]:
    """Relative paths of the workspace's untracked files, sorted (every file of a plain folder).

    ``listing``: ``git`` (untracked files of the repository at ``root``), ``git-nocommit`` (every
    file of a repository without commits), ``plain`` (walk the folder); default: ``git`` when
    ``root`` is the top of a repository, else ``plain``.
    """
    root = Path(root)
    if listing is None:
        top = repo_root(root)
        listing = "git" if top is not None and top.resolve() == root.resolve() else "plain"
    return _finish_listing(root, _start_listing(root, listing, include_ignored), exclude)


class _HashCache:
    """sha256 of untracked files by their stat, so an unchanged file is not read again. A file whose
    ctime is less than 2 s old when read is not cached (it may change again within the same tick)."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[tuple[int, ...], str]] = {}

    def get(self, rel: str, key: tuple[int, ...]) -> str | None:
        hit = self.entries.get(rel)
        return hit[1] if hit is not None and hit[0] == key else None

    def put(self, rel: str, key: tuple[int, ...], h: str, read_at_ns: int) -> None:
        if key[3] < read_at_ns - 2_000_000_000:
            self.entries[rel] = (key, h)
        else:
            self.entries.pop(rel, None)


def _manifest(
    root: Path, paths: list[str], blobs: BlobStore | None, cache: _HashCache | None
) -> list[list[Any]]:
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
            key = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, st.st_mode)
            h = cache.get(rel, key) if cache is not None else None
            if h is None:
                with open(full, "rb") as f:
                    data = scrub_file(f.read())  # secrets never reach the blobs (docs/security.md)
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


def workspace_state(
    root: Path,
    blobs: BlobStore | None,
    *,
    include_ignored: bool = False,
    exclude: tuple[str, ...] = (),
    listing: str | None = None,
) -> dict[str, Any]:
    """Manifest and fingerprint of the untracked files; their bytes go to ``blobs`` when given.

    Manifest rows: ``[path, "file"|"symlink", mode (permission bits), size (bytes), sha256]``; a
    symlink's "content" is its target. ``listing``: see :func:`untracked_files`.
    """
    paths = untracked_files(root, include_ignored=include_ignored, exclude=exclude, listing=listing)
    manifest = _manifest(Path(root), paths, blobs, None)
    return {"manifest": manifest, "fingerprint": digest(manifest)}


def manifest_rows(workspace: dict[str, Any] | None) -> list[list[Any]]:
    """The manifest rows of a checkpoint's ``workspace`` field (inline, or as ``manifest_json``)."""
    if not workspace:
        return []
    if "manifest_json" in workspace:
        raw = workspace["manifest_json"]
        return orjson.loads(raw if isinstance(raw, bytes | str) else b"[]")
    return list(workspace.get("manifest") or [])


def patch_bytes(source: dict[str, Any] | None) -> bytes:
    """The canonical diff of a checkpoint's ``source`` field, as one patch (``git apply`` reads it)."""
    patch = (source or {}).get("patch") or b""
    return b"".join(patch) if isinstance(patch, list) else bytes(patch)


# --------------------------------------------------------------------------- carried context


def carried_context(body: Any) -> dict[str, Any]:
    """The context fields of a model request body (messages and system prompt, per provider shape)."""
    if not isinstance(body, dict):
        return {}
    return {k: body[k] for k in CONTEXT_FIELDS if k in body}


_PATH_KEYS = re.compile(
    r"(?i)^(path|file|filename|file_path|filepath|target|dest|destination|src|source_file|name)$"
)
# A relative path with an extension that starts with a letter ("calc.py", "src/a.test.ts"; not "3.11").
_PATH_TOKEN = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z][A-Za-z0-9]{0,7})(?![\w/-])")
_ABS_TOKEN = re.compile(r"(?<![\w.-])(/(?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z][A-Za-z0-9]{0,7})(?![\w/-])")


def referenced_paths(context: dict[str, Any], *, root: str | None = None) -> list[str]:
    """Relative file paths the carried messages mention in tool calls and tool results, sorted.

    Looks at tool-call arguments (OpenAI ``tool_calls``, Anthropic ``tool_use``, Responses
    ``function_call``, Gemini ``functionCall``) and tool results (``role: tool``, ``tool_result``,
    ``function_call_output``, ``functionResponse``): path-valued arguments, and path-shaped tokens.
    Absolute paths under ``root`` (the recorded workspace) count, made relative.
    """
    found: set[str] = set()
    prefix = root.rstrip("/") + "/" if root else None

    def scan_text(text: str) -> None:
        for m in _PATH_TOKEN.finditer(text):
            token = m.group(1)
            if "://" not in text[max(0, m.start() - 10) : m.start() + 3] and not token.startswith("."):
                found.add(token)
        if prefix and prefix in text:
            for m in _ABS_TOKEN.finditer(text):
                if m.group(1).startswith(prefix):
                    found.add(m.group(1)[len(prefix) :])

    def scan_args(args: Any) -> None:
        if isinstance(args, str):
            try:
                args = orjson.loads(args)
            except orjson.JSONDecodeError:
                scan_text(args)
                return
        if isinstance(args, dict):
            for k, v in args.items():
                if isinstance(v, str) and _PATH_KEYS.match(k) and _PATH_TOKEN.fullmatch(v):
                    found.add(v)
                elif isinstance(v, str):
                    scan_text(v)
                elif isinstance(v, dict | list):
                    scan_args(v)
        elif isinstance(args, list):
            for v in args:
                scan_args(v)
        elif isinstance(args, str):
            scan_text(args)

    def walk(node: Any, in_tool: bool = False) -> None:
        if isinstance(node, dict):
            kind = node.get("type")
            role = node.get("role")
            if "tool_calls" in node:
                for c in node.get("tool_calls") or []:
                    if isinstance(c, dict):
                        scan_args((c.get("function") or {}).get("arguments"))
            if kind == "tool_use":
                scan_args(node.get("input"))
            if kind == "function_call":
                scan_args(node.get("arguments"))
            if isinstance(node.get("functionCall"), dict):
                scan_args(node["functionCall"].get("args"))
            tool_result = (
                role == "tool"
                or kind in ("tool_result", "function_call_output")
                or "functionResponse" in node
            )
            for v in node.values():
                walk(v, in_tool or tool_result)
        elif isinstance(node, list):
            for v in node:
                walk(v, in_tool)
        elif isinstance(node, str) and in_tool:
            scan_text(node)

    walk(context)
    return sorted(
        p for p in found if p and not PurePosixPath(p).is_absolute() and ".." not in PurePosixPath(p).parts
    )


def _resolve_ref(root: Path, cwd: str | None, ref: str) -> str | None:
    """The path (relative to ``root``) that ``ref`` names, trying the agent's directory first."""
    for base in ([cwd] if cwd else []) + [""]:
        rel = os.path.normpath(os.path.join(base, ref)).replace(os.sep, "/")
        if not rel.startswith("../") and os.path.lexists(root / rel):
            return rel
    return None


# --------------------------------------------------------------------------- taking checkpoints


@dataclass
class Workspace:
    """What the recorder checkpoints: the directory, its repository (if any) and the base commit.

    ``listing`` is ``git`` (a repository with commits: tracked files are the source state),
    ``git-nocommit`` (a repository without commits: every non-ignored file is workspace) or
    ``plain`` (a folder). Set ``objects`` to the session's ``git-objects`` folder before capturing.
    """

    root: Path
    repo: Path | None
    base: str | None
    objects: Path
    include_ignored: bool = False
    exclude: tuple[str, ...] = ()
    listing: str = "plain"
    _source: SourceTracker | None = field(default=None, repr=False)
    _hashes: dict[str, _HashCache] = field(default_factory=dict, repr=False)

    @classmethod
    def open(cls, root: Path, store: Path, *, include_ignored: bool = False) -> Workspace:
        """The workspace at ``root`` (widened to its git repository's top, if it is in one), for a
        session in ``store`` (excluded from the workspace when inside it)."""
        root = Path(root).resolve()
        repo = repo_root(root)
        base = None
        listing = "plain"
        if repo is not None:
            root = repo  # the source state is the whole repository's; so is the workspace
            listing = "git"
            try:
                base = git(["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], repo).strip()
            except CheckpointError:
                repo, listing = None, "git-nocommit"  # no commit yet: every file is workspace
        store = Path(store).resolve()
        exclude = (os.path.relpath(store, root).replace(os.sep, "/"),) if store.is_relative_to(root) else ()
        return cls(root, repo, base, Path(), include_ignored, exclude, listing)

    def describe(self) -> dict[str, Any]:
        """The header's ``workspace`` field: root, repo, base commit, include_ignored."""
        return {
            "root": str(self.root),
            "repo": str(self.repo) if self.repo else None,
            "base": self.base,
            "include_ignored": self.include_ignored,
        }

    def _tracker(self) -> SourceTracker | None:
        if self.repo is None or self.base is None:
            return None
        if self._source is None or self._source.objects != Path(self.objects):
            self._source = SourceTracker(self.repo, self.base, Path(self.objects))
        return self._source

    def capture(self, blobs: BlobStore) -> dict[str, Any]:
        """Source and workspace state now, as the ``source`` / ``workspace`` fields of a checkpoint."""
        proc = _start_listing(self.root, self.listing, self.include_ignored)  # runs while git hashes
        try:
            tracker = self._tracker()
            source = None
            if tracker is not None:
                source = {"repo": str(self.repo), **tracker.capture()}
            paths = _finish_listing(self.root, proc, self.exclude)
        finally:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        cache = self._hashes.setdefault(str(blobs.root), _HashCache())
        rows = _manifest(self.root, paths, blobs, cache)
        ws: dict[str, Any] = {
            "root": str(self.root),
            "listing": self.listing,
            "include_ignored": self.include_ignored,
            "fingerprint": digest(rows),
            "files": len(rows),
            "bytes": sum(r[3] for r in rows),
        }
        encoded = canonical_json(rows)
        if len(encoded) > MANIFEST_INLINE_MAX:
            ws["manifest_json"] = encoded  # bytes: one content-addressed blob, stored once per state
        else:
            ws["manifest"] = rows
        return {"source": source, "workspace": ws}

    def tracked(self) -> set[bytes]:
        """Tracked paths as of the last capture (empty outside a repository)."""
        return self._source.tracked() if self._source is not None else set()


def checkpoint_event(
    workspace: Workspace,
    blobs: BlobStore,
    *,
    boundary: str,
    turn: int,
    context: dict[str, Any] | None,
    reason: str,
) -> dict[str, Any]:
    """A ``checkpoint`` event. ``boundary`` is ``resumable`` or ``observable``.

    A checkpoint that cannot be taken (git missing, an unreadable file) never breaks the agent: the
    event says ``error`` and has no state, and restoring it is refused.
    """
    started = time.perf_counter()
    event: dict[str, Any] = {
        "type": "checkpoint",
        "boundary": boundary,
        "reason": reason,
        "turn": turn,
        "forkpoint": __version__,
    }
    try:
        cwd_abs = Path.cwd().resolve()
    except OSError:
        cwd_abs = None
    cwd = (
        os.path.relpath(cwd_abs, workspace.root).replace(os.sep, "/")
        if cwd_abs is not None and cwd_abs.is_relative_to(workspace.root)
        else None
    )
    try:
        state = workspace.capture(blobs)
    except Exception as exc:  # noqa: BLE001 - a checkpoint must never break the agent it records
        event.update(
            source=None,
            workspace=None,
            error={"type": type(exc).__name__, "message": str(exc)},
        )
        state = None
    if state is not None:
        event.update(state)
    event["cwd"] = None if cwd == "." else cwd
    event["context"] = context
    event["context_digest"] = digest(context) if context is not None else None
    if context is not None and state is not None:
        captured = {r[0] for r in manifest_rows(state["workspace"])}
        tracked = workspace.tracked()
        referenced, absent, uncaptured = [], [], []
        for ref in referenced_paths(context, root=str(workspace.root)):
            rel = _resolve_ref(workspace.root, event["cwd"], ref)
            if rel is None:
                absent.append(ref)  # mentioned, but not there then: not required after a restore
            elif rel in captured or rel.encode("utf-8", "surrogateescape") in tracked:
                referenced.append(rel)
            else:
                uncaptured.append(rel)  # there, but not archived (ignored, or a folder)
        event["referenced"] = sorted(set(referenced))
        event["mentioned_absent"] = sorted(set(absent))
        event["uncaptured"] = sorted(set(uncaptured))
    event["duration_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return event


# --------------------------------------------------------------------------- restore and validate


def find(session: Session, seq: int) -> dict[str, Any]:
    """The checkpoint event with this seq. Raises :class:`CheckpointError` listing the valid seqs."""
    cps = session.by_type("checkpoint")
    for e in cps:
        if e["seq"] == seq:
            return e
    listed = ", ".join(str(e["seq"]) for e in cps) or "none"
    raise CheckpointError(f"session {session.id} has no checkpoint at seq {seq} (checkpoints: {listed})")


def _check_rel(rel: Any) -> PurePosixPath:
    if not isinstance(rel, str) or not rel:
        raise CheckpointError(f"archive entry {rel!r} is not a relative path; refusing it")
    p = PurePosixPath(rel)
    if p.is_absolute() or rel.startswith(("\\", "/")) or ".." in p.parts or "\0" in rel or not p.parts:
        raise CheckpointError(f"archive entry {rel!r} points outside the target directory; refusing it")
    if p.parts[0] == META_DIR or ".git" in {q.lower() for q in p.parts} or str(p) != rel:
        raise CheckpointError(f"archive entry {rel!r} is not a normal workspace path; refusing it")
    return p


def _checked_manifest(rows: Any) -> list[tuple[str, str, int, int, str]]:
    """The manifest's rows after checking every one (shape, no escaping path, nothing under a symlink
    of the archive, no duplicates). Raises :class:`CheckpointError` before anything is written."""
    if not isinstance(rows, list):
        raise CheckpointError("the checkpoint's workspace manifest is not a list")
    out = []
    seen: set[str] = set()
    for row in rows:
        if not (isinstance(row, list) and len(row) == 5):
            raise CheckpointError(f"malformed workspace manifest row {row!r}")
        rel, kind, mode, size, h = row
        p = _check_rel(rel)
        if kind not in ("file", "symlink") or not isinstance(mode, int) or not isinstance(size, int):
            raise CheckpointError(f"malformed workspace manifest row {row!r}")
        if not isinstance(h, str) or not _SHA256.match(h):
            raise CheckpointError(f"workspace manifest row {rel!r} has no valid sha256")
        if str(p) in seen:
            raise CheckpointError(f"workspace manifest lists {rel!r} twice")
        seen.add(str(p))
        out.append((str(p), kind, mode & 0o777, size, h))
    links = {r[0] for r in out if r[1] == "symlink"}
    for rel, *_ in out:
        parents = PurePosixPath(rel).parents
        for parent in list(parents)[:-1]:
            if str(parent) in links or str(parent) in seen:
                raise CheckpointError(
                    f"archive entry {rel!r} lies under {str(parent)!r}, which the archive makes a "
                    f"{'symlink' if str(parent) in links else 'file'}; refusing it"
                )
    return out


def _safe_target(root: Path, rel: str) -> Path:
    """``root/rel`` after checking ``rel`` cannot leave ``root`` (absolute, ``..``, through a symlink)."""
    p = _check_rel(rel)
    target = root.joinpath(*p.parts)
    parent = target.parent.resolve()
    if not parent.is_relative_to(root.resolve()):
        raise CheckpointError(
            f"archive entry {rel!r} would be written through a symlink outside the target; refusing it"
        )
    return target


def _check_source(source: dict[str, Any]) -> None:
    for key in ("base", "tree"):
        if not isinstance(source.get(key), str) or not _HEX.match(source[key]):
            raise CheckpointError(f"the checkpoint's source {key} {source.get(key)!r} is not an object id")
    for key in ("head", "index_tree"):
        if source.get(key) is not None and (not isinstance(source[key], str) or not _HEX.match(source[key])):
            raise CheckpointError(f"the checkpoint's source {key} {source.get(key)!r} is not an object id")
    branch = source.get("branch")
    if branch is not None and (
        not isinstance(branch, str)
        or not re.fullmatch(r"[\w./-]+", branch)
        or ".." in branch
        or branch.startswith(("-", "/"))
    ):
        raise CheckpointError(f"the checkpoint's branch {branch!r} is not a plain branch name")


def restore(session: Session, seq: int, into: Path, *, repo: Path | None = None) -> Path:
    """Rebuild checkpoint ``seq`` of ``session`` in the new directory ``into``.

    The repository is cloned from ``repo`` (default: the one recorded; only read) at the base
    commit, the tracked state checked out, HEAD, branch and staged state set as they were, the
    untracked files written from the manifest, and ``META_DIR`` filled with ``checkpoint.json`` (the
    expectations), ``messages.json`` (the carried context) and ``manifest.json``. Refuses a non-empty
    ``into``; never writes outside it (every archive path is checked first); on failure removes what
    it wrote. Returns ``into``. Raises :class:`CheckpointError`.
    """
    cp = find(session, seq)
    if cp.get("error"):
        raise CheckpointError(
            f"checkpoint {session.id}@{seq} holds no state: taking it failed ({cp['error'].get('message')})"
        )
    source = cp.get("source")
    if source:
        _check_source(source)
    workspace = cp.get("workspace") or {}
    rows = _checked_manifest(manifest_rows(workspace))
    into = Path(into).absolute()
    if into.exists() and (not into.is_dir() or any(into.iterdir())):
        raise CheckpointError(f"{into} is not empty; restore needs a new or empty directory")
    created = not into.exists()
    into.mkdir(parents=True, exist_ok=True)
    try:
        _restore_into(session, cp, source, workspace, rows, into, repo)
    except BaseException:
        if created:
            shutil.rmtree(into, ignore_errors=True)
        else:
            for child in into.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)
        raise
    return into


def _restore_into(
    session: Session,
    cp: dict[str, Any],
    source: dict[str, Any] | None,
    workspace: dict[str, Any],
    rows: list[tuple[str, str, int, int, str]],
    into: Path,
    repo: Path | None,
) -> None:
    blobs = BlobStore(session.path / "blobs")
    session_objects = (session.path / "git-objects").resolve()
    if source:
        origin = Path(repo or source.get("repo") or "")
        if not (origin / ".git").exists() and not (origin / "objects").is_dir():
            raise CheckpointError(
                f"the recorded repository {origin} is gone; pass --repo with a clone that has {source['base'][:12]}"
            )
        origin = origin.resolve()
        clone = ["clone", "--quiet", "--no-checkout", "--no-hardlinks", "--", str(origin), str(into)]
        try:
            git(clone, into.parent)
        except CheckpointError:  # a `git gc` running in the origin can move objects mid-copy: again
            shutil.rmtree(into / ".git", ignore_errors=True)
            git(clone, into.parent)
        alt = {"GIT_ALTERNATE_OBJECT_DIRECTORIES": str(session_objects)}
        try:
            git(["cat-file", "-e", f"{source['base']}^{{commit}}"], into)
        except CheckpointError:
            raise CheckpointError(
                f"{origin} does not have the base commit {source['base'][:12]}; pass --repo with a clone that has it"
            ) from None
        git(["read-tree", "-u", "--reset", source["tree"]], into, alt)
        head = source.get("head") or source["base"]
        if git(["cat-file", "-t", head], into, check=False).strip() != "commit":
            head = source["base"]
        branch = source.get("branch")
        if branch:
            git(["update-ref", f"refs/heads/{branch}", head], into)
            git(["symbolic-ref", "HEAD", f"refs/heads/{branch}"], into)
        else:
            git(["update-ref", "--no-deref", "HEAD", head], into)
        staged = source.get("index_tree") or head
        git(["read-tree", "-m", staged], into, alt)  # keeps the stat data of entries that match
        # Paths of the working tree the staged state lacks were intent-to-add entries: say so again.
        added = git(
            [
                "diff-tree",
                "-r",
                "-z",
                "--name-only",
                "--diff-filter=A",
                "--no-renames",
                staged,
                source["tree"],
            ],
            into,
            alt,
        )
        ita = [p for p in added.split("\0") if p]
        if ita:
            git(["add", "--intent-to-add", "--", *ita], into, alt)
        _copy_objects(session_objects, into, source["base"], [source["tree"], staged], alt)
        common = Path(git(["rev-parse", "--path-format=absolute", "--git-common-dir"], origin).strip())
        exclude = common / "info" / "exclude"
        (into / ".git" / "info").mkdir(exist_ok=True)
        text = exclude.read_text(errors="replace") if exclude.is_file() else ""
        (into / ".git" / "info" / "exclude").write_text(text.rstrip("\n") + f"\n/{META_DIR}/\n")
    links = []
    try:
        for rel, kind, mode, _size, h in rows:
            target = _safe_target(into, rel)
            data = blobs.get(h)
            if kind == "symlink":
                links.append((target, data.decode("utf-8", "surrogateescape"), rel))
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            _safe_target(into, rel)  # the folders just made are real ones, inside
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(target, mode)
        for target, dest, rel in links:  # last, so no file is ever written through one
            target.parent.mkdir(parents=True, exist_ok=True)
            _safe_target(into, rel)
            os.symlink(dest, target)
    except SessionError as exc:
        raise CheckpointError(f"the session's archive is damaged: {exc}") from None
    except OSError as exc:
        raise CheckpointError(f"cannot write the archived workspace: {exc}") from None
    meta = into / META_DIR
    meta.mkdir()
    expect = {
        "session": session.id,
        "seq": cp["seq"],
        "turn": cp.get("turn"),
        "boundary": cp.get("boundary"),
        "base": (source or {}).get("base"),
        "head": (source or {}).get("head"),
        "tree": (source or {}).get("tree"),
        "index_tree": (source or {}).get("index_tree"),
        "diff_hash": (source or {}).get("diff_hash"),
        "workspace_fingerprint": workspace.get("fingerprint"),
        "listing": "git" if source else "plain",
        "include_ignored": bool(workspace.get("include_ignored")),
        "context_digest": cp.get("context_digest"),
        "referenced": cp.get("referenced", []),
        "mentioned_absent": cp.get("mentioned_absent", []),
        "uncaptured": cp.get("uncaptured", []),
        "root": workspace.get("root"),
        "cwd": cp.get("cwd"),
        "forkpoint": cp.get("forkpoint"),
    }
    (meta / "checkpoint.json").write_bytes(orjson.dumps(expect, option=orjson.OPT_INDENT_2))
    (meta / "messages.json").write_bytes(orjson.dumps(cp.get("context"), option=orjson.OPT_INDENT_2))
    (meta / "manifest.json").write_bytes(orjson.dumps([list(r) for r in rows]))


def _copy_objects(
    session_objects: Path, into: Path, base: str, roots: list[str], alt: dict[str, str]
) -> None:
    """Copy the session's objects the restored trees need into the restored repository, so it does
    not depend on the session (``git diff``, ``git stash`` work there)."""
    objects = into / ".git" / "objects"
    shas = []
    for r in dict.fromkeys(roots):
        raw = git(_RAW_DIFF + [base, r], into, alt, binary=True)
        shas += [r] + [c[3] for c in _parse_raw_diff(raw)]
    for sha in dict.fromkeys(shas):
        src = _loose_path(session_objects, sha)
        if src.is_file() and not _loose_path(objects, sha).exists():
            dst = _loose_path(objects, sha)
            dst.parent.mkdir(exist_ok=True)
            shutil.copyfile(src, dst)


@dataclass
class Check:
    """One validation check: ``name``, ``ok``, and the ``expected`` and ``actual`` values."""

    name: str
    ok: bool
    expected: Any
    actual: Any


def _tree_changes(root: Path, expected: str, actual: str, tmp: Path) -> list[str] | str:
    """The tracked paths whose content differs between two trees (for a failed validation's report):
    the actual tree's new objects are in ``tmp/objects``, the expected one's in the restored repo."""
    env = {
        "GIT_OBJECT_DIRECTORY": str(tmp / "objects"),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(root / ".git" / "objects"),
    }
    try:
        out = git(["diff-tree", "-r", "--name-only", "-z", "--no-renames", expected, actual], root, env)
    except CheckpointError as exc:
        return f"(cannot list the differing files: {exc})"
    return sorted(p for p in out.split("\0") if p)


def validate(root: Path) -> list[Check]:
    """Check a restored directory against its checkpoint without any model.

    Checks: the tracked source tree hash, the workspace fingerprint (naming the files that differ),
    the carried messages' digest, that the checkpoint is a resumable boundary, and that every file the
    messages refer to exists. Raises :class:`CheckpointError` when ``root`` holds no restored
    checkpoint.
    """
    root = Path(root).absolute()
    try:
        expect = orjson.loads((root / META_DIR / "checkpoint.json").read_bytes())
        context = orjson.loads((root / META_DIR / "messages.json").read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise CheckpointError(f"{root}: no restored checkpoint here ({root / META_DIR}: {exc})") from None
    if not isinstance(expect, dict):
        raise CheckpointError(f"{root / META_DIR / 'checkpoint.json'} is not a checkpoint description")
    try:
        recorded_rows = orjson.loads((root / META_DIR / "manifest.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        recorded_rows = None
    checks: list[Check] = []
    if expect.get("tree"):
        with tempfile.TemporaryDirectory(prefix="forkpoint-validate-") as tmp:
            try:
                tracker = SourceTracker(
                    root, expect["base"], Path(tmp) / "objects", durable=False, fresh=True
                )
                try:
                    actual_tree = tracker.tree()
                finally:
                    tracker.close()
            except CheckpointError as exc:
                actual_tree = f"(cannot compute: {exc})"
            actual_source: Any = actual_tree
            if actual_tree != expect["tree"] and not actual_tree.startswith("("):
                actual_source = {
                    "tree": actual_tree,
                    "files": _tree_changes(root, expect["tree"], actual_tree, Path(tmp)),
                }
        checks.append(Check("source tree hash", actual_tree == expect["tree"], expect["tree"], actual_source))
    listing = "git" if expect.get("listing", "git" if expect.get("tree") else "plain") == "git" else "plain"
    paths = untracked_files(root, include_ignored=bool(expect.get("include_ignored")), listing=listing)
    rows = _manifest(root, paths, None, None)
    fingerprint = digest(rows)
    actual: Any = fingerprint
    if fingerprint != expect.get("workspace_fingerprint") and isinstance(recorded_rows, list):
        want = {r[0]: r for r in recorded_rows if isinstance(r, list) and r}
        have = {r[0]: r for r in rows}
        actual = {
            "fingerprint": fingerprint,
            "missing": sorted(set(want) - set(have)),
            "extra": sorted(set(have) - set(want)),
            "changed": sorted(p for p in set(want) & set(have) if want[p] != have[p]),
        }
    checks.append(
        Check(
            "workspace fingerprint",
            fingerprint == expect.get("workspace_fingerprint"),
            expect.get("workspace_fingerprint"),
            actual,
        )
    )
    actual_digest = digest(context) if context is not None else None
    checks.append(
        Check(
            "message digest",
            actual_digest == expect.get("context_digest"),
            expect.get("context_digest"),
            actual_digest,
        )
    )
    checks.append(
        Check(
            "resumable boundary", expect.get("boundary") == "resumable", "resumable", expect.get("boundary")
        )
    )
    known_elsewhere = set(expect.get("mentioned_absent") or []) | set(expect.get("uncaptured") or [])
    wanted = set(expect.get("referenced") or [])
    cwd = expect.get("cwd")
    for ref in referenced_paths(context if isinstance(context, dict) else {}, root=expect.get("root")):
        if ref in known_elsewhere or ref in wanted:
            continue
        rel = os.path.normpath(os.path.join(cwd, ref)).replace(os.sep, "/") if cwd else ref
        if rel in known_elsewhere or rel in wanted:
            continue
        wanted.add(_resolve_ref(root, cwd, ref) or rel)
    missing = sorted(p for p in wanted if not os.path.lexists(root / p))
    checks.append(Check("referenced files exist", not missing, sorted(wanted), {"missing": missing}))
    return checks
