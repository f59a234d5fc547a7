"""How fast ``forkpoint check`` replays a library of demo sessions: sessions per second by library
size, one at a time against one per core, and the local executor against Ray on this machine.

    python benchmarks/bench_check.py                          # 25, 50, 100, 200 sessions
    python benchmarks/bench_check.py --sizes 20,40 --skip-ray --json out.json

The library: N runs of the bundled demo agent (``forkpoint.demo.agent``: the real openai SDK,
streamed Chat Completions, two ``@forkpoint.tool`` tools) against the bundled stochastic model server
(``ModelServer(turns=2)``: three model calls and two tool calls a run), recorded in this process
with the command that runs the agent again; then the server is stopped. Each check is
``forkpoint.suite.check_sessions`` — what ``forkpoint check`` runs, without the CLI's own start-up —
over the whole store, every session replayed by a fresh ``python -m forkpoint.demo.agent`` child,
and must report every session reproduced. Measured for each size and executor: wall time, sessions
per second, seconds per session, the CPU the machine spent meanwhile (busy time of all cores from
``/proc/stat`` over wall time × cores: other work on the machine counts too), how many replays
were running at once on average (their summed times over the wall time), the 1-minute load average
before the run, and for the local executor the CPU seconds its replays took each. Executors:
``local`` with ``--jobs 1`` (the smallest two sizes only, for the speed-up), ``local`` with one job
per core, and ``ray`` (a Ray instance this script starts on loopback with one CPU per core, usage
statistics and token authentication off; its start-up is timed apart, once).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import forkpoint
from forkpoint.demo.agent import run_agent
from forkpoint.demo.server import ModelServer
from forkpoint.executors import Executor, open_executor
from forkpoint.suite import check_sessions, counts, select


def cpu_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all cores since boot, from the first line of /proc/stat."""
    fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


def record_library(store: Path, n: int, work: Path) -> None:
    with ModelServer(turns=2, seed=7) as srv:
        for i in range(n):
            workdir = work / f"w{i}"
            argv = [
                "python",
                "-m",
                "forkpoint.demo.agent",
                "--base-url",
                srv.openai_base_url,
                "--workdir",
                str(workdir),
            ]
            with forkpoint.record(name=f"demo-{i}", store=store, argv=argv):
                run_agent(srv.openai_base_url, workdir, echo=None)


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children: the local executor's replays."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed_check(store: Path, executor: Executor, cwd: Path) -> dict[str, Any]:
    selection = select([str(store)])
    load = os.getloadavg()[0]
    busy0, total0 = cpu_busy()
    cpu0 = children_cpu()
    t0 = time.perf_counter()
    rows = check_sessions(selection, executor=executor, cwd=cwd)
    wall = time.perf_counter() - t0
    busy1, total1 = cpu_busy()
    cpu = children_cpu() - cpu0
    found = counts(rows)
    if found != {"reproduced": len(rows)}:
        bad = next(r for r in rows if r["status"] != "reproduced")
        raise SystemExit(f"not every session reproduced: {found}; first: {bad['status']} {bad['detail']}")
    return {
        "sessions": len(rows),
        "seconds": round(wall, 3),
        "sessions_per_second": round(len(rows) / wall, 3),
        "seconds_per_session": round(wall / len(rows), 4),
        "cpu_busy": round((busy1 - busy0) / max(1e-9, total1 - total0), 3),
        # Replays running at once, on average: their summed times over the wall time.
        "in_flight": round(sum(r["seconds"] for r in rows) / wall, 2),
        # Ray's workers are not this process's children: only the local executor's CPU is counted.
        "child_cpu_per_session": round(cpu / len(rows), 4) if executor.name == "local" else None,
        "load_before": round(load, 2),
        "workers": executor.workers,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="25,50,100,200", help="library sizes (comma-separated)")
    parser.add_argument("--skip-ray", action="store_true", help="measure the local executor only")
    parser.add_argument("--json", metavar="FILE", help="write every measurement as JSON")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    cores = os.cpu_count() or 1
    # The replayed command is `python …`: the interpreter this script runs in, forkpoint installed.
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    os.environ.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    tmp = Path(tempfile.mkdtemp(prefix="forkpoint-bench-check-"))
    results: list[dict[str, Any]] = []
    try:
        t0 = time.perf_counter()
        stores = {}
        for n in sizes:
            stores[n] = tmp / f"store-{n}"
            record_library(stores[n], n, tmp / f"work-{n}")
        print(
            f"recorded {sum(sizes)} demo sessions in {time.perf_counter() - t0:.1f} s ({cores} cores)",
            flush=True,
        )
        plans: list[tuple[str, int | None, list[int]]] = [("local", 1, sizes[:2]), ("local", None, sizes)]
        if not args.skip_ray:
            plans.append(("ray", None, sizes))
        for name, jobs, todo in plans:
            t0 = time.perf_counter()
            with open_executor(name, jobs=jobs) as ex:
                started = time.perf_counter() - t0
                label = f"{name} --jobs {ex.workers}" if name == "local" else f"ray ({ex.workers} CPUs)"
                if name == "ray":
                    print(f"{label}: Ray started in {started:.1f} s")
                timed_check(stores[todo[0]], ex, tmp)  # warm-up: Ray's workers, the page cache
                for n in todo:
                    r = {"executor": label, **timed_check(stores[n], ex, tmp)}
                    results.append(r)
                    cpu = r["child_cpu_per_session"]
                    print(
                        f"{label:>18}: {n:>4} sessions in {r['seconds']:7.1f} s = {r['sessions_per_second']:5.2f}/s, "
                        f"{r['seconds_per_session']:.3f} s each, {r['in_flight']:.2f} at once, "
                        f"CPU busy {r['cpu_busy']:.0%}"
                        + (f", {cpu:.2f} CPU s per replay" if cpu is not None else "")
                        + f" (load average before: {r['load_before']})",
                        flush=True,
                    )
        print()
        for label in dict.fromkeys(r["executor"] for r in results):
            mine = [r for r in results if r["executor"] == label]
            per = [r["seconds_per_session"] for r in mine]
            spread = (max(per) - min(per)) / statistics.mean(per) if len(per) > 1 else 0.0
            print(
                f"{label:>18}: seconds per session {min(per):.3f}–{max(per):.3f} over {len(mine)} sizes (spread {spread:.0%})"
            )
        one = {r["sessions"]: r["seconds"] for r in results if r["executor"].endswith("--jobs 1")}
        full = {r["sessions"]: r["seconds"] for r in results if r["executor"] == f"local --jobs {cores}"}
        for n in sorted(set(one) & set(full)):
            print(f"speed-up of {cores} jobs over 1 at {n} sessions: {one[n] / full[n]:.2f}×")
        if args.json:
            meta = {"python": platform.python_version(), "cores": cores, "forkpoint": forkpoint.__version__}
            Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=2))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
