"""Running the forkpoint command line as a user would (a fresh interpreter), and a small agent to
record with it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

#: ``forkpoint`` as this test run's interpreter runs it.
FORKPOINT = [sys.executable, "-m", "forkpoint.cli"]

#: An agent with one recorded tool; it prints 101.
QUOTE_AGENT = """
import forkpoint


@forkpoint.tool
def quote(ticker):
    return {"ticker": ticker, "price": 101}


print(quote("ACME")["price"])
"""


#: A coding agent that names its directory and the file it is given (``argv[1]``) in its prompt,
#: on the openai SDK at ``$AGENT_BASE_URL``; it prints the model's answer.
CODING_AGENT = """import os
import sys

import openai

client = openai.OpenAI(base_url=os.environ["AGENT_BASE_URL"], api_key="sk-test", max_retries=0)
prompt = f"You work in {os.getcwd()}. Fix {sys.argv[1]}: " + open(sys.argv[1]).read()
print(client.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}]).choices[0].message.content)
"""


def coding_checkouts(*folders: Path) -> None:
    """Make each of ``folders`` a checkout of :data:`CODING_AGENT` (``coder.py``) with a ``bug.py``."""
    for d in folders:
        d.mkdir(parents=True)
        (d / "coder.py").write_text(CODING_AGENT)
        (d / "bug.py").write_text("x = 1 +\n")


def with_this_path(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's environment) with ``PYTHONPATH`` set to this ``sys.path``,
    so the child imports the forkpoint under test."""
    return {**(os.environ if env is None else env), "PYTHONPATH": os.pathsep.join(sys.path)}


def forkpoint_cli(
    args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 90
) -> subprocess.CompletedProcess[str]:
    """Run ``forkpoint ARGS`` and return what it did (output as text); raises
    ``subprocess.TimeoutExpired`` after ``timeout`` seconds."""
    return subprocess.run(
        [*FORKPOINT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def record_script(
    store: Path, script: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``forkpoint record --store STORE --no-workspace -- python SCRIPT``, in ``cwd`` (default:
    this process's current directory)."""
    return forkpoint_cli(
        ["record", "--store", str(store), "--no-workspace", "--", sys.executable, str(script)],
        cwd=cwd,
        env=with_this_path(env),
        timeout=60,
    )
