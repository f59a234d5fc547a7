"""``--tool __main__:fn``: tools defined in the script being run (``forkpoint.capture.targets``)."""

from __future__ import annotations

import runpy
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import forkpoint
from forkpoint.capture import targets
from forkpoint.log import Session
from tests.cliutil import forkpoint_cli, with_this_path

SCRIPT = textwrap.dedent(
    """
    import os
    import sys

    LEDGER = os.environ["LEDGER"]


    def save_note(text, tag="misc"):
        with open(LEDGER, "a") as f:
            f.write(f"save_note {text}\\n")
        return {"saved": text, "tag": tag}


    class Notes:
        def add(self, text):
            with open(LEDGER, "a") as f:
                f.write(f"Notes.add {text}\\n")
            return len(text)


    def main():
        print(save_note("first"), Notes().add("second"), save_note("third", tag="x"))


    if __name__ == "__main__":
        main()
    """
)


@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "agent.py"
    path.write_text(SCRIPT)
    monkeypatch.setenv("LEDGER", str(tmp_path / "ledger.txt"))
    return path


def test_main_targets_are_wrapped_once_the_script_defines_them(script: Path, store: Path) -> None:
    """The script is not imported, it runs as ``__main__``: its functions and methods are wrapped
    as soon as it has defined them, before it calls them; the watch ends with the script's
    module-level code and leaves no trace function behind."""
    ledger = script.parent / "ledger.txt"
    previous = sys.gettrace()
    targets.install_import_hook(["__main__:save_note", "__main__:Notes.add"])
    try:
        with forkpoint.record(store=store) as rec:
            runpy.run_path(str(script), run_name="__main__")
        assert sys.gettrace() is previous
        calls = Session.load(rec.session_path).by_type("tool_call")
        assert [(c["tool"], c["args"], c["result"]) for c in calls] == [
            ("save_note", {"text": "first", "tag": "misc"}, {"saved": "first", "tag": "misc"}),
            ("Notes.add", {"text": "second"}, 6),
            ("save_note", {"text": "third", "tag": "x"}, {"saved": "third", "tag": "x"}),
        ]
        before = ledger.read_text()
        targets.install_import_hook(["__main__:save_note", "__main__:Notes.add"])
        with forkpoint.replay(rec.session_path) as rp:
            runpy.run_path(str(script), run_name="__main__")
        assert ledger.read_text() == before  # no tool body ran on replay
        assert rp.report()["reproduced"] is True
    finally:
        sys.settrace(previous)


def test_two_watches_of_the_same_targets_both_end_with_the_script(script: Path) -> None:
    """A test ``make-test`` writes runs the recorded command with ``run_command(tools=…)`` while
    the pytest plugin serves the cassette, which names the same ``--tool __main__:…`` targets: two
    watches, one over the other. The second put the first back when it ended, and nothing ended
    that one: every later test of the session ran traced."""
    previous = sys.gettrace()
    try:
        targets.install_import_hook(["__main__:save_note"])
        targets.install_import_hook(["__main__:save_note"])
        runpy.run_path(str(script), run_name="__main__")
        assert sys.gettrace() is previous
    finally:
        sys.settrace(previous)


