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
A ``ToolReturn`` (a return value plus content for the model and metadata for the application) and
multimodal results (``BinaryContent``, ``ImageUrl``…, alone or in a list) are stored as
``{"$pydantic_ai": <pydantic-ai's own JSON form>}`` and validated back into those classes on
replay, so the model gets the same parts (binary data as base64 in the log).
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from .. import runtime
from . import is_forkpoint_tool, is_json, jsonable, run_tool


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
        served = await run_tool(
            name, jsonable(tool_args), lambda: original(self, name, tool_args, ctx, tool), encode_result
        )
        return decode_result(served)

    call_tool.__forkpoint_integration__ = True  # type: ignore[attr-defined]
    cls.call_tool = call_tool


_RICH_KEY = "$pydantic_ai"


@functools.cache
def _rich_adapter() -> Any:
    """pydantic's adapter for what pydantic-ai treats as more than data in a tool's result."""
    from pydantic import TypeAdapter
    from pydantic_ai.messages import MultiModalContent, ToolReturn, UserContent

    return TypeAdapter(ToolReturn | MultiModalContent | list[UserContent])  # type: ignore[arg-type]


def _is_rich(value: Any) -> bool:
    try:
        from pydantic_ai.messages import MULTI_MODAL_CONTENT_TYPES, ToolReturn
    except ImportError:  # a pydantic-ai without them: nothing to rebuild
        return False

    if isinstance(value, (ToolReturn, *MULTI_MODAL_CONTENT_TYPES)):
        return True
    return isinstance(value, list) and any(isinstance(v, MULTI_MODAL_CONTENT_TYPES) for v in value)


def encode_result(value: Any) -> Any:
    """A tool's return value in the JSON form that :func:`decode_result` turns back into what
    pydantic-ai would have got from the tool (see the module docstring)."""
    if not is_json(value) and _is_rich(value):
        return {_RICH_KEY: _rich_adapter().dump_python(value, mode="json")}
    return jsonable(value)


def decode_result(value: Any) -> Any:
    """Inverse of :func:`encode_result` for a served result (a live one passes through unchanged)."""
    if isinstance(value, dict) and len(value) == 1 and _RICH_KEY in value:
        return _rich_adapter().validate_python(value[_RICH_KEY])
    return value
