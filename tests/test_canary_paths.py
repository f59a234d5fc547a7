"""The canary (tests/test_canary.py: the openai SDK over httpx, run under ``forkpoint record``) over
the capture paths it does not take, each recorded in-process with every secret of its kinds in the
text that makes it recognisable:

* urllib3, requests, http.client, urllib.request and aiohttp: sent in headers, the URL query and
  the body; answered in a JSON body and headers, a gzip and an x-gzip body, a binary body, and
  streams that cut each secret over two pieces (raw chunks of plain text, JSON lines as Ollama
  streams them, server-sent events of plain text);
* boto3's Bedrock: a ConverseStream and an InvokeModelWithResponseStream (the model's events
  base64 in each message) that cut each secret over two events, the credentials it signs with;
* MCP over stdio and streamable HTTP: the server's command line and URL, a tool's arguments and
  ``_meta``, its result (content, structured content, ``_meta``), progress and log messages, and
  an error.

Not one secret in the store, searched as tests/test_canary.py searches (decoded: packed lines
opened, blobs and git objects decompressed, base64 in them decoded twice over and decompressed)."""

from __future__ import annotations

import asyncio
import base64
import gzip
import http.client
import json
import sys
import textwrap
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

import forkpoint
from forkpoint import redact
from tests.modelserver import LocalServer, Reply, Stream, aws_event, binary_payload, json_reply
from tests.test_canary import CONFIG, CONTEXTS, KINDS, SECRETS, scan

ALL = "\n".join(CONTEXTS.values())


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


HEADERS = {
    "Authorization": "Bearer " + SECRETS["openai_proj"],
    "Content-Type": "application/json",
    **{f"X-Canary-{i}": _one_line(c) for i, c in enumerate(CONTEXTS.values())},
}
QUERY = urlencode({f"c{i}": c for i, c in enumerate(CONTEXTS.values())})
BODY = json.dumps({"input": ALL, "metadata": CONTEXTS}).encode()


def _split_texts() -> list[str]:
    """Pieces of a text that cut every secret in two: a quarter in one piece, the rest in the next."""
    texts = ["Here:\n"]
    for secret, ctx in KINDS.values():
        before, _, after = ctx.partition("{s}")
        cut = len(secret) // 4
        texts += [before + secret[:cut], secret[cut:] + after + "\n"]
    return texts


def _leak(request: dict[str, object]) -> Reply | Stream:
    """Every secret back, in the way the path asks for."""
    kind = str(request["path"]).rsplit("/", 1)[-1].split("?")[0]
    headers = [(f"X-Leak-{i}", _one_line(c)) for i, c in enumerate(CONTEXTS.values())]
    if kind == "json":
        return json_reply({"text": ALL, "contexts": CONTEXTS}, headers=headers)
    if kind in ("gzip", "x-gzip"):  # (x-gzip: gzip's other name, RFC 9110)
        body = gzip.compress(json.dumps({"text": ALL}).encode())
        return Reply(body, ctype="application/json", headers=[("Content-Encoding", kind)])
    if kind == "binary":
        return Reply(binary_payload(64) + ALL.encode() + binary_payload(64))
    if kind == "sse-text":  # plain text, a line break as two data lines of one event
        texts = ["".join(f"data: {line}\n" for line in t.split("\n")) + "\n" for t in _split_texts()]
        return Stream([t.encode() for t in texts])
    if kind == "ndjson":  # Ollama's stream: one JSON line per piece of the answer
        lines = [
            {"model": "m", "message": {"role": "assistant", "content": t}, "done": False}
            for t in _split_texts()
        ]
        return Stream([json.dumps(line).encode() + b"\n" for line in lines], ctype="application/x-ndjson")
    return Stream([t.encode() for t in _split_texts()], ctype="text/plain")


KINDS_OF_ANSWER = ("json", "gzip", "x-gzip", "binary", "split", "ndjson", "sse-text")


def _urllib3(base: str, kinds: tuple[str, ...]) -> list[bytes]:
    import urllib3

    with urllib3.PoolManager() as pool:
        return [
            pool.request("POST", f"{base}/leak/{k}?{QUERY}", body=BODY, headers=HEADERS).data for k in kinds
        ]


def _requests(base: str, kinds: tuple[str, ...]) -> list[bytes]:
    import requests

    with requests.Session() as s:
        return [s.post(f"{base}/leak/{k}?{QUERY}", data=BODY, headers=HEADERS).content for k in kinds]


