"""A session run as one strip: one cell per turn, how much of it was re-processed, and the misses.

Each cell is a lower block whose height is the share of the turn's prompt the server
re-processed (the filled part, in the primary colour) over a background of the share it
reused (green): ``▁`` on green is a turn that only appended, ``█`` a cold turn or a full
re-processing. A turn the core explained as a *miss* (``misses``) shows its cause's
letter instead, on the cause's colour. When a session has more turns than the strip has
columns, a cell sums the turns it covers (as the timeline sums message starts) and shows
the costliest miss among them. The facts are the core's ``TurnRecord``s; nothing here
decides what a miss is.

A session on several threads (Claude Code's subagents, side requests) gets one lane per
thread (``thread_lanes``), each row labelled with its thread: a column shows the turns of that
lane among those it covers, blank where the thread sent nothing, so a subagent's burst reads
as where it happened between the main thread's turns. ←/→ then move along the selected turn's
thread and ↑/↓ go to the nearest turn of the lane above or below.
"""

from __future__ import annotations

from rich.text import Text
from textual.binding import Binding
from textual.color import Color
from textual.message import Message
from textual.widget import Widget

from replayer.core.engine.slot_turns import TurnRecord
from replayer.core.misses import CAUSES
from replayer.ui.widgets.thread_lanes import Lane, lane_index, lanes_of, short_label
from replayer.ui.widgets.timeline import theme_color

#: cause → (letter, theme variable, fallback colour, legend text)
CAUSE_MARKS: dict[str, tuple[str, str, str, str]] = {
    "client_changed": ("C", "error", "#e5534b", "client changed text"),
    "template_dropped_reasoning": ("R", "secondary", "#c678dd", "reasoning dropped"),
    "compaction": ("K", "warning", "#e5c07b", "compaction"),
    "no_usable_checkpoint": ("N", "accent", "#F5A623", "no usable checkpoint"),
    "context_full": ("F", "error", "#e5534b", "context full"),
    "thread_switch": ("T", "primary", "#61afef", "another thread held the server"),
    "server_slept": ("S", "warning", "#d19a66", "the server slept (--sleep-idle-seconds)"),
    "model_unloaded": ("U", "warning", "#d19a66", "the router unloaded the model (--models-max)"),
}
assert set(CAUSE_MARKS) == set(CAUSES), "every cause the core knows has a mark"
BARS = "▁▂▃▄▅▆▇█"


def bar(share: float) -> str:
    """The block for a re-processed share: any re-processing shows at least ``▁``."""
    return BARS[min(len(BARS) - 1, max(0, round(share * (len(BARS) - 1))))]


