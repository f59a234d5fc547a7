"""Recording: the :class:`Recorder` runtime, and the header of a new session.

The recorder receives finished calls from the capture hooks (through :class:`forkpoint.runtime.Runtime`)
and appends them to the log, taking checkpoints at agent boundaries when it has a workspace. Starting
and finishing a recording (hooks, activation, the session's life cycle) is :func:`forkpoint.api.record`.
"""

from __future__ import annotations

import bisect
import contextlib
import copy
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from . import plugins, runtime
from ._version import __version__
from .canonical import digest, maybe_json
from .errors import IdentityError, SessionError, UsageError
from .events import (
    MAX_HASH_SEED,
    VALUE_FNS,
    HttpRequest,
    ModelCallEvent,
    ToolCallEvent,
    ValueEvent,
    endpoint,
    is_tool_call,
    mcp_session_request,
    new_span_id,
    tool_matches,
    withheld_bodies,
)
from .log import (
    IDENTITY_ENV,
    Session,
    SessionWriter,
    configured_recipients,
    encryption_table,
    identity_path,
    parse_recipients,
)
from .match import Ignore, IgnoreRule, configured, event_key, header_json, header_rules, key_spec
from .redact import holds_placeholder, scrub_tags
from .sdks import api_key_vars, sdk_packages  # (the providers: where a call is read; not in record's parent)
from .text import plural, say

if TYPE_CHECKING:  # checkpoints are imported where a workspace is taken: most recordings take none
    from .checkpoint import Workspace
    from .store import Recording

#: Packages whose versions go into every session header (when installed): the providers' SDKs, the
#: HTTP clients forkpoint captures, the agent frameworks it integrates with, and the libraries that
#: render their requests (langchain-openai, litellm): an upgrade of any of them can change what is
#: sent, and a divergence report names the ones whose version changed since the recording.
TRACKED_PACKAGES = (
    *sdk_packages(),
    "httpx",
    "httpx2",
    "urllib3",
    "requests",
    "aiohttp",
    "pydantic-ai-slim",
    "openai-agents",
    "langchain-core",
    "langchain-openai",
    "langchain-anthropic",
    "langgraph",
    "litellm",
    "mcp",
    "smolagents",
    "strands-agents",
    "agno",
    "dspy",
    "crewai",
)


def package_versions() -> dict[str, str]:
    """Versions of python, forkpoint and the tracked SDK/HTTP packages that are installed."""
    return {
        "python": sys.version.split()[0],  # what platform.python_version() says, without importing platform
        "forkpoint": __version__,
        **plugins.versions(TRACKED_PACKAGES),
    }


