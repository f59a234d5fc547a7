"""Offline replay enforced by the kernel (docs/security.md, "Offline replay"): without live calls the
replayed command runs in a network namespace with only loopback, so a UDP datagram, a ``curl`` and
a Python subprocess forkpoint does not run in have no route out; each attempt is named in the
report's ``network_blocked`` and counted in the summary line. Where the kernel refuses a namespace
the tests that need one skip, saying why; the Python guard's part (UDP ``sendto`` refused) is
tested in both."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import forkpoint
from forkpoint import netns
from forkpoint.errors import NetworkBlocked
from tests.cliutil import QUOTE_AGENT, forkpoint_cli

AGENT = QUOTE_AGENT

# Replayed instead of the agent (a named command). It sends a datagram from the replayed process,
# which the guard refuses before anything is sent. The addresses are documentation ranges (RFC 5737),
# which lead nowhere even where there is a network.
UDP_LEAK = """
import os
import shutil
import socket
import subprocess
import sys
import threading

import forkpoint


@forkpoint.tool
def quote(ticker):
    raise AssertionError("a tool body ran on replay")


print(quote("ACME")["price"])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
try:
    s.sendto(b"leak", ("203.0.113.9", 9999))
    print("udp: sent")
except OSError as exc:
    print("udp:", type(exc).__name__)
"""

# ...then reaches out from processes forkpoint does not run in. Only ever replayed inside the network
# namespace, where these packets have no route: nothing leaves the machine.
LEAK = (
    UDP_LEAK
    + """
if shutil.which("curl"):
    os.system("curl -s -m 5 -o /dev/null http://198.51.100.7:8080/")
child = (
    "import socket; s = socket.socket(); s.settimeout(5); print('child:', s.connect_ex(('192.0.2.1', 443)));"
    "srv = socket.socket(); srv.bind(('127.0.0.1', 0)); srv.listen();"
    "print('loopback:', socket.create_connection(srv.getsockname()).getpeername()[0])"
)
subprocess.run([sys.executable, "-c", child])
"""
)


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return forkpoint_cli(args, cwd, env, timeout=90)


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if k not in ("FORKPOINT_STORE", "FORKPOINT_NETNS")}
    (tmp_path / "agent.py").write_text(AGENT)
    (tmp_path / "leak.py").write_text(LEAK)
    (tmp_path / "udp_leak.py").write_text(UDP_LEAK)
    rec = run(["record", "--store", "store", "--", sys.executable, "agent.py"], tmp_path, env)
    assert rec.returncode == 0, rec.stderr
    return tmp_path, env


@pytest.mark.slow
def test_the_kernel_keeps_every_process_of_a_replay_offline(recorded: tuple[Path, dict[str, str]]) -> None:
    where, env = recorded
    if netns.refused() is not None:
        # Without a namespace, leak.py's subprocesses would really send packets off this machine;
        # the fallback (the guard) is tested by the next test, with the datagram only.
        pytest.skip(f"the kernel refuses a network namespace here: {netns.refused()}")
    rep = run(
        ["replay", "last", "--store", "store", "--report", "r.json", "--", sys.executable, "leak.py"],
        where,
        env,
    )
    report = json.loads((where / "r.json").read_text())
    assert report["sandbox"] == "network namespace"
    blocked = report["network_blocked"]
    assert "203.0.113.9:9999 (udp)" in blocked  # refused by the guard in the replayed process
    assert "192.0.2.1:443" in blocked  # a Python subprocess forkpoint does not run in: the kernel
    assert "child: 111" in rep.stdout  # refused at once (ECONNREFUSED), not hanging
    if shutil.which("curl"):
        assert "198.51.100.7:8080" in blocked
    assert "loopback: 127.0.0.1" in rep.stdout  # the namespace's own loopback works (in the child)
    assert rep.returncode == 3  # reaching for the network is not a reproduction
    assert f"network blocked ({len(blocked)}): " in rep.stderr
    assert "without a network namespace" not in rep.stderr


@pytest.mark.slow
def test_where_there_is_no_namespace_it_says_so_once_and_the_guard_refuses_udp(
    recorded: tuple[Path, dict[str, str]],
) -> None:
    where, env = recorded
    env = {**env, netns.DISABLE_VAR: "0"}
    rep = run(
        ["replay", "last", "--store", "store", "--report", "r.json", "--", sys.executable, "udp_leak.py"],
        where,
        env,
    )
    assert rep.stderr.count("without a network namespace (FORKPOINT_NETNS=0 is set)") == 1
    report = json.loads((where / "r.json").read_text())
    assert report["sandbox"] == "python guard"
    assert "udp: NetworkBlocked" in rep.stdout
    assert report["network_blocked"][0] == "203.0.113.9:9999 (udp)"
    assert rep.returncode == 3


def test_the_guard_refuses_udp_sendto_and_sendmsg_in_process(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with forkpoint.record(store=store):
        pass
    with forkpoint.replay("last", store=store) as rp:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        with pytest.raises(NetworkBlocked, match="a datagram to 203.0.113.9:53"):
            s.sendto(b"x", ("203.0.113.9", 53))
        with pytest.raises(NetworkBlocked):
            s.sendto(b"x", 0, ("203.0.113.9", 54))
        with pytest.raises(NetworkBlocked):
            s.sendmsg([b"x"], [], 0, ("203.0.113.9", 55))
        s.close()
    assert rp.network_blocked == ["203.0.113.9:53 (udp)", "203.0.113.9:54 (udp)", "203.0.113.9:55 (udp)"]


def test_the_probe_in_a_forked_child_answers_as_the_launcher_does() -> None:
    """A replay asks once per process whether the kernel gives it a namespace; in a process without
    other threads it asks a forked child (no new interpreter). Both probes give the same answer."""
    launcher = subprocess.run(
        [sys.executable, "-I", netns.__file__, "--probe"], capture_output=True, text=True
    )
    forked = netns._probe_in_fork()
    assert (forked is None) == (launcher.returncode == 0), (forked, launcher.stderr)


# Run as a script of its own, so that the process has one thread (pytest's may have more): starts a
# program through `netns.confine` as `forkpoint replay` does and prints what came back, as JSON.
CONFINED = """
import json, subprocess, sys
from pathlib import Path
from forkpoint import netns

