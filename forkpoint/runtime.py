"""The active runtime: which recorder or replayer, if any, the capture hooks report to.

One runtime is active per process at a time. The capture hooks (HTTP libraries, tool wrappers,
framework integrations) are installed once, by :mod:`forkpoint.api` before it activates a runtime,
and do nothing but call through while no runtime is active. They talk to the runtime only through
:class:`Runtime` (and, during a replay, :class:`Serving`): this module knows neither the recorder
nor the replayer.
"""

from __future__ import annotations

import contextvars
import functools
import gc
import itertools
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from .errors import Divergence, ForkpointError

if TYPE_CHECKING:  # annotations only: this module is imported at every bootstrapped start
    from collections import Counter
    from types import CodeType

    from .errors import NetworkBlocked
    from .events import (
        Call,
        CallKind,
        HttpRequest,
        McpCall,
        ModelCallEvent,
        ToolCallEvent,
        ToolInstance,
        ValueEvent,
    )

#: What serves each kind of call during a replay.
SOURCES = ("replay", "live")
#: What happens after a divergence: report and stop, continue live, or serve the next recorded call anyway.
POLICIES = ("stop", "live", "fifo")


class Runtime(Protocol):
    """What the capture hooks need of a recorder or a replayer."""

    @property
    def mode(self) -> Literal["record", "replay"]:
        """``record`` or ``replay``."""

    #: The span every call belongs to unless a tool call's span is current.
    root_span: str
    #: Model calls whose response is still open (written when they end, or when the run ends).
    pending: set[Any]
    #: True when the agent's own clock and randomness are recorded (or served): ``deterministic``.
    deterministic: bool
    #: Requests a framework answered from its own cache of model answers (DSPy's), by framework:
    #: they never reached the model, so they are neither recorded nor asked of a replay.
    cache_answers: Counter[str]
    #: A digest of the state each framework keeps on disk, by its path, as it was each time the
    #: framework opened it, in order (None: nothing there): :func:`opened_store`.
    stored_states: dict[str, list[str | None]]

    def before_model_call(self, request: HttpRequest) -> None:
        """A model call is about to be sent for real (a recorder takes a checkpoint here)."""

    def model_call_done(self, event: ModelCallEvent) -> None:
        """A model call made for real has ended: log it."""

    def tool_call_done(self, event: ToolCallEvent) -> None:
        """A tool call run for real has ended: log it."""

    def value_done(self, event: ValueEvent) -> None:
        """The agent's own code read a value for real (``deterministic``): log it."""


#: :meth:`Serving.served_result`'s ``part`` when the whole result is meant.
WHOLE: Any = object()


class Serving(Runtime, Protocol):
    """What the capture hooks need of a replayer: the recorded answers."""

    def take_model_call(self, request: HttpRequest) -> tuple[ModelCallEvent, int] | None:
        """The recorded call answering ``request`` and its position among this run's model calls,
        or None to make the call live. Raises :class:`~forkpoint.errors.Divergence`."""

    def take_tool_call(
        self,
        name: str,
        args: dict[str, Any],
        *,
        defaulted: frozenset[str] = frozenset(),
        call_id: str | None = None,
        mcp: McpCall | None = None,
        function: str | None = None,
        instance: str | None = None,
        kept: ToolInstance | None = None,
    ) -> tuple[ToolCallEvent, int] | None:
        """The recorded tool call and its position among this run's tool calls, or None to run the
        tool live (``mcp``: where it went, a request to an MCP server; ``instance``: the fingerprint
        of the object a method was called on, ``kept`` what a recording keeps of it). Raises
        :class:`~forkpoint.errors.Divergence`."""

    def take_value(self, fn: str, args: list[Any] | None = None) -> ValueEvent | None:
        """The recorded value the agent's own code reads next from ``fn``, or None to read it for
        real. Raises :class:`~forkpoint.errors.Divergence`."""

    def diverged(
        self, event: Call, kind: CallKind, position: int, reason: str, *, handed_nothing: bool = False
    ) -> Divergence:
        """A :class:`~forkpoint.errors.Divergence` about a recorded call that was served but cannot
        be given as recorded (the run went further than the recording reaches, or the result cannot
        be rebuilt here), noted as the replay's divergence if it is the first. ``handed_nothing``:
        nothing of the call reached the program (its result or exception could not be handed back),
        so it is not counted among the calls served."""

    def ready(self, event: ToolCallEvent) -> bool:
        """True when the tool calls that finished before ``event`` while it ran, live, have had
        their results released: ``event``'s may go now."""

    def wait_turn(self, event: ToolCallEvent, timeout: float) -> None:
        """Block until :meth:`ready`, at most ``timeout`` seconds (then :meth:`late`)."""

    def late(self, event: ToolCallEvent) -> None:
        """Note that ``event``'s result goes before calls that finished before it live (this run
        did not ask for them in time)."""

    def release(self, event: ToolCallEvent) -> None:
        """``event``'s result has been handed to the program."""

    def released_elsewhere(self, event: ToolCallEvent) -> bool:
        """True when a call :meth:`ready` waits on for ``event`` was handed over in another thread."""

    def served_result(self, event: ToolCallEvent, part: Any = WHOLE) -> Any:
        """``event``'s recorded result rebuilt for the program (:func:`forkpoint.values.decode`), or
        ``part`` of it (a generator's items, its return value); an overridden one is validated.
        Raises :class:`~forkpoint.errors.UnrebuildableValue`."""

    def network_allowed(self) -> bool:
        """True when some call may go live, so sockets must not be blocked."""

    def placeholder_refused(self, request: HttpRequest, carrier: str, placeholder: str) -> NetworkBlocked:
        """The error for a call about to go live with ``placeholder`` (the replay's placeholder API
        key, or a scrubbed secret's) in its ``carrier`` (a header's name, or ``"its URL"``), noted
        in the report: it is not sent."""

    def runs_live(self, kind: CallKind) -> bool:
        """True when the next call of ``kind`` is made live (its source is live, or the replay went
        live after a divergence), so whatever serves it (an MCP server) must really be there."""

    def may_go_live(self) -> bool:
        """True when calls served now may be followed by calls made live (after a divergence under
        policy ``live``, or after a fork's checkpoint), so whatever serves those (an MCP server)
        must be started."""


