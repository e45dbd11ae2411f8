"""A llama-server with its slots and host prompt cache, fed one request at a time in the recorded order.

Each request goes where the server's ``get_available_slot`` puts it
(``tools/server/server-context.cpp``, cited per build in docs/cache-rules.md):

1. an explicit ``id_slot`` names the slot;
2. else, with ``--slot-prompt-similarity`` ≠ 0, the idle slot whose tokens share the largest
   fraction of the new prompt (above the threshold); when that slot would keep less than
   half of its tokens (``f_keep < 0.5``) its state is saved to the host cache first;
3. else the least recently used idle slot (ties: the last in slot order), whose state is
   saved to the host cache;

and a saved-then-loaded cache entry replaces the slot's state when it fits the new prompt
better (``host_cache``). Once the task is launched, with ``--cache-idle-slots`` every other
slot is saved and, with a unified KV cache, cleared. The chosen slot then runs the request
exactly as the one-slot session replay does (``schedule.Slot``: common prefix, checkpoint
restore or full re-processing, the prefill's checkpoints). A unified cache that cannot hold
the other slots' tokens and the new prompt purges idle slots, one at a time in slot order
(``try_clear_idle_slots``).

Requests are sequential: each one finishes before the next arrives (no concurrency, no
deferred tasks).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from replayer.core.builds.catalog import Build
from replayer.core.engine.slot_turns import slot_schedule
from replayer.core.engine.schedule import Knobs, Schedule, Slot
from replayer.core.prompt.turn_layouts import TurnPrompt, compute_shared_prefix
from replayer.core.server.cache_rules import CacheRules, rules_for
from replayer.core.server.host_cache import CacheEvent, HostCache
from replayer.core.server.setup import ServerSetup
from replayer.core.server.state_size import StateSize
from replayer.core.server.traffic import Request

__all__ = ["ServerSim", "RequestFacts", "lcp"]

_f32 = np.float32
_F32 = struct.Struct("f")
_EXACT = 1 << 24  # integers below this are exact float32 values


def _round32(x: float) -> float:
    """``x`` rounded to the nearest float32 (``float(np.float32(x))``), as a Python float: numpy's
    scalar arithmetic costs ~10 µs a similarity, a session asks a thousand times per build."""
    return _F32.unpack(_F32.pack(x))[0]


def _similarity(n_lcp: int, n_new: int) -> float:
    """``f32(n_lcp) / f32(n_new)`` as the server computes it in float (``get_available_slot``).
    Both are integers below 2^24, exact in float32, so the float32 quotient is the double quotient
    rounded once more to float32 (a division rounded to 53 then to 24 bits is rounded as if
    once: 53 ≥ 2·24 + 2); outside that range numpy computes it."""
    if n_lcp < _EXACT and 0 < n_new < _EXACT:
        return _round32(n_lcp / n_new)
    return float(_f32(n_lcp) / _f32(n_new))


def _f_keep(sim: float, n_new: int, n_slot: int) -> float:
    """``(sim · f32(n_new)) / f32(n_slot)`` in float32: the product of a float32 and an integer
    below 2^24 is exact in double (24 + 24 bits), so each step rounded to float32 is the
    server's float result (the quotient as in ``_similarity``)."""
    if n_new < _EXACT and n_slot < _EXACT:
        return _round32(_round32(sim * n_new) / n_slot)
    return float((_f32(sim) * _f32(n_new)) / _f32(n_slot))


def lcp(a: TurnPrompt | None, b: TurnPrompt) -> int:
    """Tokens two prompts share from the start (``server_tokens::get_common_prefix``).

    Kept on ``b`` by ``a``'s identity (``TurnPrompt._lcp``): a request's selection compares it
    with each slot, then the chosen slot's schedule asks the same pair again, and build B's
    simulation asks every pair A asked (the same prompts: one layout per span rule). The value
    is a pure function of the two prompts; two threads racing on the memo only compute it twice."""
    if a is None:
        return 0
    if a is b:
        return a.n_tokens
    memo = b._lcp
    if memo is None:
        memo = b._lcp = {}
    else:
        hit = memo.get(id(a))
        if hit is not None and hit[0] is a:
            return hit[1]
    n = min(compute_shared_prefix(a, b).n_tokens, a.n_tokens, b.n_tokens)
    memo[id(a)] = (a, n)
    return n


