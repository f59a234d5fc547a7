"""``forkpoint demo``: record the bundled agent against the bundled local model, replay it offline twice,
show that a live re-run takes another path, and print the timeline.

The model server (:mod:`forkpoint.demo.server`) is stochastic on purpose: ids, timestamps, file names
and the agent's path change from run to run, like a real model sampling at temperature > 0.
"""

from __future__ import annotations

import difflib
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from ..log import Session
from ..orchestrate import record_command, replay_command
from ..show import render, terminal
from ..text import escape, plural


def _agent_cmd(base_url: str, workdir: Path) -> list[str]:
    return [sys.executable, "-m", "forkpoint.demo.agent", "--base-url", base_url, "--workdir", str(workdir)]


def _indent(text: str | None) -> str:
    return "\n".join(f"    {escape(line)}" for line in (text or "").rstrip().splitlines())


def _lines_in(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def run_demo(*, store: Path, turns: int = 2, console: Console | None = None) -> int:
    """Run the demo end to end; returns 0 when both replays reproduced the recording exactly."""
    from .server import ModelServer  # imported here so `python -m forkpoint.demo.server` runs cleanly

    console = console or terminal()
    work = Path(tempfile.mkdtemp(prefix="forkpoint-demo-"))
    rows: list[tuple[str, str, str, str]] = []

    console.rule("[bold]1. record[/bold] the demo agent against a local, stochastic model server")
    workdir = work / "recorded"
    workdir.mkdir()
    with ModelServer(turns=turns) as server:
        cmd = _agent_cmd(server.openai_base_url, workdir)
        console.print(
            f"$ forkpoint record -- {' '.join(cmd[:1])} -m forkpoint.demo.agent …  (model at {server.base_url})"
        )
        t0 = time.perf_counter()
        path, code, recorded_out = record_command(cmd, store=store, name="demo", capture=True, quiet=True)
        record_s = time.perf_counter() - t0
        port = server.port
    console.print(_indent(recorded_out))
    session = Session.load(path, share_lists=True)
    n_model, n_tool = len(session.by_type("model_call")), len(session.by_type("tool_call"))
    console.print(
        f"recorded session [bold]{session.id}[/bold]: {plural(n_model, 'model call')}, "
        f"{plural(n_tool, 'tool call')}, exit code {code}"
    )
    rows.append(("record (live model)", f"{record_s:.2f} s", "—", f"exit {code}"))
    console.print(
        f"model server on port {port} [bold]stopped[/bold]: from here on nothing can answer but the session\n"
    )

    ok = code == 0
    test_log = workdir / "test_log.txt"
    for i in (1, 2):
        console.rule(f"[bold]2.{i} replay[/bold] offline, from the session alone")
        before = _lines_in(test_log)
        t0 = time.perf_counter()
        report, rcode, out = replay_command(session, capture=True, quiet=True)
        replay_s = time.perf_counter() - t0
        same = out == recorded_out
        untouched = _lines_in(test_log) == before
        matched = report is not None and report["matched"] == report["recorded"] and not report["unused"]
        ok = ok and same and untouched and matched and rcode == 0
        if report:
            console.print(
                f"{report['matched']}/{report['recorded']} recorded events matched, {len(report['unused'])} unused; "
                f"exit code {rcode}"
            )
        console.print(
            ("[green]output identical to the recorded run[/green]" if same else "[red]output differs![/red]")
            + "; "
            + (
                "[green]tool bodies did not run[/green] (run_tests appends a line to test_log.txt each time "
                "its body runs: the file is unchanged)"
                if untouched
                else "[red]a tool body ran![/red]"
            )
        )
        rows.append((f"replay {i} (offline)", f"{replay_s:.2f} s", "yes" if same else "NO", f"exit {rcode}"))

    console.rule("[bold]3. live re-run[/bold] of the same agent, same task, a fresh model server")
    live_dir = work / "live"
    live_dir.mkdir()
    env = dict(os.environ)
    env.pop("FORKPOINT_MODE", None)
    import subprocess

    with ModelServer(turns=turns) as server:
        t0 = time.perf_counter()
        live = subprocess.run(
            _agent_cmd(server.openai_base_url, live_dir), capture_output=True, text=True, env=env
        )
        live_s = time.perf_counter() - t0
    differs = live.stdout != recorded_out
    if differs:
        console.print(
            "[yellow]the live re-run took another path[/yellow] — this is why re-running cannot reproduce a bug:"
        )
        diff = difflib.unified_diff(
            (recorded_out or "").splitlines(),
            live.stdout.splitlines(),
            "recorded",
            "live re-run",
            n=0,
            lineterm="",
        )
        console.print(_indent("\n".join(list(diff)[2:])))
    else:
        console.print(
            "the live re-run happened to produce the same output this time (the model is random; try again)"
        )
    rows.append(
        ("live re-run", f"{live_s:.2f} s", "no" if differs else "yes (by chance)", f"exit {live.returncode}")
    )

    console.rule("[bold]4. timeline[/bold] of the recorded session")
    render(session, console)

    console.rule("[bold]summary[/bold]")
    table = Table(box=None, header_style="bold")
    for col in ("run", "time", "same output as recorded", "result"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(
        "[dim]each run is a new Python process: most of its time is interpreter start-up and importing the "
        "openai SDK (benchmarks/ times replays of longer runs)[/dim]"
    )
    prog = "forkpoint" if shutil.which("forkpoint") else str(Path(sys.argv[0]))
    console.print(
        f"\nsession stored in {session.path}\n"
        f"try:  {prog} show {session.id[:15]}   ·   {prog} replay {session.id[:15]}   ·   {prog} ls"
        + ("" if store == Path(".forkpoint") else f"   (with --store {store})")
    )
    shutil.rmtree(work, ignore_errors=True)  # the agent's scratch folders; the session stays in the store
    if not ok:
        console.print("[red]demo FAILED: a replay did not reproduce the recording[/red]")
    return 0 if ok else 1
