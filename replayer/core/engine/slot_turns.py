"""The slot's prompt cache across the turns of a session: simulated, and read back from events.

A session run is one server slot receiving every turn in order. Each turn starts where the
server's ``SLOT_STATE_STARTED`` block starts (``docs/cache-rules.md``): the common prefix of
the new prompt with the slot's tokens, the checkpoint restore or the full re-processing
fallback that SWA and recurrent memory need, the invalidated checkpoints erased, the last
token re-evaluated when everything is cached — all of which ``schedule.Slot`` models —
and then the prefill with its own checkpoints. Per turn the run emits ``TurnStarted``, the
usual batch/checkpoint events, and ``TurnFinished``; the live engine emits the same
events from a real server, and ``turn_records`` reads either stream back into per-turn
facts, so both engines are reported and compared by the same code. A reader that wants
the facts and not the stream (``--json``, the advice) takes ``simulate_session_records``:
the same slot turns and the same event objects, without the progress and turn events only
a stream shows (tests/test_session_records.py holds the two equal).
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from replayer.core.engine.run_summary import RunSummary
from replayer.core.engine import events as ev
from replayer.core.engine.schedule import Schedule, Slot
from replayer.core.engine.prefill import Prefill, pricing, timed
from replayer.core.engine.simulate import RunSpec, prefill_events
from replayer.core.hardware.cost import CostModel
from replayer.core.prompt.turn_layouts import TurnPrompt, shared_prefix


@dataclass(slots=True)
class TurnStarted:
    type = "turn_started"
    run: str
    turn: int
    n_tokens: int
    n_messages: int
    common_prefix: int  # tokens the prompt shares with what the slot held (client side)
    t_ms: float


@dataclass(slots=True)
class TurnFinished:
    type = "turn_finished"
    run: str
    turn: int
    n_tokens: int
    cache_n: int  # tokens reused (the server's timings.cache_n)
    prompt_n: int  # tokens processed (timings.prompt_n)
    prompt_ms: float
    full_reprocess: bool  # "forcing full prompt re-processing"
    t_ms: float
    error: str | None = None
    slot: int | None = None  # the slot the server chose (a server setup: ``server.session``; else not told)


TURN_EVENTS = (TurnStarted, TurnFinished)


def simulate_session(spec: RunSpec, prompts: list[TurnPrompt], cost: CostModel,
                     n_ctx: int | None = None, turns: Iterable[tuple] | None = None) -> Iterator[Any]:
    """One build's slot through every turn: the events a live session run would emit.
    ``turns``: the turns' schedules from elsewhere (``server.session``: several slots)."""
    run = spec.run
    yield _run_started(spec, prompts, cost)
    t = 0.0
    n_batches = n_ckpt = processed = 0
    for p, common, sched, full, slot in turns if turns is not None else _slot_turns(spec, prompts, n_ctx):
        yield TurnStarted(run, p.index, p.n_tokens, p.turn.n_messages, common, t)
        if sched is None:
            yield TurnFinished(run, p.index, p.n_tokens, 0, 0, 0.0, False, t, error=context_full(p, n_ctx), slot=slot)
            continue
        turn_ms = yield from prefill_events(spec, sched, cost, t)
        n_batches += len(sched.batches)
        n_ckpt += len(sched.created)
        processed += p.n_tokens - sched.n_past
        t += turn_ms
        yield TurnFinished(run, p.index, p.n_tokens, sched.n_past, p.n_tokens - sched.n_past, turn_ms, full, t,
                           slot=slot)
    yield run_finished(run, prompts[-1].n_tokens if prompts else 0, processed, t, n_batches, n_ckpt)


