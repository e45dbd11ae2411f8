"""The resume verdict explains itself: each build's generation and its fix, the time each run
lost against ideal batching, the best change; the same text in the app, Markdown and JSON."""

from __future__ import annotations

import dataclasses
import json
import math
import random

import orjson
import pytest

from replayer.core.advise import advice_for, batching_loss, generation_line
from replayer.core.compare import Comparison, compare
from replayer.core.engine import events as ev
from replayer.core.replay import ReplayConfig, all_simulated, demo_session_path, prepare, report

SEED = str(demo_session_path())


@pytest.fixture(scope="module")
def seed_run():
    prep = prepare(SEED, ReplayConfig.seed(a="9859", b="10001"))
    return prep, compare(all_simulated(prep))


def test_the_regressed_build_loses_most_of_its_time_the_fixed_one_little(seed_run):
    prep, cmp = seed_run
    loss = batching_loss(prep, cmp)
    a, b = loss["A"], loss["B"]
    n = prep.n_tokens
    assert a.ideal_batches == b.ideal_batches == math.ceil(n / 2048)
    assert (a.n_batches, b.n_batches) == (cmp.a.n_batches, cmp.b.n_batches)
    # both runs process the same prompt: the same ideal, but for each run's own checkpoint copies
    assert a.ideal_ms == pytest.approx(b.ideal_ms, rel=1e-3)
    assert a.run_ms == cmp.a.prompt_ms and b.run_ms == cmp.b.prompt_ms
    assert a.lost_pct > 50  # G1: a break at each of ~300 user/tool starts
    assert 0 <= b.lost_pct < 10  # G2b: breaks only where a checkpoint is due
    assert a.lost_ms > 10 * b.lost_ms
    assert a.line().startswith("A b9859 lost ") and f"{a.lost_ms / 1000:,.1f} s" in a.line()


def test_a_prompt_with_nothing_to_break_at_loses_nothing(tmp_path):
    """One long user message: every build runs it in full batches, so the ideal is the run."""
    rng = random.Random(3)
    words = "alpha beta gamma delta file path value error batch token server slot cache".split()
    f = tmp_path / "one.json"
    f.write_text(json.dumps({"messages": [{"role": "system", "content": "You are a helpful agent."},
                                          {"role": "user", "content": " ".join(rng.choice(words)
                                                                               for _ in range(20000))}]}))
    for config in (ReplayConfig.seed(), ReplayConfig()):  # -ub 2048 and the default -ub 512
        prep = prepare(f, config)
        cmp = compare(all_simulated(prep))
        for loss in batching_loss(prep, cmp).values():
            assert abs(loss.lost_pct) < 1, loss
            assert " lost nothing vs ideal batching" in loss.line()


def test_each_build_says_its_generation_the_pr_and_the_fix():
    prep = prepare(SEED, ReplayConfig(a="9859", b="10001"))  # -ub 512: -ub is worth saying
    a, b = generation_line(prep, "A"), generation_line(prep, "B")
    assert a.startswith("A b9859 is G1 (b9771–b9934, PR #24176: ")
    assert "upgrade to ≥ b9940 (PR #25420)" in a
    assert b.startswith("B b10001 is G2b (b9981–b10852, PR #25472: ") and "-cms" in b and "-ub 2048" in b
    assert generation_line(prepare(SEED, ReplayConfig(a="9763")), "A") == \
        "A b9763 is G0 (≤ b9763: pre-regression: break before the last user message only) — -ub 2048 makes " \
        "each batch one ubatch"
    old = prepare(SEED, ReplayConfig(a="9763", b="11434", n_ubatch=2048))
    assert generation_line(old, "A").startswith("A b9763 is G0 (≤ b9763: ")
    assert "-ub" not in generation_line(old, "B") and "-ub" not in generation_line(old, "A")  # one ubatch already


def test_the_app_markdown_text_and_json_carry_the_same_lines(seed_run):
    prep, cmp = seed_run
    lines = advice_for(prep, cmp)
    loss = batching_loss(prep, cmp)
    assert lines[:4] == [generation_line(prep, "A"), generation_line(prep, "B"), loss["A"].line(),
                         loss["B"].line()]
    assert lines[4].startswith("advice: upgrade to ")  # the best change for the slower build
    md = report(prep, cmp, "md").decode()
    assert all(f"- {line}" in md for line in lines)
    text = report(prep, cmp, "text").decode()  # the CLI's plain output
    assert all(f"• {line}" in text for line in lines)
    doc = orjson.loads(report(prep, cmp, "json"))
    assert [r["ideal_batching"]["text"] for r in doc["runs"]] == [loss["A"].line(), loss["B"].line()]
    assert doc["runs"][0]["ideal_batching"]["lost_ms"] == round(loss["A"].lost_ms, 1)


def test_a_run_that_did_not_finish_its_prefill_gets_no_ideal(seed_run):
    prep, _ = seed_run
    events = all_simulated(prep)
    cut = [e for e in events if not (e.run == "A" and isinstance(e, ev.RunFinished))]
    cut.append(ev.RunFailed(run="A", error="cancelled"))
    cmp = compare(cut)
    assert set(batching_loss(prep, cmp)) == {"B"}
    doc = orjson.loads(report(prep, cmp, "json"))
    assert doc["runs"][0]["ideal_batching"] is None and doc["runs"][1]["ideal_batching"]["ideal_ms"] > 0


def test_live_runs_are_priced_by_a_line_fitted_to_both_when_neither_batched_ideally(seed_run):
    """The same runs read as live ones (no cost model): the line fitted to their batches must give
    the ideal the cost model that timed those batches gives."""
    prep, cmp = seed_run
    modelled = batching_loss(prep, cmp)
    live_prep = dataclasses.replace(prep, config=dataclasses.replace(prep.config, engine="live"))
    live = Comparison(dataclasses.replace(cmp.a, engine="live"), dataclasses.replace(cmp.b, engine="live"))
    fitted = batching_loss(live_prep, live)
    for run in ("A", "B"):
        assert fitted[run].cost == "a line fitted to both runs' batches"
        assert fitted[run].ideal_ms == pytest.approx(modelled[run].ideal_ms, rel=0.03)
    assert fitted["A"].lost_pct > 50 and fitted["B"].lost_pct < 15  # the line is within 3 % of the model
