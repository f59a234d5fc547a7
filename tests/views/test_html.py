"""``forkpoint show SESSION --html FILE``: the self-contained session viewer, checked in a real
headless Chromium (Debian's ``/usr/bin/chromium``, driven by Playwright).

The demo agent is recorded in-process against the demo model server with a workspace (so the
session has checkpoints) and a note whose text tries to break out of the embedded JSON; then a
what-if run overrides the run_tests result and continues live, which gives a child session with
replayed, overridden and live events and a divergence from its parent.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import forkpoint
from forkpoint.checkpoint import manifest_rows
from forkpoint.cli import main
from forkpoint.demo.agent import TASK, run_agent
from forkpoint.demo.server import ModelServer
from forkpoint.html import render, stream_frames, view_model, write_html
from forkpoint.log import Session
from forkpoint.outcome import by_checkpoint
from forkpoint.providers import recorded_response, response_text
from tests.modelserver import LocalServer

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
NASTY = "</script><script>window.__pwned = 1</script><!-- & \u2028 '\" </SCRIPT"
FAILING = 'tool:run_tests.result={"passed":0,"failed":2,"output":"FAIL"}'


@dataclass
class Pages:
    store: Path
    session: Session
    child: Session
    session_html: Path
    child_html: Path


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Pages:
    base = tmp_path_factory.mktemp("html")
    store, work = base / "store", base / "work"
    with ModelServer(turns=2, seed=3) as srv:
        with forkpoint.record(store=store, workspace=work) as rec:
            forkpoint.note(NASTY, data={"why": NASTY})
            run_agent(srv.base_url, work, echo=None)
        session = Session.load(rec.session_path)
        with forkpoint.replay(session, overrides=[FAILING], on_divergence="live") as rp:
            run_agent(srv.base_url, work, echo=None)
    child = Session.load(rp.report()["child_session"])
    session_html = base / "session.html"
    result = CliRunner().invoke(
        main, ["show", session.id, "--store", str(store), "--html", str(session_html)]
    )
    assert result.exit_code == 0, result.output
    child_html = write_html(child, base / "child.html")
    return Pages(store, session, child, session_html, child_html)


# --------------------------------------------------------------------------- without a browser


def test_json_and_html_together_are_refused(pages: Pages, tmp_path: Path) -> None:
    """``show X --json --html F`` wrote the page and silently ignored ``--json``."""
    both = CliRunner().invoke(
        main,
        ["show", pages.session.id, "--store", str(pages.store), "--json", "--html", str(tmp_path / "p.html")],
    )
    assert both.exit_code == 2 and "--json and --html are two outputs" in both.output
    assert not (tmp_path / "p.html").exists()


def test_page_is_one_self_contained_file(pages: Pages) -> None:
    page = pages.session_html.read_text()
    assert oct(pages.session_html.stat().st_mode & 0o777) == "0o600"
    # No external resource of any kind; the CSP forbids every fetch.
    assert not re.search(r"<(script|link|img|iframe)[^>]*\s(src|href)=\"(?!data:)", page)
    assert "default-src 'none'" in page
    assert page.count("<script") == 2  # the data, and the viewer
    # The embedded JSON cannot close its element, and decodes to the view model exactly.
    m = re.search(r'<script type="application/json" id="forkpoint-data">(.*?)</script>', page, re.S)
    assert m is not None
    embedded = m.group(1)
    assert "<" not in embedded and ">" not in embedded and "\u2028" not in embedded
    data, model = json.loads(embedded), json.loads(json.dumps(view_model(pages.session)))
    # A model call holds the messages after those it shares with the call before; the script
    # rebuilds the list from them.
    last: list[int] = []
    kept = []
    for shown in data["events"]:
        if shown["type"] == "model_call":
            kept.append(shown["messages_keep"])
            shown["messages"] = last = last[: shown.pop("messages_keep")] + shown["messages"]
    assert data == model and kept[0] == 0 and any(kept), kept
    assert NASTY in data["events"][0]["text"]


def test_stream_frames_add_up_to_the_response(pages: Pages) -> None:
    for e in pages.session.by_type("model_call"):
        frames, exact = stream_frames(e)
        text = response_text(e["request"]["url"], recorded_response(e))
        if text:
            assert exact and len(frames) > 1
            assert "".join(t for _, t in frames) == text
            offsets = [ms for ms, _ in frames]
            assert offsets == sorted(offsets)
        else:
            assert frames == []  # a tool-call-only answer has no text to play


def test_stream_frames_of_an_anthropic_stream() -> None:
    def sse(kind: str, obj: dict[str, Any]) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **obj})}\n\n"

    stream = [
        sse("message_start", {"message": {"id": "msg_1", "model": "claude", "usage": {"input_tokens": 3}}}),
        sse("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        sse("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "Hel"}}),
        # one event split across two chunks
        sse("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "lo!"}})[:30],
        sse("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "lo!"}})[30:],
        sse("message_delta", {"delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
        sse("message_stop", {}),
    ]
    event = {
        "request": {"url": "https://api.anthropic.com/v1/messages"},
        "summary": {"api": "messages"},
        "response": {
            "status": 200,
            "body_kind": "stream",
            "chunks": [[10.0 * (i + 1), c] for i, c in enumerate(stream)],
        },
    }
    frames, exact = stream_frames(event)
    assert exact
    assert frames == [[30.0, "Hel"], [50.0, "lo!"]]


# --------------------------------------------------------------------------- in headless Chromium


@dataclass
class Browser:
    page: Any
    console: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def open(self, path: Path) -> Any:
        self.page.goto(path.resolve().as_uri())
        self.page.wait_for_selector("html[data-ready]", timeout=10_000)
        return self.page

    def assert_clean(self, path: Path) -> None:
        assert self.errors == [], self.errors
        assert [c for c in self.console if c[0] in ("error", "warning")] == []
        assert self.failed == [], self.failed
        assert self.requests == [path.resolve().as_uri()]  # the page itself, nothing else
        assert self.dialogs == []


def expect(locator: Any) -> Any:
    """Playwright's retrying assertions (imported late: the chromium fixture skips without it)."""
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is absent: install Debian's chromium (apt-get install -y chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="needs the playwright Python package")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def browser(chromium: Any) -> Iterator[Browser]:
    context = chromium.new_context(viewport={"width": 1280, "height": 900}, java_script_enabled=True)
    page = context.new_page()
    b = Browser(page)
    page.on("console", lambda m: b.console.append((m.type, m.text)))
    page.on("pageerror", lambda e: b.errors.append(str(e)))
    page.on("request", lambda r: b.requests.append(r.url))
    page.on("requestfailed", lambda r: b.failed.append(r.url))

    def dialog(d: Any) -> None:
        b.dialogs.append(d.message)
        d.dismiss()

    page.on("dialog", dialog)
    try:
        yield b
    finally:
        context.close()


