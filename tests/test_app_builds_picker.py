"""The builds screen, the setup's install offer, the picker's facts and empty state, screenshots."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, Select, Static

from replayer.core.builds import manager, toolchain
from replayer.core.builds.catalog import GENERATIONS
from replayer.core.replay import ReplayConfig, demo_session_path
from replayer.core.session import load_session
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.builds import BuildsScreen, ConfirmInstall, overall
from replayer.ui.screens.picker import DEMO_KEY, PickerScreen
from replayer.ui.screens.setup import SetupScreen, build_options

from conftest import FIXTURES
from helpers import start_from_setup, wait_for



def test_overall_progress_runs_through_the_stages_in_order():
    seq = [("index", 0), ("download", 0.5), ("download", 1), ("extract", 0), ("configure", 0), ("compile", 0.1),
           ("compile", 0.9), ("link", 0.99), ("done", 1)]
    values = [overall(s, f) for s, f in seq]
    assert values == sorted(values) and values[0] == 0 and values[-1] == 1.0
    assert overall("compile", 0.5) > overall("configure", 1.0)


def test_setup_dropdowns_mark_installed_builds():
    opts = dict((v, label) for label, v in build_options({9859: ["cpu"], 12345: ["vulkan"]}))
    assert opts["9859"].endswith("✓ cpu") and "✓" not in opts["10001"]
    assert opts["12345"].startswith("b12345") and opts["12345"].endswith("✓ vulkan")


async def test_builds_screen_catalog_marks_and_a_refused_toolchain():
    installed = {r.build: r.backend for r in manager.list_builds()}
    app = ReplayerApp()
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await pilot.pause()
        await pilot.press("ctrl+b")
        await wait_for(pilot, lambda: isinstance(app.screen, BuildsScreen))
        screen = app.screen
        t = screen.query_one("#catalog", DataTable)
        assert t.row_count == len(GENERATIONS)
        for gen in GENERATIONS:
            first, last = gen.first_build, gen.last_build
            row = t.get_row(gen.value)
            assert row[2] == f"b{gen.representative_build}"
            inside = [n for n in installed if first <= n and (last is None or n <= last)]
            for n in inside:
                assert f"b{n} ✓" in row[3]
            if not inside:
                assert row[3] == "—"
        # Enter on a generation fills in its example build
        t.move_cursor(row=0)
        await pilot.press("enter")
        assert screen.query_one("#install-number", Input).value == str(GENERATIONS[0].representative_build)
        assert app.focused is screen.query_one("#install")  # not the field: `c`, `l`, `i` stay keys
        vulkan = toolchain.check("vulkan")
        screen.query_one("#install-backend", Select).value = "vulkan"
        await pilot.pause()
        assert str(screen.query_one("#toolchain", Static).render()) == vulkan.line()
        if vulkan.ok:
            pytest.skip("this machine has a Vulkan toolchain")
        screen.query_one("#install-number", Input).value = "10001"
        await pilot.press("enter")  # Enter on the Install button installs
        await wait_for(pilot, lambda: screen.installing is None and "vulkan" in str(screen.query_one("#stage").render()))
        stage = str(screen.query_one("#stage", Static).render())
        assert "cannot compile b10001 vulkan build needs" in stage and stage.count("b10001") == 1
        assert any("cannot compile" in n.message for n in app._notifications)


async def test_builds_screen_install_shows_stages_and_cancels(monkeypatch):
    """Fault injection: an install that reports stages until the screen's progress callback
    cancels it (the callback is what the manager calls between compiler output lines)."""
    seen = []

    def fake_install(build, backend, progress=None, jobs=None):
        for stage, frac in [("index", 0.0), ("download", 0.5), ("extract", 0.0), ("configure", 0.0)]:
            progress(stage, frac)
        i = 0
        while True:  # compile until cancelled
            i += 1
            progress("compile", min(0.99, i / 1000))
            seen.append(i)
            time.sleep(0.005)

    monkeypatch.setattr(manager, "install", fake_install)
    app = ReplayerApp()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await app.push_screen(BuildsScreen(install=[(9763, "cpu")]))
        screen = app.screen
        await wait_for(pilot, lambda: "compile" in str(screen.query_one("#stage").render()))
        bar = screen.query_one("#install-progress")
        assert 0 < bar.fraction < 1
        await pilot.press("c")
        await wait_for(pilot, lambda: screen.installing is None)
        assert "cancelled" in str(screen.query_one("#stage", Static).render())
        n = len(seen)
        await pilot.pause(0.1)
        assert len(seen) == n, "the install stopped"


async def test_live_run_with_a_missing_build_offers_to_install_it(tmp_path):
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    app = ReplayerApp(session=FIXTURES / "pi/small-v3.jsonl")
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        s = app.screen
        s.query_one("#engine", Select).value = "live"
        await pilot.pause()
        assert s.query_one("#backend", Select).value == "cpu"
        s.query_one("#gguf", Input).value = str(gguf)
        s.query_one("#build-a-custom", Input).value = "9763"
        assert manager.list_builds() == [], "a non-live test sees an empty build cache (conftest)"
        await pilot.press("ctrl+r")
        await wait_for(pilot, lambda: isinstance(app.screen, ConfirmInstall))
        assert "b9763" in str(app.screen.query_one(Static).render())
        await pilot.press("escape")
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        # B is the default b10001: neither is in the (empty) build cache, both are named
        assert "b9763, b10001 not installed for cpu" in str(s.query_one("#setup-error", Static).render())


async def test_picker_rows_read_the_sessions_and_empty_state_names_the_folders(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("PI_CODING_AGENT_SESSION_DIR", "PI_CODING_AGENT_DIR", "CLAUDE_CONFIG_DIR", "CODEX_HOME",
                "XDG_DATA_HOME"):
        monkeypatch.delenv(var, raising=False)
    demo = load_session(demo_session_path())
    app = ReplayerApp()
    async with app.run_test(size=(140, 40)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, PickerScreen)
        t = screen.query_one("#sessions", DataTable)
        await wait_for(pilot, lambda: t.get_cell(DEMO_KEY, "messages") != "…")
        assert t.get_cell(DEMO_KEY, "messages") == f"{len(demo.messages):,}"
        assert f"{demo.n_tool_results} tool results" in t.get_cell(DEMO_KEY, "title")
        await app.workers.wait_for_complete()
        setup_estimate = None
        empty = str(screen.query_one("#picker-empty", Static).render())
        assert "No agent sessions found" in empty
        assert str(tmp_path / ".claude" / "projects") in empty and str(tmp_path / ".codex" / "sessions") in empty
        assert "Press o" in empty
        # the demo's token estimate is the setup screen's
        tokens = t.get_cell(DEMO_KEY, "tokens")
        await pilot.press("d")
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        setup_estimate = str(app.screen.query_one("#estimate", Static).render())
        assert f"≈ {tokens} prompt tokens" in setup_estimate


async def test_picker_shows_title_project_and_tokens_of_found_sessions(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("PI_CODING_AGENT_SESSION_DIR", raising=False)
    monkeypatch.delenv("PI_CODING_AGENT_DIR", raising=False)
    d = tmp_path / ".pi" / "agent" / "sessions" / "proj"
    d.mkdir(parents=True)
    src = FIXTURES / "pi" / "small-v3.jsonl"
    (d / "s.jsonl").write_bytes(src.read_bytes())
    s = load_session(src)
    app = ReplayerApp()
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        t = app.screen.query_one("#sessions", DataTable)
        key = str(d / "s.jsonl")
        await wait_for(pilot, lambda: t.get_cell(key, "messages") != "…")
        assert t.get_cell(key, "messages") == f"{len(s.messages):,}"
        first = next(m for m in s.messages if m.role == "user")
        want = s.title or " ".join(str(first.content if isinstance(first.content, str) else first.content[0].text).split())
        assert t.get_cell(key, "title") == want[:60]
        assert t.get_cell(key, "project") == (Path(s.cwd).name if s.cwd else "")
        assert int(t.get_cell(key, "tokens").replace(",", "")) > 0
        assert not app.screen.query_one("#picker-empty").display


async def test_textual_screenshot_command_works_without_a_downloads_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/Downloads
    dest_dir = tmp_path / "not" / "there" / "yet"
    monkeypatch.setenv("REPLAYER_EXPORT_DIR", str(dest_dir))
    app = ReplayerApp()
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        await pilot.pause()
        saved = app.deliver_screenshot()
        await pilot.pause()
        assert saved is not None and Path(saved).parent == dest_dir.resolve()
        assert Path(saved).read_text().lstrip().startswith("<svg")
        assert any(saved in n.message for n in app._notifications), "the toast names the file in full"


def test_builtin_themes_are_the_checkouts_top_level_themes_folder():
    from replayer.ui import themes

    from conftest import REPO

    assert themes.BUNDLED_DIR == REPO / "themes"
    assert {p.stem for p in themes.BUNDLED_DIR.glob("*.toml")} >= {"replayer-dark", "replayer-light", "high-contrast"}
