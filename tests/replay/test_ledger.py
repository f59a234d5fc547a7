"""The ledger the processes of one replay share: its lock excludes processes that fork made too."""

from __future__ import annotations

import os
import time
from pathlib import Path

import forkpoint
from forkpoint.log import Session
from forkpoint.replay import Replayer, open_ledger


def test_forked_processes_take_the_ledger_one_at_a_time(tmp_path: Path, store: Path) -> None:
    """A flock belongs to the open file description, which fork shares: a multiprocessing pool's
    workers all held the ledger "exclusively" at once, two served one recorded call, and a fork
    pool's replay ended "DID NOT REPRODUCE" in half the runs."""

    @forkpoint.tool
    def step() -> int:
        return 1

    with forkpoint.record(store=store) as rec:
        step()
    ledger = open_ledger(tmp_path / "ledger")
    assert ledger is not None
    rp = Replayer(Session.load(rec.session_path), ledger=ledger)
    times = tmp_path / "times"
    children = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 0
            try:
                rp.forked(lambda: None)  # what a replaying process does in a child fork made
                with ledger.exclusive():
                    start = time.monotonic()
                    time.sleep(0.2)
                    with open(times, "a") as f:
                        f.write(f"{start} {time.monotonic()}\n")
            except BaseException:
                code = 1
            os._exit(code)
        children.append(pid)
    assert all(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0 for pid in children)
    spans = sorted(tuple(map(float, line.split())) for line in times.read_text().splitlines())
    assert len(spans) == 3
    assert all(later[0] >= earlier[1] for earlier, later in zip(spans, spans[1:], strict=False)), spans
