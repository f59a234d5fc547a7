"""Signed sessions and trusted replay (docs/security.md, "Signed sessions"): a session is signed
when it closes; ``replay`` and ``check`` run a recorded command only when a trusted key signed the
session, the user named the command, or passed ``--trust``; ``verify`` says who signed and checks
the store's index entry; ``keys`` shows and trusts keys."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

import forkpoint
from forkpoint.errors import SessionError, UntrustedSession
from forkpoint.log import LOG_NAME, Session
from forkpoint.log.codec import line_hash
from forkpoint.log.packing import Unpacker
from forkpoint.orchestrate import replay_run
from forkpoint.signing import KEY_NAME, OWN_NAME, SIGNATURE_NAME, SIGNER, signature
from forkpoint.store import list_sessions, resolve
from tests.cliutil import QUOTE_AGENT, forkpoint_cli

AGENT = QUOTE_AGENT

# What a forged header runs instead: it leaves a mark, so a test sees whether it ran.
EVIL = """
import sys
from pathlib import Path

Path(sys.argv[1]).write_text("the forged command ran")
"""


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return forkpoint_cli(args, cwd, env, timeout=60)


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "FORKPOINT_STORE" and not k.startswith("FORKPOINT_M")}


def record(tmp_path: Path, env: dict[str, str], name: str = "quote") -> Path:
    (tmp_path / "agent.py").write_text(AGENT)
    store = tmp_path / "store"
    rec = run(
        ["record", "--store", str(store), "--name", name, "--", sys.executable, "agent.py"], tmp_path, env
    )
    assert rec.returncode == 0, rec.stderr
    return [r.path for r in list_sessions(store).rows if r.header.get("name") == name][-1]


def forge_argv(session: Path, argv: list[str]) -> None:
    """What anyone who can edit a session can do: change the header's command and recompute the
    whole hash chain, so that the log verifies again."""
    forge_header(session, argv=argv)


def forge_header(session: Path, **fields: Any) -> None:
    """:func:`forge_argv` for any header ``fields``."""
    forge_lines(session, lambda lines: lines[0].update(fields))


def forge_lines(session: Path, edit: Callable[[list[dict[str, Any]]], None]) -> None:
    """:func:`forge_argv` for any ``edit`` of the log's lines (packed lines opened first)."""
    unpacker = Unpacker()
    raws = (session / LOG_NAME).read_bytes().splitlines()
    lines = [orjson.loads(raws[0]), *(unpacker.open(orjson.loads(raw), "")[0] for raw in raws[1:])]
    edit(lines)
    prev = ""
    for i, obj in enumerate(lines):
        if i:
            obj["prev"] = prev
        obj["hash"] = line_hash(obj)
        prev = obj["hash"]
    (session / LOG_NAME).write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in lines))


@pytest.mark.slow
def test_a_recorded_session_is_signed_with_an_owner_only_key_and_replays_as_today(
    tmp_path: Path, env: dict[str, str]
) -> None:
    session = record(tmp_path, env)
    keys = Path(os.environ["FORKPOINT_KEYS_DIR"])
    assert stat.S_IMODE(os.stat(keys / KEY_NAME).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(keys).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(session / SIGNATURE_NAME).st_mode) == 0o600
    shown = run(["keys"], tmp_path, env)
    mine = shown.stdout.split("your public key: ")[1].split()[0]
    assert mine.startswith("ed25519:")
    v = run(["verify", str(session)], tmp_path, env)
    assert v.returncode == 0, v.stderr
    assert f"signature: signed by this user (own key) ({mine}); trusted" in v.stdout
    rep = run(["replay", str(session)], tmp_path, env)  # no --trust needed: the own key is trusted
    assert rep.returncode == 0, rep.stderr
    assert rep.stdout == "101\n"


