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
from replayer.core.hardware.cost import CostModel, batch_ms, price_memo


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
    """The one walk of a schedule that builds its events: ``BatchDone`` go to ``batches``, the
    created and restored checkpoints to ``checkpoints``, the erased to ``erased`` (the event
    stream passes one list for all three and gets them in time order, with a ``Progress``
    after each batch); returns the prefill's duration. A session's per-turn records ask for
    the lists apart and no progress: the same objects, without the ones only a stream shows."""
    run = spec.run
    N = sched.n_tokens
    add_batch, add_ck, add_erased = batches.append, checkpoints.append, erased.append
    Progress, BatchDone = ev.Progress, ev.BatchDone
    if progress:
        add_batch(Progress(run, sched.n_past, N, t0))
    t = 0.0
    # erasures come in batch order (those at task start, index −1, first), creations too,
    # at most one per batch: walk both lists alongside the batches
    s_erased, created = sched.erased, sched.created
    n_erased, n_created = len(s_erased), len(created)
    ei = ci = 0
    # (the schedule's tuples by index: Erasure = (checkpoint, reason, batch index), Checkpoint =
    # (n_tokens, pos_min, pos_max, task); a namedtuple's field by name is a descriptor call)
    while ei < n_erased and s_erased[ei][2] < 0:
        c, e_reason, _ = s_erased[ei]
        add_erased(ev.CheckpointErased(run, c[0], c[1], c[2], e_reason, t0 + t))
        ei += 1
    if sched.restored is not None:
        c = sched.restored
        add_ck(ev.CheckpointRestored(run, c[0], c[1], c[2], sched.n_past, t0 + t))
    if n_created:
        n_max = spec.knobs.n_ctx_checkpoints
        size_mib = spec.checkpoint_mib
        ckpt_ms = cost.checkpoint_ms(size_mib)
        counts = sched.created_counts
    next_ck = created[0][0] if n_created else -1
    ubatch_ms, prices = cost.ubatch_ms, price_memo(cost)
    for i, (start, n, n_ub, reason) in enumerate(sched.batches):
        t_start = t
        if i == next_ck:
            while ei < n_erased and s_erased[ei][2] <= i:
                c, e_reason, e_batch = s_erased[ei]
                ei += 1
                if e_batch == i:
                    add_erased(ev.CheckpointErased(run, c[0], c[1], c[2], e_reason, t0 + t))
            ck = created[ci][1]
            t += ckpt_ms
            add_ck(ev.CheckpointCreated(run, ck[0], ck[1], ck[2], size_mib, counts[ci], n_max, t0 + t))
            ci += 1
            next_ck = created[ci][0] if ci < n_created else -1
        # = batch_ms; one ubatch (n_ub = ⌈n / n_ubatch⌉ = 1) is the common case: its price looked up
        if n_ub == 1:
            ms = prices.get((n, start))
            if ms is None:
                ms = prices[n, start] = ubatch_ms(n, start)
            t += ms
        else:
            t += batch_ms(cost, start, n, spec.knobs.n_ubatch_eff)
        add_batch(BatchDone(run, i, start, n, n_ub, reason, t0 + t_start, t0 + t))
        if progress:
            add_batch(Progress(run, start + n, N, t0 + t))
    return t


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
