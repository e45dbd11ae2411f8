"""A calibration must predict sessions it was not fitted on (CPU, tiny GGUF, b9859 and b10001).

``--calibrate`` fits the cost line on one session's live runs; ``--holdout`` runs another
session live and reports the line's error on it. The test then simulates that held-out
session itself (``--calibration``, the GGUF's own layout and memory kind) and compares with
the live prompt times. The machine is shared: see docs/benchmarks.md for the noise.
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


def cli(*args: str, timeout: int = 1200) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replayer.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout)


def _session(path, **kw):
    msgs, tools = agent_conversation(**kw)
    path.write_bytes(orjson.dumps({"messages": msgs, "tools": tools}))
    return path


def test_calibrated_on_one_session_predicts_another(tmp_path):
    for b in (9859, 10001):
        manager.install(b, "cpu")
    model = make_tiny("llama", tmp_path / "llama.gguf")
    fit = _session(tmp_path / "fit.json", rounds=60, tool_result_words=120, seed=1)
    other = _session(tmp_path / "other.json", rounds=40, tool_result_words=250, seed=7)  # longer tool results
    r = cli("replay", str(fit), "--engine", "live", "--a", "9859", "--b", "10001", "--model", str(model),
            "--calibrate", "--holdout", str(other), "--json")
    assert r.returncode == 0, r.stderr
    assert "held out other.json b9859" in r.stderr and "held-out error: at most" in r.stderr
    fitted = orjson.loads(r.stdout)
    cal = {c["id"]: c for c in orjson.loads(cli("presets", "--json").stdout)["calibrations"]}["cpu-llama"]
    # fitted on the first session's batches only
    assert cal["batches"] == sum(run["n_batches"] for run in fitted["runs"])
    assert cal["fitted_on"].endswith("fit.json") and len(cal["holdout"]) == 2
    # the held-out session, simulated by the user's path: the saved line, the GGUF's header and vocabulary
    sim = orjson.loads(cli("replay", str(other), "--a", "9859", "--b", "10001", "--model", str(model),
                           "--calibration", "cpu-llama", "--json").stdout)
    for check, sim_run in zip(cal["holdout"], sim["runs"]):
        assert check["batches_match"]  # the same schedule as the live server's
        assert sim_run["prompt_ms"] == pytest.approx(check["simulated_ms"], abs=0.1)
        assert sim_run["prompt_ms"] == pytest.approx(check["live_ms"], rel=0.10), check
