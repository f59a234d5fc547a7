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
    Python's ``json`` in the same style (its lone surrogates as UTF-8 would write them, were they
    allowed), which gives equal values equal bytes but is no canonical form to verify a line by.
    """
    try:
        return orjson.dumps(value, default=json_default, option=_OPTS)
    except orjson.JSONEncodeError as exc:
        if exotic:
            try:
                text = json.dumps(
                    value, default=json_default, sort_keys=True, separators=(",", ":"), ensure_ascii=False
                )
                return text.encode("utf-8", "surrogatepass")
            except (TypeError, ValueError):  # (not JSON data after all)
                pass
        raise TypeError(f"not canonical JSON data: {exc}") from exc


def sha256_hex(data: bytes) -> str:
    """SHA-256 of ``data`` as 64 lowercase hex characters."""
    return hashlib.sha256(data).hexdigest()


def digest(value: Any, *, exotic: bool = False) -> str:
    """SHA-256 hex of the canonical JSON of ``value``: the one content hash forkpoint uses
    (``exotic``: see :func:`canonical_json`)."""
    return sha256_hex(canonical_json(value, exotic=exotic))
