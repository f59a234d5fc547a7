"""Activation of forkpoint inside a process started by the CLI, driven by environment variables.

``FORKPOINT_MODE`` (``record`` or ``replay``), ``FORKPOINT_SESSION`` (session directory),
``FORKPOINT_TOOLS`` (comma-separated ``module:qualname`` targets), ``FORKPOINT_WORKSPACE`` (JSON
``root`` and ``include_ignored``, for checkpoints while recording), ``FORKPOINT_DETERMINISTIC``
(JSON: the header's ``deterministic``, so a recording reads no session before the first call), ``FORKPOINT_REPORT`` (a folder:
a recording process writes ``ending-<pid>.json`` there at exit, ``{"uncaught": [...],
"incomplete": why-or-null, "lacks": [...]}``, the exceptions that ended it and why its recording
stopped early, for the session's ``end``, and its tally of what the recording lacks
(:class:`forkpoint.record.Lacks`), for the warnings (``{}`` when it has none of them); each replaying process writes
``report-<pid>.json``, and they share which recorded calls they served through its ``ledger``;
one whose replay cannot start writes why to ``not-started-<pid>.txt`` and exits, not running the
program)
and, for replay, ``FORKPOINT_REPLAY`` (JSON:
``models``, ``tools``, ``on_divergence``, ``overrides``, ``strict`` and ``child``, the what-if session to write). The variables are removed once read,
so Python subprocesses of the agent are not recorded or replayed (documented in docs/format.md);
programs the recorded command runs side by side or one after another (a shell script) each are,
and so is a program it becomes through exec (:func:`_hand_over_at_exec`)."""

from __future__ import annotations

import atexit
import os
import sys
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

TYPE_CHECKING = False  # not typing's: this module is imported at every bootstrapped start
if TYPE_CHECKING:
    from .events import ErrorRecord
    from .record import Recorder

#: In the ``FORKPOINT_REPORT`` folder: the ledger the replaying processes share (replay.Ledger).
LEDGER_NAME = "ledger"
#: In the ``FORKPOINT_REPORT`` folder of a recording: ``ending-<pid>.json`` of each process.
ENDING_PREFIX = "ending-"
#: In the ``FORKPOINT_REPORT`` folder: ``exec-<pid>-<N>.json`` of each process's Nth exec, the program it
#: became (``{"argv": [file, *args]}``): the CLI checks that one wrote its ending or report in turn.
EXEC_PREFIX = "exec-"
#: In the ``FORKPOINT_REPORT`` folder of a replay: ``not-started-<pid>.txt`` of each process whose
#: replay could not start (why, in words), which then exits with :data:`NOT_STARTED_EXIT`.
NOT_STARTED_PREFIX = "not-started-"
#: In the ``FORKPOINT_REPORT`` folder: ``unreported-<pid>.<errno>``, empty, of each process that could
#: not write its report or ending (a full disk, ``ulimit -f``: a file with no data can still be made),
#: so that the parent says that, and why, rather than that forkpoint did not start in it.
UNREPORTED_PREFIX = "unreported-"
#: In the ``FORKPOINT_REPORT`` folder of a fork's arm: ``replaying-<pid>``, empty, of each process whose
#: replay started, and ``live-<pid>`` of each that made a call live from the checkpoint: an arm stopped
#: before it wrote a report is told apart from one that never ran forkpoint or never went live.
REPLAYING_PREFIX, LIVE_PREFIX = "replaying-", "live-"
#: In the ``FORKPOINT_REPORT`` folder: ``alive-<pid>``, empty, which each process that started forkpoint
#: holds an exclusive flock(2) on for as long as it, or a child forked from it, runs: the CLI waits
#: for those that outlive the program before it reads their endings and reports (a multiprocessing
#: forkserver leaves after the program that started it, writing its report as it goes).
ALIVE_PREFIX = "alive-"
NOT_STARTED_EXIT = 1  # (as forkpoint replay exits when it refuses a session)

