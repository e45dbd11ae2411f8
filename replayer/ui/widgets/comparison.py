"""The verdict's table: metric, A, B.

A ``DataTable`` was used here; it is a scrolling, cursor-driven widget, and its first
render after the runs finished cost more than the whole last flush. Fifteen rows that
never scroll are one ``Static`` holding a Rich table.
"""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class ComparisonTable(Static):
    DEFAULT_CSS = """
    ComparisonTable { width: 1fr; height: 15; text-wrap: nowrap; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self.rows: list[tuple[str, str, str]] = []

    def show(self, rows: list[tuple[str, str, str]]) -> None:
        self.rows = list(rows)
        self.update(self._text(), layout=False)

    def clear(self) -> None:
        self.rows = []
        self.update("", layout=False)

    def _text(self) -> Text:
        if not self.rows:
            return Text("")
        w0 = max(len(r[0]) for r in self.rows)
        wa = max(1, *(len(r[1]) for r in self.rows))
        wb = max(1, *(len(r[2]) for r in self.rows))
        out = Text(no_wrap=True)
        out.append(f"{'':<{w0}}  {'A':>{wa}}  {'B':>{wb}}", style="bold")
        for metric, a, b in self.rows:
            out.append("\n")
            out.append(f"{metric:<{w0}}", style="dim")
            out.append(f"  {a:>{wa}}  {b:>{wb}}")
        return out
