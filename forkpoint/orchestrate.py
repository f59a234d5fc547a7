"""Running a program under forkpoint: the subprocess orchestration of ``record``, ``replay`` and
``fork``, shared by the command line, the demo and the test plugin (and free of any command-line
framework: errors are :class:`~forkpoint.errors.ForkpointError`s, messages go to stderr).

The program runs as a child process; forkpoint starts in its interpreter through
:mod:`forkpoint._boot` (a ``sitecustomize`` on ``PYTHONPATH``) and reports back through files: the
session it appends to, and, for a replay, one report per replaying process.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from . import override
from ._boot import child_env, read_endings
from .checkpoint import Check, find, restore, validate, verify_session
from .errors import CheckpointError, SessionError, UsageError
from .log import Session
from .match import load_ignore
from .otel import LiveExport
from .record import make_header, open_workspace, recording_warnings
from .redact import load_rules
from .replay import (
    EXIT_DIVERGENCE,
    conclude,
    create_child,
    end_divergence,
    ended_by_override,
    format_divergence,
    merge_reports,
    summary_line,
)
from .store import INDEX_DIR, info, open_store, store_dir
from .text import plural


def say(message: str) -> None:
    """A line for the person running forkpoint (stderr: stdout belongs to the program)."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def check_config(cwd: Path | None = None) -> None:
    """Read the configuration the program will run under (its ``[redact]`` and ``[match]`` rules)
    before it starts: a bad file or rule is refused here, naming the file and the rule, instead of
    the program running without forkpoint. Raises :class:`~forkpoint.errors.ConfigError`."""
    load_rules(cwd)
    load_ignore(cwd)


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
        say(f"forkpoint: command not found: {cmd[0]}")
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
    deterministic: bool = False,
    quiet: bool = False,
    capture: bool = False,
    live: LiveExport | None = None,
) -> tuple[Path, int, str | None]:
    """Record ``cmd`` into a new session of ``store``; with ``workspace``, take checkpoints of it;
    with ``deterministic``, record the values its own code reads from the clock, ``uuid`` and
    ``random`` too (:mod:`forkpoint.capture.clock`).
    with ``live``, send its spans while it runs (this process follows the log the program writes).

    Returns (session path, exit code, the command's stdout if ``capture``).
    """
    tools = list(tools or [])
    check_config()
    target = open_store(store)
    ws = open_workspace(workspace, target.path, include_ignored)
    header = make_header(argv=cmd, name=name, tags=tags, deterministic=deterministic)
    header["tools"] = tools
    header["workspace"] = ws.describe() if ws else None
    session = target.create(header)
    session.quiet = quiet
    if live is not None:
        live.start(session.path)
        session.on_close.append(live.finish)
    with tempfile.TemporaryDirectory(prefix="forkpoint-record-") as tmp:
        env = child_env("record", session.path, tools=tools, report=Path(tmp))
        if ws is not None:
            env["FORKPOINT_WORKSPACE"] = orjson.dumps(
                {"root": str(ws.root), "include_ignored": include_ignored}
            ).decode()
        code, out = run_child(cmd, env, capture=capture)
        uncaught = read_endings(Path(tmp))
    session.end(code, uncaught=uncaught)
    where = session.close(quiet=quiet)  # index entry; upload to a remote store
    if not quiet:
        i = info(session.path)
        say(
            f"forkpoint: recorded session {session.session_id} ({plural(i.model_calls, 'model call')}, "
            f"{plural(i.tool_calls, 'tool call')}) in {where}"
        )
        for warning in recording_warnings(session.path):
            say(f"forkpoint: WARNING: {warning}")
        done = live.finish() if live is not None else None  # (finished as the session closed: its report)
        if done is not None and done.complete:
            say(
                f"forkpoint: sent {plural(done.sent, 'span')} live to {done.endpoint} as trace {done.trace_id}"
            )
    return session.path, code, out


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
    strict: bool = False,
    accept_drift: bool = False,
) -> tuple[dict[str, Any] | None, int, str | None]:
    """Replay ``session`` by running ``cmd`` (default: the recorded command). With ``strict``, plain
    HTTP that differs from the recording only in ids is a divergence too.

    With overrides, a live source or a policy other than ``stop``, the run is recorded as a new
    session linked to its parent (its ``end`` keeps the exit code the run had and where it
    diverged). Returns (report, or None if the process wrote none; exit code as ``forkpoint
    replay`` exits: the command's own when the run reproduced the recording — or, for a what-if
    run, when it went live, took the way out an override offered, or drifted under ``fifo`` with
    ``accept_drift`` —, else :data:`~forkpoint.replay.EXIT_DIVERGENCE`; the command's stdout if
    ``capture``). Raises
    :class:`~forkpoint.errors.OverrideError` for an override that does not fit the session,
    :class:`~forkpoint.errors.UsageError` when there is no command to run, and
    :class:`~forkpoint.errors.SessionError` for a session that fails verification (with ``check``).
    """
    origin = session.header.get("imported_from")
    if not cmd and origin:
        raise UsageError(
            f"session {session.id} was imported from a {origin.get('format')} file ({origin.get('path')}): "
            f"it has no agent command to run again. Give the command that runs your agent after --, e.g. "
            f"forkpoint replay {session.id} -- python agent.py"
        )
    command = list(cmd or session.header.get("argv") or [])
    if not command:
        raise UsageError("the session has no recorded command; give one after --")
    if not cmd:
        command = _runnable(command)
    check_config(cwd)
    if check:
        v = verify_session(session.path, git=False)
        if v.problems:
            raise SessionError(
                f"session {session.id} fails verification, so it may not be what was recorded: "
                f"{v.problems[0]} (see: forkpoint verify {session.id}; replay it anyway with --no-verify)"
            )
    specs = list(overrides or [])
    parsed = [override.parse(o) for o in specs]
    override.resolve(parsed, session.calls())
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
        child.quiet = quiet
        if not in_store and not quiet:
            say(f"forkpoint: this what-if run is recorded in {child.path.parent}")
    options = {
        "models": models_source,
        "tools": tools_source,
        "on_divergence": on_divergence,
        "overrides": specs,
        "child": str(child.path.resolve()) if child else None,
        "live_from": live_from,
        "strict": strict,
    }
    with tempfile.TemporaryDirectory(prefix="forkpoint-replay-") as tmp:
        env = child_env("replay", session.path, tools=all_tools, report=Path(tmp), replay_options=options)
        code, out = run_child(command, env, capture=capture, cwd=cwd)
        # One report per replaying process (a recorded shell script may run several programs).
        reports = [orjson.loads(p.read_bytes()) for p in Path(tmp).glob("report-*.json")]
        reports.sort(key=lambda r: r.get("process_started") or 0)
        report = merge_reports(reports) if reports else None
    if report is not None:
        report["exit_code"] = code
        conclude(report)
    if child is not None:
        child.end(
            code,
            uncaught=list(report.get("uncaught") or []) if report is not None else None,
            divergence=end_divergence(report, child.path) if report is not None else None,
        )
        child.close(quiet=quiet)
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
        say(
            "forkpoint: the replayed process wrote no report: it did not start forkpoint (is forkpoint "
            f"installed in its environment?), or it was killed, or it left through os._exit{hint}"
        )
        return None, code if code else 1, out
    if moved and not quiet and (code != 0 or not report.get("matched")):
        say(f"forkpoint: note{hint}")
    if not quiet:
        say(summary_line(report))
        for o in report.get("overrides") or []:
            state = "applied" if o["applied"] else "never reached (the run went another way first)"
            say(f"  override {o['spec']} → event seq {o['seq']}: {state}")
    if report.get("divergence"):
        if not quiet:
            say(format_divergence(report["divergence"]))
            for d in (report.get("drift") or [])[1:]:
                say(
                    f"  drift at {d['kind'].replace('_', ' ')} #{d['position']}: served recorded seq "
                    f"{d['served_seq']} ({len(d['diff'])} difference(s))"
                )
        # Going live after a divergence is the what-if the user asked for; serving recorded answers
        # to other requests (fifo) is not a reproduction, unless the user said to accept that.
        asked = on_divergence == "live" or (on_divergence == "fifo" and accept_drift)
        if not asked or (on_divergence == "fifo" and not report.get("drift")):
            return report, EXIT_DIVERGENCE, out
    elif (
        not report.get("reproduced", True)
        and not ended_by_override(report)
        and not _expected_to_differ(report)
    ):
        # Ended early, reached for the network, or ended otherwise than recorded.
        return report, EXIT_DIVERGENCE, out
    elif (
        specs
        and not quiet
        and not report.get("ended_early")
        and report.get("ended_as_recorded") is not False
        and any(o["applied"] for o in report.get("overrides") or [])
    ):
        say("the override(s) did not change the agent's path: every later call matched the recording")
    return report, code, out


