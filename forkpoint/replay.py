"""Replay: the :class:`Replayer` runtime, divergence reports, and the ``forkpoint.replay()`` context manager.

While a replay is active, every model call and tool call is served from the session by match key
(identical keys in recorded order), no tool body runs, and opening any internet socket raises
:class:`NetworkBlocked`. A request with no recorded match raises :class:`Divergence`, whose message
names the position, the recorded request that was expected next, the nearest recorded request, and
a diff by JSON path.
"""

from __future__ import annotations

import os
import socket
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from . import runtime
from .log import Session
from .match import format_changes, json_diff, model_key, normalize_request, similarity, tool_key
from .store import resolve

#: Exit code of ``forkpoint replay`` when the run diverged from the recording.
EXIT_DIVERGENCE = 3

#: Environment variables SDKs insist on; set to a placeholder during replay when unset.
API_KEY_VARS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")
PLACEHOLDER_KEY = "forkpoint-replay-no-key"


class Divergence(runtime.ForkpointError):
    """The replayed run made a call that the recording does not have.

    ``report`` is the structured divergence report (JSON data): ``kind``, ``position``, ``actual``,
    ``expected`` (the next unused recorded call of that kind), ``nearest``, ``diff`` (list of changes
    by JSON path, expected → actual) and ``reason``.
    """

    def __init__(self, report: dict[str, Any]) -> None:
        self.report = report
        super().__init__(format_divergence(report))


class NetworkBlocked(runtime.ForkpointError, ConnectionError):
    """A socket tried to reach the network during a replay."""


class RecordedError(runtime.ForkpointError):
    """A recorded transport failure whose exception class cannot be rebuilt here."""

    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(f"recorded {error.get('module')}.{error.get('type')}: {error.get('message')}")
        self.error = error


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def format_divergence(report: dict[str, Any]) -> str:
    """One paragraph (and a diff) saying where and how a replay diverged."""
    kind = report["kind"].replace("_", " ")
    what = report.get("name") or report.get("endpoint") or ""
    lines = [
        f"replay diverged at the {_ordinal(report['position'])} {kind} of this run ({what}): "
        f"{report['reason']}."
    ]
    exp = report.get("expected")
    if exp:
        lines.append(f"Expected next: recorded event seq {exp['seq']} ({exp['label']}).")
    near = report.get("nearest")
    if near and (not exp or near["seq"] != exp["seq"]):
        lines.append(
            f"Nearest recorded: seq {near['seq']} ({near['label']}, similarity {near['similarity']:.2f})."
        )
    if report.get("diff"):
        lines.append("Differences, recorded → actual:")
        lines.append(format_changes([_change(c) for c in report["diff"]]))
    return "\n".join(lines)


def _change(c: dict[str, Any]) -> Any:
    from .match import Change

    return Change(c["op"], c["path"], c.get("expected"), c.get("actual"))


def _label(event: dict[str, Any]) -> str:
    if event["type"] == "tool_call":
        return f"tool {event['tool']}"
    summary = event.get("summary") or {}
    return _endpoint(event) + (f", model {summary['model']}" if summary.get("model") else "")


def _endpoint(event: dict[str, Any]) -> str:
    if event["type"] == "tool_call":
        return str(event["tool"])
    req = event["request"]
    return f"{req['method'].upper()} {urlsplit(req['url']).path}"


def _normalized(event: dict[str, Any]) -> dict[str, Any]:
    if event["type"] == "tool_call":
        return {"tool": event["tool"], "args": event["args"]}
    r = event["request"]
    return normalize_request(r["method"], r["url"], r["headers"], r["body"])