def simulate_session_records(spec: RunSpec, prompts: list[TurnPrompt], cost: CostModel,
                             n_ctx: int | None = None, turns: Iterable[tuple] | None = None) -> "SessionRun":
    """``turn_records(run, simulate_session(…))`` without the stream: the same slot turns, each
    turn's prefill timed by the same walk (``prefill.timed``) and kept in its record compactly —
    the record's events (``batches``, ``created``, …) are made by the stream's own builder when a
    reader asks (tests/test_session_records.py holds the two equal). No progress or turn events.
    What ``--json``, ``--markdown`` and the advice read; the app and ``--jsonl`` take the stream."""
    run = spec.run
    out = SessionRun(run)
    out.join_turns()
    out.apply(_run_started(spec, prompts, cost))
    held = _Held()
    alive = held.alive.values  # (bound once)
    price = pricing(spec, cost)
    t = 0.0
    n_batches = n_ckpt = processed = 0
    add_turn = out.turns.append
    # The loop allocates ~15 objects a turn and frees none of them: every 700 the collector
    # would walk the young ones, and every tenth pass the records kept so far (~10 % of the
    # replay). None of them is in a cycle, so the collector rests until the records are built.
    paused = gc.isenabled()
    gc.disable()
    try:
        for p, common, sched, full, slot in turns if turns is not None else _slot_turns(spec, prompts, n_ctx):
            if sched is None:
                add_turn(TurnRecord(p.index, p.n_tokens, p.turn.n_messages, common, error=context_full(p, n_ctx),
                                    held=list(alive()), slot=slot))
                continue
            pre = timed(spec, sched, cost, t, price)
            n_past, turn_ms = sched.n_past, pre.duration
            add_turn(TurnRecord(p.index, p.n_tokens, p.turn.n_messages, common, n_past, p.n_tokens - n_past,
                                turn_ms, full, held=list(alive()), slot=slot, facts=pre))
            if sched.created or sched.erased:
                held.take(sched)
                n_ckpt += len(sched.created)
            n_batches += len(sched.batches)
            processed += p.n_tokens - n_past
            t += turn_ms
    finally:
        if paused:
            gc.enable()
    out.apply(run_finished(run, prompts[-1].n_tokens if prompts else 0, processed, t, n_batches, n_ckpt))
    return out


def _slot_turns(spec: RunSpec, prompts: list[TurnPrompt], n_ctx: int | None
                ) -> Iterator[tuple[TurnPrompt, int, Schedule | None, bool, None]]:
    """Every turn on one slot: (prompt, common prefix with the previous prompt, the slot's
    schedule — None when the prompt does not fit ``n_ctx`` — whether the server fell back
    to a full re-processing, and the slot: None, the one slot is not reported)."""
    slot = OneSlot(spec, n_ctx)
    for p in prompts:
        yield slot.turn(p)


class OneSlot:
    """One simulated slot taking turns one at a time, as they come: what a session run does for
    a list of prompts (``_slot_turns``), for a caller that does not have the list yet (``replayer
    watch`` predicts each request as it passes the proxy)."""

    def __init__(self, spec: RunSpec, n_ctx: int | None = None) -> None:
        self.slot = Slot(spec.build, spec.knobs)
        self.n_ctx = n_ctx
        self.prev: TurnPrompt | None = None

    def turn(self, p: TurnPrompt) -> tuple[TurnPrompt, int, Schedule | None, bool, None]:
        """The next turn: (prompt, common prefix, schedule or None, full re-processing, None)."""
        common = shared_prefix(self.prev, p)[0] if self.prev is not None else 0  # Shared.n_tokens, by index
        if self.n_ctx is not None and p.n_tokens >= self.n_ctx:
            return p, common, None, False, None  # the server refuses the request before touching the slot
        reusable = min(common, self.slot.cached)
        sched = slot_schedule(self.slot, p, common, reusable)
        self.prev = p
        return p, common, sched, reusable > 0 and sched.n_past == 0 and sched.restored is None, None


def context_full(p: TurnPrompt, n_ctx: int | None) -> str:
    """The error of a turn the server refuses before touching the slot (either engine)."""
    return f"context full: {p.n_tokens} tokens ≥ n_ctx {n_ctx}"


def _run_started(spec: RunSpec, prompts: list[TurnPrompt], cost: CostModel) -> ev.RunStarted:
    last = prompts[-1].n_tokens if prompts else 0
    return ev.RunStarted(run=spec.run, label=spec.label or spec.build.label, build=spec.build.label,
                         generation=spec.build.generation.value, engine="simulated", n_tokens=last,
                         settings=dict(spec.settings, cost_model=cost.name, mode="session", turns=len(prompts)))


