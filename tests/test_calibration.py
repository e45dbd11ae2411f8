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
    same = calibration.held_out("s.json", sim.a, sim.a)
    assert same.error == 0 and same.batches_match and same.live_batches == same.simulated_batches == sim.a.n_batches
    slow = compare(_slower(all_simulated(prep), 1.25))
    h = calibration.held_out("s.json", slow.b, sim.b)
    assert h.error == pytest.approx(1 / 1.25 - 1, abs=1e-4) and h.batches_match
    assert h.live_ms == pytest.approx(sim.b.prompt_ms * 1.25, abs=0.1)
    # another schedule (b9859's batches against b10001's) is reported as such, not hidden in the time
    assert not calibration.held_out("s.json", sim.a, sim.b).batches_match


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
    checks, failed = HeldOutSession.prepare(str(SESSION), cfg).check("cpu-tiny")
    assert checks == [] and len(failed) == 2
    assert all("held out agent-45-rounds.json" in f and "the live run failed" in f for f in failed)
