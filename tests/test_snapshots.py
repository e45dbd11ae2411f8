"""SVG snapshots at 80×24, 100×30, 140×45 and 160×50 (fixed size, no ETA, no animation, deterministic
simulated runs). Behaviour is asserted in the Pilot tests; these catch layout regressions."""

from __future__ import annotations

import time

import pytest

from replayer.core.replay import ReplayConfig, demo_session_path, prepare, run_events
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.replay import ReplayScreen

SIZES = [(80, 24), (100, 30), (140, 45), (160, 50)]


def _app():
    return ReplayerApp(session=demo_session_path(), default_speed=0.0, deterministic=True)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_setup_screen(snap_compare, size):
    assert snap_compare(_app(), terminal_size=size)


def test_mid_replay(snap_compare):
    async def run_before(pilot):
        app = pilot.app
        prep = prepare(demo_session_path(), ReplayConfig())
        screen = ReplayScreen(prep, speed=0.0, autostart=False)
        await app.push_screen(screen)
        await pilot.pause()
        for run, k in (("A", 240), ("B", 60)):
            events = list(run_events(prep, run))[:k]
            screen.buffers[run].extend(events)
        screen.flush()
        await pilot.pause()

    assert snap_compare(_app(), terminal_size=(100, 30), run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_verdict(snap_compare, size):
    async def run_before(pilot):
        app = pilot.app
        await pilot.pause()
        await pilot.press("enter")
        t = time.monotonic()
        while not (isinstance(app.screen, ReplayScreen) and app.screen.comparison is not None):
            assert time.monotonic() - t < 30
            await pilot.pause(0.05)
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(_app(), terminal_size=size, run_before=run_before)
