"""``forkpoint export``: a recorded session as an OpenTelemetry trace (GenAI semantic conventions).

The demo agent is recorded in-process against the demo model server (with a workspace, so the
session has checkpoints, and a note); the export goes through the SDK's OTLP/HTTP exporter to an
OTLP receiver on 127.0.0.1 (the tests' local server with a ``/v1/traces`` route), and the test
decodes the protobuf request it received.

Recorded shape (``ModelServer(turns=2)``): checkpoint, model call (-> write_file), write_file,
checkpoint, model call (-> run_tests), run_tests, checkpoint, model call (text answer), end.
"""

from __future__ import annotations

import gzip
import json
import re
import socket
import time
from dataclasses import dataclass
from datetime import datetime
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
from opentelemetry.proto.common.v1.common_pb2 import AnyValue  # noqa: E402
from opentelemetry.proto.trace.v1.trace_pb2 import Span  # noqa: E402

import forkpoint  # noqa: E402
from forkpoint import values  # noqa: E402
from forkpoint.cli import main  # noqa: E402
from forkpoint.demo.agent import SYSTEM_PROMPT, TASK, run_agent  # noqa: E402
from forkpoint.demo.server import ModelServer  # noqa: E402
from forkpoint.log import Session  # noqa: E402
from forkpoint.otel import otlp_traces_url, plan, span_id_for, trace_id_for, variant_for  # noqa: E402
from forkpoint.otel.sdk import partial_success  # noqa: E402
from forkpoint.providers import recorded_response, response_text  # noqa: E402
from tests.modelserver import LocalServer, Reply  # noqa: E402

CONTENT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.tool.definitions",
    "gen_ai.tool.description",
    "input.value",
    "output.value",
    "tool.parameters",
    "tool.description",
    "process.command_args",
    "forkpoint.note.text",
    "forkpoint.override",
}
#: OpenInference attributes whose names carry a message or tool index.
CONTENT_PREFIXES = ("llm.input_messages.", "llm.output_messages.", "llm.tools.")
NOTE = "exporting this session"
FAILING = 'tool:run_tests.result={"passed":0,"failed":2,"output":"FAIL"}'


# --------------------------------------------------------------------------- a local OTLP/HTTP receiver


@pytest.fixture
def receiver(server: LocalServer) -> LocalServer:
    """The shared local server (tests/modelserver.py) as an OTLP/HTTP receiver: ``POST /v1/traces``
    is accepted, every other path is a 404."""
    server.route("*", lambda request: Reply(b"", 404, ctype=None))
    ok = ExportTraceServiceResponse().SerializeToString()
    server.route("/v1/traces", lambda request: Reply(ok, ctype="application/x-protobuf"), method="POST")
    return server


# --------------------------------------------------------------------------- recorded sessions


@dataclass
class Recorded:
    store: Path
    session: Session
    child: Session  # a what-if run of it: run_tests overridden, the model then live


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Recorded:
    base = tmp_path_factory.mktemp("otel")
    store, work = base / "store", base / "work"
    with ModelServer(turns=2, seed=5) as srv:
        with forkpoint.record(store=store, workspace=work) as rec:
            forkpoint.note(NOTE, data={"k": 1})
            run_agent(srv.base_url, work, echo=None)
        session = Session.load(rec.session_path)
        with forkpoint.replay(session, overrides=[FAILING], on_divergence="live") as rp:
            run_agent(srv.base_url, work, echo=None)
    child = Session.load(rp.report()["child_session"])
    return Recorded(store, session, child)


# --------------------------------------------------------------------------- helpers


def value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def attrs(obj: Any) -> dict[str, Any]:
    return {a.key: value(a.value) for a in obj.attributes}


