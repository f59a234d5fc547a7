"""Regular expressions compiled where they are first used, not where they are defined. (A
foundation: it imports only :mod:`re`.)

Compiling is most of what importing a module that defines a dozen patterns costs (~0.1–1.5 ms each),
and every ``forkpoint record`` / ``replay`` pays the imports of its parent and of the program it
starts, while most patterns serve a path that run never takes. :func:`compiled_later` defines a
module-level pattern that behaves as the compiled one.
"""

from __future__ import annotations

import re
from typing import Any, cast


class _Later:
    """Stands for ``re.compile(pattern, flags)``: compiles on the first attribute asked for, then
    keeps the compiled pattern's attributes on itself, so that later calls cost what the compiled
    pattern's own do."""

    def __init__(self, pattern: str | bytes, flags: int) -> None:
        self._source: tuple[Any, int] = (pattern, flags)

    def __getattr__(self, name: str) -> Any:  # only for attributes not set yet
        if name.startswith("__"):
            raise AttributeError(name)
        compiled = re.compile(*self._source)
        for attr in ("search", "match", "fullmatch", "finditer", "findall", "sub", "subn", "split"):
            setattr(self, attr, getattr(compiled, attr))
        for attr in ("pattern", "flags", "groups", "groupindex"):
            setattr(self, attr, getattr(compiled, attr))
        return getattr(compiled, name)


def compiled_later(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """``re.compile(pattern, flags)``, compiled on first use (see the module doc)."""
    return cast("re.Pattern[str]", _Later(pattern, flags))


def compiled_later_bytes(pattern: bytes, flags: int = 0) -> re.Pattern[bytes]:
    """:func:`compiled_later` for a bytes pattern."""
    return cast("re.Pattern[bytes]", _Later(pattern, flags))
