"""The widened canary (issue 14): 50+ kinds of secrets, each in every place a value can travel, and
not one of them in any file forkpoint writes.

An agent, run under ``forkpoint record --deterministic --otlp … --otlp-content`` as a real process
(the real ``openai`` SDK against a local server, which also takes the spans sent while it runs),
gets every planted secret, in the text around it that makes it recognisable, through its
**environment** and its **argv**, and passes each on: in **request headers**, the **URL query**, the
**request body**; the server answers with each in the **response body**, **response headers**, and
in a **stream whose events split it** (a quarter in one event, the rest in the next); the agent
gives each to a tool (**arguments**) that returns it (**result**), to a tool that returns a
**dataclass** holding them (and **bytes**), to a tool that raises it (**exception**), to a
**note**, draws one with ``random.choice`` (a **value**), and writes each into a **tracked file**
and an **untracked file**, with checkpoints before and after a ``git status``. Then the test exports
the session (``export --file --content``, ``export --otlp``), writes its page (``show --html``) and
a test of it (``make-test``), sweeps it (an arm from every checkpoint, ``--html``, with an outcome
command that prints every secret), prints it (``show``, ``show --json``, ``diff`` against an arm,
as text and JSON), replays it with an override holding every secret and a ``--report``, restores
every checkpoint, and searches every file under the store, the outputs and the restored folders —
raw, and decoded (git objects inflated, zstd blobs and gzip files decompressed, the log's packed
lines unpacked, base64 in any of them decoded, twice over: an AWS event stream kept as base64
carries base64 events, and decompressed: a body still under its coding) — for each secret raw, JSON-escaped, percent-encoded, base64-encoded at every
alignment, and a 12-byte piece of its middle: 0 found. (tests/test_canary_paths.py takes the same
secrets through the other HTTP libraries, Bedrock and MCP.)
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import random
import re
import string
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest
import zstandard

from tests.cliutil import forkpoint_cli
from tests.gitutil import git
from tests.logutil import searchable
from tests.modelserver import LocalServer, Reply, Stream, chat_completion, json_reply
from tests.test_security import needles

_rng = random.Random(14)
_ALNUM = string.ascii_letters + string.digits
_HEX = "0123456789abcdef"


def _r(n: int, alphabet: str = _ALNUM) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


PEM_BODY = "\n".join(_r(64, _ALNUM + "+/") for _ in range(4))

#: name -> (secret, the text that carries it, "{s}" where it goes). One kind each.
KINDS: dict[str, tuple[str, str]] = {
    "openai_proj": ("sk-proj-" + _r(48), "key {s} here"),
    "openai_svcacct": ("sk-svcacct-" + _r(40), "svc {s}"),
    "openai_admin": ("sk-admin-" + _r(40), "admin {s}"),
    "openai_legacy": ("sk-" + _r(48), "legacy {s}"),
    "anthropic": ("sk-ant-api03-" + _r(60, _ALNUM + "-_") + "AA", "claude {s}"),
    "stripe_live": ("sk_live_" + _r(32), "stripe {s}"),
    "stripe_restricted": ("rk_live_" + _r(32), "restricted {s}"),
    "stripe_test": ("sk_test_" + _r(32), "test {s}"),
    "aws_akia": ("AKIA" + _r(16, string.ascii_uppercase + string.digits), "id {s}"),
    "aws_asia": ("ASIA" + _r(16, string.ascii_uppercase + string.digits), "temp {s}"),
    "aws_secret_ini": (_r(40, _ALNUM + "/+"), "[default]\naws_secret_access_key = {s}\n"),
    "aws_session_token_ini": (_r(120, _ALNUM + "/+"), "aws_session_token = {s}"),
    "google_aiza": ("AIza" + _r(35, _ALNUM + "-_"), "gkey {s}"),
    "google_oauth": ("ya29." + _r(60, _ALNUM + "-_"), "oauth {s}"),
    "github_ghp": ("ghp_" + _r(36), "gh {s}"),
    "github_gho": ("gho_" + _r(36), "gho {s}"),
    "github_ghs": ("ghs_" + _r(36), "ghs {s}"),
    "github_pat": ("github_pat_11" + _r(20) + "_" + _r(59), "pat {s}"),
    "gitlab": ("glpat-" + _r(20), "gl {s}"),
    "slack_bot": ("xoxb-" + _r(12, string.digits) + "-" + _r(24), "bot {s}"),
    "slack_user": ("xoxp-" + _r(12, string.digits) + "-" + _r(24), "user {s}"),
    "slack_webhook": ("T" + _r(8) + "/B" + _r(8) + "/" + _r(24), "hook https://hooks.slack.com/services/{s}"),
    "huggingface": ("hf_" + _r(34), "hf {s}"),
    "npm": ("npm_" + _r(36), "npm {s}"),
    "sendgrid": ("SG." + _r(22) + "." + _r(43), "mail {s}"),
    "groq": ("gsk_" + _r(40), "groq {s}"),
    "xai": ("xai-" + _r(40), "grok {s}"),
    "perplexity": ("pplx-" + _r(40), "pplx {s}"),
    "replicate": ("r8_" + _r(37), "r8 {s}"),
    "jwt": ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjYW5hcnkifQ." + _r(43, _ALNUM + "-_"), "jwt {s}"),
    "bearer": (_r(40), "Authorization: Bearer {s}"),
    "basic": (
        __import__("base64").b64encode(("svc:" + _r(16)).encode()).decode(),
        "Authorization: Basic {s}",
    ),
    "pem_rsa": (
        f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----",
        "deploy key:\n{s}\n",
    ),
    "pem_openssh": (
        "-----BEGIN OPENSSH PRIVATE KEY-----\n"
        + "\n".join(_r(70, _ALNUM + "+/") for _ in range(3))
        + "\n-----END OPENSSH PRIVATE KEY-----",
        "{s}\n",
    ),
    "postgres_url": (_r(20), "postgres://app:{s}@db.internal:5432/prod"),
    "redis_url": (_r(20), "redis://:{s}@cache.internal:6379/0"),
    "query_token": (_r(32), "https://api.example.com/v1/items?access_token={s}&page=2"),
    "env_password": (_r(20), "DB_PASSWORD={s}"),
    "env_secret_key": (
        "django-insecure-" + _r(30, string.ascii_lowercase + string.digits),
        "SECRET_KEY='{s}'",
    ),
    "json_password": (_r(20), '{"user": "ada", "password": "{s}"}'),
    "client_secret": (_r(32), '"client_secret": "{s}"'),
    "netrc": (_r(20), "machine api.example.com login bob password {s}"),
    "azure_storage": (
        _r(86, _ALNUM + "+/") + "==",
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={s};EndpointSuffix=core.windows.net",
    ),
    "azure_servicebus": (
        _r(43, _ALNUM + "+/") + "=",
        "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root;SharedAccessKey={s}",
    ),
    "twilio_account_sid": ("AC" + _r(32, _HEX), "account {s}"),
    "twilio_api_key_sid": ("SK" + _r(32, _HEX), "key sid {s}"),
    "twilio_auth_token_env": (_r(32, _HEX), "TWILIO_AUTH_TOKEN={s}"),
    "twilio_auth_token_code": (_r(32, _HEX), 'client = Client(sid, auth_token="{s}")'),
    "cookie": (_r(32), "Cookie: session={s}"),
    "header_text": (_r(32), "curl -H 'x-api-key: {s}' https://api.example.com"),
    "code_password": (_r(16), 'password = "{s}"'),
    "yaml_api_key": (_r(31) + "7", "openai:\n  api_key: {s}\n"),
    "url_token": (_r(24) + "5", "git clone https://{s}@127.0.0.1/org/repo.git"),
    "curl_user": (_r(20), "curl -u deploy:{s} https://127.0.0.1/v1"),
    "authorization_token": (_r(40, _HEX), "curl -H 'Authorization: Token {s}' https://127.0.0.1/v1"),
    "shell_option": (_r(24), "huggingface-cli upload --token {s} org/model ."),
    "code_passphrase": (" ".join(_r(6) for _ in range(4)), "passphrase = '{s}'"),
    "user_rule": ("itk_" + _r(24), "internal {s}"),
    "json_path": (
        f"{_rng.randrange(100, 999)}-{_rng.randrange(10, 99)}-{_rng.randrange(1000, 9999)}",
        '"employee_ssn": "{s}"',
    ),
}

SECRETS = {name: secret for name, (secret, _) in KINDS.items()}
CONTEXTS = {name: ctx.replace("{s}", secret) for name, (secret, ctx) in KINDS.items()}

CONFIG = textwrap.dedent(
    """
    [redact]
    patterns = [{ kind = "internal-token", regex = "itk_[A-Za-z0-9]{24}" }]
    json_paths = ["$..employee_ssn"]
    """
)

AGENT = textwrap.dedent(
    """
    import dataclasses, json, os, random, subprocess, sys, time, uuid
    from pathlib import Path

    import openai

    import forkpoint

    CTX = json.loads(os.environ["CANARY_CONTEXTS"])  # name -> text carrying the secret (environment)
    SECRETS = json.loads(os.environ["CANARY_SECRETS"])
    ARGS = sys.argv[1:]  # the same texts, one per argument (argv)
    ALL = "\\n".join(CTX.values())


    def one_line(text):
        return text.replace("\\r", "\\\\r").replace("\\n", "\\\\n")


    @forkpoint.tool
    def probe(texts, password):
        return {"echo": texts, "all": ALL, "password": password}


    @dataclasses.dataclass
    class Vault:
        entries: list
        raw: bytes


    @forkpoint.tool
    def open_vault():
        return Vault(list(CTX.values()), ALL.encode())  # a typed result, bytes in it


    @forkpoint.tool
    def explode(detail):
        raise RuntimeError("cannot reach the vault: " + detail)


    Path("config.py").write_text(ALL + "\\n")  # tracked, modified
    Path("secrets.txt").write_text(ALL + "\\n")  # untracked
    forkpoint.checkpoint("files written")
    subprocess.run(["git", "status", "--short"], capture_output=True, check=True)
    forkpoint.checkpoint("after git status")
    picked = random.choice(list(CTX.values()))  # values (--deterministic)
    stamp = (time.time(), uuid.uuid4())
    open_vault()
    client = openai.OpenAI(
        base_url=os.environ["CANARY_BASE_URL"],
        api_key=SECRETS["openai_proj"],
        max_retries=0,
        default_headers={f"X-Canary-{i}": one_line(a) for i, a in enumerate(ARGS)},
        default_query={f"c{i}": a for i, a in enumerate(ARGS)},
    )
    messages = [{"role": "user", "content": ALL}]
    r = client.chat.completions.create(model="canary", messages=messages, extra_body={"metadata": CTX})
    seen = r.choices[0].message.content
    probe(list(CTX.values()), password=SECRETS["code_password"])
    try:
        explode(ALL)
    except RuntimeError:
        pass
    forkpoint.note("rotated: " + ALL)
    stream = client.chat.completions.create(model="canary", messages=messages, stream=True)
    streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    missing = [k for k, s in SECRETS.items() if s not in seen or s not in streamed]
    print("MISSING " + " ".join(missing) if missing else "SAW-ALL")
    """
)


def _chunk(delta: str, finish: str | None = None) -> bytes:
    c = {"id": "chatcmpl-c", "object": "chat.completion.chunk", "created": 1, "model": "canary"}
    c["choices"] = [{"index": 0, "delta": {"content": delta}, "finish_reason": finish}]
    return f"data: {json.dumps(c)}\n\n".encode()


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _chat(request: dict[str, Any]) -> Reply | Stream:
    """A provider that repeats every secret: in its answer, its headers, and a stream that splits
    each one over two events (a quarter in the first, so the middle is in the second)."""
    if not (request["body"] or {}).get("stream"):
        text = "\n".join(CONTEXTS.values())
        completion = chat_completion(
            "chatcmpl-c",
            "canary",
            text=text,
            usage={"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        )
        headers = [(f"X-Leak-{i}", _one_line(c)) for i, c in enumerate(CONTEXTS.values())]
        return json_reply(completion, headers=headers)
    events = [_chunk("Here: ")]
    for secret, ctx in KINDS.values():
        before, _, after = ctx.partition("{s}")
        cut = len(secret) // 4
        events += [_chunk(before + secret[:cut]), _chunk(secret[cut:] + after + "\n")]
    return Stream([*events, _chunk("", "stop"), b"data: [DONE]\n\n"])


#: a run of base64 (standard or URL-safe) long enough to hold a piece of a secret
_BASE64_RUN = re.compile(rb"[A-Za-z0-9+/_-]{16,}={0,2}")


def _unbase64(data: bytes, depth: int = 2) -> list[bytes]:
    """What the base64 runs in ``data`` decode to, and the runs in those (an AWS event stream
    kept as base64 carries its model's events as base64 again), ``depth`` levels down."""
    out = []
    for run in _BASE64_RUN.findall(data):
        try:
            decoded = base64.b64decode(run.replace(b"-", b"+").replace(b"_", b"/") + b"=" * (-len(run) % 4))
        except ValueError:  # not base64 after all
            continue
        out.append(decoded)
        if depth > 1:
            out += _unbase64(decoded, depth - 1)
    return out


def _decompressed(data: bytes, depth: int = 3) -> list[bytes]:
    """What ``data`` decompresses to: zlib (git objects), zstd (blobs), gzip; nothing if none; and
    what that decompresses to, ``depth`` levels down (a body under two codings: ``gzip, x-gzip``)."""
    out = []
    for decode in (
        zlib.decompress,
        gzip.decompress,
        lambda d: zstandard.ZstdDecompressor().decompress(d, max_output_size=1 << 28),
    ):
        try:
            opened = decode(data)
        except Exception:  # not in that encoding
            continue
        out += [opened, *(_decompressed(opened, depth - 1) if depth > 1 else [])]
    return out


def _decoded(data: bytes) -> list[bytes]:
    """``data`` and what it decodes to: decompressed, and the base64 in it (a body still under its
    content coding is kept as base64 of the compressed bytes), decompressed in turn."""
    out = [data, *_decompressed(data)]
    inner = [b for form in out for b in _unbase64(form)]
    return out + inner + [d for b in inner for d in _decompressed(b)]


def scan(roots: list[Path]) -> tuple[int, list[str]]:
    """(files searched, every secret found: name, form, file) under ``roots``."""
    files = [p for root in roots for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()]
    contents = [(p, form) for p in files for data in searchable(p, p.read_bytes()) for form in _decoded(data)]
    found = []
    for name, secret in SECRETS.items():
        for needle in needles(secret):
            found += [f"{name} as {needle[:30]!r} in {p}" for p, data in contents if needle in data]
    return len(files), found


def _forkpoint(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return forkpoint_cli(list(args), cwd, env, timeout=240)


@pytest.mark.slow
def test_every_kind_of_secret_in_every_place_reaches_no_file(tmp_path: Path, server: LocalServer) -> None:
    assert len(KINDS) >= 45 and len(set(SECRETS.values())) == len(SECRETS)
    assert not [a for a in SECRETS.values() for b in SECRETS.values() if a != b and a in b]
    server.route("*/chat/completions", _chat)
    (tmp_path / "forkpoint.toml").write_text(CONFIG)
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "config.py").write_text("SETTINGS = None\n")
    (repo / "agent.py").write_text(AGENT)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "init")
    store, out = tmp_path / "store", tmp_path / "out"
    out.mkdir()
    env = {
        **os.environ,
        "FORKPOINT_STORE": str(store),
        "CANARY_CONTEXTS": json.dumps(CONTEXTS),
        "CANARY_SECRETS": json.dumps(SECRETS),
        "CANARY_BASE_URL": server.openai_base_url,
    }

    server.route("/v1/traces", lambda _r: Reply(b"", ctype="application/x-protobuf"), method="POST")
    command = ["--", sys.executable, "agent.py", *CONTEXTS.values()]
    live = ["--deterministic", "--otlp", server.url, "--otlp-content"]  # spans sent while it runs
    rec = _forkpoint("record", *live, *command, cwd=repo, env=env)
    assert rec.returncode == 0 and "SAW-ALL" in rec.stdout, rec.stdout + rec.stderr  # the live run saw them
    session = next(p for p in store.iterdir() if (p / "session.jsonl").exists())
    v = _forkpoint("verify", str(session), cwd=tmp_path)
    assert v.returncode == 0 and "secret" not in v.stdout + v.stderr, v.stdout + v.stderr

    # Everything forkpoint writes from the session.
    for args in (
        ["export", str(session), "--file", str(out / "spans.jsonl"), "--content"],
        ["export", str(session), "--otlp", server.url, "--content"],
        ["show", str(session), "--html", str(out / "page.html")],
        ["make-test", str(session), "--trust", "--into", str(out / "incidents")],
    ):
        done = _forkpoint(*args, cwd=repo, env=env)
        assert done.returncode == 0, done.stderr
    sweep = [
        "sweep",
        str(session),
        "--arms",
        "1",
        "--into",
        str(
            tmp_path / "arms"
        ),  # (what the agent writes there live is its own; its sessions are in the store)
        "--html",
        str(out / "sweep.html"),
    ]
    outcome = ["--outcome", "cat secrets.txt"]  # it prints them all
    swept = _forkpoint(*sweep, *outcome, "--trust", *command, cwd=repo, env=env)
    (out / "sweep.txt").write_text(swept.stdout + swept.stderr)
    arms = [p for p in store.iterdir() if p != session and (p / "session.jsonl").exists()]
    assert swept.returncode == 0 and arms, swept.stdout + swept.stderr
    for n, args in enumerate(([], ["--json"])):
        for shown in (_forkpoint("show", str(session), *args, cwd=tmp_path, env=env),
                      _forkpoint("diff", str(session), str(arms[0]), *args, cwd=tmp_path, env=env)):  # fmt: skip
            (out / f"printed-{n}.txt").open("a").write(shown.stdout + shown.stderr)
    otlp = [r["raw"] for r in server.requests if r["path"] == "/v1/traces"]
    assert len(otlp) >= 2  # the live export and export --otlp
    for n, body in enumerate(otlp):
        (out / f"otlp-{n}.bin").write_bytes(body)
    listing = _forkpoint("checkpoints", str(session), cwd=tmp_path, env=env)
    (out / "checkpoints.txt").write_text(listing.stdout + listing.stderr)
    override = tmp_path / "override.json"  # the user's own file: not searched
    override.write_text(json.dumps({"echo": list(CONTEXTS.values())}))
    replayed = _forkpoint(
        "replay",
        str(session),
        "--override",
        f"tool:probe.result=@{override}",
        "--report",
        str(out / "report.json"),
        cwd=repo,
        env=env,
    )
    assert (out / "report.json").exists(), replayed.stdout + replayed.stderr
    seqs = [
        e["seq"]
        for e in map(orjson.loads, (session / "session.jsonl").read_bytes().splitlines()[1:])
        if e.get("type") == "checkpoint"
    ]
    assert len(seqs) >= 3
    for seq in seqs:
        done = _forkpoint(
            "restore", f"{session}@{seq}", "--into", str(out / f"restored-{seq}"), cwd=tmp_path, env=env
        )
        assert done.returncode == 0, done.stdout + done.stderr

    searched, found = scan([store, out])
    assert searched > 50
    assert found == []
    for f in out.iterdir():
        if f.is_file() and f.suffix in (".json", ".jsonl", ".html"):
            assert f.stat().st_mode & 0o077 == 0, f
