"""smolagents: every tool call of a ``ToolCallingAgent`` or ``CodeAgent`` recorded and replayed under
the tool's own name.

Patched: ``smolagents.tools.Tool.__call__``, the way agents (``execute_tool_call``, and the Python
executor of a ``CodeAgent``) call every tool, ``@tool`` functions (``SimpleTool``) and ``Tool``
subclasses alike. What is recorded is the tool's ``forward`` — after smolagents has turned agent
types into plain inputs and before it wraps the output in an agent type again — so that
conversion runs as usual, live and on replay: for one call, ``__call__`` runs on a copy of the
tool whose ``forward`` is wrapped. The event's ``tool`` is the tool's ``name``, ``args``
the arguments ``forward`` got (positional ones named after the tool's ``inputs``, in pydantic's
JSON form), ``result`` the
output, typed where forkpoint rebuilds it (:func:`.base.stored_form`). Tools that reach an MCP server (``ToolCollection.from_mcp``, ``MCPClient``)
are recorded as MCP requests by :mod:`.mcp` instead.

Also patched: ``ToolCallingAgent.process_tool_calls`` and ``execute_tool_call``, so that a tool call
is recorded with the id of the model's call it runs (``call_id``: a replay tells identical calls of
concurrent agents apart by it): ``process_tool_calls`` is handed the model's message, and
``execute_tool_call`` the name and the very arguments object of one of its calls.

Also patched: ``smolagents.agents.MultiStepAgent.__call__``, which runs a managed agent the model
asked for by its name: the name is noted as the framework's own tool, since the managed agent's
model and tool calls are recorded one by one and it has no body of its own to record.

Also patched, under ``deterministic``: ``smolagents.local_python_executor.get_safe_module``, which
hands the code a ``CodeAgent``'s model writes each module it imports (``import datetime``, ``from
time import time``): that code is the agent's own, so it gets forkpoint's stand-ins for the clock,
``uuid4`` and ``random`` (:mod:`forkpoint.capture.clock`), as the agent's own modules do.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .. import runtime
from ..capture.tracebacks import hidden
from .base import Integration, asked_as, jsonable, records, replace, run_tool_sync, tool_call_id


def patch(module: ModuleType) -> None:
    """Wrap ``Tool.__call__`` of ``smolagents.tools`` (see the module docstring)."""
    cls = module.Tool
    original = cls.__call__

    @functools.wraps(original)
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        with hidden:
            forward: Any = getattr(self, "forward", None)
            if not records(forward):
                return original(self, *args, **kwargs)
            if not self.is_initialized:
                self.setup()  # as the original would, on the tool itself rather than on the copy below
            shim = copy.copy(self)  # this call only: the tool object is shared by every call
            shim.forward = _recorded_forward(
                str(self.name), list(getattr(self, "inputs", None) or ()), forward
            )
            return original(shim, *args, **kwargs)

    replace(cls, "__call__", __call__)


def _recorded_forward(name: str, inputs: list[str], forward: Callable[..., Any]) -> Callable[..., Any]:
    """``forward`` recording its calls as tool ``name``, positional arguments named after the tool's
    declared ``inputs`` (a ``@tool``'s ``forward`` takes ``*args, **kwargs``)."""

    @functools.wraps(forward)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        with hidden:
            named = {**dict(zip(inputs, args, strict=False)), **kwargs}
            if len(args) > len(inputs):
                named["$args"] = list(args[len(inputs) :])
            # (a Tool subclass that keeps state in self: its forward is a bound method, watched)
            return run_tool_sync(name, dict(jsonable(named)), lambda: forward(*args, **kwargs), fn=forward)

    return recorded


#: On a ``ToolCallingAgent``: the tool calls of the model's message its step is running.
_ASKED = "_forkpoint_asked"


def _asked_id(calls: list[Any], name: str, arguments: Any) -> str | None:
    """The id of the call of ``calls`` that is tool ``name`` with ``arguments``: the one with this
    very object (``process_tool_calls`` hands it on), else the one equal to it, if one only."""
    named = [c for c in calls if getattr(getattr(c, "function", None), "name", None) == name]
    same = [c for c in named if c.function.arguments is arguments] or [
        c for c in named if (c.function.arguments or {}) == arguments
    ]
    return tool_call_id(same[0], "id") if len(same) == 1 else None


def patch_tool_calls(module: ModuleType) -> None:
    """Give each tool call a ``ToolCallingAgent`` runs the id of the model's call
    (:func:`.base.asked_as`; see the module docstring)."""
    cls = getattr(module, "ToolCallingAgent", None)
    process = vars(cls).get("process_tool_calls") if cls is not None else None
    execute = vars(cls).get("execute_tool_call") if cls is not None else None
    if process is None or execute is None:  # (another version: ids are not recorded, nothing worse)
        return

    @functools.wraps(process)
    def process_tool_calls(self: Any, chat_message: Any, *args: Any, **kwargs: Any) -> Any:
        self.__dict__[_ASKED] = list(getattr(chat_message, "tool_calls", None) or ())
        return process(self, chat_message, *args, **kwargs)

    @functools.wraps(execute)
    def execute_tool_call(self: Any, tool_name: str, arguments: Any, *args: Any, **kwargs: Any) -> Any:
        # (a managed agent's own tool calls are not the model's call of it)
        managed = tool_name in (getattr(self, "managed_agents", None) or {})
        call_id = None if managed else _asked_id(self.__dict__.get(_ASKED, []), tool_name, arguments)
        with hidden, asked_as(call_id):
            return execute(self, tool_name, arguments, *args, **kwargs)

    if replace(cls, "process_tool_calls", process_tool_calls):
        replace(cls, "execute_tool_call", execute_tool_call)


def patch_agents(module: ModuleType) -> None:
    """The patches of ``smolagents.agents``: :func:`patch_managed_agents`, :func:`patch_tool_calls`."""
    patch_managed_agents(module)
    patch_tool_calls(module)


def patch_managed_agents(module: ModuleType) -> None:
    """Note the name of each managed agent run (``MultiStepAgent.__call__``, which smolagents calls
    only for a managed agent, from a ``ToolCallingAgent``'s tool call or a ``CodeAgent``'s code)."""
    cls = getattr(module, "MultiStepAgent", None)
    original = vars(cls).get("__call__") if cls is not None else None
    if original is None:  # (another version: the warning may name it, nothing worse)
        return

    @functools.wraps(original)
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        with hidden:  # (a managed agent's exception reads as it would without forkpoint)
            runtime.framework_tools.add(str(getattr(self, "name", "")))
            return original(self, *args, **kwargs)

    replace(cls, "__call__", __call__)


def patch_executor(module: ModuleType) -> None:
    """Give the imports of a ``CodeAgent``'s code the clock's stand-ins (see the module docstring):
    its executor imports through ``importlib.import_module``, past forkpoint's ``__import__``."""
    original = getattr(module, "get_safe_module", None)
    if original is None:  # (another version: the model's code reads the real clock, as said on replay)
        return

    @functools.wraps(original)
    def get_safe_module(raw_module: Any, *args: Any, **kwargs: Any) -> Any:
        safe = original(raw_module, *args, **kwargs)
        from ..capture import clock  # here: only a CodeAgent's code imports through it

        if not clock.installed():
            return safe
        if safe is raw_module or not isinstance(safe, ModuleType):  # (the real module or a function)
            return clock.stand_in(safe)
        for name, value in list(vars(safe).items()):  # (a copy of its own: never the real module)
            setattr(safe, name, clock.stand_in(value))
        return safe

    replace(module, "get_safe_module", get_safe_module)


INTEGRATION = Integration(
    "smolagents",
    {
        "smolagents.tools": patch,
        "smolagents.agents": patch_agents,
        "smolagents.local_python_executor": patch_executor,
    },
)
