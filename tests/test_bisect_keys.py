"""The bisect screen by keyboard: Enter on a dropdown chooses its option (it no longer
restarts the bisection), the engine control fits at 80 columns, a finished bisection
shows 100 % and its steps."""

from __future__ import annotations

import pytest
from textual.widgets import Log, ProgressBar, Select, Static

from replayer.core import bisect
from replayer.core.replay import demo_session_path
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.bisect import BisectScreen
from replayer.ui.screens.setup import SetupScreen

from helpers import wait_for


async def _bisect_screen(app, pilot) -> BisectScreen:
    await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
    await pilot.press("ctrl+g")
    await wait_for(pilot, lambda: isinstance(app.screen, BisectScreen))
    await pilot.pause()
    return app.screen


async def _choose_live(pilot, screen) -> None:
    await pilot.press("shift+tab", "shift+tab")  # from the Bisect button: GGUF, then engine
    assert screen.app.focused is screen.query_one("#bisect-engine", Select)
    await pilot.press("enter", "down", "enter")
    await pilot.pause()


async def test_enter_on_the_engine_dropdown_chooses_live_and_starts_nothing():
    app = ReplayerApp(session=demo_session_path(), default_speed=0.0, deterministic=True)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _bisect_screen(app, pilot)
        engine = screen.query_one("#bisect-engine", Select)
        assert engine.region.right <= 80 and engine.region.width > 0  # on screen at 80 columns
        await _choose_live(pilot, screen)
        assert engine.value == "live"
        assert screen.result is None and not any(w.group == "bisect" for w in screen.workers)
        assert str(screen.query_one("#bisect-result", Static).render()) == ""


async def test_a_finished_bisection_shows_100_percent_and_its_steps():
    app = ReplayerApp(session=demo_session_path(), default_speed=0.0, deterministic=True)
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await _bisect_screen(app, pilot)
        await pilot.press("enter")  # on the Bisect button
        await wait_for(pilot, lambda: screen.result is not None)
        await pilot.pause()
        assert screen.query_one("#bisect-progress", ProgressBar).percentage == 1.0
        n = len(screen.result.steps)
        assert str(screen.query_one("#bisect-stage", Static).render()) == f"done: {n} step{'s' if n != 1 else ''}"
        log = screen.query_one("#bisect-steps", Log)
        assert len(log.lines) == n > 0 and log.region.height > 2  # room to show them at 80×24


def test_threshold_grammar():
    t = bisect.Threshold(max_samples=1)
    assert "(at most 1 sample)" in t.describe(1.0, 2.0)
    assert "(at most 3 samples)" in bisect.Threshold(max_samples=3).describe(1.0, 2.0)


@pytest.mark.parametrize("size", [(80, 24), (140, 45)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_bisect_snapshot_engine_live_by_keyboard(snap_compare, size):
    async def run_before(pilot):
        screen = await _bisect_screen(pilot.app, pilot)
        await _choose_live(pilot, screen)

    assert snap_compare(ReplayerApp(session=demo_session_path(), default_speed=0.0, deterministic=True),
                        terminal_size=size, run_before=run_before)