class ServerSlot(Slot):
    """``schedule.Slot`` whose memory may come back from the host cache.

    A saved SWA state holds only the cells inside the window (``llama_kv_cache::state_write``
    skips the masked ones), so a slot loaded from the cache has ``pos_min = n − n_swa``, not
    the ``n − swa cells`` of a slot that filled itself: the next task may need a checkpoint
    where the same prompt kept in the slot would not. The floor lasts until the slot
    re-processes from 0 or restores a checkpoint (both replace the window)."""

    floor = -1

    def _pos_min(self, n_cached: int) -> int:
        p = Slot._pos_min(self, n_cached)  # (not super(): a proxy object per checkpoint)
        return max(p, self.floor) if p >= 0 and self.floor >= 0 else p

    def loaded(self, n_tokens: int) -> None:
        self.floor = max(0, n_tokens - self._swa) if self._memory == "swa" and self._swa else -1

    def run(self, spans, common_prefix=None, **kw):  # type: ignore[override]
        sched = Slot.run(self, spans, common_prefix, **kw)
        if sched.n_past == 0 or sched.restored is not None:
            self.floor = -1
        return sched


@dataclass(slots=True)
class _SlotState:
    id: int
    slot: ServerSlot
    prompt: TurnPrompt | None = None
    thread: str = ""
    t_last: int = -1

    @property
    def n(self) -> int:
        return self.slot.cached if self.prompt is not None else 0


@dataclass(slots=True)
class RequestFacts:
    """What the server did with one request: where it went, what the host cache did, what was reused
    (slotted: a session makes one per request and build)."""

    index: int
    thread: str
    n_tokens: int
    slot: int
    selected: str  # id | lcp | lru
    slot_had: str  # the thread whose tokens the slot held ("" = empty)
    cache: list[CacheEvent] = field(default_factory=list)
    purged: list[int] = field(default_factory=list)  # slots cleared because the unified cache was full
    cleared: list[int] = field(default_factory=list)  # idle slots cleared at launch (unified KV, idle slots cached)
    common_prefix: int = 0  # the slot's tokens shared with the prompt, after any cache load
    cache_n: int = 0
    prompt_n: int = 0
    full_reprocess: bool = False
    schedule: Schedule | None = None
    error: str | None = None
    lost_state: str = ""  # "slept" / "unloaded": the model's server started over before it (``lifecycle``)
    idle_s: float | None = None  # seconds the model had no task before it (None: not recorded)
    lost_cause: str = ""  # with ``lost_state``: what happened, and the flag that would have kept the state
    lost_fix: str = ""

    @property
    def loaded(self) -> CacheEvent | None:
        return next((e for e in self.cache if e.kind == "loaded"), None)

    def to_dict(self) -> dict:
        s = self.schedule
        d = {"request": self.index, "thread": self.thread, "n_tokens": self.n_tokens, "slot": self.slot,
             "selected": self.selected, "slot_had": self.slot_had, "cache_n": self.cache_n,
             "prompt_n": self.prompt_n, "full_reprocess": self.full_reprocess,
             "host_cache": [e.__dict__ for e in self.cache], "purged": self.purged,
             "checkpoints_created": [c.n_tokens for c in s.checkpoints] if s else [],
             "checkpoint_restored": s.restored.n_tokens if s and s.restored else None}
        if self.error:
            d["error"] = self.error
        if self.lost_state:
            d["lost_state"], d["lost_cause"], d["lost_fix"] = self.lost_state, self.lost_cause, self.lost_fix
        return d


def _others(slots: list[_SlotState], s: _SlotState) -> int:
    """The tokens every slot but ``s`` holds (a loop: a generator per request cost more than the sum)."""
    n = 0
    for o in slots:
        if o is not s and o.prompt is not None:
            n += o.slot.cached
    return n