def spans_of(receiver: LocalServer) -> tuple[list[Span], bytes]:
    assert len(receiver.requests) == 1, [r["path"] for r in receiver.requests]
    path, headers, body = (receiver.requests[0][k] for k in ("path", "headers", "raw"))
    assert path == "/v1/traces"
    if headers.get("content-encoding") == "gzip":
        body = gzip.decompress(body)
    assert headers["content-type"] == "application/x-protobuf"
    req = ExportTraceServiceRequest.FromString(body)
    spans = [s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
    return spans, body


def ns(ts: str) -> int:
    dt = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    return int(dt.timestamp()) * 1_000_000_000 + dt.microsecond * 1000


def sid(hex16: str) -> bytes:
    return bytes.fromhex(hex16)


def export(store: Path, session: Session, *args: str) -> Any:
    result = CliRunner().invoke(main, ["export", session.id, "--store", str(store), *args])
    assert result.exit_code == 0, result.output
    return result


def content_keys(a: dict[str, Any]) -> set[str]:
    return (CONTENT_KEYS & set(a)) | {k for k in a if k.startswith(CONTENT_PREFIXES)}


def span_of(by_id: dict[bytes, Span], recorded: str, variant: str = "") -> Span:
    """The exported span of the recorded span id ``recorded`` (ids derived for ``variant``)."""
    return by_id[span_id_for(recorded, "", variant).to_bytes(8, "big")]


# --------------------------------------------------------------------------- tests


def test_export_follows_genai_conventions(recorded: Recorded, receiver: LocalServer) -> None:
    s = recorded.session
    export(recorded.store, s, "--otlp", receiver.url)
    spans, raw = spans_of(receiver)
    models = s.by_type("model_call")
    tools = s.by_type("tool_call")
    assert len(spans) == 1 + len(models) + len(tools)

    # One trace, its id derived from the session id.
    trace_id = trace_id_for(s.id).to_bytes(16, "big")
    assert {sp.trace_id for sp in spans} == {trace_id}
    by_id = {sp.span_id: sp for sp in spans}
    assert len(by_id) == len(spans)

    (root,) = [sp for sp in spans if not sp.parent_span_id]
    assert root.name == "invoke_agent" and root.kind == Span.SPAN_KIND_INTERNAL
    assert root.span_id == sid(s.header["span_id"])
    ra = attrs(root)
    assert ra["gen_ai.operation.name"] == "invoke_agent"
    assert ra["gen_ai.conversation.id"] == s.id
    assert ra["gen_ai.provider.name"] == "openai"
    assert ra["forkpoint.exit_code"] == 0
    # What Phoenix (OpenInference) and Langfuse read.
    assert ra["openinference.span.kind"] == "AGENT" and ra["session.id"] == s.id

    # Model calls: "chat demo-model", CLIENT, children of the root, gen_ai.* request/response/usage.
    for e in models:
        sp = by_id[sid(e["span_id"])]
        a = attrs(sp)
        summary = e["summary"]
        assert sp.name == "chat demo-model"
        assert sp.kind == Span.SPAN_KIND_CLIENT
        assert sp.parent_span_id == root.span_id
        assert a["gen_ai.operation.name"] == "chat"
        assert a["gen_ai.provider.name"] == "openai"
        assert a["gen_ai.request.model"] == "demo-model"
        assert a["gen_ai.response.model"] == summary["response_model"] == "demo-model"
        assert a["gen_ai.response.id"].startswith("chatcmpl-")
        assert a["gen_ai.response.finish_reasons"] == [summary["stop_reason"]]
        assert a["gen_ai.usage.input_tokens"] == summary["usage"]["input_tokens"]
        assert a["gen_ai.usage.output_tokens"] == summary["usage"]["output_tokens"]
        assert a["gen_ai.request.stream"] is True
        assert a["gen_ai.response.time_to_first_chunk"] == pytest.approx(e["response"]["chunks"][0][0] / 1000)
        assert a["server.address"] == "127.0.0.1" and isinstance(a["server.port"], int)
        assert a["gen_ai.conversation.id"] == s.id
        assert a["forkpoint.seq"] == e["seq"]
        # Parameters the request did not set are not invented.
        assert not {"gen_ai.request.temperature", "gen_ai.request.top_p", "gen_ai.request.seed"} & set(a)
        # The prompt-cache count the response reports (the demo's prompt_tokens_details.cached_tokens).
        assert a["gen_ai.usage.cache_read.input_tokens"] == summary["usage"]["cache_read_input_tokens"] == 0
        # OpenInference: kind, session, model, parameters, token counts.
        assert a["openinference.span.kind"] == "LLM" and a["session.id"] == s.id
        assert (a["llm.model_name"], a["llm.provider"], a["llm.system"]) == ("demo-model", "openai", "openai")
        assert json.loads(a["llm.invocation_parameters"]) == {"stream": True}
        assert a["llm.token_count.prompt"] == summary["usage"]["input_tokens"]
        assert a["llm.token_count.completion"] == summary["usage"]["output_tokens"]
        assert a["llm.token_count.total"] == a["llm.token_count.prompt"] + a["llm.token_count.completion"]
        assert a["llm.token_count.prompt_details.cache_read"] == 0
    assert [attrs(by_id[sid(e["span_id"])])["gen_ai.response.finish_reasons"] for e in models] == [
        ["tool_calls"],
        ["tool_calls"],
        ["stop"],
    ]

    # Tool calls: "execute_tool NAME", nested under the model call whose tool_calls they answer.
    for e, model in zip(tools, models, strict=False):
        sp = by_id[sid(e["span_id"])]
        a = attrs(sp)
        (asked,) = model["summary"]["tool_calls"]
        assert sp.name == f"execute_tool {e['tool']}"
        assert sp.kind == Span.SPAN_KIND_INTERNAL
        assert sp.parent_span_id == sid(model["span_id"])
        assert a["gen_ai.operation.name"] == "execute_tool"
        assert a["gen_ai.tool.name"] == e["tool"] == asked["name"]
        assert a["gen_ai.tool.call.id"] == asked["id"]
        assert (a["openinference.span.kind"], a["tool.name"], a["tool.id"]) == (
            "TOOL",
            e["tool"],
            asked["id"],
        )
        assert a["session.id"] == s.id

    # Timing: the recorded ts and duration_ms; every span inside the recorded window.
    window = (ns(s.header["created"]), ns(s.end()["ts"]) + 1_000_000)
    for e in [*models, *tools]:
        sp = by_id[sid(e["span_id"])]
        assert sp.start_time_unix_nano == ns(e["ts"])
        assert abs((sp.end_time_unix_nano - sp.start_time_unix_nano) - e["duration_ms"] * 1e6) <= 1e6
    for sp in spans:
        assert window[0] <= sp.start_time_unix_nano <= sp.end_time_unix_nano <= window[1]
        assert root.start_time_unix_nano <= sp.start_time_unix_nano
        assert sp.end_time_unix_nano <= root.end_time_unix_nano

    # Checkpoints and the note are events of the root span.
    names = [ev.name for ev in root.events]
    assert names.count("forkpoint.checkpoint") == len(s.by_type("checkpoint")) == 3
    assert names.count("forkpoint.note") == 1
    cp = next(ev for ev in root.events if ev.name == "forkpoint.checkpoint")
    assert attrs(cp)["forkpoint.checkpoint.boundary"] == "resumable"

    # No content by default: no content attribute, and no prompt, tool argument or note text anywhere.
    for sp in spans:
        assert not content_keys(attrs(sp)), sp.name
        for ev in sp.events:
            assert not content_keys(attrs(ev))
    for secret in (TASK, SYSTEM_PROMPT[:40], NOTE, "Scratch test reproducing"):
        assert secret.encode() not in raw


def test_export_with_content(recorded: Recorded, receiver: LocalServer) -> None:
    s = recorded.session
    export(recorded.store, s, "--otlp", f"{receiver.url}/v1/traces", "--content")
    spans, raw = spans_of(receiver)
    by_id = {sp.span_id: sp for sp in spans}
    models = s.by_type("model_call")
    tools = s.by_type("tool_call")
    variant = variant_for(content=True)  # another option, other ids (see test_ids_follow_the_options)
    assert {sp.trace_id for sp in spans} == {trace_id_for(s.id, variant).to_bytes(16, "big")}

    first = attrs(span_of(by_id, models[0]["span_id"], variant))
    inp = json.loads(first["gen_ai.input.messages"])
    assert [m["role"] for m in inp] == ["system", "user"]
    assert inp[1]["parts"] == [{"type": "text", "content": TASK}]
    out = json.loads(first["gen_ai.output.messages"])
    (call,) = out[0]["parts"]
    assert call["type"] == "tool_call" and call["name"] == "write_file"
    assert call["arguments"] == tools[0]["args"]  # deserialized to an object, as the conventions ask
    assert out[0]["finish_reason"] == "tool_calls"
    # The tools the request offered, in the conventions' shape and as OpenInference's llm.tools.
    body_tools = models[0]["request"]["body"]["tools"]
    defs = json.loads(first["gen_ai.tool.definitions"])
    assert defs == [
        {"type": "function", **{k: t["function"][k] for k in ("name", "description", "parameters")}}
        for t in body_tools
    ]
    assert [json.loads(first[f"llm.tools.{i}.tool.json_schema"]) for i in range(len(defs))] == body_tools
    # OpenInference messages, flattened: the system prompt, the task; out: the tool call.
    assert (first["llm.input_messages.0.message.role"], first["llm.input_messages.1.message.role"]) == (
        "system",
        "user",
    )
    assert first["llm.input_messages.1.message.content"] == TASK
    prefix = "llm.output_messages.0.message.tool_calls.0.tool_call"
    assert first[f"{prefix}.function.name"] == "write_file" and first[f"{prefix}.id"] == call["id"]
    assert json.loads(first[f"{prefix}.function.arguments"]) == tools[0]["args"]
    # input.value: the messages in; output.value: the answer (here the tool call, as JSON).
    assert first["input.mime_type"] == "application/json"
    assert json.loads(first["input.value"])[1]["parts"][0]["content"] == TASK
    assert first["output.mime_type"] == "application/json"
    assert json.loads(first["output.value"])[0]["name"] == "write_file"

    second = attrs(span_of(by_id, models[1]["span_id"], variant))
    msgs = json.loads(second["gen_ai.input.messages"])
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "tool"]
    assert msgs[2]["parts"][0]["type"] == "tool_call"
    response_part = msgs[3]["parts"][0]
    assert response_part["type"] == "tool_call_response"
    assert response_part["id"] == models[0]["summary"]["tool_calls"][0]["id"]
    assert second["llm.input_messages.3.message.role"] == "tool"
    assert second["llm.input_messages.3.message.tool_call_id"] == response_part["id"]

    last = models[-1]
    final_attrs = attrs(span_of(by_id, last["span_id"], variant))
    text = response_text(last["request"]["url"], recorded_response(last))
    assert text
    assert json.loads(final_attrs["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [{"type": "text", "content": text}], "finish_reason": "stop"}
    ]
    assert (final_attrs["output.value"], final_attrs["output.mime_type"]) == (text, "text/plain")
    assert final_attrs["llm.output_messages.0.message.content"] == text

    for e, model in zip(tools, models, strict=False):
        a = attrs(span_of(by_id, e["span_id"], variant))
        assert json.loads(a["gen_ai.tool.call.arguments"]) == e["args"]
        assert json.loads(a["gen_ai.tool.call.result"]) == e["result"]
        assert (json.loads(a["input.value"]), a["input.mime_type"]) == (e["args"], "application/json")
        assert (json.loads(a["output.value"]), a["output.mime_type"]) == (e["result"], "application/json")
        # The tool's definition in the request that asked for it.
        (offered,) = [
            t["function"] for t in model["request"]["body"]["tools"] if t["function"]["name"] == e["tool"]
        ]
        assert a["tool.description"] == offered["description"]
        assert json.loads(a["tool.parameters"]) == offered["parameters"]
    root = next(sp for sp in spans if not sp.parent_span_id)
    ra = attrs(root)
    assert "process.command_args" in ra
    # The task in, the final answer out: what a trace list shows.
    assert (ra["input.value"], ra["input.mime_type"]) == (TASK, "text/plain")
    assert (ra["output.value"], ra["output.mime_type"]) == (text, "text/plain")
    note = next(ev for ev in root.events if ev.name == "forkpoint.note")
    assert attrs(note)["forkpoint.note.text"] == NOTE
    assert TASK.encode() in raw


def test_text_tool_results_are_text(tmp_path: Path) -> None:
    """A tool that returns text is exported as that text (not JSON-quoted), marked text/plain."""

    @forkpoint.tool
    def read_file(path: str) -> str:
        return "[File: a.py]\r\nline 1"

    with forkpoint.record(store=tmp_path) as rec:
        read_file("a.py")
    (_, tool) = plan(Session.load(rec.session_path), content=True)
    a = tool.attributes
    assert a["gen_ai.tool.call.result"] == a["output.value"] == "[File: a.py]\r\nline 1"
    assert a["output.mime_type"] == "text/plain"
    assert json.loads(a["gen_ai.tool.call.arguments"]) == json.loads(a["input.value"]) == {"path": "a.py"}


@dataclass
class Forecast:
    city: str
    at: datetime


def test_typed_tool_values_are_exported_as_show_prints_them(tmp_path: Path) -> None:
    """A tool returning a dataclass (with a datetime) was exported as ``{"Forecast": {…, "at":
    {"datetime": "…"}}}``, a form only the export still used: it goes out in the stored form, as
    ``forkpoint show``, ``show --json`` and the HTML page show it and an override takes it."""

    @forkpoint.tool
    def forecast(city: str) -> Forecast:
        return Forecast(city, datetime(2026, 12, 1, 9, 30))

    with forkpoint.record(store=tmp_path) as rec:
        forecast("Rome")
    (_, tool) = plan(Session.load(rec.session_path), content=True)
    a = tool.attributes
    assert a["gen_ai.tool.call.result"] == a["output.value"]
    assert json.loads(a["output.value"]) == values.encode(Forecast("Rome", datetime(2026, 12, 1, 9, 30)))


def record_weather_out_of_order(store: Path, server: LocalServer, *, defaults: bool) -> Path:
    """A session where the model asks for the weather in Paris and London at once and London's call
    finishes first (``defaults``: the tool has a default parameter, recorded filled in)."""
    if defaults:

        @forkpoint.tool
        def get_weather(city: str, units: str = "C") -> str:
            return f"{city}: rain ({units})"

    else:

        @forkpoint.tool
        def get_weather(city: str) -> str:
            return f"{city}: rain"

    server.chat_script = [[("get_weather", {"city": "Paris"}), ("get_weather", {"city": "London"})], "done"]
    client = openai.OpenAI(base_url=server.openai_base_url, api_key="sk-test")
    with forkpoint.record(store=store) as rec:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "weather?"}])
        get_weather("London")  # (the second call finished first)
        get_weather("Paris")
    return rec.session_path


