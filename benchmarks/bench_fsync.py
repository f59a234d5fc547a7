"""What durability costs: recording under ``FORKPOINT_FSYNC=event`` (the default), ``close`` and ``never``.

Run with ``python benchmarks/bench_fsync.py [--turns 20] [--repeat 5] [--events 500] [--dir DIR]``.
The store goes under ``--dir`` (default: a temporary directory under the current one, so it is on
the disk you work on, not on a tmpfs where fsync costs nothing).

Two measurements per policy, medians over ``--repeat`` runs:

* **agent**: the bundled demo agent (real ``openai`` SDK, streamed answers, two tools) recorded
  in-process against the local model server for ``--turns`` tool-using turns, with workspace
  checkpoints (blobs and git objects are written, and synced under ``event``);
* **appends**: ``--events`` small events appended by one writer (the per-event cost alone).

Ratios are against ``never``.
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
from pathlib import Path

import forkpoint
from forkpoint.demo.agent import run_agent
from forkpoint.demo.server import ModelServer
from forkpoint.log import FSYNC_POLICIES, SessionWriter


def _repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=b", "-c", "user.email=b@example.com"]
    subprocess.run([*git, "init", "-q", "-b", "main"], cwd=repo, check=True)
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    subprocess.run([*git, "add", "calc.py"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "init"], cwd=repo, check=True)
    return repo


def agent_run(root: Path, base_url: str, turns: int, policy: str) -> float:
    os.environ["FORKPOINT_FSYNC"] = policy
    repo = _repo(root)
    t0 = time.perf_counter()
    with forkpoint.record(store=root / "store", workspace=repo):
        run_agent(base_url, repo / "work", echo=None, max_turns=turns + 5)
    return time.perf_counter() - t0


def appends(root: Path, n: int, policy: str) -> float:
    w = SessionWriter.create(root / "store", {"argv": ["bench"]}, fsync=policy)
    t0 = time.perf_counter()
    for i in range(n):
        w.append({"type": "note", "text": f"event {i}", "data": {"i": i, "payload": "x" * 200}})
    w.close()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=20)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--events", type=int, default=500)
    ap.add_argument("--dir", type=Path, default=Path.cwd())
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="forkpoint-bench-fsync-", dir=args.dir))
    fs = subprocess.run(["df", "-T", str(base)], capture_output=True, text=True).stdout.splitlines()[-1:]
    print(f"store under {base} ({' '.join(fs[0].split()[:2]) if fs else 'unknown filesystem'})")
    agent: dict[str, list[float]] = {p: [] for p in FSYNC_POLICIES}
    append: dict[str, list[float]] = {p: [] for p in FSYNC_POLICIES}
    try:
        for r in range(args.repeat):
            with ModelServer(turns=args.turns, seed=1000 + r) as server:
                for policy in FSYNC_POLICIES:  # same seed, same conversation for every policy
                    d = base / f"agent-{policy}-{r}"
                    d.mkdir()
                    agent[policy].append(agent_run(d, server.base_url, args.turns, policy))
            for policy in FSYNC_POLICIES:
                d = base / f"append-{policy}-{r}"
                d.mkdir()
                append[policy].append(appends(d, args.events, policy))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    never_a = statistics.median(agent["never"])
    never_e = statistics.median(append["never"])
    print(f"\n{'policy':8s} {'agent run':>12s} {'ratio':>7s}   {'per event':>11s} {'ratio':>7s}")
    for policy in FSYNC_POLICIES:
        a = statistics.median(agent[policy])
        e = statistics.median(append[policy])
        print(
            f"{policy:8s} {a * 1000:10.1f} ms {a / never_a:6.2f}x   {e / args.events * 1e6:8.1f} µs {e / never_e:6.2f}x"
        )
    print(f"\n(agent: {args.turns} tool-using turns with checkpoints; appends: {args.events} small events)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
