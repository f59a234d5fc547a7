"""What the trajectory importers (SWE-agent, mini-swe-agent, OpenHands) share.

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
from typing import Any

import orjson

from ..events import iso_time
from ..record import keyed
from ..redact import scrub_json

MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id")
BASH_BLOCK = re.compile(r"```(?:bash|sh)?\s*\n(.*?)\n```", re.DOTALL)


def as_dict(x: Any) -> dict[str, Any]:
    return x if isinstance(x, dict) else {}


def trajectory_url(agent: str) -> str:
    return f"trajectory://{agent}/v1/chat/completions"


def clean_call(call: Any) -> dict[str, Any]:
    call = call if isinstance(call, dict) else {}
    fn = as_dict(call.get("function"))
    args = fn.get("arguments")
    return {
        "id": call.get("id"),
        "type": call.get("type") or "function",
        "function": {
            "name": fn.get("name"),
            "arguments": args if isinstance(args, str) or args is None else orjson.dumps(args).decode(),
        },
    }


def tool_calls_of(m: dict[str, Any]) -> list[dict[str, Any]]:
    """A message's tool calls, cleaned (:func:`clean_call`); none when it has none. Raises
    ``TypeError`` for ``tool_calls`` that are no list of objects (a string was read as one call a
    character): nothing is invented from a malformed message."""
    calls = m.get("tool_calls")
    if not calls:
        return []
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        raise TypeError(f"a message's tool_calls must be a list of objects, not {calls!r:.60}")
    return [clean_call(c) for c in calls]


def chat_message(m: dict[str, Any]) -> dict[str, Any]:
    """An OpenAI Chat Completions message from an agent's message record (its own keys dropped)."""
    out: dict[str, Any] = {}
    for k in MESSAGE_KEYS:
        if k not in m:
            continue
        v = m[k]
        if k == "tool_calls":
            if v:
                out[k] = tool_calls_of(m)
        elif v is not None or k == "content":
            out[k] = v
    if "tool_call_id" not in out and isinstance(m.get("tool_call_ids"), list) and m["tool_call_ids"]:
        out["tool_call_id"] = m["tool_call_ids"][0]  # SWE-agent keeps a list
    out.setdefault("role", "user")
    out.setdefault("content", None)
    return out


def chat_completion(
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
            "url": trajectory_url(agent),
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
    return keyed(event)


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


def epoch_iso(value: Any) -> str | None:
    try:
        t = float(value)
    except (TypeError, ValueError):
        return None
    if t <= 0:
        return None
    return iso_time(datetime.fromtimestamp(t, UTC))


def naive_seconds(value: Any) -> float | None:
    """Seconds of an ISO time without a zone, read as if it were UTC (the same on every machine;
    only differences of two of them, or a zone offset found elsewhere, make it a time)."""
    try:
        return datetime.fromisoformat(str(value)).replace(tzinfo=UTC).timestamp()
    except (TypeError, ValueError):
        return None


def sampling_params(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: kwargs[k] for k in ("temperature", "top_p", "seed", "max_tokens") if kwargs.get(k) is not None}


def tool_name(call: dict[str, Any] | None, action: str) -> str:
    if call and call.get("function", {}).get("name"):
        return str(call["function"]["name"])
    first = action.strip().split(None, 1)
    return first[0] if first else "action"
