"""Import agent trajectories (SWE-agent, mini-swe-agent, OpenHands) as sessions.

A trajectory says what an agent did, step by step; it is not HTTP traffic. The importer rebuilds
what forkpoint would have recorded, from what the file holds:

* a ``model_call`` per model response, with a synthetic request — ``{"model", "messages": the
  conversation so far}`` plus the sampling settings the file names — and the response as an OpenAI
  Chat Completions body (the shape all three agents use through litellm: the real one when the file
  keeps it, else ``{"choices": [{"message": the assistant message}]}``). The URL is
  ``trajectory://<agent>/v1/chat/completions``: the path gives the wire shape, the host names the
  agent, so ``show`` and ``diff`` read these calls like recorded ones;
* a ``tool_call`` per action, with the action as ``args`` and the observation as ``result``.

Whatever the format does not hold is left out, never invented, and listed in the header's
``imported_from.missing`` and in the ``note`` at seq 1.

Formats (fields as the files have them):

* **SWE-agent** ``.traj``: ``trajectory[]{action, observation, response, thought, execution_time,
  state}``, ``history[]`` (the conversation: ``{role, content, tool_calls?, tool_call_ids?, action?,
  message_type}``), ``info{exit_status, submission, model_stats}``, ``replay_config`` (JSON text or
  object; ``agent.model{name, temperature, top_p}``).
* **mini-swe-agent** ``.traj.json`` (``trajectory_format: mini-swe-agent-1.x``): ``messages[]`` in
  OpenAI format; assistant messages carry ``extra{actions[{command, tool_call_id}], response (the
  raw completion), timestamp}``, tool messages ``extra{raw_output, returncode, timestamp}``; the run
  ends with a ``role: exit`` message holding the submission. ``info{config.model, exit_status}``.
* **OpenHands** event list: ``[{id, timestamp, source, action|observation, args|extras, message,
  content, cause, tool_call_metadata{function_name, tool_call_id, model_response}}]`` (or ``{"history":
  [...]}``). An observation's ``cause`` is the id of its action; actions of one model response share
  its ``model_response``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from ..record import Recorder
from ..redact import scrub_json
from . import Imported

_MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")
_BASH_BLOCK = re.compile(r"```(?:bash|sh)?\s*\n(.*?)\n```", re.DOTALL)


def _d(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


# --------------------------------------------------------------------------- detection


def _is_openhands_event(e: Any) -> bool:
    return isinstance(e, dict) and "source" in e and ("action" in e or "observation" in e)


def detect(doc: Any) -> str | None:
    """``"swe-agent"``, ``"mini-swe-agent"``, ``"openhands"`` or None, from the document's shape."""
    if isinstance(doc, dict):
        steps = doc.get("trajectory")
        if isinstance(steps, list) and all(
            isinstance(s, dict) and "action" in s and "observation" in s for s in steps
        ):
            return "swe-agent"
        info = _d(doc.get("info"))
        if isinstance(doc.get("messages"), list) and (
            str(doc.get("trajectory_format", "")).startswith("mini-swe-agent") or "mini_version" in info
        ):
            return "mini-swe-agent"
        history = doc.get("history")
        if isinstance(history, list) and history and all(_is_openhands_event(e) for e in history):
            return "openhands"
        return None
    if isinstance(doc, list) and doc and all(_is_openhands_event(e) for e in doc):
        return "openhands"
    return None


# --------------------------------------------------------------------------- shared pieces


def _url(agent: str) -> str:
    return f"trajectory://{agent}/v1/chat/completions"


def _clean_call(call: Any) -> dict[str, Any]:
    call = call if isinstance(call, dict) else {}
    fn = _d(call.get("function"))
    args = fn.get("arguments")
    return {
        "id": call.get("id"),
        "type": call.get("type") or "function",
        "function": {
            "name": fn.get("name"),
            "arguments": args if isinstance(args, str) or args is None else orjson.dumps(args).decode(),
        },
    }


