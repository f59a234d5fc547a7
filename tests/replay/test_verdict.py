"""``forkpoint.replay.verdict``: the one place a replay report's outcome fields and the exit codes
become a verdict (reproduced, diverged, ended differently, error)."""

from __future__ import annotations

from typing import Any

from forkpoint.replay import verdict


def report(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "reproduced": True,
        "divergence": None,
        "ended_early": False,
        "unserved": [],
        "network_blocked": [],
    }
    return base | fields


def test_reproduced_only_when_the_report_and_the_exit_code_agree() -> None:
    assert verdict(report(), 0, 0) == {"status": "reproduced", "detail": "", "call": None, "path": None}
    assert verdict(report(), 2, 2)["status"] == "reproduced"
    assert verdict(report(), 0, None)["status"] == "reproduced"  # the recording's exit code is unknown
    # What `forkpoint replay` says after "ok, but" is said too: a check row said "reproduced" alone.
    racing = verdict(report(ambiguous=[[3, 7, 9]]), 0, 0)
    assert racing["status"] == "reproduced"
    assert racing["detail"].startswith("not certain: 3 identical calls that were answered differently"), (
        racing
    )


def test_every_reason_a_reproduction_is_not_certain_is_said() -> None:
    """Racing callers, a tool that changed its arguments in place and secrets served as placeholders
    in one replay: "ok, but" named the racing callers alone, and `forkpoint check` too."""
    from forkpoint.replay import summary_line

    r = report(
        unused=[],
        matched=5,
        recorded=5,
        ambiguous=[[3, 7]],
        changed_in_place=[{"tool": "sort_rows", "changed": ["args.rows"]}],
        placeholders_served=[4],
    )
    for said in (summary_line(r), verdict(r, 0, 0)["detail"]):
        assert "2 identical calls" in said and "tool 'sort_rows' changed args.rows in place" in said, said
        assert "1 recorded answer held secrets scrubbed" in said, said


def test_a_divergence_names_the_call_and_the_first_differing_path() -> None:
    div = {
        "kind": "model_call",
        "position": 2,
        "endpoint": "POST /v1/chat/completions",
        "reason": "no recorded request has the same match key",
        "diff": [{"op": "changed", "path": "$.body.messages[1].content", "expected": "a", "actual": "b"}],
    }
    v = verdict(report(reproduced=False, divergence=div), 1, 0)
    assert v == {
        "status": "diverged",
        "detail": "no recorded request has the same match key",
        "call": "model call #2 (POST /v1/chat/completions)",
        "path": "$.body.messages[1].content",
    }
    # A time stamp an ignore rule takes out came first in the diff: `forkpoint check` named it as
    # where the run diverged, not the content that did differ.
    stamped = div | {
        "diff": [
            {
                "op": "changed",
                "path": "$.body.messages[0].content",
                "expected": "t1",
                "actual": "t2",
                "ignored": True,
            },
            *div["diff"],
        ]
    }
    assert verdict(report(divergence=stamped), 1, 0)["path"] == "$.body.messages[1].content"
    tool = {"kind": "tool_call", "position": 1, "name": "search", "reason": "r", "diff": []}
    assert verdict(report(divergence=tool), 0, 0)["call"] == "tool call #1 (search)"
    assert verdict(report(divergence=tool), 0, 0)["path"] is None


def test_every_way_of_ending_differently_is_named() -> None:
    assert verdict(report(), 1, 0)["detail"] == "exit code 1, recorded 0"
    early = verdict(report(reproduced=False, ended_early=True, unserved=[4, 5]), 0, 0)
    assert early == {
        "status": "ended differently",
        "detail": "ended before asking for 2 recorded calls",
        "call": None,
        "path": None,
    }
    net = verdict(report(reproduced=False, network_blocked=["127.0.0.1:443", "127.0.0.1:443"]), 0, 0)
    assert net["detail"] == "tried to reach the network (127.0.0.1:443 (2 attempts))"
    both = verdict(report(reproduced=False, ended_early=True, unserved=[3]), 137, 0)
    assert both["detail"] == "exit code 137, recorded 0; ended before asking for 1 recorded call"
    # A report that says it did not reproduce, for a reason this function does not know yet.
    assert verdict(report(reproduced=False), 0, 0)["status"] == "ended differently"


def test_no_report_is_an_error() -> None:
    v = verdict(None, 1, 0)
    assert (
        v["status"] == "error" and "wrote no replay report" in v["detail"] and "(exit code 1)" in v["detail"]
    )


def test_the_attempts_at_each_destination_add_up_across_processes() -> None:
    """Two replaying processes refused at one destination: the merged report lists it once, with
    the attempts of both; a report that lists every attempt (the kernel's, an older replay's) counts
    each entry once."""
    from forkpoint.replay import merge_reports, summary_line

    def process(started: float, **fields: Any) -> dict[str, Any]:
        return report(
            process_started=started,
            served=[],
            covered=[],
            unused=[1],
            matched=0,
            recorded=1,
            drift=[],
            overrides=[],
            live_calls={"models": 0, "tools": 0},
            **fields,
        )

    merged = merge_reports(
        [
            process(1, network_blocked=["127.0.0.1:443"], network_attempts={"127.0.0.1:443": 3}),
            process(2, network_blocked=["127.0.0.1:443", "127.0.0.1:443", "localhost:80 (udp)"]),
        ]
    )
    assert merged["network_blocked"] == ["127.0.0.1:443", "localhost:80 (udp)"]
    assert merged["network_attempts"] == {"127.0.0.1:443": 5, "localhost:80 (udp)": 1}
    assert "network blocked (2): 127.0.0.1:443 (5 attempts), localhost:80 (udp);" in summary_line(merged)


def test_the_method_tools_whose_objects_could_not_be_told_apart_are_named() -> None:
    """A check row says which tools' objects a replay could not tell apart, one or several ("tool
    'a', 'b' is a method" read as one tool)."""
    one = verdict(report(objects_untold=["search"]), 0, 0)
    assert one["status"] == "reproduced"
    assert one["detail"].startswith("not certain: tool 'search' is a method called on several objects"), one
    two = verdict(report(objects_untold=["fetch", "search"]), 0, 0)["detail"]
    assert "tools 'fetch', 'search' are methods called on several objects" in two, two