@pytest.mark.parametrize("defaults", [False, True])
def test_parallel_tool_calls_answered_out_of_order_get_their_own_call_ids(
    tmp_path: Path, server: LocalServer, defaults: bool
) -> None:
    """Parallel calls of one tool finish in any order; a tool span took the id of the first
    unanswered call of its name, so London's result showed under Paris's ``gen_ai.tool.call.id``.
    With a default parameter the recorded arguments (filled in) never equalled the model's, and
    every span fell back to that first call."""
    spans = plan(Session.load(record_weather_out_of_order(tmp_path, server, defaults=defaults)), content=True)
    ids = {
        json.loads(s.attributes["gen_ai.tool.call.arguments"])["city"]: s.attributes["gen_ai.tool.call.id"]
        for s in spans
        if s.name == "execute_tool get_weather"
    }
    assert ids == {"Paris": "call_0_0", "London": "call_0_1"}


def test_tool_calls_of_concurrent_runs_are_nested_under_their_own_model_calls(
    tmp_path: Path, server: LocalServer
) -> None:
    """Two runs (two LangGraph graphs in two threads) each asked the model, then ran the same roll:
    a tool span went under the latest model call with an unanswered roll, so run a's roll showed
    under run b's model call with b's ``gen_ai.tool.call.id`` (and in the HTML page, as asked by
    it). The id the model gave each call, recorded with it (``call_id``), places it now."""
    from forkpoint.html import view_model
    from forkpoint.integrations.base import run_tool_sync
    from tests.modelserver import chat_completion, json_reply

    def ask(request: dict[str, Any]) -> Any:  # (each run's own id, as OpenAI gives ids)
        user = request["body"]["messages"][0]["content"]
        return json_reply(
            chat_completion(
                f"chatcmpl-{user}", "m", tool_calls=[("roll", {"sides": 6})], call_ids=[f"call_{user}"]
            )
        )

    server.route("/v1/chat/completions", ask)
    client = openai.OpenAI(base_url=server.openai_base_url, api_key="sk-test")
    with forkpoint.record(store=tmp_path) as rec:
        for user in "ab":
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": user}])
        for roll, user in enumerate("ab"):
            run_tool_sync("roll", {"sides": 6}, lambda roll=roll: roll, call_id=f"call_{user}")
    session = Session.load(rec.session_path)
    spans = plan(session, content=True)
    models = {s.span_id: s.attributes["gen_ai.response.id"] for s in spans if s.name == "chat m"}
    rolls = {
        s.attributes["gen_ai.tool.call.result"]: (models[s.parent_id], s.attributes["gen_ai.tool.call.id"])
        for s in spans
        if s.name == "execute_tool roll"
    }
    assert rolls == {"0": ("chatcmpl-a", "call_a"), "1": ("chatcmpl-b", "call_b")}, rolls
    asked = {e["seq"]: e["response"]["body"]["id"] for e in session.by_type("model_call")}
    shown = [
        (e.get("call_id"), asked[e["requested_by"]])
        for e in view_model(session)["events"]
        if e["type"] == "tool_call"
    ]
    assert shown == [("call_a", "chatcmpl-a"), ("call_b", "chatcmpl-b")], shown


