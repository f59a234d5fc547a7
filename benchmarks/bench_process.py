"""Whole-process replay and start-up by instructions: where the two-process design's cost sits, and
what running the program in forkpoint's own interpreter would cost instead (issue 15, targets 1 and 4).

``forkpoint replay SESSION -- python agent.py`` runs the program in a second interpreter under a
parent that parses the command line (click), checks the session (its hash chain, its signature:
cryptography) and the kernel's network namespaces, sets the recorded ``PYTHONHASHSEED`` before the
program's interpreter starts, and writes the verdict when it ends. This benchmark counts, with
callgrind (``--trace-children=yes``: every process of the tree, each on its own line), on the
10-turn session of ``bench_targets.py``'s floor row (the demo agent, real ``openai`` SDK):

* **floor**: the agent answered from memory at the transport, its own process (the target's
  yardstick, as in ``bench_targets.py``);
* **replay**: ``forkpoint replay SESSION -- python bench_targets.py --child agent ...``, each process;
* **one interpreter**: what a replay in forkpoint's own interpreter would execute, approximated in
  one process: the command line's imports (``forkpoint.cli``, click), the parent's checks as
  ``forkpoint replay`` makes them (``verify_session``, the signature, the namespace probe), then
  ``forkpoint.replay(SESSION)`` around the program run with :func:`runpy.run_path`; plus, listed
  apart, one bare interpreter (``python -c pass``): the re-exec that setting the recorded
  ``PYTHONHASHSEED`` before the interpreter starts would take when the caller's differs. Not a
  mode forkpoint has: a measurement for the decision it needs (see benchmarks/README.md).

And for target 4 (``forkpoint record -- python -c pass`` within 3x ``python -c pass``): the
instructions of ``python -c pass``, ``import click``, ``import forkpoint.cli`` and the record's
process tree, with the least any launch that sets the hash seed before the program's interpreter
starts must execute (two interpreters).

    python benchmarks/bench_process.py            # about 4 minutes (callgrind runs Python ~50x slower)

Instruction counts do not move from run to run as CPU time does on a shared machine; they leave out
the kernel's work (fork, exec, page faults, fsync), which the CPU-time rows of ``bench_targets.py``
include.
"""

from __future__ import annotations

import argparse
import json
import re
import runpy
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
TARGETS = HERE.parent / "bench_targets.py"
PY = sys.executable
#: Issue 15's targets this benchmark speaks to.
T_REPLAY_FLOOR_PROCESS = 1.15
T_STARTUP_RATIO = 3.0


def callgrind(cmd: list[str], *, cwd: Path, env: dict[str, str]) -> list[tuple[int, str]]:
    """Instructions of every process ``cmd`` runs (its children too): ``(count, command)`` each, in
    the order they started. A child made by ``fork`` alone (no exec: the network-namespace probe)
    starts from its parent's count, so its count is the parent's at the fork, not work of its own.
    Raises SystemExit when the command fails."""
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}/cg.%p",
                "--trace-children=yes",
                *cmd,
            ],
            cwd=cwd,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd[:6])} ... failed under callgrind:\n{done.stderr[-2000:]}")
        found = []
        for path in sorted(Path(out).glob("cg.*"), key=lambda p: int(p.suffix[1:])):
            text = path.read_text(errors="replace")
            count = re.search(r"^summary: (\d+)", text, re.M)
            command = re.search(r"^cmd: (.*)$", text, re.M)
            if count and command:
                found.append((int(count.group(1)), command.group(1).strip()))
        return found


def one_interpreter(session: str, url: str, work: str) -> None:
    """The approximation of a replay in forkpoint's own interpreter (see the module docstring)."""
    import forkpoint.cli  # noqa: F401  (the command line and click, as `forkpoint replay` loads them)
    from forkpoint import netns, replay
    from forkpoint.checkpoint.verify import verify_session
    from forkpoint.log import Session
    from forkpoint.signing import doubt

    loaded = Session.load(Path(session), share_lists=True)
    assert not verify_session(loaded.path, git=False, values=False).problems
    doubt(loaded.path, loaded.id)
    netns.refused()
    with replay(loaded.path) as rp:
        sys.argv = [str(TARGETS), "--child", "agent", url, work]
        try:
            runpy.run_path(str(TARGETS), run_name="__main__")
        except SystemExit as exc:
            assert not exc.code, exc.code
    report = rp.report()
    assert report["matched"] == report["recorded"] and report["divergence"] is None, report


