"""Hooks on the standard library's socket connects, datagram sends and name lookups, for the layers
that watch the network: the replay's guard (which refuses) and the recorder's tally of unrecorded
connections.

Every internet client in Python ends in ``socket.socket.connect`` / ``connect_ex`` (asyncio's
included) and resolves names through ``socket.getaddrinfo``; a datagram sent without a connect goes
through ``sendto`` / ``sendmsg`` with its address. :func:`watch` puts a wrapper around them that
calls the hooks it is given, then the method it wrapped: wrappers chain, each installed once by its
caller.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

#: Called with the socket and the address before a connect; raises to refuse it.
ConnectHook = Callable[[socket.socket, Any], None]
#: Called with the socket and the destination before a datagram is sent to an address (``sendto``,
#: ``sendmsg`` with an address); raises to refuse it.
SendHook = Callable[[socket.socket, Any], None]
#: Called with (host, port) before a name lookup; raises to refuse it.
LookupHook = Callable[[Any, Any], None]
#: Called with (host, the addrinfo list) after a name lookup succeeded.
ResolvedHook = Callable[[Any, list[Any]], None]


def watch(
    *,
    connect: ConnectHook | None = None,
    send: SendHook | None = None,
    lookup: LookupHook | None = None,
    resolved: ResolvedHook | None = None,
) -> None:
    """Wrap ``socket.socket.connect``/``connect_ex`` (when ``connect`` is given),
    ``socket.socket.sendto``/``sendmsg`` (when ``send`` is: called only for a send that names its
    destination) and ``socket.getaddrinfo`` (when ``lookup`` or ``resolved`` is) so that the hooks
    run around them."""
    if connect is not None:
        orig_connect = socket.socket.connect
        orig_connect_ex = socket.socket.connect_ex

        def connect_(self: socket.socket, address: Any) -> None:
            connect(self, address)
            return orig_connect(self, address)

        def connect_ex(self: socket.socket, address: Any) -> int:
            connect(self, address)
            return orig_connect_ex(self, address)

        # (typeshed's socket takes a narrower address type than the wrappers pass through)
        socket.socket.connect = connect_  # type: ignore[method-assign,assignment]
        socket.socket.connect_ex = connect_ex  # type: ignore[method-assign,assignment]
    if send is not None:
        orig_sendto = socket.socket.sendto
        orig_sendmsg = socket.socket.sendmsg

        def sendto(self: socket.socket, data: Any, *args: Any) -> int:
            # sendto(data, address) or sendto(data, flags, address)
            if args:
                send(self, args[-1])
            return orig_sendto(self, data, *args)

        def sendmsg(self: socket.socket, buffers: Any, *args: Any, **kwargs: Any) -> int:
            # sendmsg(buffers[, ancdata[, flags[, address]]])
            address = args[2] if len(args) > 2 else kwargs.get("address")
            if address is not None:
                send(self, address)
            return orig_sendmsg(self, buffers, *args, **kwargs)

        socket.socket.sendto = sendto  # type: ignore[method-assign,assignment]
        socket.socket.sendmsg = sendmsg  # type: ignore[method-assign,assignment]
    if lookup is not None or resolved is not None:
        orig_getaddrinfo = socket.getaddrinfo

        def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            if lookup is not None:
                lookup(host, port)
            found = orig_getaddrinfo(host, port, *args, **kwargs)
            if resolved is not None:
                resolved(host, found)
            return found

        socket.getaddrinfo = getaddrinfo
