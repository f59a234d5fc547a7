"""Importers on the files real tools write: VCR cassettes whose header values are bytes (botocore's),
gzip-compressed cassettes in VCR.py's ``requests``/``responses`` layout (langchain's serializer),
Bedrock event streams inside a cassette, OpenHands on one clock, bare mini-swe-agent message lists."""

from __future__ import annotations

import gzip
import json
import os
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests
import yaml

import forkpoint
from forkpoint.errors import ImportFormatError
from forkpoint.importers import import_file
from forkpoint.importers.base import load_document
from tests.cliutil import forkpoint_cli
from tests.modelserver import converse_events
from tests.realdata import TRAJECTORIES

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
HOST = "https://bedrock-runtime.us-east-1.amazonaws.com"
ANSWER = {
    "output": {"message": {"role": "assistant", "content": [{"text": "the sum is 5"}]}},
    "stopReason": "end_turn",
    "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
    "metrics": {"latencyMs": 12},
}
ASKED = {"messages": [{"role": "user", "content": [{"text": "add 2 and 3"}]}]}


def _bedrock_interaction(operation: str, body: bytes, ctype: str) -> dict[str, Any]:
    """One interaction as VCR.py records botocore's: header values as bytes (YAML ``!!binary``)."""
    return {
        "request": {
            "method": "POST",
            "uri": f"{HOST}/model/{MODEL.replace(':', '%3A')}/{operation}",
            "body": json.dumps(ASKED).encode(),
            "headers": {
                "Content-Type": [b"application/json"],
                "User-Agent": [b"Boto3/1.40.0 md/Botocore#1.40.0"],
                "X-Amz-Date": [b"20250101T000000Z"],
                "Authorization": [
                    b"AWS4-HMAC-SHA256 Credential=AKIAEXAMPLE/20250101/us-east-1/bedrock/aws4_request"
                ],
                "amz-sdk-invocation-id": [b"0b3f0b7e-0000-4000-8000-000000000000"],
            },
        },
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": {"Content-Type": [ctype.encode()], "x-amzn-RequestId": [b"6d1b-req"]},
            "body": {"string": body},
        },
    }


@pytest.fixture
def bedrock_cassette(tmp_path: Path) -> Path:
    stream = b"".join(converse_events(ANSWER))
    doc = {
        "version": 1,
        "interactions": [
            _bedrock_interaction("converse", json.dumps(ANSWER).encode(), "application/json"),
            _bedrock_interaction("converse-stream", stream, "application/vnd.amazon.eventstream"),
        ],
    }
    path = tmp_path / "bedrock.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert "!!binary" in path.read_text()
    return path


def test_a_bedrock_cassette_with_bytes_headers_imports_as_text_and_replays(
    bedrock_cassette: Path, tmp_path: Path
) -> None:
    session = forkpoint.Session.load(import_file(bedrock_cassette, store=tmp_path / "store"))
    calls = session.by_type("model_call")
    headers = dict(calls[0]["request"]["headers"])
    assert headers["Content-Type"] == "application/json"  # not "b'application/json'"
    assert not {"Authorization", "X-Amz-Date", "amz-sdk-invocation-id"} & set(headers)
    assert [c["summary"]["api"] for c in calls] == ["converse", "converse"]
    frames = calls[1]["response"]["chunks"]
    assert len(frames) == len(converse_events(ANSWER))  # one chunk per event-stream message
    client = boto3.client(
        "bedrock-runtime", region_name="us-east-1", aws_access_key_id="AKIAREPLAY", aws_secret_access_key="x"
    )
    with forkpoint.replay(session) as rp:
        whole = client.converse(modelId=MODEL, **ASKED)
        streamed = client.converse_stream(modelId=MODEL, **ASKED)
        text = "".join(
            ev["contentBlockDelta"]["delta"].get("text", "")
            for ev in streamed["stream"]
            if "contentBlockDelta" in ev
        )
    assert whole["output"]["message"]["content"] == [{"text": "the sum is 5"}]
    assert text == "the sum is 5"
    assert rp.report()["reproduced"], rp.report()


