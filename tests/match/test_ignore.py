"""Ignore rules ([match] ignore): what they take out of the match key, how they are read and refused,
how a divergence report marks what they ignored, and the rule it suggests for volatile values."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from subprocess import CompletedProcess
from typing import Any

import openai
import pytest

import forkpoint
from forkpoint.errors import ConfigError
from forkpoint.match import (
    IGNORED,
    Ignore,
    IgnoreRule,
    configured,
    ignore_rules,
    inert_rules,
    load_ignore,
    model_key,
    normalize_request,
    suggest_ignore,
    tool_key,
)
from forkpoint.replay.report import format_divergence, summary_line, verdict
from tests.modelserver import LocalServer

URL = "http://127.0.0.1:1/v1/chat/completions"
HEADERS = {"content-type": "application/json"}


def body(system: str = "Be brief. Current time: 2026-12-01 10:15:19.930158", **extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "hi"}],
        **extra,
    }


def key(b: dict[str, Any], ignore: Ignore) -> str:
    return model_key(normalize_request("POST", URL, HEADERS, b), ignore)


CLOCK = IgnoreRule("$.body.messages[*].content", regex=r"Current time: [^ ]* [^ ]*")


def test_a_regex_rule_ignores_only_the_text_it_matches() -> None:
    rules = Ignore([CLOCK])
    later = body("Be brief. Current time: 2026-12-01 11:00:00.000001")
    assert key(body(), rules) == key(later, rules)
    assert key(body(), Ignore()) != key(later, Ignore())  # without the rule they differ
    # Text outside the match still counts.
    assert key(body(), rules) != key(body("Be verbose. Current time: 2026-12-01 10:15:19.930158"), rules)
    masked = rules.mask(normalize_request("POST", URL, HEADERS, body()))
    assert masked["body"]["messages"][0]["content"] == f"Be brief. {IGNORED}"
    assert masked["body"]["messages"][1]["content"] == "hi"


def test_a_path_rule_ignores_the_whole_value_present_or_not() -> None:
    rules = Ignore([IgnoreRule("$.body.metadata.request_id")])
    a = body(metadata={"request_id": "req_1", "user": "u1"})
    assert key(a, rules) == key(body(metadata={"request_id": "req_2", "user": "u1"}), rules)
    assert key(a, rules) == key(body(metadata={"user": "u1"}), rules)
    assert key(a, rules) != key(body(metadata={"request_id": "req_1", "user": "u2"}), rules)
    # A list item selected whole keeps its place: the items after it still count where they are.
    items = Ignore([IgnoreRule("$.body.messages[0]")])
    assert key(body("anything"), items) == key(body("else"), items)
    swapped = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert key(body(), items) != key(swapped, items)


def test_tool_rules_apply_to_their_tool_only() -> None:
    rules = Ignore([IgnoreRule("$.args.timestamp", tool="search"), IgnoreRule("$.args.nonce", tool="*")])
    assert tool_key("search", {"q": "x", "timestamp": 1}, rules) == tool_key(
        "search", {"q": "x", "timestamp": 2}, rules
    )
    assert tool_key("fetch", {"timestamp": 1}, rules) != tool_key("fetch", {"timestamp": 2}, rules)
    assert tool_key("fetch", {"nonce": "a"}, rules) == tool_key("fetch", {"nonce": "b"}, rules)
    assert tool_key("search", {"q": "x"}, rules) != tool_key("search", {"q": "y"}, rules)
    # A tool rule never touches model calls, nor a model rule tool calls.
    assert key(body(), Ignore([IgnoreRule("$.body.messages", tool="*")])) == key(body(), Ignore())
    assert tool_key("t", {"body": 1}, Ignore([IgnoreRule("$..body")])) == tool_key("t", {"body": 1}, Ignore())


def test_without_rules_the_key_is_what_it_was() -> None:
    norm = normalize_request("POST", URL, HEADERS, body())
    assert Ignore().mask(norm) is norm
    assert Ignore([IgnoreRule("$.args.x", tool="t")]).mask(norm) is norm


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        (
            {"path": "$.messages[0].content"},
            "must start at a field of what the match key of a model call covers",
        ),
        ({"path": "$.body.x", "regex": "("}, "is not a valid regex"),
        ({"path": "$.body.x", "regex": "a*"}, "matches the empty string"),
        ({"path": "$.args.x", "tool": "search", "regx": "y"}, "unknown key(s) regx"),
        ({"regex": "x"}, "a rule needs a path"),
        ({"path": "body.x"}, "must start with '$'"),
        ({"path": "$.body[?x]"}, "cannot read"),
        ({"path": "$.q", "tool": "t"}, "$.tool, $.args"),
        ("$.body.x", "expected a table"),
    ],
)
def test_a_bad_rule_is_refused_naming_where_and_the_rule(rule: Any, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        ignore_rules([{"path": "$.body.ok"}, rule], "forkpoint.toml [match]")
    assert str(err.value).startswith("forkpoint.toml [match]: ignore[1]")
    assert problem in str(err.value)


def test_rules_are_read_from_forkpoint_toml_and_pyproject(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FORKPOINT_CONFIG", raising=False)
    own = tmp_path / "a"
    own.mkdir()
    (own / "forkpoint.toml").write_text(
        "[match]\nignore = [\n"
        "  { path = '$.body.messages[*].content', regex = 'Current time: [^ ]*' },\n"
        "  { tool = 'search', path = '$.args.timestamp' },\n]\n"
    )
    rules = load_ignore(own)
    assert [r.to_json() for r in rules] == [
        {"path": "$.body.messages[*].content", "regex": "Current time: [^ ]*"},
        {"path": "$.args.timestamp", "tool": "search"},
    ]
    assert rules[0].source == f"{own / 'forkpoint.toml'} [match]"
    py = tmp_path / "b"
    py.mkdir()
    (py / "pyproject.toml").write_text(
        '[tool.forkpoint.match]\nignore = [{ path = "$.body.metadata.request_id" }]\n'
    )
    assert load_ignore(py) == (IgnoreRule("$.body.metadata.request_id"),)
    (py / "pyproject.toml").write_text(
        '[tool.forkpoint.match]\nignore = [{ path = "$.body.x", regex = "[" }]\n'
    )
    with pytest.raises(
        ConfigError, match=r"pyproject.toml \[tool.forkpoint.match\]: ignore\[0\] .*not a valid regex"
    ):
        load_ignore(py)
    (py / "pyproject.toml").write_text("[tool.forkpoint.match]\nignored = []\n")
    with pytest.raises(ConfigError, match=r"unknown key\(s\) ignored \(known: ignore\)"):
        load_ignore(py)
    monkeypatch.chdir(own)
    assert configured().rules == rules  # what recorders and replayers start from, here


def test_a_rule_prints_as_toml_that_reads_back() -> None:
    import tomllib

    for rule in (CLOCK, IgnoreRule("$.args['x-y']", tool="it's"), IgnoreRule("$.body.a", regex="\\d+\\n")):
        parsed = tomllib.loads(f"r = {rule.toml()}")["r"]
        assert ignore_rules([parsed], "x") == (rule,)


@pytest.mark.parametrize(
    ("expected", "actual", "rule"),
    [
        ("Current time: 2026-12-01 10:15:19.930158", "Current time: 2026-12-01 10:15:21.733099", "regex"),
        (
            "run 1f0c2c52-8f7b-4c8e-9d7e-2b1f6a1e9c11 now",
            "run 5d1a3c0e-1111-4b2b-8c3c-000000000000 now",
            "regex",
        ),
        ("req_8f7b4c8e9d7e", "req_1111aaaa2222", "whole"),
        # (the id strands' Gemini model makes up for a tool call: secrets.token_urlsafe, '-' and '_' in it)
        ("tooluse_AM5louub9Y7Y3oy-PxUk5g", "tooluse_-mbywA7SX30ZLWzbKN3MRA", "whole"),
        (1764584119.93, 1764584121.7, "whole"),
        ("2026-12-01T10:15:19Z", "2026-12-01T10:16:00Z", "whole"),
    ],
)
def test_volatile_differences_get_a_suggested_rule(expected: Any, actual: Any, rule: str) -> None:
    a = normalize_request("POST", URL, HEADERS, body(metadata={"v": expected}))
    b = normalize_request("POST", URL, HEADERS, body(metadata={"v": actual}))
    [suggested] = suggest_ignore(a, b, Ignore())
    assert suggested.path == "$.body.metadata.v"
    assert (suggested.regex is None) == (rule == "whole")
    assert model_key(a, Ignore([suggested])) == model_key(b, Ignore([suggested]))


def test_no_suggestion_when_something_else_changed() -> None:
    a = normalize_request("POST", URL, HEADERS, body())
    b = normalize_request("POST", URL, HEADERS, body("Be verbose. Current time: 2026-12-01 11:00:00.1"))
    assert suggest_ignore(a, b, Ignore()) == []
    c = normalize_request("POST", URL, HEADERS, body(metadata={"session_id": "abc"}))
    d = normalize_request("POST", URL, HEADERS, body(metadata={"session_id": "abd", "x": 1}))
    assert suggest_ignore(c, d, Ignore()) == []  # one difference is not volatile (an added member)
    # An id-named member with any random value is one.
    e = normalize_request("POST", URL, HEADERS, body(metadata={"session_id": "k3j4h5g6"}))
    f = normalize_request("POST", URL, HEADERS, body(metadata={"session_id": "zz99yy88"}))
    assert suggest_ignore(e, f, Ignore()) == [IgnoreRule("$.body.metadata.session_id")]


def test_no_suggestion_to_ignore_the_digest_of_a_withheld_body() -> None:
    """Two withheld request bodies of one length differ in the key by their SHA-256 alone, hex that
    reads as an id: the divergence suggested ignoring it, which would match any body of that length."""
    a, b = (
        normalize_request(
            "POST", URL, HEADERS, {"$withheld": {"sha256": c * 64, "length": 5, "codings": ["gzip"]}}
        )
        for c in "ab"
    )
    assert suggest_ignore(a, b, Ignore()) == []


def test_a_secret_of_the_same_kind_leaves_a_volatile_difference_its_suggestion() -> None:
    """The key counts a secret by its kind: a request that also sent another key of the same kind
    (an assertion signed afresh) differs in the key only by its timestamp, and the divergence
    suggested no rule, counting the secret's placeholder as a difference that is no id."""
    a = normalize_request(
        "POST", URL, HEADERS, body(metadata={"v": 1764584119.93, "k": "sk-proj-" + "A" * 48})
    )
    b = normalize_request(
        "POST", URL, HEADERS, body(metadata={"v": 1764584121.7, "k": "sk-proj-" + "B" * 48})
    )
    [suggested] = suggest_ignore(a, b, Ignore())
    assert suggested.path == "$.body.metadata.v"
    assert model_key(a, Ignore([suggested])) == model_key(b, Ignore([suggested]))


