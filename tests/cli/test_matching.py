"""The clock in the prompt, from the command line: an agent that stamps its system prompt with the
time diverges on every replay, replays with an ignore rule or with --deterministic, and still
diverges (exit 3) when something outside the rule changes. Also: what new users trip on (the
program with or without --, a bad rule refused before the program runs)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from forkpoint.log import Session
from forkpoint.store import list_sessions
from tests.cli.test_cli import FORKPOINT, flat, run
from tests.modelserver import LocalServer

pytestmark = pytest.mark.slow

AGENT = """
import os
import sys
from datetime import datetime

import openai

task = sys.argv[1] if len(sys.argv) > 1 else "Say hi."
client = openai.OpenAI(base_url=os.environ["AGENT_BASE_URL"], api_key="sk-test", max_retries=0)
reply = client.chat.completions.create(
    model="demo-model",
    messages=[
        {"role": "system", "content": f"You are helpful. Current time: {datetime.now()}"},
        {"role": "user", "content": task},
    ],
)
print("answer:", reply.choices[0].message.content)
"""

RULE = """[match]
ignore = [
  { path = "$.body.messages[0].content", regex = "Current time: .*" },
]
"""


@pytest.fixture
def project(tmp_path: Path, server: LocalServer) -> tuple[Path, dict[str, str]]:
    (tmp_path / "clock_agent.py").write_text(AGENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FORKPOINT_", "OPENAI_"))}
    env.update(AGENT_BASE_URL=server.openai_base_url, FORKPOINT_STORE=str(tmp_path / "store"))
    return tmp_path, env


def fp(project: tuple[Path, dict[str, str]], *args: str) -> tuple[int, str]:
    cwd, env = project
    done = run([*FORKPOINT, *args], cwd, env, timeout=120)
    return done.returncode, done.stdout + done.stderr


def record_clock(project: tuple[Path, dict[str, str]]) -> None:
    """Record the clock agent, without --deterministic, as session "clock"."""
    code, out = fp(project, "record", "--name", "clock", sys.executable, "clock_agent.py")
    assert code == 0, out


def test_the_clock_in_the_prompt_replays_with_a_rule(
    project: tuple[Path, dict[str, str]], server: LocalServer
) -> None:
    cwd, _ = project
    record_clock(project)
    server.stop()

    code, out = fp(project, "replay", "clock")  # no rule: the time differs, and nothing else
    assert code == 3, out
    text = flat(out)
    assert "~ $.body.messages[0].content: You are helpful. Current time: " in text
    assert "Every difference looks like a timestamp, a uuid or a request id." in text
    assert "{ path = '$.body.messages[0].content', regex = '" in text

    (cwd / "forkpoint.toml").write_text(RULE)
    code, out = fp(project, "replay", "clock")
    assert code == 0, out
    assert "replay ok: 1/1 events matched" in out

    # Something outside the rule changed: still a divergence, and the ignored part is marked.
    code, out = fp(project, "replay", "clock", sys.executable, "clock_agent.py", "Say bye.")
    assert code == 3, out
    text = flat(out)
    assert "~ $.body.messages[1].content: Say hi. → Say bye." in text
    assert "Current time: " in text and "(ignored)" in text
    assert "Every difference looks like" not in text


def test_the_clock_in_the_prompt_replays_deterministic(
    project: tuple[Path, dict[str, str]], server: LocalServer
) -> None:
    code, out = fp(
        project, "record", "--deterministic", "--name", "det", "--", sys.executable, "clock_agent.py"
    )
    assert code == 0, out
    server.stop()
    code, out = fp(project, "replay", "det")  # no rule at all
    assert code == 0, out
    assert "replay ok: 2/2 events matched" in out  # the model call and the time the agent read
    code, out = fp(project, "show", "det")
    assert code == 0 and "#1   value   datetime.now → 20" in out, out
    code, out = fp(project, "replay", "det", "--", sys.executable, "clock_agent.py", "Say bye.")
    assert code == 3, out
    assert "~ $.body.messages[1].content: Say hi. → Say bye." in flat(out)


def test_a_bad_rule_is_refused_before_the_program_runs(
    project: tuple[Path, dict[str, str]], server: LocalServer
) -> None:
    cwd, _ = project
    record_clock(project)
    asked = len(server.requests)
    (cwd / "forkpoint.toml").write_text('[match]\nignore = [ { path = "$.messages[0].content" } ]\n')
    for args in (["replay", "clock"], ["record", sys.executable, "clock_agent.py"]):
        code, out = fp(project, *args)
        assert code == 1, out
        assert f"{cwd / 'forkpoint.toml'} [match]: ignore[0] {{ path = '$.messages[0].content' }}: " in flat(
            out
        )
        assert "answer:" not in out
    assert len(server.requests) == asked  # the program never ran
    assert len(list_sessions(cwd / "store").rows) == 1  # and no session was started for it


def test_replay_takes_the_program_with_or_without_the_separator(
    project: tuple[Path, dict[str, str]], server: LocalServer
) -> None:
    code, out = fp(project, "record", "--deterministic", "--name", "det", sys.executable, "clock_agent.py")
    assert code == 0, out
    server.stop()
    code, out = fp(project, "replay", "det", sys.executable, "clock_agent.py", "Say hi.")
    assert code == 0, out
    code, out = fp(project, "replay", "det", "--report", "r.json", sys.executable, "clock_agent.py")
    assert code == 0 and (project[0] / "r.json").is_file(), out
    # After the program, every argument is the program's, even one that is also forkpoint's.
    code, out = fp(
        project, "replay", "det", sys.executable, "-c", "import sys; print(sys.argv)", "--report", "x"
    )
    assert "['-c', '--report', 'x']" in out
    assert not (project[0] / "x").exists()
    code, out = fp(project, "replay", "--overide", "x", "det")
    assert code == 2 and "No such option '--overide'" in out
    # fork reads its program the same way: past the options, to the checkpoint it is asked for.
    for args in (
        ["fork", "det@1", sys.executable, "-c", "pass"],
        ["fork", "det@1", "--", sys.executable, "-c", "pass"],
    ):
        code, out = fp(project, *args)
        assert code == 1 and "has no checkpoint at seq 1" in out, out


SET_AGENT = """
import os