def run_finished(run: str, n_tokens: int, processed: int, t: float, n_batches: int, n_ckpt: int) -> ev.RunFinished:
    """A session run's totals (either engine): ``n_tokens`` of its last prompt sent, the tokens
    processed and the prefill time over all turns."""
    return ev.RunFinished(run=run, n_tokens=n_tokens, n_processed=processed, prompt_ms=t,
                          tokens_per_s=processed / (t / 1000.0) if t > 0 else 0.0,
                          n_batches=n_batches, n_checkpoints=n_ckpt, t_ms=t)


def slot_schedule(slot: Slot, p: TurnPrompt, common: int, reusable: int) -> Schedule:
    """``slot.run`` with only the user starts the prefill can reach.

    A turn's prefill covers ``[n_past, n)``; user starts below ``n_past`` take no part in
    it, but passing a thousand of them each turn makes a session quadratic. So the turn
    runs with the starts from ``reusable − 1`` on (the last user start is always kept);
    should the slot roll back further (a checkpoint restore or a full re-processing), it
    takes every start (``Slot.run``'s ``full``).
    """
    lo = max(0, reusable - 1)
    reach = p.spans_from(lo)
    if reach is None:
        return slot.run(p.spans, common)
    return slot.run(reach, common, reach_from=lo, full=lambda: p.spans)


# -- reading a session run back ----------------------------------------------------------

@dataclass(slots=True)
class EventLists:
    """A turn's batch and checkpoint events as lists: how a record read from an event stream
    holds them (either engine; the simulation's own records hold a ``prefill.Prefill``)."""

    batches: list[ev.BatchDone] = field(default_factory=list)
    created: list[ev.CheckpointCreated] = field(default_factory=list)
    erased: list[ev.CheckpointErased] = field(default_factory=list)
    restored: ev.CheckpointRestored | None = None

    @property
    def n_batches(self) -> int:
        return len(self.batches)

    @property
    def n_created(self) -> int:
        return len(self.created)

    def batch_rows(self) -> list[tuple[int, int, int, str, float]]:
        return [(b.start, b.n_tokens, b.n_ubatches, b.reason, b.duration_ms) for b in self.batches]

    def created_rows(self) -> list[tuple[int, int, int]]:
        return [(c.n_tokens, c.pos_min, c.pos_max) for c in self.created]

    def erased_rows(self) -> list[tuple[int, str]]:
        return [(e.n_tokens, e.reason) for e in self.erased]


_SCALARS = ("turn", "n_prompt", "n_messages", "common_prefix", "cache_n", "prompt_n", "prompt_ms", "full_reprocess",
            "error", "held", "cause", "slot")


