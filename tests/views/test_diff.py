"""``forkpoint diff A B``: alignment of two sessions, the first divergence, per-call JSON-path diffs,
the summary, exit codes and ``--json``.

The demo agent with ``ModelServer(turns=2)`` makes five calls, always in this order:
model → write_file → model → run_tests → model (final answer).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import forkpoint
import forkpoint.jsondiff as jsondiff
from forkpoint.cli import main
from forkpoint.demo.agent import run_agent
from forkpoint.demo.server import ModelServer
from forkpoint.log import Session, SessionWriter
from forkpoint.providers import summarize
from forkpoint.record import make_header
from forkpoint.text import apart

FAILING = {"passed": 0, "failed": 2, "output": "FAIL"}
SIGNATURES = [
    "model POST /v1/chat/completions",
    "tool write_file",
    "model POST /v1/chat/completions",
    "tool run_tests",
    "model POST /v1/chat/completions",
]


@dataclass
class Run:
    session: Session
    answer: str


def record(store: Path, workdir: Path, srv: ModelServer) -> Run:
    with forkpoint.record(store=store) as rec:
        answer = run_agent(srv.base_url, workdir, echo=None)
    return Run(Session.load(rec.session_path), answer)


def diff(a: Session | str, b: Session | str, *args: str) -> Result:
    ref = lambda s: str(s.path) if isinstance(s, Session) else s  # noqa: E731
    # A wide terminal, so that rich does not wrap the table cells.
    return CliRunner().invoke(main, ["diff", ref(a), ref(b), *args], env={"COLUMNS": "300"})


def flat(text: str) -> str:
    return " ".join(text.split())


def usage(session: Session) -> dict[str, int]:
    models = session.by_type("model_call")
    return {
        "input": sum(m["summary"]["usage"]["input_tokens"] for m in models),
        "output": sum(m["summary"]["usage"]["output_tokens"] for m in models),
    }


@pytest.fixture
def two_live_runs(tmp_path: Path) -> tuple[Run, Run]:
    """Two recordings of the same agent and task against an unseeded (stochastic) model."""
    with ModelServer(turns=2) as srv:
        a = record(tmp_path / "store", tmp_path / "a", srv)
        b = record(tmp_path / "store", tmp_path / "b", srv)
    return a, b


@pytest.fixture
def parent_and_child(tmp_path: Path) -> tuple[Run, Session]:
    """A seeded recording and its what-if child (run_tests overridden, policy fifo: five calls)."""
    with ModelServer(turns=2, seed=8) as srv:
        parent = record(tmp_path / "store", tmp_path / "work", srv)
    spec = "tool:run_tests.result=" + json.dumps(FAILING)
    with forkpoint.replay(parent.session, overrides=[spec], on_divergence="fifo") as rp:
        assert run_agent("http://127.0.0.1:9", tmp_path / "work", echo=None) == parent.answer
    return parent, Session.load(rp.report()["child_session"])


def test_two_stochastic_runs_differ(two_live_runs: tuple[Run, Run]) -> None:
    a, b = two_live_runs
    res = diff(a.session, b.session)
    assert res.exit_code == 1, res.output
    out = res.output
    # Both runs sent the same first request; the model answered differently, so the first call that
    # differs is the write_file call that followed (other file name and content)...
    assert "first divergence at call 2: A seq 2 (tool write_file) vs B seq 2 (tool write_file)" in out
    assert "$.args.path" in out
    # ...and the first model call whose request differs is the 2nd one.
    data = json.loads(diff(a.session, b.session, "--json").output)
    model_pairs = [p for p in data["pairs"] if p["a"]["signature"].startswith("model")]
    assert [p["equivalent"] for p in model_pairs] == [True, False, False]
    second = model_pairs[1]
    assert (second["a"]["seq"], second["b"]["seq"]) == (3, 3)
    paths = [c["path"] for c in second["diff"]]
    assert "$.request.body.messages[2].tool_calls[0].function.arguments" in paths
    assert "$.request.body.messages[3].content" in paths
    assert not any(p.startswith("$.request.body.messages[0]") or "messages[1]" in p for p in paths)

    # The summary shows both runs side by side.
    lines = out.splitlines()
    turns = next(line for line in lines if line.strip().startswith("turns "))
    assert turns.split()[-2:] == ["3", "3"]
    tools = next(line for line in lines if line.strip().startswith("tools called"))
    assert tools.count("write_file×1") == 2 and tools.count("run_tests×1") == 2
    final = next(line for line in lines if line.strip().startswith("final answer"))
    assert a.answer != b.answer
    assert all(cell in final for cell in apart(a.answer, b.answer))
    exit_row = next(line for line in lines if line.strip().startswith("exit code"))
    assert exit_row.split()[-2:] == ["0", "0"]


def test_a_session_is_equivalent_to_itself(two_live_runs: tuple[Run, Run]) -> None:
    a, _ = two_live_runs
    res = diff(a.session, a.session)
    assert res.exit_code == 0, res.output
    assert "equivalent under the match key: 5 calls pair up one to one" in res.output
    assert "first divergence" not in res.output
    assert "differs" not in res.output and "not part of the match key" not in res.output
    assert set(marks(res.output).values()) == {"="}
    data = json.loads(diff(a.session, a.session, "--json").output)
    assert data["equivalent"] is True and data["first_divergence"] is None
    assert all(p["equivalent"] and p["diff"] == [] for p in data["pairs"])
    assert data["summary"]["a"] == data["summary"]["b"]


def test_parent_vs_what_if_child(parent_and_child: tuple[Run, Session]) -> None:
    parent, child = parent_and_child
    recorded = parent.session.by_type("tool_call")[1]["result"]
    res = diff(parent.session, child)
    assert res.exit_code == 1, res.output
    rows = {}
    for line in res.output.splitlines():
        cells = line.split()
        if cells and cells[0].isdigit() and len(cells) > 2 and cells[2].startswith("#"):
            rows[int(cells[0])] = cells[1]
    # Same requests up to the run_tests call, whose answer was overridden (~); then the model was
    # asked with another tool result (≠).
    assert rows == {1: "=", 2: "=", 3: "=", 4: "~", 5: "≠"}
    assert "first divergence at call 5: A seq 5 (model POST /v1/chat/completions)" in res.output
    assert "$.request.body.messages[5].content" in res.output

    data = json.loads(diff(parent.session, child, "--json").output)
    run_tests = data["pairs"][3]
    assert run_tests["a"] == {"seq": 4, "signature": "tool run_tests"}
    assert run_tests["equivalent"] is True
    assert run_tests["diff"] == [
        {"op": "changed", "path": f"$.result.{k}", "expected": recorded[k], "actual": FAILING[k]}
        for k in recorded
        if recorded[k] != FAILING[k]
    ]
    assert data["first_divergence"]["a"] == {"seq": 5, "signature": SIGNATURES[4]}
    # fifo served the recorded final answer in the child too.
    assert data["summary"]["b"]["final_answer"] == data["summary"]["a"]["final_answer"] == parent.answer


def test_json_structure(two_live_runs: tuple[Run, Run]) -> None:
    a, b = two_live_runs
    res = diff(a.session, b.session, "--json")
    assert res.exit_code == 1
    data: dict[str, Any] = json.loads(res.output)
    assert set(data) == {"a", "b", "equivalent", "first_divergence", "pairs", "summary"}
    assert (data["a"], data["b"], data["equivalent"]) == (a.session.id, b.session.id, False)
    first = data["first_divergence"]
    assert first["a"] == first["b"] == {"seq": 2, "signature": "tool write_file"}
    changed = {c["path"]: c for c in first["diff"]}
    written_a = a.session.by_type("tool_call")[0]["args"]
    written_b = b.session.by_type("tool_call")[0]["args"]
    assert changed["$.args.path"] == {
        "op": "changed",
        "path": "$.args.path",
        "expected": written_a["path"],
        "actual": written_b["path"],
    }
    assert [(p["a"]["signature"], p["b"]["signature"]) for p in data["pairs"]] == [(s, s) for s in SIGNATURES]
    assert [(p["a"]["seq"], p["b"]["seq"]) for p in data["pairs"]] == [(i, i) for i in range(1, 6)]
    for run, side in ((a, "a"), (b, "b")):
        summary = data["summary"][side]
        assert summary == {
            "turns": 3,
            "tools": {"write_file": 1, "run_tests": 1},
            "tool_errors": 0,
            "tokens": usage(run.session),
            "model_ms": round(sum(m.get("duration_ms") or 0 for m in run.session.by_type("model_call")), 3),
            "final_answer": run.answer,
            "exit_code": 0,
        }
        assert summary["tokens"]["input"] > 0 and summary["tokens"]["output"] > 0


def test_diff_by_id_and_unknown_session(two_live_runs: tuple[Run, Run], tmp_path: Path) -> None:
    a, b = two_live_runs
    store = str(tmp_path / "store")
    res = CliRunner().invoke(main, ["diff", a.session.id, b.session.id[:-1], "--store", store, "--json"])
    assert res.exit_code == 1
    assert (json.loads(res.output)["a"], json.loads(res.output)["b"]) == (a.session.id, b.session.id)
    res = CliRunner().invoke(main, ["diff", a.session.id, "nosuch", "--store", store])
    assert res.exit_code != 0 and "no session 'nosuch'" in res.output


def test_last_is_the_newest_session_even_within_one_second(tmp_path: Path) -> None:
    """Ids have a one-second clock and a random suffix: two sessions made in the same second (a
    recording and its what-if child, say) must still resolve ``last`` to the one made last."""
    store = tmp_path / "store"
    first = SessionWriter.create(store, make_header(argv=["a"]), session_id="20261129-120000-ffffff")
    first.close()
    time.sleep(0.005)
    second = SessionWriter.create(store, make_header(argv=["b"]), session_id="20261129-120000-000000")
    second.close()
    res = CliRunner().invoke(main, ["diff", first.session_id, "last", "--store", str(store), "--json"])
    assert res.exit_code == 0, res.output  # two sessions without calls are equivalent
    assert json.loads(res.output)["b"] == "20261129-120000-000000"


# --------------------------------------------------------------------------- answers the key ignores


def tool_session(store: Path, calls: list[tuple[str, Any, dict[str, Any]]]) -> Session:
    """A session of tool calls only: ``(tool, args, {"result": …} or {"error": …})`` each."""
    writer = SessionWriter.create(store, make_header(argv=["tools"]))
    for tool, args, outcome in calls:
        writer.append({"type": "tool_call", "tool": tool, "args": args, **outcome})
    writer.close()
    return Session.load(writer.path)


def marks(output: str) -> dict[int, str]:
    """The alignment table's ``#`` → mark column."""
    rows = {}
    for line in output.splitlines():
        cells = line.split()
        if cells and cells[0].isdigit() and len(cells) > 2 and cells[2].startswith("#"):
            rows[int(cells[0])] = cells[1]
    return rows


