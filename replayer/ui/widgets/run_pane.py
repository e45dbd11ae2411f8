"""One build's column: timeline, progress with ETA, throughput, batch list, checkpoint log.

``apply(events)`` takes a batch of events (the screen coalesces them ~20 times a second)
and updates every child once, so thousands of events a second cost a few repaints.
The batch list follows the newest batch unless the user scrolled back; the headers of both
lists are outside the scrolling part, so they stay visible.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.geometry import Region, Size
from textual.reactive import Reactive
from textual.scrollbar import ScrollBar
from textual.strip import Strip
from textual.widgets import Log, Static

from replayer.core.engine.run_summary import RunSummary
from replayer.core.engine import events as ev
from replayer.core.reasons import REASON_LABELS
from replayer.ui.widgets.progress_line import ProgressLine
from replayer.ui.widgets.sparkline import RunSparkline
from replayer.ui.widgets.steady_scroll_bar import steady_vertical_scrollbar
from replayer.ui.widgets.timeline import Timeline

MAX_BATCH_LINES = 20_000
# the reason last, in its short label: a row fits the 35 columns (and a scroll bar) of an
# 80-column terminal's pane
BATCH_HEADER = f"{'#':>3} {'start':>7} {'tok':>5} {'ms':>7} reason"
# what is compared first (position, size, count); the positions last, where a narrow pane cuts
CKPT_HEADER = f"{'checkpoint':<11} {'MiB':>6} {'n/max':<6} [pos_min, pos_max]"


def batch_row(e: ev.BatchDone) -> str:
    ms = e.duration_ms
    return (f"{e.index:>3} {e.start:>7,} {e.n_tokens:>5,} {ms:>7,.{1 if ms < 1000 else 0}f} "
            f"{REASON_LABELS.get(e.reason, e.reason)}")


def checkpoint_row(e: ev.CheckpointCreated) -> str:
    return f"+ {e.n_tokens:>9,} {e.size_mib:>6.1f} {f'{e.count}/{e.n_max}':<6} [{e.pos_min}, {e.pos_max}]"


class FollowLog(Log):
    """A log that keeps following its newest line when it is resized (the verdict appearing
    shrinks the pane), unless the user scrolled back. Its own resize, not the pane's: the
    pane's comes before the log's new size is known.

    Its lines are drawn more cheaply than ``Log`` draws them, and look the same: the widget's
    style is worked out once per frame, not once per line (0.3 ms each: it walks the
    ancestors), and a line is one segment kept in the log's line cache (which ``Log`` fills
    only while text is selected, so every frame drew every visible line through Rich again).
    Together the two lists cost 13 ms of each replay frame at 140×45; now ~2 ms.

    New lines change the log's virtual size, which ``Widget`` declares with ``layout=True``:
    every flush laid the whole screen out again (a fifth of a paced frame) for two lists whose
    boxes never change (a fixed or ``1fr`` height, no horizontal scrolling). Here it moves the
    scroll bar only; the bar appearing or going is still a layout (``_refresh_scrollbars`` sets
    its ``display``). For the same reason the width of new lines is not measured when the list
    cannot scroll sideways (``overflow-x: hidden``: nothing reads it; ``Log`` starts a thread per
    write for it). Its scroll bar is repainted only when it looks different (``SteadyScrollBar``).
    """

    virtual_size = Reactive(Size(0, 0), layout=False)
    _frame_style: Style | None = None

    def watch_virtual_size(self) -> None:
        self._scroll_update(self.virtual_size)

    def _scroll_update(self, virtual_size: Size) -> None:
        """``Widget._scroll_update`` (the bar's size and position) without its unconditional
        repaint of the bar: the bar repaints itself when its drawing changes, and Textual
        repaints it when it is resized. A layout that leaves a list's box as it was (the
        verdict appearing shrinks the batch list, not the checkpoint log) no longer repaints
        its bar."""
        self._refresh_scrollbars()
        width, height = self.container_size
        if self.show_vertical_scrollbar and self.styles.scrollbar_size_vertical:
            bar = self.vertical_scrollbar
            bar.window_virtual_size = virtual_size.height
            bar.window_size = height - self.scrollbar_size_horizontal
        if self.show_horizontal_scrollbar and self.styles.scrollbar_size_horizontal:
            bar = self.horizontal_scrollbar
            bar.window_virtual_size = virtual_size.width
            bar.window_size = width - self.scrollbar_size_vertical
            bar.refresh()
        self.scroll_x = self.validate_scroll_x(self.scroll_x)
        self.scroll_y = self.validate_scroll_y(self.scroll_y)

    def _update_size(self, updates: int, lines: list[str]) -> None:
        if self.styles.overflow_x != "hidden":  # the width is read: scrolled sideways
            super()._update_size(updates, lines)

    @property
    def vertical_scrollbar(self) -> ScrollBar:
        return steady_vertical_scrollbar(self)

    def on_resize(self) -> None:
        if self.auto_scroll:
            self.call_after_refresh(self.scroll_end, animate=False, immediate=True)

    def render_lines(self, crop: Region) -> list[Strip]:
        self._frame_style = self.rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._frame_style = None

    def _render_line(self, y: int, scroll_x: int, width: int) -> Strip:
        style = self._frame_style or self.rich_style
        if y >= len(self._lines):  # below the last line (all of an empty list)
            return Strip.blank(width, style)
        if self.highlight or self.text_selection is not None:
            return super()._render_line(y, scroll_x, width)
        line = self._render_line_cache.get(y)  # emptied by Log on clear, prune and restyle
        if line is None:
            text = self._process_line(self._lines[y])
            line = self._render_line_cache[y] = Strip([Segment(text, style)], cell_len(text))
        return line.crop_extend(scroll_x, scroll_x + width, style).apply_offsets(scroll_x, y)


def run_status(s: RunSummary) -> str:
    """complete / partial / failed / running, from what the run's events said.

    A run that was stopped after some batches is *partial*: its numbers cover only part of the
    prompt and must never read as a finished run's.
    """
    if s.finished is not None:  # the prefill finished; the core says whether generation did too
        return "complete" if s.finished.status == ev.STATUS_COMPLETE else "generation failed"
    if s.failed is not None:
        return "partial" if s.batches else "failed"
    return "running"


@dataclass
class Applied:
    """What one ``apply`` collected: rows for the two lists, the newest progress, a title change."""

    rows: list[str] = field(default_factory=list)
    log_lines: list[str] = field(default_factory=list)
    progress: int | None = None
    ended: bool = False


class RunPane(Vertical):
    DEFAULT_CSS = """
    RunPane { border: round $primary; border-title-style: bold; border-title-color: $foreground;
              padding: 0 1; height: 1fr; }
    RunPane > #stats { width: 1fr; height: 2; color: $text-muted; text-wrap: nowrap; text-overflow: ellipsis; }
    RunPane > #tps-row { height: auto; visibility: hidden; }  /* covered by the two below: not painted */
    RunPane > #tps-row > * { visibility: visible; }
    RunPane #tps-label { width: auto; color: $text-muted; padding-right: 1; text-wrap: nowrap; }
    RunPane Sparkline { width: 1fr; height: 1; }
    RunPane > .head { height: 1; color: $text-muted; text-style: bold; text-wrap: nowrap; }
    RunPane #batches { height: 1fr; min-height: 2; overflow-x: hidden; }
    RunPane #ckpts { height: 4; overflow-x: hidden; }
    RunPane Log { scrollbar-size-vertical: 1; }
    RunPane Log:focus { background: $primary 12%; }
    """

    def __init__(self, run: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.run = run
        self.summary = RunSummary(run)
        self.tps: list[float] = []
        self._tps_width = 0
        self.total = 0
        self.events_applied = 0
        self.rows_written = 0  # rows given to the batch list (it keeps the last MAX_BATCH_LINES)
        self.heading = f"{run}: waiting…"

    def compose(self) -> ComposeResult:
        yield Timeline(id="timeline")
        yield ProgressLine(show_eta=not getattr(self.app, "deterministic", False), id="progress")
        with Horizontal(id="tps-row"):
            yield Static("tok/s", id="tps-label")
            yield RunSparkline([], id="tps")
        yield Static("", id="stats")
        # a Log, not a DataTable: thousands of streamed rows cost one refresh per flush
        lists = [Static(BATCH_HEADER, classes="head", id="batches-head"),
                 FollowLog(max_lines=MAX_BATCH_LINES, id="batches", auto_scroll=True),
                 Static(CKPT_HEADER, classes="head", id="ckpts-head"),
                 FollowLog(max_lines=500, id="ckpts", auto_scroll=True)]
        for widget in lists:  # painted in the frame after the screen's first (``show_lists``)
            widget.styles.display = "none"
            yield widget

    def show_lists(self) -> None:
        """The batch and checkpoint lists, hidden for the screen's first frame: the first paint
        of the whole replay screen was its longest stall (~70 ms on a 2-core Xeon), a fifth of
        it the four empty lists and their scroll bars. The pane's height does not change, so
        only the lists' area is laid out and painted again. Clears the inline rule rather than
        setting it: a short terminal's CSS still hides them once the verdict is shown."""
        for widget in (*self.query(".head"), *self.query(FollowLog)):
            widget.styles.clear_rule("display")

    def on_mount(self) -> None:
        self.border_title = Text(self.heading)  # the title sits in the border: one row more for the lists

    def set_layout(self, n_tokens: int, spans: list[tuple[str, int]]) -> None:
        self.query_one(Timeline).set_layout(n_tokens, spans)

    def reset(self) -> None:
        self.summary = RunSummary(self.run)
        self.tps = []
        self.events_applied = 0
        self.rows_written = 0
        self.heading = f"{self.run}: waiting…"
        self.styles.border = ("round", self.app.theme_variables.get("primary", "blue"))
        self.border_title = Text(self.heading)
        self.query_one(Timeline).reset()
        self.query_one("#progress", ProgressLine).reset()
        self.query_one("#batches", Log).clear()
        self.query_one("#ckpts", Log).clear()
        self.query_one("#tps", RunSparkline).data = []
        self.query_one("#tps-label", Static).update("tok/s")
        self._tps_width = 0
        self.query_one("#stats", Static).update("")

    def apply(self, batch: list[ev.Event]) -> None:
        if not batch:
            return
        tl = self.query_one(Timeline)
        out = Applied()
        for e in batch:
            self.summary.apply(e)
            self.events_applied += 1
            self.apply_one(e, tl, out)
        if out.rows:
            log = self.query_one("#batches", Log)
            # follow the newest batch, unless the user scrolled back to read older ones
            log.auto_scroll = log.scroll_y >= log.max_scroll_y
            log.write_lines(out.rows)
            self.rows_written += len(out.rows)
        if out.log_lines:
            self.query_one("#ckpts", Log).write_lines(out.log_lines)
        if out.progress is not None and self.total:
            self.query_one("#progress", ProgressLine).update(out.progress, self.total)
        if self.tps:
            recent = self.tps[-400:]
            self.query_one("#tps", RunSparkline).data = recent
            top = f"{max(recent):,.0f}"
            text = f"tok/s 0–{top}, last {recent[-1]:>{len(top)},.0f}"  # as wide as the scale: stable
            # the label is sized by its text: re-layout the screen only when its width changes,
            # not on every flush (a full-screen layout is the longest frame of a replay)
            self.query_one("#tps-label", Static).update(text, layout=len(text) != self._tps_width)
            self._tps_width = len(text)
        if out.ended:
            self._title()
        tl.refresh()
        self._stats()

    def apply_one(self, e: ev.Event, tl: Timeline, out: "Applied") -> None:
        """One event into the timeline and the rows to write (a session pane adds its turns)."""
        if isinstance(e, ev.RunStarted):
            self.total = e.n_tokens
            tl.n_past = e.n_past
            self.heading = f"{e.run}: {e.build} ({e.generation}) · {e.engine}"
            out.ended = True  # the title changes
        elif isinstance(e, ev.BatchDone):
            tl.add_batch(e.end, e.reason)
            out.rows.append(batch_row(e))
            if e.duration_ms > 0:
                self.tps.append(e.n_tokens / (e.duration_ms / 1000))
            out.progress = e.end
        elif isinstance(e, ev.Progress):
            out.progress = e.processed
        elif isinstance(e, ev.CheckpointCreated):
            tl.add_checkpoint(e.n_tokens)
            out.log_lines.append(checkpoint_row(e))
        elif isinstance(e, ev.CheckpointErased):
            out.log_lines.append(f"- {e.n_tokens:>9,} erased ({e.reason})")
        elif isinstance(e, ev.CheckpointRestored):
            out.log_lines.append(f"↺ {e.n_tokens:>9,} restored, n_past {e.n_past}")
        elif isinstance(e, (ev.RunFinished, ev.RunFailed)):
            out.ended = True

    def _title(self) -> None:
        status = run_status(self.summary)
        if status == "complete":
            self._border("success")
            self.border_title = Text(f"{self.heading} · done")
        elif status == "generation failed":  # the prefill facts stand; the run says what happened after
            self._border("warning")
            self.border_title = Text(f"{self.run}: {self.summary.status}", style="bold yellow")
        elif status in ("partial", "failed"):
            self._border("error")
            done = f" after {self.summary.n_batches} batches" if status == "partial" else ""
            self.border_title = Text(f"{self.run}: {status.upper()}{done} — {self.summary.failed}", style="bold red")
        else:
            self.border_title = Text(self.heading)

    def _border(self, variable: str) -> None:
        """Finished/failed colour as an inline style: a CSS class would restyle the whole pane."""
        self.styles.border = ("round", self.app.theme_variables.get(variable, "green"))

    def _stats(self) -> None:
        s = self.summary
        br = s.breaks()
        # the numbers that matter first: a narrow pane cuts the end of each line, not these
        text = (f"{s.prompt_ms / 1000:,.1f} s · {s.tokens_per_s:,.1f} tok/s · {s.n_batches} batches\n"
                f"breaks: user/tool {br.get('user_start', 0)} · n_batch {br.get('n_batch', 0)} · "
                f"ckpt {br.get('checkpoint_offset', 0)} · {len(s.created)} checkpoints "
                f"({s.checkpoint_mib:,.1f} MiB)")
        self.query_one("#stats", Static).update(text, layout=False)  # fixed size: no re-layout
