"""The scrubber: secret shapes, determinism, idempotence, stream chunks, headers and URLs."""

from __future__ import annotations

import base64
import hashlib
import random
import re
import string
from collections.abc import Callable
from typing import Any, cast
from unittest import mock
from urllib.parse import parse_qs, urlsplit

import orjson
import pytest

from forkpoint import redact
from forkpoint.redact import (
    _UNCOMPILED,
    HEADER_LIST_MAX_CHARS,
    Scrubber,
    find_secrets,
    rules_from_table,
    scrub_argv,
    scrub_bytes,
    scrub_chunks,
    scrub_headers,
    scrub_json,
    scrub_text,
    scrub_url,
)

_rng = random.Random(1234)
_ALNUM = string.ascii_letters + string.digits


def _rand(n: int, alphabet: str = _ALNUM) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


def expected_placeholder(kind: str, secret: str) -> str:
    """The documented placeholder shape, computed here independently of the code under test."""
    return f"[REDACTED:{kind}:{hashlib.sha256(secret.encode()).hexdigest()[:8]}]"


PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    + "\n".join(_rand(64, _ALNUM + "+/") for _ in range(6))
    + "\n-----END RSA PRIVATE KEY-----"
)
PEM_PKCS8 = (
    "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n"
    + _rand(60)
    + "\n-----END PRIVATE KEY-----"
)
PEM_OPENSSH = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA"
    + _rand(40)
    + "\n-----END OPENSSH PRIVATE KEY-----"
)

#: (kind, the secret, the text around it with {} where it goes). The secret is what gets replaced.
SECRETS: list[tuple[str, str, str]] = [
    ("openai-key", "sk-proj-" + _rand(48) + "-" + _rand(20) + "_" + _rand(10), "OPENAI_API_KEY={} # prod"),
    ("openai-key", "sk-" + _rand(48), 'key: "{}"'),
    ("openai-key", "sk-svcacct-" + _rand(40), "{}"),
    ("anthropic-key", "sk-ant-api03-" + _rand(80, _ALNUM + "-_") + "-" + _rand(6) + "AA", "x-api-key: {}"),
    ("aws-access-key", "AKIA" + _rand(16, string.ascii_uppercase + string.digits), "aws_access_key_id = {}"),
    ("aws-access-key", "ASIA" + _rand(16, string.ascii_uppercase + string.digits), "({})"),
    # STS session tokens (instance and container credentials' "Token": it was kept in the clear)
    ("aws-session-token", "IQoJb3JpZ2luX2Vj" + _rand(400, _ALNUM + "+/") + "=", '"Token" : "{}",'),
    ("aws-session-token", "FwoGZXIvYXdzE" + _rand(300, _ALNUM + "+/"), "session {}\n"),
    # Bedrock API keys, long-term and short-term (an `env` a shell tool ran: kept in the clear)
    (
        "bedrock-key",
        "ABSKQmVkcm9ja0FQSUtleS" + _rand(100, _ALNUM + "+/") + "=",
        "AWS_BEARER_TOKEN_BEDROCK={}\n",
    ),
    (
        "bedrock-key",
        "bedrock-api-key-YmVkcm9jay5hbWF6b25hd3Mu" + _rand(600, _ALNUM + "+/") + "&Version=1",
        "{}",
    ),
    # YAML (a lower-case or camelCase name, the value unquoted: only upper-case names were read so)
    ("secret-assignment", _rand(31) + "7", "openai:\n  api_key: {}\n  model: gpt-4o\n"),
    ("secret-assignment", "Q" + _rand(23) + "4", "auth:\n  clientSecret: {}  # rotated\n"),
    # (a bare token or secret, a private key, a webhook's secret, a bot's, an OIDC or OAuth token:
    # only api/client/access/auth/refresh/session/bearer/secret names were read so)
    ("secret-assignment", "Zx8kP2qLm9RtV4wN7sY3", "bot:\n  token: {}\n"),
    ("secret-assignment", "Zx8kP2qLm9RtV4wN7sY3", "token={}\n"),
    ("secret-assignment", "Qm7vT3xR9pL2kW8nJ5dF", "secret: {}\n"),
    ("secret-assignment", "Qm7vT3xR9pL2kW8nJ5dF" + _rand(20), "signing:\n  private_key: {}\n"),
    ("secret-assignment", "Hy4bN8cV2mX6zK1qW9eR", "webhook_secret: {}  # github\n"),
    ("secret-assignment", _rand(40) + "0", "telegram:\n  bot_token: {}\n"),
    ("secret-assignment", _rand(40) + "0", "id_token: {}\n"),
    ("secret-assignment", "Pq3sT7uV1wX5yZ9aB2cD", "oauth_token: {}\n"),
    ("stripe-key", "whsec_" + _rand(32), "STRIPE signing secret {}"),
    (
        "slack-token",
        "xapp-1-A0" + _rand(9, string.digits) + "-" + _rand(13, string.digits) + "-" + _rand(64),
        "{}",
    ),
    ("slack-token", "xoxe.xoxp-1-" + _rand(140), "refresh with {}\n"),
    # a credential option in a shell tool's command (only the recorded command's argv was read so)
    ("secret-option", _rand(20), "python deploy.py --token={} && echo ok"),
    ("secret-option", _rand(15) + "7", "hf upload --hf-api-key {} ./model"),
    # a shell tool's command: a token as a URL's user info, curl -u, mysql -p, Authorization: Token
    ("url-credential", _rand(23) + "3", "git clone https://{}@127.0.0.1/org/repo.git"),
    # (GitHub's TOKEN:x-oauth-basic: the password's shape replaced x-oauth-basic and kept the token)
    ("url-credential", _rand(39) + "5:x-oauth-basic", "git remote add o https://{}@127.0.0.1/org/r.git"),
    ("command-password", _rand(20), "curl -sS -u admin:{} https://127.0.0.1/api"),
    ("command-password", _rand(11) + "9", "mysql -h 127.0.0.1 -uroot -p{} app\n"),
    # (glued to curl's -u, quoted after mysql's -p: both were kept in the clear)
    ("command-password", _rand(20), "curl -sS -uadmin:{} https://127.0.0.1/api"),
    ("command-password", _rand(11) + "9 " + _rand(6), "mysql -uroot -p'{}' app\n"),
    # (sshpass -p, redis-cli -a/--pass, docker login -p: kept in the clear)
    ("command-password", "Zx8kP2qLm9RtV4wN7sY3", "sshpass -p {} ssh deploy@127.0.0.1 uptime\n"),
    ("command-password", "Zx8kP2qLm9RtV4wN7sY3", "sshpass -v -p'{}' ssh -p 2222 127.0.0.1"),
    ("command-password", "Zx8kP2qLm9RtV4wN7sY3", "redis-cli -h 127.0.0.1 -p 6379 -a {} ping"),
    ("command-password", "Zx8kP2qLm9RtV4wN7sY3", "redis-cli --pass {} --no-auth-warning ping"),
    ("command-password", "Zx8kP2qLm9RtV4wN7sY3", "docker login -u ci -p {} 127.0.0.1:5000 && docker push x"),
    (
        "header-credential",
        _rand(40, "0123456789abcdef"),
        "curl -H 'Authorization: Token {}' https://127.0.0.1/",
    ),
    # docker's config.json: a registry's auth, base64 of user:password (kept in the clear)
    (
        "registry-auth",
        base64.b64encode(b"ci:Zx8kP2qLm9RtV4wN7sY3").decode(),
        '{{\n  "auths": {{\n    "127.0.0.1:5000": {{\n      "auth": "{}"\n    }}\n  }}\n}}',
    ),
    ("bearer", _rand(40, _ALNUM + "-._~+/") + "==", "Authorization: Bearer {}"),
    ("bearer", _rand(24), "curl -H 'authorization: bearer {}' https://x"),
    ("private-key", PEM, "key file:\n{}\n-- end"),
    ("private-key", PEM_PKCS8, "{}"),
    ("private-key", PEM_OPENSSH, "{}\n"),
    (
        "jwt",
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ."
        + _rand(43, _ALNUM + "-_"),
        "token={}&x=1",
    ),
    ("github-token", "ghp_" + _rand(36), "GITHUB_TOKEN={}"),
    ("github-token", "gho_" + _rand(36), "oauth {} ok"),
    ("github-token", "github_pat_11" + _rand(20) + "_" + _rand(59), "fine-grained token {} here"),
    ("google-api-key", "AIza" + _rand(35, _ALNUM + "-_"), "GOOGLE_API_KEY={}"),
    # Formats that once passed (issue 14): ~/.aws/credentials in lower case, .netrc, Azure connection
    # strings, Twilio SIDs and auth tokens, credentials assigned in code.
    ("aws-secret", _rand(40, _ALNUM + "/+"), "[default]\naws_secret_access_key = {}\nregion = x"),
    ("aws-secret", _rand(200, _ALNUM + "/+") + "=", "aws_session_token={}"),
    ("netrc-password", _rand(20, _ALNUM + "-_!"), "machine api.example.com login bob password {}\n"),
    ("netrc-password", _rand(16), "machine example.org\n  login me@example.org\n  password {}\n"),
    (
        "azure-key",
        _rand(86, _ALNUM + "+/") + "==",
        "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={};EndpointSuffix=core.windows.net",
    ),
    (
        "azure-key",
        _rand(43, _ALNUM + "+/") + "=",
        "Endpoint=sb://n.servicebus.windows.net/;SharedAccessKey={}",
    ),
    ("twilio-sid", "AC" + _rand(32, "0123456789abcdef"), "account {} sends"),
    ("twilio-sid", "SK" + _rand(32, "0123456789abcdef"), "TWILIO_API_KEY_SID={}"),
    ("secret-assignment", _rand(32, "0123456789abcdef"), 'client = Client(sid, auth_token="{}")'),
    ("secret-assignment", _rand(14), "    password = '{}'"),
    # (unquoted, in lower case: an exception's message; it was kept in the clear)
    ("secret-assignment", _rand(12), "RuntimeError: login failed for bob with password={} (retry later)"),
    # (a Telegram bot's token in the path of a Bot API URL: a local Bot API server here)
    ("telegram-bot-token", "7012345678:AA" + _rand(33, _ALNUM + "-_"), "http://127.0.0.1:8081/bot{}/getMe"),
]

_IDS = [f"{kind}-{i}" for i, (kind, _, _) in enumerate(SECRETS)]


@pytest.mark.parametrize(("kind", "secret", "context"), SECRETS, ids=_IDS)
def test_each_secret_shape_is_replaced(kind: str, secret: str, context: str) -> None:
    text = context.format(secret)
    out = scrub_text(text)
    assert secret not in out
    assert out == context.format(expected_placeholder(kind, secret))
    # The same through the bytes path and inside JSON (values and keys).
    assert scrub_bytes(text.encode()) == out.encode()
    assert scrub_json({"a": [text, {"k": text}], text: 1}) == {"a": [out, {"k": out}], out: 1}


@pytest.mark.parametrize("escape", ["\n", "\t"])
@pytest.mark.parametrize(("kind", "secret", "context"), SECRETS, ids=_IDS)
def test_each_secret_shape_starting_a_line_after_an_escaped_break_is_replaced(
    kind: str, secret: str, context: str, escape: str
) -> None:
    """JSON kept as text (a tool's ``json.dumps`` result in a conversation) or a ``repr`` (a
    KeyError's message) writes a line break as ``\\n``: its ``n``, glued to a key that starts the
    next line, hid the key from its shape (``keys:\\nsk-proj-…`` was kept)."""
    text = "keys:" + escape + context.format(secret)
    for written in (orjson.dumps(text).decode(), repr(text)):
        out = scrub_text(written)
        assert orjson.dumps(secret).decode()[1:-1] not in out
        assert expected_placeholder(kind, secret) in out


@pytest.mark.parametrize("escape", ["\\n", "\\r\\n"])
def test_a_secret_ending_its_line_before_an_escaped_break_leaves_the_escape_whole(escape: str) -> None:
    """A value that runs to the end of its line (a cookie) ends before an escaped break: the
    escape's backslash was read as the line's last character, so the secret's placeholder took it
    and left its letter (``Cookie: [REDACTED…]n``), and scrubbing that again changed it."""
    cookie = "Cookie: a=Zx8kP2qLm9RtV4wN7sY3"
    text = f"{cookie}{escape}{escape}{cookie}{escape}next"
    out = scrub_text(text)
    assert "Zx8kP2qLm9RtV4wN7sY3" not in out
    assert out.count(escape) == 3 and out.endswith(f"{escape}next")
    assert scrub_text(out) == out


