"""The ledger the processes of one replay share: which recorded calls have been served, so no two
processes serve the same one (a recording made by a shell script that ran several programs)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


class Ledger:
    """Which recorded calls the processes of one replay have served: a replay of a recording that
    several processes made (``forkpoint record -- sh -c "python a.py && python b.py"``).

    An append-only file of served seqs, one per line, under an exclusive ``flock`` while a process
    chooses a call, so no two processes serve the same recorded call and identical calls in
    different processes get the answers in recorded order. POSIX only: where ``fcntl`` is missing,
    :func:`open_ledger` returns None and each process replays on its own.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        self._offset = 0

    @contextmanager
    def exclusive(self) -> Iterator[list[int]]:
        """Hold the ledger; yields the seqs other processes claimed since this one last looked."""
        import fcntl

        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            size = os.fstat(self._fd).st_size
            new = os.pread(self._fd, size - self._offset, self._offset) if size > self._offset else b""
            self._offset = size
            yield [int(line) for line in new.split()]
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def claim(self, seqs: Sequence[int]) -> None:
        """Record ``seqs`` as served by this process (call inside :meth:`exclusive`)."""
        if seqs:
            os.write(self._fd, "".join(f"{s}\n" for s in seqs).encode())
            self._offset = os.fstat(self._fd).st_size

    def reopen(self) -> None:
        """In a child made by ``fork()``: a file description of its own. A ``flock`` belongs to the
        open file description, which fork shares: the parent's and the child's holds would not
        exclude each other, and two processes could serve one recorded call."""
        old, self._fd = self._fd, os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        os.close(old)

    def close(self) -> None:
        os.close(self._fd)


def open_ledger(path: Path) -> Ledger | None:
    """A :class:`Ledger` at ``path``, or None where file locks are unavailable (Windows)."""
    try:
        import fcntl  # noqa: F401
    except ImportError:
        return None
    return Ledger(path)
