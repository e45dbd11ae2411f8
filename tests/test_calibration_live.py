"""``--calibrate --holdout`` end to end on real servers (CPU, tiny llama GGUF, b9859 and b10001).

The line is fitted on one session's live runs only; another session, of another shape, is
run live afterwards and simulated the way a user's ``replay S --calibration ID --model M.gguf``
would simulate it. The test checks what is recorded and that the simulator cut the held-out
prompt where the servers did; the size of the error is a timing goal and lives in
``benchmarks/calibration.py`` and docs/benchmarks.md, never in a test.
"""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from replayer.core.builds import manager
from replayer.core.tiny_models import make_tiny

from conftest import REPO
from helpers import agent_conversation

pytestmark = pytest.mark.live


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replayer.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=900)


def _session(path, **kw):
    msgs, tools = agent_conversation(**kw)
    path.write_bytes(orjson.dumps({"messages": msgs, "tools": tools}))
    return path


def test_a_line_fitted_on_one_session_is_checked_live_on_another(tmp_path):
    for b in (9859, 10001):
        manager.install(b, "cpu")
    model = make_tiny("llama", tmp_path / "llama.gguf")
    fit = _session(tmp_path / "fit.json", rounds=16, tool_result_words=60, seed=1)
    other = _session(tmp_path / "other.json", rounds=8, tool_result_words=200, seed=7)  # fewer, longer results
    r = _cli("replay", str(fit), "--engine", "live", "--a", "9859", "--b", "10001", "--model", str(model),
             "--calibrate", "--holdout", str(other), "--repeat", "2", "--json")
    assert r.returncode == 0, r.stderr
    doc = orjson.loads(r.stdout)
    cal = doc["calibration"]
    # two live runs of each session and build: the servers cut them alike, and their spread is said
    assert cal["repeat"] == 2 and cal["spread"] is not None and cal["spread"] >= 0
    assert "2 live runs of each session and build" in r.stderr
    fitted = {run["build"]: run for run in doc["runs"]}
    assert cal["id"] == "cpu-llama" and cal["fitted_on"].endswith("fit.json")
    assert cal["batches"] == sum(run["n_batches"] for run in doc["runs"])  # the fitted session's batches only
    checks = {h["build"]: h for h in cal["holdout"]}
    assert sorted(checks) == ["b10001", "b9859"] and all(h["session"].endswith("other.json") for h in checks.values())
    # the held-out session is really another prompt, and the simulator cut it where the servers did
    assert checks["b9859"]["live_batches"] != fitted["b9859"]["n_batches"]
    assert checks["b9859"]["live_batches"] > checks["b10001"]["live_batches"] > 0
    for h in checks.values():
        assert h["batches_match"], h
        assert h["live_ms"] > 0 and h["error"] == pytest.approx(h["simulated_ms"] / h["live_ms"] - 1, abs=1e-3)
    assert cal["held_out_error"] == pytest.approx(max(abs(h["error"]) for h in checks.values()))
    for h in checks.values():
        assert f"held out other.json {h['build']}: simulated" in r.stderr
    assert "held-out error: at most" in r.stderr
    # saved with the line: the listing shows the held-out error
    listed = {c["id"]: c for c in orjson.loads(_cli("presets", "--json").stdout)["calibrations"]}["cpu-llama"]
    assert listed["holdout"] == cal["holdout"] and listed["held_out_error"] == cal["held_out_error"]
    # the user's own simulated replay of the held-out session gives the recorded simulation exactly
    sim = orjson.loads(_cli("replay", str(other), "--a", "9859", "--b", "10001", "--model", str(model),
                            "--calibration", "cpu-llama", "--json").stdout)
    for run in sim["runs"]:
        h = checks[run["build"]]
        assert run["prompt_ms"] == pytest.approx(h["simulated_ms"], abs=0.1) and run["n_batches"] == h["live_batches"]


def test_without_holdout_the_calibration_says_its_error_is_unknown(tmp_path):
    for b in (9859, 10001):
        manager.install(b, "cpu")
    model = make_tiny("llama", tmp_path / "llama.gguf")
    fit = _session(tmp_path / "fit.json", rounds=6, tool_result_words=40, seed=3)
    r = _cli("replay", str(fit), "--engine", "live", "--a", "9859", "--b", "10001", "--model", str(model),
             "--calibrate", "--json")
    assert r.returncode == 0, r.stderr
    cal = orjson.loads(r.stdout)["calibration"]
    assert cal["holdout"] is None and cal["held_out_error"] is None
    assert "held-out error: not measured" in r.stderr