class Replayer:
    """The replay runtime: serves recorded model and tool calls of one :class:`~forkpoint.log.Session`.

    Thread-safe. ``report()`` gives the outcome as JSON data.
    """

    mode = "replay"

    def __init__(self, session: Session, *, allow_hosts: Sequence[str] = ()) -> None:
        self.session = session
        self.root_span: str = session.header.get("span_id") or ""
        self.allow_hosts = frozenset(allow_hosts)
        self.recorded = [e for e in session.events if e["type"] in ("model_call", "tool_call")]
        self._queues: dict[str, deque[dict[str, Any]]] = {}
        self._keys: dict[int, str] = {}
        for e in self.recorded:
            key = model_key(_normalized(e)) if e["type"] == "model_call" else tool_key(e["tool"], e["args"])
            self._keys[e["seq"]] = key
            self._queues.setdefault(key, deque()).append(e)
        self.used: list[int] = []
        self.positions = {"model_call": 0, "tool_call": 0}
        self.divergence: dict[str, Any] | None = None
        self.network_blocked: list[str] = []
        self._lock = threading.Lock()

    def take_model_call(self, request: dict[str, Any]) -> dict[str, Any]:
        """The recorded event answering ``request`` (stored form); raises :class:`Divergence`."""
        norm = normalize_request(request["method"], request["url"], request["headers"], request["body"])
        path = norm["path"]
        return self._take("model_call", model_key(norm), norm, endpoint=f"{norm['method']} {path}")

    def take_tool_call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        """The recorded event of this tool call; raises :class:`Divergence`."""
        return self._take("tool_call", tool_key(name, args), {"tool": name, "args": args}, name=name)

    def _take(self, kind: str, key: str, norm: dict[str, Any], **what: str) -> dict[str, Any]:
        with self._lock:
            self.positions[kind] += 1
            queue = self._queues.get(key)
            if queue:
                event = queue.popleft()
                self.used.append(event["seq"])
                return event
            report = self._divergence_report(kind, key, norm, what)
            if self.divergence is None:
                self.divergence = report
        raise Divergence(report)

    def _divergence_report(
        self, kind: str, key: str, norm: dict[str, Any], what: dict[str, str]
    ) -> dict[str, Any]:
        used = set(self.used)
        same_kind = [e for e in self.recorded if e["type"] == kind]
        unused = [e for e in same_kind if e["seq"] not in used]
        seen = [e for e in same_kind if self._keys[e["seq"]] == key]
        if seen:
            reason = (
                f"the request matches recorded event seq {seen[0]['seq']}, but all {len(seen)} recorded "
                f"answer(s) to it were already served; the run asked once more than it did when recorded"
            )
        elif not unused:
            reason = f"the recording has no {kind.replace('_', ' ')} left ({len(same_kind)} were recorded)"
        else:
            reason = "no recorded request has the same match key"
        expected = unused[0] if unused else None
        nearest = None
        endpoint = what.get("endpoint") or what.get("name")
        candidates = [e for e in unused if _endpoint(e) == endpoint]
        best = -1.0
        for e in (candidates or unused)[:50]:
            s = similarity(_normalized(e), norm)
            if s > best:
                best, nearest = s, e
        base = expected or nearest
        report: dict[str, Any] = {
            "kind": kind,
            **what,
            "position": self.positions[kind],
            "reason": reason,
            "key": key,
            "actual": norm,
            "expected": {"seq": expected["seq"], "label": _label(expected)} if expected else None,
            "nearest": {"seq": nearest["seq"], "label": _label(nearest), "similarity": round(best, 4)}
            if nearest
            else None,
            "diff": [c.to_json() for c in json_diff(_normalized(base), norm)] if base else [],
        }
        return report

    def report(self) -> dict[str, Any]:
        """Outcome as JSON data: matched/recorded counts, unused seqs, divergence, blocked connects."""
        used = set(self.used)
        return {
            "session": self.session.id,
            "session_path": str(self.session.path),
            "matched": len(self.used),
            "recorded": len(self.recorded),
            "unused": [e["seq"] for e in self.recorded if e["seq"] not in used],
            "divergence": self.divergence,
            "network_blocked": self.network_blocked,
        }


def summary_line(report: dict[str, Any]) -> str:
    """The one-line end-of-replay report."""
    status = "DIVERGED" if report.get("divergence") else "ok"
    unused = report["unused"]
    tail = f"{len(unused)} recorded events left unused" + (
        f" (seq {', '.join(map(str, unused[:10]))}{' …' if len(unused) > 10 else ''})" if unused else ""
    )
    blocked = (
        f"; {len(report['network_blocked'])} network connection(s) blocked"
        if report.get("network_blocked")
        else ""
    )
    return f"replay {status}: {report['matched']}/{report['recorded']} events matched, {tail}{blocked}"


# --------------------------------------------------------------------------- network guard

_guard_lock = threading.Lock()
_guard_installed = False


def install_network_guard() -> None:
    """Make internet sockets refuse to connect while a replay is active. Idempotent."""
    global _guard_installed
    with _guard_lock:
        if _guard_installed:
            return
        orig_connect = socket.socket.connect
        orig_connect_ex = socket.socket.connect_ex

        def check(sock: socket.socket, address: Any) -> None:
            rt = runtime.active()
            if not isinstance(rt, Replayer) or sock.family not in (socket.AF_INET, socket.AF_INET6):
                return
            host = str(address[0]) if isinstance(address, tuple) else str(address)
            if host in rt.allow_hosts:
                return
            where = f"{host}:{address[1]}" if isinstance(address, tuple) and len(address) > 1 else host
            with rt._lock:
                rt.network_blocked.append(where)
            raise NetworkBlocked(
                f"forkpoint replay blocked a network connection to {where}: during a replay every model "
                "and tool call is served from the session, so nothing may reach the network. A call made "
                "outside the recorded clients or tools (wrap it with @forkpoint.tool) cannot be replayed."
            )

        def connect(self: socket.socket, address: Any) -> None:
            check(self, address)
            return orig_connect(self, address)

        def connect_ex(self: socket.socket, address: Any) -> int:
            check(self, address)
            return orig_connect_ex(self, address)

        socket.socket.connect = connect  # type: ignore[method-assign]
        socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
        _guard_installed = True


@contextmanager
def replay(
    session: str | Path | Session,
    *,
    store: str | Path | None = None,
    allow_hosts: Sequence[str] = (),
    report_path: str | Path | None = None,
) -> Iterator[Replayer]:
    """Serve every model call and tool call inside the block from ``session``.

    ``session`` is a :class:`~forkpoint.log.Session`, a path, an id, an id prefix or ``"last"``.
    SDK API-key variables that are unset get a placeholder for the duration. Yields the
    :class:`Replayer`; ``replayer.report()`` gives the outcome. With ``report_path`` the report is
    also written there as JSON when the block ends.
    """
    if not isinstance(session, Session):
        session = Session.load(resolve(session, Path(store) if store else None))
    rt = Replayer(session, allow_hosts=allow_hosts)
    install_network_guard()
    added = [k for k in API_KEY_VARS if not os.environ.get(k)]
    for k in added:
        os.environ[k] = PLACEHOLDER_KEY
    runtime.activate(rt)
    try:
        yield rt
    finally:
        runtime.deactivate(rt)
        for k in added:
            if os.environ.get(k) == PLACEHOLDER_KEY:
                del os.environ[k]
        if report_path:
            write_report(Path(report_path), rt.report())


def write_report(path: Path, report: dict[str, Any]) -> None:
    """Write a replay report atomically (temp file, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    os.replace(tmp, path)
