"""The anthropic SDK's own tools: every ``@beta_tool`` / ``@beta_async_tool`` call that the tool
runner (``client.beta.messages.tool_runner``, sync and async) makes, recorded and replayed.

Patched: ``anthropic.lib.tools._beta_functions.BetaFunctionTool.call`` and
``BetaAsyncFunctionTool.call``, which the runners call with the model's ``tool_use`` input for
every function tool (and which a program may call itself). The event's ``tool`` is the tool's
``name`` (the name the model sees), ``args`` the model's input, ``result`` what the function
returned (a string, or content blocks), typed where forkpoint rebuilds it (:func:`.base.stored_form`)
— what the runner sends back as the ``tool_result`` content. A ``ToolError`` (or any exception) is recorded and raised again on
replay, so the runner builds the same error result. Tools made from MCP tools
(``anthropic.lib.tools.mcp.mcp_tool``) are recorded as MCP requests by :mod:`.mcp`, and
``@forkpoint.tool`` functions record themselves.

Also patched: the runners' ``_run_tool`` (``BaseSyncToolRunner``, ``BaseAsyncToolRunner``), which
call a tool for a ``tool_use`` block: the block's ``id`` is the recorded call's ``call_id``
(:func:`.base.asked_as`), by which a replay tells identical calls of concurrent runners apart.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from ..capture.tracebacks import hidden
from .base import Integration, asked_as, json_args, records, replace, run_tool, run_tool_sync, tool_call_id


def _skip(tool: Any) -> bool:
    return not records(getattr(tool, "func", None))


def patch(module: ModuleType) -> None:
    """Wrap ``call`` of ``BetaFunctionTool`` and ``BetaAsyncFunctionTool``."""
    sync_cls, async_cls = module.BetaFunctionTool, module.BetaAsyncFunctionTool
    sync_call, async_call = sync_cls.call, async_cls.call

    @functools.wraps(sync_call)
    def call(self: Any, input: Any) -> Any:  # noqa: A002
        with hidden:
            if _skip(self):
                return sync_call(self, input)
            return run_tool_sync(
                str(self.name),
                json_args(input),
                lambda: sync_call(self, input),
                fn=getattr(self, "func", None),
            )

    @functools.wraps(async_call)
    async def acall(self: Any, input: Any) -> Any:  # noqa: A002
        with hidden:
            if _skip(self):
                return await async_call(self, input)
            return await run_tool(
                str(self.name),
                json_args(input),
                lambda: async_call(self, input),
                fn=getattr(self, "func", None),
            )

    if replace(sync_cls, "call", call):
        replace(async_cls, "call", acall)


def patch_runners(module: ModuleType) -> None:
    """Wrap ``_run_tool`` of the sync and async runners: the tool call inside has the id of the
    model's ``tool_use`` block."""
    sync_cls = getattr(module, "BaseSyncToolRunner", None)
    async_cls = getattr(module, "BaseAsyncToolRunner", None)
    sync_run = getattr(sync_cls, "_run_tool", None)
    async_run = getattr(async_cls, "_run_tool", None)
    if sync_run is None or async_run is None:  # (another version: ids are not recorded, nothing worse)
        return

    @functools.wraps(sync_run)
    def run(self: Any, tool: Any, tool_use: Any, *args: Any, **kwargs: Any) -> Any:
        with hidden, asked_as(tool_call_id(tool_use, "id")):
            return sync_run(self, tool, tool_use, *args, **kwargs)

    @functools.wraps(async_run)
    async def arun(self: Any, tool: Any, tool_use: Any, *args: Any, **kwargs: Any) -> Any:
        with hidden, asked_as(tool_call_id(tool_use, "id")):
            return await async_run(self, tool, tool_use, *args, **kwargs)

    if replace(sync_cls, "_run_tool", run):
        replace(async_cls, "_run_tool", arun)


INTEGRATION = Integration(
    "anthropic-tools",
    {"anthropic.lib.tools._beta_functions": patch, "anthropic.lib.tools._beta_runner": patch_runners},
)