_lock = threading.Lock()
_active: Runtime | None = None

#: The span the code running now belongs to (a tool call's span while its body runs).
current_span: contextvars.ContextVar[str | None] = contextvars.ContextVar("forkpoint_span", default=None)

#: True while the body of a tool that a replay runs live executes (it may reach the network).
running_live_tool: contextvars.ContextVar[bool] = contextvars.ContextVar("forkpoint_live_tool", default=False)

#: True while the last model call made in this context was answered from the recording (an SDK's
#: retry wait after a served failure is then skipped: :mod:`forkpoint.integrations.stainless`).
served_from_recording: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "forkpoint_served", default=False
)


#: The last KeyboardInterrupts a replay raised as a recorded call's ending (a tool Ctrl-C stopped
#: when recorded): a program run in-process (:func:`forkpoint.program.run_command`) ends with one
#: as it did when recorded, while a real Ctrl-C still stops whatever runs it (a test session).
_replayed_interrupts: list[BaseException] = []


def replayed(exc: BaseException) -> BaseException:
    """``exc``, a recorded exception rebuilt to be raised again, noted when it is a
    ``KeyboardInterrupt`` (:func:`replayed_interrupt`)."""
    if isinstance(exc, KeyboardInterrupt):
        _replayed_interrupts.append(exc)
        del _replayed_interrupts[:-8]
    return exc


def replayed_interrupt(exc: BaseException) -> bool:
    """Whether ``exc`` is a ``KeyboardInterrupt`` a replay raised from the recording (not Ctrl-C)."""
    return any(e is exc for e in _replayed_interrupts)


#: The HTTP request this context is making, as it would be sent (URL, header pairs, body bytes),
#: kept by the capture as the request is read while a replay is active: looked at only if it goes
#: live, for the replay's placeholder API key or a scrubbed secret's placeholder (such a request is
#: never sent); the stored form has placeholders of every secret.
live_request: contextvars.ContextVar[tuple[str, list[tuple[str, str]], bytes] | None] = (
    contextvars.ContextVar("forkpoint_live_request", default=None)
)


#: The id the model gave the tool call a framework is running in this context (its
#: ``tool_call_id``), set by the framework's integration around the call: the first tool call
#: recorded inside takes it (:func:`forkpoint.capture.tools.call_tool`), so that a tool recording
#: itself (``@forkpoint.tool``) is recorded with it; the calls its body makes are its own.
asked_as: contextvars.ContextVar[str | None] = contextvars.ContextVar("forkpoint_asked_as", default=None)


#: True in code whose HTTP requests belong to a call recorded at a higher level (an MCP session's
#: transport, whose requests are recorded as MCP calls): the HTTP capture passes them through, so
#: they are neither recorded twice nor served from the session.
http_recorded_above: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "forkpoint_http_recorded_above", default=False
)


#: The tool wrappers of this process (``@forkpoint.tool``, ``--tool`` targets), held weakly: what
#: :func:`wrapped_tools` names.
tool_wrappers: weakref.WeakSet[Any] = weakref.WeakSet()


#: Tool names a framework handles itself, with no body to record (pydantic-ai's output tools such as
#: ``final_result``, an Agents SDK handoff's ``transfer_to_…``, an agent it runs as a tool, whose own
#: calls are recorded): the model asking for one is no tool call forkpoint missed.
framework_tools: set[str] = set()


#: Functions naming the tools a framework integration records with no wrapper of their own (the
#: Agents SDK's ``@function_tool``s, recorded through the invoker they share): what else
#: :func:`wrapped_tools` names.
tool_name_sources: list[Callable[[], set[str]]] = []


def wrapped_tools() -> set[str]:
    """The names of the tools this process has wrappers for, or an integration records, called or
    not: a recording's warnings tell a tool the program never called from one forkpoint never saw."""
    # (not one the program took the function around: calls may have been made that it never saw)
    names = {
        str(getattr(w, "__forkpoint_tool__", ""))
        for w in list(tool_wrappers)
        if not getattr(w, "__forkpoint_bypassed__", False)
    }
    for source in list(tool_name_sources):
        names |= source()
    return names


