"""The kernel's part of an offline replay (Linux): the replayed program runs in a network namespace
of its own whose only interface is loopback, so nothing it starts — a ``curl``, ``os.system``, a
Python subprocess forkpoint does not run in — has a route out.

A process with one thread starts the program in the namespace itself (:class:`Namespace`: the
forked child enters it before it execs the program and hands its packet socket back). A process
with other threads uses the launcher, this file run as a script with the standard library only
(``python -I netns.py REPORT_DIR -- CMD...``), since forking it could copy a lock another thread
holds. Either way the program's process enters a new user and network namespace (``unshare(CLONE_NEWUSER | CLONE_NEWNET)``, the current user mapped to itself), brings
``lo`` up, and routes every other address to loopback as local (``local 0.0.0.0/0`` and
``local ::/0`` in the local table), so that an attempt to leave ends at once (refused) instead of
hanging, and passes a packet socket on ``lo``: the launcher names each attempt (a TCP SYN or a
datagram to a non-loopback address, a DNS query). The launcher writes them to
``REPORT_DIR/netns-PID.json`` (``{"blocked": [...], "refused": [...], "unseen": N}``) when the program ends and exits
with the program's exit code (128 + N when a signal killed it, 127 when it does not exist). Loopback inside the namespace works
as usual (a program's own local servers); the host's loopback is out of reach, which replay does
not need: the parent and the replaying processes talk through files only.

Where the kernel refuses (no user namespaces, a seccomp or AppArmor policy, another OS),
:func:`refused` says why, and replay keeps only the Python guard (:mod:`forkpoint.replay.guard`).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import ipaddress
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
#: Results of the launcher, one file per launcher in the report folder.
RESULT_PREFIX = "netns-"
#: In the report folder: why the launcher's command never ran (not found, not executable).
UNRUN = "netns-command-unrun"
#: Set to ``0`` to keep replays out of a namespace (the Python guard alone), e.g. to compare.
DISABLE_VAR = "FORKPOINT_NETNS"
#: The network namespace forkpoint ran in (:func:`current`), given to a program it confines: one
#: that finds itself in another is inside the replay's namespace (:func:`confined`).
HOST_NETNS_VAR = "FORKPOINT_HOST_NETNS"


def current() -> str | None:
    """This process's network namespace (``net:[4026531840]``), or None where it cannot be told."""
    try:
        return os.readlink("/proc/self/ns/net")
    except OSError:
        return None


def confined() -> bool:
    """True in a process inside a replay's own namespace: its loopback holds only the replay's own
    processes (the host's is out of reach)."""
    host = os.environ.get(HOST_NETNS_VAR)
    here = current()
    return bool(host) and here is not None and here != host


_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_RTM_NEWROUTE, _NLMSG_ERROR = 24, 2
_NLM_F_REQUEST, _NLM_F_ACK, _NLM_F_EXCL, _NLM_F_CREATE = 0x1, 0x4, 0x200, 0x400
_RT_TABLE_LOCAL, _RTPROT_BOOT, _RT_SCOPE_HOST, _RTN_LOCAL, _RTA_OIF = 255, 3, 254, 2, 4
_ETH_P_ALL, _ETH_P_IP, _ETH_P_IPV6, _PACKET_OUTGOING = 0x0003, 0x0800, 0x86DD, 4
_SOL_PACKET, _PACKET_STATISTICS = 263, 6

_probe_lock = threading.Lock()
_probed: list[str | None] = []
_libc: list[ctypes.CDLL] = []


def refused() -> str | None:
    """Why replays cannot run in a network namespace here (in words), or None when they can.
    Probed once per process (a short child process tries it)."""
    with _probe_lock:
        if not _probed:
            _probed.append(_probe())
        return _probed[0]


