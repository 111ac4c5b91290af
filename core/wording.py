"""Counts in words: "1 document", "2 documents" — every count a person reads goes through here."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun in the number that agrees with it (`plural` for irregular nouns)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
