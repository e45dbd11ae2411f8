"""Batch reasons are told apart by glyph as well as colour: with NO_COLOR (or colour-blind
eyes) the timeline still shows which rule cut each batch."""

from __future__ import annotations

from textual.app import App, ComposeResult

from replayer.core.reasons import REASONS
from replayer.ui.widgets.timeline import Timeline


class OneTimeline(App):
    CSS = "Timeline { width: 40; }"

    def compose(self) -> ComposeResult:
        yield Timeline()


def test_every_reason_has_its_own_glyph():
    glyphs = [r.glyph for r in REASONS]
    assert len(set(glyphs)) == len(glyphs) and all(len(g) == 1 for g in glyphs)


async def test_timeline_marks_each_cut_with_its_reasons_glyph(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    app = OneTimeline()
    async with app.run_test(size=(50, 6)) as pilot:
        tl = app.query_one(Timeline)
        tl.set_layout(1000, [("user", 0), ("assistant", 120), ("user", 640)])
        for end, reason in ((250, "n_batch"), (500, "user_start"), (750, "checkpoint_offset"), (1000, "prompt_end")):
            tl.add_batch(end, reason)
        tl.refresh()
        await pilot.pause()
        rows = ["".join(text for text, _ in row) for row in tl.rows()]
        batch_row = next(r for r in rows if "━" in r)
        marks = [ch for ch in batch_row if ch in {r.glyph for r in REASONS}]
        assert marks == ["┃", "╋", "┇"]  # the prompt's end is the row's end: no cut drawn inside it