def test_what_an_mcp_server_sent_during_a_call_is_compared_too(tmp_path: Path) -> None:
    """Two runs whose MCP tool answered the same but logged something else meanwhile (a message the
    agent's logging callback got, and a replay hands it again): diff said the calls were the same
    ("="); the messages are part of what the call gave the agent. The JSON-RPC ids are not."""

    def call(level: str, token: int) -> tuple[str, Any, dict[str, Any]]:
        received = [
            {"method": "notifications/message", "params": {"level": level, "data": "disk full"}},
            {"method": "notifications/progress", "params": {"progressToken": token, "progress": 1}},
            {"method": "sampling/createMessage", "params": {"maxTokens": 5}, "id": token},
        ]
        return (
            "clean",
            {},
            {
                "result": {"content": []},
                "mcp": {"server": "fs", "method": "tools/call", "received": received},
            },
        )

    res = diff(tool_session(tmp_path, [call("info", 3)]), tool_session(tmp_path, [call("error", 7)]))
    assert res.exit_code == 0, res.output
    assert marks(res.output) == {1: "~"}
    assert "  ~ $.received[0].params.level: info → error" in res.output
    assert "progressToken" not in res.output and "$.received[2]" not in res.output


def test_changed_tool_results_are_printed_though_equivalent(tmp_path: Path) -> None:
    """Same tool calls asked the same way, answered differently: equivalent (exit 0), but the text
    output says so and prints every difference by JSON path, not only ``--json``."""
    boom = {"type": "ValueError", "module": "builtins", "message": "no such sku"}
    a = tool_session(
        tmp_path,
        [
            ("price", {"sku": "A1"}, {"result": {"price": 8.2, "currency": "EUR"}}),
            ("stock", {"sku": "A1"}, {"result": 3}),
            ("stock", {"sku": "B2"}, {"result": 5}),
        ],
    )
    b = tool_session(
        tmp_path,
        [
            ("price", {"sku": "A1"}, {"result": {"price": 9.9, "currency": "EUR"}}),
            ("stock", {"sku": "A1"}, {"result": 3}),
            ("stock", {"sku": "B2"}, {"error": boom}),
        ],
    )
    res = diff(a, b)
    assert res.exit_code == 0, res.output
    out = res.output
    assert (
        "equivalent under the match key: 3 calls pair up one to one, "
        "but 2 tool results differ (not part of the match key; see below)" in flat(out)
    )
    assert marks(out) == {1: "~", 2: "=", 3: "~"}
    assert "~ call 1: tool price (A seq 1, B seq 1): result differs (not part of the match key)" in out
    assert "  ~ $.result.price: 8.2 → 9.9" in out
    assert "currency" not in out  # only what differs
    assert "~ call 3: tool stock (A seq 3, B seq 3): result differs (not part of the match key)" in out
    assert "  - $.result: 5" in out
    assert '  + $.error: {"message":"no such sku","module":"builtins","type":"ValueError"}' in out
    assert "call 2:" not in out and "first divergence" not in out

    data = json.loads(diff(a, b, "--json").output)
    assert data["equivalent"] is True
    assert data["pairs"][0]["diff"] == [
        {"op": "changed", "path": "$.result.price", "expected": 8.2, "actual": 9.9}
    ]


