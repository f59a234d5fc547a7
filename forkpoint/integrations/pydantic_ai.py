"""pydantic-ai: every function tool call recorded and replayed, whatever way the tool was declared.

Patched: ``pydantic_ai.toolsets.function.FunctionToolset.call_tool(self, name, tool_args, ctx,
tool)``. Every function tool of every agent (``@agent.tool``, ``@agent.tool_plain``,
``Agent(tools=[...])``, ``Tool(...)``, a ``FunctionToolset`` of one's own) is run through it by
the agent's ``ToolManager``, after the arguments were validated against the tool's schema and
before the per-tool timeout; prefixing and renaming wrappers hand it the toolset's own name.
Output tools (structured output) and MCP tools are other toolsets and are not touched.

The event's ``tool`` is that name (the function's, unless given another), ``args`` the validated
arguments in pydantic's JSON form (the ``RunContext`` is not one of them), ``call_id`` the model's
id for the call (``RunContext.tool_call_id``: a replay tells identical calls of concurrent runs
apart by it), ``result`` the return
value, typed (:func:`.base.stored_form`; a value with no stored form is said while recording and
left unrecorded, as a plain tool's is: a replay stops there). A ``ModelRetry`` raised by the tool is
recorded as an error and raised again on replay, so the retry prompt the model sees is the same.
A tool that changes the agent's dependencies (``ctx.deps``) is said while recording: a replay,
not running the body, leaves them as they were.
A ``ToolReturn`` (a return value plus content for the model and metadata for the application) and
multimodal parts (``BinaryContent``, ``ImageUrl``…, alone, in a list beside other values, or in
a ``ToolReturn``) are stored marked — each part as ``{"$pydantic_ai": <pydantic-ai's own JSON
form>}``, a ``ToolReturn`` as ``{"$pydantic_ai_tool_return": {return_value, content, metadata,
tools}}`` — and rebuilt on replay, so the model gets the same parts (binary data as base64 in the
log); the metadata comes back in its JSON form.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .. import runtime
from ..capture.tracebacks import hidden
from .base import (
    Integration,
    asked_as,
    is_forkpoint_tool,
    is_json,
    jsonable,
    replace,
    run_tool,
    stored_form,
    tool_call_id,
)


def _function_of(tool: Any) -> Any:
    """The Python function behind a ``FunctionToolsetTool`` (its ``call_func`` is ``FunctionSchema.call``)."""
    schema = getattr(getattr(tool, "call_func", None), "__self__", None)
    return getattr(schema, "function", None)


def patch(module: ModuleType) -> None:
    """Wrap ``FunctionToolset.call_tool`` of ``pydantic_ai.toolsets.function``."""
    cls = module.FunctionToolset
    original = cls.call_tool

    @functools.wraps(original)
    async def call_tool(self: Any, name: str, tool_args: dict[str, Any], ctx: Any, tool: Any) -> Any:
        with hidden:
            if runtime.active() is None or is_forkpoint_tool(_function_of(tool)):
                with asked_as(tool_call_id(ctx)):  # (a @forkpoint.tool records itself with the id)
                    return await original(self, name, tool_args, ctx, tool)
            ran: list[bool] = []

            def live() -> Any:
                ran.append(True)
                return original(self, name, tool_args, ctx, tool)

            out = await run_tool(
                name,
                jsonable(tool_args),
                live,
                encode_result,
                watch={"ctx.deps": getattr(ctx, "deps", None)},  # (the agent's dependencies: its state)
                call_id=tool_call_id(ctx),
            )
            return out if ran else decode_result(out)  # (a live result is handed on as it is)

    replace(cls, "call_tool", call_tool)


def _alias_calls(cls: Any, inner_name: Callable[[Any, str], str]) -> None:
    """Wrap ``cls.call_tool`` of a toolset that renames the tools it wraps: the model asks for the
    outer name (``north_stock``) while the call is recorded under the inner one the tool or MCP
    server knows (``stock``), so a recording would say the model asked for a tool never recorded."""
    original = getattr(cls, "call_tool", None)
    if original is None:  # (another version: the warning may name the tool, nothing worse)
        return

    @functools.wraps(original)
    async def call_tool(self: Any, name: str, tool_args: dict[str, Any], ctx: Any, tool: Any) -> Any:
        runtime.alias_tool(name, inner_name(self, name))
        return await original(self, name, tool_args, ctx, tool)

    replace(cls, "call_tool", call_tool)


def patch_prefixed(module: ModuleType) -> None:
    """Note the name ``PrefixedToolset`` hands on for each it is called with (as it computes it)."""
    _alias_calls(
        getattr(module, "PrefixedToolset", None), lambda ts, name: name.removeprefix(f"{ts.prefix}_")
    )


def patch_renamed(module: ModuleType) -> None:
    """Note the name ``RenamedToolset`` hands on for each it is called with (as it computes it)."""
    _alias_calls(getattr(module, "RenamedToolset", None), lambda ts, name: ts.name_map.get(name, name))


def patch_output_tools(module: ModuleType) -> None:
    """Note the name of each output tool (``final_result``) ``ToolManager`` validates: pydantic-ai's
    own way to take structured output, with no function to record."""
    cls = getattr(module, "ToolManager", None)
    original = getattr(cls, "validate_output_tool_call", None)
    if cls is None or original is None:  # (another version: the warning may name it, nothing worse)
        return

    @functools.wraps(original)
    async def validate_output_tool_call(self: Any, call: Any, *args: Any, **kwargs: Any) -> Any:
        runtime.framework_tools.add(str(getattr(call, "tool_name", "")))
        return await original(self, call, *args, **kwargs)

    replace(cls, "validate_output_tool_call", validate_output_tool_call)


INTEGRATION = Integration(
    "pydantic-ai",
    {
        "pydantic_ai.toolsets.function": patch,
        "pydantic_ai.toolsets.prefixed": patch_prefixed,
        "pydantic_ai.toolsets.renamed": patch_renamed,
        "pydantic_ai.tool_manager": patch_output_tools,
    },
)


_PART = "$pydantic_ai"  # one multimodal part (ImageUrl, BinaryContent…) in pydantic-ai's JSON form
_TOOL_RETURN = "$pydantic_ai_tool_return"


@functools.cache
def _part_adapter() -> Any:
    from pydantic import TypeAdapter
    from pydantic_ai.messages import MultiModalContent

    return TypeAdapter(MultiModalContent)


def _kinds() -> tuple[tuple[type, ...], Any] | None:
    """(pydantic-ai's multimodal part classes, ``ToolReturn``), or None in a version without them."""
    try:
        from pydantic_ai.messages import MULTI_MODAL_CONTENT_TYPES, ToolReturn
    except ImportError:
        return None
    return MULTI_MODAL_CONTENT_TYPES, ToolReturn


def encode_result(value: Any) -> Any:
    """A tool's return value in the JSON form that :func:`decode_result` turns back into what
    pydantic-ai would have got from the tool (see the module docstring): multimodal parts — alone,
    in a list beside other values, or in a ``ToolReturn`` — and ``ToolReturn`` itself are marked;
    everything else as :func:`~.base.stored_form` has it (typed where forkpoint can rebuild it)."""
    kinds = None if is_json(value) else _kinds()
    if kinds is None:
        return stored_form(value)
    parts, tool_return = kinds
    if isinstance(value, parts):
        return {_PART: _part_adapter().dump_python(value, mode="json")}
    # (a list beside multimodal parts; a tuple, or a list of the program's own class, only when it
    # holds one: else it is stored typed, and comes back a tuple, a named tuple as itself, or is
    # said to have no stored form rather than come back a plain list)
    if type(value) is list or (isinstance(value, list | tuple) and any(isinstance(v, parts) for v in value)):
        return [encode_result(v) for v in value]
    if isinstance(value, tool_return):
        return {
            _TOOL_RETURN: {
                "return_value": encode_result(value.return_value),
                "content": encode_result(value.content),
                "metadata": jsonable(value.metadata),
                "tools": jsonable(getattr(value, "tools", None)),
            }
        }
    return stored_form(value)


def decode_result(value: Any) -> Any:
    """Inverse of :func:`encode_result` for a served result."""
    if isinstance(value, list):
        return [decode_result(v) for v in value]
    if not (isinstance(value, dict) and len(value) == 1):
        return value
    if _PART in value:
        return _part_adapter().validate_python(value[_PART])
    if isinstance(value.get(_TOOL_RETURN), dict):
        from pydantic_ai.messages import ToolReturn

        fields = value[_TOOL_RETURN]
        kw = {"content": decode_result(fields.get("content")), "metadata": fields.get("metadata")}
        if fields.get("tools") is not None:
            kw["tools"] = fields["tools"]
        return ToolReturn(decode_result(fields.get("return_value")), **kw)
    return value