@pytest.mark.parametrize(("kind", "secret", "context"), SECRETS, ids=_IDS)
def test_scrub_is_deterministic_idempotent_and_placeholders_do_not_match(
    kind: str, secret: str, context: str
) -> None:
    once = scrub_text(context.format(secret))
    again = scrub_text(f"other text, then {context.format(secret)}!")
    assert again == f"other text, then {once}!"
    assert again.count(expected_placeholder(kind, secret)) == 1
    assert scrub_text(once) == once
    assert find_secrets(expected_placeholder(kind, secret)) == []
    assert find_secrets(once) == []


@pytest.mark.parametrize(
    "context",
    [
        "GET /v1/places?q=paris&key={}.",
        "see http://localhost:8080/api?key={}!)",
        "x?access_token={}.;",
        "x?token={},",
        "api-key: {}.",
    ],
)
def test_a_shaped_secret_found_by_its_context_before_punctuation_scrubs_once(context: str) -> None:
    """A query parameter's or a header's value of a known shape followed by punctuation ("…&key=AIza….")
    became that shape's placeholder with the punctuation after it; scrubbed again (`forkpoint scrub`,
    rules unchanged) the context rule took placeholder and punctuation for a new secret: the text lost
    the punctuation and the placeholder changed, so a session that replayed diverged after scrub."""
    for secret in ("AIzaSyA1234567890abcdefghijklmnopqrstuv", "sk-proj-" + "a" * 40):
        once = scrub_text(context.format(secret))
        assert secret not in once
        assert scrub_text(once) == once
        assert find_secrets(once) == []


def test_different_secrets_get_different_placeholders() -> None:
    a, b = "sk-proj-" + "a" * 40, "sk-proj-" + "b" * 40
    assert scrub_text(a) != scrub_text(b)
    assert scrub_text(f"{a} {a} {b}") == f"{scrub_text(a)} {scrub_text(a)} {scrub_text(b)}"


def test_all_secrets_in_one_document() -> None:
    doc = "\n".join(context.format(secret) for _, secret, context in SECRETS)
    out = scrub_text(doc)
    for kind, secret, _ in SECRETS:
        assert secret not in out
        assert expected_placeholder(kind, secret) in out
    assert scrub_text(out) == out


def test_ordinary_text_is_untouched() -> None:
    text = (
        "The sky is blue. skeleton-key-is-not-a-secret, AKIA is a prefix, Bearer of news, "
        "ghp_short, eyJ alone, sk-short, -----BEGIN CERTIFICATE----- is public. Ask the task at "
        "the desk; ACCESS denied; eos_token = '</s>'; the password field; machine learning; "
        "SKIP AC adapter; max_tokens = 5; tokenizer = 'bert-base'; log in with your password. "
        'print("Password: " + pw + "!"); prompt = "Enter password: " + name + " then Enter"; '
        "api_key = args.key_v2_and_more; apiKey: process.env.OPENAI_KEY2; access_token: the_token_returned; "
        "docker run -u 1000:1000 img; git clone ssh://git@127.0.0.1/x; Authorization: required; mysql -p app; "
        "ssh://687fb701029421ae5549d998@127.0.0.1; def f(session_key: Ed25519PrivateKey | Ed448Key, "
        "api_key: KeyType2Name, secret_key: Ed25519PrivateKey); connect(aws_session_token=s3_session_token, "
        "auth_token=S3_AUTH_TOKEN_V2); access_key, secret_key = s3_example_simple; use --password to log in; "
        "x-api-key=abc12345678; --redis-password=[MASKED] --db-password={pw} --token $HF_TOKEN; "
        "token = get_token(); secret: ${SECRET}; token: <your token>; id_token: Optional[str]; "
        "secret: bool = False\n  private_key: PrivateKey\n  private_key: Ed25519PrivateKey\n  token: str\n"
        "  next_page_token: CiAKGjBpNDd2Nmp2Zml2cXRwYjBpOXA2\n  nextPageToken: CiAKGjBpNDd2Nmp2Zml2cXRwYjBpOXA2\n"
    )
    assert scrub_text(text) == text
    data = {"messages": [{"role": "user", "content": text}], "n": 1, "ok": True, "x": None}
    assert scrub_json(data) == data


@pytest.mark.parametrize(
    "command",
    [
        'curl -u "$API_USER:$API_PASSWORD" https://127.0.0.1/v1',
        "curl --user admin:${ADMIN_PASSWORD} https://127.0.0.1/v1",
        "curl -u me:`cat ~/.pw` https://127.0.0.1/v1",
        "curl -u user:<password> https://127.0.0.1/v1",
        "mysql -u root -p$MYSQL_ROOT_PASSWORD app -e 'select 1'",
        "mysqldump -uroot -p${DB_PASSWORD} app > dump.sql",
        "mysql -u <user> -p<password> app",
        "sshpass -p $SSHPASS ssh 127.0.0.1",
        "sshpass -p ${SSH_PW} ssh 127.0.0.1",
        "sshpass -p {{pw}} ssh 127.0.0.1",
        "sshpass -f ~/.pw ssh -p 2222 127.0.0.1",
        "redis-cli -h 127.0.0.1 -a $REDIS_PASSWORD ping",
        "redis-cli --pass {{ redis_pw }} ping",
        "docker login -u ci -p $CI_REGISTRY_PASSWORD 127.0.0.1:5000",
        "docker login -u ci --password-stdin 127.0.0.1:5000",
        "docker run -p 8080:80 img",
    ],
)
def test_a_command_password_the_shell_expands_or_a_template_holds_is_kept(command: str) -> None:
    """curl -u's and mysql -p's password is replaced where the command has its text; one the
    shell reads from a variable or a command ($PW, ${PW}, `cat pw`), or a template's (<password>),
    is no secret's text, and a replay runs the recorded command: replaced, mysql got the
    placeholder for a password and a script a checkpoint restored had it in place of $PW."""
    assert scrub_text(command) == command
    assert scrub_argv(["sh", "-c", command]) == ["sh", "-c", command]


def test_a_key_as_curls_user_is_scrubbed_once_for_all() -> None:
    """Stripe's documented call passes the key as curl's user with no password (-u sk_test_…:).
    Scrubbed, it became -u [REDACTED:stripe-key:…]:, whose bracket curl -u's shape read as a
    user before a colon: a second scrub replaced the placeholder's kind and hash in turn
    ([REDACTED:[REDACTED:command-password:…]), so a scrubbed live call differed from its scrubbed
    recording. A later -p after one mysql -p that was a placeholder was likewise found only then."""
    key = "sk_test_" + _rand(24)
    for text in (
        f"curl https://127.0.0.1/v1/charges -u {key}:",
        f"curl -u {key}: https://127.0.0.1/v1/charges",
        f"mysql -p{_rand(11)}9 -e 'select 1' -p1",
    ):
        once = scrub_text(text)
        assert scrub_text(once) == once


# ----------------------------------------------------------------------------- streams

STREAM_SECRETS = [s for s in SECRETS if s[0] != "private-key"] + [SECRETS[9]]


@pytest.mark.parametrize(("kind", "secret", "context"), STREAM_SECRETS, ids=[s[0] for s in STREAM_SECRETS])
def test_secret_split_across_two_chunks_at_every_point(kind: str, secret: str, context: str) -> None:
    text = ('data: {"delta": "before ' + context.format(secret) + ' after"}\n\n').encode()
    full = scrub_bytes(text)
    assert secret.encode() not in full
    start = text.index(secret.encode())
    for cut in range(max(1, start - 3), start + len(secret) + 3):
        chunks = [text[:cut], text[cut:]]
        out = scrub_chunks(chunks)
        assert len(out) == 2
        assert b"".join(out) == full, cut
        assert secret.encode() not in b"".join(out)
        for piece in out:  # no recognisable fragment of the secret survives in either chunk
            assert secret.encode()[:12] not in piece
            assert secret.encode()[-12:] not in piece


@pytest.mark.parametrize(
    ("kind", "secret", "context"), STREAM_SECRETS[:6], ids=[s[0] for s in STREAM_SECRETS[:6]]
)
def test_secret_spread_over_three_chunks(kind: str, secret: str, context: str) -> None:
    text = f"event: x\ndata: {context.format(secret)}\n\ndata: tail\n\n".encode()
    full = scrub_bytes(text)
    start = text.index(secret.encode())
    end = start + len(secret)
    for i in range(start, end, 3):
        for j in range(i + 1, end + 2, 5):
            chunks = [text[:i], text[i:j], text[j:]]
            out = scrub_chunks(chunks)
            assert len(out) == 3
            assert b"".join(out) == full, (i, j)
            # bytes outside the secret keep their chunk
            assert out[0].startswith(text[: min(i, start)])
            assert out[2].endswith(text[max(j, end) :])


def test_chunks_without_secrets_are_returned_unchanged() -> None:
    chunks = [b"data: 1\n\n", b"data: 2", b"\n\n", b"\xff\xfe binary"]
    assert scrub_chunks(chunks) == chunks


# ----------------------------------------------------------------------------- headers and URLs


KEY = "sk-proj-" + _rand(40)
#: Credential headers in any case, and headers that only look like one.
HEADERS = [
    ("Authorization", f"Bearer {KEY}"),
    ("AUTHORIZATION", "Basic dXNlcjpwYXNz"),
    ("x-api-key", KEY),
    ("X-Api-Key", KEY),
    ("api-key", "azure-key-value"),
    ("Api-Key", "azure-key-value"),
    ("Cookie", "session=abc123"),
    ("SET-COOKIE", "session=abc123; HttpOnly"),
    ("Ocp-Apim-Subscription-Key", "azure-apim-key"),  # (Azure API Management's key header)
    ("X-Auth", "x-auth-secret-value"),  # (kept in the clear before, as was Authentication)
    ("Authentication", "authentication-secret"),
    ("X-Author", "bob"),
    ("WWW-Authenticate", 'Basic realm="api"'),
    ("X-Auth-Required", "true"),  # (no credential: "auth" is one only as the name's last part)
    ("content-type", "application/json"),
    ("X-Custom", f"has {KEY} inside"),
    ("anthropic-version", "2023-06-01"),
]
#: What scrubbing keeps of :data:`HEADERS` in a response and in a request alike.
NOT_CREDENTIALS = [
    ["X-Author", "bob"],
    ["WWW-Authenticate", 'Basic realm="api"'],
    ["X-Auth-Required", "true"],
    ["content-type", "application/json"],
    ["X-Custom", f"has {expected_placeholder('openai-key', KEY)} inside"],
    ["anthropic-version", "2023-06-01"],
]


def test_a_responses_credential_headers_are_dropped_in_any_case() -> None:
    out = scrub_headers(HEADERS)
    # (a Set-Cookie is kept with a placeholder value, the same for the same cookie: a replayed
    # client keeps the cookies it was given, and no secret is stored)
    assert out == [["SET-COOKIE", "session=REDACTED-6ca13d52; HttpOnly"], *NOT_CREDENTIALS]
    assert scrub_headers(out) == out


def test_a_requests_credential_headers_are_kept_as_placeholders_of_their_values() -> None:
    """Dropped, they left a replay nothing to tell apart recorded calls alike but for their keys
    (a program checking two keys, in another order on replay, was served each other's answers).
    Each is its whole value's placeholder; a cookie is still dropped."""
    out = scrub_headers(HEADERS, request=True)
    assert out == [
        ["Authorization", expected_placeholder("header-credential", f"Bearer {KEY}")],
        ["AUTHORIZATION", expected_placeholder("header-credential", "Basic dXNlcjpwYXNz")],
        ["x-api-key", expected_placeholder("header-credential", KEY)],
        ["X-Api-Key", expected_placeholder("header-credential", KEY)],
        ["api-key", expected_placeholder("header-credential", "azure-key-value")],
        ["Api-Key", expected_placeholder("header-credential", "azure-key-value")],
        ["SET-COOKIE", "session=REDACTED-6ca13d52; HttpOnly"],
        ["Ocp-Apim-Subscription-Key", expected_placeholder("header-credential", "azure-apim-key")],
        ["X-Auth", expected_placeholder("header-credential", "x-auth-secret-value")],
        ["Authentication", expected_placeholder("header-credential", "authentication-secret")],
        *NOT_CREDENTIALS,
    ]
    assert scrub_headers(out, request=True) == out  # (idempotent: forkpoint scrub run again)


