"""A session's threads as lanes of the turn strip: the main thread on the first, each other
thread (a subagent, a side request such as a title) on its own below it, in the order each
first sent a request. A session with more threads than lanes keeps the first ones and puts
the rest together on the last lane. Which thread a turn is on is the core's
(``session.turns.thread_of``); nothing here decides it.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from typing import Sequence

from replayer.core.session.turns import MAIN

#: lanes at most: the main thread, two others, and the rest together (an 80×24 pane keeps its lists)
MAX_LANES = 4


@dataclass(frozen=True)
class Lane:
    name: str  # the thread's name, or "+N threads" for the rest together
    threads: tuple[str, ...]
    turns: tuple[int, ...]  # the session's turns on this lane, in order

    def nearest(self, turn: int) -> int:
        """The lane's turn nearest to ``turn`` (the earlier one on a tie)."""
        i = bisect_left(self.turns, turn)
        near = [self.turns[j] for j in (i - 1, i) if 0 <= j < len(self.turns)]
        return min(near, key=lambda k: (abs(k - turn), k))

    def step(self, turn: int | None, step: int) -> int:
        """The lane's next (``step`` > 0) or previous turn from ``turn``; its first or last at an end."""
        if turn is None:
            return self.turns[0]
        i = bisect_left(self.turns, turn)
        if step < 0:
            return self.turns[max(0, i - 1)]
        if i < len(self.turns) and self.turns[i] == turn:
            i += 1
        return self.turns[min(i, len(self.turns) - 1)]


def lanes_of(threads: Sequence[str], max_lanes: int = MAX_LANES) -> list[Lane]:
    """One lane per thread, main first, then by first request; over ``max_lanes`` threads the
    last lane holds all the rest."""
    order: dict[str, list[int]] = {MAIN: []} if MAIN in threads else {}
    for k, th in enumerate(threads):
        order.setdefault(th, []).append(k)
    names = list(order)
    if len(names) <= max_lanes:
        return [Lane(n, (n,), tuple(order[n])) for n in names]
    kept, rest = names[:max_lanes - 1], names[max_lanes - 1:]
    lanes = [Lane(n, (n,), tuple(order[n])) for n in kept]
    lanes.append(Lane(f"+{len(rest)} threads", tuple(rest), tuple(sorted(k for n in rest for k in order[n]))))
    return lanes


def lane_index(lanes: list[Lane], n_turns: int) -> list[int]:
    """turn → its lane."""
    at = [0] * n_turns
    for i, lane in enumerate(lanes):
        for k in lane.turns:
            if k < n_turns:
                at[k] = i
    return at


def short_label(name: str, width: int) -> str:
    """A lane's label in ``width`` columns: Claude Code's ``agent-`` prefix dropped (every
    subagent file has it), then cut with an ellipsis."""
    if len(name) > width and name.startswith("agent-"):
        name = name.removeprefix("agent-")
    return name if len(name) <= width else name[:max(1, width - 1)] + "…"
