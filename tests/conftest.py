"""Shared fixtures: the tests' local model server (tests/modelserver.py documents what it answers and
its options), a store directory, an S3 server on loopback (moto) for remote stores, a guard that no
test leaves a forkpoint runtime active, a small trust store for the HTTP clients, and a signing key
of the test run's own."""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import certifi
import pytest

from forkpoint import runtime
from tests.modelserver import LocalServer


@pytest.fixture(scope="session", autouse=True)
def _small_trust_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every httpx and httpx2 client (each SDK client, each ``httpx2.post``) builds an SSL context and
    loads the whole CA bundle into it, ~15 ms, though the tests only speak plain HTTP to loopback: over
    a run that was several seconds. ``SSL_CERT_FILE``, which both honour (and so do the tests'
    subprocesses), names a bundle of one certificate instead, for the whole session."""
    first = re.search(
        r"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----\n", Path(certifi.where()).read_text(), re.S
    )
    assert first, certifi.where()
    bundle = tmp_path_factory.mktemp("trust") / "one-ca.pem"
    bundle.write_text(first.group(0))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SSL_CERT_FILE", str(bundle))
        yield


@pytest.fixture(scope="session", autouse=True)
def _signing_keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The sessions tests record are signed (forkpoint.signing) with a key made for this test run,
    never the user's own ``~/.config/forkpoint`` one; subprocesses inherit the variables (and a test
    that drops the ``FORKPOINT_`` ones still finds the same folder through ``XDG_CONFIG_HOME``)."""
    config = tmp_path_factory.mktemp("config")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CONFIG_HOME", str(config))
        mp.setenv("FORKPOINT_KEYS_DIR", str(config / "forkpoint"))
        yield


@pytest.fixture
def server() -> Iterator[LocalServer]:
    """A fresh local model server for one test, default options; stopped at the end (tests may stop
    it earlier, register routes on it, or set ``server.chat_script``)."""
    srv = LocalServer()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="session")
def make_server() -> Iterator[Callable[..., LocalServer]]:
    """A factory of local model servers (``make_server(chat_script=...)``), for module-scoped fixtures
    and tests that need more than one; each is stopped at the latest at the end of the session."""
    started: list[LocalServer] = []

    def make(**options: Any) -> LocalServer:
        srv = LocalServer(**options)
        started.append(srv)
        return srv

    yield make
    for srv in started:
        srv.stop()


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """A moto S3 server on 127.0.0.1, and an environment in which botocore can only reach it."""
    pytest.importorskip("s3fs")
    server_mod = pytest.importorskip("moto.server")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with pytest.MonkeyPatch.context() as mp:
        for k in list(os.environ):
            if k.startswith("AWS_"):
                mp.delenv(k)
        server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        mp.setenv("AWS_ACCESS_KEY_ID", "forkpoint-test")
        mp.setenv("AWS_SECRET_ACCESS_KEY", "forkpoint-test")
        mp.setenv("AWS_DEFAULT_REGION", "us-east-1")
        mp.setenv("AWS_ENDPOINT_URL", endpoint)
        mp.setenv("AWS_ENDPOINT_URL_S3", endpoint)
        mp.setenv("AWS_CONFIG_FILE", os.devnull)
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        mp.setenv("FORKPOINT_STORE_OPTIONS", json.dumps({"client_kwargs": {"endpoint_url": endpoint}}))
        try:
            yield endpoint
        finally:
            server.stop()


@pytest.fixture
def s3_url(s3_endpoint: str) -> str:
    """A fresh bucket on the moto server; the store is a prefix in it."""
    import s3fs

    bucket = f"fp-{secrets.token_hex(4)}"
    s3fs.S3FileSystem(client_kwargs={"endpoint_url": s3_endpoint}, use_listings_cache=False).mkdir(bucket)
    return f"s3://{bucket}/team/sessions"


@pytest.fixture
def store(tmp_path: Any) -> Any:
    """A session store directory (not created yet) under the test's tmp_path."""
    return tmp_path / "store"


@pytest.fixture(autouse=True)
def _no_runtime_left_active() -> Iterator[None]:
    """Fail a test that leaves a recorder or replayer active, and clean up so others still run."""
    assert runtime.active() is None, "a previous test left a forkpoint runtime active"
    yield
    rt = runtime.active()
    if rt is not None:
        runtime.deactivate(rt)
        pytest.fail(f"test left a forkpoint {rt.mode} active")
