"""Carried context: the message prefix a checkpoint keeps, and the files those messages refer to."""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from pathlib import Path, PurePosixPath
from typing import Any

import orjson

from ..patterns import compiled_later
from ..providers import context_fields, is_tool_result, tool_call_arguments

#: Request-body fields that make up the carried context, in every registered provider's format.
CONTEXT_FIELDS = context_fields()


def carried_context(body: Any) -> dict[str, Any]:
    """The context fields of a model request body (messages and system prompt, per provider shape)."""
    if not isinstance(body, dict):
        return {}
    return {k: body[k] for k in CONTEXT_FIELDS if k in body}


_PATH_KEYS = compiled_later(
    r"(?i)^(path|file|filename|file_path|filepath|target|dest|destination|src|source_file|name)$"
)


# A relative path with an extension that starts with a letter ("calc.py", "src/a.test.ts"; not "3.11").
_PATH_TOKEN = compiled_later(r"(?<![\w/.-])((?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z][A-Za-z0-9]{0,7})(?![\w/-])")
_ABS_TOKEN = compiled_later(r"(?<![\w.-])(/(?:[\w.-]+/)*[\w-][\w.-]*\.[A-Za-z][A-Za-z0-9]{0,7})(?![\w/-])")


#: What :func:`referenced_paths` found in each message it scanned, by (workspace prefix, whether the
#: message is inside a tool result, digest of the message's JSON): every checkpoint of a recording
#: carries the whole conversation so far, so scanning each one whole was quadratic in its turns (the
#: 301 checkpoints of 300 turns with 10 KB tool results: 16 s of scanning, 0.9 s with this).
_SCANNED: OrderedDict[tuple[str | None, bool, bytes], frozenset[str]] = OrderedDict()
#: Messages remembered (the oldest forgotten first): a few MB of digests and paths at most.
SCANNED_MAX = 16384
_scanned_lock = threading.Lock()


def referenced_paths(context: dict[str, Any], *, root: str | None = None) -> list[str]:
    """Relative file paths the carried messages mention in tool calls and tool results, sorted.

    Looks at tool-call arguments and tool results, as the providers find them
    (:func:`forkpoint.providers.tool_call_arguments`, :func:`forkpoint.providers.is_tool_result`):
    path-valued arguments, and path-shaped tokens. Absolute paths under ``root`` (the recorded
    workspace) count, made relative. Each message (an item of a list of ``context``) is scanned once
    per process, however many checkpoints carry it.
    """
    found: set[str] = set()
    _walk(context, root.rstrip("/") + "/" if root else None, found, top=True)
    return sorted(
        p for p in found if p and not PurePosixPath(p).is_absolute() and ".." not in PurePosixPath(p).parts
    )


def _message_paths(message: Any, prefix: str | None, in_tool: bool) -> frozenset[str]:
    """The paths :func:`_walk` finds in one message of a carried context, remembered by its content."""
    try:
        key = (prefix, in_tool, hashlib.blake2b(orjson.dumps(message), digest_size=16).digest())
    except TypeError:  # (not JSON data: scanned each time)
        key = None
    if key is not None:
        with _scanned_lock:
            got = _SCANNED.get(key)
            if got is not None:
                _SCANNED.move_to_end(key)
                return got
    found: set[str] = set()
    _walk(message, prefix, found, in_tool)
    paths = frozenset(found)
    if key is not None:
        with _scanned_lock:
            _SCANNED[key] = paths
            while len(_SCANNED) > SCANNED_MAX:
                _SCANNED.popitem(last=False)
    return paths


def _walk(
    node: Any, prefix: str | None, found: set[str], in_tool: bool = False, *, top: bool = False
) -> None:
    """Add to ``found`` the paths mentioned in ``node``; ``top``: ``node`` is the carried context
    itself, whose lists' items (the messages) are scanned through :func:`_message_paths`."""

    def scan_text(text: str) -> None:
        for m in _PATH_TOKEN.finditer(text):
            token = m.group(1)
            if "://" not in text[max(0, m.start() - 10) : m.start() + 3] and not token.startswith("."):
                found.add(token)
        if prefix and prefix in text:
            for m in _ABS_TOKEN.finditer(text):
                if m.group(1).startswith(prefix):
                    found.add(m.group(1)[len(prefix) :])

    def scan_args(args: Any) -> None:
        if isinstance(args, str):
            try:
                args = orjson.loads(args)
            except orjson.JSONDecodeError:
                scan_text(args)
                return
        if isinstance(args, dict):
            for k, v in args.items():
                if isinstance(v, str) and _PATH_KEYS.match(k) and _PATH_TOKEN.fullmatch(v):
                    found.add(v)
                elif isinstance(v, str):
                    scan_text(v)
                elif isinstance(v, dict | list):
                    scan_args(v)
        elif isinstance(args, list):
            for v in args:
                scan_args(v)
        elif isinstance(args, str):
            scan_text(args)

    def walk(node: Any, in_tool: bool, messages: bool = False) -> None:
        if isinstance(node, dict):
            for args in tool_call_arguments(node):
                scan_args(args)
            tool_result = is_tool_result(node)
            for v in node.values():
                walk(v, in_tool or tool_result, messages=top and node is root_node)
        elif isinstance(node, list):
            for v in node:
                if messages:
                    found.update(_message_paths(v, prefix, in_tool))
                else:
                    walk(v, in_tool)
        elif isinstance(node, str) and in_tool:
            scan_text(node)

    root_node = node
    walk(node, in_tool)


def resolve_ref(root: Path, cwd: str | None, ref: str) -> str | None:
    """The path (relative to ``root``) that ``ref`` names, trying the agent's directory first."""
    for base in ([cwd] if cwd else []) + [""]:
        rel = os.path.normpath(os.path.join(base, ref)).replace(os.sep, "/")
        if not rel.startswith("../") and os.path.lexists(root / rel):
            return rel
    return None
