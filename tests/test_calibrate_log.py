"""``replay LOG --calibrate`` on a traffic log recorded from a real build (tests/data/traffic/
calibrate-b9859.jsonl: ``replayer record`` in front of b9859 with a tiny llama GGUF, two agents'
chat requests on one slot; ``test_calibrate_log_live.record_log`` wrote it). The server's own
``timings`` are the truth: the held-out part's server time is the logged ``prompt_ms``, its
priced time is the saved line's own price of the same requests. Bad input is one line, exit 2.
The same fit on a log the build writes during the test is test_calibrate_log_live.py's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from replayer.core.calibration import calibrated_cost, calibrations
from replayer.core.hardware import cost as costmod
from replayer.core.prepare import ReplayConfig
from replayer.core.record.calibrate_log import calibrate_log, timed_requests

from conftest import REPO

LOG = REPO / "tests/data/traffic/calibrate-b9859.jsonl"
SAMPLE = next((REPO / "tests/data/samples/claude-code").glob("*.jsonl"))


def _lines(path: Path = LOG) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replayer.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)


def _priced(line: costmod.LineCost, lines: list[dict], n_batch: int = 2048, n_ubatch: int = 512) -> float:
    """A request's prompt priced by hand: ``prompt_n`` tokens from ``cache_n`` in -b batches of -ub ubatches."""
    total = 0.0
    for x in lines:
        end = x["cache_n"] + x["prompt_n"]
        for start in range(x["cache_n"], end, n_batch):
            total += sum(line.ubatch_ms(b, d) for b, d in costmod.ubatches(start, min(n_batch, end - start), n_ubatch))
    return total


def test_the_fixture_is_a_real_builds_log_of_both_shapes():
    lines = _lines()
    assert all(x["endpoint"] == "/v1/chat/completions" and x["timings"]["prompt_ms"] > 0 for x in lines)
    assert len({x["thread"] for x in lines}) == 2
    assert sum(x["prompt_n"] > 1000 for x in lines) >= 4 and sum(x["cache_n"] > 1000 for x in lines) >= 10


def test_the_line_is_fitted_on_two_thirds_and_checked_on_the_last_third():
    lines = _lines()
    r = _cli("replay", str(LOG), "--calibrate", "--backend", "cpu", "--json")
    assert r.returncode == 0, r.stderr
    cal = json.loads(r.stdout)["calibration"]
    n_fit = round(len(lines) * 2 / 3)
    assert cal["id"] == "cpu-tiny" and cal["requests"] == n_fit and cal["source"] == "traffic log"
    assert cal["fitted_on"] == str(LOG) and cal["q_tile"] == costmod.FA_TILE_Q
    (held,) = cal["holdout"]
    rest = lines[n_fit:]
    assert held["requests"] == len(rest)
    assert held["live_ms"] == pytest.approx(sum(x["timings"]["prompt_ms"] for x in rest), abs=0.1)
    line = calibrated_cost("cpu-tiny")  # saved: what --calibration cpu-tiny prices with
    assert held["simulated_ms"] == pytest.approx(_priced(line, rest), abs=0.1)
    assert cal["held_out_error"] == pytest.approx(abs(held["simulated_ms"] / held["live_ms"] - 1), abs=1e-3)
    said = _cli("replay", str(LOG), "--calibrate", "--backend", "cpu").stdout  # the text says the same
    assert "held out calibrate-b9859.jsonl requests" in said and f"over {len(rest)} requests" in said


def test_with_holdout_logs_the_whole_log_is_fitted_and_each_other_log_checked(tmp_path):
    lines = _lines()
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    half = len(lines) // 2
    first.write_text("".join(json.dumps(x) + "\n" for x in lines[:half]))
    second.write_text("".join(json.dumps(x) + "\n" for x in lines[half:]))
    name, cal, said = calibrate_log(first, ReplayConfig(backend="cpu", holdout=(str(second),)))
    assert cal.requests == half and [h.requests for h in cal.holdout] == [len(lines) - half]
    assert cal.holdout[0].live_ms == pytest.approx(sum(x["timings"]["prompt_ms"] for x in lines[half:]), abs=0.1)
    assert cal.holdout[0].simulated_ms == pytest.approx(_priced(cal.line(name), lines[half:]), abs=0.1)
    assert name in calibrations() and "second.jsonl" in said


def test_the_users_batch_sizes_cut_the_requests():
    reqs = timed_requests(LOG)
    _, small, _ = calibrate_log(LOG, ReplayConfig(backend="cpu", n_batch=256, n_ubatch=64), save=False)
    _, big, _ = calibrate_log(LOG, ReplayConfig(backend="cpu"), save=False)
    assert (small.n_ubatch, small.n_batch) == (64, 256) and (big.n_ubatch, big.n_batch) == (512, 2048)
    assert small.batches > big.batches >= len(reqs) * 2 // 3


@pytest.mark.parametrize("make, says", [
    (lambda d: SAMPLE, "not a traffic log"),
    (lambda d: _write(d, [{**x, "timings": None} for x in _lines()]), "none of its"),
    (lambda d: _write(d, _lines()[:2]), "need at least three"),
])
def test_a_log_that_cannot_be_calibrated_is_one_line_and_exit_2(make, says, tmp_path):
    r = _cli("replay", str(make(tmp_path)), "--calibrate", cwd=tmp_path)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Traceback" not in r.stderr and not r.stdout


@pytest.mark.parametrize("flags, says", [(["--repeat", "3"], "recorded once"), (["--app"], "press c")])
def test_flags_that_do_not_apply_to_a_log_are_refused(flags, says, tmp_path):
    r = _cli("replay", str(LOG), "--calibrate", *flags, cwd=tmp_path)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr


def _write(d: Path, lines: list[dict]) -> Path:
    p = d / "log.jsonl"
    p.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return p


@pytest.mark.asyncio
async def test_c_on_a_traffic_logs_session_screen_calibrates_on_its_timings():
    from replayer.ui.app import ReplayerApp
    from replayer.ui.screens.session import SessionScreen, SessionSpec

    from helpers import wait_for

    cfg = ReplayConfig(backend="cpu", tokenizer="estimate")
    app = ReplayerApp(config=cfg, replay=SessionSpec(LOG, cfg))
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SessionScreen))
        await pilot.press("c")
        await wait_for(pilot, lambda: app.screen.calibration_text is not None)
        assert app.screen.calibration_text.startswith("calibrated cpu-tiny on calibrate-b9859.jsonl")
        assert "held-out error: at most" in app.screen.calibration_text
        assert "cpu-tiny" in calibrations()