#: Variables that carry the activation; see module docstring.
ENV_VARS = ("FORKPOINT_MODE", "FORKPOINT_SESSION", "FORKPOINT_TOOLS", "FORKPOINT_REPORT", "FORKPOINT_REPLAY")
BOOTSTRAP_DIR = Path(__file__).parent / "_bootstrap"
#: Set in the activation of a worker that ``multiprocessing`` starts with ``spawn`` (:func:`spawned`).
SPAWNED_VAR = "FORKPOINT_SPAWNED"
#: Set for the program a bootstrapped process becomes through exec: where its call ordinals start
#: (:data:`forkpoint.runtime.sent_from`).
SENT_FROM_VAR = "FORKPOINT_SENT_FROM"
#: Set with it by a recording: how many model calls the programs before made (the turn the new one's
#: checkpoints go on from).
TURNS_VAR = "FORKPOINT_TURNS"
#: Set with it: how many execs the process went through before (its ending and report files are
#: named after them: ``…-<pid>-exec<N>.json``, the pid staying the same along a chain of execs).
EXECS_VAR = "FORKPOINT_EXECS"

#: This process's activation (the variables it was started with), for the workers it spawns.
_activation: dict[str, str] | None = None
#: Whether this process said already that a file of its ``FORKPOINT_REPORT`` folder went unwritten.
_unwritten_said = False


def start(environ: MutableMapping[str, str] = os.environ) -> None:
    """Activate recording or replay as ``environ`` says (the process's environment, or a spawned
    worker's activation: :func:`spawned`); do nothing when it says nothing. The variables are
    taken out of ``environ``."""
    global _activation
    env = {k: environ.pop(k, "") for k in (*ENV_VARS, SPAWNED_VAR, SENT_FROM_VAR, EXECS_VAR, TURNS_VAR)}
    _leave_pythonpath()
    mode, session = env["FORKPOINT_MODE"], env["FORKPOINT_SESSION"]
    if not mode or not session:
        return
    _activation = {
        k: v for k, v in env.items() if v and k not in (SPAWNED_VAR, SENT_FROM_VAR, EXECS_VAR, TURNS_VAR)
    }
    if env["FORKPOINT_REPORT"]:
        _hold_alive(Path(env["FORKPOINT_REPORT"]))
    if env[SENT_FROM_VAR]:
        from . import runtime

        runtime.sent_from = int(env[SENT_FROM_VAR])
    if mode == "record" and environ.get("FORKPOINT_DETERMINISTIC"):
        _activation["FORKPOINT_DETERMINISTIC"] = environ["FORKPOINT_DETERMINISTIC"]
    if env["FORKPOINT_TOOLS"]:
        from .capture.targets import install_import_hook

        targets = [t for t in env["FORKPOINT_TOOLS"].split(",") if t]
        install_import_hook(targets, warn_at_exit=True, spawned=bool(env[SPAWNED_VAR]))

    if mode == "record":
        from . import hooks, runtime

        _join_recording(Path(session))
        made: list[Recorder] = []
        failed: list[str] = []
        turns = [int(env[TURNS_VAR] or 0)]  # (model calls of the programs before this one: exec)
        ws_raw = environ.pop("FORKPOINT_WORKSPACE", "")
        # (json is imported where a variable or a file needs it: `python -c pass` recorded does not)
        ws_opts = _json_loads(ws_raw) if ws_raw else None

        def make() -> Recorder | None:
            # On the first call the program makes: a program that makes none loads no recorder.
            try:
                rec = _recorder(Path(session), ws_opts)
                # What finishing at exit needs, imported now: an import in an exit handler clears
                # CPython's note of an uncaught KeyboardInterrupt (exit 130 would become 1).
                from . import api, files  # noqa: F401
            except Exception as exc:  # recording must not change the live run: say it, go on
                failed.append(f"the recording could not start: {type(exc).__name__}: {exc}")
                from .text import say

                say(f"forkpoint: {failed[-1]}; this process goes on unrecorded")
                return None
            rec.turns_before = turns[0]
            made.append(rec)
            return rec

        deterministic = environ.pop("FORKPOINT_DETERMINISTIC", "")
        _deterministic(_json_loads(deterministic) if deterministic else None)
        hooks.install("record")
        runtime.activate_later(make)

        def finish_recording() -> None:
            runtime.cancel_pending()
            if not made:  # the program made no call: nothing was recorded, nothing to finish
                return
            from . import api

            for rec in made:
                runtime.deactivate(rec)
                api.finish_recording(rec)
                rec.close()

        ended: list[ErrorRecord] = []
        _watch_uncaught(ended.append)
        if env["FORKPOINT_REPORT"]:
            report = Path(env["FORKPOINT_REPORT"])

            def write_ending(tag: str = "") -> None:
                from .files import write_private

                incomplete = made[0].failure if made else (failed[0] if failed else None)
                lacks = [rec.lacks.to_json() for rec in made]
                doc = {"uncaught": ended, "incomplete": incomplete, "lacks": lacks}
                # (this process's own: a forked child that exits normally writes one of its own)
                ending = report / f"{ENDING_PREFIX}{os.getpid()}{tag}.json"
                # (one with none of them, a program that made no call, writes {} without loading json)
                data = _json_dumps(doc) if ended or incomplete or lacks else b"{}"
                _softly(
                    lambda: write_private(ending, data),
                    report,
                    "how this process's recording ended",
                    "the session may not say all it lacks",
                )

            atexit.register(write_ending)  # registered first, run last: after the calls written at exit
        atexit.register(finish_recording)

        def leaving(status: int, main: bool) -> None:
            tools = sys.modules.get("forkpoint.capture.tools")
            if tools is not None:  # (a tool body calling os._exit: its call ends here)
                tools.exiting(status)
            if main:  # (a forked child's copy of the recording is its parent's to finish)
                finish_recording()
                if env["FORKPOINT_REPORT"]:
                    write_ending()

        _before_os_exit(leaving, "the recording")

        def before_exec(tag: str, new: dict[str, str]) -> Callable[[], None]:
            finish_recording()
            turns[0] += sum(rec.counts["model_call"] for rec in made)
            new[TURNS_VAR] = str(turns[0])
            if env["FORKPOINT_REPORT"]:
                write_ending(tag)

            def undo() -> None:  # (the exec failed: the program goes on, recorded from its next call)
                made.clear()
                runtime.activate_later(make)

            return undo

        if not env[SPAWNED_VAR]:
            _hand_over_at_exec(
                before_exec,
                {**_activation, **({"FORKPOINT_WORKSPACE": ws_raw} if ws_raw else {})},
                int(env[EXECS_VAR] or 0),
            )
    elif mode == "replay":
        try:
            _start_replay(session, env, spawned=bool(env[SPAWNED_VAR]))
        except Exception as exc:
            # A program whose replay cannot start would run live, unreplayed: it does not run at all.
            _refuse_to_run(env["FORKPOINT_REPORT"], f"{type(exc).__name__}: {exc}")


