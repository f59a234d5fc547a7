"""``forkpoint import``: VCR.py cassettes and agent trajectories, read in place from
../shared/realdata (tests/realdata.py), become sessions that verify, show, diff — and, for
cassettes, replay with the real openai and anthropic SDKs."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import urllib.request
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import anthropic
import openai
import pytest
import requests
import yaml
from click.testing import CliRunner
from rich.console import Console

import forkpoint
from forkpoint import Session, verify
from forkpoint.cli import main
from forkpoint.diff import diff_sessions
from forkpoint.errors import ImportFormatError
from forkpoint.events import iso_time, parse_time
from forkpoint.importers import detect_format, import_file, load_document
from forkpoint.otel import plan
from forkpoint.providers import api_key_vars
from forkpoint.redact import placeholder
from forkpoint.replay import placeholder_env
from forkpoint.show import render
from tests.modelserver import LocalServer, Reply, Route, Stream
from tests.realdata import CASSETTES, TRAJECTORIES

needs_cassettes = pytest.mark.skipif(
    not CASSETTES.is_dir(), reason=f"real cassettes not found at {CASSETTES} (../shared/realdata is absent)"
)
needs_trajectories = pytest.mark.skipif(
    not TRAJECTORIES.is_dir(),
    reason=f"real trajectories not found at {TRAJECTORIES} (../shared/realdata is absent)",
)

# What each real file holds, counted by reading it (see the report / docs/import.md):
# (folder, file, format, model calls, tool calls)
REAL_FILES = [
    (CASSETTES, "crewai__anthropic_stream_tool_call.yaml", "vcr", 2, 0),  # 2 interactions
    (CASSETTES, "crewai__anthropic_tool_call.yaml", "vcr", 2, 0),
    (CASSETTES, "crewai__openai_stream_tool_call.yaml", "vcr", 1, 0),
    (CASSETTES, "pydantic-ai__anthropic_tool_call.yaml", "vcr", 2, 0),
    (CASSETTES, "pydantic-ai__openai_chat_stream_tool_call.yaml", "vcr", 2, 0),
    (CASSETTES, "pydantic-ai__openai_responses_stream.yaml", "vcr", 2, 0),
    # 5 trajectory steps (info.model_stats.api_calls = 5), each one action with its observation.
    (TRAJECTORIES, "swe-agent__sweagenttestrepo-1c2844.traj", "swe-agent", 5, 5),
    # 41 assistant messages (api_calls = 41), one bash action each: 40 answered by a tool message,
    # the last one by the `exit` message (the submission).
    (TRAJECTORIES, "mini-swe-agent__sqlfluff-2419.traj.json", "mini-swe-agent", 41, 41),
    # events 0 (user message), 3 (edit action), 4 (its observation), 5 (finish action): two distinct
    # model responses, two tool calls (str_replace_editor, finish).
    (TRAJECTORIES, "openhands__basic.json", "openhands", 2, 2),
]


def _cases() -> Iterator[Any]:
    for folder, name, fmt, n_models, n_tools in REAL_FILES:
        mark = needs_cassettes if folder == CASSETTES else needs_trajectories
        yield pytest.param(folder / name, fmt, n_models, n_tools, id=name, marks=mark)


@pytest.mark.parametrize(("path", "fmt", "n_models", "n_tools"), list(_cases()))
def test_real_file_imports_verifies_shows_and_diffs_equal(
    path: Path, fmt: str, n_models: int, n_tools: int, tmp_path: Path
) -> None:
    a = Session.load(import_file(path, store=tmp_path))
    assert len(a.by_type("model_call")) == n_models
    assert len(a.by_type("tool_call")) == n_tools
    origin = a.header["imported_from"]
    assert origin["format"] == fmt
    assert origin["path"] == str(path.resolve())
    assert origin["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert origin["missing"], "every format lacks something; the importer must say what"
    note = a.events[0]
    assert note["type"] == "note" and note["data"]["missing"] == origin["missing"]
    assert a.events[-1]["type"] == "end"
    v = verify(a.path)
    assert v.ok and v.problems == [] and v.events == len(a.events)
    for call in a.by_type("model_call"):
        assert call["summary"]["model"]
        assert call["response"]["status"] == 200
    out = io.StringIO()
    render(a, Console(file=out, width=200, highlight=False))
    text = out.getvalue()
    assert f"turn {n_models:>2}" in text
    b = Session.load(import_file(path, store=tmp_path))
    assert a.id != b.id
    result = diff_sessions(a, b)
    assert result.equivalent and len(result.pairs) == n_models + n_tools


@pytest.mark.parametrize(("path", "fmt", "n_models", "n_tools"), list(_cases()))
def test_real_file_import_keeps_one_clock(
    path: Path, fmt: str, n_models: int, n_tools: int, tmp_path: Path
) -> None:
    """The session sits on the clock of the file: the header, the note and the end on it, every
    exported span inside the root, nothing spanning the time between the run and its import."""
    s = Session.load(import_file(path, store=tmp_path))
    calls = s.calls()
    starts = [parse_time(e["ts"]) for e in calls]
    ends = [a + timedelta(milliseconds=e.get("duration_ms") or 0) for a, e in zip(starts, calls, strict=True)]
    assert s.header["created"] == s.events[0]["ts"] == iso_time(min(starts))
    assert s.events[-1]["ts"] == iso_time(max(ends))
    root, *spans = plan(s)
    assert root.start_ns == ns(s.header["created"])
    assert 0 <= root.end_ns - ns(s.events[-1]["ts"]) < 10**6  # (the log's times are to the ms)
    assert root.end_ns - root.start_ns < 3600 * 10**9  # each of these runs took minutes, not months
    for span in spans:
        assert root.start_ns <= span.start_ns <= span.end_ns <= root.end_ns
        event = calls[span.seq - 2] if span.seq else None
        assert event is not None and event["seq"] == span.seq
        # A duration the file does not give is not invented: the span says it is unknown.
        assert span.attributes.get("forkpoint.duration_unknown", False) is (event.get("duration_ms") is None)
    # Calls follow one another: none starts before the one before it began (the SWE-agent
    # trajectory, which has no times, is laid out call after call with the tools' real durations).
    assert starts == sorted(starts)
    if fmt == "swe-agent":
        for (a, e), b in zip(zip(ends, calls, strict=True), starts[1:], strict=False):
            assert a <= b, f"seq {e['seq']} ends after the next call starts"
        assert any(e.get("duration_ms") for e in calls)


def ns(ts: str) -> int:
    dt = parse_time(ts)
    assert dt is not None
    return int(dt.timestamp()) * 10**9 + dt.microsecond * 1000


@needs_trajectories
def test_swe_agent_calls_rebuilt_from_the_trajectory(tmp_path: Path) -> None:
    path = TRAJECTORIES / "swe-agent__sweagenttestrepo-1c2844.traj"
    doc = json.loads(path.read_text())
    s = Session.load(import_file(path, store=tmp_path))
    models, tools = s.by_type("model_call"), s.by_type("tool_call")
    assert [t["tool"] for t in tools] == ["find_file", "open", "edit", "bash", "submit"]
    assert [t["args"]["action"] for t in tools] == [step["action"] for step in doc["trajectory"]]
    assert [t["result"] for t in tools] == [step["observation"] for step in doc["trajectory"]]
    assert tools[0]["duration_ms"] == pytest.approx(doc["trajectory"][0]["execution_time"] * 1000)
    # Each request is the conversation before that response: system + issue, then 2 more per step.
    assert [len(m["request"]["body"]["messages"]) for m in models] == [2, 4, 6, 8, 10]
    assert models[0]["request"]["body"]["model"] == "gpt-4o"
    assert models[0]["request"]["body"]["temperature"] == 1.0
    assert models[0]["summary"]["tool_calls"][0]["name"] == "find_file"
    assert models[4]["summary"]["tool_calls"] == []  # step 5 is not in `history`: said so
    assert any("step(s) 5" in m for m in s.header["imported_from"]["missing"])
    assert s.end()["reason"] == "submitted"


@needs_trajectories
def test_mini_swe_agent_calls_rebuilt_from_the_trajectory(tmp_path: Path) -> None:
    path = TRAJECTORIES / "mini-swe-agent__sqlfluff-2419.traj.json"
    doc = json.loads(path.read_text())
    s = Session.load(import_file(path, store=tmp_path))
    models, tools = s.by_type("model_call"), s.by_type("tool_call")
    assert {t["tool"] for t in tools} == {"bash"}
    first_action = doc["messages"][2]["extra"]["actions"][0]["command"]
    assert tools[0]["args"] == {"command": first_action}
    assert tools[0]["result"] == doc["messages"][3]["content"]
    assert tools[-1]["result"] == doc["messages"][-1]["content"]  # the `exit` message: the submission
    assert tools[-1]["args"]["command"].startswith("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
    assert len(models[0]["request"]["body"]["messages"]) == 2
    assert len(models[-1]["request"]["body"]["messages"]) == 82
    assert all("extra" not in m for m in models[-1]["request"]["body"]["messages"])
    # The raw completion is in the file: its id, usage and finish reason come through.
    assert models[0]["response"]["body"]["id"] == doc["messages"][2]["extra"]["response"]["id"]
    # (prompt_tokens_details.cached_tokens: the part of the prompt read from the cache)
    assert models[0]["summary"]["usage"] == {
        "input_tokens": 1540,
        "output_tokens": 85,
        "cache_read_input_tokens": 320,
    }
    assert models[0]["summary"]["model"] == "deepseek/deepseek-chat"
    assert models[0]["ts"].startswith("2026-04-11T")
    assert s.end()["reason"] == "Submitted"


@needs_trajectories
def test_openhands_calls_rebuilt_from_the_events(tmp_path: Path) -> None:
    path = TRAJECTORIES / "openhands__basic.json"
    s = Session.load(import_file(path, store=tmp_path))
    models, tools = s.by_type("model_call"), s.by_type("tool_call")
    assert [t["tool"] for t in tools] == ["str_replace_editor", "finish"]
    assert tools[0]["args"]["path"] == "/workspace/game_2048.py"
    assert tools[0]["result"].startswith("--- /workspace/game_2048.py")
    assert tools[0]["duration_ms"] == pytest.approx(36.897, abs=0.01)  # events 3 → 4
    assert tools[1]["result"] is None  # `finish` has no observation: said so
    missing = s.header["imported_from"]["missing"]
    assert any("no observation (finish)" in m for m in missing)
    assert any("ids 1, 2" in m for m in missing)
    roles = [[m["role"] for m in c["request"]["body"]["messages"]] for c in models]
    assert roles == [["user"], ["user", "assistant", "tool"]]
    # (litellm's OpenAI-shaped usage of a Claude call: prompt_tokens includes what the cache wrote and read)
    assert [c["summary"]["usage"] for c in models] == [
        {
            "input_tokens": 3486,
            "output_tokens": 1135,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 3482,
        },
        {
            "input_tokens": 4646,
            "output_tokens": 177,
            "cache_read_input_tokens": 3482,
            "cache_creation_input_tokens": 1158,
        },
    ]
    assert s.end()["reason"] == "finish"


@needs_trajectories
def test_format_is_detected_from_content_not_name(tmp_path: Path) -> None:
    disguised = tmp_path / "looks-like-a-cassette.yaml"
    disguised.write_bytes((TRAJECTORIES / "openhands__basic.json").read_bytes())
    s = Session.load(import_file(disguised, store=tmp_path / "store"))
    assert s.header["imported_from"]["format"] == "openhands"


@pytest.mark.parametrize(
    ("content", "detail"),
    [
        (b'{"hello": "world"}', "not a format forkpoint can import"),
        (b"just some text\n", "not a format forkpoint can import"),
        (b"\x89PNG\r\n\x1a\n\x00\xff", "not a text file"),
        (b"key: [unclosed\n", "neither JSON nor YAML"),
    ],
)
def test_unknown_file_gets_a_clear_error(tmp_path: Path, content: bytes, detail: str) -> None:
    path = tmp_path / "mystery.traj"
    path.write_bytes(content)
    with pytest.raises(ImportFormatError) as err:
        import_file(path, store=tmp_path / "store")
    message = str(err.value)
    assert str(path) in message and detail in message
    assert "VCR.py cassette" in message and "SWE-agent" in message and "OpenHands" in message
    result = CliRunner().invoke(main, ["import", str(path), "--store", str(tmp_path / "store")])
    assert result.exit_code == 1 and detail in result.output
    assert not (tmp_path / "store").exists()  # nothing half-written


def test_an_imported_cassette_moved_into_the_tests_is_named_by_its_folder_in_the_command_suggested(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/pytest.md imports a VCR.py cassette through a store of its own, then moves the session
    into the tests. replay and make-test of that folder, with no command, suggested `forkpoint
    replay ID -- python agent.py`: no store here holds ID, so that said "no session 'ID'". They
    name the folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "1000")
    cassette = tmp_path / "chat.yaml"
    chat = {"model": "demo-model", "messages": [{"role": "user", "content": "hi"}]}
    answer = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}}]}
    interaction = {
        "request": {
            "method": "POST",
            "uri": "http://127.0.0.1:8000/v1/chat/completions",
            "body": json.dumps(chat),
            "headers": {"content-type": ["application/json"]},
        },
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": {"content-type": ["application/json"]},
            "body": {"string": json.dumps(answer)},
        },
    }
    cassette.write_text(yaml.safe_dump({"interactions": [interaction], "version": 1}))
    folder = tmp_path / "tests" / "cassettes" / "chat"
    folder.parent.mkdir(parents=True)
    import_file(cassette, store=tmp_path / "elsewhere").rename(folder)
    for command in ("replay", "make-test"):
        res = CliRunner().invoke(main, [command, str(folder)])
        assert res.exit_code == 2, res.output
        assert f"forkpoint {command} {folder} -- python agent.py" in " ".join(res.output.split())


@needs_trajectories
def test_cli_import_then_show_verify_diff(tmp_path: Path) -> None:
    store = str(tmp_path / "store")
    runner = CliRunner()
    path = TRAJECTORIES / "swe-agent__sweagenttestrepo-1c2844.traj"
    first = runner.invoke(main, ["import", str(path), "--store", store, "--name", "swe run"])
    assert first.exit_code == 0, first.output
    assert "imported swe-agent file" in first.output and "(5 model calls, 5 tool calls)" in first.output
    assert "not in the file: the tool definitions" in first.output
    session = first.output.strip().splitlines()[-1]
    assert Session.load(session).header["name"] == "swe run"
    second = runner.invoke(main, ["import", str(path), "--store", store])
    assert second.exit_code == 0
    shown = runner.invoke(main, ["show", session, "--store", store], env={"COLUMNS": "250"})
    assert shown.exit_code == 0 and "find_file" in shown.output and "submit" in shown.output
    # What the file does not hold is shown as unknown, never as a made-up 0 ms or "None".
    assert f"imported swe-agent file {path}" in shown.output
    assert "exit code unknown" in shown.output and "time unknown" in shown.output
    assert "0.0 ms" not in shown.output and "None" not in shown.output
    listed = runner.invoke(main, ["ls", "--store", store]).output.splitlines()
    row = next(line for line in listed if line.startswith(Path(session).name))
    assert "  ?     forkpoint import " in row and "None" not in row
    assert runner.invoke(main, ["verify", session, "--store", store]).exit_code == 0
    other = second.output.strip().splitlines()[-1]
    diffed = runner.invoke(main, ["diff", session, other, "--store", store])
    assert diffed.exit_code == 0 and "equivalent" in diffed.output
    # An imported session has no agent command: replay without one says so, and runs nothing.
    before = sorted(p.name for p in Path(store).iterdir())
    replayed = runner.invoke(main, ["replay", session, "--store", store])
    assert replayed.exit_code == 2
    assert "was imported from a swe-agent file" in replayed.output and "after --" in replayed.output
    assert sorted(p.name for p in Path(store).iterdir()) == before
    with pytest.raises(ImportFormatError, match="is a SWE-agent trajectory .*, not an OpenHands event list"):
        import_file(path, store=store, format="openhands")


# --------------------------------------------------------------------------- VCR cassettes


def _interactions(path: Path) -> list[dict[str, Any]]:
    return yaml.safe_load(path.read_text())["interactions"]


@needs_cassettes
@pytest.mark.parametrize(
    "name", [p.name for p in sorted(CASSETTES.glob("*.yaml"))] if CASSETTES.is_dir() else []
)
def test_cassette_becomes_stored_shapes(name: str, tmp_path: Path) -> None:
    path = CASSETTES / name
    s = Session.load(import_file(path, store=tmp_path))
    for call, it in zip(s.by_type("model_call"), _interactions(path), strict=True):
        rq, rs = it["request"], it["response"]
        req, resp = call["request"], call["response"]
        assert req["url"] == rq["uri"] and req["method"] == rq["method"]
        assert req["body_kind"] == "json"
        assert req["body"] == (rq["parsed_body"] if "parsed_body" in rq else json.loads(rq["body"]))
        names = {k.lower() for k, _ in req["headers"]}
        assert "content-type" in names
        assert resp["status"] == rs["status"]["code"] and resp["reason"] == rs["status"]["message"]
        resp_names = {k.lower() for k, _ in resp["headers"]}
        assert not resp_names & {"transfer-encoding", "content-length", "connection"}
        if resp["body_kind"] == "stream":
            raw = rs["body"]["string"]
            chunks = [c for _, c in resp["chunks"]]
            assert "".join(chunks) == raw  # every byte, SSE framing included
            assert len(chunks) == raw.count("\n\n") and all(c.endswith("\n\n") for c in chunks)
            assert call["summary"]["stream"] is True
        else:
            body = rs["parsed_body"] if "parsed_body" in rs else json.loads(rs["body"]["string"])
            assert resp["body_kind"] == "json" and resp["body"] == body
        assert call["summary"]["model"] == req["body"]["model"]
        assert call["summary"]["tool_calls"] is not None
    if name.startswith("crewai"):  # stock VCR.py: the response Date header gives the time
        assert s.by_type("model_call")[0]["ts"].endswith("Z")


def play_cassette(interactions: list[dict[str, Any]]) -> Route:
    """A route for the shared local server: the n-th request gets the n-th recorded response, with
    its recorded status, reason and headers; an SSE body is written one event at a time."""

    def answer(request: dict[str, Any]) -> Reply | Stream:
        rs = interactions[(request["n"] - 1) % len(interactions)]["response"]
        raw = json.dumps(rs["parsed_body"]).encode() if "parsed_body" in rs else rs["body"]["string"].encode()
        skip = ("content-length", "transfer-encoding", "content-encoding", "connection")
        headers = [(k, v) for k, values in rs["headers"].items() for v in values if k.lower() not in skip]
        status, reason = rs["status"]["code"], rs["status"]["message"]
        if not raw.startswith((b"data:", b"event:")):
            return Reply(raw, status, ctype=None, headers=headers, reason=reason)
        events = [piece + b"\n\n" for piece in raw.split(b"\n\n") if piece]
        return Stream(events, status=status, ctype=None, headers=headers, reason=reason, chunked=False)

    return answer


def send_cassette_requests(url: str, interactions: list[dict[str, Any]]) -> list[Any]:
    """Send each recorded request (body, query, semantic headers) through the real SDK; return what
    the SDK made of each answer."""
    out: list[Any] = []
    for it in interactions:
        rq = it["request"]
        body = rq["parsed_body"] if "parsed_body" in rq else json.loads(rq["body"])
        query = dict(parse_qsl(urlsplit(rq["uri"]).query)) or None
        headers = {k.lower(): v[0] for k, v in rq["headers"].items()}
        if "anthropic" in rq["uri"]:
            version = (
                {"anthropic-version": headers["anthropic-version"]} if "anthropic-version" in headers else {}
            )
            client: Any = anthropic.Anthropic(
                base_url=url, api_key="sk-ant-test", max_retries=0, default_headers=version
            )
            create = client.messages.create
        else:
            client = openai.OpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
            create = (
                client.responses.create
                if rq["uri"].endswith("/responses")
                else client.chat.completions.create
            )
        result = create(**body, extra_query=query)
        out.append(
            [e.model_dump(mode="json") for e in result]
            if body.get("stream")
            else result.model_dump(mode="json")
        )
        client.close()
    return out


@needs_cassettes
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize(
    "name", [p.name for p in sorted(CASSETTES.glob("*.yaml"))] if CASSETTES.is_dir() else []
)
def test_imported_cassette_replays_with_the_real_sdk(name: str, tmp_path: Path, server: LocalServer) -> None:
    path = CASSETTES / name
    interactions = _interactions(path)
    server.route("*", play_cassette(interactions))
    live = send_cassette_requests(server.url, interactions)  # the cassette's bytes, parsed live
    server.stop()
    session = import_file(path, store=tmp_path)
    with forkpoint.replay(session) as rp:  # no server: only the imported session can answer
        replayed = send_cassette_requests("http://127.0.0.1:9", interactions)
    assert replayed == live
    report = rp.report()
    assert report["matched"] == report["recorded"] == len(interactions)
    assert report["unused"] == [] and report["divergence"] is None and report["network_blocked"] == []


@needs_cassettes
def test_dropped_anthropic_version_is_filled_in_and_said(tmp_path: Path) -> None:
    s = Session.load(import_file(CASSETTES / "pydantic-ai__anthropic_tool_call.yaml", store=tmp_path))
    version = anthropic.Anthropic(api_key="x").default_headers["anthropic-version"]
    for call in s.by_type("model_call"):
        assert ["anthropic-version", version] in call["request"]["headers"]
    *adjusted, clock = s.header["imported_from"]["adjusted"]
    assert len(adjusted) == 2 and all("anthropic-version" in a for a in adjusted)
    assert clock.startswith("no times in the file")  # the cassette's serializer dropped the Date headers
    assert s.header["imported_from"]["dialect"] == "parsed_body"


def test_stock_json_cassette_with_gzip_body_and_credentials(tmp_path: Path) -> None:
    """A stock VCR.py cassette written with the JSON serializer: a gzip-compressed binary body is
    stored decoded (header removed), credentials never reach the session."""
    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
    secret = "sk-proj-" + "A" * 40
    cassette = {
        "version": 1,
        "interactions": [
            {
                "request": {
                    "method": "POST",
                    "uri": "https://api.openai.com/v1/chat/completions",
                    "headers": {"Authorization": [f"Bearer {secret}"], "Content-Type": ["application/json"]},
                    "body": json.dumps(
                        {"model": "m", "messages": [{"role": "user", "content": f"key {secret}"}]}
                    ),
                },
                "response": {
                    "status": {"code": 200, "message": "OK"},
                    "headers": {"Content-Type": ["application/json"], "Content-Encoding": ["gzip"]},
                    "body": {"string": "@GZIP@"},
                },
            }
        ],
    }
    # JSON cannot hold bytes; write YAML with !!binary, the way VCR.py writes compressed bodies.
    text = yaml.safe_dump(cassette).replace(
        "'@GZIP@'", "!!binary |\n        " + _b64(gzip.compress(json.dumps(answer).encode()))
    )
    path = tmp_path / "cassette.yml"
    path.write_text(text)
    assert detect_format(load_document(path, path.read_bytes())) == "vcr"
    s = Session.load(import_file(path, store=tmp_path / "store"))
    (call,) = s.by_type("model_call")
    assert call["response"]["body"] == answer
    assert all(k.lower() != "content-encoding" for k, _ in call["response"]["headers"])
    assert ["Authorization", placeholder("header-credential", f"Bearer {secret}")] in call["request"][
        "headers"
    ]
    raw = b"".join(p.read_bytes() for p in s.path.rglob("*") if p.is_file())
    assert secret.encode() not in raw
    assert call["summary"]["usage"] == {"input_tokens": 3, "output_tokens": 1}
    # JSON cassettes (VCR.py's json serializer) read the same way.
    as_json = tmp_path / "cassette.json"
    cassette["interactions"][0]["response"]["body"]["string"] = json.dumps(answer)
    del cassette["interactions"][0]["response"]["headers"]["Content-Encoding"]
    as_json.write_text(json.dumps(cassette))
    (again,) = Session.load(import_file(as_json, store=tmp_path / "store")).by_type("model_call")
    assert again["response"]["body"] == answer and again["key"] == call["key"]


def test_a_cassette_of_two_keys_answered_differently_replays_each_keys_answer(tmp_path: Path) -> None:
    """A VCR.py cassette of a program checking two API keys (one refused): imported, each call's
    Authorization is kept as its placeholder, so a replay checking them in the other order gets
    each key's own answer (it got the other's: the header was dropped)."""
    good, bad = "sk-proj-" + "A" * 48, "sk-proj-" + "B" * 48
    cassette = _chat_cassette({"Authorization": [f"Bearer {good}"]})
    refused = _chat_cassette({"Authorization": [f"Bearer {bad}"]})["interactions"][0]
    refused["response"]["status"] = {"code": 401, "message": "Unauthorized"}
    refused["response"]["body"]["string"] = json.dumps({"error": {"message": "invalid key"}})
    cassette["interactions"].append(refused)
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(cassette))
    session = import_file(path, store=tmp_path / "store")

    def works(key: str) -> bool:
        client = openai.OpenAI(api_key=key, base_url="http://127.0.0.1:9/v1", max_retries=0)
        try:
            client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        except openai.AuthenticationError:
            return False
        return True

    with forkpoint.replay(session) as rp:
        assert {k: works(k) for k in (bad, good)} == {good: True, bad: False}
    assert rp.report()["reproduced"], rp.report()


@pytest.mark.parametrize("encoding", ["gzip", "br"])
def test_body_stored_decoded_under_its_content_encoding_replays(tmp_path: Path, encoding: str) -> None:
    """VCR.py with requests on urllib3 2 writes a compressed response decoded, as text, and keeps
    its ``Content-Encoding``: the imported session must not tell a replayed client to decode it."""
    text = "plain text: h\u00e9llo\n"
    path = tmp_path / "cassette.yaml"
    response = {
        "status": {"code": 200, "message": "OK"},
        "headers": {"Content-Type": ["text/plain; charset=utf-8"], "Content-Encoding": [encoding]},
        "body": {"string": text},
    }
    path.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "interactions": [
                    {
                        "request": {
                            "method": "GET",
                            "uri": "http://127.0.0.1:9/page",
                            "headers": {},
                            "body": None,
                        },
                        "response": response,
                    }
                ],
            }
        )
    )
    session = import_file(path, store=tmp_path / "store")
    adjusted = Session.load(session).header["imported_from"]["adjusted"]
    assert any(f"Content-Encoding: {encoding}" in a and "not compressed" in a for a in adjusted)
    with forkpoint.replay(session) as rp:
        got = requests.get("http://127.0.0.1:9/page")
    assert got.text == text
    assert rp.report()["matched"] == 1


def test_compressed_body_replays_compressed_to_a_client_that_decodes_itself(tmp_path: Path) -> None:
    """urllib does not decode ``Content-Encoding``: live, the caller got gzip bytes and the header
    (VCR.py stores them as ``!!binary``); a replay of the imported cassette must hand back the same,
    as it does for a recording (``decoded_from``), not the decoded text without the header."""
    text = "plain text: h\u00e9llo\n"
    cassette = {"version": 1, "interactions": [{
        "request": {"method": "GET", "uri": "http://127.0.0.1:9/page", "headers": {}, "body": None},
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": {"Content-Type": ["text/plain; charset=utf-8"], "Content-Encoding": ["gzip"]},
            "body": {"string": "@GZIP@"},
        },
    }]}  # fmt: skip
    path = tmp_path / "cassette.yaml"
    path.write_text(
        yaml.safe_dump(cassette).replace(
            "'@GZIP@'", "!!binary |\n          " + _b64(gzip.compress(text.encode()))
        )
    )
    session = import_file(path, store=tmp_path / "store")
    with forkpoint.replay(session), urllib.request.urlopen("http://127.0.0.1:9/page") as got:
        encoding, raw = got.headers.get("Content-Encoding"), got.read()
    assert encoding == "gzip"
    assert gzip.decompress(raw).decode() == text


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode()


@pytest.fixture(autouse=True)
def _store_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("FORKPOINT_STORE", str(tmp_path / "default-store"))
    yield


def _cassette(response: dict[str, Any], uri: str | None = "http://127.0.0.1:9/v1/chat/completions") -> bytes:
    request: dict[str, Any] = {"method": "POST", "body": '{"model": "m"}', "headers": {}}
    if uri is not None:
        request["uri"] = uri
    return json.dumps({"version": 1, "interactions": [{"request": request, "response": response}]}).encode()


_BODY = {"headers": {"content-type": ["application/json"]}, "body": {"string": "{}"}}


@pytest.mark.parametrize(
    ("cassette", "detail"),
    [
        (_cassette(_BODY), r"interaction 1: the response has no HTTP status .*got None"),
        (
            _cassette({**_BODY, "status": {"code": "abc"}}),
            r"interaction 1: the response has no HTTP status .*'abc'",
        ),
        (_cassette({**_BODY, "status": {"code": 200}}, uri=None), r"interaction 1: the request has no uri"),
        (
            _cassette({"status": {"code": 200}, "headers": {"x-a": [{"x": 2}]}, "body": {"string": "{}"}}),
            r"interaction 1: the response: a header value is dict \{'x': 2\}, not text",
        ),
        (
            _cassette({**_BODY, "status": {"code": 200}}).replace(b'"headers": {}', b'"headers": [1, 2]'),
            r"interaction 1: the request: a header is 1, not a \[name, value\] pair",
        ),
        (b'{"interactions": ' + b"[" * 3000 + b"]" * 3000 + b"}", r"JSON nested too deep to import"),
        (b"interactions: " + b"[" * 3000 + b"]" * 3000 + b"\n", r"YAML nested too deep to import"),
    ],
)
def test_a_cassette_without_a_status_or_a_uri_or_nested_too_deep_is_refused_naming_where(
    tmp_path: Path, cassette: bytes, detail: str
) -> None:
    """A response without a status was imported as a 200 (a recorded 503 replayed as a success), a
    request without a uri as url "", a status "abc" raised a bare ValueError, JSON nested 3,000
    deep a RecursionError traceback; request headers ``[1, 2]`` were dropped without a word, and a
    header value ``{x: 2}`` stored as Python's text of it."""
    path = tmp_path / "cassette.json"
    path.write_bytes(cassette)
    with pytest.raises(ImportFormatError, match=detail):
        import_file(path, store=tmp_path / "store")
    assert not (tmp_path / "store").exists()


