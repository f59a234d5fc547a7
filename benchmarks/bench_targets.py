"""The targets of issue 15 ("speed at the floor"), measured side by side in one run, as ratios.

Run ``python benchmarks/bench_targets.py`` from the repository root (``--rows`` to pick rows, see
``benchmarks/README.md``). Every row runs its contenders in the same run, interleaved, and prints
the ratio against its yardstick and whether the issue's target is met:

* ``startup``: ``import forkpoint`` over ``python -c pass``; ``forkpoint record -- python -c pass``
  over ``python -c pass`` (wall time, median of ``--repeat-startup`` fresh interpreters).
* ``floor``: the demo agent (real ``openai`` SDK, streamed Chat Completions, two tools) replayed by
  forkpoint against **the floor**: the same agent with every model answer served from an in-memory
  dict at the transport (the SDK's default client and transport, built as the agent builds them,
  whose ``handle_request`` answers from the dict) and every tool result from a dict, without
  forkpoint. Whole-process (each its own ``python``, CPU time of the process tree) and in-process
  (CPU time). Also record over the live run (whole-process CPU time, the model server in a process
  of its own, so its work is not counted).
* ``sdkless``: an agent loop without an SDK (``httpx2`` and a ``MockTransport`` model, ~700 B of
  tool arguments a turn, one ``@forkpoint.tool`` tool): plain loop, record, replay, in-process
  CPU time.
* ``sdkless-cache``: the same loop marking its last two tool messages with a ``cache_control``
  marker that moves on at every call (Anthropic's prompt caching, as coding agents use it), against
  its own plain run and the same targets.
* ``sdkless-stamp``: the same loop with the time in its system prompt, a new one at every call
  (from a clock the loop advances a second a call, so that a replay sends what was recorded, as
  ``forkpoint record --deterministic`` gives a program that reads the real clock), against its own
  plain run and the same targets.
* ``growth``: the same loop at two lengths (500 and 2,000 turns): peak memory over the baseline
  (``VmHWM`` - ``VmRSS`` before the step, each step in a fresh interpreter) and CPU time of record,
  replay, ``Session.load`` (with each call's lists its own, and ``share_lists=True`` as forkpoint's
  own readers load), ``forkpoint verify``, ``forkpoint show --json``, ``forkpoint show --html``
  and ``forkpoint export --content`` (to stdout); prints the growth exponent
  ``log(m2/m1) / log(n2/n1)`` (1: linear, 2: quadratic).
* ``growth-stamp``: the same on the ``sdkless-stamp`` loop (its system prompt stamped with the time
  at every call).
* ``large``: a 20 MB tool result: recording it against ``json.dumps`` + write + ``fsync``,
  replaying it against reading the file + ``json.loads`` (wall time).
* ``bytes``: bytes on disk of forkpoint's session, vcrpy's cassette and cassetter's cassette for
  the demo agent at 10 and 100 turns, and at 10 turns recorded inside a git repository with 29
  untracked files (so forkpoint takes a checkpoint before every model call).
* ``bytes-sdkless``: the same for the SDK-less loop (tool arguments ~700 B a turn) at 10 and 100
  turns, recorded by each tool in turn in this process.
* ``checkpoints``: 100 checkpoints of a repository with 1,000 untracked files: bytes the session
  holds beyond the files' own blobs.

Temporary files go to a temporary directory that is removed afterwards.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import functools
import gc
import hashlib
import importlib.util
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
REPO = HERE.parents[1]
PY = sys.executable

# The targets (``>`` ratios are misses).
T_REPLAY_FLOOR_PROCESS = 1.15
T_REPLAY_FLOOR_INPROC = 1.05
T_SDKLESS_REPLAY = 1.3
T_SDKLESS_RECORD = 1.6
T_RECORD_OVERHEAD = {10: 0.10, 100: 0.05}
T_IMPORT_MS = 40.0
T_RECORD_PASS = 3.0
T_SHOW_JSON_MIB_2000 = 300.0
T_LARGE_RECORD = 1.5
T_LARGE_REPLAY = 1.2
T_BYTES = {10: 0.5, 100: 0.05}
T_CHECKPOINT_BYTES = 100_000
#: From this many turns on, the floor row repeats ``--repeat-large`` times (a 500-turn repetition
#: runs 1,000 tool calls live and recorded, each ``run_tests`` a child interpreter).
LARGE_T = 500
#: The demo agent's cap on model calls in every run here: its default (200) stopped the 500-turn
#: floor row with ``MaxTurnsExceeded`` before it measured anything; the model servers here end
#: every conversation themselves.
MAX_MODEL_CALLS = 10_000
T_LINEAR_EXPONENT = 1.2  # what counts as "linear" for a measured exponent (noise allowance)

VERDICTS: list[str] = []


def verdict(label: str, value: float, target: float, fmt: str = "{:.3f}") -> str:
    ok = value <= target
    line = f"{label}: {fmt.format(value)} (target <= {fmt.format(target)}) {'MET' if ok else 'MISSED'}"
    VERDICTS.append(line)
    return line


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def dir_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def child_cpu(cmd: list[str], **kw: Any) -> tuple[float, subprocess.CompletedProcess[str]]:
    """CPU seconds (user + system) of ``cmd`` and every process it waited for, and its result."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, capture_output=True, text=True, **kw)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, proc


def wall(cmd: list[str], **kw: Any) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, **kw)
    return time.perf_counter() - t0


