"""DSPy: every call of a ``dspy.Tool`` (``dspy.ReAct``'s tools, and tools a program calls itself),
recorded and replayed under the tool's own name.

Patched: ``dspy.adapters.types.tool.Tool.__call__`` and ``acall``, through which ``ReAct`` (sync
and async) runs each tool the model picks — plain functions it was given are wrapped in a
``Tool`` — with the model's arguments as keywords. The whole call is recorded, the validation of
the arguments against the tool's schema included; DSPy's callbacks stay outside, so they run on
replay too. The event's ``tool`` is the tool's ``name``, ``args`` the model's arguments,
``result`` the return value, typed where forkpoint rebuilds it (:func:`.base.stored_form`); an exception is recorded and raised again, so ReAct
writes the same "Execution error" observation. ``ReAct``'s own ``finish`` tool is a tool like the
others. Tools made from MCP tools (``Tool.from_mcp_tool``) are recorded as MCP requests by
:mod:`.mcp`.

Model calls: DSPy 3.4's default engine (``lm15``) sends its requests over sockets of its own,
which forkpoint does not capture (a replay then refuses them as network access); with
``dspy.LM(..., engine="litellm")`` they go through the openai SDK and are recorded. And DSPy
caches language-model answers (in memory and on disk) by default: a request it answers from that
cache never reaches the model, so a recording does not have it (and a replay that finds its answers
there does not ask for the recorded calls). ``dspy.clients.cache.Cache.get`` is patched to count
those answers while forkpoint records or replays: the recording says how many requests DSPy's cache
answered (and notes it in the session), and so does a replay's verdict ("ok, but incomplete" when the
cache, not the session, gave answers the run needed), and a divergence at a request the session
lacks. Record and replay with the cache off (``dspy.LM(..., cache=False)``). A replay keeps what it
stores in DSPy's cache in memory: the answers it is served never reach DSPy's disk, where a later
live run would be given them.
"""

from __future__ import annotations

import copy
import functools
from types import ModuleType
from typing import Any

from .. import runtime
from ..capture.tracebacks import hidden
from .base import Integration, jsonable, records, replace, run_tool, run_tool_sync

#: The framework's name in what a recording and a replay say about its cache.
NAME = "DSPy"


def _skip(tool: Any) -> bool:
    return not records(getattr(tool, "func", None))


def patch(module: ModuleType) -> None:
    """Wrap ``Tool.__call__`` and ``Tool.acall`` of ``dspy.adapters.types.tool`` inside DSPy's
    ``with_callbacks`` (the decorator is applied again around the recording wrapper)."""
    cls = module.Tool
    callbacks = getattr(module, "with_callbacks", lambda fn: fn)
    sync_call = getattr(cls.__call__, "__wrapped__", cls.__call__)
    async_call = getattr(cls.acall, "__wrapped__", cls.acall)

    @functools.wraps(sync_call)
    def __call__(self: Any, **kwargs: Any) -> Any:
        with hidden:
            if _skip(self):
                return sync_call(self, **kwargs)
            return run_tool_sync(str(self.name), dict(jsonable(kwargs)), lambda: sync_call(self, **kwargs))

    @functools.wraps(async_call)
    async def acall(self: Any, **kwargs: Any) -> Any:
        with hidden:
            if _skip(self):
                return await async_call(self, **kwargs)
            return await run_tool(str(self.name), dict(jsonable(kwargs)), lambda: async_call(self, **kwargs))

    if replace(cls, "__call__", callbacks(__call__)):
        replace(cls, "acall", callbacks(acall))


def patch_cache(module: ModuleType) -> None:
    """Count every answer ``dspy.clients.cache.Cache.get`` finds (in memory or on disk) while a
    runtime is active: a model request DSPy answered without making it
    (:func:`forkpoint.runtime.answered_from_cache`). And keep what ``Cache.put`` stores during a
    replay in memory only: the answers a replay is served come from the session (or an override
    makes them up), not from the model, and on DSPy's disk every later run, live ones too, would be
    given them instead of asking the model."""
    cls = module.Cache
    get = cls.get
    put = cls.put

    @functools.wraps(put)
    def kept(self: Any, *args: Any, **kwargs: Any) -> Any:
        rt = runtime.active()
        if rt is None or rt.mode != "replay" or not getattr(self, "enable_disk_cache", False):
            return put(self, *args, **kwargs)
        memory_only = copy.copy(self)  # shares the memory cache and its lock
        memory_only.enable_disk_cache = False
        return put(memory_only, *args, **kwargs)

    @functools.wraps(get)
    def cached(self: Any, *args: Any, **kwargs: Any) -> Any:
        found = get(self, *args, **kwargs)
        if found is not None:
            runtime.answered_from_cache(NAME)
        return found

    replace(cls, "get", cached)
    replace(cls, "put", kept)


INTEGRATION = Integration("dspy", {"dspy.adapters.types.tool": patch, "dspy.clients.cache": patch_cache})
