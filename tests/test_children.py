"""forkpoint.children: a child's captured output, kept in files as it comes, and the wait for it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
        with out.named() as path:
            assert path.read_bytes() == b"out\r\n\xff"
        assert not path.exists()  # (named while an outcome command reads it only)
        assert (out.text(), err.text(), err.text(last=7)) == ("out\r\n\ufffd", "err, no newline", "newline")
        assert proc.stdout is not None and proc.stdout.closed


HOLDS = """
import os, signal, sys
from forkpoint.children import Captured
kept = Captured("what an arm printed")
print("holding", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_what_a_killed_forkpoint_captured_is_not_left_behind(tmp_path: Path) -> None:
    """A Ray worker the OOM killer ended (SIGKILL: no cleanup runs) left each arm's captured
    output in $TMPDIR as forkpoint-output-* files, however big. Unnamed, it goes with the process."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", HOLDS], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == -9 and done.stdout == "holding\n", done.stderr
    assert list(tmp_path.iterdir()) == []


def test_where_the_file_cannot_be_linked_the_outcome_reads_a_named_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without /proc (linkat of /proc/self/fd/N), the outcome command gets a read-only copy by name."""
    from forkpoint import children

    def no_proc(fd: int, directory: str) -> str:
        raise FileNotFoundError(2, "No such file or directory", f"/proc/self/fd/{fd}")

    monkeypatch.setattr(children, "_link", no_proc)
    printed = children.Captured("what the run printed")
    with printed.named() as path:
        assert (path.read_text(), path.stat().st_mode & 0o777) == ("what the run printed", 0o400)
    assert not path.exists()
