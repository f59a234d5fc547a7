"""A session log's lines as stored, packed lines opened (``forkpoint.log.packing``): for tests that
look at the stored encodings (``$delta``, ``$dumps``, ``$blob``) or forge a line."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from forkpoint.log import LOG_NAME
from forkpoint.log.packing import Unpacker


def stored_lines(path: Path) -> list[dict[str, Any]]:
    """The header, then every event line of the session directory ``path`` in its stored form."""
    first, *rest = (path / LOG_NAME).read_bytes().splitlines()
    unpacker = Unpacker()
    return [orjson.loads(first)] + [
        unpacker.open(orjson.loads(raw), f"{path}:{lineno}")[0] for lineno, raw in enumerate(rest, start=2)
    ]


def searchable(path: Path, data: bytes) -> list[bytes]:
    """``data``, the bytes of the file ``path``, and, for a session log, its lines with the packed
    ones opened: what a search of the disk for a secret must look at."""
    if path.name != LOG_NAME:
        return [data]
    return [data, b"\n".join(orjson.dumps(line) for line in stored_lines(path.parent))]


def growing_workspace_session(store: Path, ws: Path, turns: int, name: str = "mod") -> Path:
    """A session recorded with workspace ``ws`` (a plain folder): before each of ``turns`` model
    calls the agent adds a file to it, so every checkpoint lists one file more (a long session's
    manifests). Returns the session's path."""
    import httpx2

    import forkpoint

    def answer(request: httpx2.Request) -> httpx2.Response:
        msg = {"role": "assistant", "content": "ok"}
        return httpx2.Response(200, json={"id": "x", "model": "m", "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]})  # fmt: skip

    ws.mkdir()
    with forkpoint.record(store=store, workspace=ws) as rec:
        with httpx2.Client(transport=httpx2.MockTransport(answer)) as c:
            for t in range(turns):
                (ws / f"{name}_{t}.py").write_text(f"x = {t}\n")
                c.post("http://127.0.0.1:9/v1/chat/completions", json={"model": "m", "messages": []})
    return rec.session_path


def take_over_descriptor(ending: str, path: Path) -> int:
    """What a daemon does to forkpoint's own descriptor (``os.closerange(3, …)``, then ``open``):
    close this process's one descriptor open on a file whose path ends with ``ending``, and open
    ``path`` to append under its number. Returns the number."""
    (fd,) = [
        int(n) for n in os.listdir("/proc/self/fd") if os.path.realpath(f"/proc/self/fd/{n}").endswith(ending)
    ]
    os.close(fd)
    mine = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    if mine != fd:  # (the number the program's open got, as closerange makes it)
        os.dup2(mine, fd)
        os.close(mine)
    return fd
