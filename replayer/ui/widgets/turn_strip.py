"""A session run as one strip: one cell per turn, how much of it was re-processed, and the misses.

Each cell is a lower block whose height is the share of the turn's prompt the server
re-processed (the filled part, in the primary colour) over a background of the share it
reused (green): ``▁`` on green is a turn that only appended, ``█`` a cold turn or a full
re-processing. A turn the core explained as a *miss* (``engine.misses``) shows its cause's
letter instead, on the cause's colour. When a session has more turns than the strip has
columns, a cell sums the turns it covers (as the timeline sums message starts) and shows
the costliest miss among them. The facts are the core's ``TurnRecord``s; nothing here
decides what a miss is.
"""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.color import Color
from textual.message import Message
from textual.widget import Widget

from replayer.core.engine.cache import TurnRecord
from replayer.core.engine.misses import CAUSES
from replayer.ui.widgets.timeline import theme_color

#: cause → (letter, theme variable, fallback colour, legend text)
CAUSE_MARKS: dict[str, tuple[str, str, str, str]] = {
    "client_changed": ("C", "error", "#e5534b", "client changed text"),
    "template_dropped_reasoning": ("R", "secondary", "#c678dd", "reasoning dropped"),
    "compaction": ("K", "warning", "#e5c07b", "compaction"),
    "no_usable_checkpoint": ("N", "accent", "#F5A623", "no usable checkpoint"),
    "context_full": ("F", "error", "#e5534b", "context full"),
    "thread_switch": ("T", "primary", "#61afef", "another thread held the server"),
}
assert set(CAUSE_MARKS) == set(CAUSES), "every cause the core knows has a mark"
BARS = "▁▂▃▄▅▆▇█"


def bar(share: float) -> str:
    """The block for a re-processed share: any re-processing shows at least ``▁``."""
    return BARS[min(len(BARS) - 1, max(0, round(share * (len(BARS) - 1))))]


