"""The watch's turn strip: ``TurnStrip`` with one column a request from the left, growing as
requests come (a replay knows its turn count and stretches them over the width; a watch does
not, and a stretched first request would fill the strip). Past the width, a column sums the
requests it covers, as the replay's strip does."""

from __future__ import annotations

from replayer.ui.widgets.turn_strip import TurnStrip


class GrowingStrip(TurnStrip):
    def cell_ranges(self, width: int) -> list[tuple[int, int]]:
        n = max(self.n_turns, len(self.turns))
        if n <= max(1, width):
            return [(k, k + 1) for k in range(n)]
        return super().cell_ranges(width)