@pytest.mark.slow
@pytest.mark.parametrize("signature", ["kept", "removed"])
def test_a_forged_command_is_shown_and_refused_unless_trusted_or_named(
    tmp_path: Path, env: dict[str, str], signature: str
) -> None:
    session = record(tmp_path, env)
    (tmp_path / "evil.py").write_text(EVIL)
    mark = tmp_path / "mark"
    forge_argv(session, [sys.executable, "evil.py", str(mark)])
    if signature == "removed":
        (session / SIGNATURE_NAME).unlink()

    v = run(["verify", str(session)], tmp_path, env)
    if signature == "kept":  # the chain verifies, the signature does not
        assert v.returncode == 1 and "the log changed after it was signed" in flat(v.stderr)
    else:  # the header still names the key that signed it
        assert v.returncode == 1 and "signature: not signed any more: its header says" in flat(v.stderr)

    refused = run(["replay", str(session)], tmp_path, env)
    assert refused.returncode == 1
    said = flat(refused.stderr)
    assert f"{sys.executable} evil.py {mark}" in said  # the command is shown
    assert "will not run the command it recorded" in said and "--trust" in said
    assert not mark.exists()

    checked = run(["check", str(session)], tmp_path, env)
    assert checked.returncode != 0 and not mark.exists()

    named = run(["replay", str(session), "--", sys.executable, "agent.py"], tmp_path, env)
    assert named.returncode == 0, named.stderr
    assert named.stdout == "101\n" and not mark.exists()

    trusted = run(["replay", str(session), "--trust"], tmp_path, env)
    assert mark.read_text() == "the forged command ran", trusted.stderr


@pytest.mark.slow
def test_a_teammates_key_is_trusted_by_name(tmp_path: Path, env: dict[str, str]) -> None:
    alice = {**env, "FORKPOINT_KEYS_DIR": str(tmp_path / "alice-keys")}
    session = record(tmp_path, alice)
    her_key = run(["keys"], tmp_path, alice).stdout.split("your public key: ")[1].split()[0]

    refused = run(["replay", str(session)], tmp_path, env)
    assert refused.returncode == 1
    assert f"signed by {her_key}, a key this user does not trust" in flat(refused.stderr)

    bad = run(["keys", "trust", "ed25519:bm90IGEga2V5", "--name", "alice"], tmp_path, env)
    assert bad.returncode == 2 and "is not an Ed25519 public key" in flat(bad.stderr)
    ok = run(["keys", "trust", her_key, "--name", "Alice Example"], tmp_path, env)
    assert ok.returncode == 0, ok.stderr
    assert f"trusted: {her_key} Alice Example" in run(["keys"], tmp_path, env).stdout
    v = run(["verify", str(session)], tmp_path, env)
    assert f"signature: signed by Alice Example ({her_key}); trusted" in v.stdout
    rep = run(["replay", str(session)], tmp_path, env)
    assert rep.returncode == 0 and rep.stdout == "101\n", rep.stderr
    # There was no way back: a key that leaked stayed trusted. Untrusted by name, her sessions are refused again.
    gone = run(["keys", "untrust", "Alice Example"], tmp_path, env)
    assert gone.returncode == 0 and f"no longer trusted: {her_key}" in gone.stdout, gone.stderr
    assert her_key not in run(["keys"], tmp_path, env).stdout
    again = run(["replay", str(session)], tmp_path, env)
    assert again.returncode == 1 and "a key this user does not trust" in flat(again.stderr)
    mine = run(["keys", "untrust", OWN_NAME], tmp_path, env)
    assert mine.returncode == 2 and "your own key cannot be untrusted" in flat(mine.stderr)


def test_no_teammate_passes_for_your_own_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A key trusted under the name forkpoint gives your own key made verify say that a teammate's
    session was signed by "this user (own key)", and could not be untrusted again, by key or name."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from forkpoint.errors import SigningError
    from forkpoint.signing import TRUSTED_NAME, key_id, own_key, trust, trusted_keys, untrust

    monkeypatch.setenv("FORKPOINT_KEYS_DIR", str(tmp_path / "keys"))
    mine = key_id(own_key().public_key())
    theirs = key_id(Ed25519PrivateKey.generate().public_key())
    with pytest.raises(SigningError, match="is the name of your own key"):
        trust(theirs, f" {OWN_NAME} ")
    assert theirs not in trusted_keys()
    # A list written before that was refused: the key is taken off by its id; the own key never is.
    listed = tmp_path / "keys" / TRUSTED_NAME
    listed.write_text(f"{theirs} {OWN_NAME}\n")
    listed.chmod(0o600)
    assert untrust(theirs) == [theirs] and theirs not in trusted_keys()
    with pytest.raises(SigningError, match="your own key cannot be untrusted"):
        untrust(mine)