def test_headers_scrubbed_again_are_what_they_were_and_one_byte_changes_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An SDK sends the same headers at every call, and the scrubber remembers the lists it scrubbed
    lately: the same pairs come back as they were scrubbed (a list of the caller's own, which it may
    change), and pairs that differ in one byte of one value (another key; another secret in a header
    that is no credential; a request's headers as a response's), or in their order, or given as
    lists or as bytes, are scrubbed for what they are."""
    s = Scrubber()
    sent = [("Authorization", f"Bearer {KEY}"), ("x-note", f"key {KEY}"), ("anthropic-version", "2023-06-01")]
    first = s.headers(sent, request=True)
    assert first == Scrubber().headers(sent, request=True)
    first[0][1] = "changed by the caller"
    looked_at: list[str] = []
    monkeypatch.setattr(s, "credential_header", lambda name: looked_at.append(name) or False)
    again = s.headers(list(sent), request=True)
    assert again == Scrubber().headers(sent, request=True) and again is not first
    assert not looked_at  # (not scrubbed again, header by header)
    monkeypatch.undo()
    other = KEY[:-1] + ("A" if KEY[-1] != "A" else "B")
    for changed in (
        [("Authorization", f"Bearer {other}"), *sent[1:]],
        [sent[0], ("x-note", f"key {other}"), sent[2]],
        [*sent[:2], ("anthropic-version", "2023-06-02")],
        [sent[1], sent[0], sent[2]],
    ):
        assert s.headers(changed, request=True) == Scrubber().headers(changed, request=True), changed
        assert s.headers(changed, request=True) != again, changed
    assert s.headers([[k, v] for k, v in sent], request=True) == again
    as_response = s.headers(sent)
    assert as_response == Scrubber().headers(sent) and as_response != again  # (the credential dropped)
    raw = [(k.encode(), v.encode()) for k, v in sent]
    assert s.headers(raw, request=True) == Scrubber().headers(raw, request=True)


def test_header_pairs_changed_after_they_were_scrubbed_are_scrubbed_for_what_they_hold_now() -> None:
    """A pair is anything of two items: one that a client keeps and changes in place (indexable,
    hashable as every object is, by identity) holds other text at its next call, and is scrubbed
    for that, not given what it was scrubbed to before."""

    class Pair:
        def __init__(self, name: str, value: str) -> None:
            self.items = [name, value]

        def __getitem__(self, i: int) -> str:
            return self.items[i]

    s = Scrubber()
    pair = Pair("x-note", "note 1")
    assert s.headers([pair]) == [["x-note", "note 1"]]
    pair.items[1] = f"key {KEY}"
    assert s.headers([pair]) == Scrubber().headers([("x-note", f"key {KEY}")]) != [["x-note", "note 1"]]


def test_a_header_list_of_much_text_is_not_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The lists remembered are an SDK's few short headers: one that holds a big value (an agent's
    context header, another at each call) is scrubbed each time rather than held, 256 of them
    taking hundreds of megabytes beyond the scrubber's budget of text."""
    s = Scrubber()
    small = [("content-type", "application/json"), ("x-note", "a b " * 100)]
    big = [("content-type", "application/json"), ("x-context", "a b " * (HEADER_LIST_MAX_CHARS // 4))]
    for sent in (small, big):
        assert s.headers(sent, request=True) == Scrubber().headers(sent, request=True)
    looked_at: list[str] = []
    monkeypatch.setattr(s, "credential_header", lambda name: looked_at.append(name) or False)
    s.headers(small, request=True)
    assert not looked_at  # (remembered)
    s.headers(big, request=True)
    assert looked_at == ["content-type", "x-context"]  # (scrubbed again)


def test_a_sigv4_authorization_is_kept_as_its_access_key_id() -> None:
    """The signature and date change at every request; the key that signed does not, and tells
    two credentials apart. The other signing headers are dropped, as is the session token."""
    key_id = "AKIA" + "Q" * 16
    auth = (
        f"AWS4-HMAC-SHA256 Credential={key_id}/20260101/us-east-1/bedrock/aws4_request, "
        "SignedHeaders=host;x-amz-date, Signature=" + "ab" * 32
    )
    out = scrub_headers(
        [
            ("Authorization", auth),
            ("X-Amz-Date", "20260101T000000Z"),
            ("X-Amz-Security-Token", "session-token-value"),
            ("x-amz-content-sha256", "00" * 32),
        ],
        request=True,
    )
    assert out == [["Authorization", expected_placeholder("aws-access-key", key_id)]]
    assert scrub_headers(out, request=True) == out


def test_a_credential_query_parameter_spelled_with_a_hyphen_and_a_bearer_field_are_scrubbed() -> None:
    """``?access-token=`` (the set had ``access_token``) and a JSON ``"bearer"`` field were stored in
    the clear."""
    out = scrub_url("http://127.0.0.1:8080/v1/x?access-token=tok-123456&refresh-token=r-987&q=1")
    q = parse_qs(urlsplit(out).query)
    assert q["access-token"] == [expected_placeholder("query-credential", "tok-123456")]
    assert q["refresh-token"] == [expected_placeholder("query-credential", "r-987")] and q["q"] == ["1"]
    assert scrub_json({"bearer": "abcdefgh1234", "token_type": "bearer"}) == {
        "bearer": expected_placeholder("secret-field", "abcdefgh1234"),
        "token_type": "bearer",
    }


def test_url_query_credentials_scrubbed() -> None:
    gkey = "AIza" + _rand(35)
    url = f"https://generativelanguage.googleapis.com/v1beta/models/g:generate?key={gkey}&alt=sse&api_key=abc123&token=t0k&x=1"
    out = scrub_url(url)
    assert gkey not in out and "abc123" not in out and "t0k" not in out
    q = parse_qs(urlsplit(out).query)
    assert q["alt"] == ["sse"] and q["x"] == ["1"]
    assert q["key"] == [expected_placeholder("query-credential", gkey)]
    assert q["api_key"] == [expected_placeholder("query-credential", "abc123")]
    assert urlsplit(out).path == "/v1beta/models/g:generate"
    assert scrub_url(out) == out  # idempotent, like every scrubber


def test_url_userinfo_and_secret_in_path_scrubbed() -> None:
    key = "sk-proj-" + _rand(40)
    out = scrub_url(f"https://user:hunter2@example.com:8443/v1/{key}/x?q=1")
    assert "hunter2" not in out and key not in out
    parts = urlsplit(out)
    assert parts.hostname == "example.com" and parts.port == 8443
    assert parts.query == "q=1"
    assert scrub_url(out) == out


def test_url_query_values_are_scrubbed_decoded() -> None:
    """A value percent- or plus-encoded hides its context from a scan of the raw URL."""
    pw = _rand(18)
    out = scrub_url(f"https://x.test/a?note=machine+h+login+u+password+{pw}&q=1")
    assert pw not in out
    assert parse_qs(urlsplit(out).query) == {
        "note": [f"machine h login u password {expected_placeholder('netrc-password', pw)}"],
        "q": ["1"],
    }
    assert scrub_url(out) == out


def test_url_without_credentials_is_unchanged() -> None:
    url = "https://api.openai.com/v1/chat/completions?api-version=2024-10-21&stream=true"
    assert scrub_url(url) == url


def test_a_resent_history_is_scrubbed_once_and_exactly() -> None:
    # An agent resends its history at every call: list items seen before are not walked again
    # (the same scrubbed object comes back, and an item the scrubber returned is taken as it is),
    # while every secret is still replaced and equal-but-different JSON (1 / 1.0 / true) is kept.
    from forkpoint.redact import Scrubber

    s = Scrubber()
    key = "sk-proj-" + _rand(40)
    history = [{"role": "user", "content": f"use {key}"}, {"role": "assistant", "content": "ok", "n": 1}]
    first = s.json({"model": "m", "messages": history})
    assert key not in str(first) and first["messages"][0]["content"] == "use " + expected_placeholder(
        "openai-key", key
    )
    resent = [{**m} for m in history] + [{"role": "user", "content": f"again {key}"}]
    second = s.json({"model": "m", "messages": resent})
    assert second["messages"][0] is first["messages"][0]  # seen before: not scrubbed again
    assert second["messages"][1] is first["messages"][1]
    assert key not in str(second)
    assert s.json(second) == second and s.json(second)["messages"][2] is second["messages"][2]
    other = s.json({"messages": [{"role": "assistant", "content": "ok", "n": True}]})
    assert other["messages"][0]["n"] is True
    assert s.json([{"password": "hunter22"}]) == [
        {"password": expected_placeholder("secret-field", "hunter22")}
    ]


def test_nan_and_none_are_not_taken_for_one_another() -> None:
    # orjson writes NaN (and infinities) as null, like None: what the scrubber remembers by JSON
    # must not hand one back for the other.
    from forkpoint.redact import Scrubber

    s = Scrubber()
    nan = s.json({"data": [{"x": float("nan")}, [float("inf")]]})
    assert nan["data"][0]["x"] != nan["data"][0]["x"] and nan["data"][1] == [float("inf")]
    none = s.json({"data": [{"x": None}, [None]]})
    assert none == {"data": [{"x": None}, [None]]}


def test_a_parsed_list_shares_items_with_parsed_lists_only_where_none_means_none() -> None:
    # A list just parsed by orjson (``parsed``) holds no NaN: its nulls are None, and it takes the
    # items of an earlier parsed list by their JSON alone. A list given by the caller may hold NaN
    # where the parsed one has None, and is compared item by item, in either order.
    from forkpoint.redact import Scrubber

    s = Scrubber()
    parsed = s.json({"m": [{"x": None, "k": 1}, {"y": 2}]}, parsed=True)
    grown = s.json(orjson.loads(b'{"m": [{"x": null, "k": 1}, {"y": 2}, {"z": 3}]}'), parsed=True)
    assert grown["m"][0] is parsed["m"][0] and grown["m"][1] is parsed["m"][1]
    given = s.json({"m": [{"x": float("nan"), "k": 1}, {"y": 2}, {"z": 3}, {"w": 4}]})
    assert given["m"][0]["x"] != given["m"][0]["x"]  # NaN, not the parsed None
    again = s.json({"m": [{"x": None, "k": 1}, {"y": 2}, {"z": 3}, {"w": 4}, {"v": 5}]}, parsed=True)
    assert again["m"][0]["x"] is None  # None, not the given NaN
    assert again["m"] == [{"x": None, "k": 1}, {"y": 2}, {"z": 3}, {"w": 4}, {"v": 5}]


class Owner:
    """Stands for a recording: what ``capture.resent`` keeps bodies by."""


def _count_written(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The lengths of the JSON the scrubber writes from now on, one a call, as they are written."""
    from forkpoint import redact

    written: list[int] = []
    dumps = orjson.dumps
    monkeypatch.setattr(redact.orjson, "dumps", lambda *a, **k: written.append(len(r := dumps(*a, **k))) or r)
    return written


def test_a_resent_parsed_conversation_shares_its_scrubbed_items_without_writing_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A conversation parsed by what it adds (capture.resent) comes back as the last body's own items
    # plus new ones: the scrubber takes those items' scrubbed forms over by identity and writes only
    # the new items' JSON, and what it keeps of the list still serves a list equal only by its JSON.
    from forkpoint.capture import resent

    secret = "sk-proj-" + _rand(48)
    owner, s, fresh = Owner(), Scrubber(), Scrubber(cache=False)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You edit files. " * 40}]
    tools = [{"type": "function", "function": {"name": "edit", "parameters": {"type": "object"}}}]
    written = _count_written(monkeypatch)
    dumps = orjson.dumps
    outs = []
    for turn in range(30):
        messages.append(
            {"role": "user", "content": f"turn {turn}: key {secret if turn % 7 == 3 else 'none'}"}
        )
        body = dumps({"model": "m", "messages": messages, "tools": tools})
        value = resent.loads(body, "POST /v1", owner)
        written.clear()
        outs.append(s.json(value, parsed=True))
        scrubbing_wrote = sum(written)
        assert outs[-1] == fresh.json(orjson.loads(body)) and secret not in dumps(outs[-1]).decode()
    # The last call wrote its one new message (the item cache's key), not the 30 before it.
    assert scrubbing_wrote == len(dumps(messages[-1])) < len(body) // 10
    assert all(a is b for a, b in zip(outs[-2]["messages"], outs[-1]["messages"], strict=False))
    # Nor does another list (a response's) write the conversation's JSON to compare with it.
    written.clear()
    s.json({"choices": [{"index": 0, "message": {"role": "assistant"}}]}, parsed=True)
    assert sum(written) < len(dumps(messages[0]))  # (not even the first item, the system prompt)
    # Equal by JSON alone (fresh objects, not parsed): shares the items all the same.
    copy = orjson.loads(dumps({"model": "m", "messages": [*messages, {"role": "user", "content": "x"}]}))
    again = s.json(copy)
    assert again == fresh.json(copy) and again["messages"][-2] is outs[-1]["messages"][-1]


def test_a_resent_conversation_whose_last_items_changed_shares_the_items_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A cache marker that moves on (Anthropic's prompt caching): each body changes one of the last
    # messages, then appends. The items before it are still the last body's own objects, and their
    # scrubbed forms are taken over by identity; nothing of them is written.
    from forkpoint.capture import resent

    owner, s, fresh = Owner(), Scrubber(), Scrubber(cache=False)
    secret = "sk-proj-" + _rand(48)
    messages: list[dict[str, Any]] = [{"role": "system", "content": f"You edit files. {secret} " * 10}]
    written = _count_written(monkeypatch)
    dumps = orjson.dumps
    outs = []
    for turn in range(20):
        messages.append({"role": "tool", "content": f"result {turn} " * 10})
        marked = [dict(m) for m in messages]
        marked[-1]["cache_control"] = {"type": "ephemeral"}
        body = dumps({"model": "m", "messages": marked})
        value = resent.loads(body, "POST /v1", owner)
        written.clear()
        outs.append(s.json(value, parsed=True))
        scrubbing_wrote = sum(written)
        assert outs[-1] == fresh.json(orjson.loads(body)) and secret not in dumps(outs[-1]).decode()
    assert outs[-1]["messages"][:-2] == outs[-2]["messages"][:-1]
    assert all(a is b for a, b in zip(outs[-2]["messages"][:-1], outs[-1]["messages"][:-2], strict=True))
    assert scrubbing_wrote < len(dumps(marked[-2:])) + 100 < len(body) // 5


@pytest.mark.parametrize("parse", ["resent", "whole"])
def test_a_conversation_whose_first_message_is_stamped_at_every_call_shares_the_items_after_it(
    monkeypatch: pytest.MonkeyPatch, parse: str
) -> None:
    # A system prompt with the time in it changes at every call, so the list's first item is not
    # the last list's. Parsed by capture.resent, the items after it are the last body's own objects
    # and their scrubbed forms are taken over by identity, nothing of them written. Parsed whole,
    # they are new objects, taken over by one comparison of the list's JSON with the last list's.
    # Neither scrubs them one by one (each item's JSON written for the cache), and every secret is
    # still replaced.
    from forkpoint.capture import resent

    owner, s, fresh = Owner(), Scrubber(), Scrubber(cache=False)
    secret = "sk-proj-" + _rand(48)
    history: list[dict[str, Any]] = [{"role": "user", "content": f"Fix it. {secret}"}]
    written = _count_written(monkeypatch)
    dumps = orjson.dumps
    outs = []
    for turn in range(25):
        system = {"role": "system", "content": f"It is 10:{turn:02d}. {secret if turn % 5 == 2 else ''}"}
        body = dumps({"model": "m", "messages": [system, *history]})
        value = resent.loads(body, "POST /v1", owner) if parse == "resent" else orjson.loads(body)
        written.clear()
        outs.append(s.json(value, parsed=True))
        scrubbing_wrote = sum(written)
        assert outs[-1] == fresh.json(orjson.loads(body)) and secret not in dumps(outs[-1]).decode()
        history.append({"role": "tool", "content": f"result {turn} {secret if turn % 3 == 0 else ''} " * 10})
    # The last call wrote the new first item and the new message (each twice: the item cache's key,
    # and the first item's or where the message ends), and parsed whole, the list once to compare
    # it; not every item of the list again.
    items = outs[-1]["messages"]
    new = 2 * (len(dumps(system)) + len(dumps(history[-2])))
    assert scrubbing_wrote <= new + (len(dumps(value["messages"])) if parse == "whole" else 0)
    assert all(a is b for a, b in zip(outs[-2]["messages"][1:], items[1:-1], strict=True))
    assert items[0] is not outs[-2]["messages"][0] and "10:24" in items[0]["content"]
    # A list that shares nothing after its first item either is scrubbed item by item.
    other = [
        {"role": "system", "content": "x"},
        {"role": "user", "content": "y"},
        {"role": "user", "content": secret},
    ]
    assert s.json(other, parsed=True) == fresh.json(other)


def test_a_shared_list_inside_a_lists_items_scrubs_as_a_list() -> None:
    # A loaded session's shared lists (DeltaList) may sit inside a list a reader scrubs again (an
    # export): the scrubber writes their JSON as a list's, as the uncached scrubber does.
    from forkpoint.deltalist import DeltaList

    key = "sk-proj-" + _rand(48)
    value = [DeltaList.from_delta([1], 1, [key]), "x", {"k": DeltaList.from_delta([3], 1, [])}]
    assert (
        Scrubber().json(value)
        == Scrubber(cache=False).json(value)
        == [
            [1, expected_placeholder("openai-key", key)],
            "x",
            {"k": [3]},
        ]
    )


def test_the_same_prefix_is_counted_by_identity() -> None:
    from forkpoint.redact import _same_prefix

    items = [{"i": i} for i in range(10)]
    for n in range(11):
        other = items[:n] + [{"i": i} for i in range(n, 12)]
        assert _same_prefix(items, other) == _same_prefix(other, items) == n
        assert _same_prefix(items[:n], other) == n
    # an item shared further on, but not a run from the start: not taken for a prefix
    assert _same_prefix(items, [{"i": 0}, *items[1:]]) == 0
    assert _same_prefix(items, [*items[:3], {"i": 3}, *items[4:6], {"i": 6}]) == 3


# --------------------------------------------------------------------------- large lists, checked in their JSON text

_BIG = [
    {"id": i, "path": f"src/file_{i}.py", "text": "plain words; nothing here " * 3} for i in range(20_000)
]


def _big_with(item: Any) -> list[Any]:
    rows: list[Any] = list(_BIG)
    rows[len(rows) // 2] = item
    return rows


def test_a_large_clean_list_is_checked_in_its_text_and_not_rebuilt() -> None:
    from forkpoint.redact import CLEAN_IN_TEXT_MIN

    assert len(orjson.dumps(_BIG)) >= CLEAN_IN_TEXT_MIN
    out = Scrubber().json(_BIG)
    assert out == _BIG and out[0] is _BIG[0]  # items shared: the walk would have copied them


def test_a_large_clean_list_of_lines_is_scanned_once_as_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tool's lines past CLEAN_IN_TEXT_MIN: read as one text (a secret split over two lines) and
    as a line each (a secret in one), the second reading once. The split check read them a line
    each, then the large list's text check again: 100,000 clean lines took 2.5 times as long."""
    from forkpoint.redact import CLEAN_IN_TEXT_MIN

    lines = [f"line {i}: plain words, nothing to hide here at all " for i in range(30_000)]
    text = "".join(lines)
    assert len(text) >= CLEAN_IN_TEXT_MIN
    scanned: list[int] = []
    find = Scrubber.find

    def counted(self: Scrubber, t: str) -> list[tuple[int, int, str]]:
        scanned.append(len(t))
        return find(self, t)

    monkeypatch.setattr(Scrubber, "find", counted)
    out = Scrubber().json(lines)
    assert out == lines
    assert sum(scanned) <= 2 * (len(text) + len(lines)), scanned  # the joined text, and the lines
    # (read so, a key split over two of them is found: neither holds anything alone)
    pieces = ["see sk-proj-a1B2c3D4e5", "F6g7H8i9J0k1L2m3N4o5 more"]
    out = Scrubber().json([*lines, *pieces, *lines])
    key = "sk-proj-a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5"
    assert out[len(lines) : len(lines) + 2] == ["see " + expected_placeholder("openai-key", key), " more"]


@pytest.mark.parametrize("user_pattern", [True, False], ids=["with a user pattern", "built-in patterns"])
def test_a_large_list_of_lines_without_their_ends_is_read_as_lines(user_pattern: bool) -> None:
    """A YAML file's lines past CLEAN_IN_TEXT_MIN, without their ends (``text.splitlines()``): the
    block scalar's value, on the line after its name (``token: |``), was stored in the clear, the
    lines read glued together and each alone; the lines around it are kept."""
    from forkpoint.redact import CLEAN_IN_TEXT_MIN

    table = {"patterns": [{"kind": "internal-token", "regex": "itk_[A-Za-z0-9]{24}"}]} if user_pattern else {}
    plain = [f"  key_{i}: plain words, nothing to hide here at all" for i in range(30_000)]
    block = ["config:", *plain, "  token: |", "    abcdEFGH1234xyzSECRET", *plain]
    assert len("".join(block)) >= CLEAN_IN_TEXT_MIN
    out = Scrubber(rules_from_table(table, "test")).json(block)
    at = block.index("  token: |") + 1
    assert out == [
        *block[:at],
        "    " + expected_placeholder("secret-assignment", "abcdEFGH1234xyzSECRET"),
        *plain,
    ]


@pytest.mark.parametrize("user_pattern", [True, False], ids=["with a user pattern", "built-in patterns"])
@pytest.mark.parametrize("form", ["value", "key", "quoted value", "value with newlines", "alone"])
def test_every_secret_kind_in_a_large_list_is_scrubbed(form: str, user_pattern: bool) -> None:
    """Each kind of the canary test, inside a list too large to walk first: found by the text check
    (split on quotes, or the regex when the list holds an escaped quote; with the built-in patterns
    only, every string scanned as one line of one text), then scrubbed by the walk, as it is in a
    small list (the secret alone as a string too: what ends a text ends a line)."""
    from tests.test_canary import CONTEXTS, SECRETS
    from tests.test_security import needles

    table = {"patterns": [{"kind": "internal-token", "regex": "itk_[A-Za-z0-9]{24}"}]} if user_pattern else {}
    scrubber = Scrubber(rules_from_table(table, "test"))
    for kind, context in CONTEXTS.items():
        if kind == "json_path" or (kind == "user_rule" and not user_pattern):  # rules these tests lack
            continue
        item = {
            "value": {"id": -1, "note": context},
            "key": {context: 1},
            "quoted value": {"note": f'he said "{context}" twice'},
            "value with newlines": {"note": f"line one\n{context}\nline three"},
            "alone": {"note": SECRETS[kind]},
        }[form]
        got = scrubber.json(_big_with(item))
        assert got[len(_BIG) // 2] == Scrubber(rules_from_table(table, "test")).json([item])[0], (kind, form)
        if form != "alone":  # (some kinds are secrets only in their context)
            leaked = [n for n in needles(SECRETS[kind]) if n in orjson.dumps(got)]
            assert not leaked, (kind, form, leaked[:1])


@pytest.mark.parametrize("escaped_quote", [False, True])
def test_a_credential_named_key_in_a_large_list_is_found_however_the_text_is_split(
    escaped_quote: bool,
) -> None:
    """A key whose name says credential replaces its value, in a large list too; a crafted key that
    begins with ':' after a string ending in an escaped quote does not hide it."""
    item = {"x": 'a"' if escaped_quote else "a", ":password": "hunter2hunter2", "api_key": "plainvalue123"}
    out = Scrubber().json(_big_with(item))[len(_BIG) // 2]
    assert out[":password"].startswith("[REDACTED:") and out["api_key"].startswith("[REDACTED:")


def test_a_captured_http_record_is_scrubbed_once_and_logged_as_it_is() -> None:
    secret = "sk-proj-" + "R" * 48
    s = Scrubber()
    record = s.http_record(
        {
            "status": 200,
            "reason": f"OK {secret}",  # a field the capture layer hands over unscrubbed
            "headers": s.headers([("x-note", f"key {secret}")]),
            "body_kind": "json",
            "body": s.json({"answer": f"key {secret}"}),
        }
    )
    assert secret not in orjson.dumps(record).decode()
    assert s.http(record) is record  # logged as it is: nothing scrubbed twice
    again = s.http(record)  # once: a record logged twice is scrubbed the second time
    assert again is not record and again == record
    # another scrubber's record, or one built without http_record, is scrubbed when logged
    raw = {"status": 200, "reason": f"OK {secret}", "body_kind": "text", "body": f"key {secret}"}
    for given in (Scrubber().http_record(dict(raw)), raw):
        out = s.http(given)
        assert out is not given and secret not in orjson.dumps(out).decode()


def test_a_large_conversation_resent_longer_shares_its_scrubbed_items() -> None:
    """A list past CLEAN_IN_TEXT_MIN that goes on a recent one (a long conversation, resent at every
    call) is not checked whole and handed back as given: its known items are the ones scrubbed
    before, so the caches hold one copy of the conversation, not one per call."""
    s = Scrubber()
    first = s.json(orjson.loads(orjson.dumps(_BIG)))
    grown = orjson.loads(orjson.dumps([*_BIG, {"id": -1, "text": "one more"}]))
    out = s.json(grown)
    assert out == grown and out is not grown
    assert all(a is b for a, b in zip(out, first, strict=False))  # the same items, not copies


def test_a_clean_large_list_changed_by_its_owner_afterwards_is_not_reused() -> None:
    """A list clean as given is kept as the caller's: if the caller puts a secret in it afterwards,
    a longer list that began like it is scrubbed, not served the changed items."""
    secret = "sk-proj-" + "M" * 48
    s = Scrubber()
    rows = orjson.loads(orjson.dumps(_BIG))
    assert s.json(rows)[0] is rows[0]  # clean as given: its items are handed back
    grown = orjson.loads(orjson.dumps([*rows, {"id": -1}]))  # begins like the first, by its JSON
    # the owner changes the first list afterwards (its JSON keeps its length)
    rows[0]["text"] = f"key {secret}".ljust(len(rows[0]["text"]))
    out = s.json(grown)
    assert out == grown and secret not in orjson.dumps(out).decode()


def test_a_replay_holds_no_record_of_the_calls_it_served(tmp_path: Any) -> None:
    """The request records a replay builds to match its calls are not logged: the scrubber lets go
    of them when the call is served (it holds the records of calls to be logged)."""
    import httpx2

    import forkpoint
    from forkpoint import redact

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(200, json={"ok": True})

    def calls() -> None:
        with httpx2.Client(transport=httpx2.MockTransport(handler)) as client:
            for i in range(3):
                client.post("http://127.0.0.1:9/v1/chat/completions", json={"model": "m", "n": i})

    with forkpoint.record(store=tmp_path) as rec:
        calls()
    before = dict(redact.current()._records)  # (other tests in this process may have left some)
    with forkpoint.replay(rec.session_path) as rp:
        calls()
    assert rp.report()["matched"] == 3
    assert redact.current()._records == before


def test_items_taken_over_from_a_list_kept_as_given_stay_the_callers() -> None:
    """A conversation that began as a large clean list keeps the caller's items in every later
    list made from it: a later change by the caller to one of them is not served as scrubbed."""
    secret = "sk-proj-" + "N" * 48
    s = Scrubber()
    first = orjson.loads(orjson.dumps(_BIG))
    s.json(first)
    s.json(orjson.loads(orjson.dumps([*_BIG, {"id": -1}])))  # takes over first's items
    first[0]["text"] = f"key {secret}".ljust(len(first[0]["text"]))  # the caller changes its own
    out = s.json(orjson.loads(orjson.dumps([*_BIG, {"id": -1}, {"id": -2}])))
    assert secret not in orjson.dumps(out).decode()


def test_a_docker_registrys_auth_in_json_data_is_replaced_and_an_auth_mode_is_not() -> None:
    """docker's config.json parsed (a tool's result): a registry's "auth", base64 of user:password,
    was kept in the clear, "auth" naming no credential; an "auth" that is a word stays."""
    auth = base64.b64encode(b"ci:Zx8kP2qLm9RtV4wN7sY3").decode()
    data = {"auths": {"127.0.0.1:5000": {"auth": auth}}, "servers": [{"auth": "oauth2"}, {"auth": "none"}]}
    out = scrub_json(data)
    assert out["auths"]["127.0.0.1:5000"]["auth"] == expected_placeholder("registry-auth", auth)
    assert out["servers"] == data["servers"]
    assert scrub_json(out) == out


def test_a_tokenizers_special_tokens_and_pagination_cursors_are_not_credentials() -> None:
    """Every key ending in ``token`` was taken for a credential: a tool's ``{"eos_token": "</s>"}``
    or an API's ``nextPageToken`` came back on replay as placeholders, "replay ok"."""
    data = {
        "eos_token": "</s>", "pad_token": "<pad>", "next_page_token": "p2-abc123", "nextPageToken": "CAoQAA",
        "refresh_token": "abcdefgh12345678", "id_token": "eyJabc.def.ghi", "access_token": "zzzzzzzzzz",
    }  # fmt: skip
    out = scrub_json(data)
    assert {k: out[k] for k in ("eos_token", "pad_token", "next_page_token", "nextPageToken")} == {
        k: data[k] for k in ("eos_token", "pad_token", "next_page_token", "nextPageToken")
    }
    assert all(
        out[k].startswith("[REDACTED:secret-field:") for k in ("refresh_token", "id_token", "access_token")
    )
    text = scrub_text('{"eos_token": "</s>", "nextPageToken": "p2-abc123", "refresh_token": "abcdefgh1234"}')
    assert '"eos_token": "</s>"' in text and '"nextPageToken": "p2-abc123"' in text
    assert '"refresh_token": "[REDACTED:secret-field:' in text


def test_a_binary_body_is_scrubbed_byte_for_byte_in_little_memory() -> None:
    """A 50 MB binary download took 860 MB and 7 s to record: bytes that are not UTF-8 were read
    as UTF-8 with escapes (2 to 4 bytes a character, and 12 a character again to lowercase them),
    and the body was scrubbed twice. Binary data is now read a byte a character: a secret in it is
    still replaced, by the placeholder it gets as text, and every other byte is kept."""
    import os
    import tracemalloc

    secret = "sk-proj-" + _rand(48)
    blob = os.urandom(4_000_000)
    data = blob[:1000] + b" " + secret.encode() + b" " + blob[1000:]
    scrubber = Scrubber()
    scrubber.bytes(b"\xff warm-up")
    tracemalloc.start()
    try:
        out = scrubber.bytes(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    replaced = b" " + expected_placeholder("openai-key", secret).encode() + b" "
    assert out == blob[:1000] + replaced + blob[1000:]
    assert peak < 5 * len(data), peak / len(data)  # (23 times the data before)
    assert scrub_text(f"key {secret}") == f"key {expected_placeholder('openai-key', secret)}"


def test_form_bodies_lose_credential_fields_by_name_and_scrubbing_them_again_changes_nothing() -> None:
    scrubber = Scrubber()
    secret, password = _rand(24), _rand(12)
    form = f"grant_type=client_credentials&client_id=ada&client_secret={secret}&refresh_token=r{password}"
    out = scrubber.body_text(form, "application/x-www-form-urlencoded; charset=utf-8")
    fields = parse_qs(out)
    assert fields["client_id"] == ["ada"] and fields["grant_type"] == ["client_credentials"]
    assert fields["client_secret"] == [expected_placeholder("form-credential", secret)]
    assert fields["refresh_token"] == [expected_placeholder("form-credential", "r" + password)]
    assert scrubber.body_text(out, "application/x-www-form-urlencoded") == out
    # The same text under another content type is prose: only secret shapes are replaced.
    assert scrubber.body_text(form, "text/plain") == scrubber.text(form)

    multipart = (
        f'--xyz\r\nContent-Disposition: form-data; name="Password"\r\n\r\n{password}\r\n'
        '--xyz\r\nContent-Disposition: form-data; name="note"\r\n\r\nhello\r\n'
        '--xyz\r\nContent-Disposition: form-data; name="api_key"; filename="k.txt"\r\n'
        f"Content-Type: text/plain\r\n\r\n{secret}\r\n--xyz--\r\n"
    )
    out = scrubber.body_text(multipart, "multipart/form-data; boundary=xyz")
    assert f'name="Password"\r\n\r\n{expected_placeholder("form-credential", password)}\r\n--xyz' in out
    assert 'name="note"\r\n\r\nhello\r\n' in out and f"\r\n\r\n{secret}\r\n--xyz--" in out  # a file part
    assert scrubber.body_text(out, "multipart/form-data; boundary=xyz") == out


def test_holds_placeholder_wants_the_placeholder_shape_in_text_and_in_bytes() -> None:
    from forkpoint.redact import holds_placeholder, placeholder

    made = placeholder("openai-key", "sk-proj-" + "a" * 40)
    assert holds_placeholder({"result": [f"key {made}"]}) and holds_placeholder([made.encode()])
    assert not holds_placeholder([b"binary [REDACTED: not a placeholder", "[REDACTED:", {"k": None}])


@pytest.mark.parametrize(
    ("argv", "kept"),
    [
        (["--token", "abc"], [False, True]),
        (["--api-key=xyz"], [True]),
        (["--API_KEY", "xyz"], [False, True]),
        (["--hf-token", "xyz", "--max-tokens", "9"], [False, True, False, False]),
        (["--token-file", "t.txt", "--secret-name", "prod"], [False, False, False, False]),
        (["--no-password", "file.txt"], [False, False]),
        (["--password", "--verbose"], [False, False]),
        (["--password"], [False]),
        (["-token", "abc"], [False, True]),
        # (a secret key: MinIO's and S3 tools' --secret-key, Django's, Tailscale's --auth-key)
        (["--secret-key", "abc", "--aws_secret_key=xyz"], [False, True, True]),
        (["--auth-key", "abc", "--master-key", "xyz"], [False, True, False, True]),
        (["--key", "name", "--sort-key", "x"], [False, False, False, False]),
        # (a blank item is no value: the option's is the next item that is not one, as some shells split)
        (["--token", " ", "pw1xyz"], [False, False, True]),
        (["--token", "", "\n", "pw1xyz", "x"], [False, False, False, True, False]),
        (["--token", ""], [False, False]),
        (["--token", " "], [False, False]),
        (["--token", "", "--verbose"], [False, False, False]),
    ],
)
def test_a_credential_options_value_is_replaced_whatever_its_shape(argv: list[str], kept: list[bool]) -> None:
    from forkpoint.redact import scrub_argv

    out = scrub_argv(argv)
    assert ["[REDACTED:secret-option:" in a for a in out] == kept, out
    assert scrub_argv(out) == out  # (idempotent: a scrubbed header scrubbed again is the same)


def test_a_credential_options_value_cut_over_two_items_is_replaced_whole() -> None:
    """``["--token", "sk-proj-", "Q7pV…"]``: the value alone was replaced, and the key's rest, in
    the next item, kept in the clear (the value's placeholder hid where the key starts). A whole
    value and the item after it, ``"Done"`` or a positional argument, each keep their text."""
    from forkpoint.redact import scrub_argv, secret_options

    key = "sk-proj-" + _rand(48)
    for argv in (["--token", key[:8], key[8:]], ["tool", "--token", key[:20], key[20:] + " more", "x"]):
        for out in (scrub_argv(argv), Scrubber().json(argv)):
            assert not any(part in "".join(out) for part in (key[8:], key[20:])), out
            assert out[-1] == (argv[-1] if argv[-1] == "x" else ""), out  # (the rest taken from its item)
            assert scrub_argv(out) == out and Scrubber().json(out) == out
        assert secret_options(argv) == ["--token"]
    for argv in (["--token", key, "Done"], ["--token", "abc", "positional123XYZ"]):
        assert scrub_argv(argv)[2] == argv[2] == Scrubber().json(argv)[2]


def test_a_commands_options_are_read_once() -> None:
    """``argv_options`` read a command's options for the credentials they name twice, once for
    their names and once for the values (0.34 ms a recording, for its command line): once, with
    the same values replaced and the same names said."""
    key = "sk-proj-" + _rand(48)
    argv = ["deploy", "--token", "abc", "-v", "--api-key=" + key, "--password", key[:20], key[20:]]
    scrubber = Scrubber()
    read = []
    real = scrubber._list_secrets

    def counted(items: Any, start: int = 0) -> dict[int, tuple[str, str]]:
        read.append(list(items))
        return real(items, start)

    with mock.patch.object(scrubber, "_list_secrets", counted):
        out, names = scrubber.argv_options(argv)
    assert read.count(argv) == 1, read
    assert names == ["--token", "--api-key", "--password", "--password"]  # (the key's rest: its name too)
    assert out[:4] == ["deploy", "--token", redact.placeholder("secret-option", "abc"), "-v"]
    assert not any(part in "".join(out) for part in ("abc", key[:20], key[20:])), out


def test_a_credential_option_in_a_shells_script_is_replaced() -> None:
    """``forkpoint record -- sh -c "python agent.py --token VALUE"`` (and a program's
    ``os.system("… --token VALUE")``, named among the programs not recorded) kept VALUE: the script
    is one argument, so no option was read in it. Its options are read as words; a value the shell
    takes from a variable is kept, as is a switch."""
    from forkpoint.redact import scrub_argv, secret_options

    script = "python agent.py --token tok3n --secret-key='a b' && x --password=\"p w\""
    out = scrub_argv(["sh", "-c", script])
    assert out[:2] == ["sh", "-c"]
    assert not any(s in out[2] for s in ("tok3n", "a b", "p w")), out
    assert out[2].startswith("python agent.py --token [REDACTED:secret-option:")
    assert secret_options(["sh", "-c", script]) == ["--token", "--secret-key", "--password"]
    kept = 'python a.py --token "$HF_TOKEN" --api-key $KEY --password --verbose --max-tokens 5'
    assert scrub_argv(["sh", "-c", kept]) == ["sh", "-c", kept]
    assert scrub_argv(out) == out  # (idempotent)


@pytest.mark.parametrize(
    ("script", "secret"),
    [
        ("python a.py --token '$3cr3t-Pw'", "3cr3t-Pw"),  # (single quotes: no variable, a literal)
        ("python a.py --token $'s3cr3t-Pw'", "s3cr3t-Pw"),  # (ANSI-C quoting: a literal too)
        ('python a.py --password=ab"cd s3cr3t"', "s3cr3t"),  # (one word of two parts)
        ("python a.py --password=s3cr3t\\ Pw", "Pw"),  # (an escaped blank inside the word)
        ('python a.py --token ""s3cr3t-Pw', "s3cr3t-Pw"),
        ("python a.py --api-key \\\n  s3cr3t-Pw", "s3cr3t-Pw"),  # (after a line's continuation)
    ],
)
def test_a_credential_option_in_a_script_is_replaced_as_the_shell_reads_its_word(
    script: str, secret: str
) -> None:
    """A value read as one quoted or unquoted run kept the rest of its word (``ab"cd s3cr3t"``), one
    after a continued line was not read, and a literal that starts with ``$`` in single quotes was
    taken for a variable the shell reads: each secret stayed in the header, the index and ls."""
    from forkpoint.redact import scrub_argv, secret_options

    out = scrub_argv(["sh", "-c", script])
    assert secret not in out[2] and "[REDACTED:secret-option:" in out[2], out
    assert secret_options(["sh", "-c", script]) in (["--token"], ["--password"], ["--api-key"])
    assert scrub_argv(out) == out  # (idempotent)
    kept = 'python a.py --token "$HF_TOKEN" --api-key $(cat key) --password `pass show x`'
    assert scrub_argv(["sh", "-c", kept]) == ["sh", "-c", kept]


def test_query_credentials_in_binary_data_are_found_after_each_of_their_characters() -> None:
    """The query credential's pattern is searched for, not matched at every ``?``, ``&`` and ``;``
    (one byte in 85 of binary data): each of the three still starts one, in text and in bytes."""
    noise = bytes(random.Random(7).randrange(256) for _ in range(200_000))
    secrets = {"?token=": "t0k-aaaa", "&client_secret=": "cs-bbbb", ";access_token=": "at-cccc"}
    data = noise + b"".join(k.encode() + v.encode() + b" " + noise[:999] for k, v in secrets.items())
    out = scrub_bytes(data)
    for name, value in secrets.items():
        assert value.encode() not in out
        assert (name + expected_placeholder("query-credential", value)).encode() in out
    text = "see /x?q=1&token=abc;secret=def and ?code=zz"
    assert scrub_text(text) == (
        f"see /x?q=1&token={expected_placeholder('query-credential', 'abc;secret=def')} and ?code=zz"
    )


@pytest.mark.parametrize(
    "value",
    [
        "hunter2#longtail",
        "abcd;def&ghi",
        "k3ys,with,commas",
        "sk-ant-api03-" + "a1B2" * 6 + "#tail",
        "p w x y",  # (a passphrase: the quoted shape took no space, the unquoted one its first word)
        "correct horse battery staple",
    ],
)
def test_a_quoted_credential_is_replaced_whole_in_one_pass(value: str) -> None:
    """``password="hunter2#longtail"``: the unquoted assignment's shape (which a ``#``, ``;``, ``&``
    or ``,`` ends) won over the quoted one at the same place, and ``#longtail`` was kept in the clear
    where the text was scrubbed once (a JSON tool result, a request body); a second pass then
    replaced the placeholder and the rest (scrubbing was not idempotent)."""
    for name in ("password", "DB_PASSWORD", "API_KEY"):
        text = f'{name}="{value}"\n'
        out = scrub_text(text)
        assert out == f'{name}="{expected_placeholder("secret-assignment", value)}"\n'
        assert scrub_text(out) == out
        assert scrub_json({"config": text}) == {"config": out}


@pytest.mark.parametrize(
    "text",
    [
        "Authorization: Basic dXNlcjpwYXNz=AKIAIOSFODNN7EXAMPLE",
        "Authorization: Basic dXNlcjpwYXNzd29yZA==AKIAIOSFODNN7EXAMPL1\n",
        '{"h": "Basic c3ZjOmh1bnRlcjI=ASIAQWERTYUIOPASDFGH"}',
    ],
)
def test_a_secret_glued_to_another_is_scrubbed_in_one_pass(text: str) -> None:
    """``Basic <base64>=AKIA…``: the AWS key was replaced, and the base64 before it, which does not
    end before an ``A``, was not a Basic credential until its neighbour was the placeholder. A
    second scrub (a live request matched against its scrubbed recording, ``forkpoint scrub``)
    replaced it then: scrubbing was not idempotent, and the two forms of one request differed."""
    once = scrub_text(text)
    assert "[REDACTED:basic-auth:" in once and "[REDACTED:aws-access-key:" in once
    assert scrub_text(once) == once
    assert find_secrets(once) == []
    assert scrub_json({"t": text}) == {"t": once}
    data = text.encode()
    for i in range(1, len(data)):  # a stream of it, split anywhere, as the whole
        assert b"".join(scrub_chunks([data[:i], data[i:]])) == once.encode()


class _Counting:
    """A compiled pattern that counts its calls and the characters it read: up to each match's end
    (where it was asked to start to where its match ended), and to the text's end for a call that
    failed for the text's last character (it matches with another one there: a space, a digit, or
    the "@" that ends a URL's user info): the work a run of anchors costs."""

    def __init__(self, pat: re.Pattern[str], seen: dict[str, int]) -> None:
        self.pat, self.seen = pat, seen

    def _count(
        self, m: re.Match[str] | None, text: str, at: int, call: Callable[..., Any]
    ) -> re.Match[str] | None:
        self.seen["calls"] += 1
        if m is not None:
            self.seen["read"] += m.end() - at
        elif text and any(call(text[:-1] + c, at) is not None for c in " 1@"):
            self.seen["read"] += len(text) - at
        return m

    def match(self, text: str, pos: int = 0) -> re.Match[str] | None:
        return self._count(self.pat.match(text, pos), text, pos, self.pat.match)

    def search(self, text: str, pos: int = 0) -> re.Match[str] | None:
        return self._count(self.pat.search(text, pos), text, pos, self.pat.search)


def _work(run: str, n: int, end: str = "") -> dict[str, int]:
    """Calls of the scrubber's patterns and characters they read to scrub ``run`` glued ``n`` times
    and then ``end``."""
    s = Scrubber(cache=False)
    seen = {"calls": 0, "read": 0}
    for i, pat in enumerate(s._pats):
        s._pats[i] = cast(re.Pattern[str], _Counting(s._pattern(i) if pat is _UNCOMPILED else pat, seen))
    counting: dict[re.Pattern[str], re.Pattern[str]] = {}

    def first(chars: re.Pattern[str], text: str, at: int, reach: Any) -> int:
        # (one counting pattern for each: where each was looked for is kept by pattern)
        counted = counting.setdefault(chars, cast(re.Pattern[str], _Counting(chars, seen)))
        return looked_for(counted, text, at, reach)

    looked_for = redact._first
    with mock.patch.object(redact, "_first", first):
        s.text(run * n + end)
    return seen


@pytest.mark.parametrize(
    "run",
    [
        "password=",
        "PASSWORD=",
        "xapp-",
        "xoxe-",
        "sk-",
        "glpat-",
        "-----BEGIN PRIVATE KEY-----",
        "?token=",
        "Cookie: ",
    ],
)
def test_a_run_of_glued_anchors_is_read_once(run: str) -> None:
    """Every pattern was matched at every occurrence of its anchor before the leftmost match was
    taken, and a run of glued anchors (password=password=…) is one secret to its end: each
    occurrence read the rest of the run, so 20,000 of them took about 10 s to scrub (a tool's result
    stalled the live agent while it was recorded). Twice the run now costs twice the work."""
    once, twice = _work(run, 300), _work(run, 600)
    assert once["read"] >= 300 * len(run) - len(run)  # (the run was read: the counter counts)
    assert twice["read"] <= 2 * once["read"] + 100, (once, twice)
    assert twice["calls"] <= 2 * once["calls"] + 10, (once, twice)


@pytest.mark.parametrize(
    ("run", "end"),
    [
        ("Authorization:", ""),
        ("Proxy-Authorization:", ""),
        ("authorization:", "("),
        ("Authorization:", " "),
        ("api_key=a1-", "("),
        ("SECRET=a1", "["),
        ("password=", "("),
        ("PASSWORD=", "["),
        ("API_KEY=1", "<"),
        ("CREDENTIALS:", "{"),
        ("_KEY=", ">"),
        # (a URL's password holds "/": one without its "@" read on over the next URLs; the second,
        # a token as the user info, is text the scrubber reads with no host after it, never sent)
        ("x://127.0.0.1:b/", ""),
        ("https://0123456789abcdefg:b/", " "),
    ],
)
def test_a_run_of_glued_anchors_that_matches_nowhere_is_read_once(run: str, end: str) -> None:
    """A run of glued anchors whose value fails at its end (password=password=…( : a value does not
    end at a bracket; Authorization:Authorization:…: a value holds a digit) was read to its end and
    failed at each occurrence: 'password=' 4,000 times and '(' took 6 s to scrub, 'Authorization:'
    4,000 times 5 s. Where a value fails is found once for the run: twice the run, twice the work."""
    once, twice = _work(run, 300, end), _work(run, 600, end)
    assert once["read"] >= 300 * len(run) - len(run)  # (the run was read: the counter counts)
    assert twice["read"] <= 2 * once["read"] + 100, (once, twice)
    assert twice["calls"] <= 2 * once["calls"] + 10, (once, twice)


@pytest.mark.parametrize("run", ["password: |\n  ", "db:\n  token: >-\n", "PASSWORD:\n ", "token: |\n  x1\n"])
def test_yaml_values_on_the_next_lines_are_read_in_linear_time(run: str) -> None:
    """A name whose value may be on the next lines (a YAML block scalar, a plain scalar indented
    under it) is read there at each occurrence: twice the run, twice the work."""
    once, twice = _work(run, 300), _work(run, 600)
    assert once["read"] >= 300  # (the counter counts)
    assert twice["read"] <= 2 * once["read"] + 100, (once, twice)
    assert twice["calls"] <= 2 * once["calls"] + 10, (once, twice)


_NAMES = ["password", "PASSWORD", "passwd", "API_KEY", "_KEY", "TOKEN", "SECRET", "CREDENTIALS", "api_key"]
_NAMES += ["client_secret", "x-auth-token", "token", "Authorization", "authorization", "Proxy-Authorization"]
_GLUE = ["=", ":", " = ", ": ", ":\t", '":', "':'", ":'", '"=', " :", ":\n"]
_VALUES = ["", "a1b2c3d4", "abcdefgh", "Token ", "Token\ta1b2c3d4", "Bot x9", "None", "12345", "hunter22"]
_VALUES += ["é1", "A1b2C3d4E5f6G7h8", "A1b2C3d4E5f6G7h8."]
_BITS = [*"()[]{}<> \t\n\r\"',;#&\\.:-", "\\n", "\u00e9"]


def test_a_value_known_to_fail_where_it_ends_is_what_matching_at_each_occurrence_finds() -> None:
    """Occurrences passed over because their value fails where it ends are those whose match fails:
    the spans are the same as when the pattern is matched at every occurrence, on mixes of names,
    what glues them to their values, values, brackets, quotes, spaces and escapes."""
    rnd = random.Random(139)
    skipping, matching = Scrubber(cache=False), Scrubber(cache=False)
    matching._dead_ends = [None] * len(matching._dead_ends)
    assert any(skipping._dead_ends)
    for _ in range(3000):
        text = "".join(
            rnd.choice(_NAMES) + rnd.choice(_GLUE) + rnd.choice(_VALUES)
            if rnd.random() < 0.4
            else rnd.choice(_BITS)
            for _ in range(rnd.randrange(1, 12))
        )
        assert skipping.find(text) == matching.find(text), text


def test_each_secret_of_a_long_run_is_replaced() -> None:
    """Secrets side by side, thousands of them: each is replaced by its own placeholder, a run of
    glued anchors by one, as when every occurrence was matched."""
    keys = [f"sk-{_rand(24)}" for _ in range(2000)]
    assert scrub_text(" ".join(keys)) == " ".join(expected_placeholder("openai-key", k) for k in keys)
    words = [f"pw{i}{_rand(8)}" for i in range(2000)]
    assert scrub_text("".join(f"password={w}\n" for w in words)) == "".join(
        f"password={expected_placeholder('secret-assignment', w)}\n" for w in words
    )
    tokens = [_rand(12) for _ in range(2000)]
    url = "http://127.0.0.1/a?" + "&".join(f"token={t}" for t in tokens)
    assert scrub_text(url) == "http://127.0.0.1/a?" + "&".join(
        f"token={expected_placeholder('query-credential', t)}" for t in tokens
    )
    blocks = [f"-----BEGIN PRIVATE KEY-----\n{_rand(64)}\n-----END PRIVATE KEY-----" for _ in range(500)]
    assert scrub_text("".join(blocks)) == "".join(expected_placeholder("private-key", b) for b in blocks)
    run = "password=" * 20_000
    assert scrub_text(run) == "password=" + expected_placeholder("secret-assignment", run[9:])
    assert scrub_text("sk-" * 20_000) == expected_placeholder("openai-key", "sk-" * 20_000)


_ARGV_SECRET = "Zx8kP2qLm9RtV4wN7sY3"

#: Lists whose items say another item is a credential, each item alone telling nothing: an argv
#: list's credential option, a client's password option, a header pair, an environment entry.
NEIGHBOUR_SECRETS: list[Any] = [
    {"cmd": ["tool", "--token", _ARGV_SECRET]},
    ["agent.py", "--api-key", _ARGV_SECRET, "--verbose"],
    ["curl", "-u", "admin:" + _ARGV_SECRET, "http://127.0.0.1/x"],
    ["/usr/bin/curl", "--user", "admin:" + _ARGV_SECRET],
    ["curl", "-uadmin:" + _ARGV_SECRET],
    ["mysql", "-h", "127.0.0.1", "-p" + _ARGV_SECRET, "db"],
    ["docker", "login", "-u", "bob", "-p", _ARGV_SECRET, "localhost:5000"],
    ["sshpass", "-p", _ARGV_SECRET, "ssh", "-p", "2222", "localhost"],
    ["sshpass", "-e", "deploy", "--token", _ARGV_SECRET],  # (the command it runs has its own)
    ["redis-cli", "-h", "127.0.0.1", "-a", _ARGV_SECRET],
    [["Authorization", "Token " + _ARGV_SECRET]],
    [["X-Api-Key", _ARGV_SECRET]],
    {"headers": [("accept", "*/*"), ("x-api-key", _ARGV_SECRET)]},
    [{"name": "API_KEY", "value": _ARGV_SECRET}],
    {"env": [{"name": "DB_PASSWORD", "value": _ARGV_SECRET}, {"name": "MODE", "value": "prod"}]},
    {"name": "GITHUB_TOKEN", "value": _ARGV_SECRET},
    [{"name": "Authorization", "value": "Token " + _ARGV_SECRET}],  # (a HAR file's header list)
    [{"name": "X-Amz-Security-Token", "value": _ARGV_SECRET}],
    [{"name": "X-Api-Key", "value": _ARGV_SECRET}],
    [["X-Amz-Security-Token", _ARGV_SECRET]],
]


@pytest.mark.parametrize(
    "command",
    [
        "curl -u admin:{} http://127.0.0.1/x",
        "curl --user admin:{}",
        "/usr/bin/curl -uadmin:{}",
        "mysql -h 127.0.0.1 -p{} db",
        "mysqldump -p{} db",
        "mysqladmin -p{} status",
        "docker login -u bob -p {} localhost:5000",
        "sshpass -p {} ssh -p 2222 localhost",
        "redis-cli -h 127.0.0.1 -a {} ping",
    ],
)
def test_a_client_password_is_replaced_alike_in_its_argv_and_in_its_command_text(command: str) -> None:
    """Each client (curl, the MySQL clients, docker login, sshpass, redis-cli) is read from one
    table as an argv list and as text: the same password replaced, the same way."""
    text = command.format(_ARGV_SECRET)
    argv = Scrubber().argv(text.split(" "))
    assert _ARGV_SECRET not in " ".join(argv)
    assert argv == Scrubber().text(text).split(" ")


@pytest.mark.parametrize("value", NEIGHBOUR_SECRETS, ids=[str(i) for i in range(len(NEIGHBOUR_SECRETS))])
def test_an_item_its_neighbour_says_is_a_credential_is_replaced_alone_and_in_a_resent_list(
    value: Any,
) -> None:
    """Each list item was scrubbed alone: ``["tool", "--token", SECRET]`` (a tool's argv),
    ``[["X-Api-Key", SECRET]]``, ``[{"name": "API_KEY", "value": SECRET}]`` were stored in clear
    text. The item is replaced now, the same way alone, inside a conversation resent longer at
    every call (the scrubber's list caches), parsed or not, and scrubbing again changes nothing."""
    alone = Scrubber().json(value)
    assert _ARGV_SECRET not in orjson.dumps(alone).decode(), alone
    assert Scrubber().json(alone) == alone
    s = Scrubber()
    messages: list[Any] = []
    for turn in range(4):
        messages = [*messages, {"role": "user", "content": f"turn {turn}"}]
        if turn == 1:
            messages.append({"role": "assistant", "tool_args": value})
        for parsed in (False, True):
            got = s.json({"model": "m", "messages": messages}, parsed=parsed)
            assert _ARGV_SECRET not in orjson.dumps(got).decode(), got
            if turn >= 1:
                assert got["messages"][2]["tool_args"] == alone
    if isinstance(value, list):  # a growing list itself: the item that tells comes first, then its value
        for n in range(1, len(value) + 1):
            assert s.json(value[:n], parsed=True) == Scrubber().json(value[:n])
            assert s.json(value[:n]) == Scrubber().json(value[:n])


@pytest.mark.parametrize(
    "value",
    [
        ["mysql", "-p", "mydb"],  # (mysql asks for the password of mydb)
        ["docker", "run", "-p", "8080:80", "img"],  # (a port)
        ["curl", "-u", "admin", "http://127.0.0.1/"],  # (curl asks for admin's password)
        ["ssh", "-p", "2222", "localhost"],
        ["sshpass", "-f", "pw.txt", "ssh", "-p", "2222", "localhost"],  # (ssh's port, not sshpass's -p)
        ["sshpass", "-e", "ssh", "-p", "2222", "localhost"],
        ["redis-cli", "-a", "-n"],
        ["tool", "--token", "--verbose"],
        ["tool", "--max-tokens", "512", "--token-file", "t.txt"],
        {"required": ["client_secret", "client_id"]},  # (a JSON schema's, in a tool's definition)
        {"enum": ["authorization_code", "client_credentials"]},
        [["Accept", "application/json"]],
        [{"name": "MODE", "value": "prod"}],
        [{"name": "API_KEY"}],
        # (a signing header's value is derived from a credential, no secret: a HAR file's time)
        {"name": "X-Amz-Date", "value": "20261201T000000Z"},
        [{"name": "x-amz-content-sha256", "value": "e3b0c44298fc1c149afbf4c8996fb924"}],
        [["X-Amz-Date", "20261201T000000Z"]],
    ],
)
def test_a_list_whose_items_name_no_credential_is_kept(value: Any) -> None:
    assert Scrubber().json(value) == orjson.loads(orjson.dumps(value))


def test_a_recorded_commands_client_password_is_replaced_and_named() -> None:
    """``forkpoint record -- curl -u admin:PW …`` (or ``mysql -pPW``, ``sshpass -p PW``) stored
    the password in the session's header: its argv was scrubbed item by item. It is a placeholder
    now, and its option is one of those ``forkpoint record`` says it kept as placeholders."""
    from forkpoint.redact import secret_options

    argv = ["curl", "-u", "admin:" + _ARGV_SECRET, "http://127.0.0.1/", "-d", "x"]
    assert scrub_argv(argv)[2] == "admin:" + expected_placeholder("command-password", _ARGV_SECRET)
    assert secret_options(argv) == ["-u"]
    for command in (["mysql", "-p" + _ARGV_SECRET], ["sshpass", "-p", _ARGV_SECRET, "ssh", "localhost"]):
        out = scrub_argv(command)
        assert _ARGV_SECRET not in " ".join(out) and scrub_argv(out) == out, out
        assert secret_options(command) == ["-p"]


#: The texts the scrubber's shapes start at or read (their anchors, a name's case, what ends a
#: value) and placeholders: random mixes of them are where a value that failed its shape whole
#: passed it with a placeholder inside.
_MIX_PIECES = [
    *sorted({a for _, lits, _ in redact._BUILTIN for a in lits}),
    *sorted({a.upper() for _, lits, _ in redact._BUILTIN for a in lits}),
    *(redact.placeholder(k, "x") for k in ("private-key", "openai-key", "secret-field", "bearer")),
    "%5BREDACTED%3Aopenai-key%3A0123abcd%5D",
    "AUTHORIZATION:",
    "Authorization: ",
    "password=",
    "API_KEY=",
    "token: ",
    "x-api-key: ",
    "--token ",
    "curl -u a:",
    "-----BEGIN PRIVATE KEY-----\nAAAA",
    *('"', "'", "$", "=", ":", " ", "\n", "\\n", "[", "]", "(", "9"),
    "a1b2c3d4e5f6g7h8",
    "Q7pVbX2mK9wLz4RtY8uN3cJ6",
]


def test_scrubbing_random_mixes_of_trigger_texts_and_placeholders_twice_changes_nothing() -> None:
    """scrub(scrub(x)) == scrub(x): a second pass read a placeholder and what follows it as one
    credential value (66 of 6,000 mixes), so a live request scrubbed for matching and its scrubbed
    recording could differ."""
    rng = random.Random(147)
    s = Scrubber(cache=False)
    for _ in range(4000):
        text = "".join(rng.choice(_MIX_PIECES) for _ in range(rng.randint(1, 8)))
        once = s.text(text)
        assert s.text(once) == once, text


@pytest.mark.parametrize(
    "text",
    [
        'AUTHORIZATION:"-----BEGIN PRIVATE KEY-----\nAAAA$',
        "Authorization: refreshAKIA:CLIENT-----BEGIN PRIVATE KEY-----\nAAAA",
        "Authorization: xai-FWOGZXIVYXDZprivateREDIS-CLIABSKx",
        "--token GITHUB_PAT_AQODYXDZ-----BEGIN PRIVATE KEY-----\nAAAA",
    ],
)
def test_a_placeholder_inside_a_credential_value_is_not_read_as_one(text: str) -> None:
    """A value with no digit or with a space fails its shape (``Authorization: refresh…``) until the
    secret after it is a placeholder, which has digits and no space: a second scrub took the
    placeholder and its neighbours for a header credential's or an option's value."""
    once = scrub_text(text)
    assert scrub_text(once) == once
    assert redact._PLACEHOLDER_RE.search(once) is not None
    scrubbed = 'AUTHORIZATION:"' + redact.placeholder("private-key", "x") + "$"
    assert scrub_text(scrubbed) == scrubbed


_PEM_LINES = [
    "-----BEGIN PRIVATE KEY-----\n",
    _rand(64) + "\n",
    _rand(40) + "\n",
    "-----END PRIVATE KEY-----\n",
]


@pytest.mark.parametrize(
    ("pieces", "secret", "kind"),
    [
        (
            ["see sk-proj-" + "a1B2c3D4e5", "F6g7H8i9J0k1L2m3N4o5 more"],
            "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5",
            "openai-key",
        ),
        (
            ["x ", "s", "k-proj-", "a1B2c3D4e5F6", "g7H8i9J0k1L2m3", " end"],
            "sk-proj-a1B2c3D4e5F6g7H8i9J0k1L2m3",
            "openai-key",
        ),
        (_PEM_LINES, "".join(_PEM_LINES).rstrip("\n"), "private-key"),
        # (the first piece alone a whole key's shape: a key of 20 characters or more, a PEM key's
        # header line whose END line is not in the list)
        (
            ["sk-proj-abcdefghijklmnopqrstuv", "wxyz0123456789ABCDEF"],
            "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCDEF",
            "openai-key",
        ),
        (_PEM_LINES[:3], "".join(_PEM_LINES[:3]), "private-key"),
        (
            [line.rstrip("\n") for line in _PEM_LINES[:3]],
            "".join(_PEM_LINES[:3]).replace("\n", ""),
            "private-key",
        ),
    ],
)
def test_a_secret_split_over_adjacent_strings_of_a_list_is_replaced_where_it_starts(
    pieces: list[str], secret: str, kind: str
) -> None:
    """A tool's text as a list of pieces: each scrubbed alone, a key cut in two was kept as its
    pieces, and a PEM key's lines lost only their header line, its body kept in the clear."""
    for value in (pieces, {"result": [1, *pieces, 2]}, [{"role": "tool", "content": pieces}]):
        out = Scrubber().json(value)
        text = orjson.dumps(out).decode()
        assert all(part not in text for part in re.findall(r"[A-Za-z0-9]{10,}", secret)), out
        assert expected_placeholder(kind, secret) in text
        assert Scrubber().json(out) == out  # idempotent
        s = Scrubber()  # the same in a conversation resent longer at every call (the list caches)
        for parsed in (False, True):
            assert s.json({"m": [{"role": "user"}, value]}, parsed=parsed)["m"][1] == out
            assert s.json({"m": [{"role": "user"}, value, {"role": "user"}]}, parsed=parsed)["m"][1] == out
    out = Scrubber().json(pieces)
    starts = [i for i, piece in enumerate(out) if piece.endswith(expected_placeholder(kind, secret))]
    assert len(out) == len(pieces) and len(starts) == 1


@pytest.mark.parametrize(
    "name", ["PRIVATE_KEY=", "export SSH_KEY=", "TLS_KEY: ", 'PRIVATE_KEY="', "password="]
)
def test_a_pem_key_as_an_assignment_s_value_is_replaced_whole(name: str) -> None:
    """``PRIVATE_KEY=-----BEGIN … KEY-----`` (an ``.env`` file): the assignment's value, read to the
    first space, was ``-----BEGIN`` and took the place where the key starts, so the key's body was
    stored in the clear; the same in the file's lines as a list (the first line alone an assignment)."""
    pem = "".join(_PEM_LINES).rstrip("\n")
    text = name + pem + "\nDEBUG=1\n"
    once = scrub_text(text)
    assert once == name + expected_placeholder("private-key", pem) + "\nDEBUG=1\n"
    assert scrub_text(once) == once
    for lines in (text.splitlines(keepends=True), text.splitlines()):
        out = Scrubber().json(lines)
        assert not any(line in orjson.dumps(out).decode() for line in _PEM_LINES[1:3]), out
        assert out[0].startswith(name + "[REDACTED:private-key:") and out[-1].startswith("DEBUG=1"), out
        assert Scrubber().json(out) == out


@pytest.mark.parametrize("name", ["password=password=", "password: secret=", "API_KEY=abc"])
def test_a_pem_key_inside_another_name_s_value_is_replaced_whole(name: str) -> None:
    """``password=password=-----BEGIN … KEY-----``: the first name's value, read to the first space,
    was ``password=-----BEGIN``, and the key that starts inside it was never read: its body and END
    line were stored in the clear, in text and in the file's lines as a list."""
    pem = "".join(_PEM_LINES).rstrip("\n")
    text = name + pem + "\nDEBUG=1\n"
    once = scrub_text(text)
    assert "[REDACTED:private-key:" in once and once.endswith("]\nDEBUG=1\n"), once
    assert not any(line.strip() in once for line in _PEM_LINES[1:]), once
    assert scrub_text(once) == once
    cut = name.index("=") + 1  # (and the names' items apart: "password=", "password=", the key's lines)
    for lines in (
        text.splitlines(keepends=True),
        text.splitlines(),
        [name[:cut], name[cut:], *pem.splitlines()],
    ):
        out = Scrubber().json(lines)
        assert not any(line.strip() in orjson.dumps(out).decode() for line in _PEM_LINES[1:]), out
        assert Scrubber().json(out) == out


def test_a_whole_secret_at_the_end_of_a_list_item_is_not_read_on_into_the_next() -> None:
    """Lines split from a ``.env`` file, a message and a word: the next item's text is its own,
    though glued to the key it would read as more of it."""
    key = "sk-proj-" + _rand(40)
    for items in (
        [f"OPENAI_API_KEY={key}", "HOME=/root", f"key {key}", "Done"],
        [f"OPENAI_API_KEY={key}", "AWS2_REGION=eu-west-1"],  # (random-looking, but the value of another name)
    ):
        assert Scrubber().json(items) == [scrub_text(item) for item in items]
    assert Scrubber().json(["password=", "hunter2xyz"]) == ["password=", "hunter2xyz"]
    assert Scrubber().json(["PASSWORD=\n", "HOME=/root\n"]) == ["PASSWORD=\n", "HOME=/root\n"]


@pytest.mark.parametrize(
    "items",
    [
        ["machine example.test login bob password", " pw1xyz"],
        ["machine example.test login bob password ", "pw1xyz", " Done"],
        ["password", " = hunter2xyz"],
        ["password:", "  hunter2xyz"],  # (YAML's lines: the value goes on, indented)
    ],
)
def test_a_value_whose_name_ends_the_item_before_is_replaced_as_in_one_text(items: list[str]) -> None:
    """Text cut inside a line, a space between a name and its value: the value alone is no secret,
    the name alone has none, and the value was kept in the clear, though as one text it is
    replaced. (A value that begins its item glued to the name, or after a line break, is its own
    text: see the test above.)"""
    out = Scrubber().json(items)
    assert "".join(out) == scrub_text("".join(items)) and len(out) == len(items), out
    assert Scrubber().json(out) == out


def test_scrubbing_random_lists_of_trigger_texts_twice_changes_nothing() -> None:
    """Adjacent strings are read together after each is scrubbed alone: a secret one item's
    placeholder (or a neighbour's credential option) ends makes a new neighbour for the next, which
    a second scrub must not read otherwise. The same in a conversation the list caches know."""
    rng = random.Random(1471)
    cases = [
        # (cut to "--secret" by a secret over its boundary, "curl--secret" is an option of a value)
        ["x sharedaccesskeypassword=bedrock-api-key-", "iqojb3jpz2lux2vj", "curl--secret", ":abia"],
        *(
            [
                "".join(rng.choice(_MIX_PIECES) for _ in range(rng.randint(0, 3)))
                for _ in range(rng.randint(2, 6))
            ]
            for _ in range(1500)
        ),
    ]
    for items in cases:
        s = Scrubber()
        once = s.json(items)
        assert len(once) == len(items)
        assert Scrubber().json(once) == once, items
        assert Scrubber(cache=False).json(items) == once, items
        assert s.json({"m": [{"role": "user"}, items]}, parsed=True)["m"][1] == once, items


@pytest.mark.parametrize(
    "text",
    [
        "PASSWORD=\nHOME=/root\n",
        "DB_PASSWORD=\r\nHOME=/root\r\n",
        "password: \nHOME=/root\n",
        "export TOKEN=\nHOME=/root\n",
        "API_KEY:\nHOME=/root\n",
        "x-api-key:\nHOME=/root1\n",
        "Cookie:\nHOME=/root\n",
        "AccountKey=\nabcdefghijklmnopqrstuv==\n",
        # (YAML: an empty value, then a key of the same mapping, a nested mapping, a list)
        "db:\n  password:\n  host: x\n",
        "token:\n  nested: abc\nHOME=/root\n",
        "PASSWORD:\n  host: db1\n",
        "password:\n  - admin1\n",
    ],
)
def test_an_empty_value_at_a_lines_end_does_not_take_the_next_line(text: str) -> None:
    """``PASSWORD=`` and then ``HOME=/root``: the assignment's value was read across the line
    break, and the next line replaced (a line of an ``.env`` file, a header, a YAML key lost). Not
    in text, nor JSON-escaped, nor as the file's lines (with their ends: without, a name's value
    after a space, ``["password: ", "HOME=/root"]``, is read as text cut inside a line)."""
    assert scrub_text(text) == text
    escaped = orjson.dumps(text).decode()
    assert scrub_text(escaped) == escaped
    lines = text.splitlines(keepends=True)
    assert Scrubber().json(lines) == lines


@pytest.mark.parametrize(
    ("text", "secret", "after"),
    [
        # (a block scalar: its indented lines are the value)
        ("password: |\n  hunter2xyz\nnext: 1\n", "hunter2xyz", "\nnext: 1\n"),
        ("db:\n  token: |-\n    abcdEFGH1234xyz\n  host: db1\n", "abcdEFGH1234xyz", "\n  host: db1\n"),
        ("TOKEN: >-  # folded\n    abcdEFGH\n    1234xyz\nnext: 1\n", "abcdEFGH\n    1234xyz", "\nnext: 1\n"),
        ("client_secret: |\r\n  s3cr3tValue42\r\n", "s3cr3tValue42", "\r\n"),
        # (a plain value on the next line, indented)
        ("password:\n  hunter2xyz\nnext: 1\n", "hunter2xyz", "\nnext: 1\n"),
    ],
)
def test_a_yaml_value_on_the_lines_after_its_name_is_replaced(text: str, secret: str, after: str) -> None:
    """YAML carries a value on the lines after its name: a block scalar (``token: |``, ``>-``) and
    a plain scalar indented under it. A block scalar's was kept in the clear."""
    once = scrub_text(text)
    assert not any(part in once for part in secret.split()), once
    assert once.endswith(expected_placeholder("secret-assignment", secret) + after), once
    assert scrub_text(once) == once
    escaped = orjson.dumps(text).decode()
    assert not any(part in scrub_text(escaped) for part in secret.split())


def test_a_constants_final_annotation_is_no_value() -> None:
    """Python's ``NAME: Final = …`` under a credential's name (a compiler's ``DEFAULT_LAST_PASS``,
    ``SECRET: Final``) read ``Final`` as the value, replaced in source a checkpoint restores; the
    same names' values are still replaced."""
    for code in ["DEFAULT_LAST_PASS: Final = 2", "SECRET: Final = 2", "API_TOKEN: Final[str] = 'x'"]:
        assert Scrubber().text(code) == code
    assert Scrubber().text("DB_PASS: s3cretPw99") == "DB_PASS: " + expected_placeholder(
        "secret-assignment", "s3cretPw99"
    )


@pytest.mark.parametrize(
    "text",
    [
        "cd /repo; PWD=/repo ./configure --prefix=/usr\n",
        "cd build; pwd=$(pwd) make install\n",
        "The `pwd` of the shell; pwd=/home/user is where it runs\n",
    ],
)
def test_a_shells_pwd_after_a_semicolon_is_no_odbc_password(text: str) -> None:
    """An ODBC connection string's ``;Pwd=`` was read in any text after a ``;``: a shell command
    setting PWD had the rest of its line, options and all, replaced by a placeholder. A connection
    string's password (to its ``;``, its quote or its line's end) is still replaced."""
    assert scrub_text(text) == text
    odbc = 'conn = "Driver={ODBC};Server=db;Uid=sa;Pwd=my S3cret x;Encrypt=yes"\n'
    assert scrub_text(odbc) == odbc.replace(
        "my S3cret x", expected_placeholder("secret-assignment", "my S3cret x")
    )
    last = "Server=db;Uid=sa; PWD=tiger99\n"
    assert scrub_text(last) == last.replace("tiger99", expected_placeholder("secret-assignment", "tiger99"))
    # (JSON-escaped, the string's quote escaped: the backslash is no part of the password)
    inner = {"conn": "Server=db;Uid=sa;Pwd=tiger99"}
    scrubbed = {"conn": "Server=db;Uid=sa;Pwd=" + expected_placeholder("secret-assignment", "tiger99")}
    escaped = orjson.dumps({"text": orjson.dumps(inner).decode()}).decode()
    assert orjson.loads(orjson.loads(scrub_text(escaped))["text"]) == scrubbed
    twice = orjson.dumps({"text": escaped}).decode()
    assert orjson.loads(orjson.loads(orjson.loads(scrub_text(twice))["text"])["text"]) == scrubbed
