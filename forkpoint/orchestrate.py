"""Running a program under forkpoint: the subprocess orchestration of ``record``, ``replay`` and
``fork``, shared by the command line, the demo and the test plugin (and free of any command-line
framework: errors are :class:`~forkpoint.errors.ForkpointError`s, messages go to stderr).

The program runs as a child process; forkpoint starts in its interpreter through
:mod:`forkpoint._boot` (a ``sitecustomize`` on ``PYTHONPATH``) and reports back through files: the
session it appends to, and, for a replay, one report per replaying process.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson

from ._boot import (
    ENDING_PREFIX,
    EXEC_PREFIX,
    LIVE_PREFIX,
    NOT_STARTED_PREFIX,
    REPLAYING_PREFIX,
    UNREPORTED_PREFIX,
    child_env,
    hold_tree,
    named,
    outlived,
    read_endings,
    unwritten,
)
from .children import SIGNALS, Captured, wait_child
from .errors import CheckpointError, ForkpointError, OverrideError, SessionError, UsageError
from .events import MAX_HASH_SEED, divergence_call, divergence_place
from .log import Session, read_json_text, to_json
from .text import KIND_NAMES, plural, say

# Each function imports the layers it uses: `forkpoint record` starts its program without loading
# replay, checkpoints, executors or OpenTelemetry, and `forkpoint replay` without loading capture,
# matching or the replayer, which run in the replayed process (issue 15: start-up). Names for
# annotations only:
if TYPE_CHECKING:
    from .checkpoint import Check
    from .executors import Executor
    from .netns import Namespace
    from .otel import LiveExport
    from .outcome import Outcome
    from .store import Recording


def check_config(cwd: Path | None = None) -> None:
    """Read the configuration the program will run under (its ``[redact]`` and ``[match]`` rules)
    before it starts: a bad file or rule is refused here, naming the file and the rule, instead of
    the program running without forkpoint. Raises :class:`~forkpoint.errors.ConfigError`."""
    from .config import load_table

    # Matching and redaction are loaded only to check tables that are there (the replaying parent
    # needs neither otherwise).
    if load_table("redact", cwd)[0] is not None:
        from .redact import load_rules

        load_rules(cwd)
    if load_table("match", cwd)[0] is not None:
        from .match import load_ignore

        load_ignore(cwd)


class Ran(NamedTuple):
    """How a child process ended: its exit code, what it printed on stdout / stderr when captured
    (:class:`~forkpoint.children.Captured`: in a file, not in memory), when the command never
    ran (exit code 127 or 126, said), why (:func:`~forkpoint.netns.unrun`), and the name of the
    signal that killed it, if one did (its exit code alone cannot tell that from ``exit(137)``)."""

    code: int
    out: Captured | None
    err: Captured | None
    unrun: str | None = None
    killed_by: str | None = None


def run_child(
    cmd: list[str],
    env: dict[str, str],
    *,
    capture: bool = False,
    capture_stderr: bool = False,
    cwd: Path | None = None,
    namespace: Namespace | None = None,
    meanwhile: Callable[[], object] | None = None,
    watch: Callable[[], str | None] | None = None,
    tree: Path | None = None,
) -> Ran:
    """Run ``cmd`` to completion with ``env``; Ctrl-C, SIGTERM and SIGHUP go to the child. With
    ``namespace`` (:func:`forkpoint.netns.confine`) the child enters it before it execs ``cmd``.
    ``meanwhile`` is called once the child runs (work of this process that need not wait for it,
    such as importing what its end needs, overlaps the child's own start-up on another CPU).

    ``tree``: a report folder whose ``tree`` lock the program's processes inherit
    (:func:`forkpoint._boot.hold_tree`), for :func:`forkpoint._boot.outlived`.

    ``watch`` is asked every half second while the child runs: a reason (text) to stop it, which is
    said, and the child is sent SIGTERM (SIGKILL 3 s later, to its process group when it leads
    one), or None.

    Returns its exit code — 128 + the signal number when the child was killed by a signal, 127 when
    the command does not exist — and its stdout (``capture``) and stderr (``capture_stderr``).
    Called from another thread than the main one, signals are left alone: only the main thread may
    handle them. In a local executor's task the child runs in a process group of its own, which the
    executor passes Ctrl-C, SIGTERM and SIGHUP on to (:mod:`forkpoint.executors.local`).
    """
    from .executors.local import in_task, task_child

    task = in_task()
    held: tuple[int, ...] = ()
    if tree is not None:
        try:
            held = (hold_tree(tree),)
        except OSError:  # (a full disk: its processes' start is not waited for, as before)
            pass
    try:
        proc = subprocess.Popen(
            cmd,
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.PIPE if capture_stderr else None,
            preexec_fn=namespace.preexec if namespace is not None else None,
            # (an executor's task: its group gets the signals the executor passes on, all of it)
            start_new_session=task,
            pass_fds=held,
        )
    except OSError as exc:  # (not found, not executable, a directory: as a shell, 127 or 126)
        from .netns import unrun

        why = unrun(cmd[0], exc, env.get("PATH", os.defpath), cwd)
        code = 127 if isinstance(exc, FileNotFoundError) else 126
        message = f"forkpoint: the command {cmd[0]} {why}"
        if capture_stderr:
            return Ran(code, Captured() if capture else None, Captured(message + "\n"), unrun=why)
        say(message)
        return Ran(code, None, None, unrun=why)
    finally:
        for fd in held:  # (the program's processes hold it now, this one not)
            os.close(fd)
    if namespace is not None:
        namespace.started()
    if task:
        task_child(proc)

    # Ctrl-C reaches the child through the terminal's process group; SIGTERM and SIGHUP (a timeout,
    # a CI cancel, a closed terminal) are sent to this process only, so pass them on. Either way we
    # wait for the child, so the session still gets its end event.
    def forward(signum: int, _frame: object) -> None:
        proc.send_signal(signum)

    try:
        with _handling({signal.SIGINT: signal.SIG_IGN, signal.SIGTERM: forward, signal.SIGHUP: forward}):
            try:
                if meanwhile is not None:
                    meanwhile()
            finally:
                out, err = wait_child(proc, watch, own_group=task)
    finally:
        if task:
            task_child(proc, done=True)
    code = proc.returncode
    if code < 0:
        return Ran(128 - code, out, err, killed_by=SIGNALS.get(-code, f"signal {-code}"))
    return Ran(code, out, err)


@contextlib.contextmanager
def _handling(handlers: Mapping[int, Any]) -> Iterator[None]:
    """Signals handled by ``handlers`` (signal number: handler) while in it, then as before; left
    alone off the main thread, as only the main thread may handle them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _interrupted(watch: _Watch, what: str) -> bool:
    """Whether forkpoint, running a local executor's task, was told to stop and passed it on while
    ``what`` ran (then said in ``watch.why``)."""
    from .executors.local import in_task, interrupted

    sig = interrupted() if in_task() else None
    if sig is not None:
        watch.why = watch.why or f"interrupted: forkpoint was sent {sig.name} while {what} ran"
    return sig is not None


#: Why a Python program a process became through exec may not have started forkpoint.
UNSTARTED = " (python -I and -E ignore the PYTHONPATH that starts it; or it was killed)"


def unstarted_execs(folder: Path, *prefixes: str) -> list[tuple[str, str]]:
    """The Python programs the recorded command's processes became through exec (``exec-<pid>-<N>.json``,
    written by :func:`forkpoint._boot._hand_over_at_exec`) that left no file named with one of
    ``prefixes`` and the pid in ``folder`` (its ending or report, written at its exit) and made no
    exec of their own: forkpoint did not start in them. ``(pid, the command, scrubbed)`` each. A
    program that is not Python (a shell) is left out: the programs it starts report under their own
    pids."""
    import re

    mine = os.path.realpath(sys.executable)
    out: list[tuple[str, list[str]]] = []
    for path in sorted(named(folder, EXEC_PREFIX, ".json")):
        pid, _, n = path.stem[len(EXEC_PREFIX) :].partition("-")
        try:
            argv = [str(a) for a in orjson.loads(path.read_bytes())["argv"]]
            went_on = (folder / f"{EXEC_PREFIX}{pid}-{int(n) + 1}.json").exists()  # (it exec'd in turn)
        except (OSError, ValueError, KeyError, TypeError):
            continue
        # ("ending-<pid>.json", "report-<pid>.json", "not-started-<pid>.txt": what it wrote at its end)
        went_on = went_on or any(named(folder, f"{pre}{pid}.") for pre in prefixes)
        python = (
            re.fullmatch(r"python[0-9.]*", os.path.basename(argv[0])) or os.path.realpath(argv[0]) == mine
        )
        if python and not went_on:
            out.append((pid, argv[1:] or argv))
    if not out:  # (the scrubber loads only for what is said: a replay's parent loads no redaction)
        return []
    from .redact import scrub_argv

    return [(pid, " ".join(scrub_argv(argv))) for pid, argv in out]


class _Stuck:
    """Whether a replay that diverged hangs: a process's report holds a divergence and the program
    has not ended :data:`STUCK_AFTER_S` seconds later (a worker diverged, and the program waits for
    a result it will never send)."""

    def __init__(self, reports: Path) -> None:
        self.reports = reports
        self.since: float | None = None

    def __call__(self) -> str | None:
        if self.since is None:
            for path in named(self.reports, "report-", ".json"):
                try:
                    diverged = read_json_text(path.read_bytes()).get("divergence")
                except (OSError, ValueError):
                    continue
                if diverged:
                    self.since = time.monotonic()
                    break
            return None
        if time.monotonic() - self.since < STUCK_AFTER_S:
            return None
        return f"the replay diverged, and the program has not ended {STUCK_AFTER_S:.0f} s later (waiting for a worker that stopped?)"


class _Watch:
    """What stops a replayed program early (a :func:`run_child` ``watch``): a divergence it hangs
    after (``stuck``), or ``timeout`` seconds from now. :attr:`why` keeps the reason once given."""

    def __init__(self, stuck: _Stuck | None, timeout: float | None) -> None:
        self.stuck = stuck
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout if timeout is not None else None
        self.why: str | None = None

    def __call__(self) -> str | None:
        why = self.stuck() if self.stuck is not None else None
        if why is None and self.deadline is not None and time.monotonic() > self.deadline:
            why = f"the program ran longer than its timeout of {self.timeout:g} s"
        self.why = self.why or why
        return why


#: How long a program may run on after its replay diverged before forkpoint replay stops it.
STUCK_AFTER_S = 5.0


def _say_secret_options(cmd: list[str], session_id: str) -> None:
    """Say which options of the command were kept as placeholders (:data:`.redact.SECRET_OPTION`):
    a replay of the recorded command passes those, not the values."""
    from .redact import secret_options

    # (from the scrubber itself: a value with '=' in it, base64's padding, is still a value)
    names = secret_options(cmd)
    if names:
        say(
            f"forkpoint: the values of {', '.join(names)} in the command are kept as "
            "placeholders (an option so named carries a credential): a replay of the recorded command "
            f"passes those; give it the command to pass the real ones (forkpoint replay {session_id} -- CMD)"
        )


def record_command(
    cmd: list[str],
    *,
    store: Path,
    name: str | None = None,
    tags: dict[str, str] | None = None,
    tools: list[str] | None = None,
    workspace: Path | None = None,
    include_ignored: bool = False,
    deterministic: bool | list[str] = False,
    quiet: bool = False,
    capture: bool = False,
    live: LiveExport | None = None,
    encrypt_to: list[str] | None = None,
) -> tuple[Path, int, str | None]:
    """Record ``cmd`` into a new session of ``store``; with ``workspace``, take checkpoints of it;
    with ``deterministic``, record the values its own code (or, a list, these modules) reads from
    the clock, ``uuid`` and ``random`` too (:mod:`forkpoint.capture.clock`).
    with ``live``, send its spans while it runs (this process follows the log the program writes);
    ``encrypt_to``: the age recipients to encrypt the session for (None: the configuration's).

    Returns (session path, exit code, the command's stdout if ``capture``).
    """
    from .record import (
        Lacks,
        check_live_export,
        hash_seed,
        make_header,
        open_workspace,
        read_back,
        tally_into,
    )
    from .store import info, open_store

    tools = list(tools or [])
    check_config()
    target = open_store(store)
    ws = open_workspace(workspace, target.path, include_ignored)
    header = make_header(argv=cmd, name=name, tags=tags, deterministic=deterministic, encrypt_to=encrypt_to)
    header["tools"] = tools
    header["workspace"] = ws.describe() if ws else None
    header["hash_seed"] = hash_seed()
    check_live_export(header, live)
    session = target.create(header)  # (CannotRecord: the command runs unrecorded)
    session.quiet = quiet
    _say_secret_options(cmd, session.path.name)
    if live is not None:
        live.start(session.path)
        session.on_close.append(live.finish)
    # (ignoring what cannot be removed: a process said to outlive the program may write to it as it goes)
    with tempfile.TemporaryDirectory(prefix="forkpoint-record-", ignore_cleanup_errors=True) as tmp:
        env = child_env("record", session.path, tools=tools, report=Path(tmp))
        env["PYTHONHASHSEED"] = str(header["hash_seed"])
        if deterministic:
            env["FORKPOINT_DETERMINISTIC"] = orjson.dumps(header["deterministic"]).decode()
        if ws is not None:
            env["FORKPOINT_WORKSPACE"] = orjson.dumps(
                {"root": str(ws.root), "include_ignored": include_ignored}
            ).decode()
        ran = run_child(cmd, env, capture=capture, meanwhile=_ready_to_close, tree=Path(tmp))
        code, captured = ran.code, ran.out
        out = captured.text() if captured is not None else None
        if ran.unrun:  # (said) it never ran: no empty session is left as `last`, as of a command not found
            session.discard()
            return session.path, code, out
        running = _wait_for_outliving(Path(tmp))
        uncaught, session.incomplete, lacks, reported = read_endings(Path(tmp))
        if lost := running.said(UNRECORDED):
            say(f"forkpoint: WARNING: {lost}")
            session.incomplete = session.incomplete or lost
        for pid, command in unstarted_execs(Path(tmp), ENDING_PREFIX, UNREPORTED_PREFIX):
            lost = f"process {pid} became `{command}` through exec, which did not start forkpoint{UNSTARTED}"
            say(f"forkpoint: WARNING: {lost}: what it did is not in the session")
            session.incomplete = session.incomplete or lost
    try:
        i = info(session.path)
    except SessionError as exc:  # (removed while it ran, say: the command's own exit code stands)
        say(f"forkpoint: WARNING: session {session.session_id} could not be finished: {exc}")
        return session.path, code, out
    # Each process's own tally, unless they do not account for every call (then read back).
    tally, skipped = Lacks.merged(lacks, i.model_calls + i.tool_calls), None
    if tally is None and i.model_calls + i.tool_calls:
        tally, skipped = read_back(session.path)
    session.unrecorded_tools = tally.unrecorded_tools() if tally is not None else {}
    tally_into(session, tally)
    session.end(code, uncaught=uncaught)
    where = session.close(quiet=quiet)  # index entry; upload to a remote store
    if not quiet:
        other = tally.other if tally is not None else {}
        mcp = tally.mcp_requests if tally is not None else 0
        counts = [
            plural(i.model_calls - sum(other.values()), "model call"),
            plural(i.tool_calls - mcp, "tool call"),
        ]
        if mcp:  # (an MCP session's initialize, tools/list…: in the session as tool call events)
            counts.append(plural(mcp, "MCP session request"))
        if other:
            kinds = ", ".join(f"{k} {KIND_NAMES.get(kind, kind)}" for kind, k in sorted(other.items()))
            counts.append(f"{plural(sum(other.values()), 'other HTTP call')}: {kinds}")
        say(f"forkpoint: recorded session {session.session_id} ({', '.join(counts)}) in {where}")
        if not reported and not i.model_calls + i.tool_calls:
            say(
                "forkpoint: WARNING: no process of the command recorded anything or reported back: it ran no "
                "Python that started forkpoint (python -I and -E ignore the PYTHONPATH that starts it; a "
                "program that is not Python is not recorded), or each was killed before it could"
            )
        elif code != 0 and not i.model_calls + i.tool_calls and not session.incomplete:
            # (a wrong path, an import error; not a recording that stopped, said above: its calls ran)
            say(
                f"forkpoint: the command exited {code} before it made any model or tool call: the session "
                f"holds its end only (forkpoint rm {session.session_id} removes it)"
            )
        for warning in tally.warnings() if tally is not None else [skipped] if skipped else []:
            say(f"forkpoint: WARNING: {warning}")
        done = live.finish() if live is not None else None  # (finished as the session closed: its report)
        if done is not None and done.complete:
            from .otel import shown

            say(
                f"forkpoint: sent {plural(done.sent, 'span')} live to {shown(done.endpoint)} as trace {done.trace_id}"
            )
    return session.path, code, out


def _hostname() -> str:
    import socket  # (only for this message: not loaded by every record and replay)

    return socket.gethostname()


def recorded_seed(header: Mapping[str, Any]) -> int | None:
    """The ``PYTHONHASHSEED`` the session's command was recorded with (header ``hash_seed``), if any:
    one Python would refuse (an edited header's) is none, else the program would not even start."""
    seed = header.get("hash_seed")
    valid = isinstance(seed, int) and not isinstance(seed, bool) and 0 <= seed <= MAX_HASH_SEED
    return seed if valid else None


def _ready_to_close() -> None:
    """Import what closing a recording needs (signing loads cryptography: ~15 ms). Whatever goes
    wrong is said where the session is signed (the import runs again there): never here, before
    the session has its end."""
    with contextlib.suppress(Exception):
        from .signing import preload

        preload()


@dataclass
class Replayed:
    """What one replay of a session did (:func:`replay_run`)."""

    #: The replay report (merged over the replaying processes), None when no process wrote one.
    report: dict[str, Any] | None
    #: The program's own exit code (128 + N when a signal killed it, 127 when it was not found).
    exit_code: int
    #: What it printed on stdout and stderr, when captured (in files: :class:`~forkpoint.children.Captured`).
    out: Captured | None
    err: Captured | None
    #: The what-if session this run was recorded as, if it was.
    child: Path | None
    #: The outcome measured after the run, when an outcome command was given.
    outcome: dict[str, Any] | None
    #: Why there is no report, or a note on the run (in words); None when there is nothing to say.
    problem: str | None
    #: Wall time of the run, outcome command included, in seconds.
    seconds: float
    #: Why each process whose replay could not start did not run (then there is no report).
    not_started: list[str] = field(default_factory=list)
    #: Why forkpoint stopped the program before it ended (it hung after a divergence, or ran past
    #: its ``timeout``), or None.
    stopped: str | None = None
    #: A fork's run that forkpoint stopped before it wrote a report and before any of its processes
    #: went live from the checkpoint (the marks they leave: :data:`forkpoint._boot.LIVE_PREFIX`): how
    #: far it got, in words ("before it reached checkpoint seq 7: …"). It never went live, and no
    #: outcome is measured.
    stopped_short: str | None = None
    #: A fork's run none of whose processes started forkpoint's replay (no report, no mark: its
    #: command was not found or could not run, was killed before forkpoint started in it, ran no
    #: forkpoint, or the replay could not start), said as what happened (:func:`_unreplayed`): it
    #: never continued from the checkpoint, and no outcome is measured. None when it did.
    unreplayed: str | None = None
    #: Why the outcome command given was not run (forkpoint stopped the run, or it never went live
    #: from its checkpoint), or None.
    not_measured: str | None = None
    #: Why the what-if session :attr:`child` is not in its parent's store (a remote store's upload
    #: failed: it stays staged on the machine that ran it, where it says), or None.
    not_stored: str | None = None
    #: What of :attr:`child` could not be written (a full disk: its outcome, then not counted, the
    #: note saying why it measured nothing, its end), in words, or None.
    unwritten: str | None = None


def replay_run(
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
    map_cwd: bool = False,
    child_name: str | None = None,
    experiment: str | None = None,
    check: bool = True,
    quiet: bool = False,
    capture: bool = False,
    capture_stderr: bool = False,
    outcome: Outcome | None = None,
    strict: bool = False,
    trust: bool = False,
    timeout: float | None = None,
    config: Path | None = None,
) -> Replayed:
    """Replay ``session`` by running ``cmd`` (default: the recorded command) in ``cwd`` (default:
    the current directory), and say what happened; :func:`replay_command` is this plus the words
    and exit code of ``forkpoint replay``. With ``strict``, plain HTTP that differs from the
    recording only in ids is a divergence too.

    With overrides, a live source or a policy other than ``stop``, the run is recorded as a new
    session linked to its parent (its ``end`` keeps the exit code the run had and where it
    diverged). With ``map_cwd``, absolute paths of the recorded command that lie under the
    directory it was recorded in are made relative, so that it runs in ``cwd`` (another checkout)
    as it ran there (:func:`map_command`). With ``outcome``, its command runs in ``cwd`` once the
    program ended (:func:`forkpoint.outcome.measure`), and its event goes into the what-if session
    before the end. ``capture`` implies capturing stdout (an outcome command reads it). The report
    carries the program's exit code and the verdict (:func:`~forkpoint.replay.report.conclude`).
    With ``timeout`` (seconds), a program still running then is stopped (:func:`run_child`'s
    ``watch``) and :attr:`Replayed.stopped` says so; its outcome is measured all the same (a fork's
    run's once it went live: :attr:`Replayed.stopped_short`). A run
    in a local executor's task while forkpoint was sent SIGINT, SIGTERM or SIGHUP was cut short
    (:func:`forkpoint.executors.local.interrupted`): ``stopped`` says so, and no outcome is measured
    (one being measured then is stopped with it, and not kept). ``config``: the configuration file
    the program runs under (``$FORKPOINT_CONFIG``) instead of the one found from ``cwd`` up.

    The recorded command runs only when the session is signed by a key this user trusts
    (:mod:`forkpoint.signing`; the own key is), or with ``trust``; a ``cmd`` given is run as it is.
    Unless ``quiet``, a signature that does not verify, or a signer this user does not trust, is
    said when the command runs all the same.
    Without live calls the program runs in a network namespace with only loopback where the kernel
    allows it (:mod:`forkpoint.netns`; said once where it does not), and what it tried to reach is
    in the report's ``network_blocked``, its ``sandbox`` saying what kept it offline.
    Raises :class:`~forkpoint.errors.OverrideError` for an override that does not fit the session,
    :class:`~forkpoint.errors.UsageError` when there is no command to run,
    :class:`~forkpoint.errors.ConfigError` for a bad rule in the configuration,
    :class:`~forkpoint.errors.SessionError` for a session that fails verification (with ``check``),
    and :class:`~forkpoint.errors.UntrustedSession` for a recorded command of a session no trusted
    key signed (without ``trust``).
    """
    from . import netns
    from .replay.report import blocked_fields, blocked_text, conclude, merge_reports, network_attempts

    started = time.perf_counter()
    origin = session.header.get("imported_from")
    if not cmd and origin:
        raise UsageError(
            f"session {session.id} was imported from a {origin.get('format')} file ({origin.get('path')}): "
            f"it has no agent command to run again. Give the command that runs your agent after --, e.g. "
            f"forkpoint replay {session.path} -- python agent.py"
        )
    command = list(cmd or session.header.get("argv") or [])
    if not command:
        raise UsageError("the session has no recorded command; give one after --")
    here = (cwd or Path.cwd()).resolve()
    if not cmd:
        if map_cwd:
            command = map_command(command, session.header.get("cwd"), here, absolute=True)
        command = _runnable(command)
    check_config(cwd)
    if check:
        from .checkpoint.verify import verify_session

        # (its values are read where it replays: a process whose replay cannot start does not run)
        v = verify_session(session.path, git=False, values=False)
        if v.problems:
            raise SessionError(
                f"session {session.id} fails verification, so it may not be what was recorded: "
                f"{v.problems[0]} (see: forkpoint verify {session.path}; replay it anyway with --no-verify)"
            )
    if not cmd and not trust:
        from .signing import require_trusted

        require_trusted(session.path, session.id, command)
    doubted: list[str] = []

    def doubt_signature() -> None:
        """The user's command, or --trust: it runs, served what the signer may not have recorded.
        (Checked while the program starts: the check loads cryptography and hashes the whole log.)"""
        if (cmd or trust) and not quiet:
            from .signing import doubt

            doubted.extend(filter(None, [doubt(session.path, session.id)]))

    specs = list(overrides or [])
    check_overrides(session, specs, models=models_source, tools=tools_source, live_from=live_from)
    if not cmd:
        from .record import refuse_self_recording

        refuse_self_recording(
            session.header, session.id, f"forkpoint replay {session.path} -- python agent.py"
        )
    all_tools = list(dict.fromkeys([*(session.header.get("tools") or []), *(tools or [])]))
    what_if = bool(specs) or "live" in (models_source, tools_source) or on_divergence != "stop" or live_from
    child = None
    if what_if:
        from .replay.whatif import create_child

        into = _children_store(session)
        child = create_child(
            session,
            argv=command,
            models=models_source,
            tools=tools_source,
            on_divergence=on_divergence,
            overrides=specs,
            seq=live_from,
            name=child_name,
            experiment=experiment,
            into=into,
            cwd=here,
            zone=session.header.get("timezone"),  # (its program runs in it: below)
            hash_seed=recorded_seed(session.header),
        )
        child.quiet = quiet
        if into is not None and not quiet:
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
    capture = capture or outcome is not None
    # Nothing live: the kernel keeps the whole process tree offline where it can.
    live = "live" in (models_source, tools_source) or on_divergence == "live" or live_from is not None
    refused = netns.refused() if not live else None
    if refused is not None:
        _fallback_said(refused)
    sandbox = "none (live calls)" if live else ("python guard" if refused else "network namespace")
    # (ignoring what cannot be removed: a process said to outlive the program may write to it as it goes)
    with tempfile.TemporaryDirectory(prefix="forkpoint-replay-", ignore_cleanup_errors=True) as tmp:
        env = child_env("replay", session.path, tools=all_tools, report=Path(tmp), replay_options=options)
        if config is not None:
            env["FORKPOINT_CONFIG"] = str(config)
        zone = session.header.get("timezone")
        if isinstance(zone, str) and zone:  # (its local time is the recording's: the clock it reads too)
            if os.environ.get("TZ") not in (None, zone) and not quiet:
                say(
                    f"forkpoint: the program runs in the recording's time zone, {zone} (not TZ={os.environ['TZ']})"
                )
            env["TZ"] = zone
        seed = recorded_seed(session.header)
        if seed is not None:  # (its sets of strings iterate as they did)
            if os.environ.get("PYTHONHASHSEED") not in (None, str(seed)) and not quiet:
                say(
                    f"forkpoint: the program runs with the recording's PYTHONHASHSEED, {seed} "
                    f"(not {os.environ['PYTHONHASHSEED']})"
                )
            env["PYTHONHASHSEED"] = str(seed)
        if sandbox == "network namespace":
            env[netns.HOST_NETNS_VAR] = netns.current() or ""
        run, namespace = (
            netns.confine(command, Path(tmp)) if sandbox == "network namespace" else (command, None)
        )
        watch = _Watch(_Stuck(Path(tmp)) if on_divergence == "stop" else None, timeout)
        try:
            ran = run_child(
                run,
                env,
                capture=capture,
                capture_stderr=capture_stderr,
                cwd=cwd,
                namespace=namespace,
                meanwhile=doubt_signature,
                watch=watch,
                tree=Path(tmp),
            )
            code, out, err = ran.code, ran.out, ran.err
            for warning in doubted:
                say(f"forkpoint: WARNING: {warning}")
            running = _wait_for_outliving(Path(tmp))
        finally:
            seen = namespace.finished() if namespace is not None else netns.Seen([], [], 0)
        # One report per replaying process (a recorded shell script may run several programs).
        reports = [read_json_text(p.read_bytes()) for p in named(Path(tmp), "report-", ".json")]
        reports.sort(key=lambda r: r.get("process_started") or 0)
        not_started = sorted(p.read_text(errors="replace") for p in named(Path(tmp), NOT_STARTED_PREFIX))
        not_started += [
            f"process {pid} became `{command}` through exec, which did not start forkpoint's replay{UNSTARTED}: "
            "it ran unreplayed"
            for pid, command in unstarted_execs(Path(tmp), "report-", NOT_STARTED_PREFIX, UNREPORTED_PREFIX)
        ]
        unreported = _unreported(Path(tmp))
        if lost := running.said("its report is not in the verdict"):
            unreported.append(lost)
            if child is not None:  # (what it does from now is refused there: it has ended)
                child.incomplete = child.incomplete or running.said(UNRECORDED)
        replaying, went_live = (any(named(Path(tmp), mark)) for mark in (REPLAYING_PREFIX, LIVE_PREFIX))
        try:  # (or the launcher's why: netns)
            why_unrun = ran.unrun or (Path(tmp) / netns.UNRUN).read_text(errors="replace")
        except FileNotFoundError:
            why_unrun = None
        # (a program that was not run reproduced nothing, whatever the other processes reported; nor
        # is a verdict known without the report of each process that ran)
        report = merge_reports(reports) if reports and not not_started and not unreported else None
        seen = seen.plus(netns.results(Path(tmp)))
    interrupted = _interrupted(watch, "the program")  # (the run was cut short)
    if report is not None:
        report["exit_code"] = code
        # What the kernel stopped (subprocesses, other programs) beside what the guard refused.
        report.update(blocked_fields(network_attempts(report) + Counter(seen.blocked)))
        # (not a verdict: the program's own local servers refuse too; said, as why it may have differed)
        report["loopback_refused"] = list(dict.fromkeys(seen.refused))
        report["sandbox"] = sandbox
        if seen.unseen:
            report["sandbox"] += f" ({plural(seen.unseen, 'packet')} dropped before it was looked at)"
        conclude(report)
    measured = None
    unwritten: list[str] = []  # (what of its session a full disk kept out: Replayed.unwritten)
    # (what an interrupted run left measures nothing, nor a run that stopped at a divergence, nor a
    # fork's run that ended before it reached its checkpoint, or made no call from there with no
    # override to have ended it: none of them continued from there)
    fork = live_from is not None
    diverged = report is not None and bool(report.get("divergence"))
    stopped_at_divergence = diverged and on_divergence == "stop"
    # (fifo stops a run too, at a tool call with no recorded call of that tool left to serve; a fork's
    # arm says what its prefix did past a divergence)
    fifo_stopped = not fork and diverged and bool((report or {}).get("unanswered"))
    # (recorded calls before the checkpoint left unserved: no process went live, whether it ended
    # early or drifted under fifo and ended before the prefix was used up)
    short_of = live_from is not None and report is not None and bool(report.get("unserved"))
    # (stopped by forkpoint before it wrote a report and before it went live: what it left is the
    # checkpoint's state, not its continuation's, whether its command had yet to start forkpoint,
    # was being served the calls before the checkpoint, or made no call from there)
    stopped_short = (
        _stopped_short(session, child.path, live_from, replaying)
        if live_from is not None and watch.why and not report and not went_live and child
        else None
    )
    # (none of a fork's run's processes started forkpoint's replay: `true`, a typo'd script, a replay
    # that could not start; what it left is the checkpoint's state too)
    unreplayed = (
        _unreplayed(command, ran, why_unrun, not_started)
        if live_from is not None and report is None and not replaying and not unreported
        else None
    )
    # (why what the run left says nothing of its continuation, the first that holds: not measured)
    not_measured = next(
        (
            why
            for holds, why in (
                (fork and stopped_at_divergence, "its replayed prefix diverged"),
                # (one without a checkpoint has no prefix: it was stopped where it diverged)
                (stopped_at_divergence, "forkpoint stopped the run where it diverged"),
                (
                    fifo_stopped,
                    "forkpoint stopped the run at a tool call with no recorded call of that tool left to serve",
                ),
                (short_of, "it ended before it reached its checkpoint"),
                (bool(stopped_short), f"stopped: {watch.why}, {stopped_short}"),
                (bool(unreplayed), str(unreplayed)),
                (fork and unsent_from_checkpoint(report), "its first call from its checkpoint was not sent"),
                (fork and idle_from_checkpoint(report), "it made no call from its checkpoint on"),
                (interrupted, f"stopped: {watch.why}"),
            )
            if holds
        ),
        None,
    )
    if outcome is not None and not_measured is None:
        from .outcome import measure

        measured = measure(
            outcome, cwd=here, session=child.path if child else session.path, output=out, exit_code=code
        )
        if live_from is None and report is not None:
            # (a fork's served calls come before its checkpoint, whose files were restored)
            tool_seqs = {e["seq"] for e in session.by_type("tool_call")}
            if served := sum(1 for seq in report.get("served") or [] if seq in tool_seqs):
                measured["served_tools"] = served
        if _interrupted(watch, "the outcome command"):  # (it was stopped: it measured nothing)
            measured = None
            not_measured = f"stopped: {watch.why}"
        elif child is not None:
            try:
                child.writer.append(dict(measured))
            except (OSError, SessionError) as exc:  # (a full disk: what reads the session finds no outcome)
                passed = measured.get("passed")
                verdict = "" if passed is None else " (pass)" if passed else " (fail)"
                not_measured = (
                    f"its outcome{verdict} could not be written to its session {child.session_id} ({exc})"
                )
                unwritten.append(not_measured)
                measured = None
    if child is not None:
        from .record import read_back, tally_into
        from .replay.whatif import end_divergence

        if outcome is not None and not_measured is not None:
            try:
                _note_not_measured(child, not_measured, outcome.command)
            except (OSError, SessionError) as exc:
                unwritten.append(f"why it measured nothing could not be written to its session ({exc})")
        tally_into(child, read_back(child.path)[0])  # (calls no single recorder tallied)
        child.end(
            code,
            uncaught=list(report.get("uncaught") or []) if report is not None else None,
            divergence=end_divergence(report, child.path) if report is not None else None,
        )
        if child.unended is not None:  # (said by the recording as a warning: here for the run's words)
            unwritten.append(f"its end could not be written ({child.unended}): it stays incomplete")
        child.close(quiet=quiet)
        if unwritten and not quiet:
            say(f"forkpoint: WARNING: session {child.session_id}: {'; '.join(unwritten)}")
    not_stored = _not_stored(child) if child is not None else None
    # The recorded command's relative paths meant what they meant where it was recorded. Not run
    # there on purpose (that may be another checkout); said when the run went wrong.
    recorded_cwd = session.header.get("cwd")
    moved = not cmd and recorded_cwd and Path(recorded_cwd).resolve() != here
    hint = (
        f" (the session was recorded in {recorded_cwd}, this replay ran in {here}: "
        + (
            "its command ran here as it ran there, a relative path in it naming what is here"
            if map_cwd
            else "replay from there, or give the command after --"
        )
        + ")"
        if moved
        else ""
    )
    problem = None
    if not_started:
        problem = "forkpoint: " + "; ".join(not_started)
    elif unreported:
        problem = "forkpoint: " + "; ".join(unreported) + ": the replay's verdict is unknown"
    elif report is None and why_unrun:  # (said already, or in err: no process ran, so none reported)
        problem = f"forkpoint: nothing was replayed: the command {command[0]} {why_unrun}{hint}"
    elif report is None:
        tried = (
            f" (the kernel blocked: {blocked_text({'network_blocked': seen.blocked})})"
            if seen.blocked
            else ""
        )
        problem = (
            "forkpoint: the replayed process wrote no report: it did not start forkpoint (is forkpoint "
            f"installed in its environment?), or it was killed, or it left through os._exit{hint}{tried}"
        )
    elif moved and (code != 0 or not report.get("matched")):
        problem = f"forkpoint: note{hint}"
    return Replayed(
        report=report,
        exit_code=code,
        out=out,
        err=err,
        child=child.path if child else None,
        outcome=dict(measured) if measured is not None else None,
        problem=problem,
        seconds=time.perf_counter() - started,
        not_started=not_started,
        stopped=watch.why,
        stopped_short=stopped_short,
        unreplayed=unreplayed,
        not_stored=not_stored,
        not_measured=not_measured if outcome is not None else None,
        unwritten="; ".join(unwritten) or None,
    )


def _children_store(session: Session) -> Path | None:
    """Where ``session``'s what-if runs are recorded: beside it when it is in a store (None; a remote
    one: its mirror, uploaded when the run ends); a session that is not (a pytest cassette, a copy
    kept with the tests) gets them in the default store, not among its files."""
    from .store import is_store, store_dir

    return None if is_store(session.path.parent) else store_dir(None)


def _note_not_measured(
    child: Recording, why: str, command: str | None, left: list[str] | None = None
) -> None:
    """Keep in a run's session why its outcome ``command`` measured nothing: the parent's page draws
    an arm that measured nothing, and why (:func:`forkpoint.outcome.arms_of`); ``left``: the sessions
    of a lost arm its worker had written (:func:`_left_by_lost_task`). A lost arm given no outcome
    command (``command`` None) keeps the note all the same: it says what happened to the arm, and
    names those sessions."""
    from .outcome import LEFT_BY_LOST_TASK, NOT_MEASURED

    data: dict[str, Any] = {NOT_MEASURED: why, "command": command}
    if left:
        data[LEFT_BY_LOST_TASK] = left
    text = why if command is None else f"outcome not measured: {why}"
    child.writer.append({"type": "note", "text": text, "data": data})


def _not_stored(child: Recording) -> str | None:
    """Why the closed what-if session ``child`` is not in its parent's store, and where it is, or None."""
    if not child.not_stored:
        return None
    return (
        f"{child.not_stored}; it stays staged in {child.path} on {_hostname()} (`forkpoint ls "
        f"--store {child.store.url}` there uploads it)"
    )


def _unreplayed(command: list[str], ran: Ran, why_unrun: str | None, not_started: list[str]) -> str:
    """What happened to a run none of whose processes started forkpoint's replay, in words: why its
    command could not run, the signal that killed it, why a process's replay could not start, or
    that it never started forkpoint's replay (a program that is not the recorded agent, or one
    without forkpoint in its environment)."""
    if why_unrun:
        return f"its command {command[0]} {why_unrun}"
    if ran.killed_by:
        return (
            f"its command was killed by {ran.killed_by} (exit code {ran.code}) before forkpoint's replay "
            "started in it"
        )
    return "; ".join(not_started) or f"its command (exit code {ran.code}) {NEVER_STARTED}"


#: How :func:`_unreplayed` ends for a command that ran and never started forkpoint.
NEVER_STARTED = "never started forkpoint's replay"


#: How long the CLI waits, once the program ended, for the processes that outlive it (a forkserver
#: leaving, a daemon) to end and write their endings or reports (:func:`forkpoint._boot.outlived`).
OUTLIVED_GRACE = 5.0


#: What is lost of a process still running when its recording's session ends (:meth:`Outliving.said`).
UNRECORDED = "what it does from now is not in the session"


class Outliving(NamedTuple):
    """The processes that started forkpoint and still ran once the CLI stopped waiting for them
    (:func:`_wait_for_outliving`): their pids, and when, in words."""

    pids: list[str]
    when: str

    def said(self, lost: str) -> str:
        """Them, in words, with what is ``lost``; "" for none."""
        if not self.pids:
            return ""
        them = (
            f"process {self.pids[0]} (or a process forked from it)"
            if len(self.pids) == 1
            else f"processes {', '.join(self.pids)} (or processes forked from them)"
        )
        return f"{them} still ran {self.when}: {lost}"


def _wait_for_outliving(folder: Path) -> Outliving:
    """Wait up to :data:`OUTLIVED_GRACE` seconds for the processes of ``folder`` that outlive the
    program (:func:`forkpoint._boot.outlived`). Ctrl-C, SIGTERM or SIGHUP meanwhile ends the wait
    at once, not forkpoint: the session is still ended, the verdict still given, and what still
    runs is named as when it runs on past the wait (those processes are not signalled: a pid named
    may have left a forked child holding its lock, and been reused since)."""
    sent: list[int] = []
    began = time.monotonic()

    def stop(signum: int, _frame: object) -> None:
        sent.append(signum)

    with _handling(dict.fromkeys((signal.SIGINT, signal.SIGTERM, signal.SIGHUP), stop)):
        pids = outlived(folder, OUTLIVED_GRACE, stop=lambda: bool(sent))
    if not sent:
        return Outliving(pids, f"{OUTLIVED_GRACE:g} s after the program ended")
    waited = time.monotonic() - began
    name = SIGNALS.get(sent[0], f"signal {sent[0]}")
    return Outliving(pids, f"when forkpoint was sent {name}, {waited:.1f} s after the program ended")


def _unreported(folder: Path) -> list[str]:
    """Each replayed process that could not write its report (``unreported-<pid>.<errno>`` in
    ``folder``, by :mod:`forkpoint._boot`), and why, in words."""
    return [
        f"process {pid} ran, replayed, but could not write its report ({why})"
        for pid, why in unwritten(folder)
    ]


def _stopped_short(session: Session, child: Path, live_from: int, replaying: bool) -> str:
    """How far a fork's run recorded in ``child``, stopped before it went live from checkpoint
    ``live_from``, got: forkpoint's replay had not started in it (no process marked that it was
    ``replaying``), the recorded calls before the checkpoint it was never served
    (:func:`~forkpoint.replay.replayer.unreached_prefix`; none said when its session cannot be
    read), or it made no call from the checkpoint."""
    from .replay.replayer import unreached_prefix

    if not replaying:
        return f"before it reached checkpoint seq {live_from}: forkpoint's replay had not started in it"
    try:
        unreached = unreached_prefix(session, live_from, Session.load(child, derived=False).events)
    except SessionError:
        unreached = []
    if not unreached:
        return f"before it made a call from checkpoint seq {live_from}"
    return (
        f"before it reached checkpoint seq {live_from}: {plural(len(unreached), 'recorded call')} before it "
        f"(seq {', '.join(map(str, unreached[:5]))}{' …' if len(unreached) > 5 else ''}) never served"
    )


_fallback_lock = threading.Lock()
_fallback_told: list[str] = []


def check_overrides(
    session: Session,
    specs: list[str],
    *,
    models: str = "replay",
    tools: str = "replay",
    live_from: int | None = None,
    losses: bool = False,
) -> None:
    """Refuse, before anything runs, overrides that name no recorded call, and those that name a
    call the run makes live (``--models live``, ``--tools live``, or past ``live_from``: a fork's
    checkpoint) or one made inside a recorded tool call (a framework's tool that runs an agent),
    where an override would never apply. Raises :class:`UsageError` (an
    :class:`~forkpoint.override.OverrideError` for a target that does not exist). ``losses``: say
    what each drops that the model's API needs back (:func:`~forkpoint.override.losses`), for the
    arms of a fork or sweep, which send that request live and print no replay report."""
    if not specs:
        return
    from . import override

    calls = session.calls()
    try:
        resolved = override.resolve([override.parse(spec) for spec in specs], calls)
    except OverrideError as exc:
        # (which session: `last` may be a what-if or a fork's arm recorded since, not the one meant)
        parent = (session.header.get("parent") or {}).get("session_id")
        what = f", a what-if of {parent}" if parent else ""
        raise OverrideError(f"{exc} (session {session.id}{what})") from None
    override.refuse_unreached(resolved, calls, models=models, tools=tools, live_from=live_from)
    for line in override.untyped(resolved, calls):
        say(line)
    if losses:
        by_seq = {e["seq"]: e for e in calls}
        for seq, o in resolved.items():
            for lost in override.losses(by_seq[seq], o):
                say(f"forkpoint: override {o.spec} → event seq {seq}: {lost}")


def _fallback_said(reason: str) -> None:
    """Say once per process that replays run without the kernel's network namespace, and why."""
    with _fallback_lock:
        if _fallback_told:
            return
        _fallback_told.append(reason)
    say(
        f"forkpoint: replays here run without a network namespace ({reason}): the Python guard keeps the "
        "replayed Python process offline, but not the programs it starts (curl, os.system, another Python)"
    )


def replay_command(
    session: Session,
    cmd: list[str] | None = None,
    *,
    on_divergence: str = "stop",
    overrides: list[str] | None = None,
    quiet: bool = False,
    accept_drift: bool = False,
    **options: Any,
) -> tuple[dict[str, Any] | None, int, str | None]:
    """Replay ``session`` as ``forkpoint replay`` does: :func:`replay_run` (whose options it takes),
    then the summary and the divergence report on stderr unless ``quiet``.

    Returns (report, or None if the process wrote none; exit code as ``forkpoint replay`` exits:
    the command's own when the run reproduced the recording — or, for a what-if run, when it went
    live, took the way out an override offered, or drifted under ``fifo`` with ``accept_drift`` —,
    else :data:`~forkpoint.replay.EXIT_DIVERGENCE`; the command's stdout if ``capture``). Raises
    what :func:`replay_run` raises.
    """
    from .replay import EXIT_DIVERGENCE, ended_by_override, format_divergence, summary_line

    run = replay_run(session, cmd, on_divergence=on_divergence, overrides=overrides, quiet=quiet, **options)
    report, code, out = run.report, run.exit_code, run.out.text() if run.out is not None else None
    if report is None:
        say(run.problem or "")
        return None, code if code and not run.not_started else 1, out
    if run.problem and not quiet:
        say(run.problem)
    specs = list(overrides or [])
    if not quiet:
        say(summary_line(report))
        for o in report.get("overrides") or []:
            state = (
                "applied"
                if o["applied"]
                else f"refused: {o['refused']}"
                if o.get("refused")
                else "never reached (the run went another way first)"
            )
            say(f"  override {o['spec']} → event seq {o['seq']}: {state}")
            for lost in o.get("losses") or [] if o["applied"] else []:
                say(f"    but {lost}")
    unrecorded = "" if quiet else _unrecorded_run(session, report, options.get("tools_source", "replay"))
    if unrecorded and not report.get("divergence"):
        say(unrecorded)
    from .replay import unrecorded_tools

    if (fewer := unrecorded_tools(report, "fewer_calls")) and not quiet and not report.get("divergence"):
        names = ", ".join(f"{n} ({plural(k, 'call')})" for n, k in fewer.items())
        say(
            f"forkpoint: WARNING: the model asked for tools more often than the recording has calls of: {names}; "
            "if another function of the program answers to that name, it ran for real in this replay"
        )
    if report.get("divergence"):
        if not quiet:
            say(format_divergence(report["divergence"]))
            for d in (report.get("drift") or [])[1:]:
                say(
                    f"  drift at {divergence_call(d)}: served recorded seq "
                    f"{d['served_seq']} ({len(d['diff'])} difference(s))"
                )
            unanswered = report.get("unanswered") or []
            if on_divergence == "fifo" and unanswered and "served_seq" in report["divergence"]:
                # The divergence above was served (fifo); the run stopped at a later call, which
                # got no answer: name that one, or the report points at a call that was answered.
                say(
                    "fifo served that call and went on; it stopped at a later call, for which no recorded "
                    "call of that endpoint or tool was left to serve:"
                )
                say(format_divergence(unanswered[0]))
        if unrecorded:  # (after the divergence's differences, not between them and the verdict)
            say(unrecorded)
        # Going live after a divergence is the what-if the user asked for; serving recorded answers
        # to other requests (fifo) is not a reproduction, unless the user said to accept that.
        asked = on_divergence == "live" or (on_divergence == "fifo" and accept_drift)
        # fifo with a call it had nothing left to serve (answered with the divergence) did not go on;
        # nor did a run whose way on was refused (a live call with the placeholder API key).
        if (
            not asked
            or report.get("network_blocked")
            or (on_divergence == "fifo" and (not report.get("drift") or report.get("unanswered")))
        ):
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
        and (applied := [o["seq"] for o in report.get("overrides") or [] if o["applied"]])
    ):
        # Said only where a call came after the last override: past the run's last call, nothing
        # shows whether the path changed.
        if any(seq > max(applied) for seq in report.get("served") or ()):
            say("the override(s) did not change the agent's path: every later call matched the recording")
        else:
            say(
                f"no call came after the override of event seq {max(applied)} (the run's last call): "
                "nothing later shows whether it changed the agent's path"
            )
    return report, code, out


