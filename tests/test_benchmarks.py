"""Each benchmark under benchmarks/ starts: its imports still name what forkpoint has (the
benchmarks are not run by the suite, and bench_ls.py failed on a function that had moved)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("bench_*.py"))


def test_the_benchmarks_are_found() -> None:
    assert len(BENCHMARKS) >= 9, BENCHMARKS


@pytest.mark.parametrize("bench", BENCHMARKS, ids=lambda p: p.stem)
def test_a_benchmark_starts_and_says_how_to_run_it(bench: Path) -> None:
    done = subprocess.run([sys.executable, str(bench), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout and bench.name in done.stdout
