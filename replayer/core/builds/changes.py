"""What changed in llama-server between two package-index builds, and which PR did it.

A bisection ends at two neighbouring builds; this index names what landed between them.
Each entry is bracketed by the last index build without the change and the first one
with it (the index skips builds, so the merge itself is somewhere in that gap). Source:
``spec/llama-server-prefill.md`` §1, where each bracket was found by comparing the two
builds' ``tools/server`` sources. ``pr`` is None where no PR was matched to the change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["schedule", "layout", "log", "stats"]


@dataclass(frozen=True)
class Change:
    last_without: int
    first_with: int
    title: str
    kind: Kind  # schedule: batches/checkpoints; layout: which spans are user starts
    pr: int | None = None
    generation: str | None = None  # the generation this change starts, if it starts one

    @property
    def name(self) -> str:
        return f"PR #{self.pr}" if self.pr else f"b{self.last_without}…b{self.first_with}"

    def to_dict(self) -> dict:
        return {"pr": self.pr, "title": self.title, "kind": self.kind, "last_without": self.last_without,
                "first_with": self.first_with, "generation": self.generation}


CHANGES: tuple[Change, ...] = (
    Change(9745, 9754, "server refactor: prompt filling moved into pre_decode (log tags change)", "log"),
    Change(9763, 9771, "user starts found in token space; batch broken before every user start, "
           "unconditionally; checkpoint_min_step default 256 → 8192", "schedule", 24176, "G1"),
    Change(9821, 9859, "MiniCPM5 template gets a TOOL delimiter (tool results stop being user spans)", "layout"),
    Change(9828, 9830, "checkpoint log lines become TRACE (need -lv 4)", "log"),
    Change(9934, 9940, "server : respect min-step when splitting prompt batches (break only where a "
           "checkpoint is due)", "schedule", 25420, "G2a"),
    Change(9976, 9981, "server : evict checkpoints within min-step of each other; near-end checkpoints "
           "bypass min-step", "schedule", 25472, "G2b"),
    Change(10223, 10227, "Qwen3-Coder template family gets a TOOL delimiter (tool results stop being "
           "user spans)", "layout"),
    Change(10405, 10423, "slot statistics refactor (prompt time advanced after each decode)", "stats"),
    Change(10852, 10865, "checkpoint list: 'too close' eviction only when full; duplicates superseded",
           "schedule", None, "G3"),
)


def between(lo: int, hi: int) -> list[Change]:
    """Changes that landed after build ``lo`` and no later than build ``hi`` (lo < hi)."""
    if lo > hi:
        lo, hi = hi, lo
    return [c for c in CHANGES if lo < c.first_with <= hi and c.last_without >= lo]


def overlapping(lo: int, hi: int) -> list[Change]:
    """Changes that may have landed in ``(lo, hi]``: including those whose bracket only
    partly lies inside (a live bisection can end between any two index builds)."""
    if lo > hi:
        lo, hi = hi, lo
    return [c for c in CHANGES if c.first_with > lo and c.last_without < hi]


def boundary_builds(lo: int, hi: int) -> list[int]:
    """The index builds that bracket a known change inside ``[lo, hi]``, with both ends."""
    if lo > hi:
        lo, hi = hi, lo
    out = {lo, hi}
    for c in CHANGES:
        out.update(b for b in (c.last_without, c.first_with) if lo <= b <= hi)
    return sorted(out)


def introducing(generation: str) -> Change | None:
    """The change that started a behaviour generation (G0 has none)."""
    return next((c for c in CHANGES if c.generation == generation), None)