def _two_interactions(*changes: Callable[[list[Any]], None]) -> bytes:
    """A two-interaction cassette, each of ``changes`` applied to its interactions."""
    its = json.loads(_cassette({**_BODY, "status": {"code": 200, "message": "OK"}}))["interactions"] * 2
    its = json.loads(json.dumps(its))  # (two interactions, not one twice)
    for change in changes:
        change(its)
    return json.dumps({"version": 1, "interactions": its}).encode()


@pytest.mark.parametrize(
    ("cassette", "detail"),
    [
        (
            _two_interactions(lambda its: its[1]["request"].update(uri=5)),
            r"cassette.json: interaction 2: the request's uri is int 5, not text \(expected a URL\)",
        ),
        (
            _two_interactions(lambda its: its[0]["request"].update(method=["POST"])),
            r"cassette.json: interaction 1: the request's method is list \['POST'\], not text "
            r"\(expected an HTTP method such as POST\)",
        ),
        (
            _two_interactions(lambda its: its[1]["response"]["status"].update(message={"x": 1})),
            r"cassette.json: interaction 2: the response's status message is dict \{'x': 1\}, not text "
            r"\(expected a reason phrase such as OK\)",
        ),
        (
            _two_interactions(lambda its: its.append(5)),
            r"cassette.json: interaction 3 is int 5, not a mapping \(expected \{request, response\}\)",
        ),
        (
            _two_interactions(lambda its: its[1].pop("response")),
            r"cassette.json: interaction 2 has no response \(expected \{request, response\}\)",
        ),
        (
            _two_interactions(lambda its: its[0].update(request="GET /")),
            r"cassette.json: interaction 1: the request is str 'GET /', not a mapping",
        ),
    ],
    ids=["uri", "method", "status-message", "interaction", "no-response", "request"],
)
def test_a_field_of_the_wrong_type_is_refused_naming_the_interaction_the_field_and_what_was_expected(
    tmp_path: Path, cassette: bytes, detail: str
) -> None:
    """A uri of 5 was refused as "the request has no uri"; a method ["POST"] imported as the method
    "['POST']", a status message {x: 1} as the reason "{'x': 1}"; an interaction that was no mapping
    or had no response made the file "not a format forkpoint can import"."""
    path = tmp_path / "cassette.json"
    path.write_bytes(cassette)
    with pytest.raises(ImportFormatError, match=detail):
        import_file(path, store=tmp_path / "store")
    assert not (tmp_path / "store").exists()


