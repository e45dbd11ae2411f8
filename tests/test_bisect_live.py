"""A live bisection over real builds b9859, b9934, b10001 on a tiny GGUF: it must find the
boundary the simulator predicts over the same builds, and the catalog's exact boundary
(b9940, PR #25420) must lie inside the live answer.

The metric is the batch count, which needs no timing: b9859/b9934 (G1) cut the prefill
at every user start, b10001 (G2b) only where a checkpoint is due (never, for a plain-KV
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
BUILDS = (9859, 9934, 10001)


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
    predicted = bisect.simulated(path, cfg, good=10001, bad=9859, metric_=metric, candidates=BUILDS)
    assert predicted.answer() == {"first_good": 10001, "last_bad": 9934}
    exact = bisect.simulated(path, cfg, good=10001, bad=9859, metric_=metric)  # the catalog's builds
    assert exact.answer() == {"first_good": 9940, "last_bad": 9934}

    cancel = threading.Event()
    first: list[bisect.StepReport] = []

    def stop_after_one(step: bisect.StepReport) -> None:
        first.append(step)
        cancel.set()

    with pytest.raises(bisect.Cancelled):
        bisect.live(path, cfg, 10001, 9859, metric, model, candidates=BUILDS, resume=False,
                    on_step=stop_after_one, cancel=cancel)
    assert [s.build for s in first] == [10001] and not first[0].recorded

    res = bisect.live(path, cfg, 10001, 9859, metric, model, candidates=BUILDS)
    assert res.answer() == predicted.answer()
    assert res.found.last_old < exact.found.first_new <= res.found.first_new
    assert 25420 in [c.pr for c in res.changes()]
    assert [(s.build, s.recorded) for s in res.steps] == [(10001, True), (9859, False), (9934, False)]
    values = {s.build: s.value for s in res.steps}
    assert values[9859] == values[9934] > values[10001]  # G1 fragments the prefill, G2 does not
    assert [s.decision for s in res.steps] == ["good", "bad", "bad"]
    # the simulator (on its estimated layout) agrees on which builds fragment the prefill
    sim = {s.build: s.value for s in predicted.steps}
    assert (sim[9859] > sim[10001]) and (sim[9934] == sim[9859])


def test_live_bisect_cli_prints_each_step_and_the_prs(binaries, session_and_model):
    path, model = session_and_model
    proc = subprocess.run([sys.executable, "-m", "replayer.cli", "bisect", str(path), "--engine", "live",
                           "--good", "10001", "--bad", "9859", "--metric", "batches", "--model", str(model),
                           "--builds", ",".join(map(str, BUILDS)), "--json"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    doc = orjson.loads(proc.stdout)
    assert doc["first_good"] == 10001 and doc["last_bad"] == 9934 and 25420 in doc["prs"]
    steps = [line for line in proc.stderr.splitlines() if line.startswith("b") and "→" in line]
    assert [line.split()[0] for line in steps] == ["b10001", "b9859", "b9934"]
    assert doc["threshold"]["rule"].startswith("nearer")
