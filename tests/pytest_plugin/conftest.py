"""Fixtures of the pytest plugin's tests: inner pytest runs (pytester) in a clean environment,
against the tests' local model server, named to them by ``MODEL_URL``."""

from __future__ import annotations

import sys
from pathlib import Path

import openai  # noqa: F401 - imported once here, so the in-process inner runs do not re-import it
import pytest
from _pytest.pytester import SysModulesSnapshot

import forkpoint
from tests.modelserver import LocalServer


def _snapshot_keeping_libraries(self: pytest.Pytester) -> SysModulesSnapshot:
    """What an in-process inner run puts back when it ends: sys.modules as it was, plus every module
    it imported but its own test files and conftests (those under its folder, imported afresh by the
    next run). pytester dropped them all: a test after it in this worker got a second httpcore2 (or
    cryptography, or forkpoint module) whose classes were not those the first copies had in hand."""
    root = str(self.path)

    def keep(name: str) -> bool:
        file = getattr(sys.modules.get(name), "__file__", None)
        return not (isinstance(file, str) and file.startswith(root))

    return SysModulesSnapshot(preserve=keep)


@pytest.fixture(autouse=True)
def _inner_runs_keep_libraries(monkeypatch: pytest.MonkeyPatch) -> None:
    # (pytester's own hook for this, a private method: its absence fails the tests, never silently)
    monkeypatch.setattr(pytest.Pytester, "_Pytester__take_sys_modules_snapshot", _snapshot_keeping_libraries)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The inner runs must not see the outer CI variable, and share one tool log."""
    for var in ("CI", "PROMPT", "CALLS", "PYTEST_ADDOPTS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("TOOL_LOG", str(tmp_path / "tool.log"))


@pytest.fixture
def server(server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> LocalServer:
    """The tests' local model server (tests/modelserver.py), named to the inner runs by MODEL_URL."""
    monkeypatch.setenv("MODEL_URL", server.openai_base_url)
    return server


@pytest.fixture(scope="module", autouse=True)
def _capture_layer_loaded(tmp_path_factory: pytest.TempPathFactory) -> None:
    """An in-process inner run drops the modules it imported when it ends. forkpoint imports its
    capture layer on first use: a fresh copy of it, in the next inner run, patched the already
    patched httpx classes again, and every call was recorded once more per earlier run (this module
    run alone failed; after other tests had loaded the layer, it passed). Load it once, out here."""
    with forkpoint.record(store=tmp_path_factory.mktemp("warm-up")):
        pass
