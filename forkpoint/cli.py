"""The ``forkpoint`` command line: record, replay, show, ls, verify, diff, checkpoints, restore, validate,
fork, import, export, scrub, demo.

Exit codes: ``record`` and ``replay`` exit with the agent's own code; ``replay`` exits with
:data:`~forkpoint.replay.EXIT_DIVERGENCE` (3) when the run diverged from the recording;
2 is a usage error or unreadable session; 127 a command that was not found.
"""

from __future__ import annotations

import shutil
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
from .replay import (
    EXIT_DIVERGENCE,
    POLICIES,
    SOURCES,
    create_child,
    ended_by_override,
    format_divergence,
    merge_reports,
    summary_line,
)
from .show import plural, terminal
from .store import (
    INDEX_DIR,
    info,
    list_sessions,
    render_listing,
    resolve,
    session_finished,
    session_started,
    store_dir,
)
from .tools import parse_target

# Messages name paths and sessions: never hard-wrap them.
err = Console(stderr=True, highlight=False, soft_wrap=True)


def _store(value: str | None) -> Path:
    # A path, or any fsspec URL (s3://…): its local mirror, which forkpoint.store uploads from.
    try:
        return store_dir(value)
    except SessionError as exc:
        raise click.ClickException(str(exc)) from None


def _output_file(path: str | Path, option: str) -> Path:
    """``path`` as a file forkpoint may write, or a usage error naming ``option`` and what is wrong
    (checked before any work is done, so nothing is half-written)."""
    out = Path(path)
    folder = out.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise click.BadParameter(f"cannot write {out}: the folder {folder} {what}", param_hint=option)
    if out.is_dir():
        raise click.BadParameter(f"cannot write {out}: it is a folder", param_hint=option)
    return out


def _load(ref: str, store: str | None, *, check: bool = True) -> Session:
    """The session ``ref`` names. With ``check``, a log whose hash chain fails (an edited line) is
    still loaded, with a warning: what it shows may not be what was recorded. (Blobs are checked
    by ``verify``; ``replay`` refuses a session that fails either.)"""
    try:
        session = Session.load(resolve(ref, _store(store)))
    except SessionError as exc:
        raise click.ClickException(str(exc)) from None
    if check:
        v = verify(session.path, git=False, deep=False)
        if v.problems:
            err.print(
                f"[yellow]forkpoint: WARNING: session {session.id} fails verification, so what follows may "
                f"not be what was recorded: {escape(v.problems[0])} (see: forkpoint verify {escape(str(session.path))})[/yellow]"
            )
    return session


