"""The replayer app: sessions → setup → side-by-side replay → verdict."""

from __future__ import annotations

import gc
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterable

from rich.text import Text
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from replayer.core import options, settings as settings_mod
from replayer.core.errors import ReplayerError
from replayer.core.prepare import PROMPT_LOG
from replayer.core.replay import Prepared, ReplayConfig, demo_session_path
from replayer.core.session import load_session
from replayer.ui import themes as theme_files


SETTINGS_NOTICE_S = 15


class ReplayerApp(App):
    CSS_PATH = "replayer.tcss"
    TITLE = "replayer"
    BINDINGS = [Binding("question_mark,f1", "help", "help"), Binding("ctrl+q", "quit", "quit")]

    def __init__(self, session: str | Path | None = None, demo: bool = False, default_speed: float = 1.0,
                 config: ReplayConfig | None = None, theme_dirs: list[Path] | None = None,
                 deterministic: bool = False, replay: Prepared | Any = None,
                 screenshot: Path | None = None, loaded: Any = None) -> None:
        super().__init__()
        self.loaded = loaded  # ``session`` already imported (the CLI checked it opens)
        self.replay = replay  # open straight on this replay (``replayer replay … --app``; a SessionSpec too)
        self.screenshot_to = screenshot  # headless: save the finished replay here, then exit
        self.shot_error: str | None = None
        self.deterministic = deterministic  # snapshots: no ETA, no animations
        self.start_session = Path(session) if session else (demo_session_path() if demo else None)
        self.default_speed = default_speed
        self.settings, self._settings_damaged = settings_mod.load_settings()
        # the CLI's options (``replay … --app``), else the setup's as last started (settings.json),
        # else the CLI's defaults: one option table renders all three
        self.config, self._option_problems = (config, []) if config is not None else \
            options.from_settings(self.settings.replay)
        self.theme_dirs = theme_dirs or []
        # themes are chosen before the first stylesheet parse: set in on_mount, the theme
        # made Textual parse and apply all CSS a second time
        loaded, self.theme_errors = theme_files.load_all(self.theme_dirs)
        for t in loaded:
            self.register_theme(t)
        wanted = self.settings.theme
        self.theme = wanted if wanted in self.available_themes else (
            "replayer-dark" if "replayer-dark" in self.available_themes else "textual-dark")

    def get_theme_variable_defaults(self) -> dict[str, str]:
        return dict(theme_files.REASON_VARS)

    def on_mount(self) -> None:
        # everything imported and built so far lives as long as the app: freezing it keeps
        # full garbage-collector passes (74 ms each here, a visible stall) small
        gc.freeze()
        if self.deterministic:
            self.animation_level = "none"
        for err in self.theme_errors:
            self.notify(f"theme skipped: {err}", severity="warning", timeout=8)
        # the settings' problems stay up long enough to be read on a slow first start (Textual's default: 5 s)
        if self._settings_damaged:
            self.notify(f"settings file is damaged; using defaults ({self._settings_damaged})", severity="warning",
                        markup=False, timeout=SETTINGS_NOTICE_S)
        for problem in self._option_problems:
            self.notify(f"settings: {problem}; using the default", severity="warning", markup=False,
                        timeout=SETTINGS_NOTICE_S)
        if hasattr(self.replay, "open_screen"):  # a watch (``screens.watch.WatchSpec``)
            self.push_screen(self.replay.open_screen())
            return
        if self.replay is not None:
            from replayer.ui.screens.replay import ReplayScreen
            from replayer.ui.screens.session import SessionScreen, SessionSpec

            kind = SessionScreen if isinstance(self.replay, SessionSpec) else ReplayScreen
            self.push_screen(kind(self.replay, speed=self.default_speed))
            return
        from replayer.ui.screens.picker import PickerScreen  # screens load when first shown

        self.push_screen(PickerScreen())
        self.call_after_refresh(self._warm)
        if self.start_session is not None:
            self.open_session(self.start_session)

    def _warm(self) -> None:
        """The replay screens' code and CSS, loaded once the first screen is up (``ui.warm``)."""
        from replayer.ui.warm import warm_replay_styles

        warm_replay_styles(self)

    def on_replay_screen_finished(self, message) -> None:
        if self.screenshot_to is None:
            return
        cmp = message.comparison
        # after the next layout: the verdict's area only takes room (is displayed) once it exists
        self.call_after_refresh(self._shoot, 1 if (cmp.a.failed or cmp.b.failed) else 0)

    def _shoot(self, code: int) -> None:
        dest = self.screenshot_to
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            self.write_svg(dest)
        except FileExistsError:
            self.shot_error = f"cannot write {dest}: {dest.parent} is not a folder"
        except OSError as exc:
            self.shot_error = f"cannot write {dest}: {exc.strerror or exc}"
        self.exit(return_code=2 if self.shot_error else code)

    # -- settings ---------------------------------------------------------------------------
    def save_settings(self, **kw) -> None:
        try:
            settings_mod.save_settings(**kw)
        except (OSError, ValueError) as exc:
            self.notify(f"cannot save settings: {exc}", severity="warning", markup=False)

    def remember_mode(self, mode: str) -> None:
        """The setup's mode, kept for the next session opened (now and in later runs)."""
        if mode in ("resume", "session") and mode != self.settings.mode:
            self.settings.mode = mode
            self.save_settings(mode=mode)

    def remember_server_args(self, text: str | None) -> None:
        """The setup's server flags as a session replay started with them: users run one server
        setup, so the next session opened starts with it (now and in later runs)."""
        if text != self.settings.server_args:
            self.settings.server_args = text
            self.save_settings(server_args=text)

    def remember_options(self, config: ReplayConfig) -> None:
        """The setup's replay options as just started: the next session opened starts with them
        (now and in later runs); settings.json keeps only what differs from the defaults."""
        self.config = config
        saved = options.to_settings(config)
        if saved != self.settings.replay:
            self.settings.replay = saved
            self.save_settings(replay=saved)

    def watch_theme(self, theme: str) -> None:
        if self.is_mounted:
            self.save_settings(theme=theme)

    # -- flow -------------------------------------------------------------------------------
    def open_session(self, path: Path) -> None:
        """The setup of the session at ``path``; when it cannot be imported, the picker stays
        with the reason under the path field, which holds the path to fix."""
        try:
            loaded, self.loaded = self.loaded, None
            session = loaded if loaded is not None and Path(loaded.path) == Path(path).expanduser() else load_session(path)
        except ReplayerError as exc:
            text = str(exc).replace("; force one with --format", "")  # the CLI's option, not the app's
            self.notify(text, title="cannot open session", severity="error", timeout=10, markup=False)
            self.call_after_refresh(self._show_open_error, path, text)  # the picker may not be up yet
            return
        for w in session.warnings:
            self.notify(w, severity="warning")
        # a prompt folder's requests have no resume replay: its setup opens on the session mode
        mode = "session" if session.format == PROMPT_LOG else self.settings.mode
        self.push_screen(self.setup_screen(session, self._observed_config(session), mode=mode,
                                           server_args=self.settings.server_args))

    def _observed_config(self, session) -> ReplayConfig:
        """The config for ``session``: a ``--log-prompts-dir`` folder's observed side is the
        server's log beside it, as ``replay FOLDER --mode session`` finds it (said in a notice);
        any other session has none (the last folder's log must not follow the next session)."""
        from replayer.core.session_observed import log_beside_folder

        if session.format != PROMPT_LOG:
            return replace(self.config, observed=None) if self.config.observed else self.config
        try:
            found = log_beside_folder(session.path)
        except ReplayerError as exc:  # two logs beside it: which one is the user's to say
            self.notify(str(exc).replace(" with --observed FILE", " (replayer replay --observed FILE)"),
                        title="no observed side", severity="warning", timeout=10, markup=False)
            found = None
        if found is not None:
            self.notify(f"observed side: {found}, the server's log beside the folder", timeout=8, markup=False)
        return replace(self.config, observed=str(found) if found is not None else None)

    def _show_open_error(self, path: Path, text: str) -> None:
        from textual.widgets import Input

        try:
            self.screen.query_one("#picker-error").update(Text(text, style="bold red"))
            field = self.screen.query_one("#path", Input)
        except Exception:
            return  # not on the picker
        field.value = str(path)
        field.focus()

    def setup_screen(self, session, config: ReplayConfig, **choices) -> Screen:
        """The setup screen of a session (the replay screen goes back to it without importing it);
        ``choices``: the mode and what-if it opens with."""
        from replayer.ui.screens.setup import SetupScreen

        return SetupScreen(session, config, **choices)

    def write_svg(self, dest: Path) -> None:
        """The screen as SVG. Textual writes spaces as &#160;; librsvg-based viewers still
        drop them at the start of a text run (right-aligned numbers) unless told to keep them."""
        from replayer.core.redact import redact

        svg = redact(self.export_screenshot())  # the title shows the session's file name
        dest.write_text(svg.replace("<svg ", '<svg xml:space="preserve" ', 1), encoding="utf-8")

    def deliver_screenshot(self, filename: str | None = None, path: str | None = None,
                           time_format: str | None = None) -> str | None:
        """Textual's "Screenshot" command, saved where our exports go (created when missing):
        Textual's default folder (~/Downloads) may not exist and the save then failed."""
        from datetime import datetime

        folder = Path(path) if path else self.settings.export_folder()
        dest = (folder / (filename or f"replayer-{datetime.now():%Y%m%d-%H%M%S}.svg")).resolve()
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            self.write_svg(dest)
        except OSError as exc:
            self.notify(f"screenshot failed: {dest}: {exc.strerror or exc}", severity="error")
            return None
        self.notify(f"screenshot saved: {dest}", timeout=10)
        return str(dest)

    def action_help(self) -> None:
        from replayer.ui.screens.help import HelpScreen  # Markdown: 35 ms of imports

        self.push_screen(HelpScreen())

    def action_builds(self) -> None:
        from replayer.ui.screens.builds import BuildsScreen

        self.push_screen(BuildsScreen())

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        from replayer.ui.screens.replay import ReplayScreen
        from replayer.ui.screens.setup import SetupScreen

        if isinstance(screen, ReplayScreen):
            yield SystemCommand("Export report (Markdown)", "write a bug-report table", lambda: screen.action_export("md"))
            yield SystemCommand("Export JSON", "runs, batches, checkpoints", lambda: screen.action_export("json"))
            yield SystemCommand("Export CSV", "one row per batch", lambda: screen.action_export("csv"))
            yield SystemCommand("Save SVG screenshot", "to the export folder", screen.action_screenshot)
            yield SystemCommand("Replay again", "restart both runs", screen.action_restart)
        yield SystemCommand("Builds", "install and list llama-server builds", self.action_builds)
        if isinstance(screen, SetupScreen):
            yield SystemCommand("Swap builds A and B", "exchange the two builds", lambda: _swap(screen))
            yield SystemCommand("Bisect builds A…B", "find the build where this session changed",
                                screen.action_bisect)
        yield SystemCommand("Help", "keys and colours", self.action_help)
        from replayer.ui.palette import screen_commands

        yield from screen_commands(screen, {"help", "quit", "builds", "replay again", "swap builds a and b"})