def _unrecorded_run(session: Session, report: dict[str, Any], tools_source: str) -> str:
    """The warning that tools the recording has no calls of ran for real in this replay, naming
    those the model asked for in the recorded calls this replay was served; ``""`` for none, with
    tools live, or when an override changed what the model asked for (the recording's asks then say
    nothing of this run)."""
    from .replay import unrecorded_tools

    missing = unrecorded_tools(report)
    if not missing or tools_source == "live":
        return ""
    if not session.events:  # (``forkpoint replay`` hands on its header only: its asks are read now)
        try:
            session = Session.load(session.path, share_lists=True)
        except SessionError:  # (the replaying process could read it: say every recorded ask)
            names = ", ".join(f"{n} ({plural(k, 'call')})" for n, k in missing.items())
            return _UNRECORDED_RAN.format(names=names)
    served = set(report.get("served") or ())
    from .replay.replayer import unrecorded_asks

    asked = Counter(name for seq, name in unrecorded_asks(session) if seq in served)
    if not asked:
        return ""
    return _UNRECORDED_RAN.format(names=", ".join(f"{n} ({plural(k, 'call')})" for n, k in asked.items()))


_UNRECORDED_RAN = (
    "forkpoint: WARNING: the model asked for tools the recording has no calls of: {names}; if the "
    "program ran them, they ran for real in this replay, as they did when recorded"
)