def chat_message(m: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI Chat Completions message from an agent's message record (its own keys dropped)."""
    out: dict[str, Any] = {}
    for k in _MESSAGE_KEYS:
        if k not in m:
            continue
        v = m[k]
        if k == "tool_calls":
            if v:
                out[k] = [_clean_call(c) for c in v]
        elif v is not None or k == "content":
            out[k] = v
    if "tool_call_id" not in out and isinstance(m.get("tool_call_ids"), list) and m["tool_call_ids"]:
        out["tool_call_id"] = m["tool_call_ids"][0]  # SWE-agent keeps a list
    out.setdefault("role", "user")
    out.setdefault("content", None)
    return out


def _completion(
    model: str | None, message: dict[str, Any], finish_reason: str | None = None
) -> dict[str, Any]:
    return {
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }


def model_call(
    agent: str,
    request_body: dict[str, Any],
    response_body: dict[str, Any],
    *,
    ts: str | None = None,
    duration_ms: float | None = None,
) -> dict[str, Any]:
    """A ``model_call`` event (with key and summary) for a synthetic request and its response."""
    event: dict[str, Any] = {
        "type": "model_call",
        "duration_ms": duration_ms,
        "request": {
            "method": "POST",
            "url": _url(agent),
            "headers": [["content-type", "application/json"]],
            "body_kind": "json",
            "body": scrub_json(request_body),
        },
        "response": {
            "status": 200,
            "reason": "OK",
            "http_version": "HTTP/1.1",
            "headers": [["content-type", "application/json"]],
            "body_kind": "json",
            "body": scrub_json(response_body),
            "ended": "complete",
        },
    }
    if ts:
        event["ts"] = ts
    return Recorder.enrich_model_call(event)


def tool_call(
    tool: str,
    args: dict[str, Any],
    result: Any,
    *,
    ts: str | None = None,
    duration_ms: float | None = None,
) -> dict[str, Any]:
    """A ``tool_call`` event (the key is added when the session is written)."""
    event: dict[str, Any] = {
        "type": "tool_call",
        "duration_ms": duration_ms,
        "tool": tool,
        "args": args,
        "result": result,
    }
    if ts:
        event["ts"] = ts
    return event


def _epoch_iso(value: Any) -> str | None:
    try:
        t = float(value)
    except (TypeError, ValueError):
        return None
    if t <= 0:
        return None
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _naive_seconds(value: Any) -> float | None:
    """Seconds of an ISO time without a zone (only differences of two of them mean anything)."""
    try:
        return datetime.fromisoformat(str(value)).replace(tzinfo=None).timestamp()
    except (TypeError, ValueError):
        return None


def _params(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: kwargs[k] for k in ("temperature", "top_p", "seed", "max_tokens") if kwargs.get(k) is not None}


def _tool_name(call: dict[str, Any] | None, action: str) -> str:
    if call and call.get("function", {}).get("name"):
        return str(call["function"]["name"])
    first = action.strip().split(None, 1)
    return first[0] if first else "action"


# --------------------------------------------------------------------------- SWE-agent


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
    params = _params(model_cfg)
    info = _d(doc.get("info"))
    stats = _d(info.get("model_stats"))

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
                    _completion(model, chat_message(m)),
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
                _completion(model, reply),
            )
        )
        calls = reply.get("tool_calls") or []
        seconds = step.get("execution_time")
        events.append(
            tool_call(
                _tool_name(calls[0] if calls else None, action),
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


# --------------------------------------------------------------------------- mini-swe-agent


def _mini_actions(m: dict[str, Any]) -> list[dict[str, Any]]:
    extra = _d(m.get("extra"))
    actions = extra.get("actions")
    if isinstance(actions, list) and actions:
        return [a for a in actions if isinstance(a, dict)]
    calls = [_clean_call(c) for c in m.get("tool_calls") or []]
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
    return [{"command": cmd} for cmd in _BASH_BLOCK.findall(content)]  # mini-swe-agent 1.0: ```bash


def convert_mini_swe_agent(path: Path, doc: Any) -> Imported:
    """Model and tool calls of a mini-swe-agent ``.traj.json`` (see the module docstring)."""
    msgs: list[dict[str, Any]] = [m for m in doc["messages"] if isinstance(m, dict)]
    info = _d(doc.get("info"))
    config = _d(info.get("config"))
    model_cfg = _d(config.get("model"))
    model = model_cfg.get("model_name")
    params = _params(model_cfg.get("model_kwargs") or {})
    stats = _d(info.get("model_stats"))

    events: list[dict[str, Any]] = []
    adjusted: list[str] = []
    raw_responses = synthesized = unanswered = 0
    conversation = [chat_message(m) for m in msgs]
    for idx, m in enumerate(msgs):
        if m.get("role") != "assistant":
            continue
        extra = _d(m.get("extra"))
        raw = extra.get("response")
        if isinstance(raw, dict) and isinstance(raw.get("choices"), list):
            response = raw
            raw_responses += 1
        else:
            response = _completion(model, chat_message(m))
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
                ts=_epoch_iso(extra.get("timestamp")),
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
        for action in _mini_actions(m):
            obs = by_id.get(action.get("tool_call_id")) or (in_order.pop(0) if in_order else None)
            args = {k: v for k, v in action.items() if k != "tool_call_id"}
            if obs is not None:
                x_extra = _d(obs.get("extra"))
                events.append(
                    tool_call("bash", args, obs.get("content"), ts=_epoch_iso(x_extra.get("timestamp")))
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
    missing = [
        "the tool definitions offered to the model",
        "durations of model and tool calls (the file has completion times: each call's ts is when it "
        "finished)",
        "the workspace (no checkpoints)",
    ]
    if synthesized:
        missing.append(
            f"the raw model response of {synthesized} call(s) (rebuilt from the assistant message)"
        )
    if unanswered:
        missing.append(f"the output of {unanswered} command(s) (no observation follows them; result null)")
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


# --------------------------------------------------------------------------- OpenHands


def _assistant_from(response: dict[str, Any]) -> dict[str, Any]:
    choices = response.get("choices") if isinstance(response.get("choices"), list) else []
    msg = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    return chat_message(msg) if isinstance(msg, dict) else {"role": "assistant", "content": None}


def convert_openhands(path: Path, doc: Any) -> Imported:
    """Model and tool calls of an OpenHands event list (see the module docstring)."""
    evs: list[dict[str, Any]] = doc["history"] if isinstance(doc, dict) else doc
    messages: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    seen_responses: set[str] = set()
    pending: dict[Any, tuple[dict[str, Any], float | None]] = {}  # action id -> (tool_call, t0)
    skipped: dict[str, int] = {}
    models: list[str] = []
    synthesized = 0
    finished = False
    for e in evs:
        kind = e.get("action") or e.get("observation")
        tcm = _d(e.get("tool_call_metadata"))
        if "action" in e:
            args = _d(e.get("args"))
            if e.get("source") == "user" and kind == "message":
                messages.append({"role": "user", "content": args.get("content", e.get("message"))})
                continue
            if kind == "system":
                messages.append({"role": "system", "content": args.get("content", e.get("message"))})
                continue
            if e.get("source") != "agent":
                skipped[f"{e.get('source')} {kind}"] = skipped.get(f"{e.get('source')} {kind}", 0) + 1
                continue
            response = tcm.get("model_response")
            if isinstance(response, dict):
                rid = str(response.get("id"))
                if rid not in seen_responses:
                    seen_responses.add(rid)
                    model = response.get("model")
                    models.append(str(model))
                    events.append(
                        model_call(
                            "openhands",
                            {"model": model, "messages": list(messages)},
                            response,
                            ts=_epoch_iso(response.get("created")),
                        )
                    )
                    messages.append(_assistant_from(response))
            elif kind == "message":
                # A text answer without a tool call: the model's response is not kept, only its text.
                text = args.get("content", e.get("message"))
                model = models[-1] if models else None
                reply = {"role": "assistant", "content": text}
                events.append(
                    model_call(
                        "openhands", {"model": model, "messages": list(messages)}, _completion(model, reply)
                    )
                )
                messages.append(reply)
                synthesized += 1
                continue
            else:
                skipped[f"agent {kind} without a model response"] = (
                    skipped.get(f"agent {kind} without a model response", 0) + 1
                )
                continue
            finished = finished or kind == "finish"
            call = tool_call(str(tcm.get("function_name") or kind), dict(args), None)
            events.append(call)
            pending[e.get("id")] = (call, _naive_seconds(e.get("timestamp")))
            call["_tool_call_id"] = tcm.get("tool_call_id")
        else:
            cause = e.get("cause")
            if cause in pending:
                call, t0 = pending.pop(cause)
                content = e.get("content", e.get("message"))
                call["result"] = content
                t1 = _naive_seconds(e.get("timestamp"))
                if t0 is not None and t1 is not None:
                    call["duration_ms"] = round((t1 - t0) * 1000, 3)
                messages.append(
                    {"role": "tool", "tool_call_id": call.get("_tool_call_id"), "content": content}
                )
            else:
                skipped[f"{kind} observation"] = skipped.get(f"{kind} observation", 0) + 1
    unanswered = [c for c, _ in pending.values()]
    for e in events:
        e.pop("_tool_call_id", None)
    ids: list[int] = [e["id"] for e in evs if isinstance(e.get("id"), int)]
    missing = [
        "the system prompt and tool definitions (OpenHands builds them at run time; the event list "
        "does not keep them)",
        "OpenHands' own rendering of observations into the prompt (requests rebuild it as plain tool "
        "messages)",
        "the time each tool call started (OpenHands timestamps have no time zone; durations come from "
        "their differences)",
        "the workspace (no checkpoints)",
    ]
    if unanswered:
        names = ", ".join(sorted({c["tool"] for c in unanswered}))
        missing.append(
            f"the result of {len(unanswered)} action(s) with no observation ({names}); result null"
        )
    if ids and len(ids) != max(ids) - min(ids) + 1:
        gone = sorted(set(range(min(ids), max(ids) + 1)) - set(ids))
        missing.append(f"events with ids {', '.join(map(str, gone))} (a gap in the event ids)")
    if synthesized:
        missing.append(f"the raw model response of {synthesized} text answer(s) (rebuilt from the text)")
    adjusted = [f"skipped {n} {what} event(s)" for what, n in sorted(skipped.items())]
    return Imported(
        format="openhands",
        events=events,
        missing=missing,
        adjusted=adjusted,
        end_reason="finish" if finished else None,
        details={"models": sorted(set(models)), "events": len(evs)},
    )
