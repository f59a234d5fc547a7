"""Interoperability: forkpoint sessions to and from the formats other tools use.

Importers (``forkpoint import PATH``, :func:`import_file`) turn a file another tool wrote into a
session:

* **VCR.py cassettes** (:mod:`forkpoint.interop.vcr`) — YAML or JSON, stock VCR.py and the
  ``parsed_body`` dialect — become ``model_call`` events in forkpoint's stored shapes, so a replay
  with the real SDK answers from them.
* **Agent trajectories** (:mod:`forkpoint.interop.trajectories`) — SWE-agent ``.traj``,
  mini-swe-agent ``.traj.json``, OpenHands event lists — become model calls and tool calls that
  ``show``, ``diff`` and ``verify`` understand.

The format is recognised from the content, not the file name. Whatever the source does not hold is
left out of the session and said so: in the header (``imported_from.missing``) and in a ``note``
event at seq 1. See ``docs/import.md``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from ..log import SessionWriter, new_span_id
from ..match import tool_key
from ..record import make_header
from ..redact import scrub_json
from ..runtime import ForkpointError
from ..store import default_store

__all__ = [
    "FORMATS",
    "ImportFormatError",
    "Imported",
    "detect_format",
    "import_file",
    "load_document",
    "write_session",
]

#: Formats :func:`import_file` understands, with what each looks like (for error messages).
FORMATS: dict[str, str] = {
    "vcr": "a VCR.py cassette (YAML or JSON with an `interactions` list of {request, response})",
    "swe-agent": "a SWE-agent trajectory (.traj: JSON with a `trajectory` list of {action, observation, response})",
    "mini-swe-agent": "a mini-swe-agent trajectory (.traj.json: JSON with `messages` and "
    "`trajectory_format: mini-swe-agent-*`)",
    "openhands": "an OpenHands event list (JSON list of events with `source` and `action` or `observation`)",
}


class ImportFormatError(ForkpointError, ValueError):
    """A file cannot be imported: unreadable, or none of the :data:`FORMATS`. The message names the
    file and what was expected."""


@dataclass
class Imported:
    """What an importer made of a file, before it is written as a session.

    ``events`` are ``model_call`` / ``tool_call`` / ``note`` events in resolved form (no seq, no
    hashes); ``missing`` says, one item each, what the source does not hold; ``adjusted`` what the
    importer had to infer or fill in; ``end_reason`` and ``exit_code`` go to the ``end`` event;
    ``details`` are extra ``imported_from`` header fields.
    """

    format: str
    events: list[dict[str, Any]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    adjusted: list[str] = field(default_factory=list)
    end_reason: str | None = None
    exit_code: int | None = None
    details: dict[str, Any] = field(default_factory=dict)


def load_document(path: Path, raw: bytes) -> Any:
    """Parse ``raw`` as JSON, else as YAML (VCR.py's default serializer). Raises
    :class:`ImportFormatError` when it is neither."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ImportFormatError(f"{path}: not a text file; expected {_expected()}") from None
    from .vcr import load_yaml

    return load_yaml(path, text)


def _expected() -> str:
    return "; or ".join(FORMATS.values())


def detect_format(doc: Any) -> str | None:
    """The name of the format (a key of :data:`FORMATS`) that ``doc`` (parsed JSON/YAML) has, or
    None. Decided by shape, not by file name."""
    from . import trajectories, vcr

    if vcr.looks_like(doc):
        return "vcr"
    return trajectories.detect(doc)


def import_file(
    path: str | Path,
    *,
    store: str | Path | None = None,
    name: str | None = None,
    format: str | None = None,
) -> Path:
    """Import ``path`` as a new session in ``store`` (default ``$FORKPOINT_STORE`` or
    ``.forkpoint/``); returns the session directory.

    The format is detected from the content; ``format`` (one of :data:`FORMATS`) makes a file of
    any other format an error. Raises :class:`ImportFormatError` naming the file and what was
    expected when it is none of them.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ImportFormatError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    if format is not None and format not in FORMATS:
        raise ImportFormatError(f"unknown format {format!r}; known: {', '.join(FORMATS)}")
    doc = load_document(path, raw)
    fmt = detect_format(doc)
    if fmt is None:
        raise ImportFormatError(
            f"{path}: not a format forkpoint can import (detected from the content, not the name); "
            f"expected {_expected()}"
        )
    if format is not None and fmt != format:
        raise ImportFormatError(f"{path}: is {FORMATS[fmt]}, not {FORMATS[format]}")
    converters: dict[str, Callable[[Path, Any], Imported]] = _converters()
    try:
        imported = converters[fmt](path, doc)
    except ImportFormatError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ImportFormatError(
            f"{path}: looks like {FORMATS[fmt]}, but could not be read as one ({type(exc).__name__}: {exc})"
        ) from None
    return write_session(
        imported,
        path=path,
        raw=raw,
        store=Path(store) if store else default_store(),
        name=name,
    )


def _converters() -> dict[str, Callable[[Path, Any], Imported]]:
    from . import trajectories, vcr

    return {
        "vcr": vcr.convert,
        "swe-agent": trajectories.convert_swe_agent,
        "mini-swe-agent": trajectories.convert_mini_swe_agent,
        "openhands": trajectories.convert_openhands,
    }


def write_session(
    imported: Imported, *, path: Path, raw: bytes, store: Path, name: str | None = None
) -> Path:
    """Write ``imported`` as a new session of ``store``: header with ``imported_from``
    ``{format, path, sha256, missing, adjusted, …}``, a ``note`` saying what is missing, the events,
    ``end``."""
    header = make_header(
        argv=["forkpoint", "import", str(path)],
        name=name or f"{imported.format} import of {path.name}",
        tags={"imported_from": imported.format},
    )
    header["git"] = None  # the importing checkout says nothing about the run that was imported
    header["tools"] = []
    header["imported_from"] = {
        "format": imported.format,
        "path": str(path.resolve()),
        "sha256": hashlib.sha256(raw).hexdigest(),
        "missing": list(imported.missing),
        "adjusted": list(imported.adjusted),
        **imported.details,
    }
    writer = SessionWriter.create(store, header)
    root = header["span_id"]
    try:
        text = f"imported from {imported.format} file {path.name}"
        if imported.missing:
            text += "; not in that file, so not in this session: " + "; ".join(imported.missing)
        if imported.adjusted:
            text += "; inferred while importing: " + "; ".join(imported.adjusted)
        writer.append(
            {
                "type": "note",
                "span_id": new_span_id(),
                "parent_span_id": root,
                "text": text,
                "data": {
                    "imported_from": imported.format,
                    "missing": list(imported.missing),
                    "adjusted": list(imported.adjusted),
                },
            }
        )
        for event in imported.events:
            event.setdefault("span_id", new_span_id())
            event.setdefault("parent_span_id", root)
            if event["type"] == "tool_call":
                event["args"] = scrub_json(event.get("args") or {})
                if "result" in event:
                    event["result"] = scrub_json(event["result"])
                event["key"] = tool_key(event["tool"], event["args"])
            writer.append(event)
        writer.append(
            {
                "type": "end",
                "exit_code": imported.exit_code,
                "duration_ms": None,
                "reason": imported.end_reason,
            }
        )
    finally:
        writer.close()
    return writer.path