@pytest.mark.parametrize(
    ("expected", "actual"),
    [
        ("score=0.6181487094123757", "score=0.11866987342425084"),  # a random() in the prompt
        ("total 12345678901234567 items", "total 98765432109876543 items"),
    ],
)
def test_numbers_are_not_taken_for_hex_ids(expected: str, actual: str) -> None:
    """The sixteen digits after ``0.`` were taken for a hex request id, and the report suggested a
    rule that would take every such number (a score, a price) out of matching."""
    a = normalize_request("POST", URL, HEADERS, body(metadata={"v": expected}))
    b = normalize_request("POST", URL, HEADERS, body(metadata={"v": actual}))
    assert suggest_ignore(a, b, Ignore()) == []
    c = normalize_request(
        "POST", URL, HEADERS, body(metadata={"v": "trace 4bf92f3577b34da6a3ce929d0e0e4736"})
    )
    d = normalize_request(
        "POST", URL, HEADERS, body(metadata={"v": "trace 00f067aa0ba902b7a1b2c3d4e5f60718"})
    )
    assert [r.path for r in suggest_ignore(c, d, Ignore())] == ["$.body.metadata.v"]  # hex ids still are


def ask(prompt: str, system: str, base_url: str) -> str:
    client = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    reply = client.chat.completions.create(
        model="m", messages=[{"role": "system", "content": system}, {"role": "user", "content": prompt}]
    )
    return str(reply.choices[0].message.content)


