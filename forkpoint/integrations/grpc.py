"""gRPC (grpcio): the channels a recording opens are named among the connections it did not record.

grpcio connects from its C core, not through Python's :mod:`socket`, so
:mod:`forkpoint.capture.connections` never saw them, and a run's gRPC calls (an OTLP/gRPC exporter,
a vector database's client) went unrecorded and unsaid. Patched: ``grpc.insecure_channel``,
``grpc.secure_channel`` and their ``grpc.aio`` twins, which note the target's ``host:port`` (gRPC's
name syntax, grpc.github.io/grpc/core/md_doc_naming.html) when the channel is made.
"""

from __future__ import annotations

import functools
import sys
from types import ModuleType
from typing import Any

from ..capture import connections
from .base import Integration, replace

_CHANNELS = ("insecure_channel", "secure_channel")


def _port(text: str) -> bool:
    """Whether ``text`` is a port number (ASCII digits: ``str.isdigit`` takes ``²``, which ``int`` refuses)."""
    return text.isascii() and text.isdigit()


def targets(target: object) -> list[tuple[str, int]]:
    """The ``(host, port)`` pairs a gRPC target names: ``host[:port]``, ``dns:[//authority/]host[:port]``,
    ``ipv4:a:p,b:p``, ``ipv6:[a]:p``; none for ``unix:`` and other schemes. The port defaults to 443."""
    if not isinstance(target, str):
        return []
    scheme, sep, rest = target.partition(":")
    if sep and scheme in ("dns", "ipv4", "ipv6"):
        if scheme == "dns" and rest.startswith("//"):
            rest = rest[2:].partition("/")[2]  # (the DNS server to ask, not the target)
        names = rest.split(",") if scheme != "dns" else [rest]
    elif sep and not _port(rest) and not target.startswith("["):
        return []  # (unix:, unix-abstract:, vsock:, a resolver of the program's own)
    else:
        names = [target]
    out = []
    for name in names:
        host, colon, port = name.rpartition(":") if not name.endswith("]") else ("", "", "")
        if not colon or not _port(port):
            host, port = name, "443"
        if host:
            out.append((host.strip("[]"), int(port)))
    return out


def _noting(original: Any) -> Any:
    @functools.wraps(original)
    def channel(target: Any, *args: Any, **kwargs: Any) -> Any:
        for host, port in targets(target):
            connections.opened(host, port)
        return original(target, *args, **kwargs)

    return channel


def patch(module: ModuleType) -> None:
    """Wrap the channel constructors of ``grpc`` or ``grpc.aio``, there and in every module that
    imported them already (OpenTelemetry's OTLP/gRPC exporter: ``from grpc import insecure_channel``)."""
    for name in _CHANNELS:
        original = module.__dict__.get(name)
        if original is None or getattr(original, "__forkpoint_integration__", False):
            continue
        channel = _noting(original)
        for holder in list(sys.modules.values()):
            if getattr(holder, "__dict__", {}).get(name) is original:
                replace(holder, name, channel)


INTEGRATION = Integration("grpc", {"grpc": patch, "grpc.aio": patch})
