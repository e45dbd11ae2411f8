"""Hostile chat templates against the render budget: time to the error and peak memory.

    python benchmarks/hostile_templates.py [--seconds 10] [--max-mb 64]

Each template runs in a fresh ``replayer layout`` process (the CLI path a user takes, with the
default budget unless told otherwise); the table shows the wall time until the one-line
error, the peak RSS of the replayer process and of its render worker (``ru_maxrss`` of
the waited children), and the error. Record results in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HOSTILE = {
    "{{ 1/0 }}": "{{ 1/0 }}",
    "range(10**9)": "{% for i in range(10**9) %}x{% endfor %}",
    "10**(10**7)": "{{ 10**(10**7) }}",
    "'a' * 10**9": "{{ 'a' * 10**9 }}",
    "nested range(99999)": "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}",
    "doubling ~ (2^40 chars)": '{% set ns = namespace(s="ab") %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}'
                               "{% endfor %}{{ ns.s|length }}",
    "'a'|center(10**9)": "{{ 'a'|center(10**9) }}",
}


def one(template: Path, extra: list[str]) -> dict:
    """Run in a driver of its own so ru_maxrss of children is this run's."""
    t = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "layout", str(ROOT / "fixtures/pi/small-v3.jsonl"),
                        "--template", str(template), *extra], capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t
    return {"wall": wall, "rc": r.returncode, "err": r.stderr.strip(),
            "rss": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=None)
    ap.add_argument("--max-mb", type=float, default=None)
    ap.add_argument("--one", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(Path(args.one[0]), args.one[1:])))
        return
    extra = (["--template-timeout", str(args.seconds)] if args.seconds else []) + \
            (["--template-max-mb", str(args.max_mb)] if args.max_mb else [])
    print("| template | time to error | peak RSS (largest process) | exit | error |\n|---|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, source in HOSTILE.items():
            f = Path(tmp) / "t.jinja"
            f.write_text(source)
            r = subprocess.run([sys.executable, __file__, "--one", str(f), *extra], capture_output=True, text=True)
            res = json.loads(r.stdout.strip().splitlines()[-1])
            err = res["err"].removeprefix("replayer: error: ")
            print(f"| `{name}` | {res['wall']:.1f} s | {res['rss'] / 1e6:,.0f} MB | {res['rc']} | {err} |", flush=True)


if __name__ == "__main__":
    main()
