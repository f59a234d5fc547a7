"""Built-in integrations: frameworks and SDKs that forkpoint records and replays without changes.

Agent frameworks take hold of a tool's function when it is declared (``@agent.tool_plain``,
``@function_tool``), so wrapping the module attribute afterwards (what ``--tool`` does) is too late.
Instead, while a recording or a replay is active, forkpoint patches each framework's own tool-call
entry point, at class level, so that every tool call goes through the same path as a
``@forkpoint.tool`` function: recorded while recording, served from the session on replay (the tool
body never runs), live when the replay says so. What each integration patches:

* **pydantic-ai** (:mod:`.pydantic_ai`): ``FunctionToolset.call_tool`` — every function tool of
  every agent, whatever way it was declared, after pydantic-ai validated the arguments.
* **OpenAI Agents SDK** (:mod:`.openai_agents`): the invoker that ``@function_tool`` builds
  (``_FailureHandlingFunctionToolInvoker.__call__``) — the tool body, below the SDK's failure
  handling, so a recorded exception is turned into the model-visible error text again on replay.
* **LangChain / LangGraph** (:mod:`.langchain`): ``BaseTool.run`` / ``arun``, which wrap the body
  (``_run`` / ``_arun``) of each tool class on its first call — every ``@tool`` function and
  ``BaseTool`` subclass, as ``ToolNode`` and ``create_react_agent`` run them.
* **openai, anthropic** (:mod:`.stainless`): a fresh async client's first requests reach the HTTP
  layer in the order they were made (not after a worker-thread hop each), so identical requests
  gathered at once are sent, recorded and replayed in the same order.
* **google-genai** (:mod:`.google_genai`): its async client prefers aiohttp when aiohttp is
  installed, which forkpoint does not capture; while forkpoint is active it takes its httpx client
  instead (the SDK's own fallback), which forkpoint captures like the sync one. And the Python
  functions that automatic function calling runs (``config=GenerateContentConfig(tools=[fn])``)
  are recorded and replayed as tool calls.

:func:`install` is called when a recording or replay is activated. It patches the frameworks that
are already imported, and registers an import hook that patches the others the moment their module
has executed, so a bootstrapped ``forkpoint record -- python agent.py`` needs no change to the
agent. The patches stay in place afterwards and call straight through while nothing is active.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import threading
import warnings
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any

from ..tools import acall_tool, call_tool

__all__ = [
    "INTEGRATIONS",
    "install",
    "installed",
    "is_forkpoint_tool",
    "is_json",
    "jsonable",
    "run_tool",
    "run_tool_sync",
]

#: Framework module whose execution triggers an integration → ``"module:function"`` of forkpoint that
#: patches it (called with the framework module).
INTEGRATIONS: dict[str, str] = {
    "pydantic_ai.toolsets.function": "forkpoint.integrations.pydantic_ai:patch",
    "agents.tool": "forkpoint.integrations.openai_agents:patch",
    "google.genai._api_client": "forkpoint.integrations.google_genai:patch_api_client",
    "google.genai._extra_utils": "forkpoint.integrations.google_genai:patch_extra_utils",
    "langchain_core.tools.base": "forkpoint.integrations.langchain:patch",
    "openai._base_client": "forkpoint.integrations.stainless:patch",
    "anthropic._base_client": "forkpoint.integrations.stainless:patch",
}

_lock = threading.RLock()
_patched: set[str] = set()
_finder: _IntegrationFinder | None = None


def install() -> None:
    """Install every integration: now for frameworks already imported, on import for the others.

    Idempotent and cheap; safe to call at every activation.
    """
    global _finder
    with _lock:
        for target in INTEGRATIONS:
            module = sys.modules.get(target)
            if module is not None:
                _patch(target, module)
        if _finder is None:
            _finder = _IntegrationFinder()
            sys.meta_path.insert(0, _finder)


def installed() -> list[str]:
    """The framework modules patched so far in this process."""
    with _lock:
        return sorted(_patched)


def _patch(target: str, module: ModuleType) -> None:
    with _lock:
        if target in _patched:
            return
        _patched.add(target)
        try:
            where, _, function = INTEGRATIONS[target].partition(":")
            getattr(importlib.import_module(where), function)(module)
        except Exception as exc:  # a framework version whose internals moved: say so, never break it
            warnings.warn(
                f"forkpoint could not patch {target} ({type(exc).__name__}: {exc}): the calls it makes are "
                "not recorded, and run for real on replay. Wrap such tools with @forkpoint.tool.",
                RuntimeWarning,
                stacklevel=2,
            )


class _PatchingLoader(importlib.abc.Loader):
    """Runs the real loader, then the integration for the module it has just executed."""

    def __init__(self, loader: Any, target: str) -> None:
        self._loader, self._target = loader, target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)  # type: ignore[no-any-return]

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        _patch(self._target, module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_code, is_package… of the real loader
        return getattr(self._loader, name)


class _IntegrationFinder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: hands the integration targets to the real finders, wrapping their loader."""

    def find_spec(
        self, fullname: str, path: Any, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in INTEGRATIONS or fullname in _patched:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader, fullname)
                return spec
        return None


# --------------------------------------------------------------------------- shared by the integrations


def jsonable(value: Any) -> Any:
    """``value`` as JSON data the way pydantic serializes it (models, dataclasses, datetimes, tuples…).

    The frameworks send a tool's arguments and results to the model through pydantic, so this is
    the form the model saw. Parts with no JSON form become ``{"$type": "module.Class"}``.
    """
    from pydantic_core import to_jsonable_python

    def fallback(v: Any) -> Any:
        return {"$type": f"{type(v).__module__}.{type(v).__qualname__}"}

    return to_jsonable_python(value, by_alias=True, fallback=fallback)


async def run_tool(
    name: str,
    args: dict[str, Any],
    body: Callable[[], Awaitable[Any]],
    encode: Callable[[Any], Any] = jsonable,
) -> Any:
    """One framework tool call through forkpoint (:func:`forkpoint.tools.acall_tool`), its result
    stored in the JSON form the framework sends to the model."""
    return await acall_tool(name, args, body, encode)


def run_tool_sync(
    name: str,
    args: dict[str, Any],
    body: Callable[[], Any],
    encode: Callable[[Any], Any] = jsonable,
) -> Any:
    """:func:`run_tool` for a tool the framework calls synchronously."""
    return call_tool(name, args, body, encode)


def is_json(value: Any) -> bool:
    """True for plain JSON data (str, bool, int, float, None, and lists and str-keyed dicts of them),
    exact types only: a subclass (an enum, a named tuple) may not come back as itself."""
    if value is None or isinstance(value, str | bool | int | float):
        return type(value) in (str, bool, int, float, type(None))
    if type(value) is list:
        return all(is_json(v) for v in value)
    if type(value) is dict:
        return all(type(k) is str and is_json(v) for k, v in value.items())
    return False


def is_forkpoint_tool(fn: Any) -> bool:
    """True for a function already wrapped by ``@forkpoint.tool``: it records itself."""
    return bool(getattr(fn, "__forkpoint_tool__", None))