def env_with_repo() -> dict[str, str]:
    """The environment of every child: this checkout first on the path, and forkpoint's bytecode
    read as an installed package's is (pip compiles at install; :func:`main` compiles this checkout
    once). ``PYTHONDONTWRITEBYTECODE`` is dropped: set, as in some CI images, an editable checkout
    would never get its bytecode and every child would compile forkpoint again (200-300 ms of CPU
    a process, twice in a whole-process replay)."""
    path = os.environ.get("PYTHONPATH")
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{path}" if path else str(REPO)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def reset_peak() -> None:
    """Reset ``VmHWM`` to the current RSS (Linux >= 4.0), so the next peak is this step's."""
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")


# --------------------------------------------------------------------------------------------
# The demo agent, its floor, and a model server in a process of its own
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def server_process(turns: int, seed: int) -> Iterator[str]:
    """``python -m forkpoint.demo.server`` in its own process; yields its base URL."""
    proc = subprocess.Popen(
        [PY, "-m", "forkpoint.demo.server", "--turns", str(turns), "--seed", str(seed)],
        stdout=subprocess.PIPE,
        text=True,
        env=env_with_repo(),
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().strip()
    finally:
        proc.terminate()
        proc.wait()


def floor_agent() -> types.ModuleType:
    """``forkpoint/demo/agent.py`` loaded without forkpoint: ``forkpoint.tool`` is the identity, so
    the floor runs the same agent code with nothing of forkpoint imported."""
    stub = types.ModuleType("forkpoint")
    stub.tool = lambda fn: fn  # type: ignore[attr-defined]
    saved = sys.modules.get("forkpoint")
    sys.modules["forkpoint"] = stub
    try:
        spec = importlib.util.spec_from_file_location("floor_agent", REPO / "forkpoint" / "demo" / "agent.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        if saved is None:
            del sys.modules["forkpoint"]
        else:
            sys.modules["forkpoint"] = saved


def capture_answers(base_url: str, workdir: Path) -> dict[str, Any]:
    """Run the demo agent live once and keep every answer: the model's, by the SHA-256 of the
    request body, and the tools', by name and arguments, in call order (what the floor serves)."""
    import httpx2

    import forkpoint.demo.agent as agent

    model: dict[str, Any] = {}
    tools: dict[str, Any] = {}
    inner = httpx2.HTTPTransport()

    class Tee(httpx2.BaseTransport):
        def handle_request(self, request: httpx2.Request) -> httpx2.Response:
            response = inner.handle_request(request)
            data = response.read()
            response.close()
            headers = [(k, v) for k, v in response.headers.items() if k.lower() != "content-length"]
            key = hashlib.sha256(request.read()).hexdigest()
            model[key] = {"status": response.status_code, "headers": headers, "body": data.decode("latin-1")}
            return httpx2.Response(response.status_code, headers=headers, content=data)

    originals = dict(agent.TOOLS)

    def keep(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(**kwargs: Any) -> Any:
            result = fn(**kwargs)
            tools.setdefault(name + json.dumps(kwargs, sort_keys=True), []).append(result)
            return result

        return run

    agent.TOOLS.update({n: keep(n, f) for n, f in originals.items()})
    try:
        with httpx2.Client(transport=Tee()) as client:
            answer = agent.run_agent(
                base_url, workdir, echo=None, http_client=client, max_turns=MAX_MODEL_CALLS
            )
    finally:
        agent.TOOLS.update(originals)
    return {"model": model, "tools": tools, "answer": answer, "base_url": base_url}


def run_floor(module: types.ModuleType, answers: dict[str, Any], workdir: Path) -> str:
    """The agent with every answer from memory: model at the transport, tools by arguments.

    The agent builds its client as it always does (the SDK's default HTTP client and transport,
    whose set-up loads the system's CA certificates, ~33 ms here), exactly as under replay; only
    the transport's ``handle_request`` answers from memory instead of the network."""
    import httpx2

    model = answers["model"]

    def handler(_transport: httpx2.HTTPTransport, request: httpx2.Request) -> httpx2.Response:
        got = model[hashlib.sha256(request.read()).hexdigest()]
        return httpx2.Response(got["status"], headers=got["headers"], content=got["body"].encode("latin-1"))

    tools = answers["tools"]

    used: dict[str, int] = {}

    def served(name: str) -> Callable[..., Any]:
        def result(**kw: Any) -> Any:
            key = name + json.dumps(kw, sort_keys=True)
            used[key] = used.get(key, -1) + 1
            return tools[key][used[key]]  # the same call again (run_tests) gets the next result

        return result

    module.TOOLS.update({n: served(n) for n in list(module.TOOLS)})
    real = httpx2.HTTPTransport.handle_request
    httpx2.HTTPTransport.handle_request = handler  # type: ignore[method-assign,assignment]
    try:
        answer: str = module.run_agent(answers["base_url"], workdir, echo=None, max_turns=MAX_MODEL_CALLS)
    finally:
        httpx2.HTTPTransport.handle_request = real  # type: ignore[method-assign]
    return answer


# --------------------------------------------------------------------------------------------
# The SDK-less loop
# --------------------------------------------------------------------------------------------

SDKLESS_URL = "http://127.0.0.1:9/v1/chat/completions"
SDKLESS_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "edit_file",
            "description": "Replace a file's content.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    }
]


def sdkless_content(turn: int) -> str:
    """~650 characters of code, different at every turn (tool arguments ~700 B with the path)."""
    lines = [
        f"def step_{turn}_{i}(x):\n    return x * {turn + i} + {i}  # adjust {turn}:{i}\n" for i in range(11)
    ]
    return "".join(lines)


def sdkless_model(turns: int) -> Callable[[Any], Any]:
    """A ``MockTransport`` handler: a tool call per turn until ``turns``, then a text answer."""
    import httpx2

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.read())
        turn = sum(1 for m in body["messages"] if m["role"] == "assistant")
        if turn < turns:
            args = json.dumps({"path": f"src/mod_{turn}.py", "content": sdkless_content(turn)})
            message: dict[str, Any] = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{turn}",
                        "type": "function",
                        "function": {"name": "edit_file", "arguments": args},
                    }
                ],
            }
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": f"done after {turn} edits"}, "stop"
        data = json.dumps(
            {
                "id": f"chatcmpl-{turn}",
                "object": "chat.completion",
                "created": 1_700_000_000 + turn,
                "model": "m",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {
                    "prompt_tokens": 10 * turn + 20,
                    "completion_tokens": 150,
                    "total_tokens": 10 * turn + 170,
                },
            }
        ).encode()
        # A streamed body (not pre-read): responses built already read are issue 15's item 8.
        return httpx2.Response(200, headers={"content-type": "application/json"}, content=iter([data]))

    return handler


