"""Properties (hypothesis): canonical JSON and match keys, the scrubber, and log round trips."""

from __future__ import annotations

import json
import random
import shutil
import string
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from forkpoint import redact, verify
from forkpoint.canonical import canonical_json, digest
from forkpoint.log import Session, SessionWriter
from forkpoint.match import model_key, normalize_request, tool_key

SETTINGS = settings(
    max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)

# ----------------------------------------------------------------------------- strategies

INT64 = st.integers(min_value=-(2**63), max_value=2**64 - 1)
FINITE = st.floats(allow_nan=False, allow_infinity=False)
SCALARS = st.none() | st.booleans() | INT64 | FINITE | st.text(max_size=40)
JSON = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=25,
)


def _shuffled(value: Any, rng: random.Random) -> Any:
    """The same JSON value with every object's keys in another order."""
    if isinstance(value, dict):
        items = [(k, _shuffled(v, rng)) for k, v in value.items()]
        rng.shuffle(items)
        return dict(items)
    if isinstance(value, list):
        return [_shuffled(v, rng) for v in value]
    return value


# ----------------------------------------------------------------------------- canonical JSON


@SETTINGS
@given(JSON, st.randoms(use_true_random=False))
def test_canonical_json_ignores_key_order_and_is_stable(value: Any, rng: random.Random) -> None:
    c = canonical_json(value)
    assert canonical_json(_shuffled(value, rng)) == c
    assert canonical_json(orjson.loads(c)) == c  # parse, write again: the same bytes
    assert digest(value) == digest(orjson.loads(c))


@SETTINGS
@given(JSON)
def test_escaped_and_literal_forms_of_the_same_document_are_one(value: Any) -> None:
    """Python's json writes \\uXXXX escapes (surrogate pairs for astral characters); orjson writes
    UTF-8. Parsed, both are the same value and the same canonical bytes."""
    escaped = json.dumps(value, ensure_ascii=True)
    assert canonical_json(orjson.loads(escaped)) == canonical_json(value)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (-0.0, b"-0.0"),
        (0.0, b"0.0"),
        (1e308, b"1e+308"),
        (-1e-308, b"-1e-308"),
        (2**64 - 1, b"18446744073709551615"),
        (-(2**63), b"-9223372036854775808"),
        (1, b"1"),
        (1.0, b"1.0"),
        ("\ud83d\ude00", "\U0001f600".encode()),
    ],
)
def test_numbers_have_one_canonical_form(value: Any, text: bytes) -> None:
    if isinstance(value, str):  # a surrogate pair written as two code points is not one character
        with pytest.raises(TypeError):
            canonical_json(value)
        assert canonical_json(orjson.loads(json.dumps(value))) == b'"' + text + b'"'
        return
    assert canonical_json(value) == text
    assert canonical_json(orjson.loads(text)) == text


@SETTINGS
@given(
    st.integers(min_value=2**64)
    | st.integers(max_value=-(2**63) - 1)
    | st.text(max_size=5).map(lambda t: t + "\ud800")
    | st.sampled_from(["a\udfffb"])
)
def test_what_canonical_json_cannot_hold_is_refused_not_mangled(value: Any) -> None:
    with pytest.raises(TypeError):
        canonical_json({"v": value})


# ----------------------------------------------------------------------------- match keys


HEADERS = st.lists(
    st.tuples(
        st.sampled_from(
            [
                "Content-Type",
                "content-type",
                "X-Stainless-Retry-Count",
                "User-Agent",
                "Authorization",
                "x-request-id",
            ]
        ),
        st.text(string.ascii_letters + string.digits + "/;=-", min_size=1, max_size=20),
    ),
    max_size=5,
)


@SETTINGS
@given(
    JSON,
    st.lists(
        st.tuples(
            st.text(string.ascii_lowercase, min_size=1, max_size=5), st.text(string.ascii_letters, max_size=5)
        ),
        max_size=4,
    ),
    HEADERS,
    st.randoms(use_true_random=False),
    st.sampled_from(["http://127.0.0.1:8765", "https://api.example.com", "http://localhost:1"]),
)
def test_the_match_key_ignores_what_does_not_change_the_question(
    body: Any, query: list[tuple[str, str]], headers: list[tuple[str, str]], rng: random.Random, host: str
) -> None:
    qs = "&".join(f"{k}={v}" for k, v in query)
    base = normalize_request(
        "POST", f"http://127.0.0.1/v1/chat/completions?{qs}", [["content-type", "application/json"]], body
    )
    shuffled_query = query[:]
    rng.shuffle(shuffled_query)
    qs2 = "&".join(f"{k}={v}" for k, v in shuffled_query)
    noisy = [["Content-Type", "application/json; charset=utf-8"]] + [
        [k, v] for k, v in headers if k.lower() != "content-type"
    ]
    other = normalize_request("post", f"{host}/v1/chat/completions?{qs2}", noisy, _shuffled(body, rng))
    assert model_key(other) == model_key(base)
    assert model_key(normalize_request("POST", "http://127.0.0.1/v1/other", [], body)) != model_key(base)


