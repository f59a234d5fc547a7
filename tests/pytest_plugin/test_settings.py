"""The pytest plugin's per-test settings, through pytester: the ``forkpoint_config`` fixture and the
marker's keywords (ignore rules, tools by module:qualname and the ``forkpoint_tools`` ini option,
live tools, the divergence policy, allowed hosts, deterministic), and pytest-xdist."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from forkpoint import Session
from tests.modelserver import LocalServer
from tests.pytest_plugin.test_pytest_plugin import run

pytest_plugins = ["pytester"]

HELPERS = """
import os

import openai


def ask(prompt, system="Be brief."):
    client = openai.OpenAI(base_url=os.environ["MODEL_URL"], api_key="sk-test", max_retries=0)
    reply = client.chat.completions.create(
        model="demo-model",
        messages=[{"role": "system", "content": system}, {"role": "user", "content": prompt}],
    )
    return reply.choices[0].message.content


def note_down(text):
    # A plain function of code the test cannot edit: a tool only when a setting names it.
    with open(os.environ["TOOL_LOG"], "a") as f:
        f.write(text + "\\n")
    return text.upper()
"""

CLOCK = """
from datetime import datetime

import pytest

from helpers import ask

RULE = {"path": "$.body.messages[0].content", "regex": "Current time: .*"}


@pytest.mark.forkpoint(ignore=[RULE])
def test_ruled():
    assert ask("hi", f"Current time: {datetime.now()}")


@pytest.mark.forkpoint
def test_unruled():
    assert ask("hi", f"Current time: {datetime.now()}")


@pytest.mark.forkpoint(deterministic=["test_clock"])
def test_deterministic():
    assert ask("hi", f"Current time: {datetime.now()}")
"""

CONFIGURED = """
from datetime import datetime

import pytest

from helpers import ask


@pytest.fixture
def forkpoint_config():
    return {"ignore": [{"path": "$.body.messages[0].content", "regex": "Current time: .*"}]}


@pytest.mark.forkpoint
def test_by_the_module():
    assert ask("hi", f"Current time: {datetime.now()}")


def test_by_the_fixture(forkpoint_session):
    assert ask("hello", f"Current time: {datetime.now()}")
"""


def test_ignore_rules_and_deterministic_per_test_and_per_module(
    pytester: pytest.Pytester, server: LocalServer
) -> None:
    pytester.makepyfile(helpers=HELPERS, test_clock=CLOCK, test_configured=CONFIGURED)
    run(pytester).assert_outcomes(passed=5)
    cassettes = pytester.path / "tests" / "cassettes"
    ruled = Session.load(cassettes / "test_clock" / "test_ruled").header
    given, *tmp_rules = ruled["match"]["ignore"]
    assert given == {"path": "$.body.messages[0].content", "regex": "Current time: .*"}
    assert [r["path"] for r in tmp_rules] == ["$.body", "$.args"]  # pytest's tmp_path, left out of keys
    det = Session.load(cassettes / "test_clock" / "test_deterministic")
    assert det.header["deterministic"] == ["test_clock"]
    assert [e["type"] for e in det.events] == ["value", "model_call", "end"]
    server.stop()

    replayed = run(pytester, "--forkpoint-mode=replay")
    replayed.assert_outcomes(passed=4, failed=1)
    replayed.stdout.fnmatch_lines(
        [
            "*~ $.body.messages[[]0[]].content: Current time: * → Current time: *",
            "*Every difference looks like a timestamp, a uuid or a request id.*",
            "FAILED test_clock.py::test_unruled - Failed: forkpoint: the run diverged*",
        ]
    )
    # (the rules the plugin adds for tmp_path are no rule of the user's that may be mistyped)
    assert "took nothing out" not in replayed.stdout.str()


MARKED_TOOLS = """
import os

import pytest

import helpers


@pytest.mark.forkpoint(tools=["helpers:note_down"])
def test_records_the_tool():
    assert helpers.note_down(helpers.ask("hi")) == "REPLY 2 TO: HI"


@pytest.mark.forkpoint(tools=["helpers:note_down"], live_tools=["note_down"])
def test_asserts_on_the_side_effect():
    helpers.note_down(helpers.ask("hi"))
    with open(os.environ["TOOL_LOG"]) as f:
        assert f.read().splitlines()[-1] == "reply 2 to: hi"


@pytest.mark.forkpoint
def test_without_the_setting():
    helpers.note_down("not a tool here")
