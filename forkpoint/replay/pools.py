"""A thread pool's results taken as they finish (``concurrent.futures.as_completed``) come back on
replay in the order they finished.

Live, a pool's calls are still running when the program starts waiting on them, and ``as_completed``
hands each future back as it finishes. Served from the recording, they finish within a millisecond
or two of one another (in the order they finished live: :func:`~forkpoint.replay.release_order`),
often all before the program waits; ``as_completed`` hands back the futures already finished in the
order of a set, which is arbitrary: an agent that sends the results on in the order it got them
would send another request (a divergence), or print another output under "replay ok". So while a
replay is active, futures already finished are handed back in the order they finished, as live.

CPython's ``as_completed`` yields finished futures through ``concurrent.futures._base.
_yield_finished_futures(fs, waiter, ref_collect)`` (3.8 to 3.13), popping them from the end of the
list ``fs``: that function, looked up at every call, is wrapped to sort ``fs`` first, which also
covers a program that imported ``as_completed`` before the replay began. Each future is stamped as
it finishes (``Future.set_result``, ``set_exception``). Where the function is not there (another
Python, a later CPython), nothing is wrapped, the order is a set's, and the replay says so on
stderr when it installs its hooks (once per process).

``concurrent.futures.wait`` returns sets, whose order nothing reproduces; but how many futures its
``done`` holds decides the program's path (a loop that takes what has finished each time), and
served at once, all have often finished when a replay's wait returns, where live the first alone
had (``FIRST_COMPLETED``), or those finished by the first failure (``FIRST_EXCEPTION``) or by its
timeout. CPython's ``wait`` returns through ``DoneAndNotDoneFutures``, looked up at every call: it
is replaced by a subclass. ``asyncio.wait`` waits through ``asyncio.tasks._wait``, looked up at
every call too: it is wrapped, and on replay the futures it waits for are stamped as they finish (a
done callback: run in the order they finished). Each counts the process's waits that may return
before all have finished, of its kind and where they are made, in the order they return. A recording notes a wait that got
another number than the wait made there before it (:data:`AT_ONCE`; usually one for the first
finished, all for the others), which holds for the waits after it until the next note: a polling
loop writes a note when what its polls get changes, not at each poll; a replay hands back as many as that wait got live, the first to finish first, and leaves the rest in
``not_done`` for the next wait, which returns at once. A pool's future finishes, in that order,
where its served call's result was handed over (:func:`released`).

Not held, but said: the futures asyncio makes of a pool's (``asyncio.wrap_future``, which
``run_in_executor`` and ``asyncio.to_thread`` use) are finished by the event loop when the pool's
thread hands them over, after the pool's function has returned, and the recording keeps the order
the calls finished in, not the order these did. An asyncio ``wait`` or ``as_completed`` that takes
them, and a ``wait`` or ``as_completed`` of a process pool's futures, are noted when recorded and
told to the replay (:func:`_not_held`), whose verdict says so.
"""

from __future__ import annotations

import concurrent.futures._base as futures_base
import functools
import itertools
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from types import FrameType
from typing import Any

from .. import runtime
from ..text import say

#: The attribute a finished future holds its place in the order futures finished in, in this process.
_FINISHED = "_forkpoint_finished"
_finishing = itertools.count()  # (next() on it is atomic under the GIL: pool threads finish at once)

#: The text of the note a recording keeps of a wait that got another number of finished futures than
#: the one made there before it (:func:`_as_live`).
AT_ONCE = "a wait got another number of finished futures than usual"


class _Made:
    """The waits of one kind made at one place (:func:`_as_live`): how many so far (the last one's
    ordinal), and what the last one a recording noted there got (:func:`_outcome`) and in which
    process (a forked child's copy of its parent's is not its own)."""

    __slots__ = ("count", "got", "pid")

    def __init__(self) -> None:
        self.count = 0
        self.got = _USUAL
        self.pid: int | None = None


#: What a wait usually gets (:func:`_outcome`): the usual number of finished futures, none of the
#: program's own.
_USUAL: tuple[int | None, int] = (None, 0)


#: Runtime → its process's waits that may return before all have finished (:func:`_as_live`), by
#: kind (``threads``, ``asyncio``) and where they are made.
_waits: weakref.WeakKeyDictionary[Any, dict[tuple[str, str], _Made]] = weakref.WeakKeyDictionary()
#: Re-entrant, as :data:`forkpoint.runtime._sent_lock` is: what it guards allocates, and a finalizer
#: the garbage collector runs there may make a task, which notes where it was made under it again.
_waits_lock = threading.RLock()

