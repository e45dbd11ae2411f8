"""Long fuzz run of session detection and loading: ``python benchmarks/fuzz_sessions.py [N]``.

The suite runs 2,000 mutated fixtures through detection (``tests/test_formats.py``); this
runs N (default 20,000) through detection and, for every file that is detected, through
loading, and reports crashes: any exception other than one ``ReplayerError``. The
fixtures and, when present, ``../shared/samples`` are the corpus.
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402

from fuzzing import check_detection, check_loading, corpus, mutated_sessions  # noqa: E402


def main(argv: list[str]) -> int:
    n = int(argv[0]) if argv else 20000
    shared = Path(os.environ.get("REPLAYER_SHARED", REPO.parent / "shared")) / "samples"
    extra = [p for p in sorted(shared.rglob("*")) if p.is_file() and p.stat().st_size < 2_000_000
             and p.suffix in (".jsonl", ".json", ".md")] if shared.is_dir() else []
    files = corpus(extra)
    work = Path(tempfile.mkdtemp(prefix="replayer-fuzz-"))
    crashes: collections.Counter[str] = collections.Counter()
    examples: dict[str, str] = {}
    counts = {"cases": 0, "detected": 0}

    @settings(max_examples=n, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(mutated_sessions(files))
    def run(sample):
        name, data = sample
        f = work / Path(name).name
        f.write_bytes(data)
        counts["cases"] += 1
        try:
            fmt = check_detection(f)
        except Exception as exc:  # a crash: counted, the run goes on
            _count("detect", name, exc)
            return
        if fmt is None:
            return
        counts["detected"] += 1
        try:
            check_loading(f, fmt)
        except Exception as exc:
            _count("load", name, exc)

    def _count(stage: str, name: str, exc: Exception) -> None:
        key = f"{stage}: {type(exc).__name__} in {traceback.extract_tb(exc.__traceback__)[-1].name}"
        crashes[key] += 1
        examples.setdefault(key, f"{name}: {exc!s:.200}")

    t0 = time.monotonic()
    run()
    dt = time.monotonic() - t0
    print(f"{counts['cases']} mutated sessions from {len(files)} files ({counts['detected']} detected) "
          f"in {dt:.0f} s: {sum(v for k, v in crashes.items() if k.startswith('detect'))} detection crashes, "
          f"{sum(v for k, v in crashes.items() if k.startswith('load'))} loading crashes")
    for key, count in crashes.most_common():
        print(f"  {count:>6}  {key}   e.g. {examples[key]}")
    return 1 if any(k.startswith("detect") for k in crashes) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