def test_trusting_your_own_key_is_refused_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`forkpoint keys trust MY_KEY --name me` said "trusted … as me" and wrote a line that `keys`
    never listed (the own key shows as yours) and `keys untrust me` refused to take off ("your own
    key cannot be untrusted"): a line in the trusted list nothing could see or remove."""
    from forkpoint.errors import SigningError
    from forkpoint.signing import TRUSTED_NAME, key_id, own_key, trust, untrust

    monkeypatch.setenv("FORKPOINT_KEYS_DIR", str(tmp_path / "keys"))
    mine = key_id(own_key().public_key())
    with pytest.raises(SigningError, match="is your own key: it is always trusted"):
        trust(mine, "me")
    assert not (tmp_path / "keys" / TRUSTED_NAME).exists()
    with pytest.raises(SigningError, match="no trusted key is 'me'"):
        untrust("me")


@pytest.mark.slow
def test_a_forged_index_entry_is_detected(tmp_path: Path, env: dict[str, str]) -> None:
    """A name resolves through the store's index; an entry that renames another session must not
    change which session ``replay nightly`` runs."""
    record(tmp_path, env, name="nightly")
    other = record(tmp_path, env, name="other")
    entry_file = next((tmp_path / "store" / "index" / "entries").glob(f"{other.name}*"))
    entry = json.loads(entry_file.read_text())
    entry["header"]["name"] = "nightly"
    entry_file.write_text(json.dumps(entry))

    resolved = run(["replay", "nightly", "--store", str(tmp_path / "store")], tmp_path, env)
    assert resolved.returncode == 1
    assert f"does not describe session {other.name} as its log does (its name is 'nightly'" in flat(
        resolved.stderr
    )
    v = run(["verify", str(other)], tmp_path, env)
    assert v.returncode == 1
    assert f"the index entry of session {other.name} does not describe its log" in flat(v.stderr)


def test_a_forged_session_id_names_no_file_outside_the_store(tmp_path: Path, env: dict[str, str]) -> None:
    """A header whose session_id was made ``/../../…/x`` (the chain computed again: no key needed)
    verified, and ``forkpoint ls`` wrote the index entry ``x.json`` outside the store."""
    session = record(tmp_path, env, name="one")
    outside = tmp_path / "outside"
    outside.mkdir()
    forge_header(session, session_id="/" + "../" * 12 + str(outside / "EVIL").lstrip("/"))
    shutil.rmtree(tmp_path / "store" / "index", ignore_errors=True)

    listed = run(["ls", "--store", str(tmp_path / "store")], tmp_path, env)
    assert not list(outside.iterdir())
    assert "is not a session id" in flat(listed.stdout + listed.stderr), listed.stdout + listed.stderr
    v = run(["verify", str(session)], tmp_path, env)
    assert v.returncode == 1 and "the header's session_id" in flat(v.stdout + v.stderr)


@pytest.mark.slow
def test_a_changed_log_is_blamed_on_the_log_not_the_index(tmp_path: Path, env: dict[str, str]) -> None:
    """An event's time changed in place (the log's size kept) was reported as "the index ... was
    changed or damaged; forkpoint ls --reindex rebuilds it", which blamed the index: the log was.
    Every command refuses such a session by every name, rm's too, so the refusal names the way out
    (reindexed, the log is read as it now is, and rm removes it)."""
    session = record(tmp_path, env, name="nightly")
    log = session / LOG_NAME
    data = log.read_bytes()
    first_event = data.index(b"\n") + 1
    at = data.index(b'"ts":"', first_event) + len(b'"ts":"')
    year = data[at : at + 4]
    log.write_bytes(data[:at] + (b"1999" if year != b"1999" else b"2000") + data[at + 4 :])
    for cmd in (["show", "nightly"], ["replay", "nightly", "--trust"]):
        r = run([*cmd, "--store", str(tmp_path / "store")], tmp_path, env)
        said = flat(r.stderr)
        assert r.returncode == 1, said
        assert (
            f"session {session.name} in" in said
            and "has been changed or damaged since it was recorded" in said
        )
        assert "event seq 1" in said and "the index of" not in said, said
        assert (
            f"forkpoint ls --reindex (the index then takes the log as it is), then forkpoint rm {session.name}"
            in said
        )
    store = ["--store", str(tmp_path / "store")]
    assert run(["ls", "--reindex", *store], tmp_path, env).returncode == 0
    assert run(["rm", "nightly", *store], tmp_path, env).returncode == 0
    assert not session.exists()


# ----------------------------------------------------------------------------- in this process


def test_replay_refuses_a_forged_recorded_command_before_anything_runs(tmp_path: Path) -> None:
    store = tmp_path / "store"
    mark = tmp_path / "mark"
    with forkpoint.record(store=store, argv=[sys.executable, "-c", "print(1)"]):
        pass
    path = resolve("last", store)
    sid = Session.load(path).id
    assert signature(path, sid).trusted
    evil = [sys.executable, "-c", f"open({str(mark)!r}, 'w')"]
    forge_argv(path, evil)
    forged = signature(path, sid)
    assert forged.state == "bad" and not forged.trusted
    assert "the log changed after it was signed" in str(forged.problem)
    with pytest.raises(UntrustedSession, match="will not run the command it recorded") as refused:
        replay_run(Session.load(path), quiet=True)
    assert str(mark) in str(refused.value)
    (path / SIGNATURE_NAME).unlink()
    assert signature(path, sid).state == "lost"
    with pytest.raises(UntrustedSession, match=": not signed any more: .*, so forkpoint will not run"):
        replay_run(Session.load(path), quiet=True)
    for garbage in ('{"signer": 5, "signature": [1]}', "[]"):
        (path / SIGNATURE_NAME).write_text(garbage)
        said = signature(path, sid)
        assert said.state == "bad" and said.problem == f"{path / SIGNATURE_NAME}: not a signature " + (
            "(an object with a key and a signature, as text)"
        ), said.problem
    (path / SIGNATURE_NAME).unlink()
    forge_lines(path, lambda lines: lines[0].pop(SIGNER))  # (the whole log rewritten: as if older)
    assert signature(path, sid).state == "unsigned"
    with pytest.raises(UntrustedSession, match=": not signed, so forkpoint will not run"):
        replay_run(Session.load(path), quiet=True)
    assert not mark.exists()


def test_a_name_resolved_through_a_forged_index_entry_is_refused(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with forkpoint.record("nightly", store=store):
        pass
    with forkpoint.record("other", store=store):
        pass
    other = resolve("other", store)
    assert resolve("nightly", store) != other
    entry_file = next((store / "index" / "entries").glob(f"{other.name}*"))
    entry = json.loads(entry_file.read_text())
    entry["header"]["name"] = "nightly"
    entry_file.write_text(json.dumps(entry))
    with pytest.raises(SessionError, match="its name is 'nightly', the log's is 'other'"):
        resolve("nightly", store)


def test_the_signing_key_file_is_standard_pkcs8_both_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # forkpoint reads and writes its key without cryptography's (slow to import) PEM module: the
    # file it writes must load with that module, and any PEM it writes must load in forkpoint.
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.asymmetric.rsa import generate_private_key

    from forkpoint.errors import SigningError
    from forkpoint.signing import key_id, own_key

    monkeypatch.setenv("FORKPOINT_KEYS_DIR", str(tmp_path / "keys"))
    mine = own_key()
    loaded = serialization.load_pem_private_key((tmp_path / "keys" / KEY_NAME).read_bytes(), password=None)
    assert isinstance(loaded, Ed25519PrivateKey)
    assert loaded.private_bytes_raw() == mine.private_bytes_raw()
    assert key_id(own_key().public_key()) == key_id(mine.public_key())  # read back the same

    theirs = Ed25519PrivateKey.generate()
    pem = theirs.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (tmp_path / "keys" / KEY_NAME).write_bytes(pem)
    assert own_key().private_bytes_raw() == theirs.private_bytes_raw()

    rsa = generate_private_key(public_exponent=65537, key_size=1024).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    (tmp_path / "keys" / KEY_NAME).write_bytes(rsa)
    with pytest.raises(SigningError, match=f"{KEY_NAME}: not an Ed25519 key"):
        own_key()
    (tmp_path / "keys" / KEY_NAME).write_bytes(
        b"-----BEGIN PRIVATE KEY-----\n!!\n-----END PRIVATE KEY-----\n"
    )
    with pytest.raises(SigningError, match="not a PEM private key"):
        own_key()

    # Forms the shortcut does not take still load, through cryptography's loader, as they always did.
    other = Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    lines = pem.decode().splitlines()
    for variant in (
        pem + other,  # two blocks: the first is the key
        "\n".join([lines[0], "Comment: my key", "", *lines[1:]]).encode(),  # a header
        pem.replace(b"\n", b"\xc2\xa0\n", 1),  # a non-ASCII space
    ):
        (tmp_path / "keys" / KEY_NAME).write_bytes(variant)
        assert own_key().private_bytes_raw() == theirs.private_bytes_raw(), variant

    locked = theirs.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    (tmp_path / "keys" / KEY_NAME).write_bytes(locked)
    with pytest.raises(SigningError, match="the signing key is encrypted") as exc:
        own_key()
    assert str(exc.value).count(KEY_NAME) == 1
    (tmp_path / "keys" / KEY_NAME).chmod(0o644)
    with pytest.raises(SigningError, match="readable by no one else") as exc:
        own_key()
    assert str(exc.value).count(KEY_NAME) == 1  # the path said once


def test_a_cryptography_that_cannot_load_leaves_the_session_ended_and_unsigned(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Signing loads cryptography while the program runs; a package that fails to load (a broken
    native extension) cost the session its end (the exit code 7 was lost, `verify` said "no end
    event") and the command ended in a traceback. The session ends as it should, and says it is
    not signed and why."""
    broken = tmp_path / "broken"
    (broken / "cryptography").mkdir(parents=True)
    (broken / "cryptography" / "__init__.py").write_text("raise RuntimeError('a broken native extension')\n")
    (tmp_path / "exit7.py").write_text("raise SystemExit(7)\n")
    env = {**env, "PYTHONPATH": os.pathsep.join([str(broken), *sys.path])}
    store = tmp_path / "store"
    rec = run(["record", "--store", str(store), "--", sys.executable, "exit7.py"], tmp_path, env)
    assert rec.returncode == 7, rec.stderr
    assert "Traceback" not in rec.stderr
    assert "is not signed (RuntimeError: a broken native extension)" in flat(rec.stderr)
    assert "it will fork or sweep only with --trust" in flat(rec.stderr)  # (fa5710b: they refuse it too)
    session = list_sessions(store).rows[-1].path
    assert Session.load(session).end()["exit_code"] == 7  # type: ignore[index]
    assert not (session / SIGNATURE_NAME).exists()


@pytest.mark.slow
def test_a_command_and_a_name_holding_control_characters_are_shown_escaped(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The refusal showed a forged command as it was: ``\\r`` and an erase-line sequence made a
    terminal show only its harmless tail (``python agent.py``), which a reader would then run with
    ``--trust``. ``ls`` printed a name the same way. Both are shown with their controls escaped."""
    session = record(tmp_path, env)
    mark = tmp_path / "mark"
    hidden = f"touch {mark} #\r\x1b[2K    python agent.py"
    forge_header(session, argv=["sh", "-c", hidden], name="nightly\r\x1b[2K\nx")
    refused = run(["replay", str(session)], tmp_path, env)
    assert refused.returncode == 1 and not mark.exists()
    assert f"touch {mark} #\\r\\x1b[2K    python agent.py" in refused.stderr, refused.stderr
    listed = run(["ls", "--store", str(session.parent)], tmp_path, env)
    row = listed.stdout.splitlines()[1]
    assert "nightly\\r\\x1b[2K\\nx" in row and "#\\r\\x1b[2K" in row, listed.stdout
    for said in (refused.stderr, listed.stdout):
        assert "\r" not in said and "\x1b" not in said


def test_fork_and_sweep_refuse_a_session_no_trusted_key_signed_unless_trust(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An arm is the session's checkpoint restored: `fork SESSION@SEQ -- python agent.py` runs the
    agent.py the session holds, not the user's. A teammate's (or a forged) session ran its code on
    fork and sweep without a word, where replay refuses its recorded command."""
    from click.testing import CliRunner

    from forkpoint.cli import main

    work = tmp_path / "work"
    work.mkdir()
    mark = tmp_path / "mark"
    (work / "agent.py").write_text(f"open({str(mark)!r}, 'w').write('the session s code ran')\n")
    monkeypatch.setenv("FORKPOINT_KEYS_DIR", str(tmp_path / "alice-keys"))
    with forkpoint.record(store=tmp_path / "store", workspace=work) as rec:
        seq = forkpoint.checkpoint()
    monkeypatch.setenv("FORKPOINT_KEYS_DIR", str(tmp_path / "bob-keys"))
    sid = rec.session_path.name
    arms = tmp_path / "arms"
    common = ["--store", str(tmp_path / "store"), "--into", str(arms)]
    for args in (
        ["fork", f"{sid}@{seq}", *common, "--", sys.executable, "agent.py"],
        ["sweep", sid, "--outcome", "true", *common, "--", sys.executable, "agent.py"],
    ):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 1, res.output
        said = flat(res.output)
        assert f"session {sid}: signed by ed25519:" in said and "a key this user does not trust" in said, said
        assert "will not run a command on the files it restores from it" in said and "--trust" in said, said
        assert not mark.exists() and not arms.exists()
    res = CliRunner().invoke(
        main, ["fork", f"{sid}@{seq}", "--trust", *common, "--", sys.executable, "agent.py"]
    )
    assert mark.read_text() == "the session s code ran", res.output


def test_an_edited_hash_seed_python_refuses_does_not_stop_the_replay(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """The header's ``hash_seed`` becomes the program's ``PYTHONHASHSEED``: one out of Python's range
    (an edited header's) made the replayed program die before it started ("Fatal Python error:
    PYTHONHASHSEED must be…"), and the replay said it "did not start forkpoint"."""
    session = record(tmp_path, env)
    forge_header(session, hash_seed=2**40)
    named = run(["replay", str(session), "--", sys.executable, "agent.py"], tmp_path, env)
    assert named.returncode == 0 and named.stdout == "101\n", named.stderr
    assert "PYTHONHASHSEED" not in named.stderr, named.stderr


def _forged_and_clean(tmp_path: Path) -> tuple[Path, Path, int]:
    """Two sessions of one agent (a tool call and a checkpoint of ``work``), recorded with the keys
    in ``keys``: the first with its tool's result forged after it was signed (the chain recomputed),
    the second as recorded; and the checkpoint's seq."""

    @forkpoint.tool
    def quote(ticker: str) -> dict[str, Any]:
        return {"ticker": ticker, "price": 101}

    work = tmp_path / "work"
    work.mkdir()
    (work / "agent.py").write_text("print(101)\n")
    paths = []
    for _ in range(2):
        with forkpoint.record(store=tmp_path / "store", workspace=work) as rec:
            quote("ACME")
            seq = forkpoint.checkpoint()
        paths.append(rec.session_path)

    def forged(lines: list[dict[str, Any]]) -> None:
        next(e for e in lines if e.get("type") == "tool_call")["result"]["price"] = 9999

    forge_lines(paths[0], forged)
    assert seq is not None
    return paths[0], paths[1], seq


def test_reading_commands_say_once_that_a_signature_does_not_verify_and_go_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool result edited after the session was signed, the chain recomputed: verify and replay
    said so, while show, show --html, export, diff, checkpoints and restore showed the forged
    result without a word (and make-test with a command copied it into the checkout as a cassette). Each
    says it once on stderr (`diff A A` too), and goes on."""
    from click.testing import CliRunner

    from forkpoint.cli import main

    monkeypatch.setenv("FORKPOINT_KEYS_DIR", str(tmp_path / "keys"))
    monkeypatch.chdir(tmp_path)  # (make-test writes tests/incidents/ here)
    bad, clean, seq = _forged_and_clean(tmp_path)
    said = f"the signature of session {bad.name} does not verify: the log changed after it was signed"
    for args in (
        ["show", str(bad)],
        ["show", str(bad), "--json"],
        ["show", str(bad), "--html", str(tmp_path / "page.html")],
        ["export", str(bad), "--file", str(tmp_path / "spans.json")],
        ["checkpoints", str(bad)],
        ["diff", str(bad), str(clean)],
        ["diff", str(bad), str(bad)],  # (said twice: the session was loaded, and checked, once a side)
        ["restore", f"{bad}@{seq}", "--into", str(tmp_path / "restored")],
        ["make-test", str(bad), "--", "python", "work/agent.py"],
    ):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 0, (args, res.output)  # (diff: the same calls, one result differs)
        assert flat(res.stderr).count(said) == 1, (args, res.stderr)
        if args[0] == "show" and "--html" not in args:  # (what it goes on to show is the forged result)
            assert "9999" in res.stdout, res.stdout
    res = CliRunner().invoke(main, ["show", str(clean)])  # (your own key signed it)
    assert res.exit_code == 0 and res.stderr == "", res.stderr
    monkeypatch.setenv("FORKPOINT_KEYS_DIR", str(tmp_path / "bob-keys"))
    res = CliRunner().invoke(main, ["show", str(clean)])
    assert res.exit_code == 0
    assert flat(res.stderr).count(f"session {clean.name} is signed by ed25519:") == 1, res.stderr
    assert "a key this user does not trust" in flat(res.stderr)


@pytest.mark.slow
def test_a_command_run_on_a_session_whose_signature_does_not_verify_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``replay SESSION -- CMD`` and ``--trust`` (replay, fork, sweep), and ``check`` with either,
    ran a forged session's answers and said ``replay ok`` (``reproduced``) without a word of its
    signature. They say it once (not once per arm)."""
    from click.testing import CliRunner

    from forkpoint.cli import main

    monkeypatch.setenv("FORKPOINT_KEYS_DIR", str(tmp_path / "keys"))
    monkeypatch.chdir(tmp_path)
    bad, _, seq = _forged_and_clean(tmp_path)
    said = f"the signature of session {bad.name} does not verify"
    store = ["--store", str(tmp_path / "store")]
    for args in (
        ["replay", str(bad), "--", sys.executable, "work/agent.py"],
        ["check", str(bad), "--", sys.executable, "work/agent.py"],
        [
            "fork",
            f"{bad.name}@{seq}",
            *store,
            "--trust",
            "--arms",
            "2",
            "--into",
            str(tmp_path / "arms"),
            "--",
            sys.executable,
            "agent.py",
        ],
    ):
        res = CliRunner().invoke(main, args)
        assert flat(res.stderr).count(said) == 1, (args, res.output)


def test_scrub_does_not_sign_over_a_signature_that_does_not_verify_or_is_not_trusted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scrub checked the hash chain, not the signature, and signed its copy with this user's key: a
    session edited after it was signed (or a stranger's) came out "signed by this user; trusted",
    and replay ran its recorded command without --trust. An edited one is refused; a stranger's is
    scrubbed and left unsigned (said); one this user trusts is signed again."""
    from forkpoint.errors import ScrubError
    from forkpoint.scrub import scrub_session

    monkeypatch.setenv("FORKPOINT_KEYS_DIR", str(tmp_path / "keys"))
    bad, clean, _ = _forged_and_clean(tmp_path)
    before = (bad / LOG_NAME).read_bytes()
    with pytest.raises(
        ScrubError, match="the log changed after it was signed.*refusing to copy it"
    ) as refused:
        scrub_session(bad)
    # (what to do: a secret in it stays on disk until it is scrubbed or removed)
    assert f"remove {bad / SIGNATURE_NAME} first" in str(refused.value), refused.value
    assert (bad / LOG_NAME).read_bytes() == before and signature(bad, bad.name).state == "bad"
    assert scrub_session(clean).notes == [] and signature(clean, clean.name).trusted
    monkeypatch.setenv("FORKPOINT_KEYS_DIR", str(tmp_path / "bob-keys"))
    report = scrub_session(clean)
    assert report.swapped and signature(clean, clean.name).state == "unsigned"
    assert "the scrubbed session is not signed (the original was signed by ed25519:" in report.notes[0]


def test_a_fork_of_a_strangers_session_folder_says_to_restore_that_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A teammate's session in a folder of the repository, forked without --trust, said "Read them
    first (forkpoint restore ID@SEQ --into DIR)": no store here holds ID, so that said "no session
    'ID'". It names the folder (`forkpoint restore FOLDER@SEQ`, which restores from anywhere)."""
    from forkpoint.signing import require_trusted

    monkeypatch.setenv("FORKPOINT_KEYS_DIR", str(tmp_path / "alice-keys"))
    with forkpoint.record(store=tmp_path / "store") as rec:
        pass
    copy = tmp_path / "repo" / "cassettes" / "run"
    shutil.copytree(rec.session_path, copy)
    monkeypatch.setenv("FORKPOINT_KEYS_DIR", str(tmp_path / "bob-keys"))
    with pytest.raises(UntrustedSession) as refused:
        require_trusted(copy, rec.session_path.name, None)
    assert f"(forkpoint restore {copy}@SEQ --into DIR)" in str(refused.value)


def test_a_copy_that_fails_its_checks_is_sent_to_verify_by_its_folder_not_its_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A copy of a session outside the store (make-test's cassette) edited after it was signed:
    show and replay sent the user to `forkpoint verify ID`, and ID named the intact original in
    the store, which verify passed ("verify ok"). They name the folder that was read."""
    from click.testing import CliRunner

    from forkpoint.cli import main

    monkeypatch.setenv("FORKPOINT_KEYS_DIR", str(tmp_path / "keys"))
    monkeypatch.setenv("COLUMNS", "1000")  # (the folder's path whole on one line)
    monkeypatch.chdir(tmp_path)  # (the default store, .forkpoint, is here)

    @forkpoint.tool
    def quote(ticker: str) -> dict[str, Any]:
        return {"ticker": ticker, "price": 101}

    with forkpoint.record() as rec:
        quote("ACME")
    sid = rec.session_path.name
    copy = tmp_path / "cassettes" / "quote"
    shutil.copytree(rec.session_path, copy)

    def forged(lines: list[dict[str, Any]]) -> None:
        next(e for e in lines if e.get("type") == "tool_call")["result"]["price"] = 9999

    forge_lines(copy, forged)  # (the chain recomputed: only the signature tells)
    shown = CliRunner().invoke(main, ["show", str(copy)])
    assert f"(see: forkpoint verify {copy})" in flat(shown.stderr), shown.stderr
    log = copy / LOG_NAME
    log.write_bytes(log.read_bytes().replace(b"9999", b"9998"))  # (now the chain fails too)
    replayed = CliRunner().invoke(main, ["replay", str(copy), "--", sys.executable, "-c", "pass"])
    assert replayed.exit_code == 1
    assert f"(see: forkpoint verify {copy}; replay it anyway with --no-verify)" in flat(replayed.stderr)
    # (what the id names passes: sent there, the user would have been told all is well)
    assert CliRunner().invoke(main, ["verify", sid]).exit_code == 0


def test_a_signature_removed_after_an_edit_is_said_lost_not_taken_for_an_old_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tool result edited (the chain recomputed) and ``signature.json`` removed: show, diff,
    export, restore and make-test said nothing and verify said ok, as of a session older than
    signing. A session names from its first line the key that signs it when it closes, so one
    without its signature says it lost it (verify fails, a scrubbed copy still says it), while one
    that names none, older than signing, reads as before."""
    from click.testing import CliRunner

    from forkpoint.cli import main
    from forkpoint.scrub import scrub_session
    from forkpoint.signing import key_id, own_key

    monkeypatch.setenv("FORKPOINT_KEYS_DIR", str(tmp_path / "keys"))
    monkeypatch.chdir(tmp_path)  # (make-test writes tests/incidents/ here)
    bad, old, seq = _forged_and_clean(tmp_path)
    mine = key_id(own_key().public_key())
    assert Session.load(bad).header[SIGNER] == mine
    (bad / SIGNATURE_NAME).unlink()
    forge_lines(old, lambda lines: lines[0].pop(SIGNER))  # (as forkpoint wrote before signing)
    (old / SIGNATURE_NAME).unlink()

    said = (
        f"session {bad.name} has lost its signature: its header says {mine} signs it when it closes, "
        f"but it has no {SIGNATURE_NAME}"
    )
    for args in (
        ["show", str(bad)],
        ["export", str(bad), "--file", str(tmp_path / "spans.json")],
        ["diff", str(bad), str(old)],
        ["restore", f"{bad}@{seq}", "--into", str(tmp_path / "restored")],
        ["make-test", str(bad), "--", "python", "work/agent.py"],
    ):
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 0, (args, res.output)
        assert flat(res.stderr).count(said) == 1, (args, res.stderr)
    res = CliRunner().invoke(main, ["verify", str(bad)])
    assert res.exit_code == 1 and "signature: not signed any more: its header says" in flat(res.output)
    res = CliRunner().invoke(main, ["replay", str(bad)])
    assert res.exit_code == 1 and "not signed any more" in flat(res.output), res.output
    assert "will not run the command it recorded" in flat(res.output)

    res = CliRunner().invoke(main, ["show", str(old)])  # (older than signing: nothing to say)
    assert res.exit_code == 0 and res.stderr == "", res.stderr
    res = CliRunner().invoke(main, ["verify", str(old)])
    assert res.exit_code == 0 and "signature: not signed; NOT trusted" in flat(res.output)

    report = scrub_session(bad)  # (a copy is no way to be rid of the loss)
    assert report.swapped and "the original was not signed any more" in report.notes[0]
    assert signature(bad, bad.name).state == "lost"

    with forkpoint.record(store=tmp_path / "store") as rec:  # (no end yet: being recorded, not lost)
        forkpoint.note("x")
        running = CliRunner().invoke(main, ["show", str(rec.session_path)])
        assert running.exit_code == 0 and running.stderr == "", running.stderr
        assert signature(rec.session_path, rec.session_path.name).state == "unsigned"


@pytest.mark.parametrize("spoil", ["open to others", "folder a symlink"])
def test_a_key_that_cannot_sign_names_no_signer_though_its_id_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spoil: str
) -> None:
    """The key's id kept beside it (signing-key.id) named the signer of a recording whose key could
    not sign it (made readable by others, or its folder moved behind a symlink: neither changes the
    key file's inode, size or mtime): the session closed unsigned, said so, and then read as one
    whose signature was removed ("not signed any more"), where without the kept id it is unsigned."""
    from forkpoint.signing import KEY_ID_NAME, keys_dir, promise

    monkeypatch.setenv("FORKPOINT_KEYS_DIR", str(tmp_path / "keys"))
    header: dict[str, Any] = {}
    promise(header)
    assert header[SIGNER] and (keys_dir() / KEY_ID_NAME).exists()
    if spoil == "open to others":
        (keys_dir() / KEY_NAME).chmod(0o644)
    else:
        (tmp_path / "keys").rename(tmp_path / "real")
        (tmp_path / "keys").symlink_to(tmp_path / "real")
    header = {}
    promise(header)
    assert SIGNER not in header

    with forkpoint.record(store=tmp_path / "store") as rec:
        forkpoint.note("x")
    assert signature(rec.session_path, rec.session_path.name).state == "unsigned"
