"""Replayable checkpoints of a coding agent's state: take, restore in a fresh directory, validate.

A checkpoint holds the three layers a coherent continuation needs (see ../shared/seeds/000_*):

* **source state** — the tracked files as they are in the working tree, as a git *tree* built with
  a private index, and the canonical diff of that tree against the base commit. The tree hash names
  the state exactly (file modes, symlinks, binary content, deletions), independent of the user's git
  config: no rename detection, no external diff or textconv drivers, one fixed diff algorithm. New
  git objects go to the session's own object folder (``<session>/git-objects``, the repository's
  objects are only read as alternates), so taking a checkpoint never writes into the user's repository,
  and a file that did not change costs nothing the next time.
* **workspace state** — the untracked files (``.gitignore`` respected unless ignored files are asked
  for), as a manifest of ``[path, type, mode, size, sha256]`` sorted by path, with every file's bytes
  in the session's content-addressed blob store. The fingerprint is the SHA-256 of the canonical JSON
  of the manifest. The manifest plus its blobs is the archive: sorted, with no owners or times in it.
* **carried context** — the message prefix the agent carries (the request body's ``messages`` /
  ``input`` / ``contents`` and its ``system`` / ``instructions``) and its digest.

A checkpoint is **resumable** only at an agent boundary: right before a model call, when every tool
result of the previous turn is in. One taken after a tool call that is not the last of its turn is
**observable**: a valid environment state, but resuming there would make the agent speak twice.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import orjson

from . import __version__
from .canonical import digest, sha256_hex
from .log import BlobStore, Session
from .runtime import ForkpointError

#: Folder, inside a restored directory, holding the checkpoint's expectations and carried messages.
META_DIR = ".forkpoint-checkpoint"
#: Never part of a workspace: git's own folder, forkpoint's store and restore metadata.
ALWAYS_EXCLUDED = (".git", ".forkpoint", META_DIR)
#: Request-body fields that make up the carried context, per provider shape.
CONTEXT_FIELDS = ("system", "instructions", "systemInstruction", "messages", "input", "contents")
# git settings that could change what a tree or diff looks like; pinned so the user's config cannot.
_GIT_CONFIG = (
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.filemode=true",
    "core.symlinks=true",
    "core.ignorecase=false",
    "core.quotepath=false",
    "diff.renames=false",
    "diff.algorithm=myers",
)


class CheckpointError(ForkpointError):
    """A checkpoint cannot be taken, restored or validated; the message says which and why."""


def git(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, *, check: bool = True, binary: bool = False
) -> Any:
    """Run git with the user's global/system config ignored and the pinned settings applied."""
    full_env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
        **(env or {}),
    }
    cmd = ["git"]
    for c in _GIT_CONFIG:
        cmd += ["-c", c]
    proc = subprocess.run(cmd + args, cwd=cwd, env=full_env, capture_output=True, timeout=300)
    if check and proc.returncode != 0:
        raise CheckpointError(
            f"git {' '.join(args[:3])} failed in {cwd}: {proc.stderr.decode(errors='replace').strip()}"
        )
    return proc.stdout if binary else proc.stdout.decode("utf-8", "surrogateescape")


def repo_root(path: Path) -> Path | None:
    """The top of the git work tree containing ``path``, or None."""
    try:
        out = git(["rev-parse", "--show-toplevel"], path)
    except (CheckpointError, OSError):
        return None
    return Path(out.strip()) if out.strip() else None


# --------------------------------------------------------------------------- source state


def _objects_dir(repo: Path) -> Path:
    return Path(git(["rev-parse", "--path-format=absolute", "--git-common-dir"], repo).strip()) / "objects"


def source_state(repo: Path, base: str, objects: Path) -> dict[str, Any]:
    """Tree hash and canonical diff of ``repo``'s tracked files against commit ``base``.

    New objects are written to ``objects`` (the repository's own are read as alternates). Returns
    ``{"base", "tree", "patch" (bytes), "changed" (paths)}``. Raises :class:`CheckpointError`.
    """
    objects.mkdir(parents=True, exist_ok=True, mode=0o700)
    git_dir = Path(git(["rev-parse", "--path-format=absolute", "--git-dir"], repo).strip())
    with tempfile.TemporaryDirectory(prefix="forkpoint-index-") as tmp:
        index = Path(tmp) / "index"
        if (git_dir / "index").exists():
            shutil.copyfile(git_dir / "index", index)  # its stat cache makes `add -u` cheap
        env = {
            "GIT_INDEX_FILE": str(index),
            "GIT_OBJECT_DIRECTORY": str(objects),
            "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(_objects_dir(repo)),
        }
        if not index.exists():
            git(["read-tree", base], repo, env)
        git(["add", "--update", "--", "."], repo, env)
        tree = git(["write-tree"], repo, env).strip()
        base_tree = git(["rev-parse", f"{base}^{{tree}}"], repo, env).strip()
        patch = git(
            [
                "diff-tree",
                "-p",
                "--binary",
                "--full-index",
                "--no-renames",
                "--no-ext-diff",
                "--no-textconv",
                "--no-color",
                "--diff-algorithm=myers",
                base_tree,
                tree,
            ],
            repo,
            env,
            binary=True,
        )
        changed = git(["diff-tree", "-r", "--name-only", "-z", "--no-renames", base_tree, tree], repo, env)
    return {
        "base": base,
        "tree": tree,
        "patch": patch,
        "changed": sorted(p for p in changed.split("\0") if p),
    }


