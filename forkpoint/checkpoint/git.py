"""Running git for checkpoints: the user's repository read, never written; their config ignored
(the settings that change hashing or diffing are pinned), and loose objects written by hand.
"""

from __future__ import annotations

import functools
import os
import subprocess
import threading
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import CheckpointError
from ..patterns import compiled_later

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
HEX = compiled_later(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
#: The most paths a git command is given on its command line (past it the whole index is read:
#: a command line has its limits).
PATHS_MAX = 2000


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
        # the objects as stored: a checkpoint keeps refs/replace/*, and a restore makes them, so
        # trees and diffs read through them would differ between the two
        GIT_NO_REPLACE_OBJECTS="1",
        LC_ALL="C",
    )
    env.update(extra or {})
    return env


@functools.cache
def user_excludes_file() -> str | None:
    """The ignore file this user's git reads, when their own config names one
    (``core.excludesFile`` in ``~/.gitconfig`` or the system's): forkpoint's git commands read no
    such config, and would apply git's default (``~/.config/git/ignore``) instead. None when none
    is named (then that default is theirs too). Asked once a process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    try:
        found = subprocess.run(
            ["git", "config", "--path", "--get", "core.excludesFile"],
            cwd=os.path.expanduser("~") if os.path.isdir(os.path.expanduser("~")) else "/",
            env=env,
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return found.stdout.decode("utf-8", "surrogateescape").strip() or None


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
            _git_cmd(args, config),
            cwd=cwd,
            env=_git_env(env),
            input=input,
            capture_output=True,
            timeout=600,
            umask=_umask(env),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise CheckpointError(f"git {' '.join(args[:2])} could not run in {cwd}: {exc}") from None
    if check and proc.returncode != 0:
        raise CheckpointError(
            f"git {' '.join(args[:3])} failed in {cwd}: {proc.stderr.decode(errors='replace').strip()}"
        )
    return proc.stdout if binary else proc.stdout.decode("utf-8", "surrogateescape")


def git_start(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, config: Iterable[str] = ()
) -> subprocess.Popen[bytes]:
    """Start git (see :func:`git`) without waiting; finish with :func:`git_finish`."""
    try:
        return subprocess.Popen(
            _git_cmd(args, config),
            cwd=cwd,
            env=_git_env(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            umask=_umask(env),
        )
    except OSError as exc:
        raise CheckpointError(f"git {' '.join(args[:2])} could not run in {cwd}: {exc}") from None


def _umask(env: dict[str, str] | None) -> int:
    # git writing into a session's git-objects (or its private index) makes owner-only folders and
    # files whatever the user's umask; git working on a user's tree keeps the user's umask (-1).
    return 0o077 if env and "GIT_OBJECT_DIRECTORY" in env else -1


def git_finish(proc: subprocess.Popen[bytes], what: str) -> bytes:
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


def user_config(repo: Path, pattern: str) -> list[tuple[str, str, str]]:
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


def user_settings(repo: Path, git_dir: Path) -> tuple[tuple[str, ...], bool]:
    """What forkpoint takes from the user's git config (one ``git config`` call):

    * their ``filter.*`` settings (not in the repository's own config), as ``-c`` values:
      ``.gitattributes`` names filter drivers (git-lfs), and hashing without them would see every
      filtered file as changed;
    * whether the stat cache of their index means the same under the pinned settings: no
      line-ending conversion, no attributes file or ``ignoreStat`` of their own, no split index.
    """
    filters = []
    trusted = not any(git_dir.glob("sharedindex.*"))
    for scope, key, value in user_config(repo, r"^(filter\..*|core\.(autocrlf|attributesfile|ignorestat))$"):
        low = key.lower()
        if low.startswith("filter."):
            if scope not in ("local", "worktree"):
                filters.append(f"{key}={value}")
        elif low == "core.attributesfile":
            trusted = trusted and scope in ("local", "worktree")
        elif value.lower() not in ("false", "no", "off", "0"):  # autocrlf, ignorestat
            trusted = False
    return tuple(filters), trusted


def outside_work_trees(path: Path) -> bool:
    """Whether no folder from ``path`` up holds a ``.git`` (a folder, or the file of a linked work
    tree or submodule): then no git work tree contains it, and asking a git process is not needed
    (``forkpoint record`` asks twice, outside a repository too: ~1 ms of CPU each)."""
    path = Path(os.path.abspath(path))
    return not any(os.path.exists(folder / ".git") for folder in (path, *path.parents))


def repo_root(path: Path) -> Path | None:
    """The top of the git work tree containing ``path``, or None."""
    if outside_work_trees(path):  # (forkpoint's git ignores GIT_DIR: _git_env)
        return None
    try:
        out = git(["rev-parse", "--show-toplevel"], Path(path))
    except (CheckpointError, OSError):
        return None
    return Path(out.strip()) if out.strip() else None


def repo_head(path: Path) -> tuple[Path, str | None] | None:
    """``(top, commit)`` of the git work tree containing ``path``: its top folder and the commit its
    ``HEAD`` names (None when it has no commit yet); None when ``path`` is in no work tree. One git
    process (``rev-parse`` prints the top, then fails on a ``HEAD`` without a commit)."""
    try:
        out = git(
            ["rev-parse", "--show-toplevel", "--verify", "--quiet", "HEAD^{commit}"], Path(path), check=False
        )
    except (CheckpointError, OSError):
        return None
    lines = out.splitlines()
    if not lines or not lines[0].strip():
        return None
    commit = lines[1].strip() if len(lines) > 1 else ""
    return Path(lines[0].strip()), commit if HEX.fullmatch(commit) else None


def loose_path(objects: Path, sha: str) -> Path:
    return objects / sha[:2] / sha[2:]


def fsync_wanted() -> bool:
    """Objects are synced to disk like the log's events (``FORKPOINT_FSYNC``, default ``event``), so
    a checkpoint line that survived a crash has its objects too."""
    return os.environ.get("FORKPOINT_FSYNC", "event") == "event"


def write_loose(objects: Path, sha: str, kind: bytes, data: bytes, durable: bool = True) -> None:
    target = loose_path(objects, sha)
    if target.exists():
        return
    # mkdir(parents=True) gives parents the umask's mode: make git-objects/ itself owner-only too.
    objects.mkdir(parents=True, exist_ok=True, mode=0o700)
    target.parent.mkdir(exist_ok=True, mode=0o700)
    tmp = target.with_name(f".tmp-{os.getpid()}-{threading.get_ident()}-{target.name}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with open(fd, "wb") as f:
            f.write(zlib.compress(kind + b" %d\0" % len(data) + data, 1))
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o400)  # read-only, like git's own objects, and owner-only
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a failed write (a full disk) leaves no temp file behind
        raise
