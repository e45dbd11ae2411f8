"""The verdict's table (metric, A, B) and, beside it, the advice for the slower build.

A ``DataTable`` was used here; it is a scrolling, cursor-driven widget, and its first
render after the runs finished cost more than the whole last flush. Fifteen rows that
never scroll are one ``Static`` holding a Rich table.
"""

from __future__ import annotations

from typing import Sequence

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text
from textual.widgets import Static


class ComparisonTable(Static):
    DEFAULT_CSS = """
    ComparisonTable { width: 1fr; height: 15; text-wrap: nowrap; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self.rows: list[tuple[str, str, str]] = []
        self.advice: list[str] = []

    def show(self, rows: list[tuple[str, str, str]], advice: Sequence[str] = ()) -> None:
        """``advice``: ``advise.advice_for``'s lines, the ones the Markdown report prints."""
        self.rows = list(rows)
        self.advice = list(advice)
        self.update(self._renderable(), layout=False)

    def clear(self) -> None:
        self.rows = []
        self.advice = []
        self.update("", layout=False)

    def _renderable(self) -> RenderableType:
        table = self._text()
        if not self.advice:
            return table
        grid = Table.grid(padding=(0, 4))
        grid.add_column(no_wrap=True)
        grid.add_column(ratio=1)
        notes = Text()
        for i, line in enumerate(self.advice):
            if i:
                notes.append("\n\n")
            head, sep, rest = line.partition(": ")
            notes.append(head + sep, style="bold")
            notes.append(rest)
        grid.add_row(table, notes)
        return grid

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