def record_sub_agent(store: Path, make_server: Any) -> Path:
    """A session where the top-level model asks for ``research`` and ``get_weather`` (Paris), and
    ``research``'s body runs a sub-agent whose model asks for ``get_weather`` (Oslo) too."""
    top = openai.OpenAI(
        base_url=make_server(
            chat_script=[[("research", {"topic": "rain"}), ("get_weather", {"city": "Paris"})], "done"]
        ).openai_base_url,
        api_key="sk-test",
    )
    sub = openai.OpenAI(
        base_url=make_server(chat_script=[[("get_weather", {"city": "Oslo"})], "wet"]).openai_base_url,
        api_key="sk-test",
    )

    @forkpoint.tool
    def get_weather(city: str) -> str:
        return f"{city}: rain"

    @forkpoint.tool
    def research(topic: str) -> str:
        asked = sub.chat.completions.create(model="sub", messages=[{"role": "user", "content": topic}])
        for call in asked.choices[0].message.tool_calls or []:
            get_weather(**json.loads(call.function.arguments))
        return "wet"

    with forkpoint.record(store=store) as rec:
        top.chat.completions.create(model="top", messages=[{"role": "user", "content": "go"}])
        research("rain")
        get_weather("Paris")
    return rec.session_path


def test_a_sub_agents_tool_call_is_nested_under_the_model_call_that_asked_for_it(
    tmp_path: Path, make_server: Any
) -> None:
    """A tool whose body runs a sub-agent: the sub-agent's tool call stayed a sibling of the model
    call that asked for it, with no ``gen_ai.tool.call.id`` (only top-level tools were matched)."""
    spans = plan(Session.load(record_sub_agent(tmp_path, make_server)), content=True)
    named = {s.name: s for s in spans if s.name != "execute_tool get_weather"}
    weather = {
        json.loads(s.attributes["gen_ai.tool.call.arguments"])["city"]: s
        for s in spans
        if s.name == "execute_tool get_weather"
    }
    inner, outer, top = named["chat sub"], named["execute_tool research"], named["chat top"]
    assert inner.parent_id == outer.span_id and outer.parent_id == top.span_id
    assert weather["Oslo"].parent_id == inner.span_id
    assert weather["Oslo"].attributes["gen_ai.tool.call.id"] == "call_0_0"
    assert weather["Paris"].parent_id == top.span_id
    assert weather["Paris"].attributes["gen_ai.tool.call.id"] == "call_0_1"


