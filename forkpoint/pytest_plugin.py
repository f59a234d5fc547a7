"""pytest plugin: record a test's agent run into a cassette once, replay it offline afterwards.

Registered through the ``pytest11`` entry point, so installing forkpoint is enough::

    @pytest.mark.forkpoint
    def test_agent_fixes_the_bug():
        assert "fixed" in run_agent("Fix the bug in calc.py")

    def test_with_the_fixture(forkpoint_session):      # the same, plus access to the cassette
        run_agent("...")
        assert forkpoint_session.action == "replay"

Every model call (the SDKs' HTTP requests) and every ``@forkpoint.tool`` call of the test is
recorded into one session per test — the *cassette*, ``<forkpoint_dir>/<module>/<test>/`` — and
served from it afterwards: no network, no tool bodies, same answers. Modes (``--forkpoint-mode``,
the ``forkpoint_mode`` ini option, or the marker's ``mode=``):

* ``replay`` — only replay. A test without a cassette fails; nothing touches the network. The
  default when the environment variable ``CI`` is set (vcrpy: ``none``).
* ``once`` — replay the cassette if there is one, else run live and record it (vcrpy: ``once``).
  The default otherwise.
* ``record`` — replay while the run matches the cassette; from the first call that does not, run
  live, and rewrite the cassette with the whole run (unchanged runs leave it untouched). A test
  without a cassette is recorded (vcrpy: ``new_episodes``, without the stale mix of old and new).
* ``rewrite`` — ignore cassettes: run every test live and replace its cassette (vcrpy: ``all``).

A replayed test fails when the run diverged from the recording (the failure shows forkpoint's
divergence report), when recorded calls went unused, or when something tried to reach the network.
A recording replaces the cassette only when the test passed; the recording of a failed test is kept
beside it as ``<test>.failed/``.

Per test, module or class (the ``forkpoint_config`` fixture, like pytest-recording's ``vcr_config``,
and the marker's keywords): ``ignore`` rules, ``tools`` to record by ``module:qualname`` (also the
``forkpoint_tools`` ini option), ``live_tools`` that run for real on replay, ``on_divergence``,
``allow_hosts`` and ``deterministic``. Under pytest-xdist each cassette is recorded or replayed by
one worker at a time, and the summary counts every worker's cassettes. See ``docs/pytest.md``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import os
import re
import secrets
import shlex
import shutil
import warnings
from collections.abc import Generator, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .api import checked_tools
from .errors import ConfigError, ReplayWarning, UsageError
from .match import OWN_RULES, IgnoreRule, ignore_rules
from .replay import POLICIES
from .text import shown_path

#: The modes, in the order the docs define them.
MODES = ("replay", "once", "record", "rewrite")
#: The default cassette folder, relative to the rootdir.
DEFAULT_DIR = Path("tests") / "cassettes"
#: Keyword arguments the ``forkpoint`` marker accepts (the ``forkpoint_config`` fixture: all but
#: ``name`` and ``cassette``, which name one test's cassette).
MARKER_KWARGS = (
    "name",
    "mode",
    "allow_hosts",
    "allow_unused",
    "ignore",
    "tools",
    "live_tools",
    "on_divergence",
    "deterministic",
    "cassette",
)
#: Settings that add up over the ``forkpoint_config`` fixture and every marker; for the others the
#: closest says (the test's marker, then its class's, its module's, then the fixture).
LIST_SETTINGS = ("allow_hosts", "ignore", "tools", "live_tools")

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")
_MAX_PART = 80


# --------------------------------------------------------------------------- settings


@dataclass
class Settings:
    """The plugin's configuration for one pytest run, and what it did (for the summary)."""

    cli_mode: str | None
    ini_mode: str | None
    ci: bool
    directory: Path
    allow_hosts: frozenset[str]
    tools: tuple[str, ...] = ()
    #: ``--forkpoint-otlp``: where a test that records also sends its spans, live.
    otlp: str | None = None
    otlp_content: bool = False
    #: ``unanchored``: of the cassettes written, those in a ``floating`` ``directory``.
    counts: dict[str, int] = field(
        default_factory=lambda: {"replayed": 0, "recorded": 0, "updated": 0, "failed": 0, "unanchored": 0}
    )
    #: The folders the cassettes of this run are in (``directory``, or a marker's ``cassette=``'s).
    places: set[str] = field(default_factory=set)
    #: Tests whose cassette holds no model call and no tool call (recorded or replayed so).
    empty: set[str] = field(default_factory=set)
    #: What the replays that ``pytest.exit()`` (or a Ctrl-C) cut short did not reproduce: no report
    #: of their test follows, so the summary says it.
    interrupted: list[str] = field(default_factory=list)
    #: ``directory`` is the default under a rootdir pytest took from where it was started (it found
    #: no configuration file): started elsewhere, the same tests look for their cassettes elsewhere.
    floating: bool = False

    def mode_for(self, marker_mode: str | None, source: str = "the marker's mode") -> tuple[str, str]:
        """(mode, why) for a test: ``--forkpoint-mode`` wins, then ``CI`` (replay), then the marker's
        ``mode=`` (or the ``forkpoint_config`` fixture's, as ``source`` says), then the ini option,
        then ``once``."""
        if self.cli_mode:
            return self.cli_mode, "--forkpoint-mode"
        if self.ci:
            return "replay", "the CI environment variable is set"
        if marker_mode:
            return marker_mode, source
        if self.ini_mode:
            return self.ini_mode, "the forkpoint_mode ini option"
        return "once", "the default"


_settings_key = pytest.StashKey[Settings]()
_cassette_key = pytest.StashKey["Cassette"]()
_reports_key = pytest.StashKey[dict[str, pytest.TestReport]]()
#: What a replay whose test raised left unused: an xfail mark may still take the test for xfailed.
_unused_key = pytest.StashKey[str]()


def ci_is_set(environ: Any = None) -> bool:
    """True when ``CI`` is set to something other than empty, ``0``, ``false``, ``no`` or ``off``."""
    value = (environ if environ is not None else os.environ).get("CI", "")
    return value.strip().lower() not in ("", "0", "false", "no", "off")


def loopback_hosts(hosts: Any, where: str) -> frozenset[str]:
    """The connect addresses to allow for ``hosts``; each must be loopback (``localhost`` stands for
    127.0.0.1 and ::1). Raises ``ValueError`` naming ``where`` otherwise."""
    if isinstance(hosts, str):
        hosts = [hosts]
    out: set[str] = set()
    for host in hosts or ():
        h = str(host).strip().strip("[]")
        if h == "localhost":
            out.update({"localhost", "127.0.0.1", "::1"})
            continue
        try:
            loopback = ipaddress.ip_address(h).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ValueError(
                f"{where}: {host!r} is not a loopback address; a replay never touches the network, so "
                "only loopback hosts (127.0.0.1, ::1, localhost) can be allowed"
            )
        out.add(h)
    return frozenset(out)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("forkpoint", "forkpoint: record agent runs into cassettes, replay them offline")
    group.addoption(
        "--forkpoint-mode",
        choices=MODES,
        default=None,
        help="replay: cassettes only, no network (default when CI is set); once: replay, or record "
        "when missing (default); record: replay while it matches, then record live and rewrite the "
        "cassette; rewrite: record every test live.",
    )
    group.addoption(
        "--forkpoint-dir",
        metavar="DIR",
        default=None,
        help=f"Cassette folder (default: the forkpoint_dir ini option, else <rootdir>/{DEFAULT_DIR.as_posix()}).",
    )
    group.addoption(
        "--forkpoint-allow-host",
        action="append",
        default=[],
        metavar="HOST",
        help="A loopback host that replayed tests may still connect to (repeatable), e.g. 127.0.0.1.",
    )
    group.addoption(
        "--forkpoint-otlp",
        metavar="URL",
        default=None,
        help="A test that records also sends its spans to this OTLP/HTTP endpoint while it runs "
        "(as `forkpoint record --otlp`; docs/otel.md).",
    )
    group.addoption(
        "--forkpoint-otlp-content",
        action="store_true",
        default=False,
        help="With --forkpoint-otlp: include message content, tool arguments and results.",
    )
    parser.addini("forkpoint_mode", "Default forkpoint mode: replay, once, record or rewrite.", default=None)
    parser.addini(
        "forkpoint_otlp", "OTLP/HTTP endpoint that recording tests send their spans to.", default=None
    )
    parser.addini(
        "forkpoint_dir",
        f"Cassette folder, relative to the ini file (default {DEFAULT_DIR.as_posix()}).",
        default=None,
    )
    parser.addini(
        "forkpoint_allow_hosts", "Loopback hosts replayed tests may connect to.", type="linelist", default=[]
    )
    parser.addini(
        "forkpoint_tools",
        "Functions every forkpoint test records (and replays) as tools, one module:qualname a line.",
        type="linelist",
        default=[],
    )


