"""The Python API's entry points: recording and replaying a block of code in this process.

This is where the layers meet: the capture hooks and framework integrations are installed
(:func:`start`), a recorder or replayer is activated, and the session's life cycle is run through
its store (:meth:`forkpoint.store.Store.create`). ``forkpoint record``/``replay`` do the same in the
agent's own process through :mod:`forkpoint._boot`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import hooks, override, runtime
from .capture import connections, programs
from .capture.targets import disable_targets, install_import_hook, parse_target
from .errors import Divergence, NetworkBlocked, UsageError
from .events import SESSION_ID_VAR, error_record
from .execs import around_exec
from .log import Session
from .match import IgnoreRule, configured, ignore_rules
from .override import Override
from .record import (
    Recorder,
    api_keys_set,
    attach_workspace,
    check_live_export,
    make_header,
    open_workspace,
    read_back,
    tally_into,
)
from .text import plural, say

# The replayer, the stores and OpenTelemetry are imported where they are used: a process that
# `forkpoint record` starts (every Python process of the recorded command) needs none of them.
if TYPE_CHECKING:
    from .replay import Replayer


def start(rt: runtime.Runtime) -> None:
    """Install every capture hook and integration (once per process), then activate ``rt``.
    Raises :class:`~forkpoint.errors.ForkpointError` when another runtime is active."""
    hooks.install(rt.mode)
    runtime.activate(rt)


def finish_pending(rt: runtime.Runtime) -> None:
    """Write the calls whose response was still open when the run ended (``ended: "unfinished"``)."""
    for call in list(rt.pending):
        call.finish(ended="unfinished")


#: The program's telemetry providers (module, global, the method that sends what it holds, what that
#: takes), which hold what they export later: OpenTelemetry's SDK spans, metrics and logs (a
#: BatchSpanProcessor's queue, sent every 5 s and at exit; milliseconds to wait), the OpenAI Agents
#: SDK its traces (uploaded to OpenAI's trace endpoint by a batch processor of its own, with tracing
#: on by default; no timeout), LangSmith's client its runs (LangChain's and ``@traceable``'s, with
#: ``LANGSMITH_TRACING=true``, uploaded by a background thread; seconds to wait).
#: The globals, not ``get_tracer_provider()`` nor ``get_trace_provider()``: with
#: ``OTEL_PYTHON_TRACER_PROVIDER`` set and none set yet, the getter loads and sets one, and the
#: program's own ``set_tracer_provider`` is then refused (the Agents SDK's makes its default one);
#: nor ``get_cached_client()``, which would make a LangSmith client for a program that has none.
_TELEMETRY_PROVIDERS: tuple[tuple[str, str, str, tuple[int, ...]], ...] = (
    ("opentelemetry.trace", "_TRACER_PROVIDER", "force_flush", (5000,)),
    ("opentelemetry.metrics._internal", "_METER_PROVIDER", "force_flush", (5000,)),
    ("opentelemetry._logs._internal", "_LOGGER_PROVIDER", "force_flush", (5000,)),
    ("agents.tracing.setup", "GLOBAL_TRACE_PROVIDER", "force_flush", ()),
    ("langsmith.run_trees", "_CLIENT", "flush", (5,)),
)


def flush_telemetry() -> None:
    """Export what the program's telemetry providers (:data:`_TELEMETRY_PROVIDERS`) still hold: as
    a replay starts (what the program made before it goes out live, not to the replay's neutral
    answer) and as it ends, while the replay still answers their exports (after it, a replayed
    test in a pytest process that goes on would send the replayed run's spans to the real
    collector). A provider that cannot flush is left as it is."""
    for module, name, method, args in _TELEMETRY_PROVIDERS:
        flush = getattr(getattr(sys.modules.get(module), name, None), method, None)
        if callable(flush):
            try:
                flush(*args)  # (a replay answers an export at once)
            except Exception:  # (the program's telemetry: whatever it raises is no replay's)
                pass


def checked_tools(tools: Sequence[str], where: str) -> list[str]:
    """``module:qualname`` tool targets, each checked. Raises :class:`~forkpoint.errors.UsageError`
    naming ``where`` and the target."""
    for t in tools:
        try:
            parse_target(t)
        except ValueError as exc:
            raise UsageError(f"{where}: {exc}") from None
    return list(dict.fromkeys(tools))


@contextmanager
def agent_hooks(tools: Sequence[str], deterministic: bool | Sequence[str]) -> Iterator[None]:
    """For the block: record or serve the ``module:qualname`` tool targets, and (``deterministic``:
    True or module names) the agent's own clock and randomness (:mod:`forkpoint.capture.clock`)."""
    install_import_hook(tools)
    if deterministic:  # (only then: the module reads the interpreter's library folders as it loads)
        from .capture import clock

        clock.install(deterministic)
    try:
        yield
    finally:
        if deterministic:
            from .capture import clock

            clock.uninstall()
        disable_targets(tools)