def _httpclient(base: str, kinds: tuple[str, ...]) -> list[bytes]:
    out = []
    for k in kinds:
        conn = http.client.HTTPConnection("127.0.0.1", int(base.rsplit(":", 1)[1]))
        conn.request("POST", f"/leak/{k}?{QUERY}", body=BODY, headers={**HEADERS, "Accept-Encoding": "gzip"})
        data = conn.getresponse().read()
        out.append(gzip.decompress(data) if k.endswith("gzip") else data)  # (it never decodes)
        conn.close()
    return out


def _urllib_request(base: str, kinds: tuple[str, ...]) -> list[bytes]:
    out = []
    for k in kinds:
        req = urllib.request.Request(f"{base}/leak/{k}?{QUERY}", data=BODY, headers=HEADERS, method="POST")
        with urllib.request.urlopen(req) as r:
            data = r.read()
        out.append(gzip.decompress(data) if k.endswith("gzip") else data)  # (it never decodes)
    return out


def _aiohttp(base: str, kinds: tuple[str, ...]) -> list[bytes]:
    import aiohttp

    async def run() -> list[bytes]:
        async with aiohttp.ClientSession() as s:
            out = []
            for k in kinds:
                async with s.post(f"{base}/leak/{k}?{QUERY}", data=BODY, headers=HEADERS) as r:
                    data = await r.read()
                out.append(gzip.decompress(data) if k == "x-gzip" else data)  # (it decodes gzip only)
            return out

    return asyncio.run(run())


CLIENTS: dict[str, Callable[[str, tuple[str, ...]], list[bytes]]] = {
    "urllib3": _urllib3,
    "requests": _requests,
    "http.client": _httpclient,
    "urllib.request": _urllib_request,
    "aiohttp": _aiohttp,
}


@pytest.mark.parametrize("client", CLIENTS)
def test_no_secret_sent_or_answered_through_an_http_library_reaches_the_store(
    tmp_path: Path, server: LocalServer, client: str
) -> None:
    server.route("/leak/*", _leak)
    (tmp_path / "forkpoint.toml").write_text(CONFIG)
    store = tmp_path / "store"
    with redact.use_rules(redact.load_rules(tmp_path)):
        with forkpoint.record(store=store):
            answers = CLIENTS[client](server.url, KINDS_OF_ANSWER)
    for kind, got in zip(KINDS_OF_ANSWER, answers, strict=True):  # the live run saw every secret
        text = got.decode("latin-1").replace("\\n", "\n")  # (as JSON escapes it, in a JSON answer)
        if kind == "ndjson":
            text = "".join(json.loads(line)["message"]["content"] for line in got.splitlines())
        elif kind == "sse-text":  # (as a reader of the events joins them)
            events = got.decode().split("\n\n")
            text = "".join("\n".join(x.removeprefix("data: ") for x in e.split("\n")) for e in events)
        assert [k for k, s in SECRETS.items() if s not in text] == [], kind
    assert [r["query"] for r in server.requests][0]  # the query reached the server
    searched, found = scan([store])
    assert searched >= 2
    assert found == []


def _bedrock_events() -> tuple[list[bytes], list[bytes]]:
    """(ConverseStream, InvokeModelWithResponseStream of a Claude model) messages streaming every
    secret cut over two events; the second's carry Anthropic's events as base64 (``bytes``)."""
    converse = [aws_event("messageStart", {"role": "assistant"})]
    converse += [
        aws_event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": t}}) for t in _split_texts()
    ]
    converse += [
        aws_event("contentBlockStop", {"contentBlockIndex": 0}),
        aws_event("messageStop", {"stopReason": "end_turn"}),
        aws_event(
            "metadata", {"usage": {"inputTokens": 1, "outputTokens": 1, "totalTokens": 2}, "metrics": {}}
        ),
    ]
    inner: list[dict[str, object]] = [
        {"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                                               "content": [], "stop_reason": None,
                                               "usage": {"input_tokens": 1, "output_tokens": 0}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}
          for t in _split_texts()),
        {"type": "content_block_stop", "index": 0},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 1}},
        {"type": "message_stop"},
    ]  # fmt: skip
    invoke = [aws_event("chunk", {"bytes": base64.b64encode(json.dumps(e).encode()).decode()}) for e in inner]
    return converse, invoke


