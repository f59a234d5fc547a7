"""Taking a checkpoint: the :class:`Workspace` a recorder checkpoints, and the ``checkpoint`` event."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._version import __version__
from ..canonical import digest
from ..files import scratch_dir
from ..log import BlobStore
from ..redact import scrub_json
from ..store import is_store
from ..text import say
from .git import HEX, git, repo_head, user_excludes_file
from .source import SourceTracker
from .workspace import (
    META_DIR,
    STORE_DIR,
    Manifests,
    SpecialFiles,
    StatCache,
    excluded,
    finish_listing,
    folders_of,
    manifest_of,
    manifest_rows,
    start_listing,
    unrestorable,
)


@dataclass
class Workspace:
    """What the recorder checkpoints: the directory, its repository (if any) and the base commit.

    ``listing`` is ``git`` (a repository with commits: tracked files are the source state),
    ``git-nocommit`` (a repository without commits: every non-ignored file is workspace) or
    ``plain`` (a folder). Set ``objects`` to the session's ``git-objects`` folder before capturing
    (for an encrypted session, a private scratch folder: see :meth:`use_scratch`).
    """

    root: Path
    repo: Path | None
    base: str | None
    objects: Path
    include_ignored: bool = False
    exclude: tuple[str, ...] = ()
    listing: str = "plain"
    _source: SourceTracker | None = field(default=None, repr=False)
    _hashes: dict[str, StatCache[str, str]] = field(default_factory=dict, repr=False)
    _manifests: dict[str, Manifests] = field(default_factory=dict, repr=False)
    #: git objects of the scratch folder already handed to a checkpoint (an encrypted session)
    _sealed: set[str] | None = field(default=None, repr=False)
    #: files left out of checkpoints that were said so (:meth:`_left_out`)
    _said: set[str] = field(default_factory=set, repr=False)
    #: the FIFOs, sockets and devices of a git workspace's folders (git lists none)
    _specials: SpecialFiles | None = field(default=None, repr=False)
    #: removes the scratch folder of :meth:`use_scratch` (None: there is none)
    _scratch_end: Callable[[], object] | None = field(default=None, repr=False)

    def use_scratch(self) -> None:
        """Write new git objects into a private folder (0700; in memory, ``/dev/shm``, where there is
        one), removed by :meth:`close`, or when this object is collected or the process exits: an
        encrypted session keeps them as sealed blobs of its checkpoints (``git_objects``), never as
        files in the clear."""
        shm = Path("/dev/shm")
        where = str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None
        self.objects, self._scratch_end = scratch_dir(self, "forkpoint-objects-", where)
        self._sealed = set()

    def close(self) -> None:
        """Remove the private folders of the checkpoints now (the git index, the scratch objects:
        an encrypted session's tracked files in the clear). The recording closes its workspace:
        a program that leaves through ``os._exit`` runs no exit handler that would."""
        if self._source is not None:
            self._source.close()
        if self._scratch_end is not None:
            self._scratch_end()

    def new_objects(self) -> dict[str, bytes] | None:
        """The loose git objects (object id → the file's bytes) written into the scratch folder since
        the last call; None when the workspace writes into the session's ``git-objects``."""
        if self._sealed is None:
            return None
        out: dict[str, bytes] = {}
        root = Path(self.objects)
        for sub in sorted(root.iterdir()) if root.is_dir() else []:
            if len(sub.name) != 2 or not sub.is_dir():
                continue
            for obj in sorted(sub.iterdir()):
                oid = sub.name + obj.name
                if oid in self._sealed or not HEX.fullmatch(oid):
                    continue  # sealed already, or a temporary file of a write under way
                try:
                    out[oid] = obj.read_bytes()
                except FileNotFoundError:  # deleted meanwhile (a scrubbed object)
                    continue
                self._sealed.add(oid)
        return out

    @classmethod
    def open(cls, root: Path, store: Path, *, include_ignored: bool = False) -> Workspace:
        """The workspace at ``root`` (widened to its git repository's top, if it is in one), for a
        session in ``store`` (excluded from the workspace when inside it)."""
        root = Path(root).resolve()
        repo: Path | None = None
        base = None
        listing = "plain"
        found = repo_head(root)
        if found is not None:
            # the source state is the whole repository's; so is the workspace
            root, base = found
            repo, listing = (root, "git") if base else (None, "git-nocommit")  # no commit: all is workspace
        store = Path(store).resolve()
        exclude = (os.path.relpath(store, root).replace(os.sep, "/"),) if store.is_relative_to(root) else ()
        return cls(root, repo, base, Path(), include_ignored, exclude, listing)

    def describe(self) -> dict[str, Any]:
        """The header's ``workspace`` field: root, repo, base commit, include_ignored, and the
        repository's ``.git/info/exclude`` as it is now (``info_exclude``; a restore and its
        validation apply the rules of the recording, not those of the day it is restored), and its
        ``.git/info/attributes`` when it has one (``info_attributes``: how git stores its files)."""
        out: dict[str, Any] = {
            "root": str(self.root),
            "repo": str(self.repo) if self.repo else None,
            "base": self.base,
            "include_ignored": self.include_ignored,
        }
        if self.repo is not None and (self.repo / ".git").is_dir():  # (a worktree's is elsewhere)
            try:
                out["info_exclude"] = (self.repo / ".git" / "info" / "exclude").read_text(errors="replace")
            except FileNotFoundError:
                out["info_exclude"] = ""
            except OSError:
                pass
            try:
                out["info_attributes"] = (self.repo / ".git" / "info" / "attributes").read_text(
                    errors="replace"
                )
            except OSError:
                pass
        return out

    def _tracker(self) -> SourceTracker | None:
        if self.repo is None or self.base is None:
            return None
        if self._source is None or self._source.objects != Path(self.objects):
            self._source = SourceTracker(self.repo, self.base, Path(self.objects))
        return self._source

    def capture(self, blobs: BlobStore) -> dict[str, Any]:
        """Source and workspace state now, as the ``source`` / ``workspace`` fields of a checkpoint."""
        proc = start_listing(self.root, self.listing, self.include_ignored)  # runs while git hashes
        try:
            tracker = self._tracker()
            source = None
            skipped: list[str] = []
            if tracker is not None:
                source = {"repo": str(self.repo), **tracker.capture()}
                # tracked files git does not look at (skip-worktree): kept as they are
                skipped = [p.decode("utf-8", "surrogateescape") for p in tracker.skip_worktree()]
                if skipped:
                    source["skip_worktree"] = skipped
                # (and those not in the working tree, a sparse checkout's: left out again, marked)
                absent = [p.decode("utf-8", "surrogateescape") for p in tracker.skip_worktree_absent()]
                if absent:
                    source["skip_worktree_absent"] = absent
                sparse = tracker.sparse_checkout()
                if sparse is not None:
                    source["sparse_checkout"] = sparse
                ita = tracker.intent_to_add()
                if ita:  # (the staged tree has them as empty files: marked again)
                    source["intent_to_add"] = ita
                assumed = [p.decode("utf-8", "surrogateescape") for p in tracker.assume_unchanged()]
                if assumed:  # (the tree has their content; git status does not look: marked again)
                    source["assume_unchanged"] = assumed
            meta: list[str] = []
            stored: list[str] = []
            paths, nested = finish_listing(self.root, proc, self.exclude, meta=meta, store=stored)
            if tracker is not None:
                # tracked files a checkout would write otherwise (.gitattributes): kept as they are
                converted = [p.decode("utf-8", "surrogateescape") for p in tracker.converted(paths)]
                if converted or skipped:
                    paths = sorted({*paths, *converted, *skipped})
        finally:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        if source is not None and source.get("submodules"):
            self._left_out(source["submodules"], submodules=True)
        if nested:
            self._left_out(nested, nested=True)
        if meta:
            self._left_out(meta, meta=True)
        if stored and not is_store(self.root / STORE_DIR):  # (a store's own files: left out, rightly)
            self._left_out(stored, store=True)
        if self.listing != "plain":
            self._special_in_git(paths, source)
        left = [p for p in paths if unrestorable(p) is not None]
        if left:
            paths = [p for p in paths if unrestorable(p) is None]
            self._left_out(left)
        cache = self._hashes.setdefault(str(blobs.root), StatCache[str, str]())
        # File names are scrubbed before the fingerprint is taken (the log scrubs every event again;
        # scrubbing is idempotent, so the fingerprint stays the manifest's).
        rows = scrub_json(manifest_of(self.root, paths, blobs, cache))
        if len(rows) < len(paths):  # (a FIFO, a socket, a device: no bytes to keep; or deleted meanwhile)
            kept = {r[0] for r in rows}
            special = [p for p in paths if p not in kept and _special(self.root / p)]
            if special:
                self._left_out(special, special=True)
        ws: dict[str, Any] = {
            "root": str(self.root),
            "listing": self.listing,
            "include_ignored": self.include_ignored,
            "fingerprint": digest(rows, exotic=True),
            "files": len(rows),
            "bytes": sum(r[3] for r in rows),
        }
        if left:
            ws["left_out"] = scrub_json(left)
        if nested:  # (validation lists them as they were listed here: see finish_listing)
            ws["nested"] = scrub_json(nested)
        ws.update(self._manifests.setdefault(str(blobs.root), Manifests()).fields(rows))
        return {"source": source, "workspace": ws}

    def _left_out(
        self,
        names: list[str],
        *,
        submodules: bool = False,
        nested: bool = False,
        special: bool = False,
        meta: bool = False,
        store: bool = False,
    ) -> None:
        """Say, once for each, the files a checkpoint leaves out (:func:`.workspace.unrestorable`),
        the ``submodules`` whose working trees it leaves out, the ``nested`` repositories whose
        ``.git`` it leaves out, the ``special`` files (no regular ones), the ``meta`` files (in
        the folder a restore writes its own into) or the ``store`` files (in the folder of
        forkpoint's default store, which is no store)."""
        new = [n for n in names if n not in self._said]
        if new:
            self._said.update(new)
            shown = ", ".join(repr(n) for n in new[:5]) + (
                f" and {len(new) - 5} more" if len(new) > 5 else ""
            )
            why = (
                "a restore could not write them back safely (a name holding .git in any case, or starting "
                "with a backslash)"
            )
            if special:
                why = "they are no regular files (a FIFO, a socket, a device): there are no bytes to keep"
            if meta:
                why = (
                    f"{META_DIR}/ at the top of a workspace is forkpoint's: a restore writes the checkpoint's "
                    "description there"
                )
            if store:
                why = (
                    f"{STORE_DIR}/ at the top of a workspace is where forkpoint keeps its sessions, never part "
                    "of a checkpoint (this one holds no store: move them elsewhere to have them kept)"
                )
            if nested:
                shown = f"the .git of the repositories {shown} inside it"
                why = "it keeps their files, not their commits and branches: a restore has them as plain folders"
            if submodules:
                shown = f"the working trees of submodules {shown}"
                why = (
                    "each keeps a submodule's commit only, so a restore of one leaves them empty and fails "
                    "validation"
                )
            say(f"forkpoint: WARNING: checkpoints of {self.root} leave out {shown}: {why}")

    def _special_in_git(self, paths: list[str], source: dict[str, Any] | None) -> None:
        """Say the FIFOs, sockets and devices in the folders of the files listed (and those of the
        changed tracked files, the top, the current folder; at the first checkpoint, every folder of
        the tracked files too) that are not ignored: git lists none, so nothing else would."""
        first = self._specials is None
        specials = self._specials = self._specials or SpecialFiles()
        folders = folders_of(paths, set())
        folders_of((source or {}).get("changed") or [], folders)
        try:
            here = os.path.relpath(os.getcwd(), self.root).replace(os.sep, "/")
        except (OSError, ValueError):
            here = ".."
        if here not in (".", "..") and not here.startswith("../"):
            folders_of([f"{here}/."], folders)
        if first:
            folders_of([p.decode("utf-8", "surrogateescape") for p in self.tracked()], folders)
        found = [p for p in specials.find(self.root, folders) if not excluded(p, self.exclude)]
        if found and not self.include_ignored:  # (an ignored one is left out like any ignored file)
            own = user_excludes_file()  # (the rules the listing applied: see start_listing)
            ignored = git(
                ["check-ignore", "-z", "--stdin"],
                self.root,
                {"GIT_LITERAL_PATHSPECS": "0"},  # (check-ignore refuses the literal magic)
                check=False,
                input="\0".join(found).encode("utf-8", "surrogateescape") + b"\0",
                config=() if own is None else (f"core.excludesFile={own}",),
            )
            left = set(ignored.split("\0"))
            found = [p for p in found if p not in left]
        if found:
            self._left_out(found, special=True)

    def tracked(self) -> set[bytes]:
        """Tracked paths as of the last capture (empty outside a repository)."""
        return self._source.tracked() if self._source is not None else set()


def _special(path: Path) -> bool:
    """``path`` exists and is neither a regular file nor a symlink."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISLNK(mode))


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
        sealed = workspace.new_objects()
        if sealed:  # bytes: each a blob of the session, sealed like every other
            event["git_objects"] = sealed
    event["cwd"] = None if cwd == "." else cwd
    context = scrub_json(context) if context is not None else None
    event["context"] = context
    event["context_digest"] = digest(context) if context is not None else None
    if context is not None and state is not None:
        # (here: it loads the providers, which `forkpoint record`'s own process, opening the
        # workspace, does not need)
        from .context import referenced_paths, resolve_ref

        captured = {r[0] for r in manifest_rows(state["workspace"])}
        tracked = workspace.tracked()
        referenced, absent, uncaptured = [], [], []
        for ref in referenced_paths(context, root=str(workspace.root)):
            rel = resolve_ref(workspace.root, event["cwd"], ref)
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