def test_a_program_that_died_of_an_exception_names_it_on_the_root_span() -> None:
    """``forkpoint record -- CMD`` keeps the exception that ended the program in the end event's
    ``uncaught`` (its ``reason`` is null): the root span said ``error.type = _OTHER``."""
    from forkpoint.otel import TraceBuilder

    builder = TraceBuilder({"session_id": "s1", "created": "2026-01-01T00:00:00.000Z"})
    builder.add(
        {
            "seq": 1,
            "type": "end",
            "ts": "2026-01-01T00:00:01.000Z",
            "exit_code": 1,
            "reason": None,
            "uncaught": [{"type": "ValueError", "module": "builtins", "message": "hunter2"}],
        }
    )
    root = builder.finish()
    assert root.attributes["error.type"] == "ValueError"
    assert root.status == "error" and root.status_message == "exit code 1 (ValueError)"


def test_file_export_is_otlp_json_and_deterministic(recorded: Recorded, tmp_path: Path) -> None:
    s = recorded.session
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    export(recorded.store, s, "--file", str(a))
    export(recorded.store, s, "--file", str(b))
    docs = [json.loads(p.read_text()) for p in (a, b)]
    assert a.read_text().count("\n") == 1  # one ExportTraceServiceRequest per line

    def ids(doc: dict[str, Any]) -> list[tuple[str, str, str, str]]:
        return [
            (sp["traceId"], sp["spanId"], sp.get("parentSpanId", ""), sp["name"])
            for rs in doc["resourceSpans"]
            for ss in rs["scopeSpans"]
            for sp in ss["spans"]
        ]

    assert ids(docs[0]) == ids(docs[1])
    rows = ids(docs[0])
    assert {r[0] for r in rows} == {format(trace_id_for(s.id), "032x")}
    # The calls' spans in order, the root last (it is known once every event is read).
    assert rows[-1][1] == s.header["span_id"] and rows[-1][3] == "invoke_agent"
    assert "invoke_agent" not in [r[3] for r in rows[:-1]]
    spans = [sp for rs in docs[0]["resourceSpans"] for ss in rs["scopeSpans"] for sp in ss["spans"]]
    assert {sp["kind"] for sp in spans} == {1, 3}  # SPAN_KIND_INTERNAL, SPAN_KIND_CLIENT
    model = next(sp for sp in spans if sp["name"] == "chat demo-model")
    keys = {kv["key"] for kv in model["attributes"]}
    assert {"gen_ai.operation.name", "gen_ai.provider.name", "gen_ai.usage.input_tokens"} <= keys
    assert docs[0]["resourceSpans"][0]["scopeSpans"][0]["scope"]["name"] == "forkpoint"


def test_a_large_file_export_is_in_lines_the_collector_reads(tmp_path: Path) -> None:
    """The whole trace was one line: with content a session soon passes 1 MiB (the demo agent at 25
    turns did), and the Collector's otlpjsonfile receiver cuts a line past its max_log_size (1 MiB
    by default) into pieces none of which parses. Lines are one request each, of at most BATCH
    spans and 1 MiB, and hold every span once, in order."""
    from forkpoint.otel.sdk import BATCH

    max_log_size = 1 << 20  # the receiver's default

    @forkpoint.tool
    def fetch(page: int) -> str:
        return f"page {page} " + "x" * (300_000 if page < 4 else 10)

    with forkpoint.record(store=tmp_path / "store") as rec:
        for page in range(BATCH + 10):
            fetch(page)
    s = Session.load(rec.session_path)
    out = tmp_path / "spans.jsonl"
    export(tmp_path / "store", s, "--file", str(out), "--content")
    lines = out.read_bytes().splitlines()
    assert len(lines) > 2 and all(len(line) < max_log_size for line in lines), [len(x) for x in lines]
    names = []
    for line in lines:
        request = json.loads(line)
        spans = [sp for rs in request["resourceSpans"] for ss in rs["scopeSpans"] for sp in ss["spans"]]
        assert (
            0 < len(spans) <= BATCH
            and request["resourceSpans"][0]["scopeSpans"][0]["scope"]["name"] == "forkpoint"
        )
        names += [sp["name"] for sp in spans]
    assert names == ["execute_tool fetch"] * (BATCH + 10) + ["invoke_agent"]


def _pages_session(tmp_path: Path, pages: int, size: int) -> Session:
    @forkpoint.tool
    def fetch(page: int) -> str:
        return f"page {page} " + "x" * size

    with forkpoint.record(store=tmp_path / "store") as rec:
        for page in range(pages):
            fetch(page)
    return Session.load(rec.session_path)