def run_child(
    cmd: list[str], env: dict[str, str], *, capture: bool = False, cwd: Path | None = None
) -> tuple[int, str | None]:
    """Run ``cmd`` to completion with ``env``; Ctrl-C, SIGTERM and SIGHUP go to the child.

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

    # Ctrl-C reaches the child through the terminal's process group; SIGTERM and SIGHUP (a timeout,
    # a CI cancel, a closed terminal) are sent to this process only, so pass them on. Either way we
    # wait for the child, so the session still gets its end event.
    def forward(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    old = {
        sig: signal.signal(sig, handler)
        for sig, handler in (
            (signal.SIGINT, signal.SIG_IGN),
            (signal.SIGTERM, forward),
            (signal.SIGHUP, forward),
        )
    }
    try:
        out, _ = proc.communicate()
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
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
    session_started(writer.path)
    started = time.perf_counter()
    env = child_env("record", writer.path, tools=tools)
    if ws is not None:
        env["FORKPOINT_WORKSPACE"] = orjson.dumps(
            {"root": str(ws.root), "include_ignored": include_ignored}
        ).decode()
    code, out = run_child(cmd, env, capture=capture)
    writer.append(end_event(code, started))
    writer.close()
    where = session_finished(writer.path, quiet=quiet)  # index entry; upload to a remote store
    if not quiet:
        i = info(writer.path)
        err.print(
            f"forkpoint: recorded session {writer.session_id} ({plural(i.model_calls, 'model call')}, "
            f"{plural(i.tool_calls, 'tool call')}) in {where}"
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
    check: bool = True,
    quiet: bool = False,
    capture: bool = False,
) -> tuple[dict[str, Any] | None, int, str | None]:
    """Replay ``session`` by running ``cmd`` (default: the recorded command).

    With overrides, a live source or a policy other than ``stop``, the run is recorded as a new
    session linked to its parent. Returns (report, or None if the process wrote none; exit code as
    ``forkpoint replay`` exits; the command's stdout if ``capture``). Raises
    :class:`~forkpoint.override.OverrideError` for an override that does not fit the session.
    """
    origin = session.header.get("imported_from")
    if not cmd and origin:
        raise click.UsageError(
            f"session {session.id} was imported from a {origin.get('format')} file ({origin.get('path')}): "
            f"it has no agent command to run again. Give the command that runs your agent after --, e.g. "
            f"forkpoint replay {session.id} -- python agent.py"
        )
    command = list(cmd or session.header.get("argv") or [])
    if not command:
        raise click.UsageError("the session has no recorded command; give one after --")
    if not cmd:
        command = _runnable(command)
    if check:
        v = verify(session.path, git=False)
        if v.problems:
            raise click.ClickException(
                f"session {session.id} fails verification, so it may not be what was recorded: "
                f"{v.problems[0]} (see: forkpoint verify {session.id}; replay it anyway with --no-verify)"
            )
    specs = list(overrides or [])
    parsed = [override.parse(o) for o in specs]
    override.resolve(parsed, [e for e in session.events if e["type"] in ("model_call", "tool_call")])
    all_tools = list(dict.fromkeys([*(session.header.get("tools") or []), *(tools or [])]))
    what_if = bool(specs) or "live" in (models_source, tools_source) or on_divergence != "stop" or live_from
    child = None
    if what_if:
        # Beside the parent when it is in a store; a session that is not (a pytest cassette, a copy
        # kept with the tests) gets its what-if runs in the default store, not among its files.
        in_store = (session.path.parent / INDEX_DIR).is_dir()
        child = create_child(
            session,
            argv=command,
            models=models_source,
            tools=tools_source,
            on_divergence=on_divergence,
            overrides=specs,
            seq=live_from,
            name=child_name,
            into=None if in_store else store_dir(None),
        )
        if not in_store and not quiet:
            err.print(f"forkpoint: this what-if run is recorded in {child.path.parent}", markup=False)
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
        env = child_env("replay", session.path, tools=all_tools, report=Path(tmp), replay_options=options)
        code, out = run_child(command, env, capture=capture, cwd=cwd)
        # One report per replaying process (a recorded shell script may run several programs).
        reports = [orjson.loads(p.read_bytes()) for p in Path(tmp).glob("report-*.json")]
        reports.sort(key=lambda r: r.get("process_started") or 0)
        report = merge_reports(reports) if reports else None
    if child is not None:
        child.append(end_event(code, started))
        child.close()
        session_finished(child.path, quiet=quiet)
    # The recorded command's relative paths meant what they meant where it was recorded. Not run
    # there on purpose (that may be another checkout); said when the run went wrong.
    recorded_cwd = session.header.get("cwd")
    here = (cwd or Path.cwd()).resolve()
    moved = not cmd and recorded_cwd and Path(recorded_cwd).resolve() != here
    hint = (
        f" (the session was recorded in {recorded_cwd}, this replay ran in {here}: replay from there, "
        "or give the command after --)"
        if moved
        else ""
    )
    if report is None:
        err.print(
            "[red]forkpoint: the replayed process wrote no report: it did not start forkpoint (is forkpoint "
            f"installed in its environment?), or it was killed, or it left through os._exit{escape(hint)}[/red]"
        )
        return None, code if code else 1, out
    if moved and not quiet and (code != 0 or not report.get("matched")):
        err.print(f"forkpoint: note{hint}", markup=False)
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
    elif not report.get("reproduced", True) and not ended_by_override(report):
        # Ended early, or reached for the network: the run did not reproduce the recording.
        return report, EXIT_DIVERGENCE, out
    elif (
        specs
        and not quiet
        and not report.get("ended_early")
        and any(o["applied"] for o in report.get("overrides") or [])
    ):
        err.print(
            "the override(s) did not change the agent's path: every later call matched the recording",
            markup=False,
        )
    return report, code, out


def _runnable(command: list[str]) -> list[str]:
    """A recorded command as this replay runs it. A bare ``python``, ``python3`` or ``pytest`` is
    run with the interpreter forkpoint itself runs in, unless PATH finds it beside that interpreter:
    the replay needs forkpoint importable in the program, and a PATH without the (not activated)
    virtualenv would find another Python, or none."""
    if not command or command[0] not in ("python", "python3", "pytest"):
        return command
    found = shutil.which(command[0])
    if found is not None and Path(found).parent == Path(sys.executable).parent:
        return command
    launcher = [sys.executable, "-m", "pytest"] if command[0] == "pytest" else [sys.executable]
    return [*launcher, *command[1:]]


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
    "--store",
    metavar="DIR|URL",
    help="Session store: a directory or an fsspec URL such as s3://bucket/prefix "
    "(default: $FORKPOINT_STORE or .forkpoint/).",
)
_cmd_settings = {"ignore_unknown_options": True, "allow_interspersed_args": False}


@click.group()
@click.version_option(__version__, prog_name="forkpoint")
def main() -> None:
    """Record AI agent sessions and replay them offline, deterministically.

    SESSION is a session directory, an id, an id prefix, `last` (the newest in the store), or a
    name given with --name (the newest session of that name). The store is --store, else
    $FORKPOINT_STORE, else .forkpoint/ in the current directory.
    """


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
    command = _command(cmd)
    if command and shutil.which(command[0]) is None:
        # Before a session exists: a typo must not leave an empty session behind as `last`.
        err.print(f"[red]forkpoint: command not found: {escape(command[0])}[/red]")
        sys.exit(127)
    if no_workspace:
        workspace = None
    elif workspace is None:
        from .checkpoint import repo_root

        workspace = repo_root(Path.cwd())
    _, code, _ = record_command(
        command,
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
@click.option(
    "--no-verify", is_flag=True, help="Replay even a session whose hash chain or blobs fail verification."
)
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
    no_verify: bool,
    cmd: tuple[str, ...],
) -> None:
    """Run the recorded command (or CMD) with every model and tool call served from SESSION.

    Exits with the command's own code, or 3 when the run diverged from the recording (policy stop).
    A what-if run (overrides, live sources, policy live or fifo) is recorded as a new session.
    """
    if report_file:
        _output_file(report_file, "--report")
    try:
        report, code, _ = replay_command(
            _load(session, store, check=False),  # replay_command verifies, and refuses
            _command(cmd) or None,
            tools=_check_tools(tools),
            models_source=models_source,
            tools_source=tools_source,
            on_divergence=on_divergence,
            overrides=list(overrides),
            check=not no_verify,
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
        render_diff(result, terminal())
    sys.exit(0 if result.equivalent else 1)


@main.command()
@click.argument("session")
@_store_opt
@click.option("--json", "as_json", is_flag=True, help="Print the whole session as JSON.")
@click.option(
    "--html",
    "html_file",
    metavar="FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write a self-contained HTML viewer of the session to FILE.",
)
def show(session: str, store: str | None, as_json: bool, html_file: Path | None) -> None:
    """Show a session as a timeline of turns, model calls and tool calls."""
    from . import show as show_mod

    if html_file is not None:
        _output_file(html_file, "--html")
    s = _load(session, store)
    if html_file is not None:
        from .html import write_html

        write_html(s, html_file)
        err.print(f"forkpoint: wrote {html_file} (session {s.id}, {len(s.events)} events)", markup=False)
        return
    if as_json:
        sys.stdout.buffer.write(orjson.dumps(show_mod.as_json(s), option=orjson.OPT_INDENT_2) + b"\n")
    else:
        show_mod.render(s)


@main.command(name="ls")
@_store_opt
@click.option(
    "--reindex",
    is_flag=True,
    help="Rebuild the store's index from a walk of every session (missing or stale index).",
)
def ls_cmd(store: str | None, reindex: bool) -> None:
    """List the sessions of the store, oldest first, from its index (see docs/store.md).

    For a remote store, sessions recorded on this machine whose upload did not finish are uploaded first.
    """
    try:
        listing = list_sessions(_store(store), reindex=reindex)
    except SessionError as exc:
        raise click.ClickException(str(exc)) from None
    for note in listing.notes:
        err.print(f"forkpoint: {note}", markup=False)
    if not listing.rows:
        err.print(f"no sessions in {listing.store}", markup=False)
        return
    click.echo(render_listing(listing.rows))


@main.command(name="verify")
@click.argument("session")
@_store_opt
def verify_cmd(session: str, store: str | None) -> None:
    """Check a session's hash chain and blobs; names the first line that fails."""
    try:
        path = resolve(session, _store(store), refresh=True)  # a remote session: download it again
    except SessionError as exc:
        raise click.ClickException(str(exc)) from None
    v = verify(path)
    for p in v.problems:
        err.print(p, style="red", markup=False)
    for n in v.notes:
        err.print(n, markup=False)
    state = "ok" if v.ok else "FAILED"
    trunc = " (log ends in an incomplete line: truncated, not corrupt)" if v.truncated else ""
    if v.ok and not v.truncated and not v.complete:
        trunc = " (no end event: incomplete, not corrupt)"
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


def _shown(value: Any) -> str:
    """A check's expected or actual value for people: ``key: value`` pairs and lists as text, not
    Python reprs."""
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_shown(v)}" for k, v in value.items())
    if isinstance(value, list | tuple | set):
        return ", ".join(_shown(v) for v in value) or "(none)"
    return str(value)


