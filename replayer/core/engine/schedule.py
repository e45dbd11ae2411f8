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
from typing import Callable, NamedTuple

from replayer.core.builds.catalog import Build
from replayer.core.errors import ReplayerError
from replayer.core.runspec import (  # noqa: F401  (re-exported: callers import them from here)
    MEMORIES, Knobs, Memory, PromptSpans, parse_memory)


_new_tuple = tuple.__new__  # Batch(...), Checkpoint(...) without the namedtuple's Python __new__


class Batch(NamedTuple):
    """One llama_decode call of the prefill (a tuple: a fragmented run makes thousands)."""

    start: int
    n_tokens: int
    n_ubatches: int
    reason: str

    @property
    def end(self) -> int:
        return self.start + self.n_tokens


class Checkpoint(NamedTuple):
    """A context checkpoint (a tuple, like ``Batch``: a session creates thousands)."""

    n_tokens: int
    pos_min: int
    pos_max: int
    task: int = 0


class Erasure(NamedTuple):
    checkpoint: Checkpoint
    reason: str  # old | too_close | superseded | invalidated
    batch_index: int  # erased while deciding this batch; -1 = at task start


@dataclass(slots=True)
class Schedule:
    """One request's prefill: what the server did, in order (slotted: a session makes one per turn and build)."""

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
    return _near_end(n_tokens, knobs.n_batch_eff, knobs.n_ubatch_eff)


def _near_end(n_tokens: int, n_batch: int, n_ubatch: int) -> tuple[int, int]:
    d1, d2 = _near_distances(n_batch, n_ubatch)
    return n_tokens - d1, n_tokens - d2


def _near_distances(n_batch: int, n_ubatch: int) -> tuple[int, int]:
    """How far before the prompt end the near-end cuts sit (a slot derives them once)."""
    return min(n_batch, 4 + n_ubatch), min(n_batch, 4)


