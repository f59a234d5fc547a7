"""Trust: no secret reaches disk (a canary test over every path), re-scrubbing a session, permissions.

The canary: 24 planted secrets of different kinds, spread over request headers, URL query strings,
request and response bodies, response headers, stream chunks (one secret split across three
transport chunks), tool arguments and results, an exception message, a note, the recorded command
line and an untracked ``.env`` captured by the workspace checkpoints. They are recorded through the
real ``openai`` SDK against a local server and ``@forkpoint.tool`` functions, with
``forkpoint.record(workspace=repo)`` on a git repository. Then every byte of every file of the store
(zstd blobs, git objects decompressed, the log's packed lines unpacked) is searched for each secret,
raw, JSON-escaped, percent-encoded and base64-encoded (all three alignments), and for a
12-character fragment of each.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import textwrap
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import openai
import orjson
import pytest
import zstandard
from click.testing import CliRunner

import forkpoint
from forkpoint import redact, verify
from forkpoint.checkpoint import manifest_rows
from forkpoint.cli import main
from forkpoint.errors import ConfigError
from forkpoint.log import LOG_NAME, ZSTD_SUFFIX, Session, SessionWriter
from forkpoint.redact import load_rules
from forkpoint.scrub import TMP_DIR, ScrubError, recover, scrub_session
from forkpoint.store import open_store
from forkpoint.store.retention import hold
from tests.gitutil import git, make_repo
from tests.logutil import growing_workspace_session, searchable, stored_lines
from tests.modelserver import LocalServer, Reply, Stream, chat_completion, json_reply

# ----------------------------------------------------------------------------- the secrets

PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEpAIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\n"
    "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTKEn5u+qKhbwKfBstIs+bMY2Zkp18gnTxK\n"
    "-----END RSA PRIVATE KEY-----"
)

#: name → secret. Each is planted in one place (see ``_record``); none may appear in the store.
SECRETS: dict[str, str] = {
    "openai_api_key": "sk-proj-Q7pVbX2mK9wLz4RtY8uN3cJ6hF1dS5gA0eIoP-xZ_vB2nM4kL7jH",  # Authorization
    "anthropic_key": "sk-ant-api03-Xy7Qw2Er5Ty8Ui1Op4As6Df9Gh3Jk0LzXcVbNm-AbCdEfGh",  # x-api-key header
    "github_token": "ghp_R4nd0mT0k3nF0rTh3C4n4ryT3st1ngXyZ9876",  # value of a plain header
    "header_token": "tkn-9f8e7d6c5b4a39281706f5e4d3c2b1a0",  # a header named like a credential
    "google_key": "AIzaSyD4nQ9vX2mK7wLz4RtY8uN3cJ6hF1dS5gA",  # ?key= query parameter
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjYW5hcnkiLCJpYXQiOjE3MDAwMDAwMDB9.c2lnbmF0dXJlLWNhbmFyeS0xMjM0NTY",
    "aws_key": "AKIAQWERTYUIOPASDFGH",  # request body
    "db_password": "Pg-S3cretPassw0rd-42",  # postgres://user:PASSWORD@host in the request body
    "stripe_key": "sk_live_51HcanaryStripeKey0123456789abcdef",  # request body (extra field)
    "user_rule": "itk_Zq8Wm3Xv7Ln2Pk5Rt9Ys4Bh6",  # request body, found by a user regex
    "slack_token": "xoxb-123456789012-9876543210987-CanarySlackTokenXyz",  # response body
    "npm_token": "npm_CanaryNpmToken0123456789abcdefghijklmn",  # response header value
    "resp_header_secret": "rhs-3b7c1e9a5d2f8064a1c7e3b9d5f2a8c4",  # a response header named like one
    "hf_token": "hf_CanaryHuggingFaceTokenSplitAcrossChunks42",  # stream, split over 3 chunks
    "sendgrid_key": "SG.CanarySendGridKey_0123.AbCdEfGhIjKlMnOpQrStUvWxYz0123456789",  # stream
    "bearer": "Zx9Qw8Er7Ty6Ui5Op4As3Df2Gh1Jk0LmNbVcXz",  # tool argument ("Authorization: Bearer …")
    "field_password": "c4n4ry-f13ld-p4ssw0rd",  # tool argument {"password": …}
    "pem": PEM,  # tool result
    "basic": base64.b64encode(b"svc-user:Basic-Canary-Pw-77").decode(),  # tool result "Basic …"
    "ssn": "078-05-1120",  # tool result, found by a user JSON path ($..employee_ssn)
    "mysql_password": "R00tCanaryPw-mysql",  # exception message mysql://root:PASSWORD@…
    "note_key": "ASIAZXCVBNMASDFGHJKL",  # forkpoint.note() text
    "argv_key": "gsk_CanaryGroqKey0123456789abcdefXYZ",  # the recorded command line
    "env_password": "envCanaryDbPassw0rd!x",  # .env: DB_PASSWORD=…
    "env_openai": "sk-svcacct-EnvCanaryOpenAIKey0123456789abcdefgh",  # .env: OPENAI_API_KEY=…
    "env_secret_key": "django-insecure-c4n4ry-s3cr3t-k3y",  # .env: SECRET_KEY='…'
    "env_gitlab": "glpat-CanaryGitLabToken01234",  # .env: GITLAB_TOKEN=…
}

CONFIG = textwrap.dedent(
    """
    [redact]
    patterns = [{ kind = "internal-token", regex = "itk_[A-Za-z0-9]{24}" }]
    json_paths = ["$..employee_ssn"]
    """
)


def needles(secret: str) -> list[bytes]:
    """Every form in which ``secret`` could sit in a file: raw, JSON-escaped (both ways),
    percent-encoded, base64 (standard and URL-safe, each of the three alignments), and a fragment."""
    raw = secret.encode()
    forms = {
        raw,
        orjson.dumps(secret)[1:-1],
        json.dumps(secret)[1:-1].encode(),
        json.dumps(secret, ensure_ascii=True).replace("/", "\\/")[1:-1].encode(),
        quote(secret, safe="").encode(),
    }
    for pad in range(3):
        for enc in (base64.b64encode, base64.urlsafe_b64encode):
            b = enc(b"\0" * pad + raw)
            # the characters that depend on the padding bytes or on what follows are left out
            core = b[(pad * 4 + 2) // 3 + 1 : -4]
            if len(core) >= 8:
                forms.add(core)
    if len(raw) >= 24:
        forms.add(raw[len(raw) // 2 - 6 : len(raw) // 2 + 6])  # a 12-byte fragment from the middle
    return sorted(forms, key=len)


def store_contents(store: Path) -> Iterator[tuple[Path, bytes]]:
    """(path, bytes) of every file under ``store``; git loose objects and zstd blobs decompressed,
    a session log's packed lines opened."""
    for p in sorted(store.rglob("*")):
        if p.is_file():
            data = p.read_bytes()
            if "git-objects" in p.parts and len(p.parent.name) == 2:
                try:
                    data = zlib.decompress(data)
                except zlib.error:
                    pass
            elif p.suffix == ZSTD_SUFFIX:
                try:
                    data = zstandard.ZstdDecompressor().decompress(data, max_output_size=1 << 28)
                except zstandard.ZstdError:  # an encrypted session's blob: an age file
                    pass
            for form in searchable(p, data):
                yield p, form


def leaks(store: Path, secrets: dict[str, str]) -> list[str]:
    found = []
    files = list(store_contents(store))
    assert files
    for name, secret in secrets.items():
        for needle in needles(secret):
            for path, data in files:
                if needle in data:
                    found.append(f"{name} as {needle[:40]!r} in {path.relative_to(store)}")
    return found


# ----------------------------------------------------------------------------- a server that leaks


