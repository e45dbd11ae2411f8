"""The app as people use it: keyboard only, small terminals, restarts, cancels, pause, zoom.

Every test drives the real app with Pilot through key presses and checks what is on screen
(regions inside the terminal, texts, numbers equal to the core's for the same config).
"""

from __future__ import annotations


import pytest
from textual.widgets import Input, Log, Select, Static

from replayer.core.advise import advice_for
from replayer.core.compare import compare
from replayer.core.engine import events as ev
from replayer.core.replay import ReplayConfig, all_simulated, demo_session_path, prepare, run_events
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.replay import ReplayScreen
from replayer.ui.screens.setup import SetupScreen
from replayer.ui.widgets.comparison import ComparisonTable
from replayer.ui.widgets.progress_line import ProgressLine
from replayer.ui.widgets.timeline import Timeline, density_mark

from conftest import FIXTURES
from helpers import shown_lines, start_from_setup, wait_for



def instant_demo_app() -> ReplayerApp:
    """The app opened straight on the demo's replay with the defaults, instant."""
    prep = prepare(demo_session_path(), ReplayConfig())
    return ReplayerApp(default_speed=0.0, config=prep.config, replay=prep)


async def until_verdict(app, pilot):
    screen = app.screen
    await wait_for(pilot, lambda: screen.comparison is not None)
    return screen


def visible(app, widget) -> bool:
    """On screen: displayed, at least one cell, and wholly inside the terminal."""
    r = widget.region
    return widget.display and r.width > 0 and r.height > 0 and app.screen.region.contains_region(r)


async def test_keyboard_only_80x24_build_a_to_b9763_then_instant():
    """The issue's walk-through: `make demo`, Tab to build A, Enter opens, ↓↓ to b9763, Enter
    confirms (it used to start the replay with the old build), ctrl+r starts, 3 = instant."""
    app = ReplayerApp(demo=True, default_speed=10.0)
    async with app.run_test(size=(80, 24)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        setup = app.screen
        assert visible(app, setup.query_one("#start")), "the Replay button is on screen at 80x24"
        await pilot.press("tab")
        assert app.focused is setup.query_one("#build-a", Select), "first Tab lands on build A"
        assert visible(app, app.focused)
        await pilot.press("enter")
        await pilot.pause()
        assert setup.query_one("#build-a", Select).expanded
        await pilot.press("down", "down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, SetupScreen), "Enter inside the list confirms, it does not start"
        assert setup.query_one("#build-a", Select).value == "9763"
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: isinstance(app.screen, ReplayScreen))
        screen = app.screen
        await pilot.press("3")
        await wait_for(pilot, lambda: screen.comparison is not None)
        await pilot.pause()
        cmp = screen.comparison
        assert (cmp.a.build, cmp.b.build) == ("b9763", "b10001")
        core = compare(all_simulated(prepare(demo_session_path(), ReplayConfig(a="9763"))))
        assert cmp.speedup == pytest.approx(core.speedup)
        verdict = str(screen.query_one("#verdict", Static).render())
        assert verdict == core.verdict() and "×" in verdict
        for run, build in (("A", "b9763"), ("B", "b10001")):
            pane = screen.pane(run)
            assert build in str(pane.border_title)
            for sel in ("#timeline", "#progress", "#stats"):
                assert visible(app, pane.query_one(sel)), (run, sel)
        assert visible(app, screen.query_one("#verdict"))
        # the advice (generations, time lost vs ideal batching, the fix) comes first, wrapped
        # to the terminal; the table under it is reached by Tab to the verdict and End
        table = screen.query_one("#comparison", ComparisonTable)
        assert table.advice == advice_for(prepare(demo_session_path(), ReplayConfig(a="9763")), core)

        def shown_text() -> str:
            return " ".join(line.strip() for line in shown_lines(table))

        # laid out on the frame after the verdict: wait for the advice, then check how it fits
        await wait_for(pilot, lambda: all(" ".join(line.split()) in shown_text() for line in table.advice))
        assert table.region.right <= 80
        assert all(len(line.rstrip()) <= 76 for line in shown_lines(table))
        shown = shown_text()
        assert "A b9763 is G0" in shown and "B b10001 lost " in shown and "vs ideal batching" in shown
        summary = screen.query_one("#summary")
        assert summary.region.y + 1 < 24 and visible(app, summary)
        for _ in range(4):
            if app.focused is summary:
                break
            await pilot.press("tab")
        assert app.focused is summary, "Tab reaches the verdict"
        await pilot.press("end")
        await pilot.pause()
        assert summary.max_scroll_y > 0 and summary.scroll_y == summary.max_scroll_y


async def test_100x30_keeps_batch_list_and_checkpoint_log_with_the_verdict():
    app = ReplayerApp(demo=True, default_speed=0.0)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        await pilot.press("enter")  # the Replay button has focus
        await wait_for(pilot, lambda: isinstance(app.screen, ReplayScreen) and app.screen.comparison is not None)
        await pilot.pause()
        screen = app.screen
        assert visible(app, screen.query_one("#verdict"))
        for run in ("A", "B"):
            pane = screen.pane(run)
            for sel in ("#batches-head", "#batches", "#ckpts-head", "#ckpts", "#tps", "#tps-label"):
                assert visible(app, pane.query_one(sel)), (run, sel)
            # the list follows the newest batch: its last line is the run's last batch
            log = pane.query_one("#batches", Log)
            assert log.scroll_y == log.max_scroll_y > 0
            assert int(log.lines[-1].split()[0]) == pane.summary.n_batches - 1


@pytest.mark.parametrize("size", [(80, 24), (100, 30), (160, 50)])
async def test_verdict_takes_room_only_once_it_exists(size):
    prep = prepare(FIXTURES / "pi/small-v3.jsonl", ReplayConfig())
    app = ReplayerApp(default_speed=0.0, config=prep.config, replay=prep, deterministic=True)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ReplayScreen)
        await wait_for(pilot, lambda: screen.comparison is not None)
        await pilot.pause()
        assert visible(app, screen.query_one("#summary"))
        await pilot.press("1", "r")  # a new replay at ×1: the old verdict goes, its room returns to the panes
        await pilot.pause()
        assert screen.comparison is None
        assert not screen.query_one("#summary").display or screen.query_one("#summary").region.height == 0


