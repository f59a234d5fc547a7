"""Amazon Bedrock through boto3: Converse and ConverseStream (with tool use) against the local server,
which speaks the AWS event stream; recorded with one set of credentials, replayed offline with another.
botocore signs every request (SigV4) and parses the event stream itself, so this is the real path."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest

import forkpoint
from forkpoint import eventstream, providers, redact
from forkpoint.show import render
from tests.modelserver import LocalServer, Reply, Stream, aws_event, json_reply

MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
TOOLS = {
    "tools": [
        {
            "toolSpec": {
                "name": "add",
                "description": "add two numbers",
                "inputSchema": {"json": {"type": "object", "properties": {"a": {"type": "integer"}}}},
            }
        }
    ]
}
RECORD_KEY = ("AKIAAAAAAAAAAAAAAAAA", "recording-secret-0123456789abcdefghijklmn")
REPLAY_KEY = ("AKIABBBBBBBBBBBBBBBB", "replaying-secret-0123456789abcdefghijklmn")


@contextlib.contextmanager
def invoke_server(answer: Any, chunks: list[bytes]) -> Iterator[LocalServer]:
    """A Bedrock runtime on loopback answering InvokeModel with ``answer`` (JSON) and
    InvokeModelWithResponseStream with the event-stream ``chunks``."""
    with LocalServer() as srv:
        srv.route("/model/*/invoke", lambda r: Reply(json.dumps(answer).encode(), ctype="application/json"))
        srv.route(
            "/model/*/invoke-with-response-stream",
            lambda r: Stream(chunks, ctype="application/vnd.amazon.eventstream"),
        )
        yield srv


def _client(base: str, key: tuple[str, str]) -> Any:
    return boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=base,
        aws_access_key_id=key[0],
        aws_secret_access_key=key[1],
        aws_session_token="session-token-" + key[0],
    )


def _streamed(response: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The assistant message and stop reason of a ConverseStream answer, as an agent assembles them."""
    content: list[dict[str, Any]] = []
    use: dict[str, Any] | None = None
    stop = ""
    for ev in response["stream"]:
        if "contentBlockStart" in ev:
            start = ev["contentBlockStart"]["start"]["toolUse"]
            use = {"toolUseId": start["toolUseId"], "name": start["name"], "input": ""}
        elif "contentBlockDelta" in ev:
            delta = ev["contentBlockDelta"]["delta"]
            if "text" in delta:
                if not content or "text" not in content[-1]:
                    content.append({"text": ""})
                content[-1]["text"] += delta["text"]
            elif use is not None:
                use["input"] += delta["toolUse"]["input"]
        elif "contentBlockStop" in ev and use is not None:
            content.append({"toolUse": {**use, "input": json.loads(use["input"])}})
            use = None
        elif "messageStop" in ev:
            stop = ev["messageStop"]["stopReason"]
    return {"role": "assistant", "content": content}, stop


def agent(base: str, key: tuple[str, str], *, stream: bool) -> list[Any]:
    """A tool-using loop: ask, run each ``add`` the model asks for, send the results, until it answers."""
    client = _client(base, key)
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"text": "add 2 and 3"}]}]
    said: list[Any] = []
    for _ in range(4):
        if stream:
            message, stop = _streamed(
                client.converse_stream(modelId=MODEL, messages=messages, toolConfig=TOOLS)
            )
        else:
            answer = client.converse(modelId=MODEL, messages=messages, toolConfig=TOOLS)
            message, stop = answer["output"]["message"], answer["stopReason"]
        messages.append(message)
        said.append(message["content"])
        if stop != "tool_use":
            return said
        results = []
        for block in message["content"]:
            if "toolUse" in block:
                total = block["toolUse"]["input"]["a"] + block["toolUse"]["input"]["b"]
                results.append(
                    {
                        "toolResult": {
                            "toolUseId": block["toolUse"]["toolUseId"],
                            "content": [{"json": {"sum": total}}],
                        }
                    }
                )
        messages.append({"role": "user", "content": results})
    return said


@pytest.fixture
def recorded(store: Path) -> tuple[Path, list[Any], LocalServer]:
    srv = LocalServer(chat_script=[[("add", {"a": 2, "b": 3})], "the sum is 5"], chunk_delay=0.002)
    with forkpoint.record(store=store) as rec:
        live = [agent(srv.url, RECORD_KEY, stream=False), agent(srv.url, RECORD_KEY, stream=True)]
    srv.stop()
    return rec.session_path, live, srv