class ReasonRule:
    """Names the rule that cut a batch ``[start, end)``: the diagnosis in one word.

    Built once per run and shared by both engines, so that a simulated and a live run label
    the same batch the same way. A full batch is ``n_batch`` even if a user start happens to
    sit there, since the batch would have ended there anyway.
    """

    __slots__ = ("n_tokens", "n_batch", "user_set", "near")

    def __init__(self, n_tokens: int, user_starts, knobs: Knobs) -> None:
        self.n_tokens = n_tokens
        self.n_batch = knobs.n_batch_eff
        self.user_set = frozenset(user_starts)
        self.near = near_end_points(n_tokens, knobs) if knobs.checkpoints_enabled else ()

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
        self.knobs = k = (knobs or Knobs()).validate()
        self.cached = 0  # tokens whose state is in memory
        self.checkpoints: list[Checkpoint] = []
        self.task = -1
        # what every request reads, derived once: a session asks a slot a thousand times
        self._step = k.min_step(build)
        self._ckpt_enabled = k.checkpoints_enabled
        self._n_batch = k.n_batch_eff
        self._n_ubatch = k.n_ubatch_eff
        self._walked: list[Checkpoint] | None = None  # the list the last too-close walk left, and for which task
        self._walked_task = -1
        self._memory = k.memory
        self._size_swa = k.size_swa
        self._swa = k.n_swa if k.memory == "swa" else 0
        self._user_breaks = build.generation.user_breaks
        self._g0 = self._user_breaks == "before_last_user"
        self._spacing = build.generation.spacing
        # the spacing rule as the fill loop tests it: min_step 0, min_step_or_last_user 1, … or_near_end 2
        self._rule = {"min_step": 0, "min_step_or_last_user": 1}.get(self._spacing, 2)
        self._too_close = build.generation.evict_too_close
        self._when_full = build.generation.evict_only_when_full
        self._supersede = build.generation.supersede
        self._n_max = k.n_ctx_checkpoints
        self._near_d = _near_distances(k.n_batch_eff, k.n_ubatch_eff)

    # -- memory model -----------------------------------------------------------------
    def _pos_min(self, n_cached: int) -> int:
        """What the memory reports as its minimum position with ``n_cached`` tokens in it."""
        if n_cached <= 0:
            return -1
        mem = self._memory
        if mem == "recurrent":
            return n_cached - 1
        if mem == "swa":
            return max(0, n_cached - self._size_swa)
        return 0

    # -- checkpoint list (§6) ---------------------------------------------------------
    def _create(self, ckpt: Checkpoint, batch_index: int, erased: list[Erasure]) -> None:
        # Checkpoint fields by index (n_tokens 0, task 3) here and in the fill loop: a
        # namedtuple's field by name is a descriptor call on every read
        old = self.checkpoints
        if self._too_close:
            # One walk, oldest first: an older task's checkpoint within min-step of the last
            # one kept is erased (with evict_only_when_full, only while the list would be full).
            # A session runs it thousands of times on a list it walked before, so it resumes:
            # since the walk for task w left ``old`` clean, only task w's checkpoints were
            # appended and the oldest popped (either way the entries before w's first one
            # compare as they did), so only w's checkpoints — exempt then, not now — can go,
            # and for task w itself nothing can. Any other change of the list (a restore, an
            # invalidation, a supersede) drops the memo and the walk starts at 0. A walk that
            # stops early (evict_only_when_full) proves nothing clean: no memo for it.
            task = ckpt[3]
            n = len(old)
            when_full = self._when_full
            if self._walked is old and not when_full:
                begin = n
                w = self._walked_task
                if w != task:
                    while begin > 0 and old[begin - 1][3] == w:
                        begin -= 1
            else:
                begin = 0
            if begin < n:
                step, n_max = self._step, self._n_max
                kept = old[:begin]
                last = old[begin - 1][0] if begin else -1
                for i in range(begin, n):
                    if when_full and n - i + len(kept) + 1 < n_max:
                        kept += old[i:]
                        break
                    entry = old[i]
                    if entry[3] != task and last >= 0 and entry[0] <= last + step:
                        erased.append(_new_tuple(Erasure, (entry, "too_close", batch_index)))
                        continue
                    kept.append(entry)
                    last = entry[0]
                old = self.checkpoints = kept
            self._walked, self._walked_task = old, task
        if len(old) >= self._n_max:
            n_max = self._n_max
            while len(old) >= n_max:
                erased.append(_new_tuple(Erasure, (old.pop(0), "old", batch_index)))
        if self._supersede:
            for entry in [c for c in old if c[0] == ckpt[0]]:
                old.remove(entry)
                erased.append(Erasure(entry, "superseded", batch_index))
                self._walked = None
        old.append(ckpt)

    # -- start of a task (§7) -----------------------------------------------------------
    def _start_task(self, n_tokens: int, common_prefix: int, erased: list[Erasure]
                    ) -> tuple[int, Checkpoint | None]:
        n_past = min(common_prefix, self.cached)
        restored = None
        if 0 < n_past <= self.cached:
            pos_next = n_past
            thold = max(0, pos_next - self._swa - (0 if n_past < n_tokens else 1))
            if self._pos_min(self.cached) >= thold:
                found = None
                for c in reversed(self.checkpoints):  # (n_tokens, pos_min, pos_max, task)
                    if c[2] <= pos_next and (c[1] < thold or c[1] == 0):
                        found = c
                        break
                if found is not None:
                    pos_next = min(pos_next, max(found.pos_min + 1, found.pos_max))
                    n_past = min(pos_next, found.n_tokens)
                    restored = found
                else:
                    n_past = 0
                    pos_next = 0
            # every checkpoint sits below the end of the slot's last prompt (made inside it, or
            # kept at or below where it resumed): resuming at that end, none is invalid
            if pos_next < self.cached:
                for c in [c for c in self.checkpoints if c[2] > pos_next]:
                    self.checkpoints.remove(c)
                    erased.append(Erasure(c, "invalidated", -1))
                    self._walked = None
        elif n_past == 0:
            # cache_prompt false or nothing shared: everything re-processed, and every
            # checkpoint that holds any position is invalid
            for c in [c for c in self.checkpoints if c[2] > 0]:
                self.checkpoints.remove(c)
                erased.append(Erasure(c, "invalidated", -1))
                self._walked = None
        if n_past == n_tokens and n_tokens > 0:
            n_past -= 1  # one token must be evaluated to get logits
        return n_past, restored

    # -- the fill loop (§5) -------------------------------------------------------------
    def run(self, spans: PromptSpans, common_prefix: int | None = None, *, reach_from: int = 0,
            full: Callable[[], PromptSpans] | None = None) -> Schedule:
        """Schedule one request. ``common_prefix``: tokens shared with the slot's cache.

        ``spans`` may leave out the user starts below ``reach_from`` (a session turn passes only
        those its prefill can reach: a thousand turns each passing a thousand starts would be
        quadratic); should the slot keep fewer tokens than that (a checkpoint restore, a full
        re-processing), the prefill runs on ``full()``, the prompt with all its starts.
        """
        self.task += 1
        erased: list[Erasure] = []
        n_past, restored = self._start_task(spans.n_tokens, common_prefix or 0, erased)
        if n_past < reach_from and full is not None:
            spans = full()
        batches, created, counts = self._fill(spans, n_past, erased)
        self.cached = spans.n_tokens
        return Schedule(spans.n_tokens, n_past, batches, created, erased, restored, list(self.checkpoints), counts)

    def _fill(self, spans: PromptSpans, n_past: int, erased: list[Erasure]
              ) -> tuple[list[Batch], list[tuple[int, Checkpoint]], list[int]]:
        """The batches from ``n_past`` on, with the checkpoints made before them. The server adds
        tokens one by one; this jumps to the next position a rule can fire at (O(#breaks)), the
        rules written out in place: a session runs it for every turn of both builds, where a
        method call per rule and batch was most of the slot's time."""
        N, nb, nub, ck_on = spans.n_tokens, self._n_batch, self._n_ubatch, self._ckpt_enabled
        U = spans.user_starts
        n_u = len(U)
        last_user = U[-1] if U else -1
        nbu = spans.n_before_user if spans.n_before_user is not None else last_user
        near1, near2 = N - self._near_d[0], N - self._near_d[1]  # _near_end
        near_lo = min(near1, near2) if ck_on else N + 1
        g0, every_user, step, rule = self._g0, self._user_breaks == "every_user", self._step, self._rule
        where_due = ck_on and not g0 and not every_user
        batches: list[Batch] = []
        created: list[tuple[int, Checkpoint]] = []  # (batch index, checkpoint); and the list's length after each
        counts: list[int] = []
        add_batch, new_tuple, start = batches.append, _new_tuple, n_past
        i = bisect_left(U, start)
        start_is_user = i < n_u and U[i] == start
        while start < N:
            limit = start + nb if start + nb < N else N
            end = limit  # the user-start rule (§5.1): where a batch that could reach ``limit`` ends
            if g0:
                if 0 < nbu and start < nbu <= limit:
                    end = nbu
            elif n_u:
                i = bisect_left(U, start + 1)
                if every_user:
                    if i < n_u and U[i] < limit:
                        end = U[i]
                elif where_due:
                    last_ck = self.checkpoints[-1][0] if self.checkpoints else None
                    while i < n_u and U[i] <= limit:
                        if U[i] == last_user or last_ck is None or U[i] > last_ck + step:
                            end = U[i]
                            break
                        i += 1
            if end >= near_lo:  # the near-end rule of a checkpointing model
                end = near1 if start < near1 <= end else near2 if start < near2 <= end else end
            n_cur = end - start
            if end >= N:  # the batch's reason (``ReasonRule``, the order of its tests)
                reason, end_is_user = "prompt_end", False
            else:
                j = bisect_left(U, end)
                end_is_user = j < n_u and U[j] == end
                reason = ("n_batch" if n_cur >= nb else "user_start" if end_is_user
                          else "checkpoint_offset" if ck_on and (end == near1 or end == near2) else "other")
            add_batch(new_tuple(Batch, (start, n_cur, -(-n_cur // nub), reason)))
            # the checkpoint decision (§5.3; the spec's order of tests, with the spacing rule), taken
            # before the batch is decoded; at start 0 nothing is decoded yet, the memory is empty
            if ck_on and start > 0 and (end == N or start_is_user or N < end + nub if not g0 else
                                        (nbu > 0 and (start == nbu or start > nbu and N < end + nub))
                                        or nbu <= 0 and (end == N or N < end + nub)) and (
                    not self.checkpoints or start > self.checkpoints[-1][0] + step
                    or rule and (start == last_user or rule == 2 and N < end + nub)):
                ck = new_tuple(Checkpoint, (start, self._pos_min(start), start - 1, self.task))
                self._create(ck, len(batches) - 1, erased)
                created.append((len(batches) - 1, ck)), counts.append(len(self.checkpoints))
            start, start_is_user = end, end_is_user
        return batches, created, counts


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
