"""Canonical JSON and content hashes.

Every hash forkpoint writes (match keys, the log's hash chain, blob names, message digests) is
SHA-256 over *canonical JSON*: UTF-8, object keys sorted by code point, no insignificant whitespace,
numbers as orjson writes them (shortest round-trip form). Parsing a canonical document and writing it
again gives the same bytes, which is what lets ``forkpoint verify`` recompute a hash from a log line.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import orjson

from .deltalist import json_default

_OPTS = orjson.OPT_SORT_KEYS


def canonical_json(value: Any, *, exotic: bool = False) -> bytes:
    """Return the canonical JSON encoding of ``value`` (bytes, UTF-8).

    ``value`` must be plain JSON data (dict with str keys, list, str, int, float, bool, None; a
    loaded request's :class:`~forkpoint.deltalist.DeltaList` counts as a list). Raises
    ``TypeError`` for anything else, and for integers outside the signed/unsigned 64-bit range and
    strings with lone surrogates, unless ``exotic``: then a value holding those is written by
    :func:`python_json` with sorted keys, which gives equal values equal bytes but is no canonical
    form to verify a line by.
    """
    try:
        return orjson.dumps(value, default=json_default, option=_OPTS)
    except orjson.JSONEncodeError as exc:
        if exotic:
            try:
                return python_json(value, sort_keys=True)
            except (TypeError, ValueError):  # (not JSON data after all)
                pass
        raise TypeError(f"not canonical JSON data: {exc}") from exc


def python_json(value: Any, *, indent: bool = False, sort_keys: bool = False) -> bytes:
    """``value`` as JSON text (RFC 8259) by Python's ``json``, for what orjson refuses but JSON
    holds: integers beyond 64 bits, and strings with lone surrogates (escaped as ``\\udXXX``, as all
    that is not ASCII). Compact, or ``indent`` by two spaces. Raises ``TypeError`` for what is not
    JSON data (``ValueError`` for a list that holds itself)."""
    separators = None if indent else (",", ":")
    text = json.dumps(
        value, default=json_default, indent=2 if indent else None, separators=separators, sort_keys=sort_keys
    )
    return text.encode("ascii")


def sha256_hex(data: bytes) -> str:
    """SHA-256 of ``data`` as 64 lowercase hex characters."""
    return hashlib.sha256(data).hexdigest()


def digest(value: Any, *, exotic: bool = False) -> str:
    """SHA-256 hex of the canonical JSON of ``value``: the one content hash forkpoint uses
    (``exotic``: see :func:`canonical_json`)."""
    return sha256_hex(canonical_json(value, exotic=exotic))


def maybe_json(text: Any) -> Any:
    """JSON text to a value (tool-call arguments, which models send as JSON text); anything else,
    and text that is no JSON, as it is."""
    if isinstance(text, str):
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            return text
    return text
