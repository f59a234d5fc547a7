"""Waiting on a child process: its captured output copied to temporary files as it comes (none of
it held in memory), the process stopped when a watch gives a reason (a timeout), and what it left
running with that output open not waited on (a server in the background would be waited on
forever). Used for the programs forkpoint runs (:mod:`forkpoint.orchestrate`) and for outcome
commands (:mod:`forkpoint.outcome`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import selectors
import signal
import subprocess
import tempfile
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from .text import say

#: Signal names by number, for an exit code of 128 + N.
SIGNALS = {int(s): s.name for s in signal.Signals}

#: How long, once the child ended, forkpoint waits for what it started to close its captured output.
LEFT_OPEN_S = 2.0
#: Bytes read from a captured pipe at a time.
READ_SIZE = 1 << 16


class Captured:
    """What a child printed on one of its streams, written to a temporary file as it came: however
    much it printed (an arm of a fork, a test runner's output), forkpoint holds none of it in memory,
    and the bytes are the child's own (no newline or encoding translation). What the file cannot
    take (a full disk) is dropped, counted in :attr:`lost` and said. The file has no name where the
    kernel allows it (``O_TMPFILE``), so it goes with forkpoint's descriptor even when forkpoint is
    killed (a Ray worker the OOM killer ended left an arm's output behind); it is named only while
    an outcome command reads it (:meth:`named`). Else it is named, and removed when this is closed
    or collected, or forkpoint exits. Read back through its own descriptor, never by a name."""

    def __init__(self, text: str = "") -> None:
        self._dir = tempfile.gettempdir()
        self._fd, self._name = _new_file(self._dir)
        self._end = weakref.finalize(self, _remove, self._fd, self._name)
        #: Bytes printed that the file could not take, dropped.
        self.lost = 0
        if text:
            self.write(text.encode())

    @contextlib.contextmanager
    def named(self) -> Iterator[Path]:
        """A name for the file, read-only, while the block runs (the outcome command reads it, and
        may move or remove it: what the run printed is read again from the descriptor)."""
        os.fchmod(self._fd, 0o400)
        if self._name is not None:
            yield Path(self._name)
            return
        try:
            name = _link(self._fd, self._dir)
        except OSError:  # (no /proc, say): a named copy
            fd, name = tempfile.mkstemp(prefix=PREFIX, dir=self._dir)
            with os.fdopen(fd, "wb") as f:
                self.copy_to(f)
            os.chmod(name, 0o400)
        try:
            yield Path(name)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)

    @property
    def size(self) -> int:
        """Bytes kept."""
        return os.fstat(self._fd).st_size

    def write(self, data: bytes) -> None:
        """Append ``data``; what the file cannot take is dropped, never raised: the child goes on
        printing, and forkpoint waiting for it (raised, the wait ended, and the child ran on alone)."""
        rest = memoryview(data)
        if not self.lost:
            try:
                while rest:
                    rest = rest[os.write(self._fd, rest) :]
            except OSError as exc:
                say(
                    f"forkpoint: what a program printed could not all be kept ({exc.strerror or exc}, "
                    f"in {self._dir}): the rest of it is dropped"
                )
        self.lost += len(rest)

    def _chunks(self, start: int = 0) -> Iterator[bytes]:
        """What was printed from byte ``start`` on, a buffer at a time."""
        while chunk := os.pread(self._fd, READ_SIZE, start):
            yield chunk
            start += len(chunk)

    def text(self, last: int | None = None) -> str:
        """What was printed, decoded as UTF-8 (U+FFFD for what is not); with ``last``, only its
        last ``last`` characters, read from the end of the file."""
        # (a character is at most 4 bytes)
        start = 0 if last is None else max(0, self.size - 4 * last)
        text = b"".join(self._chunks(start)).decode(errors="replace")
        return text if last is None else text[-last:]

    def copy_to(self, dest: BinaryIO) -> None:
        """Write what was printed to ``dest``, a buffer at a time."""
        for chunk in self._chunks():
            dest.write(chunk)

    def close(self) -> None:
        """Remove the file now."""
        self._end()


#: The name of a captured output's file (when it has one) begins so.
PREFIX = "forkpoint-output-"
#: linkat(2)'s "the current directory" and its flag to follow ``/proc/self/fd/N`` to the file.
_AT_FDCWD, _AT_SYMLINK_FOLLOW = -100, 0x400


def _new_file(directory: str) -> tuple[int, str | None]:
    """A new file in ``directory`` for a :class:`Captured`: (descriptor, None) for one without a
    name where the kernel and file system allow it (Linux 3.11, ``O_TMPFILE``), else (descriptor,
    its name)."""
    if hasattr(os, "O_TMPFILE"):
        with contextlib.suppress(OSError):  # (a file system without it: a named one)
            return os.open(directory, os.O_TMPFILE | os.O_RDWR, 0o600), None
    return tempfile.mkstemp(prefix=PREFIX, dir=directory)


def _link(fd: int, directory: str) -> str:
    """Give the unnamed file ``fd`` a new name in ``directory`` (linkat(2) through
    ``/proc/self/fd``, which ``os.link`` does not follow); returns it. Raises OSError."""
    import ctypes  # (only when an outcome command reads a run's output)

    libc = ctypes.CDLL(None, use_errno=True)
    source = f"/proc/self/fd/{fd}".encode()
    while True:
        name = os.path.join(directory, PREFIX + secrets.token_hex(6))
        if libc.linkat(_AT_FDCWD, source, _AT_FDCWD, os.fsencode(name), _AT_SYMLINK_FOLLOW) == 0:
            return name
        err = ctypes.get_errno()
        if err != errno.EEXIST:
            raise OSError(err, os.strerror(err), name)


def _remove(fd: int, name: str | None) -> None:
    """A :class:`Captured`'s end: its descriptor closed, its file's name removed (unless gone)."""
    os.close(fd)
    if name is not None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


def wait_child(
    proc: subprocess.Popen[bytes],
    watch: Callable[[], str | None] | None,
    *,
    own_group: bool = False,
    what: str = "the program",
) -> tuple[Captured | None, Captured | None]:
    """Wait for ``proc`` (``what`` it runs, in messages), copying what it prints on its captured
    stdout and stderr (binary pipes) to a :class:`Captured` each (None for a stream not
    captured), and stop it when ``watch`` gives a reason (a timeout; asked every half second:
    :func:`forkpoint.orchestrate.run_child`):
    SIGTERM, then SIGKILL 3 s later; with ``own_group`` (it leads a process group of its own) to
    all of its group, and what is left of the group once it ended is killed, so nothing it started
    changes its folder after it was stopped (an outcome is measured there next). Once it is
    stopped, a process it started in a session of its own (out of reach of its group's SIGKILL)
    that still holds the captured output open is not waited for: what was read is kept. So it is
    when the program ended by itself and what it left running holds its output open
    (:data:`LEFT_OPEN_S` later; with ``own_group``, that group is killed). Without ``watch``, its
    captured output is read to the end, however long that takes. Raising (it cannot be waited
    for), it is killed first (with ``own_group``, its group) and reaped."""
    pipes = [pipe for pipe in (proc.stdout, proc.stderr) if pipe is not None]
    streams: _Streams | None = None
    try:
        captured = {pipe: Captured() for pipe in pipes}
        streams = _Streams(proc, captured)
        _wait(proc, watch, streams, own_group=own_group, what=what)
    except BaseException:
        # (no wait, out of descriptors say: the child, an arm's agent live, ran on alone after
        # forkpoint had gone, its output unread)
        if own_group:
            signal_group(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait()
        raise
    finally:
        if streams is not None:
            streams.close()
        for pipe in pipes:  # (a process the child left running that writes to one gets EPIPE)
            pipe.close()
    out = captured[proc.stdout] if proc.stdout is not None else None
    return out, captured[proc.stderr] if proc.stderr is not None else None


class _Streams:
    """A child's captured pipes, and the child itself where the kernel gives a descriptor for it
    (``pidfd_open``, Linux 5.3), watched with one selector: a wait ends the moment output comes or
    the child ends (``Popen.wait`` with a timeout polls, up to 50 ms late)."""

    def __init__(self, proc: subprocess.Popen[bytes], captured: dict[Any, Captured]) -> None:
        self.proc = proc
        self.selector = selectors.DefaultSelector()
        for pipe, into in captured.items():
            self.selector.register(pipe, selectors.EVENT_READ, into)
        #: The pipes not at their end yet.
        self.open = len(captured)
        self.pidfd: int | None = None
        try:
            self.pidfd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):  # (not Linux, or too old a kernel: the process is polled)
            pass
        else:
            self.selector.register(self.pidfd, selectors.EVENT_READ, None)

    def read(self, timeout: float | None) -> None:
        """Copy what the pipes hold to their :class:`Captured` (a pipe at its end is no longer
        watched), waiting up to ``timeout`` seconds (None: as long as it takes) for output or the
        child's end."""
        if not self.selector.get_map():
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
            return
        for key, _ in self.selector.select(timeout):
            if key.data is None:  # (the child ended: its descriptor stays readable)
                self.selector.unregister(key.fileobj)
                continue
            data = os.read(key.fd, READ_SIZE)
            if data:
                key.data.write(data)
            else:
                self.selector.unregister(key.fileobj)
                self.open -= 1

    def close(self) -> None:
        """Stop watching (the pipes are closed by :func:`wait_child`)."""
        self.selector.close()
        if self.pidfd is not None:
            os.close(self.pidfd)


def _wait(
    proc: subprocess.Popen[bytes],
    watch: Callable[[], str | None] | None,
    streams: _Streams,
    *,
    own_group: bool,
    what: str,
) -> None:
    """:func:`wait_child`'s loop: read what comes, and look at the process every half second."""
    stop_at: float | None = None
    ended_at: float | None = None
    look_at = time.monotonic()
    while True:
        streams.read(0.5 if watch is not None else None)
        if proc.poll() is not None and not streams.open:
            if stop_at is not None and own_group:
                signal_group(proc.pid, signal.SIGKILL)
            return
        now = time.monotonic()
        if watch is None or now < look_at:
            continue
        look_at = now + 0.5
        if stop_at is None and proc.poll() is not None:
            # The program ended, and what it started and left running (a server in the background)
            # still holds its captured output open: not waited for (it may never end), and, in a
            # group of its own, stopped, so that nothing changes its folder while an outcome is measured.
            ended_at = ended_at if ended_at is not None else now
            if now > ended_at + LEFT_OPEN_S:
                say(
                    f"forkpoint: {what} ended, and a process it started still holds its output open: "
                    + ("its process group is stopped; " if own_group else "")
                    + "not waited for"
                )
                if own_group:
                    signal_group(proc.pid, signal.SIGKILL)
                return
            continue
        if stop_at is None:
            why = watch()
            if why is not None:
                say(f"forkpoint: {why}: stopping it")
                if own_group:
                    signal_group(proc.pid, signal.SIGTERM)
                else:
                    proc.send_signal(signal.SIGTERM)
                stop_at = now + 3
        elif now > stop_at + 3 and proc.poll() is not None:
            say(
                f"forkpoint: a process {what} started outside its process group still holds its output open: "
                "not waited for"
            )
            return
        elif now > stop_at:
            try:  # (a child with a group of its own, an executor task's: what it started goes too)
                if os.getpgid(proc.pid) == proc.pid:
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    proc.kill()
            except ProcessLookupError:
                pass


def signal_group(pgid: int, sig: int) -> None:
    """Send ``sig`` to process group ``pgid`` (gone already: nothing to do)."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