def _swap(screen) -> None:
    from textual.widgets import Select

    a, b = screen.query_one("#build-a", Select), screen.query_one("#build-b", Select)
    a.value, b.value = b.value, a.value


def run_app(session: str | None = None, demo: bool = False, loaded: Any = None) -> int:
    if session is not None:
        p = Path(session).expanduser()
        if not p.exists():
            raise ReplayerError(f"no such file: {p}")
    ReplayerApp(session=session, demo=demo, default_speed=DEFAULT_APP_SPEED, loaded=loaded).run()
    return 0


DEFAULT_APP_SPEED = 10.0  # ×10: the seed session's prefill takes ~70 s of modelled time
SCREENSHOT_SIZE = (160, 48)  # columns, rows of a headless screenshot


def run_replay_app(prep, speed: float, screenshot: Path | None = None) -> int:
    """``replayer replay … --app``: the app opened on this replay (a resume's ``Prepared`` or a
    session's ``SessionSpec``); with ``screenshot``, headless until the verdict, which is saved
    as SVG (a picture for a bug report)."""
    app = ReplayerApp(default_speed=speed, config=prep.config, replay=prep, screenshot=screenshot)
    app.run(headless=screenshot is not None, size=SCREENSHOT_SIZE if screenshot is not None else None)
    if app.shot_error:
        raise ReplayerError(app.shot_error)
    return app.return_code or 0
