"""Issue 21's benchmark goal measured as the last passes did: the 2,000-message Claude Code session
with ten subagent files (``slots_session.subagent_files``: 1,201 requests on 11 threads), prepared
and simulated for builds A and B, against the pi session's resume layout (``run._big_request``).
Goal: ≤ 3× one resume layout.

    python benchmarks/slots_goal.py cpu [ROUNDS]          # CPU medians, interleaved rounds
    python benchmarks/slots_goal.py ir layout|one|defaults   # under callgrind, see below

``cpu``: the median over ROUNDS (default 7) interleaved rounds of ``time.process_time`` for the
layout and for prepare, A and B of each setup (one slot, ``--server-args ''``); on a loaded
machine CPU time still moves ±10 %, so say the load with the figure.

``ir``: the figure the load does not move, the instructions of one call after a warm-up call,
the collector off. Run it as

    PYTHONHASHSEED=0 valgrind --tool=callgrind --collect-atstart=no --toggle-collect=qsort_r \\
        python benchmarks/slots_goal.py ir one

Collection is toggled around the measured call by running it as the comparison function of a
libc ``qsort`` of two elements (ctypes: no C to compile; glibc's ``qsort`` only forwards to
``qsort_r``, which makes the one comparison), so callgrind's "Collected" is that call plus a
constant of ~60,000 instructions for the callback (measured on a loop: 45,835,286 under
``qsort_r`` against 45,776,240 under ctypes' ``_CallPythonObject``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).parent))

from run import _big_request  # noqa: E402
from slots_session import subagent_files  # noqa: E402

from replayer.core import session_replay as sr  # noqa: E402
from replayer.core.prompt.layout import compute_layout  # noqa: E402
from replayer.core.replay import ReplayConfig  # noqa: E402


def _setup() -> tuple[Callable[[], object], Path, object, ReplayConfig]:
    _, _, req, tpl = _big_request()
    cfg = ReplayConfig.seed(template="qwen3-coder")
    main_file = subagent_files(Path(tempfile.mkdtemp(prefix="claude-sub-bench-")), 2000, 10, random.Random(5))
    return (lambda: compute_layout(req.messages, req.body.get("tools"), template=tpl)), main_file, \
        sr.load_turns(main_file), cfg


def _parts(main_file: Path, st, cfg: ReplayConfig, args: str | None) -> tuple[float, float, float]:
    """CPU seconds of prepare, A and B."""
    t0 = time.process_time()
    prep = sr.prepare_session(main_file, cfg, turns=st)
    prep.server_args = args
    t1 = time.process_time()
    sr.simulated_session_run(prep, "A")
    t2 = time.process_time()
    sr.simulated_session_run(prep, "B")
    return t1 - t0, t2 - t1, time.process_time() - t2


def cpu(rounds: int) -> None:
    layout, main_file, st, cfg = _setup()
    layout()
    for args in (None, ""):
        _parts(main_file, st, cfg, args)
    lay: list[float] = []
    runs: dict[str, list[tuple[float, float, float]]] = {"one slot": [], "defaults (--server-args '')": []}
    for _ in range(rounds):
        t = time.process_time()
        layout()
        lay.append(time.process_time() - t)
        for (name, xs), args in zip(runs.items(), (None, "")):
            xs.append(_parts(main_file, st, cfg, args))
    L = statistics.median(lay)
    print(f"resume layout: {L * 1000:.1f} ms CPU (median of {rounds})")
    for name, xs in runs.items():
        med = [statistics.median(x[i] for x in xs) * 1000 for i in range(3)]
        tot = statistics.median(sum(x) for x in xs)
        print(f"{name}: prepare {med[0]:.1f} + A {med[1]:.1f} + B {med[2]:.1f} ms; "
              f"total {tot * 1000:.1f} ms = {tot / L:.2f}× layout")
    print("load average", " ".join(Path("/proc/loadavg").read_text().split()[:3]))


def ir(what: str) -> None:
    layout, main_file, st, cfg = _setup()

    def replay(args: str | None) -> Callable[[], object]:
        def go() -> object:
            prep = sr.prepare_session(main_file, cfg, turns=st)
            prep.server_args = args
            return [sr.simulated_session_run(prep, r) for r in ("A", "B")]
        return go

    fn = {"layout": layout, "one": replay(None), "defaults": replay("")}[what]
    fn()  # warm-up: template compiles, caps probes, imports
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    calls: list[object] = []
    cmp = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(lambda a, b: (calls.append(fn()), 0)[1])
    pair = (ctypes.c_int * 2)(1, 2)
    gc.disable()
    libc.qsort(pair, 2, ctypes.sizeof(ctypes.c_int), cmp)  # the one comparison: the measured call
    gc.enable()
    assert len(calls) == 1, f"qsort compared {len(calls)} times"
    print(f"{what}: measured (callgrind's 'Collected' with --toggle-collect=qsort_r)")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "ir":
        ir(sys.argv[2])
    else:
        cpu(int(sys.argv[2]) if len(sys.argv) > 2 else 7)
