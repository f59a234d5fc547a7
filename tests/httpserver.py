"""The request-logging base of the tests' local HTTP servers (tests/conftest.py, test_robustness.py)."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit


class LoggingHandler(BaseHTTPRequestHandler):
    """Base of the tests' local HTTP servers: reads each request, logs it on ``server.requests`` as
    ``{"method", "path", "query", "headers" (lowercase names), "raw", "body" (JSON or None), "n"
    (its place, from 1)}`` under ``server.lock``, then hands it to :meth:`route`."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # no 40 ms delayed-ACK stall between headers and body
    server: Any

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        pass

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        self._handle()

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        self._handle()

    def _handle(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        parts = urlsplit(self.path)
        request: dict[str, Any] = {
            "method": self.command,
            "path": parts.path,
            "query": {k: v[-1] for k, v in parse_qs(parts.query).items()},
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "raw": raw,
        }
        try:
            request["body"] = json.loads(raw) if raw else None
        except ValueError:
            request["body"] = None
        with self.server.lock:
            self.server.requests.append(request)
            request["n"] = len(self.server.requests)
        self.route(request)

    def route(self, request: dict[str, Any]) -> None:
        raise NotImplementedError