def test_an_export_holds_one_batch_of_spans_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The export built every span of the session before writing any (9.4 GB of memory for a
    1,000-turn session exported with content, each span carrying the conversation so far): the SDK
    spans are made a batch at a time now, each batch of at most 1 MiB of text unless one span is
    more, and the file still holds every span once."""
    from forkpoint.exporters.otel import LINE_BYTES
    from forkpoint.otel.sdk import SpanFactory

    s = _pages_session(tmp_path, 40, 100_000)
    made: list[list[int]] = []
    real = SpanFactory.spans

    def spans(self: SpanFactory, plans: Any) -> list[Any]:
        made.append([sum(len(v) for v in p.attributes.values() if isinstance(v, str)) for p in plans])
        return real(self, plans)

    monkeypatch.setattr(SpanFactory, "spans", spans)
    out = tmp_path / "spans.jsonl"
    export(tmp_path / "store", s, "--file", str(out), "--content")
    assert len(made) > 1 and all(len(b) == 1 or sum(b) <= LINE_BYTES for b in made), made
    names = [
        sp["name"]
        for line in out.read_bytes().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for sp in ss["spans"]
    ]
    assert names == ["execute_tool fetch"] * 40 + ["invoke_agent"]


def test_an_export_that_fails_midway_leaves_the_file_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Written a batch at a time, a file export stopped by an error (here the second batch) must not
    leave half a trace where the last export was, nor a temporary file beside it."""
    import forkpoint.exporters.otel as exporter

    s = _pages_session(tmp_path, 20, 200_000)
    out = tmp_path / "spans.jsonl"
    out.write_text("the last export\n")
    real, calls = exporter._otlp_json, []

    def failing(spans: Any) -> bytes:
        calls.append(len(spans))
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(spans)

    monkeypatch.setattr(exporter, "_otlp_json", failing)
    result = CliRunner().invoke(
        main, ["export", s.id, "--store", str(tmp_path / "store"), "--file", str(out), "--content"]
    )
    assert result.exit_code != 0 and len(calls) == 2
    assert out.read_text() == "the last export\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spans.jsonl", "store"]


def test_what_if_session_links_to_its_parent(recorded: Recorded, tmp_path: Path) -> None:
    child = recorded.child
    plans = plan(child)
    root = plans[0]
    assert root.attributes["forkpoint.parent.session_id"] == recorded.session.id
    assert root.links == [(trace_id_for(recorded.session.id), int(recorded.session.header["span_id"], 16))]
    sources = {p.name: p.attributes.get("forkpoint.source") for p in plans[1:]}
    assert sources["execute_tool run_tests"] == "override"
    assert [p.attributes.get("forkpoint.source") for p in plans[1:] if p.kind == "client"] == [
        "replay",
        "replay",
        "live",
    ]
    assert "forkpoint.override" not in plans[4].attributes  # the override's value is content
    with_content = plan(child, content=True)
    assert with_content[4].attributes["forkpoint.override"] == FAILING
    # And through the SDK to a file, with the link.
    out = tmp_path / "child.json"
    export(recorded.store, child, "--file", str(out))
    doc = json.loads(out.read_text())
    root = doc["resourceSpans"][0]["scopeSpans"][0]["spans"][-1]
    assert root["links"][0]["traceId"] == format(trace_id_for(recorded.session.id), "032x")
    assert root["links"][0]["spanId"] == recorded.session.header["span_id"]


@pytest.mark.slow
def test_unreachable_endpoint_fails_cleanly(recorded: Recorded) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    result = CliRunner().invoke(
        main,
        [
            "export",
            recorded.session.id,
            "--store",
            str(recorded.store),
            "--otlp",
            f"http://127.0.0.1:{port}",
            "--timeout",
            "1",
        ],
    )
    assert result.exit_code == 1
    assert "did not accept" in result.output
    assert time.monotonic() - started < 15


@pytest.mark.parametrize(
    "encoding", ["protobuf", "json", "JSON with its type's odd casing", "json by proto names"]
)
def test_spans_the_endpoint_took_and_dropped_fail_the_export(
    recorded: Recorded, server: LocalServer, encoding: str
) -> None:
    """A 200 answer may carry ``partial_success``: the endpoint dropped that many spans (OTLP spec).
    The exporter reads no answer body: the export said it sent the trace, and exited 0. So it did
    still for a JSON answer of type ``Application/JSON`` (read as protobuf: a media type is
    case-insensitive), or one naming the fields by their proto names (protobuf's JSON allows both)."""
    if encoding.startswith("json"):
        body = b'{"partialSuccess": {"rejectedSpans": "3", "errorMessage": "quota exceeded"}}'
        ctype = "application/json"
        if encoding == "json by proto names":
            body = b'{"partial_success": {"rejected_spans": 3, "error_message": "quota exceeded"}}'
    elif encoding.startswith("JSON"):
        body = b'{"partialSuccess": {"rejectedSpans": 3, "errorMessage": "quota exceeded"}}'
        ctype = "Application/JSON; charset=UTF-8"
    else:
        answer = ExportTraceServiceResponse()
        answer.partial_success.rejected_spans = 3
        answer.partial_success.error_message = "quota exceeded"
        body, ctype = answer.SerializeToString(), "application/x-protobuf"
    server.route("/v1/traces", lambda request: Reply(body, ctype=ctype), method="POST")
    result = CliRunner().invoke(
        main, ["export", recorded.session.id, "--store", str(recorded.store), "--otlp", server.url]
    )
    assert result.exit_code == 1, result.output
    total = 1 + len(recorded.session.calls())
    assert f"took the spans but dropped 3 of {total} (quota exceeded)" in result.output, result.output


def test_an_answer_that_is_no_otlp_response_drops_nothing() -> None:
    assert partial_success(200, "text/html", b"<html>ok</html>") == (0, "")
    assert partial_success(200, "application/json", b"{}") == (0, "")
    assert partial_success(500, "application/json", b'{"partialSuccess": {"rejectedSpans": 1}}') == (0, "")


def test_export_needs_a_destination(recorded: Recorded) -> None:
    result = CliRunner().invoke(main, ["export", recorded.session.id, "--store", str(recorded.store)])
    assert result.exit_code == 2
    assert "--otlp" in result.output


def test_otlp_url() -> None:
    assert otlp_traces_url("http://localhost:4318") == "http://localhost:4318/v1/traces"
    assert otlp_traces_url("http://localhost:4318/") == "http://localhost:4318/v1/traces"
    assert otlp_traces_url("https://otel.example/custom/path") == "https://otel.example/custom/path"