#: The open ``alive-<pid>`` file this process holds its lock on (:func:`_hold_alive`): kept open to its end.
_alive: int | None = None


def _hold_alive(folder: Path) -> None:
    """Take the lock of ``alive-<pid>`` in ``folder`` for this process's life: the kernel lets it go
    when the last process holding the file ends (a child forked from this one holds it too; a
    program it becomes through exec takes its own). One another holds (a child forked from the
    program this process was before an exec, or a process whose pid this one reuses) is never
    waited for, which would hold this program up for that one's life: ``alive-<pid>.<n>`` is taken
    instead. A folder that cannot hold it (a full disk) is not waited for: as before there was one."""
    global _alive
    import fcntl

    for n in range(_ALIVE_NAMES):
        name = f"{ALIVE_PREFIX}{os.getpid()}" + (f".{n}" if n else "")
        try:
            fd = os.open(folder / name, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600)
        except OSError:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if isinstance(exc, BlockingIOError):
                continue
            return
        _alive = fd
        return


#: How many ``alive-<pid>`` names one pid tries (:func:`_hold_alive`): the processes that held it
#: before (each exec of one process, forked children outliving it) are few.
_ALIVE_NAMES = 64


def hold_tree(folder: Path) -> int:
    """A descriptor of ``folder``'s ``tree`` file under an exclusive flock(2), for the program to
    inherit (the CLI closes its own copy once the program has started): the lock is held as long as
    a process that inherited it runs (a shell's background job before it starts forkpoint, a forked
    child), which :func:`outlived` asks. It is :data:`TREE_FD` or the first free one above (the
    lowest free one where the limit of open files is lower). Raises OSError when the folder cannot
    hold it."""
    import fcntl

    fd = os.open(folder / TREE_NAME, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        os.close(fd)
        raise
    try:
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, TREE_FD)
    except OSError:  # (TREE_FD is past the limit of open files, or none is free above it)
        return fd
    os.close(fd)  # (the lock is the open file's, which the copy keeps)
    return high