def test_replay_with_rules_from_the_api_and_the_header(server: LocalServer, store: Path) -> None:
    rule = {"path": "$.body.messages[0].content", "regex": r"\d{2}:\d{2}:\d{2}"}
    with forkpoint.record(store=store, ignore=[rule]) as rec:
        first = ask("hi", "time 10:00:00", server.openai_base_url)
    header = forkpoint.Session.load(rec.session_path).header
    assert header["match"] == {"ignore": [rule]}  # kept, so any replay applies it again
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        assert ask("hi", "time 11:22:33", server.openai_base_url) == first
    assert rp.report()["reproduced"]

    with forkpoint.replay(rec.session_path) as rp:
        with pytest.raises(forkpoint.Divergence) as div:
            ask("hello", "time 12:00:00", server.openai_base_url)
    report = div.value.report
    marks = {c["path"]: c.get("ignored", False) for c in report["diff"]}
    assert marks == {"$.body.messages[0].content": True, "$.body.messages[1].content": False}
    assert "(ignored)" in str(div.value) and "suggest" not in report
    assert not rp.report()["reproduced"]


def test_a_divergence_on_a_timestamp_suggests_the_rule(server: LocalServer, store: Path) -> None:
    with forkpoint.record(store=store) as rec:
        ask("hi", "Current time: 2026-12-01 10:15:19.930158", server.openai_base_url)
    server.stop()
    with forkpoint.replay(rec.session_path), pytest.raises(forkpoint.Divergence) as div:
        ask("hi", "Current time: 2026-12-01 10:15:21.733099", server.openai_base_url)
    [suggested] = div.value.report["suggest"]
    assert suggested["path"] == "$.body.messages[0].content"
    text = str(div.value)
    assert "Every difference looks like a timestamp, a uuid or a request id" in text
    assert "  [match]\n  ignore = [\n    { path = '$.body.messages[0].content', regex = '" in text
    assert "record with --deterministic instead" in " ".join(text.split())  # (the program's own, maybe)
    # The suggestion, given back, makes the replay match.
    with forkpoint.replay(rec.session_path, ignore=[suggested]) as rp:
        ask("hi", "Current time: 2026-12-01 10:15:21.733099", server.openai_base_url)
    assert rp.report()["reproduced"]


