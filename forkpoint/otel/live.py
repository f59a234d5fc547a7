"""Live export: the spans of a session sent while it is being recorded.

:class:`LiveExport` follows the session log in a background thread (:class:`~forkpoint.log.LogTail`:
what any process appended, so a recorded shell script's several programs are one trace), builds
each call's span as soon as its event is in the log with the builder ``forkpoint export`` uses
(:class:`~forkpoint.otel.spans.TraceBuilder`), and sends what it has every ``poll`` seconds in one
batch; the root span goes last, when the session has ended. The trace it sends is the one
``forkpoint export`` sends afterwards with the same options, ids included.

The recorded program never waits for it: the thread only reads the log, and a failing or hanging
endpoint only delays spans (kept, up to :data:`MAX_PENDING`, and tried again). At the end
:meth:`LiveExport.finish` waits at most ``timeout`` seconds for the last batch (none when the
endpoint is failing) and says what did not arrive, with the command that sends the trace again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import runtime
from ..errors import ForkpointError
from ..log import LogTail
from ..text import say as text_say
from .sdk import Sender, SpanFactory, otlp_traces_url, shown
from .spans import TraceBuilder, variant_for

#: Spans kept for a failing endpoint; beyond this the newest are dropped (and counted).
MAX_PENDING = 10_000
#: Seconds between attempts while the endpoint fails (doubling from 1 up to this).
MAX_BACKOFF = 30.0


@dataclass
class LiveReport:
    """What a live export achieved: spans ``built`` and ``sent`` (accepted by the endpoint), spans
    ``dropped`` while it failed, the trace id (32 hex digits) and the last ``error``, if any."""

    endpoint: str
    trace_id: str
    built: int
    sent: int
    dropped: int
    error: str | None

    @property
    def complete(self) -> bool:
        """Whether every span of the session reached the endpoint."""
        return self.sent == self.built and not self.dropped and self.error is None


class _OwnRecords(logging.Filter):
    """Keeps the OTLP exporter's messages from the export thread off the program's log (forkpoint
    reports the outcome itself); remembers the first one since the last delivery as the reason of
    the failure (the exporter's later ones say it retries, or that it was shut down: not why)."""

    def __init__(self) -> None:
        super().__init__()
        self.thread: int | None = None
        #: The first message since the endpoint last accepted spans (None: none since).
        self.reason: str | None = None
        #: The request being sent has failed at least once (the exporter retries it, or gave up).
        self.troubled = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.thread is not None and record.thread == self.thread:
            if self.reason is None:
                self.reason = record.getMessage()
            self.troubled = True
            return False
        return True


class LiveExport:
    """Sends a session's spans to the OTLP/HTTP endpoint ``otlp`` while it is recorded.

    ``content``, ``headers`` and ``service_name`` are those of ``forkpoint export``; ``timeout``
    (seconds) bounds one request and the wait for the last one; ``poll`` (seconds) is how often the
    log is read and a batch sent. ``say`` receives forkpoint's messages (default: stderr). Raises
    :class:`~forkpoint.errors.ExportError` at once for a URL that is no http(s) URL, or when the
    ``otel`` extra is not installed.
    """

    def __init__(
        self,
        otlp: str,
        *,
        content: bool = False,
        headers: Mapping[str, str] | None = None,
        service_name: str | None = None,
        timeout: float = 5.0,
        poll: float = 0.25,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.endpoint = otlp_traces_url(otlp)
        #: The endpoint as messages name it (a password or key in its URL as a placeholder).
        self.shown = shown(self.endpoint)
        self.content = content
        self.service_name = service_name
        self.timeout = timeout
        self.poll = poll
        self.say = say or text_say
        self._sender = Sender(self.endpoint, headers, timeout)
        self._filter = _OwnRecords()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False
        self._warned = False  # (the endpoint's warning said)
        self._error: str | None = None
        self._trace_id = 0
        self._session_id = ""
        self._report: LiveReport | None = None
        self.built = self.sent = self.dropped = 0

    def start(self, session_path: Path | str) -> None:
        """Follow the session at ``session_path`` (its header written) from now on."""
        tail = LogTail(session_path)
        builder = TraceBuilder(
            tail.header,
            content=self.content,
            variant=variant_for(content=self.content, service_name=self.service_name),
        )
        factory = SpanFactory(builder.trace_id, self.service_name)
        self._trace_id, self._session_id = builder.trace_id, builder.session_id
        logging.getLogger(self._sender.logger_name).addFilter(self._filter)
        self._thread = threading.Thread(
            target=self._run, args=(tail, builder, factory), name="forkpoint-live-export", daemon=True
        )
        self._thread.start()

    def _run(self, tail: LogTail, builder: TraceBuilder, factory: SpanFactory) -> None:
        runtime.unseen()  # the export's own HTTP requests are not part of the recorded run
        self._filter.thread = threading.get_ident()
        pending: list[Any] = []
        backoff, next_try = 1.0, 0.0
        try:
            while True:
                stopping = self._stop.is_set()
                plans = [span for event in tail.read() for span in builder.add(event)]
                if stopping:
                    plans.append(builder.finish())
                self._keep(pending, factory.spans(plans) if plans else [])
                if pending and (stopping or time.monotonic() >= next_try):
                    if self._deliver(pending):
                        backoff, next_try = 1.0, 0.0
                    else:
                        next_try = time.monotonic() + backoff
                        backoff = min(backoff * 2, MAX_BACKOFF)
                if stopping:
                    return
                self._stop.wait(self.poll)
        except Exception as exc:  # whatever goes wrong here stops the export, never the recording
            self._error = str(exc) if isinstance(exc, ForkpointError) else f"{type(exc).__name__}: {exc}"
            self.say(f"forkpoint: live export stopped: {self._error}")
        finally:
            factory.shutdown()
            # Here, not in finish(): a request still hanging when finish() gave up logs its failure
            # later, from this thread, and that must stay out of the program's log too.
            logging.getLogger(self._sender.logger_name).removeFilter(self._filter)

    def _keep(self, pending: list[Any], spans: list[Any]) -> None:
        self.built += len(spans)
        room = max(0, MAX_PENDING - len(pending))
        pending.extend(spans[:room])
        self.dropped += len(spans) - len(spans[:room])

    def _deliver(self, pending: list[Any]) -> bool:
        self._filter.troubled = False
        rejected = self._sender.rejected
        accepted = self._sender.send(pending)
        self.sent += accepted - (self._sender.rejected - rejected)  # (dropped spans are not sent again)
        if self._sender.rejected and not rejected:
            self.say(f"forkpoint: live export to {self.shown}: {self._dropped()}; the recording goes on")
        if self._sender.warning and not self._warned:  # (once: the endpoint may say it at every request)
            self._warned = True
            self.say(
                f"forkpoint: live export to {self.shown}: the endpoint took the spans with a warning: {self._sender.warning}"
            )
        del pending[:accepted]
        if not pending:
            if self._failing:
                self.say(f"forkpoint: live export to {self.shown} works again")
            self._failing, self._error, self._filter.reason = False, None, None
            return True
        self._error = self._filter.reason or "the endpoint did not accept the spans"
        if not self._failing and self._report is None:  # (after finish() has reported: nothing more)
            self._failing = True
            self.say(
                f"forkpoint: live export to {self.shown} failed ({self._error}); the recording goes "
                "on, and the spans are kept to send again"
            )
        return False

    def _dropped(self) -> str:
        why = self._sender.rejection or "it gave no reason"
        return f"the endpoint took {self._sender.rejected} spans and dropped them ({why})"

    def finish(self) -> LiveReport:
        """The session has ended: send what is left (the root span last) and stop. Waits at most
        ``timeout`` seconds (not at all while the endpoint is failing, or a request is being
        retried), then says what did not arrive. A second call returns the same report."""
        if self._report is not None:
            return self._report
        thread = self._thread
        if thread is not None:
            self._stop.set()
            deadline = time.monotonic() + self.timeout + self.poll + 1.0
            closed = False
            while thread.is_alive() and time.monotonic() < deadline:
                if not closed and (self._failing or self._filter.troubled):
                    self._sender.close()  # no waiting on retries: what is left is reported below
                    closed = True
                thread.join(0.05)
            if thread.is_alive():
                self._sender.close()
                thread.join(1.0)
                self._error = self._error or f"no answer from the endpoint within {self.timeout:g} s"
        error = self._error or (self._dropped() if self._sender.rejected else None)
        report = LiveReport(
            self.endpoint, format(self._trace_id, "032x"), self.built, self.sent, self.dropped, error
        )
        if thread is not None and not report.complete:
            options = (" --content" if self.content else "") + (
                f" --service-name {self.service_name}" if self.service_name else ""
            )
            self.say(
                f"forkpoint: live export to {self.shown}: {report.built - report.sent} of {report.built} "
                f"spans did not arrive ({report.error or 'dropped while the endpoint failed'}). The session "
                f"is complete: `forkpoint export {self._session_id} --otlp {self.shown}{options}` sends "
                "its trace again, with the same ids"
            )
        self._report = report
        return report