@pytest.mark.slow
@SETTINGS
@given(st.dictionaries(st.text(max_size=8), JSON, max_size=4), st.randoms(use_true_random=False))
def test_tool_keys_ignore_argument_order(args: dict[str, Any], rng: random.Random) -> None:
    assert tool_key("t", _shuffled(args, rng)) == tool_key("t", args)


# ----------------------------------------------------------------------------- the scrubber

_R = random.Random(99)


def _tok(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(_R.choice(alphabet) for _ in range(n))


SECRETS = [
    "sk-proj-" + _tok(40),
    "sk-ant-api03-" + _tok(60),
    "AKIA" + _tok(16, string.ascii_uppercase + string.digits),
    "AIza" + _tok(35),
    "ghp_" + _tok(36),
    "glpat-" + _tok(20),
    "xoxb-" + _tok(30),
    "hf_" + _tok(34),
    "eyJ" + _tok(20) + ".eyJ" + _tok(30) + "." + _tok(20),
    "Bearer " + _tok(30) + "9",
    "postgres://u:" + _tok(12) + "@db:5432/x",
    "DB_PASSWORD=" + _tok(14),
    '"client_secret": "' + _tok(18) + '"',
    "-----BEGIN PRIVATE KEY-----\n" + _tok(64) + "\n-----END PRIVATE KEY-----",
    "?access_token=" + _tok(20),
    "itk_" + _tok(16),  # a user rule
]
RULES = redact.Rules(patterns=(("internal", r"itk_[A-Za-z0-9]{16}"),), json_paths=("$..ssn",))
FILLER = st.text(alphabet=st.characters(codec="utf-8"), max_size=30)
SEP = st.sampled_from([" ", "\n", ", ", "\t", " (", ") ", "\u00e9 ", "✓ "])


@st.composite
def text_with_secrets(draw: Any) -> tuple[str, list[str]]:
    parts, planted = [], []
    for _ in range(draw(st.integers(0, 4))):
        parts.append(draw(FILLER))
        parts.append(draw(SEP))
        s = draw(st.sampled_from(SECRETS))
        planted.append(s)
        parts.append(s)
        parts.append(draw(SEP))
    parts.append(draw(FILLER))
    return "".join(parts), planted


def _core(secret: str) -> str:
    """The random part of a planted secret (what must never survive)."""
    for sep in ("=", "://u:", "Bearer ", '": "', "\n"):
        if sep in secret:
            secret = secret.split(sep, 1)[1]
    return secret.split("@")[0].split('"')[0].split("\n")[0]


@SETTINGS
@given(text_with_secrets())
@example(("a" * 300 + " sk-proj-" + "Q" * 40, ["sk-proj-" + "Q" * 40]))
def test_scrubbing_is_idempotent_deterministic_and_removes_every_secret(case: tuple[str, list[str]]) -> None:
    text, planted = case
    s = redact.Scrubber(RULES)
    once = s.text(text)
    assert s.text(once) == once  # idempotent
    assert redact.Scrubber(RULES, cache=False).text(text) == once  # deterministic, cache or not
    assert s.text(text) == once
    for secret in planted:
        assert _core(secret) not in once, (secret, once)
    # nothing grows a secret back: scrubbing the scrubbed text again, in any context, adds none
    assert all(_core(sec) not in s.text(once + " " + once) for sec in planted)
    # bytes are scrubbed as their UTF-8 text
    assert s.bytes(text.encode()) == once.encode()


@SETTINGS
@given(FILLER)
def test_text_without_trigger_words_is_untouched(text: str) -> None:
    assume(
        not any(w in text.lower() for w in ("sk", "key", "token", "pass", "secret", "://", "bearer", "basic"))
    )
    assert redact.Scrubber(RULES).text(text) == text


@SETTINGS
@given(text_with_secrets(), st.lists(st.integers(0, 400), max_size=6), st.binary(max_size=8))
def test_chunked_scrubbing_equals_scrubbing_the_whole(
    case: tuple[str, list[str]], cuts: list[int], junk: bytes
) -> None:
    data = case[0].encode() + junk  # not necessarily UTF-8 at the end
    points = sorted({min(c, len(data)) for c in cuts})
    chunks = [data[a:b] for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    s = redact.Scrubber(RULES)
    whole = s.bytes(data)
    out = s.chunks(chunks)
    assert len(out) == len(chunks)
    assert b"".join(out) == whole
    # a chunk no secret touches is returned as it was, and scrubbing again changes nothing
    spans = s.find(data.decode("utf-8", "surrogateescape"))
    pos = 0
    for c, o in zip(chunks, out, strict=True):
        if not spans:
            assert o == c
        pos += len(c)
    assert s.chunks(out) == out


@SETTINGS
@given(JSON)
def test_scrubbed_json_is_idempotent(value: Any) -> None:
    s = redact.Scrubber(RULES)
    once = s.json(value)
    assert s.json(once) == once


# ----------------------------------------------------------------------------- log round trips

RESERVED = st.sampled_from(["$blob", "$b64", "$delta", "$lit", "$u", "$int", "$kv", "type", "size", "bytes"])
KEYS = st.text(max_size=10) | RESERVED
ODD_KEYS = KEYS | st.text(max_size=3).map(lambda t: t + "\udcff")  # an object keyed by bad file names
LEAVES = (
    st.none()
    | st.booleans()
    | INT64
    | st.integers(min_value=2**64, max_value=2**90)
    | FINITE
    | st.text(max_size=30)
    | st.text(max_size=3).map(lambda t: t + "\udcff")  # a lone surrogate (os.fsdecode of a bad name)
    | st.binary(max_size=300)
    | st.sampled_from(["x" * 1100, "ü" * 600, "y" * 5000])  # blobs
)
EVENT_DATA = st.recursive(
    LEAVES,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(ODD_KEYS, children, max_size=4),
    max_leaves=20,
)


@contextmanager
def _store() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="forkpoint-prop-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _payload(e: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in e.items() if k not in ("seq", "prev", "hash", "ts")}


@pytest.mark.slow
@SETTINGS
@given(
    st.lists(
        st.dictionaries(
            KEYS.filter(
                lambda k: (
                    k not in ("type", "seq", "prev", "hash", "torn", "ts", "$enc", "$files", "$zstd", "$dict")
                )
            ),
            EVENT_DATA,
            max_size=4,
        ),
        min_size=1,
        max_size=4,
    )
)
def test_any_event_survives_write_and_load_exactly(datas: list[dict[str, Any]]) -> None:
    events = [{"type": "note", **d} for d in datas]
    with redact.use_rules(None) as s, _store() as store:
        w = SessionWriter.create(store, {"argv": ["p"]}, fsync="never")
        for e in events:
            w.append(e)
        w.close()
        loaded = Session.load(w.path)
        assert [_payload(e) for e in loaded.events] == [s.event(e) for e in events]
        v = verify(w.path)
        assert v.ok, v.problems


MESSAGE = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "tool"]),
        "content": st.text(max_size=20) | st.sampled_from(["z" * 2000]),
    }
)


