"""Where the agent's own code made a call: the frame a divergence report and a failing test name.

Told from a traceback (an exception that reached the program's top) or from the stack as the call
is made (a report whose exception the program may catch)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .text import shown_path

# Top-level packages between an agent's own code and the HTTP boundary: never the "call site". The
# providers' SDKs are added from the providers (forkpoint.providers.sdk_modules) when it is needed.
# Every HTTP client forkpoint captures is one (botocore wraps a divergence raised in urllib3: its
# traceback starts there), and so is every framework it records, and OpenTelemetry's wrappers
# (strands' event-loop thread starts in opentelemetry.instrumentation.threading).
_PLUMBING = frozenset(
    {
        "forkpoint", "httpx", "httpx2", "httpcore", "h11", "anyio", "asyncio",
        "urllib3", "requests", "http", "urllib", "aiohttp",
        "opentelemetry", "wrapt", "tenacity", "contextlib", "functools", "runpy", "threading",
        "concurrent",
    }
)  # fmt: skip
# The frameworks of those: unlike the plumbing, they write what the model is sent (agno stamps the
# time into its system prompt), so they may be the writer a divergence report looks for. pydantic-ai
# runs each agent step in pydantic_graph, and reaches MCP through fastmcp's client.
_FRAMEWORKS = frozenset(
    {
        "pydantic_ai", "pydantic_graph", "agents", "langchain_core", "langchain_openai",
        "langchain_anthropic", "langgraph", "litellm", "minisweagent", "smolagents", "strands", "agno",
        "dspy", "mcp", "fastmcp",
    }
)  # fmt: skip
_LIBRARY_PACKAGES = _PLUMBING | _FRAMEWORKS


def agent_call_site(tb: Any) -> str:
    """Where the agent's own code made the call that raised: ``" at FILE:LINE (FUNC)"``, or ``""``.

    The innermost frame outside the SDKs, HTTP clients, frameworks and forkpoint itself (the bundled
    demo agent counts as agent code). Frames without a file (``<frozen runpy>`` under ``python -m``)
    never count. Modules are told apart by name, not path, so an agent installed into
    site-packages is still found. FILE is relative to the current directory when below it, else
    absolute, however the program was started (``python agent.py``, ``python /abs/agent.py``,
    ``python -m pkg.agent``, :func:`forkpoint.run_command`)."""
    import traceback

    return _agent_frame(traceback.walk_tb(tb))


def agent_call_site_here() -> str:
    """:func:`agent_call_site` of the call being made now, from the current stack: for a report
    whose exception the program may catch (a tested program run by ``forkpoint.run_command``)."""
    import traceback

    return _agent_frame(reversed(list(traceback.walk_stack(None))))


def _agent_frame(frames: Iterable[tuple[Any, int]]) -> str:
    # The innermost (last) frame of the agent's own code among ``frames``, outermost first.
    from .providers import sdk_modules

    libraries = _LIBRARY_PACKAGES | sdk_modules()
    site = None
    for frame, lineno in frames:
        name = str(frame.f_globals.get("__name__", ""))
        filename = frame.f_code.co_filename
        if filename.startswith("<"):
            continue
        if name.split(".")[0] in libraries and not name.startswith("forkpoint.demo."):
            continue
        site = (filename, lineno, frame.f_code.co_name)
    if site is None:
        return ""
    try:
        where = shown_path(Path(site[0]), Path.cwd())
    except OSError:  # (a program that removed its own current directory: the file as Python has it)
        where = site[0]
    return f" at {where}:{site[1]} ({site[2]})"


def writers_here() -> list[tuple[str, str, str | None, Any]]:
    """The modules on the current stack that may have written the request being made, outermost
    first, each once, as ``(top-level package, name, file, spec)``: the agent's code and the
    frameworks and packages it runs through, not the standard library, the HTTP clients, the
    providers' SDKs or forkpoint, which only carry it (nor pytest and its workers, running a test).
    A ``__main__`` run by ``python -m pkg`` is ``pkg``'s, a script's is ``__main__``."""
    import traceback

    from .providers import sdk_modules

    carriers = (
        _PLUMBING | sdk_modules() | {"_pytest", "pytest", "pluggy", "xdist", "execnet", "__channelexec__"}
    )
    found: dict[str, tuple[str, str, str | None, Any]] = {}
    for frame, _ in reversed(list(traceback.walk_stack(None))):
        name = str(frame.f_globals.get("__name__", ""))
        spec = frame.f_globals.get("__spec__")
        top = str(getattr(spec, "name", None) or name).split(".")[0]
        if frame.f_code.co_filename.startswith("<") or top in carriers or top in sys.stdlib_module_names:
            continue
        found.setdefault(name, (top, name, frame.f_globals.get("__file__"), spec))
    return list(found.values())
