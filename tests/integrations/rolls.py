"""Two runs of one agent at once (two users of one service), each asking the model's tool for a
roll: the model (:func:`roll_then_say`) and how to tell which run rolled first (:func:`asked_a_then_b`).
A replay that asks in the other order must still give each run its own roll."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

from tests.modelserver import Reply, Stream, chat_chunks, chat_completion, json_reply

_rolls = itertools.count()


def next_roll() -> int:
    """The roll tools' answer: each one more than the one before, whichever run asks."""
    return next(_rolls)


def _text(content: Any) -> str:
    """A chat message's content as text: a string, or its text parts joined (as strands sends it)."""
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def roll_then_say(request: dict[str, Any]) -> Reply | Stream:
    """A model asked by several runs at once (each its own first message): it asks for a roll of
    six, with a fresh random id as OpenAI gives, then says what the roll gave (streamed when asked)."""
    body = request["body"]
    messages = [m for m in body["messages"] if m["role"] != "system"]
    user, last = _text(messages[0]["content"]), messages[-1]
    if last["role"] == "tool":
        said = f"rolled {_text(last['content'])}"
        answer = chat_completion(f"chatcmpl-{user}-2", body["model"], text=said)
    else:
        answer = chat_completion(f"chatcmpl-{user}-1", body["model"], tool_calls=[("roll", {"sides": 6})])
    return Stream(chat_chunks(answer)) if body.get("stream") else json_reply(answer)


def roll_then_answer(request: dict[str, Any]) -> Reply:
    """:func:`roll_then_say` as smolagents' ``ToolCallingAgent`` needs it: the task is its first
    user message (``New task:\nNAME``), the roll's result a user message (``Observation:\nN``),
    and what the roll gave is said by calling ``final_answer``."""
    body = request["body"]
    users = [_text(m["content"]) for m in body["messages"] if m["role"] == "user"]
    user, last = users[0].rsplit("\n", 1)[-1], users[-1]
    if last.startswith("Observation:"):
        said = f"rolled {last.removeprefix('Observation:').strip()}"
        answer = chat_completion(
            f"chatcmpl-{user}-2", body["model"], tool_calls=[("final_answer", {"answer": said})]
        )
    else:
        answer = chat_completion(f"chatcmpl-{user}-1", body["model"], tool_calls=[("roll", {"sides": 6})])
    return json_reply(answer)


def asked_a_then_b(said: dict[str, Any]) -> bool:
    """Run a rolled (:func:`next_roll`) before run b, by what each said (:func:`roll_then_say`)."""
    return int(said["a"].removeprefix("rolled ")) + 1 == int(said["b"].removeprefix("rolled "))


def roll_then_say_anthropic(request: dict[str, Any]) -> Reply:
    """:func:`roll_then_say` as an Anthropic model, for the anthropic SDK's tool runner, which
    continues a server-side thread (``thread.previous_message_id``: only the tool result is sent)."""
    body = request["body"]
    last = body["messages"][-1]
    parts = last["content"] if isinstance(last["content"], list) else []
    result = next((c for c in parts if c.get("type") == "tool_result"), None)
    if result is not None:
        user = str(body["thread"]["previous_message_id"]).split("_")[1]
        content = [{"type": "text", "text": f"rolled {_text(result['content'])}"}]
        stop, n = "end_turn", 2
    else:
        user = _text(last["content"])
        content = [
            {
                "type": "tool_use",
                "id": f"toolu_{uuid.uuid4().hex[:12]}",
                "name": "roll",
                "input": {"sides": 6},
            }
        ]
        stop, n = "tool_use", 1
    return json_reply(
        {
            "id": f"msg_{user}_{n}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
    )


def replayed_ok(report: dict[str, Any]) -> bool:
    """Whether a replay of runs at once said "replay ok" and nothing else, but for the order their
    model answers came in (``model_order``: live, one may come before that of a call another run
    sent earlier, as timing has it, and a replay that asks in the other order says it is not
    certain of it)."""
    from forkpoint.replay import summary_line

    return summary_line({**report, "model_order": []}).startswith("replay ok: ")