"""


def test_tools_by_target_and_live_tools(
    pytester: pytest.Pytester, server: LocalServer, tmp_path: Path
) -> None:
    pytester.makepyfile(helpers=HELPERS, test_tools=MARKED_TOOLS)
    run(pytester).assert_outcomes(passed=3)
    cassettes = pytester.path / "tests" / "cassettes" / "test_tools"
    recorded = Session.load(cassettes / "test_records_the_tool")
    assert [e["type"] for e in recorded.events] == ["model_call", "tool_call", "end"]
    assert recorded.header["tools"] == ["helpers:note_down"]
    # The same function, in a test without the setting, is not a tool: it runs, nothing is recorded.
    assert [e["type"] for e in Session.load(cassettes / "test_without_the_setting").events] == ["end"]
    log = tmp_path / "tool.log"
    log.write_text("")
    server.stop()

    run(pytester, "--forkpoint-mode=replay").assert_outcomes(passed=3)
    # Served for the first test; run for real for the one that asks for it live; a plain call for the third.
    assert log.read_text().splitlines() == ["reply 2 to: hi", "not a tool here"]


INI_TOOLS = """
import pytest

import helpers


@pytest.mark.forkpoint
def test_from_the_ini():
    assert helpers.note_down("x") == "X"
"""


def test_tools_from_the_ini_option(pytester: pytest.Pytester, tmp_path: Path) -> None:
    pytester.makeini("[pytest]\nforkpoint_tools =\n    helpers:note_down\n")
    pytester.makepyfile(helpers=HELPERS, test_ini=INI_TOOLS)
    run(pytester).assert_outcomes(passed=1)
    cassette = pytester.path / "tests" / "cassettes" / "test_ini" / "test_from_the_ini"
    assert [e.get("tool") for e in Session.load(cassette).events] == ["note_down", None]
    run(pytester, "--forkpoint-mode=replay").assert_outcomes(passed=1)
    assert (tmp_path / "tool.log").read_text().splitlines() == ["x"]  # served on replay
    pytester.makeini("[pytest]\nforkpoint_tools = helpers.note_down\n")
    bad = run(pytester)
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["*forkpoint_tools: --tool 'helpers.note_down': expected MODULE:FUNCTION*"])


POLICY = """
import os

import pytest

from helpers import ask


@pytest.mark.forkpoint(on_divergence="fifo")
def test_tolerant():
    assert ask(os.environ.get("PROMPT", "hi"))


@pytest.mark.forkpoint
def test_strict():
    assert ask(os.environ.get("PROMPT", "hi"))
"""


def test_the_divergence_policy(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(helpers=HELPERS, test_policy=POLICY)
    run(pytester).assert_outcomes(passed=2)
    server.stop()
    monkeypatch.setenv("PROMPT", "something else")
    result = run(pytester, "--forkpoint-mode=replay")
    # fifo: the recorded answer is served anyway; the test passes, and the drift is a warning.
    result.assert_outcomes(passed=1, failed=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*ReplayWarning: forkpoint: the run left its cassette tests/cassettes/test_policy/test_tolerant, "
            "and went on (on_divergence='fifo')",
            "*~ $.body.messages[[]1[]].content: hi → something else",
            "FAILED test_policy.py::test_strict - Failed: forkpoint: the run diverged*",
        ]
    )


LIVE = """
import os

import pytest

from helpers import ask


@pytest.mark.forkpoint(on_divergence="live")
def test_goes_on_live():
    assert ask(os.environ.get("PROMPT", "hi"))
"""


def test_a_live_divergence_policy_never_touches_the_network_in_mode_replay(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Mode replay (CI) never touches the network, whatever the markers say: a test marked
    on_divergence="live" made the changed call to the model for real under CI and passed, with
    only a warning."""
    pytester.makepyfile(helpers=HELPERS, test_live=LIVE)
    run(pytester).assert_outcomes(passed=1)
    assert len(server.requests) == 1
    monkeypatch.setenv("PROMPT", "something else")
    monkeypatch.setenv("CI", "true")
    result = run(pytester)
    result.assert_outcomes(failed=1)
    assert len(server.requests) == 1  # the changed call was not made
    result.stdout.fnmatch_lines(
        [
            "*forkpoint: the run diverged from its cassette tests/cassettes/test_live/test_goes_on_live",
            "*~ $.body.messages[[]1[]].content: hi → something else",
            "(on_divergence='live' is not followed in mode replay (the CI environment variable is set): *",
        ]
    )
    # Outside mode replay the policy is followed: the changed call is made live, and the test passes.
    monkeypatch.delenv("CI")
    run(pytester).assert_outcomes(passed=1, warnings=1)
    assert len(server.requests) == 2


CAUGHT = """
import os

import pytest

from helpers import ask


@pytest.mark.forkpoint(on_divergence="fifo")
def test_catches_what_fifo_cannot_serve():
    answers = []
    for i in range(int(os.environ.get("CALLS", "1"))):
        try:
            answers.append(ask(f"question {i}"))
        except Exception:  # an agent that carries on after a failed model call
            answers.append("sorry")
    assert answers
"""