def edit_file(path: str, content: str) -> dict[str, Any]:
    return {"path": path, "bytes": len(content.encode()), "lines": content.count("\n")}


def sdkless_tool() -> Callable[..., dict[str, Any]]:
    import forkpoint

    return forkpoint.tool(edit_file)


def with_cache_marker(messages: list[dict[str, Any]], call: int) -> list[dict[str, Any]]:
    """The messages as sent with a cache marker on the last two tool messages (copies of those)."""
    marked = list(messages)
    for i in [i for i, m in enumerate(marked) if m["role"] == "tool"][-2:]:
        marked[i] = {**marked[i], "cache_control": {"type": "ephemeral"}}
    return marked


def with_time_stamp(messages: list[dict[str, Any]], call: int) -> list[dict[str, Any]]:
    """The messages as sent at the ``call``-th call with the time at the start of the system prompt
    (a copy of it): 10:00:00 UTC plus a second a call."""
    now = datetime(2026, 12, 3, 10, tzinfo=UTC).timestamp() + call
    stamp = datetime.fromtimestamp(now, UTC).isoformat()
    return [{**messages[0], "content": f"The time is {stamp}. {messages[0]['content']}"}, *messages[1:]]


#: The SDK-less rows: how each sends its messages at a call (None: as they are), and its names.
SDKLESS_ROWS: dict[
    str, tuple[Callable[[list[dict[str, Any]], int], list[dict[str, Any]]] | None, str, str]
] = {
    "sdkless": (None, "SDK-less loop", "SDK-less"),
    "sdkless-cache": (
        with_cache_marker,
        "SDK-less loop with a moving cache marker",
        "SDK-less (cache marker)",
    ),
    "sdkless-stamp": (with_time_stamp, "SDK-less loop with the time in its prompt", "SDK-less (time stamp)"),
}


def sdkless_loop(
    turns: int,
    tool: Callable[..., dict[str, Any]],
    *,
    sent: Callable[[list[dict[str, Any]], int], list[dict[str, Any]]] | None = None,
) -> str:
    """The loop: post the whole conversation, run the tool calls, append, until a text answer.
    ``sent``: the messages as sent at a call (:data:`SDKLESS_ROWS`), else as they are."""
    import httpx2

    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You edit files. " * 20},
        {"role": "user", "content": "Refactor the package, one module at a time."},
    ]
    with httpx2.Client(transport=httpx2.MockTransport(sdkless_model(turns))) as client:
        posted = 0
        while True:
            body = {
                "model": "m",
                "messages": sent(messages, posted) if sent else messages,
                "tools": SDKLESS_TOOLS,
            }
            posted += 1
            response = client.post(SDKLESS_URL, json=body)
            response.raise_for_status()
            message = response.json()["choices"][0]["message"]
            messages.append(message)
            if not message.get("tool_calls"):
                return str(message["content"])
            for call in message["tool_calls"]:
                result = tool(**json.loads(call["function"]["arguments"]))
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)})


# --------------------------------------------------------------------------------------------
# Children (run as ``python bench_targets.py --child KIND ...``)
# --------------------------------------------------------------------------------------------


def child_main(kind: str, args: list[str]) -> int:
    if kind == "agent":  # the demo agent as a program: live, or under forkpoint record / replay
        import forkpoint.demo.agent as agent

        print(agent.run_agent(args[0], Path(args[1]), echo=None, max_turns=MAX_MODEL_CALLS))
        return 0
    if kind == "floor":
        module = floor_agent()
        answers = json.loads(Path(args[0]).read_text())
        print(run_floor(module, answers, Path(args[1])))
        return 0
    if kind == "mem":
        return child_mem(args[0], int(args[1]), Path(args[2]), *args[3:4])
    raise SystemExit(f"unknown child {kind!r}")


