"""The framework-integration seam: what an integration is, how it is installed and uninstalled,
and what the integrations share.

An :class:`Integration` names the framework modules it patches (``targets``: module name, or a
pattern with ``*``, to the function that patches that module once it has executed). Every patch
goes through :func:`replace`, which remembers the original so :func:`uninstall` can put it back.
Integrations are found in :data:`forkpoint.integrations.BUILTIN` and, for third-party packages, in
the entry-point group ``forkpoint.integrations`` (each entry point names a module with an
``INTEGRATION`` attribute, or an :class:`Integration` object itself).
"""

from __future__ import annotations

import contextlib
import fnmatch
import functools
import hashlib
import importlib
import os
import re
import sys
import threading
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from operator import methodcaller
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

from .. import plugins, runtime
from ..capture import imports
from ..capture.tracebacks import hidden

if TYPE_CHECKING:
    from ..events import Emitted, ToolCallEvent

#: The entry-point group third-party integrations register under.
ENTRY_POINT_GROUP = "forkpoint.integrations"


class Integration(NamedTuple):
    """One framework's integration: ``targets`` maps a module name (or a ``*`` pattern) to the
    function that patches it (called with the module, right after it has executed)."""

    name: str
    targets: Mapping[str, Callable[[ModuleType], None]]


_lock = threading.RLock()
_INHERITED = object()  # what replace() keeps for a method a class inherited rather than defined
_patched: set[tuple[str, str]] = set()  # (module, patching function)
_originals: list[tuple[Any, str, Any]] = []
_finder: imports.ExecHook | None = None
_registry: list[Integration] | None = None


def stored_state(store: str, path: str) -> None:
    """Keep (and, recording, note) what the state ``store`` keeps on disk at ``path`` (a file, or a
    folder of them) holds as the framework opens it: :func:`forkpoint.runtime.opened_store`. A state
    that cannot be read is left out: the divergence then names nothing, no worse."""
    if runtime.active() is None:
        return
    where = os.path.abspath(path)
    files = sorted(os.path.join(d, f) for d, _, names in os.walk(where) for f in names)
    digest = hashlib.sha256()
    try:
        for f in [where] if os.path.isfile(where) else files:
            digest.update(os.fsencode(os.path.relpath(f, where)) + b"\0")  # (a name in no UTF-8 too)
            if not os.path.isfile(f):  # (a named pipe, opened, blocked the program: its name alone)
                continue
            with open(f, "rb") as held:  # (read in chunks: a database may be large)
                digest.update(hashlib.file_digest(held, "sha256").digest())
    except OSError:
        return
    runtime.opened_store(store, where, digest.hexdigest() if os.path.exists(where) else None)


def replace(owner: Any, name: str, new: Any) -> bool:
    """Set ``owner.<name>`` to ``new`` (a wrapper of the current value), once: returns False when it
    is a forkpoint wrapper already. The original is kept for :func:`uninstall`."""
    current = owner.__dict__.get(name, _INHERITED) if isinstance(owner, type) else getattr(owner, name, None)
    if getattr(current, "__forkpoint_integration__", False):
        return False
    try:
        new.__forkpoint_integration__ = True
    except AttributeError:  # a staticmethod or similar: its function carries the mark
        new.__func__.__forkpoint_integration__ = True
    with _lock:
        _originals.append((owner, name, current))
    setattr(owner, name, new)
    return True


def wrap_where_defined(cls: type, name: str, wrap: Callable[[Any], Any]) -> None:
    """Replace the method ``name`` in the class of ``cls``'s MRO that defines it by
    ``wrap(method)``, once per defining class (so every subclass that inherits it is covered)."""
    owner = next((k for k in cls.__mro__ if name in k.__dict__), None)
    method = owner.__dict__[name] if owner is not None else None
    if owner is None or method is None or getattr(method, "__forkpoint_integration__", False):
        return
    replace(owner, name, wrap(method))


