"""The memory-saving paths give the same answers as the simple ones they replace.

(How much memory they save is measured by benchmarks/memory.py, not asserted here.)
"""

from __future__ import annotations

import io
import random

import pytest

from replayer.core.prompt import estimate
from replayer.core.session import reader

WORDS = "alpha beta it's don't 123 x+y foo_bar \n\n  <|im_start|>user\n Über naïve 日本語 .,;: \t end".split(" ")


@pytest.mark.parametrize("seed", range(8))
def test_long_parts_cut_at_safe_places_count_the_same(monkeypatch, seed):
    """Blocks that end inside one long message (at a letter-space-letter) give every part the
    count that scanning each long part whole gives."""
    rng = random.Random(seed)
    text = " ".join(rng.choice(WORDS) for _ in range(rng.choice([3000, 20000])))
    cuts = sorted(rng.sample(range(len(text)), rng.choice([0, 3, 20])))
    monkeypatch.setattr(estimate, "BLOCK", 2000)
    monkeypatch.setattr(estimate, "_SAFE_CUT_WINDOW", 300)
    cut = estimate.counts_between(text, cuts)
    monkeypatch.setattr(estimate, "_safe_cut", lambda *a: None)  # whole long parts, as before
    whole = estimate.counts_between(text, cuts)
    assert cut == whole and sum(cut) > 0


@pytest.mark.parametrize("chunk", [1, 7, 64, 1 << 20])
def test_line_reader_matches_file_iteration(monkeypatch, chunk):
    rng = random.Random(chunk)
    lines = [("x" * rng.choice([0, 1, 5, 100, 3000])).encode() + b"\n" for _ in range(200)] + [b"tail, no newline"]
    data = b"".join(lines)
    monkeypatch.setattr(reader, "_CHUNK", chunk)
    assert [bytes(x) for x in reader._lines(io.BytesIO(data))] == list(io.BytesIO(data))


def test_detection_skips_over_long_lines_without_loading_them(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "HEAD_LINE_MAX", 64)
    p = tmp_path / "s.jsonl"
    p.write_text('{"type": "session", "id": "a"}\n{"big": "' + "y" * 1000 + '"}\n{"k": 2}\n')
    assert reader.head_objects(p) == [{"type": "session", "id": "a"}, {"k": 2}]


def test_huge_lines_parse_as_small_ones(tmp_path, monkeypatch):
    """Lines parsed from decoded text (the path of huge messages) give the same records and the
    same bad-line counts as orjson on bytes."""
    p = tmp_path / "s.jsonl"
    p.write_bytes(b'{"a": "x\\ny \\u00fc \\"q\\""}\n\n{"b": [1, 2.5, null, true]}\nnot json\n[1]\n'
                  b'{"c": "\xff bad utf-8"}\n{"d": "half')
    def read():
        stats = reader.JsonlStats()
        return list(reader.iter_jsonl(p, stats)), (stats.lines, stats.bad_lines, stats.partial_tail)
    want = read()
    monkeypatch.setattr(reader, "_CHUNK", 5)
    monkeypatch.setattr(reader, "_BIG_LINE", 8)
    got = read()
    assert got == want
    assert want[1] == (6, 4, True) and len(want[0]) == 2


@pytest.mark.parametrize("seed", range(6))
def test_block_sums_are_one_cumulative_sum(monkeypatch, seed):
    """Per-part counts from the carried running sum equal the way they were computed before
    (all piece prices kept, one cumulative sum over the prompt, differences at the cuts), so
    parts at exactly .5 round as they always did."""
    import bisect

    import numpy as np

    rng = random.Random(seed)
    text = " ".join(rng.choice(WORDS) for _ in range(6000))
    n = len(text)
    cuts = sorted(rng.sample(range(n), 40) + [0, n, 17, 17])
    monkeypatch.setattr(estimate, "BLOCK", 1500)
    inner = [c for c in cuts if 0 < c < n]
    starts_l, prices_l, a, k = [], [], 0, 0
    while a < n:  # the previous algorithm, blocks ending at cuts
        j = bisect.bisect_left(inner, a + estimate.BLOCK, lo=k)
        b = inner[j] if j < len(inner) else n
        st, pr = estimate.scan(text[a:b], np.asarray(inner[k:j], dtype=np.int64) - a)
        starts_l.append(st + a)
        prices_l.append(pr)
        a, k = b, j + 1 if j < len(inner) else j
    csum = np.concatenate(([0.0], np.cumsum(np.concatenate(prices_l))))
    edges = np.searchsorted(np.concatenate(starts_l), np.asarray([0, *cuts, n]))
    want = np.round(csum[edges[1:]] - csum[edges[:-1]]).astype(int).tolist()
    assert estimate.counts_between(text, cuts) == want