def test_a_divergence_an_override_caused_suggests_no_rule(server: LocalServer, store: Path) -> None:
    """An override of a tool that returned the time makes the next request differ by a timestamp:
    that is the what-if leaving the recording, which the report said to ignore with a rule (or,
    the session deterministic, to name the module that read the clock)."""

    @forkpoint.tool
    def now() -> str:
        return "2026-12-01 10:15:19.930158"

    def agent() -> None:
        ask("hi", f"Current time: {now()}", server.openai_base_url)

    with forkpoint.record(store=store) as rec:
        agent()
    server.stop()
    spec = 'tool:now.result="2020-01-01 00:00:00.000001"'
    with forkpoint.replay(rec.session_path, overrides=[spec]), pytest.raises(forkpoint.Divergence) as div:
        agent()
    report = div.value.report
    assert "suggest" not in report and "hint_deterministic" not in report
    assert report["after_overrides"] == [spec]
    text = " ".join(str(div.value).split())
    assert "Every difference looks like a timestamp" not in text and "--deterministic" not in text
    assert f"The override applied before this call ({spec}) may be why what the run sent differs" in text
    # (no advice to go on live: a replay that went on live prints this same report)
    assert "--on-divergence live" not in text


def test_a_timestamp_a_live_tool_returned_gives_no_deterministic_hint(
    server: LocalServer, store: Path
) -> None:
    """With --tools live, a tool whose body reads the clock returns another time than recorded and
    the next request differs by it: the report said the session was recorded deterministic and to
    name the module that read it (--deterministic-module), which the tool's live body is not."""
    times = iter(["2026-12-01 10:15:19.930158", "2026-12-01 10:15:21.733099"])

    @forkpoint.tool
    def now() -> str:
        return next(times)

    def agent() -> None:
        ask("hi", f"Current time: {now()}", server.openai_base_url)

    with forkpoint.record(store=store, deterministic=True) as rec:
        agent()
    server.stop()
    with forkpoint.replay(rec.session_path, tools="live"), pytest.raises(forkpoint.Divergence) as div:
        agent()
    report = div.value.report
    assert report["suggest"] and report["after_live_tools"] == 1
    assert "hint_deterministic_modules" not in report and "hint_deterministic" not in report
    text = " ".join(str(div.value).split())
    assert (
        "1 tool call ran live before this call: a value it returned (a time its body read) may be it" in text
    )
    assert "--deterministic-module" not in text and "record with --deterministic instead" not in text