def _expected_to_differ(report: dict[str, Any]) -> bool:
    """True for a what-if run whose only difference is how the program ended: an override took
    effect or a kind of call was live, so another ending is the experiment's answer, not a failed
    reproduction (the report still says it did not end as recorded)."""
    sources = report.get("sources") or {}
    what_if = any(o.get("applied") for o in report.get("overrides") or []) or "live" in sources.values()
    return what_if and not report.get("unserved") and not report.get("network_blocked")


def map_command(
    argv: list[str], recorded_cwd: str | None, here: Path, *, absolute: bool = False
) -> list[str]:
    """``argv`` as it runs in ``here`` when it was recorded in ``recorded_cwd``: each argument that
    is an absolute path under ``recorded_cwd`` (or ``--option=PATH`` with such a path) becomes
    relative to it, so it names the same file of this checkout (``absolute``: the same path under
    ``here``, which a replay matches as the recorded one where the program sends it on:
    :func:`~forkpoint.match.relocated`). Other arguments are kept."""
    if not recorded_cwd:
        return list(argv)
    base = Path(recorded_cwd)
    if base == here:
        return list(argv)

    def mapped(arg: str) -> str:
        if not arg.startswith("/"):
            return arg
        p = Path(arg)
        if not p.is_relative_to(base):
            return arg
        if absolute:
            return str(here / p.relative_to(base)) if p != base else str(here)
        return str(p.relative_to(base)) if p != base else "."

    out = []
    for arg in argv:
        name, sep, value = arg.partition("=")
        out.append(name + sep + mapped(value) if sep and name.startswith("-") else mapped(arg))
    return out


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


