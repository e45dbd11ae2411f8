"""One request's prefill as the simulation timed it, held compactly; its events made when asked.

A session replay walks ~1,200 requests a build, with a few batches and checkpoints each. Making
their events (``BatchDone``, ``CheckpointCreated`` / ``Erased`` / ``Restored``: ~10,000 objects a
build) during the walk and keeping them all was the largest Python cost of the replay after the
rules themselves, while most readers of a session's records (``--json``, the misses, the
advice's totals) want counts and a few numbers. A ``Prefill`` keeps what the events are made of —
the schedule's own tuples and one float per batch, its end time — and ``events_into`` is the one
place those events are built: for the event stream as the run goes (``simulate.prefill_into``)
and for a record's reader that asks (``batches``, ``created``, ``erased``, ``restored``: built
once, then kept). The events stay the model every reader sees; this is only how records hold them.

The compact readers (``batch_rows`` and the checkpoint rows) read the tuples in the events'
order: every erasure at a batch ≥ 0 is made by the creation at that batch (``Slot._create``), so
the schedule's erasures are already in the order the events are emitted.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

from replayer.core.engine import events as ev
from replayer.core.engine.schedule import Schedule
from replayer.core.hardware.cost import CostModel, batch_ms, price_memo
from replayer.core.runspec import RunSpec


class Prefill:
    """One request's schedule, stamped from ``t0``: each batch's end (ms into the prefill) in
    ``ends``; a checkpoint's copy (``ckpt_ms``) is counted in the batch it is taken before."""

    __slots__ = ("run", "sched", "t0", "ends", "ckpt_ms", "size_mib", "n_max", "_lists")

    def __init__(self, run: str, sched: Schedule, t0: float, ends: list[float], ckpt_ms: float,
                 size_mib: float, n_max: int) -> None:
        self.run, self.sched, self.t0, self.ends = run, sched, t0, ends
        self.ckpt_ms, self.size_mib, self.n_max = ckpt_ms, size_mib, n_max
        self._lists: tuple[list, list, list, Any] | None = None

    @property
    def duration(self) -> float:
        """The prefill's time: the last batch's end (a checkpoint is always taken before a batch)."""
        return self.ends[-1] if self.ends else 0.0

    # -- the events ------------------------------------------------------------------------
    def events_into(self, batches: list, checkpoints: list, erased: list, *, progress: bool) -> None:
        """The events: ``BatchDone`` to ``batches`` (with a ``Progress`` before the first and after
        each when ``progress``), the created and restored checkpoints to ``checkpoints``, the
        erased to ``erased``; one list for all three gives them in time order (the stream)."""
        run, sched, t0, ends = self.run, self.sched, self.t0, self.ends
        N = sched.n_tokens
        add_batch, add_ck, add_erased = batches.append, checkpoints.append, erased.append
        Progress, BatchDone = ev.Progress, ev.BatchDone
        if progress:
            add_batch(Progress(run, sched.n_past, N, t0))
        # erasures come in batch order (those at task start, index −1, first), creations too,
        # at most one per batch: walk both lists alongside the batches. The schedule's tuples by
        # index: Erasure = (checkpoint, reason, batch index), Checkpoint = (n_tokens, pos_min, pos_max, task)
        s_erased, created = sched.erased, sched.created
        n_erased, n_created = len(s_erased), len(created)
        ei = ci = 0
        t_zero = t0 + 0.0
        while ei < n_erased and s_erased[ei][2] < 0:
            c, e_reason, _ = s_erased[ei]
            add_erased(ev.CheckpointErased(run, c[0], c[1], c[2], e_reason, t_zero))
            ei += 1
        if sched.restored is not None:
            c = sched.restored
            add_ck(ev.CheckpointRestored(run, c[0], c[1], c[2], sched.n_past, t_zero))
        counts, size_mib, n_max, ckpt_ms = sched.created_counts, self.size_mib, self.n_max, self.ckpt_ms
        next_ck = created[0][0] if n_created else -1
        t_start = 0.0
        for i, (start, n, n_ub, reason) in enumerate(sched.batches):
            if i == next_ck:
                while ei < n_erased and s_erased[ei][2] <= i:
                    c, e_reason, e_batch = s_erased[ei]
                    ei += 1
                    if e_batch == i:
                        add_erased(ev.CheckpointErased(run, c[0], c[1], c[2], e_reason, t0 + t_start))
                ck = created[ci][1]
                add_ck(ev.CheckpointCreated(run, ck[0], ck[1], ck[2], size_mib, counts[ci], n_max,
                                            t0 + (t_start + ckpt_ms)))
                ci += 1
                next_ck = created[ci][0] if ci < n_created else -1
            t = ends[i]
            add_batch(BatchDone(run, i, start, n, n_ub, reason, t0 + t_start, t0 + t))
            if progress:
                add_batch(Progress(run, start + n, N, t0 + t))
            t_start = t

    def _events(self) -> tuple[list, list, list, Any]:
        if self._lists is None:
            batches: list = []
            checkpoints: list = []
            erased: list = []
            self.events_into(batches, checkpoints, erased, progress=False)
            restored = checkpoints.pop(0) if self.sched.restored is not None else None
            self._lists = (batches, checkpoints, erased, restored)
        return self._lists

    @property
    def batches(self) -> list[ev.BatchDone]:
        return self._events()[0]

    @property
    def created(self) -> list[ev.CheckpointCreated]:
        return self._events()[1]

    @property
    def erased(self) -> list[ev.CheckpointErased]:
        return self._events()[2]

    @property
    def restored(self) -> ev.CheckpointRestored | None:
        if self.sched.restored is None:
            return None
        return self._events()[3]

    # -- the compact readers -----------------------------------------------------------------
    @property
    def n_batches(self) -> int:
        return len(self.sched.batches)

    @property
    def n_created(self) -> int:
        return len(self.sched.created)

    def batch_rows(self) -> list[tuple[int, int, int, str, float]]:
        """(start, n_tokens, n_ubatches, reason, duration ms) of every batch, as its ``BatchDone``
        says (the duration the same difference of the same two stamps)."""
        t0, ends, out = self.t0, self.ends, []
        t_start = 0.0
        for (start, n, n_ub, reason), t in zip(self.sched.batches, ends):
            out.append((start, n, n_ub, reason, (t0 + t) - (t0 + t_start)))
            t_start = t
        return out

    def created_rows(self) -> list[tuple[int, int, int]]:
        """(n_tokens, pos_min, pos_max) of every checkpoint created, in order."""
        return [(c[0], c[1], c[2]) for _, c in self.sched.created]

    def erased_rows(self) -> list[tuple[int, str]]:
        """(n_tokens, reason) of every checkpoint erased, in the events' order."""
        return [(e[0][0], e[1]) for e in self.sched.erased]