def test_a_difference_an_ignore_rule_takes_out_is_not_said_to_be_an_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs that differ only in a timestamp an ignore rule takes out of the key (the current time
    in a system prompt, in a tool's arguments): diff said "1 tool result differs" and "result differs
    (not part of the match key)" under a ``$.args`` path, though both answered the same."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "forkpoint.toml").write_text('[match]\nignore = [{ tool = "search", path = "$.args.ts" }]\n')
    a = tool_session(tmp_path, [("search", {"q": "x", "ts": "2026-01-01T10:00"}, {"result": [1]})])
    b = tool_session(tmp_path, [("search", {"q": "x", "ts": "2026-01-02T11:00"}, {"result": [1]})])
    res = diff(a, b)
    assert res.exit_code == 0, res.output
    out = flat(res.output)
    assert "but 1 call differs only where the match key ignores it" in out, out
    assert "result differs" not in out and "tool result" not in out
    assert (
        "~ call 1: tool search (A seq 1, B seq 1): args differ only where the match key ignores them" in out
    )
    assert "~ $.args.ts: 2026-01-01T10:00 → 2026-01-02T11:00 (ignored)" in out


def test_the_first_divergence_marks_what_an_ignore_rule_takes_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two calls whose keys differ for one reason (the question) and also in a timestamp a rule
    ignores: the first divergence listed the timestamp as one of the differences, unmarked, while a
    replay's divergence report marks it ``(ignored)``; it read as if the time were why they parted."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "forkpoint.toml").write_text('[match]\nignore = [{ tool = "search", path = "$.args.ts" }]\n')
    a = tool_session(tmp_path, [("search", {"ts": "2026-01-01T10:00", "q": "x"}, {"result": [1]})])
    b = tool_session(tmp_path, [("search", {"ts": "2026-01-02T11:00", "q": "y"}, {"result": [1]})])
    res = diff(a, b)
    assert res.exit_code == 1, res.output
    out = flat(res.output)
    assert "first divergence at call 1" in out, out
    assert "~ $.args.ts: 2026-01-01T10:00 → 2026-01-02T11:00 (ignored)" in out, out
    assert "~ $.args.q: x → y" in out and "~ $.args.q: x → y (ignored)" not in out, out
    # (check --models live names the first path that differs: the one that counts, not the time)
    from forkpoint.diff import diff_sessions

    compared = diff_sessions(Session.load(a.path), Session.load(b.path))
    assert compared.describe(0)[1] == "$.args.q"


