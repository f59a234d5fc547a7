"""Recording: the :class:`Recorder` runtime and the ``forkpoint.record()`` context manager."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import __version__, runtime
from .log import SessionWriter, new_span_id
from .match import model_key, normalize_request, tool_key
from .store import session_finished, session_started, store_dir

if TYPE_CHECKING:
    from .capture import _Call
    from .checkpoint import Workspace

#: Packages whose versions go into every session header (when installed).
TRACKED_PACKAGES = (
    "openai",
    "anthropic",
    "httpx",
    "httpx2",
    "google-genai",
    "pydantic-ai-slim",
    "openai-agents",
)


def summary_of(event: dict[str, Any]) -> dict[str, Any]:
    """The provider-aware summary of a model call event (see :func:`forkpoint.providers.summarize`)."""
    from .providers import recorded_response, summarize

    req = event["request"]
    return dict(
        summarize(req["url"], req["body"] if req["body_kind"] == "json" else None, recorded_response(event))
    )


def package_versions() -> dict[str, str]:
    """Versions of python, forkpoint and the tracked SDK/HTTP packages that are installed."""
    out = {"python": platform.python_version(), "forkpoint": __version__}
    for name in TRACKED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def git_state(cwd: Path) -> dict[str, Any] | None:
    """``{"commit", "branch", "dirty"}`` of the git repository containing ``cwd``, or None."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
    except (OSError, subprocess.SubprocessError):
        return None
    try:
        branch: str | None = git("rev-parse", "--abbrev-ref", "HEAD")
        dirty = bool(git("--no-optional-locks", "status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        branch, dirty = None, False
    return {"commit": commit, "branch": None if branch == "HEAD" else branch, "dirty": dirty}


def make_header(
    *,
    argv: Sequence[str],
    cwd: Path | None = None,
    name: str | None = None,
    tags: Mapping[str, str] | None = None,
    parent: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The header fields of a new session (the log adds format, version, id, creation time)."""
    cwd = Path(cwd or os.getcwd()).resolve()
    all_tags = {"agent_version": None, "prompt_version": None, **dict(tags or {})}
    return {
        "name": name,
        "argv": list(argv),
        "cwd": str(cwd),
        "tags": all_tags,
        "versions": package_versions(),
        "git": git_state(cwd),
        "parent": parent,
        "span_id": new_span_id(),
        "platform": sys.platform,
    }


class Recorder:
    """The recording runtime: receives finished model and tool calls and appends them to the log.

    Thread-safe. ``pending`` holds model calls whose response stream is still open; :meth:`close`
    writes those that were never closed (``ended: "unfinished"``).
    """

    mode = "record"

    def __init__(self, writer: SessionWriter, *, workspace: Workspace | None = None) -> None:
        self.writer = writer
        self.workspace = workspace
        self.root_span: str = writer.header.get("span_id") or new_span_id()
        self.pending: set[_Call] = set()
        self.counts = {"model_call": 0, "tool_call": 0, "checkpoint": 0}
        self._lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()
        self._turn_tools_expected = 0  # tool calls the last model response asked for
        self._turn_tools_done = 0
        self._closed = False

    # -- checkpoints (only with a workspace)

    def before_model_call(self, request: dict[str, Any]) -> None:
        """Right before a model call is sent: every tool result of the previous turn is in, so this
        is a resumable boundary. Takes a checkpoint whose carried context is this request's messages."""
        if self.workspace is None:
            return
        from .checkpoint import carried_context

        body = request.get("body") if request.get("body_kind") == "json" else None
        # A model call made inside a tool's body is not an agent boundary: that tool is unfinished.
        boundary = "observable" if runtime.current_span.get() else "resumable"
        self.checkpoint(boundary=boundary, context=carried_context(body), reason="before model call")

    def checkpoint(
        self, *, boundary: str | None = None, context: dict[str, Any] | None = None, reason: str = "manual"
    ) -> int | None:
        """Take a checkpoint of the workspace now; returns its seq (None without a workspace).

        ``boundary`` defaults to ``resumable`` unless tool calls the last model response asked for are
        still outstanding (then ``observable``).
        """
        if self.workspace is None:
            return None
        from .checkpoint import checkpoint_event

        with self._checkpoint_lock:
            if boundary is None:
                outstanding = self._turn_tools_done < self._turn_tools_expected
                boundary = "observable" if outstanding or runtime.current_span.get() else "resumable"
            event = checkpoint_event(
                self.workspace,
                self.writer.blobs,
                boundary=boundary,
                turn=self.counts["model_call"] + 1,
                context=context,
                reason=reason,
            )
            event.update(
                span_id=new_span_id(),
                parent_span_id=runtime.current_span.get() or self.root_span,
                pid=os.getpid(),
            )
            return self._append(event)

    @property
    def session_path(self) -> Path:
        """The session directory being written."""
        return self.writer.path

    def model_call_done(self, event: dict[str, Any]) -> None:
        """Append a finished model call (built by the capture layer); adds its key."""
        self._append(self.enrich_model_call(event))
        with self._checkpoint_lock:
            self._turn_tools_expected = len(summary_of(event).get("tool_calls") or [])
            self._turn_tools_done = 0

    @staticmethod
    def enrich_model_call(event: dict[str, Any]) -> dict[str, Any]:
        """Add ``key`` and ``pid`` to a captured model call. (Its provider-aware ``summary`` is not
        stored: readers derive it from the request and response, see :func:`summary_of`.)"""
        req = event["request"]
        event["key"] = model_key(normalize_request(req["method"], req["url"], req["headers"], req["body"]))
        event["pid"] = os.getpid()
        return event

    def tool_call_done(self, event: dict[str, Any]) -> None:
        """Append a finished tool call (built by the tool wrapper); adds its key. With a workspace, a
        tool call that is not the last one its turn asked for is followed by an observable checkpoint."""
        event["key"] = tool_key(event["tool"], event["args"])
        event["pid"] = os.getpid()
        self._append(event)
        with self._checkpoint_lock:
            self._turn_tools_done += 1
            more = self._turn_tools_done < self._turn_tools_expected
        if more:
            self.checkpoint(
                boundary="observable", reason=f"after tool {event['tool']}, before the rest of its turn"
            )

    def note(self, text: str, **data: Any) -> int:
        """Append a ``note`` event with free text and JSON data; returns its seq."""
        return self._append(
            {
                "type": "note",
                "span_id": new_span_id(),
                "parent_span_id": runtime.current_span.get() or self.root_span,
                "pid": os.getpid(),
                "text": text,
                "data": data,
            }
        )

    def _append(self, event: dict[str, Any]) -> int:
        with self._lock:
            if event["type"] in self.counts:
                self.counts[event["type"]] += 1
        return self.writer.append(event)

    def close(self) -> None:
        """Write unfinished calls and close the log. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        for call in list(self.pending):
            call.finish(ended="unfinished")
        self.writer.close()


def open_workspace(root: str | Path | None, store: Path, include_ignored: bool = False) -> Workspace | None:
    """The :class:`~forkpoint.checkpoint.Workspace` to checkpoint, or None when ``root`` is None."""
    if root is None:
        return None
    from .checkpoint import Workspace

    return Workspace.open(Path(root), store, include_ignored=include_ignored)


def attach_workspace(ws: Workspace | None, writer: SessionWriter) -> Workspace | None:
    """Point the workspace's new git objects at the session's ``git-objects`` folder."""
    if ws is not None:
        ws.objects = writer.path / "git-objects"
    return ws


def end_event(exit_code: int | None, started: float, *, reason: str | None = None) -> dict[str, Any]:
    """The ``end`` event of a session: exit code, wall time since ``started`` (perf_counter)."""
    return {
        "type": "end",
        "exit_code": exit_code,
        "duration_ms": round((time.perf_counter() - started) * 1000, 3),
        "reason": reason,
    }


@contextmanager
def record(
    name: str | None = None,
    *,
    store: str | Path | None = None,
    tags: Mapping[str, str] | None = None,
    argv: Sequence[str] | None = None,
    workspace: str | Path | None = None,
    include_ignored: bool = False,
) -> Iterator[Recorder]:
    """Record every model call and tool call made inside the block into a new session.

    ``store`` defaults to ``$FORKPOINT_STORE`` or ``.forkpoint/``. With ``workspace`` (a directory;
    its git repository if it is in one), checkpoints are taken before each model call (resumable) and
    between the tool calls of one turn (observable); see :mod:`forkpoint.checkpoint`.
    Yields the :class:`Recorder`; ``recorder.session_path`` is the new session directory. The session
    ends with an ``end`` event (``exit_code`` 0, or 1 and the exception type if the block raised).
    """
    store_path = store_dir(store)  # a path, or an fsspec URL's local mirror (uploaded when the block ends)
    ws = open_workspace(workspace, store_path, include_ignored)
    header = make_header(argv=list(argv) if argv is not None else list(sys.argv), name=name, tags=tags)
    header["workspace"] = ws.describe() if ws else None
    writer = SessionWriter.create(store_path, header)
    session_started(writer.path)
    rec = Recorder(writer, workspace=attach_workspace(ws, writer))
    runtime.activate(rec)
    started = time.perf_counter()
    code, reason = 0, None
    try:
        yield rec
    except BaseException as exc:
        code, reason = 1, type(exc).__name__
        raise
    finally:
        runtime.deactivate(rec)
        for call in list(rec.pending):
            call.finish(ended="unfinished")
        writer.append(end_event(code, started, reason=reason))
        rec.close()
        session_finished(writer.path)
