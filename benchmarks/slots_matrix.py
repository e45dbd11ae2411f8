"""The slots / host-cache matrix on real builds: an agent-shaped stream (default 73 requests,
four threads) per build, tiny model and server setup, simulated and live; prints a table of
the requests whose facts agree, the tokens re-used by each, and the live wall time.

    python benchmarks/slots_matrix.py [--builds 9859,10001] [--archs llama,gemma2,lfm2] [--main 62]

Takes 30-60 min on 2 cores for the full matrix; tests/test_slots_live.py runs a short slice."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from replayer.core.builds.manager import find_build
from replayer.core.server.agreement import agree
from replayer.core.server.traffic import agent_stream
from replayer.core.tiny_models import make_tiny

SETUPS = ("", "-np 1 --cache-ram 0", "-np 2", "--cache-ram 3", "-np 4 --no-kv-unified")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--builds", default="9859,10001")
    ap.add_argument("--archs", default="llama,gemma2,lfm2")
    ap.add_argument("--main", type=int, default=62, help="main-thread turns (62: 73 requests)")
    ap.add_argument("--setups", default="|".join(SETUPS), help="server command lines, separated by |")
    a = ap.parse_args()
    bodies = agent_stream(a.main)
    models = Path(tempfile.mkdtemp(prefix="slots-matrix-"))
    print(f"{len(bodies)} requests; threads: main {sum(b['thread'] == 'main' for b in bodies)}, others "
          f"{len(bodies) - sum(b['thread'] == 'main' for b in bodies)}")
    print("| build | model | server args | equal | cache_n sim | cache_n live | sizes off | live s |")
    print("|---|---|---|---|---|---|---|---|")
    for b in (int(x) for x in a.builds.split(",")):
        rec = find_build(b, "cpu")
        if rec is None:
            print(f"| b{b} | — | not installed | | | | | |")
            continue
        for arch in a.archs.split(","):
            model = make_tiny(arch, models / f"{arch}.gguf")
            for args in a.setups.split("|"):
                t0 = time.monotonic()
                r = agree(rec.binary_path, model, b, args, bodies)
                dt = time.monotonic() - t0
                print(f"| b{b} | {arch} | `{args or '(defaults)'}` | {r.n_equal}/{len(r.sim)} "
                      f"{'' if not r.differ else 'differ: ' + ','.join(map(str, r.differ[:6]))} | "
                      f"{sum(f.cache_n for f in r.sim)} | {sum(r.live.cache_n)} | {len(r.size_errors)} | {dt:.0f} |",
                      flush=True)


if __name__ == "__main__":
    main()
