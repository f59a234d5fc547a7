"""Python programs a recording starts and does not record (forkpoint/capture/programs.py): said at
record time, noted in the session, never silent."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import forkpoint
from forkpoint.log import Session


def test_the_python_programs_a_recording_starts_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Python program the recorded one starts runs as it would without forkpoint: its calls are not
    in the session, and nothing said so. Each one started outside a recorded tool is now named at
    the end of the recording and in a note; a program that is no Python one, one run by a tool's
    body (the tool's result is recorded), and one started with forkpoint's activation are not."""

    @forkpoint.tool
    def shell(command: str) -> int:
        return subprocess.run(command, shell=True, check=False).returncode

    key = "sk-ant-api03-" + "k" * 40
    with forkpoint.record(store=tmp_path / "store", workspace=None) as rec:
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        subprocess.run("cd . && python3 -c 'pass' | cat", shell=True, check=True)  # (a shell's command)
        subprocess.run(["env", "A=1", sys.executable, "-c", "pass", f"--key={key}"], check=True)
        subprocess.run(
            ["git", "--version", "python"], capture_output=True, check=False
        )  # (a word, no program)
        os.system("echo python > /dev/null")
        shell(f"{sys.executable} -c pass")
        subprocess.run(
            [sys.executable, "-c", "pass"], env={**os.environ, "FORKPOINT_MODE": "off"}, check=True
        )
    err = " ".join(capsys.readouterr().err.split())
    (note,) = [
        n for n in Session.load(rec.session_path).by_type("note") if "unrecorded_programs" in n["data"]
    ]
    started = note["data"]["unrecorded_programs"]
    assert started == [
        f"{sys.executable} -c pass",
        "/bin/sh -c cd . && python3 -c 'pass' | cat",
        f"env A=1 {sys.executable} -c pass --key=[REDACTED:anthropic-key:{started[2].split(':')[-1]}",
    ], started
    assert key not in str(started) and key not in err
    assert "this run started 3 Python programs forkpoint does not record" in err, err
    assert "a model or tool call they made is not in the session" in err
    with forkpoint.record(store=tmp_path / "store", workspace=None):
        subprocess.run(["true"], check=True)
    assert "Python program" not in capsys.readouterr().err  # (a new recording starts from none)


def test_a_python_program_on_a_later_line_of_a_shell_script_or_under_sh_ec_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shell's script was read as one command when its commands were one a line (a newline
    was a space to the lexer), and a shell's ``-c`` was seen only alone (``sh -ec``, ``bash -lc``
    were not read): both started Python unrecorded, and nothing said so. A ``-c`` past the
    script's name is the script's argument, not the shell's."""
    with forkpoint.record(store=tmp_path / "store", workspace=None) as rec:
        subprocess.run(f"true\n{sys.executable} -c pass", shell=True, check=True)
        subprocess.run(["sh", "-ec", f"{sys.executable} -c pass"], check=True)
        subprocess.run(["sh", "-o", "errexit", "-c", f"true && ({sys.executable} -c pass)"], check=True)
        subprocess.run(["sh", "-c", "exit 0", "-c", f"{sys.executable}"], check=True)  # ($0, not a script)
    (note,) = [
        n for n in Session.load(rec.session_path).by_type("note") if "unrecorded_programs" in n["data"]
    ]
    assert note["data"]["unrecorded_programs"] == [
        f"/bin/sh -c true\n{sys.executable} -c pass",
        f"sh -ec {sys.executable} -c pass",
        f"sh -o errexit -c true && ({sys.executable} -c pass)",
    ]
    assert "this run started 3 Python programs" in " ".join(capsys.readouterr().err.split())


def test_a_what_if_session_names_the_python_programs_its_run_started(tmp_path: Path) -> None:
    """A replay that records a what-if session (a pytest cassette's update in mode record is one)
    noted no program: the hook noted only under a recorder, so the session it wrote, the new
    cassette, lost the recording's note and its replays said "ok" while the program ran live."""
    from forkpoint.replay import summary_line

    @forkpoint.tool
    def lookup(q: str) -> str:
        return q

    with forkpoint.record(store=tmp_path / "store", workspace=None) as rec:
        lookup("a")
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    with forkpoint.replay(rec.session_path, tools="live", record_child=True) as rp:
        lookup("a")
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    child = Session.load(rp.report()["child_session"])
    notes = [
        n["data"]["unrecorded_programs"] for n in child.by_type("note") if "unrecorded_programs" in n["data"]
    ]
    assert notes == [[f"{sys.executable} -c pass"]]
    # (one the recording names, run by another environment's interpreter: not named a second time)
    other = tmp_path / "env" / "bin" / "python3"
    other.parent.mkdir(parents=True)
    other.symlink_to(sys.executable)
    with forkpoint.replay(rec.session_path) as rp:
        lookup("a")
        subprocess.run([str(other), "-c", "pass"], check=True)
    assert "Python program" not in summary_line(rp.report()).split("; the recording started")[0]
    assert rp.report().get("started_programs") == []