class ServerSim:
    """One build's server in the user's setup."""

    def __init__(self, setup: ServerSetup, build: Build, knobs: Knobs, sizes: StateSize | None,
                 n_ctx: int, rules: CacheRules | None = None) -> None:
        self.setup = setup
        self.rules = rules or rules_for(build.effective_number)
        self.n_ctx = n_ctx  # the whole context (all slots)
        self.n_ctx_slot = n_ctx if setup.kv_unified else n_ctx // max(1, setup.n_parallel)
        self.slots = [_SlotState(i, ServerSlot(build, knobs)) for i in range(setup.n_parallel)]
        self.cache = (HostCache(setup.cache_ram_mib, n_ctx, sizes, self.rules, lcp)
                      if setup.cache_ram_mib != 0 else None)
        self.clock = 0
        self.task = -1
        self.sps = float(_f32(setup.slot_prompt_similarity))

    # -- get_available_slot ---------------------------------------------------------------
    def _select(self, req: Request, out: list[CacheEvent]) -> tuple[_SlotState, str]:
        p = req.prompt
        n_new = p.n_tokens
        ret: _SlotState | None = None
        how = "id"
        update = False
        if req.id_slot != -1:
            ret = self.slots[req.id_slot % len(self.slots)]
        if self.sps != 0:
            best = 0.0  # the similarities as float32 values, held in Python floats (``_similarity``)
            for s in self.slots:
                if req.id_slot != -1 and s.id != req.id_slot:
                    continue
                if s.prompt is None or s.slot.cached == 0:  # s.n == 0 (the property read ~17 times a request)
                    continue
                sim = _similarity(lcp(s.prompt, p), n_new)
                if sim > best and sim > self.sps:
                    best, ret = sim, s
                    how = "lcp" if req.id_slot == -1 else "id"
            if ret is not None:
                n_ret = ret.n
                if n_ret > 0:
                    update = _f_keep(best, n_new, n_ret) < 0.5
        if ret is None:
            t_last = -1
            for s in self.slots:
                if ret is None or s.t_last <= t_last:
                    t_last, ret = s.t_last, s
            how = "lru"
            update = True
        assert ret is not None
        if update and self.cache is not None:
            n_ret = ret.n  # the save does not change the slot
            if n_ret > 0:
                self.cache.save(ret.prompt, n_ret, ret.slot.checkpoints, ret.thread, out)
            e = self.cache.load(ret.prompt, n_ret, p, out)
            if e is not None:
                self._take(ret, e.prompt, e.n_tokens, e.checkpoints, e.thread)
            self.cache.update(out)
        return ret, how

    def _take(self, s: _SlotState, prompt: TurnPrompt, n: int, checkpoints: list, thread: str) -> None:
        s.prompt, s.thread = prompt, thread
        s.slot.cached = n
        s.slot.checkpoints = list(checkpoints)
        s.slot._walked = None
        s.slot.loaded(n)

    def _clear(self, s: _SlotState) -> None:
        """``prompt_clear``: the slot's tokens go (and, from b10865, its checkpoint list). A slot
        cleared before and not used since is left as it is (with idle slots cached, every request
        clears every other slot: most of them are already empty)."""
        slot = s.slot
        if (s.prompt is None and s.thread == "" and slot.cached == 0 and slot.floor == -1 and slot._walked is None
                and not (slot.checkpoints and self.rules.clear_drops_checkpoints)):
            return
        s.prompt, s.thread = None, ""
        s.slot.cached = 0
        s.slot.floor = -1
        if self.rules.clear_drops_checkpoints:
            s.slot.checkpoints = []
        s.slot._walked = None

    # -- one request -----------------------------------------------------------------------
    def request(self, index: int, req: Request) -> RequestFacts:
        p = req.prompt
        events: list[CacheEvent] = []
        s, how = self._select(req, events)
        facts = RequestFacts(index, req.thread, p.n_tokens, s.id, how, s.thread, events)
        unified = self.setup.kv_unified
        all_cleared = False  # every other slot cleared at launch: the unified cache holds only the new prompt
        if self.setup.cache_idle_slots and self.cache is not None:
            all_cleared = unified
            for o in self.slots:
                if o is s:
                    continue
                n_o = o.n  # the save does not change the slot
                if n_o > 0 and self.cache.save(o.prompt, n_o, o.slot.checkpoints, o.thread, events):
                    self.cache.update(events)
                if unified:
                    if n_o > 0:
                        facts.cleared.append(o.id)
                    self._clear(o)
        self.clock += 1
        if p.n_tokens >= self.n_ctx_slot:
            facts.error = f"context full: {p.n_tokens} tokens ≥ n_ctx_slot {self.n_ctx_slot}"
            s.t_last = self.clock
            return facts
        if unified and not all_cleared:
            while _others(self.slots, s) + p.n_tokens > self.n_ctx:
                victim = next((o for o in self.slots if o is not s and o.n > 0), None)
                if victim is None:
                    break
                self._clear(victim)
                facts.purged.append(victim.id)
        n_s = s.n
        common = lcp(s.prompt, p) if n_s > 0 else 0
        reusable = common if common < n_s else n_s
        self.task += 1
        s.slot.task = self.task - 1  # one task counter for the server: checkpoints move between slots
        sched = slot_schedule(s.slot, p, common, reusable)
        facts.common_prefix = common
        facts.schedule = sched
        facts.cache_n, facts.prompt_n = sched.n_past, p.n_tokens - sched.n_past
        facts.full_reprocess = reusable > 0 and sched.n_past == 0 and sched.restored is None
        s.prompt, s.thread = p, req.thread
        s.t_last = self.clock
        return facts

    def run(self, requests: list[Request]) -> Iterator[RequestFacts]:
        for i, r in enumerate(requests):
            yield self.request(i, r)
