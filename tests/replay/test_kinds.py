"""Kinds of HTTP call: only model calls are model calls. Telemetry and metadata are answered aside and
never make a replay diverge or leave calls unused; MCP over streamable HTTP is recognized and replays
(the SDK's session as MCP calls, a client of its own as HTTP of kind ``mcp``);
plain HTTP that differs only in ids is reported, not fatal, unless strict; HTTP made inside a tool
belongs to that tool; a key in the URL is not part of the match key."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import requests

import forkpoint
from forkpoint import Divergence
from forkpoint.providers import classify, kinds
from forkpoint.redact import scrub_url
from forkpoint.replay import summary_line
from forkpoint.show import render
from tests.modelserver import LocalServer, Reply, json_reply


def _chat(base: str, text: str) -> str:
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    return str(
        requests.post(base + "/v1/chat/completions", json=body, timeout=5).json()["choices"][0]["message"][
            "content"
        ]
    )


def test_classification() -> None:
    assert classify("POST", "https://api.openai.com/v1/traces/ingest", {"data": []}) == "telemetry"
    prices = "https://raw.githubusercontent.com/BerriAI/litellm/main/model_prices_and_context_window.json"
    assert classify("GET", prices, None) == "telemetry"
    assert classify("POST", "https://os-api.agno.com/telemetry/runs", {}) == "telemetry"
    # agno's dev runtime (AGNO_API_RUNTIME=dev) posts the same telemetry to localhost:7070: its
    # ids change at every run, and a replay diverged on it as on plain HTTP.
    agno = [["user-agent", "agno/3.1.10"], ["content-type", "application/json"]]
    assert classify("POST", "http://localhost:7070/telemetry/runs", {"run_id": "r"}, agno) == "telemetry"
    assert classify("POST", "http://127.0.0.1:9/telemetry/runs", {"run_id": "r"}) == "http"  # not agno's
    protobuf = [["content-type", "application/x-protobuf"]]
    assert classify("POST", "http://127.0.0.1:4318/v1/traces", None, protobuf) == "telemetry"
    assert classify("POST", "http://127.0.0.1:4318/v1/logs", {"resourceLogs": []}) == "telemetry"
    assert classify("POST", "http://127.0.0.1:9/v1/traces/ingest", {"data": []}) == "telemetry"
    # The AWS credentials botocore fetches (only sign its requests: a replay runs with others).
    # (the instance metadata service at any host: AWS_EC2_METADATA_SERVICE_ENDPOINT names it)
    boto = [["user-agent", "Boto3/1.43.117 Python/3.11.7 Linux/6.1 Botocore/1.43.117"]]
    assert classify("PUT", "http://127.0.0.1:9/latest/api/token", None, boto) == "telemetry"
    imds_role = "http://127.0.0.1:9/latest/meta-data/iam/security-credentials/role"
    assert classify("GET", imds_role, None, boto) == "telemetry"
    assert classify("GET", "http://127.0.0.1:9/latest/meta-data/", None) == "http"  # not botocore's
    # An S3 call of boto3's (path-style at a custom endpoint) to a bucket named latest is the app's.
    api = [["user-agent", "Boto3/1.43.117 md/Botocore#1.43.117 ua/2.1 os/linux#6.1 Botocore/1.43.117"]]
    assert classify("PUT", "http://127.0.0.1:9/latest/meta-data/config.json", None, api) == "http"
    assert classify("GET", "http://127.0.0.1:9/latest/dynamic/report.csv", None, api) == "http"
    # An application's own API with such a path is no exporter (OTLP/HTTP only ever POSTs, protobuf
    # or JSON of resourceSpans/Metrics/Logs; the Agents SDK posts {"data": [...]}).
    assert classify("GET", "http://127.0.0.1:9/api/v1/logs?service=checkout", None) == "http"
    assert classify("GET", "http://127.0.0.1:9/v1/traces/ingest", None) == "http"
    assert classify("POST", "http://127.0.0.1:9/api/v1/logs", {"query": "level:error", "limit": 5}) == "http"
    assert classify("POST", "http://127.0.0.1:9/v1/traces/ingest", {"trace": "t1"}) == "http"
    assert (
        classify("POST", "http://127.0.0.1:9/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        == "mcp"
    )
    assert classify("GET", "http://127.0.0.1:9/mcp", None, [["mcp-session-id", "abc"]]) == "mcp"
    assert (
        classify("POST", "http://127.0.0.1:9/v1/chat/completions", {"model": "m", "messages": []}) == "model"
    )
    assert classify("POST", "https://api.openai.com/v1/embeddings", {"input": "x"}) == "model"
    assert classify("GET", "https://api.openai.com/v1/models", None) == "http"
    assert classify("GET", "http://127.0.0.1:9/search?q=x", None) == "http"


def test_container_credentials_are_where_botocore_s_environment_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore fetches container credentials from AWS_CONTAINER_CREDENTIALS_RELATIVE_URI on ECS's
    host (its first choice) or AWS_CONTAINER_CREDENTIALS_FULL_URI (EKS Pod Identity, aws-vault's
    --ecs-server): that URL is metadata, answered aside; the same host's other paths are the app's."""
    for name in ("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(name, raising=False)
    assert classify("GET", "http://127.0.0.1:9/v1/credentials", None) == "http"
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:9/v1/credentials")
    assert classify("GET", "http://127.0.0.1:9/v1/credentials", None) == "telemetry"
    assert classify("GET", "http://127.0.0.1:9/v1/other", None) == "http"
    assert classify("POST", "http://127.0.0.1:9/v1/credentials", None) == "http"
    monkeypatch.setattr(kinds, "ECS_CREDENTIALS_HOST", "http://127.0.0.1:8")  # (ECS's host, on loopback)
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/0a1b")
    assert classify("GET", "http://127.0.0.1:8/v2/credentials/0a1b", None) == "telemetry"
    assert classify("GET", "http://127.0.0.1:9/v1/credentials", None) == "http"  # (the relative one wins)


def test_telemetry_is_answered_aside_and_never_counts(server: LocalServer, store: Path) -> None:
    """Trace uploads whose ids differ at every run are served from the recording; one the recording
    does not have gets the neutral answer; none is a model call, a divergence or an unused call."""
    server.route("/v1/traces/ingest", lambda r: Reply(b"", 204, None))

    def run(traces: int) -> str:
        answer = _chat(server.url, "hello")
        for _ in range(traces):
            r = httpx.post(
                server.url + "/v1/traces/ingest", json={"data": [{"id": "trace_" + uuid.uuid4().hex}]}
            )
            assert r.status_code == 204
        return answer

    with forkpoint.record(store=store) as rec:
        live = run(2)
    server.stop()
    session = forkpoint.Session.load(rec.session_path)
    assert [e["summary"]["kind"] for e in session.by_type("model_call")] == [
        "model",
        "telemetry",
        "telemetry",
    ]
    with forkpoint.replay(rec.session_path) as rp:
        assert run(3) == live  # one upload more than recorded: answered neutrally
        prices = "https://raw.githubusercontent.com/BerriAI/litellm/main/model_prices_and_context_window.json"
        assert requests.get(prices, timeout=5).status_code == 503  # litellm then loads its bundled copy
    report = rp.report()
    assert (
        report["reproduced"] and report["matched"] == 1 and report["recorded"] == 1 and not report["unused"]
    )
    assert report["aside"]["served"] == 2 and len(report["aside"]["answered"]) == 2
    assert "2 served from the recording, 2 answered neutrally" in summary_line(report)


def test_an_otlp_export_to_a_path_of_its_own_is_telemetry(server: LocalServer, store: Path) -> None:
    """The agent's own OpenTelemetry export with OTEL_EXPORTER_OTLP_TRACES_ENDPOINT set to the
    collector's address (the SDK posts to it as it is: ``POST /``) was recorded as plain HTTP, and
    the replay DIVERGED on the span ids in its protobuf body, which differ at every run."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    server.route("/", lambda r: Reply(b"", 200, "application/x-protobuf"), method="POST")

    def run() -> str:
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=server.url)))
        with provider.get_tracer("agent").start_as_current_span("agent run"):
            answer = _chat(server.url, "hello")
        provider.shutdown()
        return answer

    with forkpoint.record(store=store) as rec:
        live = run()
    server.stop()
    kinds_of = [
        (e["request"]["url"].removeprefix(server.url), e["summary"]["kind"])
        for e in forkpoint.Session.load(rec.session_path).by_type("model_call")
    ]
    assert kinds_of == [("/v1/chat/completions", "model"), ("/", "telemetry")]
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    report = rp.report()
    assert report["reproduced"] and not report["divergence"] and report["aside"]["served"] == 1
    # Protobuf posted by anything else than an OTLP exporter, to an application's path, stays HTTP.
    assert (
        classify("POST", "http://127.0.0.1:9/", None, [["content-type", "application/x-protobuf"]]) == "http"
    )
    exporter = [["content-type", "application/json"], ["user-agent", "OTel-OTLP-Exporter-Python/1.45.1"]]
    assert classify("POST", "http://127.0.0.1:9/", {"query": "q"}, exporter) == "http"


_SPANS_AFTER_THE_REPLAY = """
import sys

import requests
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

import forkpoint

base, store = sys.argv[1], sys.argv[2]
provider = TracerProvider()  # (sends its spans every 10 minutes, and at the end)
exporter = OTLPSpanExporter(endpoint=base + "/v1/traces")
provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=600_000))
trace.set_tracer_provider(provider)


