"""What-if runs are sessions: the child session a replay with overrides, live sources or a lenient
policy records, linked to its parent (``docs/format.md``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..events import EndDivergence
from ..log import Session, SessionError
from ..match import header_rules
from ..record import make_header
from ..store import Recording, open_store


def create_child(
    parent: Session,
    *,
    argv: list[str],
    models: str,
    tools: str,
    on_divergence: str,
    overrides: list[str],
    seq: int | None = None,
    name: str | None = None,
    into: Path | None = None,
    live_tools: Sequence[str] = (),
    cwd: Path | None = None,
    zone: str | None = None,
    hash_seed: int | None = None,
    experiment: str | None = None,
) -> Recording:
    """A new session for a what-if run of ``parent`` (header ``parent`` and ``replay`` say how it was
    made), in the store ``into`` (default: the folder the parent is in). It keeps the parent's tool
    targets, ``deterministic``, ignore rules and encryption. ``cwd``: the directory the run runs in
    (a fork's arm: its own; default this process's), kept with its git state; ``zone``: the time
    zone its program runs in (default this process's); ``hash_seed``: the ``PYTHONHASHSEED`` it runs
    with, when forkpoint sets it; ``experiment``: the id of the fork or sweep whose arm it is. The
    caller ends it."""
    header = make_header(
        argv=argv,
        cwd=cwd,
        name=name or f"what-if of {parent.id}",
        tags={k: v for k, v in (parent.header.get("tags") or {}).items() if v is not None},
        parent={"session_id": parent.id, "seq": seq},
        deterministic=parent.header.get("deterministic") or False,
        ignore=header_rules(parent.header),
    )
    header["tools"] = parent.header.get("tools") or []
    if zone:
        header["timezone"] = zone
    if hash_seed is not None:
        header["hash_seed"] = hash_seed
    header["replay"] = {
        "models": models,
        "tools": tools,
        "on_divergence": on_divergence,
        "overrides": overrides,
    }
    if live_tools:
        header["replay"]["live_tools"] = list(live_tools)
    if experiment:
        header["replay"]["experiment"] = experiment
    if parent.header.get("encryption") is not None:  # what the parent hid, its children hide too
        header["encryption"] = parent.header["encryption"]
    return open_store(into or parent.path.parent).create(header)


def end_divergence(report: dict[str, Any], child: Path | None = None) -> EndDivergence | None:
    """Where a what-if run first went another way than its parent, as its session's ``end`` keeps
    it (:class:`~forkpoint.events.EndDivergence`), from the run's replay ``report``: None when it
    did not diverge. ``seq`` is the call of this run in session ``child`` (the ``position``-th call
    of its kind there), when that call was written (a call that stopped the run was not)."""
    div = report.get("divergence")
    if not isinstance(div, dict):
        return None
    kind, position = str(div.get("kind")), int(div.get("position") or 0)
    expected = div.get("expected") or {}
    out: EndDivergence = {
        "kind": kind,
        "position": position,
        "seq": None,
        "parent_seq": div.get("served_seq", expected.get("seq")),
        "label": str(expected.get("label") or div.get("name") or div.get("endpoint") or ""),
        "reason": str(div.get("reason") or ""),
        "diff": list(div.get("diff") or [])[:50],
    }
    if div.get("call") in ("http", "mcp"):
        out["call"] = div["call"]
    if isinstance(div.get("diff_against"), int):
        out["diff_against"] = div["diff_against"]
    if isinstance(div.get("model_position"), int):
        out["model_position"] = div["model_position"]
    if child is not None:
        try:
            same = [e for e in Session.load(child, share_lists=True).calls() if e["type"] == kind]
        except SessionError:
            same = []
        if 0 < position <= len(same):
            out["seq"] = same[position - 1]["seq"]
    return out
