"""Counts as words: ``1 turn``, ``3 turns``, ``1 batch``, ``2 batches``. Every report and screen
reads as sentences, and "over 1 turns" in a verdict reads as a defect."""

from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 (``-ch``/``-s`` nouns take ``es``)."""
    if n == 1:
        return f"{n:,} {noun}"
    return f"{n:,} {noun}{'es' if noun.endswith(('ch', 's')) else 's'}"
