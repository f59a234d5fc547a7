"""Two runs of one agent at once (two users of one service), each asking the model's tool for a
roll: the model (:func:`roll_then_say`) and how to tell which run rolled first (:func:`asked_a_then_b`).
A replay that asks in the other order must still give each run its own roll."""

from __future__ import annotations

import itertools
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


def asked_a_then_b(said: dict[str, Any]) -> bool:
    """Run a rolled (:func:`next_roll`) before run b, by what each said (:func:`roll_then_say`)."""
    return int(said["a"].removeprefix("rolled ")) + 1 == int(said["b"].removeprefix("rolled "))
