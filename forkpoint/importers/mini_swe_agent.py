"""mini-swe-agent trajectories (``.traj.json``) as sessions; the shared rebuilding is :mod:`.trajectory`.

Two layouts: the ``.traj.json`` document (``{"messages", "info", "trajectory_format":
"mini-swe-agent-*"}``), and a bare list of its chat messages (``[{"role", "content"}, …]``, as
older versions and scripts that keep only ``agent.messages`` save it; it has no model name or
statistics). An assistant message whose action forkpoint cannot find (no ``extra.actions``, no tool
calls, no fenced command block) is counted and named in the import note, never silently dropped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from .base import Imported, Importer
from .trajectory import (
    BASH_BLOCK,
    as_dict,
    chat_completion,
    chat_message,
    epoch_iso,
    model_call,
    sampling_params,
    tool_call,
    tool_calls_of,
)

#: Roles of mini-swe-agent's messages (``exit`` ends a run).
_ROLES = frozenset({"system", "user", "assistant", "tool", "exit"})


def _bare_messages(doc: Any) -> bool:
    """A bare list of chat messages with at least one assistant message."""
    return (
        isinstance(doc, list)
        and bool(doc)
        and all(isinstance(m, dict) and m.get("role") in _ROLES and "content" in m for m in doc)
        and any(m.get("role") == "assistant" for m in doc)
    )


def _mini_actions(m: dict[str, Any]) -> list[dict[str, Any]]:
    extra = as_dict(m.get("extra"))
    actions = extra.get("actions")
    if isinstance(actions, list) and actions:
        return [a for a in actions if isinstance(a, dict)]
    calls = tool_calls_of(m)
    if calls:
        out = []
        for c in calls:
            try:
                args = orjson.loads(c["function"]["arguments"] or "{}")
            except orjson.JSONDecodeError:
                args = {"arguments": c["function"]["arguments"]}
            out.append({**(args if isinstance(args, dict) else {"arguments": args}), "tool_call_id": c["id"]})
        return out
    text = m.get("content")
    content = text if isinstance(text, str) else ""
    return [{"command": cmd} for cmd in BASH_BLOCK.findall(content)]  # mini-swe-agent 1.0: ```bash


def convert_mini_swe_agent(path: Path, doc: Any) -> Imported:
    """Model and tool calls of a mini-swe-agent ``.traj.json`` (see the module docstring)."""
    bare = _bare_messages(doc)
    if bare:
        doc = {"messages": doc}
    msgs: list[dict[str, Any]] = [m for m in doc["messages"] if isinstance(m, dict)]
    info = as_dict(doc.get("info"))
    config = as_dict(info.get("config"))
    model_cfg = as_dict(config.get("model"))
    model = model_cfg.get("model_name")
    params = sampling_params(model_cfg.get("model_kwargs") or {})
    stats = as_dict(info.get("model_stats"))

    events: list[dict[str, Any]] = []
    adjusted: list[str] = []
    raw_responses = synthesized = unanswered = 0
    no_action: list[int] = []  # assistant messages (1-based places) whose action was not found
    conversation = [chat_message(m) for m in msgs]
    for idx, m in enumerate(msgs):
        if m.get("role") != "assistant":
            continue
        extra = as_dict(m.get("extra"))
        raw = extra.get("response")
        if isinstance(raw, dict) and isinstance(raw.get("choices"), list):
            response = raw
            raw_responses += 1
        else:
            response = chat_completion(model, chat_message(m))
            synthesized += 1
        events.append(
            model_call(
                "mini-swe-agent",
                {
                    "model": model,
                    "messages": [
                        c
                        for c, x in zip(conversation[:idx], msgs[:idx], strict=True)
                        if x.get("role") != "exit"
                    ],
                    **params,
                },
                response,
                ts=epoch_iso(extra.get("timestamp")),
            )
        )
        # The observations of this turn: the messages up to the next assistant message.
        later = []
        for x in msgs[idx + 1 :]:
            if x.get("role") == "assistant":
                break
            later.append(x)
        by_id = {x.get("tool_call_id"): x for x in later if x.get("role") == "tool" and x.get("tool_call_id")}
        in_order = [x for x in later if x.get("role") in ("tool", "user") and x not in by_id.values()]
        exits = [x for x in later if x.get("role") == "exit"]
        actions = _mini_actions(m)
        if not actions and any(x.get("role") in ("tool", "user") for x in later):
            no_action.append(idx + 1)  # the agent answered something that was not found as an action
        for action in actions:
            obs = by_id.get(action.get("tool_call_id")) or (in_order.pop(0) if in_order else None)
            args = {k: v for k, v in action.items() if k != "tool_call_id"}
            if obs is not None:
                x_extra = as_dict(obs.get("extra"))
                events.append(
                    tool_call("bash", args, obs.get("content"), ts=epoch_iso(x_extra.get("timestamp")))
                )
            elif exits:
                # The command that finished the run: its output became the submission (the exit message).
                events.append(tool_call("bash", args, exits[0].get("content")))
                adjusted.append(
                    "the last command's result is the run's `exit` message (its output, which "
                    "mini-swe-agent took as the submission)"
                )
            else:
                events.append(tool_call("bash", args, None))
                unanswered += 1
    n_models = sum(1 for e in events if e["type"] == "model_call")
    dated = any(e.get("ts") for e in events)
    missing = [
        "the tool definitions offered to the model",
        "durations of model and tool calls"
        + (" (the file has completion times: each call's ts is when it finished)" if dated else ""),
        "the workspace (no checkpoints)",
    ]
    if synthesized:
        missing.append(
            f"the raw model response of {synthesized} call(s) (rebuilt from the assistant message)"
        )
    if unanswered:
        missing.append(f"the output of {unanswered} command(s) (no observation follows them; result null)")
    if no_action:
        places = ", ".join(map(str, no_action[:10])) + (" …" if len(no_action) > 10 else "")
        missing.append(
            f"the action of {len(no_action)} assistant message(s) (messages {places}): forkpoint found no "
            "`extra.actions`, tool calls or fenced command block in them, so the commands they ran (if any) "
            "and their observations are not tool calls of the session"
        )
    if bare:
        missing.append(
            "the model name, its settings and the run's statistics (a bare message list has no `info`)"
        )
    if stats.get("api_calls") is not None and stats["api_calls"] != n_models:
        adjusted.append(
            f"the file reports {stats['api_calls']} model calls; {n_models} could be rebuilt from it"
        )
    adjusted.append("requests are the messages before each response, without mini-swe-agent's `extra` fields")
    return Imported(
        format="mini-swe-agent",
        events=events,
        missing=missing,
        adjusted=adjusted,
        end_reason=info.get("exit_status"),
        details={
            "model": model,
            "trajectory_format": doc.get("trajectory_format"),
            "instance_id": doc.get("instance_id"),
            "raw_responses": raw_responses,
        },
    )


def looks_like(doc: Any) -> bool:
    """True for a mini-swe-agent trajectory: ``messages`` and a ``trajectory_format`` (or version) of
    it, or a bare list of chat messages."""
    if _bare_messages(doc):
        return True
    if not isinstance(doc, dict) or not isinstance(doc.get("messages"), list):
        return False
    fmt = str(doc.get("trajectory_format", ""))
    return fmt.startswith("mini-swe-agent") or "mini_version" in as_dict(doc.get("info"))


IMPORTER = Importer(
    "mini-swe-agent",
    "a mini-swe-agent trajectory (.traj.json: JSON with `messages` and `trajectory_format: mini-swe-agent-*`, "
    "or a bare list of its chat messages)",
    looks_like,
    convert_mini_swe_agent,
)
