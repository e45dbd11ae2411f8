"""Two finished runs → the difference a maintainer asks for, computed from events only.

``RunSummary.from_events`` works for both engines, so the CLI, the panes and the exports
show the same numbers for the same run.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable

from replayer.core.engine import events as ev
from replayer.core.reasons import BREAK_REASONS, REASONS

_LISTED = {r.name for r in REASONS if r.always_listed}


@dataclass
class RunSummary:
    run: str
    label: str = ""
    build: str = ""
    generation: str = ""
    engine: str = ""
    n_tokens: int = 0
    n_past: int = 0
    settings: dict = field(default_factory=dict)
    batches: list[ev.BatchDone] = field(default_factory=list)
    created: list[ev.CheckpointCreated] = field(default_factory=list)
    erased: list[ev.CheckpointErased] = field(default_factory=list)
    finished: ev.RunFinished | None = None
    failed: str | None = None
    user_starts: int | None = None  # from the server's own layout (live runs)
    server_timings: dict = field(default_factory=dict)
    log: list[ev.LogLine] = field(default_factory=list)  # a live session's server log (``LogLine``)

    def apply(self, e: ev.Event) -> None:
        if isinstance(e, ev.RunStarted):
            self.label, self.build, self.generation, self.engine = e.label, e.build, e.generation, e.engine
            self.n_tokens, self.n_past, self.settings = e.n_tokens, e.n_past, dict(e.settings)
        elif isinstance(e, ev.BatchDone):
            self.batches.append(e)
        elif isinstance(e, ev.CheckpointCreated):
            self.created.append(e)
        elif isinstance(e, ev.CheckpointErased):
            self.erased.append(e)
        elif isinstance(e, ev.RunFinished):
            self.finished = e
        elif isinstance(e, ev.RunFailed):
            self.failed = e.error
        elif isinstance(e, ev.LayoutReady):
            self.user_starts = len(e.user_starts)
        elif isinstance(e, ev.ServerFacts):
            self.server_timings = dict(e.timings)
        elif isinstance(e, ev.LogLine):
            self.log.append(e)

    @classmethod
    def from_events(cls, run: str, events: Iterable[ev.Event]) -> "RunSummary":
        s = cls(run)
        for e in events:
            if e.run == run:
                s.apply(e)
        return s

    @property
    def status(self) -> str:
        """``complete``, ``prefill complete, generation failed: …`` or ``failed: …``."""
        if self.failed is not None:
            return ev.failed_status(self.failed)
        if self.finished is not None:
            return self.finished.status
        return ev.failed_status("the run ended without a result")

    @property
    def prefill_complete(self) -> bool:
        return ev.prefill_complete(self.status)

    # -- derived numbers -----------------------------------------------------------------
    @property
    def prompt_ms(self) -> float:
        if self.finished:
            return self.finished.prompt_ms
        return self.batches[-1].t_ms if self.batches else 0.0

    @property
    def tokens_per_s(self) -> float:
        if self.finished:
            return self.finished.tokens_per_s
        done = sum(b.n_tokens for b in self.batches)
        return done / (self.prompt_ms / 1000) if self.prompt_ms else 0.0

    @property
    def n_batches(self) -> int:
        return len(self.batches)

    @property
    def n_ubatches(self) -> int:
        return sum(b.n_ubatches for b in self.batches)

    def breaks(self) -> dict[str, int]:
        out = {r: 0 for r in BREAK_REASONS}
        for b in self.batches:
            out[b.reason] = out.get(b.reason, 0) + 1
        return {k: v for k, v in out.items() if v or k in _LISTED}

    @property
    def mean_batch(self) -> float:
        return statistics.fmean(b.n_tokens for b in self.batches) if self.batches else 0.0

    @property
    def median_batch(self) -> float:
        return statistics.median(b.n_tokens for b in self.batches) if self.batches else 0.0

    @property
    def checkpoint_mib(self) -> float:
        return sum(c.size_mib for c in self.created)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label, "run": self.run, "build": self.build, "generation": self.generation,
            # a run that did not finish its prefill reports what it measured: the tokens its
            # batches processed (the prompt's size beside it), and no throughput
            "engine": self.engine, "n_past": self.n_past, "n_tokens_prompt": self.n_tokens,
            "n_tokens": self.n_tokens if self.prefill_complete else sum(b.n_tokens for b in self.batches),
            "prompt_ms": round(self.prompt_ms, 3),
            "tokens_per_s": round(self.tokens_per_s, 3) if self.prefill_complete else None,
            "n_batches": self.n_batches, "n_ubatches": self.n_ubatches,
            "mean_batch": round(self.mean_batch, 1), "median_batch": self.median_batch,
            "breaks": self.breaks(), "settings": self.settings,
            "batches": [{"start": b.start, "n_tokens": b.n_tokens, "n_ubatches": b.n_ubatches,
                         "reason": b.reason, "ms": round(b.duration_ms, 3)} for b in self.batches],
            "checkpoints": [{"n_tokens": c.n_tokens, "pos_min": c.pos_min, "pos_max": c.pos_max,
                             "size_mib": c.size_mib} for c in self.created],
            "checkpoints_erased": [{"n_tokens": c.n_tokens, "reason": c.reason} for c in self.erased],
            "error": self.failed,
            "status": self.status,
        }


@dataclass
class Comparison:
    a: RunSummary
    b: RunSummary

    @property
    def comparable(self) -> bool:
        """Both runs processed their whole prompt: only then is there a speed-up to give."""
        return self.a.prefill_complete and self.b.prefill_complete

    @property
    def speedup(self) -> float:
        """B's throughput over A's (> 1: B is faster); 0 when a run did not finish its prefill."""
        if not self.comparable:
            return 0.0
        return self.b.tokens_per_s / self.a.tokens_per_s if self.a.tokens_per_s else 0.0

    def verdict(self) -> str:
        a, b = self.a, self.b
        if not self.comparable:
            bad = [r for r in (a, b) if not r.prefill_complete]
            return "; ".join(f"run {r.run} {r.status}" for r in bad) + \
                f" — no speed-up: {' and '.join(f'run {r.run}' for r in bad)} did not finish its prefill"
        text = self._speed_verdict()
        notes = [f"run {r.run}: {r.status}" for r in (a, b) if r.status != ev.STATUS_COMPLETE]
        return f"{text} ({'; '.join(notes)})" if notes else text

    def _speed_verdict(self) -> str:
        a, b = self.a, self.b
        s = self.speedup
        slow = a if s >= 1 else b
        slow_name, fast_name = ("A", "B") if s >= 1 else ("B", "A")
        ratio = s if s >= 1 else (1 / s if s else 0)
        breaks = slow.breaks()
        ub = breaks.get("user_start", 0)
        cut = slow.n_batches - 1
        if abs(ratio - 1) < 0.02:
            return (f"A and B are equally fast ({a.tokens_per_s:,.0f} vs {b.tokens_per_s:,.0f} tok/s, "
                    f"{a.n_batches} vs {b.n_batches} batches)")
        why = f"{ub} of {cut} batch breaks in {slow_name} were user/tool starts" if cut > 0 else \
            f"{slow_name} has {slow.n_batches} batches"
        return f"{fast_name} is {ratio:.2f}× faster: {why}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "speedup": round(self.speedup, 4) if self.comparable else None,
            "verdict": self.verdict(),
            "status": {"A": self.a.status, "B": self.b.status},
            "batches": {"A": self.a.n_batches, "B": self.b.n_batches},
            "mean_batch": {"A": round(self.a.mean_batch, 1), "B": round(self.b.mean_batch, 1)},
            "median_batch": {"A": self.a.median_batch, "B": self.b.median_batch},
            "breaks": {"A": self.a.breaks(), "B": self.b.breaks()},
            "checkpoints": {"A": len(self.a.created), "B": len(self.b.created)},
            "checkpoint_mib": {"A": round(self.a.checkpoint_mib, 3), "B": round(self.b.checkpoint_mib, 3)},
            "prompt_ms": {"A": round(self.a.prompt_ms, 1), "B": round(self.b.prompt_ms, 1)},
            "tokens_per_s": {"A": round(self.a.tokens_per_s, 2), "B": round(self.b.tokens_per_s, 2)},
            "time_lost_ms": round(abs(self.a.prompt_ms - self.b.prompt_ms), 1),
        }

    def rows(self) -> list[tuple[str, str, str]]:
        """The comparison table as (metric, A, B) strings, shared by the app and Markdown."""
        a, b = self.a, self.b
        ba, bb = a.breaks(), b.breaks()
        rows = [
            ("build", f"{a.build} ({a.generation})", f"{b.build} ({b.generation})"),
            ("decode calls (batches)", f"{a.n_batches}", f"{b.n_batches}"),
            ("ubatches", f"{a.n_ubatches}", f"{b.n_ubatches}"),
            ("mean batch (tokens)", f"{a.mean_batch:,.0f}", f"{b.mean_batch:,.0f}"),
            ("median batch (tokens)", f"{a.median_batch:,.0f}", f"{b.median_batch:,.0f}"),
        ]
        for r in BREAK_REASONS:
            if ba.get(r) or bb.get(r):
                rows.append((f"breaks: {r}", f"{ba.get(r, 0)}", f"{bb.get(r, 0)}"))
        rows += [
            ("checkpoints", f"{len(a.created)} ({a.checkpoint_mib:,.1f} MiB)", f"{len(b.created)} ({b.checkpoint_mib:,.1f} MiB)"),
            ("prompt time", f"{a.prompt_ms / 1000:,.1f} s", f"{b.prompt_ms / 1000:,.1f} s"),
            ("throughput", f"{a.tokens_per_s:,.1f} tok/s", f"{b.tokens_per_s:,.1f} tok/s"),
        ]
        if a.status != ev.STATUS_COMPLETE or b.status != ev.STATUS_COMPLETE:
            rows.append(("status", a.status, b.status))
        return rows


def compare(events: Iterable[ev.Event], a: str = "A", b: str = "B") -> Comparison:
    evs = list(events)
    return Comparison(RunSummary.from_events(a, evs), RunSummary.from_events(b, evs))
