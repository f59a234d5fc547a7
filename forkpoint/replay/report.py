"""A replay's outcome in words and as data: the divergence report, the one-line summary, the
reports of several processes merged, and the exit code that says the run did not reproduce."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .. import runtime
from ..errors import Divergence
from ..events import DivergenceReport, Verdict, divergence_call, divergence_place
from ..files import write_private
from ..log import json_text
from ..text import KIND_NAMES, plural

#: Exit code of ``forkpoint replay`` when the run diverged from the recording.
EXIT_DIVERGENCE = 3


def _suggested_differences(suggested: list[dict[str, Any]]) -> str:
    """What the differences the ``suggested`` rules ignore are: a value that looks volatile, or a
    header the match key keeps (``anthropic-version``: the date in it is the API's version, which an
    SDK upgrade changes, no time the program read)."""
    from ..jsonpath import parse  # here: the verdict alone does not load matching

    headers = []
    for rule in suggested:
        steps = parse(rule["path"])
        if len(steps) == 2 and steps[0] == ("child", "headers"):
            headers.append(str(steps[1][1]))
    volatile = "looks like a timestamp, a uuid or a request id"
    if not headers:
        return f"Every difference {volatile}."
    header = (
        "a header that names the version or the beta features of the API the request is written for "
        f"({', '.join(dict.fromkeys(headers))}), which an SDK upgrade changes: the API may answer "
        "another version otherwise."
    )
    if len(headers) == len(suggested):
        return f"Every difference is in {header}"
    return f"Every difference {volatile}, or is in {header}"


def format_divergence(report: DivergenceReport | dict[str, Any]) -> str:
    """One paragraph (and a diff) saying where and how a replay diverged."""
    what = report.get("name") or report.get("endpoint") or ""
    place, more = divergence_place(report)
    lines = [f"replay diverged at the {place} of this run{more} ({what}): {report['reason']}."]
    exp = report.get("expected")
    if exp:
        lines.append(f"Expected next: recorded event seq {exp['seq']} ({exp['label']}).")
    near = report.get("nearest")
    if near and (not exp or near["seq"] != exp["seq"]):
        lines.append(
            f"Nearest recorded: seq {near['seq']} ({near['label']}, similarity {near['similarity']:.2f})."
        )
    if report.get("diff"):
        # (the diff's module: here, not in every replaying parent, whose run may not diverge)
        from ..jsondiff import Change, format_changes

        against = report.get("diff_against")
        lines.append(f"Differences, recorded{f' (seq {against})' if against is not None else ''} → actual:")
        lines.append(format_changes([Change.from_json(c) for c in report["diff"]]))
    changed = report.get("versions") or []
    if changed:
        lines.append(
            "Installed now at another version than when recorded (an upgrade may change what is sent): "
            + ", ".join(
                f"{_plain(n)} {_plain(was)} → {_plain(now) if now else 'not installed'}"
                for n, was, now in changed
            )
            + "."
        )
    for c in report.get("changed_in_place") or []:
        beside = [str(b) for b in c.get("beside") or []]
        who = f"tool {_plain(str(c.get('tool')))!r}" + (
            f" (or {', '.join(map(repr, beside))}, which ran at the same time)" if beside else ""
        )
        lines.append(
            f"When recorded, {who} changed {', '.join(_plain(str(x)) for x in c.get('changed') or [])} "
            "in place: a replay does not run the tool's body, so the program did not see that change, "
            "which may be why it went another way (replay the tool live: --tools live)."
        )
    if raced := report.get("raced"):
        lines.append(
            f"Before this call, {_RACED} (seq {'; '.join(', '.join(map(str, g)) for g in raced)}), and which "
            "got which answer cannot be told from the recording, which may be why the run went another way."
        )
    overridden = report.get("after_overrides") or []
    if overridden:
        lines.append(
            f"The {'override' if len(overridden) == 1 else 'overrides'} applied before this call "
            f"({', '.join(_plain(o) for o in overridden)}) may be why what the run sent differs: the "
            "what-if leaving the recording, no change to ignore."
        )
    suggested = report.get("suggest") or []
    if suggested:
        from ..match import IgnoreRule  # here: the verdict alone does not load matching

        lines.append(
            f"{_suggested_differences(suggested)} If it does not matter, ignore it with this rule in "
            "forkpoint.toml (or [tool.forkpoint.match] in pyproject.toml):"
        )
        lines.append("  [match]")
        lines.append("  ignore = [")
        lines.extend(f"    {IgnoreRule(**r).toml()}," for r in suggested)
        lines.append("  ]")
        for r in report.get("inert") or []:
            rule = IgnoreRule(**{k: v for k, v in r.items() if k != "source"})
            where = f" ({r['source']})" if r.get("source") else ""
            lines.append(
                f"The rule {rule.toml()}{where} took nothing out of this call (if it was meant for this difference: is its path or regex mistyped?)"
            )
        live_tools = report.get("after_live_tools")
        if live_tools:
            lines.append(
                f"{plural(live_tools, 'tool call')} ran live before this call: a value "
                f"{'it' if live_tools == 1 else 'one'} returned (a time its body read) may be it, and "
                "--deterministic does not record what a tool's body reads."
            )
        if before := report.get("read_before_recording"):
            lines.append(
                f"The recorded {_plain(before['stamp'])} is from before this recording began "
                f"({_plain(before['started'])}): if the program read it then (at import, as a test "
                "module's at pytest's collection; in a fixture of wider scope; before forkpoint.record()), "
                "--deterministic cannot hand it back, as it records the reads made while it records: "
                "ignore it with the rule above, or read the clock in the recorded run."
            )
        if report.get("hint_deterministic"):
            lines.append(
                "If the program's own code put it there (datetime.now(), time.time(), uuid.uuid4(), "
                "random), record with --deterministic instead (forkpoint record --deterministic; "
                "deterministic=True in the API and the pytest marker): a replay then hands the "
                "recorded values back, and the request is matched whole."
            )
        modules = report.get("hint_deterministic_modules")
        left_out = report.get("left_out_modules")
        if modules:
            which = (
                "the reads of the script and of the modules outside site-packages"
                if modules is True
                else "the reads of " + ", ".join(_plain(str(m)) for m in modules)
            )
            lines.append(
                f"This session was recorded deterministic, which records {which}: if other code put it "
                + (
                    "there, name it."
                    if left_out
                    else "there (an agent installed as a package), name its module (forkpoint record "
                    '--deterministic-module MODULE, repeatable; deterministic=["MODULE"] in the API and '
                    "the pytest marker)."
                )
            )
        if left_out:
            selection = [_plain(str(m)) for m in report.get("deterministic_selection") or left_out]
            lines.append(
                f"This call was made through code {'--deterministic' if not modules else 'it'} leaves out: "
                f"{', '.join(_plain(str(m)) for m in left_out)}. If that put it there, record with "
                f"forkpoint record {' '.join(f'--deterministic-module {m}' for m in selection)} "
                f"(deterministic={json.dumps(selection)} in the API and the pytest marker; the modules "
                "named replace --deterministic's own choice, so name any other of the program's that "
                "reads the clock too)."
            )
    return "\n".join(lines)


def _plain(text: str) -> str:
    # A header's version is the recording's say: an escape sequence in it is shown, not obeyed.
    return text if text.isprintable() else json.dumps(text)


def divergence(report: DivergenceReport) -> Divergence:
    """The :class:`~forkpoint.errors.Divergence` to raise for ``report``, its message the report in words."""
    return Divergence(report, format_divergence(report))


#: Exceptions of forkpoint's own that end a replayed program: reported as what they are (a
#: divergence, a blocked connection), not as an uncaught exception of the program.
_OWN_ENDINGS = frozenset({("forkpoint.errors", "Divergence"), ("forkpoint.errors", "NetworkBlocked")})


def _raised(errors: Any) -> list[str]:
    """``module.Type`` of each uncaught exception, sorted (forkpoint's own endings left out)."""
    return sorted(
        f"{e.get('module')}.{e.get('type')}"
        for e in errors or []
        if isinstance(e, dict) and (e.get("module"), e.get("type")) not in _OWN_ENDINGS
    )


def ending(report: dict[str, Any]) -> list[str] | None:
    """How the replayed program's end differs from the recording's, in words: ``[]`` when it ended
    as recorded (same exit code, the same uncaught exceptions), None when that cannot be told yet
    (the exit code is not known, or the recording has no end)."""
    recorded = report.get("recorded_end")
    code = report.get("exit_code")
    if not isinstance(recorded, dict) or code is None or recorded.get("exit_code") is None:
        return None
    out = []
    if code != recorded["exit_code"]:
        out.append(f"the program exited {code} (recorded: {recorded['exit_code']})")
    return out + uncaught_differences(report)


def uncaught_differences(report: dict[str, Any]) -> list[str]:
    """The uncaught exceptions the replayed run raised that the recording did not, and the other
    way round, in words (nothing when the recording did not keep them)."""
    recorded = report.get("recorded_end")
    if not isinstance(recorded, dict) or not isinstance(recorded.get("uncaught"), list):
        return []  # recordings made before it was kept have none
    out = []
    now, then = _raised(report.get("uncaught")), _raised(recorded["uncaught"])
    new = [n for n in now if n not in then]
    if new:
        shown = "; ".join(
            f"{e.get('type')}" + (f": {e.get('message')}" if e.get("message") else "")
            for e in report.get("uncaught") or []
            if f"{e.get('module')}.{e.get('type')}" in new
        )
        out.append(f"it raised an uncaught {shown} (the recording did not)")
    gone = [n for n in then if n not in now]
    if gone:
        out.append(f"the recording ended with an uncaught {', '.join(gone)}, this run did not")
    return out


def conclude(report: dict[str, Any]) -> dict[str, Any]:
    """``report`` with its verdict (re)computed: ``ending`` (:func:`ending`), ``ended_as_recorded``
    (None while unknown), and ``reproduced`` — every recorded call served (none unserved), no
    divergence, no network attempt, and the program ended as recorded. Returns ``report``."""
    differences = ending(report)
    report["ambiguous"] = ambiguous(report.get("alike_served") or [])
    report["ending"] = differences or []
    report["ended_as_recorded"] = None if differences is None else not differences
    report["reproduced"] = (
        not report.get("divergence")
        and not report.get("unserved")
        and not report.get("network_blocked")
        and report["ended_as_recorded"] is not False
    )
    return report


def ambiguous(alike_served: list[list[Any]]) -> list[list[int]]:
    """The groups of identical calls (one match key) whose recorded answers differ and that were
    served to callers racing each other, as their served seqs: which caller got which answer
    depends on the order they happened to ask in, which the recording cannot tell, so the run may
    not have reproduced exactly. ``alike_served``: ``[group, seq, pid, raced, when served, when its
    process started]``, ``raced`` as the replayer saw it in its process (another thread, or another
    asyncio task of the thread, had been served one of them: :meth:`~forkpoint.replay.Replayer._raced`);
    two processes race when the later one had started
    when the earlier one was served (not a program a shell script runs after another, nor a child
    forked after its parent's call)."""
    groups: dict[int, list[list[Any]]] = {}
    for entry in alike_served:
        groups.setdefault(entry[0], []).append(entry)
    out = []
    for entries in groups.values():
        entries.sort(key=lambda e: e[4])
        racing = any(e[3] is True for e in entries) or _processes_raced(entries)
        if racing:
            out.append(sorted(e[1] for e in entries))
    return out


def _processes_raced(entries: list[list[Any]]) -> bool:
    """Whether an entry of ``entries`` (in the order they were served) was served while the process
    of a later one of another process had started already: for each, the latest time each process
    served one before it is all that tells (not every earlier entry: a program that reads the
    clock 40,000 times under ``deterministic`` made this loop take minutes)."""
    latest: dict[Any, Any] = {}  # pid → when it was last served one of the entries before
    for entry in entries:
        pid, served, started = entry[2], entry[4], entry[5]
        if any(other != pid and started < when for other, when in latest.items()):
            return True
        latest[pid] = served if pid not in latest else max(latest[pid], served)
    return False


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


def _cache_hint(report: dict[str, Any]) -> str:
    """Why recorded calls went unasked when a framework answered requests from its own cache of
    model answers during the replay (DSPy's, in memory or on disk); ``""`` otherwise."""
    counts = report.get("answered_from_cache") or {}
    cached = runtime.cached_answers_text(counts)
    if not cached:
        return ""
    return f" ({cached} instead: replay with the cache off, {runtime.cache_off_text(counts)})"


def _from_cache(report: dict[str, Any]) -> str:
    """The model answers a framework's own cache (DSPy's) gave a replay that asked for every recorded
    call, in words, or ``""``: not served from the session, so the replay reproduced only while that
    cache holds them (another machine, or a cleared cache, makes the requests, which the recording
    may not have). A replay that ended early says so in :func:`_cache_hint` instead."""
    counts = report.get("answered_from_cache") or {}
    cached = runtime.cached_answers_text(counts)
    if not cached or report.get("ended_early"):
        return ""
    return (
        f"{cached}, not from the session: without that cache the run makes those requests, which the "
        f"recording may not have (replay with the cache off, {runtime.cache_off_text(counts)})"
    )


def _skipped(report: dict[str, Any]) -> str | None:
    """The recorded calls a replay that did not diverge skipped, in words: it never asked for them
    but asked for calls recorded after them, so it did not end early; None when it ended before them."""
    unserved = report.get("unserved") or []
    served = report.get("served") or []
    if not (served and unserved and min(unserved) < max(served)):
        return None
    seqs = ", ".join(str(s) for s in unserved[:5]) + (" …" if len(unserved) > 5 else "")
    calls = plural(len(unserved), "recorded call")
    return f"never asked for {calls} (seq {seqs}), though it asked for calls recorded after them"


def network_attempts(report: Mapping[str, Any]) -> Counter[str]:
    """Each destination a replay kept from the network (``network_blocked``, in the order first
    tried) and how many attempts were made at it (``network_attempts``: a client's retries are
    attempts at one destination). A report without ``network_attempts`` counts each entry of its
    ``network_blocked`` once (reports listed every attempt, the kernel's namespace still does)."""
    attempts = report.get("network_attempts")
    if isinstance(attempts, Mapping):
        return Counter({str(where): int(n) for where, n in attempts.items()})
    return Counter(report.get("network_blocked") or [])


def blocked_fields(attempts: Counter[str]) -> dict[str, Any]:
    """The report's ``network_blocked`` (each destination once) and ``network_attempts`` (how many
    attempts at each) from ``attempts``."""
    return {"network_blocked": list(attempts), "network_attempts": dict(attempts)}


def blocked_text(report: Mapping[str, Any]) -> str:
    """The destinations a replay kept from the network, in words: each once, with how many attempts
    when more than one."""
    return ", ".join(
        where if n == 1 else f"{where} ({n} attempts)" for where, n in network_attempts(report).items()
    )


def problems(report: dict[str, Any]) -> list[str]:
    """Why a replay that did not diverge still did not reproduce its recording, in words."""
    out = []
    if report.get("ended_early"):
        unasked = _skipped(report) or "ended before asking for every recorded call"
        out.append("the run " + unasked + _cache_hint(report))
    if report.get("network_blocked"):
        out.append("the run tried to reach the network")
    return out + list(report.get("ending") or [])


def unrecorded_tools(report: dict[str, Any], field: str = "unrecorded_tools") -> dict[str, int]:
    """The tools the recorded run's model asked for that its recording has no calls of, and how many
    times (its end's ``unrecorded_tools``): if the program ran them, they ran for real in this replay.
    Empty when tools ran live anyway, or an override changed what the model asked for (the
    recording's list says nothing of this run). ``field``: ``fewer_calls``, the tools it asked for
    more often than calls of them were recorded (the asks more), instead."""
    missing = (report.get("recorded_end") or {}).get(field)
    if not isinstance(missing, dict) or (report.get("sources") or {}).get("tools") == "live":
        return {}
    if any(o.get("applied") for o in report.get("overrides") or []):
        return {}
    return {str(n): int(k) for n, k in missing.items()}


#: The connections a recording made through a client forkpoint does not capture (a gRPC channel):
#: their calls are not in the session, so a replay did not serve them.
_UNRECORDED_CONNECTIONS = (
    "the recording connected to {where} through a client forkpoint does not capture: those calls were "
    "not served from it, but made again or refused"
)


def _some(items: list[str]) -> str:
    """The first three of ``items``, ``; ``-joined, `` …`` when there are more."""
    return f"{'; '.join(items[:3])}{' …' if len(items) > 3 else ''}"


def _started_programs(started: list[str]) -> str:
    """Words for the Python programs a replay started that its recording did not (today's code)."""
    return f"this run started {plural(len(started), 'Python program')} the recording did not, which ran unrecorded"


def _unreplayed(report: dict[str, Any]) -> list[str]:
    """What of the recorded run a replay that reproduced ran for real, not from the recording, in
    words: the Python programs it started, the tools the recording has no calls of, the model
    answers a framework's own cache gave, and the calls of clients forkpoint does not capture."""
    out = []
    if cached := _from_cache(report):
        out.append(cached)
    programs = report.get("unrecorded_programs") or []
    if programs:
        out.append(
            f"{plural(len(programs), 'Python program')} it started, not recorded, ran again: {_some(programs)}"
        )
    if started := report.get("started_programs") or []:
        out.append(f"{_started_programs(started)}: {_some(started)}")
    tools = unrecorded_tools(report)
    if tools:
        names = ", ".join(f"{n} ({plural(k, 'call')})" for n, k in tools.items())
        out.append(f"tools the recording has no calls of ran for real if the program ran them: {names}")
    if fewer := unrecorded_tools(report, "fewer_calls"):
        names = ", ".join(f"{n} ({plural(k, 'call')})" for n, k in fewer.items())
        out.append(
            "tools the model asked for more often than the recording has calls of ran for real if "
            f"another function of the program answers to their name: {names}"
        )
    if connections := report.get("unrecorded_connections"):
        out.append(_UNRECORDED_CONNECTIONS.format(where=", ".join(connections)))
    return out


#: Identical calls served to racing callers (:func:`ambiguous`), in words; said in a verdict and
#: in a divergence report.
_RACED = (
    "identical calls that were answered differently when recorded were served to several threads, "
    "asyncio tasks or processes"
)


def caveat(report: dict[str, Any]) -> str | None:
    """Why a replay that reproduced may still not have handed the program what the recorded run
    got, in words (what follows "ok, but"), or None: identical calls answered differently served
    to racing callers, a tool that changed state in place, MCP messages whose request cannot be
    told, model answers not held to the order they came in live, a wait for the first finished
    future that got fewer than live (or a served call's where live one of the program's own won),
    a process pool's futures taken as they finished, or a thread pool's (or asyncio's made of them), secrets served as their placeholders. Each
    that applies is said (one hid the others)."""
    uncertain = []
    if report.get("ambiguous"):
        n = sum(len(g) for g in report["ambiguous"])
        uncertain.append(
            f"{n} {_RACED}, and which got which answer cannot be told from the "
            f"recording (seq {'; '.join(', '.join(map(str, g)) for g in report['ambiguous'])})"
        )
    if report.get("changed_in_place"):
        said = "; ".join(
            f"tool {_plain(str(c.get('tool')))!r} changed {', '.join(_plain(str(x)) for x in c.get('changed') or [])}"
            for c in report["changed_in_place"]
        )
        uncertain.append(
            f"when recorded, {said} in place, which this replay did not do (it does "
            "not run a tool's body): what the program read of it afterwards may differ (--tools live runs it)"
        )
    if report.get("mcp_shared"):
        uncertain.append(
            "an MCP server sent messages (log messages, sampling, elicitation, progress) "
            "while several requests were in flight, and which each came for cannot be told from the "
            "recording: they were handed to the agent's callbacks with the latest of them, maybe in "
            f"another order than they came (seq {', '.join(map(str, report['mcp_shared']))})"
        )
    if report.get("mcp_beside"):
        uncertain.append(
            "an MCP server sent messages for requests while others were in flight: each was handed to "
            "its own request's callbacks, in its order, but not interleaved with the other requests' "
            f"messages and results as they came (seq {', '.join(map(str, report['mcp_beside']))})"
        )
    if report.get("emitted_inner"):
        said = ", ".join(
            f"{plural(int(c.get('events') or 0), 'custom event')} of tool {_plain(str(c.get('tool')))!r} "
            f"(seq {c.get('seq')})"
            for c in report["emitted_inner"]
        )
        uncertain.append(
            f"when recorded, a run inside a tool's (a chain or subgraph it ran) dispatched {said}, "
            "which this replay, not running the tool's body, dispatched again from the tool's own run: "
            "with its run id, tags and metadata (astream_events' parent_ids, langgraph_node)"
        )
    if untold := report.get("objects_untold"):
        said = ", ".join(repr(_plain(str(t))) for t in untold)
        uncertain.append(
            f"{'tool ' + said + ' is a method' if len(untold) == 1 else 'tools ' + said + ' are methods'} "
            "called on several objects, which could not be told apart (no recorded object, or more than "
            "one, had the attributes one had at its first call): each was served the recorded calls in "
            "their order, or those of the object whose first call came in its place, and may have got "
            "another object's answer"
        )
    if report.get("model_order"):
        uncertain.append(
            f"{plural(len(report['model_order']), 'model answer')} came live before those of calls sent "
            "earlier, and a replay answers each at once: the program may have taken them in another "
            f"order than live (seq {', '.join(map(str, report['model_order']))})"
        )
    if report.get("waits_short"):
        uncertain.append(
            f"{plural(len(report['waits_short']), 'wait')} for finished futures got fewer of them than "
            "live: the program may have taken another way"
        )
    if report.get("waits_untold"):
        uncertain.append(
            f"{plural(len(report['waits_untold']), 'wait')} for finished futures could not be told "
            "from those of the recording's other processes, which got other numbers of them: each got "
            "the usual number (one for the first finished, all for the others)"
        )
    if report.get("waits_own"):
        uncertain.append(
            f"{plural(len(report['waits_own']), 'wait')} got a served call's future where live "
            f"{'it' if len(report['waits_own']) == 1 else 'they'} got one of the program's own (a timer, "
            "a computation that finished first live), and could not wait for it: the program may have "
            "taken another way"
        )
    from .pools import THREAD_POOLS_WHOSE

    for key, whose, which, held in (
        ("process_pools", "a process pool's futures", "ProcessPoolExecutor, ", "order and number"),
        ("thread_pools", THREAD_POOLS_WHOSE, "", "order"),
    ):
        if pools := report.get(key):
            hows = sorted({p["waits"] for p in pools})
            uncertain.append(
                f"{len(pools)} {' or '.join(hows)} on {whose} ({which}{', '.join(p['at'] for p in pools)}) "
                f"{'was' if len(pools) == 1 else 'were'} not held to the {held} they finished in live: "
                "the program may have taken them otherwise"
            )
    said_all = ["not certain: " + "; ".join(uncertain)] if uncertain else []
    if report.get("placeholders_served"):
        seqs = report["placeholders_served"]
        said_all.append(
            f"{plural(len(seqs), 'recorded answer')} held secrets scrubbed when recorded, and the "
            f"program was handed their placeholders, not the values it got live (seq "
            f"{', '.join(map(str, seqs[:10]))}{' …' if len(seqs) > 10 else ''}; docs/security.md)"
        )
    if lost := report.get("pieces_lost"):
        n = sum(p["pieces"] for p in lost)
        said_all.append(
            f"{plural(n, 'stream piece')} the recording holds empty (a chunk a scrubbed secret filled) "
            f"{'was' if n == 1 else 'were'} not handed to the program, which read {'it' if n == 1 else 'them'} "
            f"live (seq {', '.join(str(p['seq']) for p in lost)})"
        )
    return "; ".join(said_all) or None


#: A report's ``live_calls`` counters as messages name them: models and tools, then the HTTP calls
#: made live that no provider recognizes, by kind (as a recording's summary names them).
_LIVE_NAMES = {"models": "model", "tools": "tool", **{k: KIND_NAMES[k] for k in ("http", "mcp", "telemetry")}}


def live_text(live: Mapping[str, int], sep: str = ", ") -> str:
    """A report's ``live_calls`` in words (``1 model, 0 tool, 1 plain HTTP``): models and tools
    always, the other kinds when some were made live."""
    return sep.join(
        f"{live.get(k, 0)} {name}"
        for k, name in _LIVE_NAMES.items()
        if k in ("models", "tools") or live.get(k)
    )


def summary_line(report: dict[str, Any]) -> str:
    """The one-line end-of-replay report. A what-if run that went as asked is no reproduction, and
    says so rather than "ok": its live calls were answered anew, or (fifo) recorded answers were
    served to requests that differed from the recording."""
    live_kinds = [kind for kind, source in (report.get("sources") or {}).items() if source == "live"]
    if report.get("divergence"):
        then = {
            "live": ", then went live as asked",
            "fifo": ", then served the recorded answers in their order as asked (fifo)",
        }
        if report.get("policy") == "fifo" and (
            "served_seq" not in report["divergence"] or report.get("unanswered")
        ):
            # fifo had no recorded call of that endpoint or tool left to serve: it stopped there.
            then["fifo"] = (
                ", with no recorded call of that endpoint or tool left for fifo to serve: stopped there"
            )
        status = "DIVERGED" + then.get(str(report.get("policy")), "")
        if report.get("policy") in then and report.get("ending"):
            # (it went on past the divergence: how it ended is the what-if's outcome, said as such)
            status += "; " + "; ".join(report["ending"])
    elif ended_by_override(report):
        how = "ok, ended early" if not report.get("ending") else "ENDED DIFFERENTLY"
        status = f"{how} after the override (the agent did not ask for every recorded call)" + "".join(
            f"; {d}" for d in report.get("ending") or []
        )
    elif problems(report):
        status = f"DID NOT REPRODUCE ({'; '.join(problems(report))})"
    elif live_kinds:
        status = f"finished with {' and '.join(live_kinds)} live (a what-if run, not a reproduction)"
    elif report.get("drift"):
        status = (
            "finished with drift (fifo served recorded answers to requests that differed: not a reproduction)"
        )
    else:
        status = "ok" if (but := caveat(report)) is None else f"ok, but {but}"
    unrecorded_mcp = report.get("unrecorded_mcp") or []
    unheard = [
        f"{m.get('method')} from MCP server {m.get('server')!r}"
        for m in unrecorded_mcp
        if not m.get("request")
    ]
    # (requests the agent's MCP client sent past ClientSession.send_request: mcp 2.x's subscriptions/listen)
    unasked = [
        f"{m.get('method')} to MCP server {m.get('server')!r}" for m in unrecorded_mcp if m.get("request")
    ]
    programs = report.get("unrecorded_programs") or []
    started = report.get("started_programs") or []
    cached = _from_cache(report)
    connections = report.get("unrecorded_connections") or []
    fewer = unrecorded_tools(report, "fewer_calls")
    if status == "ok" and (
        unheard
        or unasked
        or programs
        or started
        or connections
        or unrecorded_tools(report)
        or fewer
        or cached
    ):
        status = "ok, but incomplete"
    if status == "ok" and report.get("recording_unended"):
        status = (
            "ok, but the recording has no end (the recorded run was killed, or is still being recorded): "
            "whether this run ended as it did cannot be told"
        )
    unused = report["unused"]
    tail = f"{plural(len(unused), 'recorded event')} left unused" + (
        f" (seq {', '.join(map(str, unused[:10]))}{' …' if len(unused) > 10 else ''})" if unused else ""
    )
    live = report.get("live_calls") or {}
    if live_kinds and not report.get("divergence"):
        # (a recorded call of a kind this run made live is not served: not one the run failed to ask
        # for; no more of them than it made live: a call refused for the placeholder key was not)
        # (the models source is every HTTP call's: plain HTTP, MCP and telemetry made live too)
        counted = {
            k: n
            for k, n in live.items()
            if n and k in _LIVE_NAMES and (k if k in ("models", "tools") else "models") in live_kinds
        }
        made_live = min(len(set(unused) - set(report.get("unserved") or [])), sum(counted.values()))
        if made_live:
            kinds = " and ".join(_LIVE_NAMES[k] for k in counted)
            tail += f", {made_live} of them {kinds} calls this run made live"
    hosts = network_attempts(report)
    blocked = f"; network blocked ({len(hosts)}): {blocked_text(report)}" if hosts else ""
    extra = ""
    if report.get("loopback_refused"):
        extra += (
            f"; connections refused on loopback: {', '.join(report['loopback_refused'])} (nothing listened "
            "there in the replay's network namespace, which the host's own services are out of)"
        )
    if unservable := report.get("unservable"):
        # (a call whose override was refused was never offered its recording: the value given was)
        refused = {o.get("seq") for o in report.get("overrides") or [] if o.get("refused")}
        for what, seqs in (
            ("what was recorded", [s for s in unservable if s not in refused]),
            ("the override's value", [s for s in unservable if s in refused]),
        ):
            if seqs:
                extra += (
                    f"; asked for but served nothing, as {what} could not be handed back: "
                    f"{plural(len(seqs), 'call')} (seq {', '.join(map(str, seqs))})"
                )
        if inner := report.get("unservable_inner"):
            extra += (
                f", nor the {plural(len(inner), 'call')} recorded inside {'it' if len(unservable) == 1 else 'them'} "
                f"(seq {', '.join(map(str, inner))})"
            )
    extra += "".join(f"; WARNING: {w}" for w in report.get("ignore_warnings") or [])
    if report.get("covered"):
        extra += f"; {plural(len(report['covered']), 'call')} served inside the tool calls that made them"
    if report.get("overrides"):
        applied = sum(1 for o in report["overrides"] if o["applied"])
        extra += f"; {applied}/{len(report['overrides'])} override(s) applied"
    if any(live.get(k) for k in _LIVE_NAMES):
        extra += f"; live calls: {live_text(live)}"
    if report.get("drift"):
        extra += f"; {len(report['drift'])} request(s) drifted (fifo)"
    if digested := report.get("digest_matched"):
        extra += (
            f"; {plural(len(digested), 'request')} whose body was not stored when recorded (too large to "
            f"scrub) matched by the body's digest: seq {', '.join(map(str, digested))}"
        )
    if report.get("id_drift"):
        extra += f"; {plural(len(report['id_drift']), 'plain HTTP call')} served a recording that differed only in ids"
    aside = report.get("aside") or {}
    if aside.get("served") or aside.get("answered"):
        extra += (
            f"; telemetry/session calls: {aside.get('served', 0)} served from the recording, "
            f"{len(aside.get('answered') or [])} answered neutrally"
        )
    if report.get("out_of_order"):
        extra += (
            f"; {plural(len(report['out_of_order']), 'tool result')} released before calls that finished "
            "first live (this run did not ask for them in time)"
        )
    if unheard:
        extra += (
            f"; not recorded, so not handed to the agent's callbacks on this replay: {', '.join(unheard)} "
            "(sent while no request of the agent was in flight)"
        )
    if unasked:
        extra += (
            f"; not recorded, so answered with an error on this replay: {', '.join(unasked)} (sent past "
            "ClientSession.send_request)"
        )
    if programs:
        extra += (
            f"; the recording started {plural(len(programs), 'Python program')} it did not record, which ran "
            f"again as without forkpoint: {_some(programs)}"
        )
    if started:
        extra += f"; {_started_programs(started)}, as without forkpoint: {_some(started)}"
    if connections:
        extra += "; " + _UNRECORDED_CONNECTIONS.format(where=", ".join(connections))
    if cached:
        extra += f"; {cached}"
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
    ``ended differently``; else ``reproduced``. The detail ends with the report's warnings (an
    ignore rule about a tool the session lacks), whatever the status.
    """
    found = _verdict(report, exit_code, recorded_exit)
    if warned := (report or {}).get("ignore_warnings"):
        found["detail"] = "; ".join([d for d in [found["detail"]] if d] + warned)
    return found


def _verdict(report: dict[str, Any] | None, exit_code: int | None, recorded_exit: int | None) -> Verdict:
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
        call = divergence_call(div) + (f" ({what})" if what else "")
        # (a path an ignore rule took out of the key is not why it diverged: name one that is)
        changes = [c for c in div.get("diff") or [] if not c.get("ignored")] or div.get("diff") or []
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
        unasked = _skipped(report) or f"ended before asking for {plural(len(unserved), 'recorded call')}"
        reasons.append(unasked + _cache_hint(report))
    if report.get("network_blocked"):
        reasons.append(f"tried to reach the network ({blocked_text(report)})")
    reasons.extend(uncaught_differences(report))
    if not reasons and not report.get("reproduced", True):
        reasons.append("the replay report says it did not reproduce")
    if reasons:
        return {"status": "ended differently", "detail": "; ".join(reasons), "call": None, "path": None}
    # (as `forkpoint replay` says "ok, but …": a check row said "reproduced" and nothing else)
    unreplayed = _unreplayed(report)
    but = [caveat(report)] + (["incomplete: " + "; ".join(unreplayed)] if unreplayed else [])
    detail = "; ".join(b for b in but if b)
    return {"status": "reproduced", "detail": detail, "call": None, "path": None}


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One report for a replay whose command ran several replaying processes, from theirs (in the
    order they started): calls served by any, unused by all; the first divergence; counts summed;
    every uncaught exception. One report is returned as it is."""
    if len(reports) == 1:
        return reports[0]
    first = reports[0]
    served = sorted(set().union(*(r["served"] for r in reports)))
    covered = sorted(set().union(*(r.get("covered") or [] for r in reports)) - set(served))
    unused = sorted(set.intersection(*(set(r["unused"]) for r in reports)))
    unserved = sorted(set.intersection(*(set(r["unserved"]) for r in reports)))
    divergence = next((r["divergence"] for r in reports if r["divergence"]), None)
    blocked = sum((network_attempts(r) for r in reports), Counter[str]())
    overrides = []
    for i, o in enumerate(first["overrides"]):
        applied = any(r["overrides"][i]["applied"] for r in reports)
        refused = next(
            (r["overrides"][i]["refused"] for r in reports if "refused" in r["overrides"][i]), None
        )
        overrides.append(
            {**o, "applied": applied, **({"refused": refused} if refused and not applied else {})}
        )
    return conclude(
        {
            **first,
            "processes": len(reports),
            "served": served,
            "unservable": sorted(set().union(*(r.get("unservable") or [] for r in reports)) - set(served)),
            "unservable_inner": sorted(
                set().union(*(r.get("unservable_inner") or [] for r in reports)) - set(served) - set(covered)
            ),
            "covered": covered,
            "unserved": unserved,
            "matched": len(served) + len(covered),
            "unused": unused,
            "ended_early": bool(unserved) and divergence is None,
            "divergence": divergence,
            "drift": [d for r in reports for d in r["drift"]],
            "unanswered": [u for r in reports for u in r.get("unanswered") or []],
            "overrides": overrides,
            "live_calls": {
                "models": 0,
                "tools": 0,
                **sum((Counter(r["live_calls"]) for r in reports), Counter()),
            },
            **blocked_fields(blocked),
            "answered_from_cache": dict(
                sum((Counter(r.get("answered_from_cache") or {}) for r in reports), Counter())
            ),
            "out_of_order": [o for r in reports for o in r.get("out_of_order") or []],
            "waits_short": [w for r in reports for w in r.get("waits_short") or []],
            "waits_untold": [w for r in reports for w in r.get("waits_untold") or []],
            "waits_own": [w for r in reports for w in r.get("waits_own") or []],
            "process_pools": [w for r in reports for w in r.get("process_pools") or []],
            "thread_pools": [w for r in reports for w in r.get("thread_pools") or []],
            "model_order": sorted(s for r in reports for s in r.get("model_order") or []),
            "uncaught": [u for r in reports for u in r.get("uncaught") or []],
            "aside": {
                "recorded": first.get("aside", {}).get("recorded", 0),
                "served": sum(r.get("aside", {}).get("served", 0) for r in reports),
                "answered": [a for r in reports for a in r.get("aside", {}).get("answered", [])],
            },
            "id_drift": [d for r in reports for d in r.get("id_drift", [])],
            "alike_served": [a for r in reports for a in r.get("alike_served") or []],
            "placeholders_served": sorted({s for r in reports for s in r.get("placeholders_served") or []}),
            "pieces_lost": [p for r in reports for p in r.get("pieces_lost") or []],
            "digest_matched": sorted({s for r in reports for s in r.get("digest_matched") or []}),
            "objects_untold": sorted({t for r in reports for t in r.get("objects_untold") or []}),
            "started_programs": list(
                dict.fromkeys(p for r in reports for p in r.get("started_programs") or [])
            ),
        }
    )


def write_report(path: Path, report: dict[str, Any]) -> None:
    """Write a replay report as JSON, scrubbed (an override's value, a live request may hold a
    secret), owner-only (0600) and atomically (:func:`forkpoint.files.write_private`)."""
    from ..redact import scrub_json

    write_private(path, json_text(scrub_json(report), indent=True))
