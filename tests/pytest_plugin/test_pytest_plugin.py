"""The pytest plugin (forkpoint.pytest_plugin), driven through pytester: inner test files run
in-process against the tests' local model server (loopback only), first recording their cassettes,
then replaying them with the server stopped."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import openai  # noqa: F401 - imported once here, so the in-process inner runs do not re-import it
import pytest

from forkpoint import Session
from forkpoint.pytest_plugin import Settings, cassette_parts, ci_is_set, lock_folder, loopback_hosts
from forkpoint.signing import SIGNER, signature
from tests.cliutil import FORKPOINT
from tests.modelserver import LocalServer, Reply

pytest_plugins = ["pytester"]

INNER = """
import json
import os
import socket

import openai
import pytest

import forkpoint


@forkpoint.tool
def lookup(city: str) -> dict:
    with open(os.environ["TOOL_LOG"], "a") as f:
        f.write(city + "\\n")
    return {"city": city, "temp_c": 21}


def ask(prompt: str) -> str:
    client = openai.OpenAI(base_url=os.environ["MODEL_URL"], api_key="sk-test", max_retries=0)
    reply = client.chat.completions.create(
        model="demo-model", messages=[{"role": "user", "content": prompt}]
    )
    return reply.choices[0].message.content


@pytest.mark.forkpoint
def test_agent():
    answer = ask(os.environ.get("PROMPT", "What is the weather in Paris?"))
    assert answer
    assert lookup("Paris")["temp_c"] == 21


@pytest.mark.parametrize("n", [1, 2])
def test_turns(forkpoint_session, n):
    for i in range(int(os.environ.get("CALLS", n))):
        ask(f"question {i}")
    assert forkpoint_session.path.name == f"test_turns-{n}"
"""

NET = """
import json
import os
import socket

import pytest

import forkpoint


@pytest.mark.forkpoint
def test_connects():
    with socket.create_connection(("127.0.0.1", int(os.environ["LOCAL_PORT"])), timeout=5):
        pass


@pytest.mark.forkpoint(allow_hosts=["127.0.0.1"])
def test_connects_allowed_by_marker():
    with socket.create_connection(("127.0.0.1", int(os.environ["LOCAL_PORT"])), timeout=5):
        pass


@pytest.mark.forkpoint
def test_swallows_the_error():
    try:
        socket.create_connection(("127.0.0.1", int(os.environ["LOCAL_PORT"])), timeout=5).close()
    except ConnectionError:
        pass
"""


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    """An in-process inner pytest run with only this plugin (other installed plugins, such as
    hypothesis, cost seconds per run); the entry point itself is tested separately."""
    return pytester.runpytest("-p", "forkpoint.pytest_plugin", "-p", "no:cacheprovider", *args)


def tool_runs(tmp_path: Path) -> int:
    log = tmp_path / "tool.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def record_inner(pytester: pytest.Pytester, server: LocalServer) -> pytest.RunResult:
    pytester.makepyfile(test_agent=INNER)
    result = run(pytester)
    result.assert_outcomes(passed=3)
    return result


def test_a_recording_left_by_a_killed_run_is_removed_when_the_cassette_is_next_recorded(
    pytester: pytest.Pytester, server: LocalServer
) -> None:
    """A run killed while it recorded a cassette left its partial recording beside it
    (``.test_agent.recording-XXXXXX/``), hidden among the cassettes that get committed, and no later
    run removed it."""
    record_inner(pytester, server)
    root = pytester.path / "tests" / "cassettes" / "test_agent"
    stale = root / ".test_agent.recording-0a1b2c"
    (stale / "partial").mkdir(parents=True)
    (stale / "partial" / "session.jsonl").write_text('{"type":"header"')
    other = root / ".test_turns-1.recording-0a1b2c"  # another cassette's: not this test's to remove
    other.mkdir()
    run(pytester, "--forkpoint-mode=rewrite", "test_agent.py::test_agent").assert_outcomes(passed=1)
    assert not stale.exists() and other.exists()
    assert sorted(p.name for p in root.iterdir()) == [
        other.name,
        "test_agent",
        "test_turns-1",
        "test_turns-2",
    ]


def test_record_then_replay_offline(
    pytester: pytest.Pytester, server: LocalServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = record_inner(pytester, server)  # mode once, no cassettes: recorded live
    first.stdout.fnmatch_lines(["*cassettes in *: 0 replayed, 3 recorded, 0 updated*"])
    root = pytester.path / "tests" / "cassettes" / "test_agent"
    assert sorted(p.name for p in root.iterdir()) == ["test_agent", "test_turns-1", "test_turns-2"]
    session = Session.load(root / "test_agent")
    assert [e["type"] for e in session.events] == ["model_call", "tool_call", "end"]
    assert session.header["name"] == "test_agent.py::test_agent"
    assert len(Session.load(root / "test_turns-2").by_type("model_call")) == 2
    assert tool_runs(tmp_path) == 1
    requests_live = len(server.requests)

    server.stop()  # from here on, only the cassettes can answer
    second = run(pytester, "--forkpoint-mode=replay")
    second.assert_outcomes(passed=3)
    second.stdout.fnmatch_lines(["*cassettes in *: 3 replayed, 0 recorded, 0 updated*"])
    assert tool_runs(tmp_path) == 1  # the tool's body did not run again
    assert len(server.requests) == requests_live
    # `once` replays existing cassettes as well.
    run(pytester).assert_outcomes(passed=3)


def test_cassettes_under_a_rootdir_taken_from_where_pytest_started_are_said(
    pytester: pytest.Pytester, server: LocalServer
) -> None:
    """Without a configuration file pytest's rootdir is where it was started (or the tests' folder),
    and the default cassette folder with it: `pytest proj` from the parent records into
    ./tests/cassettes, `pytest` in proj/ into proj/tests/cassettes. A run that records there says so;
    one under a configuration file does not."""
    proj = pytester.mkdir("proj")
    (proj / "test_agent.py").write_text(INNER)
    floating = run(pytester, "proj")
    floating.assert_outcomes(passed=3)
    assert (pytester.path / "tests" / "cassettes" / "test_agent" / "test_agent").is_dir()
    floating.stdout.fnmatch_lines(["*WARNING: pytest found no configuration file*depends on the directory*"])

    (proj / "pytest.ini").write_text("[pytest]\n")
    anchored = run(pytester, "proj")
    anchored.assert_outcomes(passed=3)
    assert (proj / "tests" / "cassettes" / "test_agent" / "test_agent").is_dir()
    anchored.stdout.fnmatch_lines(["*cassettes in *: 0 replayed, 3 recorded, 0 updated*"])
    assert "no configuration file" not in anchored.stdout.str()


def test_changed_prompt_fails_with_the_divergence_report(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_inner(pytester, server)
    server.stop()
    monkeypatch.setenv("PROMPT", "What is the weather in Oslo?")
    result = run(pytester, "--forkpoint-mode=replay", "test_agent.py::test_agent")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*forkpoint: the run diverged from its cassette tests/cassettes/test_agent/test_agent",
            # where in the agent's code (the traceback is not shown), as `forkpoint replay` says
            "the call made at test_agent.py:* (ask) diverged from the recording.",
            "replay diverged at the 1st model call of this run (POST /v1/chat/completions)*",
            "Differences, recorded (seq 1) → actual:",
            "*~ $.body.messages[[]0[]].content: What is the weather in Paris? → What is the weather in Oslo?",
            "*re-record it: pytest --forkpoint-mode=record test_agent.py::test_agent",
            "FAILED test_agent.py::test_agent - Failed: forkpoint: the run diverged*",
        ]
    )
    # The failure is the divergence, not the SDK error it caused.
    assert "APIConnectionError" not in result.stdout.str()


CAUGHT = """
import json
import os

import openai
import pytest


def ask(prompt: str) -> str | None:
    client = openai.OpenAI(base_url=os.environ["MODEL_URL"], api_key="sk-test", max_retries=0)
    try:
        return client.chat.completions.create(
            model="demo-model", messages=[{"role": "user", "content": prompt}]
        ).choices[0].message.content
    except Exception:  # as a program run by forkpoint.run_command ends: its exception caught
        return None


@pytest.mark.forkpoint
def test_agent():
    assert ask(os.environ.get("PROMPT", "Hi")) is not None
"""


def test_a_caught_divergence_still_says_where_the_call_was_made(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A make-test test runs the agent with run_command, which catches the Divergence that ends it:
    the failure named the changed field but not the agent's line that made the call, which it
    named only when the Divergence reached the test."""
    pytester.makepyfile(test_caught=CAUGHT)
    run(pytester).assert_outcomes(passed=1)
    server.stop()
    monkeypatch.setenv("PROMPT", "Hello")
    result = run(pytester, "--forkpoint-mode=replay")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*forkpoint: the run diverged from its cassette tests/cassettes/test_caught/test_agent",
            "the call made at test_caught.py:* (ask) diverged from the recording.",
            "replay diverged at the 1st model call of this run (POST /v1/chat/completions)*",
        ]
    )


SKIPS = """
import os

import pytest

from test_agent import ask


@pytest.mark.forkpoint
@pytest.mark.parametrize("give_up", [pytest.skip, pytest.xfail], ids=["skip", "xfail"])
def test_gives_up(give_up):
    try:
        ask(os.environ.get("PROMPT", "Hi"))
    except Exception:  # (the SDK's error, or the Divergence inside it)
        give_up("the model API is unreachable")


@pytest.fixture
def answer():
    try:
        return ask(os.environ.get("PROMPT", "Hi"))
    except Exception:
        pytest.skip("no answer from the model API")


@pytest.mark.forkpoint
def test_skips_in_a_fixture(answer):
    assert answer
"""


