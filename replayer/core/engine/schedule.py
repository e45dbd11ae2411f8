"""Token-exact prefill schedule of llama-server, per behaviour generation.

A pure re-implementation of the server's batch-filling loop and context-checkpoint
bookkeeping (``spec/llama-server-prefill.md`` §4–§7): given the prompt's length, where
its user-message spans start, the build's generation and the knobs, it returns the
batches (``[start, end)`` and why each ended) and the checkpoints created, erased and
restored. ``Slot`` keeps state across requests so that a warm second request (resume
after a first one, identical re-send) follows the same rules as the server.

The simulator is right when this matches the real build token for token; the spec's
test vectors and the live tests against real builds check exactly that.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import NamedTuple

from replayer.core.builds.catalog import Build, Generation
from replayer.core.errors import ReplayerError
from replayer.core.runspec import (  # noqa: F401  (re-exported: callers import them from here)
    MEMORIES, Knobs, Memory, PromptSpans, parse_memory)


class Batch(NamedTuple):
    """One llama_decode call of the prefill (a tuple: a fragmented run makes thousands)."""

    start: int
    n_tokens: int
    n_ubatches: int
    reason: str

    @property
    def end(self) -> int:
        return self.start + self.n_tokens


@dataclass(frozen=True)
class Checkpoint:
    n_tokens: int
    pos_min: int
    pos_max: int
    task: int = 0


@dataclass(frozen=True)
class Erasure:
    checkpoint: Checkpoint
    reason: str  # old | too_close | superseded | invalidated
    batch_index: int  # erased while deciding this batch; -1 = at task start


@dataclass
class Schedule:
    """One request's prefill: what the server did, in order."""

    n_tokens: int
    n_past: int
    batches: list[Batch]
    created: list[tuple[int, Checkpoint]]  # (batch index, checkpoint) in creation order
    erased: list[Erasure]
    restored: Checkpoint | None
    final_list: list[Checkpoint]
    created_counts: list[int] = field(default_factory=list)  # list length after each creation

    @property
    def checkpoints(self) -> list[Checkpoint]:
        return [c for _, c in self.created]

    @property
    def n_ubatches(self) -> int:
        return sum(b.n_ubatches for b in self.batches)

    def to_dict(self) -> dict:
        return {
            "n_tokens": self.n_tokens,
            "n_past": self.n_past,
            "batches": [
                {"start": b.start, "n_tokens": b.n_tokens, "n_ubatches": b.n_ubatches,
                 "reason": b.reason}
                for b in self.batches
            ],
            "checkpoints": [
                {"n_tokens": c.n_tokens, "pos_min": c.pos_min, "pos_max": c.pos_max}
                for c in self.checkpoints
            ],
            "erased": [
                {"n_tokens": e.checkpoint.n_tokens, "reason": e.reason} for e in self.erased
            ],
            "restored": self.restored.n_tokens if self.restored else None,
        }


def near_end_points(n_tokens: int, knobs: Knobs) -> tuple[int, int]:
    """Positions where a checkpointing model's batch is cut before the prompt end."""
    nb = knobs.n_batch_eff
    return (n_tokens - min(nb, 4 + knobs.n_ubatch_eff), n_tokens - min(nb, 4))


class ReasonRule:
    """Names the rule that cut a batch ``[start, end)``: the diagnosis in one word.

    Built once per run and shared by both engines, so that a simulated and a live run label
    the same batch the same way. A full batch is ``n_batch`` even if a user start happens to
    sit there, since the batch would have ended there anyway.
    """

    __slots__ = ("n_tokens", "n_batch", "user_set", "near")

    def __init__(self, n_tokens: int, user_starts, knobs: Knobs, checkpoints_enabled: bool | None = None) -> None:
        enabled = knobs.checkpoints_enabled if checkpoints_enabled is None else checkpoints_enabled
        self.n_tokens = n_tokens
        self.n_batch = knobs.n_batch_eff
        self.user_set = frozenset(user_starts)
        self.near = near_end_points(n_tokens, knobs) if enabled else ()

    def __call__(self, start: int, end: int) -> str:
        if end >= self.n_tokens:
            return "prompt_end"
        if end - start >= self.n_batch:
            return "n_batch"
        if end in self.user_set:
            return "user_start"
        if end in self.near:
            return "checkpoint_offset"
        return "other"


