"""replayer advise: ranked by the simulated time of the session, and every command it prints runs."""

from __future__ import annotations

import shlex

import orjson
import pytest

from replayer import cli
from replayer.core.advise import Settings, advise, settings_from, verdict_advice
from replayer.core.compare import compare
from replayer.core.replay import ReplayConfig, all_simulated, demo_session_path, prepare

SEED = str(demo_session_path())


def _advise_json(capsys, argv: list[str]) -> dict:
    assert cli.main(argv) == 0
    return orjson.loads(capsys.readouterr().out)


def test_g1_build_recommends_the_upgrade_first_with_its_saving(capsys):
    doc = _advise_json(capsys, ["advise", SEED, "--build", "9859", "-ub", "2048", "--json"])
    assert doc["generation"] == "G1" and doc["generation_pr"] == 24176
    recs = doc["recommendations"]
    assert recs and recs[0]["kind"] == "upgrade"
    top = recs[0]
    assert top["saving_ms"] == pytest.approx(doc["today"]["prompt_ms"] - top["prompt_ms"], abs=0.2)
    assert top["saving_pct"] > 50  # the regression costs more than half the prompt time
    # best first
    assert [r["prompt_ms"] for r in recs] == sorted(r["prompt_ms"] for r in recs)
    # on G1 the breaks are unconditional: no checkpoint flag helps without the upgrade
    alone = [r for r in recs if r["kind"] in ("checkpoint-min-step", "ctx-checkpoints")]
    assert alone == []


def test_g2_hybrid_ranks_checkpoint_flags_and_a_plain_model_gets_none(capsys):
    hybrid = _advise_json(capsys, ["advise", SEED, "--build", "10001", "-ub", "2048", "--json"])
    kinds = [r["kind"] for r in hybrid["recommendations"]]
    assert "checkpoint-min-step" in kinds and "ctx-checkpoints" in kinds
    cms = [r for r in hybrid["recommendations"] if r["kind"] == "checkpoint-min-step"]
    assert all(r["tradeoff"] for r in cms)  # fewer checkpoints is never free
    plain = _advise_json(capsys, ["advise", SEED, "--build", "10001", "--model", "llama-8b-q4_0", "-ub", "2048",
                                  "--json"])
    assert not [r for r in plain["recommendations"] if r["kind"] in ("checkpoint-min-step", "ctx-checkpoints")]
    assert any(n["kind"] == "checkpoint-min-step" for n in plain["no_effect"])


def test_g3_build_hybrid_also_ranks_checkpoint_flags():
    adv = advise(SEED, settings_from(ReplayConfig.seed(), "11434"))
    assert any(r["kind"] in ("checkpoint-min-step", "ctx-checkpoints") for r in adv.recommendations)
    assert not any(r["kind"] == "upgrade" for r in adv.recommendations)  # nothing newer to upgrade to


@pytest.mark.parametrize("build", ["9859", "10001"])
def test_every_recommendation_command_runs_and_reproduces_its_time(capsys, build):
    doc = _advise_json(capsys, ["advise", SEED, "--build", build, "-ub", "2048", "--json"])
    assert doc["recommendations"]
    for r in doc["recommendations"]:
        argv = shlex.split(r["replayer_command"])
        assert argv[0] == "replayer"
        again = _advise_json(capsys, argv[1:])
        assert again["today"]["prompt_ms"] == pytest.approx(r["prompt_ms"], abs=0.1), r["title"]


def test_parallel_slots_that_cannot_hold_the_prompt_are_fixed_by_kv_unified(capsys):
    doc = _advise_json(capsys, ["advise", SEED, "--build", "10001", "-ub", "2048", "-c", "131072", "-np", "4",
                                "--json"])
    assert doc["today"]["error"] and "does not fit" in doc["today"]["error"]
    titles = [r["title"] for r in doc["recommendations"]]
    assert "--kv-unified" in titles and "-np 1" in titles


def test_resume_mode_says_why_it_cannot_price_session_switches():
    adv = advise(SEED, settings_from(ReplayConfig.seed(), "10001"))
    reasons = {n["title"]: n["reason"] for n in adv.no_effect}
    assert "session mode" in reasons["--cache-ram 8192"]
    assert any(n["side"] == "client" for n in adv.no_effect)


def test_verdict_advice_names_generation_pr_and_the_top_recommendation():
    prep = prepare(SEED, ReplayConfig.seed(a="9859", b="10001"))
    cmp = compare(all_simulated(prep))
    slower = "A" if cmp.a.prompt_ms > cmp.b.prompt_ms else "B"
    lines = verdict_advice(prep, slower)
    assert lines[0].startswith("A b9859 is G1") and "PR #24176" in lines[0]
    top = advise(SEED, settings_from(prep.config, "9859")).recommendations[0]
    assert top["title"] in lines[1] and "saves" in lines[1]


def test_advise_bad_input_is_one_line(capsys):
    assert cli.main(["advise", SEED, "--build", "9859", "--model", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown model" in err


def test_settings_flags_round_trip():
    s = Settings(ReplayConfig.seed(a="10001", checkpoint_min_step=4096), swa_full=True, n_parallel=2)
    flags = s.server_flags()
    assert flags[flags.index("--checkpoint-min-step") + 1] == "4096" and "--swa-full" in flags