def _print_checks(checks: list[Any]) -> bool:
    ok = True
    for c in checks:
        ok = ok and c.ok
        mark = "[green]pass[/green]" if c.ok else "[red]FAIL[/red]"
        detail = (
            ""
            if c.ok
            else f"\n        expected {escape(_shown(c.expected))}\n        actual   {escape(_shown(c.actual))}"
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
            str(ws.get("files", len(ws.get("manifest") or []))),
            str(len(msgs)) if isinstance(msgs, list) else "1",
            escape(e.get("reason", "")),
        )
    if not table.row_count:
        parent = s.header.get("parent")
        if parent:
            # A what-if run or a fork arm: the replayed part has its checkpoints in the parent, and
            # calls made live during a replay take none.
            pid = parent.get("session_id") if isinstance(parent, dict) else parent
            why = f"it is a replay of session {pid}, and calls made live during a replay take none: fork {pid}'s checkpoints instead"
        else:
            why = "record with --workspace DIR, or inside a git repository"
        err.print(f"session {s.id} has no checkpoints ({why})", markup=False)
        sys.exit(1)
    terminal().print(table)


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
    help="Parent folder of the arms (default: a new folder $TMPDIR/forkpoint-forks/SESSION@SEQ-XXXX).",
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
    # Not under the current directory: that is usually the recorded repository, and arms would
    # become untracked clones inside it.
    if into is None:  # a new folder for every fork, so forking one checkpoint again just works
        base = Path(tempfile.gettempdir()) / "forkpoint-forks"
        base.mkdir(parents=True, exist_ok=True)
        into = Path(tempfile.mkdtemp(prefix=f"{session.id}@{seq}-", dir=base))
    root = into
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
    terminal().print(table)
    sys.exit(0 if failed == 0 else 1)


