"""The app's bisect screen and verdict advice, driven with Pilot: what they show is the core's."""

from __future__ import annotations

import time

import pytest
from textual.widgets import Input, Log, Select, Static

from replayer.core import bisect, export
from replayer.core.advise import advice_for
from replayer.core.compare import compare
from replayer.core.replay import ReplayConfig, all_simulated, demo_session_path, prepare
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.bisect import BisectScreen
from replayer.ui.screens.replay import ReplayScreen
from replayer.ui.screens.setup import SetupScreen
from replayer.ui.widgets.comparison import ComparisonTable


async def wait_for(pilot, cond, timeout=60.0):
    t = time.monotonic()
    while not cond():
        assert time.monotonic() - t < timeout, "timed out"
        await pilot.pause(0.05)


@pytest.mark.asyncio
async def test_bisect_screen_from_setup_shows_the_cores_steps_and_answer():
    app = ReplayerApp(session=demo_session_path(), default_speed=0.0, deterministic=True)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        await pilot.press("ctrl+g")
        await wait_for(pilot, lambda: isinstance(app.screen, BisectScreen))
        screen = app.screen
        assert screen.query_one("#bisect-good", Input).value == "10001"  # setup's B
        assert screen.query_one("#bisect-bad", Input).value == "9859"
        screen.query_one("#bisect-good", Input).value = "9763"
        await pilot.press("enter")
        await wait_for(pilot, lambda: screen.result is not None)
        await pilot.pause()
        core = bisect.simulated(demo_session_path(), screen.config, 9763, 9859, bisect.metric("prompt_tps"))
        assert screen.result.answer() == core.answer() == {"first_bad": 9771, "last_good": 9763}
        log = screen.query_one("#bisect-steps", Log)
        assert list(log.lines) == [bisect.step_line(s, core.metric) for s in core.steps]
        shown = str(screen.query_one("#bisect-result", Static).render())
        assert "first bad: b9771" in shown and "PR #24176" in shown and "threshold:" in shown
        # bad input: a visible message, no crash
        screen.query_one("#bisect-bad", Input).value = "G1"
        screen.query_one("#bisect-bad", Input).focus()  # Enter in a field starts the bisection
        await pilot.press("enter")
        await pilot.pause()
        assert "build number" in str(screen.query_one("#bisect-result", Static).render())
        screen.query_one("#bisect-engine", Select).value = "live"
        screen.query_one("#bisect-bad", Input).value = "9859"
        await pilot.press("enter")
        await pilot.pause()
        assert "GGUF" in str(screen.query_one("#bisect-result", Static).render())
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))


@pytest.mark.asyncio
async def test_verdict_shows_the_same_advice_as_the_markdown_report(tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAYER_EXPORT_DIR", str(tmp_path))
    prep = prepare(demo_session_path(), ReplayConfig.seed())
    expected = advice_for(prep, compare(all_simulated(prep)))
    assert expected[0].startswith("A b9859 is G1") and expected[-1].startswith("advice: upgrade")
    app = ReplayerApp(default_speed=0.0, replay=prep, deterministic=True)
    async with app.run_test(size=(140, 45)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ReplayScreen) and app.screen.comparison is not None)
        screen = app.screen
        assert screen.advice == expected
        assert screen.query_one("#comparison", ComparisonTable).advice == expected
        screen.action_export("md")
        md = next(tmp_path.glob("*.md")).read_text()
    assert "### Advice" in md
    assert export.to_markdown(screen.comparison, prep.meta(), advice=expected) == md
    for line in expected:
        assert f"- {line}" in md
