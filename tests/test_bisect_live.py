"""A live bisection over real builds b9917, b9934, b9940 (package-index neighbours around
PR #25420) on a tiny GGUF: it must find the boundary the simulator predicts.

The metric is the batch count, which needs no timing: b9917/b9934 (G1) cut the prefill
at every user start, b9940 (G2a) only where a checkpoint is due (never, for a plain-KV
model). The first run is interrupted after its first measurement; the second takes that
measurement up from the journal and measures only the rest.
"""

from __future__ import annotations

import subprocess
import sys
import threading

import orjson
import pytest

from replayer.core import bisect
from replayer.core.builds import manager
from replayer.core.replay import ReplayConfig
from replayer.core.tiny_models import make_tiny

from helpers import agent_conversation

pytestmark = pytest.mark.live
BUILDS = (9917, 9934, 9940)


@pytest.fixture(scope="module")
def binaries():
    """Real builds through the build manager (cached; ccache makes the neighbours quick)."""
    return {b: manager.install(b, "cpu").binary for b in BUILDS}


@pytest.fixture(scope="module")
def session_and_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("bisect-live")
    msgs, tools = agent_conversation(rounds=12)
    path = d / "body.json"
    path.write_bytes(orjson.dumps({"messages": msgs, "tools": tools}))
    return path, make_tiny("llama", d / "llama.gguf")


def test_live_bisect_finds_the_simulated_boundary_and_resumes(binaries, session_and_model):
    path, model = session_and_model
    cfg = ReplayConfig(model="llama-8b-q4_0", n_batch=2048, n_ubatch=512)  # the plain-KV preset for the sim
    metric = bisect.metric("batches")
    predicted = bisect.simulated(path, cfg, good=9940, bad=9917, metric_=metric)
    assert predicted.answer() == {"first_good": 9940, "last_bad": 9934}

    cancel = threading.Event()
    first: list[bisect.StepReport] = []

    def stop_after_one(step: bisect.StepReport) -> None:
        first.append(step)
        cancel.set()

    with pytest.raises(bisect.Cancelled):
        bisect.live(path, cfg, 9940, 9917, metric, model, resume=False, on_step=stop_after_one, cancel=cancel)
    assert [s.build for s in first] == [9940] and not first[0].recorded

    res = bisect.live(path, cfg, 9940, 9917, metric, model)
    assert res.answer() == predicted.answer()
    assert [c.pr for c in res.changes()] == [25420]
    assert [(s.build, s.recorded) for s in res.steps] == [(9940, True), (9917, False), (9934, False)]
    values = {s.build: s.value for s in res.steps}
    assert values[9917] == values[9934] > values[9940]  # G1 fragments; the same on both G1 builds
    assert [s.decision for s in res.steps] == ["good", "bad", "bad"]


def test_live_bisect_cli_prints_each_step_and_the_prs(binaries, session_and_model):
    path, model = session_and_model
    proc = subprocess.run([sys.executable, "-m", "replayer.cli", "bisect", str(path), "--engine", "live",
                           "--good", "9940", "--bad", "9917", "--metric", "batches", "--model", str(model),
                           "-ub", "512", "--json"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    doc = orjson.loads(proc.stdout)
    assert doc["first_good"] == 9940 and doc["last_bad"] == 9934 and doc["prs"] == [25420]
    steps = [line for line in proc.stderr.splitlines() if line.startswith("b99") and "→" in line]
    assert [line.split()[0] for line in steps] == ["b9940", "b9917", "b9934"]
    assert doc["threshold"]["rule"].startswith("nearer")
