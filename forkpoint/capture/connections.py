"""Connections a recording saw but did not record: a library forkpoint does not capture never
makes a session silently empty.

While a recorder is active, every internet socket ``connect`` (and the host name each address was
looked up for) is noted, and every recorded exchange notes its URL's ``host:port``. At the end of
the recording :func:`unrecorded` names each ``host:port`` that was connected to and never recorded
(an HTTP client forkpoint has no adapter for, a gRPC channel, a raw socket): the recorder writes
them into the session and says them, because their calls will not be served on replay. The proxy
the environment sends a recorded exchange through is accounted for by it too.
"""

from __future__ import annotations

import os
import socket
import threading
from typing import Any
from urllib.parse import urlsplit

from .. import runtime, sockets

_lock = threading.Lock()
_installed = False
#: (address, port) connected to while recording.
_seen: set[tuple[str, int]] = set()
#: address → the host name it was looked up for.
_names: dict[str, str] = {}
#: (host or address, port) of every recorded exchange.
_recorded: set[tuple[str, int]] = set()

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}
#: The environment variables that send the HTTP clients' requests through a proxy.
_PROXY_VARS = ("https_proxy", "HTTPS_PROXY", "http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")


def _recording() -> bool:
    rt = runtime.active()
    return rt is not None and rt.mode == "record"


def install() -> None:
    """Note connects and name lookups while a recorder is active (idempotent; chained before any
    other wrapper of :mod:`socket`, such as a replay's network guard)."""
    global _installed
    with _lock:
        if _installed:
            return

        def note(sock: socket.socket, address: Any) -> None:
            if (
                sock.family in (socket.AF_INET, socket.AF_INET6)
                and isinstance(address, tuple)
                and _recording()
            ):
                with _lock:
                    _seen.add((str(address[0]), int(address[1])))

        def names(host: Any, found: list[Any]) -> None:
            if host is not None and _recording():
                name = host.decode() if isinstance(host, bytes) else str(host)
                with _lock:
                    for *_, sockaddr in found:
                        _names.setdefault(str(sockaddr[0]), name.lower())

        sockets.watch(connect=note, resolved=names)
        _installed = True


def reset() -> None:
    """Forget what was seen (a new recording starts)."""
    with _lock:
        _seen.clear()
        _recorded.clear()


def recorded(url: str) -> None:
    """An exchange with ``url`` is recorded: connections to its ``host:port`` are accounted for."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port or _DEFAULT_PORTS.get(parts.scheme.lower())
    except ValueError:
        return
    if host and port:
        with _lock:
            _recorded.add((host.lower().strip("[]"), port))
        proxy = _proxy_for(parts.scheme.lower(), host)
        if proxy is not None:
            with _lock:
                _recorded.add(proxy)


def _proxy_for(scheme: str, host: str) -> tuple[str, int] | None:
    """``(host, port)`` of the proxy the environment sends a ``scheme`` request to ``host`` through
    (``HTTPS_PROXY``, ``HTTP_PROXY``, ``ALL_PROXY``, less ``NO_PROXY``: what httpx, requests and
    urllib3 read), which a recorded exchange then accounts for; None without one."""
    if not any(name in os.environ for name in _PROXY_VARS):  # (a few lookups: once per exchange)
        return None
    import urllib.request  # (here: only a process with a proxy set pays for importing it)

    proxies = urllib.request.getproxies_environment()
    url = proxies.get(scheme) or proxies.get("all")
    if not url or urllib.request.proxy_bypass_environment(host, proxies):  # type: ignore[attr-defined]
        return None
    try:
        parts = urlsplit(url if "://" in url else "//" + url)  # ("proxy:3128": no scheme, as http)
        name, port = parts.hostname, parts.port or _DEFAULT_PORTS.get(parts.scheme.lower() or "http")
    except ValueError:
        return None
    return (name.lower().strip("[]"), port) if name and port else None


def unrecorded() -> list[str]:
    """``host:port`` of each connection seen since :func:`reset` that no recorded exchange accounts
    for, sorted (the host name it was looked up for where known, else the address)."""
    with _lock:
        out = set()
        for address, port in _seen:
            name = _names.get(address, address)
            if (name, port) not in _recorded and (address, port) not in _recorded:
                out.add(f"{name}:{port}")
    return sorted(out)
