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
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from . import override, runtime
from .log import Session, SessionWriter, new_span_id
from .match import (
    format_changes,
    in_send_order,
    json_diff,
    model_key,
    normalize_request,
    similarity,
    tool_key,
)
from .override import Override
from .record import Recorder, end_event, make_header
from .redact import scrub_json
from .show import plural
from .store import resolve, session_finished, session_started

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


#: What serves each kind of call during a replay.
SOURCES = ("replay", "live")
#: What happens after a divergence: report and stop, continue live, or serve the next recorded call anyway.
POLICIES = ("stop", "live", "fifo")


class Replayer:
    """The replay runtime: serves recorded model and tool calls of one :class:`~forkpoint.log.Session`.

    ``models`` / ``tools`` say where each kind of call comes from: ``"replay"`` (the session) or
    ``"live"`` (really made). ``on_divergence`` is the policy after a call that matches nothing:
    ``"stop"`` raises :class:`Divergence`; ``"live"`` switches every later call to live;
    ``"fifo"`` serves the next unused recorded call of the same endpoint or tool and notes the drift.
    ``overrides`` replace single recorded results (see :mod:`forkpoint.override`). With
    ``live_from`` (a checkpoint's seq) only the calls before it are served; once all of them have
    been, every later call is live (a fork's continuation).

    When ``child`` is given, every call of this run — served, overridden or live — is written to it:
    the what-if run as a session of its own, linked to its parent. Thread-safe.
    """

    mode = "replay"

    def __init__(
        self,
        session: Session,
        *,
        allow_hosts: Sequence[str] = (),
        models: str = "replay",
        tools: str = "replay",
        on_divergence: str = "stop",
        overrides: Sequence[Override] = (),
        child: SessionWriter | None = None,
        live_from: int | None = None,
        ledger: Ledger | None = None,
    ) -> None:
        for name, value, allowed in (
            ("models", models, SOURCES),
            ("tools", tools, SOURCES),
            ("on_divergence", on_divergence, POLICIES),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
        self.session = session
        self.root_span: str = (
            (child.header.get("span_id") if child else None) or session.header.get("span_id") or ""
        )
        self.allow_hosts = frozenset(allow_hosts)
        self.sources = {"model_call": models, "tool_call": tools}
        self.policy = on_divergence
        self.child = child
        # A fork replays the prefix before its checkpoint, then goes live once that prefix is used up.
        self.live_from = live_from
        self.recorded = [
            e
            for e in session.events
            if e["type"] in ("model_call", "tool_call") and (live_from is None or e["seq"] < live_from)
        ]
        self.overrides = override.resolve(list(overrides), self.recorded)
        self.applied: dict[int, bool] = dict.fromkeys(self.overrides, False)
        self._queues: dict[str, deque[dict[str, Any]]] = {}
        self._keys: dict[int, str] = {}
        for e in self.recorded:
            key = model_key(_normalized(e)) if e["type"] == "model_call" else tool_key(e["tool"], e["args"])
            self._keys[e["seq"]] = key
            self._queues.setdefault(key, deque()).append(e)
        # Identical requests are answered in the order they were sent, not finished (match.in_send_order).
        self._queues = {k: deque(in_send_order(q)) for k, q in self._queues.items()}
        self.used: list[int] = []
        # Served by the other processes of this replay (a recording made by several processes).
        self.ledger = ledger
        self.started = time.time()  # orders the reports of a replay's processes (merge_reports)
        self.others: set[int] = set()
        self._events = {e["seq"]: e for e in self.recorded}
        self.positions = {"model_call": 0, "tool_call": 0}
        self.live_calls = {"model_call": 0, "tool_call": 0}
        self.divergence: dict[str, Any] | None = None
        self.drift: list[dict[str, Any]] = []
        self.gone_live = False
        self.network_blocked: list[str] = []
        self.pending: set[Any] = set()
        self._lock = threading.Lock()

    # -- the capture layer asks these

    def network_allowed(self) -> bool:
        """True when some call may go live, so sockets must not be blocked."""
        return self.gone_live or "live" in self.sources.values()

    def take_model_call(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """The event answering ``request``, or None to make the call live. Raises :class:`Divergence`."""
        norm = normalize_request(request["method"], request["url"], request["headers"], request["body"])
        event = self._take("model_call", model_key(norm), norm, endpoint=f"{norm['method']} {norm['path']}")
        if event is not None and self.child is not None:
            self._log_served(event, {"request": request})
        return event

    def take_tool_call(
        self, name: str, args: dict[str, Any], *, defaulted: frozenset[str] = frozenset()
    ) -> dict[str, Any] | None:
        """The event of this tool call, or None to run the tool live. Raises :class:`Divergence`.

        ``defaulted`` names arguments the caller did not pass (filled in from the signature): when
        nothing matches the call as it is, a recorded call of the tool whose arguments are these
        less some of the defaulted ones is taken, so a tool that gained optional parameters since
        the recording still gets its recorded answers."""

        def without_defaults() -> list[str]:
            """Keys of recorded calls of this tool whose arguments are these less some defaulted ones."""
            alt: list[str] = []
            scrubbed = scrub_json(args)
            for e in self.recorded:
                rec = e.get("args")
                if e["type"] != "tool_call" or e["tool"] != name or not isinstance(rec, dict):
                    continue
                if (
                    set(rec) <= set(scrubbed)
                    and set(scrubbed) - set(rec) <= defaulted
                    and all(scrubbed[k] == v for k, v in rec.items())
                    and self._keys[e["seq"]] not in alt
                ):
                    alt.append(self._keys[e["seq"]])
            return alt

        norm = {"tool": name, "args": args}
        alternatives = without_defaults if defaulted & set(args) else None
        event = self._take("tool_call", tool_key(name, args), norm, alternatives=alternatives, name=name)
        if event is not None and self.child is not None:
            self._log_served(event, {"tool": name, "args": args})
        return event

    def before_model_call(self, request: dict[str, Any]) -> None:
        """Live calls of a replay take no checkpoints (the recording has them)."""

    def model_call_done(self, event: dict[str, Any]) -> None:
        """A live model call finished: write it to the child session."""
        self._log_live(event)

    def tool_call_done(self, event: dict[str, Any]) -> None:
        """A live tool call finished: write it to the child session."""
        self._log_live(event)

    # -- internals

    @contextmanager
    def _shared(self) -> Iterator[None]:
        """Hold the ledger while choosing a recorded call: learn what the other processes served
        since the last look (never served here again), and tell them what this one served."""
        if self.ledger is None:
            yield
            return
        with self.ledger.exclusive() as served_elsewhere:
            for seq in served_elsewhere:
                event = self._events.get(seq)
                if event is None or seq in self.others:
                    continue
                self.others.add(seq)
                queue = self._queues.get(self._keys[seq], deque())
                for i, queued in enumerate(queue):
                    if queued is event:
                        del queue[i]
                        break
            before = len(self.used)
            try:
                yield
            finally:
                self.ledger.claim(self.used[before:])

    def _take(
        self,
        kind: str,
        key: str,
        norm: dict[str, Any],
        *,
        alternatives: Callable[[], list[str]] | None = None,
        **what: str,
    ) -> dict[str, Any] | None:
        """The recorded call to serve for a call with match ``key`` (``alternatives()``: keys to try
        when none is left under ``key``), None to go live; raises :class:`Divergence`."""
        with self._lock, self._shared():
            self.positions[kind] += 1
            if self.gone_live or self.sources[kind] == "live":
                self.live_calls[kind] += 1
                return None
            queue = self._queues.get(key)
            if queue:
                return self._serve(queue.popleft())
            for alt in alternatives() if alternatives else ():
                queue = self._queues.get(alt)
                if queue:
                    return self._serve(queue.popleft())
            if self.live_from is not None and len(self.used) + len(self.others) == len(self.recorded):
                self.gone_live = True  # the recorded prefix is done: the fork continues live
                self.live_calls[kind] += 1
                return None
            report = self._divergence_report(kind, key, norm, what)
            first = self.divergence is None
            if first:
                self.divergence = report
            if self.policy == "live":
                self.gone_live = True
                self.live_calls[kind] += 1
                return None
            if self.policy == "fifo":
                endpoint = what.get("endpoint") or what.get("name")
                taken = set(self.used) | self.others
                nxt = next(
                    (
                        e
                        for e in self.recorded
                        if e["seq"] not in taken and e["type"] == kind and _endpoint(e) == endpoint
                    ),
                    None,
                )
                if nxt is not None:
                    self._queues[self._keys[nxt["seq"]]].remove(nxt)
                    drift = {
                        **report,
                        "served_seq": nxt["seq"],
                        "diff": [c.to_json() for c in json_diff(_normalized(nxt), norm)],
                    }
                    self.drift.append(drift)
                    if first:
                        self.divergence = drift
                    return self._serve(nxt)
        raise Divergence(report)

    def _serve(self, event: dict[str, Any]) -> dict[str, Any]:
        self.used.append(event["seq"])
        o = self.overrides.get(event["seq"])
        if o is None:
            return event
        self.applied[event["seq"]] = True
        return override.apply(event, o)

    def _log_served(self, event: dict[str, Any], actual: dict[str, Any]) -> None:
        keep = (
            ("duration_ms", "response", "error", "result")
            if event["type"] == "model_call"
            else ("duration_ms", "result", "error")
        )
        out = {"type": event["type"], **actual, **{k: event[k] for k in keep if k in event}}
        seq = event["seq"]
        out.update(
            source="override" if seq in self.overrides else "replay",
            recorded_seq=seq,
            span_id=new_span_id(),
            parent_span_id=runtime.current_span.get() or self.root_span,
            pid=os.getpid(),
        )
        if seq in self.overrides:
            out["override"] = self.overrides[seq].spec
        if event["type"] == "model_call":
            out["key"] = model_key(
                normalize_request(
                    out["request"]["method"],
                    out["request"]["url"],
                    out["request"]["headers"],
                    out["request"]["body"],
                )
            )
        else:
            out["key"] = tool_key(out["tool"], out["args"])
        assert self.child is not None
        self.child.append(out)

    def _log_live(self, event: dict[str, Any]) -> None:
        if self.child is None:
            return
        if event["type"] == "model_call":
            Recorder.enrich_model_call(event)
        else:
            event["key"] = tool_key(event["tool"], event["args"])
            event["pid"] = os.getpid()
        event["source"] = "live"
        self.child.append(event)

    def _divergence_report(
        self, kind: str, key: str, norm: dict[str, Any], what: dict[str, str]
    ) -> dict[str, Any]:
        used = set(self.used) | self.others  # served here, or by another process of this replay
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
        endpoint = what.get("endpoint") or what.get("name")
        candidates = [e for e in unused if _endpoint(e) == endpoint]
        expected: dict[str, Any] | None = (candidates or unused or [None])[0]
        nearest, best = None, -1.0
        for e in (candidates or unused)[:50]:
            score = similarity(_normalized(e), norm)
            if score > best:
                best, nearest = score, e
        base = expected or nearest
        return {
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

    def report(self) -> dict[str, Any]:
        """Outcome as JSON data: matched/recorded counts, unused seqs, divergence, drift (fifo),
        overrides and whether each was reached, live calls, the child session, blocked connects."""
        used = set(self.used)
        unused = [e for e in self.recorded if e["seq"] not in used]
        # Recorded calls of a kind served from the session that the run never asked for: it ended
        # early, which is as much a failure to reproduce as a divergence. (Live kinds, and anything
        # after a divergence the policy went live on, are expected to leave recorded calls unused.)
        unserved = [e["seq"] for e in unused if self.sources[e["type"]] == "replay" and not self.gone_live]
        return {
            "session": self.session.id,
            "session_path": str(self.session.path),
            "reproduced": self.divergence is None and not unserved and not self.network_blocked,
            "processes": 1,
            "process_started": self.started,
            "served": sorted(self.used),
            "unserved": unserved,
            "matched": len(self.used),
            "recorded": len(self.recorded),
            "unused": [e["seq"] for e in unused],
            "ended_early": bool(unserved) and self.divergence is None,
            "divergence": self.divergence,
            "policy": self.policy,
            "sources": {"models": self.sources["model_call"], "tools": self.sources["tool_call"]},
            "drift": self.drift,
            "overrides": [
                {**o.to_json(), "seq": seq, "applied": self.applied[seq]} for seq, o in self.overrides.items()
            ],
            "live_calls": {"models": self.live_calls["model_call"], "tools": self.live_calls["tool_call"]},
            "child_session": str(self.child.path) if self.child else None,
            "live_from": self.live_from,
            "network_blocked": self.network_blocked,
        }


def ended_by_override(report: dict[str, Any]) -> bool:
    """True when a what-if run stopped asking for recorded calls after an override took effect and
    without diverging: the agent took the way out the override offered (``model#2.text="I give
    up."``). That is the experiment's answer, not a failure to reproduce."""
    return (
        bool(report.get("ended_early"))
        and not report.get("divergence")
        and not report.get("network_blocked")
        and any(o.get("applied") for o in report.get("overrides") or [])
    )


def summary_line(report: dict[str, Any]) -> str:
    """The one-line end-of-replay report."""
    if report.get("divergence"):
        status = "DIVERGED"
    elif ended_by_override(report):
        status = "ok, ended early after the override (the agent did not ask for every recorded call)"
    elif report.get("ended_early"):
        status = "DID NOT REPRODUCE (the run ended before asking for every recorded call)"
    elif report.get("network_blocked"):
        status = "DID NOT REPRODUCE (the run tried to reach the network)"
    else:
        status = "ok"
    unused = report["unused"]
    tail = f"{plural(len(unused), 'recorded event')} left unused" + (
        f" (seq {', '.join(map(str, unused[:10]))}{' …' if len(unused) > 10 else ''})" if unused else ""
    )
    blocked = (
        f"; {len(report['network_blocked'])} network connection(s) blocked"
        if report.get("network_blocked")
        else ""
    )
    extra = ""
    if report.get("overrides"):
        applied = sum(1 for o in report["overrides"] if o["applied"])
        extra += f"; {applied}/{len(report['overrides'])} override(s) applied"
    live = report.get("live_calls") or {}
    if live.get("models") or live.get("tools"):
        extra += f"; live calls: {live.get('models', 0)} model, {live.get('tools', 0)} tool"
    if report.get("drift"):
        extra += f"; {len(report['drift'])} request(s) drifted (fifo)"
    if (report.get("processes") or 1) > 1:
        extra += f"; served to {report['processes']} processes"
    if report.get("child_session"):
        extra += f"; this run was recorded as {Path(report['child_session']).name}"
    return f"replay {status}: {report['matched']}/{report['recorded']} events matched, {tail}{blocked}{extra}"


# --------------------------------------------------------------------------- network guard

_guard_lock = threading.Lock()
_guard_installed = False


def install_network_guard() -> None:
    """Make internet sockets refuse to connect, and host names refuse to resolve, while a replay is
    active: only the replay's ``allow_hosts`` (addresses or names) may be reached. Idempotent."""
    global _guard_installed
    with _guard_lock:
        if _guard_installed:
            return
        orig_connect = socket.socket.connect
        orig_connect_ex = socket.socket.connect_ex

        orig_getaddrinfo = socket.getaddrinfo

        def blocked(rt: Replayer, where: str, what: str) -> NetworkBlocked:
            with rt._lock:
                rt.network_blocked.append(where)
            return NetworkBlocked(
                f"forkpoint replay blocked {what} {where}: during a replay every model and tool call is "
                "served from the session, so nothing may reach the network. A call made outside the "
                "recorded clients or tools (wrap it with @forkpoint.tool) cannot be replayed."
            )

        def guarding() -> Replayer | None:
            rt = runtime.active()
            return rt if isinstance(rt, Replayer) and not rt.network_allowed() else None

        def check(sock: socket.socket, address: Any) -> None:
            rt = guarding()
            if rt is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
                return
            host = str(address[0]) if isinstance(address, tuple) else str(address)
            if host in rt.allow_hosts:
                return
            where = f"{host}:{address[1]}" if isinstance(address, tuple) and len(address) > 1 else host
            raise blocked(rt, where, "a network connection to")

        def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
            # Name lookups go out to a resolver too: refuse them for any name but an allowed one.
            rt = guarding()
            name = host.decode() if isinstance(host, bytes) else str(host)
            if rt is not None and host is not None and name not in rt.allow_hosts and not _is_literal(name):
                raise blocked(rt, f"{name}:{port}", "a name lookup of")
            return orig_getaddrinfo(host, port, *args, **kwargs)

        def connect(self: socket.socket, address: Any) -> None:
            check(self, address)
            return orig_connect(self, address)

        def connect_ex(self: socket.socket, address: Any) -> int:
            check(self, address)
            return orig_connect_ex(self, address)

        socket.socket.connect = connect  # type: ignore[method-assign]
        socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
        socket.getaddrinfo = getaddrinfo
        _guard_installed = True


def _is_literal(host: str) -> bool:
    """An IP address (no lookup needed; connecting to it is checked on its own)."""
    import ipaddress

    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


@contextmanager
def replay(
    session: str | Path | Session,
    *,
    store: str | Path | None = None,
    allow_hosts: Sequence[str] = (),
    models: str = "replay",
    tools: str = "replay",
    on_divergence: str = "stop",
    overrides: Sequence[str | Override] = (),
    record_child: bool | None = None,
    report_path: str | Path | None = None,
) -> Iterator[Replayer]:
    """Serve every model call and tool call inside the block from ``session``.

    ``session`` is a :class:`~forkpoint.log.Session`, a path, an id, an id prefix, ``"last"`` or a
    session name (see :func:`forkpoint.store.resolve`).
    ``models``, ``tools``, ``on_divergence`` and ``overrides`` (specs or parsed) are those of
    :class:`Replayer`. The run is written to a new child session next to its parent when
    ``record_child`` is true — by default whenever something can make it differ from the recording
    (an override, a live source, or a policy other than ``stop``).
    SDK API-key variables that are unset get a placeholder for the duration. Yields the
    :class:`Replayer`; ``replayer.report()`` gives the outcome (also written to ``report_path``).
    Raises :class:`~forkpoint.override.OverrideError` for an override that does not fit the session.
    """
    if not isinstance(session, Session):
        session = Session.load(resolve(session, store))
    parsed = [o if isinstance(o, Override) else override.parse(o) for o in overrides]
    # Check every override fits the session before a child session is written for the run.
    override.resolve(parsed, [e for e in session.events if e["type"] in ("model_call", "tool_call")])
    what_if = bool(parsed) or models == "live" or tools == "live" or on_divergence != "stop"
    child = None
    if record_child if record_child is not None else what_if:
        child = create_child(
            session,
            argv=list(sys.argv),
            models=models,
            tools=tools,
            on_divergence=on_divergence,
            overrides=[o.spec for o in parsed],
        )
    rt = Replayer(
        session,
        allow_hosts=allow_hosts,
        models=models,
        tools=tools,
        on_divergence=on_divergence,
        overrides=parsed,
        child=child,
    )
    install_network_guard()
    added = [k for k in API_KEY_VARS if not os.environ.get(k)]
    for k in added:
        os.environ[k] = PLACEHOLDER_KEY
    runtime.activate(rt)
    started = time.perf_counter()
    code = 0
    try:
        yield rt
    except BaseException:
        code = 1
        raise
    finally:
        runtime.deactivate(rt)
        for k in added:
            if os.environ.get(k) == PLACEHOLDER_KEY:
                del os.environ[k]
        if child is not None:
            for call in list(rt.pending):
                call.finish(ended="unfinished")
            child.append(end_event(code, started))
            child.close()
            session_finished(child.path)
        if report_path:
            write_report(Path(report_path), rt.report())


def create_child(
    parent: Session,
    *,
    argv: list[str],
    models: str,
    tools: str,
    on_divergence: str,
    overrides: list[str],
    seq: int | None = None,
    name: str | None = None,
    into: Path | None = None,
) -> SessionWriter:
    """A new session for a what-if run of ``parent`` (header ``parent`` and ``replay`` say how it was
    made), in ``into`` (default: the folder the parent is in)."""
    header = make_header(
        argv=argv,
        name=name or f"what-if of {parent.id}",
        tags={k: v for k, v in (parent.header.get("tags") or {}).items() if v is not None},
        parent={"session_id": parent.id, "seq": seq},
    )
    header["tools"] = parent.header.get("tools") or []
    header["replay"] = {
        "models": models,
        "tools": tools,
        "on_divergence": on_divergence,
        "overrides": overrides,
    }
    child = SessionWriter.create(into or parent.path.parent, header)
    session_started(child.path)  # in a remote store's mirror: not uploaded before it ends
    return child


class Ledger:
    """Which recorded calls the processes of one replay have served: a replay of a recording that
    several processes made (``forkpoint record -- sh -c "python a.py && python b.py"``).

    An append-only file of served seqs, one per line, under an exclusive ``flock`` while a process
    chooses a call, so no two processes serve the same recorded call and identical calls in
    different processes get the answers in recorded order. POSIX only: where ``fcntl`` is missing,
    :func:`open_ledger` returns None and each process replays on its own.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        self._offset = 0

    @contextmanager
    def exclusive(self) -> Iterator[list[int]]:
        """Hold the ledger; yields the seqs other processes claimed since this one last looked."""
        import fcntl

        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            size = os.fstat(self._fd).st_size
            new = os.pread(self._fd, size - self._offset, self._offset) if size > self._offset else b""
            self._offset = size
            yield [int(line) for line in new.split()]
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def claim(self, seqs: Sequence[int]) -> None:
        """Record ``seqs`` as served by this process (call inside :meth:`exclusive`)."""
        if seqs:
            os.write(self._fd, "".join(f"{s}\n" for s in seqs).encode())
            self._offset = os.fstat(self._fd).st_size

    def close(self) -> None:
        os.close(self._fd)


def open_ledger(path: Path) -> Ledger | None:
    """A :class:`Ledger` at ``path``, or None where file locks are unavailable (Windows)."""
    try:
        import fcntl  # noqa: F401
    except ImportError:
        return None
    return Ledger(path)


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One report for a replay whose command ran several replaying processes, from theirs (in the
    order they started): calls served by any, unused by all; the first divergence; counts summed.
    One report is returned as it is."""
    if len(reports) == 1:
        return reports[0]
    first = reports[0]
    served = sorted(set().union(*(r["served"] for r in reports)))
    unused = sorted(set.intersection(*(set(r["unused"]) for r in reports)))
    unserved = sorted(set.intersection(*(set(r["unserved"]) for r in reports)))
    divergence = next((r["divergence"] for r in reports if r["divergence"]), None)
    blocked = [b for r in reports for b in r["network_blocked"]]
    overrides = []
    for i, o in enumerate(first["overrides"]):
        overrides.append({**o, "applied": any(r["overrides"][i]["applied"] for r in reports)})
    return {
        **first,
        "reproduced": divergence is None and not unserved and not blocked,
        "processes": len(reports),
        "served": served,
        "unserved": unserved,
        "matched": len(served),
        "unused": unused,
        "ended_early": bool(unserved) and divergence is None,
        "divergence": divergence,
        "drift": [d for r in reports for d in r["drift"]],
        "overrides": overrides,
        "live_calls": {k: sum(r["live_calls"][k] for r in reports) for k in ("models", "tools")},
        "network_blocked": blocked,
    }


def write_report(path: Path, report: dict[str, Any]) -> None:
    """Write a replay report atomically (temp file, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    os.replace(tmp, path)
