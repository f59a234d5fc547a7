"""Regenerate the example's cassettes: ``python examples/record_cassettes.py``.

Starts the bundled demo model (seeded, so the answers are reproducible) on a free loopback port,
removes the old cassettes, and runs the example tests with ``--forkpoint-mode=rewrite``: every
test runs live once and its cassette is written to ``examples/cassettes/``. Commit the result.

To record against a real provider instead, run
``WEATHER_AGENT_BASE_URL=https://api.openai.com/v1 OPENAI_API_KEY=... pytest examples
--forkpoint-mode=rewrite`` (and pass ``model=`` to ``run_agent``); credentials never reach the
cassettes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from forkpoint.demo.server import ModelServer

HERE = Path(__file__).resolve().parent
SEED = 2024


def main() -> int:
    shutil.rmtree(HERE / "cassettes", ignore_errors=True)
    with ModelServer(seed=SEED, turns=2) as server:
        env = {**os.environ, "WEATHER_AGENT_BASE_URL": server.openai_base_url}
        env.pop("CI", None)
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            str(HERE),
            "-p",
            "no:cacheprovider",
            "--forkpoint-mode=rewrite",
            "-q",
        ]
        code = subprocess.run(cmd, env=env, cwd=HERE).returncode
    if code == 0:
        print(f"cassettes written to {HERE / 'cassettes'}; replay them with: pytest {HERE}")
    return code


if __name__ == "__main__":
    sys.exit(main())
