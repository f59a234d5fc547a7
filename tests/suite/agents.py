"""Agents and recordings the tests of ``check``, ``fork``, ``sweep`` and the Ray executor share.

* The **keeper**: a coding agent on the real openai SDK (two ``@forkpoint.tool`` tools working on its
  current directory) whose model (:func:`keeper_model`, a route of the tests' local server) writes
  ``answer.txt``, then decides once whether to keep it or delete it — alternately, counted over the
  server's life, starting with "delete" — then answers. Its outcome, ``test -f answer.txt``, passes
  from a checkpoint before the decision half of the time and never after it: a run that became
  unrecoverable at a known point. :func:`record_keeper` records it in a git repository.
* **Demo sessions**: :func:`record_demo_sessions` records the bundled demo agent in this process
  (fast), with the command that replays it, against ``forkpoint.demo.server.ModelServer``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import forkpoint
from forkpoint.demo.agent import run_agent
from forkpoint.store import resolve
from tests.gitutil import make_repo
from tests.modelserver import LocalServer, Reply, chat_completion, json_reply

KEEPER = '''"""Keeps answer.txt, or not: whatever the model says."""
import json
import os
import sys
from pathlib import Path

import openai

import forkpoint


@forkpoint.tool
def write_file(path: str, content: str) -> dict:
    Path(path).write_text(content)
    return {"path": path}


@forkpoint.tool
def delete_file(path: str) -> dict:
    Path(path).unlink()
    return {"deleted": path}


TOOLS = {"write_file": write_file, "delete_file": delete_file}
SPECS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in TOOLS]


def main() -> int:
    client = openai.OpenAI(base_url=os.environ["AGENT_BASE_URL"], api_key="sk-test", max_retries=0)
    messages = [
        {"role": "system", "content": "You keep answer.txt."},
        {"role": "user", "content": "Write the answer."},
    ]
    for _ in range(6):
        msg = client.chat.completions.create(model="m", messages=messages, tools=SPECS).choices[0].message
        entry = {"role": "assistant", "content": msg.content}
        if msg.tool_calls:
            entry["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.function.name, "arguments": c.function.arguments}}
                for c in msg.tool_calls
            ]
        messages.append(entry)
        if not msg.tool_calls:
            print("final:", msg.content)
            return 0
        for c in msg.tool_calls:
            result = TOOLS[c.function.name](**json.loads(c.function.arguments))
            messages.append({"role": "tool", "tool_call_id": c.id, "content": json.dumps(result)})
    return 4


if __name__ == "__main__":
    sys.exit(main())
'''
#: The keeper's outcome command: the answer survived.
KEEPER_OUTCOME = "test -f answer.txt"
#: A Python program that asks the keeper's model once: from a fork's first checkpoint, before any
#: recorded call, its arm goes live at once.
ONE_CALL = (
    "import os, openai; openai.OpenAI(base_url=os.environ['AGENT_BASE_URL'], api_key='sk-test', max_retries=0)"
    ".chat.completions.create(model='m', messages=[{'role': 'user', 'content': 'Write the answer.'}])"
)


class keeper_model:  # noqa: N801 - a route function with state
    """The keeper's model (a route for ``…/chat/completions``): by the assistant turns so far,
    write answer.txt; then keep it (write notes.txt) or delete it, alternately from "delete"; then
    answer. ``decisions`` counts the second kind of turn."""

    def __init__(self) -> None:
        self.decisions = 0
        self.lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> Reply:
        body = request["body"]
        turn = sum(1 for m in body["messages"] if m.get("role") == "assistant")
        model = body["model"]
        if turn == 0:
            calls = [("write_file", {"path": "answer.txt", "content": "42"})]
        elif turn == 1:
            with self.lock:
                keep, self.decisions = self.decisions % 2 == 1, self.decisions + 1
            calls = (
                [("write_file", {"path": "notes.txt", "content": "kept"})]
                if keep
                else [("delete_file", {"path": "answer.txt"})]
            )
        else:
            return json_reply(chat_completion(f"chatcmpl-{turn}", model, text="Done."))
        ids = [f"call_{turn}"]
        return json_reply(chat_completion(f"chatcmpl-{turn}", model, tool_calls=calls, call_ids=ids))


@dataclass
class Keeper:
    """A recorded keeper run: its repository, store, session, and how to run the agent again."""

    repo: Path
    store: Path
    session: forkpoint.Session
    agent: list[str]
    env: dict[str, str]
    model: keeper_model

    def resumable(self) -> list[int]:
        """The seqs of its resumable checkpoints, in order."""
        return [c["seq"] for c in self.session.by_type("checkpoint") if c["boundary"] == "resumable"]


#: mini-swe-agent's shape: a loop that asks the model and runs each ``bash`` command it gives with
#: ``subprocess`` (its LocalEnvironment), sending the output back; no tool is recorded.
SHELL_AGENT = """import json
import os
import subprocess