def _ask_with_header(server: LocalServer, name: str, value: str) -> None:
    client = openai.OpenAI(base_url=server.openai_base_url, api_key="sk-test", max_retries=0)
    client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], extra_headers={name: value}
    )


@pytest.mark.parametrize(
    ("name", "recorded", "sent"),
    [
        ("openai-beta", "assistants=2024-05-01", "assistants=2026-10-21"),
        ("anthropic-version", "2023-06-01", "2026-10-21"),
    ],
)
def test_a_date_in_a_header_alone_is_named_as_the_api_version(
    server: LocalServer, store: Path, name: str, recorded: str, sent: str
) -> None:
    """A header an SDK sets with a date in it (``openai-beta``, ``anthropic-version``), changed by
    an upgrade, got the hint to record with ``--deterministic`` "if the program's own code put it
    there": the SDK did, and ``--deterministic`` changes nothing of it. And the report called it "a
    timestamp, a uuid or a request id": it is the version of the API the request is written for."""
    with forkpoint.record(store=store) as rec:
        _ask_with_header(server, name, recorded)
    with forkpoint.replay(rec.session_path), pytest.raises(forkpoint.Divergence) as div:
        _ask_with_header(server, name, sent)
    [suggested] = div.value.report["suggest"]
    assert suggested["path"] == f"$.headers['{name}']", suggested
    assert "hint_deterministic" not in div.value.report
    text = " ".join(str(div.value).split())
    assert "--deterministic" not in text and "timestamp" not in text, text
    assert (
        "Every difference is in a header that names the version or the beta features of the API the "
        f"request is written for ({name}), which an SDK upgrade changes: the API may answer "
        "another version otherwise. If it does not matter, ignore it with this rule" in text
    ), text


def test_a_rule_that_took_nothing_out_is_named_beside_the_suggestion(
    server: LocalServer, store: Path
) -> None:
    """A rule written for the timestamp with a typo in its path (``mesages``) was silently inert:
    the report suggested a rule as if none had been written, and the user was left comparing the
    two by eye. The rule that did nothing is named, with where it was read."""
    typo = {"path": "$.body.mesages[*].content", "regex": "Current time: [^ ]*"}
    with forkpoint.record(store=store, ignore=[typo]) as rec:
        ask("hi", "Current time: 2026-12-01 10:15:19.930158", server.openai_base_url)
    with forkpoint.replay(rec.session_path), pytest.raises(forkpoint.Divergence) as div:
        ask("hi", "Current time: 2026-12-01 10:15:21.733099", server.openai_base_url)
    report = div.value.report
    assert report["suggest"] and [r["path"] for r in report["inert"]] == ["$.body.mesages[*].content"]
    assert "The rule { path = '$.body.mesages[*].content', regex = 'Current time: [^ ]*' }" in str(div.value)
    assert "took nothing out of this call" in str(div.value)
    # A rule that did take its part out is not named.
    good = {"path": "$.body.messages[*].content", "regex": "Current time: [^ ]*"}
    assert inert_rules(
        {"body": {"messages": [{"content": "Current time: 1"}]}},
        {"body": {"messages": [{"content": "Current time: 2"}]}},
        Ignore([IgnoreRule(**good), IgnoreRule(**typo)]),
    ) == [IgnoreRule(**typo)]


def test_a_timestamp_divergence_points_at_deterministic_when_not_recorded_so(
    server: LocalServer, store: Path
) -> None:
    """An agent that stamps its prompt with datetime.now() diverges on replay; an ignore rule was
    the only way out the report named, though recording with deterministic hands the recorded time
    back and keeps the prompt in the match. A session recorded so is not told again."""
    for deterministic in (False, True):
        with forkpoint.record(store=store, deterministic=deterministic) as rec:
            ask("hi", "Current time: 2026-12-01 10:15:19.930158", server.openai_base_url)
        with forkpoint.replay(rec.session_path), pytest.raises(forkpoint.Divergence) as div:
            ask("hi", "Current time: 2026-12-01 10:15:21.733099", server.openai_base_url)
        assert div.value.report["suggest"]
        assert ("record with --deterministic" in str(div.value)) is not deterministic


