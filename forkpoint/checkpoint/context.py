"""Carried context: the message prefix a checkpoint keeps, and the files those messages refer to."""

from __future__ import annotations

import os
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


def referenced_paths(context: dict[str, Any], *, root: str | None = None) -> list[str]:
    """Relative file paths the carried messages mention in tool calls and tool results, sorted.

    Looks at tool-call arguments and tool results, as the providers find them
    (:func:`forkpoint.providers.tool_call_arguments`, :func:`forkpoint.providers.is_tool_result`):
    path-valued arguments, and path-shaped tokens. Absolute paths under ``root`` (the recorded
    workspace) count, made relative.
    """
    found: set[str] = set()
    prefix = root.rstrip("/") + "/" if root else None

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

    def walk(node: Any, in_tool: bool = False) -> None:
        if isinstance(node, dict):
            for args in tool_call_arguments(node):
                scan_args(args)
            tool_result = is_tool_result(node)
            for v in node.values():
                walk(v, in_tool or tool_result)
        elif isinstance(node, list):
            for v in node:
                walk(v, in_tool)
        elif isinstance(node, str) and in_tool:
            scan_text(node)

    walk(context)
    return sorted(
        p for p in found if p and not PurePosixPath(p).is_absolute() and ".." not in PurePosixPath(p).parts
    )


def resolve_ref(root: Path, cwd: str | None, ref: str) -> str | None:
    """The path (relative to ``root``) that ``ref`` names, trying the agent's directory first."""
    for base in ([cwd] if cwd else []) + [""]:
        rel = os.path.normpath(os.path.join(base, ref)).replace(os.sep, "/")
        if not rel.startswith("../") and os.path.lexists(root / rel):
            return rel
    return None