def test_a_main_target_the_script_never_defines_is_said(
    script: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    previous = sys.gettrace()
    try:
        targets.install_import_hook(["__main__:save_nothing"])
        runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.settrace(previous)
    said = capsys.readouterr().err
    assert "--tool __main__:save_nothing: the script ran to its end without defining save_nothing" in said


@pytest.mark.slow
@pytest.mark.parametrize("how", ["script", "module"])
def test_cli_records_and_replays_tools_of_the_script_itself(
    script: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """``forkpoint record --tool __main__:save_note -- python agent.py`` (or ``python -m agent``):
    the tools are recorded under their own names, and the replay serves them without running them."""
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "store"
    cmd = [sys.executable, str(script)] if how == "script" else [sys.executable, "-m", "agent"]
    fp = [sys.executable, "-m", "forkpoint.cli"]
    tools = ["--tool", "__main__:save_note", "--tool", "__main__:Notes.add"]
    rec = subprocess.run(
        [*fp, "record", "--no-workspace", "--store", str(store), *tools, "--", *cmd],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert rec.returncode == 0, rec.stderr
    assert "(0 model calls, 3 tool calls)" in rec.stderr
    ledger = tmp_path / "ledger.txt"
    before = ledger.read_text()
    assert before.count("\n") == 3
    rep = subprocess.run(
        [*fp, "replay", "last", "--store", str(store)], capture_output=True, text=True, timeout=120
    )
    assert rep.returncode == 0, rep.stderr
    assert "replay ok: 3/3 events matched" in rep.stderr
    assert rep.stdout == rec.stdout
    assert ledger.read_text() == before


@pytest.mark.parametrize("how", ["script", "module"])
def test_a_target_named_by_the_scripts_own_module_name_says_to_name_it_main(
    script: Path, tmp_path: Path, how: str
) -> None:
    """``forkpoint record --tool agent:save_note -- python agent.py`` (or ``python -m agent``): the
    script runs as ``__main__``, never as ``agent``, so nothing is recorded; what is said names the
    target that would have been (a new user's first guess, seen in a walkthrough)."""
    cmd = [sys.executable, str(script)] if how == "script" else [sys.executable, "-m", "agent"]
    rec = forkpoint_cli(
        [
            "record",
            "--no-workspace",
            "--store",
            str(tmp_path / "store"),
            "--tool",
            "agent:save_note",
            "--",
            *cmd,
        ],
        cwd=tmp_path,
        env=with_this_path(),
        timeout=120,
    )
    assert rec.returncode == 0, rec.stderr
    assert "(0 model calls, 0 tool calls)" in rec.stderr
    assert (
        "--tool agent:save_note: the program never imported agent: it ran agent as its script, "
        "__main__; name the tool --tool __main__:save_note"
    ) in rec.stderr


def test_a_trace_function_already_in_place_keeps_working(script: Path) -> None:
    """A debugger or coverage that traces the program before the watch starts still sees every
    line of the script while forkpoint watches it, and is put back afterwards."""
    lines: list[int] = []

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if frame.f_code.co_filename != str(script):
            return None

        def local(frame: Any, event: str, arg: Any) -> Any:
            if event == "line":
                lines.append(frame.f_lineno)
            return local

        return local

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        targets.install_import_hook(["__main__:save_note"])
        runpy.run_path(str(script), run_name="__main__")
        assert sys.gettrace() is tracer
    finally:
        sys.settrace(previous)
    module_lines = [n for n, line in enumerate(SCRIPT.splitlines(), 1) if line and not line[0].isspace()]
    assert set(module_lines) - {1} <= set(lines)  # every top-level statement was seen by the debugger
    assert len(lines) > len(module_lines)  # and the lines of the functions the script called


DATACLASSES = textwrap.dedent(
    """
    from dataclasses import dataclass


    @dataclass
    class Note:  # (its generated methods are exec'd as "<module>" code with the script's globals)
        text: str


    def save_note(text):
        print("body ran")
        return Note(text)


    @dataclass
    class Toolbox:
        root: str

        def search(self, q):
            print("body ran")
            return [self.root + q]


    print(save_note("hello"), Toolbox("/").search("x"))
    """
)


@pytest.mark.parametrize("how", ["-c", "script"])
def test_a_dataclass_defined_before_a_main_target_does_not_end_the_watch(tmp_path: Path, how: str) -> None:
    """``dataclasses`` execs the methods it generates with the script's globals, in code named
    ``<module>``: the watch took it for the script, and its end for the script's end ("the script
    ran to its end without defining save_note"). Nothing was recorded, and the replay ran the
    tool bodies under "replay ok: 0/0"."""
    (tmp_path / "agent.py").write_text(DATACLASSES)
    store = tmp_path / "store"
    cmd = [sys.executable, "-c", DATACLASSES] if how == "-c" else [sys.executable, "agent.py"]
    fp = [sys.executable, "-m", "forkpoint.cli"]
    tools = ["--tool", "__main__:save_note", "--tool", "__main__:Toolbox.search"]
    rec = subprocess.run(
        [*fp, "record", "--no-workspace", "--store", str(store), *tools, "--", *cmd],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert rec.returncode == 0 and "(0 model calls, 2 tool calls)" in rec.stderr, rec.stderr
    assert "without defining" not in rec.stderr
    rep = subprocess.run(
        [*fp, "replay", "last", "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert rep.returncode == 0 and "replay ok: 2/2 events matched" in rep.stderr, rep.stderr
    assert rep.stdout == "Note(text='hello') ['/x']\n"


@pytest.mark.slow
def test_a_target_named_as_the_model_asks_for_it(tmp_path: Path) -> None:
    """mini-swe-agent's model asks for ``bash``, which ``LocalEnvironment.execute`` runs: recorded with
    ``--tool …:LocalEnvironment.execute`` its calls were kept as ``LocalEnvironment.execute``, and the
    recording, the replay and a fork each warned that ``bash`` was never recorded and ran for real
    (it did not). ``=bash`` names the tool as the model does."""
    from tests.modelserver import LocalServer
    from tests.suite.agents import SHELL_AGENT, cli_env

    (tmp_path / "agent.py").write_text(SHELL_AGENT)
    script = [[("bash", {"command": "echo ran >> ledger.txt; cat ledger.txt"})], "done"]
    cli = [sys.executable, "-m", "forkpoint.cli"]
    with LocalServer(chat_script=script) as srv:
        env = cli_env(AGENT_BASE_URL=srv.openai_base_url)
        rec = subprocess.run(
            [*cli, "record", "--store", "s", "--no-workspace", "--tool", "__main__:LocalEnvironment.execute=bash",
             "--", sys.executable, "agent.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    assert rec.returncode == 0 and "(2 model calls, 1 tool call)" in rec.stderr, rec.stderr
    assert "never recorded" not in rec.stderr, rec.stderr
    (call,) = Session.load(tmp_path / rec.stderr.split(") in ", 1)[1].split()[0]).by_type("tool_call")
    assert call["tool"] == "bash" and call["args"]["action"] == script[0][0][1], call
    rep = subprocess.run(
        [*cli, "replay", "last", "--store", "s"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )  # fmt: skip
    assert rep.returncode == 0 and "replay ok: 3/3 events matched" in rep.stderr, rep.stderr
    assert "has no calls of" not in rep.stderr, rep.stderr
    assert (tmp_path / "ledger.txt").read_text() == "ran\n"  # served, not run again
    bad = subprocess.run(
        [*cli, "record", "--store", "s", "--tool", "m:f= x", "--", sys.executable, "agent.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "=NAME (the tool's name, as the model asks for it)" in bad.stderr, (
        bad.stderr
    )