def test_a_time_read_before_the_recording_began_is_said_to_be_out_of_deterministics_reach(
    server: LocalServer, store: Path
) -> None:
    """A prompt stamped before the recording began (a test module's agent, built at import, at
    pytest's collection: the plugin records the test alone) diverged on replay, recorded
    deterministic, and the report's advice beside the rule was to name the modules the call went
    through: neither they nor --deterministic can hand back a value read before forkpoint recorded.
    A time read while it recorded is not said to be."""
    stamp = datetime.now().isoformat()
    with forkpoint.record(store=store, deterministic=True) as rec:
        ask("hi", f"Current time: {stamp}", server.openai_base_url)
    later = datetime.now().isoformat()  # (the replay's import, before it too)
    with forkpoint.replay(rec.session_path), pytest.raises(forkpoint.Divergence) as div:
        ask("hi", f"Current time: {later}", server.openai_base_url)
    started = forkpoint.Session.load(rec.session_path).header["created"]
    assert div.value.report["read_before_recording"] == {"stamp": stamp, "started": started}
    text = " ".join(str(div.value).split())
    assert f"The recorded {stamp} is from before this recording began ({started})" in text, text
    assert "--deterministic cannot hand it back" in text
    with forkpoint.record(store=store) as rec:
        ask("hi", f"Current time: {datetime.now().isoformat()}", server.openai_base_url)
    with forkpoint.replay(rec.session_path), pytest.raises(forkpoint.Divergence) as div:
        ask("hi", f"Current time: {datetime.now().isoformat()}", server.openai_base_url)
    assert "read_before_recording" not in div.value.report
    assert "before this recording began" not in str(div.value)


