"""Configuration: the user's redaction rules, from TOML.

Where forkpoint looks, first match wins:

1. ``$FORKPOINT_CONFIG``: a TOML file, read as a whole (its ``[redact]`` table; a
   ``[tool.forkpoint.redact]`` table also works, so it may point at a ``pyproject.toml``);
2. from the current directory up to the filesystem root, in each directory: ``forkpoint.toml``
   (its ``[redact]`` table), then ``pyproject.toml`` if it has a ``[tool.forkpoint]`` table.

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

import os
import tomllib
from pathlib import Path
from typing import Any

import click

from .redact import RuleError, Rules, Scrubber
from .runtime import ForkpointError

#: The configuration file forkpoint reads besides ``pyproject.toml``.
CONFIG_NAME = "forkpoint.toml"
_KEYS = ("patterns", "json_paths", "headers", "query_params")


class ConfigError(ForkpointError, click.ClickException, ValueError):
    """The configuration cannot be used; the message names the file and the key. (A
    ``ClickException`` too, so every ``forkpoint`` command reports it as an error, not a traceback.)"""

    def __init__(self, message: str) -> None:
        click.ClickException.__init__(self, message)

    def __str__(self) -> str:
        return self.message


def find_config(start: Path | None = None) -> tuple[Path, tuple[str, ...]] | None:
    """The configuration file in force for ``start`` (default: the current directory), and the
    path of tables to its ``redact`` table; None when there is none."""
    env = os.environ.get("FORKPOINT_CONFIG")
    if env:
        return Path(env), ()
    here = Path(start) if start is not None else Path.cwd()
    for d in (here, *here.parents):
        own = d / CONFIG_NAME
        if own.is_file():
            return own, ()
        pyproject = d / "pyproject.toml"
        if pyproject.is_file():
            try:
                raw = pyproject.read_bytes()
                data = tomllib.loads(raw.decode("utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
                if b"tool.forkpoint" not in locals().get("raw", b""):
                    continue  # a broken pyproject.toml that is not about forkpoint: not ours to judge
                raise ConfigError(f"{pyproject}: cannot read it as TOML ({exc})") from None
            if isinstance(data.get("tool"), dict) and "forkpoint" in data["tool"]:
                return pyproject, ("tool", "forkpoint")
    return None


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of strings")
    return tuple(value)


def rules_from_table(table: Any, where: str) -> Rules:
    """:class:`~forkpoint.redact.Rules` from a parsed ``redact`` table; ``where`` names it in errors."""
    if table is None:
        return Rules(source=where)
    if not isinstance(table, dict):
        raise ConfigError(f"{where}: expected a table")
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(_KEYS)})")
    patterns: list[tuple[str, str]] = []
    raw = table.get("patterns", [])
    if not isinstance(raw, list):
        raise ConfigError(f"{where}.patterns: expected a list")
    for i, p in enumerate(raw):
        if isinstance(p, str):
            patterns.append(("custom", p))
        elif isinstance(p, dict) and isinstance(p.get("regex"), str) and set(p) <= {"kind", "regex"}:
            kind = p.get("kind", "custom")
            if not isinstance(kind, str):
                raise ConfigError(f"{where}.patterns[{i}].kind: expected a string")
            patterns.append((kind, p["regex"]))
        else:
            raise ConfigError(f"{where}.patterns[{i}]: expected a regex string or {{kind = …, regex = …}}")
    rules = Rules(
        patterns=tuple(patterns),
        json_paths=_strings(table.get("json_paths", []), f"{where}.json_paths"),
        headers=_strings(table.get("headers", []), f"{where}.headers"),
        query_params=_strings(table.get("query_params", []), f"{where}.query_params"),
        source=where,
    )
    try:
        Scrubber(rules)  # compile now: a bad regex or path is reported with the file that holds it
    except RuleError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return rules


def load_rules(start: Path | None = None) -> Rules:
    """The user's redaction rules in force for ``start`` (default: the current directory); empty
    rules when no configuration file applies. Raises :class:`ConfigError`."""
    found = find_config(start)
    if found is None:
        return Rules()
    path, prefix = found
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: configuration file not found (FORKPOINT_CONFIG)") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it as TOML ({exc})") from None
    table: Any = data
    if not prefix and "redact" not in data and isinstance(data.get("tool"), dict):
        prefix = ("tool", "forkpoint")  # FORKPOINT_CONFIG pointing at a pyproject.toml
    for part in prefix:
        table = table.get(part) if isinstance(table, dict) else None
    if table is not None and not isinstance(table, dict):
        raise ConfigError(f"{path}: [{'.'.join(prefix)}] must be a table")
    where = f"{path} [{'.'.join((*prefix, 'redact'))}]"
    return rules_from_table((table or {}).get("redact"), where)