def test_a_status_written_as_a_string_is_the_status_it_says(tmp_path: Path) -> None:
    path = tmp_path / "cassette.json"
    path.write_bytes(_cassette({**_BODY, "status": {"code": "503", "message": "Service Unavailable"}}))
    (event,) = Session.load(import_file(path, store=tmp_path / "store")).by_type("model_call")
    assert (event["response"]["status"], event["response"]["reason"]) == (503, "Service Unavailable")


def test_a_tool_replayed_from_an_imported_cassette_is_told_to_run_live(tmp_path: Path) -> None:
    """A VCR.py cassette holds HTTP calls only: a ``@forkpoint.tool`` replayed from the imported
    session diverged with "the recording has no tool call left (0 were recorded)", and nothing said
    why or what to do. The divergence says the session was imported and how to run tools live."""
    from forkpoint.errors import Divergence

    interaction = {
        "request": {"method": "GET", "uri": "http://127.0.0.1:9/ping", "headers": {}, "body": None},
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": {"Content-Type": ["text/plain"]},
            "body": {"string": "pong"},
        },
    }
    path = tmp_path / "cassette.json"
    path.write_text(json.dumps({"version": 1, "interactions": [interaction]}))
    session = import_file(path, store=tmp_path / "store")

    @forkpoint.tool
    def lookup(x: int) -> int:
        return x

    with pytest.raises(Divergence) as raised, forkpoint.replay(session) as rp:
        assert requests.get("http://127.0.0.1:9/ping", timeout=5).text == "pong"
        lookup(1)
    reason = rp.report()["divergence"]["reason"]
    assert "0 were recorded" in reason and "imported from a vcr file, which holds no tool call" in reason
    # (it said `--tools NAME`, an option value `forkpoint replay` refuses: `--tools` is replay|live)
    assert "--tools live" in reason and "live_tools" in reason and "imported" in str(raised.value)


