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


ALL = ["aiohttp", "http.client", "httpx", "httpx2", "urllib3"]


def _patched() -> dict[tuple[str, str], object]:
    """Every method the adapters patch, as found on its class now."""
    import http.client

    import aiohttp
    import httpx
    import httpx2
    import urllib3.connectionpool

    found: dict[tuple[str, str], object] = {}
    for mod in (httpx, httpx2):
        for cls in (mod.Client, mod.AsyncClient):
            found[(f"{mod.__name__}.{cls.__name__}", "_transport_for_url")] = cls._transport_for_url
    found[("urllib3", "_make_request")] = urllib3.connectionpool.HTTPConnectionPool._make_request
    found[("http.client", "request")] = http.client.HTTPConnection.request
    found[("http.client", "getresponse")] = http.client.HTTPConnection.getresponse
    found[("aiohttp", "_request")] = aiohttp.ClientSession._request
    return found


def test_install_and_uninstall_restore_the_originals() -> None:
    _patched()  # the libraries imported: install patches them now, not once they are imported
    capture.install()
    assert capture.installed() == ALL
    patched = _patched()
    assert all(hasattr(fn, "__wrapped__") for fn in patched.values())
    originals = {k: fn.__wrapped__ for k, fn in patched.items()}  # type: ignore[attr-defined]
    capture.uninstall()
    try:
        assert capture.installed() == []
        for k, fn in _patched().items():
            assert fn is originals[k], k
            assert not hasattr(fn, "__wrapped__")
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # reinstalling says nothing: the signatures still match
            capture.install()
    assert capture.installed() == ALL


def test_the_other_adapters_match_the_installed_libraries() -> None:
    """urllib3's ``_make_request``, http.client's ``request``/``getresponse`` and aiohttp's
    ``_request`` (with ``middlewares``) and response constructor are what the adapters expect."""
    import http.client

    import aiohttp
    import urllib3

    from forkpoint.capture import aiohttp as aiohttp_adapter
    from forkpoint.capture import httpclient, seam
    from forkpoint.capture import urllib3 as urllib3_adapter

    assert urllib3_adapter.signature_problem(urllib3) is None
    assert seam.signature_problem(http.client, httpclient.PATCHED) is None
    assert aiohttp_adapter.signature_problem(aiohttp) is None
    reshaped = SimpleNamespace(
        connectionpool=SimpleNamespace(
            HTTPConnectionPool=type("P", (), {"_make_request": lambda self, conn: None})
        )
    )
    problem = urllib3_adapter.signature_problem(reshaped)  # type: ignore[arg-type]
    assert (
        problem is not None
        and "connectionpool.HTTPConnectionPool._make_request takes ('self', 'conn')" in problem
    )