def test_a_call_fifo_had_nothing_left_for_fails_the_test(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """fifo serves recorded answers to calls that drifted while it has some; a call it had none left
    for got no answer at all. An agent that caught that passed its test, with a warning that the
    run "went on"."""
    pytester.makepyfile(helpers=HELPERS, test_caught=CAUGHT)
    run(pytester).assert_outcomes(passed=1)
    server.stop()
    monkeypatch.setenv("CALLS", "2")
    result = run(pytester, "--forkpoint-mode=replay")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*forkpoint: the run left its cassette tests/cassettes/test_caught/test_catches_what_fifo_cannot_serve, "
            "and on_divergence='fifo' had no recorded call of that endpoint or tool left to serve, so the call "
            "got no answer",
            "replay diverged at the 2nd model call of this run (POST /v1/chat/completions): the recording has "
            "no model call left (1 was recorded).",
        ]
    )


NET = """
import os
import socket

import pytest


@pytest.fixture
def forkpoint_config():
    return {"allow_hosts": ["127.0.0.1"]}


@pytest.mark.forkpoint
def test_connects():
    socket.create_connection(("127.0.0.1", int(os.environ["LOCAL_PORT"])), timeout=5).close()
"""


def test_allowed_hosts_from_the_config_fixture(
    pytester: pytest.Pytester, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCAL_PORT", str(server.port))
    pytester.makepyfile(test_net=NET)
    run(pytester).assert_outcomes(passed=1)
    run(pytester, "--forkpoint-mode=replay").assert_outcomes(passed=1)
    pytester.makepyfile(test_net=NET.replace('{"allow_hosts": ["127.0.0.1"]}', "{}"))
    blocked = run(pytester, "--forkpoint-mode=replay")
    blocked.assert_outcomes(failed=1)
    blocked.stdout.fnmatch_lines(["*the test tried to reach the network during the replay*"])


BAD = """
import pytest


@pytest.fixture
def forkpoint_config():
    return {{{config}}}


@pytest.mark.forkpoint{marker}
def test_it():
    pass
"""


@pytest.mark.parametrize(
    ("config", "marker", "message"),
    [
        ('"name": "x"', "", "*the forkpoint_config fixture got unknown setting(s) name*"),
        ("", "(live_tool=['x'])", "*@pytest.mark.forkpoint got unknown setting(s) live_tool*"),
        ("", "(on_divergence='retry')", "*on_divergence='retry': expected one of stop, live, fifo*"),
        (
            '"ignore": [{"path": "$.messages"}]',
            "",
            "*test_it: forkpoint: ignore[[]0[]] { path = '$.messages' }: path*",
        ),
        ("", "(tools=['nocolon'])", "*test_it: tools: --tool 'nocolon': expected MODULE:FUNCTION*"),
        ("", "(deterministic=[1])", "*deterministic=[[]1[]]: True, or the agent's module names*"),
        # A setting of the wrong type was taken as another value, or failed with a TypeError.
        ('"allow_unused": "false"', "", "*test_it: forkpoint allow_unused='false': True or False*"),
        ("", "(allow_unused='no')", "*test_it: forkpoint allow_unused='no': True or False*"),
        ("", "(name=123)", "*test_it: forkpoint name=123: the cassette's name, a non-empty string*"),
        ("", "(name='')", "*test_it: forkpoint name='': the cassette's name, a non-empty string*"),
        ("", "(cassette=5)", "*test_it: forkpoint cassette=5: a folder relative to the test's file*"),
        ("", "('one', 'two')", "*test_it: @pytest.mark.forkpoint takes one name, got 2 arguments*"),
    ],
)
def test_bad_settings_are_refused_naming_the_test(
    pytester: pytest.Pytester, config: str, marker: str, message: str
) -> None:
    pytester.makepyfile(test_bad=BAD.format(config=config, marker=marker))
    result = run(pytester)
    assert result.ret != pytest.ExitCode.OK
    result.stdout.fnmatch_lines([message])


XDIST = """
import pytest

from helpers import ask


@pytest.mark.parametrize("n", range(4))
@pytest.mark.forkpoint
def test_each(n):
    assert ask(f"question {n}")


@pytest.mark.parametrize("n", range(2))
@pytest.mark.forkpoint("shared", allow_unused=True)
def test_shared(n):
    assert ask("the same question")
"""


@pytest.mark.slow
def test_under_xdist_each_cassette_is_one_workers(pytester: pytest.Pytester, server: LocalServer) -> None:
    pytester.makepyfile(helpers=HELPERS, test_x=XDIST)
    args = ["-p", "forkpoint.pytest_plugin", "-p", "xdist.plugin", "-p", "no:cacheprovider", "-n", "2"]
    first = pytester.runpytest_subprocess(*args)
    first.assert_outcomes(passed=6)
    # The controller's summary adds up both workers; the two tests that share a cassette took turns:
    # one recorded it, the other replayed it.
    first.stdout.fnmatch_lines(["*cassettes in *: 1 replayed, 5 recorded, 0 updated*"])
    assert len(server.requests) == 5
    folder = pytester.path / "tests" / "cassettes" / "test_x"
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f"test_each-{n}" for n in range(4)] + ["shared"]
    )
    server.stop()
    again = pytester.runpytest_subprocess(*args, "--forkpoint-mode=replay")
    again.assert_outcomes(passed=6)
    again.stdout.fnmatch_lines(["*cassettes in *: 6 replayed, 0 recorded, 0 updated*"])