#: The name a framework gave a tool whose function records itself (what the model asks for) → the
#: name it is recorded under (:func:`alias_tool`).
_framework_aliases: dict[str, str] = {}


def alias_tool(asked: str, recorded: str) -> None:
    """Note that the tool the model asks for as ``asked`` is recorded as ``recorded``: a LangChain
    tool ``dice`` whose function is a ``@forkpoint.tool`` named after the function."""
    if asked != recorded:
        _framework_aliases[asked] = recorded


def tool_aliases() -> dict[str, str]:
    """The name the model asks for → the tool's recorded name, for the tool wrappers of this process
    named otherwise (``@forkpoint.tool(name="flip_coin")`` on ``def flip``: a framework that names a
    tool after its function, pydantic-ai, has the model ask for ``flip``, which is recorded as
    ``flip_coin``), and the names :func:`alias_tool` noted."""
    out = dict(_framework_aliases)
    for w in list(tool_wrappers):
        fn, name = getattr(w, "__name__", None), getattr(w, "__forkpoint_tool__", None)
        if isinstance(fn, str) and isinstance(name, str) and fn != name:
            out[fn] = name
    return out


#: Re-entrant: what it guards allocates, so the garbage collector may run a finalizer under it, in
#: the same thread, that makes a task or starts a thread (google-genai's client's ``__del__`` makes
#: one to close its session), which notes its birth under it again: a plain lock waited for ever.
_sent_lock = threading.RLock()
_sent_counters: weakref.WeakKeyDictionary[Any, Iterator[int]] = weakref.WeakKeyDictionary()
#: The first ordinal of this process's runtimes: past the last one of the program it replaced through
#: exec, whose calls have the same pid in the log (``forkpoint._boot``).
sent_from = 1


def running_task() -> Any:
    """The asyncio task running in this thread, None outside any, or where the program never imported
    asyncio. (Its running loop is asked first: ``asyncio.current_task`` raises outside one, and
    raising costs a sync program's every call 15 times what asking does.)"""
    aio = sys.modules.get("asyncio")
    if aio is None:
        return None
    loop = aio._get_running_loop()
    return aio.current_task(loop) if loop is not None else None


def caller() -> str | None:
    """The name of the asyncio task making a call, None outside any task. asyncio names a task
    ``Task-N`` in the order tasks are made, so a program that makes them in the same order makes
    each call from the same name again on replay: which of several identical calls answered
    differently each task got can then be told (:meth:`forkpoint.replay.Replayer._certain`). A
    thread's name tells nothing so (a pool's workers take its work in any order).

    None too when the order tasks are made in may depend on timing, so that a name need not be
    the same task's on replay: the loop runs in another thread than the main one (threads'
    loops number their tasks from one counter, each as it happens to get there), another task
    of the loop runs beside this one (:func:`_alone`), or no task waits for this one (a callback
    made it). A graph's nodes, each awaited by the task that makes them, are alone so; so are a
    task's siblings (the tasks of the gather or ``asyncio.wait`` awaiting it) not yet started
    when it was found alone, each in its first step (:data:`_looked`). And None for a task not
    made in an order timing cannot change (:data:`_made`): alone now says nothing of the step
    that made it."""
    if threading.current_thread() is not threading.main_thread():
        return None
    task = running_task()
    if task is None:
        return None
    made = _made.get(task)
    if made != "order":  # (the loop's main task is one caller anyway; others' names may swap)
        return None
    return str(task.get_name()) if _step_alone(sys.modules["asyncio"], task, made) else None


def _step_alone(aio: Any, task: Any, made: str | None) -> bool:
    """:func:`_alone` for ``task``'s step, looked at once per step (:data:`_looked`)."""
    seen = _looked.get(task)
    if seen is not None and seen[1][0]:
        return seen[0]
    try:
        alone, first = _alone(aio, task, root=made == "root")
    except Exception:  # (asyncio's insides read otherwise than this Python keeps them: no name)
        alone, first = False, []
    loop = task.get_loop()
    _looked[task] = (alone, _turn(loop, fresh=False))
    if first:  # (a turn past their first steps, queued before now)
        turn = _turn(loop, fresh=True)
        for other in first:
            _looked[other] = (True, turn)
    return alone


#: Task → how asyncio came to name it (:func:`watch_tasks`): ``root`` made outside a running loop
#: by the main thread's code (``asyncio.run``'s main task), ``order`` made by a ``root`` or
#: ``order`` task alone in that step (:func:`_alone`), so made in an order timing cannot change;
#: ``timing`` otherwise (a loop's callback, another thread, a task beside others: two branches
#: that each woke, in an order a timer chose, and made a task, whichever woke first made the
#: first, however its task was waited on later). A task made before the watch is not here:
#: neither names a caller.
_made: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


#: Called with each task an asyncio event loop makes while a runtime is active (:func:`watch_tasks`):
#: :mod:`forkpoint.replay.pools` stamps a replay's tasks as they finish.
task_made: list[Callable[[Any], None]] = []

#: Called in its thread (or asyncio task) as each tool call returns to the program (``True``: once
#: recorded) and each model call's answer comes (``False``: its body still to be read), recorded or
#: served, while a runtime is active: :mod:`forkpoint.replay.pools` tells a future that stands for a
#: call from one of the program's own (a timer), and sees a pool function's work after its tool call.
call_ended: list[Callable[[bool], None]] = []


