"""Two finished runs → the difference a maintainer asks for, computed from events only.

Each run is a ``RunSummary`` (``engine/run_summary.py``) read back from its events, the same for
both engines, so the CLI, the panes and the exports show the same numbers for the same run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from replayer.core.engine import events as ev
from replayer.core.engine.run_summary import RunSummary
from replayer.core.reasons import BREAK_REASONS


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