def outlived(folder: Path, grace: float, stop: Callable[[], bool] = lambda: False) -> list[str]:
    """The pids of the processes of ``folder``'s ``alive-<pid>`` files (:func:`_hold_alive`) that,
    or whose forked children, still run ``grace`` seconds from now (polled every 20 ms), or once
    ``stop()`` is true: the CLI calls it once the program has ended, and returns as soon as none
    runs. The folder is read at each poll: one of them may start another that outlives it (a
    ``spawn`` worker, a forkserver). While none runs but a process that inherited the program's
    ``tree`` lock (:func:`hold_tree`) does, up to :data:`STARTING` seconds from when the last one
    ran: it may be a program yet to start forkpoint (``sh -c "a; python b.py &"``, or the next of
    ``(python a.py; python b.py) &`` once ``a`` ended); past that, one that does not (a server)."""
    import time

    from .files import lock_held

    def held(path: Path) -> bool:
        return lock_held(path) is True  # (a file gone: nothing to wait for)

    began = quiet = time.monotonic()
    while True:
        running = [p for p in sorted(named(folder, ALIVE_PREFIX)) if held(p)]
        now = time.monotonic()
        waited = now - began
        if running:  # (the next program of a background job starts once this one ended)
            quiet = now
        starting = not running and now - quiet < STARTING and held(folder / TREE_NAME)
        if not (running or starting) or waited >= grace or stop():  # (alive-<pid>.<n>: that pid too)
            return list(dict.fromkeys(p.name[len(ALIVE_PREFIX) :].partition(".")[0] for p in running))
        time.sleep(0.02)


#: In the ``FORKPOINT_REPORT`` folder: ``tree``, whose lock the program's processes inherit (:func:`hold_tree`).
TREE_NAME = "tree"
#: The lowest descriptor the program's processes inherit the ``tree`` lock at (:func:`hold_tree`):
#: a shell script names its own 3 to 9 (``exec 3>&1``, ``exec 4<file``), closing what was there,
#: and a shell takes the free ones from 10 for itself; the lowest free one (4 or 5, as forkpoint
#: had opened) was closed so, and the lock let go before a background job started forkpoint.
TREE_FD = 100
#: How long :func:`outlived` waits for a process that inherited the ``tree`` lock to start forkpoint, in seconds.
STARTING = 1.0


def spawned() -> dict[str, str] | None:
    """The activation of a worker this process starts with ``multiprocessing``'s ``spawn``: the
    same recording or replay as this process's (without its workspace: a worker takes no
    checkpoints); None when this process was not started by ``forkpoint record`` or ``replay``."""
    return None if _activation is None else {**_activation, SPAWNED_VAR: "1"}


