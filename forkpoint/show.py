"""The readable timeline of a session (``forkpoint show``) and its JSON form (``show --json``).

A *turn* starts at each model call (but an SDK's retry of one that failed, the same request again);
the tool calls after it, up to the next model call, belong to it.
Calls are listed in the order they started (a tool run while a streamed answer was still read ends
before the model call that asked for it).
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Mapping
from typing import Any, TextIO, cast

from rich.console import Console

from .events import (
    divergence_place,
    endpoint,
    in_start_order,
    in_tool,
    mcp_session_request,
    mcp_tool_error,
    retries,
    tool_spans,
    withheld_bodies,
)
from .log import Session, json_text, to_json, with_deltas
from .patterns import compiled_later
from .providers import auxiliary, call_kind, genai_usage, kinds, recorded_response, response_fields
from .store import SessionInfo
from .text import escape, plural, visible

_MAX = 100


def _short(value: Any, limit: int = _MAX) -> str:
    """``value`` (text, or data as JSON) on one line of at most ``limit`` characters: each line
    break, with the whitespace around it, made one space; spaces otherwise kept, as they were (a
    file's indentation inside a tool call's JSON arguments is part of what the model sent)."""
    # (escaped as show --json does: data that holds a "$b64" key is not shown as bytes)
    text = value if isinstance(value, str) else json_text(to_json(value, escape=True)).decode()
    text = _BREAKS.sub(" ", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


#: A line break (or another control space) and the whitespace around it.
_BREAKS = compiled_later(r"\s*[\n\r\t\f\v\x1c-\x1f\x85\u2028\u2029]\s*")


def _args(args: Any) -> str:
    if not isinstance(args, dict):  # (a hand-edited session's: shown as it is, not read as names)
        return _short(args, 40)
    return ", ".join(f"{k}={_short(v, 40)}" for k, v in args.items())


def _ms(value: Any) -> str:
    """A duration in ms for people; ``"time unknown"`` when not recorded (imported sessions)."""
    if value is None:
        return "[dim]time unknown[/dim]"
    v = float(value)
    return f"{v / 1000:.2f} s" if v >= 1000 else f"{v:.1f} ms"


_SOURCES = {
    "replay": "[dim]replayed[/dim]",
    "override": "[bold magenta]OVERRIDE[/bold magenta]",
    "live": "[bold yellow]LIVE[/bold yellow]",
}


def _source(event: Mapping[str, Any]) -> str:
    """Where a what-if run's call came from (its ``source``); nothing for an ordinary recording."""
    src = event.get("source")
    if src is None:
        return ""
    seq = f" of #{event['recorded_seq']}" if event.get("recorded_seq") else ""
    return f"  {_SOURCES.get(str(src), escape(str(src)))}{seq}"


def model_call_line(event: Mapping[str, Any]) -> tuple[str, list[str]]:
    """(headline, detail lines) describing one model call."""
    s = event.get("summary") or {}
    resp = event.get("response") or {}
    # Input tokens as the export counts them: with what the prompt cache read and wrote, which
    # Anthropic's own count leaves out (and OpenAI's includes), said beside them.
    usage = genai_usage(s)
    # (the model's name, the provider's words: recorded text, which a hostile server or agent chose)
    parts = [
        escape(str(s.get("model") or "?")),
        f"[dim]{escape(str(s.get('provider', '?')))} {escape(str(s.get('api', '')))}[/dim]",
    ]
    if usage.get("input_tokens") is not None or usage.get("output_tokens") is not None:
        tokens_in, tokens_out = usage.get("input_tokens"), usage.get("output_tokens")
        read, written = usage.get("cache_read_input_tokens"), usage.get("cache_creation_input_tokens")
        cache = [f"{read} from cache"] * bool(read) + [f"{written} to cache"] * bool(written)
        parts.append(
            f"{'?' if tokens_in is None else tokens_in}→{'?' if tokens_out is None else tokens_out} tok"
            + (f" ({', '.join(cache)})" if cache else "")
        )
    parts.append(_ms(event.get("duration_ms")))
    if resp.get("body_kind") == "stream":
        chunks = resp.get("chunks") or []
        span = chunks[-1][0] if chunks else 0
        parts.append(
            f"stream {len(chunks)} chunks/{_ms(span)}"
            + ("" if resp.get("ended") == "complete" or s.get("stop_reason") else f" ({resp.get('ended')})")
        )
    if resp and resp.get("status", 200) >= 400:
        parts.append(f"[red]HTTP {resp['status']}[/red]")
    if s.get("error"):  # the provider's own error: an error body, or an error event inside a stream
        parts.append(f"[red]error: {escape(_short(s['error'], 80))}[/red]")
    if event.get("error"):
        parts.append(
            f"[red]{escape(str(event['error'].get('type')))}: {escape(_short(event['error'].get('message', ''), 60))}[/red]"
        )
    if s.get("stop_reason"):
        parts.append(f"stop={escape(str(s['stop_reason']))}")
    details = []
    got = response_fields(event["request"]["url"], recorded_response(event)) if resp else None
    if got is not None and got.reasoning:
        details.append(f"[dim]thought “{escape(_short(got.reasoning))}”[/dim]")
    if got is not None and got.text:
        details.append(f"[green]“{escape(_short(got.text))}”[/green]")
    for tc in s.get("tool_calls") or []:
        details.append(
            f"[yellow]→ {escape(str(tc.get('name')))}({escape(_short(tc.get('arguments') or '', 80))})[/yellow]"
        )
    for tc in s.get("server_tool_calls") or []:
        details.append(
            f"[blue]⚙ server tool {escape(str(tc.get('name')))}({escape(_short(tc.get('arguments') or '', 80))})[/blue]"
        )
    return "  ".join(parts), details + withheld_lines(event)


