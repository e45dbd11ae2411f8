"""The watch's turn strip: ``TurnStrip`` with one column a request from the left, growing as
requests come (a replay knows its turn count and stretches them over the width; a watch does
not, and a stretched first request would fill the strip). Past the width, a column sums the
requests it covers, as the replay's strip does.

It takes no focus: a replay's strip selects a turn to show its batches, which a watch has not
got, and a focused strip's keys (turn, next miss, detail, verdict) filled the footer at 80
columns where the watch's own (build B, the server's log, export, quit) belong; the request
table takes the focus and scrolls."""

from __future__ import annotations

from replayer.ui.widgets.turn_strip import TurnStrip


class GrowingStrip(TurnStrip, can_focus=False):
    def cell_ranges(self, width: int) -> list[tuple[int, int]]:
        n = max(self.n_turns, len(self.turns))
        if n <= max(1, width):
            return [(k, k + 1) for k in range(n)]
        return super().cell_ranges(width)
