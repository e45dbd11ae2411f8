"""The widgets redrawn for speed draw what the stock ones drew, cell for cell."""

from __future__ import annotations

import random

import pytest
from rich.color import Color
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from textual.app import App, ComposeResult
from textual.geometry import Region
from textual.renderables._blend_colors import blend_colors
from textual.renderables.sparkline import Sparkline as SparklineRenderable
from textual.widgets import Log

from replayer.ui.widgets.run_pane import FollowLog
from replayer.ui.widgets.sparkline import bar_rows
from replayer.ui.widgets.timeline import Timeline


def stock_cells(data: list[float], width: int, height: int, lo: Color, hi: Color) -> list[list[tuple[str, str]]]:
    console = Console(width=width, color_system="truecolor", force_terminal=True)
    r = SparklineRenderable(data, width=width, height=height, min_color=lo, max_color=hi)
    rows = []
    for line in Segment.split_lines(console.render(r, console.options.update_width(width))):
        cells = []
        for seg in line:
            color = seg.style.color.get_truecolor().hex if seg.style and seg.style.color else ""
            cells += [(ch, color) for ch in seg.text]
        rows.append(cells + [(" ", "")] * (width - len(cells)))
    return rows


def our_cells(data: list[float], width: int, height: int, lo: Color, hi: Color) -> list[list[tuple[str, str]]]:
    return [[(bar, "" if ratio is None else blend_colors(lo, hi, ratio).get_truecolor().hex) for bar, ratio in row]
            for row in bar_rows(data, width, height)]


@pytest.mark.parametrize("n", [0, 1, 2, 7, 50, 400])
@pytest.mark.parametrize("width,height", [(1, 1), (13, 1), (48, 3), (66, 2)])
def test_sparkline_bars_match_the_stock_renderable(n, width, height):
    rng = random.Random(n * 1000 + width * 10 + height)
    data = [rng.uniform(0, 300) for _ in range(n)]
    if n > 3:
        data[3] = data[2]  # ties and a flat stretch
    lo, hi = Color.from_rgb(30, 60, 90), Color.from_rgb(79, 163, 224)
    ours, stock = our_cells(data, width, height, lo, hi), stock_cells(data, width, height, lo, hi)
    if n == 0:  # the stock renderable leaves the rows above its floor empty: blank either way
        stock = [[(" ", "")] * width for _ in range(height - 1)] + stock[-1:]
    assert ours == stock


class TwoLogs(App):
    CSS = "Log { height: 6; width: 30; } Log:focus { background: red 20%; }"
    AUTO_FOCUS = None

    def compose(self) -> ComposeResult:
        yield Log(id="stock", max_lines=50)
        yield FollowLog(id="ours", max_lines=50)


def drawn(log: Log) -> list[list[tuple[str, Style | None]]]:
    log.refresh()
    return [[(seg.text, seg.style) for seg in strip] for strip in log.render_lines(Region(0, 0, *log.size))]


async def test_follow_log_draws_the_lines_a_log_draws():
    app = TwoLogs()
    async with app.run_test(size=(40, 14)) as pilot:
        stock, ours = app.query_one("#stock", Log), app.query_one("#ours", FollowLog)
        lines = [f"{i:>3} {'x' * (i % 37)}\tend" for i in range(80)]  # longer than wide, a tab, pruned
        for log in (stock, ours):
            log.write_lines(lines)
        await pilot.pause()
        assert drawn(ours) == drawn(stock) and "end" in "".join(t for row in drawn(ours) for t, _ in row)
        for log in (stock, ours):
            log.scroll_to(x=4, y=10, animate=False, immediate=True)
        await pilot.pause()
        assert drawn(ours) == drawn(stock)
        focused = []
        for log in (stock, ours):
            log.focus()  # a new background: the lines drawn above must not keep the old one
            await pilot.pause()
            focused.append(drawn(log))
        assert focused[1] == focused[0] != drawn(stock)
        app.set_focus(None)
        for log in (stock, ours):
            log.scroll_to(x=0, y=0, animate=False, immediate=True)
        await pilot.pause()
        assert drawn(ours) == drawn(stock)
        for log in (stock, ours):  # new lines where the drawn ones were
            log.clear()
            log.write_lines(["after clear"])
        await pilot.pause()
        assert drawn(ours) == drawn(stock)


class OneTimeline(App):
    CSS = "Timeline { width: 40; } Timeline:focus { background: red 20%; }"
    AUTO_FOCUS = None

    def compose(self) -> ComposeResult:
        yield Timeline()


def timeline_cells(tl: Timeline) -> list[list[tuple[str, Style | None]]]:
    """Cell by cell, so one segment per run and one per cell compare equal."""
    return [[(ch, seg.style) for seg in tl.render_line(y) for ch in seg.text] for y in range(len(tl.rows()))]


def text_cells(tl: Timeline) -> list[list[tuple[str, Style | None]]]:
    """What the same rows draw as a Rich ``Text`` on the widget's style (the way before the strips)."""
    base = tl.rich_style
    return [[(ch, base + Style.parse(style) if style else base) for text, style in row for ch in text]
            for row in tl.rows()]


async def test_timeline_strips_follow_the_data_and_the_style():
    app = OneTimeline()
    async with app.run_test(size=(50, 6)) as pilot:
        tl = app.query_one(Timeline)
        tl.set_layout(1000, [("user", 0), ("assistant", 120), ("tool", 300), ("user", 640)])
        await pilot.pause()
        first = timeline_cells(tl)
        assert first == text_cells(tl)
        tl.add_batch(512, "n_batch")  # new data: new strips
        tl.add_checkpoint(640)
        tl.refresh()
        await pilot.pause()
        assert timeline_cells(tl) == text_cells(tl) != first
        unfocused = timeline_cells(tl)
        tl.focus()  # a new background, same rows: the cached strips must not keep the old one
        await pilot.pause()
        assert timeline_cells(tl) == text_cells(tl) != unfocused
