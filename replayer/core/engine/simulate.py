"""Simulated replay: the exact schedule, timed by the cost model, as an event stream.

``simulate`` is a generator of events in time order. ``paced`` sleeps between them so a
run animates like a live one (speed ×1, ×10, …); ``instant`` yields them all at once. The
timing of each batch is its ubatches' modelled cost plus the copy of any checkpoint taken
before it.
"""

from __future__ import annotations

import time
from typing import Generator, Iterator

from replayer.core.engine import events as ev
from replayer.core.engine.schedule import Schedule, schedule
from replayer.core.runspec import PromptSpans, RunSpec
from replayer.core.engine.prefill import timed
from replayer.core.hardware.cost import CostModel


class SimulatedEngine:
    """The exact schedule of the run's build, timed by the prepared replay's cost model."""

    name = "simulated"

    def events(self, spec: RunSpec, prepared) -> Iterator[ev.Event]:
        return simulate(spec, prepared.layouts[spec.run].prompt_spans(), prepared.cost)


def simulate(spec: RunSpec, spans: PromptSpans, cost: CostModel, n_past: int = 0) -> Iterator[ev.Event]:
    yield from schedule_events(spec, schedule(spans, spec.build, spec.knobs, n_past=n_past), cost)


def schedule_events(spec: RunSpec, sched: Schedule, cost: CostModel) -> Iterator[ev.Event]:
    run = spec.run
    N = sched.n_tokens
    yield ev.RunStarted(run=run, label=spec.label or spec.build.label, build=spec.build.label,
                        generation=spec.build.generation.value, engine="simulated", n_tokens=N,
                        n_past=sched.n_past, settings=dict(spec.settings, cost_model=cost.name))
    t = yield from prefill_events(spec, sched, cost)
    processed = N - sched.n_past
    yield ev.RunFinished(run=run, n_tokens=N, n_processed=processed, prompt_ms=t,
                         tokens_per_s=processed / (t / 1000.0) if t > 0 else 0.0,
                         n_batches=len(sched.batches), n_checkpoints=len(sched.created), t_ms=t)


def prefill_events(spec: RunSpec, sched: Schedule, cost: CostModel, t0: float = 0.0
                   ) -> Generator[ev.Event, None, float]:
    """One request's progress, checkpoint and batch events, stamped ``t0`` + the time into the
    prefill; returns the prefill's duration. A session run calls it once per turn, so it
    builds nothing a turn does not show (no run start/finish events, no per-call settings)."""
    out: list[ev.Event] = []
    t = prefill_into(spec, sched, cost, t0, out, out, out, progress=True)
    yield from out
    return t


def prefill_into(spec: RunSpec, sched: Schedule, cost: CostModel, t0: float, batches: list, checkpoints: list,
                 erased: list, *, progress: bool) -> float:
    """The schedule timed (``prefill.timed``) and its events built (``Prefill.events_into``):
    ``BatchDone`` to ``batches``, the created and restored checkpoints to ``checkpoints``, the
    erased to ``erased`` (the event stream passes one list for all three and gets them in time
    order, with a ``Progress`` after each batch); returns the prefill's duration. A session's
    records keep the ``Prefill`` itself and make the events only for a reader that asks."""
    p = timed(spec, sched, cost, t0)
    p.events_into(batches, checkpoints, erased, progress=progress)
    return p.duration


def paced(events: Iterator[ev.Event], speed: float = 1.0, *, clock=time.monotonic, sleep=time.sleep
          ) -> Iterator[ev.Event]:
    """Release events at their ``t_ms`` divided by ``speed`` (speed ≤ 0 = instant)."""
    if speed <= 0:
        yield from events
        return
    t0 = clock()
    for e in events:
        due = t0 + e.t_ms / 1000.0 / speed
        delay = due - clock()
        if delay > 0:
            sleep(delay)
        yield e