@pytest.mark.slow
def test_every_event_is_shown_and_nothing_is_fetched(pages: Pages, browser: Browser) -> None:
    page = browser.open(pages.session_html)
    events = pages.session.events
    assert page.locator("details.event").count() == len(events)
    for kind in ("model_call", "tool_call", "checkpoint", "note", "end"):
        assert page.locator(f"details.event.{kind}").count() == len(pages.session.by_type(kind)), kind
    seqs = page.eval_on_selector_all("details.event", "els => els.map(e => Number(e.dataset.seq))")
    assert sorted(seqs) == [e["seq"] for e in events]
    # The note that tried to close the JSON element is shown as text; no script of it ran.
    assert page.locator("details.event.note .title").inner_text() == " ".join(NASTY.split())
    assert page.evaluate("window.__pwned") is None
    # Expand everything: every body renders without an error.
    page.click("#expand-all")
    # Bodies are built in the "toggle" handler, which Chromium fires as a task after the click
    # returns: wait for them rather than count at once.
    expect(page.locator("details.event[open] > .body")).to_have_count(len(events))
    # The first model call lists its request messages.
    first = page.locator("details.event.model_call").first
    assert TASK in first.locator(".msgs").inner_text()
    # The last one rebuilds the messages it shares with the call before (the page holds only the
    # new ones): every message counted, the earlier ones folded.
    shown = [e for e in view_model(pages.session)["events"] if e["type"] == "model_call"][-1]
    last = page.locator("details.event.model_call").last.inner_text()
    assert (
        f"{len(shown['messages'])} messages · " in last
        and " earlier messages (sent in previous turns)" in last
    )
    browser.assert_clean(pages.session_html)


