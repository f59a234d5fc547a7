"""OpenAI Agents SDK: every ``@function_tool`` call recorded and replayed, unmodified.

Patched: ``agents.tool._FailureHandlingFunctionToolInvoker.__call__(self, ctx, input)``. Every
``FunctionTool`` made by ``@function_tool`` / ``function_tool(fn)`` has one of these as its
``on_invoke_tool``, and the runner (``run_internal/tool_execution.py``, through
``_invoke_function_tool_with_metadata``) and realtime sessions call it with the model's raw JSON
arguments. Patching the class reaches tools that were decorated before forkpoint started.

What is recorded is the inner call (``self._invoke_tool_impl``: argument validation and the
function body) — the SDK's failure handling stays outside, so on replay a recorded exception is
raised again and turned into the same model-visible error text by the same handler, and the
SDK's bookkeeping of handled errors is unchanged. Not recorded: agents used as tools
(``agent.as_tool()``: their model and tool calls are recorded one by one instead, so the model asking
for one is no tool call forkpoint missed), and
``FunctionTool(on_invoke_tool=...)`` built by hand (wrap that function with ``@forkpoint.tool``);
the tools of MCP servers (``mcp_servers=[...]``) are recorded by :mod:`.mcp`, once, and like
a ``@forkpoint.tool`` function given as a tool, with the model's id for the call
(:func:`.base.asked_as`).

The event's ``tool`` is the tool's name as the model sees it, ``args`` the model's JSON arguments
(parsed), ``call_id`` the model's id for the call (``ToolContext.tool_call_id``: a replay tells
identical calls of concurrent runs apart by it), ``result`` the value in a form that the SDK turns
into the same model input again: JSON data as is, structured outputs in pydantic's JSON form, a
value forkpoint stores typed (a dataclass, a pydantic model: :func:`.base.stored_form`) as itself,
so that the program gets the same value back; a value with no stored form is said while recording
and left unrecorded (a replay stops there).
A tool that changes the run's context (``ctx.context``, the SDK's way to share state between
tools and instructions) is said while recording: a replay, not running the body, leaves it as it was.
"""

from __future__ import annotations

import copy
import functools
import weakref
from types import ModuleType
from typing import Any

import orjson

from .. import runtime
from ..capture.tracebacks import hidden
from .base import (
    Integration,
    asked_as,
    calls_mcp,
    is_forkpoint_tool,
    is_json,
    jsonable,
    replace,
    run_tool,
    stored_form,
    tool_call_id,
)


def parse_arguments(text: str) -> dict[str, Any]:
    """The model's JSON arguments as a dict (``{}`` for an empty string, else ``{"$input": text}``)."""
    if not text or not text.strip():
        return {}
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {"$input": text}
    return value if isinstance(value, dict) else {"$input": text}


def encode_output(tool: Any, output: Any) -> Any:
    """A JSON form of a tool's output from which the SDK builds the same model input on replay."""
    if is_json(output):
        return output
    # The JSON form is made only where it is used: pydantic has none for some values the typed form
    # stores (bytes that are not UTF-8 raise), and those must reach stored_form below.
    if getattr(tool, "_output_type_adapter", None) is not None or getattr(tool, "output_json_schema", None):
        return jsonable(output)  # (validated and dumped by the tool's output schema: the same)
    try:
        from agents.items import ItemHelpers

        structured = ItemHelpers._convert_tool_output_as_structured(output) is not None
    except Exception:
        structured = False
    if structured:  # (ToolOutputText / Image / FileContent: their dicts carry "type" and validate back)
        return jsonable(output)
    # The SDK gets the same value back on replay, and sends the model its str(); a value with no
    # stored form is said and left unrecorded (its str() gave the program a str on replay).
    return stored_form(output)


#: Every ``_FailureHandlingFunctionToolInvoker`` made since the patch (a tool's, once bound to it):
#: :func:`recorded_tool_names` names their tools.
_invokers: weakref.WeakSet[Any] = weakref.WeakSet()


def _records(invoker: Any) -> bool:
    """Whether a call through ``invoker`` is recorded here (see the patched ``__call__``)."""
    tool = getattr(invoker, "_function_tool", None)
    return not (
        tool is None
        or getattr(tool, "_is_agent_tool", False)
        or calls_mcp(invoker._invoke_tool_impl)
        or is_forkpoint_tool(invoker._get_wrapped_callable())
    )


def recorded_tool_names() -> set[str]:
    """The names of the ``@function_tool``s of this process that a call of is recorded, called or
    not: the model asking for one the program did not call is no tool forkpoint cannot see (a run
    an input guardrail stopped while the model asked for tools)."""
    return {str(inv._function_tool.name) for inv in list(_invokers) if _records(inv)}


def patch(module: ModuleType) -> None:
    """Wrap ``_FailureHandlingFunctionToolInvoker.__call__`` of ``agents.tool``, and its ``__init__``
    to know the tools it records (:func:`recorded_tool_names`)."""
    cls = module._FailureHandlingFunctionToolInvoker
    original = cls.__call__
    original_init = cls.__init__

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        _invokers.add(self)

    if replace(cls, "__init__", __init__) and recorded_tool_names not in runtime.tool_name_sources:
        runtime.tool_name_sources.append(recorded_tool_names)

    @functools.wraps(original)
    async def __call__(self: Any, ctx: Any, input: str) -> Any:  # noqa: A002 - the SDK's name
        with hidden:
            tool = getattr(self, "_function_tool", None)
            if runtime.active() is None or tool is None or not _records(self):
                # (an MCP tool's request, a @forkpoint.tool, records itself with the id; an agent's
                # calls as a tool are its own)
                agent = tool is not None and getattr(tool, "_is_agent_tool", False)
                if agent:  # (recorded as the nested run's own calls: no call of it is missing)
                    runtime.framework_tools.add(str(getattr(tool, "name", "")))
                with asked_as(None if agent else tool_call_id(ctx)):
                    return await original(self, ctx, input)
            impl = self._invoke_tool_impl
            name = str(tool.name)

            async def recorded(ctx: Any, input: str) -> Any:  # noqa: A002
                with hidden:
                    return await run_tool(
                        name,
                        parse_arguments(input),
                        lambda: impl(ctx, input),
                        lambda output: encode_output(tool, output),
                        # (the run's context, which tools may change for the rest of the run to read)
                        watch={"context": getattr(ctx, "context", None)},
                        call_id=tool_call_id(ctx),
                    )

            functools.update_wrapper(recorded, impl)
            shim = copy.copy(self)  # this call only: the invoker itself is shared by every run
            shim._invoke_tool_impl = recorded
            # (inside too: with no failure handler the tool's exception leaves through this frame)
            return await original(shim, ctx, input)

    replace(cls, "__call__", __call__)


def patch_handoffs(module: ModuleType) -> None:
    """Note the tool name of each handoff taken (``transfer_to_billing``): the SDK's own, with no
    function to record (``Handoff.get_transfer_message`` is called as it is taken)."""
    cls = getattr(module, "Handoff", None)
    original = getattr(cls, "get_transfer_message", None)
    if cls is None or original is None:  # (another version: the warning may name it, nothing worse)
        return

    @functools.wraps(original)
    def get_transfer_message(self: Any, *args: Any, **kwargs: Any) -> Any:
        runtime.framework_tools.add(str(getattr(self, "tool_name", "")))
        return original(self, *args, **kwargs)

    replace(cls, "get_transfer_message", get_transfer_message)


INTEGRATION = Integration("openai-agents", {"agents.tool": patch, "agents.handoffs": patch_handoffs})
