"""Encryption at rest (docs/security.md, "Encryption at rest").

An agent recorded through the real ``openai`` SDK against the local leaky server of
``tests/test_security.py`` (its planted secrets, tool calls, an exception, a note, a checkpointed
git repository with a modified tracked file and an untracked ``.env``), into a session encrypted for
an age recipient. Every file written under the store is searched for the planted secrets *and* for
plain content (the prompt, the answer, file contents, the command line), raw and in every encoding
the canary searches: nothing may be found. Without the identity, ``verify`` still checks the chain
and every blob, and finds tampering; reading is a clear error naming the session. With the
identity, the session replays and its checkpoint restores.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner
from pyrage import x25519

import forkpoint
from forkpoint import redact, verify
from forkpoint.checkpoint import restore, validate
from forkpoint.cli import main
from forkpoint.errors import IdentityError, UsageError
from forkpoint.log import IDENTITY_ENV, LOG_NAME, Session, SessionWriter, encryption_table, read_header
from forkpoint.redact import load_rules
from forkpoint.signing import SIGNATURE_NAME, SIGNER
from tests.cliutil import forkpoint_cli, with_this_path
from tests.gitutil import git, make_repo
from tests.modelserver import LocalServer
from tests.test_security import CONFIG, SECRETS, _agent, _leaky_chat, _repo, leaks

#: Plain content the run sees and sends: with encryption none of it may be on disk either.
PLAIN = {
    "system_prompt": "You are a careful agent.",
    "user_prompt": "Deploy with AWS key",
    "answer": " to post",  # the model's answer "use <slack token> to post", around the placeholder
    "tool_result_key": "password_len",
    "note": "rotated temp key",
    "notes_file": "nothing secret here",
    "dotenv_plain": "DEBUG=true",
    "tracked_change": "print('PLAINTEXT-TRACKED-CHANGE-7731')",
    "argv": "--flag-PLAINTEXT-ARGV-5519",
    "tool_name": "mysql://root:",
}


@pytest.fixture
def leaky(server: LocalServer) -> str:
    """The local server answering as test_security's leaky provider."""
    server.route("*/chat/completions", _leaky_chat)
    return server.openai_base_url


@pytest.fixture
def keys(tmp_path: Path) -> tuple[str, Path, Path]:
    """(recipient, identity file of it, identity file of someone else)."""
    mine, other = x25519.Identity.generate(), x25519.Identity.generate()
    ident = tmp_path / "me.key"
    ident.write_text(f"# created: for the test\n{mine}\n")
    wrong = tmp_path / "other.key"
    wrong.write_text(f"{other}\n")
    return str(mine.to_public()), ident, wrong


def _record_encrypted(tmp_path: Path, base_url: str, recipient: str) -> tuple[Path, Path, redact.Rules]:
    (tmp_path / "forkpoint.toml").write_text(CONFIG)
    rules = load_rules(tmp_path)
    repo = _repo(tmp_path)
    (repo / "app.py").write_text(PLAIN["tracked_change"] + "\n")  # a modified tracked file: git objects
    store = tmp_path / "store"
    with redact.use_rules(rules):
        with forkpoint.record(
            store=store,
            workspace=repo,
            argv=["agent.py", PLAIN["argv"], f"--groq-key={SECRETS['argv_key']}"],
            encrypt_to=[recipient],
        ) as rec:
            out = _agent(base_url)
    assert SECRETS["slack_token"] in out[0] and out[1] == "ConnectionError"  # the run saw everything
    return rec.session_path, repo, rules