class Pricing(NamedTuple):
    """What pricing a run's schedules reads, read once per run (a session times ~1,200)."""

    prices: dict[tuple[int, int], float]  # ``cost.price_memo``
    ubatch_ms: Callable[[int, int], float]
    ckpt_ms: float  # the copy of one checkpoint
    size_mib: float
    n_max: int
    n_ubatch: int


def pricing(spec: RunSpec, cost: CostModel) -> Pricing:
    size_mib = spec.checkpoint_mib
    return Pricing(price_memo(cost), cost.ubatch_ms, cost.checkpoint_ms(size_mib), size_mib,
                   spec.knobs.n_ctx_checkpoints, spec.knobs.n_ubatch_eff)


def timed(spec: RunSpec, sched: Schedule, cost: CostModel, t0: float = 0.0, price: Pricing | None = None) -> Prefill:
    """The schedule priced by the cost model: each batch's ubatches, plus the copy of the
    checkpoint taken before it. A price is looked up by (tokens, depth) for one ubatch.
    ``price``: ``pricing(spec, cost)``, when the caller times many schedules of one run."""
    prices, ubatch_ms, ckpt_ms, size_mib, n_max, n_ubatch = price or pricing(spec, cost)
    created = sched.created
    n_created = len(created)
    ends: list[float] = []
    add = ends.append
    t = 0.0
    ci = 0
    next_ck = created[0][0] if n_created else -1
    for i, (start, n, n_ub, _) in enumerate(sched.batches):
        if i == next_ck:
            t += ckpt_ms
            ci += 1
            next_ck = created[ci][0] if ci < n_created else -1
        # = batch_ms; one ubatch (n_ub = ⌈n / n_ubatch⌉ = 1) is the common case: its price looked up
        if n_ub == 1:
            ms = prices.get((n, start))
            if ms is None:
                ms = prices[n, start] = ubatch_ms(n, start)
            t += ms
        else:
            t += batch_ms(cost, start, n, n_ubatch)
        add(t)
    return Prefill(spec.run, sched, t0, ends, ckpt_ms, size_mib, n_max)