def watch_tasks(aio: Any) -> None:
    """Note how each task an asyncio event loop makes came to be made (:data:`_made`), while a
    runtime is active or to be made, and when the main thread's own flow made it, or the task of
    that flow it was made under (:class:`Born`), while one is active (idempotent). A loop that
    makes its tasks otherwise (uvloop) names no caller, and its tasks are taken to have been there
    all along."""
    base = getattr(getattr(aio, "base_events", None), "BaseEventLoop", None)
    real = getattr(base, "create_task", None)
    if base is None or real is None or getattr(real, "__forkpoint_watch__", False):
        return

    def create_task(self: Any, *args: Any, **kwargs: Any) -> Any:
        how, maker = None, None
        if (
            _active is not None or _pending is not None
        ) and threading.current_thread() is threading.main_thread():
            try:  # (looked at before the task is made: it would be one not yet started beside its maker)
                how = _how_made(aio, self)
                if how != "root" and aio._get_running_loop() is self:
                    maker = aio.current_task(self)
            except Exception:  # (asyncio's insides read otherwise than this Python keeps them: unknown)
                how = None
        task = real(self, *args, **kwargs)
        rt = _active
        if rt is not None:
            try:  # (a task factory's object no weakref can hold: when it began is unknown)
                if how == "root" or (maker is not None and _made.get(maker) == "root"):
                    _note_born(task, rt)
                elif maker is not None and maker in _born:  # (its maker's flow's: see caller_born)
                    _born[task] = _born[maker]
            except TypeError:
                pass
            for made in task_made:
                made(task)
        if how is not None:
            try:
                _made[task] = how
            except TypeError:  # (a task factory's object no weakref can hold: unknown)
                pass
        return task

    functools.update_wrapper(create_task, real)
    create_task.__forkpoint_watch__ = True  # type: ignore[attr-defined]
    base.create_task = create_task


def _how_made(aio: Any, loop: Any) -> str:
    """How the task ``loop`` makes now, in the main thread, comes to be made (:data:`_made`)."""
    if not loop.is_running():
        return "root"
    if aio._get_running_loop() is not loop:  # (another thread's loop)
        return "timing"
    maker = aio.current_task(loop)
    made = _made.get(maker) if maker is not None else None
    if made not in ("root", "order"):
        return "timing"
    return "order" if _step_alone(aio, maker, made) else "timing"


#: Task → what :func:`_alone` found of it, and the turn that holds for (``[True]`` until the
#: loop runs the callback queued when it began: :func:`_turn`). The loop runs what is ready in
#: the order it was made ready, and whatever a task then waits for (a socket, a timer, another
#: task) wakes it after that callback: a task found so, calling again in that turn, runs the step
#: it ran then, and only what it did changed the other tasks meanwhile: it stays alone, or not
#: (one look at every task per step, not per call: a task making 4,000 tasks, a clock read after
#: each, cost 4,000² looks). Its siblings not yet started (:func:`_alone`) run their first steps
#: before a callback queued then, in the order they were made, after nothing but the rest of its
#: step and the first steps of those made before them: each is alone in that step (a fan-out's
#: tasks, each making its call before it first waits, with one look at every task for them all).
_looked: weakref.WeakKeyDictionary[Any, tuple[bool, list[bool]]] = weakref.WeakKeyDictionary()

#: Loop → its turn still running (:func:`_turn`).
_turns: weakref.WeakKeyDictionary[Any, list[bool]] = weakref.WeakKeyDictionary()


def _turn(loop: Any, *, fresh: bool) -> list[bool]:
    """A turn of ``loop``: ``[True]`` until the loop runs a callback queued no earlier than the
    step it runs now began (``fresh``: queued now), then ``[False]``."""
    turn = _turns.get(loop)
    if turn is None or fresh:
        turn = _turns[loop] = [True]
        loop.call_soon(_turn_over, loop, turn)
    return turn


def _turn_over(loop: Any, turn: list[bool]) -> None:
    turn[0] = False
    if _turns.get(loop) is turn:
        del _turns[loop]


def _alone(aio: Any, task: Any, *, root: bool = False) -> tuple[bool, list[Any]]:
    """Whether no other task of ``task``'s loop runs beside it, and one waits for it: each other
    unfinished task waits, through the tasks it waits for (:func:`_waits_for`: a task, a gather,
    an ``asyncio.wait``), on ``task``, or has not started yet and is one of ``task``'s siblings
    (waited for by the same wait as ``task``: the gather or ``asyncio.wait`` that awaits both),
    which runs after this step, the loop running what is ready in the order it was made ready.
    Any other task not yet started was made by another step, which may have run before or after
    the one that made ``task``'s as timing let it: two branches that each wake and make a task
    make them in either order. A task no other waits for was made by a callback (a timer,
    ``call_soon_threadsafe``), whose order may depend on timing, or is the loop's main one (its
    calls are one caller's anyway; ``root``: it is, and needs no waiter). With it, when alone, its
    siblings not yet started (:data:`_looked`)."""
    if _beside(aio, task):
        return False, []
    try:
        others = aio.all_tasks(task.get_loop())
    except RuntimeError:  # (the loop's tasks changed while listed, too often)
        return False, []
    waits: dict[Any, list[Any]] = {}
    unstarted: list[Any] = []
    for other in others:
        if other is task or other.done():
            continue
        if not _started(other):
            unstarted.append(other)
            continue
        on = _waits_for(aio, other)
        if on is None:
            return False, []
        waits[other] = on
    waiters: dict[Any, list[Any]] = {}
    for other, on in waits.items():
        for waited in on:
            waiters.setdefault(waited, []).append(other)
    reach, todo = {task}, [task]
    while todo:
        for other in waiters.get(todo.pop(), ()):
            if other not in reach:
                reach.add(other)
                todo.append(other)
    if not (root or waiters.get(task)) or len(reach) - 1 != len(waits):
        return False, []
    siblings = {t for other in waiters.get(task, ()) for t in waits[other]}
    if any(t not in siblings for t in unstarted):
        return False, []
    return True, unstarted


