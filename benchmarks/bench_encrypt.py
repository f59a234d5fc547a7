"""What encryption at rest costs: record and replay of the demo agent, plain and encrypted.

Run with ``python benchmarks/bench_encrypt.py`` (see ``benchmarks/README.md``). As in
``bench_record_replay.py``, everything happens in this one process: the scripted model server
(``forkpoint.demo.server.ModelServer``) in a background thread, the demo agent
(``forkpoint.demo.agent.run_agent``) talking to it with the real ``openai`` SDK over loopback.

For each repetition (one seed per repetition, so both modes see the same conversation byte for
byte), after an untimed warm-up of both, in alternating order: ``forkpoint.record`` of T turns plain, and encrypted for one age
recipient (``encrypt_to``); then ``forkpoint.replay`` of each (the encrypted one with the identity
in ``$FORKPOINT_IDENTITY``), checking the replay reproduced the answer. Prints the medians, the
session sizes and the encrypted/plain ratios. ``FORKPOINT_FSYNC`` is ``never`` by default, so that
the ratio is the CPU cost of sealing and opening, not the disk's (``--fsync event`` to include it).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pyrage import x25519

import forkpoint
import forkpoint.demo.agent as demo_agent
from forkpoint.demo.server import ModelServer
from forkpoint.log import IDENTITY_ENV


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def record(turns: int, seed: int, work: Path, store: Path, encrypt_to: list[str]) -> dict[str, Any]:
    with ModelServer(turns=turns, seed=seed) as server:
        t0, c0 = time.perf_counter(), time.process_time()
        with forkpoint.record(store=store, encrypt_to=encrypt_to) as rec:
            answer = demo_agent.run_agent(server.base_url, work, echo=None)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        url = server.base_url
    return {"seconds": seconds, "cpu": cpu, "answer": answer, "path": rec.session_path, "url": url}


def replay(rec: dict[str, Any], work: Path) -> tuple[float, float]:
    t0, c0 = time.perf_counter(), time.process_time()
    with forkpoint.replay(rec["path"]) as rp:
        answer = demo_agent.run_agent(rec["url"], work, echo=None)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    report = rp.report()
    assert answer == rec["answer"], "the replay did not reproduce the recorded answer"
    assert report["divergence"] is None and report["matched"] == report["recorded"], report
    return seconds, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=100, help="model calls per run (default 100)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions (default 5)")
    parser.add_argument("--fsync", default="never", choices=("event", "close", "never"))
    args = parser.parse_args()
    os.environ["FORKPOINT_FSYNC"] = args.fsync
    me = x25519.Identity.generate()
    keys = [f"{w} {m} {c}" for w in ("record", "replay") for m in ("plain", "enc") for c in ("wall", "cpu")]
    times: dict[str, list[float]] = {k: [] for k in keys}
    sizes: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-enc-") as tmp:
        root = Path(tmp)
        ident = root / "me.key"
        ident.write_text(f"{me}\n")
        os.environ[IDENTITY_ENV] = str(ident)
        for to in ([], [str(me.to_public())]):  # warm up (imports, first connections), untimed
            replay(record(3, 1, root / "warm", root / "warm-store", to), root / "warm-replay")
        for rep in range(args.reps):
            seed = 1000 + rep
            modes = [("plain", []), ("enc", [str(me.to_public())])]
            if rep % 2:
                modes.reverse()  # alternate the order: neither mode always runs on a warmer machine
            recs = {}
            for mode, to in modes:
                r = record(args.turns, seed, root / f"w-{mode}-{rep}", root / "store", to)
                times[f"record {mode} wall"].append(r["seconds"])
                times[f"record {mode} cpu"].append(r["cpu"])
                sizes[mode] = dir_bytes(r["path"])
                recs[mode] = r
            assert recs["plain"]["answer"] == recs["enc"]["answer"]
            for mode, _ in modes:
                wall, cpu = replay(recs[mode], root / f"r-{mode}-{rep}")
                times[f"replay {mode} wall"].append(wall)
                times[f"replay {mode} cpu"].append(cpu)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"forkpoint encryption at rest: {args.turns} turns, {args.reps} reps, FORKPOINT_FSYNC={args.fsync}, "
        f"python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs"
    )
    print(f"{'':20}{'plain':>10}{'encrypted':>12}{'ratio':>8}")
    for what in ("record", "replay"):
        for clock in ("wall", "cpu"):
            p, e = med[f"{what} plain {clock}"], med[f"{what} enc {clock}"]
            print(f"{f'{what} {clock} (s)':20}{p:>10.3f}{e:>12.3f}{e / p:>8.2f}")
    print(
        f"{'session (KB)':20}{sizes['plain'] / 1024:>10.1f}{sizes['enc'] / 1024:>12.1f}{sizes['enc'] / sizes['plain']:>8.2f}"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
