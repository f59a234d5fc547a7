"""What importing forkpoint costs a process: nothing is imported before it is needed (``import
forkpoint`` loads none of the layers, no CLI or terminal library and no HTTP library), and the
HTTP adapters still capture a library the program imports only after recording started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("rich", "pygments", "click", "httpx", "httpx2", "aiohttp", "urllib3", "orjson")


#: Code that notes, in ``started``, the modules of ``prefixes`` loaded when each process is started.
_SPY_AT_POPEN = (
    "import subprocess, sys\n"
    "from forkpoint.cli import main\n"
    "started = []\n"
    "class Popen(subprocess.Popen):\n"
    "    def __init__(self, *a, **k):\n"
    "        started.append(sorted(m for m in sys.modules if m.startswith({prefixes!r})))\n"
    "        super().__init__(*a, **k)\n"
    "subprocess.Popen = Popen\n"
)


def _modules_after(code: str, *, env: dict[str, str] | None = None) -> set[str]:
    """The modules loaded in a fresh interpreter once ``code`` ran (it must print nothing)."""
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    ).stdout
    return set(json.loads(out))


def test_import_forkpoint_loads_no_layer_and_no_heavy_library() -> None:
    loaded = _modules_after("import forkpoint")
    assert sorted(m for m in loaded if m.startswith("forkpoint")) == [
        "forkpoint",
        "forkpoint._lazy",
        "forkpoint._version",
    ]
    assert not loaded & set(HEAVY)
    assert "typing" not in loaded


def test_the_public_names_resolve_on_first_use() -> None:
    import forkpoint
    from forkpoint import api, errors, log, program, runtime
    from forkpoint.capture import tools
    from forkpoint.checkpoint import verify_session
    from forkpoint.record import Recorder
    from forkpoint.replay import Replayer

    assert forkpoint.record is api.record and forkpoint.replay is api.replay
    assert forkpoint.checkpoint is api.checkpoint and forkpoint.note is api.note
    assert forkpoint.tool is tools.tool and forkpoint.verify is verify_session
    assert forkpoint.Session is log.Session and forkpoint.run_command is program.run_command
    assert forkpoint.Divergence is errors.Divergence and forkpoint.active is runtime.active
    assert forkpoint.Recorder is Recorder and forkpoint.Replayer is Replayer
    for name in forkpoint.__all__:
        assert getattr(forkpoint, name) is not None, name
    assert set(forkpoint.__all__) <= set(dir(forkpoint))


def test_a_function_named_like_a_submodule_stays_the_function() -> None:
    """``forkpoint.record``/``replay``/``checkpoint`` are both functions and submodules: importing
    the submodule first (as the CLI's child boot does) must not make the package name the module."""
    code = (
        "import forkpoint.record, forkpoint.replay, forkpoint.checkpoint, forkpoint\n"
        "import forkpoint.api as api\n"
        "assert forkpoint.record is api.record, forkpoint.record\n"
        "assert forkpoint.replay is api.replay, forkpoint.replay\n"
        "assert forkpoint.checkpoint is api.checkpoint, forkpoint.checkpoint\n"
        "from forkpoint import record; assert record is api.record"
    )
    _modules_after(code)


def test_unknown_names_are_attribute_errors() -> None:
    import forkpoint

    try:
        forkpoint.nothing_here  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "nothing_here" in str(exc)
    else:
        raise AssertionError("no AttributeError")


def test_recording_imports_no_http_library_the_program_does_not(tmp_path: Path) -> None:
    """Starting a recording leaves the HTTP libraries unimported; one the program imports later is
    captured all the same (its adapter patches it as soon as its own code ran)."""
    code = (
        "import sys, forkpoint\n"
        f"with forkpoint.record(store={str(tmp_path)!r}):\n"
        "    before = {m for m in ('httpx', 'httpx2', 'aiohttp', 'urllib3', 'rich', 'click') if m in sys.modules}\n"
        "    assert not before, before\n"
        "    import httpx2\n"
        "    from forkpoint import capture\n"
        "    assert 'httpx2' in capture.installed(), capture.installed()\n"
        "    assert hasattr(httpx2.Client._transport_for_url, '__wrapped__')\n"
    )
    _modules_after(code)


@pytest.mark.parametrize("runs", ["", "subprocess.run(['true'], check=True); "], ids=["nothing", "a program"])
def test_a_bootstrapped_program_that_makes_no_call_loads_no_recorder(tmp_path: Path, runs: str) -> None:
    """`forkpoint record -- python -c pass`: the recording process installs its hooks and loads
    nothing else of forkpoint's (no recorder, log, provider, adapter or integration, no orjson, no
    importlib.metadata, nor linecache and its tokenize, nor json: its ending says ``{}``, which the
    CLI reads as a process that reported back) until the program makes a call (issue 15: start-up).
    The same program making a request is recorded all the same (tests/capture). One that runs a
    program (`true`: no Python, no call) loads no more: the audit hook that names unrecorded Python
    programs (forkpoint/capture/programs.py) made the recorder there, asking for the runtime before
    it looked at the command."""
    from tests.cliutil import forkpoint_cli

    probe = (  # (json is imported after the look: the probe's own)
        f"import subprocess, sys; {runs}seen = sorted(m for m in sys.modules if m.startswith(("
        "'forkpoint', 'orjson', 'zstandard', 'rich', 'click', 'importlib.metadata', 'importlib.abc', "
        "'linecache', 'tokenize', 'json'))); import json; print(json.dumps(seen))"
    )
    store = str(tmp_path / "st")
    done = forkpoint_cli(["record", "--store", store, "--no-workspace", "--", sys.executable, "-c", probe])
    assert done.returncode == 0, done.stderr
    boot = {"capture", "capture.connections", "capture.imports", "capture.programs", "errors", "hooks"}
    boot |= {"capture.tracebacks"}  # (the integrations take forkpoint's frames out of a tool's traceback)
    boot |= {"integrations"}
    boot |= {"_boot", "_lazy", "_version", "execs", "integrations.base", "plugins", "runtime", "sockets"}
    assert set(json.loads(done.stdout)) == {"forkpoint"} | {f"forkpoint.{m}" for m in boot}
    assert "recorded session" in done.stderr and "Python program" not in done.stderr
    assert "reported back" not in done.stderr


def test_a_recording_parent_imports_no_key_serialization_and_compiles_no_pattern_of_ours(
    tmp_path: Path,
) -> None:
    """`forkpoint record`'s own process signs the session with the Ed25519 module alone (not
    cryptography's ~25 ms PEM/SSH serialization module), loads no executor pool (concurrent.futures
    and logging: ~3.5 ms) nor the structured diff of a divergence, and compiles none of forkpoint's
    module-level patterns it does not use (forkpoint.patterns), nor what verifies a session's log,
    nor the providers (~19 M instructions)."""
    code = (
        "import fnmatch, re, sys\n"
        # (the files the program's processes leave are read by their names: no glob pattern made)
        "globbed = []\nreal_translate = fnmatch.translate\n"
        "fnmatch.translate = lambda p: globbed.append(p) or real_translate(p)\n"
        "compiled = []\n"
        "real = re._compile\n"
        "def spy(pattern, flags):\n"
        "    caller = sys._getframe(2).f_globals.get('__name__', '')\n"
        "    if caller.startswith('forkpoint') and (type(pattern), pattern, flags) not in re._cache:\n"
        "        compiled.append((caller, str(pattern)[:40]))\n"
        "    return real(pattern, flags)\n"
        "re._compile = spy\n"
        "from forkpoint.cli import main\n"
        f"try: main(['record', '--store', {str(tmp_path / 'st')!r}, '--no-workspace', '--', 'true'])\n"
        "except SystemExit as exc: assert exc.code == 0, exc.code\n"
        "assert 'cryptography.hazmat.primitives.serialization' not in sys.modules\n"
        "assert 'cryptography.hazmat.primitives.asymmetric.ed25519' in sys.modules  # it did sign\n"
        # (no executor runs: the pool, and the logging it loads, are not needed to ask whether a task does)
        "assert 'concurrent.futures' not in sys.modules\n"
        # (the structured diff is a divergence's: matching loads it when it has one to explain)
        "assert 'forkpoint.jsondiff' not in sys.modules\n"
        # (the log's package loads what a recording writes and reads, not what verifies a log)
        "assert 'forkpoint.log.verify' not in sys.modules and 'forkpoint.log.writer' in sys.modules\n"
        # (its header names the SDKs and key variables from forkpoint.sdks: no wire format is loaded)
        "assert not [m for m in sys.modules if m.startswith('forkpoint.providers')]\n"
        "at_import = [c for c in compiled if c[0] in ('forkpoint.match', 'forkpoint.providers.base', "
        "'forkpoint.jsonpath', 'forkpoint.log.blobs', 'forkpoint.store')]\n"
        "assert not at_import, at_import\n"
        "assert not globbed, globbed\n"
        # (a descriptor's name is looked for where a report is written, a blob's where a log is
        # verified, an option in a shell's script and an escaped line break where such text is scrubbed)
        "import forkpoint.files as f, forkpoint.log.codec as c, forkpoint.redact as r\n"
        "unused = [f._DESCRIPTOR, c._FANOUT, c._ADDRESS, r._SECRET_OPTION_WORD, r._ESCAPED_SPACE]\n"
        "assert not [p for p in unused if isinstance(p, re.Pattern) or 'search' in vars(p)], unused\n"
    )
    _modules_after(code)


def test_a_recording_parent_names_its_signer_before_the_program_starts_without_loading_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session's header names the key that signs it when it closes (signing.promise), written
    before the program starts: from the key's id kept beside it, so cryptography (~25 M
    instructions, ~9 ms) loads while the program starts, as before the header named it; the first
    recording, which makes the key, loads it there once, and a key file replaced since is read again."""
    from forkpoint.log import Session
    from forkpoint.signing import KEY_ID_NAME, KEY_NAME, key_id, keys_dir, own_key

    code = (
        _SPY_AT_POPEN.format(prefixes=("cryptography",))
        + f"try: main(['record', '--store', {str(tmp_path / 'st')!r}, '--no-workspace', '--', 'true'])\n"
        "except SystemExit as exc: assert exc.code == 0, exc.code\n"
        "assert started and not any(started), started  # (git's processes, then the program's)\n"
    )
    monkeypatch.setenv("FORKPOINT_KEYS_DIR", str(tmp_path / "keys"))
    own_key()  # (made by an earlier recording, whose header named it from the key itself)
    assert not (keys_dir() / KEY_ID_NAME).exists()
    with pytest.raises(subprocess.CalledProcessError):
        _modules_after(code)
    assert (keys_dir() / KEY_ID_NAME).exists()
    loaded = _modules_after(code)
    assert "cryptography.hazmat.primitives.asymmetric.ed25519" in loaded  # (it signed, at the end)
    sessions = sorted((tmp_path / "st").glob("*/session.jsonl"))
    assert [Session.load(p.parent).header.get("signer") for p in sessions] == [
        key_id(own_key().public_key())
    ] * 2

    (keys_dir() / KEY_NAME).unlink()  # a new key: the id kept is of the old one
    new = key_id(own_key().public_key())
    with pytest.raises(subprocess.CalledProcessError):
        _modules_after(code)
    newest = max((tmp_path / "st").glob("*/session.jsonl"), key=lambda p: p.stat().st_mtime_ns)
    assert Session.load(newest.parent).header["signer"] == new


def test_a_recording_parent_with_a_workspace_loads_no_provider(tmp_path: Path) -> None:
    """In a git repository `forkpoint record`'s own process opens the workspace (the checkpoints
    are taken in the program's process): it loaded every provider for what reads a checkpoint's
    carried context (forkpoint.checkpoint.context), ~19 M instructions (issue 15: start-up)."""
    from tests.gitutil import make_repo

    repo = make_repo(tmp_path / "repo", {"a.txt": "a\n"})
    code = (
        f"import os, sys\nos.chdir({str(repo)!r})\n"
        "from forkpoint.cli import main\n"
        f"try: main(['record', '--store', {str(tmp_path / 'st')!r}, '--', 'true'])\n"
        "except SystemExit as exc: assert exc.code == 0, exc.code\n"
        "assert 'forkpoint.checkpoint.take' in sys.modules  # it did open the workspace\n"
        "assert not [m for m in sys.modules if m.startswith(('forkpoint.providers', 'forkpoint.checkpoint.context'))]\n"
    )
    _modules_after(code)


def test_the_cli_starts_without_the_outcome_module_and_its_help_shows_the_outcome_default() -> None:
    """Only check, fork and sweep measure outcomes: the CLI's other commands do not load them (their
    subprocess, signal and tempfile) to build ``--outcome-timeout``; its help still shows the default."""
    from click.testing import CliRunner

    from forkpoint.cli import main
    from forkpoint.outcome import DEFAULT_TIMEOUT

    code = (
        "import contextlib, io, sys\nfrom forkpoint.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try: main(['record', '--help'])\n    except SystemExit: pass\n"
    )
    assert "forkpoint.outcome" not in _modules_after(code)
    shown = " ".join(CliRunner().invoke(main, ["fork", "--help"]).output.split())
    assert f"counts as a failure; default: {DEFAULT_TIMEOUT:g} s)" in shown, shown


def test_a_pattern_compiled_later_behaves_as_the_compiled_one() -> None:
    import re

    from forkpoint.patterns import compiled_later, compiled_later_bytes

    later, now = compiled_later(r"(?P<word>[a-z]+)(\d*)", re.I), re.compile(r"(?P<word>[a-z]+)(\d*)", re.I)
    text = "Abc12 de fG3"
    assert later.match(text, 6) is not None and later.match(text, 6).group() == now.match(text, 6).group()  # type: ignore[union-attr]
    assert [m.span() for m in later.finditer(text)] == [m.span() for m in now.finditer(text)]
    assert later.sub("-", text) == now.sub("-", text) and later.split(text) == now.split(text)
    assert later.fullmatch("x9") and later.groupindex == now.groupindex and later.pattern == now.pattern
    assert compiled_later_bytes(rb"\d+").findall(b"a1b22") == [b"1", b"22"]
    broken = compiled_later("(")
    try:
        broken.search("x")
    except re.error:
        pass
    else:
        raise AssertionError("a bad pattern must fail where it is first used")


def test_the_agents_python_subprocesses_get_the_users_pythonpath_and_load_no_forkpoint(
    tmp_path: Path,
) -> None:
    """The recorded program's own Python subprocesses are not recorded (docs/format.md), so they do
    not start forkpoint either: the bootstrap folder leaves PYTHONPATH, the user's entries stay in
    their order, and a subprocess's interpreter loads no forkpoint module."""
    from tests.cliutil import forkpoint_cli

    mine = tmp_path / "lib"
    mine.mkdir()
    program = (
        "import os, subprocess, sys, json\n"
        'probe = \'import sys, json, os; print(json.dumps([os.environ.get("PYTHONPATH"), '
        'sorted(m for m in sys.modules if m.startswith("forkpoint"))]))\'\n'
        "print(subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, check=True).stdout)\n"
    )
    user_path = os.pathsep.join([str(ROOT), str(mine)])
    done = forkpoint_cli(
        ["record", "--store", str(tmp_path / "st"), "--no-workspace", "--", sys.executable, "-c", program],
        env={**os.environ, "PYTHONPATH": user_path},
    )
    assert done.returncode == 0, done.stderr
    seen_path, modules = json.loads(done.stdout.strip())
    assert seen_path == user_path
    assert modules == []


