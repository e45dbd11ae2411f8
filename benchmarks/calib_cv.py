"""Cross-validation of the calibrated cost line on recorded live runs (CPU, tiny llama GGUF).

    python benchmarks/calib_cv.py record OUT.jsonl [REPEATS]   # live: 4 session shapes × b9859, b10001
    python benchmarks/calib_cv.py cv OUT.jsonl [--median] [--all]  # fit on each shape, predict the others

``record`` writes every batch's (start, tokens, ms) of each live run; ``cv`` fits the product's
line (``calibration.fit_cost``) on one shape's two runs and prices the other shapes' runs
with it, per-row attention (q_tile 0) against whole query tiles (q_tile 64). ``--median``
first times each batch by the median of its repeats, as ``--calibrate --repeat`` does.
The numbers are in docs/benchmarks.md ("Held-out calibration").
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

SHAPES = {"r60w2": dict(rounds=60, tool_result_words=2, seed=3),
          "r40w150": dict(rounds=40, tool_result_words=150, seed=7),
          "r30w60": dict(rounds=30, tool_result_words=60, seed=11),
          "r90w20": dict(rounds=90, tool_result_words=20, seed=13)}


def record(out: Path, repeats: int) -> None:
    import orjson

    from helpers import agent_conversation
    from replayer.core.replay import ReplayConfig, prepare, replay
    from replayer.core.tiny_models import make_tiny

    d = Path(tempfile.mkdtemp())
    model = make_tiny("llama", d / "llama.gguf")
    for rep in range(repeats):
        for name, kw in SHAPES.items():  # the shapes in turns: a slow spell hits every shape alike
            msgs, tools = agent_conversation(**kw)
            p = d / f"{name}.json"
            p.write_bytes(orjson.dumps({"messages": msgs, "tools": tools}))
            res = replay(prepare(p, ReplayConfig(engine="live", model=str(model), a="9859", b="10001")))
            for r in (res.comparison.a, res.comparison.b):
                rec = {"shape": name, "rep": rep, "build": r.build, "load": os.getloadavg()[0],
                       "prompt_ms": r.prompt_ms, "batches": [(b.start, b.n_tokens, b.duration_ms) for b in r.batches]}
                with out.open("a") as f:
                    f.write(json.dumps(rec) + "\n")
                print(name, rep, r.build, len(r.batches), round(r.prompt_ms), file=sys.stderr, flush=True)


def _median_runs(runs: list[dict]) -> list[dict]:
    """One run per shape and build, each batch timed by the median of its repeats: the
    product's own ``calibration.median_batches``, as ``--calibrate --repeat`` times them."""
    from replayer.core import calibration

    merged: dict[tuple, list[dict]] = {}
    for r in runs:
        merged.setdefault((r["shape"], r["build"]), []).append(r)
    out = []
    for reps in merged.values():
        batches = [(b.start, b.n_tokens, b.duration_ms)
                   for b in calibration.median_batches([_events(r) for r in reps])]
        out.append(dict(reps[0], rep=0, batches=batches, prompt_ms=sum(b[2] for b in batches)))
    return out


def _events(r: dict) -> list:
    from replayer.core.engine.events import BatchDone

    return [BatchDone(r["build"], i, s, n, 0, "", 0.0, ms) for i, (s, n, ms) in enumerate(r["batches"])]


def cv(path: Path, use_median: bool) -> None:
    import numpy as np

    from replayer.core import calibration
    from replayer.core.hardware.cost import batch_ms

    runs = [json.loads(line) for line in path.read_text().splitlines()]
    if use_median:
        runs = _median_runs(runs)
    for q_tile in (0, 64):
        errs = []
        for fit in runs:
            fitted = [r for r in runs if r["shape"] == fit["shape"] and r["rep"] == fit["rep"]]
            if fit is not fitted[0]:
                continue
            batches = [b for r in fitted for b in _events(r)]
            line = calibration.fit_cost(batches, 512, q_tile=q_tile).line("cv")
            measured_small = calibration.small_ubatches(batches, 512) >= calibration.MIN_SMALL_UBATCHES
            for r in runs:
                # a line that could not measure short ubatches prices them at 0 and says so:
                # sessions full of them are outside what it knows (--all counts them too)
                short = calibration.small_ubatches(_events(r), 512) >= calibration.MIN_SMALL_UBATCHES
                if r["shape"] != fit["shape"] and (measured_small or not short or "--all" in sys.argv):
                    sim = sum(batch_ms(line, s, k, 512) for s, k, _ in r["batches"])
                    errs.append(abs(sim / r["prompt_ms"] - 1))
        a = np.array(errs)
        print(f"q_tile {q_tile:2d}: {len(a)} pairs, mean {a.mean() * 100:.1f} %, median {np.median(a) * 100:.1f} %, "
              f"max {a.max() * 100:.1f} %, within 10 %: {np.mean(a <= 0.10) * 100:.0f} %")


if __name__ == "__main__":
    cmd, out = sys.argv[1], Path(sys.argv[2])
    if cmd == "record":
        record(out, int(sys.argv[3]) if len(sys.argv) > 3 else 3)
    else:
        cv(out, "--median" in sys.argv)
