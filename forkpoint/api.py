"""The Python API's entry points: recording and replaying a block of code in this process.

This is where the layers meet: the capture hooks and framework integrations are installed
(:func:`start`), a recorder or replayer is activated, and the session's life cycle is run through
its store (:meth:`forkpoint.store.Store.create`). ``forkpoint record``/``replay`` do the same in the
agent's own process through :mod:`forkpoint._boot`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from . import capture, integrations, override, runtime
from .log import Session
from .otel import LiveExport
from .override import Override
from .record import Recorder, attach_workspace, make_header, open_workspace
from .replay import (
    API_KEY_VARS,
    PLACEHOLDER_KEY,
    Replayer,
    create_child,
    install_network_guard,
    write_report,
)
from .store import open_store, resolve


def start(rt: runtime.Runtime) -> None:
    """Install every capture hook and integration (once per process), then activate ``rt``.
    Raises :class:`~forkpoint.errors.ForkpointError` when another runtime is active."""
    capture.install()
    integrations.install()  # framework tool integrations: pydantic-ai, OpenAI Agents SDK, google-genai…
    if isinstance(rt, Replayer):
        install_network_guard()
    runtime.activate(rt)


def finish_pending(rt: runtime.Runtime) -> None:
    """Write the calls whose response was still open when the run ended (``ended: "unfinished"``)."""
    for call in list(rt.pending):
        call.finish(ended="unfinished")


@contextmanager
def record(
    name: str | None = None,
    *,
    store: str | Path | None = None,
    tags: Mapping[str, str] | None = None,
    argv: Sequence[str] | None = None,
    workspace: str | Path | None = None,
    include_ignored: bool = False,
    otlp: str | None = None,
    otlp_content: bool = False,
    otlp_headers: Mapping[str, str] | None = None,
) -> Iterator[Recorder]:
    """Record every model call and tool call made inside the block into a new session.

    ``store`` defaults to ``$FORKPOINT_STORE`` or ``.forkpoint/``. With ``workspace`` (a directory;
    its git repository if it is in one), checkpoints are taken before each model call (resumable) and
    between the tool calls of one turn (observable); see :mod:`forkpoint.checkpoint`.
    With ``otlp`` (an OTLP/HTTP endpoint), the session's spans are also sent there while it is
    recorded, each call's span as the call ends (:class:`~forkpoint.otel.LiveExport`;
    ``otlp_content`` and ``otlp_headers`` are ``forkpoint export``'s ``--content`` and ``--header``).
    Yields the :class:`Recorder`; ``recorder.session_path`` is the new session directory. The session
    ends with an ``end`` event (``exit_code`` 0, or 1 and the exception type if the block raised).
    Raises :class:`~forkpoint.errors.SessionError` when the store cannot hold a new session, and
    :class:`~forkpoint.errors.ExportError` for an ``otlp`` that is no http(s) URL or a missing
    ``otel`` extra (before anything is recorded).
    """
    live = LiveExport(otlp, content=otlp_content, headers=otlp_headers) if otlp else None
    target = open_store(store)  # a directory, or an fsspec URL's local mirror (uploaded when the block ends)
    ws = open_workspace(workspace, target.path, include_ignored)
    header = make_header(argv=list(argv) if argv is not None else list(sys.argv), name=name, tags=tags)
    header["workspace"] = ws.describe() if ws else None
    with target.create(header) as session:
        if live is not None:
            live.start(session.path)
            session.on_close.append(live.finish)
        rec = Recorder(session.writer, workspace=attach_workspace(ws, session.writer))
        start(rec)
        try:
            yield rec
        finally:
            runtime.deactivate(rec)
            finish_pending(rec)


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
) -> Iterator[Replayer]:
    """Serve every model call and tool call inside the block from ``session``.

    ``session`` is a :class:`~forkpoint.log.Session`, a path, an id, an id prefix, ``"last"`` or a
    session name (see :func:`forkpoint.store.resolve`).
    ``models``, ``tools``, ``on_divergence`` and ``overrides`` (specs or parsed) are those of
    :class:`~forkpoint.replay.Replayer`. The run is written to a new child session next to its parent
    when ``record_child`` is true — by default whenever something can make it differ from the
    recording (an override, a live source, or a policy other than ``stop``).
    SDK API-key variables that are unset get a placeholder for the duration. Yields the
    :class:`~forkpoint.replay.Replayer`; ``replayer.report()`` gives the outcome (also written to
    ``report_path``). Raises :class:`~forkpoint.errors.OverrideError` for an override that does not
    fit the session, :class:`~forkpoint.errors.SessionError` for one that cannot be read.
    """
    if not isinstance(session, Session):
        session = Session.load(resolve(session, store))
    parsed = [o if isinstance(o, Override) else override.parse(o) for o in overrides]
    # Check every override fits the session before a child session is written for the run.
    override.resolve(parsed, session.calls())
    what_if = bool(parsed) or models == "live" or tools == "live" or on_divergence != "stop"
    child = None
    if record_child if record_child is not None else what_if:
        child = create_child(
            session,
            argv=list(sys.argv),
            models=models,
            tools=tools,
            on_divergence=on_divergence,
            overrides=[o.spec for o in parsed],
        )
    rt = Replayer(
        session,
        allow_hosts=allow_hosts,
        models=models,
        tools=tools,
        on_divergence=on_divergence,
        overrides=parsed,
        child=child.writer if child else None,
    )
    added = [k for k in API_KEY_VARS if not os.environ.get(k)]
    for k in added:
        os.environ[k] = PLACEHOLDER_KEY
    start(rt)
    failed: BaseException | None = None
    try:
        yield rt
    except BaseException as exc:
        failed = exc
        raise
    finally:
        runtime.deactivate(rt)
        for k in added:
            if os.environ.get(k) == PLACEHOLDER_KEY:
                del os.environ[k]
        if child is not None:
            finish_pending(rt)
            child.end(1 if failed else 0, reason=type(failed).__name__ if failed else None)
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
    or the recording has no workspace.
    """
    rt = runtime.active()
    if isinstance(rt, Recorder):
        return rt.checkpoint(reason=reason)
    return None