def git_state(cwd: Path) -> dict[str, Any] | None:
    """``{"commit", "branch", "dirty"}`` of the git repository containing ``cwd`` (``branch`` None
    when ``HEAD`` is detached; ``dirty``: a tracked file differs from ``HEAD``), or None outside a
    repository or before its first commit. One git process: ``status --porcelain=v2 --branch``
    (git-status(1), "Porcelain Format Version 2": ``# branch.oid``, ``# branch.head``, then one line
    per changed path)."""
    from .checkpoint.git import outside_work_trees

    if "GIT_DIR" not in os.environ and outside_work_trees(cwd):
        return None
    try:
        out = subprocess.run(
            ["git", "--no-optional-locks", "status", "--porcelain=v2", "--branch", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.splitlines()
    heads = dict(line[2:].split(" ", 1) for line in lines if line.startswith("# ") and " " in line[2:])
    commit, branch = heads.get("branch.oid"), heads.get("branch.head")
    if not commit or commit == "(initial)":
        return None
    dirty = any(line and not line.startswith("#") for line in lines)
    return {"commit": commit, "branch": None if branch in (None, "(detached)") else branch, "dirty": dirty}


def make_header(
    *,
    argv: Sequence[str],
    cwd: Path | None = None,
    name: str | None = None,
    tags: Mapping[str, str] | None = None,
    parent: dict[str, Any] | None = None,
    tools: Sequence[str] = (),
    deterministic: bool | Sequence[str] = False,
    ignore: Sequence[IgnoreRule] = (),
    encrypt_to: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The header fields of a new session (the log adds format, version, id, creation time).

    ``tools`` (``module:qualname`` targets), ``deterministic`` (True or module names) and the
    ``ignore`` rules given beyond the configuration's are kept so that a replay applies them again;
    each is written only when given. ``encrypt_to``: age recipients (``age1…``, or files of them)
    the session is encrypted for (``encryption``, :mod:`forkpoint.log.crypto`); None: those of
    ``[store] encrypt_to`` in the configuration, if any. Raises
    :class:`~forkpoint.errors.UsageError` for a bad recipient, :class:`~forkpoint.errors.ConfigError`
    for a bad ``[store]`` table. ``keys`` is the :func:`~forkpoint.match.key_spec` the
    recorder's keys are computed under (a replay under the same spec uses them as they are)."""
    given_cwd = cwd is not None
    cwd = Path(cwd or os.getcwd()).resolve()
    all_tags = {"agent_version": None, "prompt_version": None, **scrub_tags(tags or {})}
    header: dict[str, Any] = {
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
    zone = local_zone()
    if zone:
        header["timezone"] = zone
    if tools:
        header["tools"] = list(tools)
    if deterministic:
        header["deterministic"] = deterministic if isinstance(deterministic, bool) else list(deterministic)
        header["deterministic_reads"] = list(VALUE_FNS)
    if ignore:
        header["match"] = {"ignore": header_json(ignore)}
    # (the configuration in force: the anchored one under the pytest plugin, config.anchored, else
    # the current directory's; a cwd given, a fork arm's, is where its run's configuration is)
    recipients = (
        configured_recipients(cwd if given_cwd else None)
        if encrypt_to is None
        else parse_recipients(encrypt_to, "encrypt_to")
    )
    if recipients:
        header["encryption"] = encryption_table(recipients)
    header["keys"] = key_spec(configured() + ignore)
    header["api_keys"] = api_keys_set()
    return header


def api_keys_set() -> list[str]:
    """Which of the providers' API-key variables (:func:`forkpoint.sdks.api_key_vars`) are set
    now: their names only. A replay sets placeholders for those a recording had (the SDKs refuse
    to start without one), and for no other: a program may choose its provider by which is set."""
    return [k for k in api_key_vars() if os.environ.get(k)]


def refuse_self_recording(header: Mapping[str, Any], session_id: str, how: str) -> None:
    """Refuse to run the recorded command of a session its own program recorded with
    ``forkpoint.record()`` (header ``records_itself``): run again, it would record itself inside the
    replay, which refuses it, and end with a traceback. ``how``: the command line that gives
    another command (``forkpoint replay ID -- python agent.py``). Raises :class:`UsageError`."""
    if header.get("records_itself"):
        argv = " ".join(str(a) for a in header.get("argv") or [])
        raise UsageError(
            f"session {session_id} was recorded by forkpoint.record() inside its own program ({argv}), which "
            "records itself again when it runs: replay it in Python with forkpoint.replay(), give a command "
            # (the block out: run as it is, `forkpoint record -- …` records it again, in a session of its own)
            f"that does not record itself ({how}), or take the forkpoint.record() block out of the program "
            f"and record it with forkpoint record -- {argv}"
        )


def check_live_export(header: Mapping[str, Any], live: object | None) -> None:
    """Refuse, before a session exists, a live export of an encrypted session without an identity
    at hand: the export follows the log as it is written, so it must open it. Raises
    :class:`~forkpoint.errors.UsageError`."""
    if live is None or header.get("encryption") is None:
        return
    why = f"set {IDENTITY_ENV} (or --identity FILE) to an age identity of one of its recipients"
    if identity_path() is not None:
        from .log.crypto import Cipher

        # An identity that cannot open it would stop the run after its session was created: left
        # in the store header only, with no end (rm and prune keep such a session).
        cipher = Cipher(header["encryption"]["recipients"], "to be recorded")
        try:
            cipher.open(cipher.seal(b""), "a test payload")
            return
        except IdentityError as exc:
            why = str(exc)
    raise UsageError(
        f"a live OTLP export reads the session as it is written, and this session is encrypted: {why}"
    )


class Recorder:
    """The recording runtime: receives finished model and tool calls and appends them to the log.

    Thread-safe. ``pending`` holds model calls whose response stream is still open; :meth:`close`
    writes those that were never closed (``ended: "unfinished"``). Match keys are computed with the
    ignore rules of the configuration and of the session's header; the header's ``deterministic``
    says whether the agent's own clock and randomness are recorded.
    """

    mode: Literal["record"] = "record"

    def __init__(self, writer: SessionWriter, *, workspace: Workspace | None = None) -> None:
        self.writer = writer
        self.workspace = workspace
        self.ignore = configured() + header_rules(writer.header)
        spec = key_spec(self.ignore)
        # An event says what its key was computed under only when the header does not.
        self.keys = None if spec == writer.header.get("keys") else spec
        self.deterministic = bool(writer.header.get("deterministic"))
        #: The API-key variables set when the session started (None: a header that does not say).
        self.api_keys: list[str] | None = writer.header.get("api_keys")
        self.root_span: str = writer.header.get("span_id") or new_span_id()
        self.pending: set[Any] = set()
        self.cache_answers: Counter[str] = Counter()
        self.stored_states: dict[str, list[str | None]] = {}
        self.counts = {"model_call": 0, "tool_call": 0, "checkpoint": 0}
        #: The model calls of the programs this process was before it exec'd (``forkpoint._boot``):
        #: the turn its checkpoints go on from.
        self.turns_before = 0
        # Re-entrant, and writes of one thread are never nested (see _write): the garbage collector
        # may run a finalizer that ends a call (an unclosed HTTP response) inside any allocation.
        self._lock = threading.RLock()
        self._local = threading.local()
        #: Writes put off until their thread's write ended (see _write).
        self.deferred = 0
        self._checkpoint_lock = threading.Lock()
        self._turn_tools_expected = 0  # tool calls the last model response asked for
        self._checkpoint_failure_said = False
        #: Whether a :func:`forkpoint.checkpoint` call without a workspace was said (once).
        self.no_workspace_said = False
        self._turn_tools_done = 0
        self._closed = False
        #: What :meth:`warnings` says, kept as the calls are recorded (no reading back at the end).
        self.lacks = Lacks()
        self.appended = 0  # events this recorder wrote
        #: Why recording stopped early (a write failed: a full disk, a store gone), or None. From
        #: then on nothing more is written, and the session's ``end`` says it is incomplete.
        self.failure: str | None = None

    # -- checkpoints (only with a workspace)

    def before_model_call(self, request: HttpRequest) -> None:
        """Right before a model call is sent: every tool result of the previous turn is in, so this
        is a resumable boundary. Takes a checkpoint whose carried context is this request's messages."""
        if self.workspace is None:
            return
        from .providers import classify

        body = request.get("body") if request.get("body_kind") == "json" else None
        if classify(request["method"], request["url"], body, request["headers"]) != "model":
            return  # telemetry, MCP or plain HTTP: no agent boundary
        # A model call made inside a tool's body is not an agent boundary: that tool is unfinished.
        boundary = "observable" if runtime.current_span.get() else "resumable"
        from .checkpoint import carried_context

        self.checkpoint(boundary=boundary, context=carried_context(body), reason="before model call")

    def checkpoint(
        self, *, boundary: str | None = None, context: dict[str, Any] | None = None, reason: str = "manual"
    ) -> int | None:
        """Take a checkpoint of the workspace now; returns its seq (None without a workspace).

        ``boundary`` defaults to ``resumable`` unless tool calls the last model response asked for are
        still outstanding (then ``observable``).
        """
        if self.workspace is None or self.failure is not None:
            return None
        from .checkpoint import checkpoint_event

        with self._checkpoint_lock, self._guarded(), self._checkpointing():
            if boundary is None:
                outstanding = self._turn_tools_done < self._turn_tools_expected
                boundary = "observable" if outstanding or runtime.current_span.get() else "resumable"
            event = checkpoint_event(
                self.workspace,
                self.writer.blobs,
                boundary=boundary,
                turn=self.turns_before + self.counts["model_call"] + 1,
                context=context,
                reason=reason,
            )
            event.update(
                span_id=new_span_id(),
                parent_span_id=runtime.current_span.get() or self.root_span,
                pid=os.getpid(),
            )
            failed = event.get("error")
            if failed and not self._checkpoint_failure_said:  # (said once: each later one is tried again)
                self._checkpoint_failure_said = True
                say(
                    f"forkpoint: WARNING: a checkpoint of {self.workspace.root} could not be taken "
                    f"({failed['type']}: {failed['message']}): it holds no state, and restore and fork refuse "
                    "it; the recording goes on, and each later checkpoint is tried again"
                )
            return self._append(event)
        return None

    @property
    def session_path(self) -> Path:
        """The session directory being written."""
        return self.writer.path

    @contextlib.contextmanager
    def _checkpointing(self) -> Iterator[None]:
        """Marks this thread as taking a checkpoint (:meth:`_turn_counts`)."""
        self._local.checkpointing = True
        try:
            yield
        finally:
            self._local.checkpointing = False

    def _taking_checkpoint(self) -> bool:
        """Whether this thread is taking a checkpoint (:meth:`_checkpointing`)."""
        return bool(getattr(self._local, "checkpointing", False))

    def _turn_counts(self) -> contextlib.AbstractContextManager[Any]:
        """The lock of the turn's tool counts; held already in a thread taking a checkpoint, where a
        call ends when the garbage collector closes a recorded generator the program left open:
        taken again there, it waited for ever (a plain lock, in the thread that holds it)."""
        return contextlib.nullcontext() if self._taking_checkpoint() else self._checkpoint_lock

    def model_call_done(self, event: ModelCallEvent) -> None:
        """Append a finished model call (built by the capture layer) with its key and pid. (Its
        provider-aware ``summary`` is not stored: readers derive it, :func:`forkpoint.providers.summary`.)"""
        from .providers import tally_reading

        written = self._write(event, key=True)
        # What the session holds (scrubbed), as a reader of it would tally it.
        kind, tool_calls, results = tally_reading(
            written[1] if written is not None else event, self.lacks.sent
        )
        if written is not None:
            with self._lock:
                self.lacks.answered(kind, tool_calls, written[0], results)
                self.lacks.bodies(written[1], written[0])
        if kind != "model" or runtime.current_span.get():
            return  # not a turn of the agent (telemetry, MCP, plain HTTP, or inside a tool)
        with self._turn_counts():
            self._turn_tools_expected = len(tool_calls or [])
            self._turn_tools_done = 0

    def tool_call_done(self, event: ToolCallEvent) -> None:
        """Append a finished tool call (built by the tool wrapper) with its key and pid. With a
        workspace, a tool call that is not the last one its turn asked for is followed by an
        observable checkpoint."""
        written = self._write(event, key=True)
        if written is not None:
            held = holds_placeholder((written[1].get("result"), written[1].get("error")))  # (out of the lock)
            with self._lock:
                self.lacks.recorded(written[1], written[0], held)
        with self._turn_counts():
            self._turn_tools_done += 1
            more = self._turn_tools_done < self._turn_tools_expected
        if more and not self._taking_checkpoint():  # (inside one: that one is being taken now)
            self.checkpoint(
                boundary="observable", reason=f"after tool {event['tool']}, before the rest of its turn"
            )

    def value_done(self, event: ValueEvent) -> None:
        """Append a value the agent's own code read (``deterministic``) with its key and pid."""
        self._write(event, key=True)

    def note(self, text: str, **data: Any) -> int | None:
        """Append a ``note`` event with free text and JSON data; returns its seq (None once
        recording has stopped on a failed write, :attr:`failure`)."""
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

    def _append(self, event: Any) -> int | None:
        written = self._write(event)
        return written[0] if written is not None else None

    def _write(self, event: Any, *, key: bool = False) -> tuple[int, dict[str, Any]] | None:
        """Append ``event`` (``key``: :func:`keyed` first): its seq and stored (scrubbed) form,
        None once recording has stopped."""
        if self.failure is not None:
            return None
        local = self._local
        if getattr(local, "writing", False):
            # A call ended inside this thread's own write (a finalizer the garbage collector ran
            # there): written right after it, never into it, nor waiting on the lock it holds. As it
            # is now: a tool's result may be the program's own containers (values.encode's shared),
            # which the finalizer may change before then.
            local.deferred.append((copy.deepcopy(event), key))
            self.deferred += 1  # (its caller tallies nothing: the tally is read back)
            return None
        local.writing, local.deferred = True, []
        try:
            with self._lock:
                if event["type"] in self.counts:
                    self.counts[event["type"]] += 1
            written = None
            with self._guarded():
                written = self.writer.write(keyed(event, self.ignore, self.keys) if key else event)
                with self._lock:
                    self.appended += 1
        finally:
            local.writing = False
        pending, local.deferred = local.deferred, []
        for deferred, keyed_too in pending:
            self._write(deferred, key=keyed_too)
        return written

    def tally(self) -> tuple[Lacks | None, str | None]:
        """What the recording lacks (:class:`Lacks`): this recorder's tally when it wrote every event
        of its session, else read back (a forked child of the program appended to it too, or a line
        reached the file though its write failed); or None and why it could not be read back."""
        if self.writer.last_seq() == self.appended and not self.deferred:
            return self.lacks, None
        return read_back(self.writer.path)

    @contextlib.contextmanager
    def _guarded(self) -> Iterator[None]:
        """A write of the session that fails (a full disk, a store that went away, a value the log
        or the match key cannot hold) never raises into the agent, whose SDK call or tool is on the
        stack: recording stops, once, with a warning."""
        try:
            yield
        except Exception as exc:  # (an integer of more than 4,300 digits raised ValueError in the agent)
            self.stop(f"{type(exc).__name__}: {exc}")

    def stop(self, why: str) -> None:
        """Stop recording because a write failed (``why``): nothing more is written, a warning goes to
        stderr (once), and the ``end`` event, if it can still be written, says the session is
        incomplete (:attr:`failure`)."""
        with self._lock:
            if self.failure is not None:
                return
            self.failure = why
        say(
            f"forkpoint: WARNING: recording of session {self.writer.session_id} stopped: a write "
            f"failed ({why}); the program goes on unrecorded, and the session is incomplete"
        )

    def close(self) -> None:
        """Write unfinished calls and close the log. Safe to call twice; never raises for a failed
        write (see :meth:`stop`)."""
        if self._closed:
            return
        self._closed = True
        for call in list(self.pending):
            call.finish(ended="unfinished")
        with self._guarded():
            self.writer.close()
        if self.workspace is not None:
            self.workspace.close()


@overload
def keyed(event: ModelCallEvent, ignore: Ignore | None = None, keys: str | None = None) -> ModelCallEvent: ...
@overload
def keyed(event: ToolCallEvent, ignore: Ignore | None = None, keys: str | None = None) -> ToolCallEvent: ...
@overload
def keyed(event: ValueEvent, ignore: Ignore | None = None, keys: str | None = None) -> ValueEvent: ...
@overload
def keyed(event: dict[str, Any], ignore: Ignore | None = None, keys: str | None = None) -> dict[str, Any]: ...
def keyed(event: Any, ignore: Ignore | None = None, keys: str | None = None) -> Any:
    """``event`` with its match ``key`` (under the ``ignore`` rules; default: the configuration's)
    and this process's ``pid`` added (what the log keeps of a call); ``keys``, when given, is the
    :func:`~forkpoint.match.key_spec` of that key, for a session whose header says another."""
    event["key"] = event_key(event, ignore)
    if keys is not None:
        event["keys"] = keys
    event["pid"] = os.getpid()
    return event


def open_workspace(root: str | Path | None, store: Path, include_ignored: bool = False) -> Workspace | None:
    """The :class:`~forkpoint.checkpoint.Workspace` to checkpoint, or None when ``root`` is None."""
    if root is None:
        return None
    from .checkpoint import Workspace

    return Workspace.open(Path(root), store, include_ignored=include_ignored)


def attach_workspace(ws: Workspace | None, writer: SessionWriter) -> Workspace | None:
    """Point the workspace's new git objects at the session's ``git-objects`` folder; for an
    encrypted session, at a private scratch folder whose objects each checkpoint seals."""
    if ws is not None:
        if writer.cipher is not None:
            ws.use_scratch()
        else:
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


class Lacks:
    """What a recording lacks, tallied call by call: the tools the model asked for (by name, in its
    responses, with how many times), the tools recorded, and the tool calls whose result had no
    stored form. :meth:`warnings` says it in words. ``seqs``: the model and tool calls tallied, so
    tallies of several processes can be told complete against the session (:meth:`merged`);
    ``first``: the first call whose response asked for each tool (the order the warnings name them
    in, whichever process or thread tallied it first)."""

    def __init__(self) -> None:
        self.asked_for: dict[str, int] = {}
        self.first: dict[str, int] = {}
        self.tools: set[str] = set()
        #: Recorded calls of each tool, and the tools of which the program made a call itself, with
        #: no framework's call id: asked for more often than recorded, another function of the
        #: program may answer to that name (:meth:`fewer_calls`).
        self.calls: dict[str, int] = {}
        self.own: set[str] = set()
        #: Each ask of a tool, ``(name, call id, digest of its arguments, seq)``, and what requests
        #: sent back to the model: ``sent``, call id → digest of its result; ``sent_unnamed``, each
        #: request (seq) that sent back results with no call id (Gemini's often have none): how many.
        #: Only the asks the program answered count against the calls recorded (:meth:`fewer_calls`).
        self.asks: list[tuple[str, str | None, str, int | None]] = []
        self.sent: dict[str, str] = {}
        self.sent_unnamed: dict[int, int] = {}
        self.lost: list[tuple[int | None, str, str]] = []  # (seq, tool, type of the result)
        self.seqs: list[int | None] = []
        #: Tools asked for that a recording process had wrappers for (:func:`runtime.wrapped_tools`).
        self.wrapped: set[str] = set()
        #: Tools asked for that a framework handled itself (:data:`runtime.framework_tools`).
        self.framework: set[str] = set()
        #: Recorded exchanges that are no model call, by kind: ``telemetry``, ``mcp`` (over HTTP), ``http``.
        self.other: dict[str, int] = {}
        #: Function names of tools recorded under another name (:func:`runtime.tool_aliases`).
        self.aliases: dict[str, str] = {}
        #: Tool calls whose result or error held a secret, stored as its placeholder: ``(seq, tool)``.
        self.scrubbed: list[tuple[int | None, str]] = []
        #: Recorded MCP session requests (``mcp:initialize``, ``mcp:tools/list``…): tool call events,
        #: but no tool the model called.
        self.mcp_requests = 0
        #: Bodies of model calls not stored (``withheld``): ``(seq, endpoint, why)``, the why naming
        #: the request's or the response's.
        self.withheld: list[tuple[int | None, str, str]] = []

    def answered(
        self,
        kind: str,
        tool_calls: Sequence[Mapping[str, Any]] | None,
        seq: int | None,
        results: Iterable[tuple[str | None, object]] = (),
    ) -> None:
        """A model call was recorded (as ``seq``); ``kind`` and ``tool_calls`` are its summary's (the
        tools its response asked for), ``results`` the tool results its request sent back
        (:func:`~forkpoint.providers.tool_results`)."""
        self.seqs.append(seq)
        if kind != "model":
            kind = str(kind or "http")
            self.other[kind] = self.other.get(kind, 0) + 1
        for call_id, result in results:
            if call_id is None:
                at = -1 if seq is None else seq
                self.sent_unnamed[at] = self.sent_unnamed.get(at, 0) + 1
            elif str(call_id) not in self.sent:  # (a conversation resends every result it sent)
                self.sent[str(call_id)] = digest(result, exotic=True)
        for call in tool_calls or []:
            if call.get("name"):
                name = str(call["name"])
                self.asked_for[name] = self.asked_for.get(name, 0) + 1
                if seq is not None:
                    self.first[name] = min(self.first.get(name, seq), seq)
                ask = call.get("id")
                args = digest(maybe_json(call.get("arguments")), exotic=True)
                self.asks.append((name, None if ask is None else str(ask), args, seq))

    def bodies(self, event: Mapping[str, Any], seq: int | None) -> None:
        """A model call was recorded (as ``seq``, stored as ``event``): its request and response
        bodies that were not (``withheld``), with why."""
        self.withheld.extend((seq, endpoint(event), why) for _, why in withheld_bodies(event))

    def recorded(self, event: Mapping[str, Any], seq: int | None, held: bool | None = None) -> None:
        """A tool call was recorded (as ``seq``); ``held``: whether its result or error holds a
        scrubbed secret's placeholder (None: looked for here)."""
        self.seqs.append(seq)
        name = str(event.get("tool"))
        self.tools.add(name)
        self.calls[name] = self.calls.get(name, 0) + 1
        if event.get("call_id") is None:
            self.own.add(name)
        if mcp_session_request(event):
            self.mcp_requests += 1
        if "unrecorded" in event:
            self.lost.append((seq, str(event["tool"]), str(event["unrecorded"]["type"])))
        if held is None:
            held = holds_placeholder((event.get("result"), event.get("error")))
        if held:
            self.scrubbed.append((seq, str(event.get("tool"))))

    @classmethod
    def of(cls, events: Iterable[Mapping[str, Any]]) -> Lacks:
        """The tally of recorded ``events`` (read back)."""
        from .providers import tally_reading

        lacks = cls()
        for e in events:
            if e.get("type") == "model_call":
                kind, tool_calls, results = tally_reading(e, lacks.sent)
                lacks.answered(kind, tool_calls, e.get("seq"), results)
                lacks.bodies(e, e.get("seq"))
            elif is_tool_call(e):
                lacks.recorded(e, e.get("seq"))
        return lacks

    def to_json(self) -> dict[str, Any]:
        """This tally as JSON (a recording process hands it to ``forkpoint record`` at its exit)."""
        return {
            "asked_for": self.asked_for,
            "first": self.first,
            "tools": sorted(self.tools),
            "calls": self.calls,
            "own": sorted(self.own),
            "asks": self.asks,
            "sent": self.sent,
            "sent_unnamed": self.sent_unnamed,
            "lost": self.lost,
            "seqs": self.seqs,
            "wrapped": sorted(self._wrapped()),
            "framework": sorted(self.framework | (self.asked_for.keys() & runtime.framework_tools)),
            "other": self.other,
            "scrubbed": self.scrubbed,
            "aliases": self._aliases(),
            "mcp_requests": self.mcp_requests,
            "withheld": self.withheld,
        }

    def _aliases(self) -> dict[str, str]:
        return {**self.aliases, **runtime.tool_aliases()}

    def _wrapped(self) -> set[str]:
        return self.wrapped | (self.asked_for.keys() & runtime.wrapped_tools())

    @classmethod
    def merged(cls, tallies: Iterable[Mapping[str, Any]], calls: int) -> Lacks | None:
        """The tallies (:meth:`to_json`) of the processes that recorded one session, as one; None
        unless they tally each of its ``calls`` model and tool calls exactly once (a process that
        left without handing its tally over, or a forked one that handed over its parent's too:
        then only reading the session back tells). Raises nothing: a malformed tally gives None."""
        out = cls()
        try:
            for t in tallies:
                for name, k in t["asked_for"].items():
                    out.asked_for[str(name)] = out.asked_for.get(str(name), 0) + int(k)
                for name, seq in t["first"].items():
                    out.first[str(name)] = min(out.first.get(str(name), int(seq)), int(seq))
                out.tools.update(str(n) for n in t["tools"])
                for name, k in (t.get("calls") or {}).items():
                    out.calls[str(name)] = out.calls.get(str(name), 0) + int(k)
                out.own.update(str(n) for n in t.get("own") or ())
                out.asks.extend(
                    (
                        str(name),
                        None if ask is None else str(ask),
                        str(args),
                        None if seq is None else int(seq),
                    )
                    for name, ask, args, seq in t.get("asks") or ()
                )
                for ask, result in (t.get("sent") or {}).items():
                    out.sent.setdefault(str(ask), str(result))
                for seq, k in (t.get("sent_unnamed") or {}).items():
                    out.sent_unnamed[int(seq)] = out.sent_unnamed.get(int(seq), 0) + int(k)
                out.lost.extend((seq, str(tool), str(kind)) for seq, tool, kind in t["lost"])
                out.seqs.extend(t["seqs"])
                out.wrapped.update(str(n) for n in t.get("wrapped") or ())
                out.framework.update(str(n) for n in t.get("framework") or ())
                for kind, k in (t.get("other") or {}).items():
                    out.other[str(kind)] = out.other.get(str(kind), 0) + int(k)
                out.scrubbed.extend((seq, str(tool)) for seq, tool in t.get("scrubbed") or ())
                out.aliases.update({str(k): str(v) for k, v in (t.get("aliases") or {}).items()})
                out.mcp_requests += int(t.get("mcp_requests") or 0)
                out.withheld.extend(
                    (None if seq is None else int(seq), str(call), str(why))
                    for seq, call, why in t.get("withheld") or ()
                )
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        if None in out.seqs or len(out.seqs) != calls or len(set(out.seqs)) != calls:
            return None
        return out

    def unrecorded_tools(self) -> dict[str, int]:
        """The tools the model asked for of which no call was recorded, and how many times it asked
        for each: if the agent ran them, a replay runs them for real. In the order the model first
        asked for them; a framework's own (an output tool, a handoff) are not among them."""
        names = sorted(self.asked_for, key=lambda n: self.first.get(n, -1))  # stable: as tallied
        handled = self.framework | runtime.framework_tools  # (the framework's own: nothing to record)
        aliases = self._aliases()
        return {
            n: self.asked_for[n]
            for n in names
            if n not in handled
            and not any(tool_matches(r, a) for r in self.tools for a in _known_as(n, aliases))
        }

    def answers(self) -> dict[str, int]:
        """How many different asks of each tool the program answered: asks whose result a later
        request sent back to the model (by the ask's call id; one with no id, when a later request
        sent back a result with no id), told apart by their arguments and that result. An ask never
        answered (the last answer of a run that stopped at its turn limit, or at a tool that
        raised; a call of a parallel batch the program dropped) ran nothing, and one answered with
        the result of an identical ask (a cache) ran nothing more. Of the asks with no id in one
        answer, the first as many as the results with no id the next request that sent any sent: a
        program that runs only the first call of a Gemini answer sends one result back."""
        out: dict[str, set[tuple[str, str | None]]] = {}
        unnamed: dict[int, list[tuple[str, str]]] = {}
        for name, ask, args, seq in self.asks:
            if ask is not None and ask in self.sent:
                out.setdefault(name, set()).add((args, self.sent[ask]))
            elif ask is None and seq is not None:
                unnamed.setdefault(seq, []).append((name, args))
        sending = sorted(self.sent_unnamed)
        for seq, asks in unnamed.items():
            at = bisect.bisect_right(sending, seq)
            for name, args in asks[: self.sent_unnamed[sending[at]] if at < len(sending) else 0]:
                out.setdefault(name, set()).add((args, None))
        return {name: len(answers) for name, answers in out.items()}

    def fewer_calls(self) -> dict[str, int]:
        """The tools of which the program answered more different asks (:meth:`answers`) than calls
        of them were recorded, some made by the program itself (no framework's call id), with how
        many asks more: the calls are told from the asks by name only, so a second function of the
        same name (another agent's tool) that was never recorded hides behind the one that was.
        (Calls a framework made carry the ask's id; one it did not make, a retry on arguments that
        did not validate, is no function run.)"""
        handled = self.framework | runtime.framework_tools
        aliases = self._aliases()
        answers = self.answers()
        out = {}
        for n in sorted(answers, key=lambda n: self.first.get(n, -1)):
            names = [r for r in self.calls if any(tool_matches(r, a) for a in _known_as(n, aliases))]
            recorded = sum(self.calls[r] for r in names)
            if n not in handled and 0 < recorded < answers[n] and self.own.intersection(names):
                out[n] = answers[n] - recorded
        return out

    def warnings(self, *, tools: bool = True) -> list[str]:
        """In words, for the person who made the recording (empty when it lacks nothing); without
        the tools never recorded when not ``tools`` (the pytest plugin says them its own way)."""
        out = []
        missing = self.unrecorded_tools() if tools else {}
        wrapped = self._wrapped()
        idle = ", ".join(f"{n} ({plural(k, 'call')})" for n, k in missing.items() if n in wrapped)
        if idle:
            out.append(
                f"the model asked for tools the program never called: {idle} (a replay has none to serve)"
            )
        missing = {n: k for n, k in missing.items() if n not in wrapped}
        if missing:
            names = ", ".join(f"{n} ({plural(k, 'call')})" for n, k in missing.items())
            out.append(
                f"the model asked for tools that were never recorded: {names}. If the agent ran them, a replay "
                "runs them for real. Name them: @forkpoint.tool on the function, or forkpoint record --tool "
                "MODULE:FUNCTION (--tool MODULE:CLASS.METHOD; --tool __main__:FUNCTION for one defined in the "
                "script itself; =NAME after it for a function that runs the tool NAME, as mini-swe-agent's "
                "minisweagent.environments.local:LocalEnvironment.execute=bash)."
            )
        if fewer := self.fewer_calls():
            answers = self.answers()
            names = ", ".join(
                f"{n} ({plural(answers[n], 'different ask')} answered, {plural(answers[n] - k, 'call')} recorded)"
                for n, k in fewer.items()
            )
            out.append(
                "the program answered the model's asks for tools more often than its calls of them were "
                f"recorded: {names}. "
                "If another function of the program answers to that name (a second agent's tool of the same "
                "name), its calls were never recorded, and a replay runs them for real: name it too, "
                "@forkpoint.tool(name=NAME) on it, or forkpoint record --tool MODULE:QUALNAME=NAME."
            )
        if self.lost:
            seq, tool, kind = min(self.lost, key=_by_seq)
            out.append(
                f"{plural(len(self.lost), 'tool call')} could not be recorded: the result had no stored form "
                f"(first: seq {seq}, tool {tool}: {kind}); a replay stops at the first of them."
            )
        if self.scrubbed:
            seq, tool = min(self.scrubbed, key=_by_seq)
            out.append(
                f"{plural(len(self.scrubbed), 'tool result')} held secrets (a password, a key), stored as "
                f"placeholders: a replay hands the program the placeholders (first: seq {seq}, tool {tool}; "
                "docs/security.md)."
            )
        if self.withheld:
            calls = "; ".join(
                f"seq {seq} {call}: {why}" for seq, call, why in sorted(self.withheld, key=_by_seq)
            )
            one = len(self.withheld) == 1
            out.append(
                f"{len(self.withheld)} {'body' if one else 'bodies'} of calls {'was' if one else 'were'} not "
                f"stored (withheld): {calls}. A replay matches a withheld request body by its digest, and "
                "stops at a call whose response body was withheld (nothing to hand back)."
            )
        return out


def _by_seq(item: tuple[Any, ...]) -> tuple[bool, int]:
    """Sorts tallied ``(seq, …)`` items by seq, those with none (a deferred write's) last."""
    return item[0] is None, item[0] or 0


def _known_as(name: str, aliases: Mapping[str, str]) -> list[str]:
    """``name`` and the names it is recorded under, following ``aliases`` (a pydantic-ai toolset
    renamed, then prefixed: each wrapper hands on a name of its own)."""
    out = [name]
    while (name := aliases.get(name, name)) not in out:
        out.append(name)
    return out


def recording_warnings(path: Path) -> list[str]:
    """What the recording in session directory ``path`` lacks, read back, in words for the person
    who made it: tools the model asked for that were never recorded (and how to name them), and tool
    calls whose result could not be recorded (a replay stops at the first). Where it cannot be read
    back (an encrypted session without an identity at hand, a log that does not read), that the
    checks were skipped, and why. (``forkpoint record`` first tries its processes' tallies:
    :meth:`Lacks.merged`.)"""
    lacks, skipped = read_back(path)
    return lacks.warnings() if lacks is not None else [skipped or ""]


def local_zone() -> str | None:
    """This process's time zone as ``TZ`` names it (``America/New_York``): ``$TZ``, else the zone
    ``/etc/localtime`` links to, else ``/etc/timezone``'s; None when none says (UTC then)."""
    tz = os.environ.get("TZ")
    if tz:
        return tz
    try:
        target = os.readlink("/etc/localtime")
    except OSError:
        target = ""
    if "zoneinfo/" in target:
        return target.split("zoneinfo/", 1)[1] or None
    try:
        return Path("/etc/timezone").read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def hash_seed() -> int:
    """The ``PYTHONHASHSEED`` a recorded command runs with: this environment's when it names one,
    else one chosen at random, as Python would. Kept in the header so that a replay runs with the
    same: the order of a set of strings (``str()`` of it, a prompt joined from it) depends on it."""
    given = os.environ.get("PYTHONHASHSEED", "")
    if given.isdigit() and int(given) <= MAX_HASH_SEED:
        return int(given)
    import random  # here: only a recorded command needs it

    return random.SystemRandom().randint(1, MAX_HASH_SEED)


def tally_into(session: Recording, tally: Lacks | None) -> None:
    """Hand ``session`` what its ``end`` counts for listings from the ``tally`` of its calls (None:
    none): the exchanges that are no model's call, by kind (``other_calls``), and the MCP session
    requests, no tool's call (``mcp_requests``), and the tools asked for more often than their
    calls were recorded (``fewer_calls``)."""
    session.fewer_calls = tally.fewer_calls() if tally is not None else {}
    session.other_calls = dict(tally.other) if tally is not None else {}
    session.mcp_requests = tally.mcp_requests if tally is not None else 0


def read_back(path: Path) -> tuple[Lacks | None, str | None]:
    """The tally (:class:`Lacks`) of the recording in session directory ``path``, read back; or
    None and why the checks that need it were skipped (an encrypted session without an identity at
    hand, a log that does not read)."""
    try:
        events = Session.load(path, derived=False, share_lists=True).events
    except IdentityError as exc:  # an encrypted session, and no identity here to read it back
        return None, f"the checks of what the recording lacks were skipped: {exc}"
    except SessionError as exc:
        return (
            None,
            f"the checks of what the recording lacks were skipped: the session cannot be read back: {exc}",
        )
    return Lacks.of(events), None
