"""Validating a restored directory without any model: every invariant of the checkpoint it came from."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from ..canonical import digest
from ..errors import CheckpointError
from ..log import read_json_text
from .context import referenced_paths, resolve_ref
from .git import git
from .source import SourceTracker, _parse_index_listing, intent_to_add
from .workspace import META_DIR, manifest_of, untracked_files


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


#: The fields of a restored checkpoint's description that validation reads, and their JSON types.
_TEXT_FIELDS = (
    "tree",
    "base",
    "workspace_fingerprint",
    "context_digest",
    "boundary",
    "listing",
    "root",
    "cwd",
)
_LIST_FIELDS = (
    "referenced",
    "mentioned_absent",
    "uncaptured",
    "submodules",
    "nested",
    "stash",
    "skip_worktree",
    "skip_worktree_absent",
    "assume_unchanged",
    "intent_to_add",
)


def _inside(root: Path, rel: str, is_kind: Callable[[Path], bool] = Path.is_dir) -> bool:
    """``rel`` names a real folder (or what ``is_kind`` says) under ``root``, not through a symlink,
    not up and out."""
    path = PurePosixPath(rel)
    return (
        bool(rel)
        and not path.is_absolute()
        and ".." not in path.parts
        and is_kind(root / rel)
        and not any((root / Path(*path.parts[: i + 1])).is_symlink() for i in range(len(path.parts)))
    )


def _described(expect: dict[str, Any]) -> bool:
    """Whether ``expect`` has the shape :func:`~.restore.restore` writes (each field absent, null,
    or of its type; a source tree with its base commit)."""
    return (
        all(isinstance(expect.get(k), str | None) for k in _TEXT_FIELDS)
        and all(
            isinstance(expect.get(k), list | None) and all(isinstance(p, str) for p in expect.get(k) or [])
            for k in _LIST_FIELDS
        )
        and (not expect.get("tree") or isinstance(expect.get("base"), str))
        and all(
            expect.get(k) is None
            or isinstance(expect[k], dict)
            and all(isinstance(n, str) and isinstance(v, str) for n, v in expect[k].items())
            for k in ("refs", "symrefs")
        )
    )


def _git_state(root: Path, expect: dict[str, Any], staged: str | None) -> Check:
    """HEAD's commit, its branch (None: detached), the staged tree, the stash list and the local
    branches and tags, against the checkpoint's (a description written before the branch, or the
    branches and tags, were kept is checked for the others)."""
    try:
        head, ref = git(["rev-parse", "HEAD", "--symbolic-full-name", "HEAD"], root).split()
    except (CheckpointError, ValueError):
        head, ref = "(none)", "HEAD"
    actual = {
        "head": head,
        "branch": ref.removeprefix("refs/heads/") if ref.startswith("refs/heads/") else None,
        "index_tree": staged,
    }
    want = {
        "head": expect.get("head") or expect.get("base"),
        "branch": expect.get("branch"),
        "index_tree": expect.get("index_tree"),
    }
    for key in ("branch", "index_tree"):  # (not kept: an older description, an index with conflicts)
        if key not in expect or (key == "index_tree" and want[key] is None):
            del want[key], actual[key]
    if isinstance(expect.get("stash"), list):  # (a description written before the stash was kept: not)
        out = git(["reflog", "show", "--format=%H", "refs/stash", "--"], root, check=False)
        actual["stash"] = out.split()
        want["stash"] = expect["stash"]
    if isinstance(expect.get("assume_unchanged"), list):  # (a description written before: not)
        # the entries git does not look at: the skip-worktree ones in the working tree, as recorded
        listing = git(["ls-files", "-v", "-z"], root).split("\0")
        entries = [(rec[:1], rec[2:]) for rec in listing if rec[1:2] == " "]
        actual["assume_unchanged"] = sorted(p for tag, p in entries if tag.islower())
        want["assume_unchanged"] = sorted(expect["assume_unchanged"])
        if isinstance(expect.get("skip_worktree"), list):
            skipped = (p for tag, p in entries if tag in ("S", "s") and os.path.lexists(root / p))
            actual["skip_worktree"] = sorted(skipped)
            want["skip_worktree"] = sorted(expect["skip_worktree"])
        if isinstance(expect.get("skip_worktree_absent"), list):  # (a sparse checkout's left out)
            gone = (p for tag, p in entries if tag in ("S", "s") and not os.path.lexists(root / p))
            actual["skip_worktree_absent"] = sorted(gone)
            want["skip_worktree_absent"] = sorted(expect["skip_worktree_absent"])
    if isinstance(expect.get("intent_to_add"), list):  # (a description written before: not)
        staged_entries = _parse_index_listing(git(["ls-files", "--stage", "-v", "-z"], root, binary=True))
        algo = "sha256" if len(head) == 64 else "sha1"
        actual["intent_to_add"] = intent_to_add(root, staged_entries, algo)
        want["intent_to_add"] = sorted(expect["intent_to_add"])
    if isinstance(expect.get("sparse_checkout"), dict):
        actual["sparse_checkout"] = _sparse_checkout(root)
        want["sparse_checkout"] = expect["sparse_checkout"]
    if isinstance(expect.get("refs"), dict):  # (a description written before they were kept: not)
        out = git(["for-each-ref", "--format=%(refname) %(objectname) %(symref)", "refs/"], root)
        listed = [line.split(" ") for line in out.splitlines() if line.count(" ") == 2]
        actual["refs"] = {name: oid for name, oid, target in listed if not target and name != "refs/stash"}
        want["refs"] = expect["refs"]
        if isinstance(expect.get("symrefs"), dict):  # (a description written before they were kept: not)
            actual["symrefs"] = {name: target for name, _, target in listed if target}
            want["symrefs"] = expect["symrefs"]
    return Check("git HEAD, branch and index", actual == want, want, actual)


def _sparse_checkout(root: Path) -> dict[str, Any]:
    """The restored repository's sparse-checkout settings, as a checkpoint keeps them."""
    out = git(
        [
            "config",
            "--local",
            "--get-regexp",
            r"^(core\.sparsecheckout|core\.sparsecheckoutcone|index\.sparse)$",
        ],
        root,
        check=False,
    )
    config = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    try:
        patterns: str | None = (root / ".git" / "info" / "sparse-checkout").read_text(errors="replace")
    except OSError:
        patterns = None
    return {"config": config, "patterns": patterns}