import openai

tools = {"search", "fetch", "summarize", "translate", "calendar", "email", "weather", "stocks"}
client = openai.OpenAI(base_url=os.environ["AGENT_BASE_URL"], api_key="sk-test", max_retries=0)
prompt = "You can use: " + ", ".join(tools)  # a set's order: that of the strings' hashes
reply = client.chat.completions.create(model="demo-model", messages=[{"role": "user", "content": prompt}])
print("answer:", reply.choices[0].message.content)
"""


def test_a_prompt_joined_from_a_set_of_strings_replays(
    project: tuple[Path, dict[str, str]], server: LocalServer
) -> None:
    """The order of a set of strings follows their hashes, which Python salts per process
    (``PYTHONHASHSEED``): a prompt joined from a set (or a tool result's ``str()`` of one) was
    another request in the replay's process, and the replay diverged on a program that had not
    changed. The recorded command runs with a hash seed kept in the header, and a replay with it."""
    cwd, env = project
    (cwd / "set_agent.py").write_text(SET_AGENT)
    env = {k: v for k, v in env.items() if k != "PYTHONHASHSEED"}
    recorded = run([*FORKPOINT, "record", "--name", "chosen", sys.executable, "set_agent.py"], cwd, env)
    assert recorded.returncode == 0, recorded.stderr
    given = {**env, "PYTHONHASHSEED": "1"}
    recorded = run([*FORKPOINT, "record", "--name", "given", sys.executable, "set_agent.py"], cwd, given)
    assert recorded.returncode == 0, recorded.stderr
    server.stop()

    # Replayed in a shell whose seed is another (this one orders these strings otherwise).
    other = {**env, "PYTHONHASHSEED": "2"}
    done = run([*FORKPOINT, "replay", "given"], cwd, other, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "runs with the recording's PYTHONHASHSEED, 1 (not 2)" in done.stderr
    done = run([*FORKPOINT, "replay", "chosen"], cwd, env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    headers = [Session.load(row.path).header for row in list_sessions(cwd / "store").rows]
    seeds = {h["name"]: h.get("hash_seed") for h in headers}
    assert seeds["given"] == 1 and isinstance(seeds["chosen"], int), seeds
