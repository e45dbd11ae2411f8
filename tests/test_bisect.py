"""replayer bisect: the pure search on recorded measurements, and the simulated engine on the seed."""

from __future__ import annotations

import statistics
from pathlib import Path

import orjson
import pytest

from replayer import cli
from replayer.core import bisect
from replayer.core.bisect import Found, Measure, Threshold, Undecided, classify, next_step, search
from replayer.core.builds import changes
from replayer.core.replay import ReplayConfig, demo_session_path

SEED = str(demo_session_path())
DATA = Path(__file__).parent / "data"


def _json(capsys, argv: list[str]) -> tuple[int, dict]:
    rc = cli.main(argv)
    return rc, orjson.loads(capsys.readouterr().out)


# -- simulated -------------------------------------------------------------------------------

def test_regression_on_the_seed_is_b9771_pr_24176(capsys):
    rc, doc = _json(capsys, ["bisect", SEED, "--good", "9763", "--bad", "9859", "--json"])
    assert rc == 0
    assert doc["first_bad"] == 9771 and doc["last_good"] == 9763
    assert 24176 in doc["prs"]
    assert [b["prs"] for b in doc["boundaries"]] == [[24176]]


def test_reversed_range_finds_the_first_good_build_b9940_pr_25420(capsys):
    rc, doc = _json(capsys, ["bisect", SEED, "--good", "10001", "--bad", "9859", "--json"])
    assert rc == 0
    assert doc["first_good"] == 9940 and doc["last_bad"] == 9934
    assert doc["prs"] == [25420]
    assert "first_bad" not in doc
    # #25472 changes the modelled time a little but not which end it is near: reported as a boundary
    assert [b["first"] for b in doc["boundaries"]] == [9940, 9981]
    assert doc["boundaries"][1]["prs"] == [25472]


def test_boundaries_follow_the_model_not_a_list(capsys):
    """The Qwen3-Coder template change moves user starts, so it is a boundary for the seed's
    Qwen3.6 model and not for a Llama model; G2a→G2b changes nothing for a plain-KV model."""
    _, qwen = _json(capsys, ["bisect", SEED, "--good", "9763", "--bad", "11434", "--metric", "batches", "--json"])
    _, llama = _json(capsys, ["bisect", SEED, "--good", "9763", "--bad", "11434", "--metric", "batches",
                              "--model", "llama-8b-q4_0", "--json"])
    q = {b["first"] for b in qwen["boundaries"]}
    ll = {b["first"] for b in llama["boundaries"]}
    assert {9771, 9940, 10227} <= q
    assert 10227 not in ll and 9981 not in ll and {9771, 9940} <= ll
    layout = next(b for b in qwen["boundaries"] if b["first"] == 10227)
    assert layout["changes"][0]["kind"] == "layout" and layout["changes"][0]["pr"] is None


def test_ends_that_measure_alike_are_undecided(capsys):
    rc, doc = _json(capsys, ["bisect", SEED, "--good", "10001", "--bad", "9940", "--metric", "batches", "--json"])
    assert rc == 1 and "measure alike" in doc["undecided"]


def test_text_output_prints_steps_threshold_and_prs(capsys):
    assert cli.main(["bisect", SEED, "--good", "9763", "--bad", "9859"]) == 0
    out = capsys.readouterr().out
    assert "b9821" in out and "→ bad" in out
    assert "threshold: nearer" in out and "first bad: b9771" in out and "PR #24176" in out


