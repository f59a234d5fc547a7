"""A library of recordings at work: many sessions or arms at once.

:mod:`.select` (which sessions a check runs), :mod:`.check` (``forkpoint check``: the library as a
suite, or an A/B test against each session's recorded tool world), :mod:`.junit` (its JUnit XML),
:mod:`.sweep` (``forkpoint sweep``: fork arms from every checkpoint, the pass rate by checkpoint),
:mod:`.maketest` (``forkpoint make-test``: an incident becomes a test) and :mod:`.tables` (what
they print). The work runs on an executor (:mod:`forkpoint.executors`), here or on Ray.
"""

from .check import ab_summary, check_sessions, check_task, counts, exit_code, verdict_text
from .junit import write_junit
from .maketest import ident_for, make_test
from .select import Candidate, Selection, parse_since, select
from .sweep import SweepPlan, plan_sweep, sweep_checkpoints

__all__ = [
    "Candidate",
    "Selection",
    "SweepPlan",
    "ab_summary",
    "check_sessions",
    "check_task",
    "counts",
    "exit_code",
    "ident_for",
    "make_test",
    "parse_since",
    "plan_sweep",
    "select",
    "sweep_checkpoints",
    "verdict_text",
    "write_junit",
]
