"""Scrubbing cost on a long conversation: before and after the string cache.

The reported case: a 100-turn conversation with a 24 KB system prompt. An agent resends its whole
history at every turn, and every request is scrubbed several times (when it is captured, when its
match key is computed, when the log writes it), so without a cache the scrubber rescans the whole
history at every turn: quadratic in the length of the conversation.

Run with ``python benchmarks/bench_scrub.py [--turns 100] [--prompt-kb 24] [--repeat 3]``. It prints
the total time spent scrubbing for:

* ``before``: the newest committed ``forkpoint/redact.py`` from before the cache (read with
  ``git show``), if git and the repository are there;
* ``no cache``: the current scrubber with its caches turned off;
* ``cache``: the current scrubber as forkpoint uses it;

then the ratios. Each turn does what recording does: scrub the request body (capture), normalize
and scrub it again (match key), and scrub the event once more (the log writer).
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from forkpoint import redact

ROOT = Path(__file__).resolve().parent.parent


def conversation(turns: int, prompt_kb: int) -> list[dict[str, Any]]:
    """The request bodies of a ``turns``-turn tool-using conversation."""
    rule = "Rule {i}: cite the file and line you rely on; never invent an API; keep answers short. "
    system = "".join(rule.format(i=i) for i in range(prompt_kb * 1024 // len(rule) + 1))[: prompt_kb * 1024]
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Fix the failing test in tests/test_calc.py."},
    ]
    bodies = []
    for t in range(turns):
        bodies.append({"model": "m", "temperature": 0.2, "messages": list(messages), "stream": True})
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{t}",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": f'{{"path": "src/mod_{t}.py"}}'},
                    }
                ],
            }
        )
        source = "".join(f"def f_{t}_{k}(x):\n    return x * {k}  # line {k}\n" for k in range(40))
        messages.append({"role": "tool", "tool_call_id": f"call_{t}", "content": source})
    return bodies


class _Old:
    """The previous scrubber, as a module-level API."""

    def __init__(self, module: Any) -> None:
        self.m = module

    def json(self, v: Any) -> Any:
        return self.m.scrub_json(v)


def old_scrubber() -> tuple[str, Any] | None:
    """The newest committed ``redact.py`` from before the cache (no ``class Scrubber``), if any."""
    try:
        revs = subprocess.run(
            ["git", "log", "--format=%h", "--", "forkpoint/redact.py"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.split()
        for rev in revs:
            src = subprocess.run(
                ["git", "show", f"{rev.decode()}:forkpoint/redact.py"],
                cwd=ROOT,
                capture_output=True,
                check=True,
            ).stdout
            if b"class Scrubber" not in src:
                break
        else:
            return None
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(tempfile.mkdtemp()) / "old_redact.py"
    path.write_bytes(src)
    spec = importlib.util.spec_from_file_location("old_redact", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["old_redact"] = module
    spec.loader.exec_module(module)
    return rev.decode(), _Old(module)


def run(scrub_json: Any, bodies: list[dict[str, Any]]) -> float:
    t0 = time.perf_counter()
    for body in bodies:
        captured = scrub_json(body)  # capture.request_record
        scrub_json(captured)  # match.normalize_request
        scrub_json({"request": {"body": captured}})  # the log writer
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--prompt-kb", type=int, default=24)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    bodies = conversation(args.turns, args.prompt_kb)
    chars = sum(len(str(b)) for b in bodies)
    print(
        f"{args.turns} turns, {args.prompt_kb} KB system prompt: {chars / 1e6:.1f} M characters of request "
        "bodies, each scrubbed 3 times"
    )
    results: dict[str, float] = {}
    old = old_scrubber()
    label = "no cache"
    if old is not None:
        label = f"before ({old[0]})"
        results[label] = statistics.median(run(old[1].json, bodies) for _ in range(args.repeat))
    results["no cache"] = statistics.median(
        run(redact.Scrubber(cache=False).json, bodies) for _ in range(args.repeat)
    )
    results["cache"] = statistics.median(run(redact.Scrubber().json, bodies) for _ in range(args.repeat))
    for name, seconds in results.items():
        print(f"  {name:14s} {seconds * 1000:9.1f} ms")
    print(f"  speed-up with the cache: {results[label] / results['cache']:.1f}x (vs {label})")
    print(f"  speed-up with the cache: {results['no cache'] / results['cache']:.1f}x (vs no cache)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
