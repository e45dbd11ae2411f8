"""Help (?) names every screen's keys; the palette (ctrl+p) lists the current screen's actions."""

from __future__ import annotations

from textual.widgets import Markdown

from replayer.core.replay import demo_session_path
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.bisect import BisectScreen
from replayer.ui.screens.help import HELP, HelpScreen
from replayer.ui.screens.picker import PickerScreen
from replayer.ui.screens.setup import SetupScreen

from helpers import wait_for


def test_help_names_quit_help_picker_bisect_timeline_and_scrolling():
    for needle in ("ctrl+q | quit", "? · F1 | this help", "filter as you type", "sort (newest", "ctrl+x cancels",
                   "← → | scroll the focused timeline", "PgUp PgDn"):
        assert needle in HELP, needle


def test_help_names_the_turn_strips_keys_and_every_miss_letter():
    from replayer.ui.widgets.turn_strip import CAUSE_MARKS, TurnStrip

    for needle in ("| ← → | the previous / next turn", "| ↑ ↓ | the nearest turn of the thread", "| n | the next miss",
                   "| ⏎ | the turn's facts, and its batches", "| v | the verdict again", "lane per thread"):
        assert needle in HELP, needle
    assert {b.key for b in TurnStrip.BINDINGS} == {"left", "right", "up", "down", "n", "enter", "v"}
    for letter, _, _, text in CAUSE_MARKS.values():
        assert f"{letter} {text}" in " ".join(HELP.split()), letter


def _titles(app) -> list[str]:
    return [c.title for c in app.get_system_commands(app.screen)]


async def test_palette_has_the_current_screens_actions():
    app = ReplayerApp(session=demo_session_path(), default_speed=0.0, deterministic=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        titles = _titles(app)
        assert {"Replay", "Bisect A…B", "Sessions", "Swap builds A and B", "Quit", "Help"} <= set(titles)
        assert len(titles) == len(set(titles))
        await pilot.press("ctrl+g")
        await wait_for(pilot, lambda: isinstance(app.screen, BisectScreen))
        assert {"Bisect", "Cancel", "Setup"} <= set(_titles(app))
        await pilot.press("escape", "escape")
        await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen))
        assert {"Filter", "Sort", "Open file…", "Demo"} <= set(_titles(app))


async def test_question_mark_opens_help_from_the_picker():
    app = ReplayerApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        assert app.screen.query_one(Markdown)


async def test_the_palette_leaves_out_what_the_screen_does_not_offer_now():
    """While the runs go the palette has pause and cancel; after the verdict they are gone (the
    footer hides them too) and replay again and export are there."""
    from replayer.core.replay import ReplayConfig

    from test_app_session import session_app

    app = session_app(demo_session_path(), ReplayConfig(), speed=1.0)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: app.screen.pane("A").turns_done >= 1)
        assert {"Pause/resume", "Cancel A", "Cancel B", "Export"} <= set(_titles(app))
        await pilot.press("3")
        await wait_for(pilot, lambda: app.screen.comparison is not None)
        titles = set(_titles(app))
        assert {"Replay again", "Export", "Export JSON"} <= titles, titles
        assert not titles & {"Pause/resume", "Cancel A", "Cancel B", "Verdict"}, titles
