"""Record/replay benchmark: forkpoint against vcrpy (and a plain live run) on the bundled demo agent.

Run with ``python benchmarks/bench_record_replay.py`` (see ``benchmarks/README.md``). Everything
happens in this one process: the scripted model server (``forkpoint.demo.server.ModelServer``)
runs in a background thread, the demo agent (``forkpoint.demo.agent.run_agent``) talks to it with
the real ``openai`` SDK over loopback HTTP.

For each number of turns T and each repetition, with one fixed seed per repetition (so every
mode sees the same conversation, byte for byte):

* live: the agent alone (no recorder);
* forkpoint record (``FORKPOINT_FSYNC=event``, the default) and once more with ``never``;
* vcrpy record (``record_mode="all"``, ``match_on=["method", "uri", "body"]``);
* forkpoint replay and vcrpy replay (``record_mode="none"``), both with the server stopped.

The medians over the repetitions are printed as one table per T, with ratios and a verdict.

``--compare REV`` measures this checkout against another commit of forkpoint instead (the redesign
was held to "no slowdown" this way): forkpoint-only repetitions (live, record, replay) run in fresh
interpreters, alternating between the two versions (``git archive REV`` on ``PYTHONPATH`` for the
baseline), and the medians are printed side by side with their ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import forkpoint
import forkpoint.demo.agent as demo_agent
from forkpoint.demo.server import ModelServer

#: Targets this benchmark checks forkpoint against.
TARGET_BYTES_RATIO = 0.10  # forkpoint bytes < 1/10 of vcrpy's cassette
TARGET_REPLAY_RATIO = 0.50  # forkpoint replay < 1/2 of vcrpy's replay time
#: From this many turns on, a run takes about a minute (vcrpy alone ~50 s): repeat less by default.
LARGE_T = 100
MATCH_ON = ["method", "uri", "body"]
BASE_SEED = 1000


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def dir_bytes(path: Path) -> int:
    """Sum of the sizes of all regular files under ``path`` (or of ``path`` itself)."""
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@contextlib.contextmanager
def env_var(name: str, value: str) -> Iterator[None]:
    """Set an environment variable for the block, then restore its previous state."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


@contextlib.contextmanager
def timed_tools() -> Iterator[list[float]]:
    """Wrap the demo agent's tools with a timer; yields a one-item list holding the seconds spent.

    ``run_agent`` looks its tools up in ``forkpoint.demo.agent.TOOLS``, so swapping the entries there
    times every tool call (with no forkpoint runtime active the ``@forkpoint.tool`` wrapper just calls
    the body).
    """
    spent = [0.0]
    originals = dict(demo_agent.TOOLS)

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - t0

        return timed

    demo_agent.TOOLS.update({name: wrap(fn) for name, fn in originals.items()})
    try:
        yield spent
    finally:
        demo_agent.TOOLS.update(originals)


def agent(base_url: str, workdir: Path) -> str:
    """One run of the demo agent, silent; returns its final answer."""
    return demo_agent.run_agent(base_url, workdir, echo=None)


def filesystem(path: Path) -> str:
    """Type and device of the file system holding ``path`` (from /proc/mounts), or "unknown"."""
    best, kind = "", "unknown"
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind
    target = str(path.resolve())
    for line in mounts:
        fields = line.split()
        if len(fields) < 3:
            continue
        point = fields[1]
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, f"{fields[2]} on {fields[0]}, mounted at {point}"
    return kind


def loadavg() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def clock() -> float:
    gc.collect()
    return time.perf_counter()


# --------------------------------------------------------------------------------------------
# The five modes
# --------------------------------------------------------------------------------------------


def run_live(turns: int, seed: int, work: Path) -> tuple[float, str]:
    with ModelServer(turns=turns, seed=seed) as server:
        t0 = clock()
        answer = agent(server.base_url, work)
        return time.perf_counter() - t0, answer