class TurnStrip(Widget, can_focus=True):
    """Focusable: ←/→ move by turn, ``n`` to the next miss, Enter (re)shows the selected turn;
    each selection posts ``Selected`` so the pane shows that turn's facts."""

    DEFAULT_CSS = """
    TurnStrip { height: 3; }
    TurnStrip:focus { background-tint: $foreground 8%; }
    """
    BINDINGS = [
        Binding("left", "move(-1)", "turn", show=False),
        Binding("right", "move(1)", "turn"),
        Binding("n", "next_miss", "next miss"),
        Binding("enter", "choose", "turn detail"),
    ]

    class Selected(Message):
        """A turn chosen on the strip (by key): ``turn`` is the session's turn index."""

        def __init__(self, strip: "TurnStrip", turn: int) -> None:
            super().__init__()
            self.strip = strip
            self.turn = turn

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.n_turns = 0
        self.turns: list[TurnRecord] = []
        self.current: int | None = None  # the turn being prefilled
        self.selected: int | None = None  # the turn chosen by key (shown reversed)

    def select(self, turn: int) -> None:
        self.selected = max(0, min(turn, max(self.n_turns, len(self.turns)) - 1))
        self.refresh()
        self.post_message(self.Selected(self, self.selected))

    def action_move(self, step: int) -> None:
        if max(self.n_turns, len(self.turns)):
            self.select((self.selected if self.selected is not None else -1 if step > 0 else 0) + step)

    def action_next_miss(self) -> None:
        """The next finished turn with a miss after the selected one (wrapping round)."""
        missed = [t.turn for t in self.turns if t.cause and not _running(t, self.current)]
        if not missed:
            self.notify("no miss among the finished turns", timeout=3)
            return
        after = [k for k in missed if self.selected is None or k > self.selected]
        self.select(after[0] if after else missed[0])

    def action_choose(self) -> None:
        self.select(self.selected if self.selected is not None else 0)

    def set_turns(self, n_turns: int) -> None:
        self.n_turns = n_turns
        self.refresh()

    def update_turns(self, turns: list[TurnRecord], current: int | None = None) -> None:
        self.turns = turns
        self.current = current
        self.refresh()

    def reset(self) -> None:
        self.turns, self.current, self.selected = [], None, None
        self.refresh()

    def _color(self, name: str, default: str) -> str:
        return theme_color(self, name, default)

    def cell_ranges(self, width: int) -> list[tuple[int, int]]:
        """The turns ``[a, b)`` each column covers: several when the session has more turns than
        the strip has columns, else one, stretched over as many columns as fit."""
        n = max(self.n_turns, len(self.turns))
        if not n:
            return []
        width = max(1, width)
        if n <= width:
            return [(k, k + 1) for k in (i * n // width for i in range(width))]
        per = n / width
        return [(a, max(a + 1, b)) for a, b in ((int(i * per), int((i + 1) * per)) for i in range(width))]

    def cells(self, width: int) -> list[tuple[str, str]]:
        """(character, cause or state) per column: the strip as tests and the render see it."""
        by_turn = {t.turn: t for t in self.turns}
        out = []
        for a, b in self.cell_ranges(width):
            done = [by_turn[k] for k in range(a, b) if k in by_turn and not _running(by_turn[k], self.current)]
            missed = [t for t in done if t.cause]
            if missed:
                worst = max(missed, key=lambda t: t.cause.get("lost_tokens", 0))
                out.append((CAUSE_MARKS[worst.cause["cause"]][0], worst.cause["cause"]))
            elif done:
                n_prompt = sum(t.n_prompt for t in done)
                out.append((bar(sum(t.prompt_n for t in done) / n_prompt if n_prompt else 0.0), "turn"))
            elif self.current is not None and a <= self.current < b:
                out.append(("▒", "running"))
            else:
                out.append(("·", "pending"))
        return out

    def column_of(self, turn: int) -> int:
        """The column showing ``turn``."""
        for i, (a, b) in enumerate(self.cell_ranges(max(1, self.size.width))):
            if a <= turn < b:
                return i
        raise ValueError(f"turn {turn} is not on the strip")

    def render(self) -> Text:
        width = max(1, self.size.width)
        if not self.n_turns and not self.turns:
            return Text("(no turns yet)", style="dim")
        # the reused share: the success colour dimmed towards the background (rich has no alpha)
        reused = "on " + Color.parse(self._color("success", "#4EBF71")).blend(
            Color.parse(self._color("background", "#121212")), 0.55).hex
        processed = self._color("primary", "#0178D4")
        strip = Text()
        seen: list[str] = []
        chosen = self.column_of(self.selected) if self.selected is not None else None
        for col, (ch, kind) in enumerate(self.cells(width)):
            start = len(strip)
            if kind in CAUSE_MARKS:
                _, var, default, _ = CAUSE_MARKS[kind]
                strip.append(ch, style=f"bold #000000 on {self._color(var, default)}")
                if kind not in seen:
                    seen.append(kind)
            elif kind == "turn":
                strip.append(ch, style=f"{processed} {reused}")
            elif kind == "running":
                strip.append(ch, style=f"bold {processed}")
            else:
                strip.append(ch, style="dim")
            if col == chosen:
                strip.stylize("reverse", start, len(strip))
        n = max(self.n_turns, len(self.turns))
        left = "turn 0"
        right = f"{n - 1}" if n else ""
        now = f"now {self.current}" if self.current is not None else f"{len(self.turns)}/{n} done"
        if self.selected is not None:
            now = f"▲ turn {self.selected} · " + now
        gap = max(1, width - len(left) - len(right) - len(now))
        axis = Text(left + " " * (gap // 2) + now + " " * (gap - gap // 2) + right, style="dim")
        causes = Text()
        for kind in sorted(seen, key=CAUSES.index):
            letter, var, default, text = CAUSE_MARKS[kind]
            causes.append(" · " if causes else "")
            causes.append(letter, style=f"bold #000000 on {self._color(var, default)}")
            causes.append(f" {text}", style="dim")
        legend = Text()
        legend.append("█", style=processed)
        legend.append(" processed ", style="dim")
        legend.append(" ", style=reused)
        legend.append(" reused", style="dim")
        if causes:  # the causes matter more than the shading key when both do not fit
            legend = legend + Text(" · ") + causes if len(legend) + 3 + len(causes) <= width else causes
        legend.no_wrap = True
        return Text("\n").join([strip, axis, legend])


def _running(t: TurnRecord, current: int | None) -> bool:
    return current is not None and t.turn == current
