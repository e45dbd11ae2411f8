"""The app, driven with Pilot through the real flow; numbers shown = the core's numbers."""

from __future__ import annotations

import pytest
from textual.widgets import Log, Static

from replayer.core.compare import compare
from replayer.core.reasons import REASON_LABELS
from replayer.core.replay import ReplayConfig, all_simulated, demo_session_path, prepare
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.picker import PickerScreen
from replayer.ui.screens.replay import ReplayScreen
from replayer.ui.screens.setup import SetupScreen
from replayer.ui.widgets.comparison import ComparisonTable
from replayer.ui.widgets.run_pane import RunPane

from conftest import FIXTURES
from helpers import shown_lines, start_from_setup, wait_for



@pytest.fixture(scope="module")
def core_comparison():
    prep = prepare(demo_session_path(), ReplayConfig())  # the app's defaults are the CLI's
    return compare(all_simulated(prep))


async def test_full_flow_shows_the_core_numbers(core_comparison):
    app = ReplayerApp(default_speed=0.0)
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, PickerScreen)
        await pilot.press("d")  # the bundled demo
        screen = await start_from_setup(app, pilot)
        await wait_for(pilot, lambda: screen.comparison is not None)
        cmp = core_comparison
        shown = screen.comparison
        assert str(screen.query_one("#verdict", Static).render()) == cmp.verdict()
        for run, core in (("A", cmp.a), ("B", cmp.b)):
            pane = screen.query_one(f"#pane-{run}", RunPane)
            assert pane.summary.n_batches == core.n_batches
            assert pane.summary.breaks() == core.breaks()
            batch_lines = pane.query_one("#batches", Log).lines  # the header sits above the list
            assert len(batch_lines) == core.n_batches
            assert [l.split()[4] for l in batch_lines] == [REASON_LABELS[b.reason] for b in core.batches]
            ck_lines = [l for l in pane.query_one("#ckpts", Log).lines if l.startswith("+")]
            assert len(ck_lines) == len(core.created)
            assert [int(l.split()[1].replace(",", "")) for l in ck_lines] == [c.n_tokens for c in core.created]
        table = screen.query_one("#comparison", ComparisonTable)
        assert table.rows == cmp.rows()

        def shows_every_row() -> bool:  # the table is laid out on the frame after its rows arrive
            lines = shown_lines(table)
            return all(any(m in line and a in line and b in line for line in lines) for m, a, b in cmp.rows())

        await wait_for(pilot, shows_every_row)
        assert shown.speedup == pytest.approx(cmp.speedup)
        # coalescing: thousands of events, a few dozen repaint batches
        assert screen.pane("A").events_applied + screen.pane("B").events_applied == screen.n_events
        assert screen.n_events == len(all_simulated(prepare(demo_session_path(), ReplayConfig())))
        assert screen.flushes < screen.n_events / 10


async def test_cancel_a_leaves_b_running():
    app = ReplayerApp(session=demo_session_path(), default_speed=1.0)
    async with app.run_test(size=(140, 45)) as pilot:
        screen = await start_from_setup(app, pilot)
        await wait_for(pilot, lambda: screen.pane("A").summary.n_batches > 0)
        await pilot.press("a")
        await pilot.pause(0.2)
        assert screen.pane("A").summary.failed == "cancelled"
        assert screen.pane("B").summary.finished is None
        await pilot.press("3")  # instant: B runs to the end
        await wait_for(pilot, lambda: screen.comparison is not None)
        assert screen.pane("B").summary.finished is not None
        assert "run A failed: cancelled" in str(screen.query_one("#verdict", Static).render())


