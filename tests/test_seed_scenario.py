"""The seed scenario of llama.cpp #25213, on the bundled synthetic pi session."""

from __future__ import annotations

import pytest

from replayer.core.compare import compare
from replayer.core.replay import ReplayConfig, all_simulated, demo_session_path, prepare


@pytest.fixture(scope="module")
def seed():
    prep = prepare(demo_session_path(), ReplayConfig.seed(a="9859", b="10001"))
    return prep, compare(all_simulated(prep))


def test_demo_session_shape(seed):
    prep, _ = seed
    s = prep.session
    assert s.format == "pi" and 280 <= s.n_tool_results <= 320
    assert 85_000 <= prep.n_tokens <= 97_000  # ~91k tokens with the Qwen3.6-style template
    assert prep.request.missing == []  # pi 0.86+ persists system prompt and tools


def test_b9859_vs_b10001_matches_the_report(seed):
    _, cmp = seed
    assert cmp.a.tokens_per_s == pytest.approx(131, rel=0.10)
    assert cmp.b.tokens_per_s == pytest.approx(318, rel=0.10)
    assert cmp.speedup == pytest.approx(2.43, rel=0.10)
    # the diagnosis: nearly every break of the regressed build is a user/tool start
    assert cmp.a.breaks()["user_start"] >= 0.95 * (cmp.a.n_batches - 1)
    assert cmp.b.breaks()["n_batch"] > cmp.b.breaks()["user_start"]
    assert cmp.verdict().startswith("B is 2.")


def test_fully_resident_gpu_loses_little(seed):
    """The same fragmentation costs only a few percent when the model fits (perf-model §7b)."""
    prep, _ = seed
    cfg = ReplayConfig.seed(gpu="m2-ultra")
    cmp = compare(all_simulated(prepare(prep.session.path, cfg, session=prep.session)))
    assert 1.0 < cmp.speedup < 1.3