def withheld_lines(event: Mapping[str, Any]) -> list[str]:
    """Detail lines of a call's request and response bodies that were not stored (``withheld``), and
    why (said at record time on stderr, and at its end: a later reader learns it here)."""
    return [f"[red]{part} body NOT STORED: {escape(why)}[/red]" for part, why in withheld_bodies(event)]


def http_call_line(event: Mapping[str, Any]) -> str:
    """One line for an exchange that is no model call: its kind (``http``, ``telemetry``, ``mcp``
    with the JSON-RPC method), endpoint, status or error, and duration."""
    kind = call_kind(event)
    req = event.get("request") or {}
    what = escape(endpoint(event))
    if kind == "mcp":
        method = kinds.mcp_method(req.get("body") if req.get("body_kind") == "json" else None)
        what = escape(method) if method else what
    resp = event.get("response") or {}
    outcome = (
        f"[red]{escape(str(event['error'].get('type')))}[/red]"
        if event.get("error")
        else f"→ {resp.get('status', '?')}"
    )
    return f"{kind:<7} {what}  {outcome}  {_ms(event.get('duration_ms'))}{_source(event)}"


def end_lines(event: Mapping[str, Any]) -> list[str]:
    """Detail lines of an ``end`` event: that the recording stopped early (``incomplete``), the
    uncaught exceptions that ended the run, and where a what-if run diverged from its parent."""
    out = [
        f"[red]uncaught {escape(str(u.get('type')))}: {escape(_short(u.get('message', ''), 80))}[/red]"
        for u in event.get("uncaught") or []
        if isinstance(u, dict)
    ]
    if event.get("incomplete"):
        out.insert(
            0,
            f"[red]INCOMPLETE: recording stopped early ({escape(_short(str(event['incomplete']), 160))}); "
            "what the run did after that is not in the session[/red]",
        )
    # (said at record time on stderr only: a later reader of the session learnt nothing of them)
    for field, said, why in (
        (
            "unrecorded_tools",
            "that were never recorded",
            "a replay runs them for real if the program runs them",
        ),
        (
            "fewer_calls",
            "more often than they were recorded",
            "if another function of the program answers to that name, a replay runs it for real",
        ),
    ):
        tools = event.get(field)
        if isinstance(tools, dict) and tools:
            names = ", ".join(f"{n} ({plural(int(k), 'call')})" for n, k in tools.items())
            out.append(f"[yellow]the model asked for tools {said}: {escape(names)} ({why})[/yellow]")
    div = event.get("divergence")
    if isinstance(div, dict):
        place, more = divergence_place(div)
        here = f", this run's #{div['seq']}" if div.get("seq") else ""
        # (the label is the parent's call: this run's asked for something else)
        label = f" ({escape(str(div['label']))})" if div.get("label") else ""
        parent = f"; expected the parent's #{div['parent_seq']}{label}" if div.get("parent_seq") else label
        out.append(
            f"[yellow]diverged at the {place}{more}{here}{parent}: "
            f"{escape(_short(div.get('reason', ''), 160))}[/yellow]"
        )
    return out