def test_the_bootstrap_folder_leaves_pythonpath_when_it_is_another_forkpoints(tmp_path: Path) -> None:
    """`forkpoint record` run from one forkpoint (a checkout, a pipx install) and an agent that
    imports another: the folder on PYTHONPATH is the first one's, and it still leaves."""
    import shutil

    other = tmp_path / "elsewhere" / "_bootstrap"
    other.mkdir(parents=True)
    shutil.copy(ROOT / "forkpoint" / "_bootstrap" / "sitecustomize.py", other)
    mine = tmp_path / "lib"
    mine.mkdir()
    user_path = os.pathsep.join([str(ROOT), str(mine)])
    probe = "import os; print(os.environ.get('PYTHONPATH'))"
    program = f"import subprocess, sys; print(subprocess.run([sys.executable, '-c', {probe!r}], capture_output=True, text=True).stdout)"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(other), user_path]),
        "FORKPOINT_MODE": "record",
        "FORKPOINT_SESSION": str(tmp_path / "never-written"),  # the program makes no call
    }
    done = subprocess.run(
        [sys.executable, "-c", program], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == user_path, done.stderr


def test_a_replaying_parent_loads_the_verdict_not_the_replayer(tmp_path: Path) -> None:
    """`forkpoint replay`'s own process verifies the session, starts the program and reads the
    verdict: matching, capture, the replayer and the guard run in the replayed process only, so the
    parent does not import them; given the command to run, it checks the signature (to warn) only
    once the program runs, which overlaps loading cryptography with the program's start-up (issue
    15: start-up)."""
    from tests.cliutil import forkpoint_cli

    store = tmp_path / "st"
    rec = forkpoint_cli(
        ["record", "--store", str(store), "--no-workspace", "--", sys.executable, "-c", "pass"]
    )
    assert rec.returncode == 0, rec.stderr
    code = (
        _SPY_AT_POPEN.format(prefixes=("cryptography", "forkpoint.signing"))
        + f"try: main(['replay', 'last', '--store', {str(store)!r}, '--', sys.executable, '-c', 'pass'])\n"
        "except SystemExit as exc: assert exc.code == 0, exc.code\n"
        "assert started == [[]], started\n"
    )
    loaded = _modules_after(code)
    assert "forkpoint.replay.report" in loaded and "forkpoint.log" in loaded  # it did replay
    heavy = ("replay.replayer", "replay.guard", "replay.whatif", "record", "capture", "override")
    heavy += ("match", "redact", "providers", "checkpoint.take", "checkpoint.restore")
    heavy += ("checkpoint.workspace",)  # (what reads a manifest: this session has no checkpoint)
    heavy += ("jsondiff",)  # (a divergence's diff: this run did not diverge)
    assert not {f"forkpoint.{m}" for m in heavy} & loaded
    assert "forkpoint.signing" in loaded  # (checked once the program ran: before, it was not loaded)


def test_a_replayed_program_loads_the_clock_stand_ins_only_when_deterministic(tmp_path: Path) -> None:
    """The clock and randomness stand-ins (forkpoint.capture.clock, which reads the interpreter's
    library folders through sysconfig as it loads) are for sessions recorded with --deterministic."""
    from tests.cliutil import forkpoint_cli

    probe = "import sys; print(' '.join(sorted(sys.modules)))"
    for flags, expected in (([], False), (["--deterministic"], True)):
        store = str(tmp_path / f"st{len(flags)}")
        cmd = [sys.executable, "-c", probe]
        rec = forkpoint_cli(["record", "--store", store, "--no-workspace", *flags, "--", *cmd])
        assert rec.returncode == 0, rec.stderr
        done = forkpoint_cli(["replay", "last", "--store", store, "--", *cmd])
        assert done.returncode == 0, done.stderr
        loaded = set(done.stdout.split())
        assert "forkpoint.replay.replayer" in loaded  # the replayer did start
        assert ("forkpoint.capture.clock" in loaded) is expected, flags


def test_the_log_package_loads_its_submodules_as_their_names_are_used() -> None:
    """``import forkpoint.log`` loads none of its submodules (a recording never loads .verify, above),
    and ``from forkpoint.log import X`` still gives every public name, each from its own module."""
    code = (
        "import sys, forkpoint.log as log\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('forkpoint.log.'))\n"
        "assert not loaded, loaded\n"
        "for name in log.__all__:\n"
        "    exec(f'from forkpoint.log import {name}')\n"
        "assert 'forkpoint.log.verify' in sys.modules and callable(log.verify)\n"
        "from forkpoint.log.reader import Session\n"
        "assert log.Session is Session\n"
    )
    _modules_after(code)


@pytest.mark.parametrize("package", ["forkpoint.checkpoint", "forkpoint.replay", "forkpoint.log"])
def test_a_lazily_exported_name_stays_itself_once_every_submodule_is_imported(package: str) -> None:
    """The import system binds each submodule in its package: a function exported under its
    submodule's name (``checkpoint.restore``) must stay the function, as it did when the package
    imported it eagerly."""
    import importlib
    import pkgutil
    import types

    pkg = importlib.import_module(package)
    for sub in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{package}.{sub.name}")
    for name in pkg.__all__:
        value = getattr(pkg, name)
        assert not isinstance(value, types.ModuleType), f"{package}.{name} is a module"
        assert value is getattr(importlib.import_module(package), name)
    with pytest.raises(AttributeError, match="nothing_here"):
        pkg.nothing_here  # noqa: B018


def test_work_that_need_not_wait_runs_while_the_program_runs_and_the_program_is_waited_for(
    tmp_path: Path,
) -> None:
    """`run_child`'s ``meanwhile`` (what `forkpoint record` does while its program starts: import what
    closing the session needs) runs while the program runs, not after it; and if it fails, the
    program is still waited for before the error goes on."""
    from forkpoint.orchestrate import run_child

    flag, done = tmp_path / "flag", tmp_path / "done"
    waits = (  # the program ends 0 once it saw the flag, 1 after 20 s without it
        "import pathlib, sys, time\n"
        f"flag, done = pathlib.Path({str(flag)!r}), pathlib.Path({str(done)!r})\n"
        "end = time.monotonic() + 20\n"
        "while not flag.exists() and time.monotonic() < end: time.sleep(0.01)\n"
        "done.write_text('x')\n"
        "sys.exit(0 if flag.exists() else 1)\n"
    )
    assert run_child([sys.executable, "-c", waits], dict(os.environ), meanwhile=flag.touch).code == 0
    assert done.exists()

    flag.unlink()
    done.unlink()

    def fails() -> None:
        flag.touch()
        raise RuntimeError("meanwhile failed")

    with pytest.raises(RuntimeError, match="meanwhile failed"):
        run_child([sys.executable, "-c", waits], dict(os.environ), meanwhile=fails)
    assert done.exists()  # the program had ended when the error came back


def test_what_every_recording_process_imports_at_its_end_loads_no_shutil() -> None:
    """forkpoint.files, which every recording process imports as it ends (its ending report),
    imported shutil (and with it bz2, lzma and zlib: +4.6 % instructions for ``forkpoint record --
    python -c pass``'s program) for a function only make-test uses."""
    probe = "import sys, forkpoint.files; print(' '.join(sorted(sys.modules)))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert not {"shutil", "bz2", "lzma"} & set(loaded.split())


def test_a_recording_parent_parses_its_configuration_file_once(tmp_path: Path) -> None:
    """`forkpoint record` reads the configuration for each of its tables and to find it: in a project
    whose pyproject.toml names forkpoint (a dependency), each reading parsed the file again (ten
    times with a [tool.forkpoint] table, ~5 M instructions each: issue 15, start-up)."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "pyproject.toml").write_text(
        '[project]\nname = "agent"\ndependencies = ["forkpoint"]\n\n'
        '[tool.forkpoint.redact]\nheaders = ["x-internal-auth"]\n'
    )
    code = (
        f"import os, sys, tomllib\nos.chdir({str(project)!r})\n"
        "parsed = []\nreal = tomllib.loads\n"
        "tomllib.loads = lambda text, **kw: parsed.append(1) or real(text, **kw)\n"
        "from forkpoint.cli import main\n"
        f"try: main(['record', '--store', {str(tmp_path / 'st')!r}, '--no-workspace', '--', 'true'])\n"
        "except SystemExit as exc: assert exc.code == 0, exc.code\n"
        "assert len(parsed) == 1, len(parsed)\n"
    )
    _modules_after(code)


def test_a_configuration_read_again_is_the_file_as_it_is_now_and_a_table_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parsed file kept for the next reading (above) is never what a caller changes, and an
    edited file is read as it is now."""
    from forkpoint.config import load_table

    config = tmp_path / "forkpoint.toml"
    config.write_text('[redact]\nheaders = ["x-a"]\n')
    monkeypatch.setenv("FORKPOINT_CONFIG", str(config))
    table, _ = load_table("redact")
    table["headers"].append("x-changed")
    assert load_table("redact")[0] == {"headers": ["x-a"]}
    config.write_text('[redact]\nheaders = ["x-b"]\n')
    assert load_table("redact")[0] == {"headers": ["x-b"]}


def test_every_command_shares_one_identity_file_type() -> None:
    """Each click.Path made asks gettext for its name, which looks for translation files each time:
    made once per command, ``--identity``'s cost every start of the command line ~4 M instructions."""
    import click

    from forkpoint.cli import main

    def commands(group: click.Group) -> list[click.Command]:
        found = list(group.commands.values())
        return found + [c for g in found if isinstance(g, click.Group) for c in commands(g)]

    kinds = [p.type for c in commands(main) for p in c.params if p.name == "identity"]
    assert len(kinds) > 10 and all(k is kinds[0] for k in kinds), kinds


def test_named_finds_what_glob_finds(tmp_path: Path) -> None:
    """forkpoint._boot.named, which reads back the files a run's processes leave, finds the files
    ``folder.glob(prefix*suffix)`` does, and none in a folder that is not there or is a file."""
    from forkpoint._boot import named

    for name in ("report-1.json", "report-.json", "report-2.json.tmp", "report.json", "xreport-3.json"):
        (tmp_path / name).write_text("")
    (tmp_path / "report-4.json").mkdir()
    for prefix, suffix in (("report-", ".json"), ("report-", ""), ("report-2.", ""), ("report-.", ".json")):
        assert sorted(named(tmp_path, prefix, suffix)) == sorted(tmp_path.glob(f"{prefix}*{suffix}"))
    assert named(tmp_path / "gone", "report-") == [] == named(tmp_path / "report.json", "report-")
