"""``replay LOG --calibrate`` on a traffic log a real build just wrote (b9859, tiny llama GGUF).

Two agents' tool-calling conversations share one slot (``-np 1``, no host cache), so the server
re-processes a whole prompt from depth 0 when the other agent speaks and a short tail at depth
otherwise: requests of many sizes and depths, timed by the server (``timings``). The line is
fitted on the first two thirds and checked on the last third; checked against the server's own
numbers, nothing fitted: the held-out part's server time is the sum of the logged ``prompt_ms``,
its priced time is the saved line's price of those requests, and the saved line then times a
session replay of the log (``--calibration ID``). The error itself is recorded in
docs/benchmarks.md, not asserted.

``record_log`` also wrote tests/data/traffic/calibrate-b9859.jsonl, the non-live tests' log
(``python tests/test_calibrate_log_live.py OUT.jsonl`` records another one).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from replayer.core.engine.live import LiveOptions, LiveServer
from replayer.core.runspec import Knobs
from replayer.core.tiny_models import make_tiny

from conftest import REPO
from helpers import agent_conversation
from record_fakes import proxy_to
from test_record_live import BUILD, _binary, _prefixes, chat_body

pytestmark = pytest.mark.live
CTX = 16384


def conversation(seed: int = 7) -> list[dict]:
    """Two agents' chat requests (their own system prompts) in an interleaved order, one stream in two."""
    rng = random.Random(seed)
    threads = []
    for k in range(2):
        msgs, tools = agent_conversation(rounds=7, seed=k + 1, tool_result_words=40 + 60 * k)
        msgs[0]["content"] = f"You are agent {k}. " + msgs[0]["content"]
        threads.append([chat_body(p, tools, stream=i % 2 == 1) for i, p in enumerate(_prefixes(msgs, 14))])
    out, at, cur = [], [0, 0], 0
    while at[0] < len(threads[0]) or at[1] < len(threads[1]):
        if at[cur] >= len(threads[cur]) or (at[1 - cur] < len(threads[1 - cur]) and rng.random() < 0.35):
            cur = 1 - cur
        out.append(threads[cur][at[cur]])
        at[cur] += 1
    return out


def record_log(binary: Path, model: Path, out: Path) -> list[dict]:
    """The conversation through ``replayer record`` to a real server; the log's lines."""
    with LiveServer(LiveOptions(binary=binary, model=model, ctx_size=CTX), Knobs(), CTX) as server, \
            httpx.Client(timeout=120) as c:
        server.wait_healthy(c)
        with proxy_to(server.url, out) as proxy:
            bodies = conversation()
            for body in bodies:
                r = c.post(f"{proxy.url}/v1/chat/completions", json=body)
                assert r.status_code == 200, r.text[:300]
            return proxy.wait_lines(len(bodies))


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    d = tmp_path_factory.mktemp("calibrate-log")
    model = make_tiny("llama", d / "llama.gguf")
    log = d / "traffic.jsonl"
    return {"log": log, "model": model, "lines": record_log(_binary(), model, log), "dir": d}


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replayer.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_the_line_fitted_on_the_logs_timings_is_checked_on_its_last_third(recorded):
    from replayer.core.calibration import calibrated_cost
    from replayer.core.hardware import cost as costmod

    lines = recorded["lines"]
    assert all(x["timings"] and x["timings"]["prompt_ms"] > 0 for x in lines)
    assert sum(x["prompt_n"] > 1000 for x in lines) >= 4 and sum(x["cache_n"] > 1000 for x in lines) >= 10
    r = _cli("replay", str(recorded["log"]), "--calibrate", "--backend", "cpu", "--model", str(recorded["model"]),
             "--json", cwd=recorded["dir"])
    assert r.returncode == 0, r.stderr
    cal = json.loads(r.stdout)["calibration"]
    n_fit = round(len(lines) * 2 / 3)
    assert cal["id"] == "cpu-llama" and cal["requests"] == n_fit
    (held,) = cal["holdout"]
    rest = lines[n_fit:]
    assert held["requests"] == len(rest)
    assert held["live_ms"] == pytest.approx(sum(x["timings"]["prompt_ms"] for x in rest), abs=0.1)
    line = calibrated_cost(cal["id"])  # the saved line, read back as a replay reads it
    priced = sum(line.ubatch_ms(b, d) for x in rest
                 for start in range(x["cache_n"], x["cache_n"] + x["prompt_n"], 2048)
                 for b, d in costmod.ubatches(start, min(2048, x["cache_n"] + x["prompt_n"] - start), 512))
    assert held["simulated_ms"] == pytest.approx(priced, abs=0.1)
    assert held["error"] == pytest.approx(held["simulated_ms"] / held["live_ms"] - 1, abs=1e-3)
    # the line times a replay of the same log: the session report's simulated prompt time is the line's
    r = _cli("replay", str(recorded["log"]), "--mode", "session", "--a", str(BUILD), "--b", str(BUILD),
             "--model", str(recorded["model"]), "--calibration", cal["id"], "--json", cwd=recorded["dir"])
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["observed"]["agreement"]["A"]["same_cache_n"] == len(lines)  # the replay reuses what the server did
    assert doc["observed"]["agreement"]["A"]["timed_simulated_ms"] > 0


if __name__ == "__main__":  # record a log for the non-live tests: python tests/test_calibrate_log_live.py OUT
    out = Path(sys.argv[1])
    tiny = make_tiny("llama", out.with_suffix(".gguf"))
    got = record_log(_binary(), tiny, out)
    print(f"{len(got)} requests logged to {out}", file=sys.stderr)
