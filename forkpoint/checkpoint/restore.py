"""Restoring a checkpoint into a fresh directory: the recorded repository cloned, the source tree
checked out from the session's own objects, the untracked files written from the manifest.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any, cast

from ..canonical import digest
from ..errors import CheckpointError, SessionError
from ..events import CheckpointEvent
from ..log import Session, json_text
from .git import HEX, PATHS_MAX, git, loose_path
from .source import RAW_DIFF, parse_raw_diff
from .workspace import META_DIR, manifest_rows, unrestorable

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def why_no_checkpoints(session: Session) -> str:
    """Why ``session`` holds no checkpoint, and what to use instead: a what-if run or a fork arm
    (a session with a parent) takes none, since its replayed part has them in the parent and calls
    made live during a replay take none; any other session was recorded outside a workspace (by
    ``forkpoint.record()``: without ``workspace=``, which the current directory's repository is not)."""
    parent = session.header.get("parent")
    if parent:
        pid = parent.get("session_id") if isinstance(parent, dict) else parent
        return (
            f"it is a replay of session {pid}, and calls made live during a replay take none: "
            f"use {pid}'s checkpoints instead"
        )
    if session.header.get("records_itself"):  # (forkpoint.record() takes no git repository of the cwd)
        return "record with forkpoint.record(workspace=DIR)"
    return "record with --workspace DIR, or inside a git repository"


def find(session: Session, seq: int) -> CheckpointEvent:
    """The checkpoint event with this seq. Raises :class:`CheckpointError` listing the valid seqs
    (or, when the session has none, saying why)."""
    cps = session.by_type("checkpoint")
    for e in cps:
        if e["seq"] == seq:
            return e
    if not cps:
        raise CheckpointError(
            f"session {session.id} has no checkpoint at seq {seq}: it has no checkpoints "
            f"({why_no_checkpoints(session)})"
        )
    listed = ", ".join(str(e["seq"]) for e in cps)
    raise CheckpointError(f"session {session.id} has no checkpoint at seq {seq} (checkpoints: {listed})")


def _check_rel(rel: Any) -> PurePosixPath:
    if not isinstance(rel, str) or not rel:
        raise CheckpointError(f"archive entry {rel!r} is not a relative path; refusing it")
    why = unrestorable(rel)
    if why is not None:
        raise CheckpointError(f"archive entry {rel!r} {why}; refusing it")
    return PurePosixPath(rel)


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
    _stash_entries(source.get("stash"))
    _sparse_checkout(source)
    _recorded_refs(source.get("refs"), None, None)
    _recorded_symrefs(source.get("symrefs"))
    for key in ("base", "tree"):
        if not isinstance(source.get(key), str) or not HEX.match(source[key]):
            raise CheckpointError(f"the checkpoint's source {key} {source.get(key)!r} is not an object id")
    for key in ("head", "index_tree"):
        if source.get(key) is not None and (not isinstance(source[key], str) or not HEX.match(source[key])):
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
    listed = manifest_rows(workspace)
    if workspace.get("fingerprint") is not None and digest(listed, exotic=True) != workspace["fingerprint"]:
        # Rebuilt from an earlier manifest and its changes, or edited: not the state that was taken.
        raise CheckpointError(
            f"checkpoint {session.id}@{seq}: its workspace manifest does not match its fingerprint, so "
            f"it is not the state that was taken (see: forkpoint verify {session.path})"
        )
    rows = _checked_manifest(listed)
    into = Path(into).absolute()
    if into.is_symlink() or (into.exists() and not into.is_dir()):
        raise CheckpointError(f"{into} is not a directory; restore needs a new or empty directory")
    if into.exists() and any(into.iterdir()):
        raise CheckpointError(f"{into} is not empty; restore needs a new or empty directory")
    created = not into.exists()
    try:
        into.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CheckpointError(
            f"cannot make the directory to restore into, {into}: {exc.strerror or exc}"
        ) from None
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


#: The push URL of a restored directory's ``origin`` (the recorded repository, which a restore and
#: what runs in it only read): a push fails, naming why.
PUSH_DISABLED = "/forkpoint/pushing-from-a-restored-checkpoint-to-the-recorded-repository-is-disabled"


def _restore_into(
    session: Session,
    cp: Mapping[str, Any],
    source: dict[str, Any] | None,
    workspace: dict[str, Any],
    rows: list[tuple[str, str, int, int, str]],
    into: Path,
    repo: Path | None,
) -> None:
    blobs = session.blob_store()
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
        # The recorded repository is only read: an agent continuing in a fork arm that pushes (git
        # push -f origin HEAD:main) must not rewrite the user's branches there.
        git(["remote", "set-url", "--push", "origin", PUSH_DISABLED], into)
        if session.cipher is not None:  # an encrypted session's objects are sealed blobs of its checkpoints
            session_objects = _unseal_objects(session, int(cp["seq"]), into / ".git" / "objects")
        alt = {"GIT_ALTERNATE_OBJECT_DIRECTORIES": str(session_objects)}
        try:
            git(["cat-file", "-e", f"{source['base']}^{{commit}}"], into)
        except CheckpointError:
            raise CheckpointError(
                f"{origin} does not have the base commit {source['base'][:12]}; pass --repo with a clone that has it"
            ) from None
        try:
            git(["read-tree", "-u", "--reset", source["tree"]], into, alt)
        except CheckpointError as exc:  # (git names an object, not the session it is missing from)
            raise CheckpointError(
                f"the session's archive is damaged: it lacks objects of source tree {source['tree'][:12]} "
                f"({exc}); forkpoint verify {session.path} names them"
            ) from None
        head = source.get("head") or source["base"]
        if git(["cat-file", "-t", head], into, check=False).strip() != "commit":
            # (the agent's own commit, since rewritten or garbage-collected there: HEAD, the branch and
            # the staged state would silently be another commit's)
            raise CheckpointError(
                f"{origin} does not have the commit HEAD was at when the checkpoint was taken ({head[:12]}); "
                "pass --repo with a clone that has it"
            )
        branch = source.get("branch")
        refs = _recorded_refs(source.get("refs"), branch, head)
        if branch:
            git(["update-ref", f"refs/heads/{branch}", head], into)
            git(["symbolic-ref", "HEAD", f"refs/heads/{branch}"], into)
        else:
            git(["update-ref", "--no-deref", "HEAD", head], into)
        if refs is None:  # (a session recorded before the branches and tags were kept)
            _drop_cloned_branches(into, branch)
        else:
            _put_refs(into, refs, origin, _recorded_symrefs(source.get("symrefs")))
        _restore_stash(into, source.get("stash"), origin)
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
        recorded_ita = _marked(source, "intent_to_add")
        if recorded_ita:  # (read-tree made them empty staged files: taken out, to be marked again)
            git(
                ["update-index", "--force-remove", "-z", "--stdin"],
                into,
                input="\0".join(recorded_ita).encode("utf-8", "surrogateescape") + b"\0",
            )
        if ita or recorded_ita:
            git(["add", "--intent-to-add", "--", *ita, *recorded_ita], into, alt)
        _copy_objects(session_objects, into, source["base"], [source["tree"], staged], alt)
        (into / ".git" / "info").mkdir(exist_ok=True)
        recorded = (session.header.get("workspace") or {}).get("info_exclude")
        if isinstance(recorded, str):  # the rules of the recording, not of today
            text = recorded
        else:  # (a session recorded before they were kept, or in a worktree)
            common = Path(git(["rev-parse", "--path-format=absolute", "--git-common-dir"], origin).strip())
            exclude = common / "info" / "exclude"
            text = exclude.read_text(errors="replace") if exclude.is_file() else ""
        (into / ".git" / "info" / "exclude").write_text(text.rstrip("\n") + f"\n/{META_DIR}/\n")
        attributes = (session.header.get("workspace") or {}).get("info_attributes")
        if isinstance(attributes, str):  # (after the checkout, as the look for converted files assumed)
            (into / ".git" / "info" / "attributes").write_text(attributes)
    links = []
    converted: list[str] = []
    try:
        for rel, kind, mode, size, h in rows:
            target = _safe_target(into, rel)
            data = blobs.get(h, size=size)
            if kind == "symlink":
                links.append((target, data.decode("utf-8", "surrogateescape"), rel))
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            _safe_target(into, rel)  # the folders just made are real ones, inside
            if source and os.path.isfile(target) and not os.path.islink(target):
                # a tracked file whose bytes the checkout converted (.gitattributes): as it was
                os.unlink(target)
                converted.append(rel)
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
    if converted:
        _restat(into, converted)
    absent = _marked(source, "skip_worktree_absent")
    for flag, marked in (
        ("--skip-worktree", _marked(source, "skip_worktree") + absent),
        ("--assume-unchanged", _marked(source, "assume_unchanged")),
    ):
        if marked:  # (as in the recorded repository: git does not look at their edits)
            git(
                ["update-index", flag, "-z", "--stdin"],
                into,
                input="\0".join(marked).encode("utf-8", "surrogateescape") + b"\0",
            )
    if absent:  # a sparse checkout's files left out: the checkout wrote them all
        _take_out(into, absent)
    sparse = _sparse_checkout(source)
    if sparse is not None:  # (last: read-tree above would have applied it)
        for key, value in sparse["config"].items():
            git(["config", key, value], into)
        if sparse["patterns"] is not None:
            (into / ".git" / "info" / "sparse-checkout").write_text(sparse["patterns"])
    if not source and workspace.get("listing") == "git-nocommit":
        # A repository without commits, restored as one: a plain folder inside another repository
        # would have an arm's git commands act on that one (commit, reset, clean).
        git(["init", "-q"], into)
        (into / ".git" / "info").mkdir(exist_ok=True)
        (into / ".git" / "info" / "exclude").write_text(f"/{META_DIR}/\n")
    meta = into / META_DIR
    meta.mkdir()
    expect = {
        "session": session.id,
        "seq": cp["seq"],
        "turn": cp.get("turn"),
        "boundary": cp.get("boundary"),
        "base": (source or {}).get("base"),
        "head": (source or {}).get("head"),
        "branch": (source or {}).get("branch"),
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
        "submodules": (source or {}).get("submodules", []),
        "stash": [commit for commit, _ in _stash_entries((source or {}).get("stash"))],
        "refs": _recorded_refs(
            (source or {}).get("refs"), (source or {}).get("branch"), (source or {}).get("head")
        ),
        "symrefs": _recorded_symrefs((source or {}).get("symrefs")),
        "skip_worktree": _marked(source, "skip_worktree"),
        "skip_worktree_absent": absent,
        "sparse_checkout": sparse,
        "assume_unchanged": _marked(source, "assume_unchanged"),
        "intent_to_add": _marked(source, "intent_to_add"),
        "nested": workspace.get("nested", []),
        "root": workspace.get("root"),
        "cwd": cp.get("cwd"),
        "forkpoint": cp.get("forkpoint"),
    }
    # (json_text: a file name that is not UTF-8 holds lone surrogates, which orjson refuses)
    (meta / "checkpoint.json").write_bytes(json_text(expect, indent=True))
    (meta / "messages.json").write_bytes(json_text(cp.get("context"), indent=True))
    (meta / "manifest.json").write_bytes(json_text([list(r) for r in rows]))


def _marked(source: dict[str, Any] | None, key: str) -> list[str]:
    """The tracked paths a checkpoint's ``source`` lists under ``key`` (``skip_worktree``,
    ``assume_unchanged``, ``intent_to_add``): the index entries marked so, to be marked again."""
    return [p for p in (source or {}).get(key) or [] if isinstance(p, str) and "\0" not in p]


#: The sparse-checkout settings a checkpoint keeps (:meth:`.source.SourceTracker.sparse_checkout`).
_SPARSE_KEYS = frozenset({"core.sparsecheckout", "core.sparsecheckoutcone", "index.sparse"})


def _sparse_checkout(source: dict[str, Any] | None) -> dict[str, Any] | None:
    """A checkpoint's ``sparse_checkout`` (its ``config`` and ``patterns``), checked; None when it
    has none. Raises :class:`CheckpointError` for one that names other settings or is malformed."""
    sparse = (source or {}).get("sparse_checkout")
    if sparse is None:
        return None
    config = sparse.get("config") if isinstance(sparse, dict) else None
    if not (
        isinstance(config, dict)
        and all(k in _SPARSE_KEYS and isinstance(v, str) and "\n" not in v for k, v in config.items())
        and isinstance(sparse.get("patterns"), str | None)
    ):
        raise CheckpointError(f"the checkpoint's sparse-checkout settings {sparse!r} are malformed")
    return {"config": dict(config), "patterns": sparse.get("patterns")}


def _take_out(into: Path, paths: list[str]) -> None:
    """Remove the tracked files ``paths`` the checkout wrote, and the folders left empty by it, as
    a sparse checkout leaves them out."""
    top = into.resolve()
    for rel in paths:
        target = _safe_target(into, rel)
        try:
            if target.is_dir() and not target.is_symlink():
                target.rmdir()  # (a submodule's: the checkout made its folder, empty)
            else:
                os.unlink(target)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise CheckpointError(
                f"cannot take out {rel!r}, which the recorded checkout left out: {exc}"
            ) from None
        parent = target.parent
        while parent.resolve() != top:
            try:
                parent.rmdir()
            except OSError:  # (not empty)
                break
            parent = parent.parent


def _drop_cloned_branches(into: Path, branch: str | None) -> None:
    """Undo the local branch the clone made for the branch the recorded repository is on *today*
    (one the agent created later in the run, or the user's current work): deleted unless it is
    the checkpoint's ``branch``, and its upstream (``origin``, set by the clone) dropped either way.
    Kept, it was a branch the checkpoint never had, and an arm's agent doing again what the
    recording did (``git checkout -b feature``) failed. The recorded repository's branches stay
    readable as ``origin/…``."""
    keep = f"refs/heads/{branch}" if branch else None
    refs = git(["for-each-ref", "--format=%(refname)", "refs/heads/"], into).splitlines()
    for ref in refs:
        if ref and ref != keep:
            git(["update-ref", "-d", ref], into)
        if ref:
            git(
                ["config", "--remove-section", f"branch.{ref.removeprefix('refs/heads/')}"], into, check=False
            )


def _recorded_refs(refs: Any, branch: str | None, head: str | None) -> dict[str, str] | None:
    """A checkpoint's ``refs`` (its refs but the stash: local branches and tags, and, recorded since,
    remote-tracking refs, notes and replace refs), checked, with its ``branch`` at ``head`` (read by
    another git command: a commit in between moved it); None when it has none (recorded before they
    were kept). Raises :class:`CheckpointError` for one that is not a map of ref names to object
    ids."""
    if refs is None:
        return None
    if not isinstance(refs, dict) or not all(
        _ref_name(name, ("refs/",)) and name != "refs/stash" and isinstance(oid, str) and HEX.match(oid)
        for name, oid in refs.items()
    ):
        raise CheckpointError(f"the checkpoint's branches and tags {refs!r} are malformed")
    out = dict(refs)
    if branch and head:
        out[f"refs/heads/{branch}"] = head
    return out


def _ref_name(name: Any, under: tuple[str, ...]) -> bool:
    """``name`` is a ref name under one of ``under`` that git takes as it is (no option, no range)."""
    return (
        isinstance(name, str)
        and name.startswith(under)
        and re.fullmatch(r"[^\x00-\x20\x7f~^:?*\[\\]+", name) is not None
        and ".." not in name
    )


def _recorded_symrefs(symrefs: Any) -> dict[str, str]:
    """A checkpoint's ``symrefs`` (its symbolic branches and tags: name → the ref it names), checked;
    empty when it has none. Raises :class:`CheckpointError` for one that is malformed."""
    if symrefs is None:
        return {}
    if not isinstance(symrefs, dict) or not all(
        _ref_name(name, ("refs/",)) and name != "refs/stash" and _ref_name(target, ("refs/",))
        for name, target in symrefs.items()
    ):
        raise CheckpointError(f"the checkpoint's symbolic branches and tags {symrefs!r} are malformed")
    return dict(symrefs)


def _put_refs(into: Path, refs: dict[str, str], origin: Path, symrefs: dict[str, str]) -> None:
    """Make the restored repository's refs exactly the checkpoint's ``refs`` (branches, tags, and the
    recorded repository's own remote-tracking refs, notes and replace refs), from the objects the
    clone copied (a branch deleted there since is unreachable, but copied until garbage-collected),
    and ``symrefs`` symbolic refs again. The clone's remote-tracking refs (``origin/*``) go: they are
    the recorded repository's branches of today, the agent's later commits among them, which ``git
    log --all`` and ``git branch -a`` in an arm would show as if they had been there; the recorded
    repository's ``origin/*`` take their names. The ``origin`` remote (the recorded repository)
    stays: a ``git fetch`` there gets its branches on purpose. Raises :class:`CheckpointError`
    naming a ref whose object is gone (nothing is changed then)."""
    wanted = sorted(refs.items())
    missing = _missing_objects(into, wanted)
    if missing:
        # A clone of a shallow repository is fetched, not copied: it has the objects of its branches
        # and tags only. Those of its other refs (remote-tracking refs, notes) are fetched, into refs
        # of their own (deleted below: they are none of the checkpoint's).
        fetch = ["fetch", "--quiet", "--no-tags", "--update-shallow", "--no-write-fetch-head", "origin"]
        git([*fetch, "+refs/*:refs/forkpoint-restore/*"], into, check=False)  # (what is not there: named)
        missing = _missing_objects(into, missing)
    if missing:
        name, oid = missing[0]
        what = (
            f"branch {name[11:]}"
            if name.startswith("refs/heads/")
            else f"tag {name[10:]}"
            if name.startswith("refs/tags/")
            else f"ref {name}"
        )
        raise CheckpointError(
            f"{origin} does not have the object of the {what} the checkpoint had ({oid[:12]}); "
            "pass --repo with a clone that has it"
        )
    have = git(["for-each-ref", "--format=%(refname)", "refs/"], into)
    lines = []
    for ref in have.splitlines():
        if ref and ref != "refs/stash" and (ref not in refs or ref in symrefs):
            lines.append(f"option no-deref\ndelete {ref}\n")  # (origin/HEAD names origin/main)
        if ref.startswith("refs/heads/"):  # (the upstream the clone gave its branch: not the recording's)
            git(
                ["config", "--remove-section", f"branch.{ref.removeprefix('refs/heads/')}"], into, check=False
            )
    lines += [f"update {name} {oid}\n" for name, oid in wanted]
    git(["update-ref", "--stdin"], into, input="".join(lines).encode())
    for name, target in sorted(symrefs.items()):  # (a branch that names another, as it was)
        git(["symbolic-ref", name, target], into)


def _missing_objects(into: Path, wanted: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The ``(ref name, object id)`` of ``wanted`` whose object the repository ``into`` lacks."""
    found = git(
        ["cat-file", "--batch-check=%(objectname)"],
        into,
        input="".join(f"{oid}\n" for _, oid in wanted).encode(),
    ).split("\n")
    return [(name, oid) for (name, oid), line in zip(wanted, found, strict=False) if line.strip() != oid]


def _stash_entries(stash: Any) -> list[tuple[str, str]]:
    """A checkpoint's ``stash`` (newest first) as (commit, message) pairs, checked. Raises
    :class:`CheckpointError` for one that is not a list of ``[object id, one-line message]``."""
    if stash is None:
        return []
    if not isinstance(stash, list) or not all(
        isinstance(e, list)
        and len(e) == 2
        and isinstance(e[0], str)
        and HEX.match(e[0])
        and isinstance(e[1], str)
        and "\n" not in e[1]
        and "\0" not in e[1]
        for e in stash
    ):
        raise CheckpointError(f"the checkpoint's stash list {stash!r} is malformed")
    return [(e[0], e[1]) for e in stash]


def _restore_stash(into: Path, stash: Any, origin: Path) -> None:
    """Put the checkpoint's stash list back (oldest entry first), from the commits the clone copied
    with the recorded repository's objects (a stash popped later there is unreachable, but copied
    until garbage-collected). Raises :class:`CheckpointError` naming a stash commit that is gone."""
    entries = _stash_entries(stash)
    for commit, _ in entries:
        if git(["cat-file", "-t", commit], into, check=False).strip() != "commit":
            raise CheckpointError(
                f"{origin} does not have the commit of the stash entry the checkpoint had ({commit[:12]}); "
                "pass --repo with a clone that has it"
            )
    for commit, message in reversed(entries):
        git(["update-ref", "--create-reflog", "-m", message, "refs/stash", commit], into)


def _restat(into: Path, paths: list[str]) -> None:
    """Record in the index the stat data of the tracked files ``paths`` written back as they were
    after the checkout converted them, where git stores them as the index holds them: git counts a
    file whose size differs from its entry's as modified without reading it (``git status`` would
    name files the recorded repository did not)."""
    paths = [p for p in paths if "\n" not in p]  # (what --stdin-paths cannot be given)
    named = ["--", *paths] if len(paths) <= PATHS_MAX else []
    listing = git(["ls-files", "--stage", "-z", *named], into, binary=True)
    staged = {}
    for rec in listing.split(b"\0"):
        if rec:
            meta, _, path = rec.partition(b"\t")
            staged[path.decode("utf-8", "surrogateescape")] = meta.split(b" ")[1].decode()
    hashed = git(
        ["hash-object", "--stdin-paths"],
        into,
        input="\n".join(paths).encode("utf-8", "surrogateescape") + b"\n",
    ).split()
    same = [p for p, h in zip(paths, hashed, strict=True) if staged.get(p) == h]
    if same:
        git(
            ["update-index", "-z", "--stdin"],
            into,
            input="\0".join(same).encode("utf-8", "surrogateescape") + b"\0",
        )


def _unseal_objects(session: Session, seq: int, objects: Path) -> Path:
    """Write the git objects an encrypted session's checkpoints up to ``seq`` sealed
    (``git_objects``) into ``objects`` (the restored repository's); returns ``objects``."""
    for cp in session.by_type("checkpoint"):
        if int(cp["seq"]) > seq:
            break
        sealed = cast(dict[str, Any], cp).get("git_objects") or {}
        for oid, data in sealed.items() if isinstance(sealed, dict) else ():
            if not (isinstance(oid, str) and HEX.match(oid) and isinstance(data, bytes)):
                raise CheckpointError(f"checkpoint seq {cp['seq']}: a sealed git object {oid!r} is malformed")
            target = loose_path(objects, oid)
            if not target.exists():
                target.parent.mkdir(exist_ok=True)
                tmp = target.with_name(f".tmp-{os.getpid()}-{target.name}")
                tmp.write_bytes(data)
                os.chmod(tmp, 0o444)
                os.replace(tmp, target)
    return objects


def _copy_objects(
    session_objects: Path, into: Path, base: str, roots: list[str], alt: dict[str, str]
) -> None:
    """Copy the session's objects the restored trees need into the restored repository, so it does
    not depend on the session (``git diff``, ``git stash`` work there)."""
    objects = into / ".git" / "objects"
    shas = []
    for r in dict.fromkeys(roots):
        raw = git(RAW_DIFF + [base, r], into, alt, binary=True)
        shas += [r] + [c[3] for c in parse_raw_diff(raw)]
    for sha in dict.fromkeys(shas):
        src = loose_path(session_objects, sha)
        if src.is_file() and not loose_path(objects, sha).exists():
            dst = loose_path(objects, sha)
            dst.parent.mkdir(exist_ok=True)
            shutil.copyfile(src, dst)