def child_mem(step: str, turns: int, path: Path, row: str = "sdkless") -> int:
    """One step of the growth row in this fresh interpreter, on the loop of SDK-less row ``row``;
    prints ``{"peak_mib", "cpu_s"}``."""
    import forkpoint
    import forkpoint.cli

    tool = sdkless_tool()
    loop = functools.partial(sdkless_loop, sent=SDKLESS_ROWS[row][0])
    with tempfile.TemporaryDirectory() as warm:  # imports and first-use set-up are not the step's
        with forkpoint.record(store=warm) as rec:
            loop(1, tool)
        with forkpoint.replay(rec.session_path):
            loop(1, tool)
    gc.collect()
    reset_peak()
    base = rss_kib("VmRSS")
    cpu0 = time.process_time()
    out: dict[str, Any] = {}
    if step == "record":
        with forkpoint.record(store=path, name=f"sdkless-{turns}") as rec:
            loop(turns, tool)
        out["session"] = str(rec.session_path)
    elif step == "replay":
        with forkpoint.replay(path) as rp:
            loop(turns, tool)
        report = rp.report()
        assert report["matched"] == report["recorded"] and report["divergence"] is None, report
    elif step == "load":
        forkpoint.Session.load(path)
    elif step == "load-shared":
        forkpoint.Session.load(path, share_lists=True)
    elif step in ("verify", "show", "html", "export"):
        out_file = str(path.parent / f"{step}-{turns}.out")
        # (export with content writes every conversation so far, ~1.8 GB at 1,000 turns: to stdout here)
        argv = {
            "verify": ["verify", str(path)],
            "show": ["show", "--json", str(path)],
            "html": ["show", "--html", out_file, str(path)],
            "export": ["export", "--content", "--file", "-", str(path)],
        }[step]
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
            try:
                forkpoint.cli.main(argv, standalone_mode=False)
            except SystemExit as exc:
                if exc.code not in (None, 0):
                    raise
        if step == "html":
            out["output_bytes"] = os.path.getsize(out_file)
            os.unlink(out_file)
    else:
        raise SystemExit(f"unknown step {step!r}")
    out["cpu_s"] = time.process_time() - cpu0
    out["peak_mib"] = (rss_kib("VmHWM") - base) / 1024
    print(json.dumps(out))
    return 0


# --------------------------------------------------------------------------------------------
# Rows
# --------------------------------------------------------------------------------------------


def row_startup(repeat: int, tmp: Path) -> None:
    print(f"\n== start-up (wall time, median of {repeat} fresh interpreters, interleaved) ==")
    if any(name.startswith("__editable__") for name in sys.modules):
        # (an editable install's finder runs in every interpreter of the environment, `python -c
        # pass` too, and loads pathlib and urllib: the yardstick doubles, and the ratio shrinks)
        print(
            "  this environment has forkpoint installed editable (pip install -e): its finder runs at "
            "every interpreter's start; run this row with the python of a regular install "
            "(pip install ., as README.md's quick start) for the figures a user gets"
        )
    env = env_with_repo()
    cmds = {
        "python -c pass": [PY, "-c", "pass"],
        "python -c 'import forkpoint'": [PY, "-c", "import forkpoint"],
        "forkpoint record -- python -c pass": [
            PY, "-m", "forkpoint.cli", "record", "--store", str(tmp / "startup-store"), "--", PY, "-c", "pass",
        ],
    }  # fmt: skip
    times: dict[str, list[float]] = {k: [] for k in cmds}
    for cmd in cmds.values():  # warm the page cache and bytecode
        wall(cmd, env=env)
    for _ in range(repeat):
        for name, cmd in cmds.items():
            times[name].append(wall(cmd, env=env))
    m = {k: median(v) for k, v in times.items()}
    for k, v in m.items():
        print(f"  {k:40} {v * 1000:8.1f} ms")
    bare = m["python -c pass"]
    imp = (m["python -c 'import forkpoint'"] - bare) * 1000
    print("  " + verdict("import forkpoint over bare python (ms)", imp, T_IMPORT_MS, "{:.1f}"))
    ratio = m["forkpoint record -- python -c pass"] / bare
    print(
        "  " + verdict("forkpoint record -- python -c pass / python -c pass", ratio, T_RECORD_PASS, "{:.2f}")
    )