def test_a_replay_of_an_imported_trajectory_says_its_requests_were_rebuilt(tmp_path: Path) -> None:
    """A mini-swe-agent run imported from its ``.traj.json`` and replayed with the agent diverged at
    once on ``$.body.model: openai/demo-model → demo-model`` and ``+ $.body.tools``, with only
    "no recorded request has the same match key": nothing said the recorded request was rebuilt
    from the file (litellm's model name, no tool definitions), not what the agent sent."""
    from forkpoint.errors import Divergence

    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Fix calc.py"},
        {
            "role": "assistant",
            "content": "look",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "ls"}'},
                }
            ],
            "extra": {"actions": [{"command": "ls", "tool_call_id": "c1"}]},
        },
        {"role": "tool", "tool_call_id": "c1", "content": "calc.py"},
    ]
    doc = {
        "trajectory_format": "mini-swe-agent-1.1",
        "messages": messages,
        "info": {"config": {"model": {"model_name": "openai/demo-model"}}, "exit_status": "Submitted"},
    }
    path = tmp_path / "run.traj.json"
    path.write_text(json.dumps(doc))
    session = import_file(path, store=tmp_path / "store")
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-test", max_retries=0)
    bash = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
    with pytest.raises(Divergence) as raised, forkpoint.replay(session) as rp:
        client.chat.completions.create(model="demo-model", messages=messages[:2], tools=[bash])  # type: ignore[arg-type, list-item]
    div = rp.report()["divergence"]
    assert "~ $.body.model: openai/demo-model → demo-model" in str(raised.value)
    assert div["reason"] == (
        "no recorded request has the same match key; the session was imported from a mini-swe-agent trajectory, "
        "whose requests forkpoint rebuilt from what the file holds (the model as its config names it, no tool "
        "definitions: docs/import.md), not from what the agent sent"
    ), div


