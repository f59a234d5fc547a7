"""The bundled example agent: a small tool-using loop on the real ``openai`` SDK.

It asks a model (by default the local :mod:`forkpoint.demo.server`) to reproduce a bug with a
scratch test and to run the test suite. Each model turn is one Chat Completions call, streamed
with ``stream_options={"include_usage": True}`` (or not, with ``--no-stream``); the agent
assembles streamed tool-call deltas itself, runs the requested tools and sends their results back
until the model answers with text.

The two tools are plain functions decorated with ``@forkpoint.tool``, so forkpoint records their
calls and, on replay, serves the recorded results without running their bodies:

- ``write_file(path, content)`` writes a UTF-8 file under the working directory.
- ``run_tests()`` appends a line to ``WORKDIR/test_log.txt`` and runs every ``*.py`` file of the
  working directory in one child interpreter (assertion errors count as failures).

CLI::

    python -m forkpoint.demo.agent --base-url URL --workdir DIR \
        [--model demo-model] [--max-turns N] [--no-stream]

It prints one line per turn (``turn 1: write_file(scratch_1a2b.py)``), then ``final: <answer>``,
and exits 0; it exits 4 when ``--max-turns`` model calls gave no final answer.
"""

from __future__ import annotations

import argparse
import contextvars
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import openai

import forkpoint

if TYPE_CHECKING:
    import httpx
    import httpx2

__all__ = [
    "SYSTEM_PROMPT",
    "TASK",
    "TOOL_SPECS",
    "MaxTurnsExceeded",
    "main",
    "run_agent",
    "run_tests",
    "write_file",
]

TASK = "Reproduce the bug in calc.py with a scratch test, then run the test suite."
SYSTEM_PROMPT = (
    "You are a careful coding agent working in a small repository. Use the tools to write files "
    "and run the tests. When you are done, answer with a short summary of what you did."
)
TEST_LOG = "test_log.txt"
RUN_TIMEOUT_S = 10.0
DEFAULT_API_KEY = "sk-demo-not-a-real-key"

_workdir: contextvars.ContextVar[Path] = contextvars.ContextVar("forkpoint_demo_workdir")


class MaxTurnsExceeded(RuntimeError):
    """The model made ``max_turns`` calls without a final text answer."""


def _current_workdir() -> Path:
    try:
        return _workdir.get()
    except LookupError:
        raise RuntimeError("no working directory: call the tools through run_agent()") from None


# --------------------------------------------------------------------------------------------
# Tools
# --------------------------------------------------------------------------------------------