@pytest.mark.slow
def test_expanding_a_tool_call_shows_its_arguments(pages: Pages, browser: Browser) -> None:
    page = browser.open(pages.session_html)
    write = pages.session.by_type("tool_call")[0]
    card = page.locator(f"#ev-{write['seq']}")
    assert card.locator(".args").count() == 0  # bodies are built when opened
    card.locator("summary").click()
    args = card.locator(".args")
    args.wait_for()
    assert args.is_visible()
    text = args.inner_text()
    assert write["args"]["path"] in text
    assert write["args"]["content"].splitlines()[0] in text
    assert str(write["result"]["bytes"]) in card.locator(".result").inner_text()
    browser.assert_clean(pages.session_html)


@pytest.mark.slow
def test_stream_player_renders_the_response_at_recorded_speed(pages: Pages, browser: Browser) -> None:
    page = browser.open(pages.session_html)
    last = pages.session.by_type("model_call")[-1]
    text = response_text(last["request"]["url"], recorded_response(last))
    frames, _ = stream_frames(last)
    card = page.locator(f"#ev-{last['seq']}")
    card.locator("summary").click()
    player = card.locator(".player")
    out = card.locator(".response-text")
    # Watch the text grow.
    page.evaluate(
        """el => { window.__lengths = []; new MutationObserver(() => window.__lengths.push(el.textContent.length))
                   .observe(el, {childList: true, characterData: true, subtree: true}); }""",
        out.element_handle(),
    )
    # At high speed: the whole text, frame by frame.
    player.locator("select.speed").select_option("100")
    player.locator("button.play").click()
    page.wait_for_selector(f"#ev-{last['seq']} .player[data-state=done]", timeout=10_000)
    assert out.inner_text() == text
    assert player.get_attribute("data-frames-played") == str(len(frames))
    # At a quarter of the recorded speed it takes (at least) four times the recorded stream time,
    # and the text appears in pieces.
    page.evaluate("window.__lengths = []")
    player.locator("select.speed").select_option("0.25")
    started = page.evaluate("performance.now()")
    player.locator("button.play").click()
    page.wait_for_selector(f"#ev-{last['seq']} .player[data-state=done]", timeout=20_000)
    elapsed = page.evaluate("performance.now()") - started
    assert elapsed >= frames[-1][0] * 4 * 0.9
    partial = {n for n in page.evaluate("window.__lengths") if 0 < n < len(text)}
    assert len(partial) >= 2
    assert out.inner_text() == text
    browser.assert_clean(pages.session_html)


@pytest.mark.slow
def test_checkpoints_are_shown(pages: Pages, browser: Browser) -> None:
    page = browser.open(pages.session_html)
    cps = pages.session.by_type("checkpoint")
    assert len(cps) == 3
    assert page.locator("details.event.checkpoint").count() == 3
    assert page.locator("details.event.checkpoint .badge.resumable").count() == 3
    assert page.locator(".track .blk.checkpoint").count() == 3
    last = cps[-1]
    card = page.locator(f"#ev-{last['seq']}")
    card.locator("summary").click()
    table = card.locator("table.files")
    table.wait_for()
    for row in manifest_rows(last["workspace"]):
        assert row[0] in table.inner_text()
    assert f"{pages.session.id}@{last['seq']}" in card.inner_text()  # how to restore it
    browser.assert_clean(pages.session_html)


