"""Checkpoint cost on generated repositories, next to plain git on the same repository.

    python benchmarks/bench_checkpoint.py [--sizes 1000,10000] [--repeat 5] [--attributes '* text=auto']

For each size: a repository of N small tracked files (generated and committed), then a small diff
(3 modified tracked files, 2 untracked scratch files). Measured, each the median of ``--repeat`` runs:

* the first checkpoint of a session (``first``), and the next one after one more file changed
  (``next``; content addressing: only what changed is hashed and stored), time and bytes added to
  the session directory;
* a steady checkpoint where nothing changed (``idle``);
* restore of the checkpoint into a fresh directory plus ``validate`` (``restore+validate``);
* ``git status --porcelain`` and ``git stash create`` on the same repository, for scale, and a
  local ``git clone`` (with checkout), the yardstick for a restore (it writes every file too).

``--attributes TEXT`` commits a ``.gitattributes`` of TEXT with the files: a checkpoint then looks
for tracked files a checkout would convert (read once, then only when their stat data changes).

Times are wall clock, so they include process start-up; the ratios are what to compare. The clone
and restore rows use at most 3 runs (they write every file). About 1-2 minutes in all.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from forkpoint.checkpoint import Workspace, checkpoint_event, restore, validate  # noqa: E402
from forkpoint.log import Session, SessionWriter  # noqa: E402
from forkpoint.record import make_header  # noqa: E402

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "bench",
    "GIT_AUTHOR_EMAIL": "bench@example.com",
    "GIT_COMMITTER_NAME": "bench",
    "GIT_COMMITTER_EMAIL": "bench@example.com",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
}


def sh(args: list[str], cwd: Path) -> str:
    return subprocess.run(args, cwd=cwd, env=GIT_ENV, check=True, capture_output=True, text=True).stdout


def make_repo(root: Path, n: int, attributes: str | None = None) -> Path:
    repo = root / f"repo-{n}"
    repo.mkdir()
    sh(["git", "init", "-q", "-b", "main"], repo)
    if attributes is not None:
        (repo / ".gitattributes").write_text(attributes + "\n")
    for i in range(n):
        d = repo / f"pkg{i // 100:03d}" / f"sub{(i // 10) % 10}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"mod{i:05d}.py").write_text(
            f'"""Module {i}."""\n\nVALUE = {i}\n\n\ndef f():\n    return VALUE * 2\n'
        )
    sh(["git", "add", "-A"], repo)
    sh(["git", "-c", "gc.auto=0", "commit", "-q", "-m", "base"], repo)
    sh(["git", "repack", "-adq"], repo)  # packed, as a cloned repository is (no background gc racing)
    sh(["git", "status", "--porcelain"], repo)  # a warm index, as in a repository someone works in
    return repo


def small_diff(repo: Path, n: int) -> list[Path]:
    """3 modified tracked files, 2 untracked scratch files; returns the modified files."""
    modified = [
        repo / f"pkg{i // 100:03d}" / f"sub{(i // 10) % 10}" / f"mod{i:05d}.py" for i in (0, n // 2, n - 1)
    ]
    for p in modified:
        p.write_text(p.read_text() + "\n# changed by the agent\n")
    (repo / "reproduce_issue.py").write_text("from pkg000.sub0.mod00000 import f\nassert f() == 0\n")
    (repo / "notes.txt").write_text("scratch notes\n" * 20)
    return modified


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def timed(fn: Callable[[], object]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def median_of(repeat: int, fn: Callable[[], float]) -> float:
    return statistics.median(fn() for _ in range(repeat))


def bench_size(root: Path, n: int, repeat: int, attributes: str | None = None) -> dict[str, float]:
    t0 = time.perf_counter()
    repo = make_repo(root, n, attributes)
    modified = small_diff(repo, n)
    setup = time.perf_counter() - t0
    out: dict[str, float] = {"setup_s": setup}

    out["git status"] = median_of(repeat, lambda: timed(lambda: sh(["git", "status", "--porcelain"], repo)))
    out["git stash create"] = median_of(repeat, lambda: timed(lambda: sh(["git", "stash", "create"], repo)))
    clones = []
    for r in range(min(repeat, 3)):  # writing every file is slow: three are enough
        target = root / f"clone-{n}-{r}"
        clones.append(
            timed(lambda t=target: sh(["git", "clone", "-q", "--no-hardlinks", str(repo), str(t)], root))
        )
        shutil.rmtree(target)
    out["git clone"] = statistics.median(clones)

    firsts, nexts, idles, first_bytes, next_bytes, restores = [], [], [], [], [], []
    last_session = None
    last_seq = 0
    for r in range(repeat):
        store = root / f"store-{n}-{r}"
        writer = SessionWriter.create(store, make_header(argv=["bench"]))
        ws = Workspace.open(repo, store)
        ws.objects = writer.path / "git-objects"

        def take(ws: Workspace = ws, writer: SessionWriter = writer) -> int:
            event = checkpoint_event(
                ws, writer.blobs, boundary="resumable", turn=1, context={"messages": []}, reason="bench"
            )
            if event.get("error"):
                raise RuntimeError(event["error"])
            return writer.append(event)

        size0 = dir_bytes(writer.path)
        firsts.append(timed(take))
        size1 = dir_bytes(writer.path)
        first_bytes.append(size1 - size0)
        target = modified[r % len(modified)]
        target.write_text(target.read_text() + f"# one more change {r}\n")
        t = time.perf_counter()
        last_seq = take()
        nexts.append(time.perf_counter() - t)
        next_bytes.append(dir_bytes(writer.path) - size1)
        idles.append(timed(take))
        writer.close()
        last_session = Session.load(writer.path)

        into = root / f"restored-{n}-{r}"

        def restore_and_validate(
            into: Path = into, session: Session = last_session, seq: int = last_seq
        ) -> None:
            restore(session, seq, into)
            failed = [c.name for c in validate(into) if not c.ok]
            if failed:
                raise RuntimeError(f"validation failed: {failed}")

        if r < 3:
            restores.append(timed(restore_and_validate))
            shutil.rmtree(into)
    out["checkpoint first"] = statistics.median(firsts)
    out["checkpoint next"] = statistics.median(nexts)
    out["checkpoint idle"] = statistics.median(idles)
    out["restore+validate"] = statistics.median(restores)
    out["bytes first"] = statistics.median(first_bytes)
    out["bytes next"] = statistics.median(next_bytes)
    out["repo .git bytes"] = dir_bytes(repo / ".git")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--sizes", default="1000,10000", help="tracked files per repository (comma-separated)"
    )
    parser.add_argument("--repeat", type=int, default=5, help="runs per measurement (median)")
    parser.add_argument("--attributes", help="a .gitattributes to commit with the files ('* text=auto')")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    git_version = subprocess.run(["git", "--version"], capture_output=True, text=True).stdout.strip()
    print(
        f"forkpoint checkpoint benchmark — {git_version}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs"
    )
    print("repository: N small tracked files; diff: 3 modified tracked files + 2 untracked scratch files")
    if args.attributes is not None:
        print(f".gitattributes: {args.attributes!r}")
    print(f"median of {args.repeat} runs\n")
    rows = []
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-") as tmp:
        for n in sizes:
            res = bench_size(Path(tmp), n, args.repeat, args.attributes)
            rows.append((n, res))
    status_w = max(len(f"{n:,}") for n in sizes) + 2
    header = (
        f"{'files':>{status_w}}  {'what':<18} {'time':>9}  {'÷ git status':>12}  {'÷ stash create':>14}  "
        f"{'÷ git clone':>11}  {'bytes':>10}"
    )
    print(header)
    print("-" * len(header))
    names = ("git status", "git stash create", "git clone", "checkpoint first", "checkpoint next")
    for n, res in rows:
        gs, sc, cl = res["git status"], res["git stash create"], res["git clone"]
        for name in (*names, "checkpoint idle", "restore+validate"):
            t = res[name]
            b = {"checkpoint first": res["bytes first"], "checkpoint next": res["bytes next"]}.get(name)
            print(
                f"{n:>{status_w},}  {name:<18} {t * 1000:>7.1f}ms  {t / gs:>11.2f}x  {t / sc:>13.2f}x  "
                f"{t / cl:>10.2f}x  {'' if b is None else f'{int(b):,}':>10}"
            )
        print(
            f"{'':>{status_w}}  (repository .git: {int(res['repo .git bytes']):,} bytes; setup {res['setup_s']:.1f}s)"
        )
    print(
        "\nfirst: first checkpoint of a session (hashes what the index's stat data does not vouch for);\n"
        "next: after one more change (only that file is hashed and stored); idle: nothing changed;\n"
        "bytes: growth of the session directory (git objects, blobs, the log line).\n"
        "restore+validate writes every file of the repository, as a local `git clone` (with checkout)\n"
        "does, then hashes them all again to validate: compare it with the clone."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