def row_floor(turns_list: list[int], repeat_small: int, tmp: Path, repeat_large: int) -> None:
    import forkpoint

    # Every process runs in the temporary folder: run from a checkout (as the README says), `forkpoint
    # record` would take the checkout's repository as its workspace and checkpoint it at every model
    # call, which is not the agent's (it works in its own folder) and differs from machine to machine.
    env = env_with_repo()
    module = floor_agent()
    for turns in turns_list:
        repeat = repeat_small if turns < LARGE_T else repeat_large
        print(
            f"\n== floor: demo agent (openai SDK), {turns} turns; CPU time, median of {repeat}, interleaved =="
        )
        seed = 4000 + turns
        with server_process(turns, seed) as url:
            answers = capture_answers(url, tmp / f"w-capture-{turns}")
        data = tmp / f"answers-{turns}.json"
        data.write_text(json.dumps(answers))
        # one recording (fresh server, same seed: the same conversation) to replay
        store = tmp / f"floor-store-{turns}"
        with server_process(turns, seed) as url:
            cpu, proc = child_cpu(
                [PY, "-m", "forkpoint.cli", "record", "--store", str(store), "--", PY, str(HERE), "--child", "agent",
                 url, str(tmp / f"w-rec0-{turns}")], env=env, cwd=tmp,
            )  # fmt: skip
        session = next(p.parent for p in store.glob("*/session.jsonl"))
        rows: dict[str, list[float]] = {
            k: [] for k in ("floor_p", "replay_p", "floor_i", "replay_i", "live_p", "record_p")
        }
        for i in range(repeat):
            w = tmp / f"w-{turns}-{i}"
            cpu, proc = child_cpu(
                [PY, str(HERE), "--child", "floor", str(data), str(w / "fl")], env=env, cwd=tmp
            )
            assert proc.stdout.strip() == answers["answer"], proc.stdout
            rows["floor_p"].append(cpu)
            cpu, proc = child_cpu(
                [PY, "-m", "forkpoint.cli", "replay", str(session), "--", PY, str(HERE), "--child", "agent",
                 answers["base_url"], str(w / "rp")], env=env, cwd=tmp,
            )  # fmt: skip
            assert answers["answer"] in proc.stdout, proc.stdout
            rows["replay_p"].append(cpu)
            gc.collect()
            c0 = time.process_time()
            assert run_floor(module, answers, w / "fli") == answers["answer"]
            rows["floor_i"].append(time.process_time() - c0)
            gc.collect()
            c0 = time.process_time()
            import forkpoint.demo.agent as agent

            with forkpoint.replay(session) as rp:
                got = agent.run_agent(answers["base_url"], w / "rpi", echo=None, max_turns=MAX_MODEL_CALLS)
            rows["replay_i"].append(time.process_time() - c0)
            report = rp.report()
            assert got == answers["answer"] and report["matched"] == report["recorded"], report
            with server_process(turns, seed) as url:
                cpu, proc = child_cpu(
                    [PY, str(HERE), "--child", "agent", url, str(w / "live")], env=env, cwd=tmp
                )
                rows["live_p"].append(cpu)
            with server_process(turns, seed) as url:
                cpu, proc = child_cpu(
                    [PY, "-m", "forkpoint.cli", "record", "--store", str(tmp / f"s-{turns}-{i}"), "--", PY,
                     str(HERE), "--child", "agent", url, str(w / "rec")], env=env, cwd=tmp,
                )  # fmt: skip
                rows["record_p"].append(cpu)
        m = {k: median(v) for k, v in rows.items()}
        print(f"  {'':34}{'floor':>10}{'forkpoint replay':>18}")
        print(f"  {'whole process, CPU s':34}{m['floor_p']:10.3f}{m['replay_p']:18.3f}")
        print(f"  {'in-process, CPU s':34}{m['floor_i']:10.3f}{m['replay_i']:18.3f}")
        print(
            "  "
            + verdict(
                f"T={turns} replay / floor, whole process",
                m["replay_p"] / m["floor_p"],
                T_REPLAY_FLOOR_PROCESS,
            )
        )
        print(
            "  "
            + verdict(
                f"T={turns} replay / floor, in-process", m["replay_i"] / m["floor_i"], T_REPLAY_FLOOR_INPROC
            )
        )
        print(
            f"  {'':34}{'live':>10}{'forkpoint record':>18}   (whole process, CPU s; tool bodies run in both)"
        )
        print(f"  {'':34}{m['live_p']:10.3f}{m['record_p']:18.3f}")
        over = m["record_p"] / m["live_p"] - 1
        target = T_RECORD_OVERHEAD.get(turns, T_RECORD_OVERHEAD[100])
        print("  " + verdict(f"T={turns} record overhead over live (fraction)", over, target))


@contextlib.contextmanager
def unsynced() -> Iterator[None]:
    """``FORKPOINT_FSYNC=never`` for what is recorded inside (the caller's own value put back)."""
    saved = os.environ.get("FORKPOINT_FSYNC")
    os.environ["FORKPOINT_FSYNC"] = "never"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["FORKPOINT_FSYNC"]
        else:
            os.environ["FORKPOINT_FSYNC"] = saved


def row_sdkless(turns: int, repeat: int, tmp: Path, row: str = "sdkless") -> None:
    import forkpoint

    sent, kind, label = SDKLESS_ROWS[row]
    print(f"\n== {kind} (httpx2 MockTransport), {turns} turns; in-process CPU s, median of {repeat} ==")
    tool = sdkless_tool()
    loop = functools.partial(sdkless_loop, sent=sent)
    rows: dict[str, list[float]] = {"plain": [], "record": [], "replay": [], "record_unsynced": []}
    for i in range(repeat):
        gc.collect()
        c0 = time.process_time()
        answer = loop(turns, tool)
        rows["plain"].append(time.process_time() - c0)
        # What the fsync policy costs, beside the target (not its yardstick): the same record with
        # FORKPOINT_FSYNC=never, which gives up "an acknowledged event survives a crash".
        gc.collect()
        with unsynced():
            c0 = time.process_time()
            with forkpoint.record(store=tmp / f"{row}-{turns}-{i}-unsynced"):
                assert loop(turns, tool) == answer
            rows["record_unsynced"].append(time.process_time() - c0)
        gc.collect()
        c0 = time.process_time()
        with forkpoint.record(store=tmp / f"{row}-{turns}-{i}") as rec:
            assert loop(turns, tool) == answer
        rows["record"].append(time.process_time() - c0)
        gc.collect()
        c0 = time.process_time()
        with forkpoint.replay(rec.session_path) as rp:
            assert loop(turns, tool) == answer
        rows["replay"].append(time.process_time() - c0)
        report = rp.report()
        assert report["matched"] == report["recorded"] and report["divergence"] is None, report
    m = {k: median(v) for k, v in rows.items()}
    print(
        f"  plain loop {m['plain']:.3f} s, record {m['record']:.3f} s, replay {m['replay']:.3f} s; "
        f"record with FORKPOINT_FSYNC=never {m['record_unsynced']:.3f} s "
        f"({m['record_unsynced'] / m['plain']:.3f}x: what the sync of every event costs, not the target)"
    )
    print(
        "  "
        + verdict(f"{label} replay / plain loop at {turns} turns", m["replay"] / m["plain"], T_SDKLESS_REPLAY)
    )
    print(
        "  "
        + verdict(f"{label} record / plain loop at {turns} turns", m["record"] / m["plain"], T_SDKLESS_RECORD)
    )


