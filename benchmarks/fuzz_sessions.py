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

Each case is measured on its own (``CaseMeter``): its wall time (a hang is a case over 20 s)
and CPU time (on a loaded machine a case can wait longer than it works: a case over 20 s of wall
with a few seconds of CPU was starved, not hung),
the peak of the Python heap during it above the heap before it (``tracemalloc``, reset per
case; numpy's buffers are traced too), and the growth of the process's resident high-water mark
over its resident size before the case (``/proc/self/clear_refs`` resets the mark), and for
templates the same of the render worker. A case's input is the bytes it reads: the session file,
the storage folder's files, the GGUF, the template source. The goal is a peak of at most 4× the
input; the report gives the largest peak, the largest ratio and the cases over 4×, over 4× plus
1 MiB (a few KB of input cannot bound the heap a parse needs: an interpreter frame, a pydantic
model, a Jinja compile), and the worst cases by name. Before the measured cases each kind's
unmutated inputs run once, unmeasured: the first use of a format imports its modules and fills
caches (a tokenizer, the template worker), which is the process's cost, not a case's.

The noise floor: a case of a few KB cannot be told from the interpreter's own per-case work
(the meter's bookkeeping, a frame, the allocator's pools, a resident page touched). So every
``NOOP_EVERY`` cases one no-op case (the same ``guard`` and meter, no work) is measured too,
and the report counts both "over 4×" (every byte counted against the case) and "over 4× +
floor", the floor being the largest peak of any no-op case (heap or resident growth, measured
in the same run). That floor is a few KB; what a real case of a few bytes cannot avoid is
larger: opening the file, the importer's refusal as a ``ReplayerError`` with its message and
traceback. So each kind's *refusal* is measured too (a 1-byte session file, a 1-byte GGUF, a
storage folder of one 1-byte record, a 2-byte template; 20 times each, the largest peak) and a fourth count,
"over 4× + refusal", takes that fixed cost off. A partial report is printed every ``PARTIAL_EVERY`` cases, so a run that is
cut off still says what it found.
"""

from __future__ import annotations

import collections
import os
import re
import resource
import sys
import tempfile
import time
import tracemalloc
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402

import fuzzing  # noqa: E402

KINDS = ("sessions", "storage", "gguf", "templates")
#: a case slower than this is a hang (the issue's goal: none)
HANG_S = 20.0
#: the memory goal: a case's peak at most this many times its input
RATIO = 4
#: the allowance the third count adds to 4× the input (the earlier runs' figure, for comparison)
SLACK = 1 << 20
#: a no-op case is measured after every this many cases (the floor; see the module's docstring)
NOOP_EVERY = 50
#: a partial report after every this many cases
PARTIAL_EVERY = 1000


def _status(pid: int | str, key: str) -> int:
    """A ``/proc/PID/status`` field in bytes (0 when the process is gone)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            m = re.search(key + r":\s+(\d+) kB", fh.read())
    except OSError:
        return 0
    return int(m.group(1)) * 1024 if m else 0