def registry(builtin: Mapping[str, tuple[str, ...]]) -> list[Integration]:
    """The integrations: those of the ``builtin`` modules (module -> the targets of its
    ``INTEGRATION``, which is imported when one of them is first patched: :func:`deferred`), then
    those registered by installed packages under :data:`ENTRY_POINT_GROUP`. Read once per process."""
    global _registry
    with _lock:
        if _registry is None:
            found = [
                Integration(builtin_name(m), {t: deferred(m, t) for t in targets})
                for m, targets in builtin.items()
            ]
            found += plugins.load((), "INTEGRATION", ENTRY_POINT_GROUP, Integration, "integration")
            _registry = found
        return _registry


def builtin_name(module: str) -> str:
    """The name of a built-in integration: its module's, with dashes (``pydantic_ai``: ``pydantic-ai``)."""
    return module.rsplit(".", 1)[-1].replace("_", "-")


def deferred(module: str, target: str) -> Callable[[ModuleType], None]:
    """The patch of ``target`` in integration ``module``'s ``INTEGRATION``, imported on first call."""

    def patch(framework: ModuleType) -> None:
        importlib.import_module(module).INTEGRATION.targets[target](framework)

    # What _patch tells patches apart by: one per integration and target.
    patch.__module__, patch.__qualname__ = module, f"INTEGRATION.targets[{target!r}]"
    return patch


class _Targets:
    """The modules the installed integrations patch, looked up as the import hook is asked about
    every module the program imports: names by dict, ``*`` patterns by one compiled regex each."""

    def __init__(self, integrations: Sequence[Integration] = ()) -> None:
        self.exact: dict[str, list[Callable[[ModuleType], None]]] = {}
        #: (the pattern's literal ending, its regex, the patch): a name that does not end so is
        #: passed over without the regex (thousands of modules are looked at per activation).
        self.wild: list[tuple[str, re.Pattern[str], Callable[[ModuleType], None]]] = []
        for i in integrations:
            for pattern, fn in i.targets.items():
                if "*" in pattern:
                    tail = re.split(r"[*?\[\]]", pattern)[-1]
                    self.wild.append((tail, re.compile(fnmatch.translate(pattern)), fn))
                else:
                    self.exact.setdefault(pattern, []).append(fn)

    def patches(self, module: str) -> list[Callable[[ModuleType], None]]:
        found = self.exact.get(module, [])
        return [*found, *(fn for _, fn in self.wild_matches((module,)))] if self.wild else found

    def wild_matches(self, names: Sequence[str]) -> Iterator[tuple[str, Callable[[ModuleType], None]]]:
        """(name, patch) for each of ``names`` a wildcard target matches."""
        for tail, rx, fn in self.wild:
            # (filtered in C: an activation passes every module the program has imported)
            for name in list(filter(methodcaller("endswith", tail), names)):
                if rx.match(name):
                    yield name, fn


_targets_now = _Targets()


def _patch_all(module: ModuleType) -> None:
    for fn in _targets_now.patches(module.__name__):
        _patch(module.__name__, module, fn)


def install(integrations: list[Integration]) -> None:
    """Install ``integrations``: now for frameworks already imported, on import for the others.
    Idempotent and cheap; safe to call at every activation."""
    global _finder, _targets_now
    with _lock:
        # The registry may have been read again (a plugin installed): the hook reads these.
        _targets_now = targets = _Targets(integrations)
        for name, fns in targets.exact.items():
            module = sys.modules.get(name)
            if module is not None:
                for fn in fns:
                    _patch(name, module, fn)
        for name, fn in targets.wild_matches(list(sys.modules)):
            module = sys.modules.get(name)
            if module is not None:
                _patch(name, module, fn)
        if _finder is None:
            _finder = imports.install(
                imports.ExecHook(
                    lambda name: bool(_targets_now.patches(name)), lambda name, spec: (None, _patch_all)
                )
            )


