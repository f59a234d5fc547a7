"""What-if runs are sessions: the child session a replay with overrides, live sources or a lenient
policy records, linked to its parent (``docs/format.md``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..log import Session
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
) -> Recording:
    """A new session for a what-if run of ``parent`` (header ``parent`` and ``replay`` say how it was
    made), in the store ``into`` (default: the folder the parent is in). It keeps the parent's tool
    targets, ``deterministic`` and ignore rules. The caller ends it."""
    header = make_header(
        argv=argv,
        name=name or f"what-if of {parent.id}",
        tags={k: v for k, v in (parent.header.get("tags") or {}).items() if v is not None},
        parent={"session_id": parent.id, "seq": seq},
        deterministic=parent.header.get("deterministic") or False,
        ignore=header_rules(parent.header),
    )
    header["tools"] = parent.header.get("tools") or []
    header["replay"] = {
        "models": models,
        "tools": tools,
        "on_divergence": on_divergence,
        "overrides": overrides,
    }
    if live_tools:
        header["replay"]["live_tools"] = list(live_tools)
    return open_store(into or parent.path.parent).create(header)
