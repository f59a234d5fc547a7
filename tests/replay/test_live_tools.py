"""Tools that run live during a replay (live_tools): their bodies run, they may connect where they
need to, and their recorded calls are not expected to be served."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import forkpoint
from tests.modelserver import LocalServer


def test_a_live_tool_runs_and_connects_while_the_rest_is_served(server: LocalServer, store: Path) -> None:
    ran: list[str] = []

    @forkpoint.tool
    def ping(port: int) -> str:
        ran.append("ping")
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return "pong"

    @forkpoint.tool
    def add(a: int, b: int) -> int:
        ran.append("add")
        return a + b

    with forkpoint.record(store=store) as rec:
        assert ping(server.port) == "pong" and add(1, 2) == 3
    ran.clear()
    with forkpoint.replay(rec.session_path, live_tools=["ping"], record_child=False) as rp:
        assert ping(server.port) == "pong" and add(1, 2) == 3
        with pytest.raises(forkpoint.NetworkBlocked):  # outside the live tool, the guard still holds
            socket.create_connection(("127.0.0.1", server.port), timeout=5)
    assert ran == ["ping"]  # add was served
    report = rp.report()
    assert report["live_calls"] == {"models": 0, "tools": 1}
    assert report["unserved"] == [] and report["unused"] == [1]  # ping's recording: not expected
    assert report["network_blocked"] == [f"127.0.0.1:{server.port}"]