def test_nothing_recorded_is_on_disk_in_the_clear(
    tmp_path: Path, leaky: str, keys: tuple[str, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    recipient, ident, wrong = keys
    monkeypatch.delenv(IDENTITY_ENV, raising=False)
    path, repo, rules = _record_encrypted(tmp_path, leaky, recipient)
    store = tmp_path / "store"

    # Not one planted secret, nor any plain content, in any form, in any file under the store.
    assert leaks(store, {**SECRETS, **PLAIN}) == []
    assert not any((path / "git-objects").rglob("*")), "git objects must be sealed, not loose"
    # The header keeps the envelope only.
    head = (path / LOG_NAME).read_bytes().split(b"\n", 1)[0]
    assert b'"argv"' not in head and b'"cwd"' not in head and b'"$enc"' in head

    # verify without the identity: the chain, the lines and every blob file are checked.
    v = verify(path)
    assert v.ok and v.complete, v.problems
    assert v.blobs > 0 and any("encrypted" in n and "no identity" in n for n in v.notes), v.notes

    # Reading without the identity, or with someone else's: a clear error naming the session.
    with pytest.raises(IdentityError, match=f"session {path.name} is encrypted: set {IDENTITY_ENV}"):
        Session.load(path)
    monkeypatch.setenv(IDENTITY_ENV, str(wrong))
    with pytest.raises(IdentityError, match=f"session {path.name}: the identity in .* is not one of its"):
        Session.load(path)
    monkeypatch.delenv(IDENTITY_ENV)
    r = CliRunner().invoke(main, ["show", str(path)])
    assert r.exit_code == 1 and f"session {path.name} is encrypted" in r.output, r.output
    assert "Traceback" not in r.output

    # With the identity (--identity on the command line, or the variable): readable and replayable.
    r = CliRunner().invoke(main, ["show", str(path), "--identity", str(ident), "--json"])
    assert r.exit_code == 0, r.output
    assert PLAIN["system_prompt"] in r.output
    monkeypatch.setenv(IDENTITY_ENV, str(ident))
    s = Session.load(path)
    assert s.header["argv"][1] == PLAIN["argv"]
    kinds = [e["type"] for e in s.events]
    assert kinds.count("model_call") == 2 and kinds.count("tool_call") == 2 and kinds.count("checkpoint") >= 2
    assert verify(path).ok and not any("no identity" in n for n in verify(path).notes)
    with redact.use_rules(rules), forkpoint.replay(path) as rp:
        replayed = _agent(leaky)
    report = rp.report()
    assert report["divergence"] is None and report["matched"] == report["recorded"] == 4, report
    assert replayed[1] == "ConnectionError"

    # The checkpoint restores from the sealed blobs and git objects, and validates.
    cp = s.by_type("checkpoint")[-1]
    into = restore(s, cp["seq"], tmp_path / "restored")
    assert (into / "app.py").read_text() == PLAIN["tracked_change"] + "\n"
    assert "DEBUG=true" in (into / ".env").read_text()
    failed = [c for c in validate(into) if not c.ok]
    assert not failed, failed


def test_verify_without_identity_finds_tampering(
    tmp_path: Path, keys: tuple[str, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    recipient, _, _ = keys
    monkeypatch.delenv(IDENTITY_ENV, raising=False)
    w = SessionWriter.create(tmp_path / "s", {"argv": ["x"], "encryption": encryption_table([recipient])})
    w.append({"type": "note", "text": "hello " * 400})  # a blob
    w.append({"type": "end", "exit_code": 0})
    w.close()
    path = w.path
    assert verify(path).ok
    cli = CliRunner().invoke(main, ["verify", str(path)])  # (which loads the session too, where it can)
    assert cli.exit_code == 0 and "verify ok: 2 events" in cli.stdout, cli.output
    blob = next(p for p in (path / "blobs").rglob("*") if p.is_file())
    good = blob.read_bytes()
    blob.write_bytes(good[:-1] + bytes([good[-1] ^ 1]))
    v = verify(path)
    assert not v.ok and "does not match its hash" in v.problems[0], v.problems
    blob.write_bytes(good)
    log = path / LOG_NAME
    lines = log.read_bytes().split(b"\n")
    i = lines[1].index(b'"$enc":"') + 20
    lines[1] = lines[1][:i] + (b"A" if lines[1][i : i + 1] != b"A" else b"B") + lines[1][i + 1 :]
    log.write_bytes(b"\n".join(lines))
    v = verify(path)
    assert not v.ok and "was modified" in v.problems[0], v.problems


def test_values_json_cannot_hold_are_sealed_and_opened(
    tmp_path: Path, keys: tuple[str, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lone surrogate as a value and as a key, an integer beyond 64 bits: sealed in their own
    forms and opened as they were."""
    recipient, ident, _ = keys
    monkeypatch.setenv(IDENTITY_ENV, str(ident))
    data = {"name": "caf\udce9.txt", "sizes": {"caf\udce9.txt": 2**70, "ok": 1}}
    w = SessionWriter.create(tmp_path / "s", {"argv": ["x"], "encryption": encryption_table([recipient])})
    w.append({"type": "tool_call", "tool": "ls", "args": {"dir": "caf\udce9"}, "result": data})
    # (a model call's headers go to a JSON blob of their own in an encrypted session: this one cannot)
    headers = [["x-file", "caf\udce9" + "x" * 300]]
    request = {"method": "POST", "url": "http://127.0.0.1:9/v1/x", "headers": headers}
    w.append({"type": "model_call", "request": {**request, "body_kind": "json", "body": {}}})
    w.close()
    loaded = Session.load(w.path).events
    assert loaded[0]["result"] == data and loaded[1]["request"]["headers"] == headers
    assert verify(w.path).ok


def test_checkpoints_that_refer_to_earlier_ones_are_sealed_and_restore(
    tmp_path: Path, keys: tuple[str, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unchanged fields (``$same``) and manifests stored as their changes to an earlier one are
    inside the sealed lines, and read back whole with the identity."""
    recipient, ident, _ = keys
    monkeypatch.delenv(IDENTITY_ENV, raising=False)
    repo = _repo(tmp_path)
    for i in range(20):
        (repo / f"note_{i:02d}.md").write_text(f"{PLAIN['system_prompt']} {i}\n")
    with forkpoint.record(store=tmp_path / "store", workspace=repo, encrypt_to=[recipient]) as rec:
        rec.checkpoint()
        rec.checkpoint()
        (repo / "note_00.md").write_text("edited\n")
        rec.checkpoint()
    assert leaks(tmp_path / "store", PLAIN) == []
    assert verify(rec.session_path).ok
    monkeypatch.setenv(IDENTITY_ENV, str(ident))
    v = verify(rec.session_path)
    assert v.ok and v.checkpoints == 3 and not any("no identity" in n for n in v.notes), (v.problems, v.notes)
    cps = Session.load(rec.session_path).by_type("checkpoint")
    assert cps[0]["workspace"] == cps[1]["workspace"] and cps[0]["source"] == cps[2]["source"]
    assert "manifest_changes" in cps[2]["workspace"]
    into = restore(Session.load(rec.session_path), cps[2]["seq"], tmp_path / "restored")
    assert (into / "note_00.md").read_text() == "edited\n"
    assert (into / "note_19.md").read_text() == f"{PLAIN['system_prompt']} 19\n"
    assert all(c.ok for c in validate(into))


def test_a_checkpoints_many_tags_are_a_blob_not_in_every_sealed_line(
    tmp_path: Path, keys: tuple[str, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A repository with 500 tags: an encrypted session (its lines are not packed) held them all
    inline in the first checkpoint's sealed line (~40 KB) and again in the next one after a new tag.
    They are a ``$json`` blob of each state, sealed like the others, and read back whole."""
    recipient, ident, _ = keys
    monkeypatch.delenv(IDENTITY_ENV, raising=False)
    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    head = git(repo, "rev-parse", "HEAD")
    tags = {f"refs/tags/v{i}": head for i in range(500)}
    (repo / ".git" / "packed-refs").write_text("".join(f"{oid} {name}\n" for name, oid in tags.items()))
    with forkpoint.record(store=tmp_path / "store", workspace=repo, encrypt_to=[recipient]) as rec:
        rec.checkpoint()
        git(repo, "tag", "v-new")
        rec.checkpoint()
    lines = (rec.session_path / LOG_NAME).read_bytes().splitlines()
    assert max(len(line) for line in lines) < 8000, [len(line) for line in lines]
    monkeypatch.setenv(IDENTITY_ENV, str(ident))
    cps = Session.load(rec.session_path).by_type("checkpoint")
    assert cps[0]["source"]["refs"] == tags
    assert cps[1]["source"]["refs"] == {**tags, "refs/tags/v-new": head}
    into = restore(Session.load(rec.session_path), cps[1]["seq"], tmp_path / "restored")
    assert len(git(into, "tag").split()) == 501
    assert all(c.ok for c in validate(into))


@pytest.mark.slow
def test_recipients_from_files_config_and_the_command_line(
    tmp_path: Path, server: LocalServer, keys: tuple[str, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    recipient, ident, _ = keys
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(IDENTITY_ENV, raising=False)
    (tmp_path / "team.txt").write_text(f"# the team\n\n{recipient}\n")
    (tmp_path / "forkpoint.toml").write_text('[store]\nencrypt_to = ["team.txt"]\n')  # beside the file
    agent = tmp_path / "agent.py"
    agent.write_text(
        textwrap.dedent(
            f"""
            import openai
            c = openai.OpenAI(base_url={server.openai_base_url!r}, api_key="sk-test", max_retries=0)
            r = c.chat.completions.create(model="m", messages=[{{"role": "user", "content": "PLAIN-PROMPT-4417"}}])
            print(r.choices[0].message.content)
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    # [store] encrypt_to of the configuration applies to `forkpoint record`.
    run = forkpoint_cli(
        ["record", "--store", "s", "--no-workspace", "--", sys.executable, "agent.py"],
        tmp_path,
        env,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    # What the recording lacks comes from its processes' own tallies: no identity is needed.
    assert "skipped" not in run.stderr and "WARNING" not in run.stderr, run.stderr
    path = next((tmp_path / "s").glob("2*"))
    assert leaks(tmp_path / "s", {"prompt": "PLAIN-PROMPT-4417"}) == []
    assert read_header(path / LOG_NAME)["encryption"] == {"scheme": "age", "recipients": [recipient]}
    # replay needs the identity; with --identity it reproduces (the replayed program reads it too).
    run = forkpoint_cli(["replay", "--store", "s", "last"], tmp_path, env, timeout=60)
    assert run.returncode == 1 and "is encrypted: set FORKPOINT_IDENTITY" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr
    run = forkpoint_cli(
        ["replay", "--store", "s", "--identity", str(ident), "last"], tmp_path, env, timeout=60
    )
    assert run.returncode == 0, run.stderr
    # A bad recipient on the command line is a usage error naming it, before anything is recorded.
    shutil.rmtree(tmp_path / "s")
    r = CliRunner().invoke(main, ["record", "--store", "s", "--encrypt-to", "age1nope", "--", "true"])
    assert r.exit_code == 2 and "'age1nope' is not an age recipient" in r.output, r.output
    assert not (tmp_path / "s").exists() or not any((tmp_path / "s").glob("2*"))
    with pytest.raises(UsageError, match="neither an age recipient"):
        with forkpoint.record(store=tmp_path / "s2", encrypt_to=["no-such-file"]):
            pass


def record_encrypted(cwd: Path, recipient: str) -> subprocess.CompletedProcess[str]:
    """``forkpoint record`` of ``cwd/agent.py`` into an encrypted session of ``cwd/s``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cmd = [
        "record",
        "--store",
        "s",
        "--no-workspace",
        "--encrypt-to",
        recipient,
        "--",
        sys.executable,
        "agent.py",
    ]
    return forkpoint_cli(cmd, cwd, env, timeout=60)


@pytest.mark.slow
def test_forkpoint_record_says_when_it_could_not_check_an_encrypted_session(
    tmp_path: Path, server: LocalServer, keys: tuple[str, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A forked worker that records a tool call and leaves through os._exit hands no tally over:
    only reading the session back would tell what it lacks, and that needs the identity. Said."""
    recipient, _, _ = keys
    monkeypatch.delenv(IDENTITY_ENV, raising=False)
    (tmp_path / "agent.py").write_text(
        textwrap.dedent(
            """
            import os
            import forkpoint

            @forkpoint.tool
            def save(text):
                return len(text)

            if os.fork() == 0:
                save("from a worker")
                os._exit(0)
            os.wait()
            """
        )
    )
    run = record_encrypted(tmp_path, recipient)
    assert run.returncode == 0 and "1 tool call" in run.stderr, run.stderr
    assert "the checks of what the recording lacks were skipped" in run.stderr  # said, not silent


@pytest.mark.slow
def test_a_call_written_as_the_program_exits_is_in_its_tally(
    tmp_path: Path, server: LocalServer, keys: tuple[str, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream the program never finished is written as it exits: its process hands its tally
    over after that, so the checks need neither the identity nor a reading back."""
    recipient, _, _ = keys
    monkeypatch.delenv(IDENTITY_ENV, raising=False)
    server.chat_script = [[("get_weather", {"city": "Oslo"})]]
    (tmp_path / "agent.py").write_text(
        textwrap.dedent(
            f"""
            import openai
            c = openai.OpenAI(base_url={server.openai_base_url!r}, api_key="sk-test", max_retries=0)
            stream = c.chat.completions.create(model="m", messages=[{{"role": "user", "content": "x"}}], stream=True)
            next(iter(stream))  # and never read to its end
            """
        )
    )
    run = record_encrypted(tmp_path, recipient)
    said = " ".join(run.stderr.split())
    assert run.returncode == 0 and "(1 model call, 0 tool calls)" in said, run.stderr
    assert "skipped" not in said and "never recorded: get_weather (1 call)." in said, said


def test_a_live_export_of_an_encrypted_session_needs_the_identity_first(
    tmp_path: Path, keys: tuple[str, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    recipient, _, _ = keys
    monkeypatch.delenv(IDENTITY_ENV, raising=False)
    with pytest.raises(UsageError, match="this session is encrypted: set FORKPOINT_IDENTITY"):
        with forkpoint.record(
            store=tmp_path / "s", encrypt_to=[recipient], otlp="http://127.0.0.1:9/v1/traces"
        ):
            pass
    assert not list((tmp_path / "s").glob("2*"))  # refused before a session existed


def test_a_live_export_with_an_identity_that_cannot_open_the_session_is_refused_first(
    tmp_path: Path, keys: tuple[str, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a missing identity was refused up front: another recipient's identity, or a file that
    is not there, stopped the run after its session was created, left in the store as a header
    with no end (which rm and prune keep)."""
    recipient, _, wrong = keys
    for identity, said in (
        (wrong, "is not one of its recipients"),
        (tmp_path / "none.key", "cannot be read"),
    ):
        monkeypatch.setenv(IDENTITY_ENV, str(identity))
        with pytest.raises(UsageError, match=f"this session is encrypted: .*{said}"):
            with forkpoint.record(
                store=tmp_path / "s", encrypt_to=[recipient], otlp="http://127.0.0.1:9/v1/traces"
            ):
                pass
        assert not list((tmp_path / "s").glob("2*"))


def test_an_in_process_recording_says_what_it_lacks_without_an_identity(
    tmp_path: Path,
    keys: tuple[str, Path, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """forkpoint.record() tallies what the recording lacks as it records (record.Lacks): an encrypted
    session needs no identity for the end-of-recording warnings, which `forkpoint record -- CMD`
    has to read back (docs/security.md)."""
    recipient, _, _ = keys
    monkeypatch.delenv("FORKPOINT_IDENTITY", raising=False)

    class Opaque:  # no stored form: the call is written without its result
        pass

    @forkpoint.tool
    def make() -> Opaque:
        return Opaque()

    with forkpoint.record(store=tmp_path / "s", encrypt_to=[recipient]):
        make()
    said = " ".join(capsys.readouterr().err.split())
    assert "WARNING: 1 tool call could not be recorded" in said and "tool make" in said
    assert "skipped" not in said


def test_a_program_leaving_through_os_exit_leaves_no_tracked_file_in_the_clear(
    tmp_path: Path, keys: tuple[str, Path, Path]
) -> None:
    """The git objects of an encrypted session's checkpoints are written into a scratch folder (in
    /dev/shm) before they are sealed; a program that ended with ``os._exit`` ran no exit handler, and
    its folder stayed behind with the tracked files' new content in the clear."""
    import tempfile
    import zlib

    recipient, _, _ = keys
    repo = make_repo(tmp_path / "repo", {"app.py": "print('hello')\n"})
    marker = f"PLAINTEXT-TRACKED-{os.urandom(6).hex()}"
    (tmp_path / "agent.py").write_text(
        textwrap.dedent(
            f"""
            import os
            import forkpoint

            with open("app.py", "w") as f:
                f.write("print({marker!r})")
            forkpoint.checkpoint()
            os._exit(0)
            """
        )
    )
    cmd = ["record", "--store", str(tmp_path / "s"), "--encrypt-to", recipient, "--"]
    run = forkpoint_cli(
        [*cmd, sys.executable, str(tmp_path / "agent.py")], repo, with_this_path(), timeout=60
    )
    assert run.returncode == 0 and "could not be taken" not in run.stderr, run.stderr

    def in_the_clear(folder: Path) -> list[Path]:
        found = []
        for obj in folder.glob("forkpoint-objects-*/*/*"):
            try:
                if marker.encode() in zlib.decompress(obj.read_bytes()):
                    found.append(obj)
            except (OSError, zlib.error):
                pass  # (another run's folder, going away)
        return found

    assert in_the_clear(Path("/dev/shm")) + in_the_clear(Path(tempfile.gettempdir())) == []


def test_import_into_a_store_that_encrypts_says_what_it_says_unencrypted(
    tmp_path: Path, keys: tuple[str, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`import` read the format, what the file lacks and what was inferred back from the new session's
    header, which a store with `[store] encrypt_to` seals: it said "imported None file" and nothing
    more. It says what the import made of the file, as for a store that does not encrypt."""
    recipient, _, _ = keys
    monkeypatch.delenv(IDENTITY_ENV, raising=False)
    traj = tmp_path / "run.traj"
    step = {"action": "ls", "observation": "a.py", "response": "ls", "thought": ""}
    traj.write_text(f'{{"trajectory": [{json.dumps(step)}], "history": []}}')
    (tmp_path / "enc").mkdir()
    (tmp_path / "enc" / "forkpoint.toml").write_text(f'[store]\nencrypt_to = ["{recipient}"]\n')
    (tmp_path / "plain").mkdir()
    said, sessions = {}, {}
    for kind in ("enc", "plain"):
        monkeypatch.chdir(tmp_path / kind)
        result = CliRunner().invoke(main, ["import", str(traj), "--store", "s"])
        assert result.exit_code == 0, result.output
        sessions[kind] = tmp_path / kind / result.stdout.strip()
        said[kind] = result.stderr.replace(sessions[kind].name, "ID")
    assert read_header(sessions["enc"] / LOG_NAME)["encryption"]["recipients"] == [recipient]
    assert "imported_from" not in read_header(sessions["enc"] / LOG_NAME)  # (sealed)
    assert said["enc"] == said["plain"]
    assert f"imported swe-agent file {traj} as session ID (1 model call, 1 tool call) in s" in said["enc"]
    assert (
        "  not in the file: " in said["enc"] and "  inferred: " in said["enc"] and "None" not in said["enc"]
    )


def test_verify_without_identity_says_an_encrypted_session_lost_its_signature(
    tmp_path: Path, keys: tuple[str, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key that signs a session is in its readable envelope: without the identity, verify still
    tells a session whose signature.json was removed from one older than signing."""
    recipient, _, _ = keys
    monkeypatch.delenv(IDENTITY_ENV, raising=False)
    with forkpoint.record(store=tmp_path / "store", encrypt_to=[recipient]) as rec:
        pass
    path = rec.session_path
    assert read_header(path / LOG_NAME)[SIGNER].startswith("ed25519:")
    (path / SIGNATURE_NAME).unlink()
    cli = CliRunner().invoke(main, ["verify", str(path)])
    assert cli.exit_code == 1 and "signature: not signed any more" in cli.output, cli.output
