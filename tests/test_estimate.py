"""The estimate tokenizer's array scan against its reference: Qwen2's pre-tokenizer regex run
piece by piece, each piece priced by class and length."""

from __future__ import annotations

import glob
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replayer.core.builds.catalog import parse_build
from replayer.core.prompt import estimate, templates
from replayer.core.prompt.layout import scan_text
from replayer.core.session import build_request, load_session

from conftest import SAMPLES, need_shared


def _reference_price(piece: str) -> float:
    if estimate.SPECIAL.fullmatch(piece):
        return 1.0
    cls = estimate.piece_class(piece)
    ln = len(piece.encode("utf-8"))
    return float(estimate.price_table()[estimate.PRICE_CLASSES.index(cls), ln]) if ln < 512 else \
        max(1.0, ln / estimate.LONG_RATE[cls])


def reference(text: str, cuts: list[int]) -> tuple[list[int], list[float]]:
    """Pieces the slow way: cut at the given offsets and around special markers, then ``re``."""
    bounds = sorted({0, len(text), *cuts, *(x for m in estimate.SPECIAL.finditer(text) for x in m.span())})
    starts: list[int] = []
    prices: list[float] = []
    for a, b in zip(bounds, bounds[1:]):
        part = text[a:b]
        if estimate.SPECIAL.fullmatch(part):
            starts.append(a)
            prices.append(1.0)
            continue
        for m in estimate.PIECE.finditer(part):
            starts.append(a + m.start())
            prices.append(_reference_price(m.group(0)))
    return starts, prices


def assert_same_as_reference(text: str, cuts: list[int]) -> None:
    ref_starts, ref_prices = reference(text, cuts)
    starts, prices = estimate.scan(text, np.array(cuts, dtype=np.int64))
    if starts.tolist() != ref_starts:
        i = next(k for k, (x, y) in enumerate(zip([*starts.tolist(), -1], [*ref_starts, -1])) if x != y)
        at = ref_starts[max(i - 1, 0)]
        pytest.fail(f"piece {i} differs near {text[at:at + 40]!r}: scan {starts[i - 1:i + 2]}, re {ref_starts[i - 1:i + 2]}")
    assert prices.tolist() == pytest.approx(ref_prices)


ATOMS = list("abdelmrstvzDST'\n\r\t _(){}.,:;-0123456789") + [
    "<|im_start|>", "<|im_end|>", "<tool_call>", "é", "—", "\u00a0", "²", "中文", "re", "ll", "ve", "'s", "'dog", "'reef", "  ", "\r\n"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(ATOMS), min_size=1, max_size=30), st.lists(st.integers(1, 200), max_size=3))
def test_scan_finds_the_regex_pieces(atoms, cut_at):
    text = "".join(atoms)
    inside = {x for m in estimate.SPECIAL.finditer(text) for x in range(m.start() + 1, m.end())}
    cuts = sorted({c for c in cut_at if c < len(text) and c not in inside})  # delimiters never cut a marker
    assert_same_as_reference(text, cuts)


@pytest.mark.parametrize("text", [
    "don't stop, it's 'twas 'LL 're", "x, y\n\n  foo", " (foo ((bar \t(baz", "__init__(self)\n\t\treturn 42",
    "a  1  \n \n  ", "café — naïve\u00a0x", "'s", "<|im_start|>user\nhi<|im_end|>\n", "x'sfoo 3'rex 'r", "I'd we'll you've I'm they're 'LL 'Ve", "'dog 'mat 'sea 'tan 'reef 'very 'llama 'rx 'lx",
])
def test_scan_cases(text):
    assert_same_as_reference(text, [])
    assert estimate.EstimateTokenizer().count(text) == round(sum(reference(text, [])[1]))


def test_scan_agrees_on_every_sample_prompt():
    need_shared(SAMPLES)
    tpl = templates.bundled("qwen3-coder")
    delims = templates.delimiters_for(tpl, parse_build("10001"))
    paths = glob.glob(str(SAMPLES / "**/*.jsonl"), recursive=True)
    assert len(paths) >= 5
    for path in paths:
        req = build_request(load_session(path))
        text = templates.render(tpl, req.messages, req.body.get("tools"), add_generation_prompt=True)
        cuts = [c for _, c in scan_text(text, delims) if 0 < c < len(text)]
        assert cuts, path
        assert_same_as_reference(text, cuts)


def test_counts_between_rounds_each_part():
    text = "<|im_start|>user\nhello there<|im_end|>\n<|im_start|>assistant\nok<|im_end|>\n"
    cuts = [m.start() for m in re.finditer(re.escape("<|im_start|>"), text)]
    parts = estimate.counts_between(text, cuts)
    assert len(parts) == len(cuts) + 1 and parts[0] == 0
    assert parts[1:] == [round(sum(reference(text[a:b], [])[1])) for a, b in zip(cuts, [*cuts[1:], len(text)])]