class _Escaping:
    """A text stream that writes what its encoding cannot hold (a lone surrogate, from a file name
    decoded with ``surrogateescape``, in a session's strings) as backslash escapes, as Python's
    ``stderr`` does, where ``stdout`` would raise ``UnicodeEncodeError`` mid-timeline."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except UnicodeEncodeError:  # (raised before anything is written: the text is encoded first)
            encoding = self._stream.encoding or "utf-8"
            return self._stream.write(text.encode(encoding, "backslashreplace").decode(encoding))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def terminal() -> Console:
    """The console forkpoint prints to: the terminal's width; when piped, 200 columns and no hard
    wrapping of text (rich's default of 80 breaks timelines, tables and paths mid-phrase)."""
    import sys

    tty = sys.stdout.isatty()
    return Console(
        file=cast(TextIO, _Escaping(sys.stdout)),
        highlight=False,
        width=None if tty else 200,
        soft_wrap=not tty,
    )


def render(
    session: Session, console: Console | None = None, *, hold: Mapping[str, Any] | None = None
) -> None:
    """Print the session's header and timeline; ``hold``, the session's legal hold if it has one
    (:func:`forkpoint.store.retention.held`), is shown first."""
    console = console or terminal()
    h = session.header
    if hold is not None:
        from .store.retention import hold_reason

        console.print(
            f"[bold red]LEGAL HOLD[/bold red] {escape(hold_reason(hold))} "
            f"(since {escape(str(hold.get('since')))}, by {escape(str(hold.get('by')))}): "
            "rm, prune and scrub refuse this session"
        )
    git = h.get("git") or {}
    console.print(
        f"[bold]session {h['session_id']}[/bold]" + (f"  “{escape(str(h['name']))}”" if h.get("name") else "")
    )
    origin = h.get("imported_from")
    if origin:
        console.print(
            f"  imported {escape(str(origin.get('format')))} file {escape(str(origin.get('path')))}"
        )
    else:
        console.print(f"  command  {escape(shlex.join(str(a) for a in h.get('argv') or []))}")
    console.print(f"  started  {escape(str(h.get('created')))}   cwd {escape(str(h.get('cwd')))}")
    if git:
        console.print(
            f"  git      {escape(str(git.get('commit'))[:12])} {escape(str(git.get('branch') or '(detached)'))}"
            f"{' dirty' if git.get('dirty') else ''}"
        )
    tags = {k: v for k, v in (h.get("tags") or {}).items() if v is not None}
    if tags:
        console.print("  tags     " + escape(", ".join(f"{k}={v}" for k, v in tags.items())))
    console.print("  versions " + escape(", ".join(f"{k} {v}" for k, v in (h.get("versions") or {}).items())))
    parent = h.get("parent")
    if parent:
        at = f" at seq {parent['seq']}" if isinstance(parent, dict) and parent.get("seq") else ""
        pid = parent.get("session_id") if isinstance(parent, dict) else parent
        console.print(f"  parent   {escape(str(pid))}{escape(at)}")
    replay = h.get("replay") or {}
    if replay.get("overrides"):
        console.print("  what-if  " + escape(", ".join(map(str, replay["overrides"]))))
    console.print()
    turn = 0
    last: Mapping[str, Any] | None = None  # the turn's latest model call
    spans = tool_spans(session.events)
    inside: dict[str, list[Mapping[str, Any]]] = {}
    for e in session.events:
        if e["type"] == "model_call" and in_tool(e, spans):
            inside.setdefault(str(e["parent_span_id"]), []).append(e)
    for e in in_start_order(session.events):
        if e["type"] == "model_call" and in_tool(e, spans):
            continue  # shown under the tool call it belongs to
        if e["type"] == "model_call" and call_kind(e) != "model":
            console.print(f"        [dim]#{e['seq']:<3}[/dim] {http_call_line(e)}")
            for d in withheld_lines(e):
                console.print(f"                    {d}")
        elif e["type"] == "model_call":
            counts = auxiliary(e["request"].get("url"))  # (token counting, embeddings: no turn)
            retry = not counts and retries(e, last)
            turn += not (retry or counts)
            last = last if counts else e
            head, details = model_call_line(e)
            label = (
                " " * 7
                if counts
                else "[yellow]retry  [/yellow]"
                if retry
                else f"[bold cyan]turn {turn:>2}[/bold cyan]"
            )
            console.print(f"{label} [dim]#{e['seq']:<3}[/dim] model   {head}{_source(e)}")
            for d in details:
                console.print(f"                    {d}")
        elif e["type"] == "tool_call":
            error, lost = e.get("error"), e.get("unrecorded")
            if error is not None and "exit_status" in error:
                outcome = f"[red]left the process: {escape(str(error['message']))}[/red]"
            elif error is not None and "exec" in error:
                outcome = f"[red]replaced the program: {escape(_short(error['message'], 80))}[/red]"
            elif error is not None:
                outcome = (
                    f"[red]raised {escape(str(error['type']))}: {escape(_short(error['message'], 60))}[/red]"
                )
            elif lost is not None:
                outcome = f"[red]result NOT RECORDED ({escape(_short(lost.get('message'), 80))})[/red]"
            elif (failed := mcp_tool_error(e)) is not None:
                outcome = f"[red]failed (MCP isError): {escape(_short(failed, 80))}[/red]"
            else:
                # (in the stored form, as show --json, the HTML page and diff show it: a typed
                # value's line is what an override of it takes, whole up to the page's 160)
                outcome = f"→ {escape(_short(e.get('result'), 160))}"
            mcp = e.get("mcp")
            name = mcp.get("server") if mcp else None
            server = (
                f" [dim](MCP server {escape(str(name))})[/dim]"
                if name
                else " [dim](MCP)[/dim]"
                if mcp
                else ""
            )
            kind = "mcp" if mcp_session_request(e) else "tool"  # (MCP session traffic: no tool's call)
            console.print(
                f"        [dim]#{e['seq']:<3}[/dim] {kind:<7} [magenta]{escape(e['tool'])}[/magenta]"
                f"({escape(_args(e.get('args') or {}))}){server}  {_ms(e.get('duration_ms'))}{_source(e)}"
            )
            console.print(f"                    {outcome}")
            messages: list[dict[str, Any]] = list(mcp.get("received") or ()) if mcp else []
            # (a progress notification goes to the request's callback and to the session's handler:
            # counted once)
            received = Counter(str(m.get("method")) for m in messages if "to" not in m)
            handled = set(received)
            received.update(
                str(m.get("method")) for m in messages if "to" in m and m.get("method") not in handled
            )
            if received:
                sent = ", ".join(f"{m}" + (f" ×{n}" if n > 1 else "") for m, n in received.items())
                console.print(f"                    [dim]the server sent meanwhile: {escape(sent)}[/dim]")
            for sub in inside.get(str(e.get("span_id")), []):
                line = (
                    http_call_line(sub) if call_kind(sub) != "model" else "model   " + model_call_line(sub)[0]
                )
                console.print(f"                    [dim]↳ #{sub['seq']}[/dim] {line}")
                for d in withheld_lines(sub):
                    console.print(f"                      {d}")
        elif e["type"] == "note":
            data = e.get("data") or {}
            missed = data.get("unrecorded_connections") or data.get("unrecorded_programs")
            cached = data.get("answered_from_cache")
            if not missed and isinstance(cached, dict):
                missed = [f"{name} ×{n}" for name, n in cached.items()]
            tail = f": [yellow]{escape('; '.join(map(str, missed)))}[/yellow]" if missed else ""
            console.print(f"        [dim]#{e['seq']:<3}[/dim] note    {escape(str(e.get('text')))}{tail}")
        elif e["type"] == "value":  # deterministic: the agent's own clock and randomness
            console.print(
                f"        [dim]#{e['seq']:<3}[/dim] value   {escape(str(e.get('fn')))} → "
                f"{escape(_short(e.get('value'), 60))}{_source(e)}"
            )
        elif e["type"] == "outcome":
            passed = e.get("passed")
            state = (
                "[yellow]unknown[/yellow]"
                if passed is None
                else "[green]pass[/green]"
                if passed
                else "[red]fail[/red]"
            )
            why = f" ({escape(str(e['reason']))})" if e.get("reason") else f" (exit {e.get('exit_code')})"
            console.print(
                f"        [dim]#{e['seq']:<3}[/dim] outcome {state}{why}  {escape(str(e.get('command')))}  "
                f"{_ms(e.get('duration_ms'))}"
            )
        elif e["type"] == "end":
            code = e.get("exit_code")
            outcome = f"exit code {code}" if code is not None else "exit code unknown"
            if e.get("reason"):
                outcome += f" ({escape(str(e['reason']))})"
            console.print(
                f"[bold]end[/bold]     [dim]#{e['seq']:<3}[/dim] {outcome}  {_ms(e.get('duration_ms'))}"
            )
            for line in end_lines(e):
                console.print(f"                    {line}")
    if session.truncated:
        console.print("[yellow]log ends in an incomplete line: the recording was cut off[/yellow]")
    elif session.end() is None:
        console.print(
            "[yellow]no end event: the recording did not finish (still running, or killed)[/yellow]"
        )
    from .outcome import sweep_of

    sweep = sweep_of(session)
    if sweep is not None:  # (what its page draws: each arm measured or not, and why)
        console.print(
            "[bold]arms[/bold]    forked from it with an outcome command (the latest fork or sweep's):"
        )
        for line in _arm_lines(sweep):
            console.print(f"        {escape(line)}")


def _arm_lines(sweep: Mapping[str, Any]) -> list[str]:
    """A session's fork arms (:func:`~forkpoint.outcome.sweep_of`), a line per checkpoint: how many,
    their pass rate, and why those that measured nothing did not; and which were left out."""
    from .outcome import Rate

    lines = []
    for p in sweep["points"]:
        whys = Counter(map(str, p["not_measured"]))
        said = "".join(
            f"; not measured: {why}" + (f" ({n} arms)" if n > 1 else "") for why, n in whys.items()
        )
        rate = Rate(p["passed"], p["ran"]).text()
        lines.append(f"@{p['seq']} (turn {p['turn']}): {plural(p['arms'], 'arm')}, {rate}{said}")
    if sweep.get("note"):
        lines.append(str(sweep["note"]))
    return lines


def as_json(session: Session) -> dict[str, Any]:
    """The whole session, resolved, as JSON data: ``{"header", "events", "truncated"}``.

    Blobs are read and binary data is ``{"$b64": …}``, but a list the log stored as a delta of an
    earlier event's (a model call's request ``messages``, a checkpoint's carried context) stays
    one, ``{"$delta": {"base": S, "keep": K, "add": [...]}}``: the first K items of the same field
    of event S (those at the indices of its ``set`` pairs, if any, replaced), then ``add``
    (docs/format.md). Written out whole, every request of an agent
    that resends its conversation would make the output grow with the square of its length.
    Data that itself has a key ``$b64``, ``$delta`` or ``$lit`` is ``{"$lit": {…}}``."""
    events = [
        to_json(with_deltas(e, session.deltas.get(e["seq"], {})), escape=True) for e in session.records()
    ]
    return {"header": to_json(session.header, escape=True), "events": events, "truncated": session.truncated}


def render_listing(rows: list[SessionInfo], *, held: set[str] | frozenset[str] = frozenset()) -> str:
    """The ``forkpoint ls`` table as plain text (fast for tens of thousands of rows); the sessions
    ``held`` (ids) are under legal hold, marked ``HELD`` after their id."""
    cols = ("session", "name", "created", "model", "tool", "exit", "command")
    table = [cols]
    for r in rows:
        if r.error is not None:
            table.append((r.session_id, f"unreadable: {r.error}", "", "", "", "", ""))
            continue
        table.append(
            (
                r.session_id + (" HELD" if r.session_id in held else ""),
                str(r.header.get("name") or ""),
                str(r.header.get("created") or "")[:19],
                str(r.model_calls),
                str(r.tool_calls),
                ("—" if not r.complete else "?" if r.exit_code is None else str(r.exit_code))
                + (" incomplete" if r.incomplete else ""),
                # the last column: shown whole (a cut would hide the arguments), quoted as a shell
                # would (an imported session shows the `forkpoint import` that made it)
                shlex.join(str(a) for a in r.header.get("argv") or []),
            )
        )
    # (a name or a command holding a carriage return or an escape sequence would rewrite the row)
    shown = [[visible(cell, one_line=True) for cell in row] for row in table]
    widths = [max(len(row[i]) for row in shown) for i in range(len(cols) - 1)]
    out = []
    for row in shown:
        cells = [c.ljust(w) for c, w in zip(row, widths, strict=False)]
        out.append(("  ".join(cells) + "  " + row[-1]).rstrip())
    return "\n".join(out)
