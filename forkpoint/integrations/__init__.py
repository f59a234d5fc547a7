"""Built-in integrations: frameworks and SDKs that forkpoint records and replays without changes.

Agent frameworks take hold of a tool's function when it is declared (``@agent.tool_plain``,
``@function_tool``), so wrapping the module attribute afterwards (what ``--tool`` does) is too late.
Instead, while a recording or a replay is active, forkpoint patches each framework's own tool-call
entry point, at class level, so that every tool call goes through the same path as a
``@forkpoint.tool`` function: recorded while recording, served from the session on replay (the tool
body never runs), live when the replay says so. What each integration patches:

* **pydantic-ai** (:mod:`.pydantic_ai`): ``FunctionToolset.call_tool`` — every function tool of
  every agent, whatever way it was declared, after pydantic-ai validated the arguments; and the
  names of its output tools (``final_result``), which have no function to record.
* **OpenAI Agents SDK** (:mod:`.openai_agents`): the invoker that ``@function_tool`` builds
  (``_FailureHandlingFunctionToolInvoker.__call__``) — the tool body, below the SDK's failure
  handling, so a recorded exception is turned into the model-visible error text again on replay;
  and the tool names of the handoffs taken (``transfer_to_…``), which have no function to record.
* **LangChain / LangGraph** (:mod:`.langchain`): ``BaseTool.run`` / ``arun``, which wrap the body
  (``_run`` / ``_arun``) of each tool class on its first call — every ``@tool`` function and
  ``BaseTool`` subclass, as ``ToolNode`` and ``create_react_agent`` run them; and the callback
  managers' ``on_custom_event``, so the custom events a tool dispatches are recorded with its call.
* **openai, anthropic** (:mod:`.stainless`): a fresh async client's first requests reach the HTTP
  layer in the order they were made (not after a worker-thread hop each), so identical requests
  gathered at once are sent, recorded and replayed in the same order.
* **MCP** (:mod:`.mcp`): every request of the mcp SDK's ``ClientSession`` (``tools/call`` under
  the MCP tool's name), and its transports, which a replay replaces by in-memory streams so the
  server is neither started nor contacted.
* **smolagents** (:mod:`.smolagents`): ``Tool.__call__``, recording the tool's ``forward``; and
  the names of the managed agents run (``MultiStepAgent.__call__``), whose own calls are recorded;
  under ``deterministic``, the modules a ``CodeAgent``'s code imports (``get_safe_module``).
* **anthropic tools** (:mod:`.anthropic_tools`): ``BetaFunctionTool.call`` /
  ``BetaAsyncFunctionTool.call``, as the SDK's tool runners call them.
* **strands-agents** (:mod:`.strands`): ``DecoratedFunctionTool.stream`` and
  ``PythonAgentTool.stream`` (module tools), recording the function (a streaming tool's items too); the Gemini model's made-up tool call ids, under ``deterministic``;
  the names of its own tools, which have no function to record: structured output
  (``structured_output_model=``), agents as tools and sub-agents (their calls are recorded); the
  session a ``FileSessionManager`` keeps on disk as it opens it, which a divergence names when it
  differs from the recorded run's.
* **agno** (:mod:`.agno`): ``FunctionCall._execute`` / ``_aexecute``, recording the entrypoint;
  ``Function``'s cache of tool results, whose answers are recorded as calls; its models' cache of
  answers, counted and said; and the file a ``SqliteDb`` keeps sessions in as it opens it, which a
  divergence names when it differs from the recorded run's.
* **DSPy** (:mod:`.dspy`): ``Tool.__call__`` / ``acall``, as ``ReAct`` calls them.
* **CrewAI** (:mod:`.crewai`): the body (``_run`` / ``_arun``) of every ``BaseTool``, wrapped
  before ``run``, ``arun`` or ``to_structured_tool`` first reach it.
* **google-genai** (:mod:`.google_genai`): its async client prefers aiohttp when aiohttp is
  installed, which forkpoint does not capture; while forkpoint is active it takes its httpx client
  instead (the SDK's own fallback), which forkpoint captures like the sync one. And the Python
  functions that automatic function calling runs (``config=GenerateContentConfig(tools=[fn])``)
  are recorded and replayed as tool calls.
* **multiprocessing** (:mod:`.multiprocessing`): a worker started with ``spawn`` (or the fork server
  of ``forkserver``) starts forkpoint first, with the recording or replay of the process that
  starts it.

:func:`install` is called when a recording or replay is activated (:mod:`forkpoint.api`). It patches the frameworks that
are already imported, and registers an import hook that patches the others the moment their module
has executed, so a bootstrapped ``forkpoint record -- python agent.py`` needs no change to the
agent. The patches stay in place afterwards and call straight through while nothing is active.

The seam is :mod:`.base` (:class:`~.base.Integration`, one per module here, each registered by one
line of :data:`BUILTIN`); other packages add theirs through the ``forkpoint.integrations``
entry-point group.
"""