async def test_r_mid_replay_ends_with_a_verdict_of_the_new_runs_only():
    app = ReplayerApp(demo=True, default_speed=1.0)
    async with app.run_test(size=(140, 45)) as pilot:
        screen = await start_from_setup(app, pilot)
        await wait_for(pilot, lambda: screen.pane("A").summary.n_batches > 1)
        await pilot.press("r")
        await pilot.press("3")
        await wait_for(pilot, lambda: screen.comparison is not None)
        await pilot.pause(0.3)  # anything a cancelled worker still sends would arrive now
        core = compare(all_simulated(prepare(demo_session_path(), ReplayConfig())))
        cmp = screen.comparison
        assert cmp.a.failed is None and cmp.b.failed is None
        assert "cancel" not in str(screen.query_one("#verdict", Static).render())
        assert (cmp.a.n_batches, cmp.b.n_batches) == (core.a.n_batches, core.b.n_batches)
        table = screen.query_one("#comparison", ComparisonTable)
        assert table.rows == core.rows()
        assert table.advice == advice_for(prepare(demo_session_path(), ReplayConfig()), core)  # the new runs'
        assert len(screen.pane("A").query_one("#batches", Log).lines) == core.a.n_batches


async def test_cancelled_run_is_marked_partial_in_pane_and_table():
    app = ReplayerApp(demo=True, default_speed=1.0)
    async with app.run_test(size=(140, 45)) as pilot:
        screen = await start_from_setup(app, pilot)
        await wait_for(pilot, lambda: screen.pane("A").summary.n_batches > 0)
        await pilot.press("a", "3")
        await wait_for(pilot, lambda: screen.comparison is not None)
        await pilot.pause()
        table = screen.query_one("#comparison", ComparisonTable)
        assert table.headers() == ("A partial", "B")
        await wait_for(pilot, lambda: bool(shown_lines(table)) and "A partial" in shown_lines(table)[0])
        assert "PARTIAL" in str(screen.pane("A").border_title)
        assert screen.pane("B").summary.finished is not None


async def test_pause_holds_events_back_and_says_so():
    app = ReplayerApp(demo=True, default_speed=1.0)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await start_from_setup(app, pilot)
        await wait_for(pilot, lambda: screen.n_events > 0)
        await pilot.press("space")
        assert "PAUSED" in screen.sub_title and "speed ×1" in screen.sub_title
        held = screen.n_events
        await pilot.pause(0.4)
        assert screen.n_events == held
        assert "paused" in str(screen.pane("A").query_one("#progress").render())
        await pilot.press("space", "2")
        assert "PAUSED" not in screen.sub_title and "speed ×10" in screen.sub_title
        await wait_for(pilot, lambda: screen.n_events > held)


