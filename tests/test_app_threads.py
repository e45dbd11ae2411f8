"""The session screen shows a session's threads: a Claude Code session whose Task subagents
wrote their own transcripts (``claude_home.write_threaded_session``) gets one lane per thread
in each turn strip, ↑/↓ move between the lanes and ←/→ along a thread; Enter on a turn scrolls
the batch list to that turn and gives the verdict's rows to the lists until ``v``. Which thread a turn is on, and which turns are misses, is the core's."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Static

from replayer.core import session_replay as sr
from replayer.core.replay import ReplayConfig, demo_session_path
from replayer.core.session.turns import thread_of
from replayer.ui.screens.session import SessionScreen

from claude_home import write_threaded_session
from helpers import wait_for
from test_app_session import session_app, strip_of, tab_to

AGENTS = ["agent-a1b2c3d4", "agent-e5f6a7b8"]


@pytest.fixture(scope="module")
def threaded(tmp_path_factory) -> Path:
    return write_threaded_session(tmp_path_factory.mktemp("home") / "-home-u-threads")


@pytest.fixture(scope="module")
def core(threaded):
    """The core's threads per turn and run A's facts: what the strip must show."""
    prep = sr.prepare_session(threaded, ReplayConfig())
    return [thread_of(t) for t in prep.turns.turns], sr.simulated_session_run(prep, "A")


async def finished(pilot, app) -> SessionScreen:
    await wait_for(pilot, lambda: isinstance(app.screen, SessionScreen) and app.screen.comparison is not None)
    await pilot.pause()
    return app.screen


def shown_keys(app) -> set[str]:
    return {k for k, ab in app.active_bindings.items() if ab.binding.show}


@pytest.mark.parametrize("size", [(80, 24), (140, 45)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_each_thread_has_its_lane_with_its_turns_and_misses(threaded, core, size):
    threads, run = core
    assert list(dict.fromkeys(threads)) == ["main", *AGENTS] and threads[4] == AGENTS[0], "the subagents sit between"
    app = session_app(threaded, ReplayConfig())
    async with app.run_test(size=size) as pilot:
        screen = await finished(pilot, app)
        for pane in ("A", "B"):
            strip = strip_of(screen, pane)
            assert [lane.name for lane in strip.lanes] == ["main", *AGENTS]
            width = strip.cells_width
            lanes = [strip.cells(width, i) for i in range(3)]
            ranges = strip.cell_ranges(width)
            for col, (a, b) in enumerate(ranges):
                for i, lane in enumerate(strip.lanes):
                    on_lane = [k for k in range(a, b) if threads[k] == lane.name]
                    assert (lanes[i][col][1] == "none") == (not on_lane), (pane, col, lane.name)
            misses = {t.turn for t in run.turns if t.cause}
            assert misses == {8, 16} and {run.turns[k].cause["cause"] for k in misses} == {"thread_switch"}
            for k in misses:  # main's return after each burst, on main's lane
                assert lanes[0][strip.column_of(k)] == ("T", "thread_switch")
            rows = str(strip.render()).splitlines()
            assert len(rows) == 5 and strip.region.height == 5, "three lanes, the axis and the legend"
            assert [r.split()[0] for r in rows[:3]] == ["main", "a1b2c3d4", "e5f6a7b8"]
            assert "T another thread held the server" in rows[4]


async def test_up_down_change_thread_and_left_right_stay_on_it(threaded, core):
    threads, run = core
    app = session_app(threaded, ReplayConfig())
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await finished(pilot, app)
        strip = await tab_to(pilot, app, "#pane-A #strip")
        assert {"down", "right", "n", "enter"} <= shown_keys(app), "the footer offers ↓ thread"
        stats = screen.pane("A").query_one("#stats", Static)
        await pilot.press("n")
        assert strip.selected == 8 and threads[8] == "main"
        await pilot.press("down")  # agent a's turns are 4–7: the nearest to 8 is 7
        await pilot.pause()
        assert strip.selected == 7 and strip.lane == 1
        assert [r.split()[0] for r in str(strip.render()).splitlines()[:3]] == ["main", "▸a1b2c3d4", "e5f6a7b8"]
        t = run.turns[7]
        assert str(stats.render()).startswith(f"▲ 7: reused {t.cache_n:,} · new {t.prompt_n:,} · ")
        assert f"· {AGENTS[0]}" in str(stats.render()).splitlines()[0]
        await pilot.press("left")
        assert strip.selected == 6
        await pilot.press("right", "right", "right")  # the lane's last turn: it stays there
        assert strip.selected == 7
        await pilot.press("down")  # agent e's turns are 13–15
        assert strip.selected == 13 and threads[13] == AGENTS[1]
        await pilot.press("up")
        assert strip.selected == 7, "↑/↓ go by where they started (7), not by the last stop (13)"
        await pilot.press("up")
        assert strip.selected == 8 and strip.lane == 0  # main's turn nearest to 7
        await pilot.press("right", "right", "right", "right")
        assert strip.selected == 12
        await pilot.press("right")
        assert strip.selected == 16, "→ on main skips the subagent's turns"
        await pilot.press("up")  # already the first lane
        assert strip.selected == 16
        await pilot.pause()
        assert "▲ turn 16" in str(strip.render()).splitlines()[3]


def top_row(log) -> str:
    return log.lines[round(log.scroll_y)]


async def test_enter_scrolls_the_batch_list_to_the_turn():
    """309 turns, one thread: no lanes, no ↓ key; Enter puts the turn's header at the top of A's
    list (B's stays at its end), and the list stops following the newest row."""
    app = session_app(demo_session_path(), ReplayConfig())
    async with app.run_test(size=(140, 45)) as pilot:
        screen = await finished(pilot, app)
        strip = await tab_to(pilot, app, "#pane-A #strip")
        assert strip.lanes == [] and "down" not in shown_keys(app)
        log, other = (screen.pane(r).query_one("#batches") for r in ("A", "B"))
        assert log.scroll_y == log.max_scroll_y > 0 and other.scroll_y == other.max_scroll_y
        await pilot.press(*["right"] * 40, "enter")
        await pilot.pause()
        assert strip.selected == 39
        assert top_row(log).startswith("── turn 39: ") and log.scroll_y < log.max_scroll_y
        assert not log.auto_scroll and other.scroll_y == other.max_scroll_y
        # the verdict gives its rows to the lists (with it the list had a few) until v
        assert not screen.query_one("#summary").display and log.region.height >= 15 and "v" in shown_keys(app)
        await pilot.press("left", "left")  # moving alone does not scroll
        await pilot.pause()
        assert top_row(log).startswith("── turn 39: ")
        await pilot.press("enter")
        await pilot.pause()
        assert top_row(log).startswith("── turn 37: ")
        await pilot.press("v")
        await pilot.pause()
        assert screen.query_one("#summary").display and not screen.has_class("-verdict"), "-verdict is 80×24's"
        screen.pane("A").turn_rows[37] = -5  # a header the list has dropped (it keeps its last rows)
        assert not screen.pane("A").scroll_to_turn(37)
        await pilot.pause()
        assert top_row(log).startswith("── turn 37: ")


async def test_enter_on_a_tiny_terminal_trades_the_verdict_for_the_list_until_v(threaded):
    app = session_app(threaded, ReplayConfig())
    async with app.run_test(size=(80, 24)) as pilot:
        screen = await finished(pilot, app)
        summary = screen.query_one("#summary")
        log = screen.pane("A").query_one("#batches")
        assert screen.has_class("-verdict") and log.region.height == 0, "80×24: the verdict has the rows"
        assert "v" not in shown_keys(app)
        strip = await tab_to(pilot, app, "#pane-A #strip")
        await pilot.press("n", "down", "left", "enter")  # turn 6, agent a's
        await pilot.pause()
        await pilot.pause()
        assert strip.selected == 6
        assert not summary.display and log.region.height >= 6
        assert top_row(log).startswith("── turn 6: ")
        assert "v" in shown_keys(app), "the footer says how to get the verdict back"
        await pilot.press("v")
        await pilot.pause()
        assert summary.display and summary.region.height > 0 and app.focused is summary
        assert log.region.height == 0 and "v" not in shown_keys(app)
        await pilot.press("r", "3")  # a new replay: no trace of the turn view
        screen = await finished(pilot, app)
        assert not screen.has_class("-turn-rows") and summary.display


@pytest.mark.parametrize("size", [(80, 24), (140, 45)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_thread_lanes_snapshot_with_a_subagent_turn_selected(snap_compare, threaded, size):
    async def run_before(pilot):
        app = pilot.app
        await wait_for(pilot, lambda: isinstance(app.screen, SessionScreen) and app.screen.comparison is not None)
        await pilot.pause()
        await tab_to(pilot, app, "#pane-A #strip")
        await pilot.press("n", "down", "left")
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(session_app(threaded, ReplayConfig()), terminal_size=size, run_before=run_before)


def test_more_threads_than_lanes_share_the_last_lane():
    from replayer.ui.widgets.thread_lanes import lane_index, lanes_of, short_label

    threads = ["side", "main", "agent-1", "main", "agent-2", "agent-3", "main", "agent-2"]
    lanes = lanes_of(threads, max_lanes=3)
    assert [(lane.name, lane.turns) for lane in lanes] == [
        ("main", (1, 3, 6)), ("side", (0,)), ("+3 threads", (2, 4, 5, 7))]
    assert lanes[2].threads == ("agent-1", "agent-2", "agent-3")
    assert lane_index(lanes, len(threads)) == [1, 0, 2, 0, 2, 2, 0, 2]
    assert lanes[0].step(None, 1) == 1 and lanes[0].step(3, 1) == 6 and lanes[0].step(6, 1) == 6
    assert lanes[0].step(3, -1) == 1 and lanes[0].step(1, -1) == 1
    assert lanes[2].nearest(3) == 2 and lanes[2].nearest(6) == 5  # a tie goes to the earlier turn
    assert short_label("agent-a1b2c3d4e5", 8) == "a1b2c3d…" and short_label("main", 8) == "main"
    from replayer.ui.widgets.turn_strip import TurnStrip

    strip = TurnStrip()
    strip.set_turns(len(threads), threads)  # four lanes: main, side, agent-1, and agent-2 with agent-3
    assert [lane.name for lane in strip.lanes] == ["main", "side", "agent-1", "+2 threads"]
    assert strip.thread_of(5) == "agent-3" and strip.thread_of(4) == "agent-2", "its own thread, not the lane's"


async def test_the_users_server_command_line_reaches_the_app(threaded):
    """``replay --mode session --server-args "-np 4" --app``: the screen replays on the server the
    user runs (four slots: no thread loses its cache), the same document as the CLI's, and each
    turn's detail names the slot the server chose. Before, the app dropped the flag."""
    from replayer.core.pipeline import Replay
    from replayer.core.server.session import check_server_args
    from replayer.ui.app import ReplayerApp
    from replayer.ui.screens.session import SessionSpec

    cfg = ReplayConfig()
    prep = Replay(threaded, cfg, mode="session", server_args="-np 4").prepare()
    runs = [sr.simulated_session_run(prep, r) for r in ("A", "B")]
    assert not [t for t in runs[0].turns if t.cause] and len({t.slot for t in runs[0].turns}) > 1
    spec = SessionSpec(threaded, cfg, server_args=check_server_args("-np 4", cfg))
    app = ReplayerApp(default_speed=0.0, config=cfg, replay=spec, deterministic=True)
    async with app.run_test(size=(140, 45)) as pilot:
        screen = await finished(pilot, app)
        assert screen.doc == sr.report(prep, *runs)
        strip = await tab_to(pilot, app, "#pane-A #strip")
        await pilot.press("down")  # agent a's first turn
        await pilot.pause()
        t = runs[0].turns[strip.selected]
        assert strip.selected == 4 and f"· slot {t.slot} · {AGENTS[0]}" in str(screen.pane("A").query_one(
            "#stats", Static).render())


def test_server_args_with_screenshot_are_used_and_a_bad_flag_is_one_line(threaded, tmp_path):
    from test_app_session import cli

    shot = tmp_path / "np4.svg"
    base = ["replay", str(threaded), "--mode", "session", "--screenshot"]
    out = cli(*base, str(tmp_path / "np1.svg"))
    assert out.returncode == 0, out.stderr
    assert "thread_switch" in (tmp_path / "np1.svg").read_text(encoding="utf-8"), "one slot: main loses its cache"
    out = cli(*base, str(shot), "--server-args", "-np 4")
    assert out.returncode == 0, out.stderr
    assert "thread_switch" not in shot.read_text(encoding="utf-8"), "four slots: every thread keeps its own"
    bad = cli(*base, str(tmp_path / "bad.svg"), "--server-args", "--bogus 3")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "--bogus" in bad.stderr
    assert not (tmp_path / "bad.svg").exists()


async def test_the_setup_takes_the_server_flags_by_keyboard_refuses_a_bad_one_and_remembers_them(threaded):
    """The setup's "server flags" field, shown in session mode only: an unknown flag is the
    error line (the CLI's one line) and no screen opens; ``-np 4`` replays on four slots — the
    same document as ``Replay(…, server_args="-np 4")`` — and is remembered for the next session
    opened, in this run and the next."""
    from textual.widgets import Input

    from replayer.core import settings
    from replayer.core.pipeline import Replay
    from replayer.ui.app import ReplayerApp
    from replayer.ui.screens.setup import SetupScreen
    from test_app_session import choose_mode

    cfg = ReplayConfig()
    app = ReplayerApp(session=threaded, default_speed=0.0, deterministic=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        setup = app.screen
        assert not setup.query_one("#server-args").display, "a resume is one request on one slot"
        assert (await choose_mode(pilot, app, "down")).value == "session"
        field = await tab_to(pilot, app, "#server-args")
        await pilot.press(*"--bogus 3")
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert app.screen is setup, "an unknown flag opens no screen"
        error = str(setup.query_one("#setup-error", Static).render())
        assert "--bogus" in error and "\n" not in error.strip()
        field.value = ""
        await pilot.press(*"-np 4", "enter")
        screen = await finished(pilot, app)
        prep = Replay(threaded, cfg, mode="session", server_args="-np 4").prepare()
        assert screen.doc == sr.report(prep, *(sr.simulated_session_run(prep, r) for r in ("A", "B")))
        assert screen.doc["runs"][0]["misses"] == [], "four slots: no thread loses its cache"
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        assert app.screen.query_one("#server-args", Input).value == "-np 4", "the way back keeps it"
    assert settings.load_settings()[0].server_args == "-np 4"
    again = ReplayerApp(session=threaded, default_speed=0.0)  # a later run of the app
    async with again.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(again.screen, SetupScreen))
        assert again.screen.query_one("#server-args", Input).value == "-np 4"
        assert again.screen.query_one("#server-args").display, "the remembered mode shows it"
