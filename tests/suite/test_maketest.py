"""``forkpoint make-test``: an incident recorded in one checkout becomes a test of another, which
replays it offline, fails on the assertion the fix must satisfy, is re-recorded from the first call
that changed once the agent is fixed, and replays offline from then on.

The agent is a small support bot on the real openai SDK with one ``@forkpoint.tool``; the tests'
local model server answers it (a route: a tool call first, then an answer that quotes the order
number only when the tool result the agent sends back contains it). Everything runs as the user
would run it: the ``forkpoint`` CLI and pytest in subprocesses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from forkpoint.errors import SessionError, UsageError
from forkpoint.files import copy_dir_into_place
from forkpoint.log import Session
from forkpoint.program import parse_command, run_command
from tests.cliutil import coding_checkouts
from tests.modelserver import LocalServer, Reply, chat_completion, json_reply

AGENT = '''"""Answers "where is my order N?" with the order tool."""
import json
import os
import sys

import openai

import forkpoint

TOOLS = [{"type": "function", "function": {"name": "lookup_order", "parameters": {
    "type": "object", "properties": {"order_id": {"type": "string"}}}}}]


@forkpoint.tool
def lookup_order(order_id: str) -> dict:
    return {"order_id": order_id, "status": "shipped"}


def tool_message(result: dict) -> str:
    return TOOL_RESULT


def main() -> int:
    client = openai.OpenAI(base_url=os.environ["AGENT_BASE_URL"], api_key="sk-test", max_retries=0)
    messages = [
        {"role": "system", "content": "You answer questions about orders."},
        {"role": "user", "content": f"Where is my order {sys.argv[1]}?"},
    ]
    for _ in range(4):
        msg = client.chat.completions.create(model="m", messages=messages, tools=TOOLS).choices[0].message
        if not msg.tool_calls:
            print("answer:", msg.content)
            return 0
        call = msg.tool_calls[0]
        messages.append({"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function",
             "function": {"name": call.function.name, "arguments": call.function.arguments}}]})
        result = lookup_order(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": tool_message(result)})
    return 4


if __name__ == "__main__":
    sys.exit(main())
'''
#: A loopback address: the made test replays it, and a call it failed to serve must reach nothing.
URL = "http://127.0.0.1:9/v1/chat/completions"
#: The bug: only the status goes back to the model, so it cannot name the order.
BUGGY = AGENT.replace("TOOL_RESULT", 'result["status"]')
#: The fix: the whole tool result goes back.
FIXED = AGENT.replace("TOOL_RESULT", "json.dumps(result)")


def support_model(request: dict[str, Any]) -> Reply:
    """A tool call while no tool result is in; then an answer that names the order only if the
    tool result shows its id."""
    body = request["body"]
    messages = body["messages"]
    tool = [m for m in messages if m.get("role") == "tool"]
    if not tool:
        order = messages[-1]["content"].rstrip("?").split()[-1]
        calls = [("lookup_order", {"order_id": order})]
        return json_reply(chat_completion("chatcmpl-1", body["model"], tool_calls=calls, call_ids=["call_1"]))
    content = tool[-1]["content"]
    text = (
        f"Order {json.loads(content)['order_id']} has shipped."
        if "order_id" in content
        else "It has shipped."
    )
    return json_reply(chat_completion("chatcmpl-2", body["model"], text=text))


def sh(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def pytest_in(project: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return sh(sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args, cwd=project, env=env)


def recorded_and_made(project: Path, env: dict[str, str], name: str, *, exit_code: int) -> str:
    """``forkpoint record --name NAME -- python agent.py`` in ``project`` (ending with ``exit_code``),
    then ``forkpoint make-test NAME``: the test module it wrote."""
    forkpoint = [sys.executable, "-m", "forkpoint.cli"]
    made = sh(*forkpoint, "record", "--name", name, "--", sys.executable, "agent.py", cwd=project, env=env)
    assert made.returncode == exit_code, made.stderr
    test = sh(*forkpoint, "make-test", name, cwd=project, env=env)
    assert test.returncode == 0, test.stderr
    return (project / "tests" / "incidents" / f"test_{name}.py").read_text()


@pytest.mark.slow
def test_an_incident_start_to_finish(tmp_path: Path, server: LocalServer) -> None:
    server.route("/v1/chat/completions", support_model)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS", "FORKPOINT_STORE")}
    env |= {"AGENT_BASE_URL": server.openai_base_url, "PYTHONDONTWRITEBYTECODE": "1"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # `python` is ours
    fp = [sys.executable, "-m", "forkpoint.cli"]
    # Production: the agent runs in its own checkout and gives a vague answer.
    prod = tmp_path / "prod"
    prod.mkdir()
    (prod / "agent.py").write_text(BUGGY)
    store = tmp_path / "store"
    rec = sh(*fp, "record", "--store", str(store), "--name", "incident-42", "--tag", "agent_version=1.4",
             "--no-workspace", "--",
             "python", str(prod / "agent.py"), "42", cwd=prod, env=env)  # fmt: skip
    assert rec.returncode == 0, rec.stderr
    assert "answer: It has shipped." in rec.stdout

    # The developer's checkout: the incident becomes a test.
    project = tmp_path / "app"
    project.mkdir()
    (project / "agent.py").write_text(BUGGY)
    made = sh(*fp, "make-test", "incident-42", "--store", str(store), cwd=project, env=env)
    assert made.returncode == 0, made.stderr
    test_file = project / "tests" / "incidents" / "test_incident_42.py"
    assert made.stdout.strip() == str(Path("tests") / "incidents" / "test_incident_42.py")
    source = test_file.read_text()
    assert "COMMAND = ['python', str(ROOT / 'agent.py'), '42']" in source  # the recorded cwd maps here
    assert "@pytest.mark.forkpoint(cassette='cassettes/incident_42')" in source
    assert "assert run.exit_code == 0" in source
    assert "# TODO: the assertion the fix must satisfy goes here" in source
    assert "#     It has shipped." in source  # the recorded run's last answer, for the reader
    assert "pytest --forkpoint-mode=record tests/incidents/test_incident_42.py" in source
    cassette = test_file.parent / "cassettes" / "incident_42"
    assert (
        Session.load(cassette).id
        == Session.load(next(p for p in store.iterdir() if p.is_dir() and p.name != "index")).id
    )

    served_before = len(server.requests)
    ci = {**env, "CI": "1"}
    # It reproduces the incident, offline: no request reaches the model.
    first = pytest_in(project, ci)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "1 passed" in first.stdout
    assert len(server.requests) == served_before

    # The assertion the fix must satisfy fails against the recording.
    test_file.write_text(
        source.replace('    #     assert "…" in run.output\n', '    assert "Order 42" in run.output\n')
    )
    wanted = pytest_in(project, ci)
    assert wanted.returncode == 1 and "assert 'Order 42' in 'answer: It has shipped.\\n'" in wanted.stdout

    # The fix changes what the agent sends back after the tool call: a replay now diverges there.
    (project / "agent.py").write_text(FIXED)
    diverged = pytest_in(project, ci)
    assert diverged.returncode == 1
    assert "replay diverged at the 2nd model call of this run" in diverged.stdout
    assert "$.body.messages[3].content: shipped" in diverged.stdout

    # Re-recorded from the first call that changed: the first model call and the tool call are
    # replayed, the second model call is live.
    updated = pytest_in(project, env, "--forkpoint-mode=record")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert "1 updated" in updated.stdout
    # The summary names the folder the cassette is in (the marker's), not the default one.
    assert (
        f"cassettes in {test_file.parent / 'cassettes'}: 0 replayed, 0 recorded, 1 updated" in updated.stdout
    )
    assert len(server.requests) == served_before + 1
    assert "order_id" in server.requests[-1]["body"]["messages"][-1]["content"]
    recorded_again = Session.load(cassette)
    assert [c["type"] for c in recorded_again.calls()] == ["model_call", "tool_call", "model_call"]
    # Still the incident, by its name and tags (what forkpoint check --tag selects it by)
    assert recorded_again.header["name"] == "incident-42"
    assert {k: v for k, v in recorded_again.header["tags"].items() if v is not None} == {
        "agent_version": "1.4",
        "pytest": "tests/incidents/test_incident_42.py::test_incident_42",
    }

    # From then on it replays offline.
    server.stop()
    again = pytest_in(project, ci)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "1 passed" in again.stdout


def test_make_test_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    assert parse_command(["python3", "-u", "-X", "dev", "-m", "pkg.agent", "--x"]) == (
        "module",
        "pkg.agent",
        ["--x"],
    )
    assert parse_command(["/venv/bin/python3.12", "agent.py", "1"]) == ("file", "agent.py", ["1"])
    assert parse_command(["./agent.py", "1"]) == ("file", "./agent.py", ["1"])
    for argv in (["bash", "run.sh"], ["python", "-c", "print(1)"], ["python"], []):
        with pytest.raises(UsageError):
            parse_command(argv)


def test_run_command_runs_a_file_in_this_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "prog.py"
    script.write_text("import sys\nprint('args', sys.argv[1:])\nsys.exit(int(sys.argv[1]))\n")
    monkeypatch.chdir(tmp_path)
    argv = list(sys.argv)
    run = run_command(["python", "prog.py", "5"])
    assert (run.exit_code, run.output) == (5, "args ['5']\n")
    assert sys.argv == argv
    assert run.uncaught is None
    script.write_text("raise RuntimeError('boom')\n")
    run = run_command(["prog.py"])
    assert run.exit_code == 1 and isinstance(run.uncaught, RuntimeError) and str(run.uncaught) == "boom"
    # A Ctrl-C (no replay raised it) stops the caller, as pytest's session, not just the program.
    script.write_text("raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        run_command(["prog.py"])
    assert sys.argv == argv


def test_run_command_exits_with_the_status_the_interpreter_exits_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sys.exit(-1)`` ends a process with status 255, ``sys.exit(256)`` with 0: a recording keeps
    the status, and a test made of it asserts that; ``run_command`` gave the code raw (-1, 256), so
    the made test failed on the unchanged agent (``assert -1 == 255``)."""
    script = tmp_path / "prog.py"
    script.write_text("import sys\nsys.exit(True if sys.argv[1] == 'True' else int(sys.argv[1]))\n")
    monkeypatch.chdir(tmp_path)
    for code in ("-1", "256", "257", "-256", str(2**40), str(2**63), "True"):
        status = subprocess.run([sys.executable, "prog.py", code], capture_output=True).returncode
        assert run_command(["python", "prog.py", code]).exit_code == status, code