def _start_replay(session: str, env: Mapping[str, str], *, spawned: bool = False) -> None:
    """Replay ``session`` in this process with the options of ``env`` (``FORKPOINT_REPLAY``,
    ``FORKPOINT_REPORT``); ``spawned``: in a worker ``multiprocessing`` spawned, which reports as
    it goes (its pool may end it with SIGTERM). Raises what loading the session and building the
    replayer raise."""
    from . import api, override
    from .log import Session, SessionWriter
    from .replay import Replayer, open_ledger, placeholder_env, write_report

    opts = _json_loads(env["FORKPOINT_REPLAY"] or "{}")
    if opts.get("child"):  # (a what-if's session is being recorded as long as this process lives)
        _join_recording(Path(opts["child"]))
    child = SessionWriter.open(Path(opts["child"]), joined=True) if opts.get("child") else None
    reports = Path(env["FORKPOINT_REPORT"]) if env["FORKPOINT_REPORT"] else None
    recorded = Session.load(Path(session), derived=False, share_lists=True)
    rp = Replayer(
        recorded,
        models=opts.get("models", "replay"),
        tools=opts.get("tools", "replay"),
        on_divergence=opts.get("on_divergence", "stop"),
        overrides=[override.parse(o) for o in opts.get("overrides", [])],
        child=child,
        live_from=opts.get("live_from"),
        strict=bool(opts.get("strict")),
        ledger=open_ledger(reports / LEDGER_NAME) if reports else None,
        hand_over=True,
    )
    for k, v in placeholder_env(recorded).items():
        os.environ.setdefault(k, v)
    _deterministic(recorded.header.get("deterministic"))
    api.start(rp)
    _watch_uncaught(rp.uncaught.append)
    _quiet_divergence_tracebacks()

    def finish() -> None:
        api.finish_pending(rp)
        if child is not None:
            from .capture import programs

            started = programs.child_note(rp.root_span)
            if started is not None:  # (the what-if session is this run's recording)
                child.append(started)
            child.close()
        report()

    def report() -> None:
        if reports:
            path = reports / f"report-{os.getpid()}.json"
            _softly(lambda: write_report(path, rp.report()), reports, REPLAY_REPORT, UNKNOWN_VERDICT)

    atexit.register(finish)

    if reports and rp.live_from is not None:  # (a fork's arm: how far it got, should it be stopped)
        from .files import write_private

        def mark(prefix: str) -> None:
            path = reports / f"{prefix}{os.getpid()}"
            _softly(
                lambda: write_private(path, b""),
                reports,
                "how far this process's replay got",
                UNKNOWN_VERDICT,
            )

        def went_live() -> None:
            rp.on_live = None  # (once: a child forked later has this process's mark)
            mark(LIVE_PREFIX)

        mark(REPLAYING_PREFIX)
        rp.on_live = went_live
    if not spawned:

        def before_exec(tag: str, _new: dict[str, str]) -> Callable[[], None]:
            api.finish_pending(rp)
            if child is not None:
                child.sync()
            done = reports / f"report-{os.getpid()}{tag}.json" if reports else None
            if done is not None:
                _softly(lambda: write_report(done, rp.report()), done.parent, REPLAY_REPORT, UNKNOWN_VERDICT)

            def undo() -> None:  # (the exec failed: the program goes on, replayed; its report at exit)
                if done is not None:
                    done.unlink(missing_ok=True)

            return undo

        assert _activation is not None
        _hand_over_at_exec(before_exec, _activation, int(env.get(EXECS_VAR) or 0))
    if reports:
        # A program that ends through os._exit runs no exit handler: its report is written first.
        _before_os_exit(lambda _status, main: finish() if main else report(), "the replay report")

        # A child forked without exec (a multiprocessing worker) replays with its copy, and
        # reports as it goes: it may leave through os._exit, past every exit handler.
        os.register_at_fork(after_in_child=lambda: rp.forked(report))
        # A worker reports after each call; this process once it diverged (so that a program that
        # waits on for ever after it is seen to have diverged: orchestrate._Stuck).
        rp.report_each_call(report if spawned else lambda: report() if rp.divergence is not None else None)


#: What :func:`_softly` says of a replaying process's report it could not write.
REPLAY_REPORT, UNKNOWN_VERDICT = "this process's replay report", "its verdict is unknown"


def _softly(write: Callable[[], object], folder: Path, what: str, lost: str) -> None:
    """Call ``write``, which writes ``what`` (a report, an ending) to the ``FORKPOINT_REPORT``
    ``folder`` as the program goes on, execs or leaves. A write that fails (a full disk) raises
    nothing into the program, whose run recording must not change (an exec still execs): it is said
    on stderr with what is ``lost``, once in this process, and left as an empty
    ``unreported-<pid>.<errno>`` where that can be made, so that the CLI says why the file is missing."""
    global _unwritten_said
    try:
        write()
    except OSError as exc:
        if not _unwritten_said:
            _unwritten_said = True
            from .text import say

            say(f"forkpoint: could not write {what} ({exc}): {lost}")
        mark = folder / f"{UNREPORTED_PREFIX}{os.getpid()}.{exc.errno or 0}"
        try:
            os.close(os.open(mark, os.O_CREAT | os.O_WRONLY, 0o600))
        except OSError:
            pass


def _before_os_exit(run: Callable[[int, bool], None], what: str) -> None:
    """Make ``os._exit(status)`` call ``run(status, main)`` before it leaves (``main``: this process,
    not a child forked from it): a program that leaves through it runs no exit handler. What ``run``
    raises is said, naming ``what`` it was finishing; the process leaves regardless, as asked."""
    started, leave = os.getpid(), os._exit

    def _exit(status: int) -> NoReturn:
        try:
            run(status, os.getpid() == started)
        except Exception as exc:
            from .text import say

            say(f"forkpoint: {what} could not be finished as the program left: {exc}")
        leave(status)

    os._exit = _exit