def _probe() -> str | None:
    if os.environ.get(DISABLE_VAR) == "0":
        return f"{DISABLE_VAR}=0 is set"
    if not sys.platform.startswith("linux"):
        return f"network namespaces are a Linux feature (this is {sys.platform})"
    if threading.active_count() == 1:
        return _probe_in_fork()
    try:  # forking a process with threads may copy a lock another thread holds: a new interpreter
        done = subprocess.run(
            [sys.executable, "-I", __file__, "--probe"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the namespace probe did not run: {exc}"
    return None if done.returncode == 0 else (done.stderr.strip() or f"probe exit code {done.returncode}")


def _probe_in_fork() -> str | None:
    """The probe in a forked child (a millisecond, where a new interpreter takes tens of them): the
    child enters the namespaces exactly as the launcher would, says why it could not, and exits."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        code = 0
        try:
            os.close(read)
            _enter()
        except BaseException as exc:  # anything that stops it is the answer
            os.write(write, str(getattr(exc, "strerror", None) or exc).encode()[:4096])
            code = 1
        os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        why = f.read().decode(errors="replace").strip()
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return None if code == 0 else (why or f"probe exit code {code}")


def command(cmd: list[str], report_dir: Path) -> list[str]:
    """``cmd`` as it runs in a namespace of its own, the launcher writing to ``report_dir``."""
    return [sys.executable, "-I", __file__, str(report_dir), "--", *cmd]


class Seen(NamedTuple):
    """What the namespace's ``lo`` showed while a program ran: the attempts to leave it
    (``blocked``), the loopback ``HOST:PORT``s whose connection was refused (``refused``: nothing
    listened there inside the namespace), and how many packets the kernel dropped ``unseen``."""

    blocked: list[str]
    refused: list[str]
    unseen: int

    def plus(self, other: Seen) -> Seen:
        """Both together."""
        return Seen(self.blocked + other.blocked, self.refused + other.refused, self.unseen + other.unseen)


def results(report_dir: Path) -> Seen:
    """What the launchers that wrote to ``report_dir`` saw: the attempts to leave, named
    (``"93.184.216.34:443"``, ``"203.0.113.9:9999 (udp)"``, ``"example.com (name lookup)"``), the
    loopback ports refused (``"127.0.0.1:5432"``), and how many packets the kernel dropped before
    the launcher could look at them."""
    seen = Seen([], [], 0)
    for path in sorted(report_dir.glob(f"{RESULT_PREFIX}*.json")):
        data = json.loads(path.read_text())
        found = [[str(b) for b in data.get(k) or []] for k in ("blocked", "refused")]
        seen = seen.plus(Seen(found[0], found[1], int(data.get("unseen") or 0)))
    return seen


def _enter() -> None:
    """Enter a new user and network namespace with only ``lo``, up, and every address local to it."""
    uid, gid = os.getuid(), os.getgid()
    if not _libc:
        _libc.append(ctypes.CDLL(None, use_errno=True))
    libc = _libc[0]
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWUSER|CLONE_NEWNET): {os.strerror(err)}")
    # The user is itself inside (files it writes keep their owner); it loses these capabilities
    # when it execs the program, so the program cannot change the namespace's network.
    Path("/proc/self/setgroups").write_text("deny")
    Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
    Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(s, _SIOCGIFFLAGS, ifreq))[1]
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))
    index = socket.if_nametoindex("lo")
    for family in (socket.AF_INET, socket.AF_INET6):
        _local_default_route(family, index)


def _local_default_route(family: int, ifindex: int) -> None:
    """``ip route add local default dev lo table local`` for ``family``, over rtnetlink."""
    rtmsg = struct.pack(
        "BBBBBBBBI", family, 0, 0, 0, _RT_TABLE_LOCAL, _RTPROT_BOOT, _RT_SCOPE_HOST, _RTN_LOCAL, 0
    )
    attr = struct.pack("HHI", 8, _RTA_OIF, ifindex)
    body = rtmsg + attr
    flags = _NLM_F_REQUEST | _NLM_F_ACK | _NLM_F_CREATE | _NLM_F_EXCL
    msg = struct.pack("IHHII", 16 + len(body), _RTM_NEWROUTE, flags, 1, 0) + body
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as nl:
        nl.bind((0, 0))
        nl.send(msg)
        reply = nl.recv(4096)
    kind = struct.unpack_from("H", reply, 4)[0]
    error = struct.unpack_from("i", reply, 16)[0] if kind == _NLMSG_ERROR else 0
    if error:
        raise OSError(-error, f"adding the local default route: {os.strerror(-error)}")


def _dns_name(payload: bytes) -> str | None:
    """The first question's name of a DNS query, or None when ``payload`` is not one."""
    if len(payload) < 13 or payload[2] & 0x80:  # too short, or a response
        return None
    labels: list[str] = []
    i = 12
    while i < len(payload) and payload[i] and len(labels) < 128:
        n = payload[i]
        if n & 0xC0:
            return None
        labels.append(payload[i + 1 : i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    return ".".join(labels) or None


def _attempt(packet: bytes, proto: int) -> tuple[object, str] | None:
    """(a key that is the same for the packets of one attempt, its name) for a packet that tries to
    leave: a TCP SYN, a datagram or a ping to a non-loopback address, or a DNS query to any address
    (one per name: a resolver asks for A and AAAA, and again); or, keyed ``("refused", …)``, the
    reset that refuses a connection to a loopback port nothing listens on in the namespace."""
    if proto == _ETH_P_IP and len(packet) >= 20:
        start, kind = (packet[0] & 0xF) * 4, packet[9]
        src, dst = ipaddress.ip_address(packet[12:16]), ipaddress.ip_address(packet[16:20])
    elif proto == _ETH_P_IPV6 and len(packet) >= 40:
        start, kind = 40, packet[6]
        src, dst = ipaddress.ip_address(packet[8:24]), ipaddress.ip_address(packet[24:40])
    else:
        return None
    host = f"[{dst}]" if dst.version == 6 else str(dst)
    if kind in (6, 17) and len(packet) >= start + 8:
        sport, dport = struct.unpack_from("!HH", packet, start)
        if kind == 17 and dport == 53:
            name = _dns_name(packet[start + 8 :])
            if name is not None:
                return ("dns", name), f"{name} (name lookup)"
        if dst.is_loopback:
            # The kernel refuses a SYN to a closed port with RST+ACK and sequence number 0 (a
            # connection reset later has its own): the host's service it reached when recorded is
            # out of the namespace's reach.
            if kind == 6 and src.is_loopback and len(packet) >= start + 14:
                flags, seq = packet[start + 13], struct.unpack_from("!I", packet, start + 4)[0]
                if flags & 0x3F == 0x14 and seq == 0:
                    where = f"[{src}]" if src.version == 6 else str(src)
                    return ("refused", where, sport), f"{where}:{sport}"
            return None
        if kind == 6:
            syn, ack = packet[start + 13] & 0x02, packet[start + 13] & 0x10
            return (("tcp", sport, host, dport), f"{host}:{dport}") if syn and not ack else None
        return ("udp", sport, host, dport), f"{host}:{dport} (udp)"
    # ICMP: only a ping is an attempt (the rest are the namespace's own replies, "port unreachable")
    if dst.is_loopback or (kind, packet[start : start + 1]) not in ((1, b"\x08"), (58, b"\x80")):
        return None
    return ("ping", host), f"{host} (ping)"


#: Once the program has ended, how long the watcher still reads what is queued (processes the
#: program left behind may go on sending: the replay does not wait for them).
_DRAIN_SECONDS = 1.0


def _watch(sniffer: socket.socket, seen: dict[object, str], stop: threading.Event, wake: int) -> None:
    """Name each attempt to leave that passes ``lo`` until ``stop`` is set (then the file ``wake``
    is readable: the program has ended), then what is still queued, for at most
    :data:`_DRAIN_SECONDS`, and return. (``poll``, not ``select``: a descriptor may be past 1023.)"""
    poller = select.poll()
    for fd in (sniffer.fileno(), wake):
        poller.register(fd, select.POLLIN)
    stop_at: float | None = None
    while True:
        poller.poll()
        while True:  # every packet queued now (the socket does not block)
            if stop_at is None and stop.is_set():
                stop_at = time.monotonic() + _DRAIN_SECONDS
            if stop_at is not None and time.monotonic() >= stop_at:
                return
            try:
                packet, address = sniffer.recvfrom(512)  # headers and a DNS question fit
            except BlockingIOError:
                break
            if address[2] != _PACKET_OUTGOING:  # each packet passes lo twice: out, then in
                continue
            found = _attempt(packet, address[1])
            if found is not None and found[0] not in seen:
                seen[found[0]] = found[1]
        if stop_at is not None:
            return


def _sniffer() -> socket.socket:
    """A packet socket on the namespace's ``lo``, which it keeps watching wherever it is passed."""
    sniffer = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(_ETH_P_ALL))
    sniffer.bind(("lo", 0))
    return sniffer


class _Watcher:
    """A thread naming each attempt to leave that passes ``sniffer`` (:func:`_watch`)."""

    def __init__(self, sniffer: socket.socket) -> None:
        sniffer.setblocking(False)
        # Woken by a byte, not a timeout: the program's end is not waited on by up to one period.
        self._wake, self._woken = os.pipe()
        self.sniffer, self.seen, self.stop = sniffer, dict[object, str](), threading.Event()
        args = (sniffer, self.seen, self.stop, self._wake)
        self.thread = threading.Thread(target=_watch, args=args, daemon=True)
        self.thread.start()

    def finish(self) -> Seen:
        """Stop once nothing is queued, or a second later (:data:`_DRAIN_SECONDS`): what was seen."""
        self.stop.set()
        os.write(self._woken, b"x")
        self.thread.join()
        for fd in (self._wake, self._woken):
            os.close(fd)
        stats = self.sniffer.getsockopt(_SOL_PACKET, _PACKET_STATISTICS, 8)
        self.sniffer.close()
        return Seen(
            [name for key, name in self.seen.items() if not _refusal(key)],
            [name for key, name in self.seen.items() if _refusal(key)],
            struct.unpack("II", stats)[1],
        )


def _refusal(key: object) -> bool:
    return isinstance(key, tuple) and key[0] == "refused"


class Namespace:
    """Starts a program in a namespace of its own from this process, without a launcher: give
    :meth:`preexec` as ``subprocess.Popen``'s ``preexec_fn``, call :meth:`started` once ``Popen``
    returned and :meth:`finished` once the program ended. Only for a process with one thread
    (:func:`confine` decides): the forked child runs Python code before it execs the program.

    The child enters the namespace, opens the packet socket on its ``lo`` and passes it back over a
    socket pair (``SCM_RIGHTS``); this process watches it while the program runs. Where entering
    fails the child says why on its stderr and exits with 125, and the program does not run."""

    def __init__(self) -> None:
        self._mine, self._theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        if not _libc:  # loaded here: the forked child should not load libraries
            _libc.append(ctypes.CDLL(None, use_errno=True))
        self._watcher: _Watcher | None = None

    def preexec(self) -> None:
        """Run in the forked child before it execs the program: enter, hand the socket back."""
        try:
            _enter()
            sniffer = _sniffer()
        except OSError as exc:  # never run unconfined
            os.write(2, f"forkpoint: could not set up the replay's network namespace: {exc}\n".encode())
            os._exit(125)
        socket.send_fds(self._theirs, [b"s"], [sniffer.fileno()])
        sniffer.close()

    def started(self) -> None:
        """Take the packet socket the child passed (none when it could not enter) and watch it."""
        self._theirs.close()
        _, fds, _, _ = socket.recv_fds(self._mine, 1, 1)
        self._mine.close()
        if fds:
            self._watcher = _Watcher(socket.socket(fileno=fds[0]))

    def finished(self) -> Seen:
        """What the program's ``lo`` showed, as :func:`results` says it."""
        for s in (self._mine, self._theirs):
            s.close()
        return self._watcher.finish() if self._watcher is not None else Seen([], [], 0)


def confine(cmd: list[str], report_dir: Path) -> tuple[list[str], Namespace | None]:
    """How to start ``cmd`` in a namespace of its own: as it is, with a :class:`Namespace` to start
    it, where this process has one thread; else through the launcher (:func:`command`), which
    writes what it saw to ``report_dir`` (:func:`results`), and None."""
    if threading.active_count() == 1:
        return cmd, Namespace()
    return command(cmd, report_dir), None


def unrun(program: str, exc: OSError, path: str | None = None, cwd: Path | None = None) -> str:
    """Why exec of ``program`` (looked up on ``path``, from ``cwd``) failed, in words that follow
    "the command …". The kernel's ENOENT for a file that exists is its #! interpreter's: the
    program was found, and saying it was not sent the user looking for the wrong file. (Here, not
    in :mod:`forkpoint.children`: the launcher runs this file alone, ``python -I``.)"""
    if exc.filename is not None and exc.filename != program:  # (cwd, not the program)
        if isinstance(exc, FileNotFoundError) and cwd is not None and str(exc.filename) == str(cwd):
            return f"could not be run in {cwd}: that directory does not exist"
        return f"could not be run: {exc}"
    where = program if "/" in program else shutil.which(program, path=path)
    file = Path(cwd or ".", where) if where is not None else None
    if isinstance(exc, FileNotFoundError):
        if file is None or not file.is_file():
            return "was not found"
        with contextlib.suppress(OSError), file.open("rb") as f:
            line = f.readline(256)
            if line.startswith(b"#!"):
                shebang = line.decode(errors="replace").rstrip("\n")
                if shebang.endswith("\r"):  # (the kernel looks for "/bin/sh\r": the \r does not show)
                    return (
                        f"names an interpreter that was not found: {shebang.strip()} followed by a carriage "
                        "return (the file has Windows line endings, CRLF)"
                    )
                return f"names an interpreter that was not found: {shebang.strip()}"
        return "could not be run: No such file or directory"
    if file is not None and file.is_dir():
        return "is a directory"
    if exc.errno == errno.ENOEXEC:  # a shell would run it with sh; exec does not
        return (
            f"could not be run: it has no #! line naming its interpreter (run it through one: sh {program})"
        )
    return f"could not be run: {exc.strerror}"


def _launch(report_dir: Path, cmd: list[str]) -> int:
    """Run ``cmd`` in a new namespace, name its attempts to leave, and return its exit code."""
    _enter()
    sniffer = _sniffer()
    pid = os.fork()
    if pid == 0:  # the program: default signal handling, as subprocess gives it
        sniffer.close()
        for sig in (signal.SIGINT, signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        try:
            os.execvp(cmd[0], cmd)
        except OSError as exc:
            why = unrun(cmd[0], exc, os.environ.get("PATH", os.defpath))
            sys.stderr.write(f"forkpoint: the command {cmd[0]} {why}\n")
            with contextlib.suppress(OSError):  # (for the CLI: no process ran, so none reported)
                fd = os.open(report_dir / UNRUN, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
                try:
                    os.write(fd, why.encode())
                finally:
                    os.close(fd)
            os._exit(127 if isinstance(exc, FileNotFoundError) else 126)
    # Ctrl-C reaches the program through the terminal's process group; SIGTERM and SIGHUP sent to
    # this launcher are passed on.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda signum, _frame: os.kill(pid, signum))
    watcher = _Watcher(sniffer)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    seen = watcher.finish()
    out = report_dir / f"{RESULT_PREFIX}{os.getpid()}.json"
    tmp = out.with_name(out.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(seen._asdict(), f)
    os.replace(tmp, out)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


def main(argv: list[str]) -> int:
    """The launcher's command line: ``--probe``, or ``REPORT_DIR -- CMD...``."""
    if argv == ["--probe"]:
        try:
            _enter()
        except OSError as exc:
            sys.stderr.write(f"{exc.strerror or exc}\n")
            return 1
        return 0
    if len(argv) < 3 or argv[1] != "--":
        sys.stderr.write("usage: netns.py REPORT_DIR -- CMD...\n")
        return 2
    try:
        return _launch(Path(argv[0]), argv[2:])
    except OSError as exc:  # refused after the probe said yes: say so, never run unconfined
        sys.stderr.write(f"forkpoint: could not set up the replay's network namespace: {exc}\n")
        return 125


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