def test_a_difference_an_ignore_rule_takes_out_is_no_first_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``check --models live`` of a mini-swe-agent run: its bash tool's args hold the model's
    tool_call_id, new in every live answer, and a rule ignores it; the run was "changed at seq 3 ↔
    seq 2 (tool bash): $.args.action.tool_call_id", counted as changed behaviour."""
    from forkpoint.diff import diff_sessions

    monkeypatch.chdir(tmp_path)
    (tmp_path / "forkpoint.toml").write_text(
        '[match]\nignore = [{ tool = "bash", path = "$.args.action.tool_call_id" }]\n'
    )
    a = tool_session(
        tmp_path, [("bash", {"action": {"command": "ls", "tool_call_id": "c1"}}, {"result": "x"})]
    )
    b = tool_session(
        tmp_path, [("bash", {"action": {"command": "ls", "tool_call_id": "c2"}}, {"result": "x"})]
    )
    assert diff_sessions(Session.load(a.path), Session.load(b.path)).first_change is None
    c = tool_session(
        tmp_path, [("bash", {"action": {"command": "ls", "tool_call_id": "c3"}}, {"result": "y"})]
    )
    assert diff_sessions(Session.load(a.path), Session.load(c.path)).first_change == 0


def test_parallel_tools_that_finished_in_another_order_pair_up(tmp_path: Path) -> None:
    """Tools the model asked for at once are logged as they finish (their ``sent`` ordinals say the
    order they started in); a what-if's replay logs each call as it is served, in the order they
    started. Aligned in log order, the overridden call was "only in B" and the recorded one "only in
    A" (a divergence, exit 1), and what the override changed was never shown. Calls are taken in
    the order they started; the same calls in another order are still a difference."""
    down = {"type": "RuntimeError", "module": "builtins", "message": "backend down"}
    nobody = {"type": "KeyError", "module": "builtins", "message": "no such user"}
    weather = ("get_weather", {"city": "paris"}, {"result": {"temp_c": 17.9}})
    a = tool_session(
        tmp_path,
        [  # started get_weather, lookup_user, flaky; finished get_weather, flaky, lookup_user
            (*weather[:2], {**weather[2], "sent": 1, "finished": 2}),
            ("flaky", {"x": "x"}, {"error": down, "sent": 4, "finished": 5}),
            ("lookup_user", {"name": "x"}, {"result": {"name": "x"}, "sent": 3, "finished": 6}),
        ],
    )
    b = tool_session(
        tmp_path,
        [weather, ("lookup_user", {"name": "x"}, {"error": nobody}), ("flaky", {"x": "x"}, {"error": down})],
    )
    res = diff(a, b)
    assert res.exit_code == 0, res.output
    out = res.output
    assert "only in" not in out and "first divergence" not in out, out
    assert "~ call 2: tool lookup_user (A seq 3, B seq 2): result differs (not part of the match key)" in out
    assert '  + $.error: {"message":"no such user","module":"builtins","type":"KeyError"}' in out
    assert sorted(marks(out).values()) == ["=", "=", "~"]
    # Started in another order: a difference, not hidden.
    c = tool_session(
        tmp_path,
        [
            weather,
            ("flaky", {"x": "x"}, {"error": down}),
            ("lookup_user", {"name": "x"}, {"result": {"name": "x"}}),
        ],
    )
    assert "only in" in diff(a, c).output


def test_the_runs_common_start_pairs_up_before_a_later_longer_match(tmp_path: Path) -> None:
    """Two runs of one agent whose first model answers called other tools (A: lookup, B: get_time),
    then went on alike. The longest matching stretch, found first at A's start, paired A's 1st call
    with B's 2nd: "first divergence at call 1: only in B", though both runs made that call alike."""
    step = ("think", {"q": "weather?"}, {"result": "ok"})
    lookup = ("lookup_weather", {"city": "Oslo"}, {"result": {"temp_c": 21}})
    clock = ("get_time", {}, {"result": "2026-12-06T00:58:45"})
    a = tool_session(tmp_path, [step, lookup, step, lookup, step])
    b = tool_session(tmp_path, [step, clock, step, lookup, step])
    res = diff(a, b)
    assert res.exit_code == 1, res.output
    out = flat(res.output)
    assert "only in" not in out, out
    assert "first divergence at call 2: A seq 2 (tool lookup_weather) vs B seq 2 (tool get_time)" in out, out
    assert marks(res.output) == {1: "=", 2: "≠", 3: "=", 4: "=", 5: "="}


def test_a_session_whose_pid_is_no_number_is_diffed_not_a_traceback(tmp_path: Path) -> None:
    """Calls are grouped by process (``pid``) to be put in the order they started; a session edited
    or made by another tool with ``"pid": [1]`` made ``diff`` (and ``show``) fail with
    ``TypeError: unhashable type: 'list'``. Such a pid is one process like any other."""
    calls = [("x", {}, {"result": 1, "sent": 2}), ("y", {}, {"result": 2, "sent": 1})]
    a = tool_session(tmp_path, [(t, args, {**out, "pid": [1]}) for t, args, out in calls])
    b = tool_session(tmp_path, [(t, args, {**out, "pid": {"p": 1}}) for t, args, out in reversed(calls)])
    res = diff(a, b)
    assert res.exit_code == 0 and res.exception is None, res.output
    assert sorted(marks(res.output).values()) == ["=", "="]
    shown = CliRunner().invoke(main, ["show", str(a.path)])
    assert shown.exit_code == 0 and shown.output.index("y()") < shown.output.index("x()"), shown.output
    from forkpoint.match import in_send_order

    assert [e["tool"] for e in in_send_order(a.calls())] == ["y", "x"]