REGIONLESS_AGENT = f"""
import boto3

client = boto3.client("bedrock-runtime")  # (the region from the environment, as when recorded)
answer = client.converse(modelId={MODEL!r}, **{ASKED!r})
streamed = client.converse_stream(modelId={MODEL!r}, **{ASKED!r})
text = "".join(e["contentBlockDelta"]["delta"]["text"] for e in streamed["stream"] if "contentBlockDelta" in e)
print(client.meta.region_name, answer["output"]["message"]["content"][0]["text"], "/", text)
"""


def test_a_replay_gives_botocore_the_recorded_bedrock_region_when_none_is_configured(
    bedrock_cassette: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Bedrock client built without region_name takes it from AWS_DEFAULT_REGION or ~/.aws/config.
    A replay set placeholder keys but no region, so on a machine without AWS configuration (CI)
    botocore raised NoRegionError and the replay did not reproduce. The region of the recorded
    calls' host is set where none is, in-process and under `forkpoint replay`, and taken away after
    the block."""
    for var in ("AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    path = import_file(bedrock_cassette, store=tmp_path / "store")
    with forkpoint.replay(path, on_divergence="fifo"):
        client = boto3.client("bedrock-runtime")
        whole = client.converse(modelId=MODEL, **ASKED)
    assert client.meta.region_name == "us-east-1"
    assert whole["output"]["message"]["content"] == [{"text": "the sum is 5"}]
    assert "AWS_DEFAULT_REGION" not in os.environ
    (tmp_path / "agent.py").write_text(REGIONLESS_AGENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FORKPOINT_")}
    replayed = forkpoint_cli(["replay", str(path), "--", sys.executable, "agent.py"], tmp_path, env, 120)
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout.strip() == "us-east-1 the sum is 5 / the sum is 5", replayed.stdout
    assert "replay ok" in replayed.stderr, replayed.stderr
    # Its own region, where one is set, is left as it is (the call then goes to another host).
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    with forkpoint.replay(path, on_divergence="fifo"):
        assert boto3.client("bedrock-runtime").meta.region_name == "eu-west-1"


def test_a_gzip_cassette_in_the_requests_responses_layout(tmp_path: Path) -> None:
    """langchain's cassette serializer: VCR.py's in-memory layout, YAML, gzip-compressed."""
    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-4o-mini",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi there"}, "finish_reason": "stop"}
        ],
    }
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello"}]}
    doc = {
        "requests": [
            {
                "method": "POST",
                "uri": "https://api.openai.com/v1/chat/completions",
                "body": json.dumps(body),
                "headers": {"content-type": ["application/json"], "authorization": ["**REDACTED**"]},
            }
        ],
        "responses": [
            {
                "status": {"code": 200, "message": "OK"},
                "headers": {"content-type": ["application/json"]},
                "body": {"string": json.dumps(answer)},
            }
        ],
    }
    path = tmp_path / "test_chat.yaml.gz"
    path.write_bytes(gzip.compress(yaml.safe_dump(doc).encode()))
    session = forkpoint.Session.load(import_file(path, store=tmp_path / "store"))
    (call,) = session.by_type("model_call")
    assert call["summary"]["model"] == "gpt-4o-mini" and session.header["imported_from"]["format"] == "vcr"
    with forkpoint.replay(session) as rp:
        got = requests.post("https://api.openai.com/v1/chat/completions", json=body, timeout=5).json()
    assert got["choices"][0]["message"]["content"] == "hi there" and rp.report()["reproduced"]


def test_a_gzip_file_that_expands_without_end_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from forkpoint.errors import ImportFormatError
    from forkpoint.importers import base

    monkeypatch.setattr(base, "MAX_UNCOMPRESSED", 1000)
    path = tmp_path / "big.yaml.gz"
    path.write_bytes(gzip.compress(b"a: " + b"x" * 5000))
    with pytest.raises(ImportFormatError, match="decompresses to more than 1000 bytes"):
        import_file(path, store=tmp_path / "store")
    (tmp_path / "broken.yaml.gz").write_bytes(b"\x1f\x8b" + b"not gzip")
    with pytest.raises(ImportFormatError, match="does not decompress"):
        import_file(tmp_path / "broken.yaml.gz", store=tmp_path / "store")
    # Cut short: what it held was read as YAML of another kind ("not a format forkpoint can import").
    whole = gzip.compress(b"interactions: []\n" + b"".join(b"# %d\n" % (i * 7919 % 1000) for i in range(100)))
    (tmp_path / "cut.yaml.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ImportFormatError, match=r"does not decompress \(it ends before its end\)"):
        import_file(tmp_path / "cut.yaml.gz", store=tmp_path / "store")


def _chat_interaction(n: int) -> dict[str, Any]:
    """A VCR.py interaction of a Chat Completions call asking ``qN``."""
    return {
        "request": {
            "method": "POST",
            "uri": "http://127.0.0.1:9/v1/chat/completions",  # (imported only: never requested)
            "body": json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": f"q{n}"}]}),
            "headers": {"content-type": ["application/json"]},
        },
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": {"content-type": ["application/json"]},
            "body": {"string": json.dumps({"id": f"c{n}", "choices": []})},
        },
    }


def test_a_gzip_file_of_several_members_is_read_whole_and_trailing_bytes_are_refused(tmp_path: Path) -> None:
    """A gzip file may hold several members one after another (a writer that flushes a member at a
    time, ``gzip -c part >> file``); ``gzip -d`` reads them all. Only the first was read: the
    cassette below imported with 1 of its 2 calls, said nowhere, and bytes after the members were
    dropped silently."""
    from forkpoint.errors import ImportFormatError

    text = yaml.safe_dump({"interactions": [_chat_interaction(1), _chat_interaction(2)]}).encode()
    second = text.index(b"- request:", text.index(b"- request:") + 1)
    members = gzip.compress(text[:second]) + gzip.compress(text[second:])
    assert gzip.decompress(members) == text
    path = tmp_path / "two_members.yaml.gz"
    path.write_bytes(members)
    session = forkpoint.Session.load(import_file(path, store=tmp_path / "store"))
    assert len(session.by_type("model_call")) == 2
    path.write_bytes(gzip.compress(text) + b"trailing bytes")
    with pytest.raises(ImportFormatError, match="two_members.yaml.gz: .*after its gzip data"):
        import_file(path, store=tmp_path / "store")


@pytest.mark.parametrize(
    ("raw", "read"),
    [
        (
            b'{"a": {"b": [1, 2**70]}, "c": 1.5}'.replace(b"2**70", str(2**70).encode()),
            {"a": {"b": [1, 2**70]}, "c": 1.5},
        ),
        (b'{"a": NaN, "b": 1e400}', {"a": "NaN", "b": "1e400"}),  # (no JSON: read as YAML)
        (
            b'{"a": "\\ud83d\\ude00 x:y \\u003a \\\\u003a", "b" : {"c":1}}',
            {"a": "\U0001f600 x:y : \\u003a", "b": {"c": 1}},
        ),
    ],
    ids=["long-int", "not-json-numbers", "colons"],
)
def test_a_json_document_is_read_as_before_in_one_parse(tmp_path: Path, raw: bytes, read: Any) -> None:
    """The duplicate-key check parsed every JSON file a second time (an import of 20 MB took twice
    as long): one parse now checks as it builds each object, and reads each value as the two did
    (an integer beyond 64 bits as itself, what is no JSON as YAML, colons in strings as text)."""
    assert load_document(tmp_path / "f.json", raw, "JSON") == read


@pytest.mark.parametrize(
    "raw",
    [
        b'[{"a": {"b": 1, "c": 2, "b": 3}}]',
        b'{"b": "1:2:3", "b": "x"}',
        b'{"b": "\\u003a", "b": ":"}',
        b'{"b": 1, "b": 2, "n": %d}' % 2**70,
    ],
    ids=["nested", "colons-dropped", "escaped-colon", "long-int"],
)
def test_a_json_key_set_twice_is_refused_whatever_its_strings_hold(tmp_path: Path, raw: bytes) -> None:
    with pytest.raises(ImportFormatError, match=r"f.json: the key 'b' is set twice in one object"):
        load_document(tmp_path / "f.json", raw, "JSON")


def test_a_cassette_with_a_key_twice_in_one_mapping_is_refused(tmp_path: Path) -> None:
    """A bad merge that kept both sides of a cassette leaves ``interactions:`` twice; YAML and JSON
    readers keep the last one, so the first side's calls were dropped and the import said nothing. A key
    a YAML merge (``<<``) brings in may still be set again: that is how merges are written."""
    from forkpoint.errors import ImportFormatError

    path = tmp_path / "merged.yaml"
    side = yaml.safe_dump({"interactions": [_chat_interaction(1)]})
    path.write_text(side + side.replace("q1", "q2"))
    with pytest.raises(
        ImportFormatError, match=r"merged.yaml: the key 'interactions' is set twice at line 18"
    ):
        import_file(path, store=tmp_path / "store")
    side = json.dumps({"interactions": [_chat_interaction(1)]})
    (tmp_path / "merged.json").write_text(side[:-1] + ", " + side[1:].replace("q1", "q2"))
    with pytest.raises(
        ImportFormatError, match=r"merged.json: the key 'interactions' is set twice in one object"
    ):
        import_file(tmp_path / "merged.json", store=tmp_path / "store")
    base = _chat_interaction(1)
    doc = yaml.safe_dump(
        {"base": base["response"], "interactions": [{"request": base["request"], "response": "X"}]}
    )
    path.write_text(
        doc.replace("base:", "base: &r", 1).replace(
            "response: X", "response:\n    <<: *r\n    status: {code: 201}"
        )
    )
    (call,) = forkpoint.Session.load(import_file(path, store=tmp_path / "store")).by_type("model_call")
    assert call["response"]["status"] == 201


def test_a_date_header_that_is_no_date_is_named(tmp_path: Path) -> None:
    """A response whose ``Date`` header was no date (a filter's placeholder) was taken as one
    without the header, said nowhere."""
    first, second = _chat_interaction(1), _chat_interaction(2)
    first["response"]["headers"]["Date"] = ["DATE-XXX"]
    second["response"]["headers"]["Date"] = ["Mon, 08 Dec 2025 23:16:56 GMT"]
    path = tmp_path / "dated.json"
    path.write_text(json.dumps({"interactions": [first, second]}))
    adjusted = forkpoint.Session.load(import_file(path, store=tmp_path / "store")).header["imported_from"][
        "adjusted"
    ]
    assert "the Date header of interaction(s) 1 is no time ('DATE-XXX'): taken as none" in adjusted, adjusted


def test_an_openhands_timestamp_that_is_no_time_is_named(tmp_path: Path) -> None:
    """An OpenHands event whose timestamp was no time was taken as one without a time, said
    nowhere (the import said the file had no times)."""
    response = {
        "id": "r1",
        "created": 1704067200,
        "choices": [{"message": {"role": "assistant", "content": "ok"}}],
    }
    events = [
        {
            "id": 1,
            "source": "user",
            "action": "message",
            "args": {"content": "fix it"},
            "timestamp": "2024-01-01T00:00:00",
        },
        {
            "id": 2,
            "source": "agent",
            "action": "run",
            "args": {"command": "ls"},
            "timestamp": "yesterday",
            "tool_call_metadata": {
                "function_name": "execute_bash",
                "tool_call_id": "c1",
                "model_response": response,
            },
        },
    ]
    path = tmp_path / "events.json"
    path.write_text(json.dumps(events))
    adjusted = forkpoint.Session.load(import_file(path, store=tmp_path / "store")).header["imported_from"][
        "adjusted"
    ]
    assert "the timestamp of event(s) 2 is no time ('yesterday'): taken as none" in adjusted, adjusted


needs_trajectories = pytest.mark.skipif(
    not TRAJECTORIES.is_dir(),
    reason=f"real trajectories not found at {TRAJECTORIES} (../shared/realdata is absent)",
)


@needs_trajectories
def test_openhands_keeps_one_clock(tmp_path: Path) -> None:
    session = forkpoint.Session.load(
        import_file(TRAJECTORIES / "openhands__basic.json", store=tmp_path / "store")
    )
    calls = [e for e in session.events if e["type"] in ("model_call", "tool_call")]
    times = [datetime.fromisoformat(e["ts"].replace("Z", "+00:00")) for e in calls]
    assert times == sorted(times)  # never backwards
    assert (times[-1] - times[0]).total_seconds() < 3600  # the run took seconds, not years
    # The first model response was created 2025-01-28T06:45:13Z; its action is stamped 22:45:13 local.
    assert calls[0]["ts"].startswith("2025-01-28T06:45:13")
    assert all(e.get("duration_ms") is None or 0 <= e["duration_ms"] < 60_000 for e in calls)
    assert "moved by +8 h to UTC" in session.header["imported_from"]["adjusted"][-1]


@needs_trajectories
def test_a_bare_mini_swe_agent_message_list(tmp_path: Path) -> None:
    doc = json.loads((TRAJECTORIES / "mini-swe-agent__sqlfluff-2419.traj.json").read_text())
    path = tmp_path / "messages.json"
    path.write_text(json.dumps(doc["messages"]))
    session = forkpoint.Session.load(import_file(path, store=tmp_path / "store"))
    assert session.header["imported_from"]["format"] == "mini-swe-agent"
    assert len(session.by_type("model_call")) == 41 and len(session.by_type("tool_call")) == 41
    assert any("a bare message list has no `info`" in m for m in session.header["imported_from"]["missing"])


def test_a_trajectory_whose_actions_cannot_be_found_says_so(tmp_path: Path) -> None:
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "Fix the bug."},
        {"role": "assistant", "content": "THOUGHT: look first.\n\n```bash\nls\n```"},
        {"role": "user", "content": "<returncode>0</returncode><output>a.py</output>"},
        {"role": "assistant", "content": "THOUGHT: now edit.\n\n<command>sed -i s/x/y/ a.py</command>"},
        {"role": "user", "content": "<returncode>0</returncode><output></output>"},
    ]
    path = tmp_path / "odd.json"
    path.write_text(json.dumps(messages))
    session = forkpoint.Session.load(import_file(path, store=tmp_path / "store"))
    assert len(session.by_type("model_call")) == 2 and len(session.by_type("tool_call")) == 1
    missing = session.header["imported_from"]["missing"]
    assert any("the action of 1 assistant message(s) (messages 5)" in m for m in missing), missing
    assert "the action of 1 assistant message(s)" in session.events[0]["text"]  # the import note says it
    # A bare list has no times: its notes do not also claim completion times (they contradicted each other).
    assert not any("completion times" in m for m in missing), missing
    assert any("no times in the file" in m for m in session.header["imported_from"]["adjusted"])


@pytest.mark.parametrize("calls", ["nope", ["not an object"], {"id": "c1"}])
def test_tool_calls_that_are_no_list_of_calls_are_refused_not_invented(tmp_path: Path, calls: Any) -> None:
    """``"tool_calls": "nope"`` was read as four calls of ``bash()``, one a character, with null
    results, and the import said only that their output was missing."""
    from forkpoint.errors import ImportFormatError

    path = tmp_path / "messages.json"
    path.write_text(
        json.dumps(
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "tool_calls": calls}]
        )
    )
    with pytest.raises(ImportFormatError, match=f"{path}: .*tool_calls must be a list of objects"):
        import_file(path, store=tmp_path / "store")
    assert not (tmp_path / "store").exists() or not list((tmp_path / "store").glob("*/session.jsonl"))


def _swe_agent(observation: Any) -> dict[str, Any]:
    return {
        "trajectory": [{"action": "ls", "observation": observation, "response": "ls", "thought": ""}],
        "history": [],
    }


def test_an_imported_result_keeps_big_integers_and_its_own_type_key(tmp_path: Path) -> None:
    """An integer beyond 64 bits in a JSON file was imported as a float (orjson reads one so: 2**70
    became 1.1805916207174113e+21); an observation holding a ``$type`` key of its own (JSON.NET writes
    them) was stored as it is and read back as a typed node: ``show`` printed it as another value."""
    observation = {"id": 2**70, "$type": "os:system", "kind": "dataclass", "value": {"a": 1}}
    path = tmp_path / "run.traj"
    path.write_text(json.dumps(_swe_agent(observation)))
    session = forkpoint.Session.load(import_file(path, store=tmp_path / "store"))
    (call,) = session.by_type("tool_call")
    assert forkpoint.values.decode(call["result"]) == observation
    assert type(forkpoint.values.decode(call["result"])["id"]) is int


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("observation:\n    1: a\n", "line 7: the mapping key 1 (int) is not a string"),
        ("observation: !!set {a, b}\n", "line 6: a YAML set (!!set) is not JSON data"),
    ],
)
def test_yaml_that_no_session_can_hold_is_refused_and_leaves_no_session(
    tmp_path: Path, text: str, said: str
) -> None:
    """A YAML file with a key that is not a string (an unquoted ``50256:`` in a hand-edited
    ``logit_bias``) or a set failed while the session was written: ``import`` said that the
    *session's* log had a bad key, and left a session of half the file in the store, ended with exit
    code 1 as if a run had crashed (it passed ``verify`` and was listed by ``ls``)."""
    from forkpoint.errors import ImportFormatError

    doc = "trajectory:\n- action: ls\n  response: ls\n  thought: ''\n  " + text
    path = tmp_path / "run.traj"
    path.write_text("history: []\n" + doc)
    store = tmp_path / "store"
    with pytest.raises(ImportFormatError, match=re.escape(f"{path}: {said}")):
        import_file(path, store=store)
    assert not store.exists() or not [p for p in store.iterdir() if (p / "session.jsonl").exists()]


@pytest.mark.parametrize("seconds", [1e308, -5])
def test_a_duration_no_call_can_take_is_refused(tmp_path: Path, seconds: float) -> None:
    """An ``execution_time`` of 1e308 ended ``import`` in an OverflowError traceback; a negative one
    was stored, and ``show`` printed a call of -5000.0 ms."""
    from forkpoint.errors import ImportFormatError

    doc = _swe_agent("ok")
    doc["trajectory"][0]["execution_time"] = seconds
    path = tmp_path / "run.traj"
    path.write_text(json.dumps(doc))
    with pytest.raises(ImportFormatError, match="has a duration of .* ms: not a time a call can have taken"):
        import_file(path, store=tmp_path / "store")
    assert not (tmp_path / "store").exists() or not any((tmp_path / "store").glob("*/session.jsonl"))


def test_a_timestamp_out_of_range_is_an_error_not_a_traceback(tmp_path: Path) -> None:
    from forkpoint.errors import ImportFormatError

    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "```bash\nls\n```", "extra": {"timestamp": 1e30}},
        {"role": "user", "content": "out"},
    ]
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"trajectory_format": "mini-swe-agent-1.1", "messages": messages}))
    with pytest.raises(ImportFormatError, match="could not be read as one .OverflowError"):
        import_file(path, store=tmp_path / "store")


def test_an_import_that_fails_while_it_is_written_leaves_no_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever failed once the session was created (a full disk, a bug) ended it with exit code 1 and
    kept it: a session of half the file, listed by ``ls`` as a run that crashed."""
    import forkpoint.importers.base as base

    def full(*args: object, **kw: object) -> None:
        raise OSError(28, "No space left on device")

    doc = _swe_agent("ok")
    path = tmp_path / "run.traj"
    path.write_text(json.dumps(doc))
    monkeypatch.setattr(base, "event_key", full)  # the first tool call's key: after the note
    with pytest.raises(OSError, match="No space left"):
        import_file(path, store=tmp_path / "store")
    assert [p.name for p in (tmp_path / "store").iterdir() if not p.name.startswith(".")] == []