DETERMINISTIC = """
import os
import uuid
from datetime import datetime

import openai
import pytest


@pytest.mark.forkpoint(deterministic=True)
def test_stamps_its_prompt():
    client = openai.OpenAI(base_url=os.environ["MODEL_URL"], api_key="sk-test", max_retries=0)
    system = f"Now: {datetime.now()}, run {uuid.uuid4()}"
    reply = client.chat.completions.create(model="m", messages=[{"role": "system", "content": system}])
    assert reply.choices[0].message.content
"""


@pytest.mark.slow
def test_deterministic_true_in_a_test_process_of_its_own(
    pytester: pytest.Pytester, server: LocalServer
) -> None:
    """deterministic=True: every module of the project is the agent's (in-process, the tests' own
    model server would be too; the inner pytest runs in a process of its own here)."""
    pytester.makepyfile(test_det=DETERMINISTIC)
    args = ["-p", "forkpoint.pytest_plugin", "-p", "no:cacheprovider"]
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=1)
    cassette = pytester.path / "tests" / "cassettes" / "test_det" / "test_stamps_its_prompt"
    assert [e.get("fn") for e in Session.load(cassette).events][:2] == ["datetime.now", "uuid.uuid4"]
    server.stop()
    pytester.runpytest_subprocess(*args, "--forkpoint-mode=replay").assert_outcomes(passed=1)


@pytest.mark.slow
def test_a_cassette_recorded_by_python_m_pytest_replays_under_the_cli(
    tmp_path: Path, server: LocalServer
) -> None:
    """The agent's module is beside the tests folder, found because ``python -m pytest`` puts the
    current directory on sys.path; a replay that ran a bare ``pytest`` (the one beside the
    interpreter, on PATH) did not find it: ModuleNotFoundError, 0/N, exit 3."""
    import subprocess

    project = tmp_path / "proj"
    (project / "tests").mkdir(parents=True)
    (project / "helpers.py").write_text(HELPERS)
    (project / "tests" / "test_agent.py").write_text(
        "import pytest\nfrom helpers import ask\n\n@pytest.mark.forkpoint\ndef test_agent():\n    assert ask('hi')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    env.update(
        CI="", PYTEST_ADDOPTS="-p no:cacheprovider", PATH=f"{Path(sys.executable).parent}:{env['PATH']}"
    )
    rec = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_agent.py"],
        cwd=project, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert rec.returncode == 0, rec.stdout + rec.stderr
    cassette = project / "tests" / "cassettes" / "test_agent" / "test_agent"
    assert Session.load(cassette).header["argv"] == [
        "python",
        "-m",
        "pytest",
        "tests/test_agent.py::test_agent",
    ]
    server.stop()
    rep = subprocess.run(
        [sys.executable, "-m", "forkpoint.cli", "replay", str(cassette)],
        cwd=project, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert rep.returncode == 0, rep.stdout + rep.stderr
    assert "1 passed" in rep.stdout and "replay ok: 1/1 events matched" in rep.stderr


def test_a_mode_from_the_config_fixture_is_named_as_the_fixtures(pytester: pytest.Pytester) -> None:
    """A ``forkpoint_config`` fixture's ``mode`` was named "the marker's mode" in the message of a
    test that has no marker mode: the user looked for a marker keyword that was not there."""
    pytester.makepyfile(
        test_cfg="""
import pytest


@pytest.fixture
def forkpoint_config():
    return {"mode": "replay"}


@pytest.mark.forkpoint
def test_from_the_fixture():
    pass


@pytest.mark.forkpoint(mode="replay")
def test_from_the_marker():
    pass
"""
    )
    result = run(pytester)
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            "*no cassette for this test at *test_from_the_fixture, and mode replay (the forkpoint_config "
            "fixture's mode) never touches the network*",
            "*no cassette for this test at *test_from_the_marker, and mode replay (the marker's mode)*",
        ]
    )
