"""Importers: files other tools wrote, turned into sessions.

Importers (``forkpoint import PATH``, :func:`import_file`) turn a file another tool wrote into a
session:

* **VCR.py cassettes** (:mod:`.vcr`) — YAML or JSON, stock VCR.py and the
  ``parsed_body`` dialect — become ``model_call`` events in forkpoint's stored shapes, so a replay
  with the real SDK answers from them.
* **Agent trajectories** (:mod:`.swe_agent`, :mod:`.mini_swe_agent`, :mod:`.openhands`, sharing :mod:`.trajectory`) — SWE-agent ``.traj``,
  mini-swe-agent ``.traj.json``, OpenHands event lists — become model calls and tool calls that
  ``show``, ``diff`` and ``verify`` understand.

The format is recognised from the content, not the file name. Whatever the source does not hold is
left out of the session and said so: in the header (``imported_from.missing``) and in a ``note``
event at seq 1. See ``docs/import.md``.

The seam is :class:`~.base.Importer` (one per module, each registered by one line of
:data:`BUILTIN`); other packages add theirs through the ``forkpoint.importers`` entry-point group.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from .. import plugins
from ..errors import ImportFormatError, SessionError
from ..log.blobs import open_regular
from ..store import default_store
from . import base
from .base import Imported, Importer, write_session

__all__ = [
    "BUILTIN",
    "ENTRY_POINT_GROUP",
    "ImportFormatError",
    "Imported",
    "Importer",
    "detect_format",
    "formats",
    "import_described",
    "import_file",
    "load_document",
    "write_session",
]

#: The importers forkpoint ships, by module (each has an ``IMPORTER``), in the order they are tried.
BUILTIN = (
    "forkpoint.importers.vcr",
    "forkpoint.importers.swe_agent",
    "forkpoint.importers.mini_swe_agent",
    "forkpoint.importers.openhands",
)
#: The entry-point group third-party importers register under (a module with ``IMPORTER``, or an
#: :class:`Importer`).
ENTRY_POINT_GROUP = "forkpoint.importers"

_lock = threading.Lock()
_registry: list[Importer] | None = None


def importers() -> list[Importer]:
    """Every importer: the built-in ones, then those installed packages register. Read once."""
    global _registry
    with _lock:
        if _registry is None:
            found = plugins.load(BUILTIN, "IMPORTER", ENTRY_POINT_GROUP, Importer, "importer")
            _registry = found
        return _registry


def formats() -> dict[str, str]:
    """Format name → what such a file looks like (for messages), of every importer."""
    return {i.name: i.description for i in importers()}


def _expected() -> str:
    return "; or ".join(formats().values())


def load_document(path: Path, raw: bytes) -> Any:
    """Parse ``raw`` as JSON, else as YAML (VCR.py's default serializer). Raises
    :class:`~forkpoint.errors.ImportFormatError` when it is neither, naming what would be imported."""
    return base.load_document(path, raw, _expected())


def detect_format(doc: Any) -> str | None:
    """The name of the format (a key of :func:`formats`) that ``doc`` (parsed JSON/YAML) has, or
    None. Decided by shape, not by file name: the first importer that recognizes it."""
    return next((i.name for i in importers() if i.detect(doc)), None)


def import_file(
    path: str | Path,
    *,
    store: str | Path | None = None,
    name: str | None = None,
    format: str | None = None,
) -> Path:
    """Import ``path`` as a new session in ``store`` (default ``$FORKPOINT_STORE`` or
    ``.forkpoint/``); returns the session directory.

    The format is detected from the content; ``format`` (one of :func:`formats`) makes a file of
    any other format an error. Raises :class:`~forkpoint.errors.ImportFormatError` naming the file
    and what was expected when it is none of them.
    """
    return import_described(path, store=store, name=name, format=format)[0]


def import_described(
    path: str | Path,
    *,
    store: str | Path | None = None,
    name: str | None = None,
    format: str | None = None,
) -> tuple[Path, Imported]:
    """:func:`import_file`, and what the import made of the file: its ``format``, what it lacks
    (``missing``) and what was inferred (``adjusted``), as the header's ``imported_from`` says them.
    For whoever reports the import: in a store that encrypts, that header is sealed."""
    path = Path(path)
    try:
        with open_regular(path) as f:  # a FIFO or a device is refused, never read (or waited on)
            size = os.fstat(f.fileno()).st_size
            if size > base.MAX_UNCOMPRESSED:
                raise ImportFormatError(
                    f"{path}: {size:,} bytes; forkpoint imports files of at most {base.MAX_UNCOMPRESSED:,}"
                )
            raw = f.read()
    except OSError as exc:
        raise ImportFormatError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except SessionError as exc:
        raise ImportFormatError(str(exc)) from None
    known = formats()
    if format is not None and format not in known:
        raise ImportFormatError(f"unknown format {format!r}; known: {', '.join(known)}")
    doc = load_document(path, raw)
    fmt = detect_format(doc)
    if fmt is None:
        raise ImportFormatError(
            f"{path}: not a format forkpoint can import (detected from the content, not the name); "
            f"expected {_expected()}"
        )
    if format is not None and fmt != format:
        raise ImportFormatError(f"{path}: is {known[fmt]}, not {known[format]}")
    base.check_items(path, doc)
    importer = next(i for i in importers() if i.name == fmt)
    try:
        imported = importer.convert(path, doc)
    except ImportFormatError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError, OverflowError) as exc:
        raise ImportFormatError(
            f"{path}: looks like {known[fmt]}, but could not be read as one ({type(exc).__name__}: {exc})"
        ) from None
    written = write_session(
        imported, path=path, raw=raw, store=Path(store) if store else default_store(), name=name
    )
    return written, imported
