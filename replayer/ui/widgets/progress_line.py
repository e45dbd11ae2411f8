"""One line of progress: a bar, the percentage and an ETA from the current speed.

Textual's ``ProgressBar`` is four widgets in a ``Horizontal`` (bar, percentage, ETA); two
panes made ten widgets to style and lay out for what is one line of text, and mounting
the replay screen is most of the app's start-up time.

The ETA divides what is left by the rate over the last few seconds, not since the start:
after a speed change (×1 → ×10) an average since the start stays wrong for most of the run.
``restart_rate`` forgets the old rate at once when the caller knows the speed changed.
"""

from __future__ import annotations

import time
from collections import deque

from rich.text import Text
from textual.widget import Widget

RATE_WINDOW_S = 3.0


class ProgressLine(Widget):
    DEFAULT_CSS = """
    ProgressLine { height: 1; width: 1fr; }
    """

    def __init__(self, *, show_eta: bool = True, id: str | None = None, clock=time.monotonic) -> None:
        super().__init__(id=id)
        self.show_eta = show_eta
        self.clock = clock
        self.total = 0
        self.done = 0
        self.note = ""  # e.g. "paused"; shown instead of the ETA
        self.samples: deque[tuple[float, int]] = deque()

    def update(self, done: int, total: int) -> None:
        now = self.clock()
        self.done, self.total = done, total
        self.samples.append((now, done))
        while len(self.samples) > 2 and now - self.samples[0][0] > RATE_WINDOW_S:
            self.samples.popleft()
        self.refresh()

    def restart_rate(self) -> None:
        self.samples.clear()
        self.refresh()

    def reset(self) -> None:
        self.total = self.done = 0
        self.note = ""
        self.samples.clear()
        self.refresh()

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total else 0.0

    def rate(self) -> float | None:
        """Units per second over the recent window (None before two samples)."""
        if len(self.samples) < 2:
            return None
        (t0, d0), (t1, d1) = self.samples[0], self.samples[-1]
        return (d1 - d0) / (t1 - t0) if t1 > t0 and d1 > d0 else None

    def eta_seconds(self) -> float | None:
        r = self.rate()
        return (self.total - self.done) / r if r else None

    def _eta(self) -> str:
        if self.note:
            return f"  {self.note}"
        if not self.samples or self.done >= self.total:
            return ""
        left = self.eta_seconds()
        if left is None:
            return "  ETA --:--"
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