async def test_zoom_and_pan_move_both_timelines_together():
    app = instant_demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await until_verdict(app, pilot)
        await pilot.press("plus", "plus", "full_stop")
        ta, tb = (screen.pane(r).query_one(Timeline) for r in ("A", "B"))
        assert ta.zoom == tb.zoom == 4.0
        assert ta.offset == tb.offset > 0
        ta.focus()
        await pilot.press("minus")
        assert ta.zoom == tb.zoom == 2.0


async def test_timeline_shades_columns_by_how_many_starts_they_hold():
    assert [density_mark(n) for n in (1, 2, 4, 10, 25)] == [None, "░", "▒", "▓", "█"]
    app = instant_demo_app()
    async with app.run_test(size=(80, 40)) as pilot:
        screen = await until_verdict(app, pilot)
        tl = screen.pane("A").query_one(Timeline)
        row = str(tl.render()).splitlines()[0]
        tpc = tl._tpc()
        for i, ch in enumerate(row):
            a, b = int(i * tpc), int((i + 1) * tpc)
            n = sum(a <= s < max(a + 1, b) for s in tl.user_starts)
            if n:
                assert ch == (density_mark(n) or "▼"), (i, n, ch)
        assert len(set(row) & {"░", "▒", "▓", "█"}) >= 2, "several densities, not one solid row"


def test_eta_follows_the_current_speed():
    now = [0.0]
    p = ProgressLine(clock=lambda: now[0])
    for i in range(5):  # 100 tokens/s
        now[0] = i
        p.update(i * 100, 10_000)
    assert p.eta_seconds() == pytest.approx((10_000 - 400) / 100)
    p.restart_rate()  # the speed changed: ×10
    for i in range(1, 4):
        now[0] = 4 + i * 0.1
        p.update(400 + i * 100, 10_000)
    assert p.eta_seconds() == pytest.approx((10_000 - 700) / 1000)


async def test_batch_list_stays_where_the_user_scrolled_back():
    app = instant_demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        screen = await until_verdict(app, pilot)
        await pilot.pause()  # the verdict's layout settles (the list re-follows after the pane shrank)
        pane = screen.pane("A")
        log = pane.query_one("#batches", Log)
        assert log.scroll_y == log.max_scroll_y > 0
        log.scroll_to(y=0, animate=False)
        await pilot.pause()
        last = pane.summary.batches[-1]
        pane.apply([ev.BatchDone(run="A", index=last.index + 1, start=last.end, n_tokens=10, n_ubatches=1,
                                 reason="n_batch", t_start_ms=last.t_ms, t_ms=last.t_ms + 1)])
        await pilot.pause()
        assert log.scroll_y == 0, "scrolled back: the new batch does not yank the list"
        log.scroll_end(animate=False)
        await pilot.pause()
        pane.apply([ev.BatchDone(run="A", index=last.index + 2, start=last.end + 10, n_tokens=10, n_ubatches=1,
                                 reason="n_batch", t_start_ms=last.t_ms + 1, t_ms=last.t_ms + 2)])
        await pilot.pause()
        assert log.scroll_y == log.max_scroll_y and log.lines[-1].split()[0] == str(last.index + 2)


