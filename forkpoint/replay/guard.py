"""The network guard of a replay in Python: internet sockets refuse to connect or send a datagram,
and host names refuse to resolve, while a replay is active; each attempt is counted in its report.
It runs in every replaying process, inside the kernel's network namespace when the replay has one
(:mod:`forkpoint.netns`) and alone where the system refuses one. Inside the namespace, loopback
(and ``localhost``) is let through: only the replay's own processes listen there, so a program
reaches its own local servers as it did when recorded; alone, the guard refuses loopback too."""

from __future__ import annotations

import socket
import threading
from typing import Any

from .. import runtime, sockets
from ..errors import NetworkBlocked
from .replayer import Replayer

_guard_lock = threading.Lock()
_guard_installed = False


def install_network_guard() -> None:
    """Make internet sockets refuse to connect or to send a datagram to an address (UDP ``sendto``,
    ``sendmsg``), and host names refuse to resolve, while a replay is active: only the replay's
    ``allow_hosts`` (addresses or names) may be reached. Idempotent."""
    global _guard_installed
    with _guard_lock:
        if _guard_installed:
            return

        def blocked(rt: Replayer, where: str, what: str) -> NetworkBlocked:
            with rt._lock:
                rt.network_blocked.append(where)
            return NetworkBlocked(
                f"forkpoint replay blocked {what} {where}: during a replay every model and tool call is "
                "served from the session, so nothing may reach the network. A call made outside the "
                "recorded clients or tools (wrap it with @forkpoint.tool) cannot be replayed."
            )

        def guarding() -> Replayer | None:
            # A tool the replay runs live (live_tools) runs as it would without forkpoint.
            rt = runtime.active()
            if runtime.running_live_tool.get():
                return None
            return rt if isinstance(rt, Replayer) and not rt.network_allowed() else None

        def refuse(sock: socket.socket, address: Any, what: str, suffix: str) -> None:
            rt = guarding()
            if rt is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
                return
            host = str(address[0]) if isinstance(address, tuple) else str(address)
            if host in rt.allow_hosts or (_loopback(host) and _confined()):
                return  # (in the replay's namespace, loopback reaches the program's own servers only)
            where = f"{host}:{address[1]}" if isinstance(address, tuple) and len(address) > 1 else host
            raise blocked(rt, where + suffix, what)

        def check(sock: socket.socket, address: Any) -> None:
            refuse(sock, address, "a network connection to", "")

        def send(sock: socket.socket, address: Any) -> None:
            refuse(sock, address, "a datagram to", " (udp)")

        def lookup(host: Any, port: Any) -> None:
            # Name lookups go out to a resolver too: refuse them for any name but an allowed one.
            rt = guarding()
            name = host.decode() if isinstance(host, bytes) else str(host)
            if rt is None or host is None or name in rt.allow_hosts or _is_literal(name):
                return
            if not (name == "localhost" or name.endswith(".localhost")) or not _confined():
                raise blocked(rt, f"{name}:{port}", "a name lookup of")

        sockets.watch(connect=check, send=send, lookup=lookup)
        _guard_installed = True


def _confined() -> bool:
    from .. import netns  # (here: ctypes and all, only for a program that connects somewhere)

    return netns.confined()


def _loopback(host: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0]).is_loopback
    except ValueError:
        return False


def _is_literal(host: str) -> bool:
    """An IP address (no lookup needed; connecting to it is checked on its own)."""
    import ipaddress

    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True