def test_where_a_tool_raised_is_not_a_difference(tmp_path: Path) -> None:
    """A tool's exception keeps the frames it was raised in (for a replay's traceback): the same
    exception raised from another checkout or after lines moved is the same outcome, not a tool
    result that differs."""
    cause = {"type": "KeyError", "module": "builtins", "message": "'x'"}
    boom = {"type": "ValueError", "module": "builtins", "message": "no such sku", "cause": cause}

    def raised(root: str) -> dict[str, Any]:
        where = [[f"{root}/tools.py", 12, "stock", 12, 8, 20]]
        return {"error": {**boom, "frames": where, "cause": {**cause, "frames": where}}}

    a = tool_session(tmp_path, [("stock", {"sku": "B2"}, raised("/home/me/agent"))])
    b = tool_session(tmp_path, [("stock", {"sku": "B2"}, raised("/ci/build"))])
    res = diff(a, b)
    assert res.exit_code == 0, res.output
    assert "differs" not in res.output and "frames" not in res.output, res.output


def test_where_a_generator_tool_or_an_exception_groups_part_raised_is_not_a_difference(
    tmp_path: Path,
) -> None:
    """As for a tool's exception: a generator tool's (its ``raised``, recorded with frames for a
    replay's traceback), one raised while handling another (its ``context``) and the parts of an
    exception group were compared with their frames, so two runs from other checkouts differed."""
    key_error = {"type": "KeyError", "module": "builtins", "message": "'x'"}

    def ran(root: str) -> list[tuple[str, Any, dict[str, Any]]]:
        where = [[f"{root}/tools.py", 12, "stock", 12, 8, 20]]
        boom = {"type": "ValueError", "module": "builtins", "message": "no such sku", "frames": where}
        raised = {**boom, "context": {**key_error, "frames": where}}
        group = {**boom, "type": "ExceptionGroup", "group_message": "g", "exceptions": [boom]}
        items = {"$type": "builtins:generator", "kind": "generator", "value": [1], "ended": "complete"}
        return [
            ("lines", {"sku": "B2"}, {"result": {**items, "raised": raised}}),
            ("stock", {"sku": "B2"}, {"error": group}),
        ]

    a = tool_session(tmp_path, ran("/home/me/agent"))
    b = tool_session(tmp_path, ran("/ci/build"))
    res = diff(a, b)
    assert res.exit_code == 0, res.output
    assert "differs" not in res.output and "frames" not in res.output, res.output


def test_overridden_model_response_is_printed_though_equivalent(tmp_path: Path) -> None:
    """A what-if that only overrides the final answer: every request matches (exit 0), and the text
    output shows the response that changed."""
    with ModelServer(turns=2, seed=8) as srv:
        parent = record(tmp_path / "store", tmp_path / "work", srv)
    with forkpoint.replay(parent.session, overrides=['model#3.text="I give up."']) as rp:
        assert run_agent("http://127.0.0.1:9", tmp_path / "work", echo=None) == "I give up."
    child = Session.load(rp.report()["child_session"])
    res = diff(parent.session, child)
    assert res.exit_code == 0, res.output
    out = res.output
    assert "but 1 model response differs (not part of the match key; see below)" in out
    assert marks(out) == {1: "=", 2: "=", 3: "=", 4: "=", 5: "~"}
    assert (
        "~ call 5: model POST /v1/chat/completions (A seq 5, B seq 5): response differs "
        "(not part of the match key)" in out
    )
    if len(parent.answer) > 80:  # a long text is shown as a text diff
        assert (
            "  ~ $.response.text:" in out and f"      -{parent.answer}" in out and "      +I give up." in out
        )
    else:
        assert f"  ~ $.response.text: {parent.answer} → I give up." in out
    pair = json.loads(diff(parent.session, child, "--json").output)["pairs"][4]
    assert pair["equivalent"] is True
    assert pair["diff"] == [
        {"op": "changed", "path": "$.response.text", "expected": parent.answer, "actual": "I give up."}
    ]


def test_what_if_override_result_is_printed_in_text(parent_and_child: tuple[Run, Session]) -> None:
    """The overridden run_tests call (row ``~``) before the divergence it caused: its result diff is
    printed, not only counted."""
    parent, child = parent_and_child
    recorded = parent.session.by_type("tool_call")[1]["result"]
    out = diff(parent.session, child).output
    assert "~ call 4: tool run_tests (A seq 4, B seq 4): result differs (not part of the match key)" in out
    for k in recorded:
        if recorded[k] != FAILING[k]:
            assert f"  ~ $.result.{k}: {recorded[k]} → {FAILING[k]}" in out
    row = next(line for line in out.splitlines() if line.split()[:2] == ["4", "~"])
    assert row.rstrip().endswith(f"{sum(recorded[k] != FAILING[k] for k in recorded)} result")


