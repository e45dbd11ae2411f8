"""Held-out checks of a calibration: the error record, what is saved and listed, and the refusals.

The live flow itself (fit on one session, run another live, simulate it) is in
``test_calibration_live.py``; these tests pin what it records, on the simulator's own runs.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import orjson
import pytest

from replayer.core import calibration
from replayer.core.compare import compare
from replayer.core.engine import events as ev
from replayer.core.errors import ReplayerError
from replayer.core.replay import ReplayConfig, all_simulated, prepare
from replayer.core.tiny_models import make_tiny

from conftest import FIXTURES, REPO

SESSION = FIXTURES / "openai" / "agent-45-rounds.json"


@pytest.fixture(autouse=True)
def _own_config_dir(tmp_path, monkeypatch):
    """Each test saves its own lines: never into the presets file other tests read."""
    monkeypatch.setenv("REPLAYER_CONFIG_DIR", str(tmp_path / "config"))


def _slower(events: list[ev.Event], factor: float) -> list[ev.Event]:
    """The same run with every time stretched: a machine ``factor`` times slower."""
    out = []
    for e in events:
        if isinstance(e, ev.BatchDone):
            e = dataclasses.replace(e, t_start_ms=e.t_start_ms * factor, t_ms=e.t_ms * factor)
        elif isinstance(e, ev.RunFinished):
            e = dataclasses.replace(e, prompt_ms=e.prompt_ms * factor, t_ms=e.t_ms * factor)
        out.append(e)
    return out


def test_held_out_error_is_zero_on_the_lines_own_timing_and_shows_a_slower_run():
    calibration.save_calibration("cpu-x", calibration.Calibration(fixed_ms=20.0, per_token_ms=0.3, attn_ms=1e-5,
                                                                  attn_small_ms=2e-4))
    prep = prepare(SESSION, ReplayConfig(calibration="cpu-x", model="llama-8b-q4_0", template="chatml"))
    sim = compare(all_simulated(prep))
    assert sim.a.n_batches > sim.b.n_batches > 1  # b9859 fragments the prompt, b10001 does not
    same = calibration.held_out("s.json", [sim.a], sim.a)
    assert same.error == 0 and same.batches_match and same.live_batches == same.simulated_batches == sim.a.n_batches
    slow = compare(_slower(all_simulated(prep), 1.25))
    h = calibration.held_out("s.json", [slow.b], sim.b)
    assert h.error == pytest.approx(1 / 1.25 - 1, abs=1e-4) and h.batches_match
    assert h.live_ms == pytest.approx(sim.b.prompt_ms * 1.25, abs=0.1)
    # another schedule (b9859's batches against b10001's) is reported as such, not hidden in the time
    assert not calibration.held_out("s.json", [sim.a], sim.b).batches_match


def test_repeated_runs_are_timed_by_each_batchs_median_and_their_spread_is_said():
    """Three runs of one build, the second 30 % slower as a whole and the third with one batch
    5 s late: the fit sees each batch's middle time, the held-out check the middle total."""
    calibration.save_calibration("cpu-x", calibration.Calibration(fixed_ms=20.0, per_token_ms=0.3, attn_ms=1e-5))
    prep = prepare(SESSION, ReplayConfig(calibration="cpu-x", model="llama-8b-q4_0", template="chatml"))
    base = all_simulated(prep)
    one, slow = compare(base), compare(_slower(base, 1.3))
    spiked = compare(base)
    spiked.a.batches[2] = dataclasses.replace(spiked.a.batches[2], t_ms=spiked.a.batches[2].t_ms + 5000.0)
    merged = calibration.median_batches([one.a.batches, slow.a.batches, spiked.a.batches])
    assert [(b.start, b.n_tokens) for b in merged] == [(b.start, b.n_tokens) for b in one.a.batches]
    # each batch: the middle of (x, 1.3x, x) is x; the spiked one's middle of (x, 1.3x, x + 5 s) is 1.3x
    assert [b.duration_ms for b in merged] == pytest.approx(
        [b.duration_ms * (1.3 if i == 2 else 1.0) for i, b in enumerate(one.a.batches)])
    two = calibration.median_batches([one.a.batches, slow.a.batches])  # two runs: the mean of each batch
    assert [b.duration_ms for b in two] == pytest.approx([b.duration_ms * 1.15 for b in one.a.batches])
    assert calibration.spread([one.a.prompt_ms, slow.a.prompt_ms]) == pytest.approx(0.3)
    assert calibration.spread([one.a.prompt_ms]) == 0.0
    h = calibration.held_out("s.json", [one.b, slow.b, compare(_slower(base, 1.1)).b], one.b)
    assert h.live_ms == pytest.approx(one.b.prompt_ms * 1.1, abs=0.1) and h.batches_match
    with pytest.raises(ReplayerError, match="different batches"):
        calibration.median_batches([one.a.batches, one.b.batches])  # b9859's cuts vs b10001's
    said = calibration.describe("cpu-x", calibration.Calibration(fixed_ms=1, per_token_ms=0.1, repeat=3, spread=0.3))
    assert "3 live runs of each session and build" in said and "up to 30.0 %" in said