if sys.argv[1] == "refuse":
    def refuse():
        raise PermissionError(1, "refused for the test")
    netns._enter = refuse
if sys.argv[1] == "many-fds":  # the packet socket and its wake-up pipe land past 1023 (select's limit)
    import os, resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
    kept = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
cmd = [sys.executable, "-c", sys.argv[2]]
run, namespace = netns.confine(cmd, Path(sys.argv[3]))
proc = subprocess.Popen(run, preexec_fn=namespace.preexec, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
namespace.started()
out, err = proc.communicate()
seen = namespace.finished()
print(json.dumps({"same": run == cmd, "code": proc.returncode, "out": out, "err": err, "blocked": seen.blocked}))
"""

# The program: reaches out by TCP and UDP, and lists its network interfaces.
REACHES_OUT = (
    "import os, socket; s = socket.socket(); s.settimeout(5); print('tcp', s.connect_ex(('192.0.2.1', 443)));"
    "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('203.0.113.9', 9999));"
    "print('interfaces', [name for _, name in socket.if_nameindex()]);"
    "open(os.environ.get('MARK', os.devnull), 'w').write('ran')"
)


def confined(tmp_path: Path, mode: str) -> dict[str, object]:
    if netns.refused() is not None:
        pytest.skip(f"the kernel refuses a network namespace here: {netns.refused()}")
    done = subprocess.run(
        [sys.executable, "-c", CONFINED, mode, REACHES_OUT, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MARK": str(tmp_path / "ran")},
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_a_process_with_one_thread_starts_the_program_in_the_namespace_itself(tmp_path: Path) -> None:
    """No launcher interpreter: the forked child enters the namespace before it execs the program,
    and hands its packet socket back, so this process names what the program tried."""
    result = confined(tmp_path, "enter")
    assert result["same"] is True  # the program itself, not the launcher script
    assert result["code"] == 0, result["err"]
    assert "tcp 111" in str(result["out"])  # refused at once
    assert "interfaces ['lo']" in str(result["out"])
    assert result["blocked"] == ["192.0.2.1:443", "203.0.113.9:9999 (udp)"]
    assert not list(tmp_path.glob(f"{netns.RESULT_PREFIX}*"))  # nothing went through files


def test_a_process_with_many_files_open_still_names_what_the_program_tried(tmp_path: Path) -> None:
    import resource

    # The case needs descriptors past 1023; where the hard limit forbids them it cannot arise either.
    if resource.getrlimit(resource.RLIMIT_NOFILE)[1] < 1200:
        pytest.skip("the hard limit on open files is too low to open 1,100 of them")
    result = confined(tmp_path, "many-fds")
    assert result["code"] == 0, result["err"]
    assert result["blocked"] == ["192.0.2.1:443", "203.0.113.9:9999 (udp)"]


# The program tries to leave once, then leaves a process behind, in a session of its own and without
# the program's files, that goes on sending on lo for a minute; it writes its pid down so the test can
# stop it.
LEAVES_A_SENDER = (
    "import os, socket, sys, time\n"
    "socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('203.0.113.9', 7))\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    open(sys.argv[1], 'w').write(str(os.getpid()))\n"
    "    for fd in (0, 1, 2): os.close(fd)\n"
    "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
    "    end = time.monotonic() + 60\n"
    "    while time.monotonic() < end: s.sendto(b'x', ('127.0.0.1', 9))\n"
    "    os._exit(0)\n"
    "while not os.path.exists(sys.argv[1]): time.sleep(0.01)\n"
)


def test_the_replay_ends_with_its_program_not_with_what_the_program_left_behind(tmp_path: Path) -> None:
    """Once the program has ended, what is still queued on lo is read for at most a second: a
    process it left behind that keeps sending does not hold the replay open."""
    # Only a replay in a namespace watches lo (elsewhere the in-process guard refuses, tested above).
    if netns.refused() is not None:
        pytest.skip(f"the kernel refuses a network namespace here: {netns.refused()}")
    pid_file = tmp_path / "sender.pid"
    cmd = [sys.executable, "-I", netns.__file__, str(tmp_path), "--", sys.executable, "-c", LEAVES_A_SENDER]
    try:
        done = subprocess.run([*cmd, str(pid_file)], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert netns.results(tmp_path)[0] == ["203.0.113.9:7 (udp)"]
    finally:
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_where_the_child_cannot_enter_the_namespace_the_program_never_runs(tmp_path: Path) -> None:
    result = confined(tmp_path, "refuse")
    assert result["code"] == 125
    assert "could not set up the replay's network namespace: [Errno 1] refused for the test" in str(
        result["err"]
    )
    assert result["out"] == "" and result["blocked"] == []
    assert not (tmp_path / "ran").exists()  # never unconfined


def test_a_process_with_threads_starts_the_program_through_the_launcher(tmp_path: Path) -> None:
    """Forking a process with other threads may copy a lock one of them holds: the launcher runs the
    program instead, and writes what it saw to the report folder."""
    if netns.refused() is not None:
        pytest.skip(f"the kernel refuses a network namespace here: {netns.refused()}")
    release = threading.Event()
    other = threading.Thread(target=release.wait)
    other.start()
    try:
        cmd = [sys.executable, "-c", REACHES_OUT]
        run, namespace = netns.confine(cmd, tmp_path)
    finally:
        release.set()
        other.join()
    assert namespace is None and run == [sys.executable, "-I", netns.__file__, str(tmp_path), "--", *cmd]
    done = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "tcp 111" in done.stdout and "interfaces ['lo']" in done.stdout
    assert netns.results(tmp_path) == (["192.0.2.1:443", "203.0.113.9:9999 (udp)"], [], 0)


OWN_SERVER = """
import socket
import threading

import forkpoint


@forkpoint.tool
def answer() -> str:
    return "42"


srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen()


def serve() -> None:
    for _ in range(2):
        conn, _ = srv.accept()
        conn.sendall(conn.recv(100).upper())
        conn.close()


threading.Thread(target=serve, daemon=True).start()
for host in ("127.0.0.1", "localhost"):  # (a name lookup of localhost too)
    with socket.create_connection((host, srv.getsockname()[1]), timeout=5) as s:
        s.sendall(b"hello cache")
        print("own server:", s.recv(100).decode())
print("tool:", answer())
"""


@pytest.fixture
def own_server(tmp_path: Path) -> tuple[Path, dict[str, str], str]:
    """OWN_SERVER recorded with the CLI: (its folder, the environment, what it printed)."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORKPOINT_STORE", "FORKPOINT_NETNS")}
    (tmp_path / "own.py").write_text(OWN_SERVER)
    rec = run(["record", "--store", "store", "--no-workspace", "--", sys.executable, "own.py"], tmp_path, env)
    assert rec.returncode == 0, rec.stderr
    assert rec.stdout == "own server: HELLO CACHE\nown server: HELLO CACHE\ntool: 42\n"
    return tmp_path, env, rec.stdout


