"""pydantic-ai: every function tool call recorded and replayed, whatever way the tool was declared.

Patched: ``pydantic_ai.toolsets.function.FunctionToolset.call_tool(self, name, tool_args, ctx,
tool)``. Every function tool of every agent (``@agent.tool``, ``@agent.tool_plain``,
``Agent(tools=[...])``, ``Tool(...)``, a ``FunctionToolset`` of one's own) is run through it by
the agent's ``ToolManager``, after the arguments were validated against the tool's schema and
before the per-tool timeout; prefixing and renaming wrappers hand it the toolset's own name.
Output tools (structured output) and MCP tools are other toolsets and are not touched.

The event's ``tool`` is that name (the function's, unless given another), ``args`` the validated
arguments in pydantic's JSON form (the ``RunContext`` is not one of them), ``result`` the return
value in the JSON form pydantic-ai sends to the model. A ``ModelRetry`` raised by the tool is
recorded as an error and raised again on replay, so the retry prompt the model sees is the same.
Known limit: a tool that returns a ``ToolReturn`` or multimodal content gets its JSON form back
on replay, which pydantic-ai does not treat the same way.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from .. import runtime
from . import is_forkpoint_tool, jsonable, run_tool


def _function_of(tool: Any) -> Any:
    """The Python function behind a ``FunctionToolsetTool`` (its ``call_func`` is ``FunctionSchema.call``)."""
    schema = getattr(getattr(tool, "call_func", None), "__self__", None)
    return getattr(schema, "function", None)


def patch(module: ModuleType) -> None:
    """Wrap ``FunctionToolset.call_tool`` of ``pydantic_ai.toolsets.function``."""
    cls = module.FunctionToolset
    original = cls.call_tool
    if getattr(original, "__forkpoint_integration__", False):
        return

    @functools.wraps(original)
    async def call_tool(self: Any, name: str, tool_args: dict[str, Any], ctx: Any, tool: Any) -> Any:
        if runtime.active() is None or is_forkpoint_tool(_function_of(tool)):
            return await original(self, name, tool_args, ctx, tool)
        return await run_tool(name, jsonable(tool_args), lambda: original(self, name, tool_args, ctx, tool))

    call_tool.__forkpoint_integration__ = True  # type: ignore[attr-defined]
    cls.call_tool = call_tool
