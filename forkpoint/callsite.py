"""Where the agent's own code made a call: the frame a divergence report and a failing test name.

Told from a traceback (an exception that reached the program's top) or from the stack as the call
is made (a report whose exception the program may catch)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .text import shown_path

# Top-level packages between an agent's own code and the HTTP boundary: never the "call site". The
# providers' SDKs are added from the providers (forkpoint.providers.sdk_modules) when it is needed.
# Every HTTP client forkpoint captures is one (botocore wraps a divergence raised in urllib3: its
# traceback starts there), and so is every framework it records, and OpenTelemetry's wrappers
# (strands' event-loop thread starts in opentelemetry.instrumentation.threading).
_LIBRARY_PACKAGES = frozenset(
    {
        "forkpoint", "httpx", "httpx2", "httpcore", "h11", "anyio", "asyncio",
        "urllib3", "requests", "http", "urllib", "aiohttp",
        "pydantic_ai", "agents", "langchain_core", "langchain_openai", "langchain_anthropic",
        "langgraph", "litellm", "minisweagent", "smolagents", "strands", "agno", "dspy", "mcp",
        "opentelemetry", "wrapt", "tenacity", "contextlib", "functools", "runpy", "threading",
        "concurrent",
    }
)  # fmt: skip


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
