"""One run read back from its events: the numbers both engines report the same way.

``RunSummary.from_events`` works for the simulated and the live engine alike, so the CLI, the
panes, the session runs and the comparison (``core/compare.py``) show the same numbers for the
same run. It lives beside the events it reads, in the engine layer, because the session engine
builds its per-turn summaries from it and the engine never imports the comparison.
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
