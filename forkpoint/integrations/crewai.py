"""CrewAI: every tool call of a crew's agents recorded and replayed under the tool's name.

Patched: ``crewai.tools.base_tool.BaseTool.run``, ``arun`` and ``to_structured_tool``, and
``Tool.run`` / ``arun``. Agents call a tool either through ``run`` (native function calling) or
through the ``CrewStructuredTool`` that ``to_structured_tool`` builds around the tool's ``_run``
(the text ReAct loop); both end in the tool's body: ``_run`` / ``_arun`` of a ``BaseTool``
subclass, or ``run`` / ``arun`` of ``Tool`` (the class of ``@tool`` functions, which calls the
function itself). Before any of the three runs, the body of the tool's class is wrapped where it
is defined, once, so CrewAI's own work — argument validation, usage limits, caching, hooks,
formatting the output for the agent — runs as usual, live and on replay. A body called from
inside another (``_arun`` running ``_run``) is one call. The event's ``tool`` is the tool's
``name``, ``args`` the arguments in pydantic's JSON form (positional ones as ``$args``),
``result`` the return value, typed where forkpoint rebuilds it (:func:`.base.stored_form`). MCP tools (``mcps=[...]``) are recorded as MCP
requests by :mod:`.mcp`.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..capture.tracebacks import hidden
from .base import Integration, jsonable, records, replace, run_tool, run_tool_sync, wrap_where_defined

_inside: contextvars.ContextVar[bool] = contextvars.ContextVar("forkpoint_crewai_tool", default=False)


def _arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    out = dict(jsonable(kwargs))
    if args:
        out["$args"] = jsonable(list(args))
    return out


def _sync_body(body: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(body)
    def _run(self: Any, *args: Any, **kwargs: Any) -> Any:
        with hidden:
            if _inside.get() or not records(body):
                return body(self, *args, **kwargs)
            token = _inside.set(True)
            try:
                return run_tool_sync(
                    str(self.name), _arguments(args, kwargs), lambda: body(self, *args, **kwargs)
                )
            finally:
                _inside.reset(token)

    return _run


def _async_body(body: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(body)
    async def _arun(self: Any, *args: Any, **kwargs: Any) -> Any:
        with hidden:
            if _inside.get() or not records(body):
                return await body(self, *args, **kwargs)
            token = _inside.set(True)
            try:
                return await run_tool(
                    str(self.name), _arguments(args, kwargs), lambda: body(self, *args, **kwargs)
                )
            finally:
                _inside.reset(token)

    return _arun


def _wrapping_bodies(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` of ``BaseTool``, wrapping the bodies of the tool's class first (see above)."""
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def async_method(self: Any, *args: Any, **kwargs: Any) -> Any:
            with hidden:
                _wrap(type(self))
                return await method(self, *args, **kwargs)

        return async_method

    @functools.wraps(method)
    def sync_method(self: Any, *args: Any, **kwargs: Any) -> Any:
        with hidden:
            _wrap(type(self))
            return method(self, *args, **kwargs)

    return sync_method


def _wrap(cls: type) -> None:
    if records(getattr(cls, "_run", None)):  # not an MCP tool's class
        wrap_where_defined(cls, "_run", _sync_body)
        wrap_where_defined(cls, "_arun", _async_body)


def patch(module: ModuleType) -> None:
    """Wrap ``BaseTool.run``, ``arun`` and ``to_structured_tool`` of ``crewai.tools.base_tool``."""
    cls = module.BaseTool
    if replace(cls, "run", _wrapping_bodies(cls.run)):
        replace(cls, "arun", _wrapping_bodies(cls.arun))
        replace(cls, "to_structured_tool", _wrapping_bodies(cls.to_structured_tool))
    # ``@tool`` functions: ``Tool`` overrides ``run`` / ``arun`` to call the function directly.
    decorated = getattr(module, "Tool", None)
    for name, wrap in (("run", _sync_body), ("arun", _async_body)):
        if decorated is not None and name in decorated.__dict__:
            replace(decorated, name, wrap(decorated.__dict__[name]))


INTEGRATION = Integration("crewai", {"crewai.tools.base_tool": patch})