@pytest.mark.slow
def test_a_program_reaches_its_own_local_server_in_the_replays_namespace(
    own_server: tuple[Path, dict[str, str], str],
) -> None:
    """docs/security.md said loopback works inside the namespace (a program's own local servers),
    but the guard in the program refused every connect: a program that starts a local cache and
    talks to it did not reproduce ("network blocked: 127.0.0.1:…"). In the namespace, where only
    the replay's own processes listen on loopback, it is let through."""
    where, env, printed = own_server
    if netns.refused() is not None:
        # What is tested is the namespace's own loopback, which a kernel that refuses namespaces
        # does not have; the guard alone, which every machine has, is the next test.
        pytest.skip(f"the kernel refuses a network namespace here: {netns.refused()}")
    rep = run(["replay", "last", "--store", "store"], where, env)
    assert rep.returncode == 0, rep.stderr
    assert rep.stdout == printed and "replay ok: 1/1" in rep.stderr


@pytest.mark.slow
def test_without_a_namespace_the_guard_refuses_loopback(own_server: tuple[Path, dict[str, str], str]) -> None:
    """Outside the replay's namespace a loopback port may be the host's (a service that ran beside
    the recording): the guard alone refuses it, and the replay says so."""
    where, env, _ = own_server
    alone = run(["replay", "last", "--store", "store"], where, {**env, netns.DISABLE_VAR: "0"})
    assert alone.returncode == 3 and "network blocked (1): 127.0.0.1:" in alone.stderr, alone.stderr