def show(label: str, rows: list[tuple[int, str]]) -> int:
    """Print each process and the sum; a process with the command line of one before it is taken
    for a fork of it (see :func:`callgrind`): shown, and left out of the sum (its own work, entering
    the namespaces and leaving, is a few million instructions)."""
    total = 0
    seen: set[str] = set()
    for n, command in rows:
        forked = command in seen
        seen.add(command)
        total += 0 if forked else n
        what = "  (a fork of the process above: its count there when it forked)" if forked else ""
        print(f"    {n / 1e6:9.1f} M  {command[:90]}{what}")
    print(f"  {label}: {total / 1e6:,.1f} M")
    return total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--turns", type=int, default=10)
    p.add_argument("--child", nargs=3, metavar=("SESSION", "URL", "WORK"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        one_interpreter(*args.child)
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: this benchmark counts instructions with callgrind")
    sys.path.insert(0, str(HERE.parent))
    import bench_targets as bt

    env = {**bt.env_with_repo(), "PYTHONHASHSEED": "0"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # (bytecode as users have it: compiled once, read after)
    subprocess.run([PY, "-m", "compileall", "-q", str(REPO / "forkpoint"), str(HERE.parent)], check=True)
    print(
        f"instructions (millions, callgrind, every process), {args.turns} turns; python {sys.version.split()[0]}"
    )
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        seed = 4000 + args.turns
        with bt.server_process(args.turns, seed) as url:
            answers = bt.capture_answers(url, tmp / "capture")
        (tmp / "answers.json").write_text(json.dumps(answers))
        store = tmp / "store"
        with bt.server_process(args.turns, seed) as url:
            subprocess.run(
                [PY, "-m", "forkpoint.cli", "record", "--store", str(store), "--", PY, str(TARGETS), "--child",
                 "agent", url, str(tmp / "recorded")], env=env, cwd=tmp, check=True, capture_output=True,
            )  # fmt: skip
        session = str(next(p.parent for p in store.glob("*/session.jsonl")))
        url = answers["base_url"]  # (the server is gone: every call is served)

        def run(label: str, cmd: list[str]) -> int:
            return show(label, callgrind(cmd, cwd=tmp, env=env))

        print("\n== replay, whole process ==")
        floor = run(
            "floor", [PY, str(TARGETS), "--child", "floor", str(tmp / "answers.json"), str(tmp / "fl")]
        )
        replayed = run(
            "forkpoint replay (every process)",
            [PY, "-m", "forkpoint.cli", "replay", session, "--", PY, str(TARGETS), "--child", "agent", url,
             str(tmp / "rp")],
        )  # fmt: skip
        one = run("one interpreter", [PY, str(HERE), "--child", session, url, str(tmp / "one")])
        bare = run("bare interpreter (a re-exec)", [PY, "-c", "pass"])
        budget = T_REPLAY_FLOOR_PROCESS * floor
        print(f"  target: replay <= {T_REPLAY_FLOOR_PROCESS:.2f}x the floor = {budget / 1e6:,.1f} M")
        print(f"  two processes (today):             {replayed / floor:.3f}x the floor")
        print(f"  one interpreter:                   {one / floor:.3f}x")
        print(f"  one interpreter and a re-exec:     {(one + bare) / floor:.3f}x")

        print("\n== start-up: forkpoint record -- python -c pass ==")
        click = run("import click", [PY, "-c", "import click"])
        cli = run("import forkpoint.cli", [PY, "-c", "import forkpoint.cli"])
        record = run(
            "forkpoint record -- python -c pass (every process)",
            [PY, "-m", "forkpoint.cli", "record", "--store", str(tmp / "s"), "--", PY, "-c", "pass"],
        )
        print(f"  target: <= {T_STARTUP_RATIO:.0f}x python -c pass = {T_STARTUP_RATIO * bare / 1e6:,.1f} M")
        print(f"  today:                                           {record / bare:.2f}x")
        # (the least any launch that sets the seed before the program's interpreter starts runs)
        print("  two bare interpreters:                           2.00x")
        print(f"  those and click's import:                        {(bare + click) / bare:.2f}x")
        print(f"  those and forkpoint.cli's import:                {(bare + cli) / bare:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