def _leaky_chat(request: dict[str, Any]) -> Reply | Stream:
    """A chat provider that leaks: secrets in the answer, in response headers, and (streamed) one
    secret cut over three transport chunks."""

    def chunk(delta: str, finish: str | None = None) -> bytes:
        c = {
            "id": "chatcmpl-canary",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "canary-model",
            "choices": [{"index": 0, "delta": {"content": delta}, "finish_reason": finish}],
        }
        return f"data: {json.dumps(c)}\n\n".encode()

    if not (request["body"] or {}).get("stream"):
        completion = chat_completion(
            "chatcmpl-canary",
            "canary-model",
            text=f"use {SECRETS['slack_token']} to post",
            usage={"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
        )
        headers = {"X-Info": f"npm={SECRETS['npm_token']}", "X-Upstream-Token": SECRETS["resp_header_secret"]}
        return json_reply(completion, headers=headers)
    event = chunk(f"token {SECRETS['hf_token']} and key {SECRETS['sendgrid_key']}.")
    a = event.index(SECRETS["hf_token"].encode()) + 10  # cut inside the first secret...
    b = event.index(SECRETS["hf_token"].encode()) + 25  # ...twice
    pieces = [
        chunk("Here you go: "),
        event[:a],
        event[a:b],
        event[b:],
        chunk("", "stop"),
        b"data: [DONE]\n\n",
    ]
    return Stream(pieces, delay=0.03)  # each write arrives as a transport chunk of its own


@pytest.fixture
def leaky_server(server: LocalServer) -> str:
    """The shared local server (tests/modelserver.py) answering chat completions as a leaky provider."""
    server.route("*/chat/completions", _leaky_chat)
    return server.openai_base_url


# ----------------------------------------------------------------------------- the agent


@forkpoint.tool
def lookup(query: str, password: str) -> dict[str, Any]:
    return {
        "query_seen": len(query),
        "deploy_key": PEM,
        "auth": f"Authorization: Basic {SECRETS['basic']}",
        "staff": [{"name": "Ada", "employee_ssn": SECRETS["ssn"]}],
        "password_len": len(password),
    }


@forkpoint.tool
def connect(url: str) -> str:
    raise ConnectionError(f"cannot reach {url}: refused")


def _agent(base_url: str) -> list[str]:
    client = openai.OpenAI(
        base_url=base_url,
        api_key=SECRETS["openai_api_key"],
        max_retries=0,
        default_headers={
            "x-api-key": SECRETS["anthropic_key"],
            "X-Debug": f"gh={SECRETS['github_token']}",
            "X-Session-Token": SECRETS["header_token"],
        },
        default_query={"key": SECRETS["google_key"], "trace": SECRETS["jwt"]},
    )
    out = []
    messages: Any = [
        {"role": "system", "content": "You are a careful agent."},
        {
            "role": "user",
            "content": f"Deploy with AWS key {SECRETS['aws_key']} to "
            f"postgres://deploy:{SECRETS['db_password']}@db.internal:5432/prod "
            f"(internal token {SECRETS['user_rule']}).",
        },
    ]
    r = client.chat.completions.create(
        model="canary-model", messages=messages, extra_body={"metadata": {"billing": SECRETS["stripe_key"]}}
    )
    out.append(r.choices[0].message.content or "")
    result = lookup(f"Authorization: Bearer {SECRETS['bearer']}", password=SECRETS["field_password"])
    try:
        connect(f"mysql://root:{SECRETS['mysql_password']}@127.0.0.1:3306/app")
    except ConnectionError as exc:
        out.append(type(exc).__name__)
    forkpoint.note(f"rotated temp key {SECRETS['note_key']}")
    messages = [*messages, {"role": "user", "content": json.dumps(result)}]
    stream = client.chat.completions.create(model="canary-model", messages=messages, stream=True)
    out.append("".join(c.choices[0].delta.content or "" for c in stream if c.choices))
    client.close()
    return out


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "app.py").write_text("print('hello')\n")
    git(repo, "add", "app.py")
    git(repo, "commit", "-q", "-m", "init")
    (repo / ".env").write_text(
        f"DB_PASSWORD={SECRETS['env_password']}\n"
        f"OPENAI_API_KEY={SECRETS['env_openai']}\n"
        f"SECRET_KEY='{SECRETS['env_secret_key']}'\n"
        f"GITLAB_TOKEN={SECRETS['env_gitlab']}\n"
        "DEBUG=true\n"
    )
    (repo / "notes.txt").write_text("nothing secret here\n")
    return repo


def _record(tmp_path: Path, base_url: str, rules: redact.Rules | None) -> tuple[Path, list[str]]:
    repo = _repo(tmp_path)
    store = tmp_path / "store"
    with redact.use_rules(rules):
        with forkpoint.record(
            store=store, workspace=repo, argv=["agent.py", f"--groq-key={SECRETS['argv_key']}"]
        ) as rec:
            out = _agent(base_url)
    return rec.session_path, out


# ----------------------------------------------------------------------------- the canary


def test_no_planted_secret_reaches_the_store(tmp_path: Path, leaky_server: str) -> None:
    assert len(SECRETS) >= 20 and len(set(SECRETS.values())) == len(SECRETS)
    (tmp_path / "forkpoint.toml").write_text(CONFIG)
    rules = load_rules(tmp_path)
    path, out = _record(tmp_path, leaky_server, rules)

    # The agent really saw every secret (the recording did not change what it ran with)...
    assert SECRETS["slack_token"] in out[0]
    assert SECRETS["hf_token"] in out[2] and SECRETS["sendgrid_key"] in out[2]
    # ...and the session holds everything, with no secret anywhere in the store.
    assert leaks(tmp_path / "store", SECRETS) == []
    s = Session.load(path)
    kinds = [e["type"] for e in s.events]
    assert kinds.count("model_call") == 2 and kinds.count("tool_call") == 2 and "note" in kinds
    assert kinds.count("checkpoint") >= 2
    v = verify(path)
    assert v.ok and v.complete, v.problems

    # The secret was split over three transport chunks, and is replaced in the first of them.
    stream = s.by_type("model_call")[1]["response"]
    chunks = [c for _, c in stream["chunks"]]
    held = next(i for i, c in enumerate(chunks) if "[REDACTED:huggingface-token:" in c)
    assert chunks[held].endswith(redact.placeholder("huggingface-token", SECRETS["hf_token"]))
    # the middle transport chunk held nothing but secret: it keeps the first byte of what followed
    # the secret (stored empty, a replay handed the program one piece fewer than it read live), the
    # rest of that stays in its own chunk
    assert chunks[held + 1] == " "
    assert chunks[held + 2].startswith("and key [REDACTED:sendgrid-key:")
    assert len(chunks) == 6
    # Placeholders are deterministic: the same secret always gives the same one.
    ph = redact.placeholder("aws-access-key", SECRETS["aws_key"])
    assert ph in json.dumps(s.by_type("model_call")[0]["request"]["body"])
    cp = s.by_type("checkpoint")[0]
    env_row = next(r for r in manifest_rows(cp["workspace"]) if r[0] == ".env")
    env = (path / "blobs" / env_row[4][:2] / env_row[4][2:]).read_text()
    assert "DB_PASSWORD=[REDACTED:" in env and "DEBUG=true" in env
    assert redact.placeholder("openai-key", SECRETS["env_openai"]) in env

    # A scrubbed recording still matches: replaying the same agent serves every call, offline.
    with redact.use_rules(rules), forkpoint.replay(path) as rp:
        replayed = _agent(leaky_server)
    report = rp.report()
    assert report["divergence"] is None and report["matched"] == report["recorded"] == 4, report
    assert replayed[1] == "ConnectionError"


#: Shapes found without an anchor (a Twilio SID: searched for over the whole text), after a
#: one-character anchor (a URL's query credential) or a long one (an OpenAI key): (kind, secret).
UNANCHORED = {
    "twilio_account": ("twilio-sid", "AC" + "3f9a1c7e5b2d8046" * 2),
    "twilio_key": ("twilio-sid", "SK" + "0e4c8a2f6b1d9375" * 2),
    "query_token": ("query-credential", "qtk-Canary9Query8Token7Value6"),
    "openai_key": ("openai-key", "sk-proj-CanaryScanPrefilterKey0123456789abcdefXYZ"),
}


def _in_context(name: str) -> str:
    """The secret ``name`` of :data:`UNANCHORED` where its shape says it is one (the query token as
    a URL's ``access_token``), alone: no other secret's shape in the text finds it."""
    secret = UNANCHORED[name][1]
    # (a URL as text in a body, a result, a stream: scrubbed, never requested)
    return f"https://hooks.example/cb?access_token={secret}" if name == "query_token" else secret


def _stream_of(text: str, secret: str) -> Stream:
    """A chat completion streaming ``text``, its event cut after the first character of ``secret``
    (its shape's first literal over two transport chunks) and again in its middle."""

    def chunk(delta: str, finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": {"content": delta}, "finish_reason": finish}
        c = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [choice]}
        return f"data: {json.dumps(c)}\n\n".encode()

    event = chunk(text)
    at = event.index(secret.encode())
    pieces = [event[: at + 1], event[at + 1 : at + len(secret) // 2], event[at + len(secret) // 2 :]]
    return Stream([*pieces, chunk("", "stop"), b"data: [DONE]\n\n"], delay=0.01)


@forkpoint.tool
def read_config(path: str, value: str) -> str:
    return f"# {path}: the value to use, past 64 characters (not the short-text path)\n{value}\n"


@pytest.mark.parametrize("name", sorted(UNANCHORED))
def test_scanned_and_one_character_anchored_shapes_reach_no_file(
    tmp_path: Path, server: LocalServer, name: str
) -> None:
    """A Twilio SID (no anchor: a whole-text search), a URL's query credential (``?``/``&``) and a
    key (a long anchor), each alone in a request body, a tool's result and a stream cut inside
    it, are in no file of the store."""
    kind, secret = UNANCHORED[name]
    text = f"Use this one: {_in_context(name)} and nothing else."
    server.route("*/chat/completions", lambda request: _stream_of(text, secret))
    client = openai.OpenAI(base_url=server.openai_base_url, api_key="sk-test", max_retries=0)
    with forkpoint.record(store=tmp_path / "store") as rec:
        config = read_config("settings.py", _in_context(name))
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"Check {text}"}], stream=True
        )
        answer = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    client.close()
    assert secret in answer and secret in config  # (the program saw it)
    assert leaks(tmp_path / "store", {name: secret}) == []
    s = Session.load(rec.session_path)
    call, tool = s.by_type("model_call")[0], s.by_type("tool_call")[0]
    for stored in (tool["result"], call["request"]["body"], call["response"]):
        assert f"[REDACTED:{kind}:" in json.dumps(stored), stored


