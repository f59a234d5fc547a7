"""Instructions, not seconds: forkpoint's record and replay paths counted by valgrind's callgrind.

On a shared 2-CPU machine the CPU time of one run moves by 10-30 % from run to run, more than most
changes to the record path are worth. Callgrind counts the instructions a process executes, the
same for the same program and input whatever else the machine does, so two versions of forkpoint
can be told apart by a few percent. Each figure is one interpreter under callgrind (fsync off: a
sync is waiting, not instructions), less an interpreter that only imports and warms up the same
code, so start-up is left out.

    python benchmarks/bench_instructions.py                       # this checkout, 100 turns
    python benchmarks/bench_instructions.py --compare a2b5d19     # and forkpoint at a revision
    python benchmarks/bench_instructions.py --workloads sdkless --turns 500   # one workload, longer
    python benchmarks/bench_instructions.py --workloads floor --turns 10     # replay against the floor

Workloads: the SDK-less loop of ``bench_targets.py`` (httpx2 ``MockTransport``, one tool call a
turn) plain, recorded and replayed; ``sdkless-cache``, the same loop with a cache marker on its last
two tool messages, moving on at every call (Anthropic's prompt caching); the bundled demo agent
(the real ``openai`` SDK, streamed, against the bundled model server in a thread of the same
process) live, recorded and replayed; and
``floor``: that agent answered from memory at the transport, without forkpoint (``bench_targets.py``'s
floor), against it replayed by forkpoint, both in-process: issue 15's in-process floor target, in
instructions, which do not move from run to run as CPU time does here. ``--compare
REV`` checks REV out in a temporary git worktree and runs the same workloads (this checkout's
definition of them) with that forkpoint first on ``PYTHONPATH``. Needs ``valgrind``; about 10 s a
figure (callgrind runs Python some 50 times slower).
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]

#: (workload, mode): what each figure runs after the warm-up; "none" is the warm-up alone.
FIGURES = {
    "sdkless": ("none", "plain", "record", "replay"),
    "sdkless-cache": ("none", "plain", "record", "replay"),
    "sdkless-stamp": ("none", "plain", "record", "replay"),
    "agent": ("none", "live", "record", "replay"),
    "floor": ("none", "floor", "replay"),
}
#: Issue 15's in-process target for replay against the floor (``bench_targets.py``'s ``floor`` row).
T_REPLAY_FLOOR_INPROC = 1.05
#: Runs of the floor and of its replay per figure (the figure is their mean): the floor's first run
#: after its warm-up counted 675 M instructions at 10 turns, its later runs 578 M each.
FLOOR_RUNS = 10


def child(workload: str, mode: str, turns: int) -> None:
    """Warm up (imports, first use), then run ``mode`` of ``workload`` once."""
    sys.path.insert(0, str(HERE.parent))
    import forkpoint

    os.chdir(tempfile.mkdtemp())
    if workload.startswith("sdkless"):
        import bench_targets as bt

        tool = bt.sdkless_tool()
        loop = functools.partial(bt.sdkless_loop, sent=bt.SDKLESS_ROWS[workload][0])
        with forkpoint.record(store="warm") as rec:
            loop(2, tool)
        with forkpoint.replay(rec.session_path):
            loop(2, tool)
        if mode == "plain":
            loop(turns, tool)
        elif mode in ("record", "replay"):
            with forkpoint.record(store="store") as rec:
                loop(turns, tool)
            if mode == "replay":
                with forkpoint.replay(rec.session_path):
                    loop(turns, tool)
        return
    import forkpoint.demo.agent as agent
    from forkpoint.demo.server import ModelServer

    if workload == "floor":
        floor(mode, turns)
        return
    with forkpoint.record(store="warm"), ModelServer(turns=2, seed=1) as server:
        agent.run_agent(server.base_url, Path("warm-work"), echo=None)
    if mode == "none":
        return
    with ModelServer(turns=turns, seed=5) as server:
        if mode == "live":
            agent.run_agent(server.base_url, Path("work"), echo=None)
            return
        with forkpoint.record(store="store") as rec:
            agent.run_agent(server.base_url, Path("work"), echo=None)
    if mode == "replay":
        with forkpoint.replay(rec.session_path):
            agent.run_agent(server.base_url, Path("replay-work"), echo=None)


def floor(mode: str, turns: int) -> None:
    """The demo agent answered from memory at the transport (``bench_targets.py``'s floor: the same
    agent code without forkpoint), or replayed by forkpoint, :data:`FLOOR_RUNS` times, after a
    warm-up that captures the answers, records the session and runs both once."""
    import bench_targets as bt

    import forkpoint
    import forkpoint.demo.agent as agent
    from forkpoint.demo.server import ModelServer

    module = bt.floor_agent()
    # (a fresh server for each: the same seed then gives the same conversation)
    with ModelServer(turns=turns, seed=5) as server:
        answers = bt.capture_answers(server.base_url, Path("capture"))
    with ModelServer(turns=turns, seed=5) as server, forkpoint.record(store="store") as rec:
        agent.run_agent(server.base_url, Path("work"), echo=None)
        recorded_url = server.base_url

    def replay(work: str) -> str:
        with forkpoint.replay(rec.session_path) as rp:
            got = agent.run_agent(recorded_url, Path(work), echo=None)
        report = rp.report()
        assert report["matched"] == report["recorded"] and report["divergence"] is None, report
        return got

    assert bt.run_floor(module, answers, Path("warm-floor")) == replay("warm-replay") == answers["answer"]
    # The set-up's garbage collected first, in both: what it left (imports, the record, the capture)
    # is what the interpreter's full collection walks, which lands in the runs of one figure or the
    # other as their allocations happen to add up (+30 M instructions in the 10 runs it lands in).
    gc.collect()
    for i in range(FLOOR_RUNS if mode != "none" else 0):
        if mode == "floor":
            bt.run_floor(module, answers, Path(f"floor-work-{i}"))
        elif mode == "replay":
            replay(f"replay-work-{i}")


def instructions(tree: Path, workload: str, mode: str, turns: int) -> int:
    """Instructions executed by one child interpreter (forkpoint from ``tree``)."""
    env = {**os.environ, "PYTHONPATH": str(tree), "FORKPOINT_FSYNC": "never"}
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, str(HERE)]
    done = subprocess.run(
        [*cmd, "--child", workload, mode, str(turns)], env=env, capture_output=True, text=True, check=False
    )
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"{workload} {mode} under callgrind failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def measure(tree: Path, turns: int, workloads: list[str]) -> dict[str, dict[str, float]]:
    """Millions of instructions of each mode, less the warm-up alone (replay: less the record)."""
    # Bytecode first: a fresh worktree (--compare) has none, and the first figure would count the
    # compiling of every module it imports, which the figure it is subtracted from does not.
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", str(tree / "forkpoint"), str(HERE.parent)], check=True
    )
    out: dict[str, dict[str, float]] = {}
    for workload in workloads:
        modes = FIGURES[workload]
        raw = {mode: instructions(tree, workload, mode, turns) for mode in modes}
        runs = FLOOR_RUNS if workload == "floor" else 1
        got = {m: (raw[m] - raw["none"]) / 1e6 / runs for m in modes if m != "none"}
        if "replay" in got and "record" in got:
            got["replay"] = (raw["replay"] - raw["record"]) / 1e6
        out[workload] = got
    return out


def report(label: str, m: dict[str, dict[str, float]]) -> None:
    print(f"  {label}")
    for workload, name in (
        ("sdkless", "SDK-less loop"),
        ("sdkless-cache", "with a moving cache marker"),
        ("sdkless-stamp", "with the time in its prompt"),
    ):
        if workload in m:
            s = m[workload]
            print(
                f"    {name}: plain {s['plain']:,.0f} M, record {s['record']:,.0f} M "
                f"({s['record'] / s['plain']:.3f}x), replay {s['replay']:,.0f} M ({s['replay'] / s['plain']:.3f}x)"
            )
    if "agent" in m:
        a = m["agent"]
        print(
            f"    demo agent: live {a['live']:,.0f} M, record {a['record']:,.0f} M "
            f"(overhead {a['record'] / a['live'] - 1:+.1%}; the model server's thread counts in both), "
            f"replay {a['replay']:,.0f} M"
        )
    if "floor" in m:
        f = m["floor"]
        ratio = f["replay"] / f["floor"]
        met = "MET" if ratio <= T_REPLAY_FLOOR_INPROC else "MISSED"
        print(
            f"    demo agent against the floor, in-process: floor {f['floor']:,.0f} M, replay "
            f"{f['replay']:,.0f} M ({ratio:.3f}x; target <= {T_REPLAY_FLOOR_INPROC:.2f}) {met}"
        )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--turns", type=int, default=100)
    p.add_argument("--compare", metavar="REV", help="also measure forkpoint at this git revision")
    p.add_argument(
        "--workloads",
        default=",".join(FIGURES),
        help=f"comma-separated, of: {', '.join(FIGURES)} (the SDK-less loop alone reaches 500 turns in minutes)",
    )
    p.add_argument("--child", nargs=3, metavar=("WORKLOAD", "MODE", "TURNS"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return 0
    workloads = [w for w in args.workloads.split(",") if w]
    if not workloads or set(workloads) - set(FIGURES):
        raise SystemExit(f"--workloads: expected some of {', '.join(FIGURES)}, got {args.workloads!r}")
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: this benchmark counts instructions with callgrind")
    print(
        f"instructions (millions, callgrind), {args.turns} turns, fsync off; python {sys.version.split()[0]}"
    )
    here = measure(REPO, args.turns, workloads)
    if not args.compare:
        report("this checkout", here)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "-q", "--detach", str(tree), args.compare], check=True
        )
        try:
            there = measure(tree, args.turns, workloads)
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
    report(f"at {args.compare}", there)
    report("this checkout", here)
    for workload, modes in here.items():
        for mode, value in modes.items():
            print(f"  {workload} {mode}: {value / there[workload][mode] - 1:+.1%} instructions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
