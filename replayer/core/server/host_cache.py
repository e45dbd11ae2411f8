"""The host-memory prompt cache (``--cache-ram``): saved slot states, oldest first.

``server_prompt_cache`` in ``tools/server/server-task.cpp``, rule for rule:

- ``save`` (``alloc``): nothing if a saved prompt already holds the whole prompt; saved
  prompts the new one contains are removed; from b9940 a state larger than the limit is
  skipped and the oldest entries go *before* the new one is added; the entry keeps the
  slot's checkpoints.
- ``load``: the entry that beats the slot's own prompt on both ``f_keep`` (shared / entry
  length, at least 0.25: "don't trash large prompts") and similarity (shared / new prompt
  length) is moved into the slot and out of the cache.
- ``update``: the oldest entries go while the sum is over the limit (always keeping one),
  then while the tokens exceed ``max(n_ctx, limit / size per token)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from replayer.core.engine.schedule import Checkpoint
from replayer.core.prompt.turn_layouts import TurnPrompt
from replayer.core.server.cache_rules import CacheRules
from replayer.core.server.state_size import StateSize

__all__ = ["Entry", "HostCache", "CacheEvent"]

Lcp = Callable[[TurnPrompt, TurnPrompt], int]
MIB = 1024 * 1024


@dataclass
class Entry:
    """One saved prompt: the tokens (as the prompt they are the start of), its checkpoints, its bytes."""

    prompt: TurnPrompt
    n_tokens: int
    checkpoints: list[Checkpoint]
    size: int
    thread: str = ""


@dataclass(frozen=True)
class CacheEvent:
    """What the cache did, for the request's facts: saved / skipped / loaded / evicted / removed."""

    kind: str
    n_tokens: int
    size: int
    thread: str = ""


@dataclass
class HostCache:
    limit_mib: int  # -1 no limit (0 means no cache: not built)
    limit_tokens: int  # the server's n_ctx
    sizes: StateSize | None
    rules: CacheRules
    lcp: Lcp
    states: list[Entry] = field(default_factory=list)

    @property
    def limit_size(self) -> int:
        return MIB * max(0, self.limit_mib)

    def size(self) -> int:
        return sum(e.size for e in self.states)

    def n_tokens(self) -> int:
        return sum(e.n_tokens for e in self.states)

    def entry_size(self, n_tokens: int, n_checkpoints: int) -> int:
        return self.sizes.of(n_tokens, n_checkpoints) if self.sizes else 0

    def save(self, prompt: TurnPrompt, n_tokens: int, checkpoints: list[Checkpoint], thread: str,
             out: list[CacheEvent]) -> bool:
        """``prompt_save``/``alloc``: the slot's state into the cache (False: not saved)."""
        if n_tokens <= 0:
            return False
        for e in self.states:
            if self._shared(e, prompt, n_tokens) >= n_tokens:
                return False  # "prompt is already in the cache, skipping"
        size = self.entry_size(n_tokens, len(checkpoints))
        limit = self.limit_size
        if self.rules.skip_oversize and limit and size > limit:
            out.append(CacheEvent("skipped", n_tokens, size, thread))
            return False
        kept = []
        for e in self.states:
            if self._shared(e, prompt, n_tokens) >= e.n_tokens:
                out.append(CacheEvent("removed", e.n_tokens, e.size, e.thread))  # "obsolete cached prompt"
            else:
                kept.append(e)
        self.states = kept
        if self.rules.make_room_first and limit:
            while self.states and self.size() + size > limit:
                e = self.states.pop(0)
                out.append(CacheEvent("evicted", e.n_tokens, e.size, e.thread))
        self.states.append(Entry(prompt, n_tokens, list(checkpoints), size, thread))
        out.append(CacheEvent("saved", n_tokens, size, thread))
        return True

    def load(self, slot_prompt: TurnPrompt | None, slot_n: int, new: TurnPrompt, out: list[CacheEvent]
             ) -> Entry | None:
        """``load``: the entry better than what the slot holds for ``new``, taken out of the cache."""
        lcp_best = min(self.lcp(slot_prompt, new), slot_n) if slot_prompt is not None and slot_n > 0 else 0
        f_keep_best = lcp_best / slot_n if slot_n > 0 else -1.0
        sim_best = lcp_best / new.n_tokens
        best = None
        for e in self.states:
            lcp = min(self.lcp(e.prompt, new), e.n_tokens)
            f_keep, sim = lcp / e.n_tokens, lcp / new.n_tokens
            if f_keep < 0.25:
                continue
            if f_keep_best < f_keep and sim_best < sim:
                f_keep_best, sim_best, best = f_keep, sim, e
        if best is not None:
            self.states.remove(best)
            out.append(CacheEvent("loaded", best.n_tokens, best.size, best.thread))
        return best

    def update(self, out: list[CacheEvent]) -> None:
        limit = self.limit_size
        if limit:
            while len(self.states) > 1 and self.size() > limit:
                e = self.states.pop(0)
                out.append(CacheEvent("evicted", e.n_tokens, e.size, e.thread))
        per_token = max(1.0, self.size() / max(1, self.n_tokens()))
        limit_tokens = max(self.limit_tokens, int(limit / per_token)) if limit else self.limit_tokens
        if self.limit_tokens > 0:
            while len(self.states) > 1 and self.n_tokens() > limit_tokens:
                e = self.states.pop(0)
                out.append(CacheEvent("evicted", e.n_tokens, e.size, e.thread))

    def _shared(self, e: Entry, prompt: TurnPrompt, n_tokens: int) -> int:
        return min(self.lcp(e.prompt, prompt), e.n_tokens, n_tokens)