def command_line() -> list[str]:
    """The command that started this process, as given (``python agent.py``, ``python -m pkg``,
    ``python -c …``): what a replay of a session recorded here runs again. ``sys.argv`` alone
    lacks the interpreter (a session recorded by ``python p.py`` held ``["p.py"]``, which no replay
    could run)."""
    return list(getattr(sys, "orig_argv", None) or sys.argv)


def _rules(ignore: Sequence[IgnoreRule | Mapping[str, Any]], where: str) -> tuple[IgnoreRule, ...]:
    return ignore_rules(list(ignore), where)


def finish_recording(rec: Recorder) -> list[str]:
    """End a recording's calls: write those still open, then name each ``host:port`` the run
    connected to that no recorded exchange accounts for (a client forkpoint does not capture: its
    calls will not replay), each Python program it started that is not recorded
    (:mod:`forkpoint.capture.programs`), and how many requests a framework answered from its own
    cache of model answers (DSPy's: never made, so not recorded). They go into the session as notes
    and to stderr. Returns the connections."""
    finish_pending(rec)
    pools = sys.modules.get("forkpoint.replay.pools")  # (not loaded: the program made no wait)
    if pools is not None:
        pools.end_recording(rec)
    later = [k for k in api_keys_set() if rec.api_keys is not None and k not in rec.api_keys]
    if later:  # (loaded while it ran, from a .env file say: the replay needs them too)
        rec.note("API-key variables set while the run ran", api_keys=later)
    missed = connections.unrecorded()
    if missed:
        # (those made past the socket hook, a gRPC channel's, are not refused by a replay in the
        # program either: its calls go out again, which the replay's verdict says)
        past = {"past_guard": unseen} if (unseen := connections.unrecorded(past_guard=True)) else {}
        rec.note("connections forkpoint did not record", unrecorded_connections=missed, **past)
        say(
            f"forkpoint: this run connected to {', '.join(missed)} through a client forkpoint does not "
            "capture: those calls are not in the session and will not be served on replay"
        )
    cached = {name: n for name, n in rec.cache_answers.items() if n}
    if cached:
        rec.note("answers a framework's own cache gave", answered_from_cache=cached)
        say(
            f"forkpoint: {runtime.cached_answers_text(cached)} (in memory or on disk): those requests "
            "never reached the model, so they are not in the session, and a replay that does not find "
            f"them in that cache makes them and diverges. Record with the cache off ({runtime.cache_off_text(cached)})"
        )
    started = programs.unrecorded()
    if started:
        rec.note(programs.NOTE, unrecorded_programs=started)
        say(
            f"forkpoint: this run started {plural(len(started), 'Python program')} forkpoint does not record "
            f"({'; '.join(started[:3])}{' …' if len(started) > 3 else ''}): a model or tool call they made "
            "is not in the session, and a replay runs them as they run without forkpoint. Record them "
            "from inside with forkpoint.record(), or run them in a recorded tool (docs/format.md)"
        )
    return missed