@pytest.mark.parametrize("url", ["http://127.0.0.1:4318]", "http://127.0.0.1:99999"])
def test_an_otlp_url_that_does_not_parse_is_an_error_not_a_traceback(url: str) -> None:
    """``--otlp 'http://127.0.0.1:4318]'`` (a stray bracket) ended ``forkpoint export`` in a
    ValueError traceback; a port out of range was only refused by the exporter, mid-send."""
    from forkpoint.otel.sdk import ExportError

    with pytest.raises(ExportError, match="not a URL of an OTLP/HTTP endpoint"):
        otlp_traces_url(url)


def test_ids_follow_the_options(recorded: Recorded, tmp_path: Path) -> None:
    """The same export twice sends the same trace (a backend keeps one copy); another option, or
    --new-trace, sends another one, so a backend that keeps the first copy of an id still takes it."""
    s = recorded.session

    def trace(*args: str) -> tuple[str, set[str]]:
        out = tmp_path / f"t{len(list(tmp_path.iterdir()))}.json"
        result = export(recorded.store, s, "--file", str(out), *args)
        doc = json.loads(out.read_text())
        spans = [sp for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for sp in ss["spans"]]
        (trace_id,) = {sp["traceId"] for sp in spans}
        assert f"as trace {trace_id} to {out}" in result.output  # the message names the trace
        return trace_id, {sp["spanId"] for sp in spans}

    plain, plain_spans = trace()
    assert trace() == (plain, plain_spans)
    assert plain == format(trace_id_for(s.id), "032x") and s.header["span_id"] in plain_spans
    content, content_spans = trace("--content")
    assert content == format(trace_id_for(s.id, variant_for(content=True)), "032x")
    assert trace("--content") == (content, content_spans)
    named, named_spans = trace("--service-name", "agents")
    fresh, fresh_spans = trace("--new-trace")
    again, again_spans = trace("--new-trace")
    traces = [plain, content, named, fresh, again]
    assert len(set(traces)) == 5
    spans = [plain_spans, content_spans, named_spans, fresh_spans, again_spans]
    assert all(not (a & b) for i, a in enumerate(spans) for b in spans[i + 1 :])


def test_openinference_names_are_the_conventions_own(recorded: Recorded) -> None:
    """Every attribute outside the GenAI, forkpoint and general OpenTelemetry names is one the
    OpenInference conventions define (their package, installed with Phoenix, lists them)."""
    semconv = pytest.importorskip("openinference.semconv.trace")

    def names(*classes: Any) -> set[str]:
        return {v for c in classes for k, v in vars(c).items() if k.isupper() and isinstance(v, str)}

    span_names = names(semconv.SpanAttributes, semconv.ToolAttributes)
    inner = names(semconv.MessageAttributes, semconv.ToolCallAttributes, semconv.ToolAttributes)
    ours = ("gen_ai.", "forkpoint.", "server.", "http.", "error.", "process.")
    seen: set[str] = set()
    for p in plan(recorded.session, content=True):
        for key in p.attributes:
            if key.startswith(ours):
                continue
            first, *rest = re.split(r"\.\d+\.", key)
            assert first in span_names, key
            assert all(part in inner for part in rest), key
            seen.add(first)
    assert {
        "openinference.span.kind",
        "session.id",
        "input.value",
        "output.value",
        "llm.input_messages",
    } <= seen
    assert {
        "llm.output_messages",
        "llm.tools",
        "llm.token_count.prompt",
        "tool.name",
        "tool.parameters",
    } <= seen


def test_an_imported_trajectorys_model_calls_name_no_server(tmp_path: Path) -> None:
    """A trajectory's calls have the agent's name where a URL has its host: the export named the
    agent as the server (``server.address: openhands``)."""
    from forkpoint.importers import import_file

    steps = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Fix it."},
        {"role": "assistant", "content": "ls", "extra": {"actions": [{"command": "ls"}]}},
        {"role": "user", "content": "a.py", "extra": {"returncode": 0, "raw_output": "a.py"}},
        {"role": "exit", "content": "done", "extra": {"exit_status": "Submitted"}},
    ]
    path = tmp_path / "run.traj.json"
    path.write_text(json.dumps({"trajectory_format": "mini-swe-agent-1", "messages": steps, "info": {}}))
    session = Session.load(import_file(path, store=tmp_path / "store"))
    model_spans = [s for s in plan(session) if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert model_spans and all("server.address" not in s.attributes for s in model_spans)


def test_an_http_span_has_its_query_and_fragment_only_with_content(tmp_path: Path) -> None:
    """A plain HTTP call's ``url.full`` carried its query and fragment whole without ``--content``:
    what the program searched for (``?q=…``, a bare ``?secret+term``) or a token (``#token=…``) left
    the session although no content was to. They are REDACTED now, as the HTTP conventions redact
    sensitive query values; with content the URL is as recorded. A URL no parser takes (a stray
    bracket, in an imported or hand-edited session) made the whole export fail with
    ``ValueError: Invalid IPv6 URL``."""
    import httpx2

    url = "http://127.0.0.1:9/search?q=patient+smith&page=2&flag#token=s3cret"
    with forkpoint.record(store=tmp_path) as rec:
        with httpx2.Client(transport=httpx2.MockTransport(lambda r: httpx2.Response(200, text="[]"))) as c:
            c.get(url)
    s = Session.load(rec.session_path)

    def shown(content: bool) -> list[Any]:
        return [p.attributes.get("url.full") for p in plan(s, content=content) if p.kind == "client"]

    assert shown(False) == ["http://127.0.0.1:9/search?q=REDACTED&page=REDACTED&REDACTED#REDACTED"]
    assert shown(True) == [url]
    call = next(e for e in s.events if e.get("type") == "model_call")
    call["request"]["url"] = "http://127.0.0.1:9]/search?q=smith"  # (a stray bracket: urlsplit raises)
    assert shown(False) == ["http://127.0.0.1:9]/search?q=REDACTED"]


def test_an_export_to_a_descriptor_by_name_writes_to_what_it_names(tmp_path: Path) -> None:
    """``--file /dev/stdout`` with stdout a regular file (``> spans.json``) was renamed over: as
    root, the link ``/dev/stdout`` itself became a regular file. A descriptor named by its path
    (here ``/proc/self/fd/1``, which no rename can replace: without the change the export fails) is
    written to, appending, as the shell opened it."""
    import subprocess
    import sys

    s = _pages_session(tmp_path, 3, 10)
    out = tmp_path / "spans.json"
    out.write_bytes(b"kept\n")
    cmd = [
        sys.executable,
        "-m",
        "forkpoint.cli",
        "export",
        s.id,
        "--store",
        str(tmp_path / "store"),
        "--file",
        "/proc/self/fd/1",
    ]
    with out.open("ab") as stdout:
        done = subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, check=False)
    assert done.returncode == 0, done.stderr
    first, *lines = out.read_bytes().splitlines()
    assert first == b"kept" and [
        json.loads(line)["resourceSpans"][0]["scopeSpans"][0]["spans"][-1]["name"] for line in lines
    ] == ["invoke_agent"]


