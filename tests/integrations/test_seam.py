"""The framework-integration seam: a third-party integration, registered through the
``forkpoint.integrations`` entry-point group, records and replays a framework's tool calls like a
built-in one, and uninstalling puts every original back."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import forkpoint
from forkpoint import integrations
from forkpoint.integrations import base
from tests.plugins import installed_plugin

FRAMEWORK = '''
CALLS = []

def run_tool(name, **kwargs):
    """The toy framework's tool runner: every tool call of an agent built on it goes through here."""
    CALLS.append((name, kwargs))
    return {"tool": name, "echo": kwargs, "n": len(CALLS)}
'''

INTEGRATION = """
import functools

from forkpoint.integrations import Integration, replace, run_tool_sync


def patch(module):
    original = module.run_tool

    @functools.wraps(original)
    def run_tool(name, **kwargs):
        return run_tool_sync(name, dict(kwargs), lambda: original(name, **kwargs))

    replace(module, "run_tool", run_tool)


INTEGRATION = Integration("toyframework", {"toyframework": patch})
"""


@pytest.fixture
def toy_plugin(tmp_path: Path) -> Iterator[None]:
    with installed_plugin(
        tmp_path / "site",
        "forkpoint-toy",
        {"toyframework": FRAMEWORK, "forkpoint_toy": INTEGRATION},
        "[forkpoint.integrations]\ntoy = forkpoint_toy\n",
    ):
        base._registry = None  # read the entry points again
        try:
            yield
        finally:
            integrations.uninstall()
            base._registry = None


def test_an_entry_point_integration_records_and_replays(toy_plugin: None, tmp_path: Path) -> None:
    assert "toyframework" in [i.name for i in integrations.registry(integrations.BUILTIN)]
    with forkpoint.record(store=tmp_path / "store") as rec:
        import toyframework  # imported while recording: patched by the import hook on import

        first = toyframework.run_tool("search", query="forkpoint")
    assert first == {"tool": "search", "echo": {"query": "forkpoint"}, "n": 1}
    assert "toyframework" in integrations.installed()
    calls = forkpoint.Session.load(rec.session_path).by_type("tool_call")
    assert [(c["tool"], c["args"], c["result"]) for c in calls] == [("search", {"query": "forkpoint"}, first)]

    with forkpoint.replay(rec.session_path) as rp:
        again = toyframework.run_tool("search", query="forkpoint")
    assert again == first and toyframework.CALLS == [
        ("search", {"query": "forkpoint"})
    ]  # the body did not run
    assert rp.report()["reproduced"]


def test_uninstall_puts_the_originals_back(toy_plugin: None, tmp_path: Path) -> None:
    import toyframework

    original = toyframework.run_tool
    integrations.install()
    assert toyframework.run_tool is not original and toyframework.run_tool.__forkpoint_integration__
    integrations.uninstall()
    assert toyframework.run_tool is original
    assert integrations.installed() == []
    integrations.install()  # installing again patches again
    assert toyframework.run_tool is not original


def test_the_builtin_table_names_what_each_integration_patches() -> None:
    """forkpoint imports an integration only once a module it patches has run, from the static
    table BUILTIN: the table must say exactly what each module's INTEGRATION patches, and its name."""
    import importlib

    for module, targets in integrations.BUILTIN.items():
        declared = importlib.import_module(module).INTEGRATION
        assert tuple(declared.targets) == targets, module
        assert declared.name == base.builtin_name(module), module


def test_the_adapter_table_names_the_libraries_each_adapter_patches() -> None:
    import importlib

    from forkpoint import capture

    for adapter, libraries in capture.HTTP_ADAPTERS.items():
        assert importlib.import_module(adapter).LIBRARIES == libraries, adapter


def test_a_broken_plugin_is_reported_and_the_others_still_load(tmp_path: Path) -> None:
    with installed_plugin(
        tmp_path / "site", "forkpoint-broken", {}, "[forkpoint.integrations]\nbad = no_such_module\n"
    ):
        base._registry = None
        try:
            with pytest.warns(RuntimeWarning, match="the integration 'bad' .*cannot be loaded"):
                names = [i.name for i in integrations.registry(integrations.BUILTIN)]
        finally:
            base._registry = None
    assert "pydantic-ai" in names and "langchain" in names


STAINLESS_CLIENT = """
class BaseClient:
    def _calculate_retry_timeout(self, *args):
        return 7.0


class AsyncAPIClient(BaseClient):
    async def request(self, *args, **kwargs):
        return "sent"


def get_platform():
    return "linux"
"""


def test_any_stainless_sdk_is_patched_whether_imported_before_or_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``*._base_client`` (an SDK built by Stainless, as openai and anthropic are): one imported
    before forkpoint starts is patched as it starts, one imported after as it is imported; a module
    named only alike (``._base_clients``) or without Stainless's classes is left alone."""
    files = {
        "acme_before/_base_client.py": STAINLESS_CLIENT,
        "acme_after/_base_client.py": STAINLESS_CLIENT,
        "acme_near/_base_clients.py": STAINLESS_CLIENT,
        "acme_plain/_base_client.py": "class BaseClient:\n    def _calculate_retry_timeout(self):\n        return 1.0\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).parent.joinpath("__init__.py").write_text("")
        (tmp_path / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    import acme_before._base_client as before
    import acme_near._base_clients as near

    try:
        integrations.install()
        import acme_after._base_client as after
        import acme_plain._base_client as plain

        for module in (before, after):
            assert getattr(module.BaseClient._calculate_retry_timeout, "__forkpoint_integration__", None)
            assert getattr(module.AsyncAPIClient.request, "__forkpoint_integration__", None)
        for module in (near, plain):
            assert not hasattr(module.BaseClient._calculate_retry_timeout, "__forkpoint_integration__")
    finally:
        integrations.uninstall()
        for name in list(sys.modules):
            if name.startswith("acme_"):
                del sys.modules[name]
    assert not hasattr(before.BaseClient._calculate_retry_timeout, "__forkpoint_integration__")
