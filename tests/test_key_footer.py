"""The footer recomposes its keys only when the keys it shows change (focus moves that change
nothing cost no remount), and still follows a change that does show."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import Input

from replayer.core.replay import ReplayConfig, demo_session_path, prepare
from replayer.ui.app import ReplayerApp
from replayer.ui.widgets.key_footer import KeyFooter
from replayer.ui.widgets.timeline import Timeline

from helpers import wait_for


class Shown(Input):
    BINDINGS = [Binding("f5", "app.other", "shown key")]


class FooterApp(App):
    BINDINGS = [Binding("f2", "noop", "always")]

    def compose(self) -> ComposeResult:
        yield Input(id="plain-1")
        yield Input(id="plain-2")
        yield Shown(id="shown")
        yield KeyFooter()

    def action_noop(self) -> None:
        pass

    def action_other(self) -> None:
        pass


def keys(app: App) -> list[str]:
    return [k.key for k in app.screen.query("FooterKey")]


async def test_footer_recomposes_only_when_its_keys_change():
    app = FooterApp()
    async with app.run_test(size=(80, 10)) as pilot:
        footer = app.query_one(KeyFooter)
        await wait_for(pilot, lambda: "f2" in keys(app))
        first = list(app.screen.query("FooterKey"))
        for _ in range(3):  # focus moves that do not change a shown key: the same key widgets
            await pilot.press("tab")
            app.set_focus(app.query_one("#plain-1"))
            await pilot.pause()
        assert list(app.screen.query("FooterKey")) == first
        app.set_focus(app.query_one("#shown"))  # a shown key appears: recomposed
        await wait_for(pilot, lambda: "f5" in keys(app))
        assert "f2" in keys(app)
        app.set_focus(app.query_one("#plain-2"))
        await wait_for(pilot, lambda: "f5" not in keys(app))
        assert footer.is_attached


async def test_replay_screen_composes_its_footer_keys_once():
    prep = prepare(demo_session_path(), ReplayConfig())
    app = ReplayerApp(default_speed=0.0, config=prep.config, replay=prep)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: screen.comparison is not None)
        await pilot.pause()
        shown = {k.key for k in screen.query("FooterKey")}
        assert {"r", "e", "escape"} <= shown
        first = list(screen.query("FooterKey"))
        screen.query(Timeline).first().focus()  # the timeline's own keys are not shown
        await pilot.press("tab", "tab")
        await pilot.pause()
        assert list(screen.query("FooterKey")) == first


async def test_footer_keys_are_made_compact_or_not_before_they_mount(monkeypatch):
    """Each key is made with the footer's ``compact`` (the palette's key with its own, compact):
    none switches its ``-compact`` class after mounting, which restyled it twice (the data
    binding still calls the watcher once, with the value the key already has)."""
    from textual.widgets._footer import FooterKey

    switched = []
    original = FooterKey._watch_compact

    def watch(self, compact: bool) -> None:
        if self.has_class("-compact") != compact:
            switched.append(self.key)
        original(self, compact)

    monkeypatch.setattr(FooterKey, "_watch_compact", watch)
    app = FooterApp()
    async with app.run_test(size=(80, 10)) as pilot:
        footer = app.query_one(KeyFooter)
        await wait_for(pilot, lambda: "f2" in keys(app))
        for key in app.screen.query(FooterKey):
            palette = key.has_class("-command-palette")
            assert key.compact == (True if palette else footer.compact) == key.has_class("-compact")
        assert any(k.has_class("-command-palette") for k in app.screen.query(FooterKey))
        assert switched == []


async def test_the_footer_offers_pause_while_running_and_export_after_the_verdict():
    """While the runs go: pause and cancel, export dimmed; with the verdict: export live, the
    speeds (for replay again) kept, and pressing space no longer pauses anything."""
    prep = prepare(demo_session_path(), ReplayConfig())
    app = ReplayerApp(default_speed=1.0, config=prep.config, replay=prep)
    async with app.run_test(size=(100, 30)) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: "space" in keys(app))
        running = {k.key: k for k in screen.query("FooterKey")}
        assert {"space", "1", "2", "3", "a", "b", "r", "e", "escape"} <= set(running)
        assert running["e"].has_class("-disabled") and not running["space"].has_class("-disabled")
        await pilot.press("3")  # instant: the verdict comes
        await wait_for(pilot, lambda: screen.comparison is not None and "space" not in keys(app))
        done = {k.key: k for k in screen.query("FooterKey")}
        assert {"1", "2", "3", "r", "e", "escape"} <= set(done) and not done["e"].has_class("-disabled")
        assert not {"space", "a", "b"} & set(done)
        await pilot.press("space")
        assert not screen.paused