def test_a_made_test_of_a_run_that_exited_minus_one_passes(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text("import sys\nprint('giving up')\nsys.exit(-1)\n")
    env = {**os.environ, "FORKPOINT_STORE": str(tmp_path / "store")}
    written = recorded_and_made(tmp_path, env, "gave_up", exit_code=255)
    assert "assert run.exit_code == 255" in written, written
    ran = pytest_in(tmp_path, env, "tests/incidents")
    assert ran.returncode == 0 and "1 passed" in ran.stdout, ran.stdout + ran.stderr


def test_a_test_made_of_an_imported_cassette_passes_on_the_program_that_made_it(tmp_path: Path) -> None:
    """A session imported from a cassette does not say how its run ended (its exit code is None):
    the made test asserted ``run.exit_code == None``, which no run passes."""
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello"}]}
    json_type = {"content-type": ["application/json"]}
    interaction = {
        "request": {"method": "POST", "uri": URL, "body": json.dumps(body), "headers": json_type},
        "response": {
            "status": {"code": 200, "message": "OK"},
            "headers": json_type,
            "body": {"string": '{"id": "c1"}'},
        },
    }
    (tmp_path / "cassette.json").write_text(json.dumps({"interactions": [interaction]}))
    (tmp_path / "agent.py").write_text(
        f"import requests\nprint(requests.post({URL!r}, json={body!r}, timeout=5).json()['id'])\n"
    )
    env = {**os.environ, "FORKPOINT_STORE": str(tmp_path / "store")}
    fp = [sys.executable, "-m", "forkpoint.cli"]
    imported = sh(*fp, "import", "--name", "from_vcr", "cassette.json", cwd=tmp_path, env=env)
    assert imported.returncode == 0, imported.stderr
    made = sh(*fp, "make-test", "from_vcr", "--", "python", "agent.py", cwd=tmp_path, env=env)
    assert made.returncode == 0, made.stderr
    written = (tmp_path / "tests" / "incidents" / "test_from_vcr.py").read_text()
    assert "run.exit_code ==" not in written, written
    ran = pytest_in(tmp_path, env, "tests/incidents")
    assert ran.returncode == 0 and "1 passed" in ran.stdout, ran.stdout + ran.stderr


def test_a_made_test_does_not_run_the_agent_live_where_the_plugin_is_not_loaded(tmp_path: Path) -> None:
    """Where pytest does not load forkpoint's plugin (``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1``, ``-p
    no:forkpoint``), the marker of a made test is an unknown one, a warning: the test ran the agent
    live, its tools and model calls for real, and passed."""
    (tmp_path / "agent.py").write_text("from pathlib import Path\nPath('ran.txt').write_text('live')\n")
    env = {**os.environ, "FORKPOINT_STORE": str(tmp_path / "store")}
    recorded_and_made(tmp_path, env, "offline", exit_code=0)
    (tmp_path / "ran.txt").unlink()
    ran = pytest_in(tmp_path, {**env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}, "tests/incidents")
    assert ran.returncode != 0 and "fixture 'forkpoint_session' not found" in ran.stdout, ran.stdout
    assert not (tmp_path / "ran.txt").exists()
    assert pytest_in(tmp_path, env, "tests/incidents").returncode == 0


def test_a_made_test_fails_when_the_run_ends_with_another_exception(tmp_path: Path) -> None:
    """The made test asserted the exit code alone: a replay that raised a KeyError where the
    recording raised a ValueError (exit 1 both) passed it, while `forkpoint replay` said the run
    did not reproduce."""
    (tmp_path / "agent.py").write_text(
        "import os\nraise (KeyError if os.environ.get('MODE') == 'key' else ValueError)('boom')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "MODE"}
    env["FORKPOINT_STORE"] = str(tmp_path / "store")
    written = recorded_and_made(tmp_path, env, "raises", exit_code=1)
    assert "assert type(run.uncaught).__qualname__ == 'ValueError'" in written, written
    same = pytest_in(tmp_path, env, "tests/incidents")
    assert same.returncode == 0 and "1 passed" in same.stdout, same.stdout + same.stderr
    other = pytest_in(tmp_path, {**env, "MODE": "key"}, "tests/incidents")
    assert other.returncode == 1 and "1 failed" in other.stdout, other.stdout + other.stderr
    assert "KeyError" in other.stdout


def test_a_made_test_of_a_run_ended_by_ctrl_c_passes_and_lets_the_session_go_on(tmp_path: Path) -> None:
    """A run stopped by Ctrl-C while a tool hung ends with an uncaught KeyboardInterrupt (exit code
    130), which the made test asserts. The replayed tool raised it again in the test's process and
    ``run_command`` let it through: pytest took it for the user's Ctrl-C and stopped the whole
    session ("!!! KeyboardInterrupt !!!", exit code 2, no later test run)."""
    (tmp_path / "agent.py").write_text(
        "import forkpoint\n\n\n@forkpoint.tool\ndef fetch() -> str:\n"
        "    raise KeyboardInterrupt  # the user's Ctrl-C, while the tool hung\n\n\nfetch()\n"
    )
    (tmp_path / "tests" / "test_after.py").parent.mkdir()
    (tmp_path / "tests" / "test_after.py").write_text("def test_after() -> None:\n    pass\n")
    env = {**os.environ, "FORKPOINT_STORE": str(tmp_path / "store")}
    written = recorded_and_made(tmp_path, env, "ctrlc", exit_code=130)
    assert "assert type(run.uncaught).__qualname__ == 'KeyboardInterrupt'" in written, written
    # (its message is empty: no line of the module ends in a space, which linters flag)
    assert "# It raised an uncaught KeyboardInterrupt.\n" in written, written
    ran = pytest_in(tmp_path, env, "tests/incidents", "tests/test_after.py")
    assert ran.returncode == 0 and "2 passed" in ran.stdout, ran.stdout + ran.stderr


def test_a_made_test_quotes_what_the_run_said_with_its_backslashes(tmp_path: Path) -> None:
    """The comments of a made test that quote how the run ended (its last model answer, the
    message of the exception that ended it) turned every backslash into a slash: a message
    ``'1 passed\\n'`` (the JSON of a tool result) was shown as ``'1 passed/n'``, which the user copies
    into the assertion the fix must satisfy. A comment has no escapes: they are kept, and the
    module still runs."""
    (tmp_path / "agent.py").write_text('raise ValueError(r\'no C:\\new\\table in {"out": "1 passed\\n"}\')\n')
    env = {**os.environ, "FORKPOINT_STORE": str(tmp_path / "store")}
    forkpoint = [sys.executable, "-m", "forkpoint.cli"]
    made = sh(*forkpoint, "record", "--name", "bs", "--", sys.executable, "agent.py", cwd=tmp_path, env=env)
    assert made.returncode == 1, made.stderr
    test = sh(*forkpoint, "make-test", "bs", cwd=tmp_path, env=env)
    assert test.returncode == 0, test.stderr
    written = (tmp_path / "tests" / "incidents" / "test_bs.py").read_text()
    assert r'# It raised an uncaught ValueError: no C:\new\table in {"out": "1 passed\n"}' in written, written
    ran = pytest_in(tmp_path, env, "tests/incidents")
    assert ran.returncode == 0 and "1 passed" in ran.stdout, ran.stdout + ran.stderr


def test_a_session_recorded_through_a_shell_script_is_made_a_test_of_the_python_command(
    tmp_path: Path,
) -> None:
    """make-test refused a recorded shell script and said to give the Python command, which it had
    no way to take."""
    (tmp_path / "agent.py").write_text("print('answer: 42')\n")
    (tmp_path / "run.sh").write_text(f'#!/bin/sh\nexec "{sys.executable}" agent.py "$@"\n')
    (tmp_path / "run.sh").chmod(0o755)
    env = {**os.environ, "FORKPOINT_STORE": str(tmp_path / "store")}
    forkpoint = [sys.executable, "-m", "forkpoint.cli"]
    made = sh(*forkpoint, "record", "--name", "sh", "--", "./run.sh", cwd=tmp_path, env=env)
    assert made.returncode == 0, made.stderr
    refused = sh(*forkpoint, "make-test", "sh", cwd=tmp_path, env=env)
    assert refused.returncode != 0 and "forkpoint make-test" in refused.stderr, refused.stderr
    assert "-- python agent.py" in " ".join(refused.stderr.split()), refused.stderr
    test = sh(*forkpoint, "make-test", "sh", "--", "python", "agent.py", cwd=tmp_path, env=env)
    assert test.returncode == 0, test.stderr
    assert "COMMAND = ['python', 'agent.py']" in (tmp_path / "tests" / "incidents" / "test_sh.py").read_text()
    ran = pytest_in(tmp_path, env, "tests/incidents")
    assert ran.returncode == 0 and "1 passed" in ran.stdout, ran.stdout + ran.stderr


def test_make_test_runs_no_command_an_untrusted_session_recorded_and_replaces_cassettes_whole(
    tmp_path: Path,
) -> None:
    """make-test wrote the recorded command of a session nobody trusted into a test, which pytest
    then ran (replay refuses to); and --force on the test's own cassette deleted it (rmtree, then a
    copy of what was just removed)."""
    (tmp_path / "agent.py").write_text("print('answer: 42')\n")
    env = {**os.environ, "FORKPOINT_STORE": str(tmp_path / "store")}
    forkpoint = [sys.executable, "-m", "forkpoint.cli"]
    assert (
        sh(
            *forkpoint, "record", "--name", "a", "--", sys.executable, "agent.py", cwd=tmp_path, env=env
        ).returncode
        == 0
    )
    session = next(p for p in (tmp_path / "store").iterdir() if (p / "signature.json").exists())
    (session / "signature.json").unlink()  # as a session from elsewhere, or edited, would be

    refused = sh(*forkpoint, "make-test", "a", cwd=tmp_path, env=env)
    assert refused.returncode == 1, refused.stderr
    said = " ".join(refused.stderr.split())
    assert "not signed" in said and "will not run the command it recorded" in said and "agent.py" in said
    assert not (tmp_path / "tests").exists()
    given = sh(*forkpoint, "make-test", "a", "--", "python", "agent.py", cwd=tmp_path, env=env)
    assert given.returncode == 0, given.stderr
    trusted = sh(*forkpoint, "make-test", "a", "--name", "t", "--trust", cwd=tmp_path, env=env)
    assert trusted.returncode == 0, trusted.stderr

    cassette = tmp_path / "tests" / "incidents" / "cassettes" / "a"
    before = sorted(p.name for p in cassette.iterdir())
    again = sh(
        *forkpoint,
        "make-test",
        str(cassette),
        "--name",
        "a",
        "--force",
        "--",
        "python",
        "agent.py",
        cwd=tmp_path,
        env=env,
    )
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in cassette.iterdir()) == before
    assert Session.load(cassette).end() is not None
    ran = pytest_in(tmp_path, env, "tests/incidents")
    assert ran.returncode == 0 and "2 passed" in ran.stdout, ran.stdout + ran.stderr
    assert [p.name for p in cassette.parent.iterdir() if p.name.startswith(".")] == []  # nothing left beside


def test_a_cassette_that_is_a_link_is_replaced_by_the_copy_and_nothing_is_left_beside_it(
    tmp_path: Path,
) -> None:
    """make-test --force over a cassette that was a link to a folder moved the link aside, as
    ``.a.old-…``, and left it there, among the cassettes that get committed (rmtree refuses a
    link): the folder it named is never touched."""
    source = tmp_path / "session"
    source.mkdir()
    (source / "session.jsonl").write_text("{}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("precious")
    folder = tmp_path / "cassettes"
    folder.mkdir()
    (folder / "a").symlink_to(elsewhere)
    copy_dir_into_place(source, folder / "a")
    assert not (folder / "a").is_symlink() and (folder / "a" / "session.jsonl").read_text() == "{}\n"
    assert (elsewhere / "keep.txt").read_text() == "precious"
    assert sorted(p.name for p in folder.iterdir()) == ["a"]


def test_make_test_copies_only_the_session_and_writes_no_recorded_field_as_code(tmp_path: Path) -> None:
    """A ``conftest.py`` dropped into a session's folder in a shared store (no key needed: the
    signature covers the log) was copied into the checkout with the cassette, and pytest ran it. And
    an ``exit_code`` made a string with a newline broke out of the generated test's comment into
    code. The cassette holds the session's own files only, verify names the others, and such an
    exit code is refused."""
    from forkpoint.log import SessionWriter, verify
    from forkpoint.record import make_header
    from forkpoint.suite.maketest import make_test

    marker = tmp_path / "ran"
    (tmp_path / "agent.py").write_text("print('answer: 42')\n")
    env = {**os.environ, "FORKPOINT_STORE": str(tmp_path / "store")}
    forkpoint = [sys.executable, "-m", "forkpoint.cli"]
    made = sh(*forkpoint, "record", "--name", "a", "--", sys.executable, "agent.py", cwd=tmp_path, env=env)
    assert made.returncode == 0, made.stderr
    session = next(p for p in (tmp_path / "store").iterdir() if (p / "signature.json").exists())
    planted = f"open({str(marker)!r}, 'w').write('x')\n"
    (session / "conftest.py").write_text(planted)
    (session / "blobs").mkdir(exist_ok=True)
    (session / "blobs" / "conftest.py").write_text(planted)
    notes = verify(session).notes
    assert any("conftest.py: not part of the session" in n for n in notes), notes
    test = sh(*forkpoint, "make-test", "a", cwd=tmp_path, env=env)
    assert test.returncode == 0, test.stderr
    cassette = tmp_path / "tests" / "incidents" / "cassettes" / "a"
    assert sorted(p.relative_to(cassette).as_posix() for p in cassette.rglob("*") if p.is_file()) == [
        "session.jsonl",
        "signature.json",
    ]
    ran = pytest_in(tmp_path, env, "tests/incidents")
    assert ran.returncode == 0 and "1 passed" in ran.stdout, ran.stdout + ran.stderr
    assert not marker.exists()

    writer = SessionWriter.create(tmp_path / "forged", make_header(argv=["python", "agent.py"], name="f"))
    writer.append({"type": "end", "exit_code": "0\nimport os; os.system('true')"})
    writer.close()
    with pytest.raises(SessionError, match="its exit_code is .*, not a whole number"):
        make_test(Session.load(writer.path), into=tmp_path / "out", root=tmp_path, trust=True)
    assert not (tmp_path / "out").exists()


def test_a_session_whose_blobs_folder_is_a_link_fails_verify_and_make_test(tmp_path: Path) -> None:
    """A session folder whose ``blobs`` was a symbolic link (to a folder anywhere) verified clean,
    and make-test copied the link as it was into the cassette: a cassette without its data, pointing
    at a path of this machine. verify says so, and make-test refuses it."""
    from forkpoint.log import verify

    (tmp_path / "agent.py").write_text("print('x' * 3000)\n")
    env = {**os.environ, "FORKPOINT_STORE": str(tmp_path / "store")}
    forkpoint = [sys.executable, "-m", "forkpoint.cli"]
    code = "from forkpoint import note; note('n' * 3000)"  # a blob
    made = sh(*forkpoint, "record", "--name", "a", "--", sys.executable, "-c", code, cwd=tmp_path, env=env)
    assert made.returncode == 0, made.stderr
    session = next(p for p in (tmp_path / "store").iterdir() if (p / "signature.json").exists())
    elsewhere = tmp_path / "elsewhere"
    (session / "blobs").rename(elsewhere)
    (session / "blobs").symlink_to(elsewhere)
    v = verify(session)
    assert not v.ok and any(
        "blobs: a symbolic link where a session holds its own data" in p for p in v.problems
    )
    test = sh(*forkpoint, "make-test", "a", "--", sys.executable, "agent.py", cwd=tmp_path, env=env)
    assert test.returncode == 1 and "a symbolic link" in test.stderr, test.stderr
    assert not (tmp_path / "tests").exists()


@pytest.mark.slow
def test_a_test_made_in_another_checkout_passes_though_the_prompt_names_paths(
    tmp_path: Path, server: LocalServer
) -> None:
    """A coding agent names its directory and the file it was given (an absolute path) in its
    prompt: the test make-test wrote failed at once in any other checkout (``You work in /src/inc →
    You work in /ci/checkout``; ``/src/inc/bug.py → bug.py``). It passes, with the server gone."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS", "FORKPOINT_STORE")}
    env |= {"AGENT_BASE_URL": server.openai_base_url, "PYTHONDONTWRITEBYTECODE": "1"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    fp = [sys.executable, "-m", "forkpoint.cli"]
    prod, project = tmp_path / "prod", tmp_path / "ci" / "checkout"
    coding_checkouts(*(prod, project))
    store = tmp_path / "store"
    rec = sh(*fp, "record", "--store", str(store), "--name", "fix", "--no-workspace", "--",
             "python", "coder.py", str(prod / "bug.py"), cwd=prod, env=env)  # fmt: skip
    assert rec.returncode == 0, rec.stderr
    made = sh(*fp, "make-test", "fix", "--store", str(store), cwd=project, env=env)
    assert made.returncode == 0, made.stderr
    source = (project / "tests" / "incidents" / "test_fix.py").read_text()
    assert "COMMAND = ['python', 'coder.py', str(ROOT / 'bug.py')]" in source, source
    server.stop()
    ran = pytest_in(project, env, "tests/incidents")
    assert ran.returncode == 0 and "1 passed" in ran.stdout, ran.stdout + ran.stderr
