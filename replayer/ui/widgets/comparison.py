"""The verdict's advice (each build's generation and fix, the time lost vs ideal batching, the
best change) and, under it, the table (metric, A, B).

A ``DataTable`` was used here; it is a scrolling, cursor-driven widget, and its first
render after the runs finished cost more than the whole last flush. Fifteen rows that
never scroll are one widget rendering a Rich ``Text``.

When the terminal is short but wide, the rows are laid out in two groups side by side, so
the panes keep their batch lists. A run that did not complete says so in its column header
("A partial"): its numbers cover only part of the prompt.
"""

from __future__ import annotations

from typing import Sequence

from rich.text import Text
from textual.widget import Widget

GAP = 6  # columns between two groups


class ComparisonTable(Widget):
    DEFAULT_CSS = """
    ComparisonTable { width: 1fr; height: auto; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.rows: list[tuple[str, str, str]] = []
        self.statuses: tuple[str, str] = ("complete", "complete")
        self.max_groups = 2
        self.advice: list[str] = []

    def show(self, rows: list[tuple[str, str, str]], advice: Sequence[str] = ()) -> None:
        """``advice``: ``advise.advice_for``'s lines, the ones the Markdown report prints."""
        self.rows = list(rows)
        self.advice = list(advice)
        self.refresh(layout=True)

    def clear(self) -> None:
        self.rows = []
        self.advice = []
        self.statuses = ("complete", "complete")
        self.refresh(layout=True)

    def headers(self) -> tuple[str, str]:
        return tuple(run if st == "complete" else f"{run} {st}"  # type: ignore[return-value]
                     for run, st in zip(("A", "B"), self.statuses))

    def widths(self) -> tuple[int, int, int]:
        ha, hb = self.headers()
        return (max(len(r[0]) for r in self.rows), max(len(ha), *(len(r[1]) for r in self.rows)),
                max(len(hb), *(len(r[2]) for r in self.rows)))

    def groups(self, width: int) -> int:
        if not self.rows:
            return 1
        w = sum(self.widths()) + 4
        return 2 if self.max_groups >= 2 and width >= 2 * w + GAP and len(self.rows) > 4 else 1

    def get_content_height(self, container, viewport, width: int) -> int:
        if not self.rows:
            return 0
        g = self.groups(width)
        height = 1 + -(-len(self.rows) // g)
        if self.advice:  # the advice wrapped to the width, then a blank line
            height += 1 + len(self._advice_text().wrap(self.app.console, max(width, 1)))
        return height

    def render(self) -> Text:
        out = self._text(self.size.width)
        if self.advice:  # first: on a short terminal what the verdict means shows before the details
            out = Text.assemble(self._advice_text(), "\n\n", out)
        return out

    def _advice_text(self) -> Text:
        """The advice for the slower build (``advise.advice_for``, as the Markdown report prints it)."""
        notes = Text()
        for i, line in enumerate(self.advice):
            if i:
                notes.append("\n")
            # the head in bold: "advice:", "A b9859 is G1", "A b9859 lost 437.1 s"
            cut = min((i for i in (line.find(": ") + 2 if ": " in line else -1, line.find(" (")) if i > 0),
                      default=0)
            notes.append(line[:cut], style="bold")
            notes.append(line[cut:])
        return notes

    def _text(self, width: int) -> Text:
        if not self.rows:
            return Text("")
        w0, wa, wb = self.widths()
        ha, hb = self.headers()
        g = self.groups(width)
        per = -(-len(self.rows) // g)
        chunks = [self.rows[i * per:(i + 1) * per] for i in range(g)]
        cell = w0 + wa + wb + 4
        out = Text(no_wrap=True)
        for gi in range(g):
            if gi:
                out.append(" " * GAP)
            out.append(f"{'':<{w0}}  {ha:>{wa}}  {hb:>{wb}}", style="bold")
        for i in range(per):
            out.append("\n")
            for gi, chunk in enumerate(chunks):
                if gi:
                    out.append(" " * GAP)
                if i >= len(chunk):
                    out.append(" " * cell)
                    continue
                metric, a, b = chunk[i]
                out.append(f"{metric:<{w0}}", style="dim")
                sa = "red" if self.statuses[0] != "complete" else ""
                sb = "red" if self.statuses[1] != "complete" else ""
                out.append("  ")
                out.append(f"{a:>{wa}}", style=sa)
                out.append("  ")
                out.append(f"{b:>{wb}}", style=sb)
        return out