def _hand_over_at_exec(
    before: Callable[[str, dict[str, str]], Callable[[], None]],
    activation: Mapping[str, str],
    handed: int = 0,
) -> None:
    """Make an exec (:func:`forkpoint.execs.around_exec`) hand this process's recording or replay on
    to the program it becomes, which is the recorded command going on: ``before(tag, new)``
    finishes this program's part, naming its ending or report file with ``tag`` (the pid stays the
    same: ``handed`` counts the execs it went through before this program, each of which left such
    a file), may add to ``new`` (the new program's environment), and returns what undoes that
    should the exec fail; the new program starts with ``activation`` in its environment (an
    environment passed to ``execve`` too), forkpoint's bootstrap on its ``PYTHONPATH``, and call
    ordinals that follow this program's: its calls have the same pid in the log."""
    from . import runtime
    from .execs import around_exec

    def hand_over(file: str, args: list[str], new: dict[str, str]) -> Callable[[], None]:
        from .events import SESSION_ID_VAR  # (not loaded at a start that makes no call)
        from .files import write_private

        nonlocal handed
        handed += 1
        for k in ("PYTHONHASHSEED", SESSION_ID_VAR):  # (what the recording's header and ids say)
            if k in os.environ:
                new.setdefault(k, os.environ[k])
        new.update(activation)
        new["PYTHONPATH"] = os.pathsep.join(p for p in (_bootstrap_dir(), new.get("PYTHONPATH", "")) if p)
        new[SENT_FROM_VAR] = str(runtime.sent_past())
        new[EXECS_VAR] = str(handed)
        undo = before(f"-exec{handed}", new)
        said = None
        if activation.get("FORKPOINT_REPORT"):  # (what became of this process, for the CLI to check)
            note = Path(activation["FORKPOINT_REPORT"]) / f"{EXEC_PREFIX}{os.getpid()}-{handed}.json"
            _softly(
                lambda: write_private(note, _json_dumps({"argv": [file, *args]})),
                note.parent,
                f"that this process execs {file}",
                "whether forkpoint starts in that program is not checked",
            )
            said = note

        def undone() -> None:
            if said is not None:
                said.unlink(missing_ok=True)
            undo()

        return undone

    around_exec(hand_over)
    runtime.exec_hands_over_in = os.getpid()


def nested_record(command: Sequence[str]) -> None:
    """In ``forkpoint record`` (of ``command``): when a recording or a replay started
    this process, say what this means, or refuse. Under a recording, this forkpoint records the run
    in its own session and the outer one gets none of its calls: said, and the run goes on. Under a
    replay (of such an outer session), it would run ``inner`` live and record it anew, under a
    verdict of "replay ok" (the process made no call): it does not run (:func:`_refuse_to_run`)."""
    if _activation is None:
        return
    import shlex

    from .redact import scrub_argv

    inner, outer = shlex.join(scrub_argv(command)), Path(_activation["FORKPOINT_SESSION"]).name
    if _activation["FORKPOINT_MODE"] == "replay":
        _refuse_to_run(
            _activation.get("FORKPOINT_REPORT", ""),
            f"its command is `forkpoint record -- {inner}`, which would run `{inner}` live and record it "
            "in a new session: the recorded run is in the session that inner forkpoint record made "
            f"(its command is `{inner}`); replay that one",
        )
    from .text import say

    say(
        f"forkpoint: WARNING: this forkpoint record runs inside another one, recording session {outer}: "
        f"it records `{inner}` in a session of its own, and session {outer} gets none of its calls "
        f"(a replay of {outer} refuses to run it); record the command once"
    )


def _refuse_to_run(report: str, why: str) -> None:
    """End this process before the program's own code runs, with :data:`NOT_STARTED_EXIT`: the
    replay it was started for cannot start (a session value that does not decode, a session it
    cannot open). Why goes to ``report``'s ``not-started-<pid>.txt``, for the replaying parent to
    say in its verdict, or to stderr when there is no such folder (or it cannot be written)."""
    message = f"process {os.getpid()}: the replay could not start ({why}); the program was not run"
    try:
        if not report:
            raise OSError
        from .files import write_private

        write_private(Path(report) / f"{NOT_STARTED_PREFIX}{os.getpid()}.txt", message.encode())
    except OSError:
        from .text import say

        say(f"forkpoint: {message}")
    os._exit(NOT_STARTED_EXIT)


def _leave_pythonpath() -> None:
    """Take the bootstrap folder out of ``PYTHONPATH`` for the processes this one starts: they are
    not recorded or replayed (the variables are gone), and each Python among them would otherwise
    still import this module at its start (~7 ms: a coding agent's test runs pay it every time)."""
    path = os.environ.get("PYTHONPATH")
    if path is None:
        return
    ours = {os.path.abspath(BOOTSTRAP_DIR), _bootstrap_dir()}
    kept = [p for p in path.split(os.pathsep) if os.path.abspath(p or ".") not in ours]
    if len(kept) == len(path.split(os.pathsep)):
        return
    if kept:
        os.environ["PYTHONPATH"] = os.pathsep.join(kept)
    else:
        del os.environ["PYTHONPATH"]