def test_an_export_to_a_pipe_or_device_writes_to_it_not_over_it(tmp_path: Path) -> None:
    """``--file`` is put in place by a rename, which replaced a FIFO a reader waited on (or, for
    root, ``/dev/null`` itself) by a regular file: a device or a pipe of this user's is written
    to as it is now."""
    import os
    import stat

    s = _pages_session(tmp_path, 3, 10)
    fifo = tmp_path / "spans.fifo"
    os.mkfifo(fifo, 0o600)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # (so that opening it to write does not wait)
    try:
        export(tmp_path / "store", s, "--file", str(fifo))
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
        got = os.read(reader, 1 << 16)
    finally:
        os.close(reader)
    names = [
        sp["name"]
        for line in got.splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for sp in ss["spans"]
    ]
    assert names == ["execute_tool fetch"] * 3 + ["invoke_agent"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spans.fifo", "store"]


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_a_warning_from_the_endpoint_that_took_every_span_is_said(
    recorded: Recorded, server: LocalServer, encoding: str
) -> None:
    """OTLP's ``partial_success`` with no span rejected and a message is the endpoint's warning
    (the spec's: it took them all, and says something of them, such as attributes it cut short):
    it was read and never said."""
    if encoding == "json":
        body = b'{"partialSuccess": {"rejectedSpans": "0", "errorMessage": "attribute values truncated"}}'
        ctype = "application/json"
    else:
        answer = ExportTraceServiceResponse()
        answer.partial_success.error_message = "attribute values truncated"
        body, ctype = answer.SerializeToString(), "application/x-protobuf"
    server.route("/v1/traces", lambda request: Reply(body, ctype=ctype), method="POST")
    result = CliRunner().invoke(
        main, ["export", recorded.session.id, "--store", str(recorded.store), "--otlp", server.url]
    )
    assert result.exit_code == 0, result.output
    said = " ".join(result.output.split())
    assert "the OTLP endpoint took every span, with a warning: attribute values truncated" in said, said


def test_an_endpoint_cannot_drop_more_spans_than_it_was_sent(recorded: Recorded, server: LocalServer) -> None:
    """A ``rejectedSpans`` beyond the request's spans (or below 0) is no count of them: the export
    said the endpoint dropped more spans than the trace has."""
    total = 1 + len(recorded.session.calls())
    for rejected, said in ((10_000, f"dropped {total} of {total}"), (-5, None)):
        body = b'{"partialSuccess": {"rejectedSpans": %d, "errorMessage": "odd"}}' % rejected
        server.route(
            "/v1/traces", lambda request, body=body: Reply(body, ctype="application/json"), method="POST"
        )
        result = CliRunner().invoke(
            main, ["export", recorded.session.id, "--store", str(recorded.store), "--otlp", server.url]
        )
        if said is None:
            assert result.exit_code == 0 and "dropped" not in result.output, result.output
        else:
            assert result.exit_code == 1 and said in result.output, result.output


def test_a_credential_provider_that_gives_no_session_is_a_clear_error(
    recorded: Recorded, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER`` naming a provider that is not
    installed: the export ended in a RuntimeError traceback from the SDK's loader, which forkpoint
    calls itself to add its hook to the session."""
    monkeypatch.setenv("OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER", "no-such-provider")
    result = CliRunner().invoke(
        main, ["export", recorded.session.id, "--store", str(recorded.store), "--otlp", server.url]
    )
    assert result.exit_code == 1 and not isinstance(result.exception, RuntimeError), result.exception
    said = " ".join(result.output.split())
    assert (
        "the OTLP credential provider 'no-such-provider' (OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER)"
        in said
    )
    assert server.requests == []


def test_a_session_a_credential_provider_shares_counts_only_a_senders_own_answers(
    recorded: Recorded, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A credential provider may hand every exporter one session (the program's own exporter too):
    each sender hooked its answers, so the spans one endpoint dropped were counted as dropped by
    another sender's, whose endpoint took them all, and that export failed."""
    import requests

    from forkpoint.otel import sdk

    shared = requests.Session()
    monkeypatch.setattr(sdk, "_http_session", lambda: shared)
    answer = ExportTraceServiceResponse()
    answer.partial_success.rejected_spans = 2
    answer.partial_success.error_message = "quota exceeded"
    dropping, ok = answer.SerializeToString(), ExportTraceServiceResponse().SerializeToString()
    server.route("/a", lambda request: Reply(dropping, ctype="application/x-protobuf"), method="POST")
    server.route("/b", lambda request: Reply(ok, ctype="application/x-protobuf"), method="POST")
    factory = sdk.SpanFactory(trace_id_for(recorded.session.id))
    spans = factory.spans(plan(recorded.session))
    a, b = sdk.Sender(server.url + "/a"), sdk.Sender(server.url + "/b")
    try:
        assert a.send(spans) == len(spans) and a.rejected == 2
        assert b.send(spans) == len(spans) and b.rejected == 0 and b.rejection is None
        assert a.rejected == 2
    finally:
        a.close()
        b.close()
        factory.shutdown()
    assert shared.hooks["response"] == []  # (a closed sender leaves the shared session as it was)