#: The attribute a pool's future holds True in when a tool's call ended, or a model call's answer
#: came, in the work that finished it (:func:`_call_ended`); one without it is the program's own (a
#: timer, a computation).
_CALLED = "_forkpoint_called"

#: The attribute a pool's future holds True in when it finished after one whose tool call ended
#: later (:func:`_stamping`, recording): the pool function worked on after its call. A replay
#: releases the calls in the order they ended live, and hands the futures back in that order
#: (:func:`released`): this one's place is not held, which the recording notes (:func:`_not_held`).
_INVERTED = "_forkpoint_inverted"
#: The attribute a pool's future holds its place in the order a replay released the served calls
#: in, from when its call is handed over (:func:`released`) until it finishes.
_RELEASED = "_forkpoint_released"
#: The last tool call's place in the order they ended of the pool futures finished so far in this
#: process (recording: :data:`_INVERTED`).
_ended_last = [-1]

#: The attribute a process pool's future holds True in (finished by the pool's manager thread as a
#: worker's result comes back): its calls are served in the workers, and the order its futures
#: finish in is not held (:func:`_of_processes`).
_OF_PROCESSES = "_forkpoint_of_processes"

#: Runtime → the ``as_completed`` and ``wait`` calls, and where made, that took a process pool's
#: futures while it recorded (:func:`_of_processes`), once each.
_processes_taken: weakref.WeakKeyDictionary[Any, list[tuple[str, str]]] = weakref.WeakKeyDictionary()


class _Pool:
    """What is known of the pool's future an asyncio future was made of (:data:`_made_of`): whether
    it is a process pool's (:data:`_OF_PROCESSES`). Not the pool's future itself, which holds the
    asyncio future (a done callback): held by the map, it would keep every one alive."""

    __slots__ = (_OF_PROCESSES,)


#: The attribute a pool's future holds its :class:`_Pool` in (:func:`_pool_of`).
_POOL = "_forkpoint_pool"

#: An asyncio future made of a pool's (``asyncio.wrap_future``: ``run_in_executor``,
#: ``asyncio.to_thread``), or a task that made one, → its pool's :class:`_Pool`
#: (:func:`_install_wrap_future`). The event loop finishes it when the pool's thread hands it over,
#: after the pool's function has returned: the order a replay releases the served calls in does not
#: decide the order these finish in.
_made_of: weakref.WeakKeyDictionary[Any, _Pool] = weakref.WeakKeyDictionary()

#: Runtime → the asyncio ``as_completed`` and ``wait`` calls, and where made, that took the futures
#: asyncio made of a thread pool's while it recorded (:func:`_not_held`), once each.
_threads_taken: weakref.WeakKeyDictionary[Any, list[tuple[str, str]]] = weakref.WeakKeyDictionary()

#: The texts of the notes a recording keeps of them (:func:`end_recording`).
PROCESS_POOLS = "a process pool's futures were taken as they finished"
THREAD_POOLS = "a thread pool's futures, or asyncio's made of them, were taken as they finished"
#: What :data:`THREAD_POOLS` says of them, here and in the verdict.
THREAD_POOLS_WHOSE = "a thread pool's futures (or asyncio's made of them)"

#: The asyncio tasks a tool's call ended, or a model call's answer came, in (:func:`_call_ended`).
_called_tasks: weakref.WeakSet[Any] = weakref.WeakSet()

#: A task whose coroutine is asyncio's own (``asyncio.wait`` made a task of by ``create_task``,
#: ``gather`` or ``wait_for``) → where the program made it, and which of those made there it is
#: (``module:function+line#k``, :func:`_made_where`): a wait it runs is counted there, not where the
#: event loop calls it, with every other wait run so, in the order they return.
_made_at: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()

#: Runtime → how many tasks of asyncio's own coroutines were made at each place (:data:`_made_at`).
_made_here: weakref.WeakKeyDictionary[Any, dict[str, int]] = weakref.WeakKeyDictionary()

#: An asyncio future → its place in the order futures finished in (:func:`install_asyncio`).
_done_at: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

#: The functions this process has said it could not wrap (:func:`_unheld`).
_unheld_said: set[str] = set()