def test_no_secret_sent_or_streamed_through_bedrock_reaches_the_store(
    tmp_path: Path, server: LocalServer
) -> None:
    import boto3

    converse, invoke = _bedrock_events()
    server.route(
        "/model/*/converse-stream", lambda _r: Stream(converse, ctype="application/vnd.amazon.eventstream")
    )
    server.route(
        "/model/*/invoke-with-response-stream",
        lambda _r: Stream(invoke, ctype="application/vnd.amazon.eventstream"),
    )
    (tmp_path / "forkpoint.toml").write_text(CONFIG)
    store = tmp_path / "store"
    model = "anthropic.claude-3-haiku-20240307-v1:0"
    with redact.use_rules(redact.load_rules(tmp_path)):
        with forkpoint.record(store=store):
            client = boto3.client(
                "bedrock-runtime",
                region_name="us-east-1",
                endpoint_url=server.url,
                aws_access_key_id=SECRETS["aws_akia"],
                aws_secret_access_key=SECRETS["aws_secret_ini"],
                aws_session_token=SECRETS["aws_session_token_ini"],
            )
            messages = [{"role": "user", "content": [{"text": ALL}]}]
            stream = client.converse_stream(modelId=model, messages=messages)["stream"]
            conversed = "".join(
                e["contentBlockDelta"]["delta"]["text"] for e in stream if "contentBlockDelta" in e
            )
            body = {
                "anthropic_version": "bedrock-2023-05-31",
                "max_tokens": 9,
                "messages": [{"role": "user", "content": ALL}],
            }
            events = client.invoke_model_with_response_stream(modelId=model, body=json.dumps(body))["body"]
            invoked = "".join(
                e.get("delta", {}).get("text", "")
                for e in (json.loads(ev["chunk"]["bytes"]) for ev in events)
            )
    assert [k for k, s in SECRETS.items() if s not in conversed or s not in invoked] == []
    searched, found = scan([store])
    assert searched >= 2
    assert found == []


#: An MCP server that repeats every secret it is given: in a tool's result (content, structured
#: content and ``_meta``), its progress and log messages, and an error. Run as
#: ``python SCRIPT LEDGER TRANSPORT PORT [anything]``, like tests/integrations/mcp_calc_server.py.
MCP_SERVER = textwrap.dedent(
    """
    import sys

    from mcp import types

    try:
        from mcp.server.fastmcp import Context
        from mcp.server.fastmcp import FastMCP as Server
    except ImportError:  # mcp 2.x
        from mcp.server.mcpserver import Context
        from mcp.server.mcpserver import MCPServer as Server

    transport, port = sys.argv[2], int(sys.argv[3])
    http = transport != "stdio" and Server.__name__ == "FastMCP"
    server = Server("leaky", **({"host": "127.0.0.1", "port": port} if http else {}))


    @server.tool()
    async def echo(text: str, ctx: Context) -> types.CallToolResult:
        await ctx.report_progress(1, 2, text)
        await ctx.info(text)
        block = types.TextContent(type="text", text=text)
        return types.CallToolResult(content=[block], structuredContent={"text": text}, _meta={"seen": text})


    @server.tool()
    def fail(text: str) -> str:
        raise ValueError("cannot: " + text)


    if transport == "stdio":
        server.run()
    elif Server.__name__ == "FastMCP":
        server.run(transport)
    else:
        server.run(transport, host="127.0.0.1", port=port)
    """
)


async def _use_mcp(transport: str, script: Path, url: str | None) -> list[str]:
    """An agent's calls of the leaky server, every secret in its arguments and ``_meta``; what came
    back (results, progress, errors) as text."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client

    seen: list[str] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(message or "")

    if transport == "stdio":
        token = "--token=" + SECRETS["github_ghp"]  # a server's command line holding a key
        params = StdioServerParameters(command=sys.executable, args=[str(script), "-", "stdio", "0", token])
        opened = stdio_client(params)
    else:
        opened = streamable_http_client(f"{url}?api_key={SECRETS['query_token']}")
    async with opened as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        meta: Any = {"note": ALL}  # (the SDK's type names only the keys it knows)
        r = await session.call_tool("echo", {"text": ALL}, progress_callback=progress, meta=meta)
        seen += [json.dumps(r.model_dump(mode="json", by_alias=True))]
        failed = await session.call_tool("fail", {"text": ALL})
        seen += [json.dumps(failed.model_dump(mode="json", by_alias=True))]
    return seen


@pytest.mark.parametrize("transport", ["stdio", "streamable-http"])
def test_no_secret_through_an_mcp_server_reaches_the_store(tmp_path: Path, transport: str) -> None:
    from tests.integrations.test_mcp import mcp_server

    script = tmp_path / "leaky_server.py"
    script.write_text(MCP_SERVER)
    (tmp_path / "forkpoint.toml").write_text(CONFIG)
    store = tmp_path / "store"
    with mcp_server(transport, tmp_path / "ledger", script) as url:
        with redact.use_rules(redact.load_rules(tmp_path)):
            with forkpoint.record(store=store):
                seen = asyncio.run(_use_mcp(transport, script, url))
    saw = "\n".join(seen).replace("\\n", "\n")
    assert [k for k, s in SECRETS.items() if s not in saw] == []  # the live run saw every secret
    searched, found = scan([store])
    assert searched >= 2
    assert found == []