def _bootstrap_dir() -> str:
    """The bootstrap folder that started this process: the one of the forkpoint that started it,
    which may not be the one this process imports (a CLI run from a checkout, an agent with its
    own install); the folder of the sitecustomize that is running says which."""
    running = str(getattr(sys.modules.get("sitecustomize"), "__file__", None) or "")
    if running and os.path.basename(os.path.dirname(os.path.abspath(running))) == BOOTSTRAP_DIR.name:
        return os.path.dirname(os.path.abspath(running))
    return os.path.abspath(BOOTSTRAP_DIR)


#: In a remote store's mirror: the lock file of a staged session (forkpoint.log.MIRROR_RECORDING;
#: not imported from there, which would load the log layer at every start).
_MIRROR_RECORDING = ".recording"
#: The lock this process holds on its session's ``.recording`` (:func:`_join_recording`): never closed.
_joined: list[int] = []


def _join_recording(session: Path) -> None:
    """Hold a shared lock on the staged session's ``.recording`` (a session of a remote store's
    mirror; nothing elsewhere) for as long as this process lives, beside the one of the
    ``forkpoint record`` that created it (:func:`forkpoint.store.fsspec.recording_started`): a
    session counts as still being recorded, and is not uploaded by ``forkpoint ls``, while any
    process that may append to it lives, not only while that ``forkpoint record`` does (killed,
    it would otherwise leave the program appending to a session uploaded without the rest)."""
    import fcntl

    try:
        fd = os.open(session / _MIRROR_RECORDING, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)  # (an uploader's probe holds it exclusively for an instant)
    except OSError:
        os.close(fd)
        return
    _joined.append(fd)


def _recorder(session: Path, ws_opts: dict[str, Any] | None) -> Recorder:
    """The recorder of ``session``, checkpointing the workspace ``ws_opts`` names, if any."""
    from .errors import SessionError
    from .log import MIRROR_DONE, SessionWriter
    from .record import Recorder, attach_workspace, open_workspace

    if (session / MIRROR_DONE).exists():
        raise SessionError(
            f"session {session.name} was already uploaded to its store (the forkpoint record that "
            "started this process is gone): what this process does is not added to it"
        )

    writer = SessionWriter.open(session, joined=True)
    ws = None
    if ws_opts:
        root, include_ignored = ws_opts["root"], bool(ws_opts.get("include_ignored"))
        ws = attach_workspace(open_workspace(root, writer.path.parent, include_ignored), writer)
    return Recorder(writer, workspace=ws)


def _json_loads(text: str) -> Any:
    import json

    return json.loads(text)


def _json_dumps(doc: object) -> bytes:
    import json

    return json.dumps(doc).encode()


def _deterministic(select: Any) -> None:
    """The agent's own clock and randomness, for the whole process, when the header says so."""
    if select:
        from .capture import clock

        clock.install(select)


def child_env(
    mode: str,
    session: Path,
    *,
    tools: list[str],
    report: Path | None = None,
    replay_options: Mapping[str, object] | None = None,
) -> dict[str, str]:
    """The environment for a child process that forkpoint should record or replay."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(BOOTSTRAP_DIR), env.get("PYTHONPATH", "")) if p)
    env["FORKPOINT_MODE"] = mode
    env["FORKPOINT_SESSION"] = str(Path(session).resolve())
    # Left in the environment (unlike the variables above) for the program and everything it
    # starts to log or link: the recorded session's id, the same on replay as when it was recorded.
    from .events import SESSION_ID_VAR

    env[SESSION_ID_VAR] = Path(session).resolve().name
    env["FORKPOINT_TOOLS"] = ",".join(tools)
    if report is not None:
        env["FORKPOINT_REPORT"] = str(report)
    if replay_options:
        env["FORKPOINT_REPLAY"] = _json_dumps(replay_options).decode()
    return env


def _watch_uncaught(note: Callable[[ErrorRecord], None]) -> None:
    """Call ``note(error record)`` for an exception that ends the program uncaught (the process's
    main thread: what makes it exit 1 with a traceback), then let the previous hook print it."""
    previous = sys.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        from .events import error_record

        note(error_record(exc))
        previous(kind, exc, tb)

    sys.excepthook = hook


def named(folder: Path, prefix: str, suffix: str = "") -> list[Path]:
    """The files of ``folder`` named ``prefix*suffix``, as ``folder.glob`` finds them (none when
    it is not a folder, or not readable): without making and compiling a pattern for each name,
    which the command line's process paid for every prefix it reads back, in every run."""
    try:
        with os.scandir(folder) as entries:
            return [
                folder / e.name
                for e in entries
                if e.name.startswith(prefix)
                and e.name.endswith(suffix)
                and len(e.name) >= len(prefix) + len(suffix)
            ]
    except (NotADirectoryError, FileNotFoundError, PermissionError):
        return []