@pytest.mark.slow
def test_the_sweep_verdict_names_checkpoints_no_arm_passed_from(
    pages: Pages, browser: Browser, tmp_path: Path
) -> None:
    """Arms from a later checkpoint passed and those from an earlier one all failed: the page said
    "Arms passed from every checkpoint", untrue of the earlier one."""
    seqs = [c["seq"] for c in pages.session.by_type("checkpoint")]
    sweep = by_checkpoint([(seqs[0], False), (seqs[1], True)], {})
    page = browser.open(write_html(pages.session, tmp_path / "sweep.html", sweep=sweep))
    assert page.locator("#sweep-verdict").inner_text() == (
        f"Arms passed from the last measured checkpoint: still recoverable at #{seqs[1]}, "
        f"though no arm passed from #{seqs[0]}."
    )


@pytest.mark.slow
def test_the_sweep_says_which_arms_were_not_measured(pages: Pages, browser: Browser, tmp_path: Path) -> None:
    """Arms that ran and were not measured (stopped by --arm-timeout before they went live, or that
    made no call from their checkpoint) read "No arm ran." and "not run" on the page, untrue of arms
    that ran (sweep said "no arm was measured"), and a checkpoint's tip said nothing of the arms of
    it that were left out of its rate."""
    seqs = [c["seq"] for c in pages.session.by_type("checkpoint")]
    turns = {seqs[0]: 1, seqs[1]: 2}
    none = by_checkpoint([(seqs[0], None), (seqs[1], None)], turns)
    page = browser.open(write_html(pages.session, tmp_path / "none.html", sweep=none))
    assert page.locator("#sweep-verdict").inner_text() == (
        "No arm was measured, from any checkpoint: nothing says whether the run was recoverable."
    )
    column = page.locator(f'.sweep-col[data-seq="{seqs[0]}"]')
    assert column.locator(".lbl.muted").inner_text() == "not measured"
    assert column.get_attribute("title") == f"checkpoint #{seqs[0]} (turn 1): no arm measured"
    some = by_checkpoint([(seqs[0], True), (seqs[0], None)], turns)
    page = browser.open(write_html(pages.session, tmp_path / "some.html", sweep=some))
    tip = page.locator(f'.sweep-col[data-seq="{seqs[0]}"]').get_attribute("title")
    assert tip is not None and tip.startswith(f"checkpoint #{seqs[0]} (turn 1): 1/1 arms passed, 95% CI"), tip
    assert tip.endswith("; 1 more arm(s) not measured, left out"), tip
    assert page.locator("#sweep-unmeasured").count() == 0  # (no why given: none listed)
    # Each arm that ran and measured nothing is drawn with why: in the tip, and listed under the chart.
    why = "its command never started forkpoint's replay"
    some = by_checkpoint([(seqs[0], True), (seqs[0], None), (seqs[1], None), (seqs[1], None)], turns, [
        (seqs[0], why), (seqs[1], why), (seqs[1], why)
    ])  # fmt: skip
    page = browser.open(write_html(pages.session, tmp_path / "why.html", sweep=some))
    tip = page.locator(f'.sweep-col[data-seq="{seqs[0]}"]').get_attribute("title")
    assert tip is not None and tip.endswith(f"; 1 more arm(s) not measured, left out: {why}"), tip
    assert page.locator(f'.sweep-col[data-seq="{seqs[1]}"]').get_attribute("title") == (
        f"checkpoint #{seqs[1]} (turn 2): no arm measured: {why} (2 arms)"
    )
    assert page.locator("#sweep-unmeasured li").all_inner_texts() == [
        f"#{seqs[0]}: not measured: {why}",
        f"#{seqs[1]}: not measured: {why} (2 arms)",
    ]