class Slot:
    """One server slot: cached prompt length, memory kind and checkpoint list.

    ``run`` schedules one request on it, exactly like a task picked up by the server;
    calling it again models the next request of a session on the same slot.
    """

    def __init__(self, build: Build, knobs: Knobs | None = None) -> None:
        self.build = build
        self.knobs = (knobs or Knobs()).validate()
        self.cached = 0  # tokens whose state is in memory
        self.checkpoints: list[Checkpoint] = []
        self.task = -1

    # -- memory model -----------------------------------------------------------------
    def _pos_min(self, n_cached: int) -> int:
        """What the memory reports as its minimum position with ``n_cached`` tokens in it."""
        if n_cached <= 0:
            return -1
        mem = self.knobs.memory
        if mem == "recurrent":
            return n_cached - 1
        if mem == "swa":
            return max(0, n_cached - self.knobs.size_swa)
        return 0

    def _n_swa(self) -> int:
        return self.knobs.n_swa if self.knobs.memory == "swa" else 0

    # -- checkpoint list (§6) ---------------------------------------------------------
    def _create(self, ckpt: Checkpoint, batch_index: int, erased: list[Erasure]) -> None:
        gen = self.build.generation
        n_max = self.knobs.n_ctx_checkpoints
        step = self.knobs.min_step(self.build)
        if gen in (Generation.G2B, Generation.G3):
            kept: list[Checkpoint] = []
            last = -1
            remaining = list(self.checkpoints)
            while remaining:
                if gen is Generation.G3 and len(kept) + len(remaining) + 1 < n_max:
                    kept.extend(remaining)
                    break
                entry = remaining.pop(0)
                if entry.task != ckpt.task and last >= 0 and entry.n_tokens <= last + step:
                    erased.append(Erasure(entry, "too_close", batch_index))
                    continue
                kept.append(entry)
                last = entry.n_tokens
            self.checkpoints = kept
        while len(self.checkpoints) >= n_max:
            erased.append(Erasure(self.checkpoints.pop(0), "old", batch_index))
        if gen is Generation.G3:
            for entry in [c for c in self.checkpoints if c.n_tokens == ckpt.n_tokens]:
                self.checkpoints.remove(entry)
                erased.append(Erasure(entry, "superseded", batch_index))
        self.checkpoints.append(ckpt)

    # -- start of a task (§7) -----------------------------------------------------------
    def _start_task(self, n_tokens: int, common_prefix: int, erased: list[Erasure]
                    ) -> tuple[int, Checkpoint | None]:
        n_past = min(common_prefix, self.cached)
        restored = None
        if 0 < n_past <= self.cached:
            pos_next = n_past
            thold = max(0, pos_next - self._n_swa() - (0 if n_past < n_tokens else 1))
            if self._pos_min(self.cached) >= thold:
                found = None
                for c in reversed(self.checkpoints):
                    if c.pos_max <= pos_next and (c.pos_min < thold or c.pos_min == 0):
                        found = c
                        break
                if found is not None:
                    pos_next = min(pos_next, max(found.pos_min + 1, found.pos_max))
                    n_past = min(pos_next, found.n_tokens)
                    restored = found
                else:
                    n_past = 0
                    pos_next = 0
            for c in [c for c in self.checkpoints if c.pos_max > pos_next]:
                self.checkpoints.remove(c)
                erased.append(Erasure(c, "invalidated", -1))
        elif n_past == 0:
            # cache_prompt false or nothing shared: everything re-processed, and every
            # checkpoint that holds any position is invalid
            for c in [c for c in self.checkpoints if c.pos_max > 0]:
                self.checkpoints.remove(c)
                erased.append(Erasure(c, "invalidated", -1))
        if n_past == n_tokens and n_tokens > 0:
            n_past -= 1  # one token must be evaluated to get logits
        return n_past, restored

    # -- the fill loop (§5) -------------------------------------------------------------
    def run(self, spans: PromptSpans, common_prefix: int | None = None) -> Schedule:
        """Schedule one request. ``common_prefix``: tokens shared with the slot's cache."""
        k = self.knobs
        build = self.build
        gen = build.generation
        N = spans.n_tokens
        U = spans.user_starts
        user_set = set(U)
        last_user = spans.last_user
        n_before_user = spans.g0_before_user
        step = k.min_step(build)
        nb, nub = k.n_batch_eff, k.n_ubatch_eff
        ckpt_enabled = k.checkpoints_enabled
        near1, near2 = near_end_points(N, k)
        near_lo = min(near1, near2)
        reason_of = ReasonRule(N, U, k, ckpt_enabled)
        n_u = len(U)
        is_g0, is_g1 = gen is Generation.G0, gen is Generation.G1
        spacing_g01 = gen in (Generation.G1, Generation.G2A)

        self.task += 1
        erased: list[Erasure] = []
        n_past, restored = self._start_task(N, common_prefix or 0, erased)
        batches: list[Batch] = []
        add_batch, new_tuple = batches.append, tuple.__new__  # Batch(...) without its __new__
        created: list[tuple[int, Checkpoint]] = []
        counts: list[int] = []

        pos = n_past
        while pos < N:
            start = pos
            # the loop appends tokens one by one; instead of stepping we jump to the first
            # position any rule can fire at, which is equivalent and O(#breaks)
            limit = min(N, start + nb)
            end = limit
            # user-start rule
            if is_g0:
                if n_before_user > 0 and start < n_before_user <= limit:
                    end = min(end, n_before_user)
            else:
                i = bisect_left(U, start + 1)
                if is_g1:
                    if i < n_u and U[i] < end:
                        end = U[i]
                elif ckpt_enabled:
                    last_ck = self.checkpoints[-1].n_tokens if self.checkpoints else None
                    while i < n_u and U[i] <= limit:
                        p = U[i]
                        if p == last_user or last_ck is None or p > last_ck + step:
                            end = min(end, p)
                            break
                        i += 1
            # near-end rule
            if ckpt_enabled and end >= near_lo:
                for p in (near1, near2):
                    if start < p <= end:
                        end = p
                        break
            n_cur = end - start
            batch_index = len(batches)
            add_batch(new_tuple(Batch, (start, n_cur, -(-n_cur // nub), reason_of(start, end))))

            # checkpoint decision (§5.3): taken before this batch is decoded
            near_prompt_end = N < end + nub
            complete = end == N
            do = ckpt_enabled
            if not complete:
                if is_g0:
                    if n_before_user <= 0 and not near_prompt_end:
                        do = False
                elif start not in user_set and not near_prompt_end:
                    do = False
            if is_g0:
                known = n_before_user > 0
                allowed = (not known) or start == n_before_user or (
                    start > n_before_user and near_prompt_end)
                if not allowed:
                    do = False
            if start <= 0:  # nothing decoded yet: the memory is empty (pos_min < 0)
                do = False
            if do and self.checkpoints:
                last = self.checkpoints[-1].n_tokens
                spaced = start > last + step
                if is_g0:
                    do = spaced
                elif spacing_g01:
                    do = spaced or start == last_user
                else:
                    do = spaced or start == last_user or near_prompt_end
            if do:
                ck = Checkpoint(start, self._pos_min(start), start - 1, self.task)
                self._create(ck, batch_index, erased)
                created.append((batch_index, ck))
                counts.append(len(self.checkpoints))
            pos = end

        self.cached = N
        return Schedule(N, n_past, batches, created, erased, restored, list(self.checkpoints), counts)


def schedule(spans: PromptSpans, build: Build, knobs: Knobs | None = None,
             n_past: int = 0) -> Schedule:
    """Fresh prompt on an empty slot (or warm with ``n_past`` cached tokens, no checkpoints).

    A warm start here models "the server already holds the first n_past tokens" without
    any history of checkpoints; use ``Slot`` to model a real sequence of requests.
    """
    slot = Slot(build, knobs)
    if n_past:
        if not 0 <= n_past <= spans.n_tokens:
            raise ReplayerError(f"--n-past {n_past} must be between 0 and {spans.n_tokens}")
        slot.cached = n_past
        return slot.run(spans, common_prefix=n_past)
    return slot.run(spans)
