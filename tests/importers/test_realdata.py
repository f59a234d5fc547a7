"""Real provider traffic, read in place from ../shared/realdata/cassettes (never copied here).

A local server answers with each cassette's recorded responses — status, headers, bytes and SSE
framing as recorded — while the real openai and anthropic SDKs send the cassette's recorded
requests. The objects the SDK parses live, while forkpoint records, and while forkpoint replays with
the server stopped must be equal, field by field.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
import yaml

import forkpoint
from tests.modelserver import LocalServer, Reply, Route, Stream
from tests.realdata import CASSETTES, cassette_files

pytestmark = pytest.mark.skipif(
    not CASSETTES.is_dir(), reason=f"real cassettes not found at {CASSETTES} (../shared/realdata is absent)"
)


def load(path: Path) -> list[dict[str, Any]]:
    """Interactions of a VCR.py cassette in either dialect, as (request body, response) pairs."""
    out = []
    for it in yaml.safe_load(path.read_text())["interactions"]:
        rq, rs = it["request"], it["response"]
        body = rq["parsed_body"] if "parsed_body" in rq else json.loads(rq["body"])
        if "parsed_body" in rs:
            raw = json.dumps(rs["parsed_body"]).encode()
        else:
            raw = (
                rs["body"]["string"].encode()
                if isinstance(rs["body"]["string"], str)
                else rs["body"]["string"]
            )
        headers = [
            (k, v)
            for k, values in rs["headers"].items()
            for v in (values if isinstance(values, list) else [values])
            if k.lower() not in ("content-length", "transfer-encoding", "content-encoding", "connection")
        ]
        out.append({"uri": rq["uri"], "body": body, "status": rs["status"], "headers": headers, "raw": raw})
    return out


def play(interactions: list[dict[str, Any]]) -> Route:
    """A route for the shared local server: the n-th request gets the n-th recorded response, SSE
    events flushed one by one as chunks of their own."""

    def answer(request: dict[str, Any]) -> Reply | Stream:
        it = interactions[(request["n"] - 1) % len(interactions)]
        status, reason, headers, raw = it["status"]["code"], it["status"]["message"], it["headers"], it["raw"]
        if b"data:" in raw[:200] or raw.startswith(b"event:"):
            events = [piece + b"\n\n" for piece in raw.split(b"\n\n") if piece]
            return Stream(events, status=status, reason=reason, ctype=None, headers=headers)
        return Reply(raw, status, reason=reason, ctype=None, headers=headers)

    return answer


def cassette_server(interactions: list[dict[str, Any]]) -> LocalServer:
    server = LocalServer()
    server.route("*", play(interactions))
    return server


def dump(value: Any) -> Any:
    return value.model_dump(mode="json") if hasattr(value, "model_dump") else value


def create_for(url: str, uri: str, *, aio: bool) -> Any:
    """The real SDK's create method that sends the recorded request to ``uri`` (through ``url``)."""
    if "anthropic" in uri:
        an_cls = anthropic.AsyncAnthropic if aio else anthropic.Anthropic
        client = an_cls(base_url=url, api_key="sk-ant-test-0000000000000000000000", max_retries=0)
        return client.beta.messages.create if "beta=true" in uri else client.messages.create
    oa_cls = openai.AsyncOpenAI if aio else openai.OpenAI
    oa = oa_cls(base_url=url + "/v1", api_key="sk-test-000000000000000000000000", max_retries=0)
    return oa.responses.create if uri.endswith("/responses") else oa.chat.completions.create


def run_sync(url: str, interactions: list[dict[str, Any]]) -> list[Any]:
    """Send each recorded request through the real SDK; return what the SDK parsed."""
    results: list[Any] = []
    for it in interactions:
        body = dict(it["body"])
        out = create_for(url, it["uri"], aio=False)(**body)
        results.append([dump(e) for e in out] if body.get("stream") else dump(out))
    return results


async def run_async(url: str, interactions: list[dict[str, Any]]) -> list[Any]:
    results: list[Any] = []
    for it in interactions:
        body = dict(it["body"])
        out = await create_for(url, it["uri"], aio=True)(**body)
        results.append([dump(e) async for e in out] if body.get("stream") else dump(out))
    return results


@pytest.fixture(params=cassette_files(), ids=lambda p: p.stem)
def cassette(request: pytest.FixtureRequest) -> Iterator[list[dict[str, Any]]]:
    yield load(request.param)


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_record_and_replay_real_cassette(
    cassette: list[dict[str, Any]], flavour: str, tmp_path: Path
) -> None:
    def call(url: str) -> list[Any]:
        return run_sync(url, cassette) if flavour == "sync" else asyncio.run(run_async(url, cassette))

    with cassette_server(cassette) as live_server:
        live = call(live_server.url)

    with cassette_server(cassette) as server, forkpoint.record(store=tmp_path) as rec:
        recorded = call(server.url)
    assert recorded == live
    # The SDK sent the cassette's own requests: forkpoint stored them as the rendered prompt.
    session = forkpoint.Session.load(rec.session_path)
    calls = session.by_type("model_call")
    assert [c["request"]["body"] for c in calls] == [r["body"] for r in server.requests]
    streamed = [c for c in calls if c["response"]["body_kind"] == "stream"]
    for c, it in zip(calls, cassette, strict=True):
        if c in streamed:
            text = "".join(chunk for _, chunk in c["response"]["chunks"])
            assert text.encode() == it["raw"]  # every byte, SSE framing included
            assert len(c["response"]["chunks"]) > 1
        assert c["summary"]["model"] == it["body"]["model"]

    with forkpoint.replay(rec.session_path) as rp:  # the server is gone: only the session can answer
        replayed = call(server.url)
    assert replayed == live
    report = rp.report()
    assert report["matched"] == report["recorded"] == len(cassette)
    assert report["unused"] == [] and report["divergence"] is None


def test_replay_keeps_chunk_boundaries_of_real_stream(tmp_path: Path) -> None:
    import httpx2

    its = load(CASSETTES / "crewai__anthropic_stream_tool_call.yaml")
    body = its[0]["body"]
    with cassette_server(its) as server, forkpoint.record(store=tmp_path) as rec, httpx2.Client() as client:
        with client.stream("POST", server.url + "/v1/messages", json=body) as r:
            live_chunks = list(r.iter_bytes())
    with forkpoint.replay(rec.session_path), httpx2.Client() as client:
        with client.stream("POST", server.url + "/v1/messages", json=body) as r:
            replay_chunks = list(r.iter_bytes())
    assert replay_chunks == live_chunks
    assert b"".join(live_chunks) == its[0]["raw"]