@dataclass(slots=True, eq=False)
class TurnRecord:
    """One turn's facts. Its events (``batches``, ``created``, ``erased``, ``restored``) are read
    through ``facts``: lists for a record read from a stream, the compact ``Prefill`` for one the
    simulation made (its events built when first read); two records are equal when every fact
    and every event is."""

    turn: int
    n_prompt: int = 0
    n_messages: int = 0
    common_prefix: int = 0
    cache_n: int = 0
    prompt_n: int = 0
    prompt_ms: float = 0.0
    full_reprocess: bool = False
    error: str | None = None
    held: list[tuple[int, int, int]] = field(default_factory=list)  # checkpoints alive when the turn began
    cause: dict[str, Any] | None = None  # filled by misses.explain
    slot: int | None = None  # the slot the server chose (with a server setup)
    facts: EventLists | Prefill = field(default_factory=EventLists)

    @property
    def batches(self) -> list[ev.BatchDone]:
        return self.facts.batches

    @property
    def created(self) -> list[ev.CheckpointCreated]:
        return self.facts.created

    @property
    def erased(self) -> list[ev.CheckpointErased]:
        return self.facts.erased

    @property
    def restored(self) -> ev.CheckpointRestored | None:
        return self.facts.restored

    @property
    def n_batches(self) -> int:
        return self.facts.n_batches

    @property
    def n_created(self) -> int:
        return self.facts.n_created

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TurnRecord):
            return NotImplemented
        return (all(getattr(self, k) == getattr(other, k) for k in _SCALARS)
                and (self.batches, self.created, self.erased, self.restored)
                == (other.batches, other.created, other.erased, other.restored))

    @property
    def restore(self) -> str:
        """Whether the slot had to roll back to a checkpoint: ``not_needed`` (the memory kept
        what was reused), ``restored`` or ``none_usable`` (full re-processing)."""
        if self.restored is not None:
            return "restored"
        return "none_usable" if self.full_reprocess else "not_needed"

    def to_dict(self) -> dict[str, Any]:
        """The report's turn, read from the compact rows (no event made for it)."""
        f, r = self.facts, self.restored
        d: dict[str, Any] = {
            "turn": self.turn, "n_prompt": self.n_prompt, "n_messages": self.n_messages,
            "common_prefix": self.common_prefix, "cache_n": self.cache_n, "prompt_n": self.prompt_n,
            "prompt_ms": round(self.prompt_ms, 3),
            "batches": [{"start": s, "n_tokens": n, "n_ubatches": u, "reason": why, "ms": round(ms, 3)}
                        for s, n, u, why, ms in f.batch_rows()],
            "checkpoints": [{"n_tokens": n, "pos_min": lo, "pos_max": hi} for n, lo, hi in f.created_rows()],
            "checkpoints_restored": ([{"n_tokens": r.n_tokens, "pos_min": r.pos_min, "pos_max": r.pos_max,
                                       "n_past": r.n_past}] if r else []),
            "checkpoints_erased": [{"n_tokens": n, "reason": why} for n, why in f.erased_rows()],
            "full_reprocess": self.full_reprocess,
            "checkpoint_restore": self.restore,
        }
        if self.error:
            d["error"] = self.error
        if self.slot is not None:
            d["slot"] = self.slot
        if self.cause:
            d.update(self.cause)
        return d


def _joined(name: str) -> property:
    """A run's list of ``name`` events: its own (a run read from a stream appends to it), or — for
    a run whose turns hold their events compactly (``join_turns``) — its turns' lists joined,
    made when first read."""
    key = "_" + name

    def get(self: "SessionRun") -> list:
        d = self.__dict__
        v = d.get(key)
        if v is None:
            v = d[key] = [e for t in self.turns for e in getattr(t, name)]
        return v

    def put(self: "SessionRun", value: list) -> None:
        self.__dict__[key] = value

    return property(get, put)


@dataclass
class SessionRun(RunSummary):
    """A run's summary (``RunSummary``, over all turns) with its turns."""

    turns: list[TurnRecord] = field(default_factory=list)

    batches = _joined("batches")  # type: ignore[assignment]
    created = _joined("created")  # type: ignore[assignment]
    erased = _joined("erased")  # type: ignore[assignment]

    def join_turns(self) -> None:
        """The run's batch and checkpoint lists are its turns' (the simulation's records): joined
        when read; their counts read without making the events (``n_batches``, ``n_checkpoints``)."""
        d = self.__dict__
        d["_batches"] = d["_created"] = d["_erased"] = None

    @property
    def n_batches(self) -> int:
        if self.__dict__.get("_batches") is None:
            return sum(t.n_batches for t in self.turns)
        return len(self.batches)

    @property
    def n_checkpoints(self) -> int:
        """The checkpoints created over the run."""
        if self.__dict__.get("_created") is None:
            return sum(t.n_created for t in self.turns)
        return len(self.created)

    @property
    def prompt_n(self) -> int:
        return sum(t.prompt_n for t in self.turns)

    @property
    def cache_n(self) -> int:
        return sum(t.cache_n for t in self.turns)


