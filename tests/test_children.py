"""forkpoint.children: a child's captured output, kept in files as it comes, and the wait for it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from forkpoint.children import wait_child

PRINTS = r"""
import os, sys
sys.stdout.buffer.write(b"out\r\n\xff")
sys.stdout.flush()
os.write(2, b"err, no newline")
"""


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polled"])
def test_what_a_child_prints_is_kept_as_its_bytes(pidfd: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Both streams come back as printed (no newline translation, bytes that are not UTF-8 kept),
    with the child's end seen through its pidfd or, on a kernel without one, by polling."""
    if not pidfd:

        def no_pidfd(pid: int) -> int:
            raise OSError("pidfd_open: not implemented")

        monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    for watch in (None, lambda: None):
        proc = subprocess.Popen(
            [sys.executable, "-c", PRINTS], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        out, err = wait_child(proc, watch)
        assert out is not None and err is not None and proc.returncode == 0
        assert out.path.read_bytes() == b"out\r\n\xff"
        assert (out.text(), err.text(), err.text(last=7)) == ("out\r\n\ufffd", "err, no newline", "newline")
        assert proc.stdout is not None and proc.stdout.closed
        kept = out.path
        out.close()
        assert not kept.exists()
