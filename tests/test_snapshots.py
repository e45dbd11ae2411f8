"""A few SVG snapshots (fixed size, no ETA, no animation, deterministic simulated runs)."""

from __future__ import annotations

from replayer.core.replay import ReplayConfig, demo_session_path, prepare, simulated_events
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.replay import ReplayScreen

SIZE = (140, 45)


def _app():
    return ReplayerApp(session=demo_session_path(), default_speed=0.0, deterministic=True)


def test_setup_screen(snap_compare):
    assert snap_compare(_app(), terminal_size=SIZE)


def test_mid_replay(snap_compare):
    async def run_before(pilot):
        app = pilot.app
        prep = prepare(demo_session_path(), ReplayConfig.seed())
        screen = ReplayScreen(prep, speed=0.0, autostart=False)
        await app.push_screen(screen)
        await pilot.pause()
        for run, k in (("A", 240), ("B", 60)):
            events = list(simulated_events(prep, run))[:k]
            screen.buffers[run].extend(events)
        screen.flush()
        await pilot.pause()

    assert snap_compare(_app(), terminal_size=SIZE, run_before=run_before)


def test_verdict(snap_compare):
    async def run_before(pilot):
        app = pilot.app
        await pilot.pause()
        await pilot.press("enter")
        import time

        t = time.monotonic()
        while not (isinstance(app.screen, ReplayScreen) and app.screen.comparison is not None):
            assert time.monotonic() - t < 30
            await pilot.pause(0.05)
        await pilot.pause()

    assert snap_compare(_app(), terminal_size=SIZE, run_before=run_before)