@contextmanager
def record(
    name: str | None = None,
    *,
    store: str | Path | None = None,
    tags: Mapping[str, str] | None = None,
    argv: Sequence[str] | None = None,
    workspace: str | Path | None = None,
    include_ignored: bool = False,
    tools: Sequence[str] = (),
    deterministic: bool | Sequence[str] = False,
    ignore: Sequence[IgnoreRule | Mapping[str, Any]] = (),
    otlp: str | None = None,
    otlp_content: bool = False,
    otlp_headers: Mapping[str, str] | None = None,
    encrypt_to: Sequence[str] | None = None,
) -> Iterator[Recorder]:
    """Record every model call and tool call made inside the block into a new session.

    ``store`` defaults to ``$FORKPOINT_STORE`` or ``.forkpoint/``. With ``workspace`` (a directory;
    its git repository if it is in one), checkpoints are taken before each model call (resumable) and
    between the tool calls of one turn (observable); see :mod:`forkpoint.checkpoint`.
    ``tools``: functions to record as tools, by ``module:qualname`` (like ``forkpoint record
    --tool``). ``deterministic``: also record the values the agent's own code reads from the clock,
    ``uuid`` and ``random`` (True, or the names of the agent's modules; :mod:`forkpoint.capture.clock`).
    ``ignore``: match rules beyond the configuration's, ``{"path", "regex"?, "tool"?}`` each
    (``docs/matching.md``). All three are kept in the header, so a replay applies them again.
    With ``otlp`` (an OTLP/HTTP endpoint), the session's spans are also sent there while it is
    recorded, each call's span as the call ends (:class:`~forkpoint.otel.LiveExport`;
    ``otlp_content`` and ``otlp_headers`` are ``forkpoint export``'s ``--content`` and ``--header``).
    ``encrypt_to``: age recipients (``age1…`` public keys, or files of them) to encrypt the session
    for (default: ``[store] encrypt_to`` of the configuration; ``[]``: not encrypted); reading it
    back then needs an identity of one of them (``$FORKPOINT_IDENTITY``), see ``docs/security.md``.
        Yields the :class:`Recorder`; ``recorder.session_path`` is the new session directory, and the
    session id is in ``$FORKPOINT_SESSION_ID`` inside the block (restored after it). The session
    ends with an ``end`` event (``exit_code`` 0, or 1, the exception's type and the exception as
    ``uncaught`` if the block raised; a program that replaces itself through ``os.exec*`` inside the
    block ends it there: exit code unknown, ``reason`` ``"exec"``, incomplete, said on stderr). What
    the recording lacks (tools the model asked for that
    were never recorded, results that could not be recorded, connections of clients forkpoint does
    not capture) is said on stderr at the end.
    ``argv``: the command a replay runs (default: this process's, :func:`command_line`).
    Raises :class:`~forkpoint.errors.ForkpointError` when a recording or replay is already active
    in this process (before anything is written), :class:`~forkpoint.errors.SessionError` when
    the store cannot hold a new session,
    :class:`~forkpoint.errors.ConfigError` for a bad ignore rule, :class:`~forkpoint.errors.UsageError`
    for a ``name`` no one could name the session by (:data:`~forkpoint.store.NAME_RULE`), a tool
    target that is not ``module:qualname`` or a bad recipient in ``encrypt_to``,
    :class:`~forkpoint.errors.ExportError` for an
    ``otlp`` that is no http(s) URL or a missing ``otel`` extra (before anything is recorded).
    """
    from .otel import LiveExport
    from .store import NAME_RULE, name_problem, open_store

    runtime.check_free("record")  # (inside a replay: refused before its session exists)
    if name is not None and (why := name_problem(name)):
        raise UsageError(f"forkpoint.record(name=…): {name!r} {why}; {NAME_RULE}")
    targets = checked_tools(tools, "forkpoint.record(tools=…)")
    rules = _rules(ignore, "forkpoint.record(ignore=…)")
    configured()  # a bad [match] rule in the configuration: refused before a session exists
    live = LiveExport(otlp, content=otlp_content, headers=otlp_headers) if otlp else None
    target = open_store(store)  # a directory, or an fsspec URL's local mirror (uploaded when the block ends)
    ws = open_workspace(workspace, target.path, include_ignored)
    header = make_header(
        argv=list(argv) if argv is not None else command_line(),
        name=name,
        tags=tags,
        tools=targets,
        deterministic=deterministic,
        ignore=rules,
        encrypt_to=encrypt_to,
    )
    header["workspace"] = ws.describe() if ws else None
    if argv is None:  # (the program that ran records itself again when it runs: runtime.check_free)
        header["records_itself"] = True
    check_live_export(header, live)
    with target.create(header) as session, agent_hooks(targets, deterministic):
        if live is not None:
            live.start(session.path)
            session.on_close.append(live.finish)
        rec = Recorder(session.writer, workspace=attach_workspace(ws, session.writer))
        start(rec)
        before = os.environ.get(SESSION_ID_VAR)
        os.environ[SESSION_ID_VAR] = session.session_id  # for the block and the processes it starts
        ended: list[str] = []

        def finish() -> None:
            if before is None:
                os.environ.pop(SESSION_ID_VAR, None)
            else:
                os.environ[SESSION_ID_VAR] = before
            runtime.deactivate(rec)
            finish_recording(rec)
            session.incomplete = rec.failure or (ended[0] if ended else None)
            lacks, skipped = rec.tally()
            session.unrecorded_tools = lacks.unrecorded_tools() if lacks is not None else {}
            tally_into(session, lacks)
            for warning in lacks.warnings() if lacks is not None else [skipped or ""]:
                say(f"forkpoint: WARNING: {warning}")

        def at_exec(_file: str, _args: list[str], _env: dict[str, str]) -> Callable[[], None]:
            # The block never ends: the program becomes another, whose calls are not recorded (only
            # `forkpoint record` hands its recording on). The session ends here, saying so.
            ended.append(
                "the program replaced itself through exec inside forkpoint.record(): what it did next is not in the session"
            )
            say(f"forkpoint: WARNING: session {session.session_id} ends here: {ended[0]}")
            finish()
            session.end(None, reason="exec")
            session.close(quiet=session.quiet)
            return lambda: None  # (an exec that fails: the block goes on, unrecorded, as said)

        put_back = around_exec(at_exec)
        try:
            yield rec
        finally:
            put_back()
            if not ended:
                finish()


