"""The prompt as a horizontal token axis: message starts, batches as they complete, checkpoints.

Four rows: message starts by role (▼ user/tool-result, ▽ tool span, · assistant), batches
coloured by the rule that cut them (a ┃ at each cut), checkpoint markers (◆), and the axis.
A column holding several starts is shaded by how many (░ 2–3, ▒ 4–9, ▓ 10–24, █ 25+):
300 starts in 66 columns used to make one solid row of ▼. ``+``/``-`` zoom and ``←``/``→``
scroll every timeline on the screen together (A and B stay aligned token for token).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from rich.text import Text
from textual.binding import Binding
from textual.reactive import reactive
from textual.widget import Widget

from replayer.core.reasons import REASONS
#: (fewest starts in one column, mark): one start keeps its role's marker
DENSITY = [(25, "█"), (10, "▓"), (4, "▒"), (2, "░")]


def theme_color(widget: Widget, name: str, default: str) -> str:
    """A theme variable's colour for rich styles drawn by hand (``default`` before the app is up)."""
    try:
        return widget.app.theme_variables.get(name, default)
    except Exception:  # no app yet
        return default


def density_mark(n: int) -> str | None:
    for at_least, mark in DENSITY:
        if n >= at_least:
            return mark
    return None


class Timeline(Widget, can_focus=True):
    DEFAULT_CSS = """
    Timeline { height: 4; }
    Timeline:focus { background: $primary 20%; }
    """
    BINDINGS = [
        Binding("plus,equals_sign", "zoom(2)", "zoom in", show=False),
        Binding("minus", "zoom(0.5)", "zoom out", show=False),
        Binding("left", "scroll_tokens(-1)", "scroll", show=False),
        Binding("right", "scroll_tokens(1)", "scroll", show=False),
    ]
    zoom: reactive[float] = reactive(1.0)
    offset: reactive[int] = reactive(0)

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.n_tokens = 0
        self.n_past = 0
        self.user_starts: list[int] = []
        self.tool_starts: list[int] = []
        self.assistant_starts: list[int] = []
        self.ends: list[int] = []
        self.reasons: list[str] = []
        self.checkpoints: list[int] = []

    def set_layout(self, n_tokens: int, spans: list[tuple[str, int]], n_past: int = 0) -> None:
        self.n_tokens = n_tokens
        self.n_past = n_past
        self.user_starts = sorted(s for r, s in spans if r == "user")
        self.tool_starts = sorted(s for r, s in spans if r == "tool")
        self.assistant_starts = sorted(s for r, s in spans if r == "assistant")
        self.refresh()

    def add_batch(self, end: int, reason: str) -> None:
        self.ends.append(end)
        self.reasons.append(reason)

    def add_checkpoint(self, n_tokens: int) -> None:
        self.checkpoints.append(n_tokens)

    def reset(self) -> None:
        self.ends, self.reasons, self.checkpoints = [], [], []
        self.refresh()

    def _all(self) -> list["Timeline"]:
        """Every timeline on this screen: zoom and scroll move them together."""
        try:
            return list(self.screen.query(Timeline))
        except Exception:  # not mounted
            return [self]

    def action_zoom(self, factor: float) -> None:
        zoom, offset = min(256.0, max(1.0, self.zoom * float(factor))), self.offset
        for t in self._all():
            t.zoom, t.offset = zoom, offset
            t._clamp()

    def action_scroll_tokens(self, direction: int) -> None:
        width = max(1, self.size.width)
        zoom, offset = self.zoom, self.offset + int(direction) * max(1, int(self._tpc() * width / 4))
        for t in self._all():
            t.zoom, t.offset = zoom, offset
            t._clamp()

    def _tpc(self) -> float:
        width = max(1, self.size.width)
        return max(1.0, self.n_tokens / width / self.zoom)

    def _clamp(self) -> None:
        width = max(1, self.size.width)
        span = int(self._tpc() * width)
        self.offset = max(0, min(self.offset, max(0, self.n_tokens - span)))
        self.refresh()

    def _color(self, name: str, default: str) -> str:
        return theme_color(self, name, default)

    def render(self) -> Text:
        width = max(1, self.size.width)
        if not self.n_tokens:
            return Text("(no prompt)")
        tpc = self._tpc()
        cells = [(int(self.offset + i * tpc), int(self.offset + (i + 1) * tpc)) for i in range(width)]
        cells = [(a, max(a + 1, b)) for a, b in cells if a < self.n_tokens]
        colors = {r.name: self._color(r.theme_var, r.colour) for r in REASONS}
        c_user = colors["user_start"]
        msgs, batches, ckpts = Text(), Text(), Text()
        processed = self.ends[-1] if self.ends else self.n_past
        ck = sorted(self.checkpoints)
        for a, b in cells:
            n_user = bisect_left(self.user_starts, b) - bisect_left(self.user_starts, a)
            n_tool = bisect_left(self.tool_starts, b) - bisect_left(self.tool_starts, a)
            if n_user:
                msgs.append(density_mark(n_user) or "▼", style=c_user)
            elif n_tool:
                msgs.append(density_mark(n_tool) or "▽", style="cyan")
            elif bisect_left(self.assistant_starts, a) < bisect_left(self.assistant_starts, b):
                msgs.append("·", style="dim")
            else:
                msgs.append(" ")
            # a cut inside this cell?
            i = bisect_left(self.ends, a)
            if i < len(self.ends) and self.ends[i] < b and self.ends[i] < self.n_tokens:
                batches.append("┃", style=f"bold {colors.get(self.reasons[i], colors['other'])}")
            elif a < processed:
                j = bisect_right(self.ends, a)
                reason = self.reasons[j] if j < len(self.reasons) else "other"
                batches.append("━", style=colors.get(reason, colors["other"]))
            elif a < self.n_past:
                batches.append("═", style="dim")
            else:
                batches.append("─", style="dim")
            k = bisect_left(ck, a)
            ckpts.append("◆" if k < len(ck) and ck[k] < b else " ", style=self._color("accent", "#F5A623"))
        left = f"{cells[0][0]:,}"
        right = f"{cells[-1][1]:,} tokens" + (f"  ×{self.zoom:g}" if self.zoom > 1 else "")
        axis = Text(left + " " * max(1, len(cells) - len(left) - len(right)) + right, style="dim")
        return Text("\n").join([msgs, batches, ckpts, axis])

    def cells_of(self, positions: list[int]) -> set[int]:
        """Which columns show a marker for these token positions (for tests)."""
        tpc = self._tpc()
        return {int((p - self.offset) / tpc) for p in positions if self.offset <= p < self.n_tokens}

