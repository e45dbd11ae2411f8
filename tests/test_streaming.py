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


@pytest.mark.parametrize("seed", range(6))
def test_a_first_part_counts_as_the_text_before_its_cut(monkeypatch, seed):
    """The estimate's shared prefix of two prompts counts only the text before the cut
    (``turn_layouts._count_to``): the first part of ``counts_between(text, [cut])`` is the count
    of ``text[:cut]`` alone, at every whitespace the rule cuts at and in long texts scanned in
    blocks (parts never cross a cut; a marker holds no whitespace, so no cut falls inside one)."""
    rng = random.Random(seed)
    monkeypatch.setattr(estimate, "BLOCK", rng.choice([300, 2000, 1 << 17]))
    monkeypatch.setattr(estimate, "_SAFE_CUT_WINDOW", 100)
    text = " ".join(rng.choice(WORDS) for _ in range(rng.choice([50, 600, 4000])))
    spaces = [i for i, ch in enumerate(text) if ch in " \n"]
    for cut in [0, *rng.sample(spaces, min(40, len(spaces)))]:
        assert estimate.counts_between(text[:cut], [])[0] == estimate.counts_between(text, [cut])[0], cut


def test_shared_prefix_of_two_families_counts_the_text_they_share():
    """Two prompts of different families (a subagent's beside the main thread's): the shared
    tokens are the estimate of the new prompt's text up to the last word boundary before the
    first difference, the same number whether asked once or again (the family's kept count)."""
    from replayer.core.builds.catalog import parse_build
    from replayer.core.prompt import templates
    from replayer.core.prompt.turn_layouts import compute_shared_prefix, turn_layouts
    from replayer.core.server.traffic import agent_stream
    from replayer.core.session.turns import Turn

    bodies = agent_stream(6, burst=2, words=30)
    lay = turn_layouts([Turn(i, b) for i, b in enumerate(bodies)], template=templates.bundled("chatml"),
                       build=parse_build(10001))
    ps = lay.prompts
    pairs = [(a, b) for a in ps for b in ps if a.family != b.family]
    assert len(pairs) > 20
    for a, b in pairs:
        x, y = a.text, b.text
        d = next((i for i, (u, v) in enumerate(zip(x, y)) if u != v), min(len(x), len(y)))
        cut = max(y.rfind(" ", 0, d), y.rfind("\n", 0, d), 0)
        want = a.n_tokens if d == len(x) else min(estimate.counts_between(y, [cut])[0], a.n_tokens, b.n_tokens)
        for _ in range(2):
            assert compute_shared_prefix(a, b) == (want, d)


@pytest.mark.parametrize("seed", range(8))
def test_shared_prefix_from_heads_equals_the_whole_texts_compared(seed):
    """Two prompts of different families are compared on growing heads of their texts and ids
    (``turn_layouts._first_difference_of``), never built whole: the same first difference as the
    whole texts' and ids', wherever it falls (first characters, past 4,096 or 65,536, in the
    suffix, or one prompt a prefix of the other)."""
    from replayer.core.prompt.turn_layouts import TurnPrompt, _first_difference, compute_shared_prefix

    rng = random.Random(seed)
    common = "".join(rng.choice("ab \n") for _ in range(rng.choice([0, 50, 5000, 70000])))

    def prompt(family: int, tail: str, with_ids: bool) -> TurnPrompt:
        base = common + tail
        cut = rng.randint(0, len(base))
        suffix = rng.choice(["", "<|im_start|>assistant\n", tail[:3]])
        ids = [ord(c) for c in base] if with_ids else None
        return TurnPrompt(0, len(base[:cut] + suffix), None, None, family, base, cut, suffix,  # type: ignore[arg-type]
                          ids, cut, [ord(c) for c in suffix] if with_ids else None)

    for with_ids in (False, True):
        for _ in range(20):
            a = prompt(1, "".join(rng.choice("abc \n") for _ in range(rng.randint(0, 300))), with_ids)
            b = prompt(2, "".join(rng.choice("abc \n") for _ in range(rng.randint(0, 300))), with_ids)
            got = compute_shared_prefix(a, b)
            d = _first_difference(a.text, b.text)
            assert got.n_chars == d
            if with_ids:
                assert got.n_tokens == _first_difference(a.ids, b.ids)
            elif d == len(a.text):
                assert got.n_tokens == a.n_tokens
            else:
                y = b.text
                cut = max(y.rfind(" ", 0, d), y.rfind("\n", 0, d), 0)
                assert got.n_tokens == min(estimate.counts_between(y, [cut])[0], a.n_tokens, b.n_tokens)