def test_held_out_errors_are_saved_with_the_line_and_listed():
    h = calibration.HeldOut(session="/s/other.json", build="b10001", live_ms=1000.0, simulated_ms=930.0,
                            error=-0.07, batches_match=True, live_batches=8, simulated_batches=8)
    calibration.save_calibration("cpu-a", calibration.Calibration(fixed_ms=1, per_token_ms=0.1, holdout=[h],
                                                                  fitted_on="/s/fit.json"))
    calibration.save_calibration("cpu-b", calibration.Calibration(fixed_ms=1, per_token_ms=0.1))
    saved = calibration.calibrations()
    assert saved["cpu-a"].holdout == [h] and saved["cpu-a"].held_out_error() == pytest.approx(0.07)
    assert saved["cpu-b"].holdout is None and saved["cpu-b"].held_out_error() is None
    said = calibration.describe("cpu-a", saved["cpu-a"])
    assert "calibrated cpu-a on fit.json" in said and "held out other.json b10001" in said and "-7.0 %" in said
    assert "held-out error: at most 7.0 % over 1 runs" in said
    assert "held-out error: not measured" in calibration.describe("cpu-b", saved["cpu-b"])
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "presets"], capture_output=True, text=True, cwd=REPO)
    listed = {line.split()[0]: line for line in r.stdout.splitlines() if line.startswith("  cpu-")}
    assert "held-out error 7.0 %" in listed["cpu-a"] and "held-out error not measured" in listed["cpu-b"]
    js = {c["id"]: c for c in orjson.loads(subprocess.run([sys.executable, "-m", "replayer.cli", "presets", "--json"],
                                                          capture_output=True, cwd=REPO).stdout)["calibrations"]}
    assert js["cpu-a"]["held_out_error"] == pytest.approx(0.07) and js["cpu-b"]["held_out_error"] is None


def test_a_held_out_record_that_is_not_a_number_is_one_error():
    f = calibration.save_calibration("cpu-a", calibration.Calibration(fixed_ms=1, per_token_ms=0.1))
    doc = orjson.loads(f.read_bytes())
    doc["calibrations"]["cpu-a"]["holdout"] = [{"session": "s", "build": "b1", "live_ms": "fast"}]
    f.write_bytes(orjson.dumps(doc))
    with pytest.raises(ReplayerError, match="damaged"):
        calibration.calibrations()


@pytest.mark.parametrize("extra, message", [
    ([], "--holdout checks a calibration"),  # no --calibrate
    (["--calibrate", "--engine", "simulated"], "--holdout checks a calibration"),
    (["--calibrate", "--engine", "live", "--model", "llama-8b-q4_0"], "give --model PATH.gguf"),
])
def test_holdout_is_refused_where_it_cannot_check_anything(extra, message):
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(SESSION), "--holdout", str(SESSION),
                        *extra], capture_output=True, text=True, cwd=REPO)
    assert r.returncode != 0 and message in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2 and not r.stdout