def test_converse_and_converse_stream_replay_offline_with_other_credentials(
    recorded: tuple[Path, list[Any], LocalServer],
) -> None:
    path, live, srv = recorded
    tool_turn = [{"toolUse": {"toolUseId": "tooluse_0_0", "name": "add", "input": {"a": 2, "b": 3}}}]
    assert live == [[tool_turn, [{"text": "the sum is 5"}]]] * 2
    with forkpoint.replay(path) as rp:
        again = [agent(srv.url, REPLAY_KEY, stream=False), agent(srv.url, REPLAY_KEY, stream=True)]
    report = rp.report()
    assert again == live
    assert report["reproduced"] and report["matched"] == 4, report


def test_signing_never_reaches_disk(recorded: tuple[Path, list[Any], LocalServer]) -> None:
    path, _, _ = recorded
    stored = b"".join(p.read_bytes() for p in path.rglob("*") if p.is_file())
    for needle in (
        b"x-amz-date",
        b"X-Amz-Date",
        b"AWS4-HMAC-SHA256",
        b"amz-sdk-invocation-id",
        RECORD_KEY[0].encode(),
        RECORD_KEY[1].encode(),
    ):
        assert needle not in stored, needle
    assert b"session-token-" not in stored
    for event in forkpoint.Session.load(path).by_type("model_call"):
        headers = {k.lower(): v for k, v in event["request"]["headers"]}
        assert not headers.keys() & {"x-amz-date", "x-amz-security-token", "x-amz-content-sha256"}
        # (signed anew at every request: kept as the placeholder of the key id that signed it)
        assert headers["authorization"] == redact.placeholder("aws-access-key", RECORD_KEY[0])


def _converse(url: str) -> Any:
    """One Bedrock converse call through a new boto3 session (its credential chain searched anew)."""
    client = boto3.session.Session().client("bedrock-runtime", region_name="us-east-1", endpoint_url=url)
    answer = client.converse(modelId=MODEL, messages=[{"role": "user", "content": [{"text": "hi"}]}])
    return answer["output"]


