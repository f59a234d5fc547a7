"""strands-agents: every call of a ``@tool`` function recorded and replayed under the tool's name,
streaming tools (async generators) included.

Patched: ``strands.tools.decorator.DecoratedFunctionTool.stream``, the async generator through
which the agent's tool executors (sequential and concurrent) run every ``@tool`` function, and
``strands.tools.tools.PythonAgentTool.stream``, every module tool's (``TOOL_SPEC`` and a function
of the tool use, which strands hands the whole invocation state: ids and timings of this run). For
one call it runs on a copy of the tool whose function is wrapped, so strands' own work — input
validation, injecting ``agent`` / ``tool_context``, turning the return value or an exception into
a ``ToolResult`` — happens as usual, live and on replay; only the function's work is served from
the session. A tool that changes the agent's ``state``, or the invocation state the program passed
the agent, is said while recording (a replay does not make that change: :func:`_handed`). The
event's ``tool`` is the tool's ``tool_name``, ``args`` the model's input,
``call_id`` the model's id for the call (``toolUseId``: a replay tells identical calls of
concurrent runs apart by it), ``result`` the function's return value, typed where forkpoint rebuilds it (:func:`.base.stored_form`).
A streaming tool's items are passed on live as it yields them and recorded as the list of them; on replay they are yielded
again, so the agent sees the same stream events and the same result (the last item). An
exception is recorded and raised again, so strands builds the same error result. MCP tools
(``MCPClient``) are another class and are recorded as MCP requests by :mod:`.mcp`, with the
``tool_use_id`` the client is called with (:func:`patch_mcp_client`).

Also patched: ``strands.models.gemini``'s ``secrets``. Gemini answers a function call without an
id, and strands' Gemini model makes one up (``secrets.token_urlsafe``) that it sends back with the
tool's result: a replay sent other ids, and diverged at its second model call. Under
``deterministic`` the ids it makes are read through forkpoint as the agent's own uuids are
(recorded, then served: :func:`forkpoint.capture.clock.read`); otherwise nothing changes.

Also patched: strands' own tools, whose names are noted as the framework's, with no function to
record: ``StructuredOutputTool`` (``structured_output_model=``), named after the output model
(``Report``), which only validates the model's answer; an agent as a tool (``agent.as_tool()``, or
an ``Agent`` in ``tools=``) and a sub-agent tool, whose agent's own model and tool calls are
recorded one by one.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import AsyncIterator, Callable
from types import ModuleType
from typing import Any

from .. import runtime
from ..capture.tracebacks import hidden
from .base import (
    Integration,
    asked_as,
    json_args,
    recorded_function,
    records,
    replace,
    stored_state,
    tool_call_id,
)


class _Ids(ModuleType):
    """``secrets`` as strands' Gemini model sees it: :func:`secrets.token_urlsafe` read through
    forkpoint's deterministic values, everything else the module's own."""

    def __init__(self, real: ModuleType) -> None:
        super().__init__("secrets")
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def token_urlsafe(self, nbytes: int | None = None) -> str:
        from ..capture.clock import read  # here: a run that uses no strands Gemini model never needs it

        def live() -> str:
            return str(self._real.token_urlsafe(nbytes))

        return read("secrets.token_urlsafe", live, str, str, [nbytes])


def patch_gemini(module: ModuleType) -> None:
    """Hand ``strands.models.gemini`` a ``secrets`` whose ``token_urlsafe`` (its tool call ids) is
    recorded and served under ``deterministic``."""
    real = getattr(module, "secrets", None)
    if isinstance(real, ModuleType) and not isinstance(real, _Ids):
        replace(module, "secrets", _Ids(real))


def patch(module: ModuleType) -> None:
    """Wrap ``DecoratedFunctionTool.stream`` of ``strands.tools.decorator``."""
    _record_calls(module.DecoratedFunctionTool)


def patch_module_tools(module: ModuleType) -> None:
    """Wrap ``PythonAgentTool.stream`` of ``strands.tools.tools``: a module tool (``TOOL_SPEC`` and
    a function of the tool use), which strands calls with the whole invocation state besides."""
    _record_calls(module.PythonAgentTool)


#: The keys strands itself writes to the invocation state (:mod:`strands.tools.executors._executor`
#: for every tool it starts, :mod:`strands.event_loop.event_loop` for every cycle): a tool running
#: meanwhile did not change them.
_STRANDS_KEYS = frozenset(
    {
        "agent",
        "model",
        "messages",
        "system_prompt",
        "tool_config",
        "event_loop_cycle_id",
        "event_loop_cycle_trace",
        "event_loop_cycle_span",
        "event_loop_parent_cycle_id",
    }
)


def _handed(invocation_state: Any) -> dict[str, Any]:
    """What strands hands a tool besides the model's input (its ``ToolContext``, or ``agent``) in
    which its docs have tools keep state: the agent's ``state`` (its items, kept in ``_data``), and
    the invocation state (the program's own dict, ``agent(..., invocation_state=state)``) but the
    keys strands writes to it itself (:data:`_STRANDS_KEYS`)."""
    from ..capture.tools import ItemsBut  # (imported at every start)

    if not isinstance(invocation_state, dict):
        return {"agent.state": None}
    state = getattr(invocation_state.get("agent"), "state", None)
    return {
        "agent.state": getattr(state, "_data", None),
        "invocation_state": ItemsBut(invocation_state, _STRANDS_KEYS),
    }


def _record_calls(cls: Any) -> None:
    """Wrap ``cls.stream`` so that each call records its ``_tool_func`` under the tool's name, with
    the model's input as its arguments and its ``toolUseId`` as the call's id."""
    original = cls.stream

    @functools.wraps(original)
    async def stream(self: Any, tool_use: Any, invocation_state: Any, **kwargs: Any) -> AsyncIterator[Any]:
        fn: Any = getattr(self, "_tool_func", None)
        tool = self
        if records(fn):
            tool = copy.copy(self)  # this call only: the tool object is shared by concurrent calls
            tool._tool_func = recorded_function(
                str(self.tool_name),
                json_args(tool_use.get("input") or {}),
                fn,
                call_id=tool_call_id(tool_use, "toolUseId"),
                watch=_handed(invocation_state),
            )
        async for event in original(tool, tool_use, invocation_state, **kwargs):
            yield event

    replace(cls, "stream", stream)


def patch_session_file(module: ModuleType) -> None:
    """Wrap ``FileSessionManager.__init__`` of ``strands.session.file_session_manager``: the
    conversation and state it keeps in a folder of the session's, which the agent starts from, is
    read as strands opens it (:func:`.base.stored_state`)."""
    cls = getattr(module, "FileSessionManager", None)
    original = getattr(cls, "__init__", None)
    if cls is None or original is None:  # (another version: a divergence names less, nothing worse)
        return

    @functools.wraps(original)
    def __init__(self: Any, session_id: str, storage_dir: str | None = None, **kwargs: Any) -> None:
        with hidden:
            # strands' own path of the session (it validates the id: a bad one raises in __init__)
            self.storage_dir = storage_dir or self._default_storage_dir()
            with contextlib.suppress(ValueError):
                stored_state("strands' FileSessionManager", self._get_session_path(session_id))
        original(self, session_id, storage_dir, **kwargs)

    replace(cls, "__init__", __init__)


def patch_mcp_client(module: ModuleType) -> None:
    """Wrap ``MCPClient.call_tool_sync`` and ``call_tool_async`` of ``strands.tools.mcp.mcp_client``:
    the MCP request they make (recorded by :mod:`.mcp`, on the client's own thread, which gets the
    caller's context) has the model's id for the call, their ``tool_use_id``
    (:func:`.base.asked_as`)."""
    cls = getattr(module, "MCPClient", None)
    sync_call = getattr(cls, "call_tool_sync", None)
    async_call = getattr(cls, "call_tool_async", None)
    if sync_call is None or async_call is None:  # (another version: ids are not recorded, nothing worse)
        return

    @functools.wraps(sync_call)
    def call_tool_sync(self: Any, tool_use_id: Any, *args: Any, **kwargs: Any) -> Any:
        with hidden, asked_as(tool_use_id if isinstance(tool_use_id, str) else None):
            return sync_call(self, tool_use_id, *args, **kwargs)

    @functools.wraps(async_call)
    async def call_tool_async(self: Any, tool_use_id: Any, *args: Any, **kwargs: Any) -> Any:
        with hidden, asked_as(tool_use_id if isinstance(tool_use_id, str) else None):
            return await async_call(self, tool_use_id, *args, **kwargs)

    if replace(cls, "call_tool_sync", call_tool_sync):
        replace(cls, "call_tool_async", call_tool_async)


def own_tool(name: str) -> Callable[[ModuleType], None]:
    """A patch noting the tool name of each instance of class ``name`` made: a tool of strands' own,
    whose work is recorded call by call or is strands' alone."""

    def patch_own(module: ModuleType) -> None:
        cls = getattr(module, name, None)
        original = getattr(cls, "__init__", None)
        if cls is None or original is None:  # (another version: the warning may name it, nothing worse)
            return

        @functools.wraps(original)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            runtime.framework_tools.add(str(getattr(self, "tool_name", "")))

        replace(cls, "__init__", __init__)

    return patch_own


INTEGRATION = Integration(
    "strands",
    {
        "strands.tools.decorator": patch,
        "strands.tools.tools": patch_module_tools,
        "strands.tools.mcp.mcp_client": patch_mcp_client,
        "strands.models.gemini": patch_gemini,
        "strands.session.file_session_manager": patch_session_file,
        "strands.tools.structured_output.structured_output_tool": own_tool("StructuredOutputTool"),
        "strands.agent._agent_as_tool": own_tool("_AgentAsTool"),
        "strands.vended_tools.subagent.subagent": own_tool("_SubagentTool"),
    },
)
