"""A replay's outcome in words and as data: the divergence report, the one-line summary, the
reports of several processes merged, and the exit code that says the run did not reproduce."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from ..errors import Divergence
from ..events import DivergenceReport, Verdict
from ..jsondiff import Change, format_changes
from ..text import ordinal, plural

#: Exit code of ``forkpoint replay`` when the run diverged from the recording.
EXIT_DIVERGENCE = 3


def format_divergence(report: DivergenceReport | dict[str, Any]) -> str:
    """One paragraph (and a diff) saying where and how a replay diverged."""
    kind = report["kind"].replace("_", " ")
    what = report.get("name") or report.get("endpoint") or ""
    lines = [
        f"replay diverged at the {ordinal(report['position'])} {kind} of this run ({what}): "
        f"{report['reason']}."
    ]
    exp = report.get("expected")
    if exp:
        lines.append(f"Expected next: recorded event seq {exp['seq']} ({exp['label']}).")
    near = report.get("nearest")
    if near and (not exp or near["seq"] != exp["seq"]):
        lines.append(
            f"Nearest recorded: seq {near['seq']} ({near['label']}, similarity {near['similarity']:.2f})."
        )
    if report.get("diff"):
        lines.append("Differences, recorded → actual:")
        lines.append(format_changes([_change(c) for c in report["diff"]]))
    return "\n".join(lines)


def _change(c: dict[str, Any]) -> Change:
    return Change(c["op"], c["path"], c.get("expected"), c.get("actual"))


def divergence(report: DivergenceReport) -> Divergence:
    """The :class:`~forkpoint.errors.Divergence` to raise for ``report``, its message the report in words."""
    return Divergence(report, format_divergence(report))


def ended_by_override(report: dict[str, Any]) -> bool:
    """True when a what-if run stopped asking for recorded calls after an override took effect and
    without diverging: the agent took the way out the override offered (``model#2.text="I give
    up."``). That is the experiment's answer, not a failure to reproduce."""
    return (
        bool(report.get("ended_early"))
        and not report.get("divergence")
        and not report.get("network_blocked")
        and any(o.get("applied") for o in report.get("overrides") or [])
    )


def summary_line(report: dict[str, Any]) -> str:
    """The one-line end-of-replay report."""
    if report.get("divergence"):
        status = "DIVERGED"
    elif ended_by_override(report):
        status = "ok, ended early after the override (the agent did not ask for every recorded call)"
    elif report.get("ended_early"):
        status = "DID NOT REPRODUCE (the run ended before asking for every recorded call)"
    elif report.get("network_blocked"):
        status = "DID NOT REPRODUCE (the run tried to reach the network)"
    else:
        status = "ok"
    unused = report["unused"]
    tail = f"{plural(len(unused), 'recorded event')} left unused" + (
        f" (seq {', '.join(map(str, unused[:10]))}{' …' if len(unused) > 10 else ''})" if unused else ""
    )
    blocked = (
        f"; {len(report['network_blocked'])} network connection(s) blocked"
        if report.get("network_blocked")
        else ""
    )
    extra = ""
    if report.get("overrides"):
        applied = sum(1 for o in report["overrides"] if o["applied"])
        extra += f"; {applied}/{len(report['overrides'])} override(s) applied"
    live = report.get("live_calls") or {}
    if live.get("models") or live.get("tools"):
        extra += f"; live calls: {live.get('models', 0)} model, {live.get('tools', 0)} tool"
    if report.get("drift"):
        extra += f"; {len(report['drift'])} request(s) drifted (fifo)"
    if (report.get("processes") or 1) > 1:
        extra += f"; served to {report['processes']} processes"
    if report.get("child_session"):
        extra += f"; this run was recorded as {Path(report['child_session']).name}"
    return f"replay {status}: {report['matched']}/{report['recorded']} events matched, {tail}{blocked}{extra}"


def verdict(report: dict[str, Any] | None, exit_code: int | None, recorded_exit: int | None) -> Verdict:
    """How a replay compares with the recorded run: the one place that reads a report's outcome
    fields (``divergence``, ``reproduced``, ``ended_early``, ``network_blocked``) together with the
    exit codes, for ``forkpoint check`` and whatever else needs a verdict.

    ``exit_code`` is the replayed program's own exit code, ``recorded_exit`` the one its ``end``
    event holds (either None when unknown). In order: no report is an ``error`` (the program did not
    start forkpoint, or was killed); a divergence is ``diverged``, with the call and the first JSON
    path that differs; another exit code, an early end (recorded calls never asked for), a reach
    for the network or any other reason the report gives for not reproducing is
    ``ended differently``; else ``reproduced``.
    """
    if report is None:
        code = f" (exit code {exit_code})" if exit_code is not None else ""
        return {
            "status": "error",
            "detail": "the program wrote no replay report: it did not start forkpoint, or it was killed"
            + code,
            "call": None,
            "path": None,
        }
    div = report.get("divergence")
    if div:
        what = div.get("name") or div.get("endpoint") or ""
        call = f"{div['kind'].replace('_', ' ')} #{div['position']}" + (f" ({what})" if what else "")
        changes = div.get("diff") or []
        return {
            "status": "diverged",
            "detail": div.get("reason") or "",
            "call": call,
            "path": changes[0]["path"] if changes else None,
        }
    reasons = []
    if exit_code is not None and recorded_exit is not None and exit_code != recorded_exit:
        reasons.append(f"exit code {exit_code}, recorded {recorded_exit}")
    if report.get("ended_early"):
        unserved = report.get("unserved") or []
        reasons.append(f"ended before asking for {plural(len(unserved), 'recorded call')}")
    if report.get("network_blocked"):
        hosts = ", ".join(dict.fromkeys(report["network_blocked"]))
        reasons.append(f"tried to reach the network ({hosts})")
    if not reasons and not report.get("reproduced", True):
        reasons.append("the replay report says it did not reproduce")
    if reasons:
        return {"status": "ended differently", "detail": "; ".join(reasons), "call": None, "path": None}
    return {"status": "reproduced", "detail": "", "call": None, "path": None}


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One report for a replay whose command ran several replaying processes, from theirs (in the
    order they started): calls served by any, unused by all; the first divergence; counts summed.
    One report is returned as it is."""
    if len(reports) == 1:
        return reports[0]
    first = reports[0]
    served = sorted(set().union(*(r["served"] for r in reports)))
    unused = sorted(set.intersection(*(set(r["unused"]) for r in reports)))
    unserved = sorted(set.intersection(*(set(r["unserved"]) for r in reports)))
    divergence = next((r["divergence"] for r in reports if r["divergence"]), None)
    blocked = [b for r in reports for b in r["network_blocked"]]
    overrides = []
    for i, o in enumerate(first["overrides"]):
        overrides.append({**o, "applied": any(r["overrides"][i]["applied"] for r in reports)})
    return {
        **first,
        "reproduced": divergence is None and not unserved and not blocked,
        "processes": len(reports),
        "served": served,
        "unserved": unserved,
        "matched": len(served),
        "unused": unused,
        "ended_early": bool(unserved) and divergence is None,
        "divergence": divergence,
        "drift": [d for r in reports for d in r["drift"]],
        "overrides": overrides,
        "live_calls": {k: sum(r["live_calls"][k] for r in reports) for k in ("models", "tools")},
        "network_blocked": blocked,
    }


def write_report(path: Path, report: dict[str, Any]) -> None:
    """Write a replay report atomically (temp file, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))
    os.replace(tmp, path)
