"""A small tool-using agent on the real ``openai`` SDK: the example that ``examples/tests`` test.

It answers weather questions with two tools, both plain functions marked ``@forkpoint.tool`` so
that forkpoint records their calls (and, on replay, serves their results without running them):

- ``get_weather(city)`` looks the city up in a stand-in "weather service" (a table, so the example
  runs anywhere; a real one would call an HTTP API here).
- ``convert_temperature(celsius, to)`` converts to Fahrenheit or Kelvin.

Each model turn is one Chat Completions call (streamed or not); the agent runs the tools the
model asks for and sends their results back until the model answers with text.

    python examples/weather_agent.py "What is the weather in Oslo, in Fahrenheit?"

talks to ``$WEATHER_AGENT_BASE_URL`` (default: the bundled demo model on 127.0.0.1:8765, started
with ``python -m forkpoint.demo.server --port 8765``) or any OpenAI-compatible server.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any

import openai

import forkpoint

DEFAULT_BASE_URL = "http://127.0.0.1:8765/v1"
SYSTEM_PROMPT = "You answer weather questions. Use the tools; answer in one short sentence."

#: The stand-in weather service: current temperature in Celsius.
WEATHER = {"paris": 18.5, "oslo": 4.0, "cairo": 31.0, "lima": 16.0}


@forkpoint.tool
def get_weather(city: str) -> dict[str, Any]:
    """The current temperature of ``city`` in Celsius (``found`` is false for unknown cities)."""
    celsius = WEATHER.get(city.strip().lower())
    return {"city": city, "celsius": celsius, "found": celsius is not None}


@forkpoint.tool
def convert_temperature(celsius: float, to: str) -> dict[str, Any]:
    """``celsius`` in ``to`` (``fahrenheit`` or ``kelvin``)."""
    if to == "fahrenheit":
        value = celsius * 9 / 5 + 32
    elif to == "kelvin":
        value = celsius + 273.15
    else:
        raise ValueError(f"unknown unit {to!r}")
    return {"value": round(value, 2), "unit": to}


TOOLS: dict[str, Any] = {"get_weather": get_weather, "convert_temperature": convert_temperature}
TOOL_SPECS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current temperature of a city, in Celsius.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "enum": ["Paris", "Oslo", "Cairo", "Lima"]}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "convert_temperature",
            "description": "Convert a Celsius temperature.",
            "parameters": {
                "type": "object",
                "properties": {
                    "celsius": {"type": "number"},
                    "to": {"type": "string", "enum": ["fahrenheit", "kelvin"]},
                },
                "required": ["celsius", "to"],
            },
        },
    },
]


@dataclass
class Result:
    """What the agent did: its final answer, and the tools it called (name and result), in order."""

    answer: str
    tool_calls: list[tuple[str, Any]] = field(default_factory=list)
    model_calls: int = 0


def _ask(client: openai.OpenAI, model: str, messages: list[Any], stream: bool) -> dict[str, Any]:
    """One model turn; the assistant message as a dict ready to append to ``messages``."""
    if not stream:
        msg = (
            client.chat.completions.create(model=model, messages=messages, tools=TOOL_SPECS)
            .choices[0]
            .message
        )
        calls = [
            {
                "id": c.id,
                "type": "function",
                "function": {"name": c.function.name, "arguments": c.function.arguments},
            }
            for c in msg.tool_calls or []
        ]
        return {"role": "assistant", "content": msg.content, **({"tool_calls": calls} if calls else {})}
    text: list[str] = []
    calls_by_index: dict[int, dict[str, Any]] = {}
    with client.chat.completions.create(
        model=model, messages=messages, tools=TOOL_SPECS, stream=True
    ) as chunks:
        for chunk in chunks:
            for choice in chunk.choices:
                if choice.delta.content:
                    text.append(choice.delta.content)
                for part in choice.delta.tool_calls or []:
                    call = calls_by_index.setdefault(
                        part.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                    )
                    call["id"] = part.id or call["id"]
                    if part.function is not None:
                        call["function"]["name"] += part.function.name or ""
                        call["function"]["arguments"] += part.function.arguments or ""
    calls = [calls_by_index[i] for i in sorted(calls_by_index)]
    return {"role": "assistant", "content": "".join(text) or None, **({"tool_calls": calls} if calls else {})}


def run_agent(
    question: str,
    *,
    base_url: str | None = None,
    model: str = "demo-model",
    stream: bool = False,
    max_turns: int = 8,
) -> Result:
    """Answer ``question``; raises ``RuntimeError`` when ``max_turns`` model calls gave no answer."""
    client = openai.OpenAI(
        base_url=base_url or os.environ.get("WEATHER_AGENT_BASE_URL") or DEFAULT_BASE_URL,
        api_key=os.environ.get("OPENAI_API_KEY") or "example-key",
        max_retries=0,
    )
    messages: list[Any] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": question},
    ]
    result = Result(answer="")
    with client:
        for _ in range(max_turns):
            reply = _ask(client, model, messages, stream)
            result.model_calls += 1
            messages.append(reply)
            if not reply.get("tool_calls"):
                result.answer = reply.get("content") or ""
                return result
            for call in reply["tool_calls"]:
                name = call["function"]["name"]
                try:
                    output: Any = TOOLS[name](**json.loads(call["function"]["arguments"] or "{}"))
                except Exception as exc:  # the model sees tool errors, as in real agents
                    output = {"error": f"{type(exc).__name__}: {exc}"}
                result.tool_calls.append((name, output))
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(output)})
    raise RuntimeError(f"no answer after {max_turns} model calls")


if __name__ == "__main__":
    print(run_agent(" ".join(sys.argv[1:]) or "What is the weather in Paris?").answer)
