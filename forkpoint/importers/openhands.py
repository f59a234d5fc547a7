"""OpenHands event lists as sessions; the shared rebuilding is :mod:`.trajectory`.

One clock: OpenHands timestamps are local times without a zone, while a model response's
``created`` is UTC epoch seconds. The zone offset is found from an action that has both (rounded to
a quarter hour), and every event's time is its own timestamp moved by it, so times never run
backwards and no duration spans two clocks. Without such a pair the timestamps are taken as UTC
(said in the import note).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .base import Imported, Importer, no_time
from .trajectory import (
    as_dict,
    chat_completion,
    chat_message,
    epoch_iso,
    model_call,
    naive_seconds,
    tool_call,
)


def _is_openhands_event(e: Any) -> bool:
    return isinstance(e, dict) and "source" in e and ("action" in e or "observation" in e)


def _assistant_from(response: dict[str, Any]) -> dict[str, Any]:
    choices = response.get("choices") if isinstance(response.get("choices"), list) else []
    msg = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
    return chat_message(msg) if isinstance(msg, dict) else {"role": "assistant", "content": None}


def zone_offset(evs: list[dict[str, Any]]) -> float | None:
    """Seconds to add to an OpenHands timestamp to get UTC: ``created`` of the first model response
    less its action's timestamp, rounded to 15 minutes; None when no action has both (or they are
    more than 14 hours apart, which no zone is)."""
    for e in evs:
        created = as_dict(as_dict(e.get("tool_call_metadata")).get("model_response")).get("created")
        local = naive_seconds(e.get("timestamp"))
        if isinstance(created, int | float) and created > 0 and local is not None:
            offset = round((created - local) / 900) * 900
            return float(offset) if abs(offset) <= 14 * 3600 else None
    return None


def convert_openhands(path: Path, doc: Any) -> Imported:
    """Model and tool calls of an OpenHands event list (see the module docstring)."""
    evs: list[dict[str, Any]] = doc["history"] if isinstance(doc, dict) else doc
    offset = zone_offset(evs)

    def when(e: dict[str, Any]) -> str | None:
        local = naive_seconds(e.get("timestamp"))
        return None if local is None else epoch_iso(local + (offset or 0.0))

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
        tcm = as_dict(e.get("tool_call_metadata"))
        if "action" in e:
            args = as_dict(e.get("args"))
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
                            ts=when(e),
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
                        "openhands",
                        {"model": model, "messages": list(messages)},
                        chat_completion(model, reply),
                        ts=when(e),
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
            call = tool_call(str(tcm.get("function_name") or kind), dict(args), None, ts=when(e))
            events.append(call)
            pending[e.get("id")] = (call, naive_seconds(e.get("timestamp")))
            call["_tool_call_id"] = tcm.get("tool_call_id")
        else:
            cause = e.get("cause")
            if cause in pending:
                call, t0 = pending.pop(cause)
                content = e.get("content", e.get("message"))
                call["result"] = content
                t1 = naive_seconds(e.get("timestamp"))
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
        "the duration of model calls (OpenHands keeps when each action was taken, not how long the "
        "model took)",
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
    unreadable = [e for e in evs if e.get("timestamp") is not None and naive_seconds(e["timestamp"]) is None]
    if unreadable:
        numbers = [e.get("id") for e in unreadable]
        adjusted.append(no_time("timestamp", "event(s)", numbers, unreadable[0]["timestamp"]))
    if offset is None:
        adjusted.append(
            "event times are OpenHands' timestamps taken as UTC (no model response gave the zone)"
        )
    else:
        adjusted.append(f"event times are OpenHands' local timestamps moved by {offset / 3600:+g} h to UTC")
    return Imported(
        format="openhands",
        events=events,
        missing=missing,
        adjusted=adjusted,
        end_reason="finish" if finished else None,
        details={"models": sorted(set(models)), "events": len(evs)},
    )


def looks_like(doc: Any) -> bool:
    """True for an OpenHands event list (or ``{"history": [...]}``): events with ``source`` and an
    ``action`` or ``observation``."""
    events = doc.get("history") if isinstance(doc, dict) else doc
    return isinstance(events, list) and bool(events) and all(_is_openhands_event(e) for e in events)


IMPORTER = Importer(
    "openhands",
    "an OpenHands event list (JSON list of events with `source` and `action` or `observation`)",
    looks_like,
    convert_openhands,
)