@contextlib.contextmanager
def timed_syncs() -> Iterator[list[float]]:
    """Time every ``os.fsync``/``os.fdatasync`` call in the block; yields ``[seconds, calls]``."""
    spent = [0.0, 0]
    originals = {name: getattr(os, name) for name in ("fsync", "fdatasync")}

    def wrap(fn: Callable[[int], None]) -> Callable[[int], None]:
        def timed(fd: int) -> None:
            t0 = time.perf_counter()
            try:
                fn(fd)
            finally:
                spent[0] += time.perf_counter() - t0
                spent[1] += 1

        return timed

    for name, fn in originals.items():
        setattr(os, name, wrap(fn))
    try:
        yield spent
    finally:
        for name, fn in originals.items():
            setattr(os, name, fn)


def run_fp_record(turns: int, seed: int, work: Path, store: Path, fsync: str) -> dict[str, Any]:
    with env_var("FORKPOINT_FSYNC", fsync), ModelServer(turns=turns, seed=seed) as server:
        with timed_syncs() as syncs:
            t0 = clock()
            with forkpoint.record(store=store, name=f"bench-{turns}-{fsync}") as rec:
                answer = agent(server.base_url, work)
            seconds = time.perf_counter() - t0
        url = server.base_url
    events = forkpoint.Session.load(rec.session_path).events
    tool_ms = sum(e["duration_ms"] for e in events if e["type"] == "tool_call")
    return {
        "seconds": seconds,
        "answer": answer,
        "path": rec.session_path,
        "url": url,
        "bytes": dir_bytes(rec.session_path),
        "events": len(events),
        "model_calls": sum(1 for e in events if e["type"] == "model_call"),
        "tool_calls": sum(1 for e in events if e["type"] == "tool_call"),
        "tool_seconds": tool_ms / 1000,
        "sync_seconds": syncs[0],
        "sync_calls": syncs[1],
    }


def run_fp_replay(session_path: Path, url: str, work: Path, expected: str) -> float:
    t0 = clock()
    with forkpoint.replay(session_path) as rp:
        answer = agent(url, work)
    seconds = time.perf_counter() - t0
    report = rp.report()
    assert answer == expected, f"forkpoint replay answer differs: {answer!r} != {expected!r}"
    assert report["matched"] == report["recorded"], f"forkpoint replay: {report}"
    assert not report["unused"], f"forkpoint replay left events unused: {report['unused']}"
    assert report["divergence"] is None and not report["network_blocked"], report
    return seconds


def run_vcr_record(turns: int, seed: int, work: Path, cassette: Path) -> dict[str, Any]:
    import vcr

    recorder = vcr.VCR(record_mode="all", match_on=MATCH_ON)
    with ModelServer(turns=turns, seed=seed) as server:
        t0 = clock()
        with recorder.use_cassette(str(cassette)):
            answer = agent(server.base_url, work)
        seconds = time.perf_counter() - t0
        url = server.base_url
    return {"seconds": seconds, "answer": answer, "url": url, "bytes": dir_bytes(cassette)}


def run_vcr_replay(cassette: Path, url: str, work: Path, expected: str) -> tuple[float, float]:
    """Seconds of the replay, and seconds of it spent inside tool bodies (vcrpy runs them)."""
    import vcr

    player = vcr.VCR(record_mode="none", match_on=MATCH_ON)
    with timed_tools() as tool_seconds:
        t0 = clock()
        with player.use_cassette(str(cassette)):
            answer = agent(url, work)
        seconds = time.perf_counter() - t0
    assert answer == expected, f"vcrpy replay answer differs: {answer!r} != {expected!r}"
    return seconds, tool_seconds[0]


def forkpoint_only(turns: int, seed: int) -> dict[str, Any]:
    """Live, forkpoint record (fsync per event) and replay once, same seed (for ``--compare``)."""
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-") as tmp:
        root = Path(tmp)
        live_s, live_answer = run_live(turns, seed, root / "w-live")
        cpu0 = time.process_time()
        rec = run_fp_record(turns, seed, root / "w-fp-rec", root / "store", "event")
        cpu1 = time.process_time()
        fp_replay_s = run_fp_replay(rec["path"], rec["url"], root / "w-fp-replay", rec["answer"])
        cpu2 = time.process_time()
        assert live_answer == rec["answer"], "live and forkpoint runs saw different conversations"
        return {
            "seed": seed,
            "live_s": live_s,
            "fp_record_s": rec["seconds"],
            "fp_replay_s": fp_replay_s,
            "fp_record_cpu_s": cpu1 - cpu0,
            "fp_replay_cpu_s": cpu2 - cpu1,
            "fp_bytes": rec["bytes"],
        }