def test_a_test_that_skips_or_xfails_on_the_divergence_fails_with_it(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A suite often turns an error of the model's SDK into a skip ("the API is unreachable"), in
    the test or in a fixture: a replay that did not reproduce was reported as skipped (or xfailed),
    in green, without a word of the divergence."""
    pytester.makepyfile(test_agent=INNER, test_skips=SKIPS)
    run(pytester, "test_skips.py").assert_outcomes(passed=3)
    server.stop()
    monkeypatch.setenv("PROMPT", "Hello")
    result = run(pytester, "--forkpoint-mode=replay", "test_skips.py")
    result.assert_outcomes(failed=2, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*forkpoint: the run diverged from its cassette tests/cassettes/test_skips/test_gives_up-skip",
            "the call made at test_agent.py:* (ask) diverged from the recording.",
            "(the test itself then skipped: the model API is unreachable)",
        ]
    )
    result.stdout.fnmatch_lines(["(the test itself then xfailed: the model API is unreachable)"])
    result.stdout.fnmatch_lines(
        [
            "*forkpoint: the run diverged from its cassette tests/cassettes/test_skips/test_skips_in_a_fixture",
            "(a fixture of the test then skipped: no answer from the model API)",
        ]
    )


MARKED_XFAIL = """
import os

import pytest

from test_agent import ask


@pytest.mark.forkpoint
@pytest.mark.xfail(reason="the model is flaky")
def test_marked():
    assert ask(os.environ.get("PROMPT", "Hi")) is not None
"""


def test_a_test_marked_xfail_whose_replay_diverges_fails_with_it(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test marked ``@pytest.mark.xfail`` (not strict: it passed live, XPASS) whose replay
    diverged was reported as xfailed, in green: the divergence's failure was taken for the failure
    the mark expects, and said nowhere but with ``-rx``."""
    pytester.makepyfile(test_agent=INNER, test_marked=MARKED_XFAIL)
    run(pytester, "test_marked.py").assert_outcomes(xpassed=1)
    server.stop()
    monkeypatch.setenv("PROMPT", "Hello")
    result = run(pytester, "--forkpoint-mode=replay", "test_marked.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*forkpoint: the run diverged from its cassette tests/cassettes/test_marked/test_marked"]
    )


FIXTURE_FIRST = """
import os

import pytest

from test_agent import ask


@pytest.fixture
def first_answer():
    return ask(os.environ.get("PROMPT", "Hi"))


def test_fixture_first(first_answer, forkpoint_session):
    assert first_answer and ask("and then?")
"""