def row_growth(small: int, large: int, tmp: Path, limit_gib: float, row: str = "sdkless") -> None:
    _, kind, label = SDKLESS_ROWS[row]
    print(f"\n== growth: {kind} at {small} and {large} turns; each step in a fresh interpreter ==")
    prefix = "" if row == "sdkless" else f"{label}: "
    env = env_with_repo()

    def limit() -> None:
        cap = int(limit_gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    def step(name: str, turns: int, path: Path) -> dict[str, Any] | None:
        proc = subprocess.run(
            [PY, str(HERE), "--child", "mem", name, str(turns), str(path), row],
            capture_output=True, text=True, env=env, preexec_fn=limit,
        )  # fmt: skip
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
            print(f"  {name} at {turns} turns failed under a {limit_gib:g} GiB address-space cap: {tail}")
            return None
        out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
        return out

    got: dict[str, dict[int, dict[str, Any] | None]] = {}
    for turns in (small, large):
        rec = step("record", turns, tmp / f"growth-{row}-{turns}")
        got.setdefault("record", {})[turns] = rec
        if rec is None:
            continue
        session = Path(rec["session"])
        for name in ("replay", "load", "load-shared", "verify", "show", "html", "export"):
            got.setdefault(name, {})[turns] = step(name, turns, session)
        print(f"  session at {turns} turns: {dir_bytes(session):,} bytes")
    k = math.log(large / small)
    print(
        f"  {'step':12}{'MiB ' + str(small):>12}{'MiB ' + str(large):>12}{'exp':>6}{'CPU s ' + str(small):>13}{'CPU s ' + str(large):>13}{'exp':>6}"
    )
    for name, by in got.items():
        a, b = by.get(small), by.get(large)
        if a is None or b is None:
            print(f"  {name:12} (not measured)")
            continue
        mem_exp = math.log(max(b["peak_mib"], 0.1) / max(a["peak_mib"], 0.1)) / k
        cpu_exp = math.log(b["cpu_s"] / a["cpu_s"]) / k
        print(
            f"  {name:12}{a['peak_mib']:12.1f}{b['peak_mib']:12.1f}{mem_exp:6.2f}"
            f"{a['cpu_s']:13.3f}{b['cpu_s']:13.3f}{cpu_exp:6.2f}"
        )
        verdict(
            f"{prefix}growth exponent of {name} memory ({small}->{large} turns)",
            mem_exp,
            T_LINEAR_EXPONENT,
            "{:.2f}",
        )
    show = got.get("show", {}).get(large)
    if large == 2000 and show is not None:
        print(
            "  "
            + verdict(
                f"{prefix}show --json peak memory at 2,000 turns (MiB)",
                show["peak_mib"],
                T_SHOW_JSON_MIB_2000,
                "{:.0f}",
            )
        )


def large_result(mb: int) -> dict[str, Any]:
    """About ``mb`` MB of JSON: rows of text, numbers and short strings, like a search or a query."""
    text = "The quick brown fox jumps over the lazy dog; " * 4
    n = mb * 1_000_000 // 260
    return {
        "query": "all",
        "rows": [{"id": i, "path": f"src/pkg/file_{i}.py", "score": i / n, "text": text} for i in range(n)],
    }


def row_large(repeat: int, tmp: Path, mb: int = 20) -> None:
    import forkpoint

    result = large_result(mb)
    size = len(json.dumps(result))
    print(f"\n== a {size / 1e6:.1f} MB tool result; wall time, median of {repeat}, interleaved ==")

    # A new value at each repetition, as a tool that reads it makes: forkpoint's scrubber remembers
    # the lists it has seen, so the same object again would be recorded faster than a first one.
    fresh: list[Any] = []

    @forkpoint.tool
    def fetch_all() -> dict[str, Any]:
        return fresh[-1]

    rows: dict[str, list[float]] = {k: [] for k in ("write", "record", "empty", "read", "replay")}
    for i in range(repeat):
        fresh[:] = [json.loads(json.dumps(result))]
        target = tmp / f"plain-{i}.json"
        gc.collect()
        t0 = time.perf_counter()
        with open(target, "wb") as f:
            f.write(json.dumps(result).encode())
            f.flush()
            os.fsync(f.fileno())
        rows["write"].append(time.perf_counter() - t0)
        gc.collect()
        t0 = time.perf_counter()
        with forkpoint.record(store=tmp / f"large-empty-{i}"):
            pass
        rows["empty"].append(time.perf_counter() - t0)
        gc.collect()
        t0 = time.perf_counter()
        with forkpoint.record(store=tmp / f"large-{i}") as rec:
            fetch_all()
        rows["record"].append(time.perf_counter() - t0)
        gc.collect()
        t0 = time.perf_counter()
        with open(target, "rb") as f:
            json.loads(f.read())
        rows["read"].append(time.perf_counter() - t0)
        gc.collect()
        t0 = time.perf_counter()
        with forkpoint.replay(rec.session_path):
            got = fetch_all()
        rows["replay"].append(time.perf_counter() - t0)
        assert got == result
    m = {k: median(v) for k, v in rows.items()}
    print(
        f"  plain JSON write + fsync {m['write']:.3f} s; forkpoint record {m['record']:.3f} s "
        f"(an empty recording: {m['empty']:.3f} s)"
    )
    print(
        f"  plain read + json.loads {m['read']:.3f} s; forkpoint replay {m['replay']:.3f} s (session loaded included)"
    )
    print(f"  whole record block / plain write: {m['record'] / m['write']:.2f}")
    print(
        "  "
        + verdict(
            "20 MB result: (record - empty record) / plain write+fsync",
            (m["record"] - m["empty"]) / m["write"],
            T_LARGE_RECORD,
            "{:.2f}",
        )
    )
    print(
        "  " + verdict("20 MB result: replay / plain read", m["replay"] / m["read"], T_LARGE_REPLAY, "{:.2f}")
    )


def untracked_repo(root: Path, files: int, size: int = 180) -> Path:
    """A git repository with one commit and ``files`` untracked files of ``size`` bytes."""
    root.mkdir(parents=True)
    run = lambda *a: subprocess.run(["git", *a], cwd=root, check=True, capture_output=True)  # noqa: E731
    run("init", "-q")
    (root / "README.md").write_text("repo\n")
    run("add", "README.md")
    run("-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "init")
    for i in range(files):
        d = root / "notes" / f"d{i % 10}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"n{i}.txt").write_text((f"note {i}: " + "x" * size)[:size])
    return root


def cassetter_available() -> bool:
    return importlib.util.find_spec("cassetter") is not None


def row_bytes(turns_list: list[int], tmp: Path) -> None:
    import vcr

    import forkpoint
    import forkpoint.demo.agent as agent
    from forkpoint.demo.server import ModelServer

    print("\n== bytes on disk: demo agent (openai SDK, streamed), same seed for every tool ==")
    peers = ["vcrpy"] + (["cassetter"] if cassetter_available() else [])
    if "cassetter" not in peers:
        print("  cassetter is not installed (pip install cassetter): its column is left out")
    print(
        f"  {'':26}{'forkpoint':>12}"
        + "".join(f"{p:>12}" for p in peers)
        + f"{'fp/vcrpy':>10}"
        + ("  fp/cassetter" if len(peers) > 1 else "")
    )
    cases = [(t, None) for t in turns_list] + [(10, 29)]
    for turns, untracked in cases:
        seed = 5000 + turns
        label = f"{turns} turns" + (f", {untracked} untracked" if untracked else "")
        work = tmp / f"bytes-{turns}-{untracked}"
        repo = untracked_repo(work / "repo", untracked) if untracked else None
        sizes: dict[str, int] = {}
        answers = set()
        args_bytes = 0
        with ModelServer(turns=turns, seed=seed) as server:
            with forkpoint.record(store=work / "store", workspace=repo) as rec:
                answers.add(agent.run_agent(server.base_url, (repo or work) / "w-fp", echo=None))
        sizes["forkpoint"] = dir_bytes(rec.session_path)
        for e in forkpoint.Session.load(rec.session_path).events:
            if e["type"] == "tool_call":
                args_bytes += len(json.dumps(e["args"]))
        with ModelServer(turns=turns, seed=seed) as server:
            with vcr.VCR(record_mode="all", match_on=["method", "uri", "body"]).use_cassette(
                str(work / "vcr.yaml")
            ):
                answers.add(agent.run_agent(server.base_url, work / "w-vcr", echo=None))
        sizes["vcrpy"] = dir_bytes(work / "vcr.yaml")
        if "cassetter" in peers:
            import cassetter

            with ModelServer(turns=turns, seed=seed) as server:
                with cassetter.use_cassette(str(work / "cassetter.yaml"), record_mode="all"):
                    answers.add(agent.run_agent(server.base_url, work / "w-cas", echo=None))
            sizes["cassetter"] = dir_bytes(work / "cassetter.yaml")
        assert len(answers) == 1, f"the tools saw different conversations: {answers}"
        ratio = sizes["forkpoint"] / sizes["vcrpy"]
        line = (
            f"  {label:26}{sizes['forkpoint']:12,}"
            + "".join(f"{sizes[p]:12,}" for p in peers)
            + f"{ratio:10.3f}"
        )
        if "cassetter" in sizes:
            line += f"{sizes['forkpoint'] / sizes['cassetter']:14.3f}"
        print(line + f"   (tool arguments {args_bytes / max(turns, 1):.0f} B a turn)")
        if untracked is None:
            print(
                "  "
                + verdict(
                    f"bytes forkpoint / vcrpy at {turns} turns", ratio, T_BYTES.get(turns, T_BYTES[100])
                )
            )
        else:
            print(
                "  "
                + verdict(
                    f"bytes forkpoint / vcrpy at {turns} turns with {untracked} untracked files",
                    ratio,
                    T_BYTES[10],
                )
            )


def row_bytes_sdkless(turns_list: list[int], tmp: Path) -> None:
    import vcr

    import forkpoint

    print("\n== bytes on disk: SDK-less loop (tool arguments ~700 B a turn, whole JSON answers) ==")
    peers = ["vcrpy"] + (["cassetter"] if cassetter_available() else [])
    head = f"  {'':26}{'forkpoint':>12}" + "".join(f"{p:>12}" for p in peers) + f"{'fp/vcrpy':>10}"
    print(head + ("  fp/cassetter" if len(peers) > 1 else ""))
    tool = sdkless_tool()
    for turns in turns_list:
        work = tmp / f"bytes-sdkless-{turns}"
        sizes: dict[str, int] = {}
        with forkpoint.record(store=work / "store") as rec:
            answer = sdkless_loop(turns, tool)
        sizes["forkpoint"] = dir_bytes(rec.session_path)
        with vcr.VCR(record_mode="all", match_on=["method", "uri", "body"]).use_cassette(
            str(work / "vcr.yaml")
        ):
            assert sdkless_loop(turns, tool) == answer
        sizes["vcrpy"] = dir_bytes(work / "vcr.yaml")
        if "cassetter" in peers:
            import cassetter

            with cassetter.use_cassette(str(work / "cassetter.yaml"), record_mode="all"):
                assert sdkless_loop(turns, tool) == answer
            sizes["cassetter"] = dir_bytes(work / "cassetter.yaml")
        ratio = sizes["forkpoint"] / sizes["vcrpy"]
        line = f"  {turns:>3} turns{'':17}{sizes['forkpoint']:12,}" + "".join(
            f"{sizes[p]:12,}" for p in peers
        )
        line += f"{ratio:10.3f}" + (
            f"{sizes['forkpoint'] / sizes['cassetter']:14.3f}" if "cassetter" in sizes else ""
        )
        print(line)
        target = T_BYTES.get(turns, T_BYTES[100])
        print("  " + verdict(f"bytes forkpoint / vcrpy, SDK-less loop at {turns} turns", ratio, target))


def row_checkpoints(tmp: Path, files: int = 1000, count: int = 100) -> None:
    import forkpoint
    from forkpoint.checkpoint import manifest_rows

    print(f"\n== {count} checkpoints of a repository with {files:,} untracked files ==")
    repo = untracked_repo(tmp / "ckpt-repo", files)
    t0 = time.perf_counter()
    with forkpoint.record(store=tmp / "ckpt-store", workspace=repo) as rec:
        for _ in range(count):
            forkpoint.checkpoint()
    seconds = time.perf_counter() - t0
    total = dir_bytes(rec.session_path)
    shas: set[str] = set()
    for e in forkpoint.Session.load(rec.session_path).events:
        if e["type"] == "checkpoint":
            shas.update(r[4] for r in manifest_rows(e.get("workspace")))
    blobs = rec.session_path / "blobs"
    file_bytes = sum(
        f.stat().st_size
        for f in blobs.rglob("*")
        if f.is_file() and f.parent.name + f.name.split(".")[0] in shas
    )
    with forkpoint.record(store=tmp / "ckpt-empty", workspace=repo) as empty:
        pass
    base = dir_bytes(empty.session_path)
    beyond = (
        total
        - file_bytes
        - (base - sum(f.stat().st_size for f in (empty.session_path / "blobs").rglob("*") if f.is_file()))
    )
    print(
        f"  session {total:,} bytes; the files' blobs {file_bytes:,}; an empty recording's log {base:,}; {seconds:.1f} s"
    )
    print(
        "  " + verdict(f"{count} checkpoints: bytes beyond the files", beyond, T_CHECKPOINT_BYTES, "{:,.0f}")
    )


# --------------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------------

ROWS = (
    "startup",
    "floor",
    "sdkless",
    "sdkless-cache",
    "sdkless-stamp",
    "growth",
    "growth-stamp",
    "large",
    "bytes",
    "bytes-sdkless",
    "checkpoints",
)


def machine() -> str:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{' '.join(platform.uname())}; {cpu}; {os.cpu_count()} CPUs"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated, of: {', '.join(ROWS)}")
    parser.add_argument("--turns", default="10,100,500", help="turns of the floor row (default 10,100,500)")
    parser.add_argument("--bytes-turns", default="10,100", help="turns of the bytes row")
    parser.add_argument("--sdkless-turns", type=int, default=500)
    parser.add_argument("--growth", default="500,2000", help="the two lengths of the growth row")
    parser.add_argument(
        "--growth-limit-gib", type=float, default=8.0, help="address-space cap of each growth step"
    )
    parser.add_argument("--repeat", type=int, default=3, help="repetitions (median shown)")
    parser.add_argument(
        "--repeat-large", type=int, default=1, help=f"repetitions of the floor row from {LARGE_T} turns"
    )
    parser.add_argument("--repeat-startup", type=int, default=15)
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return child_main(args.child[0], args.child[1:])
    rows = [r.strip() for r in args.rows.split(",") if r.strip()]
    unknown = set(rows) - set(ROWS)
    if unknown:
        parser.error(f"unknown rows: {', '.join(sorted(unknown))}")
    import forkpoint

    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    print(f"forkpoint {forkpoint.__version__}; python {platform.python_version()}; {now}")
    print(f"machine: {machine()}")
    print(f"load average at start: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    started = time.perf_counter()
    # (compiled once, as pip compiles an installed package: see env_with_repo)
    compileall.compile_dir(REPO / "forkpoint", quiet=1)
    with tempfile.TemporaryDirectory(prefix="forkpoint-targets-") as name:
        tmp = Path(name)
        for row in rows:
            t0 = time.perf_counter()
            if row == "startup":
                row_startup(args.repeat_startup, tmp)
            elif row == "floor":
                row_floor([int(t) for t in args.turns.split(",")], args.repeat, tmp, args.repeat_large)
            elif row in SDKLESS_ROWS:
                row_sdkless(args.sdkless_turns, args.repeat, tmp, row)
            elif row in ("growth", "growth-stamp"):
                small, large = (int(t) for t in args.growth.split(","))
                row_growth(
                    small,
                    large,
                    tmp,
                    args.growth_limit_gib,
                    "sdkless-stamp" if row.endswith("stamp") else "sdkless",
                )
            elif row == "large":
                row_large(args.repeat, tmp)
            elif row == "bytes":
                row_bytes([int(t) for t in args.bytes_turns.split(",")], tmp)
            elif row == "bytes-sdkless":
                row_bytes_sdkless([int(t) for t in args.bytes_turns.split(",")], tmp)
            elif row == "checkpoints":
                row_checkpoints(tmp)
            print(f"  ({row}: {time.perf_counter() - t0:.1f} s)")
    print("\n== Targets (issue 15), as measured in this run ==")
    for line in VERDICTS:
        print("  " + line)
    print(
        f"total {time.perf_counter() - started:.1f} s; load average at end: {', '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
