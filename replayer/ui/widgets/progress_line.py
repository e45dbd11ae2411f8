"""One line of progress: a bar, the percentage and an ETA.

Textual's ``ProgressBar`` is four widgets in a ``Horizontal`` (bar, percentage, ETA); two
panes made ten widgets to style and lay out for what is one line of text, and mounting
the replay screen is most of the app's start-up time.
"""

from __future__ import annotations

import time

from rich.text import Text
from textual.widget import Widget


class ProgressLine(Widget):
    DEFAULT_CSS = """
    ProgressLine { height: 1; width: 1fr; }
    """

    def __init__(self, *, show_eta: bool = True, id: str | None = None) -> None:
        super().__init__(id=id)
        self.show_eta = show_eta
        self.total = 0
        self.done = 0
        self._started: float | None = None
        self._first_done = 0

    def update(self, done: int, total: int) -> None:
        if self._started is None:
            self._started, self._first_done = time.monotonic(), done
        self.done, self.total = done, total
        self.refresh()

    def reset(self) -> None:
        self.total = self.done = 0
        self._started = None
        self.refresh()

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total else 0.0

    def _eta(self) -> str:
        if self._started is None or self.done >= self.total:
            return ""
        moved = self.done - self._first_done
        if moved <= 0:
            return "  ETA --:--"
        left = (time.monotonic() - self._started) * (self.total - self.done) / moved
        return f"  ETA {int(left // 60):02d}:{int(left % 60):02d}"

    def render(self) -> Text:
        tail = f" {self.fraction * 100:5.1f}%" + (self._eta() if self.show_eta else "")
        width = max(1, self.size.width - len(tail))
        filled = int(round(width * self.fraction))
        theme = self.app.theme_variables
        out = Text()
        out.append("━" * filled, style=theme.get("success", "green"))
        out.append("─" * (width - filled), style="dim")
        out.append(tail)
        return out