class _Held:
    """The checkpoints alive, as a session run's events tell (a live run has no slot to ask):
    what each turn's record lists as ``held`` (``alive``'s values, in creation order). An erasure takes
    the oldest alive checkpoint of its size. ``read`` takes a stream's events, ``take`` a
    schedule's tuples in the same order (``prefill``: the order its events are made in).

    Kept as dicts, not a list searched by size: with several slots the list only grows (a
    cleared slot's checkpoints go without erasures), ~120 entries a request on the subagent
    session, and each erasure scanned it twice."""

    __slots__ = ("alive", "by_n", "seq")

    def __init__(self) -> None:
        self.alive: dict[int, tuple[int, int, int]] = {}  # creation number → (n_tokens, pos_min, pos_max)
        self.by_n: dict[int, list[int]] = {}  # n_tokens → the creation numbers alive with it, oldest first
        self.seq = 0

    def _add(self, c: tuple[int, int, int]) -> None:
        seq = self.seq = self.seq + 1
        self.alive[seq] = c
        same = self.by_n.get(c[0])
        if same is None:
            self.by_n[c[0]] = [seq]
        else:
            same.append(seq)

    def _drop(self, n: int) -> None:
        same = self.by_n.get(n)
        if same:
            del self.alive[same.pop(0)]
            if not same:
                del self.by_n[n]

    def read(self, events: list[Any], cur: "TurnRecord", out: "SessionRun") -> None:
        """Checkpoint events of the turn ``cur``, in order, into the turn's and the run's lists."""
        Created, Erased = ev.CheckpointCreated, ev.CheckpointErased
        facts = cur.facts
        for e in events:
            kind = type(e)
            if kind is Created:
                out.created.append(e)
                facts.created.append(e)
                self._add((e.n_tokens, e.pos_min, e.pos_max))
            elif kind is Erased:
                out.erased.append(e)
                facts.erased.append(e)
                self._drop(e.n_tokens)
            else:
                facts.restored = e

    def take(self, sched: Schedule) -> None:
        """A schedule's erasures and creations, in the order its events come (``Prefill.events_into``);
        ``_add`` and ``_drop`` written out (a session takes ~7,000 of each a build)."""
        alive, by_n, seq = self.alive, self.by_n, self.seq
        erased = sched.erased
        n_erased, ei = len(erased), 0
        for b, c in [(-1, None), *sched.created]:
            while ei < n_erased and erased[ei][2] <= b:
                e = erased[ei]
                ei += 1
                if e[2] == b:
                    n = e[0][0]
                    same = by_n.get(n)
                    if same:
                        del alive[same.pop(0)]
                        if not same:
                            del by_n[n]
            if c is not None:
                seq += 1
                n = c[0]
                alive[seq] = (n, c[1], c[2])
                same = by_n.get(n)
                if same is None:
                    by_n[n] = [seq]
                else:
                    same.append(seq)
        self.seq = seq


def turn_records(run: str, events: Iterable[Any]) -> SessionRun:
    """A session run's events (either engine) → per-turn facts."""
    return TurnReader(run).feed(events)


class TurnReader:
    """``turn_records`` fed in parts: the app reads a session's events as they come, and reading
    them all again at every repaint made a long session's replay quadratic (the 2,000-message
    session: ~200 ms of the UI thread per repaint by its end)."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.out = SessionRun(run)
        self.cur: TurnRecord | None = None
        self.held = _Held()

    def feed(self, events: Iterable[Any]) -> SessionRun:
        """Read more of the run's events, in order; the facts so far."""
        run, out, cur, held = self.run, self.out, self.cur, self.held
        BatchDone, Progress, Created, Erased = ev.BatchDone, ev.Progress, ev.CheckpointCreated, ev.CheckpointErased
        checkpoint_events = (Created, Erased, ev.CheckpointRestored)
        for e in events:
            kind = type(e)
            if kind is Progress:  # most events, with the batches: nothing to record
                continue
            if kind is BatchDone:
                if e.run == run:
                    out.batches.append(e)
                    if cur is not None:
                        cur.facts.batches.append(e)
                continue
            if getattr(e, "run", run) != run:
                continue
            if kind in checkpoint_events:
                if cur is not None:
                    held.read([e], cur, out)
                elif kind is not ev.CheckpointRestored:
                    out.apply(e)
            elif kind is TurnStarted:
                cur = TurnRecord(e.turn, n_prompt=e.n_tokens, n_messages=e.n_messages, common_prefix=e.common_prefix,
                                 held=list(held.alive.values()))
                out.turns.append(cur)
            elif kind is TurnFinished:
                if cur is not None:
                    cur.cache_n, cur.prompt_n, cur.prompt_ms = e.cache_n, e.prompt_n, e.prompt_ms
                    cur.full_reprocess, cur.error, cur.slot = e.full_reprocess, e.error, e.slot
            else:
                out.apply(e)  # the run-level summary
        self.cur = cur
        return out
