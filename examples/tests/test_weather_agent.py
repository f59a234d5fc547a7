"""Tests of the weather agent that run offline from committed cassettes.

Each test marked ``@pytest.mark.forkpoint`` was recorded once against a model (here the bundled
demo model; see ``record_cassettes.py``) and is replayed from ``examples/cassettes/`` ever since:
no network, no API key, no tool bodies, the same answers every time, in milliseconds.
"""

from __future__ import annotations

import pytest
from weather_agent import run_agent


@pytest.mark.forkpoint
def test_agent_looks_up_the_weather_then_answers() -> None:
    result = run_agent("What is the weather in Paris, in Fahrenheit?")
    assert [name for name, _ in result.tool_calls] == ["get_weather", "convert_temperature"]
    assert result.model_calls == 3
    assert result.answer  # the model's final sentence


@pytest.mark.forkpoint
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_streamed_and_whole_answers_agree(stream: bool) -> None:
    result = run_agent("How warm is it in Oslo?", stream=stream)
    assert len(result.tool_calls) == 2
    assert result.answer.startswith(("Done", "All set", "Finished", "Here is", "That's done"))


def test_replay_serves_the_tools_from_the_cassette(forkpoint_session) -> None:
    """With the fixture, a test can see its cassette: on replay the tool results come from it."""
    result = run_agent("Is it cold in Lima?")
    if forkpoint_session.action == "replay":
        report = forkpoint_session.report()
        assert report["matched"] == report["recorded"] == result.model_calls + len(result.tool_calls)
    assert forkpoint_session.path.name == "test_replay_serves_the_tools_from_the_cassette"