def install(mode: str) -> None:
    """Wrap ``as_completed``'s yielding of finished futures and ``wait``'s result, and stamp futures
    as they finish (idempotent; straight through while no runtime is active). A ``replay`` says on
    stderr what it cannot hold in order."""
    if _call_ended not in runtime.call_ended:
        runtime.call_ended.append(_call_ended)
    if not _install_wait() and mode == "replay":
        _unheld("DoneAndNotDoneFutures")
    real = _to_wrap(futures_base, "_yield_finished_futures", mode)
    if real is None:
        return
    future = futures_base.Future
    for name in ("set_result", "set_exception"):
        setattr(future, name, _stamping(getattr(future, name)))

    @functools.wraps(real)
    def yielded(fs: list[Any], waiter: Any, ref_collect: Any) -> Iterator[Any]:
        rt = runtime.active()
        if rt is not None:
            # (→ as_completed →: its futures, all of them, in its ``fs``)
            caller = sys._getframe(1)
            _not_held(rt, "as_completed", _place(caller.f_back), fs, caller.f_locals.get("fs") or ())
        if rt is not None and rt.mode == "replay":
            fs.sort(key=_finished_at, reverse=True)  # (popped from the end: the first finished first)
        return real(fs, waiter, ref_collect)  # type: ignore[no-any-return]

    yielded.__forkpoint_pools__ = True  # type: ignore[attr-defined]
    futures_base._yield_finished_futures = yielded  # type: ignore[attr-defined]


def released() -> None:
    """Note that a served call's result is handed over in this thread now: the future of the pool's
    work that made the call finishes in that place (its own end may come after that of a call
    released later in another thread: a recorded exception is raised again through more frames);
    until then, the future holds that place (:data:`_RELEASED`): a wait that hands back one of a
    later place first is said (:func:`_overtaken`)."""
    _thread.released = at = next(_finishing)
    if threading.current_thread() is threading.main_thread():  # (no pool's work runs there)
        return
    # (the frame of ``concurrent.futures.thread``'s ``_WorkItem.run`` holds the future it finishes)
    pool = sys.modules.get("concurrent.futures.thread")
    code = getattr(getattr(getattr(pool, "_WorkItem", None), "run", None), "__code__", None)
    if code is None:
        return
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code is not code:
        frame = frame.f_back
    future = getattr(frame.f_locals.get("self"), "future", None) if frame is not None else None
    if future is not None:
        setattr(future, _RELEASED, at)


_thread = threading.local()


def _call_ended(returned: bool) -> None:
    """A tool's call ended, or a model call's answer came, in this thread or asyncio task: the
    future its work finishes stands for a call (:data:`_CALLED`, :data:`_called_tasks`); a tool's
    call that ``returned`` to the program takes its place in the order they do (:data:`_INVERTED`);
    a task that awaited a pool's future before ends as this call's result is released, not as that
    future did (:data:`_made_of`), until it awaits another."""
    task = runtime.running_task()
    if task is None:
        # (its place in the order tool calls end; a model call's answers are not held in order)
        _thread.called = next(_finishing) if returned else -1
        return
    try:
        _called_tasks.add(task)
        _made_of.pop(task, None)
    except TypeError:  # (a task factory's object no weakref can hold: taken for the program's own)
        pass


def _own(future: Any) -> bool:
    """Whether ``future`` is the program's own: no call ended in what finished it."""
    return not getattr(future, _CALLED, False) and future not in _called_tasks