def test_a_rule_naming_a_tool_the_session_lacks_is_said_on_replay(
    tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A rule about tool ``serch`` (a typo of ``search``) took nothing out of any call and the
    replay said "replay ok" and nothing else. Each such rule is said, with where it was read and
    the tools the session has: at the start of the replay, in its verdict and a check row's."""
    monkeypatch.delenv("FORKPOINT_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "forkpoint.toml").write_text('[match]\nignore = [{ tool = "fetc", path = "$.args.url" }]\n')

    @forkpoint.tool
    def search(q: str) -> str:
        return "found " + q

    @forkpoint.tool
    def fetch(url: str) -> str:
        return "page " + url

    with forkpoint.record(store=store) as rec:
        search("x")
        fetch("u")
    capsys.readouterr()
    rules = [
        {"tool": "serch", "path": "$.args.q"},
        {"tool": "search", "path": "$.args.q"},
        {"tool": "*", "path": "$.args.x"},
    ]
    with forkpoint.replay(rec.session_path, ignore=rules) as rp:
        search("x")
        fetch("u")
    said = " ".join(capsys.readouterr().err.split())
    report = rp.report()
    assert report["reproduced"], summary_line(report)
    typo = (
        "forkpoint: WARNING: the ignore rule { path = '$.args.q', tool = 'serch' } (forkpoint.replay(ignore=…)) "
        "names tool 'serch', which this session has no call of (its tools: fetch, search): it takes nothing out"
    )
    configured = (
        f"the ignore rule {{ path = '$.args.url', tool = 'fetc' }} ({tmp_path / 'forkpoint.toml'} [match]) "
        "names tool 'fetc', which this session has no call of (its tools: fetch, search): it takes nothing out"
    )
    assert typo in said and configured in said, said
    assert said.count("WARNING") == 2, said
    line = summary_line(report)
    assert line.startswith("replay ok:") and typo.removeprefix("forkpoint: WARNING: ") in line, line
    assert configured in line and "'search'" not in line and "'*'" not in line, line
    row = verdict(report, 0, 0)
    assert row["status"] == "reproduced" and configured in row["detail"], row


def test_a_bad_rule_given_to_the_api_is_refused_before_anything_runs(store: Path) -> None:
    with pytest.raises(ConfigError, match=r"forkpoint.record\(ignore=…\): ignore\[0\]"):
        with forkpoint.record(store=store, ignore=[{"path": "$.messages"}]):
            pass
    assert not store.exists() or not any(store.iterdir())


def test_a_bad_rule_in_the_configuration_is_refused_before_a_session_exists(
    tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("FORKPOINT_CONFIG", raising=False)
    (tmp_path / "forkpoint.toml").write_text('[match]\nignore = [{ path = "$.body.x", regex = "(" }]\n')
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"forkpoint.toml \[match\]: ignore\[0\] .*not a valid regex"):
        with forkpoint.record(store=store):
            pass
    assert not store.exists()


def test_a_misspelt_table_of_the_configuration_is_refused(
    tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``[macth]`` in forkpoint.toml (``[tool.forkpoint.macth]`` in pyproject.toml) was no table
    forkpoint read: its rules never applied, every replay diverged on what they were for, and
    nothing said why, while a misspelt key inside ``[match]`` is refused."""
    monkeypatch.delenv("FORKPOINT_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "forkpoint.toml").write_text('[macth]\nignore = [{ path = "$.body.x" }]\n')
    with pytest.raises(ConfigError, match=r"unknown table\(s\) \[macth\] \(known: match, redact, store\)"):
        with forkpoint.record(store=store):
            pass
    assert not store.exists()
    (tmp_path / "forkpoint.toml").unlink()
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.forkpoint.macth]\nignore = []\n')
    with pytest.raises(ConfigError, match=r"unknown table\(s\) \[tool.forkpoint.macth\]"):
        load_ignore(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n[tool.forkpoint.match]\nignore = []\n')
    assert load_ignore(tmp_path) == ()  # (the project's own tables are no concern of forkpoint's)


def test_a_misspelt_table_of_the_file_forkpoint_config_names_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$FORKPOINT_CONFIG naming a file not called forkpoint.toml (a team's shared rules): its
    ``[macth]`` was read as no table, its rules never applied, and nothing said why."""
    team = tmp_path / "team.toml"
    team.write_text('[macth]\nignore = [{ path = "$.body.x" }]\n')
    monkeypatch.setenv("FORKPOINT_CONFIG", str(team))
    with pytest.raises(ConfigError, match=r"team.toml: unknown table\(s\) \[macth\]"):
        load_ignore(tmp_path)
    team.write_text('[match]\nignore = [{ path = "$.body.x" }]\n')
    assert len(load_ignore(tmp_path)) == 1


INSTALLED_AGENT = """
import os
from datetime import datetime

import openai

client = openai.OpenAI(base_url=os.environ["BASE_URL"], api_key="sk-test", max_retries=0)
client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"Now: {datetime.now()}"}])
"""


def installed(
    tmp_path: Path, server: LocalServer, package: str, **files: str
) -> Callable[..., CompletedProcess[str]]:
    """``package`` installed (in a ``site-packages`` folder of ``tmp_path``) with ``files``, and a
    ``forkpoint`` command line that runs in ``tmp_path`` with it importable and ``BASE_URL`` set."""
    folder = tmp_path / "lib" / "site-packages" / package
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("")
    for name, text in files.items():
        (folder / f"{name}.py").write_text(text)
    env = {**os.environ, "BASE_URL": server.openai_base_url}
    env["PYTHONPATH"] = os.pathsep.join([str(folder.parent), *sys.path])

    def forkpoint_cli(*args: str) -> CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "forkpoint.cli", *args], cwd=tmp_path, env=env, capture_output=True,
            text=True, timeout=120,
        )  # fmt: skip

    return forkpoint_cli


@pytest.mark.slow
def test_an_agent_installed_as_a_package_is_named_to_deterministic(
    server: LocalServer, tmp_path: Path
) -> None:
    """An agent installed as a package (a container's ``pip install .``) is not the program's own
    code to ``--deterministic``: its ``datetime.now()`` was not recorded, the replay diverged on it,
    and the only way to name its module was the Python API. ``forkpoint record
    --deterministic-module`` names it; a replay that diverged so says how."""
    forkpoint_cli = installed(tmp_path, server, "myagent", __main__=INSTALLED_AGENT)
    agent = ["--store", "s", "--", sys.executable, "-m", "myagent"]
    assert forkpoint_cli("record", "--no-workspace", "--deterministic", *agent).returncode == 0
    diverged = forkpoint_cli("replay", "last", "--store", "s")
    said = " ".join(diverged.stderr.split())
    assert diverged.returncode == 3, diverged.stderr
    assert "This call was made through code it leaves out: myagent." in said, said
    assert "record with forkpoint record --deterministic-module myagent (" in said, said
    assert "record with --deterministic instead" not in said, said
    rec = forkpoint_cli("record", "--no-workspace", "--deterministic-module", "myagent", *agent)
    assert rec.returncode == 0, rec.stderr
    replayed = forkpoint_cli("replay", "last", "--store", "s")
    assert replayed.returncode == 0 and "replay ok" in replayed.stderr, replayed.stderr


STAMPING_PACKAGE = """
import os
from datetime import datetime

import openai


def system() -> str:
    return f"You are helpful. Current time: {datetime.now()}"


def run(task: str) -> str:
    client = openai.OpenAI(base_url=os.environ["BASE_URL"], api_key="sk-test", max_retries=0)
    messages = [{"role": "system", "content": system()}, {"role": "user", "content": task}]
    return str(client.chat.completions.create(model="m", messages=messages).choices[0].message.content)
"""


@pytest.mark.slow
def test_a_time_an_installed_package_stamps_names_the_package_to_record(
    server: LocalServer, tmp_path: Path
) -> None:
    """A script whose installed package (``mypkg``) stamps ``datetime.now()`` into the prompt: the
    replay diverged on the time, recorded with ``--deterministic`` or not, and the hint said to
    record with ``--deterministic`` (which leaves an installed package out) or to name "its
    module" without saying which. It names the code outside the recorded selection the call was
    made through, and the command that records it, which then replays."""
    forkpoint_cli = installed(tmp_path, server, "mypkg", agent=STAMPING_PACKAGE)
    (tmp_path / "agent.py").write_text("from mypkg.agent import run\n\nprint(run('hi'))\n")
    agent = ["--store", "s", "--", sys.executable, "agent.py"]
    command = "forkpoint record --deterministic-module __main__ --deterministic-module mypkg ("
    for deterministic in ([], ["--deterministic"]):
        assert forkpoint_cli("record", "--no-workspace", *deterministic, *agent).returncode == 0
        diverged = forkpoint_cli("replay", "last", "--store", "s")
        said = " ".join(diverged.stderr.split())
        assert diverged.returncode == 3, diverged.stderr
        leaves_out = "it" if deterministic else "--deterministic"
        assert (
            f"This call was made through code {leaves_out} leaves out: mypkg. If that put it there" in said
        ), said
        assert command in said and 'deterministic=["__main__", "mypkg"] in the API' in said, said
        assert "name its module (forkpoint record --deterministic-module MODULE" not in said, said
    named = command.removeprefix("forkpoint record ").removesuffix(" (").split()
    assert forkpoint_cli("record", "--no-workspace", *named, *agent).returncode == 0
    replayed = forkpoint_cli("replay", "last", "--store", "s")
    assert replayed.returncode == 0 and "replay ok" in replayed.stderr, replayed.stderr


def test_a_time_agno_stamps_into_its_system_prompt_names_agno(server: LocalServer, store: Path) -> None:
    """agno with ``add_datetime_to_context`` (its own code reads the clock), recorded
    deterministic: the hint to name "its module" did not say that the module is agno's."""
    pytest.importorskip("agno")
    from agno.agent import Agent
    from agno.models.openai import OpenAIChat

    def run() -> None:
        model = OpenAIChat(id="m", base_url=server.openai_base_url, api_key="sk-test", max_retries=0)
        Agent(model=model, add_datetime_to_context=True, telemetry=False).run("hi")

    with forkpoint.record(store=store, deterministic=True) as rec:
        run()
    server.stop()
    with forkpoint.replay(rec.session_path) as rp:
        run()  # (agno catches the Divergence, and logs it)
    report = rp.report()["divergence"]
    assert report["hint_deterministic_modules"] is True and report["left_out_modules"] == ["agno"]
    assert report["deterministic_selection"] == ["tests", "agno"]
    assert "This call was made through code it leaves out: agno." in " ".join(
        format_divergence(report).split()
    )
