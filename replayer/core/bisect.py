"""Find the build where a session's prefill changed, the way a maintainer would bisect it.

The search itself (``next_step``) is a pure function of the measurements so far: it says
which build to measure next, or where the change is. Both engines drive it: the simulated
one over the catalog's boundary builds (instant, deterministic), the live one over every
build the package index has, each installed by the build manager and replayed on the
user's GGUF. Keeping the search pure is what lets it be tested on recorded measurements.

"Good" and "bad" are the user's words for the two ends; whichever is older, the answer is
the first build that behaves like the newer end, and the last one that behaves like the
older end. A measurement counts for the end whose value it is nearer, unless it lies in
the band around the midpoint (``Threshold.band``), where it is too noisy to decide and is
measured again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import statistics
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Literal, Mapping, Sequence

import orjson
from pydantic import TypeAdapter, ValidationError

from replayer.core import paths
from replayer.core.builds import changes
from replayer.core.builds.catalog import parse_build
from replayer.core.engine.run_summary import RunSummary
from replayer.core.errors import ReplayerError, RunError
from replayer.core.replay import ReplayConfig, prepare, run_events
from replayer.core.runspec import DEFAULT_TIMEOUT_S
from replayer.core.session import Session, load_session

Verdict = Literal["good", "bad", "unsure"]


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    noisy: bool  # timings vary run to run; counts do not
    help: str

    def of(self, run: RunSummary) -> float:
        if run.failed:
            raise RunError(f"{run.build or 'the run'} failed: {run.failed}")
        if self.name == "prompt_tps":
            return run.tokens_per_s
        if self.name == "batches":
            return float(run.n_batches)
        # tokens the server decoded for this request; in session mode, summed over turns
        return float(run.finished.n_processed if run.finished else sum(b.n_tokens for b in run.batches))


METRICS = {m.name: m for m in (
    Metric("prompt_tps", "tok/s", True, "prompt throughput of the resume request"),
    Metric("batches", "batches", False, "decode calls of the prefill (deterministic: no timing)"),
    Metric("reprocessed", "tokens", False, "tokens decoded again instead of taken from the cache"),
)}


def metric(name: str) -> Metric:
    if name not in METRICS:
        raise ReplayerError(f"unknown metric {name!r}; choose {', '.join(METRICS)}")
    return METRICS[name]


@dataclass(frozen=True)
class Threshold:
    """When a measurement decides, stated so the output can print it."""

    band: float = 0.25  # undecided: within band × |good − bad| of the midpoint
    max_samples: int = 3  # measurements of one build before giving up on it
    min_effect: float = 0.05  # good and bad must differ by this fraction to bisect at all

    def describe(self, good_ref: float, bad_ref: float) -> str:
        mid, gap = (good_ref + bad_ref) / 2, abs(good_ref - bad_ref)
        return (f"nearer {good_ref:,.4g} is good, nearer {bad_ref:,.4g} is bad; a median within "
                f"{self.band:.0%} of the gap ({mid - self.band * gap:,.4g} … {mid + self.band * gap:,.4g}) "
                f"is too close to call and is measured again (at most {self.max_samples} {'sample' if self.max_samples == 1 else 'samples'})")

    def validate(self) -> "Threshold":
        if not 0 <= self.band < 0.5:
            raise ReplayerError("--band must be at least 0 and below 0.5 (half the gap)")
        if self.max_samples < 1:
            raise ReplayerError("--max-samples must be at least 1")
        return self


def classify(values: Sequence[float], good_ref: float, bad_ref: float, thr: Threshold) -> Verdict:
    m = statistics.median(values)
    gap = abs(good_ref - bad_ref)
    if abs(m - (good_ref + bad_ref) / 2) <= thr.band * gap:
        return "unsure"
    return "good" if abs(m - good_ref) < abs(m - bad_ref) else "bad"


# -- the pure search -----------------------------------------------------------------------

@dataclass(frozen=True)
class Measure:
    build: int
    why: str


@dataclass(frozen=True)
class Found:
    last_old: int  # last build that behaves like the older end
    first_new: int  # first build that behaves like the newer end


@dataclass(frozen=True)
class Undecided:
    reason: str


Step = Measure | Found | Undecided


def next_step(candidates: Sequence[int], good: int, bad: int, samples: Mapping[int, Sequence[float]],
              thr: Threshold) -> Step:
    """The next build to measure, or the answer, from the measurements so far.

    ``candidates`` are the builds that can be measured, ascending, both ends included.
    """
    for end, name in ((good, "good"), (bad, "bad")):
        if not samples.get(end):
            return Measure(end, f"reference: the {name} end")
    g, b = statistics.median(samples[good]), statistics.median(samples[bad])
    if abs(g - b) <= thr.min_effect * max(abs(g), abs(b)):
        for end in (good, bad):
            if len(samples[end]) < thr.max_samples:
                return Measure(end, "the ends measure alike: again")
        return Undecided(f"b{good} and b{bad} measure alike ({g:,.4g} vs {b:,.4g}, less than "
                         f"{thr.min_effect:.0%} apart): nothing to bisect")
    lo_i, hi_i = candidates.index(min(good, bad)), candidates.index(max(good, bad))
    old = "good" if good < bad else "bad"
    while hi_i - lo_i > 1:
        mid = (lo_i + hi_i) // 2
        n = candidates[mid]
        got = samples.get(n)
        if not got:
            return Measure(n, "bisect")
        verdict = classify(got, g, b, thr)
        if verdict == "unsure":
            if len(got) < thr.max_samples:
                return Measure(n, "too close to call: again")
            return Undecided(f"b{n} stays between the ends after {len(got)} samples "
                             f"(median {statistics.median(got):,.4g}; good {g:,.4g}, bad {b:,.4g})")
        if verdict == old:
            lo_i = mid
        else:
            hi_i = mid
    return Found(candidates[lo_i], candidates[hi_i])


@dataclass
class StepReport:
    build: int
    value: float
    samples: list[float]
    decision: str  # good | bad | unsure | reference
    why: str
    recorded: bool = False  # taken from an interrupted earlier bisection

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class BisectResult:
    engine: str
    metric: Metric
    good: int
    bad: int
    candidates: list[int]
    threshold: Threshold
    steps: list[StepReport] = field(default_factory=list)
    samples: dict[int, list[float]] = field(default_factory=dict)
    found: Found | None = None
    undecided: str | None = None
    boundaries: list[dict] = field(default_factory=list)  # simulated: every change in the range

    @property
    def forward(self) -> bool:
        """The good build is the older one: looking for a regression."""
        return self.good < self.bad

    def references(self) -> tuple[float, float]:
        return statistics.median(self.samples[self.good]), statistics.median(self.samples[self.bad])

    def answer(self) -> dict:
        if self.found is None:
            return {}
        f = self.found
        if self.forward:
            return {"first_bad": f.first_new, "last_good": f.last_old}
        return {"first_good": f.first_new, "last_bad": f.last_old}

    def changes(self) -> list[changes.Change]:
        return changes.overlapping(self.found.last_old, self.found.first_new) if self.found else []

    def to_dict(self) -> dict:
        g, b = self.references() if self.good in self.samples and self.bad in self.samples else (None, None)
        found = self.changes()
        return {
            "engine": self.engine, "metric": self.metric.name, "unit": self.metric.unit,
            "good": self.good, "bad": self.bad, **self.answer(),
            "prs": [c.pr for c in found if c.pr], "changes": [c.to_dict() for c in found],
            "undecided": self.undecided,
            "references": {"good": g, "bad": b},
            "threshold": {"band": self.threshold.band, "max_samples": self.threshold.max_samples,
                          "min_effect": self.threshold.min_effect,
                          "rule": self.threshold.describe(g, b) if g is not None else None},
            "candidates": len(self.candidates),
            "steps": [s.to_dict() for s in self.steps],
            "boundaries": self.boundaries,
        }

    def summary_lines(self) -> list[str]:
        """The result in words (CLI text output and the app's bisect screen)."""
        if self.undecided:
            return [f"undecided: {self.undecided}"]
        if self.found is None:
            return ["not finished"]
        f = self.found
        new, old = ("bad", "good") if self.forward else ("good", "bad")
        lines = [f"first {new}: b{f.first_new}    last {old}: b{f.last_old}"]
        gap = self.changes()
        if gap:
            lines += [f"  {c.name}: {c.title}" + (f" ({c.generation})" if c.generation else "") for c in gap]
        else:
            lines.append("  the build index knows no change between them")
        return lines


ProgressFn = Callable[[int, str, float], None]  # build, stage, fraction


def search(candidates: Sequence[int], good: int, bad: int, measure: Callable[[int], float], thr: Threshold,
           *, engine: str, metric_: Metric, samples: dict[int, list[float]] | None = None,
           on_step: Callable[[StepReport], None] | None = None) -> BisectResult:
    """Drive ``next_step`` with ``measure`` until it finds the change or gives up.

    ``samples`` may hold measurements of an interrupted earlier run: they are replayed as
    steps (marked recorded) before anything new is measured.
    """
    cands = sorted(set(candidates))
    for end in (good, bad):
        if end not in cands:
            raise ReplayerError(f"b{end} is not one of the builds to bisect")
    if good == bad:
        raise ReplayerError("--good and --bad are the same build")
    res = BisectResult(engine, metric_, good, bad, cands, thr.validate())
    recorded = {k: list(v) for k, v in (samples or {}).items()}
    while True:
        step = next_step(cands, good, bad, res.samples, thr)
        if isinstance(step, Found):
            res.found = step
            return res
        if isinstance(step, Undecided):
            res.undecided = step.reason
            return res
        pending = recorded.get(step.build)
        was_recorded = bool(pending)
        value = pending.pop(0) if pending else measure(step.build)
        got = res.samples.setdefault(step.build, [])
        got.append(value)
        if step.build in (good, bad):
            decision = "good" if step.build == good else "bad"
            why = step.why
        else:
            g, b = res.references()
            decision = classify(got, g, b, thr)
            why = step.why
        report = StepReport(step.build, value, list(got), decision, why, was_recorded)
        res.steps.append(report)
        if on_step:
            on_step(report)


# -- simulated ------------------------------------------------------------------------------

def _summary(path: str | Path, config: ReplayConfig, build: int, session: Session) -> RunSummary:
    cfg = dataclasses.replace(config, a=str(build), b=str(build))
    prep = prepare(path, cfg, session=session)
    return RunSummary.from_events("A", run_events(prep, "A"))


def _signature(run: RunSummary) -> tuple:
    return (tuple((b.start, b.n_tokens) for b in run.batches), tuple(c.n_tokens for c in run.created))


def simulated(path: str | Path, config: ReplayConfig, good: int, bad: int, metric_: Metric,
              thr: Threshold = Threshold(), session: Session | None = None,
              on_step: Callable[[StepReport], None] | None = None,
              candidates: Iterable[int] | None = None) -> BisectResult:
    """Bisect over the catalog: the ends plus every build that brackets a known change
    (or over ``candidates``: what a live bisection over the same builds should find).

    Every change inside the range whose schedule or modelled time differs is reported as
    a boundary, even where the chosen metric does not move.
    """
    for n in (good, bad):
        parse_build(n)  # a clear error for a bad number
    s = session or load_session(path, config.format, images=config.images)
    lo, hi = min(good, bad), max(good, bad)
    builds = (sorted({n for n in candidates if lo <= n <= hi} | {good, bad}) if candidates is not None
              else changes.boundary_builds(good, bad))
    runs = {n: _summary(path, config, n, s) for n in builds}
    res = search(builds, good, bad, lambda n: metric_.of(runs[n]), dataclasses.replace(thr, max_samples=1),
                 engine="simulated", metric_=metric_, on_step=on_step)
    for prev, cur in zip(builds, builds[1:]):
        a, b = runs[prev], runs[cur]
        sched = _signature(a) != _signature(b)
        timed = abs(a.prompt_ms - b.prompt_ms) > 1e-6 * max(a.prompt_ms, b.prompt_ms, 1.0)
        if not (sched or timed):
            continue
        found = changes.between(prev, cur)
        res.boundaries.append({
            "last": prev, "first": cur, "generations": [a.generation, b.generation],
            "prs": [c.pr for c in found if c.pr], "changes": [c.to_dict() for c in found],
            "schedule_changed": sched, "time_changed": timed,
            "batches": [a.n_batches, b.n_batches], "prompt_ms": [round(a.prompt_ms, 1), round(b.prompt_ms, 1)],
            metric_.name: [round(metric_.of(a), 3), round(metric_.of(b), 3)],
        })
    return res


# -- live -----------------------------------------------------------------------------------

class Cancelled(ReplayerError):
    """The user stopped the bisection (the app's cancel)."""


#: a live bisect's journal: build number → the measurements taken of it so far
_JOURNAL = TypeAdapter(dict[int, list[float]])


def _journal_path(key: dict) -> Path:
    digest = hashlib.sha256(orjson.dumps(key, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
    return paths.cache_dir() / "bisect" / f"{digest}.json"


def _file_id(p: Path) -> list:
    st = p.stat()
    return [str(p.resolve()), st.st_size, st.st_mtime_ns]


@dataclass
class LiveMeasure:
    """Measures one build for real: install it (cached), replay the session on ``model``."""

    body: dict
    knobs: Any
    metric: Metric
    model: Path
    backend: str = "cpu"
    ctx_size: int | None = None
    timeout: float = DEFAULT_TIMEOUT_S
    on_progress: ProgressFn | None = None
    cancel: threading.Event | None = None
    #: candidate → the build to run (installed as needed); None: candidates are release numbers
    spec_of: Callable[[int, Callable[[str, float], None]], str] | None = None

    @classmethod
    def for_session(cls, path: str | Path, config: ReplayConfig, metric_: Metric, model: Path,
                    **kw: Any) -> "LiveMeasure":
        from replayer.core.engine.schedule import Knobs
        from replayer.core.session.request import request_from_files

        model = Path(model).expanduser()
        if not model.is_file():
            raise ReplayerError(f"a live bisection needs a GGUF model file; no such file: {model}")
        s = load_session(path, config.format, images=config.images)
        body = request_from_files(s, config.system_prompt, config.tools).body
        knobs = Knobs(n_batch=config.n_batch, n_ubatch=config.n_ubatch, n_ctx_checkpoints=config.ctx_checkpoints,
                      checkpoint_min_step=config.checkpoint_min_step).validate()  # memory: the server says
        return cls(body, knobs, metric_, model, **kw)

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled("bisection cancelled")

    def __call__(self, n: int) -> float:
        from replayer.core.builds import manager
        from replayer.core.engine.live import installed_run_events

        self.check_cancel()

        def progress(stage: str, frac: float) -> None:
            self.check_cancel()  # raised inside the compile: the manager stops it and keeps no half entry
            if self.on_progress:
                self.on_progress(n, stage, frac)

        if self.spec_of is not None:
            spec = self.spec_of(n, progress)
        else:
            manager.install(n, self.backend, progress)
            spec = str(n)
        progress("replay", 0.0)
        gen = installed_run_events("A", spec, self.backend, self.knobs, self.model, self.body,
                                   ctx_size=self.ctx_size, request_timeout=self.timeout)
        try:
            run = RunSummary.from_events("A", gen)
        finally:
            gen.close()  # stops the server
        value = self.metric.of(run)
        progress("replay", 1.0)
        return value


def live(path: str | Path, config: ReplayConfig, good: int, bad: int, metric_: Metric, model: Path, *,
         backend: str = "cpu", thr: Threshold = Threshold(), candidates: Iterable[int] | None = None,
         ctx_size: int | None = None, timeout: float = DEFAULT_TIMEOUT_S, resume: bool = True,
         on_step: Callable[[StepReport], None] | None = None, on_progress: ProgressFn | None = None,
         cancel: threading.Event | None = None) -> BisectResult:
    """Bisect over real builds: every index build in the range, or only ``candidates``
    (builds already installed, or a user's own from ``builds add``).

    Measurements are journaled as they are taken; after an interruption the same command
    takes them up again instead of measuring those builds twice (``resume=False`` starts over).
    """
    from replayer.core.builds import index

    measure = LiveMeasure.for_session(path, config, metric_, model, backend=backend, ctx_size=ctx_size,
                                      timeout=timeout, on_progress=on_progress, cancel=cancel)
    lo, hi = min(good, bad), max(good, bad)
    pool = sorted(set(candidates) if candidates is not None else set(index.available_builds()))
    cands = [n for n in pool if lo <= n <= hi]
    for end in (good, bad):
        if end not in cands:
            where = "among the given builds" if candidates is not None else "on the package index"
            raise ReplayerError(f"b{end} is not {where}", hint="pick a build that is")
    journal = _journal_path({"session": _file_id(Path(path)), "model": _file_id(measure.model),
                             "metric": metric_.name, "backend": backend, "knobs": dataclasses.asdict(measure.knobs),
                             "ctx": ctx_size})
    recorded: dict[int, list[float]] = {}
    if resume and journal.is_file():
        try:
            recorded = _JOURNAL.validate_json(journal.read_bytes())
        except (ValidationError, OSError):  # a damaged journal: measure again
            recorded = {}
    taken: dict[int, list[float]] = {k: list(v) for k, v in recorded.items()}

    def journaled(n: int) -> float:
        value = measure(n)
        taken.setdefault(n, []).append(value)
        journal.parent.mkdir(parents=True, exist_ok=True)
        journal.write_bytes(orjson.dumps({str(k): v for k, v in taken.items()}))
        return value

    eff = thr if metric_.noisy else dataclasses.replace(thr, max_samples=1)
    return search(cands, good, bad, journaled, eff, engine="live", metric_=metric_, samples=recorded,
                  on_step=on_step)


def step_line(step: StepReport, m: Metric) -> str:
    """One line per step: the build, its measurement and the decision."""
    more = f" (median of {len(step.samples)}: {statistics.median(step.samples):,.4g})" if len(step.samples) > 1 else ""
    tag = " [recorded]" if step.recorded else ""
    word = {"unsure": "too close to call"}.get(step.decision, step.decision)
    return f"b{step.build:<6} {m.name} {step.value:,.4g} {m.unit}{more}  → {word}  ({step.why}){tag}"
