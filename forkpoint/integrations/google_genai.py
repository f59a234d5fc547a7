"""google-genai (Gemini): automatic function calls recorded as tool calls.

The SDK sends sync requests with httpx2 (or httpx), and async ones with aiohttp when it is installed
(the ``google-genai[aiohttp]`` extra), else with its httpx async client: forkpoint captures each
where it is (:mod:`forkpoint.capture`), so the SDK keeps the transport it chose and a recorded run
meets the errors, retries and timing it meets without forkpoint.

**Automatic function calling.** With Python functions as tools
(``GenerateContentConfig(tools=[get_weather])``) the SDK calls them itself between model calls.
Patched: ``google.genai._extra_utils.invoke_function_from_dict_args`` and
``invoke_function_from_dict_args_async``, through which the SDK runs each one (looked up as module
globals at call time, so patching the module suffices); each hands the SDK the function wrapped
(:func:`.base.recorded_function`), so the SDK's argument conversion and its wrapping of a raised
exception (``FunctionInvocationError``, whose text the model is sent) run live and on replay alike.
The event's ``tool`` is the function's ``__name__`` (the name the SDK declares to the model),
``args`` the model's arguments, ``result`` the return value, typed where forkpoint rebuilds it
(:func:`.base.stored_form`), or ``error`` the function's own exception; on replay the function does
not run. Arguments the SDK's conversion refuses never reach the function: the SDK answers the
model with the error, and the call is no tool call missing from the recording. Functions already
wrapped with ``@forkpoint.tool`` record themselves and are left alone.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .. import runtime
from ..capture.tracebacks import hidden
from .base import Integration, jsonable, recorded_function, records, replace


def patch_extra_utils(module: ModuleType) -> None:
    """Wrap the two functions of ``google.genai._extra_utils`` that run automatic function calls."""
    sync_original = module.invoke_function_from_dict_args
    async_original = module.invoke_function_from_dict_args_async
    # What the SDK raises around the function's own exception: any other comes from its conversion
    # of the model's arguments, before the function is called.
    called = getattr(getattr(module, "errors", None), "FunctionInvocationError", ())

    def recorded(args: dict[str, Any], fn: Callable[..., Any]) -> Callable[..., Any]:
        # The SDK's own code still converts the arguments and wraps a raised exception in its
        # FunctionInvocationError, live and on replay alike: only the function's call is recorded,
        # so its own exception is, and a what-if error reaches the model as a real raise would.
        if not records(fn):
            return fn
        return recorded_function(getattr(fn, "__name__", "function"), jsonable(args), fn)

    def refused(exc: Exception, fn: Callable[..., Any]) -> None:
        if not isinstance(exc, called):
            # The SDK answered the model with the error itself, the function never ran: no tool
            # call of it is missing from the recording.
            runtime.framework_tools.add(str(getattr(fn, "__name__", "function")))

    @functools.wraps(sync_original)
    def invoke_function_from_dict_args(args: dict[str, Any], function_to_invoke: Callable[..., Any]) -> Any:
        with hidden:
            try:
                return sync_original(args, recorded(args, function_to_invoke))
            except Exception as exc:
                refused(exc, function_to_invoke)
                raise

    @functools.wraps(async_original)
    async def invoke_function_from_dict_args_async(
        args: dict[str, Any], function_to_invoke: Callable[..., Any]
    ) -> Any:
        with hidden:
            try:
                return await async_original(args, recorded(args, function_to_invoke))
            except Exception as exc:
                refused(exc, function_to_invoke)
                raise

    if replace(module, "invoke_function_from_dict_args", invoke_function_from_dict_args):
        replace(module, "invoke_function_from_dict_args_async", invoke_function_from_dict_args_async)


INTEGRATION = Integration("google-genai", {"google.genai._extra_utils": patch_extra_utils})