def compare(rev: str, turns: int, repeat: int) -> int:
    """This checkout against commit ``rev``: ``repeat`` forkpoint-only repetitions at ``turns``, each
    in a fresh interpreter, alternating the two versions; prints medians and their ratio."""
    here = Path(__file__).resolve()
    repo = here.parents[1]
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-base-") as tmp:
        base = Path(tmp) / "baseline"
        base.mkdir()
        archive = subprocess.run(
            ["git", "-C", str(repo), "archive", rev, "forkpoint"], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
        versions = {"baseline": base, "this checkout": repo}
        samples: dict[str, list[dict[str, Any]]] = {name: [] for name in versions}
        for i in range(repeat):
            order = list(versions) if i % 2 == 0 else list(reversed(versions))
            for name in order:
                out = Path(tmp) / f"{name.replace(' ', '-')}-{i}.json"
                env = {**os.environ, "PYTHONPATH": str(versions[name])}
                cmd = [
                    sys.executable,
                    str(here),
                    "--forkpoint-only",
                    "--turns",
                    str(turns),
                    "--seed-offset",
                    str(i),
                    "--json",
                    str(out),
                ]
                subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
                samples[name].append(json.loads(out.read_text())["samples"][str(turns)][0])
    m = {name: summarize(rows) for name, rows in samples.items()}
    print(
        f"forkpoint at {turns} turns: this checkout vs {rev}, {repeat} repetitions each, alternating, medians"
    )
    print(f"{'':28}{'baseline':>12}{'this checkout':>16}{'ratio':>9}")
    worst = 0.0
    for key, what in (
        ("live_s", "live run (s)"),
        ("fp_record_s", "record (s)"),
        ("fp_replay_s", "replay (s)"),
        ("fp_record_cpu_s", "record CPU (s)"),
        ("fp_replay_cpu_s", "replay CPU (s)"),
        ("fp_bytes", "session bytes"),
    ):
        a, b = m["baseline"][key], m["this checkout"][key]
        ratio = b / a if a else float("nan")
        if key in ("fp_record_s", "fp_replay_s"):
            worst = max(worst, ratio)
        print(f"{what:28}{a:12.3f}{b:16.3f}{ratio:9.3f}")
    verdict = "met" if worst <= 1.05 else "MISSED"
    print(f"record and replay time within 5% of {rev}: {verdict} (worst ratio {worst:.3f})")
    return 0


def one_repetition(turns: int, seed: int) -> dict[str, Any]:
    """All modes once, same seed; every run in a fresh working directory."""
    import vcr  # noqa: F401 - only the full comparison needs vcrpy

    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-") as tmp:
        root = Path(tmp)
        live_s, live_answer = run_live(turns, seed, root / "w-live")
        rec = run_fp_record(turns, seed, root / "w-fp-rec", root / "store", "event")
        rec_never = run_fp_record(turns, seed, root / "w-fp-rec-never", root / "store", "never")
        vrec = run_vcr_record(turns, seed, root / "w-vcr-rec", root / "cassette.yaml")
        # Servers are stopped from here on: the replays must not need them.
        fp_replay_s = run_fp_replay(rec["path"], rec["url"], root / "w-fp-replay", rec["answer"])
        vcr_replay_s, vcr_tool_s = run_vcr_replay(
            root / "cassette.yaml", vrec["url"], root / "w-vcr-replay", vrec["answer"]
        )
        same = live_answer == rec["answer"] == rec_never["answer"] == vrec["answer"]
        assert same, "live, forkpoint and vcrpy runs saw different conversations with the same seed"
        return {
            "seed": seed,
            "live_s": live_s,
            "fp_record_s": rec["seconds"],
            "fp_record_fsync_never_s": rec_never["seconds"],
            "fp_replay_s": fp_replay_s,
            "fp_bytes": rec["bytes"],
            "vcr_record_s": vrec["seconds"],
            "vcr_replay_s": vcr_replay_s,
            "vcr_replay_tool_s": vcr_tool_s,
            "vcr_replay_excl_tools_s": vcr_replay_s - vcr_tool_s,
            "vcr_bytes": vrec["bytes"],
            "fp_recorded_tool_s": rec["tool_seconds"],
            "fp_fsync_s": rec["sync_seconds"],
            "fp_fsync_calls": rec["sync_calls"],
            "fp_fsync_never_calls": rec_never["sync_calls"],
            "events": rec["events"],
            "model_calls": rec["model_calls"],
            "tool_calls": rec["tool_calls"],
        }


def warm_up() -> None:
    """One untimed tiny run of every mode: imports, first-time hook installation, caches."""
    one_repetition(2, BASE_SEED - 1)


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def median(samples: list[dict[str, Any]], key: str) -> float:
    return float(statistics.median(s[key] for s in samples))


def summarize(samples: list[dict[str, Any]]) -> dict[str, float]:
    return {key: median(samples, key) for key in samples[0] if key != "seed"}


def fmt_s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def fmt_b(x: float | None) -> str:
    return "-" if x is None else f"{int(x):,}"


def print_table(turns: int, m: dict[str, float], n: int) -> None:
    calls = f"{int(m['model_calls'])} model calls + {int(m['tool_calls'])} tool calls"
    print(f"\n== T = {turns} turns ({calls}; median of {n} run{'s' if n != 1 else ''}) ==")
    rows = [
        (
            "record time (s) [live: plain run]",
            fmt_s(m["live_s"]),
            fmt_s(m["fp_record_s"]),
            fmt_s(m["vcr_record_s"]),
        ),
        ("replay time (s)", "-", fmt_s(m["fp_replay_s"]), fmt_s(m["vcr_replay_s"])),
        (
            "  replay excluding tool bodies (s)",
            "-",
            fmt_s(m["fp_replay_s"]),
            fmt_s(m["vcr_replay_excl_tools_s"]),
        ),
        ("bytes on disk", "-", fmt_b(m["fp_bytes"]), fmt_b(m["vcr_bytes"])),
    ]
    print(f"{'':36}{'live':>12}{'forkpoint':>14}{'vcrpy':>14}")
    for label, a, b, c in rows:
        print(f"{label:36}{a:>12}{b:>14}{c:>14}")
    overhead = (m["fp_record_s"] / m["live_s"] - 1) * 100
    print(f"{'forkpoint bytes / vcrpy bytes':44}{m['fp_bytes'] / m['vcr_bytes']:8.3f}")
    print(
        f"{'forkpoint replay / vcrpy replay':44}{m['fp_replay_s'] / m['vcr_replay_s']:8.3f}"
        f"   (vs vcrpy replay excluding tool bodies: {m['fp_replay_s'] / m['vcr_replay_excl_tools_s']:.3f})"
    )
    print(f"{'forkpoint replay / live':44}{m['fp_replay_s'] / m['live_s']:8.3f}")
    print(f"{'forkpoint record overhead vs live (%)':44}{overhead:+8.1f}")
    per_event = (m["fp_record_s"] - m["fp_record_fsync_never_s"]) / m["events"] * 1000
    print(
        f"fsync: forkpoint record {m['fp_record_s']:.3f} s with FORKPOINT_FSYNC=event, "
        f"{m['fp_record_fsync_never_s']:.3f} s with never ({per_event:+.2f} ms per event, "
        f"{int(m['events'])} events); timed directly: {m['fp_fsync_s']:.3f} s in "
        f"{int(m['fp_fsync_calls'])} fsync/fdatasync calls "
        f"({m['fp_fsync_s'] / max(m['fp_fsync_calls'], 1) * 1000:.2f} ms each) with event, "
        f"{int(m['fp_fsync_never_calls'])} calls with never"
    )
    print(
        f"tool bodies: {m['vcr_replay_tool_s']:.3f} s inside tools during the vcrpy replay (timed); "
        f"{m['fp_recorded_tool_s']:.3f} s recorded as tool_call durations by forkpoint"
    )


def verdict(results: dict[int, dict[str, float]], turns_list: list[int]) -> list[str]:
    lines = ["", "== Verdict (measured) =="]
    for label, target, num, den in (
        ("bytes: forkpoint < 1/10 of vcrpy", TARGET_BYTES_RATIO, "fp_bytes", "vcr_bytes"),
        ("replay: forkpoint < 1/2 of vcrpy", TARGET_REPLAY_RATIO, "fp_replay_s", "vcr_replay_s"),
        (
            "replay: forkpoint < 1/2 of vcrpy excluding tool bodies",
            TARGET_REPLAY_RATIO,
            "fp_replay_s",
            "vcr_replay_excl_tools_s",
        ),
    ):
        parts = []
        for t in turns_list:
            r = results[t][num] / results[t][den]
            parts.append(f"T={t}: {r:.3f} {'MET' if r < target else 'MISSED'}")
        lines.append(f"{label:56} " + "; ".join(parts))
    for a, b in zip(turns_list, turns_list[1:], strict=False):
        fp = results[b]["fp_bytes"] / results[a]["fp_bytes"]
        vc = results[b]["vcr_bytes"] / results[a]["vcr_bytes"]
        k = b / a
        lines.append(
            f"growth: bytes at {b} turns / bytes at {a} turns (turns x{k:g}; linear ~{k:g}, "
            f"quadratic ~{k * k:g}): forkpoint {fp:.2f}, vcrpy {vc:.2f}"
        )
    return lines


def profile_forkpoint(turns: int, top: int = 10) -> None:
    """cProfile one forkpoint record and one replay at ``turns``; print the top functions of forkpoint/."""
    pkg = Path(forkpoint.__file__).resolve().parent
    demo = pkg / "demo"

    def show(title: str, prof: cProfile.Profile) -> None:
        stats = pstats.Stats(prof)
        total = stats.total_tt  # type: ignore[attr-defined]
        rows = []
        for (filename, line, func), (_cc, nc, tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
            path = Path(filename).resolve() if filename.startswith("/") else None
            if path is None or not path.is_relative_to(pkg) or path.is_relative_to(demo):
                continue
            rows.append((ct, tt, nc, f"{path.relative_to(pkg.parent)}:{line}({func})"))
        rows.sort(reverse=True)
        print(f"\n-- cProfile, {title} at {turns} turns: {total:.3f} s profiled; top {top} in forkpoint/ --")
        print(f"{'cumtime':>9}{'tottime':>9}{'ncalls':>9}  function")
        for ct, tt, nc, name in rows[:top]:
            print(f"{ct:9.3f}{tt:9.3f}{nc:9d}  {name}")

    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-prof-") as tmp:
        root = Path(tmp)
        with ModelServer(turns=turns, seed=BASE_SEED) as server:
            url = server.base_url
            prof = cProfile.Profile()
            prof.enable()
            with forkpoint.record(store=root / "store") as rec:
                expected = agent(url, root / "w-rec")
            prof.disable()
        show("forkpoint record", prof)
        prof = cProfile.Profile()
        prof.enable()
        with forkpoint.replay(rec.session_path):
            answer = agent(url, root / "w-replay")
        prof.disable()
        assert answer == expected
        show("forkpoint replay", prof)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--turns", default="10,50,100", help="comma-separated turn counts (default 10,50,100)"
    )
    parser.add_argument("--repeat", type=int, default=3, help="repetitions per T, median taken (default 3)")
    parser.add_argument(
        "--repeat-large",
        type=int,
        default=1,
        help=f"repetitions for T >= {LARGE_T} (default 1, to keep the default run under ~5 minutes; "
        "at most --repeat)",
    )
    parser.add_argument("--json", type=Path, help="also write all samples and medians to this file")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="afterwards, cProfile a forkpoint record and replay at the largest T (top 10 in forkpoint/)",
    )
    parser.add_argument(
        "--compare",
        metavar="REV",
        help="measure this checkout against commit REV (forkpoint only; default --turns 100, --repeat 5)",
    )
    parser.add_argument("--forkpoint-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--seed-offset", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.compare:
        turns = int(args.turns) if args.turns.isdigit() else 100
        return compare(args.compare, turns, args.repeat if args.repeat != 3 else 5)
    if args.forkpoint_only:
        turns = int(args.turns)
        forkpoint_only(2, BASE_SEED - 1)  # warm up: imports, hooks
        sample = forkpoint_only(turns, BASE_SEED + args.seed_offset)
        args.json.write_text(json.dumps({"samples": {str(turns): [sample]}}))
        return 0
    import vcr

    turns_list = [int(t) for t in args.turns.split(",") if t.strip()]
    if not turns_list or min(turns_list) < 1 or args.repeat < 1 or args.repeat_large < 1:
        parser.error("turns and repeats must be positive")

    started = time.perf_counter()
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    cpus = os.cpu_count()
    print(
        f"forkpoint {forkpoint.__version__} vs vcrpy {vcr.__version__}; python {platform.python_version()}, "
        f"{platform.system()} {platform.machine()}, {cpus} cores; {when}"
    )
    repeats = {t: min(args.repeat, args.repeat_large) if t >= LARGE_T else args.repeat for t in turns_list}
    reduced = [t for t in turns_list if repeats[t] < args.repeat]
    print(
        f"repetitions: {args.repeat} per T (seed {BASE_SEED} + repetition index, shared by all modes of "
        "that repetition), median shown"
        + (
            f"; reduced to {args.repeat_large} for T >= {LARGE_T} ({', '.join(map(str, reduced))}) to keep "
            "the default run under ~5 minutes (--repeat-large N to change)"
            if reduced
            else ""
        )
    )
    load0 = loadavg()
    print(f"load average (1, 5, 15 min) at start: {load0} (other work on the machine skews the timings)")
    tmp = Path(tempfile.gettempdir())
    print(f"temporary files (sessions, cassettes, workdirs) in {tmp} ({filesystem(tmp)})")
    warm_up()

    all_samples: dict[int, list[dict[str, Any]]] = {}
    results: dict[int, dict[str, float]] = {}
    for turns in turns_list:
        t_start = time.perf_counter()
        samples = [one_repetition(turns, BASE_SEED + i) for i in range(repeats[turns])]
        all_samples[turns] = samples
        results[turns] = summarize(samples)
        print_table(turns, results[turns], len(samples))
        print(f"(T={turns}: {time.perf_counter() - t_start:.1f} s for all modes and repetitions)")

    for line in verdict(results, turns_list):
        print(line)
    biggest = max(turns_list)
    m = results[biggest]
    print(
        f"At {biggest} turns forkpoint stores {m['fp_bytes'] / m['vcr_bytes']:.3f}x vcrpy's bytes "
        f"(target < {TARGET_BYTES_RATIO}) and replays in {m['fp_replay_s'] / m['vcr_replay_s']:.3f}x its "
        f"time ({m['fp_replay_s'] / m['vcr_replay_excl_tools_s']:.3f}x excluding tool bodies; target < "
        f"{TARGET_REPLAY_RATIO})."
    )
    total = time.perf_counter() - started
    print(f"total benchmark time: {total:.1f} s; load average at start {load0}, at end {loadavg()}")

    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "date": when,
                    "python": platform.python_version(),
                    "platform": platform.platform(),
                    "cpus": cpus,
                    "forkpoint": forkpoint.__version__,
                    "vcrpy": vcr.__version__,
                    "repeats": repeats,
                    "medians": results,
                    "samples": all_samples,
                    "total_seconds": total,
                },
                indent=2,
            )
            + "\n"
        )
        print(f"results written to {args.json}")
    if args.profile:
        profile_forkpoint(biggest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