def _chat_cassette(headers: dict[str, list[str]], content: str = "hi") -> dict[str, Any]:
    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    }
    return {
        "version": 1,
        "interactions": [
            {
                "request": {
                    "method": "POST",
                    "uri": "http://127.0.0.1:9/v1/chat/completions",
                    "headers": {"content-type": ["application/json"], **headers},
                    "body": json.dumps({"messages": [{"role": "user", "content": content}], "model": "m"}),
                },
                "response": {
                    "status": {"code": 200, "message": "OK"},
                    "headers": {"content-type": ["application/json"]},
                    "body": {"string": json.dumps(answer)},
                },
            }
        ],
    }


def test_imported_versions_are_the_cassettes_not_the_importers(tmp_path: Path) -> None:
    """The header's ``versions`` were those installed where ``forkpoint import`` ran (``show``
    printed "openai 3.x" for a cassette an SDK 1.30.1 recorded), and a replay's divergence compared
    the SDK installed now with them: it named no upgrade on the importing machine, and the wrong
    ones elsewhere. They are what the requests' headers say, beside the forkpoint that wrote it."""
    from forkpoint.errors import Divergence

    path = tmp_path / "cassette.json"
    stainless = {
        "user-agent": ["OpenAI/Python 1.30.1"],
        "x-stainless-lang": ["python"],
        "x-stainless-package-version": ["1.30.1"],
        "x-stainless-runtime": ["CPython"],
        "x-stainless-runtime-version": ["3.10.4"],
    }
    path.write_text(json.dumps(_chat_cassette(stainless)))
    session = import_file(path, store=tmp_path / "store")
    versions = Session.load(session).header["versions"]
    assert versions == {"forkpoint": forkpoint.__version__, "openai": "1.30.1", "python": "3.10.4"}
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-x", max_retries=0)
    with pytest.raises(Divergence) as raised, forkpoint.replay(session):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "changed"}])
    assert f"openai 1.30.1 → {openai.__version__}" in str(raised.value)

    # A cassette whose headers name no package claims none.
    path.write_text(json.dumps(_chat_cassette({})))
    assert Session.load(import_file(path, store=tmp_path / "store")).header["versions"] == {
        "forkpoint": forkpoint.__version__
    }