def test_a_fixture_named_before_forkpoint_session_is_replayed_too(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fixture the test named before ``forkpoint_session`` was set up before the cassette: its
    model call was neither recorded nor replayed, and in mode replay it went to the model live,
    with a changed prompt, and the test passed."""
    pytester.makepyfile(test_agent=INNER, test_first=FIXTURE_FIRST)
    run(pytester, "test_first.py").assert_outcomes(passed=1)
    cassette = Session.load(pytester.path / "tests" / "cassettes" / "test_first" / "test_fixture_first")
    assert len(cassette.by_type("model_call")) == 2
    sent = len(server.requests)
    monkeypatch.setenv("PROMPT", "Hello")
    result = run(pytester, "--forkpoint-mode=replay", "test_first.py")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*~ $.body.messages[[]0[]].content: Hi → Hello"])
    assert len(server.requests) == sent


def test_unused_recorded_calls_fail(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_inner(pytester, server)
    server.stop()
    monkeypatch.setenv("CALLS", "1")  # test_turns[2] was recorded with two model calls
    result = run(pytester, "--forkpoint-mode=replay")
    result.assert_outcomes(passed=2, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*forkpoint: 1 recorded call(s) of cassette tests/cassettes/test_agent/test_turns-2 went unused*"
            "seq 2 POST /v1/chat/completions (demo-model)",
            "replay DID NOT REPRODUCE (the run ended before asking for every recorded call): "
            "1/2 events matched, 1 recorded event left unused (seq 2)",
            "FAILED test_agent.py::test_turns[[]2[]] - Failed: forkpoint: 1 recorded call(s)*",
        ]
    )


def test_a_cut_off_cassette_is_said_even_when_the_test_passes(
    pytester: pytest.Pytester, server: LocalServer
) -> None:
    """A cassette cut inside its last line (its ``end``) still serves every call, so the test
    passed and nothing said the committed file was damaged."""
    record_inner(pytester, server)
    server.stop()
    log = pytester.path / "tests" / "cassettes" / "test_agent" / "test_agent" / "session.jsonl"
    log.write_bytes(log.read_bytes()[:-40])
    result = run(pytester, "--forkpoint-mode=replay", "test_agent.py::test_agent")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*ReplayWarning: forkpoint: the cassette tests/cassettes/test_agent/test_agent ends in an incomplete line*"
        ]
    )


def test_an_edited_cassette_fails_verification_instead_of_serving_its_edits(
    pytester: pytest.Pytester, server: LocalServer
) -> None:
    """A cassette line edited by hand (as vcrpy cassettes are), or by a bad merge, breaks the hash
    chain: `forkpoint replay` refuses such a session, but the plugin served it without a word (an
    edited answer as if recorded), in replay and record modes alike."""
    record_inner(pytester, server)
    server.stop()
    log = pytester.path / "tests" / "cassettes" / "test_agent" / "test_agent" / "session.jsonl"
    lines = log.read_bytes().splitlines(keepends=True)
    # (The call itself is packed; its time is in the clear, and any edit breaks the chain.)
    edited = [i for i, line in enumerate(lines) if b'"type":"tool_call"' in line]
    lines[edited[0]] = re.sub(rb'"ts":"\d{4}', b'"ts":"1999', lines[edited[0]], count=1)
    log.write_bytes(b"".join(lines))
    for mode in ("replay", "record"):
        result = run(pytester, f"--forkpoint-mode={mode}", "test_agent.py::test_agent")
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines(
            [
                "forkpoint: the cassette of this test fails verification, so it may not be what was recorded: "
                f"*session.jsonl:{edited[0] + 1}: event seq * was modified (its hash does not match its content) "
                "(forkpoint verify tests/cassettes/test_agent/test_agent)*--forkpoint-mode=rewrite test_agent.py::test_agent"
            ]
        )
    assert b'"ts":"1999' in log.read_bytes()  # left as it is, for the user to look at


@pytest.mark.slow
def test_record_mode_rewrites_a_cassette_the_run_no_longer_matches(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_inner(pytester, server)
    root = pytester.path / "tests" / "cassettes" / "test_agent"
    before = {p.name: (p / "session.jsonl").read_bytes() for p in root.iterdir()}
    monkeypatch.setenv("PROMPT", "And in Rome?")
    result = run(pytester, "--forkpoint-mode=record")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*cassettes in *: 2 replayed, 0 recorded, 1 updated*"])
    after = {p.name: (p / "session.jsonl").read_bytes() for p in root.iterdir()}
    assert sorted(after) == sorted(before)  # no child sessions or temporary folders left behind
    assert after["test_turns-1"] == before["test_turns-1"]  # unchanged runs: cassette untouched
    assert after["test_agent"] != before["test_agent"]
    updated = Session.load(root / "test_agent")
    assert updated.by_type("model_call")[0]["request"]["body"]["messages"][0]["content"] == "And in Rome?"
    assert [e["type"] for e in updated.events] == ["model_call", "tool_call", "end"]
    assert not any("source" in e for e in updated.events)
    # One coherent recording, not a what-if of the old cassette: its end says no divergence from a
    # parent it does not have (forkpoint show printed "diverged at the 1st model call …; expected
    # the parent's #1" under a re-recorded cassette).
    assert updated.header["parent"] is None
    assert "divergence" not in updated.events[-1]
    # Signed, and naming its signer, like any recording (a signature.json removed from it is said)
    assert signature(root / "test_agent", updated.id).trusted
    assert updated.header[SIGNER] == signature(root / "test_agent", updated.id).key
    shown = subprocess.run(
        [*FORKPOINT, "show", str(root / "test_agent")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "diverged" not in shown
    server.stop()
    run(pytester, "--forkpoint-mode=replay").assert_outcomes(passed=3)


def _commands(result: pytest.RunResult, lead: str) -> list[str]:
    """The commands a run's failure messages tell the user to run, after ``lead``, in order."""
    pattern = re.compile(re.escape(lead) + r" (pytest .*)$")
    found = (pattern.search(line) for line in result.outlines)
    return list(dict.fromkeys(m.group(1) for m in found if m))


def run_command(pytester: pytest.Pytester, command: str) -> pytest.RunResult:
    """Run a ``pytest …`` command line as printed, in the current directory (like a user pasting it)."""
    argv = shlex.split(command)
    assert argv[0] == "pytest"
    return run(pytester, *argv[1:])


@pytest.mark.slow
def test_printed_commands_and_paths_work_from_where_pytest_ran(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pytest proj` from the parent of a project with its own ini file (like `pytest examples` from
    the repository root): the rootdir, and so the nodeids, are relative to proj/, but every command
    and path the plugin prints must work from the parent, where the user is."""
    proj = pytester.mkdir("proj")
    (proj / "pytest.ini").write_text("[pytest]\ntestpaths = tests\nforkpoint_dir = cassettes\n")
    (proj / "tests").mkdir()
    (proj / "tests" / "test_agent.py").write_text(INNER)

    missing = run(pytester, "--forkpoint-mode=replay", "proj")
    missing.assert_outcomes(failed=3)
    assert server.requests == []
    record = _commands(missing, "Record it once, against the real model:")
    assert record == [
        "pytest --forkpoint-mode=once proj/tests/test_agent.py::test_agent",
        "pytest --forkpoint-mode=once 'proj/tests/test_agent.py::test_turns[1]'",
        "pytest --forkpoint-mode=once 'proj/tests/test_agent.py::test_turns[2]'",
    ]
    missing.stdout.fnmatch_lines(["*no cassette for this test at proj/cassettes/test_agent/test_agent, *"])
    for command in record:  # each one, pasted where pytest ran, records its test (and only it)
        run_command(pytester, command).assert_outcomes(passed=1)
    header = Session.load(proj / "cassettes" / "test_agent" / "test_agent").header
    # The recorded command, too, selects the test in the recorded directory (forkpoint replay).
    assert header["argv"] == ["python", "-m", "pytest", "proj/tests/test_agent.py::test_agent"]
    assert Path(header["cwd"]) == pytester.path.resolve()
    assert header["name"] == "tests/test_agent.py::test_agent"  # the name stays the nodeid

    monkeypatch.setenv("PROMPT", "What is the weather in Oslo?")
    diverged = run(pytester, "--forkpoint-mode=replay", "proj")
    diverged.assert_outcomes(passed=2, failed=1)
    diverged.stdout.fnmatch_lines(
        ["*forkpoint: the run diverged from its cassette proj/cassettes/test_agent/test_agent"]
    )
    assert (pytester.path / "proj/cassettes/test_agent/test_agent" / "session.jsonl").is_file()
    rerecord = _commands(diverged, "If the change is intended, re-record it:")
    assert rerecord == ["pytest --forkpoint-mode=record proj/tests/test_agent.py::test_agent"]
    collected = run_command(pytester, rerecord[0] + " --collect-only -q")
    assert collected.ret == pytest.ExitCode.OK
    collected.stdout.fnmatch_lines(["*test_agent.py::test_agent", "1 test collected*"])

    updated = run_command(pytester, rerecord[0])
    updated.assert_outcomes(passed=1)
    updated.stdout.fnmatch_lines(["*cassettes in */proj/cassettes: 0 replayed, 0 recorded, 1 updated*"])
    rebuilt = Session.load(proj / "cassettes" / "test_agent" / "test_agent").header
    assert rebuilt["argv"] == ["python", "-m", "pytest", "proj/tests/test_agent.py::test_agent"]
    # The cassette locks are this user's alone (the temporary folder is shared).
    locks = lock_folder()
    assert locks.stat().st_mode & 0o777 == 0o700 and locks.stat().st_uid == os.getuid()
    assert all(p.stat().st_mode & 0o777 == 0o600 for p in locks.iterdir())
    # Signed like a recording, so `forkpoint check` of the cassettes runs its command as it would.
    signed = signature(proj / "cassettes" / "test_agent" / "test_agent", rebuilt["session_id"])
    assert signed.trusted, signed.describe()
    server.stop()
    run(pytester, "--forkpoint-mode=replay", "proj").assert_outcomes(passed=3)


def test_a_projects_configuration_applies_when_pytest_runs_from_a_parent(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """proj/forkpoint.toml's [redact] and [match] rules are in force for proj's tests when pytest
    runs from the parent (`pytest proj`, as `pytest examples` from a repository root). They were
    looked up from the current directory only: the customer id was written into the cassette, and
    the replay diverged on the clock the [match] rule leaves out."""
    proj = pytester.mkdir("proj")
    (proj / "pytest.ini").write_text("[pytest]\ntestpaths = tests\n")
    (proj / "forkpoint.toml").write_text(
        '[redact]\npatterns = [{ kind = "customer-id", regex = "CUST-[0-9]{8}" }]\n'
        '[match]\nignore = [{ path = "$.body.messages[*].content", regex = "Current time: [0-9]+" }]\n'
    )
    (proj / "tests").mkdir()
    (proj / "tests" / "test_cfg.py").write_text(
        "import os\nimport pytest\nfrom test_agent import ask\n\n"
        "@pytest.mark.forkpoint\ndef test_customer():\n"
        "    assert ask('I am CUST-12345678. Current time: ' + os.environ['NOW'])\n"
    )
    (proj / "tests" / "test_agent.py").write_text(INNER)
    monkeypatch.setenv("NOW", "1000")
    run(pytester, "proj/tests/test_cfg.py").assert_outcomes(passed=1)
    assert "CUST-12345678" in str(server.requests[0]["body"])  # the live run is unchanged
    cassette = proj / "tests" / "cassettes" / "test_cfg" / "test_customer"
    content = Session.load(cassette).by_type("model_call")[0]["request"]["body"]["messages"][0]["content"]
    assert "CUST-12345678" not in content and "[REDACTED:customer-id:" in content
    assert "Current time: 1000" in content

    from forkpoint import config

    assert config.anchor() is None  # the test's anchor ends with it
    monkeypatch.setenv("NOW", "2000")
    server.stop()
    run(pytester, "--forkpoint-mode=replay", "proj/tests/test_cfg.py").assert_outcomes(passed=1)
    # `forkpoint replay CASSETTE` from where pytest ran, which finds no configuration: the test's
    # redaction rules and the cassette's [match] rules apply there too.
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    env.update(CI="", PYTEST_ADDOPTS="-p no:cacheprovider -p no:phoenix")
    rep = subprocess.run(
        [*FORKPOINT, "replay", str(cassette)],
        cwd=pytester.path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert "1 passed" in rep.stdout


@pytest.mark.slow
def test_printed_commands_outside_the_invocation_dir_are_absolute(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tests that are not below the directory pytest ran in are shown by absolute path; the options
    that decide where the cassette goes are repeated in the command."""
    proj = pytester.mkdir("proj")
    (proj / "pytest.ini").write_text("[pytest]\n")
    (proj / "tests").mkdir()
    (proj / "tests" / "test_agent.py").write_text(INNER)
    monkeypatch.chdir(pytester.mkdir("elsewhere"))
    target = "../proj/tests/test_agent.py::test_agent"
    missing = run(pytester, "--forkpoint-mode=replay", "--forkpoint-dir", "rec", target)
    missing.assert_outcomes(failed=1)
    missing.stdout.fnmatch_lines(["*no cassette for this test at rec/test_agent/test_agent, *"])
    record = _commands(missing, "Record it once, against the real model:")
    test_file = (proj / "tests" / "test_agent.py").resolve()
    assert record == [f"pytest --forkpoint-mode=once --forkpoint-dir rec {test_file}::test_agent"]
    run_command(pytester, record[0]).assert_outcomes(passed=1)
    cassette = pytester.path / "elsewhere" / "rec" / "test_agent" / "test_agent"
    assert Session.load(cassette).header["argv"] == [
        "python", "-m", "pytest", "--forkpoint-dir", "rec", f"{test_file}::test_agent"
    ]  # fmt: skip

    monkeypatch.setenv("PROMPT", "What is the weather in Oslo?")
    options = ["-c", "../proj/pytest.ini", "--rootdir", "../proj", "-o", "forkpoint_allow_hosts=::1"]
    options += ["-o", "console_output_style=classic", "--forkpoint-dir", "rec"]
    options += ["--forkpoint-allow-host", "127.0.0.1"]
    diverged = run(pytester, "--forkpoint-mode=replay", *options, target)
    diverged.assert_outcomes(failed=1)
    diverged.stdout.fnmatch_lines(
        ["*forkpoint: the run diverged from its cassette rec/test_agent/test_agent"]
    )
    rerecord = _commands(diverged, "If the change is intended, re-record it:")
    assert rerecord == [  # the options that decide the cassette and the allowed hosts, as given
        "pytest --forkpoint-mode=record -c ../proj/pytest.ini --rootdir ../proj -o forkpoint_allow_hosts=::1 "
        f"--forkpoint-dir rec --forkpoint-allow-host 127.0.0.1 {test_file}::test_agent"
    ]
    run_command(pytester, rerecord[0]).stdout.fnmatch_lines(["*0 replayed, 0 recorded, 1 updated*"])
    assert not (proj / "tests" / "cassettes").exists()  # nothing went to the rootdir's default


@pytest.mark.slow
def test_rerecord_command_keeps_the_import_mode_that_names_the_cassette(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under ``--import-mode=importlib`` a test module in ``tests/`` (no ``__init__.py``) is
    ``tests.test_agent``, under the default ``test_agent``: the printed re-record command must
    update the cassette that diverged, not record another one beside it."""
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_agent.py").write_text(INNER)
    target = "tests/test_agent.py::test_agent"
    run(pytester, "--import-mode=importlib", target).assert_outcomes(passed=1)
    cassettes = pytester.path / "tests" / "cassettes"
    assert [p.name for p in cassettes.iterdir()] == ["tests.test_agent"]
    monkeypatch.setenv("PROMPT", "What is the weather in Oslo?")
    diverged = run(pytester, "--forkpoint-mode=replay", "--import-mode=importlib", target)
    diverged.assert_outcomes(failed=1)
    (rerecord,) = _commands(diverged, "If the change is intended, re-record it:")
    updated = run_command(pytester, rerecord)
    updated.assert_outcomes(passed=1)
    updated.stdout.fnmatch_lines(["*0 replayed, 0 recorded, 1 updated*"])
    assert [p.name for p in cassettes.iterdir()] == ["tests.test_agent"]


@pytest.mark.slow
def test_failed_recording_is_kept_aside_not_as_the_cassette(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_agent=INNER)
    pytester.makepyfile(
        test_fail="import os\nimport pytest\nfrom test_agent import ask\n\n"
        "@pytest.mark.forkpoint\ndef test_answer():\n"
        "    assert ask(os.environ.get('PROMPT', 'hi'))\n    assert os.environ.get('BREAK') != '1'\n"
    )
    run(pytester, "test_fail.py").assert_outcomes(passed=1)
    cassette = pytester.path / "tests" / "cassettes" / "test_fail" / "test_answer"
    before = (cassette / "session.jsonl").read_bytes()
    monkeypatch.setenv("BREAK", "1")
    monkeypatch.setenv("PROMPT", "something else")
    result = run(pytester, "--forkpoint-mode=rewrite", "test_fail.py")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*0 recorded, 0 updated, 1 recording(s) of failed tests kept as <test>.failed*"]
    )
    assert (cassette / "session.jsonl").read_bytes() == before  # a failing run never replaces it
    failed = Session.load(cassette.with_name("test_answer.failed"))
    assert failed.by_type("model_call")[0]["request"]["body"]["messages"][0]["content"] == "something else"
    monkeypatch.delenv("BREAK")
    run(pytester, "--forkpoint-mode=rewrite", "test_fail.py").assert_outcomes(passed=1)
    assert not cassette.with_name("test_answer.failed").exists()  # stale once a recording passed
    assert sorted(p.name for p in cassette.parent.iterdir()) == ["test_answer"]


def test_a_cassette_whose_deletion_fails_is_not_lost_when_it_is_rewritten(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A passing re-recording deleted the old cassette first, then moved the new one in: a deletion
    that failed halfway (a file it could not remove, a Ctrl-C) left a cassette without its log and
    threw the new recording away. The new one is swapped in whole, and only then the old deleted."""
    import errno
    import shutil

    from forkpoint import pytest_plugin

    pytester.makepyfile(
        test_one="import pytest\nfrom test_agent import ask\n\n"
        "@pytest.mark.forkpoint\ndef test_answer():\n    assert ask('hi')\n"
    )
    pytester.makepyfile(test_agent=INNER)
    run(pytester, "test_one.py").assert_outcomes(passed=1)
    cassette = pytester.path / "tests" / "cassettes" / "test_one" / "test_answer"
    before = (cassette / "session.jsonl").read_bytes()
    real = shutil.rmtree

    class Failing:
        @staticmethod
        def rmtree(path: Path, ignore_errors: bool = False) -> None:
            if Path(path) == cassette:  # (the first file goes, then one cannot be removed)
                (cassette / "session.jsonl").unlink()
                raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(path))
            real(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(pytest_plugin, "shutil", Failing)
    run(pytester, "--forkpoint-mode=rewrite", "test_one.py")
    after = Session.load(cassette)
    assert (cassette / "session.jsonl").read_bytes() != before
    assert after.by_type("model_call")[0]["request"]["body"]["messages"][0]["content"] == "hi"
    assert sorted(p.name for p in cassette.parent.iterdir()) == ["test_answer"]


def test_skipped_test_leaves_no_recording(pytester: pytest.Pytester, server: LocalServer) -> None:
    pytester.makepyfile(test_agent=INNER)
    pytester.makepyfile(
        test_skip="import pytest\nfrom test_agent import ask\n\n"
        "@pytest.mark.forkpoint\ndef test_later():\n    ask('hi')\n    pytest.skip('not today')\n"
    )
    run(pytester, "test_skip.py").assert_outcomes(skipped=1)
    folder = pytester.path / "tests" / "cassettes" / "test_skip"
    assert not folder.exists() or list(folder.iterdir()) == []


@pytest.fixture
def listener() -> Iterator[int]:
    """A loopback TCP port that accepts connections (and nothing else)."""
    sock = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
                conn.close()
            except OSError:
                continue

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield sock.getsockname()[1]
    finally:
        stop.set()
        t.join(2)
        sock.close()


def test_network_is_blocked_in_replay_except_allowed_loopback(
    pytester: pytest.Pytester, listener: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCAL_PORT", str(listener))
    pytester.makepyfile(test_net=NET)
    run(pytester, "--forkpoint-mode=once").assert_outcomes(passed=3)

    blocked = run(pytester, "--forkpoint-mode=replay")
    blocked.assert_outcomes(passed=1, failed=2)
    blocked.stdout.fnmatch_lines(
        [
            f"*forkpoint: the test tried to reach the network during the replay of *test_connects: "
            f"127.0.0.1:{listener}. A replay never touches the network*--forkpoint-allow-host 127.0.0.1*",
            f"*forkpoint: the test tried to reach the network during the replay of *test_swallows_the_error: "
            f"127.0.0.1:{listener}*",
            "FAILED test_net.py::test_connects - Failed: forkpoint: the test tried to reac*",
        ]
    )
    blocked.stdout.no_fnmatch_line("FAILED *test_connects_allowed_by_marker*")
    # Mode record replays what matches, so it refuses the same connections, and says so the same
    # way: a test that swallowed the refusal passed here and then failed in CI.
    updating = run(pytester, "--forkpoint-mode=record")
    updating.assert_outcomes(passed=1, failed=2)
    updating.stdout.fnmatch_lines(
        [
            "FAILED test_net.py::test_connects - Failed: forkpoint: the test tried to reac*",
            "FAILED test_net.py::test_swallows_the_error - Failed: forkpoint: the test tri*",
        ],
        consecutive=False,
    )

    allowed = run(pytester, "--forkpoint-mode=replay", "--forkpoint-allow-host", "127.0.0.1")
    allowed.assert_outcomes(passed=3)

    bad = run(pytester, "--forkpoint-allow-host", "93.184.216.34")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*'93.184.216.34' is not a loopback address*"])


def test_ci_defaults_to_replay_and_never_records(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile(test_agent=INNER)
    result = run(pytester)
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        [
            "*forkpoint: no cassette for this test at tests/cassettes/test_agent/test_agent, and mode replay "
            "(the CI environment variable is set) never touches the network. Record it once*",
            "*pytest --forkpoint-mode=once test_agent.py::test_agent",
        ]
    )
    assert server.requests == []  # no test body ran, nothing reached the model
    assert not (pytester.path / "tests" / "cassettes").exists()
    # An explicit mode on the command line still wins over CI.
    run(pytester, "--forkpoint-mode=once").assert_outcomes(passed=3)


def test_ini_options_and_marker_name(pytester: pytest.Pytester, server: LocalServer) -> None:
    pytester.makeini("[pytest]\nforkpoint_dir = recorded\nforkpoint_mode = once\n")
    pytester.makepyfile(
        test_named="import pytest\nfrom test_agent import ask\n\n"
        "@pytest.mark.forkpoint('shared run')\ndef test_one():\n    ask('hi')\n"
    )
    pytester.makepyfile(test_agent=INNER)
    run(pytester, "test_named.py").assert_outcomes(passed=1)
    named = pytester.path / "recorded" / "test_named"
    assert [p.name for p in named.iterdir()] == ["shared-run-" + _hash8("shared run")]
    pytester.makeini("[pytest]\nforkpoint_mode = sometimes\n")
    bad = run(pytester, "test_named.py")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR


def _hash8(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:8]


@pytest.mark.slow
def test_cassette_names_are_stable_and_filesystem_safe(pytester: pytest.Pytester) -> None:
    items = pytester.getitems(
        """
        import pytest

        @pytest.mark.parametrize("x", ["a/b c", "plain", "ü:*?", "x" * 200])
        def test_p(x):
            pass

        class TestGroup:
            def test_m(self):
                pass
        """
    )
    names = [cassette_parts(i) for i in items]
    assert len(set(names)) == len(items)
    module = names[0][0]
    assert module == "test_cassette_names_are_stable_and_filesystem_safe"
    tests = [t for _, t in names]
    assert tests[1] == "test_p-plain"
    assert tests[-1] == "TestGroup.test_m"
    for t in tests:
        assert all(c.isalnum() or c in "_.-" for c in t) and len(t) <= 80 + len("test_p-")
    assert tests[0].startswith("test_p-a-b-c-") and len(tests[0].rsplit("-", 1)[1]) == 8
    assert [cassette_parts(i) for i in items] == names  # stable


def test_nested_classes_of_one_name_get_a_cassette_each(pytester: pytest.Pytester) -> None:
    """``TestA.TestInner.test_x`` and ``TestB.TestInner.test_x`` are two tests: they shared the
    cassette ``TestInner.test_x``, so the second replayed (or overwrote) the first one's run."""
    items = pytester.getitems(
        """
        class TestA:
            class TestInner:
                def test_x(self):
                    pass

        class TestB:
            class TestInner:
                def test_x(self):
                    pass
        """
    )
    assert [cassette_parts(i)[1] for i in items] == ["TestA.TestInner.test_x", "TestB.TestInner.test_x"]


def test_plugin_is_registered_through_the_entry_point(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    config = pytester.parseconfig()
    assert config.pluginmanager.get_plugin("forkpoint") is not None
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        ["*--forkpoint-mode=*", "*--forkpoint-dir=DIR*", "*--forkpoint-allow-host=HOST*"]
    )
    result = pytester.runpytest("--markers")
    result.stdout.fnmatch_lines(["@pytest.mark.forkpoint(name=None, *"])


def test_mode_precedence_and_helpers() -> None:
    s = Settings(cli_mode=None, ini_mode="rewrite", ci=False, directory=Path("."), allow_hosts=frozenset())
    assert s.mode_for(None) == ("rewrite", "the forkpoint_mode ini option")
    assert s.mode_for("record")[0] == "record"
    s.ci = True
    assert s.mode_for("record")[0] == "replay"
    s.cli_mode = "once"
    assert s.mode_for("record")[0] == "once"
    assert ci_is_set({"CI": "true"}) and ci_is_set({"CI": "1"})
    assert not ci_is_set({}) and not ci_is_set({"CI": "false"}) and not ci_is_set({"CI": ""})
    assert loopback_hosts(["localhost"], "x") == {"localhost", "127.0.0.1", "::1"}
    assert loopback_hosts(["::1", "127.0.0.2"], "x") == {"::1", "127.0.0.2"}
    with pytest.raises(ValueError, match="not a loopback address"):
        loopback_hosts(["example.com"], "x")


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.skipif(not (EXAMPLES / "cassettes").is_dir(), reason="examples/cassettes is absent")
def test_example_suite_replays_green_from_its_committed_cassettes(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")  # replay only: no server runs, nothing may be recorded
    monkeypatch.delenv("WEATHER_AGENT_BASE_URL", raising=False)
    before = sorted(p.relative_to(EXAMPLES) for p in EXAMPLES.rglob("*") if "__pycache__" not in p.parts)
    result = run(pytester, str(EXAMPLES))
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(["*cassettes in */examples/cassettes: 4 replayed, 0 recorded, 0 updated*"])
    after = sorted(p.relative_to(EXAMPLES) for p in EXAMPLES.rglob("*") if "__pycache__" not in p.parts)
    assert after == before


@pytest.mark.slow
def test_a_cassette_replays_under_the_cli_too(tmp_path: Path, server: LocalServer) -> None:
    """A cassette is a session whose command is the test: ``forkpoint replay CASSETTE`` runs that
    pytest under the CLI's replay, and the plugin steps aside for it (it used to start a second
    replay in the same process and fail)."""
    import os
    import subprocess
    import sys

    project = tmp_path / "proj"
    project.mkdir()
    (project / "test_agent.py").write_text(INNER)
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    # (-p no:phoenix: the pytest plugin of the arize-phoenix test dependency takes seconds to import)
    env.update(CI="", PYTEST_ADDOPTS="-p no:cacheprovider -p no:phoenix")
    test = "test_agent.py::test_agent"
    rec = subprocess.run(
        [sys.executable, "-m", "pytest", "--forkpoint-mode=once", test],
        cwd=project, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert rec.returncode == 0, rec.stdout + rec.stderr
    server.stop()
    runs = tool_runs(tmp_path)
    cassette = project / "tests" / "cassettes" / "test_agent" / "test_agent"
    rep = subprocess.run(
        [sys.executable, "-m", "forkpoint.cli", "replay", str(cassette)],
        cwd=project, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert "1 passed" in rep.stdout
    assert "replay ok: 2/2 events matched" in rep.stderr
    assert "PytestAssertRewriteWarning" not in rep.stdout + rep.stderr  # forkpoint was imported first
    assert tool_runs(tmp_path) == runs  # the tool was served, not run
    # A what-if of a cassette is recorded in the default store, not among the cassettes.
    before = sorted(p.relative_to(project) for p in (project / "tests").rglob("*"))
    what_if = subprocess.run(
        [sys.executable, "-m", "forkpoint.cli", "replay", str(cassette), "--override", 'model#1.text="Sunny."'],
        cwd=project, env={k: v for k, v in env.items() if k != "FORKPOINT_STORE"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert what_if.returncode == 0, what_if.stdout + what_if.stderr
    assert sorted(p.relative_to(project) for p in (project / "tests").rglob("*")) == before
    assert "this what-if run is recorded in .forkpoint" in " ".join(what_if.stderr.split())
    assert len([d for d in (project / ".forkpoint").iterdir() if (d / "session.jsonl").is_file()]) == 1


def test_forkpoint_otlp_sends_a_recording_tests_spans_live(
    pytester: pytest.Pytester, server: LocalServer, make_server: Callable[..., LocalServer]
) -> None:
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http", reason="needs the otel extra")
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    receiver = make_server()
    ok = ExportTraceServiceResponse().SerializeToString()
    receiver.route("/v1/traces", lambda request: Reply(ok, ctype="application/x-protobuf"), method="POST")

    def names() -> list[str]:
        spans = []
        for r in receiver.requests:
            req = ExportTraceServiceRequest.FromString(r["raw"])
            spans += [s.name for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans]
        return spans

    pytester.makepyfile(test_agent=INNER)
    run(pytester, "test_agent.py::test_agent", "--forkpoint-otlp", receiver.url).assert_outcomes(passed=1)
    assert names() == ["chat demo-model", "execute_tool lookup", "invoke_agent"]
    # A replayed test sends nothing: it is not a run of the agent.
    run(pytester, "test_agent.py::test_agent", "--forkpoint-otlp", receiver.url).assert_outcomes(passed=1)
    assert len(names()) == 3
    bad = run(pytester, "--forkpoint-otlp", "localhost:4318")
    assert "--forkpoint-otlp" in bad.stderr.str() and "http" in bad.stderr.str()


TMP_PATH_INNER = """
import json
import os

import pytest

import forkpoint


@forkpoint.tool
def save(folder):
    with open(os.path.join(folder, "out.txt"), "w") as f:
        f.write("x")
    return {"saved": os.path.join(folder, "out.txt")}


@pytest.mark.forkpoint
def test_saves(tmp_path):
    assert save(str(tmp_path))["saved"].endswith("out.txt")
"""


def test_tmp_path_is_left_out_the_same_with_and_without_xdist(tmp_path: Path) -> None:
    """A cassette recorded by ``pytest`` failed under ``pytest -n 2`` (and back): the rule was made
    from this run's folder, which under xdist has ``popen-gw0`` in it, and the recorded path had not."""
    from forkpoint.match import Ignore, tool_key
    from forkpoint.pytest_plugin import tmp_path_rules

    base = tmp_path / "pytest-of-u"
    serial, xdist = tmp_path_rules(base / "pytest-303"), tmp_path_rules(base / "pytest-306" / "popen-gw0")
    assert serial == xdist
    keys = {
        tool_key("save", {"folder": str(base / run / "test_saves0")}, Ignore(rules))
        for run in ("pytest-303", "pytest-306/popen-gw0", "pytest-7/popen-gw12")
        for rules in (serial, xdist)
    }
    assert len(keys) == 1
    other = tool_key("save", {"folder": str(base / "pytest-303" / "test_other0")}, Ignore(serial))
    assert other not in keys  # (what is under the folder still counts)


def test_a_test_that_hands_tmp_path_to_a_tool_replays_in_the_next_run(pytester: pytest.Pytester) -> None:
    """pytest's ``tmp_path`` is under a new ``pytest-N`` folder every run, so a test that handed it
    to a tool never replayed (the arguments differed) and no ignore rule was offered. This run's
    temporary folder is left out of the match keys."""
    pytester.makepyfile(test_tmp=TMP_PATH_INNER)
    first = run(pytester, f"--basetemp={pytester.path / 'run-1'}")
    first.assert_outcomes(passed=1)
    (cassette,) = (pytester.path / "tests" / "cassettes" / "test_tmp").iterdir()
    (call,) = Session.load(cassette).by_type("tool_call")
    assert str(pytester.path / "run-1") in call["args"]["folder"]
    second = run(pytester, "--forkpoint-mode=replay", f"--basetemp={pytester.path / 'run-2'}")
    second.assert_outcomes(passed=1)
    second.stdout.fnmatch_lines(["*cassettes in *: 1 replayed, 0 recorded, 0 updated*"])
    assert not list((pytester.path / "run-2").rglob("out.txt"))  # served: the tool did not run


SUBPROCESS_INNER = """
import subprocess
import sys

import pytest


@pytest.mark.forkpoint
def test_runs_the_agent_as_a_subprocess():
    # (the agent would call the model from its own process: nothing of it reaches the cassette)
    done = subprocess.run([sys.executable, "-c", "print('agent ran')"], capture_output=True, text=True)
    assert done.stdout == "agent ran\\n"


@pytest.mark.forkpoint
def test_calls_a_tool():
    import forkpoint

    assert forkpoint.tool(lambda: 1, name="one")() == 1
"""


def test_a_cassette_that_holds_no_call_is_said_when_recorded_and_when_replayed(
    pytester: pytest.Pytester,
) -> None:
    """A marked test that ran its agent as a subprocess recorded a cassette with no call in it,
    without a word; its "replay" then called the model for real every run, and passed."""
    pytester.makepyfile(test_sub=SUBPROCESS_INNER)
    line = "*WARNING: 1 cassette(s) hold no model call and no tool call*test_sub.py::test_runs_the_agent_as_a_subprocess"
    for result in said_when_recorded_and_replayed(pytester, 2, line):
        assert "test_calls_a_tool" not in result.stdout.str().split("WARNING:")[1]


def test_a_cassette_that_holds_no_call_is_named_as_pytest_names_it_from_elsewhere(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from the rootdir's parent (CI's checkout folder), the warning named the test relative to
    the rootdir (test_sub.py::…), which pytest cannot find from there, unlike its own FAILED lines."""
    pytester.makepyfile(test_sub=SUBPROCESS_INNER)
    pytester.makeini("[pytest]\n")
    monkeypatch.chdir(pytester.path.parent)
    result = run(
        pytester, "--rootdir", str(pytester.path), "-c", str(pytester.path / "tox.ini"), pytester.path.name
    )
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            f"*WARNING: 1 cassette(s) hold no model call*: {pytester.path.name}/test_sub.py::test_runs_the_agent_as_a_subprocess"
        ]
    )


def said_when_recorded_and_replayed(
    pytester: pytest.Pytester, passed: int, line: str, server: LocalServer | None = None
) -> list[pytest.RunResult]:
    """Run the inner tests recording, then replaying (``server`` stopped in between): each time
    ``passed`` pass and the output has ``line`` (an fnmatch pattern). Returns both runs."""
    results = []
    for args in ((), ("--forkpoint-mode=replay",)):
        result = run(pytester, *args)
        result.assert_outcomes(passed=passed)
        result.stdout.fnmatch_lines([line])
        results.append(result)
        if server is not None:
            server.stop()
    return results


PROGRAM_INNER = """
import json
import os
import subprocess
import sys

import openai
import pytest


@pytest.mark.forkpoint
def test_asks_and_runs_a_python_program():
    client = openai.OpenAI(base_url=os.environ["MODEL_URL"], api_key="sk-test", max_retries=0)
    client.chat.completions.create(model="demo-model", messages=[{"role": "user", "content": "hi"}])
    # (a helper agent in its own process: its calls would not reach the cassette)
    subprocess.run([sys.executable, "-c", "print('helper ran')"], check=True)
"""


def test_a_python_program_a_test_starts_is_a_warning_when_recorded_and_when_replayed(
    pytester: pytest.Pytester, server: LocalServer
) -> None:
    """A test that made a model call and started a Python program: forkpoint named the program
    only on stderr, which pytest captures and shows for a failed test alone, and the replay's
    verdict ("ok, but incomplete") was never shown for a passing test: the program ran live on
    every replay without a word. Both runs now give a ReplayWarning naming it."""
    pytester.makepyfile(test_prog=PROGRAM_INNER)
    line = (
        "*ReplayWarning: forkpoint: this test started, in * 1 Python program(s) forkpoint does not "
        "record (* -c print('helper ran')): *they run live on every replay*"
    )
    said_when_recorded_and_replayed(pytester, 1, line, server)


SHELL_INNER = """
import json
import os
import subprocess

import openai
import pytest


@pytest.mark.forkpoint
def test_runs_the_commands_the_model_gives():
    client = openai.OpenAI(base_url=os.environ["MODEL_URL"], api_key="sk-test", max_retries=0)
    messages = [{"role": "user", "content": "go"}]
    while True:
        msg = client.chat.completions.create(model="demo-model", messages=messages).choices[0].message
        messages.append(msg.model_dump(exclude_none=True))
        if not msg.tool_calls:
            break
        for call in msg.tool_calls:  # (mini-swe-agent's way: a shell, no tool function)
            command = json.loads(call.function.arguments)["command"]
            out = subprocess.run(command, shell=True, capture_output=True, text=True)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": out.stdout})
"""


def test_a_tool_the_cassette_has_no_calls_of_is_a_warning_when_replayed(
    pytester: pytest.Pytester, make_server: Callable[..., LocalServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test whose agent runs the model's commands in a shell, as mini-swe-agent does: the replay
    ran them again for real (here: appended to a file) and the test passed without a word, since
    what forkpoint says on stderr is captured. The replay now warns, naming the tool."""
    srv = make_server(chat_script=[[("bash", {"command": "echo ran >> ledger.txt"})], "done"])
    monkeypatch.setenv("MODEL_URL", srv.openai_base_url)
    pytester.makepyfile(test_shell=SHELL_INNER)
    run(pytester).assert_outcomes(passed=1)
    srv.stop()
    replayed = run(pytester, "--forkpoint-mode=replay")
    replayed.assert_outcomes(passed=1)
    assert (pytester.path / "ledger.txt").read_text() == "ran\nran\n"  # it did run again
    replayed.stdout.fnmatch_lines(
        [
            "*ReplayWarning: forkpoint: in the recording of this test the model asked for tools its cassette "
            "* has no calls of: bash (1 call); if the code ran them, they ran for real in this replay.*"
        ]
    )


IN_PLACE_INNER = """
import os

import openai
import pytest

import forkpoint


@forkpoint.tool
def add_item(cart: dict, item: str) -> str:
    cart.setdefault("items", []).append(item)  # (its argument, changed in place)
    return "added"


@pytest.mark.forkpoint
def test_cart():
    client = openai.OpenAI(base_url=os.environ["MODEL_URL"], api_key="sk-test", max_retries=0)
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "add tea"}])
    assert reply.choices[0].message.content
    assert add_item({}, "tea") == "added"
"""


def test_a_replay_that_reproduced_but_not_certainly_is_a_warning(
    pytester: pytest.Pytester, server: LocalServer
) -> None:
    """A tool that changed its argument in place when recorded: ``forkpoint replay`` of the cassette
    says "replay ok, but not certain", naming the tool, since the replay did not make that change;
    the plugin's replay passed without a word. It now warns, as the command line says it."""
    pytester.makepyfile(test_cart=IN_PLACE_INNER)
    run(pytester).assert_outcomes(passed=1)
    server.stop()
    replayed = run(pytester, "--forkpoint-mode=replay")
    replayed.assert_outcomes(passed=1, warnings=1)
    replayed.stdout.fnmatch_lines(
        [
            "*ReplayWarning: forkpoint: the replay of its cassette tests/cassettes/test_cart/test_cart "
            "was ok, but not certain: when recorded, tool 'add_item' changed its argument 'cart' in place*"
        ]
    )


UNSTORABLE_INNER = """
import os

import openai
import pytest

import forkpoint


@forkpoint.tool
def measure(ohms: int) -> dict:
    return {"ohms": ohms, "impedance": complex(ohms, 1)}  # (no stored form)


@pytest.mark.forkpoint
def test_measure():
    client = openai.OpenAI(base_url=os.environ["MODEL_URL"], api_key="sk-test", max_retries=0)
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "measure"}])
    assert measure(2)["ohms"] == 2
"""


def test_a_tool_result_the_recording_of_a_test_could_not_store_is_a_warning(
    pytester: pytest.Pytester, server: LocalServer
) -> None:
    """A tool result with no stored form (a ``complex``) while a test records its cassette: said on
    stderr, which pytest captured with the output of the test that passed, so the cassette was
    kept and committed without a word, and its first replay failed where that call is. The
    recording now warns, as ``forkpoint record`` says it."""
    pytester.makepyfile(test_measure=UNSTORABLE_INNER)
    recorded = run(pytester)
    recorded.assert_outcomes(passed=1, warnings=1)
    recorded.stdout.fnmatch_lines(
        [
            "*ReplayWarning: forkpoint: recording this test's cassette tests/cassettes/test_measure/test_measure: "
            "1 tool call could not be recorded: the result had no stored form (first: seq 2, tool measure: "
            "builtins.complex); a replay stops at the first of them.*"
        ]
    )


DSPY_INNER = """
import os

import dspy
import pytest
from dspy.clients.cache import Cache


def add(a: int, b: int) -> int:
    \"\"\"Add two integers.\"\"\"
    return a + b


def ask():
    before = dspy.cache  # (DSPy's own cache on disk, as by default, in a folder of this test's)
    dspy.cache = Cache(enable_disk_cache=True, enable_memory_cache=False, disk_cache_dir=os.environ["DSPY_DIR"])
    try:
        lm = dspy.LM("openai/m", api_base=os.environ["MODEL_URL"], api_key="sk-test", num_retries=0, engine="litellm")
        with dspy.context(lm=lm):
            return dspy.ReAct("question -> answer", tools=[add], max_iters=3)(question="What is 2 + 3?").answer
    finally:
        dspy.cache = before


def test_warms_the_cache():
    assert ask() == "5"


@pytest.mark.forkpoint
def test_agent():
    assert ask() == "5"
"""


@pytest.mark.slow
def test_dspy_s_cache_answering_a_test_s_requests_is_a_warning_when_recorded_and_when_replayed(
    pytester: pytest.Pytester,
    make_server: Callable[..., LocalServer],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """DSPy answers a request it has answered before from its cache on disk: a cassette recorded
    with that cache warm holds no model call, and its replay passes here, from the same cache, and
    fails on CI. forkpoint said so on stderr alone, which pytest captures and shows for a failed
    test only: both runs passed without a word. Both now give a ReplayWarning."""
    pytest.importorskip("dspy")
    from tests.integrations.test_tool_frameworks import dspy_route

    srv = make_server()
    srv.route("/v1/chat/completions", dspy_route, method="POST")
    monkeypatch.setenv("MODEL_URL", srv.openai_base_url)
    monkeypatch.setenv("DSPY_DIR", str(tmp_path / "dspy"))
    monkeypatch.setenv("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    pytester.makepyfile(test_dspy_agent=DSPY_INNER)
    # (in a process of its own: DSPy, imported by an inner run in this one, leaves the next unable to
    # start: pytest then finds no metadata of pluggy)
    args = ["-p", "forkpoint.pytest_plugin", "-p", "no:cacheprovider"]
    recorded = pytester.runpytest_subprocess(*args)
    recorded.assert_outcomes(passed=2)
    recorded.stdout.fnmatch_lines(
        ["*ReplayWarning: forkpoint: in this recording, DSPy answered 3 requests from its own cache: *"]
    )
    srv.stop()
    replayed = pytester.runpytest_subprocess(*args, "--forkpoint-mode=replay", "-k", "test_agent")
    replayed.assert_outcomes(passed=1)
    replayed.stdout.fnmatch_lines(
        ["*ReplayWarning: forkpoint: in this replay, DSPy answered 3 requests from its own cache: *"]
    )


TAKEN_INNER = """
import pytest

import helpers

TOOLS = {"lookup": helpers.lookup}  # taken when the module is imported, before any test


@pytest.fixture
def forkpoint_config():
    return {"tools": ["helpers:lookup"]}


@pytest.mark.forkpoint
def test_looks_up():
    import json, os

    import openai

    client = openai.OpenAI(base_url=os.environ["MODEL_URL"], api_key="sk-test", max_retries=0)
    messages = [{"role": "user", "content": "go"}]
    while True:
        msg = client.chat.completions.create(model="demo-model", messages=messages).choices[0].message
        messages.append(msg.model_dump(exclude_none=True))
        if not msg.tool_calls:
            break
        for call in msg.tool_calls:
            out = TOOLS[call.function.name](**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": out})
"""


def test_a_named_tool_the_code_took_before_the_test_is_a_warning_that_says_why_it_went_unrecorded(
    pytester: pytest.Pytester, make_server: Callable[..., LocalServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool named in ``forkpoint_config`` that the agent calls through a dict it built when its
    module was imported: the test's wrapper replaces the module's name, not the dict's reference, so
    no call was recorded, and the replay's warning told the user to name the tool with
    ``tools=['MODULE:QUALNAME=NAME']``, which they had done. It now says why, and what works."""
    srv = make_server(chat_script=[[("lookup", {"what": "x"})], "done"])
    monkeypatch.setenv("MODEL_URL", srv.openai_base_url)
    pytester.makepyfile(helpers="def lookup(what):\n    return 'found ' + what\n")
    pytester.makepyfile(test_taken=TAKEN_INNER)
    recorded = run(pytester)
    recorded.assert_outcomes(passed=1)
    # Said as the cassette is recorded too, when naming the tool still saves every replay of it:
    # forkpoint's own line on stderr was captured with the output of the test that passed.
    said = " ".join(recorded.stdout.str().split())
    assert "ReplayWarning: forkpoint: recording this test's cassette" in said, said
    assert "asked for tools it has no calls of: lookup (1 call); if the code ran them, every replay" in said
    assert "They are named (helpers:lookup), but the code never called them through that name" in said
    srv.stop()
    replayed = run(pytester, "--forkpoint-mode=replay")
    replayed.assert_outcomes(passed=1)
    said = " ".join(replayed.stdout.str().split())
    assert "has no calls of: lookup (1 call)" in said, said
    assert "They are named (helpers:lookup), but the code never called them through that name" in said
    assert "forkpoint_tools ini option" in said and "tools=['MODULE:QUALNAME=NAME']" not in said


ENCRYPTED_INNER = """
import pytest

import forkpoint


@pytest.mark.forkpoint
def test_secret():
    assert forkpoint.tool(lambda city: city, name="lookup")("Paris") == "Paris"
"""


def test_a_projects_encrypt_to_applies_when_pytest_runs_from_a_parent(pytester: pytest.Pytester) -> None:
    """proj/forkpoint.toml's ``[store] encrypt_to`` was read from the directory pytest ran in, not
    from the test's anchored configuration: `pytest proj/tests` from the parent wrote the
    cassette in the clear, while `pytest` in proj/ encrypted it."""
    from pyrage import x25519

    proj = pytester.mkdir("proj")
    (proj / "team.txt").write_text(str(x25519.Identity.generate().to_public()) + "\n")
    (proj / "forkpoint.toml").write_text('[store]\nencrypt_to = ["team.txt"]\n')
    (proj / "tests").mkdir()
    (proj / "tests" / "test_enc.py").write_text(ENCRYPTED_INNER)
    run(pytester, "proj/tests/test_enc.py").assert_outcomes(passed=1)
    cassette = pytester.path / "tests" / "cassettes" / "test_enc" / "test_secret"
    from forkpoint.log import read_header

    assert read_header(cassette / "session.jsonl").get("encryption"), "the cassette is not encrypted"
    assert b"Paris" not in (cassette / "session.jsonl").read_bytes()


def test_a_bad_encrypt_to_fails_its_test_and_its_configuration_stays_with_it(
    pytester: pytest.Pytester,
) -> None:
    """A project whose ``[store] encrypt_to`` names a missing file: its test errored at setup with
    a traceback, and the configuration it anchored was never let go, so the next test, of another
    project with no configuration, was looked up under the first one's and errored the same."""
    bad = pytester.mkdir("bad")
    (bad / "forkpoint.toml").write_text('[store]\nencrypt_to = ["missing.txt"]\n')
    (bad / "test_bad.py").write_text(ENCRYPTED_INNER)
    good = pytester.mkdir("good")
    (good / "test_good.py").write_text(ENCRYPTED_INNER)
    result = run(pytester, "bad", "good")
    result.assert_outcomes(failed=1, passed=1)
    result.stdout.fnmatch_lines(
        [
            "*forkpoint: */bad/forkpoint.toml [[]store[]] encrypt_to: *missing.txt' is neither an age recipient*"
        ]
    )
    from forkpoint import config

    assert config.anchor() is None


MIGRATED = """
import json
import os

import openai
import pytest


@pytest.mark.forkpoint
def test_chat():
    client = openai.OpenAI(base_url=os.environ["MODEL_URL"], api_key="sk-test", max_retries=0)
    reply = client.chat.completions.create(model="demo-model", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content
"""


def test_a_vcr_cassette_where_pytest_recording_kept_it_is_named_with_how_to_import_it(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A team moving from pytest-recording has ``tests/cassettes/test_mig/test_chat.yaml`` exactly
    where forkpoint looks for ``test_chat/``. In CI the failure said only "Record it once, against
    the real model", and mode once ran the test live without a word about the cassette beside it.
    Both name it and give the command that imports it as the test's cassette; that command works."""
    pytester.makepyfile(test_mig=MIGRATED)
    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "demo-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "from the cassette"},
                "finish_reason": "stop",
            }
        ],
    }
    interaction = {
        "request": {
            "method": "POST",
            "uri": server.openai_base_url + "/chat/completions",
            "headers": {"content-type": ["application/json"]},
            "body": '{"messages":[{"role":"user","content":"hi"}],"model":"demo-model"}',
        },
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": {"content-type": ["application/json"]},
            "body": {"string": json.dumps(answer)},
        },
    }
    folder = pytester.path / "tests" / "cassettes" / "test_mig"
    folder.mkdir(parents=True)
    (folder / "test_chat.yaml").write_text(json.dumps({"version": 1, "interactions": [interaction]}))
    monkeypatch.setenv("CI", "true")
    missing = run(pytester)
    missing.assert_outcomes(failed=1)
    out = missing.stdout.str()
    fix = (
        'mv "$(forkpoint import --store "$(mktemp -d)" tests/cassettes/test_mig/test_chat.yaml)" '
        "tests/cassettes/test_mig/test_chat"
    )
    assert (
        "A VCR.py cassette of this test is at tests/cassettes/test_mig/test_chat.yaml" in out and fix in out
    )
    assert server.requests == []

    monkeypatch.delenv("CI")
    live = run(pytester)  # mode once: recorded live, and told of the cassette beside it
    live.assert_outcomes(passed=1)
    live.stdout.fnmatch_lines(
        ["*mode once ran it live, to record one. A VCR.py cassette of this test is at*"]
    )
    assert len(server.requests) == 1
    shutil.rmtree(folder / "test_chat")

    subprocess.run(
        fix.replace("forkpoint import", shlex.join(FORKPOINT) + " import"),
        shell=True,
        check=True,
        cwd=pytester.path,
    )
    monkeypatch.setenv("CI", "true")
    run(pytester).assert_outcomes(passed=1)
    assert len(server.requests) == 1  # served from the imported cassette

    # A test module of a package (evals/unit/test_pkg.py): pytest-recording keeps its cassette in
    # cassettes/<file's name>/ beside the file; forkpoint names its folder by the module.
    (pytester.path / "test_mig.py").unlink()
    unit = pytester.path / "evals" / "unit"  # (not "agents": the Agents SDK's own package)
    unit.mkdir(parents=True)
    for package in (pytester.path / "evals", unit):
        (package / "__init__.py").write_text("")
    (unit / "test_pkg.py").write_text(MIGRATED)
    (unit / "cassettes" / "test_pkg").mkdir(parents=True)
    shutil.move(folder / "test_chat.yaml", unit / "cassettes" / "test_pkg" / "test_chat.yaml")
    out = run(pytester).stdout.str()
    assert "A VCR.py cassette of this test is at evals/unit/cassettes/test_pkg/test_chat.yaml" in " ".join(
        out.split()
    ), out


def vcr_chat_cassette(server: LocalServer, content: str) -> str:
    """A VCR.py cassette (JSON) of one chat completion answered with ``content``."""
    answer = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "demo-model",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
    }
    request = {"messages": [{"role": "user", "content": "hi"}], "model": "demo-model"}
    interaction = {
        "request": {
            "method": "POST",
            "uri": server.openai_base_url + "/chat/completions",
            "headers": {"content-type": ["application/json"]},
            "body": json.dumps(request, separators=(",", ":")),
        },
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": {"content-type": ["application/json"]},
            "body": {"string": json.dumps(answer)},
        },
    }
    return json.dumps({"version": 1, "interactions": [interaction]})


VCR_NAMED = """
import os

import openai
import pytest


def ask():
    client = openai.OpenAI(base_url=os.environ["MODEL_URL"], api_key="sk-test", max_retries=0)
    return client.chat.completions.create(model="demo-model", messages=[{"role": "user", "content": "hi"}])


@pytest.mark.forkpoint
@pytest.mark.parametrize("who", ["a-1", "b/2"])
def test_param(who):
    assert ask().choices[0].message.content == "from " + who


class TestInClass:
    @pytest.mark.forkpoint
    def test_method(self):
        assert ask().choices[0].message.content == "from a class"


@pytest.mark.forkpoint
@pytest.mark.vcr(cassette_library_dir="elsewhere", serializer="json")
def test_marker_dir():
    assert ask().choices[0].message.content == "from the marker's folder"


@pytest.mark.forkpoint
@pytest.mark.default_cassette("shared.yaml")
def test_named():
    assert ask().choices[0].message.content == "from the named one"
"""


def test_a_vcr_cassette_is_found_under_the_name_and_folder_pytest_recording_gives_it(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytest-recording names a parametrized test's cassette ``test_param[a-1].yaml`` (a ``/`` of
    the id made ``-``), a method's ``TestInClass.test_method.yaml``, and keeps it in the folder of a
    ``vcr_cassette_dir`` fixture, a ``vcr`` marker's ``cassette_library_dir`` (with its
    ``serializer``'s suffix) or under a ``default_cassette`` marker's name. Only the name of
    forkpoint's own folder (``test_param-a-1``) in the default folder was looked for, so none of
    these tests was told of its cassette, and CI said only "Record it once". Each is named now, and
    the command given imports it as the test's cassette, making the folder forkpoint's are in (its
    ``mv`` failed when no cassette of the module was there yet)."""
    pytester.makeconftest(
        "from pathlib import Path\n"
        "import pytest\n"
        "def pytest_configure(config):\n"
        "    config.addinivalue_line('markers', 'vcr: pytest-recording')\n"
        "    config.addinivalue_line('markers', 'default_cassette: pytest-recording')\n"
        "@pytest.fixture(scope='module')\n"
        "def vcr_cassette_dir():\n"
        "    return str(Path(__file__).parent / 'recorded')\n"
    )
    pytester.makepyfile(test_named=VCR_NAMED)
    recorded = pytester.path / "recorded"
    recorded.mkdir()
    (pytester.path / "elsewhere").mkdir()
    cassettes = {
        "recorded/test_param[a-1].yaml": "from a-1",
        "recorded/test_param[b-2].yaml": "from b/2",
        "recorded/TestInClass.test_method.yaml": "from a class",
        "elsewhere/test_marker_dir.json": "from the marker's folder",
        "recorded/shared.yaml": "from the named one",
    }
    for name, content in cassettes.items():
        (pytester.path / name).write_text(vcr_chat_cassette(server, content))
    monkeypatch.setenv("CI", "true")
    missing = run(pytester)
    missing.assert_outcomes(failed=5)
    out = " ".join(missing.stdout.str().split("short test summary info")[0].split())
    fixes = re.findall(
        r"cassette with (mkdir -p \S+ && mv .*? tests/cassettes/test_named/\S+), or record it", out
    )
    for name in cassettes:
        assert f"A VCR.py cassette of this test is at {name}," in out, name
    assert len(fixes) == 5, out
    assert server.requests == []

    for fix in fixes:
        cmd = fix.replace("forkpoint import", shlex.join(FORKPOINT) + " import")
        subprocess.run(cmd, shell=True, check=True, cwd=pytester.path)
    run(pytester).assert_outcomes(passed=5)
    assert server.requests == []  # each served from its imported cassette


def test_a_test_recorded_live_runs_no_vcr_fixture_it_does_not_use(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test with no cassette yet is recorded live (mode once). Looking for a VCR.py cassette of
    it, forkpoint ran the conftest's ``vcr_config`` and ``vcr_cassette_dir`` fixtures, which the test
    does not use: their side effects happened in the live run, and one that raises (it needs a key
    this machine has not) made the test an error. Only a fixture the test uses is read then."""
    pytester.makeconftest(
        "import os\n"
        "from pathlib import Path\n"
        "import pytest\n"
        "@pytest.fixture\n"
        "def vcr_config():\n"
        "    return {'filter_headers': [os.environ['VCR_ONLY_KEY']]}\n"
        "@pytest.fixture(scope='module')\n"
        "def vcr_cassette_dir():\n"
        "    Path(__file__).with_name('ran').write_text('vcr_cassette_dir')\n"
        "    return 'recorded'\n"
    )
    pytester.makepyfile(
        test_live=VCR_NAMED.split("@pytest.mark.forkpoint")[0] + "@pytest.mark.forkpoint\n"
        "def test_live():\n    assert ask().choices[0].message.content\n"
    )
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("VCR_ONLY_KEY", raising=False)
    run(pytester).assert_outcomes(passed=1)
    assert len(server.requests) == 1
    assert not (pytester.path / "ran").exists()


def test_a_vcr_fixture_that_fails_in_ci_still_names_the_vcr_cassette(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In CI (mode replay), a test with no forkpoint cassette and a VCR.py one where pytest-recording
    kept it: the conftest's ``vcr_config``, read to find it, needs a key CI has not. Its KeyError
    was the test's error, in place of the failure that names the cassette and how to import it."""
    pytester.makeconftest(
        "import os\n"
        "import pytest\n"
        "@pytest.fixture\n"
        "def vcr_config():\n"
        "    return {'filter_headers': [os.environ['VCR_ONLY_KEY']]}\n"
    )
    pytester.makepyfile(
        test_ci=VCR_NAMED.split("@pytest.mark.forkpoint")[0]
        + "@pytest.mark.forkpoint\ndef test_ci():\n    assert ask().choices[0].message.content\n"
    )
    (pytester.path / "cassettes" / "test_ci").mkdir(parents=True)
    (pytester.path / "cassettes" / "test_ci" / "test_ci.yaml").write_text(vcr_chat_cassette(server, "hi"))
    monkeypatch.setenv("CI", "true")
    monkeypatch.delenv("VCR_ONLY_KEY", raising=False)
    result = run(pytester)
    result.assert_outcomes(failed=1)
    out = " ".join(result.stdout.str().split())
    assert "A VCR.py cassette of this test is at cassettes/test_ci/test_ci.yaml" in out, out
    assert "KeyError" not in out and server.requests == []


def test_record_mode_says_why_a_failed_test_left_its_cassette_as_it_was(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fix inside a tool's body changes no request: mode record served every call, the test
    failed against the old recording, and the run said only "1 replayed" (as a replay of the same
    test that still fails says nothing more: no tool result changed)."""
    pytester.makepyfile(
        test_tool_fix="""
import os

import openai
import pytest

import forkpoint


@forkpoint.tool
def lookup(order: int) -> str:
    return os.environ.get("STATUS", "unknown")


@pytest.mark.forkpoint
def test_order():
    client = openai.OpenAI(base_url=os.environ["MODEL_URL"], api_key="sk-test", max_retries=0)
    client.chat.completions.create(model="demo-model", messages=[{"role": "user", "content": "order 42?"}])
    assert lookup(42) == os.environ.get("WANT", "unknown")
"""
    )
    run(pytester).assert_outcomes(passed=1)
    monkeypatch.setenv("STATUS", "shipped")  # the tool is fixed, the test asks for its new answer
    monkeypatch.setenv("WANT", "shipped")
    result = run(pytester, "--forkpoint-mode=record")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*forkpoint: mode record left the cassette tests/cassettes/test_tool_fix/test_order as it was: the run "
            "asked for exactly the recorded calls, each served from it (1 tool call among them: no tool body "
            "runs in a replay, so a change inside a tool does not show). To run the test live and record it anew: "
            "pytest --forkpoint-mode=rewrite test_tool_fix.py::test_order",
        ]
    )
    run(pytester, "--forkpoint-mode=rewrite").assert_outcomes(passed=1)


GIVES_UP_EARLY = """
import os

import pytest

from test_agent import ask


@pytest.mark.forkpoint
def test_two_turns():
    ask("question 0")
    if os.environ.get("GIVE_UP"):
        getattr(pytest, os.environ["GIVE_UP"])("the agent stopped early")
    ask("question 1")
"""


@pytest.mark.parametrize("give_up", ["skip", "xfail"])
def test_a_test_that_skips_after_leaving_recorded_calls_unused_says_so(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch, give_up: str
) -> None:
    """A test that skipped (or xfailed) halfway through its replay was a plain skip: the run ended
    differently from its recording (a call of it never made), and nothing said so."""
    pytester.makepyfile(test_agent=INNER, test_early=GIVES_UP_EARLY)
    run(pytester, "test_early.py").assert_outcomes(passed=1)
    server.stop()
    monkeypatch.setenv("GIVE_UP", give_up)
    result = run(pytester, "--forkpoint-mode=replay", "-rsx", "test_early.py")
    result.assert_outcomes(**{"skipped" if give_up == "skip" else "xfailed": 1}, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*the agent stopped early*forkpoint: 1 recorded call(s) of cassette "
            "tests/cassettes/test_early/test_two_turns went unused*",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*ReplayWarning: forkpoint: the test *ed, so its replay did not reproduce the recorded run: "
            "1 recorded call(s) of cassette tests/cassettes/test_early/test_two_turns went unused*",
        ]
    )


def test_a_test_that_skips_after_its_whole_replay_stays_a_plain_skip(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_agent=INNER, test_early=GIVES_UP_EARLY.replace('ask("question 1")\n', ""))
    run(pytester, "test_early.py").assert_outcomes(passed=1)
    server.stop()
    monkeypatch.setenv("GIVE_UP", "skip")
    result = run(pytester, "--forkpoint-mode=replay", "test_early.py")
    result.assert_outcomes(skipped=1, warnings=0)


EXITS = """
import os

import pytest

from test_agent import ask


@pytest.mark.forkpoint
def test_exits():
    ask(os.environ.get("PROMPT", "question 0"))
    if os.environ.get("EXIT_CODE"):
        pytest.exit("enough", returncode=int(os.environ["EXIT_CODE"]))
    ask("question 1")


def test_after():
    pass
"""


@pytest.mark.parametrize("returncode", [0, 3])
def test_pytest_exit_in_a_replayed_test_says_the_replay_did_not_reproduce(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch, returncode: int
) -> None:
    """pytest.exit() in a replayed test ended the run with the exit's own status (0 if it said so)
    and not a word of the recorded calls it left unused."""
    pytester.makepyfile(test_agent=INNER, test_exits=EXITS)
    run(pytester, "test_exits.py").assert_outcomes(passed=2)
    server.stop()
    monkeypatch.setenv("EXIT_CODE", str(returncode))
    result = run(pytester, "--forkpoint-mode=replay", "test_exits.py")
    result.stdout.fnmatch_lines(
        [
            "*forkpoint*",
            "test_exits.py::test_exits: pytest.exit() ended the run during the replay of cassette "
            "tests/cassettes/test_exits/test_exits, which did not reproduce the recorded run:",
            "forkpoint: 1 recorded call(s) of cassette tests/cassettes/test_exits/test_exits went unused*",
        ]
    )
    assert result.ret == (1 if returncode == 0 else returncode)


def test_a_marker_registered_by_the_project_is_said_as_it_hides_a_run_without_the_plugin(
    pytester: pytest.Pytester,
) -> None:
    """Without the plugin (``-p no:forkpoint``, ``PYTEST_DISABLE_PLUGIN_AUTOLOAD``) a marked test
    runs live: pytest's unknown-marker warning (an error under ``--strict-markers``) is what says
    so. A project that registered ``forkpoint`` in its own ``markers`` silenced both, and nothing
    said that a run without the plugin then goes live without a word."""
    pytester.makepyfile(test_m="import pytest\n\n@pytest.mark.forkpoint\ndef test_m():\n    pass\n")
    without = pytester.runpytest_subprocess("-p", "no:forkpoint", "--strict-markers", "test_m.py")
    without.assert_outcomes(errors=1)
    without.stdout.fnmatch_lines(["*'forkpoint' not found in `markers` configuration option*"])
    pytester.makeini("[pytest]\nmarkers =\n    forkpoint: replayed from a cassette\n")
    result = run(pytester, "--strict-markers", "test_m.py")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "*PytestConfigWarning: forkpoint: the markers option of *tox.ini registers the marker "
            "forkpoint, which the plugin registers itself: a run that does not load the plugin "
            "(-p no:forkpoint, PYTEST_DISABLE_PLUGIN_AUTOLOAD) then runs the marked tests live "
            "without a word. Remove that line*",
        ]
    )


def test_an_xfail_marked_test_that_fails_after_leaving_recorded_calls_unused_says_so(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An xfail mark took a test failing halfway through its replay for the failure it expects: the
    run ended differently from its recording (a call of it never made), xfailed in green, and only a
    report section no xfailed test shows said so."""
    marked = GIVES_UP_EARLY.replace(
        "@pytest.mark.forkpoint\n", "@pytest.mark.forkpoint\n@pytest.mark.xfail(reason='flaky agent')\n"
    ).replace(
        'getattr(pytest, os.environ["GIVE_UP"])("the agent stopped early")', 'assert 0, "stopped early"'
    )
    pytester.makepyfile(test_agent=INNER, test_early=marked)
    run(pytester, "test_early.py").assert_outcomes(xpassed=1)
    server.stop()
    monkeypatch.setenv("GIVE_UP", "1")
    result = run(pytester, "--forkpoint-mode=replay", "-rsx", "test_early.py")
    result.assert_outcomes(xfailed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*ReplayWarning: forkpoint: the test xfailed, so its replay did not reproduce the recorded "
            "run: 1 recorded call(s) of cassette tests/cassettes/test_early/test_two_turns went unused*",
            "XFAIL test_early.py::test_two_turns - flaky agent (forkpoint: 1 recorded call(s) of "
            "cassette tests/cassettes/test_early/test_two_turns went unused*",
        ]
    )