def pytest_configure(config: pytest.Config) -> None:
    if any(re.match(r"forkpoint\s*(?:[:(]|$)", line) for line in config.getini("markers")):
        # (the marker registered only here: without the plugin, pytest's unknown-marker warning, an
        # error under --strict-markers, is all that says a marked test runs live)
        config.issue_config_time_warning(
            pytest.PytestConfigWarning(
                f"forkpoint: the markers option of {config.inipath or 'the configuration'} registers "
                "the marker forkpoint, which the plugin registers itself: a run that does not load the "
                "plugin (-p no:forkpoint, PYTEST_DISABLE_PLUGIN_AUTOLOAD) then runs the marked tests "
                "live without a word. Remove that line (docs/pytest.md)"
            ),
            stacklevel=2,
        )
    config.addinivalue_line(
        "markers",
        "forkpoint(name=None, *, mode=None, allow_hosts=(), allow_unused=False, ignore=(), tools=(), "
        "live_tools=(), on_divergence='stop', deterministic=False, cassette=None): record this test's "
        "model and tool calls into a cassette once and replay them afterwards (docs/pytest.md).",
    )
    ini_mode = config.getini("forkpoint_mode") or None
    if ini_mode is not None and ini_mode not in MODES:
        raise pytest.UsageError(f"forkpoint_mode = {ini_mode!r}: expected one of {', '.join(MODES)}")
    cli_dir = config.getoption("--forkpoint-dir")
    ini_dir = config.getini("forkpoint_dir")
    if cli_dir:
        directory = Path(config.invocation_params.dir) / cli_dir
    elif ini_dir:
        directory = (config.inipath.parent if config.inipath else config.rootpath) / ini_dir
    else:
        directory = config.rootpath / DEFAULT_DIR
    try:
        hosts = loopback_hosts(config.getoption("--forkpoint-allow-host"), "--forkpoint-allow-host")
        hosts |= loopback_hosts(config.getini("forkpoint_allow_hosts"), "forkpoint_allow_hosts")
        tools = tuple(checked_tools(config.getini("forkpoint_tools"), "forkpoint_tools"))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    otlp = config.getoption("--forkpoint-otlp") or config.getini("forkpoint_otlp") or None
    if otlp:
        from .errors import ForkpointError
        from .otel import otlp_traces_url

        try:
            otlp_traces_url(otlp)
        except ForkpointError as exc:
            raise pytest.UsageError(f"--forkpoint-otlp: {exc}") from None
    config.stash[_settings_key] = Settings(
        cli_mode=config.getoption("--forkpoint-mode"),
        ini_mode=ini_mode,
        ci=ci_is_set(),
        directory=directory.resolve(),
        allow_hosts=hosts,
        tools=tools,
        otlp=otlp,
        otlp_content=bool(config.getoption("--forkpoint-otlp-content")),
        floating=not cli_dir and not ini_dir and config.inipath is None,
    )


# --------------------------------------------------------------------------- cassette names


def _safe(text: str) -> str:
    """``text`` reduced to ``[A-Za-z0-9_.-]``; when that loses anything, or it is too long, a short
    hash of the original keeps it unique."""
    safe = _SAFE.sub("-", text).strip("-.")
    if safe != text or len(safe) > _MAX_PART:
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        safe = f"{safe[: _MAX_PART - 9].rstrip('-.')}-{digest}".lstrip("-")
    return safe or "_"


def cassette_parts(item: pytest.Item, name: str | None = None) -> tuple[str, str]:
    """(module folder, test folder) of a test's cassette: stable and filesystem-safe.

    The module is its import name (``tests.test_agent``); the test is ``Class.test_name`` (a nested
    class: ``Outer.Inner.test_name``) plus
    ``-<parametrize id>`` (test names cannot contain ``-``, so the id starts after the first one).
    ``name`` (the marker's) replaces the test part.
    """
    module = getattr(getattr(item, "module", None), "__name__", None)
    if not module:
        module = item.nodeid.split("::", 1)[0].removesuffix(".py").replace("/", ".")
    if name:
        return _safe(module), _safe(name)
    base = getattr(item, "originalname", None) or item.name.split("[", 1)[0]
    # Every enclosing class, as the nodeid has them: TestA.TestInner and TestB.TestInner of one
    # module are two tests, not one cassette.
    classes = [node.name for node in item.listchain() if isinstance(node, pytest.Class)]
    if classes:
        base = ".".join([*classes, base])
    callspec = getattr(item, "callspec", None)
    test = _safe(base)
    if callspec is not None and callspec.id:
        test += "-" + _safe(callspec.id)
    return _safe(module), test


# --------------------------------------------------------------------------- what messages show


def invocation_nodeid(item: pytest.Item, base: Path | None = None) -> str:
    """The argument that selects ``item`` in a pytest run started in ``base`` (default: where this
    run started): its file as :func:`shown_path` gives it, plus the ``::`` part of its nodeid. The
    nodeid itself is relative to the rootdir, which need not be where the user is."""
    base = base or Path(item.config.invocation_params.dir)
    nodeid = item.nodeid
    file = item.getparent(pytest.File)  # type: ignore[type-abstract]
    if file is not None and nodeid.startswith(file.nodeid + "::"):
        return shown_path(file.path, base) + nodeid[len(file.nodeid) :]
    rest = "::" + nodeid.split("::", 1)[1] if "::" in nodeid else ""
    return shown_path(item.path, base) + rest


#: The suffixes of a VCR.py cassette (pytest-recording writes ``<test>.yaml``).
VCR_SUFFIXES = (".yaml", ".yml", ".json", ".yaml.gz")
#: The characters pytest-recording replaces with ``-`` in a test's name to name its cassette.
_VCR_UNSAFE = "<>?%*:|\"'/\\"


def _fixture_value(request: pytest.FixtureRequest | None, name: str, live: bool) -> Any:
    """The value of the fixture ``name`` as the test sees it (a conftest's, or pytest-recording's
    when installed); None when no fixture has that name, or, ``live`` (the test runs live next), when
    the test does not use it: running it would run user code (side effects, a failure) in the live
    run that it never ran; None too when it fails (it needs what CI has not, such as a key): the test
    is told of its cassette, not of that failure."""
    if request is None or live and name not in request.fixturenames:
        return None
    try:
        return request.getfixturevalue(name)
    except Exception:  # (FixtureLookupError: no such fixture)
        return None