from __future__ import annotations

from .base import (
    ENTRY_POINT_GROUP,
    MCP_ADAPTERS,
    Integration,
    calls_mcp,
    installed,
    is_forkpoint_tool,
    is_json,
    json_args,
    jsonable,
    registry,
    replace,
    run_tool,
    run_tool_sync,
    stored_form,
    uninstall,
)
from .base import install as _install

#: The integrations forkpoint ships, by module (each has an ``INTEGRATION``), with the framework
#: modules each patches (the keys of its ``INTEGRATION.targets``, which a test holds equal): an
#: integration module is imported only once a module it patches has executed, so a program that
#: uses no framework does not pay for them (issue 15: start-up).
BUILTIN: dict[str, tuple[str, ...]] = {
    "forkpoint.integrations.pydantic_ai": (
        "pydantic_ai.toolsets.function",
        "pydantic_ai.toolsets.prefixed",
        "pydantic_ai.toolsets.renamed",
        "pydantic_ai.tool_manager",
    ),
    "forkpoint.integrations.openai_agents": ("agents.tool", "agents.handoffs"),
    "forkpoint.integrations.google_genai": ("google.genai._extra_utils",),
    "forkpoint.integrations.langchain": ("langchain_core.tools.base", "langchain_core.callbacks.manager"),
    "forkpoint.integrations.stainless": ("openai._base_client", "anthropic._base_client", "*._base_client"),
    "forkpoint.integrations.mcp": (
        "mcp.client.session",
        "mcp.shared.jsonrpc_dispatcher",
        "mcp.client.stdio",
        "mcp.client.sse",
        "mcp.client.streamable_http",
        "mcp.client.websocket",
    ),
    "forkpoint.integrations.smolagents": (
        "smolagents.tools",
        "smolagents.agents",
        "smolagents.local_python_executor",
    ),
    "forkpoint.integrations.anthropic_tools": (
        "anthropic.lib.tools._beta_functions",
        "anthropic.lib.tools._beta_runner",
    ),
    "forkpoint.integrations.strands": (
        "strands.tools.decorator",
        "strands.tools.tools",
        "strands.tools.mcp.mcp_client",
        "strands.models.gemini",
        "strands.session.file_session_manager",
        "strands.tools.structured_output.structured_output_tool",
        "strands.agent._agent_as_tool",
        "strands.vended_tools.subagent.subagent",
    ),
    "forkpoint.integrations.agno": ("agno.tools.function", "agno.models.base", "agno.db.sqlite.sqlite"),
    "forkpoint.integrations.dspy": ("dspy.adapters.types.tool", "dspy.clients.cache"),
    "forkpoint.integrations.crewai": ("crewai.tools.base_tool",),
    "forkpoint.integrations.multiprocessing": ("multiprocessing.util", "multiprocessing.spawn"),
    "forkpoint.integrations.grpc": ("grpc", "grpc.aio"),
}

__all__ = [
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "Integration",
    "MCP_ADAPTERS",
    "calls_mcp",
    "install",
    "installed",
    "is_forkpoint_tool",
    "is_json",
    "json_args",
    "jsonable",
    "registry",
    "replace",
    "run_tool",
    "run_tool_sync",
    "stored_form",
    "uninstall",
]


def install() -> None:
    """Install every integration (built in, and registered by installed packages): now for
    frameworks already imported, on import for the others. Idempotent and cheap."""
    _install(registry(BUILTIN))
