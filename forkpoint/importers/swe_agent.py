"""SWE-agent trajectories (``.traj``) as sessions; the shared rebuilding is :mod:`.trajectory`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from .base import Imported, Importer
from .trajectory import (
    as_dict,
    chat_completion,
    chat_message,
    model_call,
    sampling_params,
    tool_call,
    tool_name,
)


def convert_swe_agent(path: Path, doc: Any) -> Imported:
    """Model and tool calls of a SWE-agent ``.traj`` (see the module docstring)."""
    steps: list[dict[str, Any]] = doc["trajectory"]
    history: list[dict[str, Any]] = [m for m in doc.get("history") or [] if isinstance(m, dict)]
    cfg = doc.get("replay_config")
    if isinstance(cfg, str):
        try:
            cfg = orjson.loads(cfg)
        except orjson.JSONDecodeError:
            cfg = None
    model_cfg = ((cfg or {}).get("agent") or {}).get("model") or {}
    model = model_cfg.get("name")
    params = sampling_params(model_cfg)
    info = as_dict(doc.get("info"))
    stats = as_dict(info.get("model_stats"))

    events: list[dict[str, Any]] = []
    missing: list[str] = []
    adjusted: list[str] = []
    pos = 0  # next unread history message
    unstructured: list[int] = []
    extra_msgs: list[dict[str, Any]] = []  # the conversation beyond the end of `history`
    for n, step in enumerate(steps, start=1):
        action = str(step.get("action") or "")
        found = None
        for i in range(pos, len(history)):
            m = history[i]
            if m.get("role") != "assistant":
                continue
            if m.get("action") is None or str(m.get("action")) == action:
                found = i
                break
            # An assistant message for no step (a reply the agent re-queried): a model call, no action.
            events.append(
                model_call(
                    "swe-agent",
                    {"model": model, "messages": [chat_message(x) for x in history[:i]], **params},
                    chat_completion(model, chat_message(m)),
                )
            )
        if found is not None:
            prefix = [chat_message(x) for x in history[:found]]
            reply = chat_message(history[found])
            pos = found + 1
        else:
            prefix = [chat_message(x) for x in history] + extra_msgs
            reply = {"role": "assistant", "content": step.get("response") or step.get("thought")}
            unstructured.append(n)
            extra_msgs += [reply, {"role": "user", "content": step.get("observation")}]
            pos = len(history)
        events.append(
            model_call(
                "swe-agent",
                {"model": model, "messages": prefix, **params},
                chat_completion(model, reply),
            )
        )
        calls = reply.get("tool_calls") or []
        seconds = step.get("execution_time")
        events.append(
            tool_call(
                tool_name(calls[0] if calls else None, action),
                {"action": action},
                step.get("observation"),
                duration_ms=round(float(seconds) * 1000, 3) if isinstance(seconds, int | float) else None,
            )
        )
    n_models = sum(1 for e in events if e["type"] == "model_call")
    missing += [
        "the tool definitions offered to the model (the file names tool bundles, not their schemas)",
        "per-call token usage and cost (the file has run totals only"
        + (
            f": {stats.get('tokens_sent')} tokens sent, {stats.get('tokens_received')} received"
            if stats
            else ""
        )
        + ")",
        "timestamps and model call durations (the file has each action's execution time only)",
        "finish reasons of the model responses",
        "the workspace (no checkpoints)",
    ]
    if unstructured:
        which = ", ".join(map(str, unstructured))
        missing.append(
            f"the structured tool call of step(s) {which}: `history` ends before them, so their model "
            "response is the step's text and their tool is named after the action's first word"
        )
    if stats.get("api_calls") is not None and stats["api_calls"] != n_models:
        adjusted.append(
            f"the file reports {stats['api_calls']} model calls; {n_models} could be rebuilt from it"
        )
    adjusted.append(
        "requests are `history` as stored (SWE-agent's history processors, if any, changed what was sent)"
    )
    return Imported(
        format="swe-agent",
        events=events,
        missing=missing,
        adjusted=adjusted,
        end_reason=info.get("exit_status"),
        details={"model": model, "steps": len(steps)},
    )


def looks_like(doc: Any) -> bool:
    """True for a SWE-agent trajectory: a ``trajectory`` list of ``{action, observation}`` steps."""
    steps = doc.get("trajectory") if isinstance(doc, dict) else None
    return isinstance(steps, list) and all(
        isinstance(s, dict) and "action" in s and "observation" in s for s in steps
    )


IMPORTER = Importer(
    "swe-agent",
    "a SWE-agent trajectory (.traj: JSON with a `trajectory` list of {action, observation, response})",
    looks_like,
    convert_swe_agent,
)