@main.command(name="export")
@click.argument("session")
@_store_opt
@click.option(
    "--otlp", metavar="URL", help="Send the spans to this OTLP/HTTP endpoint (e.g. http://localhost:4318)."
)
@click.option(
    "--file",
    "file",
    metavar="PATH",
    help="Write the spans as OTLP JSON (one ExportTraceServiceRequest per line); - for stdout.",
)
@click.option(
    "--content",
    is_flag=True,
    help="Include message content, tool arguments and results, note texts and the command line.",
)
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="K=V",
    help="An HTTP header for the OTLP endpoint (repeatable).",
)
@click.option(
    "--service-name", metavar="NAME", help="service.name of the exported resource (default: forkpoint)."
)
@click.option("--timeout", default=10.0, show_default=True, help="Seconds to wait for the OTLP endpoint.")
def export_cmd(
    session: str,
    store: str | None,
    otlp: str | None,
    file: str | None,
    content: bool,
    headers: tuple[str, ...],
    service_name: str | None,
    timeout: float,
) -> None:
    """Export SESSION as an OpenTelemetry trace (GenAI semantic conventions); see docs/otel.md."""
    from .interop.otel import ExportError, export

    if not otlp and not file:
        raise click.UsageError("give --otlp URL and/or --file PATH")
    hdrs = {}
    for h in headers:
        k, sep, v = h.partition("=")
        if not sep or not k:
            raise click.BadParameter(f"{h!r}: expected KEY=VALUE", param_hint="--header")
        hdrs[k.strip()] = v.strip()
    if file and file != "-":
        _output_file(file, "--file")
    s = _load(session, store)
    try:
        n = export(
            s, otlp=otlp, file=file, content=content, headers=hdrs, service_name=service_name, timeout=timeout
        )
    except ExportError as exc:
        raise click.ClickException(str(exc)) from None
    where = " and ".join(x for x in (otlp, None if file == "-" else file) if x)
    if where:
        err.print(f"forkpoint: exported {n} spans of session {s.id} to {where}", markup=False)