@pytest.mark.slow
def test_what_if_override_and_divergence_are_highlighted(
    pages: Pages, browser: Browser, tmp_path: Path
) -> None:
    page = browser.open(pages.child_html)
    child = pages.child
    assert page.locator("details.event").count() == len(child.events)
    (overridden,) = [e for e in child.events if e.get("source") == "override"]
    (live,) = [e for e in child.events if e.get("source") == "live"]
    # The overridden tool call stands out: its own class, badge and border colour.
    assert page.eval_on_selector_all(
        "details.event.src-override", "els => els.map(e => Number(e.dataset.seq))"
    ) == [overridden["seq"]]
    card = page.locator(f"#ev-{overridden['seq']}")
    assert card.locator(".badge.override").inner_text() == "override"
    normal = page.locator(f"#ev-{child.events[0]['seq']}")
    style = "el => getComputedStyle(el).borderTopColor"
    assert card.evaluate(style) != normal.evaluate(style)
    card.locator("summary").click()
    assert "tool:run_tests.result=" in card.locator(".callout.override").inner_text()
    # Where the run left its parent: the live model call that followed.
    assert page.eval_on_selector_all(
        "details.event.diverged", "els => els.map(e => Number(e.dataset.seq))"
    ) == [live["seq"]]
    panel = page.locator("#divergence")
    assert "Diverged" in panel.inner_text()
    assert "messages[5].content" in panel.inner_text()
    assert page.locator(f"#ev-{live['seq']} .badge.live").count() == 1
    # Following the link opens the diverging call.
    panel.locator("a").first.click()
    expect(page.locator(f"#ev-{live['seq']}[open] > .body")).to_have_count(1)
    page.screenshot(path=str(tmp_path / "viewer.png"), full_page=True)
    assert (tmp_path / "viewer.png").stat().st_size > 10_000
    browser.assert_clean(pages.child_html)


def test_render_without_the_parent_in_the_store(pages: Pages, tmp_path: Path) -> None:
    lone = tmp_path / "lone"
    shutil.copytree(pages.child.path, lone / pages.child.id)
    child = Session.load(lone / pages.child.id)
    # The parent is not there to compare with, but the what-if session kept where it diverged.
    data = view_model(child)
    assert data["parent"]["found"] is False
    kept = child.end()["divergence"]  # type: ignore[index]
    assert data["divergence"]["from"] == "session"
    assert (data["divergence"]["seq"], data["divergence"]["parent_seq"]) == (kept["seq"], kept["parent_seq"])
    assert kept["seq"] == child.by_type("model_call")[2]["seq"] and kept["kind"] == "model_call"
    report = {
        "divergence": {
            "kind": "model_call",
            "position": 3,
            "reason": "no match",
            "diff": [],
            "expected": {"seq": 9},
        }
    }
    data = view_model(child, report=report)
    assert data["divergence"]["seq"] == child.by_type("model_call")[2]["seq"]
    assert "<!doctype html>" in render(child, report=report)


@pytest.mark.slow
def test_a_difference_an_ignore_rule_takes_out_is_marked_so_in_the_divergence_table(
    pages: Pages, browser: Browser, tmp_path: Path
) -> None:
    """A what-if whose system prompt carries the time, ignored by a ``[match]`` rule: the CLI's
    report says "(ignored)" beside that difference, but the page showed it as red and green as the
    one that made the run diverge, with nothing to tell them apart. It is now marked and muted."""
    stamp = "$.body.messages[0].content"
    cause = "$.body.messages[3].content"
    report = {
        "divergence": {
            "kind": "model_call",
            "position": 3,
            "reason": "no recorded request has the same match key",
            "diff": [
                {
                    "op": "changed",
                    "path": stamp,
                    "expected": "Time: 10:00",
                    "actual": "Time: 11:00",
                    "ignored": True,
                },
                {"op": "changed", "path": cause, "expected": "shipped", "actual": "lost"},
            ],
            "expected": {"seq": 9},
        }
    }
    page_file = tmp_path / "ignored.html"
    page_file.write_text(render(pages.child, report=report), encoding="utf-8")
    page = browser.open(page_file)
    rows = page.locator("#divergence table.changes tr")
    ignored, real = rows.filter(has_text=stamp), rows.filter(has_text=cause)
    assert "ignored by a match rule" in ignored.inner_text()
    assert "ignored" in (ignored.get_attribute("class") or "")
    assert "ignored" not in real.inner_text() and not real.get_attribute("class")
    color = "el => getComputedStyle(el).color"
    assert ignored.locator("td.act").evaluate(color) != real.locator("td.act").evaluate(color)
    browser.assert_clean(page_file)


