"""``forkpoint check --junit-xml FILE``: the check's rows as a JUnit XML report for CI.

The shape CI servers read (Jenkins' and GitLab's JUnit importers, the Ant ``junitreport`` schema that
pytest's ``--junit-xml`` also writes): ``<testsuites>`` with one ``<testsuite name tests failures
errors skipped time timestamp>`` holding one ``<testcase classname name time>`` per session; a session
that diverged or ended differently has a ``<failure message type>``, one that could not be checked an
``<error message type>``, each with the details as text, and the program's stderr in
``<system-err>``. Characters XML 1.0 cannot hold are replaced by U+FFFD.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..files import write_private
from ..redact import scrub_json
from .check import AB_STATUSES, verdict_text

# Characters outside XML 1.0's Char production (control characters but tab, LF and CR; surrogates;
# U+FFFE and U+FFFF).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _text(value: Any) -> str:
    return _NOT_XML.sub("\ufffd", str(value or ""))


def write_junit(rows: list[dict[str, Any]], path: Path, *, seconds: float, ab: bool = False) -> Path:
    """Write ``rows`` (:func:`forkpoint.suite.check.check_sessions`) to ``path`` as JUnit XML,
    atomically (a temp file, then rename). ``ab`` rows fail only when their run failed."""
    # (the program's stderr and the details are what a replayed program printed: a secret it
    # printed is scrubbed, as the rows of --json are)
    rows = scrub_json(rows)
    ok = AB_STATUSES if ab else ("reproduced",)
    failures = sum(1 for r in rows if r["status"] not in ok and r["status"] != "error")
    errors = sum(1 for r in rows if r["status"] == "error")
    suites = ET.Element("testsuites")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="forkpoint check" + (" --models live" if ab else ""),
        tests=str(len(rows)),
        failures=str(failures),
        errors=str(errors),
        skipped="0",
        time=f"{seconds:.3f}",
        timestamp=datetime.now(UTC).replace(microsecond=0).isoformat(),
    )
    for r in rows:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=_text(f"forkpoint.check.{r.get('name') or 'session'}"),
            name=_text(r["session_id"]),
            time=f"{float(r.get('seconds') or 0):.3f}",
        )
        if r["status"] not in ok:
            kind = "error" if r["status"] == "error" else "failure"
            details = [r.get("location"), r.get("divergence") or r.get("detail")]
            element = ET.SubElement(case, kind, message=_text(verdict_text(r)), type=_text(r["status"]))
            element.text = _text("\n".join(str(d) for d in details if d))
        if r.get("stderr"):
            ET.SubElement(case, "system-err").text = _text(r["stderr"])
    return write_private(path, ET.tostring(suites, encoding="utf-8", xml_declaration=True))
