"""A session whose bodies were withheld (decoded past the limit, so not stored) at the top level and
inside a tool call: what ``show`` and ``show --html`` say of them."""

from __future__ import annotations

import gzip
from pathlib import Path

import httpx
import pytest

import forkpoint
from forkpoint.capture import decoding
from tests.modelserver import LocalServer, Reply

#: The decoding limit while recording (the real one, 64 MiB, makes a slow test).
LIMIT = 1024


def record_withheld(store: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A model call whose request body is withheld, then a tool ``sub_agent`` that makes a model
    call whose response body is withheld and a plain HTTP call whose request body is; returns the
    session's directory."""
    monkeypatch.setattr(decoding, "DECODED_MAX", LIMIT)
    bomb = gzip.compress(bytes(4 * LIMIT))
    plain = {"content-type": "application/json"}
    packed = {"content-type": "application/octet-stream", "content-encoding": "gzip"}

    @forkpoint.tool
    def sub_agent(base: str) -> int:
        inner = httpx.post(f"{base}/v1/chat/completions", json={"model": "m"}, headers=plain)
        upload = httpx.post(base + "/upload", content=bomb, headers=packed)
        return len(inner.content) + upload.status_code

    with LocalServer() as server, forkpoint.record(store=store) as rec:
        server.route(
            "/v1/chat/completions",
            lambda _r: Reply(bomb, ctype="application/json", headers=[("Content-Encoding", "x-gzip")]),
        )
        server.route("/upload", lambda _r: Reply(b"{}", ctype="application/json"))
        httpx.post(f"{server.openai_base_url}/chat/completions", content=bomb, headers=packed)
        sub_agent(server.url)
    return rec.session_path