def test_differences_outside_the_key_are_bounded(tmp_path: Path) -> None:
    """Many differing fields, a long text and many calls: capped, saying how much was left out."""
    log = lambda sign: "\n".join(f"line {i} {sign}" for i in range(100))  # noqa: E731
    calls_a = [
        ("dump", {}, {"result": {f"k{i}": i for i in range(1, 41)}}),
        ("log", {}, {"result": log("+")}),
    ]
    calls_b = [
        ("dump", {}, {"result": {f"k{i}": -i for i in range(1, 41)}}),
        ("log", {}, {"result": log("-")}),
    ]
    calls_a += [("n", {"i": i}, {"result": i}) for i in range(25)]
    calls_b += [("n", {"i": i}, {"result": i + 1}) for i in range(25)]
    res = diff(tool_session(tmp_path, calls_a), tool_session(tmp_path, calls_b))
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert "but 27 tool results differ" in res.output

    def block(call: int) -> list[str]:
        start = next(i for i, line in enumerate(lines) if line.startswith(f"~ call {call}:"))
        end = next(i for i in range(start + 1, len(lines)) if not lines[i].startswith(" "))
        return lines[start + 1 : end]

    dump = block(1)
    assert (
        len(dump) == 13 and dump[0] == "  ~ $.result.k1: 1 → -1" and dump[11] == "  ~ $.result.k12: 12 → -12"
    )
    assert dump[12] == "  … and 28 more differences (forkpoint diff --json lists all)"
    text = block(2)  # one change whose text diff is longer than the cap
    assert text[0] == "  ~ $.result:" and len(text) == 12 and text[-1].strip() == "…"
    # 20 calls are shown, then a count of the rest.
    assert sum(line.startswith("~ call ") for line in lines) == 20
    assert (
        "… and 7 more equivalent calls with differences outside the match key (forkpoint diff --json lists all)"
        in res.output
    )


def test_runs_that_ended_differently_say_so_though_equivalent(tmp_path: Path) -> None:
    """The same calls, asked and answered the same way, then exit 0 in one run and 1 in the other:
    the verdict said "equivalent under the match key" and nothing else (only the summary table
    showed the exit codes)."""
    calls: list[tuple[str, Any, dict[str, Any]]] = [("price", {"sku": "A1"}, {"result": 8})]
    a, b = tool_session(tmp_path, calls), tool_session(tmp_path, calls)
    for s, code in ((a, 0), (b, 1)):
        writer = SessionWriter.open(s.path)
        writer.append({"type": "end", "exit_code": code, "duration_ms": 1.0, "reason": None})
        writer.close()
    res = diff(Session.load(a.path), Session.load(b.path))
    assert res.exit_code == 0, res.output  # (the calls are equivalent: the ending is said, not judged)
    assert (
        "equivalent under the match key: 1 call pairs up one to one, but they ended differently "
        "(A exit 0, B exit 1)" in flat(res.output)
    ), res.output


def test_an_unknown_or_missing_exit_code_is_said_not_printed_as_none(tmp_path: Path) -> None:
    """An imported session's end has no exit code (the file does not say), a killed one has no end:
    the summary and the verdict printed Python's ``None`` for both."""
    calls: list[tuple[str, Any, dict[str, Any]]] = [("price", {"sku": "A1"}, {"result": 8})]
    a, b = tool_session(tmp_path, calls), tool_session(tmp_path, calls)
    writer = SessionWriter.open(a.path)
    writer.append({"type": "end", "exit_code": None, "duration_ms": None, "reason": None})
    writer.close()
    res = diff(Session.load(a.path), Session.load(b.path))
    assert "None" not in res.output, res.output
    assert "they ended differently (A exit unknown, B unfinished)" in flat(res.output), res.output
    assert [line.split() for line in res.output.splitlines() if line.strip().startswith("exit code")] == [
        ["exit", "code", "unknown", "unfinished"]
    ], res.output


def _exchange(url: str, body: Any, answer: Any) -> dict[str, Any]:
    return {
        "type": "model_call",
        "request": {
            "method": "POST",
            "url": url,
            "headers": [["content-type", "application/json"]],
            "body_kind": "json",
            "body": body,
        },
        "response": {"status": 200, "headers": [], "body_kind": "json", "body": answer, "ended": "complete"},
    }


def test_telemetry_is_neither_a_turn_nor_a_divergence(tmp_path: Path) -> None:
    """A run that uploaded its traces (LangSmith, the Agents SDK, OTLP) against one that did not:
    diff named the first trace upload as the first divergence, and counted every upload as a turn
    (28 against 3). A replay never diverges on telemetry; diff leaves it out too."""
    chat = "http://127.0.0.1:9/v1/chat/completions"
    ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    answer = chat_completion_body("hello")
    traces = _exchange("http://127.0.0.1:9/v1/traces", {"resourceSpans": []}, {})
    sessions = []
    for uploads in (2, 0):
        writer = SessionWriter.create(tmp_path, make_header(argv=["agent"]))
        writer.append(_exchange(chat, ask, answer))
        for _ in range(uploads):
            writer.append(traces)
        writer.append({"type": "tool_call", "tool": "t", "args": {}, "result": 1})
        writer.close()
        sessions.append(Session.load(writer.path))
    res = diff(*sessions)
    assert res.exit_code == 0, res.output
    assert "first divergence" not in res.output
    data = json.loads(diff(*sessions, "--json").output)
    assert data["equivalent"] is True and len(data["pairs"]) == 2
    assert data["summary"]["a"]["turns"] == data["summary"]["b"]["turns"] == 1