HOST_SERVICE = """
import socket
import sys

import forkpoint


@forkpoint.tool
def answer() -> str:
    return "42"


try:
    with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5) as s:
        print("host service:", s.recv(100).decode())
except OSError as exc:
    print("host service:", type(exc).__name__)
print("tool:", answer())
"""


@pytest.mark.slow
def test_a_host_service_out_of_the_namespaces_reach_is_named(tmp_path: Path) -> None:
    """A program that talked to a service of the host on loopback (a local database, a cache) when
    recorded found nothing listening there in the replay's namespace: it went another way, and the
    replay said only that it ended differently. The refused connection is named."""
    if netns.refused() is not None:
        # What is tested is the namespace's watch of its own loopback, which a kernel that refuses
        # namespaces does not give a replay (the guard alone refuses loopback: tested above).
        pytest.skip(f"the kernel refuses a network namespace here: {netns.refused()}")
    env = {k: v for k, v in os.environ.items() if k not in ("FORKPOINT_STORE", "FORKPOINT_NETNS")}
    (tmp_path / "uses_host.py").write_text(HOST_SERVICE)
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]

        def serve() -> None:
            conn, _ = srv.accept()
            conn.sendall(b"up")
            conn.close()

        threading.Thread(target=serve, daemon=True).start()
        cmd = ["--store", "store", "--no-workspace", "--", sys.executable, "uses_host.py", str(port)]
        rec = run(["record", *cmd], tmp_path, env)
    assert rec.returncode == 0 and rec.stdout == "host service: up\ntool: 42\n", rec.stderr
    rep = run(["replay", "last", "--store", "store", "--report", "r.json"], tmp_path, env)
    assert "host service: ConnectionRefusedError" in rep.stdout, rep.stdout + rep.stderr
    said = " ".join(rep.stderr.split())
    assert f"connections refused on loopback: 127.0.0.1:{port} (nothing listened there" in said, rep.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["loopback_refused"] == [f"127.0.0.1:{port}"] and report["network_blocked"] == []
