"""A session log's lines as stored, packed lines opened (``forkpoint.log.packing``): for tests that
look at the stored encodings (``$delta``, ``$dumps``, ``$blob``) or forge a line."""

from __future__ import annotations

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