def _reset_hwm(pid: int | str) -> bool:
    """Reset the resident high-water mark (Linux ≥ 4.0); False where it cannot be."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def _worker_pid() -> int | None:
    from replayer.core.prompt import sandbox

    proc = sandbox._worker.proc  # the benchmark reads the worker's own numbers
    return proc.pid if proc is not None and proc.poll() is None else None


class CaseMeter:
    """Per-case time and peak memory (see the module's docstring); one row per case."""

    def __init__(self, every: int = 0, on_every=None) -> None:
        tracemalloc.start()
        self.rss = _reset_hwm("self")
        # kind, input, heap, rss, worker, wall s, name, CPU s (this process's: a template's render is the worker's)
        self.rows: list[tuple[str, int, int, int, int, float, str, float]] = []
        self.noop: list[tuple[int, int]] = []  # (heap, rss) of each no-op case
        self.refusal: dict[str, int] = {}  # kind -> the largest peak of its refusal of a trivial input
        self.every, self.on_every = every, on_every

    def floor(self) -> int:
        """The largest peak of a no-op case so far (0 before the first)."""
        return max((max(h, r) for h, r in self.noop), default=0)

    def _noop_case(self) -> None:
        """One case that does nothing, measured as every case is: the interpreter's own floor."""
        rss0 = _status("self", "VmRSS")
        tracemalloc.reset_peak()
        heap0 = tracemalloc.get_traced_memory()[0]
        _reset_hwm("self")
        _noop()
        heap = tracemalloc.get_traced_memory()[1] - heap0
        rss = max(_status("self", "VmHWM") - rss0, 0) if self.rss else 0
        self.noop.append((heap, rss))

    def measure_refusal(self, kind: str, fn, *args, repeats: int = 20) -> None:
        """The fixed cost of ``kind``: its check on a trivial input, measured as a case (not counted as one)."""
        rows = self.rows
        self.rows = []
        try:
            for _ in range(repeats):
                self._run(kind, "refusal", 0, fn, *args)
            self.refusal[kind] = max(max(r[2], r[3], r[4]) for r in self.rows)
        finally:
            self.rows = rows

    def run(self, kind: str, name: str, size: int, fn, *args):
        try:
            return self._run(kind, name, size, fn, *args)
        finally:
            if len(self.rows) % NOOP_EVERY == 0:
                self._noop_case()
            if self.every and self.on_every is not None and len(self.rows) % self.every == 0:
                self.on_every()

    def _run(self, kind: str, name: str, size: int, fn, *args):
        rss0 = _status("self", "VmRSS")
        wpid = _worker_pid() if kind == "templates" else None
        w0 = _status(wpid, "VmRSS") if wpid and _reset_hwm(wpid) else 0
        tracemalloc.reset_peak()
        heap0 = tracemalloc.get_traced_memory()[0]
        _reset_hwm("self")
        t, c = time.monotonic(), time.process_time()
        try:
            return fn(*args)
        finally:
            dt, cpu = time.monotonic() - t, time.process_time() - c
            heap = tracemalloc.get_traced_memory()[1] - heap0
            rss = max(_status("self", "VmHWM") - rss0, 0) if self.rss else 0
            worker = 0
            if kind == "templates":
                now = _worker_pid()
                if now is not None and now == wpid:
                    worker = max(_status(now, "VmHWM") - w0, 0)
                elif now is None or wpid is None:
                    worker = -1  # killed by its budget (or started by this case): not measured
            self.rows.append((kind, size, heap, rss, worker, dt, name, cpu))

    def summary(self) -> dict:
        """Largest peaks and ratios per kind, the cases over the goal, hangs."""
        out: dict = {}
        floor = self.floor()
        for kind in sorted({r[0] for r in self.rows}):
            rows = [r for r in self.rows if r[0] == kind]

            def peak(r) -> int:
                return max(r[2], r[3], r[4])

            over = [r for r in rows if peak(r) > RATIO * r[1]]
            over_floor = [r for r in rows if peak(r) > RATIO * r[1] + floor]
            fixed = self.refusal.get(kind, 0)
            over_refusal = [r for r in rows if peak(r) > RATIO * r[1] + fixed]
            over_slack = [r for r in rows if peak(r) > RATIO * r[1] + SLACK]
            worst = max(rows, key=lambda r: peak(r) / max(r[1], 1))
            out[kind] = {
                "cases": len(rows), "input_max": max(r[1] for r in rows),
                "heap_max": max(r[2] for r in rows), "rss_max": max(r[3] for r in rows),
                "worker_max": max(r[4] for r in rows), "worker_unmeasured": sum(r[4] < 0 for r in rows),
                "ratio_max": peak(worst) / max(worst[1], 1), "ratio_max_case": worst,
                "over_4x": len(over), "over_4x_floor": len(over_floor),
                "refusal": fixed, "over_4x_refusal": len(over_refusal), "over_4x_1mib": len(over_slack),
                "worst_over": sorted(over_slack, key=peak, reverse=True)[:5],
                "hangs": sum(r[5] > HANG_S for r in rows), "slowest_s": max(r[5] for r in rows),
                "cpu_max_s": max(r[7] for r in rows),
                "hang_cpu_s": [round(r[7], 2) for r in rows if r[5] > HANG_S],
            }
        return out


def _noop() -> None:
    """The no-op case's work: none."""


def run_fuzz(n: int, kinds: tuple[str, ...] = KINDS, work: Path | None = None, partial=None) -> dict:
    """Run ``n`` cases over ``kinds``; the counts, crashes and timings as a dict (the CI test reads it).
    ``partial``, when given, is called with the same dict so far every ``PARTIAL_EVERY`` cases."""
    work = work or Path(tempfile.mkdtemp(prefix="replayer-fuzz-"))
    crashes: collections.Counter[str] = collections.Counter()
    examples: dict[str, str] = {}
    counts: collections.Counter[str] = collections.Counter()
    slowest = [0.0, ""]

    def result() -> dict:
        return {"counts": dict(counts), "crashes": dict(crashes), "examples": examples, "slowest_s": slowest[0],
                "slowest": slowest[1], "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "memory": meter.summary(), "hangs": sum(r[5] > HANG_S for r in meter.rows), "rows": meter.rows,
                "floor": meter.floor(), "noop_cases": len(meter.noop)}

    meter = CaseMeter(PARTIAL_EVERY if partial else 0, lambda: partial(result()))

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

        def session_case(name: str, f: Path) -> None:
            fmt = guard("detect", name, fuzzing.check_detection, f)
            if fmt is None:
                return
            counts["detected"] += 1
            guard("load", name, fuzzing.check_loading, f, fmt)
            noted = guard("note", name, fuzzing.check_incomplete_note, f, fmt)
            if noted is not None:
                counts["incomplete"] += 1
                counts["incomplete_noted"] += bool(noted)
        for name, data in files:  # warm-up, not measured: each format's first imports and caches
            f = work / Path(name).name
            for part in (data, data[:len(data) // 2]):  # whole, and cut (a replay with the note)
                f.write_bytes(part)
                fmt = guard("detect", name, fuzzing.check_detection, f)
                if fmt is not None:
                    guard("load", name, fuzzing.check_loading, f, fmt)
                    guard("note", name, fuzzing.check_incomplete_note, f, fmt)
                    guard("replay", name, fuzzing.replay_report, f, fmt)  # a whole JSON document too
        trivial = work / "trivial.jsonl"
        trivial.write_bytes(b"x")
        meter.measure_refusal("sessions", session_case, "trivial", trivial)

        @cfg(share["sessions"])
        @given(fuzzing.mutated_sessions(files))
        def sessions(sample):
            name, data = sample
            f = work / Path(name).name
            f.write_bytes(data)
            counts["sessions"] += 1
            meter.run("sessions", name, len(data), session_case, name, f)

        sessions()

    if "storage" in kinds:
        base = fuzzing.storage_files()
        guard("storage", "opencode storage", fuzzing.check_storage, fuzzing.write_storage(work / "oc", base))
        meter.measure_refusal("storage", guard, "storage", "trivial", fuzzing.check_storage,
                              fuzzing.write_storage(work / "oc-trivial", {"session/global/ses_x.json": b"x"}))

        @cfg(share["storage"])
        @given(fuzzing.mutated_storage(base))
        def storage(files):
            counts["storage"] += 1
            root = fuzzing.write_storage(work / "oc", files)
            meter.run("storage", "opencode storage", sum(map(len, files.values())),
                      guard, "storage", "opencode storage", fuzzing.check_storage, root)
        storage()

    if "gguf" in kinds:
        from replayer.core.tiny_models import make_tiny

        tiny = make_tiny("llama", work / "tiny.gguf").read_bytes()
        guard("gguf", "tiny llama", fuzzing.check_gguf, work / "tiny.gguf")
        (work / "trivial.gguf").write_bytes(b"G")
        meter.measure_refusal("gguf", guard, "gguf", "trivial", fuzzing.check_gguf, work / "trivial.gguf")

        @cfg(share["gguf"])
        @given(fuzzing.mutated_gguf(tiny))
        def gguf(data):
            counts["gguf"] += 1
            f = work / "fuzz.gguf"
            f.write_bytes(data)
            meter.run("gguf", "tiny llama", len(data), guard, "gguf", "tiny llama", fuzzing.check_gguf, f)
        gguf()

    if "templates" in kinds:
        sources = fuzzing.template_sources()
        for src in sources:
            guard("template", "bundled", fuzzing.check_template, src)
        meter.measure_refusal("templates", guard, "template", "trivial", fuzzing.check_template, "{{")

        @cfg(share["templates"])
        @given(fuzzing.mutated_templates(sources))
        def templates(src):
            counts["templates"] += 1
            meter.run("templates", f"bundled ({src[:40]!r}…)", len(src.encode("utf-8", "surrogatepass")),
                      guard, "template", "bundled", fuzzing.check_template, src)
        templates()

    res = result()
    tracemalloc.stop()
    return res


def print_report(res: dict, dt: float, kinds: tuple[str, ...], partial: bool = False) -> None:
    """The run's report (``partial``: the cases so far, of a run still going)."""
    c = res["counts"]
    head = "partial: " if partial else ""
    print(f"{head}{sum(c.get(k, 0) for k in KINDS):,} cases in {dt:.0f} s: " +
          ", ".join(f"{k} {c.get(k, 0):,}" for k in kinds))
    print(f"  sessions detected {c.get('detected', 0):,}; read in part {c.get('incomplete', 0):,}, "
          f"with the note in the replay {c.get('incomplete_noted', 0):,}")
    print(f"  crashes {sum(res['crashes'].values())}; slowest case {res['slowest_s']:.2f} s ({res['slowest']}); "
          f"peak RSS {res['peak_rss_mb']:.0f} MB; load average {os.getloadavg()[0]:.1f}")
    for key, count in collections.Counter(res["crashes"]).most_common():
        print(f"  {count:>6}  {key}   e.g. {res['examples'][key]}")
    print(f"  hangs over {HANG_S:g} s: {res['hangs']}")
    print(f"  floor (largest peak of {res['noop_cases']:,} no-op cases): {res['floor']:,} B")
    mb = 1 << 20
    for kind, m in res["memory"].items():
        w = m["ratio_max_case"]
        print(f"  {kind}: {m['cases']:,} cases, input ≤ {m['input_max'] / mb:.2f} MB; peak heap ≤ "
              f"{m['heap_max'] / mb:.2f} MB, RSS growth ≤ {m['rss_max'] / mb:.2f} MB"
              + (f", worker growth ≤ {m['worker_max'] / mb:.2f} MB ({m['worker_unmeasured']} killed)"
                 if kind == "templates" else "")
              + f"; largest ratio {max(w[2], w[3], w[4]) / max(w[1], 1):.1f}× ({w[1]:,} B in, {w[6]}); "
              f"over 4×: {m['over_4x']:,}, over 4× + floor: {m['over_4x_floor']:,}, "
              f"over 4× + refusal ({m['refusal']:,} B): {m['over_4x_refusal']:,}, "
              f"over 4× + 1 MiB: {m['over_4x_1mib']:,}; slowest {m['slowest_s']:.2f} s wall, "
              f"most CPU {m['cpu_max_s']:.2f} s" + (f"; CPU of the cases over {HANG_S:g} s wall: {m['hang_cpu_s']}"
                                                      if m["hang_cpu_s"] else ""))
        for r in m["worst_over"]:
            print(f"      {r[1]:>10,} B in: heap {r[2]:,}, RSS {r[3]:,}, worker {r[4]:,} B, {r[5]:.2f} s "
                  f"({r[7]:.2f} s CPU)  {r[6]}")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    n = int(next((a for a in argv if a.isdigit()), 20000))
    kinds = KINDS
    if "--kinds" in argv:
        kinds = tuple(argv[argv.index("--kinds") + 1].split(","))
    t0 = time.monotonic()
    res = run_fuzz(n, kinds, partial=lambda r: print_report(r, time.monotonic() - t0, kinds, partial=True))
    print_report(res, time.monotonic() - t0, kinds)
    c = res["counts"]
    bad = res["crashes"] or res["hangs"] or c.get("incomplete", 0) != c.get("incomplete_noted", 0)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