def test_needles_cover_encoded_forms() -> None:
    """The search itself finds a secret hidden in each encoding it claims to cover."""
    secret = SECRETS["openai_api_key"]
    wrapped = [
        b"x" + secret.encode() + b"y",
        orjson.dumps({"k": "a\n" + secret}),
        base64.b64encode(b"prefix:" + secret.encode() + b":suffix"),
        base64.b64encode(b"pr:" + secret.encode()),
        base64.urlsafe_b64encode(b"p:" + secret.encode() + b"?"),
        quote("q=" + secret).encode(),
        b"half " + secret.encode()[len(secret) // 2 - 8 : len(secret) // 2 + 8],
    ]
    for data in wrapped:
        assert any(n in data for n in needles(secret)), data
    assert not any(n in b"nothing to see here at all" for n in needles(secret))


# ----------------------------------------------------------------------------- configuration


def test_config_is_read_from_pyproject_or_forkpoint_toml_upwards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FORKPOINT_CONFIG", raising=False)
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    (tmp_path / "pyproject.toml").write_text('[tool.forkpoint.redact]\nheaders = ["x-internal"]\n')
    assert load_rules(deep).headers == ("x-internal",)
    (tmp_path / "a" / "forkpoint.toml").write_text('[redact]\nquery_params = ["session"]\n')
    rules = load_rules(deep)
    assert rules.query_params == ("session",) and rules.headers == ()  # the nearest file wins
    assert "forkpoint.toml" in str(rules.source)
    s = redact.Scrubber(rules)
    assert "abc" not in s.url("https://x/y?session=abc&q=1")
    (tmp_path / "a" / "forkpoint.toml").write_text('[redact]\npatterns = ["("]\n')
    with pytest.raises(ConfigError, match=r"forkpoint\.toml.*not a valid regex"):
        load_rules(deep)
    (tmp_path / "a" / "forkpoint.toml").write_text('[redact]\npaterns = ["x"]\n')
    with pytest.raises(ConfigError, match="unknown key"):
        load_rules(deep)
    (tmp_path / "a" / "forkpoint.toml").write_text('[redact]\njson_paths = ["a.b"]\n')
    with pytest.raises(ConfigError, match="must start with"):
        load_rules(deep)
    explicit = tmp_path / "custom.toml"
    explicit.write_text('[redact]\nheaders = ["x-from-env"]\n')
    monkeypatch.setenv("FORKPOINT_CONFIG", str(explicit))
    assert load_rules(deep).headers == ("x-from-env",)


def test_user_rules_apply_on_every_path_and_placeholders_match() -> None:
    rules = redact.Rules(
        patterns=(("internal-token", r"itk_[A-Za-z0-9]{8}"), ("dbpass", r"(?i)dbpass=(?P<s>\S+)")),
        json_paths=("$..ssn", "$.metadata.user_id", "$.messages[*].name", "$.items[-1]"),
        headers=("x-internal",),
    )
    s = redact.Scrubber(rules)
    text = 'call itk_abcdefgh with DBPASS=hunter2 and {"ssn": "078-05-1120"}'
    out = s.text(text)
    assert "itk_abcdefgh" not in out and "hunter2" not in out and "078-05-1120" not in out
    assert s.text(out) == out and s.bytes(text.encode()) == out.encode()
    body = {
        "metadata": {"user_id": 42},
        "messages": [{"name": "bob", "content": "hi"}],
        "items": [1, 2, 3],
        "deep": [{"ssn": {"a": 1}}],
    }
    clean = s.json(body)
    assert clean["metadata"]["user_id"].startswith("[REDACTED:json-path:")
    assert clean["messages"][0] == {"name": clean["messages"][0]["name"], "content": "hi"}
    assert clean["items"][:2] == [1, 2] and clean["items"][2].startswith("[REDACTED:")
    assert isinstance(clean["deep"][0]["ssn"], str)
    assert s.json(clean) == clean  # idempotent
    assert s.headers([("X-Internal", "v"), ("Accept", "a")]) == [["Accept", "a"]]
    # match keys: a live request with the secret and the scrubbed recorded one give the same key
    from forkpoint.match import model_key, normalize_request

    with redact.use_rules(s):
        live = normalize_request("POST", "http://127.0.0.1/v1/x", [], body)
        recorded = normalize_request("POST", "http://127.0.0.1/v1/x", [], clean)
    assert model_key(live) == model_key(recorded)


# ----------------------------------------------------------------------------- forkpoint scrub


def _session_with_secret(store: Path, secret: str, *, end: bool = True) -> Path:
    w = SessionWriter.create(store, {"argv": ["agent.py", f"--internal={secret}"]}, fsync="never")
    body = {"model": "m", "messages": [{"role": "user", "content": f"use {secret} " + "pad " * 300}]}
    w.append(
        {
            "type": "model_call",
            "request": {
                "method": "POST",
                "url": "http://127.0.0.1/v1/chat/completions",
                "headers": [],
                "body_kind": "json",
                "body": body,
            },
            "response": {"status": 200, "headers": [], "body_kind": "json", "body": {"echo": secret}},
        }
    )
    w.append({"type": "tool_call", "tool": "t", "args": {"q": secret}, "result": [secret] * 3})
    if end:
        w.append({"type": "end", "exit_code": 0})
    w.close()
    return w.path


def test_scrub_command_rescrubs_with_new_rules_and_keeps_the_session_valid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "itk_Zq8Wm3Xv7Ln2Pk5Rt9Ys4Bh6"
    store = tmp_path / "store"
    with redact.use_rules(None):
        path = _session_with_secret(store, secret)
    assert leaks(store, {"s": secret})  # not a known shape: recorded as it was
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FORKPOINT_CONFIG", raising=False)
    (tmp_path / "forkpoint.toml").write_text(CONFIG)
    redact.reload()
    try:
        dry = CliRunner().invoke(main, ["scrub", path.name, "--store", str(store), "--dry-run"])
        assert dry.exit_code == 0, dry.output
        assert "would change 2 of 3 events" in dry.output
        assert leaks(store, {"s": secret})
        listed = CliRunner().invoke(main, ["ls", "--store", str(store)])  # indexes the session
        assert listed.exit_code == 0 and any("index" in str(p) for p, _ in store_contents(store))
        r = CliRunner().invoke(main, ["scrub", path.name, "--store", str(store)])
        assert r.exit_code == 0, r.output
        assert "2 of 3 events" in r.output
        assert leaks(store, {"s": secret}) == []
        assert not (store / TMP_DIR).exists()
        v = verify(path)
        assert v.ok and v.complete and v.events == 3
        s = Session.load(path)
        assert s.id == path.name and s.header["scrubbed"][0]["rules"] == redact.current().rules.digest()
        call = s.by_type("model_call")[0]
        from forkpoint.match import model_key, normalize_request

        r0 = call["request"]
        assert call["key"] == model_key(normalize_request(r0["method"], r0["url"], r0["headers"], r0["body"]))
        ok = CliRunner().invoke(main, ["verify", str(path)])
        assert ok.exit_code == 0 and "verify ok: 3 events" in ok.output
    finally:
        monkeypatch.undo()
        redact.reload()


def test_scrub_counts_no_change_that_only_the_match_rules_in_force_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a configuration holding only a [match] ignore rule, scrub said it would change (and then
    rewrote) the model calls, whose only difference was their match key under that rule."""
    store = tmp_path / "store"
    path = _session_with_secret(store, "nothing secret here")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FORKPOINT_CONFIG", raising=False)
    (tmp_path / "forkpoint.toml").write_text('[match]\nignore = [{ path = "$.body.model" }]\n')
    dry = CliRunner().invoke(main, ["scrub", path.name, "--store", str(store), "--dry-run"])
    assert dry.exit_code == 0 and "would change 0 of 3 events" in " ".join(dry.output.split()), dry.output


def test_scrub_refuses_a_session_without_end_or_that_does_not_verify(tmp_path: Path) -> None:
    rules = redact.Rules(patterns=(("x", r"itk_[A-Za-z0-9]{24}"),))
    path = _session_with_secret(tmp_path / "store", "itk_Zq8Wm3Xv7Ln2Pk5Rt9Ys4Bh6", end=False)
    before = (path / LOG_NAME).read_bytes()
    with pytest.raises(ScrubError, match="no end event"):
        scrub_session(path, scrubber=redact.Scrubber(rules))
    assert (path / LOG_NAME).read_bytes() == before
    report = scrub_session(path, scrubber=redact.Scrubber(rules), force=True)
    assert report.swapped and verify(path).ok
    lines = (path / LOG_NAME).read_bytes().splitlines(keepends=True)
    (path / LOG_NAME).write_bytes(lines[0] + lines[1].replace(b'"ts":"2', b'"ts":"3') + b"".join(lines[2:]))
    with pytest.raises(ScrubError, match="does not verify") as refused:
        scrub_session(path, scrubber=redact.Scrubber(rules), force=True)
    # (what to do next: the secret is still on disk; no option scrubs a changed session anyway)
    said = str(refused.value)
    assert f"forkpoint verify {path} names what fails" in said, said
    assert "put back an intact copy of it and scrub that" in said
    assert f"forkpoint rm {path.name}; when rm says it was changed, forkpoint ls --reindex first" in said


def test_scrub_keeps_the_id_of_a_session_whose_folder_has_another_name(tmp_path: Path) -> None:
    """A pytest cassette's folder is named for its test (``cassettes/incident_42``), not by the
    session's id: scrubbing it gave the session the folder's name as its id (a replayed program
    was then handed another FORKPOINT_SESSION_ID than it had when recorded)."""
    rules = redact.Rules(patterns=(("x", r"itk_[A-Za-z0-9]{24}"),))
    recorded = _session_with_secret(tmp_path / "store", "itk_Zq8Wm3Xv7Ln2Pk5Rt9Ys4Bh6")
    cassette = tmp_path / "cassettes" / "incident_42"
    cassette.parent.mkdir()
    shutil.copytree(recorded, cassette)
    report = scrub_session(cassette, scrubber=redact.Scrubber(rules))
    assert report.swapped and report.session_id == recorded.name
    assert Session.load(cassette).id == recorded.name
    assert verify(cassette).ok


def test_scrub_refuses_a_symbolic_link_to_a_session(tmp_path: Path) -> None:
    """A link to a session (here: to one under legal hold) was "scrubbed": the swap put the copy
    where the link was, said the original was replaced, and left the session the link named, secret
    and all, as it was (its store's holds never looked at). It is refused, naming the target."""
    secret = "itk_Zq8Wm3Xv7Ln2Pk5Rt9Ys4Bh6"
    rules = redact.Rules(patterns=(("x", r"itk_[A-Za-z0-9]{24}"),))
    store = tmp_path / "store"
    path = _session_with_secret(store, secret)
    hold(open_store(store), path.name, "sev-1")
    link = tmp_path / "links" / "mine"
    link.parent.mkdir()
    link.symlink_to(path)
    with pytest.raises(ScrubError, match="is a symbolic link to"):
        scrub_session(link, scrubber=redact.Scrubber(rules))
    assert link.is_symlink() and leaks(store, {"s": secret})


def test_scrub_rescrubs_the_untracked_files_of_checkpoints(tmp_path: Path) -> None:
    """A secret of a shape the recording did not know, in an untracked file, is scrubbed from every
    checkpoint that archived it (they stored their manifests as changes to an earlier one), and
    the scrubbed copy verifies and restores."""
    from forkpoint.checkpoint import restore, validate

    secret = "itk_Zq8Wm3Xv7Ln2Pk5Rt9Ys4Bh6"
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    for i in range(10):
        (repo / f"note_{i}.md").write_text(f"note {i}\n")
    store = tmp_path / "store"
    with forkpoint.record(store=store, workspace=repo) as rec:
        rec.checkpoint()
        (repo / "config.txt").write_text(f"internal = {secret}\n")  # (a name no rule knows)
        rec.checkpoint()
        (repo / "note_0.md").write_text("edited\n")
        rec.checkpoint()
    assert leaks(store, {"s": secret})
    lines = stored_lines(rec.session_path)
    seqs = [x["seq"] for x in lines if x.get("type") == "checkpoint"]
    assert ["manifest_changes" in x["workspace"] for x in lines if x.get("type") == "checkpoint"] == [
        False,
        True,
        True,
    ]
    rules = redact.Rules(patterns=(("x", r"itk_[A-Za-z0-9]{24}"),))
    report = scrub_session(rec.session_path, scrubber=redact.Scrubber(rules))
    assert report.files_changed == 2 and report.events_changed == seqs[1:]
    assert leaks(store, {"s": secret}) == []
    assert verify(rec.session_path).ok
    s = Session.load(rec.session_path)
    into = restore(s, seqs[-1], tmp_path / "restored")
    assert secret not in (into / "config.txt").read_text() and (into / "note_0.md").read_text() == "edited\n"
    assert all(c.ok for c in validate(into))


def test_scrub_rescrubs_the_conversation_checkpoints_carry(tmp_path: Path, leaky_server: str) -> None:
    """A secret in the conversation of a session with checkpoints could not be scrubbed: each
    checkpoint carries the messages with their digest, which the scrubbed copy no longer matched,
    so it did not verify and scrub refused. The digest of a carried context that changed is
    computed again, and the copy verifies and restores."""
    from forkpoint.checkpoint import restore, validate

    secret = "itk_Zq8Wm3Xv7Ln2Pk5Rt9Ys4Bh6"
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    store = tmp_path / "store"
    with forkpoint.record(store=store, workspace=repo) as rec:
        client = openai.OpenAI(base_url=leaky_server, api_key="sk-test", max_retries=0)
        messages = [{"role": "user", "content": f"deploy with the internal token {secret}"}]
        client.chat.completions.create(model="m", messages=messages)
        client.chat.completions.create(model="m", messages=[*messages, {"role": "user", "content": "again"}])
        client.close()
    checkpoints = [x for x in stored_lines(rec.session_path) if x.get("type") == "checkpoint"]
    assert checkpoints and leaks(store, {"s": secret})

    rules = redact.Rules(patterns=(("x", r"itk_[A-Za-z0-9]{24}"),))
    report = scrub_session(rec.session_path, scrubber=redact.Scrubber(rules))
    assert report.swapped and leaks(store, {"s": secret}) == []
    assert verify(rec.session_path).ok
    s = Session.load(rec.session_path)
    into = restore(s, checkpoints[-1]["seq"], tmp_path / "restored")
    assert all(c.ok for c in validate(into))


@pytest.mark.parametrize("step", ["copy", "event", "verify", "swap"])
def test_an_interrupted_scrub_leaves_the_original_intact(tmp_path: Path, step: str) -> None:
    secret = "itk_Zq8Wm3Xv7Ln2Pk5Rt9Ys4Bh6"
    store = tmp_path / "store"
    path = _session_with_secret(store, secret)
    snapshot = {p: p.read_bytes() for p in path.rglob("*") if p.is_file()}
    scrubber = redact.Scrubber(redact.Rules(patterns=(("x", r"itk_[A-Za-z0-9]{24}"),)))

    def fail(name: str) -> None:
        if name == step:
            raise KeyboardInterrupt(name)

    with pytest.raises(KeyboardInterrupt):
        scrub_session(path, scrubber=scrubber, hook=fail)
    assert {p: p.read_bytes() for p in path.rglob("*") if p.is_file()} == snapshot
    assert verify(path).ok and not (store / TMP_DIR).exists()


def test_a_scrub_stopped_between_its_two_renames_puts_the_original_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where directories cannot be exchanged in one step the original is moved aside, then the copy
    moved in: an exception between the two (a Ctrl-C, the second rename failing) deleted the work
    folder with the original in it, and the store was left without the session."""
    from forkpoint import scrub

    secret = "itk_Zq8Wm3Xv7Ln2Pk5Rt9Ys4Bh6"
    store = tmp_path / "store"
    path = _session_with_secret(store, secret)
    original = (path / LOG_NAME).read_bytes()
    monkeypatch.setattr(scrub, "_exchange", lambda a, b: False)

    def fail(name: str) -> None:
        if name == "between-renames":
            raise KeyboardInterrupt(name)

    scrubber = redact.Scrubber(redact.Rules(patterns=(("x", r"itk_[A-Za-z0-9]{24}"),)))
    with pytest.raises(KeyboardInterrupt):
        scrub_session(path, scrubber=scrubber, hook=fail)
    assert (path / LOG_NAME).read_bytes() == original
    assert verify(path).ok and not (store / TMP_DIR).exists()


def test_a_scrub_that_cannot_write_its_copy_says_so_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk (or a file size limit) while the scrubbed copy was written ended ``forkpoint
    scrub`` in an OSError traceback."""
    import errno

    from forkpoint.log import writer as log_writer

    secret = "itk_Zq8Wm3Xv7Ln2Pk5Rt9Ys4Bh6"
    store = tmp_path / "store"
    path = _session_with_secret(store, secret)
    original = (path / LOG_NAME).read_bytes()

    def full(fd: int, data: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(log_writer, "_write_all", full)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FORKPOINT_CONFIG", raising=False)
    (tmp_path / "forkpoint.toml").write_text(CONFIG)
    redact.reload()
    try:
        r = CliRunner().invoke(main, ["scrub", path.name, "--store", str(store)])
    finally:
        monkeypatch.undo()
        redact.reload()
    assert r.exit_code == 1 and not isinstance(r.exception, OSError), r.output
    said = " ".join(r.output.split())
    assert "the scrub failed: No space left on device" in said and "the session is unchanged" in said, said
    assert (path / LOG_NAME).read_bytes() == original and not (store / TMP_DIR).exists()


_KILLER = """
import os, signal, sys
from pathlib import Path
from forkpoint import redact
from forkpoint import scrub
if sys.argv[3] == "no-exchange":
    scrub._exchange = lambda a, b: False
def hook(name):
    if name == sys.argv[2]:
        os.kill(os.getpid(), signal.SIGKILL)
rules = redact.Rules(patterns=(("x", r"itk_[A-Za-z0-9]{24}"),))
scrub.scrub_session(Path(sys.argv[1]), scrubber=redact.Scrubber(rules), hook=hook)
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("step", "mode", "scrubbed"),
    [
        ("event", "exchange", False),
        ("swap", "exchange", False),
        ("remove", "exchange", True),
        ("between-renames", "no-exchange", False),
        ("remove", "no-exchange", True),
    ],
)
def test_a_killed_scrub_leaves_the_original_or_the_verified_copy(
    tmp_path: Path, step: str, mode: str, scrubbed: bool
) -> None:
    secret = "itk_Zq8Wm3Xv7Ln2Pk5Rt9Ys4Bh6"
    store = tmp_path / "store"
    path = _session_with_secret(store, secret)
    original = (path / LOG_NAME).read_bytes()
    proc = subprocess.run([sys.executable, "-c", _KILLER, str(path), step, mode], capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    done = recover(store)  # what the next `forkpoint scrub` does first
    assert verify(path).ok
    assert ((path / LOG_NAME).read_bytes() == original) is not scrubbed
    assert bool(leaks(store, {"s": secret})) is not scrubbed
    assert not (store / TMP_DIR).exists() or not any((store / TMP_DIR).iterdir()), done


# ----------------------------------------------------------------------------- permissions


def test_sessions_are_readable_by_their_owner_only(tmp_path: Path, leaky_server: str) -> None:
    old = os.umask(0o022)
    try:
        path, _ = _record(tmp_path, leaky_server, None)
    finally:
        os.umask(old)
    store = tmp_path / "store"
    assert stat.S_IMODE(store.stat().st_mode) == 0o700
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    assert stat.S_IMODE((path / LOG_NAME).stat().st_mode) == 0o600
    for p in (path / "blobs").rglob("*"):
        assert stat.S_IMODE(p.stat().st_mode) == (0o700 if p.is_dir() else 0o600), p
    assert (path / "git-objects").is_dir()
    for p in path.rglob("*"):  # nothing anywhere that others could write, nor read past the 0700 above
        assert stat.S_IMODE(p.lstat().st_mode) & 0o022 == 0, p


def test_a_secret_written_into_a_tracked_file_is_scrubbed_in_the_source_state(tmp_path: Path) -> None:
    """A changed tracked file is stored as a git object (compressed) and as a diff section: both hold
    the placeholder, the tree hash names the scrubbed state, and a restore of it validates."""
    from forkpoint.checkpoint import restore, validate

    secret = "sk-proj-TrackedFileCanary0123456789abcdefXYZ"
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "settings.py").write_text("DEBUG = False\n")
    git(repo, "add", "settings.py")
    git(repo, "commit", "-q", "-m", "init")
    (repo / "settings.py").write_text(f'DEBUG = False\nOPENAI_KEY = "{secret}"\n')
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        seq = rec.checkpoint(reason="manual")
        (repo / "settings.py").write_text(f'DEBUG = True\nOPENAI_KEY = "{secret}"\n')
        rec.checkpoint(reason="again")
    assert seq is not None
    assert leaks(tmp_path / "store", {"tracked": secret}) == []
    s = Session.load(rec.session_path)
    cp = s.by_type("checkpoint")[0]
    assert cp["source"]["changed"] == ["settings.py"]
    assert verify(rec.session_path).ok
    into = restore(s, seq, tmp_path / "restored")
    text = (into / "settings.py").read_text()
    assert redact.placeholder("openai-key", secret) in text and secret not in text
    checks = validate(into)
    assert all(c.ok for c in checks), [(c.name, c.expected, c.actual) for c in checks if not c.ok]


def test_a_tracked_file_secret_stays_scrubbed_over_many_checkpoints(tmp_path: Path) -> None:
    """git rewrites the object of a file it re-hashes (racily clean after a `git status`) without
    naming it: the unscrubbed object removed at the first checkpoint must not come back."""
    secret = "sk-proj-TrackedRacyCanary0123456789abcdefXYZ"
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "settings.py").write_text("DEBUG = False\n")
    (repo / "other.py").write_text("x = 1\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "init")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        rec.checkpoint(reason="clean")
        (repo / "settings.py").write_text(f'OPENAI_KEY = "{secret}"\n')
        rec.checkpoint(reason="secret written")
        git(repo, "status", "--short")  # refreshes the user's index
        (repo / "other.py").write_text("x = 2\n")
        rec.checkpoint(reason="another file")
        rec.checkpoint(reason="nothing new")
    assert leaks(tmp_path / "store", {"tracked": secret}) == []
    v = verify(rec.session_path)
    assert v.ok and not v.notes, (v.problems, v.notes)
    s = Session.load(rec.session_path)
    last = s.by_type("checkpoint")[-1]
    from forkpoint.checkpoint import restore

    into = restore(s, last["seq"], tmp_path / "restored")
    assert (
        into / "settings.py"
    ).read_text() == f'OPENAI_KEY = "{redact.placeholder("openai-key", secret)}"\n'
    assert (into / "other.py").read_text() == "x = 2\n"


def test_verify_names_a_git_object_holding_a_secret(tmp_path: Path) -> None:
    from forkpoint.checkpoint.git import write_loose

    path = _session_with_secret(tmp_path / "store", "nothing-secret-here")
    content = b'PASSWORD = "x"\nSTRIPE = "sk_live_51HcanaryStripeKey0123456789abcdef"\n'
    oid = hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()
    write_loose(path / "git-objects", oid, b"blob", content, False)
    v = verify(path)
    assert v.ok  # damage it is not: the object is what its name says
    assert [n for n in v.notes if oid[:12] in n and "stripe-key" in n], v.notes


def test_verify_names_a_tree_holding_a_secret_in_a_tracked_files_name(tmp_path: Path) -> None:
    """A tracked file named after a key: its content is scrubbed, its name is kept in the git tree of
    the checkpoint's source state. verify said "ok" without a note; now it names that tree."""
    secret = "sk-proj-TrackedNameCanary0123456789abcdefXYZ"
    repo = make_repo(tmp_path / "repo", {"app.py": "print('hello')\n"})
    (repo / f"{secret}.txt").write_text("cached\n")
    git(repo, "add", f"{secret}.txt")
    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        rec.checkpoint(reason="manual")
    v = verify(rec.session_path)
    assert v.ok
    assert [n for n in v.notes if "openai-key" in n and "git object" in n], v.notes


def test_reports_exports_and_pages_are_owner_only_and_scrubbed(tmp_path: Path) -> None:
    from forkpoint.replay import write_report

    secret = "sk_live_51HcanaryReportKey0123456789abcdef"
    path = _session_with_secret(tmp_path / "store", secret)
    old = os.umask(0o022)
    try:
        report = {"overrides": [{"target": "tool:t", "value": {"key": secret, "password": "pw-canary-77"}}]}
        write_report(tmp_path / "report.json", report)
        runner = CliRunner()
        for args in (
            ["export", str(path), "--file", str(tmp_path / "spans.jsonl"), "--content"],
            ["show", str(path), "--html", str(tmp_path / "page.html")],
        ):
            result = runner.invoke(main, args)
            assert result.exit_code == 0, result.output
    finally:
        os.umask(old)
    for name in ("report.json", "spans.jsonl", "page.html"):
        f = tmp_path / name
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, name
        assert secret.encode() not in f.read_bytes() and b"pw-canary-77" not in f.read_bytes(), name
    assert redact.placeholder("stripe-key", secret) in (tmp_path / "report.json").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ('[redact]\npatterns = ["("]\n', r"forkpoint\.toml \[redact\].*not a valid regex"),
        # (the log writer scrubs every field: such a rule redacted the session's own hashes, and its
        # sessions, recorded without a word, failed verify and could not be replayed or restored)
        (
            '[redact]\npatterns = ["[0-9a-f]{64}"]\n',
            r"forkpoint\.toml \[redact\]: redaction pattern '\[0-9a-f\]\{64\}' matches a hex digest",
        ),
        (
            '[match]\nignore = [{ path = "$.body.x", regex = "(" }]\n',
            r"forkpoint\.toml \[match\]: ignore\[0\]",
        ),
        ("[redact\n", "cannot read it as TOML"),
    ],
)
def test_a_bad_configuration_is_refused_before_the_command_runs(
    tmp_path: Path, config: str, message: str
) -> None:
    """`forkpoint record` and `forkpoint replay` check the configuration the program will run under
    before starting it (the replaying parent loads matching and redaction only to check tables
    that are there): a bad rule is named, and the program never runs."""
    from tests.cliutil import forkpoint_cli

    env = {k: v for k, v in os.environ.items() if k != "FORKPOINT_CONFIG"}
    store = str(tmp_path / "st")
    rec = forkpoint_cli(
        ["record", "--store", store, "--no-workspace", "--", sys.executable, "-c", "pass"], tmp_path, env
    )
    assert rec.returncode == 0, rec.stderr
    (tmp_path / "forkpoint.toml").write_text(config)
    marker = "import pathlib; pathlib.Path('ran').write_text('x')"
    for args in (["record", "--store", store, "--no-workspace"], ["replay", "last", "--store", store]):
        done = forkpoint_cli([*args, "--", sys.executable, "-c", marker], tmp_path, env)
        assert done.returncode != 0 and re.search(message, done.stderr), (args, done.stderr)
        assert not (tmp_path / "ran").exists(), args


@pytest.mark.parametrize(
    "value",
    [{"caf\udce9.txt": 1, "ok": 2}, 2**70, ["caf\udce9"], "caf\udce9", [b"abc"], {"blob": b"\x00\xff"}],
    ids=["key", "int", "list", "str", "bytes-in-list", "bytes-in-dict"],
)
def test_a_json_path_over_a_value_orjson_refuses_redacts_it_and_the_run_goes_on(
    store: Path, value: Any
) -> None:
    """A ``[redact] json_paths`` rule that matched a value holding a file name decoded with
    surrogateescape, an integer beyond 64 bits or bytes raised TypeError inside the agent's own tool
    call (recording changed the live run: the program died). The value is redacted as any other."""

    @forkpoint.tool
    def listing(folder: str) -> dict[str, Any]:
        return {"folder": folder, "files": value}

    with redact.use_rules(redact.Scrubber(redact.Rules(json_paths=("$..files",)))):
        with forkpoint.record(store=store) as rec:
            live = listing("docs")
        assert live == {"folder": "docs", "files": value}
        stored = Session.load(rec.session_path).by_type("tool_call")[0]["result"]
        assert stored["folder"] == "docs" and stored["files"].startswith("[REDACTED:json-path:")
        with forkpoint.replay(rec.session_path) as rp:
            listing("docs")
        assert rp.report()["matched"] == 1


def test_scrub_reads_each_workspace_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each checkpoint lists every file of the workspace: scrub reads (and scrubs) each content
    once, not once per checkpoint that lists it (quadratic: 1,000 turns took 100 s)."""
    from forkpoint.log.blobs import BlobStore

    def session(turns: int) -> Path:
        return growing_workspace_session(tmp_path / f"s{turns}", tmp_path / f"ws{turns}", turns, "mod")

    read = 0
    real = BlobStore.get

    def counted(self: BlobStore, *args: Any, **kw: Any) -> Any:
        nonlocal read
        read += 1
        return real(self, *args, **kw)

    monkeypatch.setattr(BlobStore, "get", counted)
    per_turn = {}
    for turns in (10, 40):
        path = session(turns)
        read = 0
        scrub_session(path, dry_run=True)
        per_turn[turns] = read / turns
    assert per_turn[40] <= 1.5 * per_turn[10] + 1, per_turn


def test_exports_apply_the_rules_in_force_now_and_skip_a_scrub_that_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What leaves (the export, the page) is scrubbed by the rules in force now: a rule added after
    the recording applies. A session last written under these very rules by this very forkpoint
    is handed on as it is: scrubbing it again gives it back unchanged (scrubbing is idempotent),
    and cost half of ``show --html``'s time at 2,000 turns."""
    from forkpoint._version import __version__
    from forkpoint.scrub import rescrubbed

    secret = "CUST-12345678"
    store = tmp_path / "store"
    with redact.use_rules(redact.Rules()):
        path = _session_with_secret(store, secret)
        header = {"argv": ["agent.py"], "versions": {"forkpoint": __version__}, "records_itself": True}
        w = SessionWriter.create(store, header)
        w.append({"type": "tool_call", "tool": "t", "args": {"q": secret}, "result": secret})
        w.close()
        ours = Session.load(w.path)
        assert rescrubbed(ours) is ours  # (written under these rules, by this forkpoint)
        unnamed = Session.load(path)
        assert rescrubbed(unnamed) is not unnamed  # (by no forkpoint it names)
        older = dataclasses.replace(ours, header={**ours.header, "versions": {"forkpoint": "0.0.1"}})
        assert rescrubbed(older) is not older
    with redact.use_rules(redact.Rules(patterns=(("customer", r"CUST-[0-9]{8}"),))):
        for session in (path, w.path):
            out = tmp_path / f"{session.name}.html"
            result = CliRunner().invoke(main, ["show", str(session), "--html", str(out)])
            assert result.exit_code == 0, result.output
            assert secret not in out.read_text() and "[REDACTED:customer:" in out.read_text()
            spans = tmp_path / f"{session.name}.jsonl"
            result = CliRunner().invoke(main, ["export", str(session), "--file", str(spans), "--content"])
            assert result.exit_code == 0, result.output
            assert secret not in spans.read_text() and "[REDACTED:customer:" in spans.read_text()


def test_exports_scrub_again_what_a_recorded_program_appended_under_its_own_folders_rules(
    tmp_path: Path,
) -> None:
    """``forkpoint record -- sh -c "cd sub && python agent.py"``: the header is written under the
    rules of the folder the recording started in, the program's calls under those of its own folder
    (here without the customer rule). The export and the page, run where the recording started,
    took the header's rules for the whole log's and handed the customer id out as it was stored."""
    from forkpoint._version import __version__

    secret = "CUST-12345678"
    customer = redact.Rules(patterns=(("customer", r"CUST-[0-9]{8}"),))
    with redact.use_rules(customer):
        w = SessionWriter.create(tmp_path / "store", {"argv": ["sh"], "versions": {"forkpoint": __version__}})
        w.close()
    with redact.use_rules(redact.Rules()):  # (the recorded program, in a folder with no such rule)
        child = SessionWriter.open(w.path)
        child.append({"type": "tool_call", "tool": "t", "args": {"q": "who"}, "result": secret})
        child.append({"type": "end", "exit_code": 0})
        child.close()
    assert secret in str(Session.load(w.path).events)
    with redact.use_rules(customer):
        page, spans = tmp_path / "page.html", tmp_path / "spans.jsonl"
        result = CliRunner().invoke(main, ["show", str(w.path), "--html", str(page)])
        assert result.exit_code == 0, result.output
        result = CliRunner().invoke(main, ["export", str(w.path), "--file", str(spans), "--content"])
        assert result.exit_code == 0, result.output
    for out in (page, spans):
        assert secret not in out.read_text() and "[REDACTED:customer:" in out.read_text()


def test_a_secret_a_tool_returns_split_over_list_items_reaches_no_file(store: Path) -> None:
    """A tool returning text as a list of pieces (a file's lines, wrapped text) held a secret no
    item held whole: each item scrubbed alone, the PEM key's header line was replaced and its body
    lines stored in the clear, and a key cut over two pieces was stored as its two pieces."""
    key = SECRETS["openai_api_key"]

    @forkpoint.tool
    def read_lines(path: str) -> list[str]:
        return [*PEM.splitlines(keepends=True), "see " + key[:12], key[12:] + " more", "Done"]

    with forkpoint.record(store=store) as rec:
        live = read_lines("deploy.pem")
    assert "".join(live).startswith(PEM)  # (the live run gets what the tool returned)
    body = {f"pem line {i}": line for i, line in enumerate(PEM.splitlines()[1:-1])}
    assert leaks(store, {"pem": PEM, "key": key, **body}) == []
    stored = Session.load(rec.session_path).by_type("tool_call")[0]["result"]
    assert stored[-3:] == ["see " + redact.placeholder("openai-key", key), " more", "Done"]
    with forkpoint.replay(rec.session_path) as rp:
        assert read_lines("deploy.pem") == stored
    assert rp.report()["matched"] == 1


def test_a_secret_a_tool_returns_split_after_a_piece_of_a_whole_key_shape_reaches_no_file(
    store: Path,
) -> None:
    """The first piece of a split secret alone a whole key's shape (40 characters of an OpenAI key;
    a PEM key's header line, its END line not returned): that piece was replaced and the rest of the
    key stored in the clear, in the next item(s)."""
    key = SECRETS["openai_api_key"]
    pem = PEM.splitlines()[:-1]

    @forkpoint.tool
    def read_lines(path: str) -> list[str]:
        return ["see " + key[:40], key[40:] + " more", "Done", *pem]

    with forkpoint.record(store=store) as rec:
        live = read_lines("deploy.pem")
    assert live[3:] == pem  # (the live run gets what the tool returned)
    body = {f"pem line {i}": line for i, line in enumerate(pem[1:])}
    assert leaks(store, {"key": key, "key's rest": key[40:], **body}) == []
    stored = Session.load(rec.session_path).by_type("tool_call")[0]["result"]
    assert stored == [
        "see " + redact.placeholder("openai-key", key),
        " more",
        "Done",
        redact.placeholder("private-key", "".join(pem)),
        "",
        "",
    ]
    with forkpoint.replay(rec.session_path) as rp:
        assert read_lines("deploy.pem") == stored
    assert rp.report()["matched"] == 1


_KEY = SECRETS["openai_api_key"]
_YAML = "db:\n  host: 127.0.0.1\n  token: |\n    abcdEFGH1234xyzSECRET\n  port: 5432\n"


@pytest.mark.parametrize(
    ("items", "secrets"),
    [
        # an argv list whose option's value is itself cut over two items
        (["--token", _KEY[:8], _KEY[8:]], {"key's rest": _KEY[8:]}),
        # another name's value before a PEM key (password=password=-----BEGIN …) hid the key
        (
            ["password=", "password=", *PEM.splitlines(keepends=True)],
            {f"pem line {i}": line for i, line in enumerate(PEM.splitlines()[1:])},
        ),
        # and so a key cut where its first piece alone is a key's shape
        (["password=", "password=", _KEY[:30], _KEY[30:]], {"key's rest": _KEY[30:]}),
        # a .netrc line cut before its password's separator: as one text it is replaced
        (["machine example.test login bob password", " pw1xyz"], {"netrc password": "pw1xyz"}),
        # a file's lines without their ends (text.splitlines()): the value on a line after its name
        (_YAML.splitlines(), {"block scalar": "abcdEFGH1234xyzSECRET"}),
        (
            ["creds:", "  password: >-", "    correct-horse-9", "    battery-staple-7", "other: 1"],
            {"first line": "correct-horse-9", "second line": "battery-staple-7"},
        ),
        (["machine example.test", "login bob", "password pw1xyzabc"], {"netrc password": "pw1xyzabc"}),
    ],
    ids=[
        "option-value",
        "pem-after-names",
        "key-after-names",
        "netrc",
        "yaml-block",
        "yaml-folded",
        "netrc-lines",
    ],
)
def test_a_secret_split_over_list_items_after_its_name_reaches_no_file(
    store: Path, items: list[str], secrets: dict[str, str]
) -> None:
    """A secret cut over a tool's list items where the items before it say what it is (an option,
    a name, a .netrc keyword) was kept, all or its rest, in the clear: a credential option's value
    replaced alone, a name's value hiding the PEM key it ran into, a value whose name ends the
    item before, a value on a line after its name where the items are lines without their ends
    (a YAML block scalar's, ``token: |``; a .netrc password), read glued together."""

    @forkpoint.tool
    def read_lines(path: str) -> list[str]:
        return list(items)

    with forkpoint.record(store=store) as rec:
        assert read_lines("x") == items  # (the live run gets what the tool returned)
    assert leaks(store, secrets) == []
    stored = Session.load(rec.session_path).by_type("tool_call")[0]["result"]
    assert len(stored) == len(items) and redact.Scrubber().json(stored) == stored
    with forkpoint.replay(rec.session_path) as rp:
        assert read_lines("x") == stored
    assert rp.report()["matched"] == 1


#: A command's arguments (a tool's list, a recorded command line) with a credential option's value
#: cut over items, and the secrets none of its files may hold.
_ARGV_SPLIT = pytest.mark.parametrize(
    ("argv", "secrets"),
    [
        # the first item alone a credential option's value (sk-proj-), the two as one text a key
        (["--token=sk-proj-", _KEY[8:]], {"key's rest": _KEY[8:]}),
        (["--token=sk-proj-", "ABCDEF0123456789abcdef0123"], {"key's rest": "ABCDEF0123456789abcdef0123"}),
        (["run", "--api-key=" + _KEY[:12], _KEY[12:], "x"], {"key's rest": _KEY[12:]}),
        # a blank item between an option and its value (as some shells split a command line)
        (["--token", " ", "pw1xyz"], {"token": "pw1xyz"}),
        (["--token", "", "\t", "pw1xyz", "x"], {"token": "pw1xyz"}),
        (["curl", "-u", "", "admin:pw1xyz", "http://127.0.0.1:9/"], {"password": "pw1xyz"}),
    ],
    ids=[
        "option-then-key-rest",
        "option-then-hex-rest",
        "option-key-cut-inside",
        "blank",
        "blanks",
        "curl-blank",
    ],
)


@_ARGV_SPLIT
def test_a_secret_in_a_tools_argument_list_reaches_no_file(
    store: Path, argv: list[str], secrets: dict[str, str]
) -> None:
    """A tool's arguments as a command's list, a credential option's value cut over two items:
    what each reading of the items finds is replaced, and the live call gets its arguments."""

    @forkpoint.tool
    def run(args: list[str]) -> int:
        return sum(map(len, args))

    with forkpoint.record(store=store) as rec:
        assert run(list(argv)) == len("".join(argv))
    assert leaks(store, secrets) == []
    stored = Session.load(rec.session_path).by_type("tool_call")[0]["args"]["args"]
    assert len(stored) == len(argv) and redact.Scrubber().json(stored) == stored
    with forkpoint.replay(rec.session_path) as rp:
        assert run(list(argv)) == len("".join(argv))
    assert rp.report()["matched"] == 1


@_ARGV_SPLIT
def test_a_secret_split_over_the_recorded_command_lines_words_reaches_no_file(
    store: Path, argv: list[str], secrets: dict[str, str]
) -> None:
    """The recorded command line (the header's argv), a credential option's value cut over two
    words (``--token=sk-proj-`` then the key's rest): the option's value alone was replaced and
    the rest of the key kept in the clear, where a tool's argument list of the same words kept none."""
    with forkpoint.record(store=store, argv=list(argv)) as rec:
        pass
    assert leaks(store, secrets) == []
    stored = Session.load(rec.session_path).header["argv"]
    assert len(stored) == len(argv) and redact.Scrubber().argv(stored) == stored
    assert stored == redact.Scrubber().json(list(argv))  # (as a tool's list of the same words)


def test_a_config_a_tool_is_given_keeps_its_plain_lines_and_no_secret(store: Path) -> None:
    """A tool given a file's texts: an empty value at a line's end (``PASSWORD=``) took the next
    line, which was stored replaced; a YAML block scalar's value (``token: |``) was stored in the
    clear."""
    texts = ["PASSWORD=\nHOME=/root\n", "password: \nHOME=/root\n", "token: |\n  abcdEFGH1234xyz\nnext: 1\n"]

    @forkpoint.tool
    def write_configs(configs: list[str]) -> int:
        return len(configs)

    with forkpoint.record(store=store) as rec:
        assert write_configs(list(texts)) == 3
    assert leaks(store, {"block scalar": "abcdEFGH1234xyz"}) == []
    stored = Session.load(rec.session_path).by_type("tool_call")[0]["args"]["configs"]
    assert stored[:2] == texts[:2] and stored[2].endswith("]\nnext: 1\n"), stored
    with forkpoint.replay(rec.session_path) as rp:
        assert write_configs(list(texts)) == 3
    assert rp.report()["matched"] == 1


def test_a_quoted_value_is_read_on_its_names_line_or_indented_under_it(store: Path) -> None:
    """A name that says credential at a line's end and a quoted text at the next line's start
    (prose, ``secret:`` then a quotation; ``secret =`` then a string; the same with escaped line
    breaks in a shell's printf) were read as a quoted credential across the line break, and the
    next line's text stored as a placeholder; a YAML value quoted and indented under its name is
    still one."""
    plain = [
        'Here is the secret:\n"The quick brown fox jumps"\n',
        "secret =\n'hello there friend'\n",
        'printf "the secret:\\n\\"The quick brown fox\\"\\n"',
        # (a docstring under a name that says credential: no YAML value, triple-quoted)
        'def generate(self) -> RSAPrivateKey:\n    """Generate a new RSA-2048 private key."""\n',
    ]
    yaml = 'db:\n  password:\n    "c0rrect-h0rse-77"\n'

    @forkpoint.tool
    def write_texts(texts: list[str]) -> int:
        return len(texts)

    with forkpoint.record(store=store) as rec:
        assert write_texts([*plain, yaml]) == 5
    assert leaks(store, {"yaml password": "c0rrect-h0rse-77"}) == []
    stored = Session.load(rec.session_path).by_type("tool_call")[0]["args"]["texts"]
    assert stored[:4] == plain
    assert stored[4] == yaml.replace(
        "c0rrect-h0rse-77", redact.placeholder("secret-assignment", "c0rrect-h0rse-77")
    )


_CLIENT_KEY_DATA = base64.b64encode(PEM.encode()).decode()


@pytest.mark.parametrize(
    ("name", "content", "secret"),
    [
        # Python's triple-quoted literal under a credential's name
        ("settings.py", 'DB_PASSWORD = """hunter2-Triple-77"""\n', "hunter2-Triple-77"),
        ("settings.py", "api_key = '''abcDEF123456ghiJKL'''\n", "abcDEF123456ghiJKL"),
        # Python's line continued after the name (a long literal on the next line)
        ("settings.py", 'DB_PASSWORD = \\\n    "hunter2-Continued-77"\n', "hunter2-Continued-77"),
        # a kubeconfig's client key: a PEM private key, base64-encoded (kubectl config view --raw)
        (
            "kubeconfig",
            "users:\n- name: admin\n  user:\n    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t\n"
            f"    client-key-data: {_CLIENT_KEY_DATA}\n",
            _CLIENT_KEY_DATA,
        ),
        # WordPress's wp-config.php
        ("wp-config.php", "define( 'DB_PASSWORD', 'wpS3cret-Passw0rd' );\n", "wpS3cret-Passw0rd"),
        ("wp-config.php", "define('AUTH_KEY', 'k#8z|Qw2>e!Lp0^vT6&yB9');\n", "k#8z|Qw2>e!Lp0^vT6&yB9"),
        # a Discord webhook's token in its URL's path (a file's text to scrub: no test requests it;
        # the host is part of the token's shape)
        (
            "notify.sh",
            "curl -X POST https://discord.com/api/webhooks/123456789012345678/"
            "Ab3dEfGh1jKlMn0pQrStUvWxYz0123456789-AbCdEfGhIjKlMnOpQrStUvWxYz_0123 -d @msg.json\n",
            "Ab3dEfGh1jKlMn0pQrStUvWxYz0123456789-AbCdEfGhIjKlMnOpQrStUvWxYz_0123",
        ),
        # a PyPI API token alone (a CI log's line, a token pasted into a note)
        (
            "release.log",
            "uploading with pypi-AgEIcHlwaS5vcmcCJDA5ZjM0YzE2LWE2YjItNGQ1Yi1hN2I2LTZjYzk0NzIzNmE0YQACKlszLCJ4In1d\n",
            "pypi-AgEIcHlwaS5vcmcCJDA5ZjM0YzE2LWE2YjItNGQ1Yi1hN2I2LTZjYzk0NzIzNmE0YQACKlszLCJ4In1d",
        ),
        # a JSON config's password holding what JSON escapes (a quote, a backslash)
        ("config.json", '{"db": {"password": "pa\\"ss-w0rd-1234"}}\n', 'ss-w0rd-1234'),
        ("config.json", '{"db": {"password": "pa\\\\ss-w0rd-1234"}}\n', 'ss-w0rd-1234'),
        # a URL's password holding an "@" (p@ss…), not percent-encoded
        (".env", "DATABASE_URL=postgres://app:p@ss-w0rd-99@127.0.0.1:5432/app\n", "ss-w0rd-99"),
        # an age identity (forkpoint's own --encrypt-to keys)
        ("key.txt", "# public key: age1xyz\nAGE-SECRET-KEY-1QYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQY\n",
         "AGE-SECRET-KEY-1QYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQY"),
        # a Kubernetes manifest's env entry (kubectl get deploy -o yaml)
        ("deploy.yaml", '        - name: OPENAI_API_KEY\n          value: "abcDEF123456ghiJKL"\n        - name: MODE\n'
         "          value: fast\n", "abcDEF123456ghiJKL"),
        ("deploy.yaml", "  - name: db_password\n    value: kS3cret-Passw0rd\n", "kS3cret-Passw0rd"),
        # an .env file's (or env's output) passwords under …_PASS, …_PWD, SSHPASS, REDISCLI_AUTH
        (".env", "DB_USER=app\nDB_PASS=dbS3cret-99x\n", "dbS3cret-99x"),
        (".env", "SMTP_PASS='smtpS3cret-99x'\n", "smtpS3cret-99x"),
        (".env", "MYSQL_PWD=myS3cret-99x\n", "myS3cret-99x"),
        (".env", "export SSHPASS=sshS3cret-99x\n", "sshS3cret-99x"),
        (".env", "REDISCLI_AUTH=redisS3cret-99x\n", "redisS3cret-99x"),
        # a HashiCorp Vault token (~/.vault-token, vault login's output)
        (".vault-token", "hvs.CAESIJ1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwXyZ01GiAKHGh2cy5hYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ehAB\n",
         "hvs.CAESIJ1a2B3c4D5e6F7g8H9i0JkLmNoPqRsTuVwXyZ01GiAKHGh2cy5hYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ehAB"),
        # an ODBC connection string's Pwd=
        ("appsettings.txt", "Driver={ODBC Driver 18};Server=db;Uid=sa;Pwd=odbcS3cret99;Encrypt=yes\n", "odbcS3cret99"),
        # JSON-escaped, in a JSON file's string: a notebook's cell, a config map's manifest (kubectl -o json)
        ("notebook.ipynb", json.dumps({"cells": [{"source": ['DB_PASSWORD = """hunter2-Triple-77"""\n']}]}),
         "hunter2-Triple-77"),
        ("cm.json", json.dumps({"data": {"env.yaml": '- name: DB_PASSWORD\n  value: "kS3cret-Passw0rd"\n'}}),
         "kS3cret-Passw0rd"),
        ("files.json", json.dumps({"settings.py": 'DB_PASSWORD = \\\n    "hunter2-Continued-77"\n'}),
         "hunter2-Continued-77"),
    ],
    ids=["py-triple-double", "py-triple-single", "py-continued", "kubeconfig-client-key", "wp-db-password", "wp-auth-key",
         "discord-webhook", "pypi-token", "json-escaped-quote", "json-escaped-backslash", "url-password-at",
         "age-identity", "k8s-env", "k8s-env-lower", "env-db-pass", "env-smtp-pass", "env-mysql-pwd",
         "env-sshpass", "env-rediscli-auth", "vault-token", "odbc-pwd", "ipynb-triple", "json-k8s-env",
         "json-py-continued"],
)  # fmt: skip
def test_a_config_files_secret_reaches_no_file(tmp_path: Path, name: str, content: str, secret: str) -> None:
    """A workspace's config file and the same text a tool returns, each of a shape the scrubber
    did not know, were stored with the secret in the clear: a Python triple-quoted literal, a
    kubeconfig's base64 client key (a certificate's data, public, is kept), a wp-config.php's
    define(), a Discord webhook's URL, a PyPI token; a triple-quoted literal and a Kubernetes env
    entry JSON-escaped (a notebook's cell, a config map in kubectl's JSON) were stored in the clear
    too, the env entry's value with its escaping backslash replaced, and the JSON broken."""
    repo = _repo(tmp_path)
    (repo / name).write_text(content)

    @forkpoint.tool
    def read_file(path: str) -> str:
        return (repo / path).read_text()

    with forkpoint.record(store=tmp_path / "store", workspace=repo) as rec:
        assert read_file(name) == content
        rec.checkpoint(reason="manual")
    assert leaks(tmp_path / "store", {"secret": secret}) == []
    result = Session.load(rec.session_path).by_type("tool_call")[0]["result"]
    assert result == redact.scrub_text(result) and len(result.splitlines()) == len(content.splitlines())
    if "client-certificate-data" in content:  # (a certificate is public: kept)
        assert "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t" in result


@pytest.mark.parametrize(
    "header",
    ["X-Auth-Key", "Fastly-Key", "X-Honeycomb-Team", "X-RapidAPI-Key", "x-functions-key", "X-Master-Key",
     "X-AIO-Key", "X-Appwrite-Key", "X-TrackerToken"],
)  # fmt: skip
def test_a_services_key_header_reaches_no_file(store: Path, server: LocalServer, header: str) -> None:
    """Services' API key headers whose names do not say key, token or secret in forkpoint's words
    (Cloudflare's X-Auth-Key, Fastly-Key, Honeycomb's X-Honeycomb-Team, RapidAPI's, Azure
    Functions'…): a captured request's value was stored in the clear in its headers."""
    import httpx

    secret = "c2f1a9e07b3d4e5f8a6b7c8d9e0f1a2b3c4d"
    with forkpoint.record(store=store) as rec:
        assert httpx.get(server.url + "/v1/things?kind=json", headers={header: secret}).status_code == 200
    assert leaks(store, {"key": secret}) == []
    sent = dict(Session.load(rec.session_path).by_type("model_call")[0]["request"]["headers"])
    assert sent[header.lower()] == redact.placeholder("header-credential", secret)  # (which key it sent)
