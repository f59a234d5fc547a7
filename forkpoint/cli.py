"""The ``forkpoint`` command line: record, replay, show, ls, verify, diff, checkpoints, restore, validate,
fork, sweep, check, make-test, import, export, scrub, rm, prune, hold, release, demo.

Exit codes: ``record`` and ``replay`` exit with the agent's own code; ``replay`` exits with
:data:`~forkpoint.replay.EXIT_DIVERGENCE` (3) when the run did not reproduce the recording (it
diverged, left recorded calls unasked, reached for the network, ended otherwise than recorded, or
drifted under ``--on-divergence fifo`` without ``--accept-drift``), and ``check`` when any session
did not reproduce; 2 is a usage error or unreadable session; 127 a command that was not found.
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ._version import __version__
from .errors import CannotRecord, ForkpointError, OverrideError, SessionError, SigningError, UsageError
from .runtime import POLICIES, SOURCES
from .text import escape, ordinal, plural

# Each command imports the layers it uses: `forkpoint record` must start its program without
# loading replay, views or rich (issue 15: start-up). Names for annotations only:
if TYPE_CHECKING:
    from rich.console import Console

    from .executors import Executor
    from .log import Session
    from .orchestrate import Arm
    from .store import Store


@functools.cache
def _err() -> Console:
    """The console for forkpoint's own messages (stderr). Messages name paths and sessions: never
    hard-wrap them."""
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def _store(value: str | None) -> Path:
    # A path, or any fsspec URL (s3://…): its local mirror, which forkpoint.store uploads from.
    from .store import store_dir

    try:
        return store_dir(value)
    except SessionError as exc:
        raise click.ClickException(str(exc)) from None


def _unrunnable(path: str) -> tuple[str, int]:
    """Why ``path``, which is there but which() refuses, cannot run, in words after "the command …",
    and a shell's exit code for it (127: nothing to run there, 126: there but not runnable)."""
    if os.path.islink(path) and not os.path.exists(path):
        try:
            os.stat(path)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return "is a symbolic link in a loop of them", 126
        return f"is a symbolic link to {os.readlink(path)}, which does not exist", 127
    return ("is a directory" if os.path.isdir(path) else "is not executable"), 126


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
    _outside_sessions(out, folder, option)
    return out


def _new_folder(into: Path, option: str) -> None:
    """A usage error naming ``option`` when the folder ``into``, which forkpoint fills (made if it is
    not there), would be inside a session's folder."""
    # (the folder that gets a new entry: the nearest one there of those it would be made in)
    _outside_sessions(into, next(d for d in into.absolute().parents if d.is_dir()), option)


def _outside_sessions(out: Path, folder: Path, option: str) -> None:
    """A usage error naming ``option`` when ``folder``, where ``out`` is written, is a session's
    folder or one of its entries (``blobs/``…)."""
    from .log import FORMAT, LOG_NAME, SESSION_ENTRIES

    # (a session is never overwritten: `--html .forkpoint/ID/session.jsonl` replaced its log; a
    # folder not its own below one, reports/ of a project holding a copied session.jsonl, is not it)
    where = folder.resolve()
    for d in (where, *where.parents):
        inside = where.relative_to(d).parts
        if not (d / LOG_NAME).is_file() or (inside and inside[0] not in SESSION_ENTRIES):
            continue
        try:  # (a session log of forkpoint's, not a project's own file of that name)
            with open(d / LOG_NAME, "rb") as f:
                head = f.read(256)
        except OSError:
            continue
        if f'"format":"{FORMAT}"'.encode() in head:
            raise click.BadParameter(
                f"cannot write {out}: it is inside the session folder {d}, which forkpoint never writes into",
                param_hint=option,
            )


def _load(ref: str, store: str | None, *, check: bool = True, signature: bool = True) -> Session:
    """The session ``ref`` names. With ``check``, a log whose hash chain fails (an edited line) is
    still loaded, with a warning: what it shows may not be what was recorded; so is one whose
    signature does not verify (the chain recomputed after the edit) or whose signer this user does
    not trust, unless ``signature`` is False (``fork`` and ``sweep`` without ``--trust``, which refuse
    it). (Blobs are checked by ``verify``; ``replay`` refuses a session that fails either.)"""
    from .checkpoint import verify_session
    from .log import Session
    from .signing import doubt
    from .store import resolve

    session = Session.load(resolve(ref, _store(store)), share_lists=True)
    # (once per session and command: `diff A A` loads it twice)
    said: set[Path] = click.get_current_context().meta.setdefault("forkpoint.checked", set())
    if check and session.path.resolve() not in said:
        said.add(session.path.resolve())
        v = verify_session(session.path, git=False, deep=False, values=False)  # (loaded above)
        # (a failed chain is said once: the signature of a changed log fails too)
        doubted = None if v.problems or not signature else doubt(session.path, session.id)
        if v.problems:
            _err().print(
                f"[yellow]forkpoint: WARNING: session {session.id} fails verification, so what follows may "
                f"not be what was recorded: {escape(v.problems[0])} (see: forkpoint verify {escape(str(session.path))})[/yellow]"
            )
        elif doubted:
            _err().print(f"[yellow]forkpoint: WARNING: {escape(doubted)}[/yellow]")
    return session


def _command(cmd: tuple[str, ...]) -> list[str]:
    """CMD as given after ``--`` (click passes the ``--`` through once a positional came first)."""
    return list(cmd[1:] if cmd[:1] == ("--",) else cmd)


