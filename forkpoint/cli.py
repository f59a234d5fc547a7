"""The ``forkpoint`` command line: record, replay, show, ls, verify, diff, demo.

Exit codes: ``record`` and ``replay`` exit with the agent's own code; ``replay`` exits with
:data:`~forkpoint.replay.EXIT_DIVERGENCE` (3) when the run diverged from the recording;
2 is a usage error or unreadable session; 127 a command that was not found.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click
import orjson
from rich.console import Console
from rich.table import Table

from . import __version__, override
from ._boot import child_env
from .log import Session, SessionError, SessionWriter, verify
from .record import end_event, make_header
from .replay import EXIT_DIVERGENCE, POLICIES, SOURCES, create_child, format_divergence, summary_line
from .store import default_store, info, resolve, session_dirs
from .tools import parse_target

err = Console(stderr=True, highlight=False)


def _store(value: str | None) -> Path:
    return Path(value) if value else default_store()


def _load(ref: str, store: str | None) -> Session:
    try:
        return Session.load(resolve(ref, _store(store)))
    except SessionError as exc:
        raise click.ClickException(str(exc)) from None


def run_child(cmd: list[str], env: dict[str, str], *, capture: bool = False) -> tuple[int, str | None]:
    """Run ``cmd`` to completion with ``env``; Ctrl-C goes to the child.

    Returns (exit code, stdout text if ``capture`` else None). The exit code is 128 + the signal
    number when the child was killed by a signal, and 127 when the command does not exist.
    """
    try:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE if capture else None, text=capture)
    except FileNotFoundError:
        err.print(f"[red]forkpoint: command not found: {cmd[0]}[/red]")
        return 127, None
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        out, _ = proc.communicate()
    finally:
        signal.signal(signal.SIGINT, old)
    code = proc.returncode
    return (128 - code if code < 0 else code), out


def record_command(
    cmd: list[str],
    *,
    store: Path,
    name: str | None = None,
    tags: dict[str, str] | None = None,
    tools: list[str] | None = None,
    quiet: bool = False,
    capture: bool = False,
) -> tuple[Path, int, str | None]:
    """Record ``cmd`` into a new session of ``store``.

    Returns (session path, exit code, the command's stdout if ``capture``).
    """
    tools = list(tools or [])
    header = make_header(argv=cmd, name=name, tags=tags)
    header["tools"] = tools
    writer = SessionWriter.create(store, header)
    started = time.perf_counter()
    code, out = run_child(cmd, child_env("record", writer.path, tools=tools), capture=capture)
    writer.append(end_event(code, started))
    writer.close()
    if not quiet:
        i = info(writer.path)
        err.print(
            f"forkpoint: recorded session {writer.session_id} ({i.model_calls} model calls, "
            f"{i.tool_calls} tool calls) in {writer.path}"
        )
    return writer.path, code, out


def replay_command(
    session: Session,
    cmd: list[str] | None = None,
    *,
    tools: list[str] | None = None,
    models_source: str = "replay",
    tools_source: str = "replay",
    on_divergence: str = "stop",
    overrides: list[str] | None = None,
    quiet: bool = False,
    capture: bool = False,
) -> tuple[dict[str, Any] | None, int, str | None]:
    """Replay ``session`` by running ``cmd`` (default: the recorded command).

    With overrides, a live source or a policy other than ``stop``, the run is recorded as a new
    session linked to its parent. Returns (report, or None if the process wrote none; exit code as
    ``forkpoint replay`` exits; the command's stdout if ``capture``). Raises
    :class:`~forkpoint.override.OverrideError` for an override that does not fit the session.
    """
    command = list(cmd or session.header.get("argv") or [])
    if not command:
        raise click.UsageError("the session has no recorded command; give one after --")
    specs = list(overrides or [])
    parsed = [override.parse(o) for o in specs]
    override.resolve(parsed, [e for e in session.events if e["type"] in ("model_call", "tool_call")])
    all_tools = list(dict.fromkeys([*(session.header.get("tools") or []), *(tools or [])]))
    what_if = bool(specs) or "live" in (models_source, tools_source) or on_divergence != "stop"
    child = None
    if what_if:
        child = create_child(
            session,
            argv=command,
            models=models_source,
            tools=tools_source,
            on_divergence=on_divergence,
            overrides=specs,
        )
    options = {
        "models": models_source,
        "tools": tools_source,
        "on_divergence": on_divergence,
        "overrides": specs,
        "child": str(child.path) if child else None,
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="forkpoint-replay-") as tmp:
        report_path = Path(tmp) / "report.json"
        env = child_env("replay", session.path, tools=all_tools, report=report_path, replay_options=options)
        code, out = run_child(command, env, capture=capture)
        report = orjson.loads(report_path.read_bytes()) if report_path.exists() else None
    if child is not None:
        child.append(end_event(code, started))
        child.close()
    if report is None:
        err.print(
            "[red]forkpoint: the replayed process wrote no report: it did not start forkpoint (is forkpoint "
            "installed in its environment?), or it was killed, or it left through os._exit[/red]"
        )
        return None, code if code else 1, out
    if not quiet:
        err.print(summary_line(report), markup=False)
        for o in report.get("overrides") or []:
            state = "applied" if o["applied"] else "never reached (the run went another way first)"
            err.print(f"  override {o['spec']} → event seq {o['seq']}: {state}", markup=False)
    if report.get("divergence"):
        if not quiet:
            err.print(format_divergence(report["divergence"]), markup=False)
            for d in (report.get("drift") or [])[1:]:
                err.print(
                    f"  drift at {d['kind'].replace('_', ' ')} #{d['position']}: served recorded seq "
                    f"{d['served_seq']} ({len(d['diff'])} difference(s))",
                    markup=False,
                )
        if on_divergence == "stop":
            return report, EXIT_DIVERGENCE, out
    elif specs and not quiet and any(o["applied"] for o in report.get("overrides") or []):
        err.print(
            "the override(s) did not change the agent's path: every later call matched the recording",
            markup=False,
        )
    return report, code, out


def _command(cmd: tuple[str, ...]) -> list[str]:
    """CMD as given after ``--`` (click passes the ``--`` through once a positional came first)."""
    return list(cmd[1:] if cmd[:1] == ("--",) else cmd)


def _parse_tags(values: tuple[str, ...]) -> dict[str, str]:
    tags = {}
    for v in values:
        k, sep, val = v.partition("=")
        if not sep or not k:
            raise click.BadParameter(f"{v!r}: expected KEY=VALUE", param_hint="--tag")
        tags[k] = val
    return tags


def _check_tools(values: tuple[str, ...]) -> list[str]:
    for v in values:
        try:
            parse_target(v)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--tool") from None
    return list(values)


_store_opt = click.option(
    "--store", metavar="DIR", help="Session store (default: $FORKPOINT_STORE or .forkpoint/)."
)
_cmd_settings = {"ignore_unknown_options": True, "allow_interspersed_args": False}


@click.group()
@click.version_option(__version__, prog_name="forkpoint")
def main() -> None:
    """Record AI agent sessions and replay them offline, deterministically."""


@main.command(context_settings=_cmd_settings)
@_store_opt
@click.option("--name", help="A name for the session.")
@click.option(
    "--tag", "tags", multiple=True, metavar="K=V", help="A tag, e.g. agent_version=1.4 (repeatable)."
)
@click.option(
    "--tool",
    "tools",
    multiple=True,
    metavar="MODULE:QUALNAME",
    help="Record this function as a tool (repeatable).",
)
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def record(
    store: str | None, name: str | None, tags: tuple[str, ...], tools: tuple[str, ...], cmd: tuple[str, ...]
) -> None:
    """Run CMD and record its model calls and tool calls:  forkpoint record -- python agent.py"""
    _, code, _ = record_command(
        _command(cmd), store=_store(store), name=name, tags=_parse_tags(tags), tools=_check_tools(tools)
    )
    sys.exit(code)


@main.command()
@click.argument("session")
@_store_opt
@click.option(
    "--tool",
    "tools",
    multiple=True,
    metavar="MODULE:QUALNAME",
    help="Also serve this function from the session.",
)
@click.option(
    "--override",
    "overrides",
    multiple=True,
    metavar="SPEC",
    help="Replace one recorded result: tool:NAME[#K][.result|.error]=JSON, model#K[.text|.tool_calls|.body]=JSON, "
    "seq:N=JSON; JSON may be @file (repeatable).",
)
@click.option(
    "--models",
    "models_source",
    type=click.Choice(SOURCES),
    default="replay",
    show_default=True,
    help="Serve model calls from the session, or make them live.",
)
@click.option(
    "--tools",
    "tools_source",
    type=click.Choice(SOURCES),
    default="replay",
    show_default=True,
    help="Serve tool calls from the session, or run the tools.",
)
@click.option(
    "--on-divergence",
    type=click.Choice(POLICIES),
    default="stop",
    show_default=True,
    help="After a call that matches nothing: stop (exit 3), continue live, or serve the next recorded call (fifo).",
)
@click.option("--report", "report_file", metavar="FILE", help="Write the replay report here as JSON.")
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def replay(
    session: str,
    store: str | None,
    tools: tuple[str, ...],
    overrides: tuple[str, ...],
    models_source: str,
    tools_source: str,
    on_divergence: str,
    report_file: str | None,
    cmd: tuple[str, ...],
) -> None:
    """Run the recorded command (or CMD) with every model and tool call served from SESSION.

    Exits with the command's own code, or 3 when the run diverged from the recording (policy stop).
    A what-if run (overrides, live sources, policy live or fifo) is recorded as a new session.
    """
    try:
        report, code, _ = replay_command(
            _load(session, store),
            _command(cmd) or None,
            tools=_check_tools(tools),
            models_source=models_source,
            tools_source=tools_source,
            on_divergence=on_divergence,
            overrides=list(overrides),
        )
    except override.OverrideError as exc:
        raise click.BadParameter(str(exc), param_hint="--override") from None
    if report_file and report is not None:
        Path(report_file).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    sys.exit(code)


@main.command(name="diff")
@click.argument("a")
@click.argument("b")
@_store_opt
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def diff_cmd(a: str, b: str, store: str | None, as_json: bool) -> None:
    """Align two sessions call by call; name the first divergence. Exit 0 when equivalent."""
    from .diff import diff_sessions, render_diff

    result = diff_sessions(_load(a, store), _load(b, store))
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(result.to_json(), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        render_diff(result, Console(highlight=False))
    sys.exit(0 if result.equivalent else 1)


@main.command()
@click.argument("session")
@_store_opt
@click.option("--json", "as_json", is_flag=True, help="Print the whole session as JSON.")
def show(session: str, store: str | None, as_json: bool) -> None:
    """Show a session as a timeline of turns, model calls and tool calls."""
    from . import show as show_mod

    s = _load(session, store)
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(show_mod.as_json(s), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        show_mod.render(s)


@main.command(name="ls")
@_store_opt
def ls_cmd(store: str | None) -> None:
    """List the sessions of the store, oldest first."""
    root = _store(store)
    table = Table(box=None, header_style="bold")
    for col in ("session", "name", "created", "model", "tool", "exit", "command"):
        table.add_column(col)
    for d in session_dirs(root):
        try:
            i = info(d)
        except SessionError as exc:
            table.add_row(d.name, f"[red]unreadable: {exc}[/red]", "", "", "", "", "")
            continue
        exit_code = "—" if not i.complete else str(i.exit_code)
        table.add_row(
            d.name,
            i.header.get("name") or "",
            str(i.header.get("created", ""))[:19],
            str(i.model_calls),
            str(i.tool_calls),
            exit_code,
            " ".join(i.header.get("argv") or [])[:60],
        )
    if not table.row_count:
        err.print(f"no sessions in {root}")
        return
    Console(highlight=False).print(table)


@main.command(name="verify")
@click.argument("session")
@_store_opt
def verify_cmd(session: str, store: str | None) -> None:
    """Check a session's hash chain and blobs; names the first line that fails."""
    try:
        path = resolve(session, _store(store))
    except SessionError as exc:
        raise click.ClickException(str(exc)) from None
    v = verify(path)
    for p in v.problems:
        err.print(f"[red]{p}[/red]", markup=False)
    state = "ok" if v.ok else "FAILED"
    trunc = " (log ends in an incomplete line: truncated, not corrupt)" if v.truncated else ""
    click.echo(f"verify {state}: {v.events} events, {v.blobs} blobs checked{trunc}")
    sys.exit(0 if v.ok else 1)


@main.command()
@_store_opt
@click.option("--turns", default=2, show_default=True, help="Tool-using turns the demo model asks for.")
def demo(store: str | None, turns: int) -> None:
    """Record the bundled agent against the bundled local model, replay it offline twice, show it."""
    from .demo import run_demo

    sys.exit(run_demo(store=_store(store), turns=turns))


if __name__ == "__main__":  # pragma: no cover
    main()
