"""``forkpoint make-test``: turn a recorded session — an incident — into a permanent test.

The session is copied as the test's cassette (``<into>/cassettes/<name>/``) and a test module
``<into>/test_<name>.py`` is written: its test runs the recorded Python command in the test's
process (:func:`forkpoint.run_command`) under ``@pytest.mark.forkpoint(cassette=…)``, so the pytest
plugin serves every model and tool call from the cassette, and asserts how the recorded run ended:
its exit code, and the type of the exception that ended it uncaught (or that none did). A comment
marks where the assertion the fix must satisfy goes, and how to re-record once the agent is fixed
(``pytest --forkpoint-mode=record``: replayed up to the first call that changed, live after;
``docs/pytest.md``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from ..checkpoint import verify_session
from ..diff import totals
from ..errors import SessionError, UsageError
from ..files import copy_dir_into_place
from ..log import Session, foreign
from ..orchestrate import map_command
from ..program import parse_command
from ..text import say

_NOT_IDENT = re.compile(r"[^0-9a-zA-Z_]+")


def ident_for(session: Session, name: str | None = None) -> str:
    """A Python identifier for the test and its cassette, from ``name``, else the session's name,
    else its id: ``incident-42`` → ``incident_42``."""
    text = name or session.header.get("name") or f"session_{session.id}"
    ident = _NOT_IDENT.sub("_", str(text)).strip("_").lower() or "session"
    return ident if not ident[0].isdigit() else f"session_{ident}"


def _line(text: object, limit: int = 160) -> str:
    """``text`` as one line safe inside a docstring or comment of the generated module."""
    return _comment(str(text).replace("\\", "/").replace('"""', "'''"), limit)