def test_repeat_is_refused_without_a_live_calibration():
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(SESSION), "--repeat", "3"],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode != 0 and "--repeat times a calibration" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(SESSION), "--repeat", "0"],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode != 0 and "--repeat" in r.stderr and "Traceback" not in r.stderr


def test_a_missing_held_out_session_is_refused_before_any_server_starts(tmp_path):
    model = make_tiny("llama", tmp_path / "tiny.gguf")
    cfg = ReplayConfig(engine="live", model=str(model), calibrate=True, holdout=(str(tmp_path / "nope.json"),))
    from replayer.core.replay import HeldOutSession

    with pytest.raises(ReplayerError, match="nope.json"):
        HeldOutSession.prepare(cfg.holdout[0], cfg)
    # and the held-out simulation is the user's simulated replay of that GGUF: its header's memory kind
    held = HeldOutSession.prepare(str(SESSION), cfg)
    assert held.simulated.config.engine == "simulated" and held.simulated.config.tokenizer_eff == f"gguf:{model}"
    assert held.simulated.config.knobs().memory == "plain" and held.live.config.engine == "live"
    assert not held.live.config.calibrate and not held.live.config.holdout


def test_a_held_out_run_that_fails_is_said_not_dropped(tmp_path):
    """Servers that refuse the connection: no error is made up for the line, each run says why."""
    from replayer.core.replay import HeldOutSession

    model = make_tiny("llama", tmp_path / "tiny.gguf")
    calibration.save_calibration("cpu-tiny", calibration.Calibration(fixed_ms=1, per_token_ms=0.1))
    cfg = ReplayConfig(engine="live", model=str(model), calibrate=True, holdout=(str(SESSION),),
                       server="http://127.0.0.1:1", server_b="http://127.0.0.1:1", timeout=5)
    held = HeldOutSession.prepare(str(SESSION), cfg)
    checks, failed = held.check("cpu-tiny", [held.run_live()])
    assert checks == [] and len(failed) == 2
    assert all("held out agent-45-rounds.json" in f and "the live run failed" in f for f in failed)


def test_cpu_attention_is_priced_in_whole_query_tiles():
    """ggml-cpu's tiled flash attention computes 64-row query tiles, the last one zero-padded:
    65 tokens cost two tiles, 64 one, and a short ubatch (row by row) its own rows."""
    from replayer.core.hardware import cost as costmod

    assert costmod.attn_work(65, 1000, 64) == 64 * (1000 + 64) + 64 * (1000 + 65)
    assert costmod.attn_work(128, 1000, 64) == costmod.attn_work(65, 1000, 64) + 64 * (128 - 65)  # same tiles, keys to row 128
    assert costmod.attn_work(64, 0, 64) == 64 * 64
    assert costmod.attn_work(63, 1000, 64) == costmod.attn_work(63, 1000, 0) == 63 * (1000 + 32)
    # without tiles, every row reads the keys up to itself
    assert costmod.attn_work(512, 0, 0) == 512 * 513 / 2
    line = calibration.Calibration(fixed_ms=1.0, per_token_ms=0.0, attn_ms=1e-6, q_tile=64, backend="cpu").line("t")
    assert line.ubatch_ms(65, 10_000) == pytest.approx(line.ubatch_ms(128, 10_000) - 1e-6 * 64 * 63)
    assert calibration.q_tile_for("cpu") == 64 and calibration.q_tile_for("cuda") == 0
    # a line saved before tiles were counted prices as it was fitted: per row
    old = calibration.Calibration.model_validate({"fixed_ms": 1.0, "per_token_ms": 0.0, "attn_ms": 1e-6})
    assert old.q_tile == 0 and old.line("o").ubatch_ms(65, 1000) == pytest.approx(1.0 + 1e-6 * 65 * 1033)