@pytest.mark.slow
def test_integers_beyond_javascripts_exact_range_are_shown_as_recorded(
    tmp_path: Path, browser: Browser
) -> None:
    """JSON.parse rounds integers beyond 2**53 - 1: a 64-bit id showed as 1234567890123456800. They
    are shown digit for digit, in a tool's result and in a model's tool-call arguments (JSON text);
    a string that looks like the page's own form of one stays the string."""
    big, neg, huge = 1234567890123456789, -(2**60) - 1, 2**70
    odd = "\x00int:7"

    @forkpoint.tool
    def lookup(user: str) -> dict[str, Any]:
        return {"id": big, "neg": neg, "ids": [huge, 3], "label": odd}

    import httpx2

    def model(request: httpx2.Request) -> httpx2.Response:
        call = {
            "id": "c1",
            "type": "function",
            "function": {"name": "lookup", "arguments": f'{{"id": {big}}}'},
        }
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return httpx2.Response(
            200, json={"id": "r1", "choices": [{"message": message, "finish_reason": "tool_calls"}]}
        )

    with forkpoint.record(store=tmp_path / "store") as rec:
        with httpx2.Client(transport=httpx2.MockTransport(model)) as client:
            client.post("http://127.0.0.1:9/v1/chat/completions", json={"model": "m", "messages": []})
        lookup("ann")
    page_file = write_html(Session.load(rec.session_path), tmp_path / "big.html")
    page = browser.open(page_file)
    assert str(big) in page.locator("details.event.model_call summary").inner_text()  # the call it asked for
    card = page.locator("details.event.tool_call").first
    summary_text = card.locator("summary").inner_text()
    assert str(big) in summary_text  # the one-line result
    card.locator("summary").click()
    result = card.locator(".result")
    result.wait_for()
    shown = result.inner_text()
    for number in (big, neg, huge):
        assert str(number) in shown, shown
    assert "1234567890123456800" not in shown and "e+21" not in shown
    assert (
        page.evaluate("document.querySelector('details.event.tool_call .result').textContent").count(odd) == 1
    )
    browser.assert_clean(page_file)


def test_the_page_numbers_turns_in_the_order_calls_started(tmp_path: Path) -> None:
    """A tool run while a streamed answer was read ended, so was written, before the model call that
    asked for it: the page put each tool under the turn before (as ``show`` did)."""
    from tests.views.streamed import record_tool_inside_stream

    shown = view_model(Session.load(record_tool_inside_stream(tmp_path)))["events"]
    calls = [(e["type"], e["turn"]) for e in shown if e["type"] in ("model_call", "tool_call")]
    assert calls == [("model_call", 1), ("tool_call", 1), ("model_call", 2), ("tool_call", 2)]