def session_ref(session: Session) -> dict[str, str | None]:
    """How a task on another process or machine finds ``session`` (:func:`load_ref`): its directory,
    and for a session of a remote store, the store's URL and the session's id (the task downloads
    it into its own mirror)."""
    from .store import is_store, is_url, open_store

    path = session.path.resolve()
    store = None
    if is_store(path.parent):
        found = open_store(path.parent)
        store = found.url if is_url(found.url) else None
    return {"path": str(path), "store": store, "id": session.id}


def load_ref(ref: dict[str, Any]) -> Session:
    """The session a :func:`session_ref` names, downloaded from its remote store when it has one.
    Raises :class:`~forkpoint.errors.SessionError`."""
    from .store import resolve

    if ref.get("store"):
        return Session.load(resolve(str(ref["id"]), str(ref["store"])), share_lists=True)
    return Session.load(Path(str(ref["path"])), share_lists=True)


#: What happened to a lost arm's task that said nothing of it (:attr:`Arm.not_run_or_lost`).
NO_RESULT = "the task running it ended without a result or an error"


@dataclass
class Arm:
    """One arm of a fork: where it was restored, whether the checkpoint validated there, and how its
    continuation went (``report`` and ``exit_code`` of its replay, the ``outcome`` measured after it,
    the arm's ``session``; ``error`` when it could not be restored or run, with ``lost`` when the task
    running it failed (forkpoint's own exception, a worker that died), so how far it got is unknown;
    ``problem`` when it ran but its run says less than it should: no report, or no log of what it
    printed; ``diverged``, why it never went live: its replayed prefix diverged and it stopped
    there, or it ended before it reached its checkpoint, or made no call from there on, or its
    command never started forkpoint's replay; nothing of the continuation to measure;
    ``not_stored``, why its session is not in the parent's store: measured, but its upload failed,
    and the session is only where it ran)."""

    index: int
    directory: Path
    seq: int = 0
    checks: list[Check] = field(default_factory=list)
    error: str | None = None
    report: dict[str, Any] | None = None
    exit_code: int | None = None
    outcome: dict[str, Any] | None = None
    session: str | None = None
    seconds: float = 0.0
    problem: str | None = None
    lost: bool = False
    diverged: str | None = None
    not_stored: str | None = None

    def add_problem(self, problem: str | None) -> None:
        """Add ``problem`` (None: nothing) to what :attr:`problem` says."""
        if problem is not None:
            self.problem = problem if self.problem is None else f"{self.problem}; {problem}"

    @property
    def valid(self) -> bool:
        """Restored, and every check of the checkpoint passed: only then does the arm run (a lost arm's
        task said nothing of either, error or not)."""
        return not self.lost and self.error is None and all(c.ok for c in self.checks)

    @property
    def passed(self) -> bool | None:
        """The arm's outcome: True (pass), False (fail), None (not run, no outcome command, or one
        that could not run)."""
        passed = self.outcome.get("passed") if self.outcome is not None else None
        return bool(passed) if passed is not None else None

    @property
    def unrun(self) -> str | None:
        """What kept its program from running: ``restore failed``, ``validation failed``, or ``its run
        could not start`` (every check passed, and forkpoint refused the run: a bad configuration
        found from its folder up); None when it ran, or its task was lost (how far it got is unknown)."""
        if self.valid or self.lost:
            return None
        if self.error is None:
            return "validation failed"
        return "its run could not start" if self.checks else "restore failed"

    @property
    def not_run(self) -> str | None:
        """Why it was never run, ``not run: <why>`` (:attr:`unrun`, with the error), or None."""
        unrun = self.unrun
        if unrun == "validation failed":
            return f"not run: {unrun} ({', '.join(c.name for c in self.checks if not c.ok)})"
        if unrun == "restore failed":  # (a restore's error names what failed)
            return f"not run: {self.error}"
        return f"not run: {unrun}: {self.error}" if unrun else None

    @property
    def not_run_or_lost(self) -> str | None:
        """Why it measured nothing before its program could end: :attr:`not_run`, or ``lost: <what
        happened to the task running it>``; None when its program ran and its task returned."""
        if self.lost:
            return f"lost: {self.error or NO_RESULT}"
        return self.not_run

    @property
    def unmeasured(self) -> bool:
        """Its outcome command could not run (a typo in ``--outcome``): no pass, no fail."""
        return self.outcome is not None and self.outcome.get("passed") is None

    def to_json(self) -> dict[str, Any]:
        """This arm as JSON data (what an arm task returns)."""
        return {
            "index": self.index,
            "directory": str(self.directory),
            "seq": self.seq,
            "checks": [to_json(vars(c)) for c in self.checks],
            "error": self.error,
            "report": self.report,
            "exit_code": self.exit_code,
            "outcome": self.outcome,
            "session": self.session,
            "seconds": self.seconds,
            "problem": self.problem,
            "lost": self.lost,
            "diverged": self.diverged,
            "not_stored": self.not_stored,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Arm:
        """The arm :meth:`to_json` describes."""
        from .checkpoint import Check

        return cls(
            index=int(data["index"]),
            directory=Path(data["directory"]),
            seq=int(data.get("seq") or 0),
            checks=[Check(**c) for c in data.get("checks") or []],
            error=data.get("error"),
            report=data.get("report"),
            exit_code=data.get("exit_code"),
            outcome=data.get("outcome"),
            session=data.get("session"),
            seconds=float(data.get("seconds") or 0.0),
            problem=data.get("problem"),
            lost=bool(data.get("lost")),
            diverged=data.get("diverged"),
            not_stored=data.get("not_stored"),
        )


def arm_task(spec: dict[str, Any]) -> dict[str, Any]:
    """One fork arm, as an executor task (JSON in, JSON out; see :func:`fork_arms`): restore the
    checkpoint into the arm's directory, validate it without a model, and only when every check
    passed, continue it live there and measure its outcome. The arm's session goes to the parent's
    store; what the agent printed goes to ``arm-N.log`` beside the arm's directory."""
    from .checkpoint import restore, validate
    from .outcome import Outcome

    started = time.perf_counter()
    directory = Path(spec["directory"])
    arm = Arm(int(spec["index"]), directory, seq=int(spec["seq"]))
    session = None
    try:
        session = load_ref(spec["session"])
        restore(session, arm.seq, directory, repo=Path(spec["repo"]) if spec.get("repo") else None)
        arm.checks = validate(directory)
    except ForkpointError as exc:
        arm.error = str(exc)
    if session is not None and arm.valid:
        outcome = Outcome(**spec["outcome"]) if spec.get("outcome") else None
        try:
            run = replay_run(
                session,
                list(spec["cmd"]),
                on_divergence=spec.get("on_divergence", "stop"),
                overrides=list(spec.get("overrides") or []),
                live_from=arm.seq,
                cwd=(cwd := _where_it_ran(session, arm.seq, directory)),
                config=_arm_config(spec.get("config"), cwd),
                child_name=spec.get("name"),
                experiment=spec.get("experiment"),
                quiet=True,
                capture=True,
                capture_stderr=True,
                outcome=outcome,
                timeout=spec.get("timeout"),
            )
        except ForkpointError as exc:
            arm.error = str(exc)
        else:
            log = directory.with_name(directory.name + ".log")
            try:  # (new, owner-only, never through a symlink: fork_arms refused a folder holding one)
                fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as f:
                    for printed in (run.out, run.err):
                        if printed is not None:
                            printed.copy_to(f)
            except OSError as exc:
                arm.problem = f"what the agent printed could not be written to {log}: {exc}"
            arm.report, arm.exit_code, arm.outcome = run.report, run.exit_code, run.outcome
            arm.session = str(run.child) if run.child else None
            arm.not_stored = run.not_stored
            divergence = (run.report or {}).get("divergence")
            if divergence and spec.get("on_divergence", "stop") == "stop":  # (no outcome was measured)
                arm.diverged = "its replayed prefix diverged"
                # Tools the recording has no calls of, asked for before the checkpoint, ran again on
                # the restored files (a shell agent's commands): the likely cause, not a varying field.
                from .replay.replayer import unrecorded_asks

                rerun = sorted({name for asked, name in unrecorded_asks(session) if asked < arm.seq})
                # An override served before the checkpoint changes what the agent asks next by design:
                # no ignore rule makes the recording answer that.
                applied = [
                    str(o.get("spec")) for o in (run.report or {}).get("overrides") or [] if o.get("applied")
                ]
                if rerun:
                    why = (
                        f"the model asked for {', '.join(rerun)} before the checkpoint, of which the recording has "
                        "no calls: the arm's program ran them again on the restored files; record them as tools "
                        "(--tool MODULE:QUALNAME=NAME)"
                    )
                elif applied:
                    why = (
                        f"the override {', '.join(applied)}, served before the checkpoint, changed what the agent "
                        "asked next, which the recording cannot answer; --on-divergence live goes live there, on "
                        "the checkpoint's files"
                    )
                else:
                    why = (
                        "forkpoint replay of the session says why; an ignore rule goes in the forkpoint.toml of "
                        "the directory fork runs in, or of the arm's repository"
                    )
                arm.problem = (
                    f"its replayed prefix diverged at the {''.join(divergence_place(divergence))} "
                    f"({divergence.get('reason') or 'diverged'}): it never went live ({why})"
                )
            elif (run.report or {}).get("unserved"):  # (no outcome was measured either: replay_run)
                from .replay import ended_by_override

                unserved = list((run.report or {}).get("unserved") or [])
                drifted = " (its prefix drifted: fifo)" if divergence else ""
                # (the agent took the way out an override before the checkpoint offered: no wrong command)
                why = (
                    "the override it was given before the checkpoint ended it there."
                    if ended_by_override(run.report or {})
                    else "does the command run the recorded agent as it was recorded?"
                )
                arm.diverged = "ended before its checkpoint"
                arm.problem = (
                    f"it ended (exit code {run.exit_code}){drifted} before it reached checkpoint seq {arm.seq}: "
                    f"{plural(len(unserved), 'recorded call')} before it (seq {', '.join(map(str, unserved[:5]))}"
                    f"{' …' if len(unserved) > 5 else ''}) never asked for, so it never went live ({why}"
                    # (where the why is: "can't open file", an ImportError; the table named no log)
                    + (f" What it printed: {log})" if log.is_file() else ")")
                )
            elif run.stopped_short:  # (stopped before it went live: no outcome was measured, replay_run)
                arm.diverged = "stopped before it went live"
                arm.problem = (
                    f"stopped: {run.stopped}, {run.stopped_short}, so it never went live (not measured)"
                )
            elif run.unreplayed:  # (no outcome was measured: replay_run)
                arm.diverged = "never replayed"
                # (a command that ran and never started forkpoint: the likely causes, asked)
                ask = run.unreplayed.endswith(NEVER_STARTED)
                arm.problem = (
                    f"{run.unreplayed}, so it never went live from checkpoint seq {arm.seq} (not measured)"
                    + (
                        ": is it the recorded agent, with forkpoint installed in its environment?"
                        if ask
                        else ""
                    )
                    + (f" What it printed: {log}" if log.is_file() else "")
                )
            elif unsent_from_checkpoint(run.report):  # (no outcome was measured: replay_run)
                from .replay.report import blocked_text

                arm.diverged = "not sent from its checkpoint"
                arm.problem = (
                    f"its first call from checkpoint seq {arm.seq} was not sent ({blocked_text(run.report or {})}), "
                    "so it never went live: a checkpoint keeps files scrubbed, so give the agent its secrets "
                    f"again (docs/security.md). What it printed: {log}"
                )
            elif idle_from_checkpoint(run.report):  # (no outcome was measured: replay_run)
                served = int((run.report or {}).get("matched") or 0)
                after = (
                    f", once the {plural(served, 'recorded call')} before it were served" if served else ""
                )
                arm.diverged = "no call from its checkpoint"
                arm.problem = (
                    (f"stopped: {run.stopped}; " if run.stopped else "")
                    + f"the command made no call from checkpoint seq {arm.seq} on{after} (exit code "
                    + f"{run.exit_code}), so it never went live: does it run the recorded agent"
                    + (" as it was recorded?" if served else "?")
                    + (f" What it printed: {log}" if log.is_file() else "")
                )
            elif run.stopped is not None:  # (it went live: its outcome is measured on the state it left)
                arm.problem = f"stopped: {run.stopped}, after it went live from checkpoint seq {arm.seq}"
            elif run.report is None:  # (it ran, and ended as it did: its outcome is measured all the same)
                arm.problem = (run.problem or "no report").removeprefix("forkpoint: ")
            elif ended_at_checkpoint_by_override(run.report):  # (measured: the what-if's answer)
                arm.problem = (
                    f"it made no call from checkpoint seq {arm.seq} on (exit code {run.exit_code}): the override "
                    "it was given before the checkpoint ended it there"
                )
            if arm.diverged is None and divergence:  # (measured: the policy went on, as asked)
                arm.add_problem(_went_on_before(divergence, run.report or {}, arm.seq))
            arm.add_problem(_acted_outside(session, arm.seq, run.child, directory))
            arm.add_problem(run.unwritten)
    if session is not None:
        keep_not_run(arm, spec, session)
    arm.seconds = round(time.perf_counter() - started, 3)
    return arm.to_json()


def keep_not_run(arm: Arm, spec: dict[str, Any], session: Session | None = None) -> None:
    """Keep ``arm`` (of ``spec``, forked from ``session``, loaded from the spec when not given), never
    run or lost, as a session of its own that says why (:func:`_record_not_run`), when it was given an
    outcome command (its parent's page finds an arm by its session), or was lost (the session its
    worker had written, if any, is named by it alone). One that cannot be kept is said in its
    ``problem``; the fork goes on."""
    if arm.not_run_or_lost is None or not (spec.get("outcome") or arm.lost):
        return
    try:
        parent = session if session is not None else load_ref(spec["session"])
        left = _left_by_lost_task(parent, spec) if arm.lost else {}
        if left:  # (said with what happened to its task: in the fork's table, the sweep's, its session)
            arm.error = "; ".join([arm.error or NO_RESULT, *left.values()])
        why = str(arm.not_run_or_lost)
        arm.session, arm.not_stored = _record_not_run(parent, spec, why, list(left))
    except (ForkpointError, OSError) as exc:
        kept = f"its session, which would say why it measured nothing, could not be kept: {exc}"
        say(f"forkpoint: WARNING: arm {arm.index}: {kept}")
        arm.add_problem(kept)


def _left_by_lost_task(session: Session, spec: dict[str, Any]) -> dict[str, str]:
    """The sessions of the lost arm ``spec`` of ``session`` that its task had written before it was
    lost, its worker dead or its code raising (the arm's run, its outcome measured or not, its end
    written or not), by id, each said as what it is. Kept in the store: the lost arm's session names them, and the arm is counted once
    (:func:`forkpoint.outcome.arms_of`)."""
    from .outcome import arm_sessions, outcome_of

    out = {}
    for row, written in arm_sessions(session):
        h = row.header
        if (h["parent"]["seq"], h.get("name"), (h.get("replay") or {}).get("experiment")) != (
            spec["seq"],
            spec.get("name"),
            spec.get("experiment"),
        ):
            continue
        # (its worker died, or the task raised: a local executor's has no worker of its own)
        ending = (
            "ended" if written.end() is not None else "has no end event (its task ended before writing it)"
        )
        found = outcome_of(written)
        passed = None if found is None else found.get("passed")
        outcome = (
            "without an outcome"
            if found is None
            else f"with an outcome ({'unknown' if passed is None else 'pass' if passed else 'fail'}) measured "
            "before the task was lost"
        )
        out[row.session_id] = (
            f"the arm's session its task had written, {row.session_id}, {ending}, {outcome}: it is not counted"
        )
    return out


def _record_not_run(
    session: Session, spec: dict[str, Any], why: str, left: list[str]
) -> tuple[str, str | None]:
    """An arm of ``spec`` never run or lost (:func:`keep_not_run`), kept as a session of its own that
    says ``why`` as a run that measured nothing does, so that its parent's page draws it (an arm is found
    by its session); ``left``, the ids of the sessions of it a lost task's worker had written, which
    its note names (:data:`~forkpoint.outcome.LEFT_BY_LOST_TASK`). Returns its session and why it is
    not in the store, or None."""
    from .replay.whatif import create_child

    child = create_child(
        session,
        argv=list(spec["cmd"]),
        models="replay",
        tools="replay",
        on_divergence=spec.get("on_divergence", "stop"),
        overrides=list(spec.get("overrides") or []),
        seq=int(spec["seq"]),
        # (`forkpoint ls` lists the session its worker left under the arm's name too)
        name=f"{spec.get('name')} (lost)" if left else spec.get("name"),
        experiment=spec.get("experiment"),
        into=_children_store(session),
        cwd=Path(spec["directory"]),
    )
    child.quiet = True
    _note_not_measured(child, why, (spec.get("outcome") or {}).get("command"), left)
    child.end(None, reason=why, timed=False)  # (no program ran: no exit code, no wall time)
    child.close(quiet=True)
    return str(child.path), _not_stored(child)


def _acted_outside(session: Session, seq: int, child: Path | None, directory: Path) -> str | None:
    """What an arm's live tool calls did to the recorded repository, said: the answers served before
    the checkpoint name it by its absolute path (``read_file("/home/me/repo/calc.py")``), and an
    agent that goes on with such a path acts there, not on the arm's copy, which its outcome then
    measures unchanged. None when no live tool call named it."""
    from .checkpoint.restore import find

    cp = find(session, seq)
    root = (cp.get("source") or {}).get("repo") or (cp.get("workspace") or {}).get("root")
    if not isinstance(root, str) or not root.startswith("/") or child is None:
        return None
    arm = str(directory.absolute())
    under = re.compile(re.escape(root.rstrip("/")) + r'(?=[/"])')
    named: dict[str, None] = {}
    try:
        calls = Session.load(child).by_type("tool_call")
    except SessionError:  # (its session says why where it is read; this is only a remark)
        return None
    for event in calls:
        if event.get("source") == "live":
            text = orjson.dumps(event.get("args")).decode().replace(arm, "")
            if under.search(text):
                named[str(event.get("tool"))] = None
    if not named:
        return None
    return (
        f"its live tool call(s) {', '.join(named)} named the recorded repository {root}, outside the arm: "
        "whatever they did there is not in the arm its outcome measures"
    )


def _went_live(report: dict[str, Any]) -> bool:
    """Whether a run (its ``report``) made a call live: a model or tool call, plain HTTP (a provider
    forkpoint does not recognize) or MCP; telemetry and clock readings are not the agent's calls."""
    live = report.get("live_calls") or {}
    return any(live.get(kind) for kind in ("models", "tools", "http", "mcp"))


def unsent_from_checkpoint(report: dict[str, Any] | None) -> bool:
    """Whether a fork's run (its ``report``) made no call live from its checkpoint, one having been
    kept from the network: it carried a scrubbed secret's placeholder (a checkpoint keeps the files
    scrubbed, an API key in the agent's source too). It never went live: nothing to measure."""
    return bool((report or {}).get("network_blocked")) and not _went_live(report or {})


def _silent_from_checkpoint(report: dict[str, Any] | None) -> bool:
    """Whether a fork's run (its ``report``) asked for every recorded call before its checkpoint, had
    none kept from the network, and made no call from there on."""
    return (
        report is not None
        and not _went_live(report)
        and not report.get("network_blocked")
        and not report.get("unserved")
    )


def _overridden(report: dict[str, Any]) -> bool:
    """Whether an override took effect in a run (its ``report``)."""
    return any(o.get("applied") for o in report.get("overrides") or [])


def idle_from_checkpoint(report: dict[str, Any] | None) -> bool:
    """Whether a fork's run (its ``report``) made no call from its checkpoint on, with no override to
    have ended it: its command does not run the recorded agent (``python -c pass`` from a first
    checkpoint, where there is no recorded call before it to leave unasked), or runs it otherwise
    than it was recorded (it ended without the call recorded at the checkpoint). It never went
    live: nothing to measure."""
    return _silent_from_checkpoint(report) and not _overridden(report or {})


def ended_at_checkpoint_by_override(report: dict[str, Any] | None) -> bool:
    """Whether a fork's run (its ``report``) made no call from its checkpoint on after an override
    served before it took effect: the agent took the way out the override offered (a tool that
    raised), the what-if's answer. Its outcome is measured."""
    return _silent_from_checkpoint(report) and _overridden(report or {})


def _went_on_before(divergence: dict[str, Any], report: dict[str, Any], seq: int) -> str:
    """What an arm whose replayed prefix diverged did next, under ``--on-divergence live`` or
    ``fifo``: said, as its row otherwise reads like a continuation from checkpoint ``seq``."""
    where = (
        f"its replayed prefix diverged at the {''.join(divergence_place(divergence))} "
        f"({divergence.get('reason') or 'diverged'}), before checkpoint seq {seq}"
    )
    if report.get("policy") == "live":
        return (
            f"{where}: it went live there (--on-divergence live), so the calls from there on, tools "
            "included, ran on the checkpoint's restored files, not from the checkpoint"
        )
    return f"{where}: {fifo_drift_text(report)}, then it went live from the checkpoint"


def fifo_drift_text(report: dict[str, Any]) -> str:
    """What ``--on-divergence fifo`` did in a run (its ``report``): served the recorded answers to
    requests the run made otherwise (its ``drift``)."""
    return (
        f"fifo served the recorded answers to {plural(len(report.get('drift') or []), 'request')} "
        "that differed (--on-divergence fifo)"
    )


def _arm_config(config: object, cwd: Path) -> Path | None:
    """The configuration file an arm's program runs under: ``config``, the one in force where the
    fork or sweep was started (:func:`arm_specs`), unless the arm's own repository has one (from
    ``cwd`` up) or the file is not on this machine (a Ray worker elsewhere). None: the usual search."""
    from .config import find_config

    if not isinstance(config, str) or not config or find_config(cwd) is not None:
        return None
    path = Path(config)
    return path if path.is_file() else None


def _where_it_ran(session: Session, seq: int, directory: Path) -> Path:
    """Where in an arm's ``directory`` the program runs: the folder of the repository it ran in
    when checkpoint ``seq`` was taken (its ``cwd``), as it does in the recording. Raises
    :class:`CheckpointError` for a ``cwd`` that leaves the repository (a hostile session)."""
    from .checkpoint.restore import find

    rel = find(session, seq).get("cwd")
    if not rel:
        return directory
    path = PurePosixPath(str(rel))
    if path.is_absolute() or ".." in path.parts:
        raise CheckpointError(
            f"checkpoint {session.id}@{seq}: its cwd {rel!r} is not a folder of the repository"
        )
    return directory / path


def fork_into(session: Session, seq: int) -> Path:
    """A new folder for the arms of a fork of ``session@seq``: ``$TMPDIR/forkpoint-forks-UID/ID@SEQ-XXXX``.
    Not under the current directory: that is usually the recorded repository, and arms would become
    untracked clones inside it. A new folder every time, so forking one checkpoint again just works.
    The parent is this user's own (:func:`~forkpoint.files.user_temp_dir`): the temporary folder is
    shared, and another user's folder or link there could swap the arms. Raises
    :class:`~forkpoint.errors.UsageError` naming it when it is not this user's."""
    from .files import user_temp_dir

    try:
        base = user_temp_dir("forkpoint-forks")
    except OSError as exc:
        raise UsageError(f"cannot make a folder for the arms: {exc}; pass --into DIR") from None
    return Path(tempfile.mkdtemp(prefix=f"{session.id}@{seq}-", dir=base))


def say_unrecorded_before(session: Session, seqs: list[int]) -> None:
    """Say (stderr) which tools the recording's model asked for, before the checkpoints ``seqs`` the
    arms of a fork or sweep start from, of which the recording has no calls (:func:`~forkpoint.replay.replayer.unrecorded_asks`),
    if any: an arm's program replays that prefix, and if it ran them, it runs them again for real on
    the restored checkpoint, so those arms are not the recorded state once run."""
    from .replay.replayer import unrecorded_asks

    asks = unrecorded_asks(session)
    affected = [seq for seq in sorted(seqs) if any(asked < seq for asked, _ in asks)]
    if not affected:
        return
    missing = Counter(name for asked, name in asks if asked < affected[-1])
    names = ", ".join(f"{n} ({plural(k, 'call')})" for n, k in missing.items())
    arms = "each arm" if len(seqs) == 1 else f"each arm of checkpoint seq {affected[0]} and later"
    say(
        f"forkpoint: WARNING: before checkpoint seq {affected[-1]} the model asked for tools the recording "
        f"has no calls of: {names}. The program of {arms} replays that part of the run, and if it ran them, "
        "it runs them again for real on the restored checkpoint: what they changed is done twice. Name them "
        "when recording: @forkpoint.tool on the function, or forkpoint record --tool MODULE:FUNCTION[=NAME]."
    )


def resumable(session: Session, seq: int) -> None:
    """Raise :class:`~forkpoint.errors.CheckpointError` unless ``seq`` is a resumable checkpoint of
    ``session`` (resuming anywhere else would make the agent speak twice)."""
    from .checkpoint import find

    cp = find(session, seq)
    if cp["boundary"] != "resumable":
        raise CheckpointError(
            f"checkpoint {session.id}@{seq} is {cp['boundary']}: it lies between two tool calls of one turn, "
            "so resuming there would make the agent speak twice. Fork from a resumable checkpoint "
            "(forkpoint checkpoints lists them)."
        )


def refuse_taken(into: Path, folders: list[Path], arms: int, command: str) -> None:
    """Raise :class:`~forkpoint.errors.UsageError` naming ``into`` when one of ``folders`` (in it)
    already holds what one of ``arms`` arms would write: ``arm-N`` (but an empty folder) or
    ``arm-N.log``. Checked before any arm runs: an arm's restore refuses a folder that is not empty
    (it would not run), and its log is never written over (what it printed would be lost, beside
    an older arm's log), so nothing of the user's or of an earlier fork is replaced or mixed in."""
    taken = [
        p
        for folder in folders
        for i in range(1, arms + 1)
        for p in (folder / f"arm-{i}", folder / f"arm-{i}.log")
        if os.path.lexists(p) and not (p.is_dir() and not p.is_symlink() and not any(p.iterdir()))
    ]
    if taken:
        names = [str(p.relative_to(into)) for p in taken]
        more = f" and {len(names) - 5} more" if len(names) > 5 else ""
        raise UsageError(
            f"{into} already holds {', '.join(names[:5])}{more}: {command} into an empty folder, or a new one "
            "(without --into)"
        )


def arm_specs(
    session: Session,
    seq: int,
    cmd: list[str],
    *,
    arms: int,
    into: Path,
    overrides: list[str] | None = None,
    on_divergence: str = "stop",
    repo: Path | None = None,
    outcome: Outcome | None = None,
    first: int = 1,
    timeout: float | None = None,
    experiment: str | None = None,
) -> list[dict[str, Any]]:
    """The task specs of ``arms`` arms of ``session@seq`` (numbered from ``first``), in ``into``;
    ``timeout``: seconds each arm's program may run (:func:`replay_run`); ``experiment``: the id
    the arms of one fork or sweep share in their sessions' headers (default: a new one)."""

    from .config import find_config

    ref = session_ref(session)
    experiment = experiment or uuid.uuid4().hex
    # The configuration where the fork runs ([match] rules: the ones `forkpoint replay` here uses)
    # applies to arms whose restored repository has none of its own (checked by the caller, before
    # it makes the arms' folder: check_config).
    found = find_config()
    config = str(found[0].absolute()) if found is not None else None
    return [
        {
            "session": ref,
            "experiment": experiment,
            "seq": seq,
            "index": i,
            "directory": str((into / f"arm-{i}").absolute()),
            "cmd": list(cmd),
            "overrides": list(overrides or []),
            "on_divergence": on_divergence,
            "repo": str(repo.absolute()) if repo else None,
            "outcome": vars(outcome) if outcome else None,
            "name": f"fork {session.id}@{seq} arm {i}",
            "timeout": timeout,
            "config": config,
        }
        for i in range(first, first + arms)
    ]


def run_arms(
    specs: list[dict[str, Any]],
    *,
    executor: Executor | None = None,
    on_arm: Callable[[Arm], None] | None = None,
) -> list[Arm]:
    """Run the arm tasks ``specs`` (:func:`arm_specs`) on ``executor`` (default: this machine, one
    at a time); ``on_arm`` is called with each arm as it finishes. An arm whose task failed (an
    exception, a worker that died) is lost, kept as a session that says so (:func:`keep_not_run`), as
    the task could not. Returns the arms in spec order."""
    from .executors import LocalExecutor

    done: dict[int, Arm] = {}
    with executor or LocalExecutor(jobs=1) as ex:
        for i, result in ex.map(arm_task, specs):
            if "index" in result:
                arm = Arm.from_json(result)
            else:  # the task itself failed (an exception, a lost worker)
                spec = specs[i]
                arm = Arm(int(spec["index"]), Path(spec["directory"]), seq=int(spec["seq"]), lost=True)
                arm.error = result.get("error") or None
                keep_not_run(arm, spec)
            done[i] = arm
            if on_arm is not None:
                on_arm(arm)
    return [done[i] for i in sorted(done)]


def fork_specs(
    session: Session,
    seq: int,
    cmd: list[str],
    *,
    arms: int,
    into: Path | None = None,
    overrides: list[str] | None = None,
    on_divergence: str = "stop",
    repo: Path | None = None,
    outcome: Outcome | None = None,
    timeout: float | None = None,
) -> tuple[Path, list[dict[str, Any]]]:
    """Check what a fork of the resumable checkpoint ``seq`` of ``session`` is asked to do, before
    anything runs, and plan its arms (:func:`fork_arms` takes the same arguments). Returns (the folder
    of the arms, their task specs). Raises :class:`~forkpoint.errors.CheckpointError` for a
    checkpoint that does not exist or is not resumable, and :class:`~forkpoint.errors.UsageError`
    for an override, a configuration or an ``into`` that cannot be used."""
    resumable(session, seq)
    check_overrides(session, list(overrides or []), live_from=seq, losses=True)
    check_config()  # (before a folder for the arms is made: a refused fork leaves none behind)
    into = into if into is not None else fork_into(session, seq)
    refuse_taken(into, [into], arms, "fork")
    say_unrecorded_before(session, [seq])
    specs = arm_specs(
        session,
        seq,
        cmd,
        arms=arms,
        into=into,
        overrides=overrides,
        on_divergence=on_divergence,
        repo=repo,
        outcome=outcome,
        timeout=timeout,
    )
    return into, specs


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
    outcome: Outcome | None = None,
    executor: Executor | None = None,
    on_arm: Callable[[Arm], None] | None = None,
    timeout: float | None = None,
) -> tuple[Path, list[Arm]]:
    """Restore the resumable checkpoint ``seq`` of ``session`` into ``arms`` fresh directories,
    validate each without a model, and continue each valid one with ``cmd`` run in it: the calls
    recorded before the checkpoint replayed, every later one live, the arm recorded as a session
    linked to its parent, and ``outcome`` measured in the arm's directory when it ends. An arm
    whose validation fails is reported and never run (with ``outcome``, its session says only why,
    for its parent's page to draw it); one still running after ``timeout`` seconds
    is stopped (its outcome measured all the same once it went live). The arms run on ``executor``
    (default: here, one after the other); ``on_arm(arm)`` is called as each one finishes.

    Returns (the folder of the arms, the arms, in order). Raises what :func:`fork_specs` raises,
    before any arm runs.
    """
    into, specs = fork_specs(
        session,
        seq,
        cmd,
        arms=arms,
        into=into,
        overrides=overrides,
        on_divergence=on_divergence,
        repo=repo,
        outcome=outcome,
        timeout=timeout,
    )
    return into, run_arms(specs, executor=executor, on_arm=on_arm)
