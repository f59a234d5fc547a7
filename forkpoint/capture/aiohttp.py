"""placeholder"""

from __future__ import annotations

LIBRARIES = ("aiohttp",)


def install() -> list[str]:
    return []


def installed() -> list[str]:
    return []


def uninstall() -> None:
    pass