@pytest.mark.parametrize("argv,needle", [
    (["--good", "9859", "--bad", "9859"], "same build"),
    (["--good", "G1", "--bad", "9859"], "build number"),
    (["--good", "9763", "--bad", "9859", "--band", "0.7"], "--band"),
])
def test_bad_input_is_one_line(capsys, argv, needle):
    assert cli.main(["bisect", SEED, *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err


def test_changes_index_brackets():
    assert [c.pr for c in changes.between(9763, 9859) if c.pr] == [24176]
    assert changes.boundary_builds(9859, 10001) == [9859, 9934, 9940, 9976, 9981, 10001]
    assert changes.introducing("G2b").pr == 25472 and changes.introducing("G0") is None


# -- the pure search on measurements ----------------------------------------------------------

def test_classify_uses_the_explicit_band():
    thr = Threshold(band=0.25)
    assert classify([100.0], 100.0, 50.0, thr) == "good"
    assert classify([70.0], 100.0, 50.0, thr) == "unsure"  # within 12.5 of the midpoint 75
    assert classify([62.4], 100.0, 50.0, thr) == "bad"
    assert classify([90.0, 60.0, 88.0], 100.0, 50.0, thr) == "good"  # the median decides
    assert "62.5 … 87.5" in thr.describe(100.0, 50.0)


def test_next_step_is_a_function_of_the_measurements():
    cands = [1, 2, 3, 4, 5]
    thr = Threshold()
    assert next_step(cands, 1, 5, {}, thr) == Measure(1, "reference: the good end")
    assert next_step(cands, 1, 5, {1: [10.0]}, thr) == Measure(5, "reference: the bad end")
    assert next_step(cands, 1, 5, {1: [10.0], 5: [20.0]}, thr) == Measure(3, "bisect")
    assert next_step(cands, 1, 5, {1: [10.0], 5: [20.0], 3: [19.0]}, thr) == Measure(2, "bisect")
    assert next_step(cands, 1, 5, {1: [10.0], 5: [20.0], 3: [19.0], 2: [11.0]}, thr) == Found(2, 3)
    assert isinstance(next_step(cands, 1, 5, {1: [10.0], 5: [10.2], 3: [19.0]}, Threshold(max_samples=1)),
                      Undecided)


# -- recorded live measurements (fixtures/record_bisect_tps.py; real tok/s of real builds) ---

def _recorded(label: str) -> dict[int, list[float]]:
    doc = orjson.loads((DATA / "bisect-recorded-tps.json").read_bytes())
    return {int(b): list(v) for b, v in doc[label]["samples"].items()}


def _replay(recorded: dict[int, list[float]]):
    """A measure function that hands out the recorded values of each build in order."""
    queues = {b: list(v) for b, v in recorded.items()}
    return lambda build: queues[build].pop(0)


def test_search_on_recorded_live_measurements_finds_the_g1_g2_boundary():
    rec = _recorded("9859-9934-10001 while b11434 compiled")
    res = search([9859, 9934, 10001], 10001, 9859, _replay(rec), Threshold(), engine="live",
                 metric_=bisect.metric("prompt_tps"))
    assert res.answer() == {"first_good": 10001, "last_bad": 9934}
    assert [(s.build, s.decision) for s in res.steps] == [(10001, "good"), (9859, "bad"), (9934, "bad")]
    assert 25420 in [c.pr for c in res.changes()]


def test_a_noisy_measurement_is_repeated_and_the_threshold_decides():
    """b9859 and b10001 measured three times each while another build compiled. The ends'
    first values are the references; b10001's later two values (a G2 build under load) stand
    for a middle build: both land inside the band, so it is measured again, and with three
    samples still undecided the search says so instead of guessing. A narrower band decides."""
    rec = _recorded("9859-10001 while another build compiled")
    g, b = rec[10001][0], rec[9859][0]
    noisy = rec[10001][1:]
    thr = Threshold(band=0.25, max_samples=3)
    assert [classify([v], g, b, thr) for v in noisy] == ["unsure", "unsure"]
    samples = {10001: [g], 9859: [b], 9900: [noisy[0]]}
    assert next_step([9859, 9900, 10001], 10001, 9859, samples, thr) == Measure(9900, "too close to call: again")
    samples[9900].append(noisy[1])
    assert next_step([9859, 9900, 10001], 10001, 9859, samples, Threshold(band=0.25, max_samples=2)) \
        == Undecided(f"b9900 stays between the ends after 2 samples (median {statistics.median(noisy):,.4g}; "
                     f"good {g:,.4g}, bad {b:,.4g})")
    narrow = Threshold(band=0.05)
    assert next_step([9859, 9900, 10001], 10001, 9859, samples, narrow) == Found(9859, 9900)
    # the whole drive, replaying the values in the order they were taken
    res = search([9859, 9900, 10001], 10001, 9859, _replay({10001: [g], 9859: [b], 9900: list(noisy)}),
                 Threshold(band=0.25, max_samples=2), engine="live", metric_=bisect.metric("prompt_tps"))
    assert [s.decision for s in res.steps] == ["good", "bad", "unsure", "unsure"]
    assert res.undecided and res.found is None
