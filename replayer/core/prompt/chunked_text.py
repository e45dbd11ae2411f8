"""A rendered prompt held as its template's chunks, read as one string without joining them.

Why: a Python ``str`` is 1, 2 or 4 bytes a character for the whole string, by its widest
character. One emoji in a 460K-character prompt made the joined prompt 1.8 MB, where its chunks
(mostly the messages' own strings, 1 byte a character) are ~0.5 MB; the estimate's layout is the
replay's largest allocation after the session itself (issue 24, docs/benchmarks.md). The estimate
reads a prompt only through slices, ``find``/``startswith`` of literals and one regex search, so
those are what this offers, each giving exactly what the joined string would: slices are joined
from the chunks they cover, searches run over windows that overlap by what a match can see. An
exact tokenizer needs the text itself and gets the joined string.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_right
from typing import Iterable

#: characters per window of ``find`` and ``search_start`` (each window is a joined slice)
WINDOW = 8192


class ChunkedText:
    """``"".join(chunks)`` for the reads the estimate makes, at the chunks' own width."""

    __slots__ = ("chunks", "starts", "n")

    def __init__(self, chunks: Iterable[str]) -> None:
        self.chunks = [c for c in chunks if c]  # no empty chunk: starts strictly increase
        self.starts = array("q")  # the offset of each chunk (8 B each, not a list of ints)
        n = 0
        for c in self.chunks:
            self.starts.append(n)
            n += len(c)
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __str__(self) -> str:
        return "".join(self.chunks)

    def __getitem__(self, key: slice) -> str:
        if not isinstance(key, slice):
            raise TypeError("ChunkedText reads slices only")
        a, b, step = key.indices(self.n)
        if step != 1:
            raise ValueError("ChunkedText reads contiguous slices only")
        if a >= b:
            return ""
        i = bisect_right(self.starts, a) - 1
        out: list[str] = []
        pos = self.starts[i]
        while pos < b:
            c = self.chunks[i]
            out.append(c[max(0, a - pos):b - pos])
            pos += len(c)
            i += 1
        return out[0] if len(out) == 1 else "".join(out)

    def find(self, sub: str, start: int = 0) -> int:
        """``str.find`` of a non-empty literal: windows overlapping by ``len(sub) - 1``."""
        m = len(sub)
        for w in range(max(start, 0), self.n, WINDOW):
            i = self[w:w + WINDOW + m - 1].find(sub)
            if i >= 0:
                return w + i
        return -1

    def startswith(self, sub: str, pos: int) -> bool:
        return self[pos:pos + len(sub)] == sub

    def search_start(self, pattern: re.Pattern[str], lo: int, hi: int) -> int | None:
        """Where ``pattern.search(text, lo, hi)`` matches, for a pattern of one character with a
        one-character lookbehind and lookahead (``estimate._SAFE_CUT``): each window holds one
        character before and after the positions it answers for (none past ``hi``)."""
        hi = min(hi, self.n)
        s = max(lo, 0)
        while s < hi:
            w0 = max(s - 1, 0)
            m = pattern.search(self[w0:min(s + WINDOW + 1, hi)], s - w0)
            if m:
                return w0 + m.start()
            s += WINDOW
        return None
