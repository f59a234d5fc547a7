"""Live export: a recording's spans sent while it runs (``forkpoint.record(otlp=…)``, ``forkpoint
record --otlp``, the pytest plugin's ``--forkpoint-otlp``), to an OTLP receiver on 127.0.0.1 (the
tests' local server with a ``/v1/traces`` route).

What must hold: each call's span arrives while the agent still runs; the trace sent live equals
what ``forkpoint export`` sends afterwards with the same options; a dead or hanging endpoint never
blocks or fails the run, and what did not arrive is said, with the command that sends it again.
"""

from __future__ import annotations

import gzip
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import openai
import pytest
from click.testing import CliRunner

pytest.importorskip("opentelemetry.sdk.trace", reason="needs the otel extra: pip install 'forkpoint[otel]'")
pytest.importorskip(
    "opentelemetry.exporter.otlp.proto.http", reason="needs opentelemetry-exporter-otlp-proto-http"
)

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span  # noqa: E402

import forkpoint  # noqa: E402
from forkpoint.cli import main  # noqa: E402
from forkpoint.demo.agent import run_agent  # noqa: E402
from forkpoint.demo.server import ModelServer  # noqa: E402
from forkpoint.log import Session  # noqa: E402
from forkpoint.otel import LiveExport, trace_id_for, variant_for  # noqa: E402
from tests.modelserver import LocalServer, Reply  # noqa: E402


def as_receiver(server: LocalServer, delay: float = 0.0) -> LocalServer:
    """``server`` answering ``POST /v1/traces`` as an OTLP/HTTP receiver (after ``delay`` seconds)."""
    ok = ExportTraceServiceResponse().SerializeToString()

    def accept(request: Any) -> Reply:
        time.sleep(delay)
        return Reply(ok, ctype="application/x-protobuf")

    server.route("/v1/traces", accept, method="POST")
    return server


@pytest.fixture
def receiver(server: LocalServer) -> LocalServer:
    return as_receiver(server)