def _comment(text: object, limit: int = 160) -> str:
    """``text`` as one line of a comment of the generated module: its backslashes kept (a comment
    has no escapes, a docstring has: :func:`_line`), so that a quoted answer or message is the text
    the program printed, to copy into an assertion (``1 passed\\n``, not ``1 passed/n``)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _root_expr(test_dir: Path, root: Path) -> str:
    """Python for ``root`` as seen from a module in ``test_dir``: relative to the module's file when
    ``root`` holds it (the checkout moves with the test), else the absolute path."""
    try:
        depth = len(test_dir.resolve().relative_to(root.resolve()).parts)
    except ValueError:
        return f"Path({str(root.resolve())!r})"
    return f"Path(__file__).resolve().parents[{depth}]"


def _command_source(command: list[str], mapped: set[int]) -> str:
    """``COMMAND = [...]`` for the test file: the arguments at ``mapped`` (relative paths that were
    absolute ones under the recorded directory) as absolute paths under ``ROOT``, so the program
    gets (and sends on) a path a replay matches as the recorded one (:func:`forkpoint.match.relocated`)."""

    def under_root(rel: str) -> str:
        return "str(ROOT)" if rel == "." else f"str(ROOT / {rel!r})"

    def source(i: int, arg: str) -> str:
        if i not in mapped:
            return repr(arg)
        name, sep, value = arg.partition("=")
        return f"{name + sep!r} + {under_root(value)}" if sep and name.startswith("-") else under_root(arg)

    items = [source(i, a) for i, a in enumerate(command)]
    one_line = f"COMMAND = [{', '.join(items)}]"
    return one_line if len(one_line) < 100 else "COMMAND = [\n" + "".join(f"    {x},\n" for x in items) + "]"


def make_test(
    session: Session,
    *,
    into: Path,
    root: Path,
    name: str | None = None,
    force: bool = False,
    command: list[str] | None = None,
    trust: bool = False,
) -> tuple[Path, Path]:
    """Write the test of ``session`` into the folder ``into`` and copy the session beside it as its
    cassette; the test runs ``command`` (default: the recorded one, whose recorded directory maps to
    ``root``, see :func:`~forkpoint.orchestrate.map_command`) in ``root``. Returns (test file,
    cassette directory).

    Raises :class:`~forkpoint.errors.UsageError` for a session without an end event, a command that
    is not a Python program (a recorded shell script: give the Python command it runs), or when the
    test or cassette exists (unless ``force``), :class:`~forkpoint.errors.SessionError` for a
    session that fails verification, and :class:`~forkpoint.errors.UntrustedSession` for a recorded
    command that no trusted key signed (unless ``trust``, or ``command`` is given), as the test
    would run it. A cassette that exists is replaced whole or not at all.
    """
    end = session.end()
    if end is None:
        raise UsageError(
            f"session {session.id} has no end event (still being recorded, or killed): "
            "there is no ending for the test to assert"
        )
    code = end.get("exit_code")  # (an int or None: the log refuses any other, events.envelope_problem)
    argv = session.header.get("argv") or []
    mapped: set[int] = set()  # the arguments that named the recorded directory: written under ROOT
    vouched = False  # (a trusted key signed it: checked below when the test runs the recorded command)
    if command:
        command = list(command)
    elif not argv or session.header.get("imported_from"):
        raise UsageError(
            f"session {session.id} has no recorded command to run (an imported session): give the Python "
            f"command that runs the agent, forkpoint make-test {session.path} -- python agent.py …"
        )
    else:
        from ..record import refuse_self_recording

        refuse_self_recording(
            session.header, session.id, f"forkpoint make-test {session.path} -- python agent.py"
        )
        if not trust:  # the test would run it: as forkpoint replay would
            from ..signing import require_trusted

            require_trusted(session.path, session.id, [str(a) for a in argv])
            vouched = True
        command = map_command(list(argv), session.header.get("cwd"), root.resolve())
        mapped = {i for i, (a, b) in enumerate(zip(argv, command, strict=True)) if str(a) != b and i}
    try:
        kind, _, _ = parse_command(command)
    except UsageError as exc:
        raise UsageError(f"{exc} (forkpoint make-test {session.path} -- python agent.py …)") from None
    if kind != "file" or not command[0].endswith(".py"):
        command = ["python", *command[1:]]  # this interpreter, whatever the recording's was
    v = verify_session(session.path, git=False, values=False)  # (``session`` is loaded: its values read)
    if v.problems:
        raise SessionError(
            f"session {session.id} fails verification, so it may not be what was recorded: {v.problems[0]}"
        )
    if not vouched:  # (the cassette goes into the checkout all the same: said, once)
        from ..signing import doubt

        doubted = doubt(session.path, session.id)
        if doubted:
            say(f"forkpoint: WARNING: {doubted}")
    ident = ident_for(session, name)
    test_file = into / f"test_{ident}.py"
    cassette = into / "cassettes" / ident
    for existing in (test_file, cassette):
        if existing.exists() and not force:
            raise UsageError(f"{existing} exists; choose another --name, or replace it with --force")
    into.mkdir(parents=True, exist_ok=True)
    if cassette.resolve() != session.path.resolve():  # (made from its own cassette: it is in place)
        copy_dir_into_place(session.path, cassette, leave_out=foreign)  # (nothing else the folder has)
    tools = list(session.header.get("tools") or [])
    tags = ", ".join(f"{k}={v}" for k, v in (session.header.get("tags") or {}).items() if v is not None)
    reason = f" ({end['reason']})" if end.get("reason") else ""
    final = totals(session)["final_answer"]
    try:
        shown = test_file.resolve().relative_to(root.resolve())
    except ValueError:
        shown = test_file.resolve()
    lines = [
        f'"""{_line(session.header.get("name") or session.id)}: a test made by `forkpoint make-test` from '
        f"session {session.id}.",
        "",
        f"Recorded {_line(session.header.get('created'))} in {_line(session.header.get('cwd'))}"
        + (f" ({_line(tags)})" if tags else "")
        + ".",
        f"The session is this test's cassette, cassettes/{ident}/: the test runs the recorded command in",
        "this process and the forkpoint pytest plugin serves every model and tool call from the",
        "cassette, offline (docs/pytest.md in forkpoint).",
        '"""',
        "",
        "from pathlib import Path",
        "",
        "import pytest",
        "",
        "import forkpoint",
        "",
        f"#: Where the command runs: the recorded run's directory, {_line(session.header.get('cwd'))}, maps here.",
        f"ROOT = {_root_expr(into, root)}",
        "#: The recorded command"
        + (" (its paths under the recorded directory are under ROOT)." if mapped else "."),
        _command_source(command, mapped),
    ]
    if tools:
        lines += ["#: Functions recorded as tools by name (forkpoint record --tool).", f"TOOLS = {tools!r}"]
    lines += [
        "",
        "",
        f"@pytest.mark.forkpoint(cassette={f'cassettes/{ident}'!r})",
        # (the fixture, not only the marker: where pytest does not load the plugin, an unknown
        # marker is a warning and the test would run the agent live; a missing fixture is an error)
        f"def test_{ident}(forkpoint_session: object, monkeypatch: pytest.MonkeyPatch) -> None:",
        "    monkeypatch.chdir(ROOT)",
        f"    run = forkpoint.run_command(COMMAND{', tools=TOOLS' if tools else ''})",
        (
            f"    # How the recorded run ended: exit code {_line(code)}{_line(reason)}."
            if code is not None
            # (an imported session: its file holds the calls, not the program's exit)
            else f"    # The session holds no exit code{_line(reason)}: none is asserted."
        )
        + (" Its last model answer:" if final else ""),
    ]
    if final:
        lines.append(f"    #     {_comment(final, 100)}")
    if code is not None:
        lines.append(f"    assert run.exit_code == {code!r}")
    # (and how: another exception with the same exit code is another ending)
    raised = next(iter(end.get("uncaught") or []), None)
    if raised:
        message = _comment(raised.get("message") or "", 80)
        lines.append(
            f"    # It raised an uncaught {_line(raised.get('type'))}" + (f": {message}" if message else ".")
        )
        lines.append(f"    assert type(run.uncaught).__qualname__ == {raised.get('type')!r}")
    elif code is not None:
        lines.append("    assert run.uncaught is None")
    lines += [
        "    # TODO: the assertion the fix must satisfy goes here, on run.exit_code or on run.output (what",
        "    # the program printed), e.g.",
        '    #     assert "…" in run.output',
        "    # It fails against this recording, which reproduces the incident. Fix the agent, then",
        "    # re-record from the first call that changed (replayed before it, live after):",
        f"    #     pytest --forkpoint-mode=record {shown}",
        "    # From then on the test replays the new recording offline.",
        "",
    ]
    tmp = test_file.with_name(f".{test_file.name}.{os.getpid()}.tmp")
    tmp.write_text("\n".join(lines), encoding="utf-8")
    os.replace(tmp, test_file)
    return test_file, cassette