def _links_out(root: Path) -> list[tuple[str, str]]:
    """The symbolic links under ``root`` (not in ``.git``) whose target lies outside it: ``(path,
    target)``, sorted. (A link to a folder is listed among a walk's folders, and not walked into.)"""
    out = []
    top = os.path.realpath(root)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            full = os.path.join(dirpath, name)
            if os.path.islink(full):
                dest = os.path.realpath(full)
                if dest != top and not dest.startswith(top + os.sep):
                    out.append((os.path.relpath(full, root), os.readlink(full)))
        dirnames[:] = [d for d in dirnames if d != ".git" and not os.path.islink(os.path.join(dirpath, d))]
    return sorted(out)


def validate(root: Path, *, resumable: bool = True) -> list[Check]:
    """Check a restored directory against its checkpoint without any model.

    Checks: the tracked source tree hash, where HEAD is (the commit, and the branch it is on) and
    what is staged (the index's tree), the workspace fingerprint (naming the files that differ),
    the carried messages' digest, that the checkpoint is a resumable boundary, that every file the
    messages refer to exists, and (only when the repository has submodules) that their working
    trees were restored, which they never are: a checkpoint keeps each one's commit only. Raises
    :class:`CheckpointError` when ``root`` holds no restored checkpoint. ``resumable`` False: an
    observable checkpoint (between two tool calls of a turn) is what it is, a valid state to look
    at, and its boundary check passes, naming it (``restore``); True: it fails (``fork`` resumes).
    """
    root = Path(root).absolute()
    try:
        expect = read_json_text((root / META_DIR / "checkpoint.json").read_bytes())
        context = read_json_text((root / META_DIR / "messages.json").read_bytes())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{root}: no restored checkpoint here ({root / META_DIR}: {exc})") from None
    if not isinstance(expect, dict) or not _described(expect):
        raise CheckpointError(
            f"{root / META_DIR / 'checkpoint.json'} is not a checkpoint description (damaged, or not written "
            "by forkpoint restore)"
        )
    try:
        recorded_rows = read_json_text((root / META_DIR / "manifest.json").read_bytes())
    except (OSError, ValueError):
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
                    staged = tracker.staged_tree
                finally:
                    tracker.close()
            except CheckpointError as exc:
                actual_tree, staged = f"(cannot compute: {exc})", None
            actual_source: Any = actual_tree
            if actual_tree != expect["tree"] and not actual_tree.startswith("("):
                actual_source = {
                    "tree": actual_tree,
                    "files": _tree_changes(root, expect["tree"], actual_tree, Path(tmp)),
                }
        checks.append(Check("source tree hash", actual_tree == expect["tree"], expect["tree"], actual_source))
        checks.append(_git_state(root, expect, staged))
    listing = "git" if expect.get("listing", "git" if expect.get("tree") else "plain") == "git" else "plain"
    # (not the validating user's own ignore file: a restore on another machine holds what was taken)
    # (folders that were repositories inside the workspace are listed whole, as they were taken;
    # a description naming one outside the directory names none)
    nested = [d for d in expect.get("nested") or [] if _inside(root, d)]
    paths = untracked_files(
        root,
        include_ignored=bool(expect.get("include_ignored")),
        listing=listing,
        user_excludes=False,
        nested=nested,
    )
    if isinstance(recorded_rows, list):  # and the tracked files kept as they were (.gitattributes)
        kept = {r[0] for r in recorded_rows if isinstance(r, list) and r and isinstance(r[0], str)}
        paths = sorted({*paths, *(p for p in kept - set(paths) if _inside(root, p, Path.is_file))})
    rows = manifest_of(root, paths, None, None, scrub=False)  # (the stored bytes, scrubbed when taken)
    fingerprint = digest(rows, exotic=True)
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
    boundary = expect.get("boundary")
    if resumable or boundary == "resumable":
        checks.append(Check("resumable boundary", boundary == "resumable", "resumable", boundary))
    else:
        checks.append(
            Check(
                f"{boundary} boundary (to look at; fork resumes only at a resumable one)",
                True,
                boundary,
                boundary,
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
        wanted.add(resolve_ref(root, cwd, ref) or rel)
    missing = sorted(p for p in wanted if not os.path.lexists(root / p))
    checks.append(Check("referenced files exist", not missing, sorted(wanted), {"missing": missing}))
    left_out = sorted(p for p in expect.get("uncaptured") or [] if not os.path.lexists(root / p))
    if left_out:  # (as recorded: there then, not archived; said, for the messages name them)
        checks.append(
            Check(
                f"paths the messages name that this folder does not hold: {', '.join(left_out)} (there when "
                "recorded, not archived: ignored files are kept only with record --include-ignored, empty "
                "folders never)",
                True,
                None,
                None,
            )
        )
    leaving = _links_out(root)
    if leaving:  # (a faithful state; but an arm that writes through one changes what it leads to)
        shown = ", ".join(f"{rel} → {dest}" for rel, dest in leaving[:3]) + (" …" if len(leaving) > 3 else "")
        checks.append(
            Check(
                f"symlinks that lead out of this folder: {shown} (writing through one changes what it leads to)",
                True,
                None,
                None,
            )
        )
    if expect.get("submodules"):
        checks.append(
            Check(
                "submodule working trees",
                False,
                expect["submodules"],
                "not restored: a checkpoint keeps each submodule's commit, not its files",
            )
        )
    return checks
