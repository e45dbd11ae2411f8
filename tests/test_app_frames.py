"""What a frame of the replay screen asks of Textual: no layout for a list that only grows, no
repaint of a scroll bar that looks the same, no stylesheet work when a replay screen opens.

These are the behaviours the UI stall benchmark (``benchmarks/run.py stall``) rests on; the
times themselves are measured there, not asserted here.
"""

from __future__ import annotations

from textual.widgets import Log

from replayer.core.compare import compare
from replayer.core.engine import events as ev
from replayer.core.replay import ReplayConfig, all_simulated, demo_session_path, prepare
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.replay import ReplayScreen
from replayer.ui.screens.session import SessionScreen, SessionSpec
from replayer.ui.widgets.steady_scroll_bar import SteadyScrollBar

from helpers import wait_for


def slow_batch(after: ev.BatchDone, n: int = 1) -> ev.BatchDone:
    """A batch after ``after``: 10 tokens in a second, far below any tok/s the demo reaches, so
    the sparkline's label keeps its width (a wider label is a layout of its own)."""
    return ev.BatchDone(run=after.run, index=after.index + n, start=after.end + 10 * (n - 1), n_tokens=10,
                        n_ubatches=1, reason="n_batch", t_start_ms=after.t_ms + 1000 * (n - 1),
                        t_ms=after.t_ms + 1000 * n)


class Counter:
    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


async def unstarted_demo(pilot, app) -> ReplayScreen:
    """The demo's replay screen, pushed and painted, its runs not started."""
    screen = ReplayScreen(prepare(demo_session_path(), ReplayConfig()), speed=0.0, autostart=False)
    await app.push_screen(screen)
    await pilot.pause()
    return screen


async def finished_demo(pilot, app) -> ReplayScreen:
    screen = app.screen
    await wait_for(pilot, lambda: screen.comparison is not None)
    await pilot.pause()
    await pilot.pause()  # the verdict's layout, and the lists following their ends again
    return screen


async def test_new_batches_scroll_the_list_and_its_bar_without_laying_the_screen_out(monkeypatch):
    prep = prepare(demo_session_path(), ReplayConfig())
    app = ReplayerApp(default_speed=0.0, config=prep.config, replay=prep)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await finished_demo(pilot, app)
        pane = screen.pane("A")
        log = pane.query_one("#batches", Log)
        bar = log.vertical_scrollbar
        assert isinstance(bar, SteadyScrollBar) and bar.display
        reflows = Counter(screen._compositor.reflow)
        monkeypatch.setattr(screen._compositor, "reflow", reflows)
        repaints = Counter(bar.refresh)
        monkeypatch.setattr(bar, "refresh", repaints)
        last = pane.summary.batches[-1]
        for n in (1, 2, 3):
            pane.apply([slow_batch(last, n)])
            await pilot.pause()
        # the list follows its newest batch, its bar knows the new length ...
        assert log.lines[-1].split()[0] == str(last.index + 3)
        assert log.scroll_y == log.max_scroll_y > 0
        assert bar.window_virtual_size == len(log.lines) and bar.position == log.scroll_y
        # ... and neither the screen's layout nor the bar (a one-cell thumb at the bottom) was redone
        assert reflows.calls == 0
        assert repaints.calls == 0
        log.scroll_to(y=0, animate=False)  # the thumb moves to the top: that is a repaint
        await pilot.pause()
        assert repaints.calls >= 1 and bar.position == 0


async def test_a_replay_screen_opens_without_new_css_to_parse(tmp_path):
    """The app parses the replay screens' widget CSS once its first screen is up
    (``ui.warm``): neither replay screen adds a stylesheet source when it opens, so the
    list of classes warmed is the list of classes they mount."""
    from test_session_mode import _turns, write_log

    prep = prepare(demo_session_path(), ReplayConfig())
    log = write_log(tmp_path / "s.jsonl", _turns(4)[0])
    app = ReplayerApp(default_speed=0.0)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        before = set(app.stylesheet.source)
        assert any("RunPane" in name for _, name in before)
        await app.push_screen(ReplayScreen(prep, speed=0.0))
        await finished_demo(pilot, app)
        app.pop_screen()
        await app.push_screen(SessionScreen(SessionSpec(log, ReplayConfig.seed(template="qwen3-coder")), speed=0.0))
        await finished_demo(pilot, app)
        assert set(app.stylesheet.source) - before == set()