class _RunsProgram(click.Command):
    """A command that ends with a program to run (``record``, ``replay``, ``fork``): forkpoint's
    options are read up to the program, with or without ``--`` before it; everything from the
    program on is the program's (``forkpoint replay last python agent.py --report x`` gives
    ``--report x`` to the agent)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        takes_value = {
            name
            for p in self.params
            if isinstance(p, click.Option) and not p.is_flag and not p.count
            for name in p.opts
        }
        leading = sum(1 for p in self.params if isinstance(p, click.Argument) and p.name != "cmd")
        i, seen = 0, 0
        while i < len(args):
            arg = args[i]
            if arg == "--":
                break
            if arg.startswith("-") and arg != "-":
                i += 2 if arg in takes_value else 1
                continue
            if seen == leading:  # the program starts here
                args = [*args[:i], "--", *args[i:]]
                break
            seen += 1
            i += 1
        return super().parse_args(ctx, args)


def _parse_tags(values: tuple[str, ...]) -> dict[str, str]:
    tags = {}
    for v in values:
        k, sep, val = v.partition("=")
        if not sep or not k:
            raise click.BadParameter(f"{v!r}: expected KEY=VALUE", param_hint="--tag")
        tags[k] = val
    return tags


def _session_name(_ctx: click.Context, _param: click.Parameter, name: str | None) -> str | None:
    """``--name``, refused before anything runs when no one could name the session by it."""
    from .store import NAME_RULE, name_problem

    if name is not None and (why := name_problem(name)):
        raise click.BadParameter(f"{name!r} {why}; {NAME_RULE}")
    return name


def _parse_headers(values: tuple[str, ...], option: str) -> dict[str, str]:
    """``KEY=VALUE`` headers. One that is not is named by its place, never printed: its value is
    usually a token (only a header name before a ``:``, as in ``KEY: VALUE``, is shown)."""
    import re

    name = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP header name (RFC 9110 token)
    hdrs = {}
    for i, h in enumerate(values, 1):
        k, sep, v = h.partition("=")
        if sep and name.fullmatch(k.strip()):
            hdrs[k.strip()] = v.strip()
            continue
        colon = re.match(rf"\s*({name.pattern})\s*:", h)
        fix = f"write {colon[1]}=VALUE" if colon else "the value is not shown, as it may hold a secret"
        raise click.BadParameter(
            f"the {ordinal(i)} given is not KEY=VALUE with KEY a header name ({fix})", param_hint=option
        )
    return hdrs


def _check_tools(values: tuple[str, ...]) -> list[str]:
    for v in values:
        from .capture.targets import parse_target

        try:
            parse_target(v)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--tool") from None
    return list(values)


def _use_identity(ctx: click.Context, param: click.Parameter, value: Path | None) -> None:
    from .log import use_identity

    if value is not None:
        use_identity(value)  # $FORKPOINT_IDENTITY: the programs a replay runs read the session too


#: ``--identity``'s type, one for every command: each click.Path made asks gettext for its name,
#: which looks for translation files every time (~0.25 M instructions a command, at every start).
_IDENTITY_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


def _store_opt(f: Any) -> Any:
    """``--store``, and ``--identity`` for the encrypted sessions of the store."""
    f = click.option(
        "--identity",
        metavar="FILE",
        type=_IDENTITY_FILE,
        expose_value=False,
        callback=_use_identity,
        help="An age identity file that opens encrypted sessions (default: $FORKPOINT_IDENTITY).",
    )(f)
    return click.option(
        "--store",
        metavar="DIR|URL",
        help="Session store: a directory or an fsspec URL such as s3://bucket/prefix "
        "(default: $FORKPOINT_STORE or .forkpoint/).",
    )(f)


_trust_opt = click.option(
    "--trust",
    is_flag=True,
    help="Run the recorded command even when no key you trust signed the session (read it first: "
    "anyone who can edit a session can change its command).",
)


class _DashCommand(click.Command):
    """A command whose arguments after ``--`` are a program to run (``ctx.meta["forkpoint.cmd"]``),
    while options may stand anywhere before it (``check [OPTIONS] [TARGET…] [-- CMD…]``)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        cut = args.index("--") if "--" in args else len(args)
        ctx.meta["forkpoint.cmd"] = args[cut + 1 :]
        return super().parse_args(ctx, args[:cut])


def _executor_options(f: Any) -> Any:
    """``--executor`` and ``--jobs``, shared by check, fork and sweep."""
    f = click.option(
        "--jobs",
        "-j",
        type=click.IntRange(1, 1024),
        metavar="N",
        help="With --executor local: run N at once (default: one per core). "
        "With plain --executor ray: the CPUs of the Ray instance started here.",
    )(f)
    return click.option(
        "--executor",
        default="local",
        show_default=True,
        metavar="local|ray[:ADDRESS]",
        help="Where the runs go: processes on this machine, or Ray tasks (ray: a Ray started here, or "
        "$RAY_ADDRESS; ray:ADDRESS: that cluster). See docs/scale.md.",
    )(f)


def _outcome_options(f: Any) -> Any:
    """``--outcome`` and ``--outcome-timeout``, shared by check, fork and sweep."""

    def default_timeout() -> float:  # called by the commands that take it: the CLI starts without outcome
        from .outcome import DEFAULT_TIMEOUT

        return DEFAULT_TIMEOUT

    f = click.option(
        "--outcome-timeout",
        type=click.FloatRange(min=0.001),
        default=default_timeout,
        # (in the help, not show_default: click puts a string default in parentheses, "[default: (600 s)")
        metavar="SECONDS",
        help="Stop an outcome command after this long (it then counts as a failure; default: 600 s).",
    )(f)
    return click.option(
        "--outcome",
        "outcome_cmd",
        metavar="CMD",
        help="A shell command run in each run's directory when the run has ended; exit 0 is a pass "
        "(it sees $FORKPOINT_OUTCOME_SESSION, $FORKPOINT_OUTCOME_OUTPUT: a file of what the run printed, "
        "and $FORKPOINT_OUTCOME_EXIT).",
    )(f)


def _arm_options(f: Any) -> Any:
    """What fork and sweep share: ``--override``, ``--on-divergence``, ``--repo``, ``--arm-timeout``, the outcome and
    executor options, ``--store``, and the agent's command (``CMD``, required)."""
    f = click.argument("cmd", nargs=-1, required=True, type=click.UNPROCESSED)(f)
    f = click.option(
        "--trust",
        is_flag=True,
        help="Fork a session no key you trust signed (read its files first: CMD runs on them, and anyone "
        "who can edit a session can change them).",
    )(f)
    f = _store_opt(_executor_options(_outcome_options(f)))
    f = click.option(
        "--json",
        "json_file",
        metavar="FILE",
        type=click.Path(dir_okay=False, path_type=Path),
        help="Also write every arm (checkpoint, exit code, outcome, session, why it was not run…) as JSON.",
    )(f)
    f = click.option(
        "--repo", type=click.Path(exists=True, file_okay=False, path_type=Path), help="See restore --repo."
    )(f)
    f = click.option(
        "--arm-timeout",
        type=click.FloatRange(min=0, min_open=True),
        metavar="SECONDS",
        help="Stop an arm's program still running after SECONDS (SIGTERM, SIGKILL 3 s later); the arm "
        "is shown as stopped, and its outcome is measured on what it left once it went live from its "
        "checkpoint (one stopped before is not measured).",
    )(f)
    f = click.option(
        "--on-divergence",
        type=click.Choice(POLICIES),
        default="stop",
        show_default=True,
        help="If an arm's replayed prefix diverges.",
    )(f)
    return click.option(
        "--override",
        "overrides",
        multiple=True,
        metavar="SPEC",
        help="Applied in every arm (see replay --override).",
    )(f)


def _write_arms(json_file: Path | None, session: Session, arms: list[Arm], executor: str) -> None:
    """Write fork's or sweep's ``arms`` to ``json_file`` (--json), each as its task returned it."""
    if json_file is not None:
        import orjson

        from .files import write_private
        from .redact import scrub_json

        # (each arm's session by its id too: its path is where it ran, a Ray worker's mirror of a
        # remote store, and the id names it in the store from anywhere)
        rows = [{"session_id": Path(a.session).name if a.session else None} | a.to_json() for a in arms]
        data = {"session": session.id, "executor": executor, "arms": rows}
        write_private(str(json_file), orjson.dumps(scrub_json(data), option=orjson.OPT_INDENT_2))


def _stopped() -> bool:
    """Whether Ctrl-C, SIGTERM or SIGHUP stopped the arms (the local executor passed it on): what
    was cut short, an outcome command included, measured nothing."""
    from .executors.local import interrupted

    return interrupted() is not None


def _outcome(command: str | None, timeout: float) -> Any:
    from .outcome import Outcome

    return Outcome(command, timeout) if command else None


def _at_a_time(workers: int, jobs: int) -> str:
    """How many of ``jobs`` run at once on ``workers``, said when more than one does."""
    return f" ({min(workers, jobs)} at a time)" if min(workers, jobs) > 1 else ""