@SETTINGS
@given(
    st.lists(st.lists(MESSAGE, min_size=1, max_size=4), min_size=1, max_size=5),
    st.randoms(use_true_random=False),
)
def test_model_calls_with_delta_encoding_round_trip(
    turns: list[list[dict[str, Any]]], rng: random.Random
) -> None:
    """Bodies that share prefixes (an agent resending its history), edited or shrunk at random."""
    history: list[dict[str, Any]] = []
    bodies = []
    for new in turns:
        if history and rng.random() < 0.2:
            history = history[: rng.randrange(len(history))]  # shrunk
        history = [*history, *new]
        bodies.append(
            {"model": "m", "messages": list(history), "tools": [{"$lit": 1}] if rng.random() < 0.3 else []}
        )
    with redact.use_rules(None), _store() as store:
        w = SessionWriter.create(store, {"argv": ["p"]}, fsync="never")
        for b in bodies:
            w.append(
                {
                    "type": "model_call",
                    "request": {
                        "method": "POST",
                        "url": "http://127.0.0.1/v1/x",
                        "headers": [],
                        "body_kind": "json",
                        "body": b,
                    },
                    "response": None,
                }
            )
        w.close()
        loaded = Session.load(w.path)
        assert [e["request"]["body"] for e in loaded.events] == bodies
        assert verify(w.path).ok
