"""A vertical scroll bar that is repainted only when what it shows changes.

A list that follows its newest line moves its scroll bar's position and virtual size on every
flush, and Textual repaints the bar for each change: at 140×45 the four bars of a replay were a
quarter of the lines repainted per frame (46–58 of ~130–230), though a bar over thousands of
lines looks the same from one frame to the next (a one-cell thumb at the bottom). Here the three
values only say what the bar would draw, in Textual's own eighth-of-a-cell steps, and the bar is
repainted when that drawing changes.
"""

from __future__ import annotations

from math import ceil

from textual.reactive import Reactive
from textual.scrollbar import ScrollBar
from textual.widget import Widget


class SteadyScrollBar(ScrollBar):
    window_virtual_size: Reactive[int] = Reactive(100, repaint=False)
    window_size: Reactive[int] = Reactive(0, repaint=False)
    position: Reactive[float] = Reactive(0, repaint=False)

    _drawn: list | None = None
    _looking = False

    def drawing(self) -> list:
        """The bar's cells, drawn by its renderer from the values ``ScrollBar._render_bar`` passes."""
        virtual = self.window_virtual_size
        window = self.window_size if self.window_size < virtual else 0
        size = self.size.height if self.vertical else self.size.width
        return self.renderer.render_bar(size=size, virtual_size=ceil(virtual), window_size=ceil(window),
                                       position=self.position, thickness=self.thickness,
                                       vertical=self.vertical).segments

    def _moved(self) -> None:
        # once all three are set: a list writing lines sets the virtual size before it scrolls
        # to its new end, and the bar in between (thumb off the end) is a drawing nobody sees
        if not self._looking:
            self._looking = True
            self.call_later(self._look)

    def _look(self) -> None:
        self._looking = False
        drawn = self.drawing()
        if drawn != self._drawn:
            self._drawn = drawn
            self.refresh()

    watch_window_virtual_size = watch_window_size = watch_position = _moved

    def on_resize(self) -> None:
        self._drawn = None  # Textual repaints a resized widget itself


def steady_vertical_scrollbar(widget: Widget) -> ScrollBar:
    """``Widget.vertical_scrollbar`` with a :class:`SteadyScrollBar` (created on first use, hidden
    until the widget's content overflows, as Textual creates its own)."""
    if widget._vertical_scrollbar is None:
        bar = widget._vertical_scrollbar = SteadyScrollBar(vertical=True, name="vertical",
                                                           thickness=widget.scrollbar_size_vertical)
        bar.display = False
        widget.app._start_widget(widget, bar)
    return widget._vertical_scrollbar