@pytest.mark.parametrize("api", ["chat", "anthropic"])
def test_the_page_reads_each_message_of_a_resent_conversation_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, api: str
) -> None:
    """An agent resends its conversation at every call; the page read every request's messages whole,
    so its work grew with the square of the turns (8 s at 1,000 turns of the SDK-less loop, 2 s now).
    Each item is read once, and every call still shows each of its messages, the system prompt
    first, as reading the request whole gives them."""
    import httpx2

    import forkpoint.html as html

    turns = 20
    url = "http://127.0.0.1:9/v1/" + ("chat/completions" if api == "chat" else "messages")

    def answer(request: httpx2.Request) -> httpx2.Response:
        n = len(json.loads(request.content)["messages"])
        if api == "chat":
            return httpx2.Response(
                200, json={"id": f"c{n}", "choices": [{"message": {"role": "assistant", "content": f"a{n}"}}]}
            )
        return httpx2.Response(
            200,
            json={
                "id": f"m{n}",
                "type": "message",
                "role": "assistant",
                "content": [{"type": "text", "text": f"a{n}"}],
            },
        )

    with forkpoint.record(store=tmp_path) as rec:
        messages: list[Any] = [{"role": "user", "content": "go"}]
        with httpx2.Client(transport=httpx2.MockTransport(answer)) as c:
            for i in range(turns):
                system = (
                    {"messages": [{"role": "system", "content": "Be brief."}, *messages]}
                    if api == "chat"
                    else {"system": "Be brief.", "messages": messages}
                )
                c.post(url, json={"model": "m", "max_tokens": 9, **system})
                messages = [
                    *messages,
                    {"role": "assistant", "content": f"a{i}"},
                    {"role": "user", "content": f"r{i}"},
                ]
    session = Session.load(rec.session_path, share_lists=True)
    read = []
    real = html.request_messages

    def counting(url: str, body: Any) -> Any:
        read.append(len(body["messages"]))
        return real(url, body)

    monkeypatch.setattr(html, "request_messages", counting)
    page = view_model(session)
    assert sum(read) <= 2 * turns + 1, sum(read)  # each item once (read whole: 400 at 20 turns)
    monkeypatch.setattr(html, "request_messages", real)
    calls = [e for e in page["events"] if e["type"] == "model_call"]
    bodies = [e["request"]["body"] for e in session.by_type("model_call")]
    assert len(calls) == len(bodies) == turns
    for shown, body in zip(calls, bodies, strict=True):
        views = [page["strings"][i] for i in shown["messages"]]
        whole = html._rich_messages(url, shown["summary"]["api"], body)
        assert views == whole and views[0] == {"role": "system", "text": "Be brief."}
        assert len(views) == len(body["messages"]) + (api == "anthropic")


@pytest.mark.slow
def test_the_thinking_of_a_call_is_shown_folded_above_its_answer(tmp_path: Path, browser: Browser) -> None:
    from tests.providers.test_reasoning import ANSWER, THOUGHT, record_thinking

    session = record_thinking(tmp_path / "store")
    html = tmp_path / "page.html"
    write_html(Session.load(session), html)
    page = browser.open(html)
    card = page.locator("details.event.model_call").first
    card.locator("summary").first.click()
    thinking = card.locator("details.more", has_text="Thinking (")
    expect(thinking).to_have_count(1)
    thinking.locator("summary").click()
    expect(thinking.locator(".response-text")).to_have_text(THOUGHT)
    expect(card.locator(".bubble .response-text").last).to_have_text(ANSWER)
    browser.assert_clean(html)


def test_parallel_tool_calls_answered_out_of_order_show_their_own_call_ids(
    tmp_path: Path, server: LocalServer
) -> None:
    """The page paired a tool's result with the first unanswered call of its name (the export had
    been fixed): London's result showed Paris's tool call id. A tool with a default parameter is
    recorded with it filled in, which the model's arguments lack."""
    from tests.exporters.test_otel import record_weather_out_of_order

    session = record_weather_out_of_order(tmp_path, server, defaults=True)
    tools = [e for e in view_model(Session.load(session))["events"] if e["type"] == "tool_call"]
    assert {e["args"]["city"]: e["call_id"] for e in tools} == {"Paris": "call_0_0", "London": "call_0_1"}


