"""agno: every tool call of an agent or team recorded and replayed under the tool's name.

Patched: ``agno.tools.function.FunctionCall._execute`` and ``_aexecute``, which run every tool
call the model asks for (functions given as ``tools=[...]``, ``@tool`` functions, toolkit
methods) inside agno's own handling: argument injection (``agent``, ``run_context``…), hooks,
the result cache, turning an exception into the error the model is sent. For one call the
``FunctionCall`` runs on a copy of its ``Function`` whose ``entrypoint`` is wrapped, so all of
that runs as usual, live and on replay, and only the function's work is served from the session.
The event's ``tool`` is the function's ``name``, ``args`` the model's arguments, ``call_id`` the
model's id for the call (``FunctionCall.call_id``: a replay tells identical calls of concurrent
runs apart by it), ``result`` the return value, typed where forkpoint rebuilds it (:func:`.base.stored_form`: a dataclass comes
back a dataclass, so agno sends the model the same ``str()`` of it); an async-generator tool's items are recorded and yielded again.
A toolkit's method that changes its object (``self.calls += 1``) is said while recording, as a
replay does not run it. A sync generator tool is not recorded (forkpoint says so when it is called, and it runs live on
replay). MCP tools (``MCPTools``) are recorded as MCP requests by :mod:`.mcp`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..capture.tracebacks import hidden
from ..text import say
from .base import Integration, json_args, recorded_function, records, replace, tool_call_id

_warned: set[str] = set()


def _shim(call: Any) -> Any:
    """A copy of ``call.function`` whose entrypoint records, or None to run the call as it is."""
    fn: Any = getattr(call, "function", None)
    entry: Any = getattr(fn, "entrypoint", None)
    if not records(entry):
        return None
    name = str(fn.name)
    if inspect.isgeneratorfunction(entry):
        if name not in _warned:
            _warned.add(name)
            say(
                f"forkpoint: agno tool {name!r} is a generator function: its calls are not recorded, "
                "and run for real on replay"
            )
        return None
    shim = fn.model_copy()
    shim.entrypoint = recorded_function(
        name, json_args(call.arguments or {}), entry, call_id=tool_call_id(call, "call_id")
    )
    return shim


def _swapped(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def _execute(self: Any) -> Any:
        with hidden:
            shim = _shim(self)
            if shim is None:
                return original(self)
            real, self.function = self.function, shim
            try:
                return original(self)
            finally:
                self.function = real

    return _execute


def _aswapped(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    async def _aexecute(self: Any) -> Any:
        with hidden:
            shim = _shim(self)
            if shim is None:
                return await original(self)
            real, self.function = self.function, shim
            try:
                return await original(self)
            finally:
                self.function = real

    return _aexecute


def patch(module: ModuleType) -> None:
    """Wrap ``FunctionCall._execute`` and ``_aexecute`` of ``agno.tools.function``."""
    cls = module.FunctionCall
    if replace(cls, "_execute", _swapped(cls._execute)):
        replace(cls, "_aexecute", _aswapped(cls._aexecute))


INTEGRATION = Integration("agno", {"agno.tools.function": patch})
