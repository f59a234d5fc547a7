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
from rich.markup import escape
from rich.table import Table

from . import __version__, override
from ._boot import child_env
from .log import Session, SessionError, SessionWriter, verify
from .record import end_event, make_header, open_workspace
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


def run_child(
    cmd: list[str], env: dict[str, str], *, capture: bool = False, cwd: Path | None = None
) -> tuple[int, str | None]:
    """Run ``cmd`` to completion with ``env``; Ctrl-C goes to the child.

    Returns (exit code, stdout text if ``capture`` else None). The exit code is 128 + the signal
    number when the child was killed by a signal, and 127 when the command does not exist.
    """
    try:
        proc = subprocess.Popen(
            cmd, env=env, cwd=cwd, stdout=subprocess.PIPE if capture else None, text=capture
        )
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
    workspace: Path | None = None,
    include_ignored: bool = False,
    quiet: bool = False,
    capture: bool = False,
) -> tuple[Path, int, str | None]:
    """Record ``cmd`` into a new session of ``store``; with ``workspace``, take checkpoints of it.

    Returns (session path, exit code, the command's stdout if ``capture``).
    """
    tools = list(tools or [])
    ws = open_workspace(workspace, store, include_ignored)
    header = make_header(argv=cmd, name=name, tags=tags)
    header["tools"] = tools
    header["workspace"] = ws.describe() if ws else None
    writer = SessionWriter.create(store, header)
    started = time.perf_counter()
    env = child_env("record", writer.path, tools=tools)
    if ws is not None:
        env["FORKPOINT_WORKSPACE"] = orjson.dumps(
            {"root": str(ws.root), "include_ignored": include_ignored}
        ).decode()
    code, out = run_child(cmd, env, capture=capture)
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
    live_from: int | None = None,
    cwd: Path | None = None,
    child_name: str | None = None,
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
    what_if = bool(specs) or "live" in (models_source, tools_source) or on_divergence != "stop" or live_from
    child = None
    if what_if:
        child = create_child(
            session,
            argv=command,
            models=models_source,
            tools=tools_source,
            on_divergence=on_divergence,
            overrides=specs,
            seq=live_from,
            name=child_name,
        )
    options = {
        "models": models_source,
        "tools": tools_source,
        "on_divergence": on_divergence,
        "overrides": specs,
        "child": str(child.path.resolve()) if child else None,
        "live_from": live_from,
    }
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="forkpoint-replay-") as tmp:
        report_path = Path(tmp) / "report.json"
        env = child_env("replay", session.path, tools=all_tools, report=report_path, replay_options=options)
        code, out = run_child(command, env, capture=capture, cwd=cwd)
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
@click.option(
    "--workspace",
    metavar="DIR",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Checkpoint this directory (default: the git repository of the current directory, if any).",
)
@click.option("--no-workspace", is_flag=True, help="Take no checkpoints.")
@click.option(
    "--include-ignored", is_flag=True, help="Checkpoints also archive files that .gitignore ignores."
)
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def record(
    store: str | None,
    name: str | None,
    tags: tuple[str, ...],
    tools: tuple[str, ...],
    workspace: Path | None,
    no_workspace: bool,
    include_ignored: bool,
    cmd: tuple[str, ...],
) -> None:
    """Run CMD and record its model calls and tool calls:  forkpoint record -- python agent.py"""
    if no_workspace:
        workspace = None
    elif workspace is None:
        from .checkpoint import repo_root

        workspace = repo_root(Path.cwd())
    _, code, _ = record_command(
        _command(cmd),
        store=_store(store),
        name=name,
        tags=_parse_tags(tags),
        tools=_check_tools(tools),
        workspace=workspace,
        include_ignored=include_ignored,
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


def _session_at(ref: str, store: str | None) -> tuple[Session, int]:
    name, sep, seq = ref.rpartition("@")
    if not sep or not seq.isdigit():
        raise click.BadParameter(
            f"{ref!r}: expected SESSION@SEQ, e.g. last@4 (see: forkpoint checkpoints SESSION)"
        )
    return _load(name, store), int(seq)


def _print_checks(checks: list[Any]) -> bool:
    ok = True
    for c in checks:
        ok = ok and c.ok
        mark = "[green]pass[/green]" if c.ok else "[red]FAIL[/red]"
        detail = (
            ""
            if c.ok
            else f"\n        expected {escape(str(c.expected))}\n        actual   {escape(str(c.actual))}"
        )
        err.print(f"  {mark}  {c.name}{detail}")
    return ok


@main.command()
@click.argument("session")
@_store_opt
def checkpoints(session: str, store: str | None) -> None:
    """List the checkpoints of SESSION (restore one with: forkpoint restore SESSION@SEQ --into DIR)."""
    s = _load(session, store)
    table = Table(box=None, header_style="bold")
    for col in (
        "seq",
        "turn",
        "boundary",
        "source tree",
        "changed",
        "workspace",
        "files",
        "messages",
        "reason",
    ):
        table.add_column(col)
    for e in s.by_type("checkpoint"):
        src = e.get("source") or {}
        ws = e.get("workspace") or {}
        msgs = (e.get("context") or {}).get("messages") or (e.get("context") or {}).get("input") or []
        table.add_row(
            str(e["seq"]),
            str(e.get("turn")),
            e["boundary"],
            str(src.get("tree", "—"))[:12],
            str(len(src.get("changed", []))),
            str(ws.get("fingerprint", ""))[:12],
            str(len(ws.get("manifest", []))),
            str(len(msgs)) if isinstance(msgs, list) else "1",
            escape(e.get("reason", "")),
        )
    if not table.row_count:
        err.print(
            f"session {s.id} has no checkpoints (record with --workspace DIR, or inside a git repository)"
        )
        sys.exit(1)
    Console(highlight=False).print(table)


@main.command()
@click.argument("ref", metavar="SESSION@SEQ")
@click.option("--into", required=True, type=click.Path(path_type=Path), help="A new or empty directory.")
@click.option(
    "--repo",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Clone the base commit from here instead of the recorded repository.",
)
@_store_opt
def restore(ref: str, into: Path, repo: Path | None, store: str | None) -> None:
    """Rebuild a checkpoint in a fresh directory, then validate it."""
    from .checkpoint import CheckpointError, validate
    from .checkpoint import restore as do_restore

    session, seq = _session_at(ref, store)
    try:
        do_restore(session, seq, into, repo=repo)
        err.print(f"restored {session.id}@{seq} into {into}; validating:")
        ok = _print_checks(validate(into))
    except CheckpointError as exc:
        raise click.ClickException(str(exc)) from None
    sys.exit(0 if ok else 1)


@main.command(name="validate")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
def validate_cmd(directory: Path) -> None:
    """Check a restored directory against its checkpoint, without any model."""
    from .checkpoint import CheckpointError, validate

    try:
        ok = _print_checks(validate(directory))
    except CheckpointError as exc:
        raise click.ClickException(str(exc)) from None
    sys.exit(0 if ok else 1)


@main.command()
@click.argument("ref", metavar="SESSION@SEQ")
@click.option("--arms", default=1, show_default=True, type=click.IntRange(1, 64), help="How many arms.")
@click.option(
    "--into",
    type=click.Path(path_type=Path),
    help="Parent folder of the arms (default: ./forks/SESSION@SEQ).",
)
@click.option(
    "--override",
    "overrides",
    multiple=True,
    metavar="SPEC",
    help="Applied in every arm (see replay --override).",
)
@click.option(
    "--on-divergence",
    type=click.Choice(POLICIES),
    default="stop",
    show_default=True,
    help="If an arm's replayed prefix diverges.",
)
@click.option(
    "--repo", type=click.Path(exists=True, file_okay=False, path_type=Path), help="See restore --repo."
)
@_store_opt
@click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)
def fork(
    ref: str,
    arms: int,
    into: Path | None,
    overrides: tuple[str, ...],
    on_divergence: str,
    repo: Path | None,
    store: str | None,
    cmd: tuple[str, ...],
) -> None:
    """Restore a resumable checkpoint into N arms and continue each live from there.

    In each arm, CMD runs in the restored directory: the calls recorded before the checkpoint are
    replayed (no model, no tool bodies), every later one is live, and the arm is recorded as a new
    session linked to SESSION@SEQ. CMD must work on its current directory.
    """
    from .checkpoint import CheckpointError, find, validate
    from .checkpoint import restore as do_restore

    session, seq = _session_at(ref, store)
    try:
        cp = find(session, seq)
    except CheckpointError as exc:
        raise click.ClickException(str(exc)) from None
    if cp["boundary"] != "resumable":
        raise click.ClickException(
            f"checkpoint {session.id}@{seq} is {cp['boundary']}: it lies between two tool calls of one turn, "
            "so resuming there would make the agent speak twice. Fork from a resumable checkpoint "
            "(forkpoint checkpoints lists them)."
        )
    root = into or Path("forks") / f"{session.id}@{seq}"
    rows = []
    failed = 0
    for i in range(1, arms + 1):
        arm_dir = root / f"arm-{i}"
        err.rule(f"arm {i}: {arm_dir}")
        try:
            do_restore(session, seq, arm_dir, repo=repo)
            valid = _print_checks(validate(arm_dir))
        except CheckpointError as exc:
            err.print(f"[red]{escape(str(exc))}[/red]")
            rows.append((str(i), str(arm_dir), "[red]restore failed[/red]", "", "", ""))
            failed += 1
            continue
        if not valid:
            rows.append((str(i), str(arm_dir), "[red]invalid[/red]", "", "", ""))
            failed += 1
            continue
        report, code, _ = replay_command(
            session,
            _command(cmd),
            on_divergence=on_divergence,
            overrides=list(overrides),
            live_from=seq,
            cwd=arm_dir.resolve(),
            child_name=f"fork {session.id}@{seq} arm {i}",
        )
        failed += code != 0
        live = (report or {}).get("live_calls") or {}
        rows.append(
            (
                str(i),
                str(arm_dir),
                "[green]valid[/green]",
                f"{(report or {}).get('matched', 0)} replayed, "
                f"{live.get('models', 0)} model + {live.get('tools', 0)} tool live",
                str(code),
                Path((report or {}).get("child_session") or "—").name,
            )
        )
    table = Table(box=None, header_style="bold", title=f"fork of {session.id}@{seq}", title_justify="left")
    for col in ("arm", "directory", "checkpoint", "calls", "exit", "session"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    Console(highlight=False).print(table)
    sys.exit(0 if failed == 0 else 1)


if __name__ == "__main__":  # pragma: no cover
    main()
