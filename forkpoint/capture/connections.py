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
#: (address, port, name) connected to while recording: ``name`` is the host name the connecting
#: thread had just looked the address up for (a blocking client resolves and connects in one
#: thread), or None (asyncio resolves in another thread; a literal address is not looked up).
_seen: set[tuple[str, int, str | None]] = set()
#: address → every host name it was looked up for, first seen first (two names can resolve to one
#: address: ``localhost`` and ``127.0.0.1``, virtual hosts behind one load balancer).
_names: dict[str, dict[str, None]] = {}
#: This thread's latest lookups: address → the name it was looked up for.
_lookups = threading.local()
#: (host or address, port) of every recorded exchange.
_recorded: set[tuple[str, int]] = set()
#: (address, port) of the connections made past :mod:`socket` (:func:`opened`): a replay's guard in
#: the program does not see them either.
_past_guard: set[tuple[str, int]] = set()

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
                host = str(address[0])
                name = (getattr(_lookups, "names", None) or {}).get(host)
                with _lock:
                    _seen.add((host, int(address[1]), name))

        def names(host: Any, found: list[Any]) -> None:
            if host is not None and _recording():
                name = (host.decode() if isinstance(host, bytes) else str(host)).lower()
                mine = getattr(_lookups, "names", None)
                if mine is None:
                    mine = _lookups.names = {}
                with _lock:
                    for *_, sockaddr in found:
                        _names.setdefault(str(sockaddr[0]), {})[name] = None
                        mine[str(sockaddr[0])] = name

        sockets.watch(connect=note, resolved=names)
        _installed = True


def reset() -> None:
    """Forget what was seen (a new recording starts)."""
    with _lock:
        _seen.clear()
        _recorded.clear()
        _past_guard.clear()


def opened(host: str, port: int) -> None:
    """A connection made where :mod:`socket` does not see it (grpcio's C core) to ``host:port``,
    while a recorder is active: named at the end unless a recorded exchange accounts for it."""
    if _recording():
        with _lock:
            _seen.add((host.lower().strip("[]"), port, None))
            _past_guard.add((host.lower().strip("[]"), port))


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


def unrecorded(past_guard: bool = False) -> list[str]:
    """``host:port`` of each connection seen since :func:`reset` that no recorded exchange accounts
    for, sorted (the host name it was looked up for where known, else the address); with
    ``past_guard``, only those made past :mod:`socket` (:func:`opened`).

    The names a connection may have been made for: the one its thread had just looked its address
    up for, else every name that address was looked up for. It is accounted for when an exchange
    was recorded with its address, or one of those names, at its port."""
    with _lock:
        out = set()
        for address, port, name in _seen:
            names = [name] if name is not None else list(_names.get(address, ()))
            if (address, port) in _recorded or any((n, port) in _recorded for n in names):
                continue
            if past_guard and (address, port) not in _past_guard:
                continue
            out.add(f"{names[0] if names else address}:{port}")
    return sorted(out)
