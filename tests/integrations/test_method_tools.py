"""A bound method handed to a framework as a tool (google-genai's automatic function calling with
``tools=[inventory.count]``, the anthropic SDK's ``beta_tool(notes.add)``) that keeps state in its
object: a replay does not run its body, so the object stays as it was and the program may go
another way under "replay ok". Recording says so, as it does for a ``@forkpoint.tool`` method."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import forkpoint
from forkpoint.demo.server import ModelServer

SAID = "changed self.calls in place while it ran"


class Inventory:
    def __init__(self) -> None:
        self.calls = 0

    def count_items(self, sku: str) -> int:
        """Count the items of a sku."""
        self.calls += 1
        return 7

    async def count_later(self, sku: str) -> int:
        """Count the items of a sku, later."""
        self.calls += 1
        return 7

    def peek(self, sku: str) -> int:
        """Read only."""
        return self.calls


def test_a_gemini_method_tool_that_changes_its_object_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("google.genai")
    from google import genai
    from google.genai import types

    inv, reader = Inventory(), Inventory()
    with ModelServer(turns=2) as server, forkpoint.record(store=tmp_path) as rec:
        client = genai.Client(api_key="fake", http_options=types.HttpOptions(base_url=server.base_url))
        config = types.GenerateContentConfig(tools=[inv.count_items, reader.peek])
        client.models.generate_content(model="gemini-demo", contents="count", config=config)
    assert inv.calls == 1
    tools = [e["tool"] for e in forkpoint.Session.load(rec.session_path).by_type("tool_call")]
    assert tools == ["count_items", "peek"]
    said = " ".join(capsys.readouterr().err.split())
    assert f"tool 'count_items' {SAID}" in said, said
    assert "'peek'" not in said


def test_an_anthropic_beta_tool_method_that_changes_its_object_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("anthropic")
    from anthropic import Anthropic, AsyncAnthropic, beta_async_tool, beta_tool

    inv = Inventory()
    with ModelServer(turns=1) as server, forkpoint.record(store=tmp_path):
        client = Anthropic(base_url=server.base_url, api_key="sk-ant-fake", max_retries=0)
        client.beta.messages.tool_runner(
            model="claude-demo",
            max_tokens=64,
            tools=[beta_tool(inv.count_items)],
            messages=[{"role": "user", "content": "count"}],
        ).until_done()

        async def main() -> None:
            aclient = AsyncAnthropic(base_url=server.base_url, api_key="sk-ant-fake", max_retries=0)
            await aclient.beta.messages.tool_runner(
                model="claude-demo",
                max_tokens=64,
                tools=[beta_async_tool(inv.count_later)],
                messages=[{"role": "user", "content": "count"}],
            ).until_done()

        asyncio.run(main())
    assert inv.calls == 2
    said = " ".join(capsys.readouterr().err.split())
    assert f"tool 'count_items' {SAID}" in said, said
    assert f"tool 'count_later' {SAID}" in said, said
