"""Words in messages: counts with their noun, ordinals. (A foundation: it imports nothing.)"""

from __future__ import annotations


def plural(n: int, noun: str) -> str:
    """``"1 model call"``, ``"2 model calls"``: ``n`` and the noun, made plural with an ``s``."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def ordinal(n: int) -> str:
    """``1st``, ``2nd``, ``3rd``, ``4th``, ``11th``, ``21st``…"""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