def test_a_long_user_agent_costs_its_length_not_its_square(tmp_path: Path) -> None:
    """The version tokens of ``user-agent`` were searched for from every character of it: each start
    scanned the rest of a run of name characters, so a 100 kB agent string without a version in it
    (a filter's placeholder, a framework's concatenated ones) took minutes to import. A token is
    looked for where a run starts, and the one after the long run is still found."""
    path = tmp_path / "cassette.json"
    path.write_text(json.dumps(_chat_cassette({"user-agent": ["x" * 100_000 + " python-httpx/0.27.0"]})))
    versions = Session.load(import_file(path, store=tmp_path / "store")).header["versions"]
    assert versions == {"forkpoint": forkpoint.__version__, "httpx": "0.27.0"}


@needs_cassettes
def test_real_cassette_keeps_the_sdk_versions_its_requests_name(tmp_path: Path) -> None:
    """crewAI's cassettes replaced the user agent, but ``x-stainless-package-version`` and
    ``anthropic-version`` still say which SDK sent them: anthropic 0.71.1 on Python 3.13.3."""
    s = Session.load(import_file(CASSETTES / "crewai__anthropic_tool_call.yaml", store=tmp_path))
    assert s.header["versions"] == {
        "forkpoint": forkpoint.__version__,
        "anthropic": "0.71.1",
        "python": "3.13.3",
    }