def _stamping(method: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(method)
    def finish(self: futures_base.Future[Any], *args: Any, **kwargs: Any) -> Any:
        at = getattr(_thread, "released", None)
        _thread.released = None
        called = getattr(_thread, "called", None)
        if called is not None:
            _thread.called = None
            setattr(self, _CALLED, True)
            if called >= 0 and getattr(runtime.active(), "mode", None) == "record":
                with _waits_lock:
                    if called < _ended_last[0]:
                        setattr(self, _INVERTED, True)
                    _ended_last[0] = max(called, _ended_last[0])
        if type(threading.current_thread()).__name__ == "_ExecutorManagerThread":
            setattr(self, _OF_PROCESSES, True)
            if (pool := getattr(self, _POOL, None)) is not None:
                setattr(pool, _OF_PROCESSES, True)
        # (before it is done: whoever sees it done sees it)
        setattr(self, _FINISHED, next(_finishing) if at is None else at)
        return method(self, *args, **kwargs)  # (set_result(result=…): the program's call as it made it)

    return finish


def _finished_at(future: futures_base.Future[Any]) -> int:
    # (a future finished before this was installed, or cancelled, first: no call it stands for was served)
    return getattr(future, _FINISHED, -1)


#: The functions wrapped here, by name: their module, and what a replay does without them.
_UNHELD = {
    "_yield_finished_futures": (
        "concurrent.futures",
        "a thread pool's finished futures (concurrent.futures.as_completed) come back in any order, not "
        "the order they finished live",
    ),
    "DoneAndNotDoneFutures": (
        "concurrent.futures",
        "a wait that may return before all of a thread pool's futures have finished (concurrent.futures."
        "wait) gets every one served by then, not as many as live",
    ),
    "as_completed": (
        "asyncio",
        "asyncio tasks that had finished before an asyncio.as_completed began come back in any order, not "
        "the order they finished live",
    ),
    "_wait": (
        "asyncio.tasks",
        "a wait that may return before all its tasks have finished (asyncio.wait) gets every one served "
        "by then, not as many as live",
    ),
}


def _to_wrap(owner: Any, name: str, mode: str) -> Any:
    """``owner``'s function ``name`` to wrap, or None: there is none (said on replay: :func:`_unheld`),
    or it is wrapped already."""
    real = getattr(owner, name, None)
    if real is None:
        if mode == "replay":
            _unheld(name)
        return None
    return None if getattr(real, "__forkpoint_pools__", False) else real


def _unheld(name: str) -> None:
    """Say on stderr, once per process, that there is no ``name`` to wrap (:data:`_UNHELD`)."""
    if name not in _unheld_said:
        _unheld_said.add(name)
        module, what = _UNHELD[name]
        say(
            f"forkpoint: WARNING: this Python's {module} has no {name}: on replay, {what}, and the "
            "program may take another way than live"
        )


def _install_wait() -> bool:
    """Replace ``DoneAndNotDoneFutures`` (idempotent); False when there is none."""
    real: Any = getattr(futures_base, "DoneAndNotDoneFutures", None)
    if real is None:
        return False
    if getattr(real, "__forkpoint_pools__", False):
        return True

    class Waited(real):  # type: ignore[misc]
        __slots__ = ()
        __forkpoint_pools__ = True

        def __new__(cls, done: set[Any], not_done: set[Any]) -> Any:
            done, not_done = _held(sys._getframe(1), done, not_done)
            return super().__new__(cls, done, not_done)

    # (a subclass, so that isinstance of the real one holds; named as it, so it reads as it)
    Waited.__name__, Waited.__qualname__, Waited.__module__ = (
        real.__name__,
        real.__qualname__,
        real.__module__,
    )
    futures_base.DoneAndNotDoneFutures = Waited  # type: ignore[misc]
    return True


def _held(caller: FrameType, done: set[Any], not_done: set[Any]) -> tuple[set[Any], set[Any]]:
    """``concurrent.futures.wait``'s ``done`` and ``not_done`` as :func:`_as_live` has them."""
    rt = runtime.active()
    if rt is None or caller.f_code.co_name != "wait" or caller.f_globals is not vars(futures_base):
        return done, not_done
    seen = caller.f_locals
    first = seen.get("return_when") == futures_base.FIRST_COMPLETED
    if not first and seen.get("return_when") != futures_base.FIRST_EXCEPTION and seen.get("timeout") is None:
        return done, not_done  # (it returns when all have finished: nothing to hold)
    usual = 1 if first else len(done) + len(not_done)
    at = _place(caller.f_back)
    _not_held(rt, "wait", at, done, done | not_done)
    done, not_done, short = _as_live(rt, "threads", at, done, not_done, _finished_at, usual)
    if short is not None:  # (decided holding the futures' locks: it cannot wait for more here)
        _said_short(rt, short)
    return done, not_done


def install_asyncio(aio: Any, mode: str) -> None:
    """Wrap ``asyncio.wait``'s waiting (``asyncio.tasks._wait``) as :func:`_as_live` has it
    (idempotent; straight through while no runtime is active); a ``replay`` says on stderr when
    there is none."""
    tasks = getattr(aio, "tasks", None)
    real = _to_wrap(tasks, "_wait", mode)
    if real is None:
        return
    runtime.task_made.extend((_stamped_as_it_finishes, _made_where))

    @functools.wraps(real)
    async def waited(fs: set[Any], timeout: Any, return_when: Any, loop: Any) -> tuple[set[Any], set[Any]]:
        rt = runtime.active()
        if rt is None or (return_when == aio.ALL_COMPLETED and timeout is None):
            return await real(fs, timeout, return_when, loop)  # type: ignore[no-any-return]
        # (→ asyncio.wait →: the program's caller, or where it made the task that runs the wait)
        at = _program_place(sys._getframe(1), runtime.running_task()) or _place(sys._getframe(2))
        if rt.mode == "replay":
            for f in fs:
                _stamp(f)  # (a task made in the replay is already: another future is now)
        done, pending = await real(fs, timeout, return_when, loop)
        if rt.mode == "replay" and any(_done_at.get(f) == -1 for f in done):
            # (finished, but its callback queued behind the one that woke this wait: once round the
            # loop, it has run; the callbacks of futures that finished later run after it)
            await aio.sleep(0)
        _not_held(rt, "asyncio.wait", at, done, fs)
        first = 1 if return_when == aio.FIRST_COMPLETED else len(fs)
        done, pending, short = _as_live(rt, "asyncio", at, done, pending, _finished_in_loop, first)
        if short is not None:
            # (not waited for: a future of the program's own may be one the tool's body, which a
            # replay does not run, would have finished, and the replay would hang)
            _said_short(rt, short)
        return done, pending

    waited.__forkpoint_pools__ = True  # type: ignore[attr-defined]
    tasks._wait = waited  # type: ignore[union-attr]
    _install_as_completed(aio, mode)
    _install_wrap_future(aio)


def _install_wrap_future(aio: Any) -> None:
    """Wrap ``asyncio.wrap_future`` (which ``run_in_executor``, and so ``asyncio.to_thread``, look
    up at every call) so that the future it makes of a pool's, and the task that made it, are known
    as such (:data:`_made_of`); not in a tool's body, which a replay does not run (its task ends as
    its served call is released). A program that imported it before the recording began, or another
    event loop that did (uvloop), makes futures not known so."""
    futures = getattr(aio, "futures", None)
    if (real := _to_wrap(futures, "wrap_future", "record")) is None:
        return

    @functools.wraps(real)
    def wrap_future(future: Any, *, loop: Any = None) -> Any:
        from ..capture.tools import in_tool_body  # (not at start-up: hooks.install loads this module)

        made = real(future, loop=loop)
        if made is not future and runtime.active() is not None and not in_tool_body():
            # (a task that awaits it, asyncio.to_thread's, ends as it does)
            pool = _pool_of(future)
            for known in (made, runtime.running_task()):
                try:
                    _made_of[known] = pool
                except TypeError:  # (None, or an object no weakref can hold: not known so)
                    pass
        return made

    wrap_future.__forkpoint_pools__ = True  # type: ignore[attr-defined]
    futures.wrap_future = aio.wrap_future = wrap_future  # type: ignore[union-attr]
    _install_run_in_executor(aio)


def _pool_of(future: futures_base.Future[Any]) -> _Pool:
    """The :class:`_Pool` of a pool's ``future`` (one however many asyncio futures are made of it)."""
    if (pool := getattr(future, _POOL, None)) is None:
        pool = _Pool()
        setattr(future, _POOL, pool)
    if getattr(future, _OF_PROCESSES, False):  # (finished before it had one: _stamping)
        setattr(pool, _OF_PROCESSES, True)
    return pool


def _install_run_in_executor(aio: Any) -> None:
    """Wrap the event loop's ``run_in_executor`` so that a process pool's future it makes asyncio's
    is known as such before it finishes (:func:`_of_processes`; finished, its manager thread's
    marks it: :func:`_stamping`). Another loop's (uvloop's) is not wrapped."""
    from concurrent.futures import ProcessPoolExecutor

    loop_class = getattr(getattr(aio, "base_events", None), "BaseEventLoop", None)
    if loop_class is None or (real := _to_wrap(loop_class, "run_in_executor", "record")) is None:
        return

    @functools.wraps(real)
    def run_in_executor(self: Any, executor: Any, func: Any, *args: Any) -> Any:
        future = real(self, executor, func, *args)
        if isinstance(executor, ProcessPoolExecutor) and future in _made_of:
            setattr(_made_of[future], _OF_PROCESSES, True)
        return future

    run_in_executor.__forkpoint_pools__ = True  # type: ignore[attr-defined]
    loop_class.run_in_executor = run_in_executor


def _install_as_completed(aio: Any, mode: str) -> None:
    """Wrap ``asyncio.as_completed`` (a generator in 3.11 and 3.12) so that on replay the tasks
    that had finished when it began come first, in the order they finished: it gives each its
    callback in a set's order, and a finished task's runs at once. A ``replay`` says on stderr when
    it cannot be wrapped (another Python's ``as_completed``)."""
    import inspect  # (asyncio has imported it)

    real = getattr(aio, "as_completed", None)
    if not inspect.isgeneratorfunction(real):
        if mode == "replay":
            _unheld("as_completed")
        return

    @functools.wraps(real)
    def as_completed(fs: Any, *, timeout: Any = None) -> Iterator[Any]:
        rt = runtime.active()
        loop = aio._get_running_loop()
        if rt is None or loop is None or aio.isfuture(fs) or aio.iscoroutine(fs):
            yield from real(fs, timeout=timeout)  # (its errors as it raises them)
            return
        # (tasks made in the order given: as_completed makes them in a set's, by their coroutines'
        # addresses, which a replay's are not, and the calls would be asked in another order)
        todo = {aio.ensure_future(f, loop=loop) for f in dict.fromkeys(fs)}
        at = _place(sys._getframe(1))

        said = False

        def took() -> None:
            # (once a result is taken: a task has made its pool's future by then, asyncio.to_thread's)
            nonlocal said
            said = said or _not_held(rt, "asyncio.as_completed", at, [f for f in todo if f.done()], todo)

        taken: Iterator[Any] = real(todo, timeout=timeout)
        if rt.mode == "replay":
            finished = sorted((f for f in todo if f.done()), key=_finished_in_loop)
            taken = itertools.chain(
                (_result_of(aio, f, settle=i == 0) for i, f in enumerate(finished)),
                real(todo.difference(finished), timeout=timeout),
            )
        for next_one in taken:
            yield _then(next_one, took)

    aio.as_completed = aio.tasks.as_completed = as_completed


async def _then(next_one: Any, took: Callable[[], None]) -> Any:
    """Await ``as_completed``'s ``next_one``, then call ``took``."""
    try:
        return await next_one
    finally:
        took()


async def _result_of(aio: Any, future: Any, settle: bool) -> Any:
    """What awaiting ``as_completed``'s next gives for a ``future`` finished already; the first
    goes once round the loop, as ``as_completed``'s own first does (its queue is filled by
    callbacks)."""
    if settle:
        await aio.sleep(0)
    return future.result()


def _not_held(
    rt: runtime.Runtime, how: str, at: str, finished: Iterable[Any], waited: Iterable[Any] = ()
) -> bool:
    """Note that an ``as_completed`` or ``wait`` (``how``) made ``at`` took a process pool's
    finished futures, whose order and number a replay does not hold; or, of the futures asyncio made
    of a thread pool's (:data:`_made_of`), ``finished`` one and ``waited`` for more than one, whose
    order a replay does not hold; or, of a thread pool's own, ``waited`` for more than one, one
    ``finished`` after a future whose call ended later (:data:`_INVERTED`: the recording's note made
    at the same place tells a replay, ``pools_noted``), or handed back by a replay before one whose
    call it released earlier (:func:`_overtaken`): their order is not held either. Told to the
    replay, or kept for the recording's end (:func:`end_recording`). True when it noted any."""
    finished, waited = list(finished), list(waited)
    processes = any(_of_processes(f) for f in finished)
    if processes:
        _taken(rt, "processes", how, at)
    threads = (
        any(f in _made_of and not _of_processes(f) for f in finished)
        and sum(f in _made_of for f in waited) > 1
    )
    if not threads and how in ("as_completed", "wait") and len(waited) > 1:
        if rt.mode == "record":
            threads = any(getattr(f, _INVERTED, False) for f in finished)
        else:
            noted = getattr(rt, "pools_noted", None)
            threads = (callable(noted) and bool(noted(how, at))) or _overtaken(finished, waited)
    if threads:
        _taken(rt, "threads", how, at)
    return processes or threads


def _overtaken(finished: list[Any], waited: list[Any]) -> bool:
    """Whether a replay hands back one of ``finished`` while one of ``waited`` whose served call was
    released before it (:func:`released`) has not finished: its pool function is still working
    after its call, and the order of the calls, which the replay holds, is not the futures'."""
    last = max(map(_finished_at, finished), default=-1)
    return any(not f.done() and getattr(f, _RELEASED, last) < last for f in waited)


def _of_processes(future: Any) -> bool:
    """Whether ``future`` is a process pool's, or asyncio's made of one (:data:`_made_of`)."""
    return getattr(future, _OF_PROCESSES, False) or (
        future in _made_of and getattr(_made_of[future], _OF_PROCESSES, False)
    )


def _taken(rt: runtime.Runtime, pools: str, how: str, at: str) -> None:
    """Tell the replay that ``how`` made ``at`` took the futures of ``pools`` (``processes``,
    ``threads``) as they finished, or keep it for the recording's end (:func:`end_recording`)."""
    if rt.mode == "replay":
        said = getattr(rt, "not_held", None)
        if callable(said):
            said(pools, how, at)
        return
    with _waits_lock:
        taken = (_processes_taken if pools == "processes" else _threads_taken).setdefault(rt, [])
        if (how, at) not in taken:
            taken.append((how, at))


def _finished_in_loop(future: Any) -> int:
    return _done_at.get(future, -1)


def _said_short(rt: runtime.Runtime, short: dict[str, Any]) -> None:
    """Tell the replay that a wait got fewer futures of the program's own than live (``short``:
    ``waits``, ``at``, ``wait``, ``live``, ``replay``)."""
    said = getattr(rt, "own_short", None)
    if callable(said):
        said(short)


def _done(future: Any) -> None:
    _done_at[future] = next(_finishing)


def _stamped_as_it_finishes(task: Any) -> None:
    """Stamp a task made while a replay is active as it finishes: one that finished before a wait
    began (the program was busy) is handed back in its place too, not in a set's order."""
    rt = runtime.active()
    if rt is not None and rt.mode == "replay":
        _stamp(task)


def _stamp(future: Any) -> None:
    """Stamp an unfinished asyncio ``future`` as it finishes (:data:`_done_at`: -1 until then), once
    however many waits wait for it. One finished already keeps the place it has (-1 when unknown)."""
    if not future.done() and future not in _done_at:
        _done_at[future] = -1
        future.add_done_callback(_done)


def _made_where(task: Any) -> None:
    """Note where the program made ``task``, when its coroutine is asyncio's own
    (:data:`_made_at`); not in a tool's body, which a replay does not run."""
    from ..capture.tools import in_tool_body  # (not at start-up: hooks.install loads this module)

    rt = runtime.active()
    frame = _coroutine_frame(task)
    if rt is None or frame is None or not _asyncio_s(frame) or in_tool_body():
        return
    at = _program_place(sys._getframe(2), runtime.running_task())  # (→ runtime's create_task →)
    if at is None:
        return
    with _waits_lock:
        made = _made_here.setdefault(rt, {})
        made[at] = made.get(at, 0) + 1
        _made_at[task] = f"{at}#{made[at]}"


def _coroutine_frame(task: Any) -> FrameType | None:
    """The frame of ``task``'s coroutine (None when it has none, or a task factory's object does
    not say: an error here would be raised in the program's ``create_task``)."""
    get_coro = getattr(task, "get_coro", None)
    return getattr(get_coro(), "cr_frame", None) if callable(get_coro) else None


def _asyncio_s(frame: FrameType) -> bool:
    return str(frame.f_globals.get("__name__")).partition(".")[0] == "asyncio"


def _program_place(frame: FrameType | None, task: Any) -> str | None:
    """Where the program is in ``frame`` or the frames out of it (:func:`_place`), past asyncio's
    own; when ``task``'s coroutine is asyncio's own too, where the program made ``task``
    (:data:`_made_at`; None when unknown). The frames out of a task's own are the event loop's."""
    root = _coroutine_frame(task)
    while frame is not None:
        if not _asyncio_s(frame):
            return _place(frame)
        if frame is root:
            return _made_at.get(task)
        frame = frame.f_back
    return None


def _place(frame: FrameType | None) -> str:
    """Where a wait is made: the module, function and line in it of ``frame`` (the same where the
    program runs from another folder)."""
    if frame is None:
        return "?"
    code = frame.f_code
    return f"{frame.f_globals.get('__name__')}:{code.co_qualname}+{frame.f_lineno - code.co_firstlineno}"


def end_recording(rt: runtime.Runtime) -> None:
    """Note, for each place whose last wait in this process got another than the usual
    (:func:`_as_live`), that none came after it: a replay's wait made there past those made live
    gets the usual, not that. (A process that ends without it, through ``os._exit``, ended in that
    run: a replay's waits past it get what the run got.) And say which ``as_completed`` and
    ``wait`` calls took a process pool's futures, whose order and number a replay does not hold."""
    note, pid = getattr(rt, "note", None), os.getpid()
    if not callable(note):
        return
    with _waits_lock:
        ended = [
            (place, m.count)
            for place, m in (_waits.get(rt) or {}).items()
            if m.pid == pid and m.got != _USUAL
        ]
        processes = list(_processes_taken.get(rt) or ())
        threads = list(_threads_taken.get(rt) or ())
    for (waits, at), count in ended:
        _noted(note, waits, at, count + 1, _USUAL)
    for taken, text, key, whose, which, held in (
        (
            processes,
            PROCESS_POOLS,
            "process_pools",
            "a process pool's futures",
            ", ProcessPoolExecutor",
            "order and number",
        ),
        (threads, THREAD_POOLS, "thread_pools", THREAD_POOLS_WHOSE, "", "order"),
    ):
        if taken:
            note(text, **{key: [{"waits": how, "at": at} for how, at in taken]})
            say(
                f"forkpoint: WARNING: this run took {whose} as they finished ("
                f"{', '.join(f'{how} at {at}' for how, at in taken)}{which}): a replay does not hold the "
                f"{held} they finished in, and its verdict will say so"
            )


def _noted(note: Callable[..., Any], waits: str, at: str, wait: int, got: tuple[int | None, int]) -> None:
    """Note that the ``wait``-th wait of ``waits``' kind made ``at``, and each made there after it
    until the next note, got ``got`` (:func:`_outcome`)."""
    done, own = got
    note(
        AT_ONCE,
        finished_at_once={"waits": waits, "at": at, "wait": wait, "done": done, "own": own, "onward": True},
    )


def _as_live(
    rt: runtime.Runtime,
    waits: str,
    at: str,
    done: set[Any],
    not_done: set[Any],
    finished_at: Callable[[Any], int],
    usual: int,
) -> tuple[set[Any], set[Any], dict[str, Any] | None]:
    """A wait of ``waits``' kind made ``at`` (:func:`_place`) that may return before all its
    futures have finished, which usually get ``usual`` (one for the first finished, all for the
    first failure or a timeout), none of them the program's own (:func:`_own`: a timer, a
    computation): recorded, noted when it got another number, or another number of the program's
    own, than the wait made there before it (:func:`_outcome`), the note holding for the waits after
    it until the next (a polling loop, ``wait(fs, timeout=0)``, writes one for a run of polls that
    got nothing, not one at each); replayed, ``done`` holds as many as it did live, of the program's
    own first, then the first to finish (by ``finished_at``), and ``not_done`` the rest; and when it
    got fewer of the program's own than live (a served call's future finished first), how many
    (``waits``, ``at``, ``wait``, ``live``, ``replay``), else None. Counted
    by where they are made: waits made live only (a library's on the network) do not shift the
    program's; and not at all in forkpoint's own code or a tool's body, which a replay does not run (its wait, through a
    helper of the program's, would be the program's first there)."""
    from ..capture.tools import in_tool_body  # (not at start-up: hooks.install loads this module)

    if in_tool_body() or at.startswith("forkpoint."):  # (forkpoint's own: a streamed tool's, live only)
        return done, not_done, None
    got = _outcome(done, usual)
    with _waits_lock:
        made = _waits.setdefault(rt, {}).setdefault((waits, at), _Made())
        made.count += 1
        wait, pid = made.count, os.getpid()
        changed = got != (made.got if made.pid == pid else _USUAL)
        made.got, made.pid = got, pid
    if rt.mode == "record":
        note = getattr(rt, "note", None)
        if changed and callable(note):
            # (written as it is known: a process that ends in a run of alike waits loses no note)
            _noted(note, waits, at, wait, got)
        return done, not_done, None
    at_once = getattr(rt, "finished_at_once", None)
    live, own = at_once(waits, at, wait, len(done), usual) if callable(at_once) else (usual, 0)
    theirs = sorted(done, key=lambda f: (not _own(f), finished_at(f)))
    mine = sum(map(_own, theirs))
    short = {"waits": waits, "at": at, "wait": wait, "live": own, "replay": mine} if mine < own else None
    if len(done) <= live:
        return done, not_done, short
    # (the program's own first, as many as live got; then the first to finish)
    kept = theirs[:own] + sorted(theirs[own:], key=finished_at)[: max(live - own, 0)]
    return set(kept), not_done | done.difference(kept), short


def _outcome(done: set[Any], usual: int) -> tuple[int | None, int]:
    """What a wait got: how many finished futures (None: ``usual``), and how many of them are the
    program's own (:func:`_own`)."""
    return (None if len(done) == usual else len(done)), sum(map(_own, done))