def run():
    with trace.get_tracer("agent").start_as_current_span("agent run"):
        body = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}
        return requests.post(base + "/v1/chat/completions", json=body, timeout=5).json()


with forkpoint.record(store=store) as rec:
    live = run()
provider.force_flush()  # (the recorded run's span, sent as the program would)
with forkpoint.replay(rec.session_path) as rp:
    assert run() == live
assert rp.report()["reproduced"], rp.report()
provider.shutdown()
"""


def _exports_of(script: Path, server: LocalServer, tmp_path: Path, path: str) -> list[Any]:
    """Run ``script SERVER_URL STORE`` (its own process, as a pytest run that goes on after a replay)
    and return the requests ``server`` received at ``path`` (the program's span exports)."""
    out = subprocess.run(
        [sys.executable, str(script), server.url, str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    return [r for r in server.requests if r["path"] == path]


def test_a_replay_in_a_process_that_goes_on_does_not_send_the_replayed_runs_spans(
    server: LocalServer, tmp_path: Path
) -> None:
    """A pydantic-ai test instrumented with OpenTelemetry (a BatchSpanProcessor), replayed by the
    pytest plugin: the spans of the replayed run were sent to the real collector when the process
    ended, after the replay. The replay now flushes them while it still answers their export."""
    server.route("/v1/traces", lambda r: Reply(b"", 200, "application/x-protobuf"), method="POST")
    script = tmp_path / "spans.py"
    script.write_text(_SPANS_AFTER_THE_REPLAY)
    exports = _exports_of(script, server, tmp_path, "/v1/traces")
    assert len(exports) == 1, exports  # the recorded run's, not the replayed run's too


def test_the_spans_a_program_made_before_a_replay_are_sent_as_it_would_send_them(
    server: LocalServer, tmp_path: Path
) -> None:
    """The replay flushes the program's OpenTelemetry providers as it ends: the span of the live
    run recorded just before it, still queued, went with them to the replay's neutral answer and
    never reached the collector. What was made before the replay is flushed live as it starts."""
    server.route("/v1/traces", lambda r: Reply(b"", 200, "application/x-protobuf"), method="POST")
    script = tmp_path / "spans.py"
    flushed = "provider.force_flush()  # (the recorded run's span, sent as the program would)\n"
    assert flushed in _SPANS_AFTER_THE_REPLAY
    script.write_text(_SPANS_AFTER_THE_REPLAY.replace(flushed, ""))
    exports = _exports_of(script, server, tmp_path, "/v1/traces")
    assert len(exports) == 1, exports  # the recorded run's, as the program would send it


_PROVIDER_SET_IN_THE_REPLAY = """
import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

import forkpoint

with forkpoint.record(store=sys.argv[1]) as rec:
    pass
with forkpoint.replay(rec.session_path):
    mine = TracerProvider()
    trace.set_tracer_provider(mine)
    print(trace.get_tracer_provider() is mine)
"""


def test_a_replay_does_not_set_the_programs_tracer_provider(tmp_path: Path) -> None:
    """With ``OTEL_PYTHON_TRACER_PROVIDER`` set (the SDK's provider loaded by name) and none set
    yet, the replay's flush asked ``get_tracer_provider()``, which loads and sets one: the
    program's own ``set_tracer_provider`` was refused ("Overriding of current TracerProvider is
    not allowed") and its spans went to another provider."""
    script = tmp_path / "provider.py"
    script.write_text(_PROVIDER_SET_IN_THE_REPLAY)
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "store")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider"},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "True\n", out.stderr


_SPANS_OF_ITS_OWN_FORMAT = _SPANS_AFTER_THE_REPLAY.replace(
    "from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter\n",
    "from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult\n",
).replace(
    'exporter = OTLPSpanExporter(endpoint=base + "/v1/traces")\n',
    """

class Zipkinish(SpanExporter):  # (spans in a format of its own, to a path of its own)
    def export(self, spans):
        requests.post(base + "/api/v2/spans", json=[{"name": s.name} for s in spans], timeout=5)
        return SpanExportResult.SUCCESS


exporter = Zipkinish()
""",
)


def test_a_replay_flushing_an_exporter_forkpoint_does_not_know_reproduces(
    server: LocalServer, tmp_path: Path
) -> None:
    """The replay flushes the program's OpenTelemetry providers as it ends: an exporter whose export
    is no telemetry forkpoint knows (a Zipkin exporter's ``POST /api/v2/spans``) was taken for the
    run's next call, and a replay that reproduced said "DIVERGED"; it is answered aside."""
    server.route("/api/v2/spans", lambda r: Reply(b"", 202, "application/json"), method="POST")
    script = tmp_path / "spans.py"
    script.write_text(_SPANS_OF_ITS_OWN_FORMAT)
    assert "Zipkinish()" in script.read_text() and "OTLP" not in script.read_text()
    exports = _exports_of(script, server, tmp_path, "/api/v2/spans")
    assert len(exports) == 1, exports  # the recorded run's, not the replayed run's too


def test_a_replay_interrupted_while_it_flushes_the_programs_telemetry_still_ends(
    server: LocalServer, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C while the replay flushes an exporter as it ends (an OTLP/gRPC export to a collector
    that does not answer blocks for seconds): the replay stayed active in the process, its hooks
    installed, and every later call of it was served from (or diverged from) the finished session."""
    from opentelemetry import trace

    class Blocking:
        def force_flush(self, timeout_millis: int = 30000) -> bool:
            raise KeyboardInterrupt

    with forkpoint.record(store=store) as rec:
        _chat(server.url, "hello")
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", Blocking())
    with pytest.raises(KeyboardInterrupt), forkpoint.replay(rec.session_path):
        _chat(server.url, "hello")
    assert forkpoint.runtime.active() is None
    assert _chat(server.url, "again") != ""  # live again, as the program is after its replay


def test_an_applications_logs_api_is_replayed_as_http_not_answered_as_telemetry(
    server: LocalServer, store: Path
) -> None:
    """``GET /api/v1/logs`` on any host was taken for an OTLP export: a search the recording did not
    have got an invented empty 200, and the replay said "replay ok"."""
    server.route("/api/v1/logs", lambda r: json_reply({"lines": [f"ERROR in {r['query']}"]}))

    def search(service: str) -> Any:
        return httpx.get(server.url + "/api/v1/logs", params={"service": service}).json()

    with forkpoint.record(store=store) as rec:
        live = search("checkout")
    with forkpoint.replay(rec.session_path) as rp:
        assert search("checkout") == live
    assert rp.report()["matched"] == 1 and rp.report()["reproduced"]
    with pytest.raises(forkpoint.Divergence), forkpoint.replay(rec.session_path):
        search("payments")


def test_an_applications_logs_query_by_post_is_replayed_as_http_not_answered_as_telemetry(
    server: LocalServer, store: Path
) -> None:
    """A ``POST /api/v1/logs`` with a JSON query was taken for an OTLP export (any host): another
    query was served the recorded answer, and a run that made no query at all said "replay ok"."""
    server.route(
        "/api/v1/logs", lambda r: json_reply({"lines": [f"ERROR in {r['body']['query']}"]}), method="POST"
    )

    def search(query: str) -> Any:
        return httpx.post(server.url + "/api/v1/logs", json={"query": query, "limit": 5}).json()

    with forkpoint.record(store=store) as rec:
        live = search("level:error")
    assert forkpoint.Session.load(rec.session_path).by_type("model_call")[0]["summary"]["kind"] == "http"
    with forkpoint.replay(rec.session_path) as rp:
        assert search("level:error") == live
    assert rp.report()["matched"] == 1 and rp.report()["reproduced"]
    with pytest.raises(forkpoint.Divergence), forkpoint.replay(rec.session_path):
        search("level:warning")
    with forkpoint.replay(rec.session_path) as rp:
        pass
    assert rp.report()["unused"] and not rp.report()["reproduced"]


def test_model_numbering_and_overrides_count_model_calls_only(server: LocalServer, store: Path) -> None:
    server.route("/v1/traces/ingest", lambda r: Reply(b"", 204, None))
    with forkpoint.record(store=store) as rec:
        httpx.post(server.url + "/v1/traces/ingest", json={"data": []})
        requests.get(server.url + "/lookup?q=1", timeout=5)
        first = _chat(server.url, "one")
        _chat(server.url, "two")
    server.stop()
    with forkpoint.replay(rec.session_path, overrides=['model#1.text="overridden"']) as rp:
        httpx.post(server.url + "/v1/traces/ingest", json={"data": []})
        requests.get(server.url + "/lookup?q=1", timeout=5)
        assert _chat(server.url, "one") == "overridden" != first
        _chat(server.url, "two")
    assert rp.report()["overrides"][0]["seq"] == 3  # the first model call, after telemetry and plain HTTP
    # A plain HTTP call named by its seq has no text to rewrite: said so, not "a unknown response".
    from forkpoint.override import OverrideError, parse, resolve

    with pytest.raises(OverrideError, match=r"event 2 is no model call but plain HTTP \(GET /lookup\)"):
        resolve([parse('seq:2.text="x"')], forkpoint.Session.load(rec.session_path).events)


def test_plain_http_made_live_is_counted_as_plain_http_not_as_a_model_call(
    server: LocalServer, store: Path
) -> None:
    """A what-if's live calls are counted by kind, as the recording's summary names them: a GET to
    a JSON API made live was counted as a model call ("live calls: 2 model, 0 tool")."""
    server.route("/api/items", lambda r: json_reply({"items": [1, 2, 3]}))

    def run(text: str) -> None:
        httpx.get(server.url + "/api/items")
        _chat(server.url, text)
        requests.get(server.url + "/api/items", timeout=5)

    with forkpoint.record(store=store) as rec:
        run("one")
    with forkpoint.replay(rec.session_path, models="live") as rp:
        run("one")
    report = rp.report()
    assert report["live_calls"] == {"models": 1, "tools": 0, "http": 2}, report["live_calls"]
    line = summary_line(report)
    assert "; live calls: 1 model, 0 tool, 2 plain HTTP" in line, line
    assert "3 of them model and plain HTTP calls this run made live" in line, line
    with forkpoint.replay(rec.session_path, on_divergence="live") as rp:
        run("two")  # (served, then diverges and goes live: the model call and the GET after it)
    assert rp.report()["live_calls"] == {"models": 1, "tools": 0, "http": 1}
    assert "; live calls: 1 model, 0 tool, 1 plain HTTP" in summary_line(rp.report())


def test_a_divergence_after_a_plain_http_call_names_the_model_call_by_its_own_count(
    server: LocalServer, store: Path
) -> None:
    """Model calls and the HTTP exchanges that are none share one count (the what-if ``end``,
    ``model#K``): a run that fetched a JSON API first and then diverged at its first model call was
    said to diverge "at the 2nd model call of this run"."""
    from rich.console import Console

    from forkpoint.replay.report import format_divergence, verdict

    server.route("/api/items", lambda r: json_reply({"items": [1, 2, 3]}))
    with forkpoint.record(store=store) as rec:
        httpx.get(server.url + "/api/items")
        _chat(server.url, "one")
    with pytest.raises(Divergence), forkpoint.replay(rec.session_path) as rp:
        httpx.get(server.url + "/api/items")
        _chat(server.url, "two")
    div = rp.report()["divergence"]
    assert (div["position"], div["model_position"]) == (2, 1)
    text = format_divergence(div)
    assert text.startswith("replay diverged at the 1st model call of this run, its 2nd HTTP exchange"), text
    assert verdict(rp.report(), 0, 0)["call"].startswith("model call #1 (HTTP exchange #2)")
    with forkpoint.replay(rec.session_path, on_divergence="live") as rp:  # (a what-if session's end)
        httpx.get(server.url + "/api/items")
        _chat(server.url, "two")
    console = Console(record=True, width=300)
    render(forkpoint.Session.load(rp.report()["child_session"]), console)
    assert "diverged at the 1st model call, its 2nd HTTP exchange, this run's #2" in console.export_text()
    with pytest.raises(Divergence), forkpoint.replay(rec.session_path) as rp:  # (the first call: as before)
        _chat(server.url, "two")
    assert "model_position" not in rp.report()["divergence"]
    assert format_divergence(rp.report()["divergence"]).startswith(
        "replay diverged at the 1st model call of this run ("
    )


def test_show_tells_kinds_apart(server: LocalServer, store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    server.route("/v1/traces/ingest", lambda r: Reply(b"", 204, None))
    with forkpoint.record(store=store) as rec:
        _chat(server.url, "one")
        httpx.post(server.url + "/v1/traces/ingest", json={"data": []})
        requests.get(server.url + "/lookup?q=1", timeout=5)
    render(forkpoint.Session.load(rec.session_path))
    out = capsys.readouterr().out
    assert "turn  1" in out and "turn  2" not in out
    assert "telemetry POST /v1/traces/ingest  → 204" in out
    assert "http    GET /lookup  → 200" in out


def test_an_amount_is_no_id_however_many_digits_it_has(server: LocalServer, store: Path) -> None:
    """Any number of ten digits or more was taken for an id: a transfer of 9,999,999,999 cents was
    served the recorded transfer of 1,000,000,000 ("replay ok"). A number is one only where it reads
    as a clock of these years (seconds, milliseconds, microseconds or nanoseconds)."""
    from forkpoint.replay.replayer import volatile

    assert volatile(time.time()) and volatile(time.time_ns()) and volatile(int(time.time() * 1000))
    assert not volatile(1_000_000_000) and not volatile(9_999_999_999) and not volatile(True)

    def pay(cents: int) -> Any:
        body = {"cents": cents, "ts": time.time()}
        return requests.post(server.url + "/pay", json=body, timeout=5).json()["path"]

    with forkpoint.record(store=store) as rec:
        pay(1_000_000_000)
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        assert pay(1_000_000_000) == "/pay"  # (the clock reading still differs only as an id)
    assert rp.report()["reproduced"] and len(rp.report()["id_drift"]) == 1
    with pytest.raises(Divergence) as exc, forkpoint.replay(rec.session_path):
        pay(9_999_999_999)
    assert "$.body.cents: 1000000000 → 9999999999" in str(exc.value), str(exc.value)


@pytest.mark.parametrize(
    ("field", "recorded", "replayed"),
    [
        ("card", "4111111111111111", "5555555555554444"),
        ("card", "2223003122003222", "2223000048400011"),  # (µs of 2040, read as a clock)
        ("phone", "+14155550100"[1:], "14155550199"),
        ("phone", "2125551234", "2065550199"),  # (seconds of 2037)
        ("commit", "3f786850e387550fdab836ed7e6dc881de23001b", "89e6c98d92887913cadf06b2adb97f26cde4849b"),
        ("customer", "cus_Q1w2E3r4T5y6U7i8", "cus_ZZZZE3r4T5y6U7i8"),
        ("branch", "feature-AddLoginPageFlow", "feature-AddLogoutPageFlow"),
    ],
)
def test_a_card_number_a_phone_number_or_a_commit_is_content_not_an_id(
    server: LocalServer, store: Path, field: str, recorded: str, replayed: str
) -> None:
    """A string of ten digits or more, or of 16 hex digits or more, was taken for an id: a charge
    to another card, or a checkout of another commit, was served the recorded answer ("replay ok").
    Digits are an id only as a clock reading, bare hex only under a key of a per-run id."""
    from forkpoint.replay.replayer import volatile

    assert volatile(str(int(time.time())), "ts") and not volatile(str(int(time.time())), "phone")
    assert not volatile("4111111111111111", "card") and volatile("req_" + "Q1w2E3r4T5y6U7i8", "q")
    assert volatile("3f786850e387550fdab836ed7e6dc881de23001b", "trace_id") and volatile("f" * 32, "nonce")
    assert not volatile("3f786850e387550fdab836ed7e6dc881de23001b", "commit")

    def post(value: str) -> Any:
        body = {field: value, "request_id": uuid.uuid4().hex}
        return requests.post(server.url + "/api/charge", json=body, timeout=5).json()["path"]

    with forkpoint.record(store=store) as rec:
        post(recorded)
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        assert post(recorded) == "/api/charge"  # (its request_id, a fresh uuid4 hex, still is an id)
    assert rp.report()["reproduced"] and len(rp.report()["id_drift"]) == 1
    with pytest.raises(Divergence) as exc, forkpoint.replay(rec.session_path):
        post(replayed)
    assert f"$.body.{field}: {recorded} → {replayed}" in str(exc.value), str(exc.value)


def test_plain_http_differing_only_in_ids_is_reported_unless_strict(server: LocalServer, store: Path) -> None:
    def run() -> Any:
        body = {"request_id": str(uuid.uuid4()), "ts": time.time(), "query": "weather in Paris"}
        return requests.post(server.url + "/search", json=body, timeout=5).json()["path"]

    with forkpoint.record(store=store) as rec:
        run()
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == "/search"
    report = rp.report()
    assert report["reproduced"] and len(report["id_drift"]) == 1
    changed = {c["path"] for c in report["id_drift"][0]["diff"]}
    assert changed == {"$.body.request_id", "$.body.ts"}
    assert "1 plain HTTP call served a recording that differed only in ids" in summary_line(report)

    with forkpoint.replay(rec.session_path, strict=True) as rp, pytest.raises(Divergence):
        run()
    # What is asked changed: a divergence even without strict.
    with forkpoint.replay(rec.session_path) as rp, pytest.raises(Divergence):
        requests.post(server.url + "/search", json={"request_id": "x", "query": "weather in Rome"}, timeout=5)
    assert rp.report()["divergence"] is not None


def test_http_inside_a_tool_belongs_to_the_tool(
    server: LocalServer, store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    @forkpoint.tool
    def fetch(q: str) -> str:
        return str(requests.get(server.url + "/page", params={"q": q}, timeout=5).json()["query"]["q"])

    with forkpoint.record(store=store) as rec:
        answer = _chat(server.url, "go")
        page = fetch("forkpoint")
    server.stop()
    session = forkpoint.Session.load(rec.session_path)
    inner = session.by_type("model_call")[1]
    tool = session.by_type("tool_call")[0]
    assert inner["parent_span_id"] == tool["span_id"]
    with forkpoint.replay(rec.session_path) as rp:  # the tool is not run: its request is not expected
        assert _chat(server.url, "go") == answer and fetch("forkpoint") == page == "forkpoint"
    report = rp.report()
    # The tool's request is covered by the served tool (neither asked for nor left unused).
    assert report["reproduced"] and report["covered"] == [inner["seq"]] and not report["unused"], report
    render(session)
    out = capsys.readouterr().out
    assert f"↳ #{inner['seq']} http    GET /page" in out


def test_a_key_in_the_url_is_not_part_of_the_match_key(server: LocalServer, store: Path) -> None:
    """Gemini clients send ``?key=``: a recording made with one key replays with another, and never
    stores it; the rest of the query still counts."""
    with forkpoint.record(store=store) as rec:
        live = httpx.get(
            server.url + "/v1beta/models",
            params={"key": "AIzaRECORDrecordRECORDrecord01234567890", "pageSize": "5"},
        ).json()
    server.stop()
    assert b"AIzaRECORD" not in (rec.session_path / "session.jsonl").read_bytes()
    with forkpoint.replay(rec.session_path) as rp:
        again = httpx.get(
            server.url + "/v1beta/models",
            params={"key": "AIzaREPLAYreplayREPLAYreplay65432109876", "pageSize": "5"},
        ).json()
    # (The server echoes the query: its copy of the key was scrubbed from the recorded answer too.)
    assert again["id"] == live["id"] and again["query"]["pageSize"] == "5"
    assert again["query"]["key"].startswith("[REDACTED:google-api-key:") and rp.report()["reproduced"]
    with forkpoint.replay(rec.session_path), pytest.raises(Divergence):
        httpx.get(
            server.url + "/v1beta/models",
            params={"key": "AIzaREPLAYreplayREPLAYreplay65432109876", "pageSize": "6"},
        )


def test_a_served_key_in_a_url_as_requests_encodes_it_replays(server: LocalServer, store: Path) -> None:
    """A key a tool fetched is served as its placeholder, and requests puts it in a URL with its
    colons as they are (``?key=%5BREDACTED:google-api-key:…%5D&n=a``): the scrubber read
    ``:…%5D&n=a`` as the value of an ``api-key:`` and replaced it, so the query lost ``n`` and the
    replay of the very run diverged ("- $.query[0]: ["n","a"]")."""
    server.route("/api", lambda r: json_reply({"ok": True}))

    @forkpoint.tool
    def vault() -> str:
        return "AIzaSyD" + "x" * 32

    def call() -> None:
        requests.get(f"{server.url}/api?key={vault()}&n=a").raise_for_status()

    with forkpoint.record(store=store) as rec:
        call()
    with forkpoint.replay(rec.session_path) as rp:
        call()
    assert rp.report()["reproduced"], summary_line(rp.report())
    placeholder = "%5BREDACTED:google-api-key:0123abcd%5D"
    assert (
        scrub_url(f"http://127.0.0.1/api?key={placeholder}&n=a")
        == f"http://127.0.0.1/api?key={placeholder}&n=a"
    )


@pytest.mark.parametrize(
    "name", ["access_key", "accessKey", "auth_token", "private_token", "subscription-key"]
)
def test_a_query_parameter_named_as_a_credential_is_scrubbed_and_not_keyed(
    server: LocalServer, store: Path, name: str
) -> None:
    """Not only the listed names (``key``, ``api_key``…): a parameter named like a credential, as a
    form field or JSON key would be scrubbed (weatherstack's ``access_key``, GitLab's
    ``private_token``, Azure's ``subscription-key``), never reaches disk and may differ on replay."""
    with forkpoint.record(store=store) as rec:
        live = httpx.get(server.url + "/weather", params={name: "RECORDsecret1", "q": "Oslo"}).json()
    server.stop()
    assert b"RECORDsecret1" not in b"".join(
        p.read_bytes() for p in rec.session_path.rglob("*") if p.is_file()
    )
    with forkpoint.replay(rec.session_path) as rp:
        again = httpx.get(server.url + "/weather", params={name: "REPLAYsecret2", "q": "Oslo"}).json()
    assert again["id"] == live["id"] and rp.report()["reproduced"]
    # A pagination cursor is no credential: it stays in the key.
    assert scrub_url(f"http://127.0.0.1/x?next_page_token=abc&{name}=s").startswith(
        "http://127.0.0.1/x?next_page_token=abc&"
    )


# ------------------------------------------------------------------------------------------- MCP


@pytest.fixture
def mcp_server(request: pytest.FixtureRequest) -> Iterator[tuple[str, Any]]:
    """A real MCP server (the ``mcp`` package's, streamable HTTP) on loopback, served by uvicorn;
    an indirect parameter is passed to ``streamable_http_app`` (``{"stateless_http": True}``)."""
    import uvicorn
    from mcp.server.mcpserver import MCPServer

    app_server: Any = MCPServer("calc")

    @app_server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    web = uvicorn.Server(
        uvicorn.Config(app_server.streamable_http_app(**getattr(request, "param", {})), log_level="warning")
    )
    thread = threading.Thread(target=web.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not web.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/mcp", web
    finally:
        web.should_exit = True
        thread.join(5)


def test_the_mcp_sdk_over_streamable_http_is_recorded_as_mcp_calls_and_replays(
    mcp_server: tuple[str, Any], store: Path
) -> None:
    """The SDK's ``ClientSession`` is recorded at the session (``forkpoint.integrations.mcp``): its
    transport's HTTP is neither a second record nor a connection forkpoint did not record. And
    forkpoint's own reading of the answers warns of nothing in the program's run (it read 1.x's
    ``serverInfo``, which 2.x's result says is deprecated once fastmcp is imported)."""
    import fastmcp  # noqa: F401  (pydantic-ai's MCP client: it makes mcp's results warn on 1.x names)

    url, web = mcp_server

    async def client() -> tuple[list[str], list[str]]:
        # Imported where forkpoint is active, as an agent run by ``forkpoint record`` does: a name
        # bound in a function before forkpoint started is out of the integration's reach.
        from mcp.client.session import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        async with streamable_http_client(url) as streams, ClientSession(*streams[:2]) as session:
            await session.initialize()
            listed = await session.list_tools()
            result = await session.call_tool("add", {"a": 2, "b": 3})
            return [t.name for t in listed.tools], [c.text for c in result.content]  # type: ignore[union-attr]

    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        with forkpoint.record(store=store) as rec:
            live = asyncio.run(client())
        with forkpoint.replay(rec.session_path) as rp:
            again = asyncio.run(client())
    web.should_exit = True
    time.sleep(0.3)
    ours = str(Path(forkpoint.__file__).parent)
    assert [str(w.message) for w in warned if w.filename.startswith(ours)] == []
    assert live == (["add"], ["5"])
    session = forkpoint.Session.load(rec.session_path)
    assert session.by_type("model_call") == []
    notes = session.by_type("note")  # type: ignore[call-overload]
    assert [n for n in notes if "unrecorded_connections" in n["data"]] == []
    calls = session.by_type("tool_call")
    assert {"mcp:initialize", "mcp:tools/list", "add"} <= {c["tool"] for c in calls}
    assert all(c["mcp"] for c in calls)
    assert again == live
    report = rp.report()
    assert report["reproduced"] and not report["unused"] and report["divergence"] is None, report


def _rpc(http: httpx.Client, url: str, headers: dict[str, str], message: dict[str, Any]) -> Any:
    """One JSON-RPC message POSTed as the streamable HTTP transport sends it: the answer's
    ``result`` (read from the event stream the server answers with), None for a notification."""
    reply = http.post(url, headers=headers, json=message)
    reply.raise_for_status()
    if "id" not in message:
        return None
    data = [line.removeprefix("data:") for line in reply.text.splitlines() if line.startswith("data:")]
    return json.loads(data[-1])["result"]


# Stateless: a stateful server's ``mcp-session-id`` answer header is not recorded (its name says it is
# a session id, dropped as a credential by forkpoint.redact), so a client that sends it back could
# not be replayed.
@pytest.mark.parametrize("mcp_server", [{"stateless_http": True}], indirect=True)
def test_an_mcp_client_of_its_own_over_streamable_http_is_recognized_and_replays(
    mcp_server: tuple[str, Any], store: Path
) -> None:
    """A client that speaks MCP over plain HTTP (not through the SDK's session): its requests are
    recorded as HTTP calls of kind ``mcp`` and served on replay with the server stopped."""
    url, web = mcp_server
    version = "2025-06-18"
    accept = {"accept": "application/json, text/event-stream"}
    hello = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "own", "version": "1"}}

    def client() -> tuple[Any, Any]:
        with httpx.Client(timeout=10) as http:
            init = _rpc(
                http, url, accept, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
            )
            headers = {**accept, "mcp-protocol-version": version}
            _rpc(http, url, headers, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            call = {"name": "add", "arguments": {"a": 2, "b": 3}}
            added = _rpc(
                http, url, headers, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}
            )
            return init["serverInfo"]["name"], added["structuredContent"]

    with forkpoint.record(store=store) as rec:
        live = client()
    web.should_exit = True
    time.sleep(0.3)
    assert live == ("calc", {"result": 5})
    session = forkpoint.Session.load(rec.session_path)
    calls = session.by_type("model_call")
    assert calls and all(c["summary"]["kind"] == "mcp" for c in calls)
    methods = [kinds.mcp_method(c["request"]["body"]) for c in calls if c["request"]["method"] == "POST"]
    assert methods == ["initialize", "notifications/initialized", "tools/call"]
    assert session.by_type("tool_call") == []
    with forkpoint.replay(rec.session_path) as rp:
        assert client() == live
    report = rp.report()
    assert report["reproduced"] and not report["unused"] and report["divergence"] is None, report


# --------------------------------------------------------------------- the Agents SDK, tracing on

AGENTS_SCRIPT = textwrap.dedent(
    '''
    """The OpenAI Agents SDK as its quick start writes it: tracing left on (its exporter pointed at the
    local server, as there is no other network here)."""
    import sys

    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
    from agents.tracing import get_trace_provider
    from agents.tracing.processors import default_exporter
    from openai import AsyncOpenAI

    BASE = sys.argv[1]
    default_exporter().endpoint = BASE + "/v1/traces/ingest"


    @function_tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b


    model = OpenAIChatCompletionsModel("m", AsyncOpenAI(base_url=BASE + "/v1", api_key="sk-test"))
    agent = Agent(name="adder", instructions="Use the tool.", tools=[add], model=model)
    result = Runner.run_sync(agent, "add 2 and 3")
    print(result.final_output)
    get_trace_provider().force_flush()
    '''
)


@pytest.mark.slow
def test_the_agents_sdk_with_tracing_on_replays_with_exit_0(tmp_path: Path) -> None:
    script = tmp_path / "agent.py"
    script.write_text(AGENTS_SCRIPT)
    store = tmp_path / "store"
    srv = LocalServer(chat_script=[[("add", {"a": 2, "b": 3})], "the sum is 5"])
    srv.route("/v1/traces/ingest", lambda r: Reply(b"", 204, None))
    env = {**os.environ, "OPENAI_API_KEY": "sk-test", "FORKPOINT_STORE": str(store)}
    cmd = [sys.executable, "-m", "forkpoint.cli"]
    rec = subprocess.run(
        [*cmd, "record", "--", sys.executable, str(script), srv.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    traces = [r for r in srv.requests if r["path"] == "/v1/traces/ingest"]
    srv.stop()
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout.strip() == "the sum is 5" and traces  # the SDK did upload its traces
    rep = subprocess.run([*cmd, "replay", "last"], env=env, capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr
    assert rep.stdout.strip() == "the sum is 5"
    assert "replay ok" in rep.stderr and "served from the recording" in rep.stderr


_AGENTS_TRACES_AFTER_THE_REPLAY = textwrap.dedent(
    """
    import sys

    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
    from agents.tracing import get_trace_provider
    from agents.tracing.processors import default_exporter
    from openai import AsyncOpenAI

    import forkpoint

    base, store = sys.argv[1], sys.argv[2]
    default_exporter().endpoint = base + "/v1/traces/ingest"


    @function_tool
    def add(a: int, b: int) -> int:
        \"\"\"Add two numbers.\"\"\"
        return a + b


    def run():
        model = OpenAIChatCompletionsModel("m", AsyncOpenAI(base_url=base + "/v1", api_key="sk-test"))
        agent = Agent(name="adder", instructions="Use the tool.", tools=[add], model=model)
        return Runner.run_sync(agent, "add 2 and 3").final_output


    with forkpoint.record(store=store) as rec:
        live = run()
    get_trace_provider().force_flush()  # (the recorded run's traces, sent as the program would)
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    assert rp.report()["reproduced"], rp.report()
    """
)


@pytest.mark.slow
def test_a_replay_in_a_process_that_goes_on_does_not_upload_the_replayed_agents_sdk_traces(
    tmp_path: Path,
) -> None:
    """The Agents SDK with tracing on (its default), replayed in a process that goes on (the pytest
    plugin, ``forkpoint.replay``): its trace processor holds the replayed run's traces and uploaded
    them to OpenAI's trace endpoint after the replay, when the process ended. The replay now
    flushes them while it still answers their upload."""
    srv = LocalServer(chat_script=[[("add", {"a": 2, "b": 3})], "the sum is 5"])
    srv.route("/v1/traces/ingest", lambda r: Reply(b"", 204, None))
    script = tmp_path / "traced.py"
    script.write_text(_AGENTS_TRACES_AFTER_THE_REPLAY)
    try:
        out = subprocess.run(
            [sys.executable, str(script), srv.url, str(tmp_path / "store")],
            env={**os.environ, "OPENAI_API_KEY": "sk-test"},
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
    finally:
        srv.stop()
    assert out.returncode == 0, out.stderr
    uploads = [r for r in srv.requests if r["path"] == "/v1/traces/ingest"]
    assert len(uploads) == 1, uploads  # the recorded run's, not the replayed run's too


_LANGSMITH_TRACES_AFTER_THE_REPLAY = textwrap.dedent(
    """
    import sys

    from langsmith import traceable
    from langsmith.run_trees import get_cached_client

    import forkpoint


    @traceable
    def answer(q):
        return q.upper()


    with forkpoint.record(store=sys.argv[1]) as rec:
        answer("hi")
    get_cached_client().flush()  # (the recorded run's trace, sent as the program would)
    with forkpoint.replay(rec.session_path) as rp:
        answer("hi")
    assert rp.report()["reproduced"], rp.report()
    """
)


def test_a_replay_in_a_process_that_goes_on_does_not_upload_the_replayed_langsmith_traces(
    tmp_path: Path,
) -> None:
    """LangSmith tracing on (a LangGraph agent's ``LANGSMITH_TRACING=true``), replayed in a process
    that goes on (the pytest plugin): its client's background thread uploaded the replayed run's
    trace after the replay, to LangSmith, from a test that was to be offline. The replay now
    flushes it while it still answers the upload."""
    srv = LocalServer()
    srv.route("*", lambda r: json_reply({}))
    script = tmp_path / "traced.py"
    script.write_text(_LANGSMITH_TRACES_AFTER_THE_REPLAY)
    env = {
        **os.environ,
        "LANGSMITH_TRACING": "true",
        "LANGSMITH_ENDPOINT": srv.url,
        "LANGSMITH_API_KEY": "lsv2_pt_" + "0" * 32 + "_" + "0" * 10,
    }
    try:
        out = subprocess.run([sys.executable, str(script), str(tmp_path / "store")],
                             env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)  # fmt: skip
    finally:
        srv.stop()
    assert out.returncode == 0, out.stderr
    uploads = [r for r in srv.requests if r["path"].startswith("/runs")]
    assert len(uploads) == 1, uploads  # the recorded run's, not the replayed run's too


def test_only_model_calls_are_genai_spans(server: LocalServer, store: Path) -> None:
    from forkpoint import otel

    server.route("/v1/traces/ingest", lambda r: Reply(b"", 204, None))
    with forkpoint.record(store=store) as rec:
        _chat(server.url, "one")
        httpx.post(server.url + "/v1/traces/ingest", json={"data": []})
    spans = {s.name: s.attributes for s in otel.plan(forkpoint.Session.load(rec.session_path))}
    assert "chat m" in spans and spans["POST"]["forkpoint.http.kind"] == "telemetry"
    assert not any(k.startswith("gen_ai.") for k in spans["POST"])


def test_langsmith_tracing_to_a_self_hosted_endpoint_is_telemetry(tmp_path: Path) -> None:
    """LangSmith only counted as telemetry at smith.langchain.com: traced to a self-hosted endpoint
    (``LANGSMITH_ENDPOINT``), its uploads, which carry run ids and times, were plain HTTP calls and
    the replay of an unchanged program diverged at them."""
    (tmp_path / "traced.py").write_text(
        "from langsmith import traceable\n\n@traceable\ndef answer(q):\n    return q.upper()\n\nprint(answer('hi'))\n"
    )
    srv = LocalServer()
    srv.route("*", lambda r: json_reply({}))
    env = {
        **os.environ,
        "LANGSMITH_TRACING": "true",
        "LANGSMITH_ENDPOINT": srv.url,
        "LANGSMITH_API_KEY": "lsv2_pt_" + "0" * 32 + "_" + "0" * 10,
        "FORKPOINT_STORE": str(tmp_path / "store"),
    }
    cmd = [sys.executable, "-m", "forkpoint.cli"]
    rec = subprocess.run([*cmd, "record", "--", sys.executable, "traced.py"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    uploads = [r for r in srv.requests if "/runs" in r["path"]]
    srv.stop()
    assert rec.returncode == 0 and rec.stdout == "HI\n", rec.stderr
    assert uploads and "(0 model calls" in rec.stderr, rec.stderr  # it traced, and none is a model call
    rep = subprocess.run(
        [*cmd, "replay", "last"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert rep.returncode == 0 and rep.stdout == "HI\n", rep.stderr
    assert "replay ok" in rep.stderr


def test_a_plain_http_divergence_is_not_called_a_model_call(server: LocalServer, store: Path) -> None:
    """A search API's request that changed was reported as "the 1st model call of this run"."""
    from forkpoint.replay.report import verdict

    server.route("/api/search", lambda r: json_reply({"hits": [r["query"].get("q")]}), method="GET")
    with forkpoint.record(store=store) as rec:
        httpx.get(server.url + "/api/search", params={"q": "cats"})
    with pytest.raises(forkpoint.Divergence) as caught, forkpoint.replay(rec.session_path) as rp:
        httpx.get(server.url + "/api/search", params={"q": "dogs"})
    said = " ".join(str(caught.value).split())
    assert "replay diverged at the 1st HTTP exchange of this run, a plain HTTP call (GET /api/search)" in said
    assert "model call" not in said, said
    # `check`'s verdict (its table, JUnit XML) and a fifo drift line said "model call #1"
    assert verdict(rp.report(), 0, 0)["call"].startswith(
        "HTTP exchange #1, a plain HTTP call (GET /api/search)"
    )


@pytest.mark.parametrize(
    "ctype",
    ["application/x-www-form-urlencoded; charset=utf-8", "Application/X-WWW-Form-URLEncoded"],
    ids=["botocore", "capitalized"],
)
def test_an_assume_role_whose_session_name_is_a_clock_reading_is_served(
    server: LocalServer, store: Path, ctype: str
) -> None:
    """botocore names the session of every role it assumes ``botocore-session-<epoch seconds>``
    (a profile's ``role_arn``, EKS's web identity): the form body of that STS request differed at
    every run, and no replay of a Bedrock agent on an assumed role got past it. A form's fields
    are compared one by one, and a session name that is a clock reading is an id. (A media type is
    case-insensitive, RFC 9110 8.3.1: a client that capitalized it diverged.)"""
    from forkpoint.replay.replayer import volatile

    assert volatile("botocore-session-1796503461", "RoleSessionName")
    assert not volatile("botocore-session-1796503461", "Description")
    assert not volatile("order-1796503461", "RoleSessionName".replace("Session", "Order"))

    def assume(at: int, role: str = "agent", session: str = "botocore-session") -> Any:
        form = f"Action=AssumeRole&Version=2011-06-15&RoleArn=arn%3Aaws%3Aiam%3A%3A1%3Arole%2F{role}"
        form += f"&RoleSessionName={session}-{at}"
        return requests.post(server.url + "/", data=form, headers={"content-type": ctype}, timeout=5).json()[
            "path"
        ]

    now = int(time.time())
    with forkpoint.record(store=store) as rec:
        assume(now)
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        assert assume(now + 2) == "/"
    assert rp.report()["reproduced"] and len(rp.report()["id_drift"]) == 1
    with pytest.raises(Divergence), forkpoint.replay(rec.session_path):
        assume(now + 2, "admin")
    with (
        pytest.raises(Divergence),
        forkpoint.replay(rec.session_path),
    ):  # (a name of its own, only its clock an id)
        assume(now + 2, session="alice")