def _replays_without_and_with_credentials(
    session: Path, url: str, live: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replayed with no credentials (served the recorded fetches), then with credentials in the
    environment (fetching none): both reproduce."""
    with forkpoint.replay(session) as rp:
        assert _converse(url) == live
    assert rp.report()["reproduced"], rp.report()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", REPLAY_KEY[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", REPLAY_KEY[1])
    with forkpoint.replay(session) as rp:
        assert _converse(url) == live
    assert rp.report()["reproduced"], rp.report()


def _no_credentials(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> None:
    """No AWS credentials where botocore looks first (the environment, the shared files), so that it
    fetches them over HTTP as on a cloud machine."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp / "none"))


def test_credentials_botocore_fetched_over_http_never_reach_disk(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On ECS, EKS or EC2, botocore fetches temporary credentials over HTTP (the container or
    instance metadata endpoint) before its first call: that answer is recorded as a plain HTTP call,
    and its session token (``Token``, a key no secret-field rule names) was kept in the clear."""
    from tests.test_security import leaks

    token = "IQoJb3JpZ2luX2VjEJr//////////wEaCXVzLWVhc3QtMSJHMEUCIQ" + "Dq7x9Vb3kZ" * 30 + "=="
    secret = "containerSecret0123456789abcdefghijklmnopq"
    creds = {
        "AccessKeyId": "ASIAQXYZQXYZQXYZQXYZ",
        "SecretAccessKey": secret,
        "Token": token,
        "Expiration": "2099-01-01T00:00:00Z",
    }
    _no_credentials(monkeypatch, store)
    with LocalServer(chat_script=["hello"]) as srv:
        srv.route("/creds", lambda _r: Reply(json.dumps(creds).encode(), ctype="application/json"))
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", srv.url + "/creds")
        with forkpoint.record(store=store):
            _converse(srv.url)  # (not boto3.client(): its default session keeps an earlier test's keys)
        sent = [r["headers"].get("x-amz-security-token") for r in srv.requests if "converse" in r["path"]]
    assert sent == [token]  # the live run signed with the fetched credentials
    assert leaks(store, {"session-token": token, "secret": secret}) == []


def test_credentials_fetched_from_instance_metadata_when_recorded_need_not_be_fetched_on_replay(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recorded on EC2, botocore fetched its credentials from the instance metadata service; replayed
    where the credentials are in the environment, it fetches none. Those fetches only sign the
    requests: the replay reproduced (it said "the run ended before asking for every recorded call")."""
    _no_credentials(monkeypatch, store)
    creds = {"Code": "Success", "AccessKeyId": RECORD_KEY[0], "SecretAccessKey": RECORD_KEY[1]}
    creds |= {"Token": "imds-session", "Expiration": "2099-01-01T00:00:00Z"}

    with LocalServer(chat_script=["hello"]) as srv:
        srv.route("/latest/api/token", lambda _r: Reply(b"imds-token", ctype="text/plain"), method="PUT")
        roles = "/latest/meta-data/iam/security-credentials/"
        srv.route(roles, lambda _r: Reply(b"role", ctype="text/plain"))
        srv.route(roles + "role", lambda _r: json_reply(creds))
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", srv.url + "/")
        with forkpoint.record(store=store) as rec:
            live = _converse(srv.url)
        assert [r["path"] for r in srv.requests][:3] == [
            "/latest/api/token",
            "/latest/meta-data/iam/security-credentials/",
            "/latest/meta-data/iam/security-credentials/role",
        ]
    calls = forkpoint.Session.load(rec.session_path).by_type("model_call")
    kinds_of = [providers.call_kind(e) for e in calls]
    assert kinds_of == ["telemetry", "telemetry", "telemetry", "model"]
    _replays_without_and_with_credentials(rec.session_path, srv.url, live, monkeypatch)


def test_credentials_fetched_from_a_loopback_container_endpoint_need_not_be_fetched_on_replay(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """AWS_CONTAINER_CREDENTIALS_FULL_URI may name any loopback URL (aws-vault --ecs-server,
    Greengrass): botocore fetched its credentials there when recorded, and a replay with credentials
    in the environment fetches none. Only 169.254.170.2 and .23 were known: the fetch was plain HTTP,
    and the replay did not reproduce (a recorded call never asked for)."""
    _no_credentials(monkeypatch, store)
    creds = {"AccessKeyId": RECORD_KEY[0], "SecretAccessKey": RECORD_KEY[1], "Token": "container-session"}
    creds["Expiration"] = "2099-01-01T00:00:00Z"

    with LocalServer(chat_script=["hello"]) as srv:
        srv.route("/creds", lambda _r: json_reply(creds))
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", srv.url + "/creds")
        with forkpoint.record(store=store) as rec:
            live = _converse(srv.url)
        assert [r["path"] for r in srv.requests][0] == "/creds"
    calls = forkpoint.Session.load(rec.session_path).by_type("model_call")
    assert [providers.call_kind(e) for e in calls] == ["telemetry", "model"]
    _replays_without_and_with_credentials(rec.session_path, srv.url, live, monkeypatch)


def test_a_replay_leaves_no_placeholder_credentials_in_boto3s_default_session(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``boto3.client()`` resolves credentials once, in boto3's default session, and keeps them for
    the process. A replay sets placeholders for the AWS keys its recording had; a client made inside
    it cached them, and every client made after the block (a live run, a recording) was signed with
    the placeholder, a call AWS refuses, not with the keys the environment then had."""
    _no_credentials(monkeypatch, store)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", RECORD_KEY[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", RECORD_KEY[1])
    with LocalServer(chat_script=["hello"]) as srv:
        with forkpoint.record(store=store) as rec:
            live = _converse(srv.url)
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
        monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)  # (a fresh one, this test's only)
        ask = {"modelId": MODEL, "messages": [{"role": "user", "content": [{"text": "hi"}]}]}
        with forkpoint.replay(rec.session_path) as rp:
            client = boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=srv.url)
            assert client.converse(**ask)["output"] == live
        assert rp.report()["reproduced"], rp.report()
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", REPLAY_KEY[0])
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", REPLAY_KEY[1])
        with forkpoint.record(store=store):
            boto3.client("bedrock-runtime", region_name="us-east-1", endpoint_url=srv.url).converse(**ask)
        signed = [r["headers"]["authorization"] for r in srv.requests if "converse" in r["path"]]
    assert [s.split("Credential=")[1].split("/")[0] for s in signed] == [RECORD_KEY[0], REPLAY_KEY[0]]


def test_a_live_call_signed_with_the_served_credentials_is_not_sent_and_says_to_set_credentials(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The credentials botocore fetched when recorded are served from the recording, as placeholders:
    under models live, with no credentials of its own, botocore signs with them. Not sent (the
    check of a served placeholder); it was said as 'a secret's placeholder … which a recorded answer
    handed the program (the report's placeholders_served)', with placeholders_served empty and
    nothing said of the AWS credentials to set; botocore hands the program its own error."""
    import botocore.config
    from botocore.exceptions import ConnectionClosedError

    _no_credentials(monkeypatch, store)
    creds = {"AccessKeyId": RECORD_KEY[0], "SecretAccessKey": RECORD_KEY[1], "Token": "container-session"}
    creds["Expiration"] = "2099-01-01T00:00:00Z"
    with LocalServer(chat_script=["hello", "hello"]) as srv:
        srv.route("/creds", lambda _r: json_reply(creds))
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", srv.url + "/creds")
        with forkpoint.record(store=store) as rec:
            _converse(srv.url)
        with forkpoint.replay(rec.session_path, models="live") as rp, pytest.raises(ConnectionClosedError):
            once = botocore.config.Config(retries={"total_max_attempts": 1})  # (no back-off to wait out)
            session = boto3.session.Session()  # (its credential chain searched anew)
            client = session.client(
                "bedrock-runtime", region_name="us-east-1", endpoint_url=srv.url, config=once
            )
            client.converse(modelId=MODEL, messages=[{"role": "user", "content": [{"text": "hi"}]}])
        assert len([r for r in srv.requests if "converse" in r["path"]]) == 1  # the recorded one
    (blocked,) = rp.report()["network_blocked"]
    assert "an AWS credential's placeholder: set AWS credentials" in blocked, blocked


def test_botocores_retries_of_a_call_not_sent_are_one_destination_with_its_attempts(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """botocore retries the NetworkBlocked of a call not sent (its default: five attempts): the
    report listed the same host five times, and the summary line said "network blocked (5)" of one
    destination. Each destination is listed once, with how many attempts were made at it."""
    import types

    import botocore.endpoint
    from botocore.exceptions import ConnectionClosedError

    from forkpoint.replay import summary_line

    _no_credentials(monkeypatch, store)
    # (botocore's back-off between attempts, not waited out: its retries are what is tested)
    monkeypatch.setattr(botocore.endpoint, "time", types.SimpleNamespace(sleep=lambda _s: None))
    creds = {"AccessKeyId": RECORD_KEY[0], "SecretAccessKey": RECORD_KEY[1], "Token": "container-session"}
    creds["Expiration"] = "2099-01-01T00:00:00Z"
    with LocalServer(chat_script=["hello"]) as srv:
        srv.route("/creds", lambda _r: json_reply(creds))
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", srv.url + "/creds")
        with forkpoint.record(store=store) as rec:
            _converse(srv.url)
        with forkpoint.replay(rec.session_path, models="live") as rp, pytest.raises(ConnectionClosedError):
            _converse(srv.url)
    report = rp.report()
    (blocked,) = report["network_blocked"]
    attempts = report["network_attempts"][blocked]
    assert blocked.startswith(f"127.0.0.1:{srv.port} (not sent: ") and attempts > 1, report
    assert report["network_attempts"] == {blocked: attempts}
    line = summary_line(report)
    assert f"network blocked (1): {blocked} ({attempts} attempts)" in line and line.count(blocked) == 1, line


def test_container_credentials_recorded_hours_ago_are_not_refreshed_on_replay(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Container credentials expire hours after botocore fetched them: replayed later (without
    credentials of its own), botocore saw the served ones expired, fetched again, got the neutral
    404 and the run failed (CredentialRetrievalError) where the recorded one had succeeded."""
    import datetime as dt
    import types

    import botocore.credentials

    class Earlier(dt.datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
            return dt.datetime.now(tz) - dt.timedelta(hours=7)

    _no_credentials(monkeypatch, store)
    expired = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    creds = {
        "AccessKeyId": RECORD_KEY[0],
        "SecretAccessKey": RECORD_KEY[1],
        "Token": "t",
        "Expiration": expired,
    }

    with LocalServer(chat_script=["hello"]) as srv:
        srv.route("/creds", lambda _r: json_reply(creds))
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", srv.url + "/creds")
        with monkeypatch.context() as m:  # recorded 7 hours ago, its credentials good for 6 more
            m.setattr(botocore.credentials, "datetime", types.SimpleNamespace(datetime=Earlier))
            with forkpoint.record(store=store) as rec:
                live = _converse(srv.url)
    with forkpoint.replay(rec.session_path) as rp:
        assert _converse(srv.url) == live
    assert rp.report()["reproduced"], rp.report()


def test_the_event_stream_is_kept_one_message_per_chunk(
    recorded: tuple[Path, list[Any], LocalServer],
) -> None:
    path, _, _ = recorded
    streamed = forkpoint.Session.load(path).by_type("model_call")[2]["response"]
    assert streamed["body_kind"] == "stream"
    frames = [c if isinstance(c, bytes) else c.encode() for _, c in streamed["chunks"]]
    decoded = [eventstream.decode(f) for f in frames]
    assert all(d is not None for d in decoded)  # each chunk is exactly one message
    names = [eventstream.event_name(d[0]) for d in decoded if d is not None]
    assert names == [
        "messageStart",
        "contentBlockStart",
        "contentBlockDelta",
        "contentBlockStop",
        "messageStop",
        "metadata",
    ]
    times = [t for t, _ in streamed["chunks"]]
    assert times == sorted(times) and times[-1] > 0


def test_summary_show_and_genai_reading_understand_converse(
    recorded: tuple[Path, list[Any], LocalServer], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _, _ = recorded
    session = forkpoint.Session.load(path)
    calls = session.by_type("model_call")
    for first in (calls[0], calls[2]):  # Converse, ConverseStream
        s = first["summary"]
        assert (s["kind"], s["provider"], s["api"], s["model"]) == ("model", "bedrock", "converse", MODEL)
        assert s["tool_calls"] == [
            {"id": "tooluse_0_0", "name": "add", "arguments": s["tool_calls"][0]["arguments"]}
        ]
        assert json.loads(s["tool_calls"][0]["arguments"]) == {"a": 2, "b": 3}
        assert s["usage"]["input_tokens"] == 10 and s["usage"]["output_tokens"] == 5
        assert s["stop_reason"] == "tool_use" and s["n_tools"] == 1 and s["n_messages"] == 1
    assert calls[2]["summary"]["stream"] is True
    last = calls[3]
    assert (
        providers.response_text(last["request"]["url"], providers.recorded_response(last)) == "the sum is 5"
    )
    system, messages = providers.genai_input_messages(
        "converse", last["request"]["url"], last["request"]["body"]
    )
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert messages[1]["parts"][0] == {
        "type": "tool_call",
        "id": "tooluse_0_0",
        "name": "add",
        "arguments": {"a": 2, "b": 3},
    }
    assert providers.otel_provider_name(last["summary"]) == "aws.bedrock"
    render(session)
    out = capsys.readouterr().out
    assert MODEL in out and "bedrock converse" in out and "→ add(" in out and "the sum is 5" in out


@pytest.mark.parametrize("seq_of_answer, stream", [(2, False), (4, True)])
def test_a_text_override_of_a_converse_answer(
    recorded: tuple[Path, list[Any], LocalServer], seq_of_answer: int, stream: bool
) -> None:
    path, _, srv = recorded
    with forkpoint.replay(path, overrides=[f'model#{seq_of_answer}.text="forty-two"']) as rp:
        got = (
            agent(srv.url, REPLAY_KEY, stream=stream) if stream else agent(srv.url, REPLAY_KEY, stream=False)
        )
        if not stream:
            agent(srv.url, REPLAY_KEY, stream=True)
    assert got[-1] == [{"text": "forty-two"}]
    assert rp.report()["overrides"][0]["applied"]


def test_a_tool_calls_override_of_a_converse_stream(recorded: tuple[Path, list[Any], LocalServer]) -> None:
    path, _, srv = recorded
    spec = 'model#3.tool_calls=[{"name": "add", "arguments": {"a": 40, "b": 2}}]'
    with forkpoint.replay(path, overrides=[spec], on_divergence="live") as rp:
        agent(srv.url, REPLAY_KEY, stream=False)
        client = _client(srv.url, REPLAY_KEY)
        message, stop = _streamed(
            client.converse_stream(
                modelId=MODEL,
                messages=[{"role": "user", "content": [{"text": "add 2 and 3"}]}],
                toolConfig=TOOLS,
            )
        )
    assert stop == "tool_use"
    assert message["content"] == [
        {"toolUse": {"toolUseId": "tooluse_0_0", "name": "add", "input": {"a": 40, "b": 2}}}
    ]
    assert rp.report()["overrides"][0]["applied"]


REASONING = {"reasoningContent": {"reasoningText": {"text": "Add them.", "signature": "sig-1"}}}


def _thinking_answer(request: Any) -> Reply | Stream:
    """A Converse answer of Claude thinking before it asks for ``add``, whole or streamed."""
    use = {"toolUse": {"toolUseId": "tooluse_1", "name": "add", "input": {"a": 2, "b": 3}}}
    if not request["path"].endswith("converse-stream"):
        message = {"role": "assistant", "content": [REASONING, {"text": "Adding."}, use]}
        return json_reply({"output": {"message": message}, "stopReason": "tool_use", "usage": {}})
    thought = REASONING["reasoningContent"]["reasoningText"]
    start = {"toolUse": {"toolUseId": "tooluse_1", "name": "add"}}
    events = [
        ("messageStart", {"role": "assistant"}),
        (
            "contentBlockDelta",
            {"contentBlockIndex": 0, "delta": {"reasoningContent": {"text": thought["text"]}}},
        ),
        (
            "contentBlockDelta",
            {"contentBlockIndex": 0, "delta": {"reasoningContent": {"signature": "sig-1"}}},
        ),
        ("contentBlockStop", {"contentBlockIndex": 0}),
        ("contentBlockDelta", {"contentBlockIndex": 1, "delta": {"text": "Adding."}}),
        ("contentBlockStop", {"contentBlockIndex": 1}),
        ("contentBlockStart", {"contentBlockIndex": 2, "start": start}),
        ("contentBlockDelta", {"contentBlockIndex": 2, "delta": {"toolUse": {"input": '{"a": 2, "b": 3}'}}}),
        ("contentBlockStop", {"contentBlockIndex": 2}),
        ("messageStop", {"stopReason": "tool_use"}),
    ]
    return Stream([aws_event(k, v) for k, v in events], ctype="application/vnd.amazon.eventstream")


@pytest.mark.parametrize("stream", [False, True], ids=["converse", "converse-stream"])
def test_a_tool_calls_override_keeps_the_reasoning(store: Path, stream: bool) -> None:
    """An answer asked to call other tools keeps the reasoning it came with: Bedrock requires
    Claude's reasoning blocks back with an answer that used tools when the conversation goes on
    (a what-if going on live would have its next request refused without them), and the override asked
    to change the calls only. They were dropped, with nothing said."""

    def ask(key: tuple[str, str]) -> list[Any]:
        client = _client(srv.url, key)
        kw: dict[str, Any] = {"modelId": MODEL, "toolConfig": TOOLS}
        kw["messages"] = [{"role": "user", "content": [{"text": "add 2 and 3"}]}]
        if not stream:
            return list(client.converse(**kw)["output"]["message"]["content"])
        blocks: dict[int, dict[str, Any]] = {}  # the reasoning, the text and the calls, by index
        for ev in client.converse_stream(**kw)["stream"]:
            delta = ev.get("contentBlockDelta")
            if delta:
                block = blocks.setdefault(delta["contentBlockIndex"], {})
                for kind, part in delta["delta"].items():
                    for name, piece in (part if isinstance(part, dict) else {kind: part}).items():
                        block[f"{kind}.{name}"] = block.get(f"{kind}.{name}", "") + piece
        return [blocks[n] for n in sorted(blocks)]

    with LocalServer() as srv:
        srv.route("/model/*", _thinking_answer, method="POST")
        with forkpoint.record(store=store) as rec:
            live = ask(RECORD_KEY)
    spec = 'model#1.tool_calls=[{"name": "add", "arguments": {"a": 40, "b": 2}, "id": "tooluse_9"}]'
    with forkpoint.replay(rec.session_path, overrides=[spec]) as rp:
        got = ask(REPLAY_KEY)
    assert rp.report()["divergence"] is None and rp.report()["overrides"][0]["applied"]
    assert got[:2] == live[:2]  # the reasoning, with its signature, and the text
    assert "reasoningContent" in json.dumps(got[0])
    assert "40" in json.dumps(got[2:]) and len(got) == 3


def test_invoke_model_bodies_are_read_as_their_model_format() -> None:
    url = f"https://bedrock-runtime.us-east-1.amazonaws.com/model/{MODEL.replace(':', '%3A')}/invoke"
    body = {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "hi"}],
    }
    answer = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "text", "text": "hello"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 1},
    }
    s = providers.summarize(url, body, {"status": 200, "body": answer})
    assert (s["provider"], s["api"], s["model"], s["max_tokens"], s["stop_reason"]) == (
        "bedrock",
        "invoke",
        MODEL,
        50,
        "end_turn",
    )
    assert providers.response_text(url, {"status": 200, "body": answer}) == "hello"


def test_event_stream_framing_round_trips() -> None:
    frame = eventstream.encode(
        {":event-type": "chunk", ":message-type": "event"}, b'{"bytes": "eyJ0eXBlIjoibWVzc2FnZV9zdG9wIn0="}'
    )
    frames, rest = eventstream.split(frame + frame[:7])
    assert frames == [frame] and rest == frame[:7]
    decoded = eventstream.decode(frame)
    assert decoded is not None and decoded[0][":event-type"] == "chunk"
    # A chunk event (InvokeModelWithResponseStream) is read as the model's own event inside it.
    assert eventstream.as_sse([frame]) == 'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    assert eventstream.decode(frame[:-1]) is None and eventstream.decode(b"junk") is None


def test_opentelemetry_export_of_converse_calls(recorded: tuple[Path, list[Any], LocalServer]) -> None:
    from forkpoint import otel

    path, _, _ = recorded
    spans = [s for s in otel.plan(forkpoint.Session.load(path), content=True) if s.name.startswith("chat ")]
    assert [s.name for s in spans] == [f"chat {MODEL}"] * 4
    first, last = spans[0].attributes, spans[-1].attributes
    assert first["gen_ai.provider.name"] == "aws.bedrock" and first["gen_ai.response.finish_reasons"] == [
        "tool_use"
    ]
    assert json.loads(first["gen_ai.output.messages"])[0]["parts"][0]["name"] == "add"
    assert json.loads(last["gen_ai.output.messages"])[0]["parts"] == [
        {"type": "text", "content": "the sum is 5"}
    ]
    assert last["gen_ai.usage.input_tokens"] == 30


def test_invoke_model_and_its_response_stream_replay_offline(store: Path) -> None:
    """InvokeModel with a Claude body, and InvokeModelWithResponseStream, whose ``chunk`` events carry
    the model's own stream events (base64 in ``bytes``), as botocore receives them."""
    import base64

    from tests.modelserver import aws_event

    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [{"type": "text", "text": "hello there"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 4, "output_tokens": 2},
    }
    inner = [
        {"type": "message_start", "message": {**message, "content": [], "stop_reason": None}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hello"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " there"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}},
        {"type": "message_stop"},
    ]
    chunks = [aws_event("chunk", {"bytes": base64.b64encode(json.dumps(e).encode()).decode()}) for e in inner]
    body = {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 20,
        "messages": [{"role": "user", "content": "hi"}],
    }

    def run(base: str, key: tuple[str, str]) -> list[Any]:
        client = _client(base, key)
        whole = json.loads(client.invoke_model(modelId=MODEL, body=json.dumps(body))["body"].read())
        stream = client.invoke_model_with_response_stream(modelId=MODEL, body=json.dumps(body))["body"]
        events = [json.loads(ev["chunk"]["bytes"]) for ev in stream]
        return [
            whole["content"][0]["text"],
            "".join(e["delta"].get("text", "") for e in events if e["type"] == "content_block_delta"),
        ]

    with invoke_server(message, chunks) as srv:
        with forkpoint.record(store=store) as rec:
            live = run(srv.url, RECORD_KEY)
    assert live == ["hello there", "hello there"]
    calls = forkpoint.Session.load(rec.session_path).by_type("model_call")
    assert [(c["summary"]["api"], c["summary"]["stop_reason"]) for c in calls] == [("invoke", "end_turn")] * 2
    assert calls[1]["summary"]["usage"] == {"input_tokens": 4, "output_tokens": 2}
    assert len(calls[1]["response"]["chunks"]) == len(chunks)
    with forkpoint.replay(rec.session_path) as rp:
        assert run(srv.url, REPLAY_KEY) == live
    assert rp.report()["reproduced"]


def test_invoke_models_header_parameters_are_in_the_match_key(store: Path) -> None:
    """InvokeModel sends its guardrail, trace, latency and service tier as ``X-Amzn-Bedrock-*``
    headers: a program that changed its guardrail replayed "ok" with the old guardrail's answer."""
    body = json.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 5, "messages": []})
    answer = {"type": "message", "role": "assistant", "content": [{"type": "text", "text": "ok"}]}

    def run(base: str, key: tuple[str, str], guardrail: str, **more: str) -> str:
        client = _client(base, key)
        kw = dict(modelId=MODEL, body=body, guardrailIdentifier=guardrail, guardrailVersion="1", **more)
        return str(json.loads(client.invoke_model(**kw)["body"].read())["content"][0]["text"])

    with LocalServer() as srv:
        srv.route("/model/*/invoke", lambda r: Reply(json.dumps(answer).encode(), ctype="application/json"))
        with forkpoint.record(store=store) as rec:
            run(srv.url, RECORD_KEY, "strict", trace="ENABLED")
    with forkpoint.replay(rec.session_path) as rp:
        assert run(srv.url, REPLAY_KEY, "strict", trace="ENABLED") == "ok"
    assert rp.report()["reproduced"]
    for guardrail, more in [("lenient", {"trace": "ENABLED"}), ("strict", {"trace": "DISABLED"})]:
        with forkpoint.replay(rec.session_path) as rp:
            with pytest.raises(Exception, match="diverged"):
                run(srv.url, REPLAY_KEY, guardrail, **more)
        assert rp.report()["divergence"] is not None


def test_a_secret_in_an_event_streams_message_headers_never_reaches_disk(store: Path) -> None:
    """The capture layer scrubs each message's payload; a message's headers (here a debug header a
    server echoes) are left to the log writer's pass over the whole stream, which must still run."""
    from tests.modelserver import Stream
    from tests.test_security import leaks

    secret = "AKIA" + "QWERTYUIOPASDFGH"
    frames = [
        eventstream.encode(
            {":event-type": "messageStart", ":message-type": "event"}, b'{"role":"assistant"}'
        ),
        eventstream.encode(
            {":event-type": "contentBlockDelta", ":message-type": "event", "x-debug": f"creds {secret}"},
            b'{"delta":{"text":"hi"}}',
        ),
    ]
    with LocalServer() as server:
        server.route("/model/*/converse-stream", lambda _r: Stream(frames, ctype=eventstream.CONTENT_TYPE))
        with forkpoint.record(store=store):
            got = httpx.post(server.url + "/model/m1/converse-stream", json={"messages": []})
    assert secret.encode() in got.content  # the live run saw it
    assert leaks(store, {"aws-key": secret}) == []


def test_show_says_the_error_a_converse_stream_ended_with(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ConverseStream that breaks off with an exception message (HTTP 200): botocore raises it, the
    summary keeps its message, and show prints it beside the text streamed before it (it printed
    only the partial text, as if the stream had merely been cut short)."""
    exception = eventstream.encode(
        {
            ":exception-type": "modelStreamErrorException",
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        json.dumps({"message": "the model broke", "originalStatusCode": 500}).encode(),
    )
    events = [
        aws_event("messageStart", {"role": "assistant"}),
        aws_event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": "It is"}}),
        exception,
    ]
    with LocalServer() as srv:
        srv.route(
            "/model/*/converse-stream",
            lambda _: Stream(events, ctype="application/vnd.amazon.eventstream"),
        )
        with forkpoint.record(store=store) as rec:
            response = _client(srv.url, RECORD_KEY).converse_stream(
                modelId=MODEL, messages=[{"role": "user", "content": [{"text": "hi"}]}]
            )
            with pytest.raises(Exception, match="the model broke"):
                for _ in response["stream"]:
                    pass
            # (botocore never reads the stream on after the exception, nor closes it)
            _client(srv.url, RECORD_KEY).converse_stream(
                modelId=MODEL, messages=[{"role": "user", "content": [{"text": "again"}]}]
            )
    session = forkpoint.Session.load(rec.session_path)
    broke, later = session.by_type("model_call")
    assert broke["summary"]["error"] == "the model broke"
    # Written as its exception arrived, whole (it was written at the end of the run, after the call
    # made later, as "unfinished"; a process killed before its end lost it)
    assert broke["seq"] < later["seq"] and broke["response"]["ended"] == "complete", broke["response"]
    render(session)
    out = capsys.readouterr().out
    assert "“It is”" in out and "error: the model broke" in out


def test_invoke_model_of_nova_is_read_in_converse_shape(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Amazon Nova through InvokeModel takes and gives Converse's shapes (its stream's ``chunk``
    events carry ``{"contentBlockDelta": {…}}`` objects): the text, tool use, usage, stop reason and
    sampling are read from them (they were all missing: only Claude's format was read)."""
    import base64

    nova = "amazon.nova-lite-v1:0"
    use = {"toolUseId": "tooluse_n1", "name": "add", "input": {"a": 2, "b": 3}}
    usage = {"inputTokens": 13, "outputTokens": 6, "totalTokens": 19}
    answer = {
        "output": {"message": {"role": "assistant", "content": [{"text": "Adding."}, {"toolUse": use}]}},
        "stopReason": "tool_use",
        "usage": usage,
    }
    inner = [
        {"messageStart": {"role": "assistant"}},
        {"contentBlockDelta": {"delta": {"text": "Nova"}, "contentBlockIndex": 0}},
        {"contentBlockDelta": {"delta": {"text": " says hello"}, "contentBlockIndex": 0}},
        {"contentBlockStop": {"contentBlockIndex": 0}},
        {"messageStop": {"stopReason": "end_turn"}},
        {
            "metadata": {"usage": usage, "metrics": {}},
            "amazon-bedrock-invocationMetrics": {"inputTokenCount": 13},
        },
    ]
    chunks = [aws_event("chunk", {"bytes": base64.b64encode(json.dumps(e).encode()).decode()}) for e in inner]
    body = {
        "schemaVersion": "messages-v1",
        "system": [{"text": "be brief"}],
        "messages": [{"role": "user", "content": [{"text": "add 2 and 3"}]}],
        "inferenceConfig": {"max_new_tokens": 100, "temperature": 0.5, "top_p": 0.9},
        "toolConfig": TOOLS,
    }
    with invoke_server(answer, chunks) as srv:
        with forkpoint.record(store=store) as rec:
            client = _client(srv.url, RECORD_KEY)
            client.invoke_model(modelId=nova, body=json.dumps(body))["body"].read()
            list(client.invoke_model_with_response_stream(modelId=nova, body=json.dumps(body))["body"])
    session = forkpoint.Session.load(rec.session_path)
    whole, streamed = (c["summary"] for c in session.by_type("model_call"))
    for s in (whole, streamed):
        assert (s["api"], s["model"], s["n_messages"], s["n_tools"]) == ("invoke", nova, 1, 1)
        assert (s["temperature"], s["top_p"], s["max_tokens"]) == (0.5, 0.9, 100)
        assert s["usage"] == {
            "input_tokens": 13,
            "output_tokens": 6,
            "cache_read_input_tokens": None,
            "cache_creation_input_tokens": None,
        }
    assert whole["stop_reason"] == "tool_use" and whole["tool_calls"] == [
        {"id": "tooluse_n1", "name": "add", "arguments": '{"a":2,"b":3}'}
    ]
    assert streamed["stop_reason"] == "end_turn" and streamed["tool_calls"] == []
    render(session)
    out = capsys.readouterr().out
    assert "“Adding.”" in out and "“Nova says hello”" in out and "13→6 tok" in out