def _woken_otherwise(aio: Any, task: Any, fut: Any = None) -> bool:
    """Whether ``task`` (a task, or any future) is a started task that is ready to run again (it
    awaits nothing, or what it awaits ended), or that something else than a task, a gather or an
    ``asyncio.wait`` with no timeout may wake (a socket, a timer, an event): :func:`_beside`'s
    quick look (``fut``: what it awaits, when known), not :func:`_waits_for`'s whole one."""
    if not isinstance(task, aio.Task) or task.done() or not _started(task):
        return False
    if fut is None:
        fut = getattr(task, "_fut_waiter", None)
    if fut is None or fut.done():
        return True
    fut = _shielded(aio, fut) or fut
    if isinstance(fut, aio.Task | _gathering(aio)):
        return False
    return _wait_locals(aio, task, fut) is None


def _started(task: Any) -> bool:
    """Whether ``task`` ran a step already (True when its coroutine does not say)."""
    coro = task.get_coro()
    return not (
        getattr(coro, "cr_suspended", None) is False and not coro.cr_running and coro.cr_frame is not None
    )


def _waits_for(aio: Any, task: Any) -> list[Any] | None:
    """The unfinished tasks only whose ends can wake ``task`` (a started task not running): the
    task it awaits (directly or through ``asyncio.shield``), the children of the ``asyncio.gather`` it awaits, the tasks and gathers of the
    ``asyncio.wait`` it awaits with no timeout. None when something else may wake it (a socket, a
    timer, an event another task sets), or it is ready to run again (what it awaits ended)."""
    fut = getattr(task, "_fut_waiter", None)
    if fut is None or fut.done():
        return None
    fut = _shielded(aio, fut) or fut
    if isinstance(fut, aio.Task):
        return [fut]
    if isinstance(fut, _gathering(aio)):
        return _gathered(aio, fut)
    return _waited(aio, task, fut)


def _shielded(aio: Any, fut: Any) -> Any:
    """The unfinished future that ``fut`` ends with, when ``fut`` is what ``asyncio.shield``
    returned for it (the Agents SDK awaits each tool's task so: its callers are then named as
    those of a task awaited directly), else None."""
    code = _shield_code(aio)
    if code is None:
        return None
    try:
        callbacks = list(getattr(fut, "_callbacks", None) or ())
    except RuntimeError:  # (another thread's loop changed them while read)
        return None
    names = code.co_freevars
    for entry in callbacks:
        callback = entry[0] if isinstance(entry, tuple) else entry
        if getattr(callback, "__code__", None) is not code:
            continue
        cells = dict(zip(names, callback.__closure__ or (), strict=False))
        inner = cells["inner"].cell_contents if "inner" in cells else None
        return inner if inner is not None and not inner.done() else None
    return None


@functools.cache
def _shield_code(aio: Any) -> CodeType | None:
    """The code of the callback ``asyncio.shield`` adds to the future it returns, whose closure
    holds the future it guards (None when this asyncio's shield has none so)."""
    shield = getattr(getattr(aio, "tasks", None), "shield", None)
    consts = getattr(getattr(shield, "__code__", None), "co_consts", ())
    return next((c for c in consts if getattr(c, "co_name", None) == "_outer_done_callback"), None)


def _gathering(aio: Any) -> Any:
    """asyncio's future of ``asyncio.gather`` (a class no future is of when this asyncio has none)."""
    return getattr(getattr(aio, "tasks", None), "_GatheringFuture", _Never)


class _Never:
    """What no object is an instance of."""


def _wait_code(aio: Any) -> Any:
    """The code of the coroutine ``asyncio.wait`` awaits its waiter in (None when unknown)."""
    wait = getattr(getattr(aio, "tasks", None), "_wait", None)
    wait = getattr(wait, "__wrapped__", wait)  # (under forkpoint.replay.pools's wrapper: the real one)
    return getattr(wait, "__code__", None)


def _gathered(aio: Any, fut: Any) -> list[Any] | None:
    """The unfinished tasks ``fut`` (``asyncio.gather``'s, not done) waits for, or None when it is
    about to end (a child failed, or every one ended), or a child is no task or gather."""
    out: list[Any] = []
    for child in getattr(fut, "_children", None) or ():
        if child.done():
            if child.cancelled() or getattr(child, "_exception", True) is not None:
                return None
            continue
        if isinstance(child, aio.Task):
            out.append(child)
        elif isinstance(child, _gathering(aio)):
            inner = _gathered(aio, child)
            if inner is None:
                return None
            out.extend(inner)
        else:
            return None
    return out or None