@forkpoint.tool
def write_file(path: str, content: str) -> dict[str, Any]:
    """Write ``content`` (UTF-8 text) to ``path``, relative to the working directory.

    Parent folders are created. Paths that leave the working directory (absolute paths, ``..``)
    raise ``ValueError``. Returns ``{"path": relative POSIX path, "bytes": bytes written}``.
    """
    root = _current_workdir().resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root) or target == root:
        raise ValueError(f"path {path!r} escapes the working directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode("utf-8")
    target.write_bytes(data)
    return {"path": target.relative_to(root).as_posix(), "bytes": len(data)}


_RUNNER = r"""
import json, os, runpy, sys
sys.path.insert(0, os.getcwd())
results = []
for name in sys.argv[1:]:
    try:
        runpy.run_path(name, run_name="__main__")  # a file's __main__ block drives its tests
        results.append([name, "PASS", ""])
    except SystemExit as exc:
        ok = exc.code in (None, 0)
        results.append([name, "PASS" if ok else "FAIL", "" if ok else f"exit status {exc.code}"])
    except AssertionError as exc:
        results.append([name, "FAIL", f"AssertionError: {exc}"])
    except BaseException as exc:
        results.append([name, "ERROR", f"{type(exc).__name__}: {exc}"])
print(json.dumps(results))
"""


@forkpoint.tool
def run_tests() -> dict[str, Any]:
    """Run the test suite: every ``*.py`` file of the working directory, as ``__main__``.

    Appends one line to ``WORKDIR/test_log.txt`` (proof that the body ran), then runs all files in
    a single child interpreter (``sys.executable -I``; timeout 10 s). Returns
    ``{"passed": int, "failed": int, "output": str}`` where ``output`` has one
    ``PASS|FAIL|ERROR name [reason]`` line per file.
    """
    root = _current_workdir()
    with open(root / TEST_LOG, "a", encoding="utf-8") as log:
        log.write(f"run_tests {time.strftime('%Y-%m-%dT%H:%M:%S')}\n")
    files = sorted(p.name for p in root.glob("*.py") if p.is_file())
    if not files:
        return {"passed": 0, "failed": 0, "output": "no tests found"}
    try:
        proc = subprocess.run(
            [sys.executable, "-I", "-c", _RUNNER, *files],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        rows = json.loads(proc.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        return {"passed": 0, "failed": len(files), "output": f"timed out after {RUN_TIMEOUT_S} s"}
    except (json.JSONDecodeError, IndexError):
        return {"passed": 0, "failed": len(files), "output": "test runner crashed"}
    passed = sum(1 for _, status, _ in rows if status == "PASS")
    lines = [f"{status} {name}" + (f" {why}" if why else "") for name, status, why in rows]
    return {"passed": passed, "failed": len(rows) - passed, "output": "\n".join(lines)}


TOOLS: dict[str, Callable[..., dict[str, Any]]] = {
    "write_file": write_file,
    "run_tests": run_tests,
}

TOOL_SPECS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write a UTF-8 text file inside the working directory.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Path relative to the workdir."},
                    "content": {"type": "string", "description": "Full file content."},
                },
                "required": ["path", "content"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run the test suite (every .py file of the working directory).",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
        },
    },
]


# --------------------------------------------------------------------------------------------
# The loop
# --------------------------------------------------------------------------------------------