def test_a_sub_agents_tool_call_does_not_answer_the_top_level_model_call(
    tmp_path: Path, make_server: Any
) -> None:
    """A tool whose body runs a sub-agent that calls ``get_weather``, while the top-level model
    also asked for ``get_weather``: the page paired the sub-agent's call with the top-level model's
    request (its call id, its "asked for by"), and the top-level call then found none."""
    from tests.exporters.test_otel import record_sub_agent

    session = record_sub_agent(tmp_path, make_server)
    events = view_model(Session.load(session))["events"]
    (model,) = [e for e in events if e["type"] == "model_call"]
    asked = {
        (e["tool"], e["args"].get("city")): (e.get("call_id"), e.get("requested_by"))
        for e in events
        if e["type"] == "tool_call"
    }
    assert asked == {
        ("research", None): ("call_0_0", model["seq"]),
        ("get_weather", "Oslo"): (None, None),
        ("get_weather", "Paris"): ("call_0_1", model["seq"]),
    }


def test_a_value_the_agent_read_shows_what_it_read(
    tmp_path: Path, browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``value`` event (``deterministic``: the time, a uuid the agent's own code read) was shown
    as "value value": which function it was and what it returned were only in its raw JSON."""
    import importlib
    import sys

    (tmp_path / "stamp_agent.py").write_text("import uuid\n\ndef stamp():\n    return str(uuid.uuid4())\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    agent = importlib.import_module("stamp_agent")
    try:
        with forkpoint.record(store=tmp_path / "store", deterministic=["stamp_agent"]) as rec:
            read = agent.stamp()
    finally:
        sys.modules.pop("stamp_agent", None)
    html = write_html(Session.load(rec.session_path), tmp_path / "page.html")
    page = browser.open(html)
    expect(page.locator("details.event.value .title")).to_have_text(f"uuid.uuid4 → {read}")
    browser.assert_clean(html)


def _record_withheld(store: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Session, list[dict[str, Any]]]:
    """The withheld session (:func:`tests.views.withheld.record_withheld`), and its calls as the
    page holds them: a top-level model call, a model call and a plain HTTP call the tool made."""
    from tests.views.withheld import record_withheld

    session = Session.load(record_withheld(store, monkeypatch))
    calls = [e for e in view_model(session)["events"] if e["type"] in ("model_call", "http_call")]
    return session, calls


def test_the_page_holds_which_bodies_were_not_stored_and_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call whose request or response body was not stored (withheld) looked whole on the page:
    a top-level model call's messages were empty, a call a tool made showed nothing at all."""
    session, calls = _record_withheld(tmp_path / "store", monkeypatch)
    top, inner, upload = session.by_type("model_call")
    assert [(c["seq"], c["type"]) for c in calls] == [
        (top["seq"], "model_call"),
        (inner["seq"], "http_call"),
        (upload["seq"], "http_call"),
    ]
    assert [c.get("withheld") for c in calls] == [
        [["request", top["request"]["withheld"]], ["response", top["response"]["withheld"]]],
        [["response", inner["response"]["withheld"]]],
        [["request", upload["request"]["withheld"]]],
    ]


@pytest.mark.slow
def test_a_call_whose_body_was_not_stored_says_so_in_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, browser: Browser
) -> None:
    """In the call's line (a badge) and in its detail, for a top-level call and one a tool made."""
    session, calls = _record_withheld(tmp_path / "store", monkeypatch)
    html = write_html(session, tmp_path / "page.html")
    page = browser.open(html)
    for call in calls:
        card = page.locator(f"#ev-{call['seq']}")
        for part, _why in call["withheld"]:
            expect(card.locator("summary .badge", has_text=f"{part} body not stored")).to_have_count(1)
        card.locator("summary").first.click()
        said = card.locator(".body .callout.bad")
        expect(said).to_have_count(len(call["withheld"]))
        for (part, why), shown in zip(call["withheld"], said.all(), strict=True):
            expect(shown).to_have_text(f"{part} body NOT STORED: {why}")
    browser.assert_clean(html)