def vcr_cassette(
    path: Path, item: pytest.Item, request: pytest.FixtureRequest | None = None, live: bool = False
) -> Path | None:
    """The VCR.py cassette of the test ``item``, whose forkpoint cassette folder is ``path``, where
    pytest-recording keeps it, or beside ``path`` (``<test>.yaml`` beside ``<test>/``); None.
    ``live``: the test runs live next, so only the fixtures it uses are read.

    As pytest-recording names it: in ``cassette_library_dir`` of the ``vcr`` markers or the
    ``vcr_config`` fixture, else in the ``vcr_cassette_dir`` fixture's folder (by default
    ``cassettes/<file's name>/`` beside the test file); the ``default_cassette`` marker's name, else
    the test's (``Class.test_x[a-1]``, ``<>?%*:|"'/\\`` made ``-``) with the serializer's suffix."""
    config = _fixture_value(request, "vcr_config", live)
    merged = dict(config) if isinstance(config, Mapping) else {}
    for marker in reversed(list(item.iter_markers("vcr"))):  # (the closest marker wins)
        merged.update(marker.kwargs)
    library = merged.get("cassette_library_dir") or _fixture_value(request, "vcr_cassette_dir", live)
    folder = Path(library) if library else item.path.parent / "cassettes" / item.path.stem
    chosen = item.get_closest_marker("default_cassette")
    if chosen is not None and chosen.args:
        name = str(chosen.args[0])
    else:
        cls = getattr(item, "cls", None)
        name = f"{cls.__name__}.{item.name}" if cls is not None else item.name
        for ch in _VCR_UNSAFE:
            name = name.replace(ch, "-")
    serializer = merged.get("serializer")
    suffixes = dict.fromkeys([*([f".{serializer}"] if isinstance(serializer, str) else []), *VCR_SUFFIXES])
    candidates = [
        *((folder / name) if name.endswith(s) else (folder / (name + s)) for s in suffixes),
        *(path.parent / (path.name + s) for s in VCR_SUFFIXES),
    ]
    return next((c for c in dict.fromkeys(candidates) if c.is_file()), None)


def rerun_command(item: pytest.Item, mode: str) -> str:
    """A shell command that runs ``item`` in ``mode`` when pasted where this pytest run started.

    It repeats the options of this run that decide where the cassette is and what the test may
    connect to (``-c``, ``--rootdir``, ``--import-mode``, ``-o forkpoint_…``, ``--forkpoint-dir``,
    ``--forkpoint-allow-host``), as given: they are relative to the same directory."""
    return shlex.join(
        ["pytest", f"--forkpoint-mode={mode}", *_run_options(item.config), invocation_nodeid(item)]
    )


def recorded_command(item: pytest.Item) -> list[str]:
    """The command a cassette records (what ``forkpoint replay CASSETTE`` runs, from the current
    directory): ``python -m pytest``, which puts the current directory on ``sys.path`` as the
    user's ``python -m pytest`` did (a bare ``pytest`` does not, and the agent's modules were not
    found), with the options that decide the rootdir and the ini file, and the test."""
    return ["python", "-m", "pytest", *_run_options(item.config), invocation_nodeid(item, Path.cwd())]


def _run_options(config: pytest.Config) -> list[str]:
    args: list[str] = []
    if getattr(config.option, "inifilename", None):
        args += ["-c", str(config.option.inifilename)]
    if getattr(config.option, "rootdir", None):
        args += ["--rootdir", str(config.option.rootdir)]
    # The import mode names the test module (``tests.test_agent`` under importlib, ``test_agent``
    # under prepend), and so the cassette's folder: without it a re-record writes another cassette.
    importmode = getattr(config.option, "importmode", None)
    if importmode and str(importmode) != "prepend":
        args.append(f"--import-mode={importmode}")
    for override in getattr(config.option, "override_ini", None) or ():
        if override.startswith("forkpoint_"):
            args += ["-o", override]
    if config.getoption("--forkpoint-dir"):
        args += ["--forkpoint-dir", str(config.getoption("--forkpoint-dir"))]
    for host in config.getoption("--forkpoint-allow-host") or ():
        args += ["--forkpoint-allow-host", str(host)]
    return args


# --------------------------------------------------------------------------- a test's settings


def _listed(value: Any) -> list[Any]:
    if value is None:
        return []
    return [value] if isinstance(value, str | Mapping | IgnoreRule) else list(value)


def test_settings(item: pytest.Item, config: Any) -> dict[str, Any]:
    """The forkpoint settings of one test: the ``forkpoint_config`` fixture's ``config``, then every
    ``forkpoint`` marker from the farthest (module) to the closest (the test). The settings in
    :data:`LIST_SETTINGS` add up; for the others the closest says. Raises ``pytest.UsageError``
    naming the test and the setting that is unknown."""
    if not isinstance(config, Mapping):
        raise pytest.UsageError(
            f"{item.nodeid}: the forkpoint_config fixture returned a {type(config).__name__}; it returns a "
            "dict of settings (docs/pytest.md)"
        )
    layers = [
        (
            "the forkpoint_config fixture",
            dict(config),
            [k for k in MARKER_KWARGS if k not in ("name", "cassette")],
        )
    ]
    for marker in reversed(list(item.iter_markers("forkpoint"))):
        opts = dict(marker.kwargs)
        if len(marker.args) > 1:
            raise pytest.UsageError(
                f"{item.nodeid}: @pytest.mark.forkpoint takes one name, got {len(marker.args)} arguments "
                f"{marker.args!r}; the other settings are keywords (docs/pytest.md)"
            )
        if marker.args:
            opts.setdefault("name", marker.args[0])
        layers.append(("@pytest.mark.forkpoint", opts, list(MARKER_KWARGS)))
    merged: dict[str, Any] = {}
    for where, opts, known in layers:
        unknown = sorted(set(opts) - set(known))
        if unknown:
            raise pytest.UsageError(
                f"{item.nodeid}: {where} got unknown setting(s) {', '.join(unknown)}; it takes {', '.join(known)}"
            )
        for key, value in opts.items():
            if key in LIST_SETTINGS:
                merged.setdefault(key, []).extend(_listed(value))
            else:
                merged[key] = value
    return merged


# --------------------------------------------------------------------------- the cassette