def installed() -> list[str]:
    """The framework modules patched so far in this process."""
    with _lock:
        return sorted({module for module, _ in _patched})


def uninstall() -> None:
    """Put back every original that :func:`replace` replaced, and stop patching modules on import."""
    global _finder
    with _lock:
        for owner, name, original in reversed(_originals):
            if original is _INHERITED:
                delattr(owner, name)  # the class had it from a base class: that one shows again
            else:
                setattr(owner, name, original)
        _originals.clear()
        _patched.clear()
        if _finder is not None:
            imports.uninstall(_finder)
            _finder = None


def _patch(target: str, module: ModuleType, fn: Callable[[ModuleType], None]) -> None:
    key = (target, f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', '')}")
    with _lock:
        if key in _patched:
            return
        _patched.add(key)
        try:
            fn(module)
        except Exception as exc:  # a framework version whose internals moved: say so, never break it
            warnings.warn(
                f"forkpoint could not patch {target} ({type(exc).__name__}: {exc}): the calls it makes are "
                "not recorded, and run for real on replay. Wrap such tools with @forkpoint.tool.",
                RuntimeWarning,
                stacklevel=2,
            )


# --------------------------------------------------------------------------- shared by the integrations


def jsonable(value: Any) -> Any:
    """``value`` as JSON data the way pydantic serializes it (models, dataclasses, datetimes, tuples…).

    The frameworks get a tool's arguments from the model as JSON and validate them through pydantic,
    so this is the form the model sent. Parts with no JSON form become ``{"$type": "module.Class"}``.
    """
    from pydantic_core import to_jsonable_python

    def fallback(v: Any) -> Any:
        return {"$type": f"{type(v).__module__}.{type(v).__qualname__}"}

    return to_jsonable_python(value, by_alias=True, fallback=fallback)


def stored_form(value: Any) -> Any:
    """What a framework tool's result is recorded as: typed (:func:`forkpoint.values.encode`), so
    that a replay hands the framework the same type back, and it makes the same model input of it
    (many send ``str(result)``) and the program gets what it got live. Raises
    :class:`~forkpoint.ToolResultError` for a value with no stored form: the tool wrapper says so
    and records the call as unrecorded (its JSON form, stored instead, gave the program another
    type on replay under "replay ok")."""
    from .. import values  # here: the seam is imported at every bootstrapped start

    return values.Encoded(values.encode(value))


def json_args(value: Any) -> dict[str, Any]:
    """A tool call's arguments as recorded: the JSON form (:func:`jsonable`) of the model's
    arguments when they are an object, else ``{"$input": <that form>}``."""
    data = jsonable(value)
    return dict(data) if isinstance(data, dict) else {"$input": data}


async def run_tool(
    name: str,
    args: dict[str, Any],
    body: Callable[[], Awaitable[Any]],
    encode: Callable[[Any], Any] = stored_form,
    fn: Any = None,
    watch: dict[str, Any] | None = None,
    call_id: str | None = None,
    emitted: list[Emitted] | None = None,
    replayed: Callable[[ToolCallEvent], Awaitable[None]] | None = None,
) -> Any:
    """One framework tool call through forkpoint (:func:`forkpoint.capture.tools.acall_tool`), its
    result stored as ``encode`` of it (default: :func:`stored_form`). ``fn``: the tool's callable,
    when the framework has one; a bound method is watched for changes to its object that a replay,
    not running it, cannot make (said while recording: :func:`~forkpoint.capture.tools.method_watched`).
    ``watch``: objects the framework hands the tool besides its arguments (the run's context), by
    the name the message gives them, watched so too (:func:`~forkpoint.capture.tools.objects_watched`).
    ``call_id``: the id the model gave the call (the framework's ``tool_call_id``), recorded with it.
    ``emitted``, ``replayed``: what the body emits besides its result, and what emits it again when
    a replay serves the call (:func:`~forkpoint.capture.tools.call_tool`)."""
    from ..capture.tools import acall_tool, method_watched, objects_watched  # (imported at every start)

    with method_watched(fn, name), objects_watched(name, watch or {}, fn):
        return await acall_tool(name, args, body, encode, call_id=call_id, emitted=emitted, replayed=replayed)


async def stream_tool(
    name: str,
    args: dict[str, Any],
    items: Callable[[], AsyncIterator[Any]],
    encode: Callable[[Any], Any] = stored_form,
    fn: Any = None,
    call_id: str | None = None,
    watch: dict[str, Any] | None = None,
) -> AsyncIterator[Any]:
    """One call of a tool that streams (an async generator), through forkpoint: live, each item is
    passed on the moment the tool yields it, and the call is recorded with the list of the items'
    stored forms (``encode`` of each) as its result; on replay the recorded items are yielded and
    the tool does not run. An exception the tool raised is recorded and raised again (the items
    before it are not replayed). ``fn``, ``call_id``, ``watch``: as for :func:`run_tool`."""
    if runtime.active() is None:
        async for item in items():
            yield item
        return
    import asyncio  # here: a process that streams no tool does not pay for importing it

    queue: asyncio.Queue[Any] = asyncio.Queue()
    ran = False

    async def body() -> list[Any]:
        nonlocal ran
        ran, got = True, []
        async for item in items():
            got.append(item)
            await queue.put(item)
        return got

    call = asyncio.ensure_future(
        run_tool(name, args, body, lambda got: [encode(i) for i in got], fn, watch, call_id=call_id)
    )
    try:
        while not call.done():
            getter = asyncio.ensure_future(queue.get())
            await asyncio.wait({getter, call}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                yield getter.result()
            else:
                getter.cancel()
        while not queue.empty():
            yield queue.get_nowait()
        result = call.result()
        if not ran:  # served from the recording
            for item in result:
                yield item
    finally:
        call.cancel()


def run_tool_sync(
    name: str,
    args: dict[str, Any],
    body: Callable[[], Any],
    encode: Callable[[Any], Any] = stored_form,
    fn: Any = None,
    watch: dict[str, Any] | None = None,
    call_id: str | None = None,
    emitted: list[Emitted] | None = None,
    replayed: Callable[[ToolCallEvent], None] | None = None,
) -> Any:
    """:func:`run_tool` for a tool the framework calls synchronously."""
    from ..capture.tools import call_tool, method_watched, objects_watched

    with method_watched(fn, name), objects_watched(name, watch or {}, fn):
        return call_tool(name, args, body, encode, call_id=call_id, emitted=emitted, replayed=replayed)


def tool_call_id(ctx: Any, field: str = "tool_call_id") -> str | None:
    """The id the model gave the tool call a framework's object ``ctx`` is for (its ``field``,
    an attribute or a mapping's key: the Agents SDK's ``ToolContext``, pydantic-ai's
    ``RunContext``, agno's ``FunctionCall.call_id``, strands' ``tool_use["toolUseId"]``), or None."""
    found = ctx.get(field) if isinstance(ctx, Mapping) else getattr(ctx, field, None)
    return found if isinstance(found, str) else None


@contextlib.contextmanager
def asked_as(call_id: str | None) -> Iterator[None]:
    """The framework's tool call run inside is the one the model gave ``call_id``
    (:data:`runtime.asked_as`): its record has the id, whoever makes it (the integration, or a
    ``@forkpoint.tool`` function the framework runs as the tool)."""
    token = runtime.asked_as.set(call_id)
    try:
        yield
    finally:
        runtime.asked_as.reset(token)


def _bound_method(fn: Any) -> Any:
    """The bound method ``fn`` is, or wraps (``__wrapped__``: agno runs a toolkit's method through
    pydantic's ``validate_call``), or None."""
    for _ in range(8):  # (a wrapper's chain is short; never loop on a cyclic one)
        if fn is None:
            return None
        if getattr(fn, "__self__", None) is not None and getattr(fn, "__func__", None) is not None:
            return fn
        fn = getattr(fn, "__wrapped__", None)
    return None


def recorded_function(
    name: str,
    args: dict[str, Any],
    fn: Callable[..., Any],
    call_id: str | None = None,
    watch: dict[str, Any] | None = None,
) -> Callable[..., Any]:
    """``fn`` (sync, async or an async generator function) wrapped so that its call is recorded as
    tool ``name`` with ``args`` (and the model's ``call_id`` for it, when the framework has one); a
    wrapper of the same kind, as strands chooses by the kind. A method (an agno toolkit's, a
    strands ``@tool`` method) is watched for changes to its object, and so are the objects of
    ``watch`` (as for :func:`run_tool`)."""
    import inspect  # here: the seam is imported at every bootstrapped start

    method = _bound_method(fn)
    if inspect.isasyncgenfunction(fn):

        @functools.wraps(fn)
        async def streamed(*a: Any, **kw: Any) -> AsyncIterator[Any]:
            with hidden:  # (the tool's exception comes out of the recording's task: through run_tool too)
                async for item in stream_tool(
                    name, args, lambda: fn(*a, **kw), fn=method, call_id=call_id, watch=watch
                ):
                    yield item

        return streamed
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def awaited(*a: Any, **kw: Any) -> Any:
            with hidden:
                return await run_tool(
                    name, args, lambda: fn(*a, **kw), fn=method, watch=watch, call_id=call_id
                )

        return awaited

    @functools.wraps(fn)
    def called(*a: Any, **kw: Any) -> Any:
        with hidden:
            return run_tool_sync(name, args, lambda: fn(*a, **kw), fn=method, watch=watch, call_id=call_id)

    return called


def is_json(value: Any) -> bool:
    """True for plain JSON data (str, bool, int, float, None, and lists and str-keyed dicts of them),
    exact types only: a subclass (an enum, a named tuple) may not come back as itself."""
    if value is None or isinstance(value, str | bool | int | float):
        return type(value) in (str, bool, int, float, type(None))
    if type(value) is list:
        return all(is_json(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and is_json(v) for k, v in value.items())
    return False


#: Modules whose tool functions reach an MCP server through the mcp SDK's ``ClientSession``, whose
#: requests :mod:`forkpoint.integrations.mcp` records: a framework integration leaves their tools
#: alone, so each MCP call is recorded once, with its full result.
MCP_ADAPTERS = (
    "langchain_mcp_adapters",
    "agents.mcp",
    "anthropic.lib.tools.mcp",
    "mcpadapt",
    "smolagents.mcp_client",
    "strands.tools.mcp",
    "agno.tools.mcp",
    "agno.utils.mcp",
    "dspy.utils.mcp",
    "crewai.mcp",
    "crewai.tools.mcp_native_tool",
    "crewai.tools.mcp_tool_wrapper",
    "crewai_tools.adapters",
)


def calls_mcp(fn: Any) -> bool:
    """True for a tool function (or a ``functools.partial`` of one) defined in one of the
    :data:`MCP_ADAPTERS`."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    module = str(getattr(fn, "__module__", "") or "")
    return any(module == m or module.startswith(m + ".") for m in MCP_ADAPTERS)


def records(fn: Any) -> bool:
    """True when a framework's call of the tool function ``fn`` is to be recorded by its
    integration: a runtime is active, ``fn`` is there, and it neither records itself
    (``@forkpoint.tool``) nor reaches MCP (:func:`calls_mcp`, recorded by the MCP integration)."""
    return runtime.active() is not None and fn is not None and not is_forkpoint_tool(fn) and not calls_mcp(fn)


def is_forkpoint_tool(fn: Any) -> bool:
    """True for a function already wrapped by ``@forkpoint.tool``: it records itself."""
    return bool(getattr(fn, "__forkpoint_tool__", None))