import openai


class LocalEnvironment:
    def execute(self, action: dict) -> dict:
        p = subprocess.run(action["command"], shell=True, text=True, capture_output=True)
        return {"output": p.stdout, "returncode": p.returncode}


client = openai.OpenAI(base_url=os.environ["AGENT_BASE_URL"], api_key="sk-test", max_retries=0)
env = LocalEnvironment()
messages = [{"role": "user", "content": "Fix calc.py"}]
while True:
    msg = client.chat.completions.create(model="m", messages=messages).choices[0].message
    messages.append(msg.model_dump(exclude_none=True))
    if not msg.tool_calls:
        break
    for call in msg.tool_calls:
        out = env.execute(json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(out)})
print(msg.content)
"""


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for a ``forkpoint``/agent subprocess: this interpreter's ``python`` first on
    PATH, no CI or store variables from outside, no bytecode files in restored directories."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS", "FORKPOINT_STORE")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env | extra


def record_keeper(tmp: Path, server: LocalServer, store_url: str | None = None) -> Keeper:
    """Record the keeper once in a new repository (the model's first decision: delete), into a new
    store ``tmp/store``, or the remote store ``store_url`` (then ``Keeper.store`` is this machine's
    mirror of it, which names the remote store too)."""
    model = keeper_model()
    server.route("/v1/chat/completions", model)
    repo = make_repo(tmp / "repo", {"README.md": "# keeper\n", ".gitignore": "__pycache__/\n"})
    script = tmp / "keeper.py"
    script.write_text(KEEPER)
    store = tmp / "store"
    env = cli_env(AGENT_BASE_URL=server.openai_base_url)
    agent = ["python", str(script)]
    rec = subprocess.run(
        [sys.executable, "-m", "forkpoint.cli", "record", "--store", store_url or str(store), "--name", "keeper",
         "--", *agent],
        cwd=repo, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert rec.returncode == 0, rec.stderr
    assert not (repo / "answer.txt").exists()  # the recorded run deleted it
    if store_url is not None:
        path = resolve("keeper", store_url)
        return Keeper(repo, path.parent, forkpoint.Session.load(path), agent, env, model)
    (path,) = [p for p in store.iterdir() if p.is_dir() and p.name != "index"]
    return Keeper(repo, store, forkpoint.Session.load(path), agent, env, model)


def record_demo_sessions(store: Path | str, n: int, base_url: str, work: Path) -> list[str]:
    """Record ``n`` runs of the demo agent into ``store`` in this process, each with the command that
    runs it again (``python -m forkpoint.demo.agent --base-url … --workdir …``), named ``demo-I`` and
    tagged ``batch=even|odd``. Returns their ids."""
    ids = []
    for i in range(n):
        workdir = work / f"w{i}"
        argv = ["python", "-m", "forkpoint.demo.agent", "--base-url", base_url, "--workdir", str(workdir)]
        tags = {"batch": "even" if i % 2 == 0 else "odd"}
        with forkpoint.record(name=f"demo-{i}", store=store, tags=tags, argv=argv) as rec:
            run_agent(base_url, workdir, echo=None)
        ids.append(rec.session_path.name)
    return ids
