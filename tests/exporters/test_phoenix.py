"""A real Arize Phoenix server (the test extra's ``arize-phoenix``) receives forkpoint's traces: a
recorded session, an imported real cassette, and a live recording. The test starts ``phoenix serve``
on 127.0.0.1 (its own ports and working directory) and reads the spans back through Phoenix's REST
API (``/v1/projects/{project}/spans``) and, for the trace list and the Sessions page, its GraphQL
API (root spans' input and output, a session's first input and last output).

The Phoenix this installs (14.6, see pyproject.toml) does not convert ``gen_ai.*`` attributes: all
it shows of a span comes from forkpoint's own OpenInference attributes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

# Looked up, not imported: importing phoenix takes seconds, and only its server process needs it.
if importlib.util.find_spec("phoenix") is None:
    pytest.skip("needs arize-phoenix (the test extra)", allow_module_level=True)
pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the otel extra")

import forkpoint  # noqa: E402
from forkpoint.cli import main  # noqa: E402
from forkpoint.demo.agent import TASK, run_agent  # noqa: E402
from forkpoint.demo.server import ModelServer  # noqa: E402
from forkpoint.importers import import_file  # noqa: E402
from forkpoint.log import Session  # noqa: E402
from forkpoint.otel import plan, trace_id_for, variant_for  # noqa: E402
from forkpoint.providers import recorded_response, request_messages, response_text  # noqa: E402
from tests.realdata import CASSETTES  # noqa: E402

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Phoenix:
    """A ``phoenix serve`` process on 127.0.0.1, and its APIs."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "phoenix.log"
        env = {
            **os.environ,
            "PHOENIX_WORKING_DIR": str(workdir),
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(free_port()),
            "PHOENIX_TELEMETRY_ENABLED": "false",
        }
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "phoenix.server.main", "serve"], env=env, stdout=out, stderr=out
            )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        self.stop()
        tail = self.log.read_text(errors="replace")[-3000:]
        pytest.fail(f"phoenix serve did not come up on {self.url} (exit {self.proc.returncode}):\n{tail}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def get(self, path: str) -> Any:
        with urllib.request.urlopen(f"{self.url}{path}", timeout=10) as r:
            return json.load(r)

    def graphql(self, query: str) -> Any:
        req = urllib.request.Request(
            f"{self.url}/graphql",
            data=json.dumps({"query": query}).encode(),
            headers={"content-type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=10) as r:
            doc = json.load(r)
        assert not doc.get("errors"), doc["errors"]
        return doc["data"]

    def spans(self, project: str, trace_id: int, n: int) -> dict[str, dict[str, Any]]:
        """The spans of one trace, by span id (hex), once Phoenix has stored ``n`` of them."""
        hex_id = format(trace_id, "032x")
        deadline = time.monotonic() + 30
        while True:
            try:
                data = self.get(f"/v1/projects/{project}/spans?limit=1000")["data"]
            except OSError:
                data = []  # (the project appears with its first span)
            found = {s["context"]["span_id"]: s for s in data if s["context"]["trace_id"] == hex_id}
            if len(found) >= n or time.monotonic() > deadline:
                assert len(found) == n, f"{len(found)} of {n} spans of trace {hex_id} in Phoenix"
                return found
            time.sleep(0.3)

    def roots(self, project: str) -> list[dict[str, Any]]:
        """The trace list: every trace's root span with its input and output, as the UI asks for
        them (the filter on the root spans is spelled so that Phoenix 14 and 20 both take it)."""
        data = self.graphql(
            '{ projects { edges { node { name spans(first: 100, filterCondition: "parent_id is None") {'
            " edges { node { name spanKind trace { traceId } input { value mimeType } output { value mimeType }"
            " } } } } } } }"
        )
        for edge in data["projects"]["edges"]:
            if edge["node"]["name"] == project:
                return [e["node"] for e in edge["node"]["spans"]["edges"]]
        return []

    def sessions(self, project: str) -> dict[str, dict[str, Any]]:
        """The Sessions page: session id → traces, first input, last output."""
        data = self.graphql(
            "{ projects { edges { node { name sessions(first: 100) { edges { node {"
            " sessionId numTraces firstInput { value } lastOutput { value } } } } } } } }"
        )
        for edge in data["projects"]["edges"]:
            if edge["node"]["name"] == project:
                return {e["node"]["sessionId"]: e["node"] for e in edge["node"]["sessions"]["edges"]}
        return {}


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Phoenix]:
    server = Phoenix(tmp_path_factory.mktemp("phoenix"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def project(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """A Phoenix project of this test's own (Phoenix routes spans by this resource attribute)."""
    name = request.node.name.replace("[", "-").replace("]", "")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", f"openinference.project.name={name}")
    return name


def kinds(spans: dict[str, dict[str, Any]]) -> list[str]:
    return sorted(s["span_kind"] for s in spans.values())


def export(store: Path, session: Session, url: str, *args: str) -> None:
    result = CliRunner().invoke(main, ["export", session.id, "--store", str(store), "--otlp", url, *args])
    assert result.exit_code == 0, result.output


def record_demo(store: Path, work: Path, **options: Any) -> Session:
    with ModelServer(turns=2, seed=5) as srv, forkpoint.record(store=store, workspace=work, **options) as rec:
        run_agent(srv.base_url, work, echo=None)
    return Session.load(rec.session_path)


def check_demo_trace(phoenix: Phoenix, project: str, session: Session, variant: str) -> None:
    """What Phoenix shows of a recorded demo run exported with content."""
    models, tools = session.by_type("model_call"), session.by_type("tool_call")
    trace_id = trace_id_for(session.id, variant)
    spans = phoenix.spans(project, trace_id, 1 + len(models) + len(tools))
    assert kinds(spans) == sorted(["AGENT"] + ["LLM"] * len(models) + ["TOOL"] * len(tools))
    planned = {format(p.span_id, "016x"): p for p in plan(session, content=True, variant=variant)}
    assert set(spans) == set(planned)
    for span_id, span in spans.items():
        p = planned[span_id]
        assert span["name"] == p.name
        assert span["parent_id"] == (format(p.parent_id, "016x") if p.parent_id else None)
        a = span["attributes"]
        assert a["session.id"] == session.id
        if p.seq is None:
            continue
        event = next(e for e in session.calls() if e["seq"] == p.seq)
        if event["type"] == "model_call":
            usage = event["summary"]["usage"]
            assert a["llm.model_name"] == "demo-model"
            assert a["llm.token_count.prompt"] == usage["input_tokens"]
            assert a["llm.token_count.completion"] == usage["output_tokens"]
            assert a["llm.token_count.total"] == usage["input_tokens"] + usage["output_tokens"]
            assert a["llm.token_count.prompt_details.cache_read"] == usage["cache_read_input_tokens"]
            roles = [a[f"llm.input_messages.{i}.message.role"] for i in range(event["summary"]["n_messages"])]
            assert roles[:2] == ["system", "user"] and a["llm.input_messages.1.message.content"] == TASK
            text = response_text(event["request"]["url"], recorded_response(event))
            if text:
                assert a["output.value"] == a["llm.output_messages.0.message.content"] == text
            else:
                call = event["summary"]["tool_calls"][0]
                prefix = "llm.output_messages.0.message.tool_calls.0.tool_call"
                assert a[f"{prefix}.function.name"] == call["name"]
        else:
            assert a["tool.name"] == event["tool"]
            assert (
                json.loads(a["input.value"]) == event["args"] and a["input.mime_type"] == "application/json"
            )
            assert json.loads(a["output.value"]) == event["result"]
    # The trace list: the task in, the final answer out. The Sessions page: the same.
    final = response_text(models[-1]["request"]["url"], recorded_response(models[-1]))
    (root,) = [r for r in phoenix.roots(project) if r["trace"]["traceId"] == format(trace_id, "032x")]
    assert root["spanKind"] == "agent"
    assert (root["input"]["value"], root["output"]["value"]) == (TASK, final)
    page = phoenix.sessions(project)[session.id]
    assert (page["firstInput"]["value"], page["lastOutput"]["value"]) == (TASK, final)


def test_recorded_session(phoenix: Phoenix, project: str, tmp_path: Path) -> None:
    store = tmp_path / "store"
    session = record_demo(store, tmp_path / "work")
    export(store, session, phoenix.url, "--content")
    check_demo_trace(phoenix, project, session, variant_for(content=True))

    # Without --content: the same structure, no content; a trace of its own (other ids), so Phoenix,
    # which keeps the first copy of a span id, stores it beside the first.
    export(store, session, phoenix.url)
    spans = phoenix.spans(project, trace_id_for(session.id), 1 + len(session.calls()))
    assert kinds(spans) == ["AGENT", "LLM", "LLM", "LLM", "TOOL", "TOOL"]
    assert not any("input.value" in s["attributes"] for s in spans.values())
    # The same export again changes nothing: Phoenix already has every span id.
    export(store, session, phoenix.url)
    time.sleep(1)
    assert len(phoenix.roots(project)) == 2


def test_live_recording(phoenix: Phoenix, project: str, tmp_path: Path) -> None:
    session = record_demo(tmp_path / "store", tmp_path / "work", otlp=phoenix.url, otlp_content=True)
    check_demo_trace(phoenix, project, session, variant_for(content=True))


@pytest.mark.skipif(
    not CASSETTES.is_dir(), reason=f"real cassettes not found at {CASSETTES} (../shared/realdata is absent)"
)
def test_imported_cassette(phoenix: Phoenix, project: str, tmp_path: Path) -> None:
    session = Session.load(import_file(CASSETTES / "crewai__anthropic_tool_call.yaml", store=tmp_path))
    export(tmp_path, session, phoenix.url, "--content")
    models = session.by_type("model_call")
    variant = variant_for(content=True)
    trace_id = trace_id_for(session.id, variant)
    spans = phoenix.spans(project, trace_id, 1 + len(models))
    assert kinds(spans) == ["AGENT", "LLM", "LLM"]
    span_of = {p.seq: spans[format(p.span_id, "016x")] for p in plan(session, content=True, variant=variant)}
    for e in models:
        a = span_of[e["seq"]]["attributes"]
        usage = e["summary"]["usage"]
        assert a["llm.model_name"] == e["summary"]["response_model"]
        assert (a["llm.provider"], a["llm.system"]) == ("anthropic", "anthropic")
        # Anthropic's input_tokens leave out the cache; the conventions' prompt count includes it.
        assert a["llm.token_count.prompt"] == (
            usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
        )
        assert a["llm.token_count.completion"] == usage["output_tokens"]
        assert a["llm.token_count.prompt_details.cache_read"] == usage["cache_read_input_tokens"]
        assert a["llm.token_count.prompt_details.cache_write"] == usage["cache_creation_input_tokens"]
        (tool,) = e["request"]["body"]["tools"]
        assert json.loads(a["llm.tools.0.tool.json_schema"])["function"]["name"] == tool["name"]
        user = next(
            m for m in request_messages(e["request"]["url"], e["request"]["body"]) if m["role"] == "user"
        )
        assert (
            a["llm.input_messages.0.message.role"] == "user"
        )  # (the cassette's agent sent no system prompt)
        assert a["llm.input_messages.0.message.content"] == user["text"]
    # One clock: the trace sits at the time the cassette was recorded, and lasts seconds, not months.
    root = span_of[None]
    assert when(root["start_time"]) == when(session.header["created"])
    assert when(root["end_time"]) - when(session.end()["ts"]) < timedelta(milliseconds=1)
    first_user = next(
        m
        for m in request_messages(models[0]["request"]["url"], models[0]["request"]["body"])
        if m["role"] == "user"
    )
    (listed,) = [r for r in phoenix.roots(project) if r["trace"]["traceId"] == format(trace_id, "032x")]
    assert listed["input"]["value"] == first_user["text"]
    assert listed["output"]["value"] == response_text(
        models[-1]["request"]["url"], recorded_response(models[-1])
    )


def when(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))
