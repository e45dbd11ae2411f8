"""Invariants of the scheduler on arbitrary layouts (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from replayer.core.builds.catalog import GENERATIONS, Build, Generation
from replayer.core.engine.schedule import Knobs, PromptSpans, ReasonRule, schedule


@st.composite
def layouts(draw):
    n = draw(st.integers(min_value=1, max_value=40_000))
    starts = draw(st.lists(st.integers(min_value=0, max_value=n - 1), max_size=60, unique=True))
    n_batch = draw(st.sampled_from([64, 512, 2048, 4096]))
    n_ubatch = draw(st.sampled_from([u for u in (32, 512, 2048) if u <= n_batch] or [n_batch]))
    knobs = Knobs(n_batch=n_batch, n_ubatch=n_ubatch,
                  n_ctx_checkpoints=draw(st.sampled_from([0, 4, 32])),
                  checkpoint_min_step=draw(st.sampled_from([None, 0, 256, 8192])),
                  memory=draw(st.sampled_from(["plain", "swa", "recurrent"])))
    n_past = draw(st.integers(min_value=0, max_value=n - 1)) if draw(st.booleans()) else 0
    return PromptSpans.of(n, sorted(starts)), knobs, n_past


@settings(max_examples=300, deadline=None)
@given(layouts(), st.sampled_from(GENERATIONS))
def test_batches_tile_the_prompt(case, gen):
    spans, knobs, n_past = case
    s = schedule(spans, Build(gen), knobs, n_past=n_past)
    # the server may fall back to full re-processing (SWA/recurrent state not reusable, §7)
    assert s.n_past in (n_past, 0) or (n_past == spans.n_tokens and s.n_past == n_past - 1)
    pos = s.n_past
    for b in s.batches:
        assert b.start == pos and b.n_tokens > 0
        assert b.n_tokens <= knobs.n_batch_eff
        assert b.n_ubatches == -(-b.n_tokens // knobs.n_ubatch_eff)
        pos = b.end
    assert pos == spans.n_tokens
    starts = {b.start for b in s.batches}
    for c in s.checkpoints:
        assert c.n_tokens in starts and c.pos_max == c.n_tokens - 1
    if not knobs.checkpoints_enabled:
        assert s.checkpoints == []


@settings(max_examples=300, deadline=None)
@given(layouts())
def test_fix_never_has_more_batches_than_regression(case):
    spans, knobs, n_past = case
    g1 = schedule(spans, Build(Generation.G1), knobs, n_past=n_past)
    for gen in (Generation.G2A, Generation.G2B, Generation.G3):
        assert len(schedule(spans, Build(gen), knobs, n_past=n_past).batches) <= len(g1.batches)


@settings(max_examples=200, deadline=None)
@given(layouts())
def test_no_user_starts_means_g1_equals_g2(case):
    spans, knobs, n_past = case
    bare = PromptSpans.of(spans.n_tokens, ())
    a = schedule(bare, Build(Generation.G1), knobs, n_past=n_past)
    for gen in (Generation.G2A, Generation.G2B):
        b = schedule(bare, Build(gen), knobs, n_past=n_past)
        assert [(x.start, x.n_tokens) for x in a.batches] == [(x.start, x.n_tokens) for x in b.batches]


@settings(max_examples=300, deadline=None)
@given(layouts(), st.sampled_from(GENERATIONS))
def test_the_fill_loop_names_each_batch_as_the_live_engine_does(case, gen):
    """The slot's fill loop writes the reason rule out in place (speed); the live engine labels
    the real server's batches with ``ReasonRule``: both must name every batch alike, or a
    simulated run and a live one would disagree on why a batch ended."""
    spans, knobs, n_past = case
    s = schedule(spans, Build(gen), knobs, n_past=n_past)
    rule = ReasonRule(spans.n_tokens, spans.user_starts, knobs)
    assert [b.reason for b in s.batches] == [rule(b.start, b.end) for b in s.batches]
