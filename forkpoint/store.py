"""Where sessions live: the store directory, and finding a session by path, id, prefix or ``last``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from .log import LOG_NAME, SessionError, read_header

#: Default store, relative to the current directory, unless ``FORKPOINT_STORE`` is set.
DEFAULT_STORE = ".forkpoint"


def default_store() -> Path:
    """``$FORKPOINT_STORE`` if set, else ``./.forkpoint``."""
    return Path(os.environ.get("FORKPOINT_STORE") or DEFAULT_STORE)


def session_dirs(store: Path) -> list[Path]:
    """Session directories of ``store``, oldest first.

    Ids start with the creation time to the second only (then random hex), so sessions made within
    one second are ordered by their header's ``created`` time (milliseconds), then by id.
    """
    if not store.is_dir():
        return []
    return sorted((p for p in store.iterdir() if (p / LOG_NAME).is_file()), key=_creation_order)


def _creation_order(path: Path) -> tuple[str, str, str]:
    try:
        created = str(read_header(path / LOG_NAME).get("created") or "")
    except SessionError:
        created = ""
    return path.name[:15], created, path.name


def resolve(ref: str | Path, store: Path | None = None) -> Path:
    """The session directory that ``ref`` names: a path, a full id, a unique id prefix, or ``last``.

    Raises :class:`SessionError` saying what was tried when nothing (or more than one) matches.
    """
    store = Path(store) if store else default_store()
    as_path = Path(ref)
    if (as_path / LOG_NAME).is_file():
        return as_path
    text = str(ref)
    dirs = session_dirs(store)
    if text == "last":
        if not dirs:
            raise SessionError(f"{store}: no sessions in this store")
        return dirs[-1]
    hits = [d for d in dirs if d.name.startswith(text)]
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        names = ", ".join(d.name for d in hits[:5])
        raise SessionError(f"{ref!r} is ambiguous in {store}: {names}{' …' if len(hits) > 5 else ''}")
    raise SessionError(f"no session {ref!r}: not a session directory, and no id in {store} starts with it")


@dataclass
class SessionInfo:
    """One row of ``forkpoint ls``."""

    path: Path
    header: dict[str, Any]
    events: int
    model_calls: int
    tool_calls: int
    exit_code: int | None
    complete: bool


def info(path: Path) -> SessionInfo:
    """Summarize a session by scanning its lines, without resolving blobs."""
    header = read_header(path / LOG_NAME)
    events = models = tools = 0
    exit_code: int | None = None
    complete = False
    with open(path / LOG_NAME, "rb") as f:
        next(f)
        for raw in f:
            if not raw.endswith(b"\n"):
                break
            events += 1
            # Cheap type sniffing: the type is always the second key of a line.
            if b'"type":"model_call"' in raw[:80]:
                models += 1
            elif b'"type":"tool_call"' in raw[:80]:
                tools += 1
            elif b'"type":"end"' in raw[:80]:
                complete = True
                try:
                    exit_code = orjson.loads(raw).get("exit_code")
                except orjson.JSONDecodeError:
                    pass
    return SessionInfo(path, header, events, models, tools, exit_code, complete)