def test_a_replay_names_the_python_programs_its_run_started_that_the_recording_did_not(
    tmp_path: Path,
) -> None:
    """Today's code started a Python program the recorded run had not (its calls neither served nor
    recorded, run as without forkpoint), and the replay said "replay ok": the hook noted programs
    only for a session being written. The verdict is now "ok, but incomplete", naming it."""
    from forkpoint.replay import summary_line

    @forkpoint.tool
    def lookup(q: str) -> str:
        return q

    with forkpoint.record(store=tmp_path / "store", workspace=None) as rec:
        lookup("a")
    with forkpoint.replay(rec.session_path) as rp:
        lookup("a")
        subprocess.run([sys.executable, "-c", "pass"], check=True)
    report = rp.report()
    said = summary_line(report)
    assert said.startswith("replay ok, but incomplete"), said
    assert (
        "this run started 1 Python program the recording did not, which ran unrecorded, as without "
        f"forkpoint: {sys.executable} -c pass" in said
    ), said
    assert report["reproduced"] and report.get("started_programs") == [f"{sys.executable} -c pass"]


def test_python_started_through_a_wrapper_a_runner_or_a_script_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only a command's first word past ``env``-like wrappers was read, and only as an
    interpreter's name: ``timeout 10 python``, ``env -i python``, ``nice -n 5 python``, ``uv run
    …``, a script whose ``#!`` line names Python (a package's console script, as ``pytest`` is)
    started Python unrecorded, and nothing said so. A program that is no Python one still is not
    named."""
    script = tmp_path / "agent-step"
    script.write_text(f"#!{sys.executable}\nprint('step')\n")
    script.chmod(0o755)
    shell_script = tmp_path / "other-step"
    shell_script.write_text("#!/bin/sh\necho python\n")
    shell_script.chmod(0o755)
    with forkpoint.record(store=tmp_path / "store", workspace=None) as rec:
        subprocess.run(["timeout", "10", sys.executable, "-c", "pass"], check=True)
        subprocess.run(["env", "-i", "A=1", sys.executable, "-c", "pass"], check=True)
        subprocess.run(["nice", "-n", "5", sys.executable, "-c", "pass"], check=True)
        subprocess.run([str(script)], check=True, capture_output=True)
        subprocess.run([str(shell_script)], check=True, capture_output=True)  # (no Python: not named)
        subprocess.run(f"true && {script}", shell=True, check=True, capture_output=True)
    (note,) = [
        n for n in Session.load(rec.session_path).by_type("note") if "unrecorded_programs" in n["data"]
    ]
    assert note["data"]["unrecorded_programs"] == [
        f"timeout 10 {sys.executable} -c pass",
        f"env -i A=1 {sys.executable} -c pass",
        f"nice -n 5 {sys.executable} -c pass",
        str(script),
        f"/bin/sh -c true && {script}",
    ]
    assert "this run started 5 Python programs" in " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize(
    ("argv", "python"),
    [
        (["uv", "run", "--frozen", "agent.py"], True),
        (["poetry", "run", "python", "-m", "agent"], True),
        (["conda", "run", "-n", "agents", "python"], True),
        (["uvx", "mcp-server-fetch"], True),
        # (an option's value is no program: it was read as one, and the Python after it missed)
        (["uv", "run", "--python", "3.12", "python", "-m", "agent"], True),
        (["timeout", "-s", "KILL", "10", "python", "agent.py"], True),
        (["env", "-u", "OPENAI_BASE_URL", "python"], True),
        (["sudo", "-u", "agent", "python3"], True),
        (["time", "-p", "python"], True),
        (["env", "-u"], False),
        (["uv", "pip", "list"], False),
        (["git", "status"], False),
    ],
)
def test_runners_of_python_environments_are_read(argv: list[str], python: bool) -> None:
    from forkpoint.capture.programs import _is_python, _programs

    assert any(_is_python(p) for p in _programs(argv)) is python