def _waited(aio: Any, task: Any, fut: Any) -> list[Any] | None:
    """The tasks of the ``asyncio.wait`` whose waiter ``task`` awaits (``fut``): None when it has
    a timeout (a timer may end it), or may end now (one of them ended, as ``return_when`` ends it),
    or it is not ``asyncio.wait``'s, or it waits for a future that is no task or gather."""
    seen = _wait_locals(aio, task, fut)
    if seen is None:
        return None
    out: list[Any] = []
    for f in seen.get("fs") or ():
        if f.done():
            failed = f.cancelled() or getattr(f, "_exception", True) is not None
            if failed or seen.get("return_when") == "FIRST_COMPLETED":
                return None
            continue
        inner = [f] if isinstance(f, aio.Task) else None
        if isinstance(f, _gathering(aio)):
            inner = _gathered(aio, f)
        if inner is None:
            return None
        out.extend(inner)
    return out or None


def _wait_locals(aio: Any, task: Any, fut: Any) -> Mapping[str, Any] | None:
    """The variables of the ``asyncio.wait`` whose waiter ``task`` awaits (``fut``), with no
    timeout, found in the coroutines ``task`` awaits through; for a ``TaskGroup``'s end
    (``async with``'s exit awaiting ``fut``), its tasks as ``fs`` of a wait that any of them
    ending may end (one that failed cancels ``task``); None when there is none so, or the group
    already has errors."""
    code, coro, depth = _wait_code(aio), task.get_coro(), 0
    group = getattr(getattr(aio, "taskgroups", None), "TaskGroup", _Never)
    exits = {getattr(getattr(group, name, None), "__code__", None) for name in ("__aexit__", "_aexit")}
    while coro is not None and code is not None and depth < 100:
        at = getattr(coro, "cr_code", None)
        if at is code or (at is not None and at in exits):
            frame = coro.cr_frame
            seen = frame.f_locals if frame is not None else {}
            if at is not code:  # (a TaskGroup's)
                tg = seen.get("self")
                if not isinstance(tg, group) or getattr(tg, "_on_completed_fut", None) is not fut:
                    return None
                if getattr(tg, "_errors", True) or getattr(tg, "_aborting", True):
                    return None
                return {"fs": list(getattr(tg, "_tasks", ())), "return_when": "FIRST_COMPLETED"}
            if seen.get("waiter") is not fut or seen.get("timeout") is not None:
                return None
            return seen
        coro, depth = _awaits(coro), depth + 1
    return None


def _awaits(coro: Any) -> Any:
    """What a suspended coroutine (generator, async generator) awaits; through ``async for``'s
    step of an async generator (``asend``, which names its generator to the collector only: a
    LangGraph graph's ``ainvoke`` awaits its ``astream`` so), the generator. None at the end."""
    for name in ("cr_await", "gi_yieldfrom", "ag_await"):
        inner = getattr(coro, name, None)
        if inner is not None:
            return inner
    if type(coro).__name__ == "async_generator_asend":
        return next((g for g in gc.get_referents(coro) if type(g).__name__ == "async_generator"), None)
    return None


#: asyncio's own registries of live tasks, as far as this Python keeps them in its module (3.11:
#: ``_all_tasks``; 3.12, 3.13: ``_scheduled_tasks`` and ``_eager_tasks``; 3.14 keeps its own tasks
#: elsewhere): read in place by :func:`_beside`.
_REGISTRIES = ("_all_tasks", "_scheduled_tasks", "_eager_tasks")


def _beside(aio: Any, task: Any) -> bool:
    """Whether a task of ``task``'s loop runs beside it (:func:`_woken_otherwise`: a task, or a
    child of the gather a task awaits), found in asyncio's registries read in place, stopping at
    the first: a fan-out's answer, without ``all_tasks()``, which copies every task of the process (each call of N tasks at once cost N, all of them N²: 8,000 recorded tool calls at once
    took 14 s, not 2.6). False when none is found so, or a registry changes while read:
    :func:`_alone`'s full walk decides (which tasks a gather or ``asyncio.wait`` waits for is left
    to it: 8,000 of them are looked at once, not at each call). (Only a found task says anything:
    these registries need not hold every task.)"""
    loop = task.get_loop()
    module = getattr(aio, "tasks", None)
    try:
        for registry in (getattr(module, name, None) for name in _REGISTRIES):
            for other in registry if isinstance(registry, set | weakref.WeakSet) else ():
                if other is task or other.done() or other.get_loop() is not loop:
                    continue
                if not _started(other):
                    continue
                fut = getattr(other, "_fut_waiter", None)
                if _woken_otherwise(aio, other, fut):
                    return True
                if isinstance(fut, _gathering(aio)):  # (its last children are the likeliest to run)
                    children = reversed(getattr(fut, "_children", ()))
                    if any(c is not task and _woken_otherwise(aio, c) for c in children):
                        return True
    except RuntimeError:  # (a set changed size while read: another thread's loop made a task)
        return False
    return False