def _executor(spec: str, jobs: int | None) -> Executor:
    from .executors import open_executor

    return open_executor(spec, jobs=jobs)


def _cwd_removed() -> bool:
    """Whether the current directory was removed: ``os.getcwd()`` (and so ``Path.cwd()``, a
    relative path's ``resolve()``) fails, with no file named."""
    try:
        os.getcwd()
    except FileNotFoundError:
        return True
    return False


class _Commands(click.Group):
    """The command group: an error forkpoint raises on purpose is a message, never a traceback
    (:class:`~forkpoint.errors.UsageError` and an override that does not fit the session: exit 2; any other :class:`~forkpoint.errors.ForkpointError`
    and an ``OSError`` naming its file, a store that cannot be written say: exit 1)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            raise click.UsageError(str(exc)) from None
        except OverrideError as exc:  # (as replay says it: fork and sweep check theirs before any arm)
            raise click.BadParameter(str(exc), param_hint="--override") from None
        except ForkpointError as exc:
            raise click.ClickException(str(exc)) from None
        except OSError as exc:
            if exc.filename is None and isinstance(exc, FileNotFoundError) and _cwd_removed():
                raise click.ClickException(
                    "the current directory no longer exists (it was removed after this shell entered it): "
                    "cd into one that does, and run the command again"
                ) from None
            # A file forkpoint could not read or write (a read-only or full store): named, in a line.
            if exc.filename is None or not exc.strerror:
                raise
            raise click.ClickException(f"{exc.filename}: {exc.strerror}") from None


@click.group(cls=_Commands)
@click.version_option(__version__, prog_name="forkpoint")
@click.option(
    "--allow-shared-store",
    is_flag=True,
    help="Use a store another user owns or every user may write (refused by default).",
)
def main(allow_shared_store: bool) -> None:
    """Record AI agent sessions and replay them offline, deterministically.

    SESSION is a session directory, an id, an id prefix, `last` (the newest in the store), or a
    name given with --name (the newest session of that name). The store is --store, else
    $FORKPOINT_STORE, else .forkpoint/ in the current directory.
    """
    from .store import ALLOW_SHARED_VAR

    if allow_shared_store:
        os.environ[ALLOW_SHARED_VAR] = "1"  # also for the programs record and replay run


@main.command(cls=_RunsProgram)
@_store_opt
@click.option("--name", callback=_session_name, help="A name for the session.")
@click.option(
    "--tag", "tags", multiple=True, metavar="K=V", help="A tag, e.g. agent_version=1.4 (repeatable)."
)
@click.option(
    "--tool",
    "tools",
    multiple=True,
    metavar="MODULE:QUALNAME[=NAME]",
    # (no module path in the example: longer than the help column, click broke it inside a name,
    # "mini sweagent.environments.local:LocalEnvironment. execute=bash")
    help="Record this function as a tool (repeatable); =NAME records it under the tool name the model "
    "asks for (mini-swe-agent's LocalEnvironment.execute=bash; see the README).",
)
@click.option(
    "--workspace",
    metavar="DIR",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="Checkpoint this directory: the whole git repository it is in, if it is in one (default: the git "
    "repository of the current directory, if any).",
)
@click.option("--no-workspace", is_flag=True, help="Take no checkpoints.")
@click.option(
    "--include-ignored", is_flag=True, help="Checkpoints also archive files that .gitignore ignores."
)
@click.option(
    "--deterministic",
    is_flag=True,
    help="Also record what the program's own code reads from the clock, uuid4 and random; a replay "
    "hands the same values back (docs/matching.md).",
)
@click.option(
    "--deterministic-module",
    "deterministic_modules",
    multiple=True,
    metavar="MODULE",
    help="--deterministic for the reads of this module and its submodules instead (repeatable; "
    "__main__: the script): for an agent installed as a package, whose code --deterministic leaves out.",
)
@click.option(
    "--otlp",
    metavar="URL",
    help="Also send the spans to this OTLP/HTTP endpoint while recording (as `forkpoint export` would).",
)
@click.option(
    "--otlp-content", is_flag=True, help="With --otlp: include message content (export's --content)."
)
@click.option(
    "--otlp-header",
    "otlp_headers",
    multiple=True,
    metavar="K=V",
    help="With --otlp: an HTTP header (repeatable).",
)
@click.option(
    "--encrypt-to",
    "encrypt_to",
    multiple=True,
    metavar="RECIPIENT",
    help="Encrypt the session for this age recipient (age1…), or the recipients of this file "
    "(repeatable; default: [store] encrypt_to of the configuration). docs/security.md.",
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
    deterministic: bool,
    deterministic_modules: tuple[str, ...],
    otlp: str | None,
    otlp_content: bool,
    otlp_headers: tuple[str, ...],
    encrypt_to: tuple[str, ...],
    cmd: tuple[str, ...],
) -> None:
    """Run CMD and record its model calls and tool calls:  forkpoint record -- python agent.py"""
    from .orchestrate import record_command

    command = _command(cmd)
    from ._boot import nested_record

    nested_record(command)  # (a forkpoint record recorded or replayed itself)
    if command and shutil.which(command[0]) is None:
        # Before a session exists: a typo must not leave an empty session behind as `last`. A path
        # which() refuses may be there, not executable or a folder (a shell's 126).
        there = "/" in command[0] and os.path.lexists(command[0])
        why, code = _unrunnable(command[0]) if there else ("", 127)
        said = f"the command {command[0]} {why}" if why else f"command not found: {command[0]}"
        _err().print(f"[red]forkpoint: {escape(said)}[/red]")
        sys.exit(code)
    live = None
    if otlp:
        from .otel import LiveExport

        live = LiveExport(otlp, content=otlp_content, headers=_parse_headers(otlp_headers, "--otlp-header"))
    elif otlp_content or otlp_headers:
        raise click.UsageError("--otlp-content and --otlp-header go with --otlp URL")
    if no_workspace:
        workspace = None
    elif workspace is None:
        from .checkpoint import repo_root

        workspace = repo_root(Path.cwd())
    try:
        _, code, _ = record_command(
            command,
            store=_store(store),
            name=name,
            tags=_parse_tags(tags),
            tools=_check_tools(tools),
            workspace=workspace,
            include_ignored=include_ignored,
            deterministic=list(deterministic_modules) or deterministic,
            live=live,
            encrypt_to=list(encrypt_to) or None,
        )
    except CannotRecord as exc:  # recording never stops the run: it goes on, unrecorded
        from .orchestrate import run_child

        _err().print(f"[red]forkpoint: WARNING: {escape(str(exc))}: the command runs unrecorded[/red]")
        code = run_child(command, dict(os.environ)).code
    sys.exit(code)


@main.command(cls=_RunsProgram)
@click.argument("session")
@_store_opt
@click.option(
    "--tool",
    "tools",
    multiple=True,
    metavar="MODULE:QUALNAME[=NAME]",
    help="Also serve this function from the session (=NAME: the tool's name, as when recording).",
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
@click.option(
    "--strict",
    is_flag=True,
    help="A plain HTTP call (no model, MCP or telemetry) that differs from the recording only in ids "
    "is a divergence too (by default it is served the recorded answer and reported).",
)
@click.option(
    "--accept-drift",
    is_flag=True,
    help="With --on-divergence fifo: exit with the command's own code even when requests drifted.",
)
@click.option("--report", "report_file", metavar="FILE", help="Write the replay report here as JSON.")
@click.option(
    "--no-verify", is_flag=True, help="Replay even a session whose hash chain or blobs fail verification."
)
@_trust_opt
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def replay(
    session: str,
    store: str | None,
    tools: tuple[str, ...],
    overrides: tuple[str, ...],
    models_source: str,
    tools_source: str,
    on_divergence: str,
    strict: bool,
    accept_drift: bool,
    report_file: str | None,
    no_verify: bool,
    trust: bool,
    cmd: tuple[str, ...],
) -> None:
    """Run the recorded command (or CMD, with or without -- before it) with every model and tool
    call served from SESSION. The recorded command runs only when a trusted key signed SESSION
    (yours is trusted), or with --trust; else it is shown and refused (exit 1).

    Without live calls, the command runs in a network namespace with only loopback where the
    kernel allows it: nothing it starts reaches the network, and every attempt is named.

    Exits with the command's own code when the run reproduced the recording, else 3: it diverged
    (policy stop or fifo), left recorded calls unasked, reached for the network, or ended otherwise
    than recorded (another exit code, a new uncaught exception). A what-if run (overrides, live
    sources, policy live or fifo) is recorded as a new session, and exits with the command's code
    when it went live or took the way an override offered; a fifo run that drifted exits 3 unless
    --accept-drift.
    """
    from .log import Session
    from .orchestrate import replay_command
    from .store import resolve

    if accept_drift and on_divergence != "fifo":
        raise click.BadParameter("applies to --on-divergence fifo only", param_hint="--accept-drift")
    if report_file:
        _output_file(report_file, "--report")
    try:
        # replay_command verifies the session, and refuses; the replaying process loads it. Its
        # events are read here only when overrides need them (or, unverified, to say what is wrong).
        recorded = (
            _load(session, store, check=False)
            if overrides or no_verify
            else Session.header_only(resolve(session, _store(store)))
        )
        report, code, _ = replay_command(
            recorded,
            _command(cmd) or None,
            tools=_check_tools(tools),
            models_source=models_source,
            tools_source=tools_source,
            on_divergence=on_divergence,
            overrides=list(overrides),
            check=not no_verify,
            strict=strict,
            accept_drift=accept_drift,
            trust=trust,
        )
    except OverrideError as exc:
        raise click.BadParameter(str(exc), param_hint="--override") from None
    if report_file and report is not None:
        from .replay import write_report

        write_report(Path(report_file), report)
    sys.exit(code)


@main.command(name="diff")
@click.argument("a")
@click.argument("b")
@_store_opt
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
def diff_cmd(a: str, b: str, store: str | None, as_json: bool) -> None:
    """Align two sessions call by call; name the first divergence. Exit 0 when equivalent, 1 when
    they differ."""
    from .diff import diff_sessions, render_diff
    from .log import json_text
    from .show import terminal

    result = diff_sessions(_load(a, store), _load(b, store))
    if as_json:
        sys.stdout.buffer.write(json_text(result.to_json(), indent=True) + b"\n")
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
    from .log import json_text
    from .store import store_of

    if html_file is not None:
        if as_json:  # (one of them was silently ignored)
            raise click.UsageError("--json and --html are two outputs: give one of them")
        _output_file(html_file, "--html")
    s = _load(session, store)
    from .store.retention import held

    try:
        on_hold = held(store_of(s.path), s.id)
    except SessionError:  # a folder of sessions that is no store forkpoint may use: no holds there
        on_hold = None
    if html_file is not None:
        from .html import write_html

        write_html(s, html_file)
        _err().print(f"forkpoint: wrote {html_file} (session {s.id}, {len(s.events)} events)", markup=False)
        return
    if as_json:
        data = show_mod.as_json(s)
        if on_hold is not None:
            data["hold"] = on_hold
        sys.stdout.buffer.write(json_text(data, indent=True) + b"\n")
    else:
        show_mod.render(s, hold=on_hold)


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
    from .show import render_listing
    from .store import list_sessions

    listing = list_sessions(_store(store), reindex=reindex)
    for note in listing.notes:
        _err().print(f"forkpoint: {note}", markup=False)
    if not listing.rows:
        # (a mistyped --store is no store at all: said, rather than shown as an empty one)
        local = "://" not in listing.store
        missing = " (no such directory)" if local and not Path(listing.store).is_dir() else ""
        _err().print(f"no sessions in {listing.store}{missing}", markup=False)
        return
    from .store.retention import holds

    click.echo(render_listing(listing.rows, held=set(holds(_open_store(store)))))


@main.command(name="verify")
@click.argument("session")
@_store_opt
def verify_cmd(session: str, store: str | None) -> None:
    """Check a session's hash chain, blobs and stored values, its store's index entry, and its
    signature; names the first line that fails, and who signed the session (whether you trust them)."""
    from .checkpoint import verify_session
    from .signing import signature
    from .store import index_problem, info, resolve

    path = resolve(session, _store(store), refresh=True)  # a remote session: download it again
    v = verify_session(path)
    indexed = index_problem(path) if v.ok else None
    if indexed:
        v.problems.append(indexed)
    signed = signature(path, info(path).session_id) if v.ok else None
    if signed is not None and signed.fails:
        v.problems.append(f"signature: {signed.describe()}")
    for p in v.problems:
        _err().print(p, style="red", markup=False)
    for n in v.notes:
        _err().print(n, markup=False)
    state = "ok" if v.ok else "FAILED"
    trunc = " (log ends in an incomplete line: truncated, not corrupt)" if v.truncated else ""
    if v.ok and not v.truncated and not v.complete:
        trunc = " (no end event: incomplete, not corrupt)"
    click.echo(f"verify {state}: {plural(v.events, 'event')}, {plural(v.blobs, 'blob')} checked{trunc}")
    if signed is not None and not signed.fails:
        trusted = (
            "trusted" if signed.trusted else "NOT trusted (its recorded command replays only with --trust)"
        )
        click.echo(f"signature: {signed.describe()}; {trusted}")
    sys.exit(0 if v.ok else 1)


@main.group(invoke_without_command=True)
@click.pass_context
def keys(ctx: click.Context) -> None:
    """Your signing key (created on first use) and the keys you trust.

    Every session you record is signed with your key; replay, check and make-test take a session's
    recorded command only when a trusted key signed it (fork and sweep run the command you give, on its files: only then too, or with --trust). Give your public key to teammates, and
    trust theirs with: forkpoint keys trust KEY --name NAME (forkpoint keys untrust NAME undoes it).
    """
    if ctx.invoked_subcommand is not None:
        return
    from .signing import key_id, keys_dir, own_key, trusted_keys

    try:
        mine = key_id(own_key().public_key())
        others = {k: n for k, n in trusted_keys().items() if k != mine}
    except SigningError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"your public key: {mine}")
    click.echo(f"keys folder: {keys_dir()}")
    if not others:
        click.echo("trusted keys: none besides yours (forkpoint keys trust KEY --name NAME)")
    for k, n in others.items():
        click.echo(f"trusted: {k} {n}")


@keys.command(name="trust")
@click.argument("key")
@click.option("--name", required=True, help="Who the key belongs to (shown by verify).")
def keys_trust(key: str, name: str) -> None:
    """Trust the public key KEY (ed25519:BASE64, as `forkpoint keys` prints it) as NAME."""
    from .signing import trust

    try:
        kid = trust(key, name)
    except SigningError as exc:
        raise click.BadParameter(str(exc), param_hint="KEY") from None
    click.echo(f"trusted {kid} as {' '.join(name.split())}")


@keys.command(name="untrust")
@click.argument("which", metavar="KEY|NAME")
def keys_untrust(which: str) -> None:
    """Stop trusting a key: KEY (as `forkpoint keys` lists it) or the NAME it was trusted as."""
    from .signing import untrust

    try:
        gone = untrust(which)
    except SigningError as exc:
        raise click.BadParameter(str(exc), param_hint="KEY|NAME") from None
    for kid in gone:
        click.echo(f"no longer trusted: {kid}")


@main.command()
@_store_opt
@click.option(
    "--turns",
    default=2,
    show_default=True,
    type=click.IntRange(min=0),
    help="Tool-using turns the demo model asks for.",
)
def demo(store: str | None, turns: int) -> None:
    """Record the bundled agent against the bundled local model, replay it offline twice, show it."""
    from .demo.run import run_demo

    sys.exit(run_demo(store=_store(store), turns=turns))


def _session_at(ref: str, store: str | None, *, signature: bool = True) -> tuple[Session, int]:
    name, sep, seq = ref.rpartition("@")
    if not sep or not seq.isdigit():
        raise click.BadParameter(
            f"{ref!r}: expected SESSION@SEQ, e.g. last@4 (see: forkpoint checkpoints SESSION)"
        )
    return _load(name, store, signature=signature), int(seq)


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
        _err().print(f"  {mark}  {c.name}{detail}")
    return ok


@main.command()
@click.argument("session")
@_store_opt
def checkpoints(session: str, store: str | None) -> None:
    """List the checkpoints of SESSION (restore one with: forkpoint restore SESSION@SEQ --into DIR)."""
    from rich.table import Table

    from .show import terminal

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
        from .checkpoint.restore import why_no_checkpoints

        _err().print(f"session {s.id} has no checkpoints ({why_no_checkpoints(s)})", markup=False)
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
    from .checkpoint import restore as do_restore
    from .checkpoint import validate

    _new_folder(into, "--into")
    session, seq = _session_at(ref, store)
    do_restore(session, seq, into, repo=repo)
    _err().print(f"restored {session.id}@{seq} into {into}; validating:")
    ok = _print_checks(validate(into, resumable=False))
    sys.exit(0 if ok else 1)


@main.command(name="validate")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
def validate_cmd(directory: Path) -> None:
    """Check a restored directory against its checkpoint, without any model."""
    from .checkpoint import validate

    sys.exit(0 if _print_checks(validate(directory, resumable=False)) else 1)


@main.command(cls=_RunsProgram)
@click.argument("ref", metavar="SESSION@SEQ")
@click.option("--arms", default=1, show_default=True, type=click.IntRange(1, 1024), help="How many arms.")
@click.option(
    "--into",
    type=click.Path(path_type=Path),
    help="Parent folder of the arms (default: a new folder $TMPDIR/forkpoint-forks-UID/SESSION@SEQ-XXXX, this user's own).",
)
@_arm_options
def fork(
    ref: str,
    arms: int,
    into: Path | None,
    overrides: tuple[str, ...],
    on_divergence: str,
    repo: Path | None,
    arm_timeout: float | None,
    outcome_cmd: str | None,
    outcome_timeout: float,
    executor: str,
    jobs: int | None,
    json_file: Path | None,
    trust: bool,
    store: str | None,
    cmd: tuple[str, ...],
) -> None:
    """Restore a resumable checkpoint into N arms and continue each live from there.

    In each arm, CMD runs in the restored directory: the calls recorded before the checkpoint are
    replayed (no model, no tool bodies), every later one is live, and the arm is recorded as a new
    session linked to SESSION@SEQ. CMD must work on its current directory; what it prints goes to
    arm-N.log beside the arm. Every arm is validated without a model first, and one that fails
    validation is never run. With --outcome, CMD's result is measured in each arm and the pass rate
    shown with its 95% interval.

    Exits 1 when some arm could not run, never went live, or its program exited with a code other
    than 0 (an arm stopped by --arm-timeout included), whatever its outcome, or when an arm's
    session could not be uploaded to a remote store.
    """
    from .orchestrate import fork_specs, resumable, run_arms
    from .show import terminal

    if json_file is not None:
        _output_file(json_file, "--json")
    if into is not None:
        _new_folder(into, "--into")
    session, seq = _session_at(ref, store, signature=trust)  # (without --trust, refused below)
    resumable(session, seq)  # (a missing checkpoint is said before an untrusted session is)
    if not trust:
        from .signing import require_trusted

        require_trusted(session.path, session.id, None)
    # Every usage error (an override, the configuration, a taken --into) before "N arms on local"
    # announces arms that would never start.
    _, specs = fork_specs(
        session,
        seq,
        _command(cmd),
        arms=arms,
        into=into,
        overrides=list(overrides),
        on_divergence=on_divergence,
        repo=repo,
        outcome=_outcome(outcome_cmd, outcome_timeout),
        timeout=arm_timeout,
    )

    def shown(arm: Arm) -> None:
        _err().rule(f"arm {arm.index}: {arm.directory}")
        first = arm.error
        if arm.lost:  # (no checks: the task said nothing)
            first = arm.not_run_or_lost
        elif arm.error is not None and not arm.checks:  # (its restore failed)
            _err().print(f"[red]{escape(arm.error)}[/red]")
            first = None
        else:
            _print_checks(arm.checks)
        for said in (first, arm.problem, arm.not_stored):
            if said is not None:
                _err().print(f"[red]arm {arm.index}: {escape(said)}[/red]")

    with _executor(executor, jobs) as ex:
        _err().print(
            f"forkpoint: {plural(arms, 'arm')} on {executor}{_at_a_time(ex.workers, arms)}", markup=False
        )
        done = run_arms(specs, executor=ex, on_arm=shown)
    from .suite.tables import fork_table, not_stored, pass_rate_line

    terminal().print(fork_table(done, title=f"fork of {session.id}@{seq}"))
    _write_arms(json_file, session, done, executor)
    if outcome_cmd:
        click.echo(pass_rate_line(done))
    lacking = not_stored(done)
    if lacking:
        click.echo(lacking)
    # (an arm whose command ran no forkpoint was not recorded, and one that never went live did not
    # continue: no continuation to look at, as in sweep; told to stop, forkpoint measured nothing more;
    # one whose session did not reach the store is missing from what reads the arms from it)
    failed = sum(
        1
        for arm in done
        if not arm.valid
        or arm.report is None
        or arm.exit_code != 0
        or arm.unmeasured
        or arm.diverged
        or arm.not_stored
    )
    sys.exit(0 if failed == 0 and not _stopped() else 1)


@main.command()
@click.argument("session")
@click.option(
    "--arms", default=4, show_default=True, type=click.IntRange(1, 1024), help="Arms per checkpoint."
)
@click.option("--from", "first", type=int, metavar="SEQ", help="Sweep checkpoints from this seq on.")
@click.option("--to", "last", type=int, metavar="SEQ", help="Sweep checkpoints up to this seq.")
@click.option(
    "--into",
    type=click.Path(path_type=Path),
    help="Parent folder of the arms, one folder seq-N per checkpoint; one that already holds arms is refused "
    "(default: a new folder under $TMPDIR/forkpoint-forks-UID).",
)
@click.option(
    "--html",
    "html_file",
    metavar="FILE",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the session's HTML viewer, with the pass rate by checkpoint drawn.",
)
@_arm_options
def sweep(
    session: str,
    arms: int,
    first: int | None,
    last: int | None,
    into: Path | None,
    html_file: Path | None,
    overrides: tuple[str, ...],
    on_divergence: str,
    repo: Path | None,
    arm_timeout: float | None,
    outcome_cmd: str | None,
    outcome_timeout: float,
    executor: str,
    jobs: int | None,
    json_file: Path | None,
    trust: bool,
    store: str | None,
    cmd: tuple[str, ...],
) -> None:
    """Fork N arms from every resumable checkpoint of SESSION (or those from --from to --to), run
    CMD live in each, measure --outcome, and show the pass rate by checkpoint: where the run
    became unrecoverable.

    Every arm is validated without a model before it runs; one that fails validation is reported
    and never run. Exits 1 when some arm could not run (or its session could not be uploaded to a
    remote store).
    """
    from .show import terminal
    from .suite import plan_sweep
    from .suite.tables import not_stored, sweep_table, sweep_verdict, unmeasured

    if not outcome_cmd:
        raise click.UsageError("sweep measures an outcome: give --outcome CMD")
    for f, option in ((html_file, "--html"), (json_file, "--json")):
        if f is not None:
            _output_file(f, option)
    if html_file is not None and json_file is not None and html_file.resolve() == json_file.resolve():
        # (the page, written last, replaced the JSON)
        raise click.BadParameter(f"--html and --json name the same file, {json_file}", param_hint="--json")
    if into is not None:
        _new_folder(into, "--into")
    s = _load(session, store, signature=trust)  # (without --trust, refused below)
    if not trust:
        from .signing import require_trusted
        from .suite.sweep import sweep_checkpoints

        sweep_checkpoints(s, first, last)  # (a session with none to sweep says so first, as fork does)
        require_trusted(s.path, s.id, None)
    # Every usage error (an override, the configuration, a taken --into) before "N arms per
    # checkpoint" announces arms that would never start.
    plan = plan_sweep(
        s,
        _command(cmd),
        arms=arms,
        outcome=_outcome(outcome_cmd, outcome_timeout),
        first=first,
        last=last,
        into=into,
        overrides=list(overrides),
        on_divergence=on_divergence,
        repo=repo,
        timeout=arm_timeout,
    )

    def shown(arm: Arm) -> None:
        state = (
            str(arm.not_run_or_lost)
            if not arm.valid
            else "not measured: " + (arm.problem or "no outcome")
            if arm.passed is None
            else ("pass" if arm.passed else "fail") + (f" ({arm.problem})" if arm.problem else "")
        )
        _err().print(f"forkpoint: @{arm.seq} arm {arm.index}: {escape(state)}")
        if arm.not_stored:
            _err().print(f"forkpoint: @{arm.seq} arm {arm.index}: {escape(arm.not_stored)}")

    with _executor(executor, jobs) as ex:
        _err().print(
            f"forkpoint: {plural(arms, 'arm')} per checkpoint on {executor} ({ex.workers} at a time)",
            markup=False,
        )
        result = plan.run(executor=ex, on_arm=shown)
    terminal().print(sweep_table(result))
    _write_arms(json_file, s, result["arms"], executor)
    click.echo(sweep_verdict(result))
    not_measured = unmeasured(result["arms"])
    if not_measured:
        click.echo(not_measured)
    lacking = not_stored(result["arms"])
    if lacking:
        click.echo(lacking)
    diverged = [a for a in result["arms"] if a.diverged]
    if diverged:
        click.echo(f"{len(diverged)} arm(s) never went live (not measured): {diverged[0].problem}")
    crashed = [a for a in result["arms"] if a.passed is not None and a.exit_code != 0]
    if crashed:  # (the table shows rates only: said, as the outcome may not look at it)
        codes = ", ".join(f"@{a.seq} arm {a.index}: {a.exit_code}" for a in crashed[:5])
        click.echo(
            f"{len(crashed)} measured arm(s) ended with an exit code other than 0 ({codes}"
            f"{' …' if len(crashed) > 5 else ''}); $FORKPOINT_OUTCOME_EXIT gives it to the outcome command"
        )
    # (no report: nothing says the program ran the recorded agent, nor that it went live; measured
    # all the same, as a program that left through os._exit may have, and said, as the table cannot)
    unreported = [a for a in result["arms"] if a.valid and a.report is None and a.passed is not None]
    if unreported:
        click.echo(
            f"{len(unreported)} measured arm(s) wrote no replay report, so nothing says they ran the "
            f"recorded agent (@{unreported[0].seq} arm {unreported[0].index}: {unreported[0].problem})"
        )
    click.echo(f"arms in {result['into']}")
    if html_file is not None:
        from .html import write_html

        write_html(s, html_file, sweep={k: v for k, v in result.items() if k != "arms"})
        _err().print(f"forkpoint: wrote {html_file} (session {s.id}, pass rate by checkpoint)", markup=False)
    sys.exit(
        0
        if all(
            a.valid and a.report is not None and not a.unmeasured and not a.diverged and not a.not_stored
            for a in result["arms"]
        )
        and not _stopped()
        else 1
    )


@main.command(cls=_DashCommand)
@click.argument("targets", nargs=-1, metavar="[SESSION|STORE|DIR]...")
@_store_opt
@click.option("--tag", "tags", multiple=True, metavar="K=V", help="Only sessions with this tag (repeatable).")
@click.option(
    "--since", metavar="DATE", help="Only sessions recorded on or after DATE (2026-11-01, or with a time)."
)
@click.option(
    "--models",
    "models_source",
    type=click.Choice(SOURCES),
    default="replay",
    show_default=True,
    help="replay: the library as a suite. live: an A/B run of today's prompt or model against each "
    "session's recorded tool world.",
)
@click.option(
    "--on-divergence",
    type=click.Choice(POLICIES),
    default="stop",
    show_default=True,
    help="With --models live, the tool policy for a tool call whose arguments changed: stop, serve "
    "the next recorded call of that tool anyway (fifo), or run the tool (live).",
)
@_outcome_options
@click.option("--junit-xml", "junit_file", metavar="FILE", help="Write the result as JUnit XML (for CI).")
@click.option("--json", "json_file", metavar="FILE", help="Write every row (and the summary) as JSON.")
@click.option(
    "--no-verify", is_flag=True, help="Replay even sessions whose hash chain or blobs fail verification."
)
@_trust_opt
@_executor_options
def check(
    targets: tuple[str, ...],
    store: str | None,
    tags: tuple[str, ...],
    since: str | None,
    models_source: str,
    on_divergence: str,
    outcome_cmd: str | None,
    outcome_timeout: float,
    junit_file: str | None,
    json_file: str | None,
    no_verify: bool,
    trust: bool,
    executor: str,
    jobs: int | None,
) -> None:
    """Replay every selected session against today's code, several at once, and print a table:
    session, name, tags, verdict, time.

    forkpoint check [SESSION|STORE|DIR]... [--tag K=V] [--since DATE] [-- CMD]

    TARGETS are sessions (path, id, prefix, name, last), stores (a directory or URL) or folders of
    sessions such as tests/cassettes; none means the store. Each session's recorded command runs
    in the current directory (absolute paths under the directory it was recorded in are mapped
    here), or CMD when given; a recorded command only when a trusted key signed its session, or
    with --trust (else the row is an error showing the command). Exits 3 when any session did not
    reproduce, 1 when none was selected.

    With --models live, every model call is made live (a new prompt or model) while tool calls are
    served from the recording, and the table shows where behaviour first changed and the outcome,
    tokens and model time of the recorded run next to the new one.
    """
    import time

    import orjson

    from .files import write_private
    from .redact import scrub_json
    from .show import terminal
    from .suite import ab_summary, check_sessions, counts, parse_since, select, write_junit
    from .suite import exit_code as check_exit
    from .suite.tables import ab_answers_table, ab_summary_table, ab_table, check_table

    for f, option in ((junit_file, "--junit-xml"), (json_file, "--json")):
        if f:
            _output_file(f, option)
    ctx = click.get_current_context()
    cmd = list(ctx.meta.get("forkpoint.cmd") or [])
    ab = models_source == "live"
    try:
        selection = select(
            list(targets), store=store, tags=_parse_tags(tags), since=parse_since(since) if since else None
        )
    except SessionError as exc:
        # `check last python agent.py` reads every word as a session; what runs goes after --
        import shlex

        from .store import resolve

        def unresolved(target: str) -> bool:
            try:
                resolve(target, store)
            except SessionError:
                return True
            return False

        command = next(
            (i for i, t in enumerate(targets) if (shutil.which(t) or Path(t).is_file()) and unresolved(t)),
            None,
        )
        if command is None:
            raise
        given = shlex.join(targets[command:])  # (as a shell takes it, to paste)
        raise click.ClickException(
            f"{exc}; {targets[command]!r} is a command here: the command to run goes after --, as in "
            f"forkpoint check {shlex.join(targets[:command]) or 'SESSION'} -- {given}"
        ) from None
    for note in selection.notes:
        _err().print(f"forkpoint: {note}", markup=False)
    if not selection.sessions:  # (a typo in a CI job's filter or store must not pass as green)
        raise click.ClickException("no session to check: nothing was selected, so nothing was checked")
    started = time.perf_counter()
    total = len(selection.sessions)
    finished = 0

    def progress(row: dict[str, Any]) -> None:
        nonlocal finished
        finished += 1
        if row.get("signature"):  # (before the table that shows what it served)
            _err().print(f"forkpoint: WARNING: {row['signature']}", markup=False)
        if _err().is_terminal:
            _err().print(f"forkpoint: {finished}/{total} {row['session_id']} {row['status']}", markup=False)

    with _executor(executor, jobs) as ex:
        workers = ex.workers
        rows = check_sessions(
            selection,
            executor=ex,
            cwd=Path.cwd(),
            cmd=cmd or None,
            models=models_source,
            on_divergence=on_divergence,
            outcome=_outcome(outcome_cmd, outcome_timeout),
            verify=not no_verify,
            trust=trust,
            on_row=progress,
        )
    seconds = time.perf_counter() - started
    out = terminal()
    if ab:
        from .suite.check import not_stored

        summary = ab_summary(rows)
        out.print(ab_table(rows))
        answers = ab_answers_table(rows)
        if answers is not None:
            out.print(answers)
        out.print(ab_summary_table(summary))
        lacking = not_stored(rows)
        if lacking:
            click.echo(lacking)
    else:
        summary = counts(rows)
        out.print(check_table(rows))
        parts = ", ".join(f"{n} {k}" for k, n in sorted(summary.items()))
        click.echo(
            f"{plural(len(rows), 'session')} checked in {seconds:.1f} s on {executor}"
            f"{_at_a_time(workers, len(rows))}: {parts}"
        )
    for r in rows:
        if r["status"] not in ("reproduced", "same", "changed") and r.get("divergence"):
            _err().rule(f"{r['session_id']} {escape(r.get('name') or '')}")
            _err().print(r["divergence"], markup=False)
    if junit_file:
        write_junit(rows, Path(junit_file), seconds=seconds, ab=ab)
    if json_file:
        data = {"rows": rows, "summary": summary, "seconds": round(seconds, 3), "executor": executor}
        write_private(json_file, orjson.dumps(scrub_json(data), option=orjson.OPT_INDENT_2))
    sys.exit(check_exit(rows, ab=ab))


@main.command(name="make-test")
@click.argument("session")
@_store_opt
@click.option(
    "--into",
    default=Path("tests") / "incidents",
    show_default=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The folder of the test file (its cassette goes to cassettes/NAME beside it).",
)
@click.option("--name", help="The test's name (default: the session's name, else its id).")
@click.option("--force", is_flag=True, help="Replace a test and cassette of that name.")
@click.option(
    "--trust",
    is_flag=True,
    help="Write a test that runs the recorded command although no key you trust signed the session.",
)
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def make_test_cmd(
    session: str,
    store: str | None,
    into: Path,
    name: str | None,
    force: bool,
    trust: bool,
    cmd: tuple[str, ...],
) -> None:
    """Turn a recorded session (an incident) into a test of your pytest suite.

    The session becomes the test's cassette, and a test is written that runs the recorded command
    (or CMD, with or without -- before it: a Python command, for a session recorded through a shell
    script) in this directory (the recorded one maps here) and asserts how the recorded run ended,
    with a comment where the assertion the fix must satisfy goes. The recorded command is written
    into the test only when a key you trust signed the session (or with --trust). After the fix:
    pytest --forkpoint-mode=record TEST re-records from the first call that changed.
    """
    from .suite import make_test

    s = _load(session, store, check=False)  # make_test verifies, and refuses
    test_file, cassette = make_test(
        s, into=into, root=Path.cwd(), name=name, force=force, command=_command(cmd) or None, trust=trust
    )
    _err().print(
        f"forkpoint: wrote {test_file} and its cassette {cassette} (session {s.id}); run it with: "
        f"pytest {test_file}",
        markup=False,
    )
    click.echo(str(test_file))


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
@click.option(
    "--timeout",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds to wait for the OTLP endpoint.",
)
@click.option(
    "--new-trace",
    is_flag=True,
    help="Fresh trace and span ids, so a backend that keeps the first copy of an id takes this export too.",
)
def export_cmd(
    session: str,
    store: str | None,
    otlp: str | None,
    file: str | None,
    content: bool,
    headers: tuple[str, ...],
    service_name: str | None,
    timeout: float,
    new_trace: bool,
) -> None:
    """Export SESSION as an OpenTelemetry trace (GenAI semantic conventions, OpenInference); see
    docs/otel.md."""
    from .exporters.otel import export
    from .otel import shown

    if not otlp and not file:
        raise click.UsageError("give --otlp URL and/or --file PATH")
    hdrs = _parse_headers(headers, "--header")
    if file and file != "-":
        _output_file(file, "--file")
    s = _load(session, store)
    done = export(
        s,
        otlp=otlp,
        file=file,
        content=content,
        headers=hdrs,
        service_name=service_name,
        timeout=timeout,
        new_trace=new_trace,
    )
    where = " and ".join(x for x in (otlp and shown(otlp), None if file == "-" else file) if x)
    if where:
        _err().print(
            f"forkpoint: exported {done.spans} spans of session {s.id} as trace {done.trace_id} to {where}",
            markup=False,
        )
    if done.warning:
        _err().print(
            f"forkpoint: the OTLP endpoint took every span, with a warning: {done.warning}", markup=False
        )


@main.command(name="import")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_store_opt
@click.option(
    "--name", callback=_session_name, help="A name for the session (default: FORMAT import of FILE)."
)
def import_cmd(path: Path, store: str | None, name: str | None) -> None:
    """Turn a VCR.py cassette or an agent trajectory (SWE-agent, mini-swe-agent, OpenHands) into a
    session. The format is detected from the content; what the file lacks is listed in the session."""
    from .importers import import_described
    from .redact import scrub_text
    from .store import info

    # (what the import made of the file, not the header's imported_from: sealed in a store that encrypts)
    session_path, imported = import_described(path, store=_store(store), name=name)
    i = info(session_path)
    _err().print(
        f"forkpoint: imported {imported.format} file {path} as session {session_path.name} "
        f"({plural(i.model_calls, 'model call')}, {plural(i.tool_calls, 'tool call')}) in {session_path.parent}",
        markup=False,
    )
    for label, items in (("not in the file", imported.missing), ("inferred", imported.adjusted)):
        for item in items:  # (scrubbed, as the header that says them is)
            _err().print(f"  {label}: {scrub_text(item)}", markup=False)
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
    from .scrub import scrub_session
    from .store import resolve

    path = resolve(session, _store(store))
    report = scrub_session(path, dry_run=dry_run, force=force)
    for note in report.notes:
        _err().print(f"forkpoint: {note}", markup=False)
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


def _open_store(value: str | None) -> Store:
    from .store import open_store

    return open_store(_store(value))


@main.command(name="rm")
@click.argument("sessions", nargs=-1, required=True, metavar="SESSION...")
@_store_opt
@click.option(
    "--force", is_flag=True, help="Also remove a session without an end event (one that was killed)."
)
def rm_cmd(sessions: tuple[str, ...], store: str | None, force: bool) -> None:
    """Remove sessions from the store (files and index entries). A session under legal hold is
    refused (exit 1); so is one without an end event (it may still be recording) unless --force."""
    from .store.retention import find, remove

    target = _open_store(store)
    rows = find(target, sessions)
    for r in rows:
        if r.error is not None and not force:
            # (its log says nothing of an end: "no end event, it may still be recording" misled)
            raise click.ClickException(
                f"session {r.session_id} cannot be read ({r.error}); pass --force to remove it all the same"
            )
        if not r.complete and not force:
            raise click.ClickException(
                f"session {r.session_id} has no end event: it may still be recording; "
                "pass --force if it was killed"
            )
    done = remove(target, rows)
    for sid in done.removed:
        click.echo(f"removed {sid}")
    for sid, why in done.kept.items():
        _err().print(f"forkpoint: refused to remove {sid}: {why}", markup=False)
    _removal_failed(done.failed)
    sys.exit(1 if done.kept else 0)


def _removal_failed(failed: str | None) -> None:
    """Say what stopped a removal (after what it removed was said) and exit 1."""
    if failed is not None:
        _err().print(f"forkpoint: {failed}; the sessions not said to be removed are kept", markup=False)
        sys.exit(1)


@main.command()
@_store_opt
@click.option(
    "--older-than",
    metavar="AGE",
    help='Remove sessions created longer ago than AGE (30d, 12h, 2w; default: [store] retention, e.g. "90d").',
)
@click.option("--keep-failed", is_flag=True, help="Keep sessions that ended with a non-zero exit code.")
@click.option("--dry-run", is_flag=True, help="Say what would be removed; remove nothing.")
def prune(store: str | None, older_than: str | None, keep_failed: bool, dry_run: bool) -> None:
    """Remove the sessions older than --older-than (or the configured retention). Sessions under legal
    hold and sessions without an end event are kept, and listed."""
    from .config import store_retention
    from .store.retention import hold_reason, holds, parse_age, prune_candidates, remove

    where = "--older-than"
    if older_than is None:
        older_than, where = store_retention()
        if older_than is None:
            raise click.UsageError(
                'give --older-than AGE, or set [store] retention = "90d" in forkpoint.toml'
            )
    try:
        age = parse_age(older_than, where)
    except SessionError as exc:
        raise click.UsageError(str(exc)) from None
    target = _open_store(store)
    rows = target.listing().rows
    todo, kept = prune_candidates(rows, age, keep_failed=keep_failed)
    newer = len(rows) - len(todo) - len(kept)
    on_hold = holds(target)
    for r in [r for r in todo if r.session_id in on_hold]:
        kept[r.session_id] = f"under legal hold ({hold_reason(on_hold[r.session_id])})"
    todo = [r for r in todo if r.session_id not in on_hold]
    failed = None
    if dry_run:
        for r in todo:
            click.echo(f"would remove {r.session_id}")
    else:
        done = remove(target, todo)
        kept.update(done.kept)
        for sid in done.removed:
            click.echo(f"removed {sid}")
        removed, failed = set(done.removed), done.failed
        todo = [r for r in todo if r.session_id in removed]  # (the count below: what went)
    for sid, why in kept.items():
        _err().print(f"forkpoint: kept {sid}: {why}", markup=False)
    verb = "would remove" if dry_run else "removed"
    _err().print(
        f"forkpoint: prune {verb} {plural(len(todo), 'session')} older than {older_than} "
        f"from {target.url}; kept {f'{len(kept)} older (said above) and ' if kept else ''}{newer} newer",
        markup=False,
    )
    _removal_failed(failed)


@main.command(name="hold")
@click.argument("session")
@click.option("--reason", required=True, help="Why the session is held (an incident, a ticket).")
@_store_opt
def hold_cmd(session: str, reason: str, store: str | None) -> None:
    """Put SESSION under legal hold: rm, prune and scrub refuse it until `forkpoint release`. On an
    S3 store whose bucket has Object Lock, each of its objects also gets the S3 legal hold."""
    from .store.retention import find, hold, hold_reason

    target = _open_store(store)
    (row,) = find(target, [session])
    h = hold(target, row.session_id, reason)
    click.echo(f"held {row.session_id}: {hold_reason(h)} (since {h.get('since')}, by {h.get('by')})")


@main.command(name="release")
@click.argument("session")
@_store_opt
def release_cmd(session: str, store: str | None) -> None:
    """Lift the legal hold on SESSION (and the S3 object legal holds, on a bucket with Object Lock)."""
    from .store.retention import find, release

    target = _open_store(store)
    (row,) = find(target, [session])
    if not release(target, row.session_id):
        raise click.ClickException(f"session {row.session_id} is not under legal hold")
    click.echo(f"released {row.session_id}")


if __name__ == "__main__":  # pragma: no cover
    main()
