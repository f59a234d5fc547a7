"""A session whose tool ran while a streamed answer was still read (its event is written before the
model call's): what ``show`` and ``show --html`` list in the order the calls started."""

from __future__ import annotations

from pathlib import Path

import httpx

import forkpoint
from tests.modelserver import LocalServer


def record_tool_inside_stream(store: Path) -> Path:
    """Two turns against a local server, each running the tool ``lookup`` after the first line of
    the streamed answer and before its end; returns the session's directory."""

    @forkpoint.tool
    def lookup(q: str) -> str:
        return q.upper()

    with LocalServer() as server, forkpoint.record(store=store) as rec, httpx.Client() as client:
        for turn in (1, 2):
            body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": f"turn {turn}"}]}
            with client.stream("POST", f"{server.openai_base_url}/chat/completions", json=body) as response:
                for n, _line in enumerate(response.iter_lines()):
                    if n == 1:
                        lookup(f"q{turn}")  # while the answer still streams
    return rec.session_path
