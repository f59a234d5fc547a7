"""``forkpoint show SESSION``: what the timeline says of calls whose bodies were not stored."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

import forkpoint
from forkpoint.show import render
from tests.views.withheld import record_withheld


def test_a_withheld_body_is_said_on_a_call_made_inside_a_tool_call(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call a tool made is listed under the tool (``↳``): its body that was not stored was said on
    a top-level call's lines only, and a call inside a tool looked whole."""
    session = forkpoint.Session.load(record_withheld(store, monkeypatch))
    top, inner, upload = session.by_type("model_call")
    (tool,) = session.by_type("tool_call")
    assert inner["parent_span_id"] == upload["parent_span_id"] == tool["span_id"]
    out = io.StringIO()
    render(session, Console(file=out, width=400, highlight=False))
    lines = out.getvalue().splitlines()

    def said_under(event: dict[str, object], part: str) -> bool:
        at = next(i for i, line in enumerate(lines) if f"#{event['seq']} " in line)
        why = event[part]["withheld"]  # type: ignore[index]
        return lines[at + 1].strip() == f"{part} body NOT STORED: {why}"

    assert "withheld" in top["request"] and said_under(top, "request"), lines
    assert "withheld" in inner["response"] and said_under(inner, "response"), lines
    assert "withheld" in upload["request"] and said_under(upload, "request"), lines