class Cassette:
    """One test's cassette and what the plugin does with it (the ``forkpoint_session`` fixture).

    Attributes:
        path: the cassette (a forkpoint session directory), whether it exists yet or not.
        mode: the mode in force for this test, and ``mode_reason`` why.
        action: what happens in this test: ``"replay"``, ``"record"`` (live, written as the
            cassette if the test passes) or ``"update"`` (mode ``record`` with a cassette: replayed
            while it matches, live after).
        runtime: the active :class:`~forkpoint.Recorder` or :class:`~forkpoint.Replayer`.
    """

    def __init__(
        self,
        item: pytest.Item,
        settings: Settings,
        config: Any = None,
        tmp_root: Path | None = None,
        request: pytest.FixtureRequest | None = None,
    ) -> None:
        self.item = item
        #: The test's fixture request: where pytest-recording kept its cassette may be a fixture's.
        self.request = request
        self.settings = settings
        opts = test_settings(item, {} if config is None else config)
        nodeid = item.nodeid
        marker_mode = opts.get("mode")
        if marker_mode is not None and marker_mode not in MODES:
            raise pytest.UsageError(
                f"{nodeid}: forkpoint mode={marker_mode!r}: expected one of {', '.join(MODES)}"
            )
        marked = any("mode" in m.kwargs for m in item.iter_markers("forkpoint"))
        source = "the marker's mode" if marked else "the forkpoint_config fixture's mode"
        self.mode, self.mode_reason = settings.mode_for(marker_mode, source)
        self.policy = str(opts.get("on_divergence") or "stop")
        if self.policy not in POLICIES:
            raise pytest.UsageError(
                f"{nodeid}: forkpoint on_divergence={self.policy!r}: expected one of {', '.join(POLICIES)}"
            )
        #: Why the test's ``on_divergence="live"`` is not followed (mode ``replay`` never touches the
        #: network: CI, whatever the markers say), or None. A divergence then fails the test.
        self.live_refused: str | None = None
        if self.policy == "live" and self.mode == "replay":
            self.live_refused = (
                f"(on_divergence='live' is not followed in mode replay ({self.mode_reason}): a replay "
                "never touches the network, so the divergence fails the test as on_divergence='stop' does)"
            )
            self.policy = "stop"
        deterministic = opts.get("deterministic", False)
        if not isinstance(deterministic, bool):
            deterministic = _listed(deterministic)
            if not all(isinstance(m, str) for m in deterministic):
                raise pytest.UsageError(
                    f"{nodeid}: forkpoint deterministic={opts['deterministic']!r}: True, or the agent's module names"
                )
        self.deterministic: bool | list[str] = deterministic
        live_tools = opts.get("live_tools", [])
        if not all(isinstance(t, str) for t in live_tools):
            raise pytest.UsageError(f"{nodeid}: forkpoint live_tools={live_tools!r}: tool names (strings)")
        self.live_tools: list[str] = list(dict.fromkeys(live_tools))
        try:
            self.allow_hosts = settings.allow_hosts | loopback_hosts(
                opts.get("allow_hosts"), f"{nodeid}: allow_hosts"
            )
            self.tools = checked_tools([*settings.tools, *opts.get("tools", [])], f"{nodeid}: tools")
            self.ignore: tuple[IgnoreRule, ...] = ignore_rules(opts.get("ignore", []), f"{nodeid}: forkpoint")
            if tmp_root is not None:
                self.ignore += tmp_path_rules(tmp_root)
        except (ValueError, UsageError, ConfigError) as exc:
            raise pytest.UsageError(str(exc)) from None
        allow_unused = opts.get("allow_unused", False)
        if not isinstance(allow_unused, bool):  # (a string "false" would be true)
            raise pytest.UsageError(f"{nodeid}: forkpoint allow_unused={allow_unused!r}: True or False")
        self.allow_unused = allow_unused
        name = opts.get("name")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise pytest.UsageError(
                f"{nodeid}: forkpoint name={name!r}: the cassette's name, a non-empty string"
            )
        cassette = opts.get("cassette")
        if cassette is not None and (
            not isinstance(cassette, str | os.PathLike) or not str(cassette).strip()
        ):
            raise pytest.UsageError(
                f"{nodeid}: forkpoint cassette={cassette!r}: a folder relative to the test's file, as a string"
            )
        module, test = cassette_parts(item, name)
        self.path: Path = settings.directory / module / test
        place = settings.directory
        if cassette is not None:  # a place of its own, relative to the test's file (forkpoint make-test)
            self.path = Path(item.path).parent / os.fspath(cassette)
            place = self.path.parent
        self.place: Path = place
        settings.places.add(str(place))
        self.action: str | None = None
        self.runtime: Any = None
        self.problem: str | None = None  # the test fails with this before it runs
        self._cm: AbstractContextManager[Any] | None = None
        self._tmp: Path | None = None
        self._lock_fd: int | None = None
        self._anchor: AbstractContextManager[None] | None = None

    # -- helpers

    @property
    def exists(self) -> bool:
        """True when the cassette is on disk."""
        return (self.path / "session.jsonl").is_file()

    def shown(self, path: Path | None = None) -> str:
        """A path for messages: relative to the directory pytest ran in when below it, else
        absolute — so ``forkpoint show <it>`` works where the user is."""
        return shown_path(path or self.path, Path(self.item.config.invocation_params.dir))

    def report(self) -> dict[str, Any] | None:
        """The replay report so far (see :meth:`forkpoint.Replayer.report`), None when recording."""
        from .replay import Replayer

        return self.runtime.report() if isinstance(self.runtime, Replayer) else None

    # -- lifecycle

    def _recording_folder(self) -> Path:
        """A new folder beside the cassette for this run's recording, once those left by runs killed
        while they recorded it are removed (hidden among the cassettes, they were committed with them;
        this run holds the cassette's lock, so none is another run's)."""
        stem = f".{self.path.name}.recording-"
        if self.path.parent.is_dir():
            for stale in self.path.parent.iterdir():
                if stale.name.startswith(stem):
                    shutil.rmtree(stale, ignore_errors=True)
        return self.path.parent / f"{stem}{secrets.token_hex(3)}"

    def start(self) -> None:
        """Decide the action and activate the recorder or replayer."""
        import forkpoint

        from .log import SessionError

        if forkpoint.active() is not None:
            # This pytest runs under `forkpoint record` or `forkpoint replay` (a cassette's recorded
            # command replayed from the CLI): that runtime records or serves the test's calls, under
            # the test's redaction rules as the cassette was (its [match] rules are in the header).
            self.action = "outer"
            self._anchor_config()
            return
        self._lock()  # pytest-xdist: one worker at a time records or replays this cassette
        if not self._anchor_config():
            return
        recorded_as = _header(self.path) if self.exists else None
        # A cassette recorded with or without the agent's clock cannot be updated into the other.
        redo = (
            self.mode == "record"
            and recorded_as is not None
            and bool(recorded_as.get("deterministic")) != bool(self.deterministic)
        )
        if self.mode == "rewrite" or not self.exists or redo:
            # A VCR.py cassette where pytest-recording kept this test's is not read: one migrating
            # from it is told how to import it, not only (or after the fact) to record it live.
            vcr = (
                vcr_cassette(self.path, self.item, self.request, live=self.mode != "replay")
                if not self.exists and self.mode != "rewrite"
                else None
            )
            imported = (
                f"A VCR.py cassette of this test is at {self.shown(vcr)}, which forkpoint does not read: "
                # (into a store of its own: the default one may be a team's bucket, uploaded to)
                # (its module's folder is made first: a cassette kept elsewhere left none there)
                f"import it as this test's cassette with mkdir -p {shlex.quote(self.shown(self.path.parent))} && "
                f'mv "$(forkpoint import --store "$(mktemp -d)" '
                f'{shlex.quote(self.shown(vcr))})" '
                f"{shlex.quote(self.shown())}"
                if vcr is not None
                else ""
            )
            if self.mode == "replay":
                why = f" ({self.mode_reason})" if self.mode_reason != "--forkpoint-mode" else ""
                self.problem = (
                    f"forkpoint: no cassette for this test at {self.shown()}, and mode replay{why} never "
                    + (
                        f"touches the network. {imported}, or record it once, against the real model: "
                        if imported
                        else "touches the network. Record it once, against the real model: "
                    )
                    + rerun_command(self.item, "once")
                )
                return
            if imported:
                self.item.warn(
                    ReplayWarning(
                        f"forkpoint: this test has no cassette at {self.shown()}, so mode {self.mode} ran it "
                        f"live, to record one. {imported} (after removing what this run recorded there)"
                    )
                )
            self.action = "record"
            self._tmp = self._recording_folder()
            # The header's cwd is the current directory: the recorded command selects the test there.
            name, tags = self._named()
            self._cm = forkpoint.record(
                name=name,
                store=self._tmp,
                tags=tags,
                argv=recorded_command(self.item),
                tools=self.tools,
                deterministic=self.deterministic,
                ignore=self.ignore,
                otlp=self.settings.otlp,
                otlp_content=self.settings.otlp_content,
            )
        else:
            self.action = "update" if self.mode == "record" else "replay"
            try:
                session = forkpoint.Session.load(self.path, share_lists=True)
            except SessionError as exc:
                self.problem = f"forkpoint: cannot read the cassette of this test: {exc}"
                return
            from .checkpoint.verify import verify_session

            # As `forkpoint replay` does: an edited line (a hand-tweaked answer, a bad merge) or blob
            # breaks the hash chain, and its answers are not what was recorded.
            checked = verify_session(self.path, git=False, values=False)
            if checked.problems:
                shown = shlex.quote(self.shown())
                self.problem = (
                    f"forkpoint: the cassette of this test fails verification, so it may not be what was "
                    f"recorded: {checked.problems[0]} (forkpoint verify {shown}). Restore it, or "
                    f"re-record it: {rerun_command(self.item, 'rewrite')}"
                )
                return
            if session.truncated:
                # Read up to the cut, it may still pass, and nothing else would say it: the plugin
                # writes whole cassettes, so a cut one was damaged since (or copied, by make-test,
                # from a recording that was killed).
                self.item.warn(
                    ReplayWarning(
                        f"forkpoint: the cassette {self.shown()} ends in an incomplete line: it was "
                        "cut off (a partial checkout, a bad merge, a recording that was killed), and "
                        f"what followed the cut is lost (forkpoint verify {shlex.quote(self.shown())}). "
                        f"Restore it, or re-record it: {rerun_command(self.item, 'rewrite')}"
                    )
                )
            if self.action == "update":
                # The what-if child session is written beside its parent's path: point that at a
                # temporary store, so nothing but cassettes (no child, no store index) lands in the
                # cassette folder. The events are already loaded; the path is only a location.
                self._tmp = self._recording_folder()
                self._tmp.mkdir(parents=True, mode=0o700)
                session = dataclasses.replace(session, path=self._tmp / self.path.name)
                self._cm = forkpoint.replay(
                    session, on_divergence="live", record_child=True, **self._replay_settings()
                )
            else:
                self._cm = forkpoint.replay(
                    session, on_divergence=self.policy, record_child=False, **self._replay_settings()
                )
        try:
            self.runtime = self._cm.__enter__()
        except (ConfigError, UsageError) as exc:
            # a bad [match], [redact] or [store] setting (an encrypt_to recipient) of the configuration
            self._cm = None
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
            self.problem = f"forkpoint: {exc}"
        except BaseException:  # e.g. another forkpoint runtime is active in this process
            self._cm = None
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
            raise

    def _anchor_config(self) -> bool:
        """Read the configuration (``[redact]``, ``[match]``, ``[store]`` of a ``forkpoint.toml`` or
        ``pyproject.toml``) from the test file's folder up, not from the directory pytest was
        started in, until :meth:`finish`: ``pytest proj/tests`` from a parent directory records
        and replays under ``proj/forkpoint.toml``, as ``pytest`` in ``proj/`` does (it had recorded
        with neither its redaction nor its match rules). When no configuration is found from
        there, the search stays where it was. False (and :attr:`problem` says why) for a
        configuration file that cannot be read."""
        from .config import anchored, find_config
        from .errors import ForkpointError
        from .match import load_ignore

        folder = Path(self.item.path).parent
        try:
            found = find_config(folder)
            # The configuration's [match] rules are kept in the cassette's header with the test's
            # own: `forkpoint replay CASSETTE` from where pytest ran (which may not find this
            # configuration) applies them too.
            configured = load_ignore(folder) if found is not None else ()
        except ForkpointError as exc:
            self.problem = f"forkpoint: {exc}"
            return False
        if found is not None:
            self.ignore = tuple(dict.fromkeys((*self.ignore, *configured)))
            self._anchor = anchored(folder)
            self._anchor.__enter__()
        return True

    def _release(self) -> None:
        """Let go of the cassette's lock and of the configuration anchor of :meth:`start`."""
        self._unlock()
        anchor, self._anchor = self._anchor, None
        if anchor is not None:
            anchor.__exit__(None, None, None)

    def _replay_settings(self) -> dict[str, Any]:
        return {
            "allow_hosts": sorted(self.allow_hosts),
            "live_tools": self.live_tools,
            "ignore": self.ignore,
            "tool_targets": self.tools,
        }

    def _lock(self) -> None:
        """Hold this cassette's lock file (in the temporary folder, never among the cassettes) until
        :meth:`finish`. POSIX only: without ``fcntl``, nothing is held."""
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows
            return
        folder = lock_folder()
        name = hashlib.sha256(str(self.path.resolve()).encode("utf-8", "surrogatepass")).hexdigest()[:24]
        self._lock_fd = os.open(folder / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        fcntl.flock(self._lock_fd, fcntl.LOCK_EX)

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases its lock
            self._lock_fd = None

    def check(self) -> tuple[str | None, str | None]:
        """After the test body: (why the replay makes the test fail, a note on unused events).

        Only a replay can fail here; ``update`` and ``record`` runs go live instead of diverging
        (an ``update`` fails only for a connection its replayed part refused, as a replay does).
        A divergence the test's ``on_divergence`` policy (``fifo``, ``live``) went on from is a
        :class:`~forkpoint.errors.ReplayWarning`, not a failure.
        """
        if self.action not in ("replay", "update") or self.runtime is None:
            return None, None
        from .replay import caveat, format_divergence, summary_line, unrecorded_tools

        report = self.runtime.report()
        where = self.shown()
        self._say_unrecorded_programs(report.get("unrecorded_programs") or [], "its recording")
        self._say_unrecorded_tools(unrecorded_tools(report))
        self._say_cache_answers(report.get("answered_from_cache") or {}, "this replay")
        if self.action == "update":
            # Mode record serves the calls that match and goes live from the first that does not;
            # a connection the replayed part refused (the code may have caught the NetworkBlocked)
            # fails the test as it does in a replay, or the run passes here and fails in CI.
            return (self._blocked(report, where) if report.get("network_blocked") else None), None
        fix = f"If the change is intended, re-record it: {rerun_command(self.item, 'record')}"
        unanswered = report.get("unanswered") or []
        if self.policy == "fifo" and unanswered:
            # fifo went on while it had recorded calls to serve; this call got none (the agent may
            # have caught the Divergence): the run did not go on, whatever the test asserts.
            return (
                f"forkpoint: the run left its cassette {where}, and on_divergence='fifo' had no recorded "
                f"call of that endpoint or tool left to serve, so the call got no answer\n"
                f"{format_divergence(unanswered[0])}\n{summary_line(report)}\n{fix}"
            ), None
        if report.get("divergence") and self.policy != "stop":
            self.item.warn(
                ReplayWarning(
                    f"forkpoint: the run left its cassette {where}, and went on (on_divergence="
                    f"{self.policy!r})\n{format_divergence(report['divergence'])}\n{summary_line(report)}\n{fix}"
                )
            )
            return None, None
        if report.get("divergence"):
            refused = f"\n{self.live_refused}" if self.live_refused else ""
            site = report["divergence"].get("site")
            return (
                f"forkpoint: the run diverged from its cassette {where}\n"
                + (f"the call made{site} diverged from the recording.\n" if site else "")
                + f"{format_divergence(report['divergence'])}\n{summary_line(report)}{refused}\n{fix}"
            ), None
        if report.get("network_blocked"):
            return self._blocked(report, where), None
        if but := caveat(report):
            # (what `forkpoint replay` says after "replay ok, but"; on stderr it is captured, unseen)
            self.item.warn(ReplayWarning(f"forkpoint: the replay of its cassette {where} was ok, but {but}"))
        if report.get("unserved") and not self.allow_unused:
            by_seq = {e["seq"]: e for e in self.runtime.recorded}
            labels = [_label(by_seq[s]) for s in report["unserved"]]
            shown = "; ".join(labels[:8]) + (" …" if len(labels) > 8 else "")
            return None, (
                f"forkpoint: {len(labels)} recorded call(s) of cassette {where} went unused — the run made "
                f"fewer calls than when it was recorded: {shown}\n{summary_line(report)}\n{fix} "
                "(or mark the test @pytest.mark.forkpoint(allow_unused=True))"
            )
        return None, None

    def left_as_it_was(self) -> str | None:
        """Why mode ``record`` leaves the cassette of a failed test as it was (the run asked for
        exactly the recorded calls, each served from it), or None. A fix inside a tool's body
        changes no request: the test failed against the old recording and nothing said why."""
        if self.action != "update" or self.runtime is None:
            return None
        from .text import plural

        report = self.runtime.report()
        if report.get("divergence") or report.get("unserved") or report.get("network_blocked"):
            return None
        by_seq = {e["seq"]: e for e in self.runtime.recorded}
        tools = sum(by_seq[s]["type"] == "tool_call" for s in report.get("served") or [] if s in by_seq)
        bodies = (
            f" ({plural(tools, 'tool call')} among them: no tool body runs in a replay, so a change "
            "inside a tool does not show)"
            if tools
            else ""
        )
        return (
            f"forkpoint: mode record left the cassette {self.shown()} as it was: the run asked for "
            f"exactly the recorded calls, each served from it{bodies}. To run the test live and record "
            f"it anew: {rerun_command(self.item, 'rewrite')}"
        )

    def _say_unrecorded_programs(self, started: list[str], when: str) -> None:
        """A :class:`~forkpoint.errors.ReplayWarning` naming the Python programs the test started
        (``when``: in this run, or in its recording) that forkpoint does not record: what forkpoint
        says of them on stderr is captured with the test's output, shown only when it fails."""
        if not started:
            return
        shown = "; ".join(started[:3]) + (" …" if len(started) > 3 else "")
        self.item.warn(
            ReplayWarning(
                f"forkpoint: this test started, in {when}, {len(started)} Python program(s) forkpoint "
                f"does not record ({shown}): a model or tool call they make is not in its cassette "
                f"{self.shown()}, and they run live on every replay. Call them from a @forkpoint.tool, "
                "or record them from inside with forkpoint.record()"
            )
        )

    def _say_cache_answers(self, counts: Mapping[str, int], when: str) -> None:
        """A :class:`~forkpoint.errors.ReplayWarning` saying how many model requests a framework
        answered from its own cache (DSPy's, on disk by default) in ``when``: they are not in the
        cassette, so a replay without that cache (CI's) makes them and fails; said on stderr, that was
        captured with the output of a test that passed, and never seen."""
        from .runtime import cache_off_text, cached_answers_text

        cached = cached_answers_text(counts)
        if not cached:
            return
        self.item.warn(
            ReplayWarning(
                f"forkpoint: in {when}, {cached}: requests never made, so its cassette {self.shown()} "
                "need not hold them, and a replay without that cache (another machine's, a cleared one) "
                f"makes them and may diverge. Record with the cache off ({cache_off_text(counts)})"
            )
        )

    def _say_lacks(self, recorder: Any) -> None:
        """A :class:`~forkpoint.errors.ReplayWarning` for each thing the recording of this test
        lacks that a replay of its cassette needs (a tool result with no stored form, where the
        replay stops; a secret it serves as its placeholder): said on stderr at the end of the
        recording, that was captured with the output of a test that passed, and never seen."""
        lacks, skipped = recorder.tally()
        said = lacks.warnings(tools=False) if lacks is not None else [skipped] if skipped else []
        for lack in said:
            self.item.warn(ReplayWarning(f"forkpoint: recording this test's cassette {self.shown()}: {lack}"))
        if lacks is not None:
            self._say_unrecorded_tools(lacks.unrecorded_tools(), recording=True)

    def _say_unrecorded_tools(self, missing: Mapping[str, int], *, recording: bool = False) -> None:
        """A :class:`~forkpoint.errors.ReplayWarning` naming the tools the model asked for in the
        recording of which the cassette has no calls (a shell agent's ``bash``): if the test's code
        ran them, they ran for real in this replay, and the test passed saying nothing of it.
        ``recording``: said as the cassette is recorded, when naming them still saves every replay
        of it (on stderr alone, it was captured with the output of the test that passed)."""
        if not missing:
            return
        from .capture.targets import parse_target
        from .text import plural

        names = ", ".join(f"{n} ({plural(k, 'call')})" for n, k in missing.items())
        # A tool the test names whose wrapper saw no call: the code calls the function through a
        # reference it took before the test began, which the test's wrapper does not replace.
        named = [t for t in self.tools if parse_target(t)[2] in missing]
        advice = (
            f"They are named ({', '.join(named)}), but the code never called them through that name: "
            "it took the function before this test began (a dict of tools, a framework's registry), "
            "and that one is not wrapped. Name them in "
            "the forkpoint_tools ini option, which wraps them as their module is imported, or put "
            "@forkpoint.tool on the function"
            if named
            else "Name them: @forkpoint.tool on the function, or tools=['MODULE:QUALNAME=NAME'] "
            "(the marker or forkpoint_config)"
        )
        said = (
            f"forkpoint: recording this test's cassette {self.shown()}: the model asked for tools it has "
            f"no calls of: {names}; if the code ran them, every replay of it runs them for real. {advice}"
            if recording
            else f"forkpoint: in the recording of this test the model asked for tools its cassette "
            f"{self.shown()} has no calls of: {names}; if the code ran them, they ran for real in this "
            f"replay. {advice}"
        )
        self.item.warn(ReplayWarning(said))

    @staticmethod
    def _blocked(report: Mapping[str, Any], where: str) -> str:
        from .replay import blocked_text

        return (
            f"forkpoint: the test tried to reach the network during the replay of {where}: {blocked_text(report)}. "
            "A replay never touches the network: make the call through a recorded client or a "
            "@forkpoint.tool, or allow a loopback host (--forkpoint-allow-host 127.0.0.1, or "
            "@pytest.mark.forkpoint(allow_hosts=['127.0.0.1']))."
        )

    def finish(self, outcome: str | None) -> None:
        """Deactivate. A recording becomes the cassette when the test ``passed``, is kept as
        ``<test>.failed`` when it ``failed``, and is dropped otherwise (skipped, xfailed, not run)."""
        if self._cm is None:
            self._release()
            return
        cm, self._cm = self._cm, None
        cm.__exit__(None, None, None)
        if self.action == "record":
            from .capture import programs

            self._say_unrecorded_programs(programs.unrecorded(), "this run")
        counts = self.settings.counts
        rt = self.runtime
        if self.action == "record":
            self._say_cache_answers(rt.cache_answers, "this recording")
            self._say_lacks(rt)
        calls = (
            rt.counts["model_call"] + rt.counts["tool_call"]
            if self.action == "record"
            else sum(e["type"] in ("model_call", "tool_call") for e in rt.recorded)
        )
        if not calls and outcome == "passed":
            # (as pytest's own summary names a test: to paste where pytest ran, not in the rootdir)
            self.settings.empty.add(invocation_nodeid(self.item))
        try:
            if self.action == "record":
                self._keep(self.runtime.session_path, outcome)
            elif self.action == "update":
                report = self.runtime.report()
                child = Path(report["child_session"]) if report.get("child_session") else None
                # (Live tools run live every time: on their own they change nothing.)
                changed = bool(report.get("divergence") or report.get("unserved"))
                if child is not None and changed:
                    self._keep(self._rebuild(child), outcome)
                else:
                    counts["replayed"] += 1
            else:
                counts["replayed"] += 1
        finally:
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
            self._release()

    def _named(self) -> tuple[str, dict[str, str]]:
        """The name and tags a cassette is written with: those of the cassette it replaces (a made
        test's incident name, its ``agent_version`` tag: what ``forkpoint check --tag`` selects it
        by), with the test's node id as its ``pytest`` tag; a cassette the plugin named is named
        by the node id now (a test renamed since)."""
        nodeid = self.item.nodeid
        old = (_header(self.path) if self.exists else None) or {}
        tags = {str(k): str(v) for k, v in (old.get("tags") or {}).items() if v is not None}
        name = old.get("name")
        if not isinstance(name, str) or not name or name == tags.get("pytest"):
            name = nodeid
        return name, {**tags, "pytest": nodeid}

    def _rebuild(self, child: Path) -> Path:
        """A cassette made of a what-if child session's events (served and live alike)."""
        from .errors import SigningError
        from .log import Session, SessionWriter
        from .record import make_header
        from .signing import promise, sign_session

        assert self._tmp is not None
        # make_header's cwd is the current directory: the recorded command selects the test there.
        name, tags = self._named()
        header = make_header(
            argv=recorded_command(self.item),
            name=name,
            tags=tags,
            tools=self.tools,
            deterministic=self.deterministic,
            ignore=self.ignore,
        )
        promise(header)
        writer = SessionWriter.create(self._tmp / "rebuilt", header)
        try:
            loaded = Session.load(child, share_lists=True)
            for event in loaded.events:
                if event["type"] not in ("model_call", "tool_call", "value", "note", "end"):
                    continue
                drop = {"seq", "prev", "hash", "source", "recorded_seq", "override", "summary"}
                if event["type"] == "end":
                    # Where the run left the old cassette: the what-if child's, not the new
                    # cassette's, which is a recording of its own with no parent to diverge from.
                    drop.add("divergence")
                kept = {k: v for k, v in event.items() if k not in drop}
                spec = kept.get("keys", loaded.header.get("keys"))
                if "key" in kept and spec != writer.header.get("keys"):
                    kept["keys"] = spec  # the key was computed under the child's spec (null: unknown)
                writer.append(kept)
        finally:
            writer.close()
        try:  # signed like any recording, so `forkpoint check` of the cassettes runs it as today
            sign_session(writer.path, writer.session_id)
        except SigningError as exc:
            warnings.warn(
                f"forkpoint: the re-recorded cassette {self.path} is not signed: {exc}", stacklevel=1
            )
        return writer.path

    def _keep(self, session: Path, outcome: str | None) -> None:
        if outcome not in ("passed", "failed"):
            return  # the temporary store is removed by finish()
        passed = outcome == "passed"
        counts = self.settings.counts
        target = self.path if passed else self.path.with_name(self.path.name + ".failed")
        target.parent.mkdir(parents=True, exist_ok=True)
        _put_in_place(session, target)
        if self.settings.floating and self.place == self.settings.directory:
            counts["unanchored"] += 1
        if not passed:
            counts["failed"] += 1
        elif self.action == "update":
            counts["updated"] += 1
        else:
            counts["recorded"] += 1
        if passed:  # an older failed recording of this test is now stale
            shutil.rmtree(self.path.with_name(self.path.name + ".failed"), ignore_errors=True)


def _put_in_place(new: Path, target: Path) -> None:
    """Put the directory ``new`` where ``target`` is, replacing the one there whole: swapped in one
    step (or moved aside, then replaced), the old one deleted only after. Deleting it first lost
    the cassette, or left half of it, to a deletion that failed or was interrupted."""
    from .files import exchange_dirs

    if not target.exists():
        os.replace(new, target)
        return
    if exchange_dirs(new, target):
        old = new
    else:
        old = target.with_name(f".{target.name}.old-{secrets.token_hex(3)}")
        os.rename(target, old)
        os.replace(new, target)
    shutil.rmtree(old, ignore_errors=True)


def lock_folder() -> Path:
    """This user's folder of cassette locks in the temporary folder (:func:`~forkpoint.files.user_temp_dir`:
    ``0700``, owned by the user and not a symlink). Raises :class:`pytest.UsageError` naming the
    folder otherwise."""
    from .files import user_temp_dir

    try:
        return user_temp_dir("forkpoint-cassette-locks")
    except OSError as exc:
        raise pytest.UsageError(f"forkpoint: refusing to keep cassette locks there: {exc}") from None


def _header(path: Path) -> dict[str, Any] | None:
    """The header of the cassette at ``path``, or None when it cannot be read (then the replay says why)."""
    from .log import SessionError, read_header

    try:
        return read_header(path / "session.jsonl")
    except (SessionError, OSError):
        return None


def _label(event: dict[str, Any]) -> str:
    if event["type"] == "tool_call":
        return f"seq {event['seq']} tool {event['tool']}"
    if event["type"] == "value":
        return f"seq {event['seq']} value {event['fn']}"
    from urllib.parse import urlsplit

    req = event["request"]
    model = (event.get("summary") or {}).get("model")
    return f"seq {event['seq']} {req['method']} {urlsplit(req['url']).path}" + (
        f" ({model})" if model else ""
    )


# --------------------------------------------------------------------------- fixtures and hooks


@pytest.fixture
def forkpoint_config() -> dict[str, Any]:
    """Settings for the cassettes of the tests that see this fixture: override it in a
    ``conftest.py``, a module or a class to return a dict with the marker's keywords but ``name``
    (``ignore``, ``tools``, ``live_tools``, ``on_divergence``, ``allow_hosts``, ``deterministic``,
    ``mode``, ``allow_unused``). Markers add to its lists and override the rest. Empty here."""
    return {}


def tmp_path_rules(root: Path) -> tuple[IgnoreRule, ...]:
    """Match rules that leave pytest's temporary folder (``tmp_path`` lives under ``root``, a new
    ``pytest-N`` every run, ``popen-gwN`` under pytest-xdist) out of the keys of model calls and
    tool calls: a test that hands ``tmp_path`` to a tool, or a path in it to the model, replays in
    the next run, with or without xdist. The rules are the same in every run (the numbers are any),
    so a session's keys are computed once."""
    if re.fullmatch(r"popen-gw\d+", root.name):  # (a recording with xdist replays without, and back)
        root = root.parent
    numbered = r"(pytest\\-)\d+"  # (in the escaped text: pytest\-130)
    regex = re.sub(numbered, lambda m: m[1] + r"\d+", re.escape(str(root))) + r"(?:/popen\-gw\d+)?"
    return (
        IgnoreRule("$.body", regex, source=OWN_RULES),
        IgnoreRule("$.args", regex, tool="*", source=OWN_RULES),
    )


@pytest.fixture
def forkpoint_session(request: pytest.FixtureRequest) -> Iterator[Cassette]:
    """This test's cassette: recorded on the first run, replayed afterwards (see the module doc).

    Set up before the test's other function-scoped fixtures wherever it is asked for
    (``_forkpoint_marker``), so that it is active before anything calls a model.
    """
    item = request.node
    config = request.getfixturevalue("forkpoint_config")
    try:
        tmp_root = request.getfixturevalue("tmp_path_factory").getbasetemp()
    except pytest.FixtureLookupError:  # (-p no:tmpdir)
        tmp_root = None
    cassette = Cassette(item, item.config.stash[_settings_key], config, tmp_root=tmp_root, request=request)
    item.stash[_cassette_key] = cassette
    try:
        # (in the try: a start that raises lets go of the cassette's lock and of the configuration
        # it anchored, which the next tests, of other projects, were looked up under)
        cassette.start()
        yield cassette
    finally:
        call = item.stash.get(_reports_key, {}).get("call")
        cassette.finish(call.outcome if call is not None else None)


@pytest.fixture(autouse=True)
def _forkpoint_marker(request: pytest.FixtureRequest) -> None:
    """Give every test marked ``@pytest.mark.forkpoint``, or that asks for ``forkpoint_session``
    (among its fixtures, or theirs), its cassette before its other fixtures: one set up before it
    would call the model unrecorded, and live on replay."""
    if (
        request.node.get_closest_marker("forkpoint") is not None
        or "forkpoint_session" in request.fixturenames
    ):
        request.getfixturevalue("forkpoint_session")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    cassette = item.stash.get(_cassette_key, None)
    if cassette is None:
        return (yield)
    if cassette.problem:
        raise _replay_failure(cassette.problem)
    try:
        result = yield
    except BaseException as exc:
        failure, unused = cassette.check()
        # (a skip or an xfail the test raised on the error the divergence caused would pass it in
        # green: the divergence fails it, as any exception does; a Ctrl-C goes on)
        if failure is None or not isinstance(exc, Exception | pytest.skip.Exception | pytest.fail.Exception):
            if unused and isinstance(exc, pytest.skip.Exception | pytest.xfail.Exception):
                done = "skipped" if isinstance(exc, pytest.skip.Exception) else "xfailed"
                head, reason = _say_unused_then_skipped(item, done, unused), str(exc)
                # (the reason changed in place: a new exception would move the skip's location here)
                exc.msg = f"{reason} ({head})" if reason else head
            elif (failure or unused) and isinstance(exc, pytest.exit.Exception | KeyboardInterrupt):
                # (no report of this test follows: the run ends, and its exit status may be 0)
                how = "pytest.exit()" if isinstance(exc, pytest.exit.Exception) else "KeyboardInterrupt"
                cassette.settings.interrupted.append(
                    f"{invocation_nodeid(item)}: {how} ended the run during the replay of cassette "
                    f"{cassette.shown()}, which did not reproduce the recorded run:\n{failure or unused}"
                )
            elif unused:
                item.stash[_unused_key] = unused
            note = (
                failure
                or unused
                or (cassette.left_as_it_was() if isinstance(exc, Exception | pytest.fail.Exception) else None)
            )
            if note:
                item.add_report_section("call", "forkpoint", note)
            raise
        if isinstance(exc, pytest.skip.Exception | pytest.xfail.Exception):
            failure += _then_skipped(exc, "the test itself")
        elif not _caused_by_forkpoint(exc):
            failure += f"\n(the test itself then failed with {_describe(exc)})"
        elif failure.startswith("forkpoint: the run diverged") and "\nthe call made" not in failure:
            from .callsite import agent_call_site

            # Where the agent's own code made the call (the traceback is not shown: pytrace=False).
            site = agent_call_site(exc.__traceback__)
            if site:
                head, _, rest = failure.partition("\n")
                failure = f"{head}\nthe call made{site} diverged from the recording.\n{rest}"
        raise _replay_failure(failure) from None
    failure, unused = cassette.check()
    if failure or unused:
        raise _replay_failure(failure or unused or "")
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    try:
        return (yield)
    except (pytest.skip.Exception, pytest.xfail.Exception) as exc:
        # (a fixture, set up after the cassette, that skips on the error a divergence caused)
        cassette = item.stash.get(_cassette_key, None)
        failure = cassette.check()[0] if cassette is not None and not cassette.problem else None
        if failure is None:
            raise
        raise _replay_failure(failure + _then_skipped(exc, "a fixture of the test")) from None


#: The attribute the plugin's own failure of a test holds True in (:func:`_replay_failure`).
_REPLAY_FAILURE = "_forkpoint_replay_failure"


def _replay_failure(text: str) -> BaseException:
    """The failure a test ends with when its cassette did not reproduce (or cannot be used): never
    the failure an ``xfail`` mark expects (:func:`pytest_runtest_makereport`)."""
    failed = pytest.fail.Exception(text, pytrace=False)
    setattr(failed, _REPLAY_FAILURE, True)
    return failed


def _then_skipped(exc: BaseException, who: str) -> str:
    """The line a divergence's failure ends with when ``who`` then skipped or xfailed (``exc``),
    which would have passed it in green."""
    done = "skipped" if isinstance(exc, pytest.skip.Exception) else "xfailed"
    return f"\n({who} then {done}" + (f": {exc})" if str(exc) else ")")


def _say_unused_then_skipped(item: pytest.Item, done: str, unused: str) -> str:
    """Say in a :class:`~forkpoint.errors.ReplayWarning` (the warnings summary, shown by default)
    that a test ``done`` (skipped, xfailed) before its replay used every recorded call: the run
    ended differently from its recording, which a plain skip hid. Returns what the skip's reason
    adds."""
    item.warn(
        ReplayWarning(
            f"forkpoint: the test {done}, so its replay did not reproduce the recorded run: "
            + unused.removeprefix("forkpoint: ")
        )
    )
    return unused.splitlines()[0]


def _caused_by_forkpoint(exc: BaseException | None) -> bool:
    """True when ``exc`` is (or was caused by) the divergence or blocked connection the report names."""
    from .replay import Divergence, NetworkBlocked

    seen = 0
    while exc is not None and seen < 20:
        if isinstance(exc, Divergence | NetworkBlocked):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (
        f"{type(exc).__name__}: {text[0]}" + (" …" if len(text) > 1 else "") if text else type(exc).__name__
    )


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if call.excinfo is not None and getattr(call.excinfo.value, _REPLAY_FAILURE, False) and report.skipped:
        # (an xfail mark took the replay's failure for the one it expects: xfailed, in green)
        report.outcome = "failed"
        vars(report).pop("wasxfail", None)
    elif report.skipped and "wasxfail" in vars(report) and (unused := item.stash.get(_unused_key, None)):
        # (an xfail mark took the test's own failure, before its replay used every call, for the
        # one it expects)
        report.wasxfail += f" ({_say_unused_then_skipped(item, 'xfailed', unused)})"
    item.stash.setdefault(_reports_key, {})[report.when] = report
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Say what the replays a ``pytest.exit()`` cut short did not reproduce (here: pytest writes no
    summary after ``pytest.exit(returncode=3)``), and exit non-zero for it. A pytest-xdist worker
    hands its cassette counts to the controller (``workeroutput``)."""
    settings = session.config.stash.get(_settings_key, None)
    if settings is not None and settings.interrupted:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("-", "forkpoint", red=True)
            for said in settings.interrupted:
                reporter.write_line(said, red=True)
        if session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    output = getattr(session.config, "workeroutput", None)
    if settings is not None and output is not None:
        output["forkpoint_counts"] = dict(settings.counts)
        output["forkpoint_places"] = sorted(settings.places)
        output["forkpoint_empty"] = sorted(settings.empty)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """The pytest-xdist controller adds up what each worker did, for the summary line."""
    settings = node.config.stash.get(_settings_key, None)
    output = getattr(node, "workeroutput", None) or {}
    counts = output.get("forkpoint_counts") or {}
    if settings is not None:
        settings.places.update(output.get("forkpoint_places") or ())
        settings.empty.update(output.get("forkpoint_empty") or ())
        for key, n in counts.items():
            settings.counts[key] = settings.counts.get(key, 0) + int(n)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    settings = config.stash.get(_settings_key, None)
    if settings is None or not any(settings.counts.values()):
        return
    c = settings.counts
    parts = [f"{c['replayed']} replayed", f"{c['recorded']} recorded", f"{c['updated']} updated"]
    if c["failed"]:
        parts.append(f"{c['failed']} recording(s) of failed tests kept as <test>.failed")
    terminalreporter.write_sep("-", "forkpoint")
    places = ", ".join(sorted(settings.places)) or str(settings.directory)
    terminalreporter.write_line(f"cassettes in {places}: " + ", ".join(parts))
    if c.get("unanchored"):
        terminalreporter.write_line(
            f"WARNING: pytest found no configuration file (pytest.ini, pyproject.toml, tox.ini, setup.cfg), "
            f"so its rootdir, {config.rootpath}, depends on the directory it was started in, and so does "
            f"the cassette folder {settings.directory}: started elsewhere, these tests look for their "
            "cassettes elsewhere and record them again. Add a pytest.ini (or a pyproject.toml) to the "
            "project's root to fix the rootdir (docs/pytest.md).",
            yellow=True,
        )
    if settings.empty:
        empty = sorted(settings.empty)
        terminalreporter.write_line(
            f"WARNING: {len(empty)} cassette(s) hold no model call and no tool call, so they serve nothing: "
            "the test made none in its own process (an agent it runs as a subprocess is not recorded, and "
            "runs live every time): "
            + ", ".join(empty[:5])
            + (f" and {len(empty) - 5} more" if len(empty) > 5 else ""),
            yellow=True,
        )