# --------------------------------------------------------------------------- workspace state


def _excluded(rel: str, extra: tuple[str, ...]) -> bool:
    first = rel.split("/", 1)[0]
    return first in ALWAYS_EXCLUDED or any(rel == e or rel.startswith(e.rstrip("/") + "/") for e in extra)


def untracked_files(root: Path, *, include_ignored: bool = False, exclude: tuple[str, ...] = ()) -> list[str]:
    """Relative paths of the workspace's untracked files (all files, outside a git repository)."""
    if repo_root(root) is not None:
        args = ["ls-files", "-z", "--others"] + ([] if include_ignored else ["--exclude-standard"])
        paths = [p for p in git(args, root).split("\0") if p]
    else:
        paths = []
        for dirpath, dirnames, filenames in os.walk(root):
            rel_dir = os.path.relpath(dirpath, root)
            dirnames[:] = sorted(
                d for d in dirnames if not _excluded(os.path.normpath(os.path.join(rel_dir, d)), exclude)
            )
            for name in filenames:
                paths.append(os.path.normpath(os.path.join(rel_dir, name)))
    return sorted(p for p in paths if not _excluded(p, exclude))


def workspace_state(
    root: Path, blobs: BlobStore | None, *, include_ignored: bool = False, exclude: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Manifest and fingerprint of the untracked files; their bytes go to ``blobs`` when given.

    Manifest rows: ``[path, "file"|"symlink", mode (permission bits), size (bytes), sha256]``; a
    symlink's "content" is its target.
    """
    manifest: list[list[Any]] = []
    for rel in untracked_files(root, include_ignored=include_ignored, exclude=exclude):
        full = root / rel
        try:
            st = full.lstat()
        except FileNotFoundError:  # deleted while we looked
            continue
        if stat.S_ISLNK(st.st_mode):
            data = os.readlink(full).encode("utf-8", "surrogateescape")
            kind = "symlink"
        elif stat.S_ISREG(st.st_mode):
            data = full.read_bytes()
            kind = "file"
        else:
            continue
        h = blobs.put(data) if blobs is not None else sha256_hex(data)
        manifest.append([rel, kind, stat.S_IMODE(st.st_mode) if kind == "file" else 0o777, len(data), h])
    return {"manifest": manifest, "fingerprint": digest(manifest)}


# --------------------------------------------------------------------------- carried context


def carried_context(body: Any) -> dict[str, Any]:
    """The context fields of a model request body (messages and system prompt, per provider shape)."""
    if not isinstance(body, dict):
        return {}
    return {k: body[k] for k in CONTEXT_FIELDS if k in body}


_PATH_KEYS = re.compile(
    r"(?i)^(path|file|filename|file_path|filepath|target|dest|destination|src|source_file|name)$"
)
_PATH_TOKEN = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z0-9]{1,8})(?![\w/-])")


def referenced_paths(context: dict[str, Any]) -> list[str]:
    """Relative file paths the carried messages mention in tool calls and tool results, sorted.

    Looks at tool-call arguments (OpenAI ``tool_calls``, Anthropic ``tool_use``, Responses
    ``function_call``, Gemini ``functionCall``) and tool results (``role: tool``, ``tool_result``,
    ``function_call_output``, ``functionResponse``): path-valued arguments, and path-shaped tokens.
    """
    found: set[str] = set()

    def scan_text(text: str) -> None:
        for m in _PATH_TOKEN.finditer(text):
            token = m.group(1)
            if "://" not in text[max(0, m.start() - 10) : m.start() + 3] and not token.startswith("."):
                found.add(token)

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
                elif isinstance(v, str | dict | list):
                    scan_args(v) if not isinstance(v, str) else scan_text(v)
        elif isinstance(args, list):
            for v in args:
                scan_args(v)

    def walk(node: Any, in_tool: bool = False) -> None:
        if isinstance(node, dict):
            kind = node.get("type")
            role = node.get("role")
            if "tool_calls" in node:
                for c in node.get("tool_calls") or []:
                    scan_args(((c or {}).get("function") or {}).get("arguments"))
            if kind == "tool_use":
                scan_args(node.get("input"))
            if kind == "function_call":
                scan_args(node.get("arguments"))
            if "functionCall" in node:
                scan_args((node["functionCall"] or {}).get("args"))
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
        p for p in found if not PurePosixPath(p).is_absolute() and ".." not in PurePosixPath(p).parts
    )


# --------------------------------------------------------------------------- taking checkpoints


@dataclass
class Workspace:
    """What the recorder checkpoints: the directory, its repository (if any) and the base commit."""

    root: Path
    repo: Path | None
    base: str | None
    objects: Path
    include_ignored: bool = False
    exclude: tuple[str, ...] = ()
    _tree_cache: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def open(cls, root: Path, store: Path, *, include_ignored: bool = False) -> Workspace:
        """The workspace at ``root`` (widened to its git repository's top, if it is in one), for a
        session in ``store`` (excluded from the workspace when inside it). Set ``objects`` to the
        session's ``git-objects`` folder before capturing."""
        root = Path(root).resolve()
        repo = repo_root(root)
        base = None
        if repo is not None:
            root = repo  # the source state is the whole repository's; so is the workspace
            try:
                base = git(["rev-parse", "HEAD"], repo).strip()
            except CheckpointError:
                repo = None  # a repository without commits: treat it as a plain folder
        store = Path(store).resolve()
        exclude = (os.path.relpath(store, root),) if store.is_relative_to(root) else ()
        return cls(root, repo, base, Path(), include_ignored, exclude)

    def describe(self) -> dict[str, Any]:
        """The header's ``workspace`` field: root, repo, base commit, include_ignored."""
        return {
            "root": str(self.root),
            "repo": str(self.repo) if self.repo else None,
            "base": self.base,
            "include_ignored": self.include_ignored,
        }

    def capture(self, blobs: BlobStore) -> dict[str, Any]:
        """Source and workspace state now, as the ``source`` / ``workspace`` fields of a checkpoint."""
        source = None
        if self.repo is not None and self.base is not None:
            s = source_state(self.repo, self.base, self.objects)
            source = {
                "base": s["base"],
                "tree": s["tree"],
                "changed": s["changed"],
                "patch": s["patch"],
                "repo": str(self.repo),
            }
        ws = workspace_state(self.root, blobs, include_ignored=self.include_ignored, exclude=self.exclude)
        return {"source": source, "workspace": {"root": str(self.root), **ws}}


def checkpoint_event(
    workspace: Workspace,
    blobs: BlobStore,
    *,
    boundary: str,
    turn: int,
    context: dict[str, Any] | None,
    reason: str,
) -> dict[str, Any]:
    """A ``checkpoint`` event (see docs/format.md). ``boundary`` is ``resumable`` or ``observable``."""
    state = workspace.capture(blobs)
    event: dict[str, Any] = {
        "type": "checkpoint",
        "boundary": boundary,
        "reason": reason,
        "turn": turn,
        "forkpoint": __version__,
        **state,
        "context": context if context is not None else None,
        "context_digest": digest(context) if context is not None else None,
    }
    if context is not None:
        refs = referenced_paths(context)
        known = {row[0] for row in state["workspace"]["manifest"]}
        if workspace.repo is not None:
            known |= set(git(["ls-files", "-z"], workspace.repo).split("\0"))
        # Files the messages mention that did not exist then are not required to exist on restore.
        event["referenced"] = [r for r in refs if r in known or (workspace.root / r).exists()]
        event["mentioned_absent"] = [r for r in refs if r not in event["referenced"]]
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


def _safe_target(root: Path, rel: str) -> Path:
    """``root/rel`` after checking ``rel`` cannot leave ``root`` (absolute, ``..``, through a symlink)."""
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or not p.parts or rel.startswith("\\"):
        raise CheckpointError(f"archive entry {rel!r} points outside the target directory; refusing it")
    target = root.joinpath(*p.parts)
    parent = target.parent.resolve()
    if not parent.is_relative_to(root.resolve()):
        raise CheckpointError(
            f"archive entry {rel!r} would be written through a symlink outside the target; refusing it"
        )
    return target


def restore(session: Session, seq: int, into: Path, *, repo: Path | None = None) -> Path:
    """Rebuild checkpoint ``seq`` of ``session`` in the new directory ``into``.

    The repository is cloned from ``repo`` (default: the one recorded) at the base commit, the tracked
    state checked out, the untracked files written from the manifest, and ``META_DIR`` filled with
    ``checkpoint.json`` (the expectations) and ``messages.json`` (the carried context). Refuses a
    non-empty ``into``; never writes outside it; only reads the original repository.
    Returns ``into``. Raises :class:`CheckpointError`.
    """
    cp = find(session, seq)
    into = Path(into).absolute()
    if into.exists() and (not into.is_dir() or any(into.iterdir())):
        raise CheckpointError(f"{into} is not empty; restore needs a new or empty directory")
    into.mkdir(parents=True, exist_ok=True)
    blobs = BlobStore(session.path / "blobs")
    source = cp.get("source")
    if source:
        origin = Path(repo or source["repo"])
        if not origin.exists():
            raise CheckpointError(
                f"the recorded repository {origin} is gone; pass --repo with a clone that has {source['base'][:12]}"
            )
        git(["clone", "--quiet", "--no-checkout", "--no-hardlinks", str(origin), str(into)], into.parent)
        env = {"GIT_ALTERNATE_OBJECT_DIRECTORIES": str((session.path / "git-objects").resolve())}
        git(["read-tree", "-u", "--reset", source["tree"]], into, env)
        git(["update-ref", "--no-deref", "HEAD", source["base"]], into)
        git(["reset", "--quiet", "--mixed", source["base"]], into, env)
        (into / ".git" / "info").mkdir(exist_ok=True)
        with open(into / ".git" / "info" / "exclude", "a") as f:
            f.write(f"\n/{META_DIR}/\n")
    links = []
    for rel, kind, mode, _size, h in (cp.get("workspace") or {}).get("manifest", []):
        target = _safe_target(into, rel)
        data = blobs.get(h)
        if kind == "symlink":
            links.append((target, data.decode("utf-8", "surrogateescape"), rel))
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(target, mode)
    for target, dest, rel in links:  # last, so no file is ever written through one
        _safe_target(into, rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(dest, target)
    meta = into / META_DIR
    meta.mkdir()
    expect = {
        "session": session.id,
        "seq": cp["seq"],
        "turn": cp.get("turn"),
        "boundary": cp["boundary"],
        "base": (source or {}).get("base"),
        "tree": (source or {}).get("tree"),
        "workspace_fingerprint": (cp.get("workspace") or {}).get("fingerprint"),
        "context_digest": cp.get("context_digest"),
        "referenced": cp.get("referenced", []),
        "mentioned_absent": cp.get("mentioned_absent", []),
        "include_ignored": False,
        "forkpoint": cp.get("forkpoint"),
    }
    (meta / "checkpoint.json").write_bytes(orjson.dumps(expect, option=orjson.OPT_INDENT_2))
    (meta / "messages.json").write_bytes(orjson.dumps(cp.get("context"), option=orjson.OPT_INDENT_2))
    return into


@dataclass
class Check:
    """One validation check: ``name``, ``ok``, and the ``expected`` and ``actual`` values."""

    name: str
    ok: bool
    expected: Any
    actual: Any


def validate(root: Path) -> list[Check]:
    """Check a restored directory against its checkpoint without any model.

    Checks: the tracked source tree hash, the workspace fingerprint, the carried messages' digest, that
    the checkpoint is a resumable boundary, and that every file the messages refer to exists.
    Raises :class:`CheckpointError` when ``root`` holds no restored checkpoint.
    """
    root = Path(root)
    try:
        expect = orjson.loads((root / META_DIR / "checkpoint.json").read_bytes())
        context = orjson.loads((root / META_DIR / "messages.json").read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise CheckpointError(f"{root}: no restored checkpoint here ({root / META_DIR}: {exc})") from None
    checks: list[Check] = []
    if expect.get("tree"):
        with tempfile.TemporaryDirectory(prefix="forkpoint-validate-") as tmp:
            actual_tree = source_state(root, expect["base"], Path(tmp) / "objects")["tree"]
        checks.append(Check("source tree hash", actual_tree == expect["tree"], expect["tree"], actual_tree))
    ws = workspace_state(root, None, include_ignored=bool(expect.get("include_ignored")))
    checks.append(
        Check(
            "workspace fingerprint",
            ws["fingerprint"] == expect["workspace_fingerprint"],
            expect["workspace_fingerprint"],
            ws["fingerprint"],
        )
    )
    actual_digest = digest(context) if context is not None else None
    checks.append(
        Check(
            "message digest",
            actual_digest == expect["context_digest"],
            expect["context_digest"],
            actual_digest,
        )
    )
    checks.append(
        Check("resumable boundary", expect["boundary"] == "resumable", "resumable", expect["boundary"])
    )
    absent_then = set(expect.get("mentioned_absent") or [])
    wanted = sorted(
        set(expect.get("referenced") or []) | (set(referenced_paths(context or {})) - absent_then)
    )
    missing = [p for p in wanted if not os.path.lexists(root / p)]
    checks.append(Check("referenced files exist", not missing, wanted, {"missing": missing}))
    return checks