def test_final_answers_that_part_late_are_shown_where_they_part(tmp_path: Path) -> None:
    """The summary cut both final answers to their first 70 characters: answers that part after
    that showed as the same text."""
    chat = "http://127.0.0.1:9/v1/chat/completions"
    ask = {"model": "m", "messages": [{"role": "user", "content": "run the tests"}]}
    common = "I ran the whole test suite of the project twice, once per interpreter, and the last run said: "
    sessions = []
    for result in ("12 passed, 0 failed.", "11 passed, 1 failed."):
        writer = SessionWriter.create(tmp_path, make_header(argv=["agent"]))
        writer.append(_exchange(chat, ask, chat_completion_body(common + result)))
        writer.close()
        sessions.append(Session.load(writer.path))
    res = diff(*sessions)
    final = next(line for line in res.output.splitlines() if line.strip().startswith("final answer"))
    assert "12 passed, 0 failed." in final and "11 passed, 1 failed." in final, res.output


@pytest.mark.parametrize("kind", ["model", "http"])
def test_token_counting_is_no_turn_and_no_model_call_where_it_is_plain_http(
    tmp_path: Path, kind: str
) -> None:
    """An agent that asks Anthropic's ``count_tokens`` before each message: diff counted it as a
    turn (2 against 1), ``show`` numbered it "turn 1", and at a server no provider owns, a plain
    HTTP call, diff still labelled it ``model POST …``. At Anthropic's own host the call is a model
    call (``model``); the session here holds what the summary of such a call says (as an importer
    stores it), so that no URL in it is another host than this machine's."""
    host = "http://127.0.0.1:9"
    ask = {"model": "claude-x", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}
    answer = {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
        "content": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 2},
    }  # fmt: skip
    sessions = []
    for counts in (True, False):
        writer = SessionWriter.create(tmp_path, make_header(argv=["agent"]))
        if counts:
            event = _exchange(f"{host}/v1/messages/count_tokens", ask, {"input_tokens": 10})
            if kind == "model":  # (the summary it has at Anthropic's own host: a model call, api unknown)
                found = summarize(event["request"]["url"], ask, event["response"])
                event["summary"] = {**found, "kind": "model", "provider": "anthropic"}
            writer.append(event)
        writer.append(_exchange(f"{host}/v1/messages", ask, answer))
        writer.close()
        sessions.append(Session.load(writer.path))
    assert sessions[0].events[0]["summary"]["kind"] == kind
    data = json.loads(diff(*sessions, "--json").output)
    assert data["summary"]["a"]["turns"] == data["summary"]["b"]["turns"] == 1, data["summary"]
    assert data["pairs"][0]["a"]["signature"] == f"{kind} POST /v1/messages/count_tokens", data["pairs"]
    shown = CliRunner().invoke(main, ["show", str(sessions[0].path)], env={"COLUMNS": "300"}).output
    assert [line.split()[:3] for line in shown.splitlines() if line.startswith("turn")] == [
        ["turn", "1", "#2"]
    ]


def chat_completion_body(text: str) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
    }