def read_endings(folder: Path) -> tuple[list[ErrorRecord], str | None, list[dict[str, Any]], int]:
    """What the recording processes wrote to ``folder`` (``ending-<pid>.json``) as they exited: the
    uncaught exceptions that ended them; why recording stopped early in any of them (a failed write:
    :attr:`forkpoint.record.Recorder.failure`), or None; each recorder's tally of what the
    recording lacks (:meth:`forkpoint.record.Lacks.to_json`); and how many processes reported. (A
    tuple, not a NamedTuple: this module is imported at every bootstrapped start, and making one
    costs a millisecond.)"""
    out: list[ErrorRecord] = []
    failures: list[str] = []
    lacks: list[dict[str, Any]] = []
    endings = sorted(named(folder, ENDING_PREFIX, ".json"))
    for path in endings:
        try:
            doc = _json_loads(path.read_text())
            out.extend(doc.get("uncaught") or [])
            lacks.extend(doc.get("lacks") or [])
            if doc.get("incomplete"):
                failures.append(f"process {path.stem[len(ENDING_PREFIX) :]}: {doc['incomplete']}")
        except (OSError, ValueError, AttributeError):  # a process killed while writing it
            continue
    failures += [
        f"process {pid} could not write how its recording ended ({why})" for pid, why in unwritten(folder)
    ]
    return out, "; ".join(failures) or None, lacks, len(endings)


def unwritten(folder: Path) -> list[tuple[str, str]]:
    """``(pid, why in words)`` of each process that could not write its report or ending to
    ``folder`` (``unreported-<pid>.<errno>``, left by :func:`_softly`)."""
    out = []
    for path in sorted(named(folder, UNREPORTED_PREFIX)):
        pid, _, number = path.name[len(UNREPORTED_PREFIX) :].partition(".")
        known = number.isascii() and number.isdigit() and int(number)
        out.append((pid, os.strerror(int(number)) if known else "a write failed"))
    return out


def _quiet_divergence_tracebacks() -> None:
    """An uncaught :class:`~forkpoint.replay.Divergence` ends the replayed program with two lines
    naming the agent's own call site, not a 40-frame SDK traceback: the CLI prints the full report."""
    import sys

    from .callsite import agent_call_site
    from .errors import Divergence

    previous = sys.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        # (an SDK that catches every exception raises its own instead: anthropic's
        # APIConnectionError, botocore's HTTPClientError, with the divergence as its cause)
        inner: BaseException | None = exc
        chain: list[BaseException] = []
        while inner is not None and not isinstance(inner, Divergence) and inner not in chain:
            chain.append(inner)
            inner = inner.__cause__ or inner.__context__
        if inner is None or not isinstance(inner, Divergence):
            previous(kind, exc, tb)
            return
        # (raised again here from a multiprocessing worker's: where the call was made is its own)
        remote = type(inner.__cause__).__name__ == "RemoteTraceback"
        # The divergence's own traceback first: one that left through a task group (anyio's, an MCP
        # session's) comes out as an ExceptionGroup raised where the group ends, not at the call.
        # One an SDK caught and wrapped has no frame of the agent's: the exception it raised instead
        # has, even when that one in turn left through a task group.
        where = (
            " in a multiprocessing worker"
            if remote
            else next(
                (site for e in [inner, *reversed(chain)] if (site := agent_call_site(e.__traceback__))),
                "",
            )
        )
        raised = "" if inner is exc else f" (raised to the program as {kind.__module__}.{kind.__qualname__})"
        from .text import say

        say(f"forkpoint: the replay stopped: the call made{where} diverged from the recording{raised}.")

    sys.excepthook = hook