def next_sent(rt: Runtime) -> int:
    """1, 2, 3… per runtime (from :data:`sent_from`): the order in which its calls (model and tool)
    were *started*.

    Events are written when a call ends; this ordinal lets a replay answer identical concurrent
    calls in the order they began (see :func:`forkpoint.match.in_send_order`)."""
    with _sent_lock:
        counter = _sent_counters.get(rt)
        if counter is None:  # (one a finalizer run meanwhile made is kept: its ordinals were given)
            counter = _sent_counters.setdefault(rt, itertools.count(sent_from))
        _last_sent[rt] = n = next(counter)
        return n


#: Runtime → the last ordinal :func:`next_sent` gave it.
_last_sent: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


class Born(NamedTuple):
    """When a thread was started, or an asyncio task made, while a runtime was active
    (:func:`watch_threads`, :func:`watch_tasks`)."""

    #: That runtime.
    runtime: weakref.ReferenceType[Any]
    #: The last ordinal it had given then (:func:`next_sent`): a call whose ``finished`` is no
    #: later had ended before the thread or task began, so it did not make it.
    sent: int
    #: How many threads and tasks had been started so in this process before it (:func:`starts`).
    order: int


#: Thread or asyncio task → when it was started (:func:`watch_threads`, :func:`watch_tasks`).
_born: weakref.WeakKeyDictionary[Any, Born] = weakref.WeakKeyDictionary()
_starts = 0


def _note_born(started: Any, rt: Runtime) -> None:
    """Note that thread or task ``started`` begins now, while ``rt`` is active (:data:`_born`)."""
    global _starts
    with _sent_lock:
        order, _starts = _starts, _starts + 1  # (taken first: a finalizer run below takes the next)
        _born[started] = Born(weakref.ref(rt), _last_sent.get(rt, sent_from - 1), order)


def watch_threads() -> None:
    """Note when each thread started while a runtime is active was started (:class:`Born`), so that
    identical calls made by threads each started after the call before had ended (a LangGraph
    ``ToolNode``'s pool, made anew for each step) are told apart from threads racing each other
    (idempotent)."""
    real = threading.Thread.start
    if getattr(real, "__forkpoint_watch__", False):
        return

    def start(self: threading.Thread) -> None:
        rt = _active
        if rt is not None and self.ident is None:  # (a second start of a started thread starts nothing)
            _note_born(self, rt)
        real(self)

    functools.update_wrapper(start, real)
    start.__forkpoint_watch__ = True  # type: ignore[attr-defined]
    threading.Thread.start = start  # type: ignore[method-assign]


def caller_born(rt: Runtime) -> Born | None:
    """When the caller now, the running asyncio task or else the current thread, was started while
    ``rt`` was active, or None (the main thread, or one started before ``rt`` was). A task began
    after its thread did, so its beginning is the later bound on when the caller came to be. A
    task the main thread's own flow made has one: its code outside a running loop (``asyncio.run``'s
    task) or that task, which makes its tasks in its own order, as it makes its calls. A task other
    tasks made has that of the one of them the flow made (an agent run's task, whose tasks run its
    tools): tasks made as each woke may be made the other way round on replay (two sub-agents that
    each make a task once their own wait ends), and the flow's task they were made under not."""
    task = running_task()
    born = _born.get(task) if task is not None else None
    if born is None or born.runtime() is not rt:
        born = _born.get(threading.current_thread())
    return born if born is not None and born.runtime() is rt else None


def starts() -> int:
    """How many threads and asyncio tasks have been started in this process while a runtime was
    active: the :attr:`Born.order` of the next."""
    return _starts


#: The process whose ``os.exec*`` hand its recording or replay on to the program it becomes (one that
#: ``forkpoint record`` or ``replay`` started: ``forkpoint._boot``), or None.
exec_hands_over_in: int | None = None


def sent_past() -> int:
    """An ordinal past every one this process's runtimes gave (:func:`next_sent`): where the calls
    of the program it becomes through exec go on, and those of the runtimes it makes from now on
    (a recording that goes on after an exec that failed)."""
    global sent_from
    with _sent_lock:
        sent_from = max((next(c) for c in list(_sent_counters.values())), default=sent_from)
        return sent_from


#: Threads of forkpoint's own that must not be recorded or served (the live OTLP export sends
#: over HTTP clients forkpoint captures).
_unseen = threading.local()


def active() -> Runtime | None:
    """The active recorder or replayer, or None (always None in a thread of forkpoint's own work,
    see :func:`unseen`). A runtime given to :func:`activate_later` is made here, on first ask."""
    if getattr(_unseen, "on", False):
        return None
    if _active is None and _pending is not None:
        return _make_pending()
    return _active


def may_be_active() -> bool:
    """Whether a runtime is active or waits to be made on first ask (:func:`activate_later`), without
    making it: a hook that decides whether to ask at all (:mod:`forkpoint.capture.programs`)."""
    return (_active is not None or _pending is not None) and not getattr(_unseen, "on", False)


def active_for_http() -> Runtime | None:
    """:func:`active` for the HTTP capture adapters: None also where the request belongs to a call
    recorded at a higher level (:data:`http_recorded_above`), so it is neither recorded twice nor
    served from the session."""
    return None if http_recorded_above.get() else active()


