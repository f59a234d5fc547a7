"""The HTTP-library seam: each adapter patches only what it declares, checks the installed library's
signatures before patching, and can be taken out again."""

from __future__ import annotations

import importlib
import inspect
import warnings
from types import SimpleNamespace

import pytest

from forkpoint import capture
from forkpoint.capture import httpx as httpx_adapter


@pytest.mark.parametrize("library", httpx_adapter.LIBRARIES)
def test_patched_signatures_match_the_installed_library(library: str) -> None:
    """Every private name the adapter relies on exists in the installed version with the parameters
    the adapter calls it with; a new release that renames or reshapes one fails here, not in a user's
    recording."""
    mod = importlib.import_module(library)
    assert httpx_adapter.signature_problem(mod) is None
    for cls_name, method, params in httpx_adapter.PATCHED:
        fn = getattr(getattr(mod, cls_name), method)
        fn = getattr(fn, "__wrapped__", fn)
        assert tuple(inspect.signature(fn).parameters) == params


def test_a_library_whose_internals_moved_is_left_alone_and_said() -> None:
    """A version whose patched method is missing or takes other parameters is reported and not
    patched (recording must never change what the live run does)."""

    class Client:
        def _transport_for_url(self, url, proxy):  # type: ignore[no-untyped-def]  # an extra parameter
            return None

    class AsyncClient:
        pass  # no _transport_for_url at all

    fake = SimpleNamespace(Client=Client, AsyncClient=AsyncClient)
    problem = httpx_adapter.signature_problem(fake)  # type: ignore[arg-type]
    assert problem is not None and "Client._transport_for_url takes ('self', 'url', 'proxy')" in problem
    Client._transport_for_url = lambda self, url: None  # type: ignore[method-assign,assignment]
    assert "AsyncClient._transport_for_url is missing" in str(httpx_adapter.signature_problem(fake))  # type: ignore[arg-type]


def test_install_and_uninstall_restore_the_originals() -> None:
    import httpx
    import httpx2

    capture.install()
    assert capture.installed() == ["httpx", "httpx2"]
    for mod in (httpx, httpx2):
        for cls in (mod.Client, mod.AsyncClient):
            assert hasattr(cls._transport_for_url, "__wrapped__")
    originals = {
        (mod.__name__, cls.__name__): cls._transport_for_url.__wrapped__
        for mod in (httpx, httpx2)
        for cls in (mod.Client, mod.AsyncClient)
    }
    capture.uninstall()
    try:
        assert capture.installed() == []
        for mod in (httpx, httpx2):
            for cls in (mod.Client, mod.AsyncClient):
                assert cls._transport_for_url is originals[(mod.__name__, cls.__name__)]
                assert not hasattr(cls._transport_for_url, "__wrapped__")
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # reinstalling says nothing: the signatures still match
            capture.install()
    assert capture.installed() == ["httpx", "httpx2"]