def _expected_to_differ(report: dict[str, Any]) -> bool:
    """True for a what-if run whose only difference is how the program ended: an override took
    effect or a kind of call was live, so another ending is the experiment's answer, not a failed
    reproduction (the report still says it did not end as recorded)."""
    sources = report.get("sources") or {}
    what_if = any(o.get("applied") for o in report.get("overrides") or []) or "live" in sources.values()
    return what_if and not report.get("unserved") and not report.get("network_blocked")


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


@dataclass
class Arm:
    """One arm of a fork: where it was restored, whether the checkpoint validated there, and how its
    continuation went (``report`` and ``exit_code`` of its replay; ``error`` when it could not start)."""

    index: int
    directory: Path
    checks: list[Check] = field(default_factory=list)
    error: str | None = None
    report: dict[str, Any] | None = None
    exit_code: int | None = None

    @property
    def valid(self) -> bool:
        """Restored, and every check of the checkpoint passed: only then does the arm run."""
        return self.error is None and all(c.ok for c in self.checks)


def fork_arms(
    session: Session,
    seq: int,
    cmd: list[str],
    *,
    arms: int,
    into: Path | None = None,
    overrides: list[str] | None = None,
    on_divergence: str = "stop",
    repo: Path | None = None,
    on_arm: Callable[[Arm, str], None] | None = None,
) -> tuple[Path, list[Arm]]:
    """Restore the resumable checkpoint ``seq`` of ``session`` into ``arms`` fresh directories,
    validate each without a model, and continue each valid one with ``cmd`` run in it: the calls
    recorded before the checkpoint replayed, every later one live, the arm recorded as a session
    linked to its parent. ``on_arm(arm, stage)`` is called at ``"restored"`` and ``"done"``.

    Returns (the folder of the arms, the arms). Raises :class:`~forkpoint.errors.CheckpointError`
    for a checkpoint that does not exist or is not resumable (resuming there would make the agent
    speak twice).
    """
    cp = find(session, seq)
    if cp["boundary"] != "resumable":
        raise CheckpointError(
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
    done: list[Arm] = []
    for i in range(1, arms + 1):
        arm = Arm(i, into / f"arm-{i}")
        done.append(arm)
        try:
            restore(session, seq, arm.directory, repo=repo)
            arm.checks = validate(arm.directory)
        except CheckpointError as exc:
            arm.error = str(exc)
        if on_arm is not None:
            on_arm(arm, "restored")
        if not arm.valid:
            continue
        arm.report, arm.exit_code, _ = replay_command(
            session,
            cmd,
            on_divergence=on_divergence,
            overrides=list(overrides or []),
            live_from=seq,
            cwd=arm.directory.resolve(),
            child_name=f"fork {session.id}@{seq} arm {i}",
        )
        if on_arm is not None:
            on_arm(arm, "done")
    return into, done