async def test_bad_file_shows_error_not_crash(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\x00\x01garbage")
    app = ReplayerApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("o")
        await pilot.press(*str(bad))
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert isinstance(app.screen, PickerScreen)
        assert "binary file" in str(app.screen.query_one("#picker-error", Static).render())
        assert any("binary file" in n.message for n in app._notifications)


async def test_bad_knob_is_reported_on_setup():
    app = ReplayerApp(session=FIXTURES / "pi/small-v3.jsonl")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        app.screen.query_one("#n-ubatch").value = "9999"
        await pilot.press("enter")
        await pilot.pause(0.1)
        assert isinstance(app.screen, SetupScreen)
        assert "larger than -b" in str(app.screen.query_one("#setup-error", Static).render())


async def test_themes_loaded_and_bad_theme_toasts(tmp_path):
    (tmp_path / "broken.toml").write_text('name = "broken"\nprimary = "not-a-colour"\n')
    (tmp_path / "mine.toml").write_text('name = "mine"\nprimary = "#112233"\n')
    app = ReplayerApp(theme_dirs=[tmp_path])
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        names = set(app.available_themes)
        assert {"replayer-dark", "replayer-light", "high-contrast", "mine"} <= names
        assert "broken" not in names
        assert any("broken.toml" in n.message and "not a colour" in n.message for n in app._notifications)
        assert app.theme == "replayer-dark"


async def test_export_and_screenshot(tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAYER_EXPORT_DIR", str(tmp_path))
    app = ReplayerApp(session=FIXTURES / "pi/small-v3.jsonl", default_speed=0.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ReplayScreen) and app.screen.comparison is not None)
        await pilot.press("e")
        await pilot.press("s")
        await pilot.pause(0.2)
    md = list(tmp_path.glob("*.md"))
    svg = list(tmp_path.glob("*.svg"))
    assert len(md) == 1 and md[0].read_text().startswith("## Prefill replay: b9859 vs b10001")
    assert len(svg) == 1 and svg[0].read_text().lstrip().startswith("<svg")


async def test_small_terminal_stays_readable():
    app = ReplayerApp(session=demo_session_path(), default_speed=0.0)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ReplayScreen) and app.screen.comparison is not None)
        await pilot.pause()  # the verdict's room exists after the next layout, not at once
        for run in ("A", "B"):
            pane = app.screen.pane(run)
            assert pane.region.width >= 45 and pane.region.height >= 10
        assert app.screen.query_one("#verdict").region.height >= 1


@pytest.mark.live
async def test_failing_live_run_shows_error_and_b_finishes(tmp_path):
    from replayer.core.builds import manager
    from replayer.core.tiny_models import make_tiny

    manager.install(10001, "cpu")
    model = make_tiny("llama", tmp_path / "llama.gguf")
    cfg = ReplayConfig(a=str(tmp_path / "missing" / "llama-server"), b="10001", engine="live", model=str(model))
    prep = prepare(FIXTURES / "pi/small-v3.jsonl", cfg)
    app = ReplayerApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await app.push_screen(ReplayScreen(prep, speed=0.0))
        screen = app.screen
        await wait_for(pilot, lambda: screen.comparison is not None, timeout=120)
        assert "no such" in (screen.pane("A").summary.failed or "")
        assert screen.pane("B").summary.finished is not None and screen.pane("B").summary.engine == "live"
        assert "FAILED" in str(screen.pane("A").border_title)


async def test_custom_build_number_and_path_completion(tmp_path):
    from replayer.ui.screens.picker import PathSuggester

    (tmp_path / "sessions").mkdir()
    (tmp_path / "sessions" / "mine.jsonl").write_text("x")
    sug = PathSuggester()
    assert await sug.get_suggestion(str(tmp_path / "ses")) == str(tmp_path / "sessions") + "/"
    assert await sug.get_suggestion(str(tmp_path / "sessions") + "/") == str(tmp_path / "sessions" / "mine.jsonl")

    app = ReplayerApp(session=FIXTURES / "pi/small-v3.jsonl", default_speed=0.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        app.screen.query_one("#build-b-custom").value = "9940"
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, ReplayScreen) and app.screen.comparison is not None)
        assert app.screen.comparison.b.build == "b9940" and app.screen.comparison.b.generation == "G2a"
        await pilot.press("escape")
        await pilot.pause(0.1)
        app.screen.query_one("#build-a-custom").value = "banana"
        await pilot.press("enter")
        await pilot.pause(0.1)
        assert isinstance(app.screen, SetupScreen)
        assert "unknown build" in str(app.screen.query_one("#setup-error", Static).render())


async def test_replay_app_opens_straight_on_the_replay_and_escape_goes_to_its_setup():
    prep = prepare(FIXTURES / "pi/small-v3.jsonl", ReplayConfig(a="9859", b="10001"))
    app = ReplayerApp(default_speed=0.0, config=prep.config, replay=prep)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, ReplayScreen) and app.screen.comparison is not None)
        screen = app.screen
        core = compare(all_simulated(prep))
        assert screen.comparison.a.n_batches == core.a.n_batches and screen.comparison.b.n_batches == core.b.n_batches
        for run in ("A", "B"):
            progress = screen.pane(run).query_one("#progress")
            assert progress.fraction == 1.0 and "100.0%" in str(progress.render())
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        assert app.screen.session.path == prep.session.path