class TurnStrip(Widget, can_focus=True):
    """Focusable: ←/→ move by turn (along its thread), ↑/↓ between thread lanes, ``n`` to the
    next miss, Enter (re)shows the selected turn; each selection posts ``Selected`` so the pane
    shows that turn's facts, and Enter posts it with ``scroll`` so the batch list goes there."""

    DEFAULT_CSS = """
    TurnStrip { height: 3; }
    TurnStrip:focus { background-tint: $foreground 8%; }
    """
    BINDINGS = [
        Binding("left", "move(-1)", "turn", show=False),
        Binding("right", "move(1)", "turn"),
        Binding("up", "lane(-1)", "thread", show=False),
        Binding("down", "lane(1)", "thread"),
        Binding("n", "next_miss", "next miss"),
        Binding("enter", "choose", "turn detail"),
        # after Enter on a tiny terminal the batch list holds the verdict's rows: the screen
        # offers them back (its check_action), beside the strip's keys so the footer shows it
        Binding("v", "screen.verdict_again", "verdict"),
    ]

    class Selected(Message):
        """A turn chosen on the strip (by key): ``turn`` is the session's turn index."""

        def __init__(self, strip: "TurnStrip", turn: int, scroll: bool = False) -> None:
            super().__init__()
            self.strip = strip
            self.turn = turn
            self.scroll = scroll  # Enter: the batch list shows this turn

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.n_turns = 0
        self.turns: list[TurnRecord] = []
        self.current: int | None = None  # the turn being prefilled
        self.selected: int | None = None  # the turn chosen by key (shown reversed)
        self.lanes: list[Lane] = []  # one per thread, when the session has more than one
        self.lane_at: list[int] = []  # turn → lane
        self.anchor: int | None = None  # the turn ↑/↓ started from
        self.threads: list[str] = []  # turn → its thread

    def select(self, turn: int, scroll: bool = False, anchor: int | None = None) -> None:
        self.anchor = anchor  # where ↑/↓ started: the next ↑/↓ goes to the turn nearest to it
        self.selected = max(0, min(turn, max(self.n_turns, len(self.turns)) - 1))
        self.refresh()
        self.post_message(self.Selected(self, self.selected, scroll))

    @property
    def lane(self) -> int:
        """The selected turn's lane (the first before a selection)."""
        return self.lane_at[self.selected] if self.lanes and self.selected is not None else 0

    def thread_of(self, turn: int) -> str | None:
        """The thread a turn was sent on, when the session has several (its own name also on a
        lane shared by several threads)."""
        return self.threads[turn] if self.lanes and turn < len(self.threads) else None

    def action_move(self, step: int) -> None:
        if self.lanes:
            self.select(self.lanes[self.lane].step(self.selected, step))
        elif max(self.n_turns, len(self.turns)):
            self.select((self.selected if self.selected is not None else -1 if step > 0 else 0) + step)

    def action_lane(self, step: int) -> None:
        """The nearest turn of the lane above (``step`` -1) or below."""
        if self.lanes:
            lane = self.lanes[max(0, min(len(self.lanes) - 1, self.lane + step))]
            anchor = self.anchor if self.anchor is not None else self.selected or 0
            self.select(lane.nearest(anchor), anchor=anchor)

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        return bool(self.lanes) if action == "lane" else True

    def action_next_miss(self) -> None:
        """The next finished turn with a miss after the selected one (wrapping round)."""
        missed = [t.turn for t in self.turns if t.cause and not _running(t, self.current)]
        if not missed:
            self.notify("no miss among the finished turns", timeout=3)
            return
        after = [k for k in missed if self.selected is None or k > self.selected]
        self.select(after[0] if after else missed[0])

    def action_choose(self) -> None:
        self.select(self.selected if self.selected is not None else 0, scroll=True, anchor=self.anchor)

    def set_turns(self, n_turns: int, threads: list[str] | None = None) -> None:
        """The session's turn count and, per turn, its thread: lanes when there are several."""
        self.n_turns = n_turns
        self.threads = list(threads or [])
        lanes = lanes_of(self.threads)
        self.lanes = lanes if len(lanes) > 1 else []
        self.lane_at = lane_index(self.lanes, n_turns) if self.lanes else []
        self.styles.height = len(self.lanes) + 2 if self.lanes else 3
        self.refresh()
        self.refresh_bindings()  # ↓ thread, offered with lanes

    @property
    def label_width(self) -> int:
        """Columns of the lanes' labels (none without lanes): a quarter of the strip at most."""
        if not self.lanes:
            return 0
        return max(4, min(max(len(lane.name) for lane in self.lanes), self.size.width // 4, 12)) + 1

    @property
    def cells_width(self) -> int:
        return max(1, self.size.width - self.label_width)

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

    def cells(self, width: int, lane: int | None = None) -> list[tuple[str, str]]:
        """(character, cause or state) per column, of every turn or of one lane's ("none": the
        lane's thread sent nothing there): the strip as tests and the render see it."""
        by_turn = {t.turn: t for t in self.turns}
        at = self.lane_at if lane is not None and self.lanes else None
        out = []
        for a, b in self.cell_ranges(width):
            ks = range(a, b) if at is None else [k for k in range(a, b) if k < len(at) and at[k] == lane]
            if not ks:
                out.append((" ", "none"))
                continue
            done = [by_turn[k] for k in ks if k in by_turn and not _running(by_turn[k], self.current)]
            missed = [t for t in done if t.cause]
            if missed:
                worst = max(missed, key=lambda t: t.cause.get("lost_tokens", 0))
                out.append((CAUSE_MARKS[worst.cause["cause"]][0], worst.cause["cause"]))
            elif done:
                n_prompt = sum(t.n_prompt for t in done)
                out.append((bar(sum(t.prompt_n for t in done) / n_prompt if n_prompt else 0.0), "turn"))
            elif self.current is not None and self.current in ks:
                out.append(("▒", "running"))
            else:
                out.append(("·", "pending"))
        return out

    def column_of(self, turn: int) -> int:
        """The column showing ``turn``."""
        for i, (a, b) in enumerate(self.cell_ranges(self.cells_width)):
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
        seen: list[str] = []
        chosen = self.column_of(self.selected) if self.selected is not None else None
        rows = []
        if self.lanes:
            pad = self.label_width
            for i, lane in enumerate(self.lanes):
                if i == self.lane and self.selected is not None:  # marked by a glyph, not by weight alone
                    row = Text(("▸" + short_label(lane.name, pad - 2)).ljust(pad), style="bold")
                else:
                    row = Text(short_label(lane.name, pad - 1).ljust(pad), style="dim")
                row.append_text(self._cells_row(self.cells(self.cells_width, i), chosen if i == self.lane else None,
                                                reused, processed, seen))
                rows.append(row)
        else:
            pad = 0
            rows.append(self._cells_row(self.cells(width), chosen, reused, processed, seen))
        rows.append(Text(" " * pad) + self._axis(width - pad))
        rows.append(self._legend(width, seen, reused, processed))
        return Text("\n", no_wrap=True, overflow="ellipsis").join(rows)  # a row never wraps into the next

    def _cells_row(self, cells: list[tuple[str, str]], chosen: int | None, reused: str, processed: str,
                   seen: list[str]) -> Text:
        row = Text()
        for col, (ch, kind) in enumerate(cells):
            start = len(row)
            if kind in CAUSE_MARKS:
                _, var, default, _ = CAUSE_MARKS[kind]
                row.append(ch, style=f"bold #000000 on {self._color(var, default)}")
                if kind not in seen:
                    seen.append(kind)
            elif kind == "turn":
                row.append(ch, style=f"{processed} {reused}")
            elif kind == "running":
                row.append(ch, style=f"bold {processed}")
            else:
                row.append(ch, style="dim")
            if col == chosen:
                row.stylize("reverse", start, len(row))
        return row

    def _axis(self, width: int) -> Text:
        n = max(self.n_turns, len(self.turns))
        left = "turn 0"
        right = f"{n - 1}" if n else ""
        now = f"now {self.current}" if self.current is not None else f"{len(self.turns)}/{n} done"
        if self.selected is not None:
            now = f"▲ turn {self.selected} · " + now
        if len(left) + len(now) + len(right) + 2 > width:  # a narrow strip: the ends as bare numbers,
            left = "0"
            if len(left) + len(now) + len(right) + 2 > width and self.selected is not None:
                now = f"▲ turn {self.selected}"  # then the selection alone
        gap = max(1, width - len(left) - len(right) - len(now))
        axis = Text(left + " " * (gap // 2) + now + " " * (gap - gap // 2) + right, style="dim")
        axis.no_wrap = True
        axis.overflow = "ellipsis"
        return axis

    def _legend(self, width: int, seen: list[str], reused: str, processed: str) -> Text:
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
        return legend


def _running(t: TurnRecord, current: int | None) -> bool:
    return current is not None and t.turn == current