async def test_each_pane_is_updated_in_a_frame_of_its_own():
    """The 20 Hz flush takes one pane's events per tick, in turns; an instant replay's drain
    fills one pane, lets the screen repaint it, then the other. The verdict is unchanged."""
    from replayer.core.replay import run_events

    app = ReplayerApp(default_speed=0.0, deterministic=True)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await unstarted_demo(pilot, app)
        prep = screen.prep
        events = {run: list(run_events(prep, run)) for run in ("A", "B")}
        applied = lambda: tuple(screen.pane(run).events_applied for run in ("A", "B"))  # noqa: E731
        screen.paused = True  # the timer's flushes wait: these two are the test's
        for run in ("A", "B"):
            screen.buffers[run].extend(events[run][:50])
        screen.paused = False
        screen.flush()
        first = applied()
        screen.flush()
        assert sorted(first) == [0, 50] and applied() == (50, 50)

        seen = []
        painted = screen.painted

        async def record():
            seen.append(applied())
            await painted()

        screen.painted = record
        for run in ("A", "B"):
            screen.buffers[run].extend(events[run][50:])
        screen.start_drain(sum(len(v) - 50 for v in events.values()))
        await wait_for(pilot, lambda: screen.comparison is not None)
        steps = [(b[0] - a[0], b[1] - a[1]) for a, b in zip([(50, 50)] + seen, seen)]
        assert steps and all((da == 0) != (db == 0) for da, db in steps), steps
        assert applied() == tuple(len(events[run]) for run in ("A", "B"))
        assert screen.comparison.speedup == compare(all_simulated(prep)).speedup


async def test_r_between_scheduling_the_runs_and_their_start_replays_once():
    """``r`` pressed after the runs were scheduled but before they started: the runs that start
    are the new replay's only (a start scheduled before ``r`` would add a cancelled run to them)."""
    from replayer.ui.widgets.run_pane import run_status

    app = ReplayerApp(default_speed=0.0, deterministic=True)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = await unstarted_demo(pilot, app)
        prep = screen.prep
        screen.start_runs()
        screen.action_restart()
        await wait_for(pilot, lambda: screen.comparison is not None)
        await pilot.pause()
        assert [run_status(screen.pane(r).summary) for r in ("A", "B")] == ["complete", "complete"]
        assert screen.comparison.speedup == compare(all_simulated(prep)).speedup


async def test_no_full_collection_runs_while_a_replay_screen_is_up():
    """The collector's full passes wait while a replay screen is up (young generations are
    still collected), and its thresholds are back when the screen is gone."""
    import gc

    full = []

    def seen(phase, info):
        if phase == "start" and info["generation"] == 2:
            full.append(info)

    default = gc.get_threshold()
    before = (default[0], 2, 2)  # full passes 25 times as often as Python's default: several per replay
    prep = prepare(demo_session_path(), ReplayConfig())
    app = ReplayerApp(default_speed=0.0, deterministic=True)
    gc.callbacks.append(seen)
    gc.set_threshold(*before)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            young = gc.get_count()
            screen = ReplayScreen(prep, speed=0.0)
            await app.push_screen(screen)
            assert gc.get_threshold()[:2] == before[:2] and gc.get_threshold()[2] > before[2]
            for _ in range(3):
                full.clear()
                screen.action_restart()
                await finished_demo(pilot, app)
                assert full == []
            assert gc.get_count() != young  # the young generations were still counted (and collected)
            app.pop_screen()
            await pilot.pause()
            assert gc.get_threshold() == before
    finally:
        gc.callbacks.remove(seen)
        gc.set_threshold(*default)
