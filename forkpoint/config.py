"""Configuration: forkpoint's tables of the user's TOML file (``[redact]`` today).

Where forkpoint looks, first match wins:

1. ``$FORKPOINT_CONFIG``: a TOML file, read as a whole (its ``[redact]`` table; a
   ``[tool.forkpoint.redact]`` table also works, so it may point at a ``pyproject.toml``);
2. from the current directory up to the filesystem root, in each directory: ``forkpoint.toml``
   (its ``[redact]`` table), then ``pyproject.toml`` if it has a ``[tool.forkpoint]`` table.
   Inside :func:`anchored` (the pytest plugin, while a test runs), the search starts from that
   directory instead (the test file's folder): a project's configuration is the one its tests run
   under, wherever pytest was started from.

A ``forkpoint.toml`` or ``pyproject.toml`` with ``[tool.forkpoint]`` ends the search even when it
has no ``redact`` table (so a project can say "built-in rules only" above a parent's rules)::

    [tool.forkpoint.redact]            # in forkpoint.toml: [redact]
    patterns = [
        "itk_[A-Za-z0-9]{32}",                                 # kind "custom"
        { kind = "customer-id", regex = "CUST-[0-9]{8}" },
        { kind = "db-password", regex = "dbpass=(?P<s>\\\\S+)" },  # only group "s" is replaced
    ]
    json_paths = ["$..ssn", "$.metadata.user_id", "$.messages[*].name"]
    headers = ["x-internal-auth"]      # dropped, like Authorization
    query_params = ["session"]         # ?session=… replaced, like ?api_key=…

Built-in rules always apply; user rules only add to them. A bad file or rule raises
:class:`ConfigError` naming the file and the key, so a recording never starts with rules that
silently do not work.
"""

from __future__ import annotations

import copy
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .errors import ConfigError

#: The configuration file forkpoint reads besides ``pyproject.toml``.
CONFIG_NAME = "forkpoint.toml"
#: forkpoint's tables of a configuration file.
TABLES = ("match", "redact", "store")


#: The :func:`anchored` blocks open, innermost last: replaced whole, never changed in place, so that
#: :func:`anchor` reads it without a lock (it is asked at every scrub and match).
_anchors: tuple[Path, ...] = ()
_anchors_lock = threading.Lock()
#: The text of the configuration file read last and what it reads as: one command reads it for
#: each of its tables and to find it (``forkpoint record``: ten times, ~5 M instructions each for a
#: project's pyproject.toml). Replaced whole, never changed in place.
_parsed: tuple[str, dict[str, Any]] | None = None


def anchor() -> Path | None:
    """The directory the configuration search starts from instead of the current directory (the
    innermost :func:`anchored` block, in any thread), or None."""
    anchors = _anchors
    return anchors[-1] if anchors else None


def config_start() -> Path:
    """Where the configuration search starts by default: :func:`anchor`, else the current directory."""
    return anchor() or Path.cwd()


@contextmanager
def anchored(start: Path) -> Iterator[None]:
    """Look for the configuration from ``start`` (absolute) up, not from the current directory,
    inside the block, in every thread of this process: the redaction rules, the ``[match]`` rules
    and the ``[store]`` settings a recording or replay uses then. The pytest plugin anchors each
    test at its file's folder, so ``pytest proj/tests`` from a parent directory records under
    ``proj/forkpoint.toml`` as ``pytest`` in ``proj/`` does."""
    global _anchors
    start = Path(start).absolute()
    with _anchors_lock:
        _anchors = (*_anchors, start)
    try:
        yield
    finally:
        with _anchors_lock:
            at = len(_anchors) - 1 - _anchors[::-1].index(start)
            _anchors = _anchors[:at] + _anchors[at + 1 :]


