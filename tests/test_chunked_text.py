"""The estimate's layout reads a render's chunks unjoined (``ChunkedText``, issue 24): every read
it makes must give what the joined prompt gives, at every chunking, window and boundary."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from replayer.core.prompt import chunked_text, estimate, templates
from replayer.core.prompt.chunked_text import ChunkedText
from replayer.core.prompt.layout import scan_text
from replayer.core.prompt.templates import Delimiter

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _chunk(rng: random.Random, s: str, sizes=(0, 1, 2, 3, 7, 50, 400)) -> list[str]:
    out, i = [], 0
    while i < len(s):
        k = rng.choice(sizes)
        out.append(s[i:i + k])
        i += k
    return out


def test_reads_equal_the_joined_string_with_small_windows(monkeypatch):
    monkeypatch.setattr(chunked_text, "WINDOW", 16)  # every window boundary inside small texts
    rng = random.Random(11)
    for _ in range(3000):
        alpha = rng.choice(["ab ", "a b\U0001F600", "ab<|", "x y"])
        s = "".join(rng.choice(alpha) for _ in range(rng.randint(0, 80)))
        c = ChunkedText(_chunk(rng, s))
        assert len(c) == len(s) and str(c) == s
        a, b = rng.randint(-5, 90), rng.randint(-5, 90)
        assert c[a:b] == s[a:b] and c[a:] == s[a:] and c[:b] == s[:b]
        sub = "".join(rng.choice(alpha) for _ in range(rng.randint(1, 4)))
        start = rng.randint(0, 85)
        assert c.find(sub) == s.find(sub) and c.find(sub, start) == s.find(sub, start)
        assert c.startswith(sub, start) == s.startswith(sub, start)
        lo, hi = sorted([rng.randint(0, 85), rng.randint(0, 90)])
        m = estimate._SAFE_CUT.search(s, lo, hi)
        assert c.search_start(estimate._SAFE_CUT, lo, hi) == (m.start() if m else None)
        delims = [Delimiter(role="user", text=t) for t in ["a", "ab", "<|", "b a", ""][:rng.randint(0, 5)]]
        assert scan_text(c, delims) == scan_text(s, delims)


def test_only_slices_are_read():
    c = ChunkedText(["ab", "cd"])
    with pytest.raises(TypeError):
        c[1]
    with pytest.raises(ValueError):
        c[::2]


@pytest.mark.parametrize("path", sorted(p for p in FIXTURES.rglob("*.jsonl") if p.stat().st_size < 200_000)[:12],
                         ids=lambda p: p.name)
def test_estimate_counts_of_chunks_equal_those_of_the_string(path):
    rng = random.Random(path.name)
    text = "<|im_start|>user\n" + path.read_text(encoding="utf-8", errors="replace") + "\U0001F600<|im_end|>"
    delims = [Delimiter(role="user", text="<|im_start|>user"), Delimiter(role="tool", text="\n")]
    marks = scan_text(text, delims)
    cuts = sorted({c for _, c in marks if 0 < c < len(text)})
    c = ChunkedText(_chunk(rng, text, (1, 9, 300, 5000, 20000)))
    assert scan_text(c, delims) == marks
    assert estimate.counts_between(c, cuts) == estimate.counts_between(text, cuts)
    end = rng.randint(1, len(text))
    assert estimate.EstimateTokenizer().count(c, end=end) == estimate.EstimateTokenizer().count(text[:end])
    assert estimate.EstimateTokenizer().count(text, end=end) == estimate.EstimateTokenizer().count(text[:end])


def test_a_continued_message_compared_against_unjoined_chunks():
    """The continuation's tail found against the first render's chunks equals the tail found
    against their join, at any chunking of either render."""
    rng = random.Random(5)
    for _ in range(3000):
        alpha = rng.choice(["ab", "a\U0001F600b", "x"])
        a = "".join(rng.choice(alpha) for _ in range(rng.randint(0, 30)))
        b = a[:rng.randint(0, len(a))] + "".join(rng.choice(alpha) for _ in range(rng.randint(0, 8)))
        got = templates._suffix_after_common_prefix(_chunk(rng, a), iter(_chunk(rng, b)))
        assert got == templates._common_suffix_after_prefix(a, b)