@contextmanager
def replay(
    session: str | Path | Session,
    *,
    store: str | Path | None = None,
    allow_hosts: Sequence[str] = (),
    models: str = "replay",
    tools: str = "replay",
    on_divergence: str = "stop",
    overrides: Sequence[str | Override] = (),
    record_child: bool | None = None,
    report_path: str | Path | None = None,
    live_tools: Sequence[str] = (),
    ignore: Sequence[IgnoreRule | Mapping[str, Any]] = (),
    tool_targets: Sequence[str] = (),
    strict: bool = False,
) -> Iterator[Replayer]:
    """Serve every model call and tool call inside the block from ``session``.

    ``session`` is a :class:`~forkpoint.log.Session`, a path, an id, an id prefix, ``"last"`` or a
    session name (see :func:`forkpoint.store.resolve`).
    ``models``, ``tools``, ``on_divergence``, ``overrides`` (specs or parsed) and ``live_tools``
    (tool names that run for real) are those of :class:`~forkpoint.replay.Replayer`. ``ignore``:
    match rules beyond those of the configuration and of the session's header
    (``docs/matching.md``). ``tool_targets``: functions served as tools by ``module:qualname``,
    beyond those the session was recorded with. A session recorded with ``deterministic`` has the
    agent's clock and randomness served too. The run is written to a new child session next to its
    parent when ``record_child`` is true — by default whenever something can make it differ from the
    recording (an override, a live source or live tool, or a policy other than ``stop``).
    ``strict``: plain HTTP that differs from the recording only in ids diverges (see
    :class:`~forkpoint.replay.Replayer`).
    The block's end is the run's end: exit code 0, or 1 and the exception as uncaught when it
    raised; the report (after the block) compares it with the recording's.
    SDK API-key variables that are unset get a placeholder for the duration. Yields the
    :class:`~forkpoint.replay.Replayer`; ``replayer.report()`` gives the outcome (also written to
    ``report_path``). Raises :class:`~forkpoint.errors.ForkpointError` when a recording or replay
    is already active in this process (before anything is written or set),
    :class:`~forkpoint.errors.OverrideError` for an override that does not
    fit the session, :class:`~forkpoint.errors.UsageError` for one that would never apply (a call
    the run makes live, or one made inside a tool call the replay serves whole), :class:`~forkpoint.errors.SessionError` for one that cannot be read,
    :class:`~forkpoint.errors.ConfigError` for a bad ignore rule.
    """
    from .replay import (
        Replayer,
        create_child,
        drop_placeholder_env,
        end_divergence,
        placeholder_env,
        write_report,
    )
    from .store import resolve

    runtime.check_free("replay")  # (before a child session or the API-key placeholders)
    loaded_here = not isinstance(session, Session)  # (a Session given in is never changed)
    if not isinstance(session, Session):
        session = Session.load(resolve(session, store), derived=False, share_lists=True)
    parsed = [o if isinstance(o, Override) else override.parse(o) for o in overrides]
    # Check every override fits the session before a child session is written for the run.
    calls = session.calls()
    resolved = override.resolve(parsed, calls)
    override.refuse_unreached(resolved, calls, models=models, tools=tools, live_tools=live_tools)
    for line in override.untyped(resolved, calls):
        say(line)
    rules = _rules(ignore, "forkpoint.replay(ignore=…)")
    targets = checked_tools(
        [*(session.header.get("tools") or []), *tool_targets], "forkpoint.replay(tool_targets=…)"
    )
    deterministic: Any = session.header.get("deterministic") or False
    what_if = (
        bool(parsed) or models == "live" or tools == "live" or on_divergence != "stop" or bool(live_tools)
    )
    child = None
    if record_child if record_child is not None else what_if:
        child = create_child(
            session,
            argv=command_line(),
            models=models,
            tools=tools,
            on_divergence=on_divergence,
            overrides=[o.spec for o in parsed],
            live_tools=live_tools,
        )
    rt = Replayer(
        session,
        allow_hosts=allow_hosts,
        models=models,
        tools=tools,
        on_divergence=on_divergence,
        overrides=parsed,
        child=child.writer if child else None,
        live_tools=live_tools,
        ignore=rules,
        strict=strict,
        hand_over=loaded_here,
    )
    for warning in rt.ignore_warnings:
        say(f"forkpoint: WARNING: {warning}")
    added = placeholder_env(session)
    os.environ.update(added)
    flush_telemetry()  # (what the program's run made before the replay goes out live, as it would)
    hooks = ExitStack()
    hooks.enter_context(agent_hooks(targets, deterministic))
    try:
        start(rt)
    except BaseException:
        hooks.close()
        raise
    failed: BaseException | None = None
    try:
        try:
            yield rt
        finally:  # (an interrupt while an exporter blocks is the replay's: it still ends)
            with rt.ending():
                flush_telemetry()
    except BaseException as exc:
        failed = exc
        raise
    finally:
        runtime.deactivate(rt)
        hooks.close()
        drop_placeholder_env(added)
        own = isinstance(failed, Divergence | NetworkBlocked)  # reported as what they are
        rt.finish(1 if failed else 0, [error_record(failed)] if failed is not None and not own else [])
        if child is not None:
            finish_pending(rt)
            started = programs.child_note(rt.root_span)
            if started is not None:
                child.writer.append(started)
            tally_into(child, read_back(child.path)[0])  # (calls no single recorder tallied)
            child.end(
                1 if failed else 0,
                reason=type(failed).__name__ if failed else None,
                uncaught=list(rt.uncaught),
                divergence=end_divergence(rt.report(), child.path),
            )
            child.close()
        if report_path:
            write_report(Path(report_path), rt.report())


def note(text: str, **data: object) -> int | None:
    """Add a ``note`` event (free text plus JSON ``data``) to the session being recorded.

    Returns its seq, or None when nothing is being recorded.
    """
    rt = runtime.active()
    if isinstance(rt, Recorder):
        return rt.note(text, **data)
    return None


def checkpoint(reason: str = "manual") -> int | None:
    """Take a checkpoint of the recorded workspace now (see :mod:`forkpoint.checkpoint`).

    Resumable unless tool calls of the last model response are still outstanding, or it is taken
    inside a tool's body (then observable). Returns its seq, or None when nothing is being recorded
    or the recording has no workspace (a warning on stderr says so, once).
    """
    rt = runtime.active()
    if not isinstance(rt, Recorder):
        return None
    if rt.workspace is None and not rt.no_workspace_said:  # (asked for, and none taken: said, once)
        rt.no_workspace_said = True
        say(
            "forkpoint: WARNING: forkpoint.checkpoint() took no checkpoint: this recording has no workspace "
            "(it runs outside a git repository, or with --no-workspace); record with --workspace DIR "
            "(forkpoint.record(workspace=DIR)) to checkpoint DIR"
        )
    return rt.checkpoint(reason=reason)
