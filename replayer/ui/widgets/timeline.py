"""The prompt as a horizontal token axis: message starts, batches as they complete, checkpoints.

Four rows: message starts by role (▼ user/tool-result, ▽ tool span, · assistant), batches
coloured by the rule that cut them (a ┃ at each cut), checkpoint markers (◆), and the axis.
A column holding several starts is shaded by how many (░ 2–3, ▒ 4–9, ▓ 10–24, █ 25+):
300 starts in 66 columns used to make one solid row of ▼. ``+``/``-`` zoom and ``←``/``→``
scroll every timeline on the screen together (A and B stay aligned token for token).

The rows are drawn as strips of segments (Textual's line API), one segment per run of cells
in the same style, and kept until the data, size, zoom or theme change: drawn as a Rich
``Text`` of ~260 one-cell spans, Textual's conversion made the two timelines the longest
part of every replay frame (~12 ms each at 140 columns, 4 ms of it ours).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.reactive import reactive
from textual.strip import Strip
from textual.widget import Widget

from replayer.core.reasons import REASONS
#: (fewest starts in one column, mark): one start keeps its role's marker
DENSITY = [(25, "█"), (10, "▓"), (4, "▒"), (2, "░")]

Run = tuple[str, str]  # (text, rich style): cells in one style


class Row:
    """One row of cells, stored as runs of the same style (a row is a few dozen runs, not a
    hundred one-cell spans)."""

    def __init__(self) -> None:
        self.runs: list[Run] = []

    def append(self, text: str, style: str = "") -> None:
        if self.runs and self.runs[-1][1] == style:
            self.runs[-1] = (self.runs[-1][0] + text, style)
        else:
            self.runs.append((text, style))


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
        self._rows_key: tuple | None = None
        self._rows: list[list[Run]] = []
        self._strips_key: tuple | None = None  # the rows' key the strips were made for
        self._strips: list[Strip] = []
        self._version = 0  # bumped by every change of what is drawn

    def set_layout(self, n_tokens: int, spans: list[tuple[str, int]], n_past: int = 0) -> None:
        self.n_tokens = n_tokens
        self.n_past = n_past
        self.user_starts = sorted(s for r, s in spans if r == "user")
        self.tool_starts = sorted(s for r, s in spans if r == "tool")
        self.assistant_starts = sorted(s for r, s in spans if r == "assistant")
        self._version += 1
        self.refresh()

    def add_batch(self, end: int, reason: str) -> None:
        self.ends.append(end)
        self.reasons.append(reason)
        self._version += 1

    def add_checkpoint(self, n_tokens: int) -> None:
        self.checkpoints.append(n_tokens)
        self._version += 1

    def reset(self, refresh: bool = True) -> None:
        """No batches or checkpoints (a session turn's new prompt: ``refresh=False`` when its
        layout follows in the same repaint)."""
        self.ends, self.reasons, self.checkpoints = [], [], []
        self._version += 1
        if refresh:
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

    def rows(self) -> list[list[Run]]:
        """The four rows as runs of cells, computed once per change of data, size, zoom or theme."""
        width = max(1, self.size.width)
        key = (width, self.zoom, self.offset, self.n_tokens, self.n_past, self._version,
               theme_color(self, "accent", ""), getattr(self.app, "theme", None) if self.is_attached else None)
        if key != self._rows_key:
            self._rows = self._compute_rows(width)
            self._rows_key = key
        return self._rows

    def _compute_rows(self, width: int) -> list[list[Run]]:
        if not self.n_tokens:
            return [[("(no prompt)", "")]]
        tpc = self._tpc()
        cells = [(int(self.offset + i * tpc), int(self.offset + (i + 1) * tpc)) for i in range(width)]
        cells = [(a, max(a + 1, b)) for a, b in cells if a < self.n_tokens]
        colors = {r.name: self._color(r.theme_var, r.colour) for r in REASONS}
        glyphs = {r.name: r.glyph for r in REASONS}  # the reason without colour too (NO_COLOR)
        c_user = colors["user_start"]
        c_ckpt = self._color("accent", "#F5A623")
        msgs, batches, ckpts = Row(), Row(), Row()
        processed = self.ends[-1] if self.ends else self.n_past
        ck = sorted(self.checkpoints)
        for a, b in cells:
            n_user = bisect_left(self.user_starts, b) - bisect_left(self.user_starts, a)
            n_tool = bisect_left(self.tool_starts, b) - bisect_left(self.tool_starts, a)
            if n_user:
                msgs.append(density_mark(n_user) or "▼", c_user)
            elif n_tool:
                msgs.append(density_mark(n_tool) or "▽", "cyan")
            elif bisect_left(self.assistant_starts, a) < bisect_left(self.assistant_starts, b):
                msgs.append("·", "dim")
            else:
                msgs.append(" ")
            # a cut inside this cell?
            i = bisect_left(self.ends, a)
            if i < len(self.ends) and self.ends[i] < b and self.ends[i] < self.n_tokens:
                reason = self.reasons[i]
                batches.append(glyphs.get(reason, glyphs["other"]), f"bold {colors.get(reason, colors['other'])}")
            elif a < processed:
                j = bisect_right(self.ends, a)
                reason = self.reasons[j] if j < len(self.reasons) else "other"
                batches.append("━", colors.get(reason, colors["other"]))
            elif a < self.n_past:
                batches.append("═", "dim")
            else:
                batches.append("─", "dim")
            k = bisect_left(ck, a)
            ckpts.append("◆" if k < len(ck) and ck[k] < b else " ", c_ckpt)
        left = f"{cells[0][0]:,}"
        right = f"{cells[-1][1]:,} tokens" + (f"  ×{self.zoom:g}" if self.zoom > 1 else "")
        axis = [(left + " " * max(1, len(cells) - len(left) - len(right)) + right, "dim")]
        return [msgs.runs, batches.runs, ckpts.runs, axis]

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips_key = None  # the strips' base style comes from the styles (focus, theme)

    def strips(self) -> list[Strip]:
        """The rows as strips, made once per change of the rows or the styles: a frame that
        repaints the timeline without a change (the panes resized, the verdict shown) reuses
        them, as the sparkline does, rather than looking the widget's style up for every row."""
        rows = self.rows()
        if self._strips_key != self._rows_key:
            base = self.rich_style
            self._strips = [Strip([Segment(text, base + Style.parse(style) if style else base)
                                   for text, style in row], sum(cell_len(text) for text, _ in row))
                            for row in rows]
            self._strips_key = self._rows_key
        return self._strips

    def render_line(self, y: int) -> Strip:
        strips = self.strips()
        return strips[y] if y < len(strips) else Strip.blank(self.size.width, self.rich_style)

    def render(self) -> Text:
        """The rows as one ``Text`` (what the tests and a plain-text export read)."""
        return Text("\n").join(Text.assemble(*rows) for rows in self.rows())

    def cells_of(self, positions: list[int]) -> set[int]:
        """Which columns show a marker for these token positions (for tests)."""
        tpc = self._tpc()
        return {int((p - self.offset) / tpc) for p in positions if self.offset <= p < self.n_tokens}

