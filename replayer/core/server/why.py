"""Why each thread kept or lost its cache, request by request, and the flags that would have kept it.

Follows each thread's last state through the simulated server's facts, in order: which slot
holds it, whether the host cache holds a copy, and what took each away — another thread
taking the slot (by LRU, similarity or ``id_slot``), an idle-slot clear, a purge of the
unified KV cache, the ``--cache-ram`` limit (evicted, or too large to be saved), the server
sleeping or a router unloading the model (``lifecycle``: every thread at once). When a
thread comes back, what it reused is explained by where its state was found; what it lost
by the last thing that took its state, with the flag that changes that.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from replayer.core.server.host_cache import MIB
from replayer.core.server.setup import ServerSetup
from replayer.core.server.slots import RequestFacts, lcp
from replayer.core.server.traffic import Request

__all__ = ["Why", "explain"]


@dataclass
class _Where:
    slot: int | None = None
    cached: bool = False
    lost: str = ""  # what took the last copy
    fix: str = ""  # the flag that would have kept it


@dataclass
class Why:
    request: int
    thread: str
    kept: str  # "slot N" | "host cache" | "" (nothing)
    shared: int  # tokens the thread's previous request shares with this one
    lost_tokens: int  # of those, re-processed
    cause: str = ""
    fix: str = ""
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = {"request": self.request, "thread": self.thread, "kept": self.kept, "shared": self.shared,
             "lost_tokens": self.lost_tokens}
        if self.cause:
            d["cause"], d["fix"] = self.cause, self.fix
        return d


def explain(setup: ServerSetup, requests: list[Request], facts: list[RequestFacts]) -> list[Why | None]:
    """One entry per request: None for a thread's first request (nothing to keep). A router's
    models are separate servers (their own slots and caches): each model's requests are
    followed on their own (``lifecycle``)."""
    from replayer.core.server.lifecycle import is_router

    if not is_router(setup) or len({r.model for r in requests}) < 2:
        return _explain(setup, requests, facts)
    out: list[Why | None] = [None] * len(requests)
    for m in dict.fromkeys(r.model for r in requests):
        idx = [i for i, r in enumerate(requests) if r.model == m]
        for i, w in zip(idx, _explain(setup, [requests[i] for i in idx], [facts[i] for i in idx])):
            out[i] = w
    return out


def _explain(setup: ServerSetup, requests: list[Request], facts: list[RequestFacts]) -> list[Why | None]:
    where: dict[str, _Where] = {}
    last: dict[str, Request] = {}
    slot_thread: dict[int, str] = {}
    out: list[Why | None] = []
    for req, f in zip(requests, facts):
        t = req.thread
        w = where.setdefault(t, _Where())
        if f.lost_state:  # slept or unloaded: every thread's state on this model went with it
            for ow in where.values():
                ow.slot, ow.cached, ow.lost, ow.fix = None, False, f.lost_cause, f.lost_fix
            slot_thread.clear()
        _others(setup, where, slot_thread, t, f)
        prev = last.get(t)
        out.append(None if prev is None else _why(prev, req, f, w))
        for th, ow in where.items():  # this request's state now sits in its slot
            if ow.slot == f.slot and th != t:
                ow.slot = None
        w.slot, w.lost, w.fix = f.slot, "", ""
        slot_thread[f.slot] = t
        last[t] = req
    return out


def _others(setup: ServerSetup, where: dict[str, _Where], slot_thread: dict[int, str], t: str,
            f: RequestFacts) -> None:
    """What request ``f``'s slot selection, cache updates and clears did to the other threads' states."""
    other = slot_thread.get(f.slot)
    if other is not None and other != t:
        ow = where[other]
        ow.slot = None
        ow.lost = f"slot {f.slot} taken by {t} ({f.selected})"
        ow.fix = f"-np {setup.n_parallel + 1}" if setup.cache_ram_mib == 0 else ow.fix
    for e in f.cache:
        ew = where.setdefault(e.thread, _Where()) if e.thread else None
        if ew is None:
            continue
        if e.kind == "saved":
            ew.cached = True
        elif e.kind == "skipped":
            ew.lost, ew.fix = "larger than --cache-ram: not saved", f"--cache-ram {math.ceil(e.size / MIB)}"
        elif e.kind in ("evicted", "removed") and e.thread != t:
            ew.cached = False
            if e.kind == "evicted":
                ew.lost = "evicted from the host cache by the --cache-ram limit"
                ew.fix = f"--cache-ram {setup.cache_ram_mib * 2 if setup.cache_ram_mib > 0 else 8192}"
        elif e.kind == "loaded":
            ew.cached = False
    for s in f.cleared:
        ct = slot_thread.pop(s, None)
        if ct is not None and ct in where:
            where[ct].slot = None
    for s in f.purged:
        pt = slot_thread.pop(s, None)
        if pt is not None and pt in where:
            pw = where[pt]
            pw.slot = None
            if not pw.cached:
                pw.lost, pw.fix = "purged: the unified KV cache was full", "-c larger, or --no-kv-unified"


def _why(prev: Request, req: Request, f: RequestFacts, w: _Where) -> Why:
    """A returning thread's request: where its state was found, or what took it."""
    t = req.thread
    shared = lcp(prev.prompt, req.prompt)
    lost = max(0, shared - f.cache_n)
    loaded = f.loaded
    kept = "host cache" if loaded is not None and loaded.thread == t else f"slot {f.slot}" if f.slot_had == t else ""
    why = Why(f.index, t, kept, shared, lost)
    if lost > 1:
        if kept:
            why.cause = ("the restored state's checkpoints did not reach the shared prefix"
                         if f.schedule is not None and f.schedule.restored is not None
                         else "re-processed from a checkpoint or from 0 (see the turn's checkpoint facts)")
        else:
            why.cause, why.fix = w.lost or "no copy kept", w.fix
    return why