async def test_app_shows_the_cli_defaults():
    from replayer.cli import build_parser

    ns = build_parser().parse_args(["replay", "x.jsonl"])
    d = ReplayConfig()
    assert (ns.batch_size, ns.ubatch_size, ns.ctx_checkpoints, ns.a, ns.b, ns.gpu) == \
        (d.n_batch, d.n_ubatch, d.ctx_checkpoints, d.a, d.b, d.gpu)
    app = ReplayerApp(demo=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        s = app.screen
        assert s.query_one("#n-batch", Input).value == str(ns.batch_size)
        assert s.query_one("#n-ubatch", Input).value == str(ns.ubatch_size)
        assert s.query_one("#ctx-checkpoints", Input).value == str(ns.ctx_checkpoints)
        assert s.read_config() == ReplayConfig(backend=s.read_config().backend)


def test_help_shows_defaults_and_every_option_has_help(capsys):
    from replayer.cli import build_parser

    ap = build_parser()
    for argv in (["replay", "--help"], ["schedule", "--help"], ["builds", "install", "--help"]):
        with pytest.raises(SystemExit):
            ap.parse_args(argv)
    out = capsys.readouterr().out
    assert "(default: 512)" in out and "(default: 2048)" in out and "(default: cpu)" in out

    def walk(parser):
        for action in parser._actions:
            if action.option_strings and action.dest != "help":
                assert action.help, f"{parser.prog} {action.option_strings} has no help"
            choices = getattr(action, "choices", None)
            if isinstance(choices, dict):
                for name, sub in choices.items():
                    walk(sub)
    walk(ap)
    subs = next(a for a in ap._actions if isinstance(getattr(a, "choices", None), dict))
    assert all(c.help for c in subs._choices_actions)


def test_builds_list_has_a_header(capsys, monkeypatch, tmp_path):
    from replayer.cli import main
    from replayer.core.builds import manager

    fake = tmp_path / "llama-server"
    monkeypatch.setattr(manager, "list_builds", lambda: [manager.BuildRecord(
        build=9859, backend="cpu", binary=str(fake), source="local", created=0, key="k", entry="local-x")])
    assert main(["builds", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["build", "backend", "source", "binary"]
    assert lines[1].split()[:3] == ["b9859", "cpu", "local"]


@pytest.mark.live
async def test_live_pause_holds_events_and_cancel_stops_that_runs_server(tmp_path):
    """Real builds: pause keeps the servers computing but nothing reaches the panes; `a` stops
    run A's own server (B's keeps going) and A is marked partial/failed, never complete."""
    import json

    from replayer.core.builds import manager
    from replayer.core.engine.live import live_processes
    from replayer.core.tiny_models import make_tiny
    from helpers import agent_conversation

    for b in (9859, 10001):
        manager.install(b, "cpu")
    model = make_tiny("llama", tmp_path / "llama.gguf")
    msgs, tools = agent_conversation(rounds=40, tool_result_words=80)
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"messages": msgs, "tools": tools}))
    prep = prepare(body, ReplayConfig(a="9859", b="10001", engine="live", backend="cpu", n_batch=64, n_ubatch=64,
                                      parallel_runs=True,  # both servers at once: cancel must stop only A's
                                      model=str(model)))
    app = ReplayerApp(default_speed=0.0, config=prep.config, replay=prep)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: screen.pane("A").summary.n_batches > 0
                       and screen.pane("B").summary.n_batches > 0, timeout=120)
        await pilot.press("space")
        assert "servers keep running" in screen.sub_title
        held, queued = screen.n_events, sum(len(b) for b in screen.buffers.values())
        await wait_for(pilot, lambda: sum(len(b) for b in screen.buffers.values()) > queued, timeout=60)
        assert screen.n_events == held, "paused: events are held back, not shown"
        await pilot.press("space")
        port = screen.pane("A").summary.settings["port"]
        server_a = next(p for p in live_processes() if str(port) in p.args)
        await pilot.press("a")
        await wait_for(pilot, lambda: server_a.poll() is not None, timeout=10)
        await wait_for(pilot, lambda: screen.comparison is not None, timeout=300)
        assert screen.comparison.a.failed == "cancelled"
        assert run_status_of(screen.comparison.a) in ("partial", "failed")
        assert screen.comparison.b.finished is not None
    assert live_processes() == []


def run_status_of(summary):
    from replayer.ui.widgets.run_pane import run_status

    return run_status(summary)


async def test_instant_events_go_in_by_slices_and_pause_holds_them(monkeypatch):
    """An instant replay's events reach the panes in slices (the event loop runs between
    them); paused, none go in; resumed, all of them, and the verdict is the core's."""
    import replayer.ui.screens.replay_feed as replay_feed

    monkeypatch.setattr(replay_feed, "DRAIN_SLICE", 40)
    prep = prepare(demo_session_path(), ReplayConfig())
    app = ReplayerApp(session=demo_session_path(), default_speed=0.0, deterministic=True)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = ReplayScreen(prep, speed=0.0, autostart=False)
        await app.push_screen(screen)
        await pilot.pause()
        events = {run: list(run_events(prep, run)) for run in ("A", "B")}
        await pilot.press("space")  # paused
        for run, evs in events.items():
            screen.buffers[run].extend(evs)
        total = sum(len(v) for v in events.values())
        screen.start_drain(total)
        await pilot.pause(0.2)
        assert screen.n_events == 0 and screen.comparison is None
        await pilot.press("space")  # resumed
        await wait_for(pilot, lambda: screen.comparison is not None)
        assert screen.n_events == total and not screen.draining
        assert screen.flushes >= max(len(v) for v in events.values()) // 40  # slices, not one flush
        core = compare(all_simulated(prep))
        assert screen.comparison.speedup == pytest.approx(core.speedup)