def received(receiver: LocalServer) -> list[Span]:
    """Every span the receiver got, in the order they arrived."""
    spans = []
    for r in receiver.requests:
        if r["path"] != "/v1/traces":
            continue
        body = gzip.decompress(r["raw"]) if r["headers"].get("content-encoding") == "gzip" else r["raw"]
        req = ExportTraceServiceRequest.FromString(body)
        spans += [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    return spans


def by_id(spans: list[Span]) -> dict[bytes, bytes]:
    """Span id → the span's serialized protobuf (ids, parent, name, kind, times, attributes, events,
    status, links: everything a backend stores)."""
    out = {s.span_id: s.SerializeToString(deterministic=True) for s in spans}
    assert len(out) == len(spans), "a span was sent twice"
    return out


def dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def record_demo(store: Path, work: Path, **options: Any) -> Session:
    with ModelServer(turns=2, seed=5) as srv, forkpoint.record(store=store, workspace=work, **options) as rec:
        run_agent(srv.base_url, work, echo=None)
    return Session.load(rec.session_path)


def test_live_trace_equals_the_export_afterwards(receiver: LocalServer, tmp_path: Path) -> None:
    store = tmp_path / "store"
    session = record_demo(store, tmp_path / "work", otlp=receiver.url, otlp_content=True)
    live = received(receiver)
    assert len(live) == 1 + len(session.calls())
    assert {s.trace_id for s in live} == {
        trace_id_for(session.id, variant_for(content=True)).to_bytes(16, "big")
    }
    assert live[-1].name == "invoke_agent" and not live[-1].parent_span_id  # the root goes last

    receiver.requests.clear()
    result = CliRunner().invoke(
        main, ["export", session.id, "--store", str(store), "--otlp", receiver.url, "--content"]
    )
    assert result.exit_code == 0, result.output
    assert by_id(live) == by_id(received(receiver))


def test_each_span_arrives_while_the_agent_runs(receiver: LocalServer, tmp_path: Path) -> None:
    with LocalServer(chat_script=[[("lookup", {"city": "Oslo"})], "It is cold."]) as model:

        @forkpoint.tool
        def lookup(city: str) -> dict[str, Any]:
            return {"city": city, "temp": -3}

        client = openai.OpenAI(base_url=model.openai_base_url, api_key="sk-test", max_retries=0)
        with forkpoint.record(store=tmp_path, otlp=receiver.url) as rec:
            messages: list[Any] = [{"role": "user", "content": "Weather in Oslo?"}]
            first = client.chat.completions.create(model="m", messages=messages)
            call = first.choices[0].message.tool_calls[0]
            lookup("Oslo")
            # The agent is still running: the model call's span and the tool's reach the receiver.
            deadline = time.monotonic() + 10
            while len(received(receiver)) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            arrived = [s.name for s in received(receiver)]
            messages += [first.choices[0].message, {"role": "tool", "tool_call_id": call.id, "content": "-3"}]
            client.chat.completions.create(model="m", messages=messages)
    assert arrived == ["chat m", "execute_tool lookup"]
    names = [s.name for s in received(receiver)]
    assert names == ["chat m", "execute_tool lookup", "chat m", "invoke_agent"]
    assert rec.session_path.is_dir()


@pytest.mark.slow
def test_a_dead_endpoint_never_blocks_or_fails_the_run(
    tmp_path: Path, receiver: LocalServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{dead_port()}"
    baseline = time.monotonic()
    record_demo(tmp_path / "base", tmp_path / "w0")
    baseline = time.monotonic() - baseline
    started = time.monotonic()
    session = record_demo(tmp_path / "store", tmp_path / "w1", otlp=url)
    took = time.monotonic() - started
    assert session.end() is not None and session.end()["exit_code"] == 0  # the run went on as ever
    assert took < baseline + 3, (took, baseline)
    err = capsys.readouterr().err
    n = 1 + len(session.calls())
    assert f"live export to {url}/v1/traces failed" in err
    assert f"{n} of {n} spans did not arrive" in err
    # Why: the connection was refused (not the exporter's "Shutdown in progress, aborting retry").
    assert (
        "Connection refused" in err and "Shutdown in progress" not in err and "already shutdown" not in err
    ), err
    assert f"forkpoint export {session.id} --otlp {url}/v1/traces" in err
    # The exporter's own log lines stay out of the program's output: forkpoint says what happened.
    assert all(line.startswith("forkpoint: ") for line in err.splitlines()), err
    # What the message says to do sends the same trace.
    result = CliRunner().invoke(
        main, ["export", session.id, "--store", str(tmp_path / "store"), "--otlp", receiver.url]
    )
    assert result.exit_code == 0, result.output
    assert {s.trace_id for s in received(receiver)} == {trace_id_for(session.id).to_bytes(16, "big")}


def test_spans_the_endpoint_took_and_dropped_are_said(
    tmp_path: Path, server: LocalServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """An OTLP endpoint may take a request and say it dropped some of its spans (``partial_success``
    in a 200 answer): the exporter reads no answer, so the live export said nothing and counted them
    sent."""
    dropped = ExportTraceServiceResponse()
    dropped.partial_success.rejected_spans = 2
    dropped.partial_success.error_message = "span attribute too long"
    body = dropped.SerializeToString()
    server.route("/v1/traces", lambda request: Reply(body, ctype="application/x-protobuf"), method="POST")
    with ModelServer(turns=2, seed=5) as srv:
        with forkpoint.record(store=tmp_path / "store", workspace=tmp_path / "w", otlp=server.url) as rec:
            run_agent(srv.base_url, tmp_path / "w", echo=None)
    session = Session.load(rec.session_path)
    assert session.end() is not None and session.end()["exit_code"] == 0  # the run went on as ever
    err = capsys.readouterr().err
    requests = [r for r in server.requests if r["path"] == "/v1/traces"]
    assert requests and len(received(server)) == 1 + len(session.calls())  # each span sent once
    dropped_n = 2 * len(requests)
    assert f"the endpoint took {dropped_n} spans and dropped them (span attribute too long)" in err, err
    assert f"{dropped_n} of {1 + len(session.calls())} spans did not arrive" in err, err
    assert err.count("; the recording goes on") == 1, err  # said once while it runs, not per request


def test_a_warning_from_the_endpoint_is_said_once(
    tmp_path: Path, server: LocalServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """``partial_success`` with no span rejected and a message: the endpoint took every span and
    warned (OTLP spec). The live export read it and said nothing; it says it once, and every span
    counts as sent."""
    warned = ExportTraceServiceResponse()
    warned.partial_success.error_message = "attribute values truncated"
    body = warned.SerializeToString()
    server.route("/v1/traces", lambda request: Reply(body, ctype="application/x-protobuf"), method="POST")
    with ModelServer(turns=2, seed=5) as srv:
        with forkpoint.record(store=tmp_path / "store", workspace=tmp_path / "w", otlp=server.url) as rec:
            run_agent(srv.base_url, tmp_path / "w", echo=None)
    session = Session.load(rec.session_path)
    err = " ".join(capsys.readouterr().err.split())
    assert len(received(server)) == 1 + len(session.calls())
    assert err.count("the endpoint took the spans with a warning: attribute values truncated") == 1, err
    assert "did not arrive" not in err, err


def test_credentials_in_the_endpoints_url_are_never_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """An endpoint that takes a password or a key in its URL (basic auth, ``?api_key=``) had them
    printed in every message that named it (failed, not arrived, the command to send it again), in
    export's error, and in the exporter's own log lines (requests quotes the URL's query)."""
    password, key = "hunter2-otlp-pass", "k3y-0f-the-endp0int"
    url = f"http://alice:{password}@127.0.0.1:{dead_port()}/v1/traces?api_key={key}"

    @forkpoint.tool
    def lookup(city: str) -> str:
        return city

    with forkpoint.record(store=tmp_path, otlp=url, otlp_content=True) as rec:
        lookup("Oslo")
    err = capsys.readouterr().err
    assert "spans did not arrive" in err and f"--otlp {url}" not in err, err
    result = CliRunner().invoke(
        main, ["export", rec.session_path.name, "--store", str(tmp_path), "--otlp", url]
    )
    assert result.exit_code == 1 and "did not accept the spans" in result.output, result.output
    said = err + result.output + caplog.text
    assert password not in said and key not in said, said


def test_the_reason_said_is_the_first_failure_since_the_endpoint_last_took_spans(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The export's last attempt, made after ``finish`` shut the exporter down, logged "Exporter
    already shutdown" first: under load that, not "Connection refused", was said as why the spans
    did not arrive."""
    import logging
    import threading

    said: list[str] = []
    live = LiveExport(f"http://127.0.0.1:{dead_port()}", say=said.append)
    log = logging.getLogger(live._sender.logger_name)
    log.addFilter(live._filter)
    live._filter.thread = threading.get_ident()
    answers = iter(
        [
            ("Connection refused, retrying in 1.1s", 0),
            ("Exporter already shutdown, ignoring batch", 0),
            (None, 1),  # the endpoint takes them again
            ("HTTP 503", 0),
        ]
    )

    def send(spans: list[Any]) -> int:
        message, accepted = next(answers)
        if message:
            log.warning(message)
        return accepted

    monkeypatch.setattr(live._sender, "send", send)
    try:
        assert not live._deliver(["span"]) and live._error == "Connection refused, retrying in 1.1s"
        assert not live._deliver(["span"]) and live._error == "Connection refused, retrying in 1.1s"
        assert live._deliver(["span"]) and live._error is None
        assert not live._deliver(["span"]) and live._error == "HTTP 503"
    finally:
        log.removeFilter(live._filter)
    assert said[0].startswith(f"forkpoint: live export to {live.endpoint} failed (Connection refused")


def test_a_request_that_outlives_finish_says_nothing_afterwards(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A request still hanging when ``finish`` gave up failed later: the exporter's error reached the
    program's log (the filter was already gone), "failed…" was said after the report, and closing
    the exporter twice logged "Exporter already shutdown"."""
    import logging
    import threading

    said: list[str] = []
    live = LiveExport(f"http://127.0.0.1:{dead_port()}", timeout=0.1, poll=0.05, say=said.append)
    hanging, release = threading.Event(), threading.Event()

    def send(spans: list[Any]) -> int:  # a request being retried, then hanging until released
        log = logging.getLogger(live._sender.logger_name)
        log.warning("Transient error, retrying in 1.0s")
        hanging.set()
        release.wait(30)
        log.error("Failed to export spans batch due to timeout")
        return 0

    live._sender.send = send  # type: ignore[method-assign]

    @forkpoint.tool
    def lookup(city: str) -> str:
        return city

    with forkpoint.record(store=tmp_path) as rec:
        live.start(rec.session_path)
        lookup("Oslo")
        assert hanging.wait(30)
    report = live.finish()
    assert not report.complete
    n = len(said)
    release.set()
    assert live._thread is not None
    live._thread.join(30)
    assert not live._thread.is_alive()
    assert len(said) == n, said[n:]
    assert not [r.getMessage() for r in caplog.records if r.name == live._sender.logger_name]


@pytest.mark.slow
def test_a_hanging_endpoint_costs_at_most_the_timeout(tmp_path: Path, server: LocalServer) -> None:
    as_receiver(server, delay=20)
    said: list[str] = []
    live = LiveExport(server.url, timeout=1.0, say=said.append)
    with ModelServer(turns=1, seed=1) as srv:
        with forkpoint.record(store=tmp_path) as rec:
            live.start(rec.session_path)
            run_agent(srv.base_url, tmp_path / "w", echo=None)
    started = time.monotonic()
    report = live.finish()
    assert time.monotonic() - started < 5
    assert not report.complete and report.sent == 0
    assert any("did not arrive" in m for m in said)


@pytest.mark.slow
def test_cli_record_otlp_sends_the_trace_live(receiver: LocalServer, tmp_path: Path) -> None:
    store = tmp_path / "store"
    env = {**os.environ, "FORKPOINT_STORE": str(store)}
    with ModelServer(turns=2, seed=5) as srv:
        cmd = [sys.executable, "-m", "forkpoint.cli", "record", "--no-workspace", "--otlp", receiver.url]
        cmd += ["--otlp-content", "--", sys.executable, "-m", "forkpoint.demo.agent"]
        cmd += ["--base-url", srv.base_url, "--workdir", str(tmp_path / "w")]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    live = received(receiver)
    session = Session.load(next(p for p in store.iterdir() if (p / "session.jsonl").exists()))
    trace = format(trace_id_for(session.id, variant_for(content=True)), "032x")
    assert f"sent {len(live)} spans live to {receiver.url}/v1/traces as trace {trace}" in done.stderr
    assert len(live) == 1 + len(session.calls()) == 6
    receiver.requests.clear()
    result = CliRunner().invoke(
        main, ["export", session.id, "--store", str(store), "--otlp", receiver.url, "--content"]
    )
    assert result.exit_code == 0, result.output
    assert by_id(live) == by_id(received(receiver))


def test_bad_endpoint_is_refused_before_anything_is_recorded(tmp_path: Path) -> None:
    with (
        pytest.raises(forkpoint.ForkpointError, match="expected an http"),
        forkpoint.record(store=tmp_path, otlp="localhost:4318"),
    ):
        pass
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("header", "fix"),
    [
        ("Authorization: Bearer tok-9f8e7d6c5b4a", "write Authorization=VALUE"),  # curl's form
        ("X-Api-Key: tok-9f8e7d6c5b4a=", "write X-Api-Key=VALUE"),  # a base64 token's padding
        ("=tok-9f8e7d6c5b4a", "the value is not shown"),
        ("tok-9f8e7d6c5b4a", "the value is not shown"),
    ],
)
def test_a_header_that_is_not_key_value_is_named_by_its_place_never_printed(
    tmp_path: Path, header: str, fix: str
) -> None:
    """A header's value is usually a token: the error names the option and which one, not what it says."""
    for option, command in (
        ("--header", ["export", "last", "--otlp", "http://127.0.0.1:9/v1/traces"]),
        ("--otlp-header", ["record", "--otlp", "http://127.0.0.1:9"]),
    ):
        args = [*command, "--store", str(tmp_path), option, "A=b", option, header, "--", "true"]
        result = CliRunner().invoke(main, args if command[0] == "record" else args[:-2])
        assert result.exit_code == 2, result.output
        assert f"Invalid value for {option}: the 2nd given is not KEY=VALUE" in result.output
        assert fix in result.output and "tok-9f8e7d6c5b4a" not in result.output, result.output
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(("timeout", "read"), [("0", "0.0"), ("-5", "-5.0")])
def test_an_export_timeout_of_zero_or_less_is_a_usage_error(tmp_path: Path, timeout: str, read: str) -> None:
    """``forkpoint export --timeout -5`` got as far as the exporter, which said it "cannot set the
    connect timeout to 0.0", after "see the log above": the option is what was wrong."""
    args = ["export", "last", "--store", str(tmp_path), "--otlp", "http://127.0.0.1:9", "--timeout", timeout]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '--timeout': {read} is not in the range x>0." in result.output