def find_config(start: Path | None = None) -> tuple[Path, tuple[str, ...]] | None:
    """The configuration file in force for ``start`` (default: :func:`config_start`, the current
    directory unless :func:`anchored`), and the path of tables to its ``redact`` table; None when
    there is none."""
    env = os.environ.get("FORKPOINT_CONFIG")
    if env:
        return Path(env), ()
    here = Path(start) if start is not None else config_start()
    for d in (here, *here.parents):
        own = d / CONFIG_NAME
        if own.is_file():
            return own, ()
        pyproject = d / "pyproject.toml"
        if pyproject.is_file():
            try:
                raw = pyproject.read_bytes()
            except OSError:
                continue  # an unreadable pyproject.toml: not ours to judge
            if b"forkpoint" not in raw:
                continue  # no forkpoint table can be in it: not parsed (start-up of every command)
            import tomllib

            try:
                data = _toml(raw.decode("utf-8"))
            except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
                if b"tool.forkpoint" not in raw:
                    continue  # a broken pyproject.toml that is not about forkpoint: not ours to judge
                raise ConfigError(f"{pyproject}: cannot read it as TOML ({exc})") from None
            if isinstance(data.get("tool"), dict) and "forkpoint" in data["tool"]:
                return pyproject, ("tool", "forkpoint")
    return None


def load_table(name: str, start: Path | None = None) -> tuple[Any, str]:
    """forkpoint's table ``name`` (``redact``…) of the configuration in force for ``start`` (default:
    the current directory), and where it is (``"<file> [tool.forkpoint.redact]"``, for messages).
    ``(None, "")`` when no configuration file applies; the table is ``None`` when the file has none.
    Raises :class:`ConfigError` for a file that cannot be read as TOML."""
    found = find_config(start)
    if found is None:
        return None, ""
    path, prefix = found
    import tomllib

    try:
        data = _toml(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: configuration file not found (FORKPOINT_CONFIG)") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it as TOML ({exc})") from None
    table: Any = data
    if not prefix and name not in data and isinstance(data.get("tool"), dict):
        prefix = ("tool", "forkpoint")  # FORKPOINT_CONFIG pointing at a pyproject.toml
    for part in prefix:
        table = table.get(part) if isinstance(table, dict) else None
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{path}: [{'.'.join(prefix)}] must be a table")
    # (forkpoint's own tables, not a shared file's: $FORKPOINT_CONFIG names its own file by any name)
    if table and (prefix or path.name != "pyproject.toml"):
        # (a misspelt [macth] was silently no table at all: its rules never applied, and nothing said)
        unknown = sorted(set(table) - set(TABLES))
        if unknown:
            where = ", ".join(f"[{'.'.join((*prefix, k))}]" for k in unknown)
            raise ConfigError(f"{path}: unknown table(s) {where} (known: {', '.join(TABLES)})")
    # (a copy: the parsed file is kept for the next reading, whatever the caller does with its table)
    return copy.deepcopy((table or {}).get(name)), f"{path} [{'.'.join((*prefix, name))}]"


def _toml(text: str) -> dict[str, Any]:
    """``tomllib.loads(text)``, parsed once for the same text in a row (:data:`_parsed`)."""
    global _parsed
    last = _parsed
    if last is not None and last[0] == text:
        return last[1]
    import tomllib

    data = tomllib.loads(text)
    _parsed = (text, data)
    return data


def store_retention(start: Path | None = None) -> tuple[str | None, str]:
    """The default retention of ``forkpoint prune`` (``[store] retention = "90d"``) in the
    configuration in force for ``start``, and where it is set (for messages); ``(None, …)`` when
    none is. Raises :class:`ConfigError` when ``[store]`` is not a table or ``retention`` not a string."""
    table, where = load_table("store", start)
    if table is None:
        return None, where
    if not isinstance(table, dict):
        raise ConfigError(f"{where} must be a table")
    value = table.get("retention")
    if value is not None and not isinstance(value, str):
        raise ConfigError(f'{where}: retention must be a duration string such as "90d", not {value!r}')
    return value, where