def answered_from_cache(framework: str) -> None:
    """A ``framework`` answered a model request from its own cache while a runtime is active: no
    call was made, so none is recorded (or asked of the recording). Counted for the recording's
    warnings and the replay's verdict (:attr:`Runtime.cache_answers`)."""
    rt = active()
    counts = getattr(rt, "cache_answers", None) if rt is not None else None
    if counts is not None:
        with _lock:
            counts[framework] += 1


#: The text of the note a recording keeps of the state a framework keeps on disk as it opened it
#: (:func:`opened_store`).
STORED_STATE = "a framework opened the state it keeps on disk"


def opened_store(store: str, path: str, digest: str | None) -> None:
    """The framework ``store`` (its name and the class, ``strands' FileSessionManager``) opened the
    state it keeps on disk at ``path``, which held ``digest`` (None: nothing yet). Kept, and noted
    while recording: a replay that diverges where the agent started from another state (an earlier
    run's conversation left in the directory) says so (:attr:`Runtime.stored_states`)."""
    rt = active()
    if rt is None:
        return
    rt.stored_states.setdefault(path, []).append(digest)
    note = getattr(rt, "note", None)
    if callable(note):
        note(STORED_STATE, stored_state={"store": store, "path": path, "digest": digest})


#: How to turn off each framework's cache of model answers (by its name in :attr:`Runtime.cache_answers`),
#: the advice given wherever answers it gave are said.
CACHE_OFF = {"DSPy": "dspy.LM(..., cache=False)", "agno": "cache_response=False on the model"}


def cache_off_text(counts: Mapping[str, int]) -> str:
    """``dspy.LM(..., cache=False) for DSPy`` for the frameworks of ``counts`` that answered (joined
    by ``;``): how to turn their caches off."""
    return "; ".join(f"{CACHE_OFF[name]} for {name}" for name, n in counts.items() if n and name in CACHE_OFF)


def cached_answers_text(counts: Mapping[str, int]) -> str:
    """``DSPy answered 3 requests from its own cache`` for :attr:`Runtime.cache_answers` (several
    frameworks joined by ``and``), or ``""`` when none did."""
    return " and ".join(
        f"{name} answered {n} request{'s' if n != 1 else ''} from its own cache"
        for name, n in counts.items()
        if n
    )


def unseen() -> None:
    """Mark the calling thread as forkpoint's own: the capture hooks call straight through in it,
    so what it sends is neither recorded nor served."""
    _unseen.on = True


def activate(rt: Runtime) -> None:
    """Make ``rt`` the active runtime. Raises :class:`~forkpoint.errors.ForkpointError` if another
    one is active. (The capture hooks must be installed already: :func:`forkpoint.api.start`.)"""
    global _active
    if _pending is not None:
        _make_pending()
    with _lock:
        _refuse_another(rt)
        _active = rt


def check_free(mode: str) -> None:
    """Raise :class:`~forkpoint.errors.ForkpointError` where :func:`activate` would for a new
    runtime of ``mode`` (``record``, ``replay``): before it writes a session or changes the
    environment."""
    if _pending is not None:
        _make_pending()
    with _lock:
        _refuse_another(None, mode)


def _refuse_another(rt: Runtime | None, mode: str | None = None) -> None:
    if _active is None or _active is rt:
        return
    hint = (
        ": a program that records itself with forkpoint.record() cannot be replayed by `forkpoint replay`, "
        "`check` or `make-test`; replay its session in Python, with forkpoint.replay()"
        if _active.mode == "replay" and mode == "record"
        else ""
    )
    raise ForkpointError(
        f"a forkpoint {_active.mode} is already active in this process; finish it before starting another{hint}"
    )


#: What :func:`activate_later` was given and :func:`active` has not made yet.
_pending: Callable[[], Runtime | None] | None = None
_making = threading.RLock()
_making_here = threading.local()


def activate_later(make: Callable[[], Runtime | None]) -> None:
    """Activate the runtime ``make()`` returns when one is first asked for (:func:`active`), not
    now: a bootstrapped program that never makes a call (``python -c pass``, a build step of a
    recorded script) never loads the recorder (issue 15: start-up). ``make`` runs once, in the
    thread that asks first; it returns None when it cannot make one (it says why itself), and the
    program then goes on unrecorded."""
    global _pending
    with _lock:
        if _active is not None or _pending is not None:
            raise ForkpointError("a forkpoint runtime is already active in this process")
        _pending = make


def cancel_pending() -> None:
    """Forget a runtime :func:`activate_later` was given and nothing asked for (the program ends)."""
    global _pending
    with _making:
        _pending = None


def _make_pending() -> Runtime | None:
    global _pending, _active
    with _making:  # other threads wait here until the runtime exists
        make = _pending
        if make is None:
            return _active
        if getattr(_making_here, "on", False):  # make() itself asks: there is none yet
            return None
        _making_here.on = True
        try:
            rt = make()
        finally:
            _making_here.on = False
            _pending = None
        with _lock:
            _active = rt
    return rt


def deactivate(rt: Runtime) -> None:
    """Clear the active runtime if it is ``rt``."""
    global _active
    with _lock:
        if _active is rt:
            _active = None