def test_an_imported_cassette_claims_no_platform_time_zone_or_keys_of_the_importer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The header of an imported cassette had the importing machine's ``platform``, ``timezone`` and
    ``api_keys``, as if the run had been made there: ``forkpoint replay`` moved the program into the
    importer's time zone ("runs in the recording's time zone, Asia/Tokyo"), and, imported where no
    key was set, set no placeholder key, so an SDK built without one refused to start. A cassette
    says none of them: the header has none, and the replay runs in its own zone with every key."""
    import subprocess
    import sys

    for var in api_key_vars():
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    path = tmp_path / "cassette.json"
    path.write_text(json.dumps(_chat_cassette({})))
    session = import_file(path, store=tmp_path / "store")
    header = Session.load(session).header
    assert not {"platform", "timezone", "api_keys"} & header.keys()

    (tmp_path / "agent.py").write_text(
        "import os, openai\n"
        "client = openai.OpenAI(base_url='http://127.0.0.1:9/v1', max_retries=0)\n"
        "r = client.chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'hi'}])\n"
        "print(os.environ.get('TZ'), r.choices[0].message.content)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    rep = subprocess.run(
        [sys.executable, "-m", "forkpoint.cli", "replay", str(session), "--", sys.executable, "agent.py"],
        cwd=tmp_path, env={**env, "TZ": "America/New_York"}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert rep.returncode == 0 and "replay ok" in rep.stderr, rep.stderr
    assert rep.stdout == "America/New_York ok\n"
    assert "time zone" not in rep.stderr


def test_an_imported_cassette_replays_through_openais_module_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cassette does not say which API keys its run had set, so a replay sets the placeholder of
    every key an SDK insists on. It set Azure OpenAI's beside OpenAI's, and openai's module-level
    client (``openai.chat.completions.create``), seeing both, refused to start: "Ambiguous use of
    module client". Azure's is set only for a session whose calls went to Azure OpenAI."""
    for k in api_key_vars():
        monkeypatch.delenv(k, raising=False)
    for name, value in {"api_key": None, "_client": None, "max_retries": 0}.items():
        monkeypatch.setattr(openai, name, value)  # (a module client of this test's own, undone after)
    monkeypatch.setattr(openai, "base_url", "http://127.0.0.1:9/v1/")
    path = tmp_path / "cassette.json"
    path.write_text(json.dumps(_chat_cassette({})))
    session = import_file(path, store=tmp_path / "store")
    with forkpoint.replay(session) as rp:
        answer = openai.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "ok"
    assert rp.report()["reproduced"], rp.report()
    # A cassette of Azure OpenAI's calls (a deployment's path, an api-version) still gets Azure's placeholder.
    azure = _chat_cassette({})
    azure["interactions"][0]["request"]["uri"] = (
        "http://127.0.0.1:9/openai/deployments/d/chat/completions?api-version=1"
    )
    (tmp_path / "azure.json").write_text(json.dumps(azure))
    added = placeholder_env(Session.load(import_file(tmp_path / "azure.json", store=tmp_path / "store")))
    assert "AZURE_OPENAI_API_KEY" in added
