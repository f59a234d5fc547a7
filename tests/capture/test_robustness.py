"""Capture and replay under the conditions real agents create: concurrency, retries, polling, failures,
abandoned streams, every kind of body, and child processes.

Recorders of HTTP traffic break in the same places: concurrent calls recorded in completion order,
identical requests replayed with the first answer every time, a timeout that leaves nothing recorded,
a stream abandoned half way that hangs or leaks a connection, a gzip body stored under the wrong
header, a multipart upload that cannot be matched. Each test here is one of those places, run against
a local server (loopback only) with the real httpx, httpx2, openai and anthropic clients.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
import os
import random
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import anthropic
import httpx
import httpx2
import openai
import orjson
import pytest

import forkpoint
from forkpoint import netns, verify
from forkpoint.log import LOG_NAME, Session, SessionWriter
from tests.logutil import stored_lines
from tests.modelserver import LocalServer, Reply, json_reply

LIBS = [pytest.param(httpx, id="httpx"), pytest.param(httpx2, id="httpx2")]
MODES = [pytest.param(False, id="sync"), pytest.param(True, id="async")]
API_KEY = "sk-test-robustness-key-0000000000000000"
FORKPOINT_CLI = [str(Path(sys.executable).with_name("forkpoint"))]
if not Path(FORKPOINT_CLI[0]).exists():  # pragma: no cover - forkpoint not installed as a script
    FORKPOINT_CLI = [sys.executable, "-m", "forkpoint.cli"]


# ============================================================================ the server

#: Every PNG-like body the server sends starts with these bytes.
PNG_HEAD = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def srv(server: LocalServer) -> LocalServer:
    """The shared local server (tests/modelserver.py: chat completions, Anthropic messages, generic
    ``kind=…`` routes, and the control headers ``x-delay-ms``, ``x-status``, ``x-scenario`` +
    ``x-fail`` and ``x-drop-after`` these tests steer it with), plus the endpoints only they need:

    * ``GET /v1/jobs/ID``: a job that is ``running`` for 3 polls and then ``done``.
    * ``POST /v1/audio/transcriptions`` (multipart) and ``POST /v1/audio/speech`` (binary answer).
    * ``GET /v1/image``: a PNG-like binary body, different every time.
    """
    polls: Counter[str] = Counter()

    @server.route("/v1/jobs/*")
    def job(request: dict[str, Any]) -> Reply:
        job = request["path"].rsplit("/", 1)[1]
        with server.lock:
            polls[job] += 1
            n = polls[job]
        status = "done" if n >= 4 else "running"
        return json_reply({"id": job, "poll": n, "nonce": uuid.uuid4().hex, "status": status})

    server.route("/v1/audio/transcriptions", lambda r: json_reply({"text": f"heard {len(r['raw'])} bytes"}))
    server.route("/v1/audio/speech", lambda r: Reply(b"ID3\x04\x00" + os.urandom(3000), ctype="audio/mpeg"))
    server.route("/v1/image", lambda r: Reply(PNG_HEAD + os.urandom(5000), ctype="image/png"))
    return server


def free_port() -> int:
    """A loopback port nobody listens on (connections to it are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def model_calls(session_path: Path) -> list[dict[str, Any]]:
    return Session.load(session_path).by_type("model_call")


def assert_log_valid(session_path: Path) -> None:
    """verify() is ok, and every line is one whole JSON object with seq 1, 2, 3… in file order."""
    result = verify(session_path)
    assert result.ok, result.problems
    assert not result.truncated
    lines = (session_path / LOG_NAME).read_bytes().split(b"\n")
    assert lines[-1] == b""
    seqs = [orjson.loads(line).get("seq") for line in lines[1:-1]]
    assert seqs == list(range(1, len(seqs) + 1))


def oai(url: str, **kw: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=API_KEY, **{"max_retries": 0, **kw})


def aoai(url: str, **kw: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key=API_KEY, **{"max_retries": 0, **kw})


def retry_waits(monkeypatch: pytest.MonkeyPatch, sdk: ModuleType) -> list[float]:
    """The waits a Stainless SDK (openai, anthropic) computes before each retry, from now on, as it
    computes them (a wall-clock bound would be a timing test): forkpoint's patch of the computation
    is in place once it recorded."""
    base = sys.modules[f"{sdk.__name__}._base_client"]
    waits: list[float] = []
    computed = base.BaseClient._calculate_retry_timeout

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        waits.append(computed(self, *args, **kwargs))
        return waits[-1]

    monkeypatch.setattr(base.BaseClient, "_calculate_retry_timeout", spy)
    return waits


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


# ============================================================================ 1. concurrency

N_ASYNC = 32


def scrambled_delay_ms(i: int) -> str:
    """Server-side delay of call ``i``: a permutation of 0…93 ms, so calls finish out of order."""
    return str((i * 11) % N_ASYNC * 3)


async def _gather_httpx2(url: str, jitter: random.Random) -> list[str]:
    async with httpx2.AsyncClient() as client:

        async def one(i: int) -> str:
            await asyncio.sleep(jitter.random() * 0.01)  # callers start (and finish) in any order
            r = await client.post(
                url + "/v1/chat/completions",
                json={"model": "m", "messages": user(f"q{i}")},
                headers={"x-delay-ms": scrambled_delay_ms(i)},
            )
            return str(r.json()["id"])

        return list(await asyncio.gather(*(one(i) for i in range(N_ASYNC))))


async def _gather_openai(url: str, jitter: random.Random) -> list[str]:
    client = aoai(url)

    async def one(i: int) -> str:
        await asyncio.sleep(jitter.random() * 0.01)
        r = await client.chat.completions.create(
            model="m", messages=user(f"q{i}"), extra_headers={"x-delay-ms": scrambled_delay_ms(i)}
        )
        return r.id

    try:
        return list(await asyncio.gather(*(one(i) for i in range(N_ASYNC))))
    finally:
        await client.close()


@pytest.mark.parametrize("runner", [_gather_httpx2, _gather_openai], ids=["httpx2", "openai"])
def test_concurrent_async_calls_are_recorded_once_and_each_caller_gets_its_own_answer(
    runner: Callable[[str, random.Random], Any], srv: LocalServer, store: Path
) -> None:
    with forkpoint.record(store=store) as rec:
        live = asyncio.run(runner(srv.url, random.Random(1)))
    assert len(set(live)) == N_ASYNC
    events = model_calls(rec.session_path)
    asked = [e["request"]["body"]["messages"][-1]["content"] for e in events]
    assert sorted(asked) == sorted(f"q{i}" for i in range(N_ASYNC))  # each call exactly once
    assert asked != [f"q{i}" for i in range(N_ASYNC)]  # ...in the order they finished, not sent
    assert_log_valid(rec.session_path)

    sent = len(srv.requests)
    with forkpoint.replay(rec.session_path) as rp:
        again = asyncio.run(runner(srv.url, random.Random(2)))
    assert again == live  # caller i got answer i, whatever order they ran in
    assert len(srv.requests) == sent
    assert rp.report()["matched"] == N_ASYNC and rp.report()["divergence"] is None


def _threads_httpx2(url: str, seed: int) -> dict[int, str]:
    out: dict[int, str] = {}
    with httpx2.Client() as client:

        def work(t: int) -> None:
            rng = random.Random(seed * 100 + t)
            for k in range(3):
                time.sleep(rng.random() * 0.005)
                r = client.post(
                    url + "/v1/chat/completions",
                    json={"model": "m", "messages": user(f"t{t}-{k}")},
                    headers={"x-delay-ms": str(rng.randrange(10))},
                )
                out[t * 10 + k] = r.json()["id"]

        _run_threads(work)
    return out


def _threads_openai(url: str, seed: int) -> dict[int, str]:
    out: dict[int, str] = {}
    with oai(url) as client:

        def work(t: int) -> None:
            rng = random.Random(seed * 100 + t)
            for k in range(3):
                time.sleep(rng.random() * 0.005)
                r = client.chat.completions.create(
                    model="m",
                    messages=user(f"t{t}-{k}"),
                    extra_headers={"x-delay-ms": str(rng.randrange(10))},
                )
                out[t * 10 + k] = r.id

        _run_threads(work)
    return out


def _run_threads(work: Callable[[int], None]) -> None:
    errors: list[BaseException] = []

    def guarded(t: int) -> None:
        try:
            work(t)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert not errors, errors


@pytest.mark.parametrize("runner", [_threads_httpx2, _threads_openai], ids=["httpx2", "openai"])
def test_threads_sharing_one_sync_client(
    runner: Callable[[str, int], dict[int, str]], srv: LocalServer, store: Path
) -> None:
    with forkpoint.record(store=store) as rec:
        live = runner(srv.url, 1)
    assert len(set(live.values())) == 24
    events = model_calls(rec.session_path)
    assert sorted(e["request"]["body"]["messages"][-1]["content"] for e in events) == sorted(
        f"t{t}-{k}" for t in range(8) for k in range(3)
    )
    assert_log_valid(rec.session_path)
    with forkpoint.replay(rec.session_path) as rp:
        assert runner(srv.url, 2) == live
    assert rp.report()["matched"] == 24


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_best_of_n_on_a_fresh_async_sdk_client_replays_each_caller_its_answer(
    sdk: str, srv: LocalServer, store: Path
) -> None:
    """The same request gathered 8 times on a *fresh* async client. Each first request of such a
    client waits on a worker thread (the SDK's platform lookup), so the order in which they reach
    the HTTP layer was random, run to run: caller k got another caller's answer on replay, and a
    different one every time. forkpoint takes that hop out while it is active (integrations/stainless)."""

    async def best_of_n() -> list[str]:
        if sdk == "openai":
            async with aoai(srv.url) as client:
                return list(
                    await asyncio.gather(
                        *(client.chat.completions.create(model="m", messages=user("same")) for _ in range(8))
                    )
                )
        async with anthropic.AsyncAnthropic(base_url=srv.url, api_key=API_KEY, max_retries=0) as client:
            return list(
                await asyncio.gather(
                    *(
                        client.messages.create(model="c", max_tokens=5, messages=user("same"))
                        for _ in range(8)
                    )
                )
            )

    def ids() -> list[str]:
        return [r.id for r in asyncio.run(best_of_n())]

    with forkpoint.record(store=store) as rec:
        live = ids()
    assert len(set(live)) == 8
    for _ in range(3):
        with forkpoint.replay(rec.session_path):
            assert ids() == live


def test_identical_concurrent_requests_replay_in_the_order_they_were_sent(
    srv: LocalServer, store: Path
) -> None:
    """Best-of-n: the same request sent 4 times at once. The server answers the last one first, so the
    calls *finish* in reverse order. A user expects the replay to give caller k the answer caller k
    got: identical requests are answered in the order they were **sent** (each event keeps its
    ``sent`` position), not the order they finished. An asyncio program sends in the same order
    every run, so this is what makes best-of-n deterministic on replay."""

    async def best_of_n() -> list[str]:
        async with httpx2.AsyncClient() as client:

            async def one(k: int) -> str:
                r = await client.post(
                    srv.url + "/v1/chat/completions",
                    json={"model": "m", "messages": user("same question"), "temperature": 1},
                    headers={"x-delay-ms": str((3 - k) * 150)},  # (apart enough on a loaded machine)
                )
                return str(r.json()["id"])

            return list(await asyncio.gather(*(one(k) for k in range(4))))

    with forkpoint.record(store=store) as rec:
        live = asyncio.run(best_of_n())
    events = model_calls(rec.session_path)
    assert [e["response"]["body"]["id"] for e in events] == live[::-1]  # finished last-sent first
    with forkpoint.replay(rec.session_path):
        assert asyncio.run(best_of_n()) == live
    assert [e.get("sent") for e in events] == [4, 3, 2, 1]


def test_identical_concurrent_tool_calls_replay_in_the_order_they_were_started(store: Path) -> None:
    """The same holds for tools: two identical calls of a polling tool started at once, the first
    started finishing last. Each caller must get on replay the answer it got live (the log holds
    them in the order they finished; ``sent`` keeps the order they began)."""
    started = itertools.count(1)

    @forkpoint.tool
    async def poll(job: str) -> dict[str, Any]:
        n = next(started)
        await asyncio.sleep(0.05 if n == 1 else 0)  # the first call is the slow one
        return {"job": job, "poll": n}

    async def both() -> list[dict[str, Any]]:
        return list(await asyncio.gather(poll("j1"), poll("j1")))

    with forkpoint.record(store=store) as rec:
        live = asyncio.run(both())
    assert [r["poll"] for r in live] == [1, 2]
    events = Session.load(rec.session_path).by_type("tool_call")
    assert [e["result"]["poll"] for e in events] == [2, 1]  # written as they finished
    assert [e["sent"] for e in events] == [2, 1]
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(both()) == live
    assert rp.report()["matched"] == 2 and next(started) == 3  # no tool body ran on replay


@pytest.mark.slow
def test_log_stays_valid_with_several_processes_appending(store: Path) -> None:
    """Four processes append 25 events each (lines of ~8 KB, more than one pipe buffer) to one
    session at once: every line is whole, the chain is unbroken and seq has no gap."""
    writer = SessionWriter.create(store, {"argv": ["test"], "tags": {}})
    writer.close()
    code = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from forkpoint.log import SessionWriter
        w = SessionWriter.open(Path(sys.argv[1]), fsync="never")
        for i in range(25):
            w.append({"type": "note", "text": f"{sys.argv[2]}-{i}", "data": {"pad": [f"x{j}" for j in range(1200)]}})
        w.close()
        """
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(writer.path), f"p{p}"]) for p in range(4)]
    assert all(p.wait(30) == 0 for p in procs)
    assert_log_valid(writer.path)
    notes = [e["text"] for e in Session.load(writer.path).events if e["type"] == "note"]
    assert sorted(notes) == sorted(f"p{p}-{i}" for p in range(4) for i in range(25))


# ============================================================================ 2. same request, different answers


@pytest.mark.slow
@pytest.mark.parametrize("is_async", MODES)
def test_sdk_retries_after_429_and_500_replay_in_recorded_order_without_waiting(
    is_async: bool, srv: LocalServer, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The openai SDK retries a 429 and a 500 with byte-identical bodies (only the
    ``x-stainless-retry-count`` header differs, and it is not in the match key). Replay answers the
    three attempts in recorded order, so the SDK makes the same 3 attempts and returns the same final
    answer. Live, the SDK waited the server's ``retry-after-ms`` (250 ms) twice; on replay the wait is
    skipped: a user replays to debug, and waiting for a server that is not there helps nobody. The
    recorded headers are served unchanged (the SDK decides *whether* to retry from them)."""
    headers = {"x-scenario": f"retry-{is_async}", "x-fail": "429,500"}

    def run() -> str:
        if is_async:

            async def go() -> str:
                async with aoai(srv.url, max_retries=2) as c:
                    r = await c.chat.completions.create(model="m", messages=user("hi"), extra_headers=headers)
                return r.id

            return asyncio.run(go())
        with oai(srv.url, max_retries=2) as c:
            return c.chat.completions.create(model="m", messages=user("hi"), extra_headers=headers).id

    t0 = time.perf_counter()
    with forkpoint.record(store=store) as rec:
        live = run()
    assert time.perf_counter() - t0 >= 0.5  # the SDK really waited twice
    attempts = srv.requests
    assert [r["headers"]["x-stainless-retry-count"] for r in attempts] == ["0", "1", "2"]
    assert len({r["raw"] for r in attempts}) == 1  # identical bodies
    events = model_calls(rec.session_path)
    assert [e["response"]["status"] for e in events] == [429, 500, 200]
    assert len({e["key"] for e in events}) == 1

    waits = retry_waits(monkeypatch, openai)
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
        assert waits == [0, 0]  # two retries, neither waited for
        with pytest.raises(forkpoint.Divergence, match="already served"):
            run()
    assert len(srv.requests) == 3
    assert rp.report()["matched"] == 3


@pytest.mark.slow
@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_sdk_retries_exhausted_raise_the_same_error_live_and_replayed(
    sdk: str, srv: LocalServer, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    headers = {"x-scenario": "exhausted", "x-fail": "429,500,500"}

    def run() -> Any:
        if sdk == "openai":
            with oai(srv.url, max_retries=2) as c, pytest.raises(openai.APIStatusError) as info:
                c.chat.completions.create(model="m", messages=user("hi"), extra_headers=headers)
        else:
            c2 = anthropic.Anthropic(base_url=srv.url, api_key=API_KEY, max_retries=2)
            with c2, pytest.raises(anthropic.APIStatusError) as info:
                c2.messages.create(model="claude", max_tokens=5, messages=user("hi"), extra_headers=headers)
        return info.value

    t0 = time.perf_counter()
    with forkpoint.record(store=store) as rec:
        live = run()
    assert time.perf_counter() - t0 >= 0.5
    waits = retry_waits(monkeypatch, openai if sdk == "openai" else anthropic)
    with forkpoint.replay(rec.session_path) as rp:
        again = run()
    assert waits == [0, 0]  # two retries, neither waited for
    assert type(again) is type(live) and type(live).__name__ == "InternalServerError"
    assert (again.status_code, again.body, again.message) == (live.status_code, live.body, live.message)
    assert again.response.headers["x-request-id"] == live.response.headers["x-request-id"]
    assert rp.report()["matched"] == 3 and len(srv.requests) == 3


@pytest.mark.slow
def test_retry_backoff_after_a_transport_error_is_skipped_on_replay_and_draws_the_same_randomness(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a retry-after header the SDK backs off with random jitter (``random.random()``). The
    replay skips the wait but still computes it, so the program's global random state after the call
    is the same as it was live: an agent that draws random numbers later stays on its recorded path."""
    url = f"http://127.0.0.1:{free_port()}"

    def run() -> float:
        random.seed(1234)
        with oai(url, max_retries=1) as c, pytest.raises(openai.APIConnectionError):
            c.chat.completions.create(model="m", messages=user("hi"))
        return random.random()

    t0 = time.perf_counter()
    with forkpoint.record(store=store) as rec:
        live_draw = run()
    assert time.perf_counter() - t0 >= 0.3  # 0.5 s backoff less up to 25% jitter
    assert [e["error"]["type"] for e in model_calls(rec.session_path)] == ["ConnectError"] * 2
    waits = retry_waits(monkeypatch, openai)
    with forkpoint.replay(rec.session_path):
        assert run() == live_draw
    assert waits == [0]


@pytest.mark.parametrize("lib", LIBS)
def test_polling_replays_each_poll_in_recorded_order(lib: ModuleType, srv: LocalServer, store: Path) -> None:
    def poll(job: str) -> list[dict[str, Any]]:
        seen = []
        with lib.Client() as c:
            while True:
                seen.append(c.get(f"{srv.url}/v1/jobs/{job}").json())
                if seen[-1]["status"] == "done":
                    return seen

    with forkpoint.record(store=store) as rec:
        live = poll("1")
    assert [p["status"] for p in live] == ["running"] * 3 + ["done"]
    with forkpoint.replay(rec.session_path) as rp:
        assert poll("1") == live
        with lib.Client() as c, pytest.raises(forkpoint.Divergence, match="already served"):
            c.get(f"{srv.url}/v1/jobs/1")  # a fifth poll: never a silent repeat of the fourth
    assert rp.report()["matched"] == 4 and len(srv.requests) == 4


# ============================================================================ 3. failures


@pytest.mark.parametrize(
    ("sdk", "status", "cls"),
    [
        ("openai", 429, openai.RateLimitError),
        ("openai", 500, openai.InternalServerError),
        ("anthropic", 429, anthropic.RateLimitError),
        ("anthropic", 500, anthropic.InternalServerError),
    ],
)
def test_http_errors_replay_as_the_same_sdk_exception(
    sdk: str, status: int, cls: type[Exception], srv: LocalServer, store: Path
) -> None:
    def call() -> Any:
        headers = {"x-status": str(status)}
        if sdk == "openai":
            with oai(srv.url) as c, pytest.raises(cls) as info:
                c.chat.completions.create(model="m", messages=user("hi"), extra_headers=headers)
        else:
            c2 = anthropic.Anthropic(base_url=srv.url, api_key=API_KEY, max_retries=0)
            with c2, pytest.raises(cls) as info:
                c2.messages.create(model="claude", max_tokens=5, messages=user("hi"), extra_headers=headers)
        return info.value

    with forkpoint.record(store=store) as rec:
        live = call()
    (event,) = model_calls(rec.session_path)
    assert event["response"]["status"] == status
    with forkpoint.replay(rec.session_path):
        again = call()
    assert type(again) is type(live)
    assert (again.status_code, again.body, str(again)) == (live.status_code, live.body, str(live))
    assert len(srv.requests) == 1


def _send(lib: ModuleType, is_async: bool, url: str, timeout: float = 5.0) -> Any:
    if is_async:

        async def go() -> Any:
            async with lib.AsyncClient(timeout=timeout) as c:
                return await c.post(url, json={"q": 1})

        return asyncio.run(go())
    with lib.Client(timeout=timeout) as c:
        return c.post(url, json={"q": 1})


def _stream_until_error(lib: ModuleType, is_async: bool, url: str) -> tuple[list[bytes], BaseException]:
    """Read a stream chunk by chunk until it fails; returns the chunks and the exception."""
    chunks: list[bytes] = []
    if is_async:

        async def go() -> BaseException:
            async with lib.AsyncClient() as c, c.stream("POST", url, json={}) as r:
                try:
                    async for chunk in r.aiter_raw():
                        chunks.append(chunk)
                except Exception as exc:  # noqa: BLE001 - returned to the test
                    return exc
            raise AssertionError("the stream did not fail")

        return chunks, asyncio.run(go())
    with lib.Client() as c, c.stream("POST", url, json={}) as r:
        try:
            for chunk in r.iter_raw():
                chunks.append(chunk)
        except Exception as exc:  # noqa: BLE001 - returned to the test
            return chunks, exc
    raise AssertionError("the stream did not fail")


@pytest.mark.parametrize("is_async", MODES)
@pytest.mark.parametrize("lib", LIBS)
def test_read_timeout_is_recorded_and_raised_again(
    lib: ModuleType, is_async: bool, srv: LocalServer, store: Path
) -> None:
    url = srv.url + "/v1/slow?sleep=0.6"
    with forkpoint.record(store=store) as rec, pytest.raises(lib.ReadTimeout) as live:
        _send(lib, is_async, url, timeout=0.15)
    (event,) = model_calls(rec.session_path)
    assert event["response"] is None
    assert event["error"]["type"] == "ReadTimeout" and event["error"]["module"].startswith(lib.__name__)
    with forkpoint.replay(rec.session_path), pytest.raises(lib.ReadTimeout) as again:
        _send(lib, is_async, url, timeout=0.15)
    assert str(again.value) == str(live.value)


@pytest.mark.parametrize("is_async", MODES)
@pytest.mark.parametrize("lib", LIBS)
def test_connection_refused_is_recorded_and_raised_again(
    lib: ModuleType, is_async: bool, store: Path
) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1/x"
    with forkpoint.record(store=store) as rec, pytest.raises(lib.ConnectError):
        _send(lib, is_async, url)
    (event,) = model_calls(rec.session_path)
    assert event["response"] is None and event["error"]["type"] == "ConnectError"
    with forkpoint.replay(rec.session_path), pytest.raises(lib.ConnectError):
        _send(lib, is_async, url)


@pytest.mark.parametrize("is_async", MODES)
@pytest.mark.parametrize("lib", LIBS)
def test_server_disconnecting_mid_stream_fails_again_after_the_same_chunks(
    lib: ModuleType, is_async: bool, srv: LocalServer, store: Path
) -> None:
    url = srv.url + "/v1/sse?kind=sse&n=6&delay=0&drop=3"
    with forkpoint.record(store=store) as rec:
        live_chunks, live_exc = _stream_until_error(lib, is_async, url)
    assert len(live_chunks) == 3 and isinstance(live_exc, lib.RemoteProtocolError)
    (event,) = model_calls(rec.session_path)
    resp = event["response"]
    assert resp["ended"] == "error" and [c.encode() for _, c in resp["chunks"]] == live_chunks
    assert event["error"]["type"] == "RemoteProtocolError"
    with forkpoint.replay(rec.session_path):
        chunks, exc = _stream_until_error(lib, is_async, url)
    assert chunks == live_chunks
    assert type(exc) is type(live_exc) and str(exc) == str(live_exc)


@pytest.mark.parametrize("failure", ["refused", "timeout", "mid-stream"])
def test_openai_sdk_wraps_transport_failures_the_same_way_on_replay(
    failure: str, srv: LocalServer, store: Path
) -> None:
    base = f"http://127.0.0.1:{free_port()}" if failure == "refused" else srv.url

    def run() -> tuple[list[str], BaseException]:
        got: list[str] = []
        with oai(base, timeout=0.15 if failure == "timeout" else 5.0) as c:
            try:
                if failure == "mid-stream":
                    stream = c.chat.completions.create(
                        model="m", messages=user("hi"), stream=True, extra_headers={"x-drop-after": "3"}
                    )
                    for chunk in stream:
                        got.append(chunk.choices[0].delta.content or "")
                else:
                    c.chat.completions.create(
                        model="m", messages=user("hi"), extra_headers={"x-delay-ms": "600"}
                    )
            except Exception as exc:  # noqa: BLE001 - returned to the test
                return got, exc
        raise AssertionError("no failure")

    with forkpoint.record(store=store) as rec:
        live = run()
    expected = {
        "refused": openai.APIConnectionError,
        "timeout": openai.APITimeoutError,
        "mid-stream": openai.APIConnectionError,
    }[failure]
    assert type(live[1]) is expected
    (event,) = model_calls(rec.session_path)
    assert event["error"] is not None
    with forkpoint.replay(rec.session_path):
        again = run()
    assert again[0] == live[0]
    assert type(again[1]) is type(live[1]) and str(again[1]) == str(live[1])
    assert type(again[1].__cause__) is type(live[1].__cause__)


def test_an_unmapped_transport_exception_replays_as_its_own_class(store: Path) -> None:
    """A transport may raise an exception that httpx does not map (the openai SDK itself catches
    ``ssl.SSLError`` and ``anyio.EndOfStream`` for that reason). Replay raises the same class (it is
    already imported: nothing is imported to find it), so the SDK wraps it the same way."""
    import anyio

    def fail(request: httpx2.Request) -> httpx2.Response:
        raise anyio.EndOfStream

    def run() -> BaseException:
        http = httpx2.Client(transport=httpx2.MockTransport(fail))
        with oai("http://127.0.0.1:9", http_client=http) as c, pytest.raises(openai.APIError) as info:
            c.chat.completions.create(model="m", messages=user("hi"))
        return info.value

    with forkpoint.record(store=store) as rec:
        live = run()
    assert type(live) is openai.APIConnectionError and type(live.__cause__) is anyio.EndOfStream
    (event,) = model_calls(rec.session_path)
    assert event["error"] == {"type": "EndOfStream", "module": "anyio", "message": ""}
    with forkpoint.replay(rec.session_path):
        again = run()
    assert type(again) is type(live) and type(again.__cause__) is anyio.EndOfStream


async def _ask_with_deadline(url: str, deadline: float | None) -> list[str]:
    """A slow call under the caller's own timeout, then a normal call."""
    out = []
    async with httpx2.AsyncClient() as c:
        slow = c.post(url + "/v1/slow?sleep=0.6", json={"q": "slow"})
        try:
            r = await (asyncio.wait_for(slow, deadline) if deadline else slow)
            out.append(r.text)
        except TimeoutError:
            out.append("caller timed out")
        r = await c.post(url + "/v1/chat/completions", json={"model": "m", "messages": user("next")})
        out.append(r.json()["id"])
    return out


@pytest.mark.slow
def test_a_call_cancelled_by_its_caller_times_out_again_on_replay(srv: LocalServer, store: Path) -> None:
    """``asyncio.wait_for(call, 0.1)`` around a call the server answers after 0.6 s: live, the caller
    gets TimeoutError and the call never answers. The call is written at once with the
    cancellation as its ``error`` (it does not wait, pending, for the end of the session), and on
    replay it waits to be cancelled as long as it lasted live: the caller's own timer fires again
    and the run takes the same path, never handed an answer it did not get."""
    with forkpoint.record(store=store) as rec:
        live = asyncio.run(_ask_with_deadline(srv.url, 0.1))
    assert live[0] == "caller timed out"
    first, second = model_calls(rec.session_path)
    assert first["request"]["body"] == {"q": "slow"} and first["response"] is None
    assert first["error"]["type"] == "CancelledError"
    assert second["response"]["status"] == 200
    t0 = time.perf_counter()
    with forkpoint.replay(rec.session_path) as rp:
        assert asyncio.run(_ask_with_deadline(srv.url, 0.1)) == live
    assert time.perf_counter() - t0 < 0.6
    assert rp.report()["divergence"] is None

    with forkpoint.replay(rec.session_path) as rp, pytest.raises(forkpoint.Divergence, match="cancelled"):
        asyncio.run(_ask_with_deadline(srv.url, None))  # this run does not give up: it diverged
    assert rp.report()["divergence"]["expected"]["seq"] == first["seq"]


# ============================================================================ 4. abandoned streams


def _abandon(style: str, client: httpx2.Client, url: str) -> bytes:
    """Read one chunk of a stream, then abandon it the way ``style`` says."""
    if style == "break":
        with client.stream("POST", url, json={}) as r:
            for chunk in r.iter_raw():  # noqa: B007 - the chunk is what this returns
                break
    elif style == "close":
        r = client.send(client.build_request("POST", url, json={}), stream=True)
        chunk = next(r.iter_raw())
        r.close()
    else:
        with client.stream("POST", url, json={}) as r:
            chunk = next(r.iter_raw())
    return chunk


@pytest.mark.parametrize("style", ["break", "close", "with"])
def test_abandoned_stream_is_recorded_as_partial_and_replays_the_same(
    style: str, srv: LocalServer, store: Path
) -> None:
    """The caller reads one chunk and leaves. The event keeps that chunk with ``ended: "client"``;
    replay serves the same chunk and ends the same way. A replayed caller that reads *past* the
    recorded end gets a Divergence: the rest of the stream was never received, and inventing an
    end (a silently shorter answer) would hide that the run went another way."""
    url = srv.url + "/v1/sse?kind=sse&n=40&delay=0.005"
    with forkpoint.record(store=store) as rec, httpx2.Client() as c:
        live = _abandon(style, c, url)
    (event,) = model_calls(rec.session_path)
    assert event["response"]["ended"] == "client"
    assert [c.encode() for _, c in event["response"]["chunks"]] == [live]
    with forkpoint.replay(rec.session_path) as rp, httpx2.Client() as c:
        assert _abandon(style, c, url) == live
    assert rp.report()["divergence"] is None

    with forkpoint.replay(rec.session_path) as rp, httpx2.Client() as c, c.stream("POST", url, json={}) as r:
        it = r.iter_raw()
        assert next(it) == live
        with pytest.raises(forkpoint.Divergence, match="stopped reading"):
            next(it)
    assert rp.report()["divergence"]["expected"]["seq"] == event["seq"]


def test_openai_stream_closed_after_the_first_chunk(srv: LocalServer, store: Path) -> None:
    def first_then_close() -> str:
        with oai(srv.url) as c:
            stream = c.chat.completions.create(model="m", messages=user("hi"), stream=True)
            first = next(iter(stream)).choices[0].delta.content or ""
            stream.close()
        return first

    with forkpoint.record(store=store) as rec:
        live = first_then_close()
    (event,) = model_calls(rec.session_path)
    assert event["response"]["ended"] == "client" and len(event["response"]["chunks"]) >= 1
    with forkpoint.replay(rec.session_path):
        assert first_then_close() == live
    with forkpoint.replay(rec.session_path), oai(srv.url) as c:
        stream = c.chat.completions.create(model="m", messages=user("hi"), stream=True)
        with pytest.raises(forkpoint.Divergence, match="stopped reading"):
            list(stream)  # reading on, past what the recorded caller read


def test_a_stream_closed_right_after_its_final_event_may_be_read_to_the_end(
    srv: LocalServer, store: Path
) -> None:
    """The sync openai SDK closes an SSE response as soon as it sees ``data: [DONE]``: the event says
    ``ended: "client"`` although nothing was left unread. A replayed caller that reads on (another
    SDK version drains the body, or a raw client reads it all) gets the end of the stream, as it
    would have from the server, not a divergence."""
    with forkpoint.record(store=store) as rec, oai(srv.url) as c:
        live = [
            ch.choices[0].delta.content
            for ch in c.chat.completions.create(model="m", messages=user("hi"), stream=True)
        ]
    (event,) = model_calls(rec.session_path)
    assert event["response"]["ended"] == "client" and event["response"]["chunks"][-1][1] == "data: [DONE]\n\n"
    with forkpoint.replay(rec.session_path) as rp, httpx2.Client() as c:
        body = {"messages": user("hi"), "model": "m", "stream": True}
        with c.stream("POST", srv.url + "/v1/chat/completions", json=body) as r:
            raw = b"".join(r.iter_raw())
    assert raw == "".join(ch for _, ch in event["response"]["chunks"]).encode()
    assert rp.report()["divergence"] is None and len(live) > 3


@pytest.mark.parametrize("is_async", MODES)
def test_fifty_abandoned_streams_on_one_connection_do_not_leak_or_hang(
    is_async: bool, srv: LocalServer, store: Path
) -> None:
    """With a pool of one connection and a 0.5 s pool timeout, a leaked connection would make the
    second call fail with PoolTimeout."""
    url = srv.url + "/v1/sse?kind=sse&n=40&delay=0.005"
    limits = httpx2.Limits(max_connections=1)
    timeout = httpx2.Timeout(5.0, pool=0.5)

    def run() -> list[bytes]:
        if is_async:

            async def go() -> list[bytes]:
                out = []
                async with httpx2.AsyncClient(limits=limits, timeout=timeout) as c:
                    for i in range(50):
                        async with c.stream("POST", url, json={"i": i}) as r:
                            async for chunk in r.aiter_raw():
                                out.append(chunk)
                                break
                return out

            return asyncio.run(go())
        with httpx2.Client(limits=limits, timeout=timeout) as c:
            return [
                _abandon("break" if i % 2 else "close", c, url.replace("n=40", f"n=40&i={i}"))
                for i in range(50)
            ]

    t0 = time.perf_counter()
    with forkpoint.record(store=store) as rec:
        live = run()
    assert time.perf_counter() - t0 < 10
    events = model_calls(rec.session_path)
    assert len(events) == 50 and {e["response"]["ended"] for e in events} == {"client"}
    with forkpoint.replay(rec.session_path) as rp:
        assert run() == live
    assert rp.report()["matched"] == 50


# ============================================================================ 5. bodies


def _get(lib: ModuleType, url: str) -> tuple[Any, bytes | BaseException]:
    with lib.Client() as c, c.stream("GET", url) as r:
        try:
            return r, r.read()
        except lib.DecodingError as exc:
            return r, exc


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br", "zstd"])
@pytest.mark.parametrize("lib", LIBS)
def test_compressed_responses_are_stored_decoded_with_consistent_headers(
    lib: ModuleType, coding: str, srv: LocalServer, store: Path
) -> None:
    """forkpoint stores a body decoded exactly when the client library decodes it (httpx2 on
    Python < 3.14 needs ``backports.zstd`` for zstd; without it the caller gets the compressed bytes,
    and so does the log): the stored body is what the caller saw, and the replay gives it back."""
    url = srv.url + f"/v1/enc?encoding={coding}"
    with forkpoint.record(store=store) as rec:
        live, live_body = _get(lib, url)
    assert live.headers["content-encoding"] == coding
    decodes = coding in importlib_decoders(lib)
    (event,) = model_calls(rec.session_path)
    resp = event["response"]
    names = {k.lower() for k, _ in resp["headers"]}
    if decodes:
        assert resp["body_kind"] == "json" and resp["body"] == json.loads(live_body)
        assert "content-encoding" not in names
    else:
        assert resp["body_kind"] == "bytes" and resp["body"] == live_body
        assert "content-encoding" in names
    with forkpoint.replay(rec.session_path):
        again, body = _get(lib, url)
    assert json.loads(body) == json.loads(live_body) if decodes else body == live_body
    assert again.headers["content-encoding"] == coding  # (a decoded body is served encoded again)


def importlib_decoders(lib: ModuleType) -> set[str]:
    """The content codings the library decodes in this environment."""
    import importlib

    return set(importlib.import_module(f"{lib.__name__}._decoders").SUPPORTED_DECODERS)


@pytest.mark.parametrize("coding", ["gzip-corrupt", "x-custom"])
@pytest.mark.parametrize("lib", LIBS)
def test_undecodable_bodies_are_stored_as_received_and_replay_the_same_way(
    lib: ModuleType, coding: str, srv: LocalServer, store: Path
) -> None:
    url = srv.url + f"/v1/enc?encoding={coding}"
    with forkpoint.record(store=store) as rec:
        _, live = _get(lib, url)
    if coding == "gzip-corrupt":
        assert isinstance(live, lib.DecodingError)
    else:
        assert isinstance(live, bytes) and json.loads(live)["query"]["encoding"] == "x-custom"
    (event,) = model_calls(rec.session_path)
    resp = event["response"]
    stored = {k.lower(): v for k, v in resp["headers"]}
    assert stored["content-encoding"] == ("gzip" if coding == "gzip-corrupt" else coding)
    assert resp["body_kind"] in ("bytes", "text")  # as received: never re-serialized
    with forkpoint.replay(rec.session_path):
        again, body = _get(lib, url)
    assert type(body) is type(live)
    assert body == live if isinstance(live, bytes) else str(body) == str(live)


def test_multipart_audio_upload_is_stored_losslessly_and_matches_despite_a_new_boundary(
    srv: LocalServer, store: Path
) -> None:
    audio = b"RIFF\x24\x08\x00\x00WAVEfmt " + bytes(range(256)) * 8

    def transcribe(data: bytes) -> str:
        with oai(srv.url) as c:
            return c.audio.transcriptions.create(
                model="whisper-1", file=("speech.wav", data, "audio/wav")
            ).text

    with forkpoint.record(store=store) as rec:
        live = transcribe(audio)
    sent = srv.requests[0]
    (event,) = model_calls(rec.session_path)
    req = event["request"]
    assert dict((k.lower(), v) for k, v in req["headers"])["content-type"].startswith("multipart/form-data")
    assert req["body_kind"] == "bytes" and req["body"] == sent["raw"]  # byte for byte
    raw_line = stored_lines(rec.session_path)[1]
    assert raw_line["request"]["body"]["bytes"] is True  # a binary blob, named by its hash
    assert (rec.session_path / "blobs" / raw_line["request"]["body"]["$blob"][:2]).is_dir()

    with forkpoint.replay(rec.session_path, record_child=True) as rp:
        assert transcribe(audio) == live
        with pytest.raises(forkpoint.Divergence):
            transcribe(audio[:-1] + b"!")
    assert rp.report()["matched"] == 1
    # The replayed run sent its upload with another boundary, and still matched.
    (served,) = model_calls(Path(rp.report()["child_session"]))
    replayed_type = dict((k.lower(), v) for k, v in served["request"]["headers"])["content-type"]
    assert replayed_type != sent["headers"]["content-type"]
    assert served["request"]["body"] != sent["raw"] and len(served["request"]["body"]) == len(sent["raw"])
    assert len(srv.requests) == 1


def test_binary_responses_are_stored_losslessly(srv: LocalServer, store: Path) -> None:
    with forkpoint.record(store=store) as rec:
        with oai(srv.url) as c:
            speech = c.audio.speech.create(model="tts-1", voice="alloy", input="hello").content
        with httpx2.Client() as c:
            image = c.get(srv.url + "/v1/image").content
    assert image.startswith(PNG_HEAD)
    events = model_calls(rec.session_path)
    assert [e["response"]["body_kind"] for e in events] == ["bytes", "bytes"]
    assert [e["response"]["body"] for e in events] == [speech, image]
    with forkpoint.replay(rec.session_path):
        with oai(srv.url) as c:
            assert c.audio.speech.create(model="tts-1", voice="alloy", input="hello").content == speech
        with httpx2.Client() as c:
            r = c.get(srv.url + "/v1/image")
    assert r.content == image and r.headers["content-type"] == "image/png"


@pytest.mark.parametrize("lib", LIBS)
def test_gzip_compressed_request_body_is_stored_decoded_and_matched(
    lib: ModuleType, srv: LocalServer, store: Path
) -> None:
    """A request body sent with ``Content-Encoding: gzip`` is stored decoded (header removed), so it
    is readable in the log and matches on replay although gzip embeds a timestamp that differs
    every run."""
    payload = {"model": "m", "messages": user("compressed")}

    def post(mtime: int) -> Any:
        data = gzip.compress(json.dumps(payload).encode(), mtime=mtime)
        headers = {"content-type": "application/json", "content-encoding": "gzip"}
        with lib.Client() as c:
            return c.post(srv.url + "/v1/things", content=data, headers=headers).json()

    with forkpoint.record(store=store) as rec:
        live = post(1)
    (event,) = model_calls(rec.session_path)
    assert event["request"]["body_kind"] == "json" and event["request"]["body"] == payload
    assert "content-encoding" not in {k.lower() for k, _ in event["request"]["headers"]}
    with forkpoint.replay(rec.session_path):
        assert post(2) == live


# ============================================================================ 8. child processes

AGENT = """
import subprocess, sys, httpx2
url = sys.argv[1]
r = httpx2.post(url + "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "parent"}]})
print("parent:", r.json()["id"])
child = subprocess.run([sys.executable, "child.py", url], capture_output=True, text=True, check=True)
print(child.stdout.strip())
"""

CHILD = """
import os, sys, httpx2
url = sys.argv[1]
r = httpx2.post(url + "/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "child"}]})
print("child:", r.json()["id"], "mode:", os.environ.get("FORKPOINT_MODE"))
"""


@pytest.mark.slow
def test_python_subprocesses_are_neither_recorded_nor_replayed(
    srv: LocalServer, tmp_path: Path, store: Path
) -> None:
    """The documented rule: ``forkpoint record -- CMD`` activates in the first Python process only.
    The child's call is not in the session (and runs live on a replay without a network namespace,
    which has none where the kernel gives one), the log stays valid, and the parent replays from
    the session."""
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "child.py").write_text(CHILD)
    env = {**os.environ, "FORKPOINT_STORE": str(store)}
    rec = subprocess.run(
        [*FORKPOINT_CLI, "record", "--", sys.executable, "agent.py", srv.url],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert rec.returncode == 0, rec.stderr
    (session_dir,) = [p.parent for p in store.glob(f"*/{LOG_NAME}")]
    events = model_calls(session_dir)
    assert [e["request"]["body"]["messages"][0]["content"] for e in events] == ["parent"]
    assert_log_valid(session_dir)
    assert "mode: None" in rec.stdout
    assert [json.loads(r["raw"])["messages"][0]["content"] for r in srv.requests] == ["parent", "child"]

    if netns.refused() is None:  # in the namespace the child cannot reach the server
        kept = subprocess.run(
            [*FORKPOINT_CLI, "replay", str(session_dir)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        )
        assert kept.returncode == 3 and "CalledProcessError" in kept.stderr, kept.stderr
        assert len(srv.requests) == 2
    rep = subprocess.run(
        [*FORKPOINT_CLI, "replay", str(session_dir)],
        cwd=tmp_path,
        env={**env, netns.DISABLE_VAR: "0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert rep.returncode == 0, rep.stderr
    parent_line = next(line for line in rec.stdout.splitlines() if line.startswith("parent:"))
    assert parent_line in rep.stdout  # the parent got its recorded answer
    assert [json.loads(r["raw"])["messages"][0]["content"] for r in srv.requests] == [
        "parent",
        "child",
        "child",
    ]


def test_a_response_with_integers_beyond_64_bits_replays_them_as_integers(store: Path) -> None:
    """orjson reads an integer beyond 64 bits as a float: an id of 2**70 in a model's answer was
    stored as 1.1805916207174113e+21 and a replay handed the agent that float ("replay ok")."""
    sent = (
        b'{"id": 1180591620717411303424, "neg": -9223372036854775809, "max": 18446744073709551615, "t": 0.5}'
    )

    def run() -> Any:
        answer = httpx2.Response(200, content=sent, headers={"content-type": "application/json"})
        with httpx2.Client(transport=httpx2.MockTransport(lambda _: answer)) as client:
            return client.post("http://127.0.0.1:9/v1/chat/completions", json={"model": "m"}).json()

    with forkpoint.record(store=store) as rec:
        live = run()
    assert live == json.loads(sent)
    stored = Session.load(rec.session_path).by_type("model_call")[0]["response"]["body"]
    assert stored == live and type(stored["id"]) is int
    with forkpoint.replay(rec.session_path) as rp:
        again = run()
    assert again == live and type(again["id"]) is int and type(again["neg"]) is int
    assert rp.report()["matched"] == 1


def test_a_request_with_integers_beyond_64_bits_matches_them_exactly(store: Path) -> None:
    """orjson reads an integer beyond 64 bits as a float, and request bodies were parsed by it
    (whole, or the items a resent conversation appends): a replay sending a seed of 2**70 + 1 was
    served the call recorded with 2**70, "replay ok". Keys, stored bodies and diffs now hold the
    integers as sent."""
    big = 2**70

    def answer(request: httpx2.Request) -> httpx2.Response:
        turn = len(json.loads(request.read())["messages"])
        return httpx2.Response(
            200, json={"choices": [{"message": {"role": "assistant", "content": f"t{turn}"}}]}
        )

    def run(seed: int, noted: int) -> list[str]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        out = []
        with httpx2.Client(transport=httpx2.MockTransport(answer)) as client:
            for _ in range(3):
                body = {"model": "m", "seed": seed, "messages": messages}
                got = client.post("http://127.0.0.1:9/v1/chat/completions", json=body).json()
                out.append(got["choices"][0]["message"]["content"])
                # (appended to the resent conversation: parsed alone, as the items it adds)
                messages = [
                    *messages,
                    got["choices"][0]["message"],
                    {"role": "user", "content": "on", "n": noted},
                ]
        return out

    with forkpoint.record(store=store) as rec:
        live = run(big, big)
    bodies = [e["request"]["body"] for e in Session.load(rec.session_path).by_type("model_call")]
    assert [b["seed"] for b in bodies] == [big] * 3 and bodies[2]["messages"][2]["n"] == big
    with forkpoint.replay(rec.session_path) as rp:
        assert run(big, big) == live
    assert rp.report()["matched"] == 3 and rp.report()["divergence"] is None
    for seed, noted, path in ((big + 1, big, "$.body.seed"), (big, big + 1, "$.body.messages[2].n")):
        with pytest.raises(forkpoint.Divergence) as exc, forkpoint.replay(rec.session_path):
            run(seed, noted)
        assert f"{path}: {big} → {big + 1}" in str(exc.value), str(exc.value)


def test_a_match_key_that_cannot_be_computed_stops_the_recording_not_the_agent(
    store: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The key was computed outside the guard that keeps a failed write from raising into the
    agent: a body the key could not hold (an integer beyond 64 bits) raised TypeError from the
    agent's own HTTP call."""
    import importlib

    def broken(event: Any, ignore: Any = None) -> str:
        raise TypeError("a key this test cannot compute")

    monkeypatch.setattr(importlib.import_module("forkpoint.record"), "event_key", broken)
    reply = httpx2.Response(200, json={"ok": True})
    with forkpoint.record(store=store) as rec:
        with httpx2.Client(transport=httpx2.MockTransport(lambda _: reply)) as client:
            got = client.post("http://127.0.0.1:9/v1/chat/completions", json={"model": "m"}).json()
    assert got == {"ok": True}
    assert "recording of session" in capfd.readouterr().err
    end = Session.load(rec.session_path).end()
    assert end is not None and "a key this test cannot compute" in str(end.get("incomplete")), end


def test_json_nested_too_deep_to_scrub_is_recorded_as_text_not_raised_into_the_program(
    store: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A body nested 500 deep (which Python's json reads) made the scrubber's walk raise
    RecursionError from the program's own HTTP call, and a tool called with such a list raised
    from the call: recording changed the live run. (Such a tool call went unrecorded, said; its
    arguments are now kept down to 120 levels, the rest as its type, and it is recorded.)"""
    deep = b"[" * 500 + b"]" * 500

    def fetch() -> bytes:
        answer = httpx2.Response(200, content=deep, headers={"content-type": "application/json"})
        with httpx2.Client(transport=httpx2.MockTransport(lambda _: answer)) as client:
            got = client.post(
                "http://127.0.0.1:9/deep", content=deep, headers={"content-type": "application/json"}
            )
            return got.content

    @forkpoint.tool
    def summarize(tree: Any) -> str:
        return "ok"

    tree: list[Any] = []
    for _ in range(500):
        tree = [tree]
    with forkpoint.record(store=store) as rec:
        assert fetch() == deep
        assert summarize(tree) == "ok"
    assert "could not be recorded" not in capfd.readouterr().err
    (call,) = Session.load(rec.session_path).by_type("model_call")
    assert call["request"]["body_kind"] == call["response"]["body_kind"] == "text"
    with forkpoint.replay(rec.session_path) as rp:
        assert fetch() == deep
        assert summarize(tree) == "ok"
    assert rp.report()["matched"] == 2 and rp.report()["reproduced"]


def test_loads_exact_reads_integers_beyond_64_bits_exactly_and_all_else_as_orjson() -> None:
    from forkpoint.capture.decoding import loads_exact

    for text in (
        b"18446744073709551616",
        b" -9223372036854775809",
        b'{"a": [1, {"b": 123456789012345678901234}]}',
    ):
        # (by repr: the float 2.0**64 == 2**64)
        assert repr(loads_exact(text)) == repr(json.loads(text)) != repr(orjson.loads(text))
    for text in (
        b'{"e": [-0.0069456464052200317, 1e300, 0.5]}',
        b'{"s": "caf\\u00e9", "n": 9223372036854775807}',
    ):
        assert repr(loads_exact(text)) == repr(orjson.loads(text))
    with pytest.raises(orjson.JSONDecodeError):
        loads_exact(b'{"a": 1')


def test_a_whole_response_body_is_scrubbed_once(store: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every response body went through the stream scrubber chunk by chunk and then, joined, through
    the body scrubber: twice the work for every download. A body that is not a stream is scrubbed
    whole, once."""
    import httpx

    from forkpoint import redact

    body = os.urandom(1 << 20)
    scanned: list[int] = []
    find = redact.Scrubber.find

    def counting(self: Any, text: str) -> Any:
        scanned.append(len(text))
        return find(self, text)

    monkeypatch.setattr(redact.Scrubber, "find", counting)

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-type": "application/octet-stream"})

    with forkpoint.record(store=store) as rec, httpx.Client(transport=httpx.MockTransport(handler)) as client:
        assert client.get("http://127.0.0.1:9/data.bin").content == body
    assert len([n for n in scanned if n >= len(body) // 2]) == 1, scanned
    with forkpoint.replay(rec.session_path), httpx.Client(transport=httpx.MockTransport(handler)) as client:
        assert client.get("http://127.0.0.1:9/data.bin").content == body


def test_a_stream_the_caller_cut_off_with_its_own_timeout_is_cut_off_there_again() -> None:
    """An agent reading a streamed answer under ``asyncio.wait_for`` was cut off live after a few
    chunks; on replay every chunk came at once, the agent read past where it had stopped, and the
    replay diverged (3 runs of 3). A stream its caller abandoned is handed out at the pace it came."""
    import httpx

    from tests.modelserver import LocalServer

    srv = LocalServer(chunk_delay=0.2)

    async def agent(store: Path, mode: str) -> tuple[int, str]:
        got: list[bytes] = []
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "count " * 12}]}

        async def read() -> None:
            async with httpx.AsyncClient() as client:
                async with client.stream("POST", srv.openai_base_url + "/chat/completions", json=body) as r:
                    async for chunk in r.aiter_raw():
                        got.append(chunk)
                        await asyncio.sleep(0.01)

        try:
            await asyncio.wait_for(read(), 0.5)  # the chunks come every 0.2 s: cut after two or three
            return len(got), "read it all"
        except TimeoutError:
            return len(got), "timed out"

    try:
        import tempfile

        store = Path(tempfile.mkdtemp())
        with forkpoint.record(store=store) as rec:
            live = asyncio.run(agent(store, "record"))
        assert live[1] == "timed out" and live[0] >= 1
        srv.stop()
        t0 = time.monotonic()
        with forkpoint.replay(rec.session_path) as rp:
            assert asyncio.run(agent(store, "replay")) == live
        assert time.monotonic() - t0 < 3
        assert rp.report()["divergence"] is None and rp.report()["reproduced"], rp.report()
    finally:
        srv.stop()


INSIDE_A_WRITE = """
import sys, threading
import forkpoint
from forkpoint import redact
from forkpoint.log import Session

scrubber = redact.current()
real = scrubber.event
inner = []

@forkpoint.tool
def cleanup() -> str:
    return "closed"

with forkpoint.record(store=sys.argv[1]) as rec:
    def event(stored):
        if not inner:
            inner.append(rec.note("ended inside the write"))  # (as a finalizer would, there)
            cleanup()  # (a call, which the recording's tally must count though it was put off)
        return real(stored)

    scrubber.event = event
    done = threading.Event()
    threading.Thread(target=lambda: (rec.note("outer"), done.set()), daemon=True).start()
    if not done.wait(10):
        print("the write waited forever on its own thread's lock", flush=True)
        import os; os._exit(1)
    scrubber.event = real
    tallied = sorted(rec.tally()[0].tools)  # (what the recording's end says it lacks is read from this)
print(inner, [e["text"] for e in Session.load(rec.session_path).by_type("note")], tallied)
"""


def test_a_call_that_ends_inside_a_write_of_its_own_thread_is_written_after_it(store: Path) -> None:
    """A boto3 program whose stream ended with an exception event hung forever under ``forkpoint
    record``: a write of the session allocated, the garbage collector finalized an unclosed urllib3
    response there, and its end was written from inside that write, waiting on the lock its own
    thread held. Here the finalizer is a note written from inside the write; it comes right after
    (in a process of its own: the deadlock it guards against would leave this one hung)."""
    run = subprocess.run(
        [sys.executable, "-c", INSIDE_A_WRITE, str(store)], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines()[-1] == "[None] ['outer', 'ended inside the write'] ['cleanup']", run.stdout


@pytest.mark.timeout(60)  # (it deadlocked: fail it, not the run)
# (the timeout is raised in the finalizer the collector runs, which Python reports, not raises)
@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize(("starts", "mode"), [("thread", "record"), ("task", "record"), ("task", "replay")])
def test_a_finalizer_that_starts_a_thread_or_task_while_one_is_noted_does_not_deadlock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, starts: str, mode: str
) -> None:
    """The garbage collector may run at any allocation, also while forkpoint notes when a thread or
    an asyncio task began (under its lock of call ordinals); a finalizer it runs there that starts
    one (google-genai's client's ``__del__`` makes a task to close its aiohttp session) noted it
    under the same plain lock, in the same thread: the program hung for ever (seen in a full run of
    tests/providers/test_gemini.py). A replay notes where the program made each asyncio task, under
    the lock of its pools' waits: the same. The collector is run here where either is noted."""
    import gc
    import weakref

    from forkpoint import runtime
    from forkpoint.replay import pools

    class Collecting(weakref.WeakKeyDictionary):  # type: ignore[type-arg]
        def __setitem__(self, key: Any, value: Any) -> None:
            gc.collect()  # (as the collector may, at the allocation here)
            super().__setitem__(key, value)

    started: list[str] = []

    class Closer:
        def __del__(self) -> None:
            if starts == "thread":
                t = threading.Thread(target=lambda: None)
                t.start()
                t.join()
            else:
                asyncio.get_running_loop().create_task(asyncio.sleep(0))
            started.append(starts)

    async def main() -> None:
        left: dict[str, Any] = {"closer": Closer()}
        left["self"] = left  # (a cycle: only the collector frees it, and runs its finalizer)
        del left
        monkeypatch.setattr(*((runtime, "_born") if mode == "record" else (pools, "_made_at")), Collecting())
        if starts == "thread":
            t = threading.Thread(target=lambda: None)
            t.start()
            t.join()
        else:
            await asyncio.create_task(asyncio.sleep(0))
        await asyncio.sleep(0)

    with forkpoint.record(store=tmp_path / "store") as rec:
        if mode == "record":
            asyncio.run(main())
    if mode == "replay":
        with forkpoint.replay(rec.session_path):
            asyncio.run(main())
    assert started == [starts]
