"""The importer seam: a third-party importer, registered through the ``forkpoint.importers``
entry-point group, is detected from the content and writes a session like a built-in one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

import forkpoint
from forkpoint import importers
from forkpoint.errors import ImportFormatError
from tests.plugins import installed_plugin

IMPORTER = """
from forkpoint.importers import Imported, Importer


def detect(doc):
    return isinstance(doc, dict) and doc.get("format") == "toylog"


def convert(path, doc):
    events = [
        {"type": "tool_call", "tool": step["tool"], "args": step["args"], "result": step["result"]}
        for step in doc["steps"]
    ]
    return Imported("toylog", events, missing=["model calls (a toylog keeps tool steps only)"], exit_code=0)


IMPORTER = Importer("toylog", "a toylog file (JSON with format: toylog and steps)", detect, convert)
"""


@pytest.fixture
def toylog(tmp_path: Path) -> Iterator[None]:
    with installed_plugin(
        tmp_path / "site",
        "forkpoint-toylog",
        {"forkpoint_toylog": IMPORTER},
        "[forkpoint.importers]\ntoylog = forkpoint_toylog\n",
    ):
        importers._registry = None
        try:
            yield
        finally:
            importers._registry = None


def test_an_entry_point_importer_is_detected_and_writes_a_session(toylog: None, tmp_path: Path) -> None:
    doc = {"format": "toylog", "steps": [{"tool": "grep", "args": {"pattern": "bug"}, "result": "calc.py:3"}]}
    path = tmp_path / "run.json"
    path.write_bytes(orjson.dumps(doc))
    assert importers.formats()["toylog"].startswith("a toylog file")
    session = forkpoint.Session.load(importers.import_file(path, store=tmp_path / "store"))
    assert session.header["imported_from"]["format"] == "toylog"
    assert session.header["imported_from"]["missing"] == ["model calls (a toylog keeps tool steps only)"]
    (call,) = session.by_type("tool_call")
    assert (call["tool"], call["args"], call["result"]) == ("grep", {"pattern": "bug"}, "calc.py:3")
    assert forkpoint.verify(session.path).ok


def test_without_the_plugin_the_format_is_unknown(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_bytes(orjson.dumps({"format": "toylog", "steps": []}))
    importers._registry = None
    with pytest.raises(ImportFormatError, match="not a format forkpoint can import"):
        importers.import_file(path, store=tmp_path / "store")
