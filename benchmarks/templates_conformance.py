"""replayer's render of every sdist template against a real build's /apply-template and /tokenize.

    python benchmarks/templates_conformance.py BUILD… [TEMPLATE…]

Prints one tab-separated row per template and conversation (the table in docs/templates.md);
``replayer.core.prompt.conformance`` does the work, this script only prints. It never compiles:
the builds must be installed.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from replayer.core.prompt.conformance import run


def main(argv: list[str]) -> int:
    import tempfile

    from replayer.core.builds import manager

    builds = [int(a) for a in argv if a.isdigit()]
    only = [a for a in argv if not a.isdigit()] or None
    for build in builds:
        rec = manager.find_build(build, "cpu")
        if rec is None:
            sys.exit(f"b{build} is not installed (this script never compiles)")
        with tempfile.TemporaryDirectory(prefix=f"replayer-conf-{build}-") as d:
            work = Path(os.environ.get("REPLAYER_CONFORMANCE_WORK") or d)
            work.mkdir(parents=True, exist_ok=True)
            t = time.monotonic()
            outcomes = run(build, Path(rec.binary), work, only)
            print(f"# b{build}: {len(outcomes)} checks in {time.monotonic() - t:.0f} s")
            for o in outcomes:
                print(f"b{build}\t{o.template}\t{o.conversation}\t{o.result}\t{o.detail}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