def _openai_base_url(base_url: str) -> str:
    """Accept ``http://host:port`` or ``http://host:port/v1``; return the latter."""
    url = base_url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def _complete(
    client: openai.OpenAI, model: str, messages: list[dict[str, Any]], stream: bool
) -> dict[str, Any]:
    """One model turn. Returns the assistant message as a dict ready to append to ``messages``."""
    history: Any = messages  # plain dicts; the SDK's TypedDict params are structural
    tools: Any = TOOL_SPECS
    if not stream:
        response = client.chat.completions.create(model=model, messages=history, tools=tools)
        msg = response.choices[0].message
        out: dict[str, Any] = {"role": "assistant", "content": msg.content}
        calls_out = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.function.name, "arguments": call.function.arguments},
            }
            for call in msg.tool_calls or []
            if call.type == "function"
        ]
        if calls_out:
            out["tool_calls"] = calls_out
        return out

    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    chunks = client.chat.completions.create(
        model=model,
        messages=history,
        tools=tools,
        stream=True,
        stream_options={"include_usage": True},
    )
    with chunks:
        for chunk in chunks:
            for choice in chunk.choices:
                delta = choice.delta
                if delta.content:
                    content.append(delta.content)
                for part in delta.tool_calls or []:
                    call = calls.setdefault(
                        part.index,
                        {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
                    )
                    if part.id:
                        call["id"] = part.id
                    if part.function is not None:
                        if part.function.name:
                            call["function"]["name"] += part.function.name
                        if part.function.arguments:
                            call["function"]["arguments"] += part.function.arguments
    out = {"role": "assistant", "content": "".join(content) if content else None}
    if calls:
        out["tool_calls"] = [calls[i] for i in sorted(calls)]
    return out


def _call_tool(name: str, arguments: str) -> tuple[dict[str, Any], str]:
    """Run one tool call. Returns (result sent back to the model, short label for the log)."""
    fn = TOOLS.get(name)
    try:
        args = json.loads(arguments or "{}")
        if not isinstance(args, dict):
            raise TypeError("tool arguments must be a JSON object")
    except (json.JSONDecodeError, TypeError) as exc:
        return {"error": f"bad arguments: {exc}"}, f"{name}(<bad arguments>)"
    label = f"{name}({args['path']})" if name == "write_file" and "path" in args else f"{name}()"
    if fn is None:
        return {"error": f"unknown tool {name!r}"}, f"{name}(?) -> unknown tool"
    try:
        result = fn(**args)
    except Exception as exc:  # the model gets to see tool errors, as in real agents
        return {"error": f"{type(exc).__name__}: {exc}"}, f"{label} -> error: {exc}"
    if name == "run_tests" and isinstance(result, dict):
        label += f" -> {result.get('passed')} passed, {result.get('failed')} failed"
    return result, label


def run_agent(
    base_url: str,
    workdir: Path,
    *,
    model: str = "demo-model",
    max_turns: int = 200,
    stream: bool = True,
    http_client: httpx2.Client | httpx.Client | None = None,
    echo: Callable[[str], None] | None = print,
    task: str = TASK,
) -> str:
    """Run the agent loop to completion and return the model's final text answer.

    Args:
        base_url: the provider URL, with or without the ``/v1`` suffix
            (e.g. ``ModelServer.base_url``).
        workdir: the directory the tools work in (created if missing).
        model: model name sent in every request.
        max_turns: at most this many model calls (one per turn, the final answer included).
        stream: stream each answer (SSE) and assemble the deltas, or ask for whole JSON bodies.
        http_client: an ``httpx2.Client`` or legacy ``httpx.Client`` for the OpenAI SDK to use.
        echo: called with each progress line (``turn N: ...``); ``None`` for silence.
        task: the user's request, the conversation's first user message.

    Raises:
        MaxTurnsExceeded: ``max_turns`` model calls gave no final text.
    """
    root = Path(workdir)
    root.mkdir(parents=True, exist_ok=True)
    kwargs: dict[str, Any] = {}
    if http_client is not None:
        kwargs["http_client"] = http_client
    client = openai.OpenAI(
        base_url=_openai_base_url(base_url),
        api_key=os.environ.get("OPENAI_API_KEY", DEFAULT_API_KEY),
        max_retries=0,
        **kwargs,
    )
    say = echo or (lambda line: None)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task},
    ]
    token = _workdir.set(root)
    try:
        for turn in range(1, max_turns + 1):
            reply = _complete(client, model, messages, stream)
            messages.append(reply)
            calls = reply.get("tool_calls") or []
            if not calls:
                answer = reply.get("content") or ""
                say(f"turn {turn}: answer")
                return answer
            labels = []
            for call in calls:
                result, label = _call_tool(call["function"]["name"], call["function"]["arguments"])
                labels.append(label)
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call["id"],
                        "content": json.dumps(result, sort_keys=True),
                    }
                )
            say(f"turn {turn}: " + ", ".join(labels))
    finally:
        _workdir.reset(token)
        if http_client is None:
            client.close()
    raise MaxTurnsExceeded(f"no final answer after {max_turns} model calls")


def main(argv: list[str] | None = None) -> int:
    """CLI entry point; see the module docstring. Returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m forkpoint.demo.agent",
        description="Example tool-using agent (openai SDK, chat completions).",
    )
    parser.add_argument(
        "--base-url",
        default=os.environ.get("OPENAI_BASE_URL"),
        help="provider URL, with or without /v1 (default: $OPENAI_BASE_URL)",
    )
    parser.add_argument("--workdir", required=True, type=Path, help="directory the tools work in")
    parser.add_argument("--model", default="demo-model")
    parser.add_argument("--max-turns", type=int, default=200, help="model calls at most")
    parser.add_argument("--no-stream", action="store_true", help="ask for whole JSON answers")
    parser.add_argument("--task", default=TASK, help="the user's request (default: the demo task)")
    args = parser.parse_args(argv)
    if not args.base_url:
        parser.error("--base-url is required (or set OPENAI_BASE_URL)")
    try:
        answer = run_agent(
            args.base_url,
            args.workdir,
            model=args.model,
            max_turns=args.max_turns,
            stream=not args.no_stream,
            task=args.task,
        )
    except MaxTurnsExceeded as exc:
        print(f"stopped: {exc}", flush=True)
        return 4
    print(f"final: {answer}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
