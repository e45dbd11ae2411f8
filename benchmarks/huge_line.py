"""Every session command on a file whose head is valid and whose next line is 2 GB without a
newline (a sparse file: no disk used): ``python benchmarks/huge_line.py [--gb 2]``.

Prints, per command, the exit status, the wall time to the error and the child's peak RSS
(``ru_maxrss`` from ``wait4``). Goal (issue 24): ≤ 200 MB and the error within 2 s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

COMMANDS = [["inspect"], ["inspect", "--json"], ["layout"], ["replay"], ["replay", "--json"],
            ["replay", "--mode", "session"], ["replay", "--jsonl"]]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gb", type=float, default=2.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="replayer-hugeline-") as d:
        f = Path(d) / "huge.jsonl"
        head = (ROOT / "fixtures" / "pi" / "small-v3.jsonl").read_bytes()
        f.write_bytes(head)
        os.truncate(f, len(head) + int(args.gb * (1 << 30)))
        print(f"{'command':<28} {'exit':>4} {'time s':>7} {'peak MB':>8}  first line of stderr")
        worst_t = worst_m = 0.0
        for cmd in COMMANDS:
            t = time.monotonic()
            p = subprocess.Popen([sys.executable, "-m", "replayer.cli", cmd[0], str(f), *cmd[1:]], cwd=ROOT,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            err = p.stderr.read().decode(errors="replace")
            _, status, ru = os.wait4(p.pid, 0)
            dt, mb = time.monotonic() - t, ru.ru_maxrss / 1024
            worst_t, worst_m = max(worst_t, dt), max(worst_m, mb)
            print(f"{' '.join(cmd):<28} {os.waitstatus_to_exitcode(status):>4} {dt:>7.2f} {mb:>8.0f}  "
                  f"{err.strip().splitlines()[0][:90] if err.strip() else ''}")
        print(f"worst: {worst_t:.2f} s, {worst_m:.0f} MB (goal: 2 s, 200 MB)")
    return 0 if worst_t <= 2 and worst_m <= 200 else 1


if __name__ == "__main__":
    sys.exit(main())
