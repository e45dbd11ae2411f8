"""Long fuzz run of everything replayer reads from untrusted sources:
``python benchmarks/fuzz_sessions.py [N] [--kinds sessions,storage,gguf,templates]``.

The suite runs 2,000 mutated fixtures through detection (``tests/test_formats.py``) and a
bounded run of every kind here (``tests/test_trust_fuzz.py``); this runs N cases (default
20,000, shared out over the kinds: half sessions, the rest evenly) and reports crashes, any
exception other than one ``ReplayerError``:

- sessions: mutated fixtures (and ``../shared/samples``) through detection, loading and, for
  each one read in part (lines that did not parse), a replay whose report must carry the note;
- storage: OpenCode storage folders with one record mutated or one id made hostile
  (traversal, absolute, 5,000 characters), a planted file beside them that must never be read;
- gguf: a tiny model's GGUF with its header counts set huge, bytes flipped or the file cut;
- templates: the bundled templates mutated or with hostile constructs inserted, rendered as
  untrusted (sandbox worker, render budget).

It also reports the slowest case (a hang would show there) and the process's peak RSS.
"""

from __future__ import annotations

import collections
import os
import resource
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402

import fuzzing  # noqa: E402

KINDS = ("sessions", "storage", "gguf", "templates")


def run_fuzz(n: int, kinds: tuple[str, ...] = KINDS, work: Path | None = None) -> dict:
    """Run ``n`` cases over ``kinds``; the counts, crashes and timings as a dict (the CI test reads it)."""
    work = work or Path(tempfile.mkdtemp(prefix="replayer-fuzz-"))
    crashes: collections.Counter[str] = collections.Counter()
    examples: dict[str, str] = {}
    counts: collections.Counter[str] = collections.Counter()
    slowest = [0.0, ""]

    def guard(stage: str, name: str, fn, *args):
        t = time.monotonic()
        try:
            return fn(*args)
        except Exception as exc:  # a crash: counted, the run goes on
            key = f"{stage}: {type(exc).__name__} in {traceback.extract_tb(exc.__traceback__)[-1].name}"
            crashes[key] += 1
            examples.setdefault(key, f"{name}: {exc!s:.200}")
            return None
        finally:
            dt = time.monotonic() - t
            if dt > slowest[0]:
                slowest[:] = [dt, f"{stage} {name}"]

    def cfg(k: int):
        return settings(max_examples=k, deadline=None, database=None, phases=[Phase.generate],
                        suppress_health_check=list(HealthCheck))

    share = {k: (n // 2 if k == "sessions" and len(kinds) > 1 else 0) for k in kinds}
    rest = [k for k in kinds if not share[k]]
    for k in rest:
        share[k] = (n - sum(share.values())) // len(rest) if k != rest[-1] else n - sum(share.values())

    if "sessions" in kinds:
        shared = Path(os.environ.get("REPLAYER_SHARED", REPO.parent / "shared")) / "samples"
        extra = [p for p in sorted(shared.rglob("*")) if p.is_file() and p.stat().st_size < 2_000_000
                 and p.suffix in (".jsonl", ".json", ".md")] if shared.is_dir() else []
        files = fuzzing.corpus(extra)

        @cfg(share["sessions"])
        @given(fuzzing.mutated_sessions(files))
        def sessions(sample):
            name, data = sample
            f = work / Path(name).name
            f.write_bytes(data)
            counts["sessions"] += 1
            fmt = guard("detect", name, fuzzing.check_detection, f)
            if fmt is None:
                return
            counts["detected"] += 1
            guard("load", name, fuzzing.check_loading, f, fmt)
            noted = guard("note", name, fuzzing.check_incomplete_note, f, fmt)
            if noted is not None:
                counts["incomplete"] += 1
                counts["incomplete_noted"] += bool(noted)
        sessions()

    if "storage" in kinds:
        base = fuzzing.storage_files()

        @cfg(share["storage"])
        @given(fuzzing.mutated_storage(base))
        def storage(files):
            counts["storage"] += 1
            guard("storage", "opencode storage", fuzzing.check_storage, fuzzing.write_storage(work / "oc", files))
        storage()

    if "gguf" in kinds:
        from replayer.core.tiny_models import make_tiny

        tiny = make_tiny("llama", work / "tiny.gguf").read_bytes()

        @cfg(share["gguf"])
        @given(fuzzing.mutated_gguf(tiny))
        def gguf(data):
            counts["gguf"] += 1
            f = work / "fuzz.gguf"
            f.write_bytes(data)
            guard("gguf", "tiny llama", fuzzing.check_gguf, f)
        gguf()

    if "templates" in kinds:
        sources = fuzzing.template_sources()

        @cfg(share["templates"])
        @given(fuzzing.mutated_templates(sources))
        def templates(src):
            counts["templates"] += 1
            guard("template", "bundled", fuzzing.check_template, src)
        templates()

    return {"counts": dict(counts), "crashes": dict(crashes), "examples": examples, "slowest_s": slowest[0],
            "slowest": slowest[1], "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main(argv: list[str]) -> int:
    n = int(next((a for a in argv if a.isdigit()), 20000))
    kinds = KINDS
    if "--kinds" in argv:
        kinds = tuple(argv[argv.index("--kinds") + 1].split(","))
    t0 = time.monotonic()
    res = run_fuzz(n, kinds)
    dt = time.monotonic() - t0
    c = res["counts"]
    print(f"{sum(c.get(k, 0) for k in KINDS):,} cases in {dt:.0f} s: " +
          ", ".join(f"{k} {c.get(k, 0):,}" for k in kinds))
    print(f"  sessions detected {c.get('detected', 0):,}; read in part {c.get('incomplete', 0):,}, "
          f"with the note in the replay {c.get('incomplete_noted', 0):,}")
    print(f"  crashes {sum(res['crashes'].values())}; slowest case {res['slowest_s']:.2f} s ({res['slowest']}); "
          f"peak RSS {res['peak_rss_mb']:.0f} MB")
    for key, count in collections.Counter(res["crashes"]).most_common():
        print(f"  {count:>6}  {key}   e.g. {res['examples'][key]}")
    return 1 if res["crashes"] or c.get("incomplete", 0) != c.get("incomplete_noted", 0) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