@main.command(name="import")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_store_opt
@click.option("--name", help="A name for the session (default: FORMAT import of FILE).")
def import_cmd(path: Path, store: str | None, name: str | None) -> None:
    """Turn a VCR.py cassette or an agent trajectory (SWE-agent, mini-swe-agent, OpenHands) into a
    session. The format is detected from the content; what the file lacks is listed in the session."""
    from .interop import ImportFormatError, import_file

    try:
        session_path = import_file(path, store=_store(store), name=name)
        session_finished(session_path, quiet=True)  # index entry; upload to a remote store
    except ImportFormatError as exc:
        raise click.ClickException(str(exc)) from None
    i = info(session_path)
    origin = i.header.get("imported_from") or {}
    err.print(
        f"forkpoint: imported {origin.get('format')} file {path} as session {session_path.name} "
        f"({plural(i.model_calls, 'model call')}, {plural(i.tool_calls, 'tool call')}) in {session_path.parent}",
        markup=False,
    )
    for item in origin.get("missing") or []:
        err.print(f"  not in the file: {item}", markup=False)
    for item in origin.get("adjusted") or []:
        err.print(f"  inferred: {item}", markup=False)
    click.echo(str(session_path))


@main.command()
@click.argument("session")
@_store_opt
@click.option("--dry-run", is_flag=True, help="Say what the current rules would change; change nothing.")
@click.option(
    "--force",
    is_flag=True,
    help="Scrub a session without an end event (one that was killed, not one still running).",
)
def scrub(session: str, store: str | None, dry_run: bool, force: bool) -> None:
    """Re-scrub SESSION with the current redaction rules (see docs/security.md).

    Writes a complete scrubbed copy beside it, verifies it, swaps it in atomically and removes the
    old one; killed at any point, the original stays intact. The session keeps its id.
    """
    from .config import ConfigError
    from .scrub import ScrubError, scrub_session

    try:
        path = resolve(session, _store(store))
        report = scrub_session(path, dry_run=dry_run, force=force)
    except (SessionError, ScrubError, ConfigError) as exc:
        raise click.ClickException(str(exc)) from None
    changed = report.events_changed
    what = (
        f"{len(changed)} of {report.events} events"
        + (
            f" (seq {', '.join(map(str, changed[:10]))}{' …' if len(changed) > 10 else ''})"
            if changed
            else ""
        )
        + f", {report.files_changed} workspace file(s)"
    )
    if dry_run:
        click.echo(f"scrub (dry run) {report.session_id}: the current rules would change {what}")
    else:
        click.echo(
            f"scrubbed {report.session_id}: {what} changed; the copy verified and replaced the original"
        )


if __name__ == "__main__":  # pragma: no cover
    main()