def resend_loop(store: Path, turns: int, changed_at: int) -> Session:
    """An agent that resends its whole conversation at every call (``turns`` tool calls), its
    ``changed_at``-th tool result different from the other run's."""
    import httpx2

    def answer(request: httpx2.Request) -> httpx2.Response:
        sent = json.loads(request.read())["messages"]
        turn = sum(1 for m in sent if m["role"] == "assistant")
        msg: dict[str, Any] = (
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{turn}",
                        "type": "function",
                        "function": {"name": "f", "arguments": json.dumps({"n": turn})},
                    }
                ],
            }  # fmt: skip
            if turn < turns
            else {"role": "assistant", "content": "done"}
        )
        return httpx2.Response(200, json={"id": "x", "model": "m", "choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]})  # fmt: skip

    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    with forkpoint.record(store=store) as rec, httpx2.Client(transport=httpx2.MockTransport(answer)) as c:
        while True:
            r = c.post("http://127.0.0.1:9/v1/chat/completions", json={"model": "m", "messages": messages})
            msg = r.json()["choices"][0]["message"]
            messages.append(msg)
            if not msg.get("tool_calls"):
                break
            n = len(messages)
            text = f"result {n}" + (" changed" if n == 2 * changed_at + 2 and "b" in store.name else "")
            messages.append({"role": "tool", "tool_call_id": msg["tool_calls"][0]["id"], "content": text})
    return Session.load(rec.session_path, share_lists=True)


def diff_counts_per_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, owner: Any, name: str
) -> dict[int, float]:
    """How many times ``owner.name`` is called a turn by :func:`diff_sessions` of two resend loops
    that diverge at their third call, at 20 and at 80 turns."""
    from forkpoint.diff import diff_sessions

    calls = 0
    real = getattr(owner, name)

    def counted(*args: Any, **kw: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(*args, **kw)

    monkeypatch.setattr(owner, name, counted)
    if owner is jsondiff:
        monkeypatch.setattr("forkpoint.diff.json_diff", counted)
    per_turn = {}
    for turns in (20, 80):
        a = resend_loop(tmp_path / f"a{turns}", turns, 3)
        b = resend_loop(tmp_path / f"b{turns}", turns, 3)
        calls = 0
        result = diff_sessions(a, b)
        assert result.first_divergence is not None
        assert result.pairs[0].equivalent and not result.pairs[-1].equivalent
        per_turn[turns] = calls / turns
    return per_turn


def test_diff_compares_each_resent_message_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two long runs that resend their conversation at every call: each pair of messages is
    walked once, not once per call after it (quadratic in the length: 2,000 turns took 33 s)."""
    per_turn = diff_counts_per_turn(tmp_path, monkeypatch, jsondiff, "json_diff")
    # Linear: the walks per turn do not grow with the length (quadratic: four times as many).
    assert per_turn[80] < 1.5 * per_turn[20], per_turn


def test_diff_takes_the_keys_the_sessions_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys stored under the key spec in force are taken as they are: recomputing each model call's
    key hashes its whole conversation again (quadratic in the length: 2,000 turns 26 s → 16 s)."""
    from forkpoint.redact import Scrubber

    per_turn = diff_counts_per_turn(tmp_path, monkeypatch, Scrubber, "item_digest")
    assert per_turn[80] <= 1.5 * per_turn[20] + 1, per_turn


def test_input_tokens_count_the_prompt_cache_as_the_export_does(tmp_path: Path) -> None:
    """Anthropic's ``input_tokens`` leave out what the prompt cache read and wrote. ``forkpoint show``
    said ``101→23 tok`` and diff's summary 101 tokens in for a call that read 1,151 prompt tokens,
    while the export of the same session said 1151 (the conventions count the cache in): one run,
    two token counts, and the cache never shown. Show, diff and the HTML page now count as the
    export does, and show says what the cache read and wrote."""
    url = "http://127.0.0.1:9/v1/messages"
    ask = {"model": "claude-x", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    answer = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [{"type": "text", "text": "hello"}],
        "stop_reason": "end_turn",
        "usage": {
            "input_tokens": 101,
            "output_tokens": 23,
            "cache_read_input_tokens": 1000,
            "cache_creation_input_tokens": 50,
        },
    }
    writer = SessionWriter.create(tmp_path, make_header(argv=["agent"]))
    writer.append(_exchange(url, ask, answer))
    writer.close()
    session = Session.load(writer.path)
    shown = CliRunner().invoke(main, ["show", str(session.path)])
    assert shown.exit_code == 0, shown.output
    assert "1151→23 tok (1000 from cache, 50 to cache)" in flat(shown.output), shown.output
    data = json.loads(diff(session, session, "--json").output)
    assert data["summary"]["a"]["tokens"] == {"input": 1151, "output": 23}
    page = tmp_path / "run.html"
    assert CliRunner().invoke(main, ["show", str(session.path), "--html", str(page)]).exit_code == 0
    assert '"input_tokens":1151' in page.read_text().replace(" ", "")


def test_show_says_what_tools_the_recording_never_recorded(tmp_path: Path) -> None:
    """A mini-swe-agent run recorded without its bash tool: the recording said on stderr that bash
    was never recorded, and the session kept it in its end, but ``show`` never said it, so whoever
    looked at the session later did not learn that a replay runs those commands for real."""
    import io

    from rich.console import Console

    from forkpoint.show import render

    writer = SessionWriter.create(tmp_path, make_header(argv=["python", "agent.py"]))
    writer.append({"type": "end", "exit_code": 0, "unrecorded_tools": {"bash": 4}})
    writer.close()
    out = io.StringIO()
    render(Session.load(writer.path), Console(file=out, width=200, highlight=False))
    assert "the model asked for tools that were never recorded: bash (4 calls)" in out.getvalue(), (
        out.getvalue()
    )


def test_tokens_no_call_reported_are_unknown_not_zero(tmp_path: Path) -> None:
    """An OpenAI stream without ``stream_options.include_usage`` reports no tokens: the summary said
    ``0/0`` (and ``check --models live`` ``0 → 0``), as if the runs had used none."""
    import openai

    def chat(srv: ModelServer) -> Session:
        client = openai.OpenAI(base_url=f"{srv.base_url}/v1", api_key="sk-test")
        with forkpoint.record(store=tmp_path / "s") as rec:
            stream = client.chat.completions.create(
                model="demo-model", messages=[{"role": "user", "content": "hi"}], stream=True
            )
            assert all(chunk.usage is None for chunk in stream)
        return Session.load(rec.session_path)

    with ModelServer(turns=0) as srv:
        a, b = chat(srv), chat(srv)
    data = json.loads(diff(a, b, "--json").output)
    assert data["summary"]["a"]["tokens"] == {"input": None, "output": None}
    line = next(x for x in diff(a, b).output.splitlines() if "tokens in/out" in x)
    assert flat(line) == "tokens in/out —/— —/—", line


def test_show_counts_an_sdks_retries_in_the_turn_they_retry(server: Any, tmp_path: Path) -> None:
    """The openai SDK retries a 429 and a 500 with the same request: ``show`` (and the HTML viewer)
    listed the three attempts as turns 1, 2 and 3 of a run that asked the model twice. The attempts
    after a failed one are now the turn's retries, and the next request starts turn 2."""
    import io

    import openai
    from rich.console import Console

    from forkpoint.html import view_model
    from forkpoint.show import render

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-test", max_retries=2)
    failing = {"x-scenario": "show-retries", "x-fail": "429,500"}
    with forkpoint.record(store=tmp_path / "s") as rec:
        for text, headers in (("hi", failing), ("again", {})):
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": text}], extra_headers=headers
            )
    out = io.StringIO()
    render(Session.load(rec.session_path), Console(file=out, width=200, highlight=False))
    rows = [line.split("#")[0].strip() for line in out.getvalue().splitlines() if " model " in line]
    assert rows == ["turn  1", "retry", "retry", "turn  2"], out.getvalue()
    assert "HTTP 429" in out.getvalue() and "HTTP 500" in out.getvalue()
    calls = [e for e in view_model(Session.load(rec.session_path))["events"] if e["type"] == "model_call"]
    assert [(e["turn"], e.get("retry", False)) for e in calls] == [
        (1, False),
        (1, True),
        (1, True),
        (2, False),
    ]
