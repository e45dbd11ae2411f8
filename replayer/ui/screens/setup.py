"""Pick builds A and B, the engine, backend, GPU, model and knobs, then replay.

Keyboard first: Tab/shift+Tab walk every control, Enter/Space/↓ open a dropdown and Enter
confirms inside it (no screen-wide Enter may steal that key), Enter on a text field or on the
Replay button starts, and ctrl+r starts from anywhere. The Replay bar is docked, so it stays
on screen at 80×24 however far the form scrolls.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Header, Input, Label, Select, Static

from replayer.core import what_ifs
from replayer.core.builds.catalog import BUILD_PRESETS, parse_build
from replayer.core.builds import manager
from replayer.core.errors import ReplayerError
from replayer.core.hardware import presets
from replayer.core.options import option
from replayer.core.replay import ReplayConfig, prepare
from replayer.core.session import Session
from replayer.ui.widgets.key_footer import KeyFooter

LIVE_BACKEND = "cpu"  # what `builds install` compiles by default: the backend a live run starts on


def choice_options(name: str) -> list[tuple[str, str]]:
    """A Select's (label, value) rows from the option table's choices."""
    return [(label, value) for value, label in option(name).choices or ()]


#: the setup screen's text fields: (control id, option name), typed and ranged as the CLI's
TEXT_FIELDS = (("n-batch", "batch_size"), ("n-ubatch", "ubatch_size"), ("cms", "cms"),
               ("ctx-checkpoints", "ctx_checkpoints"))
MODE_OPTIONS = choice_options("mode")
WHAT_IF_OPTIONS = [("none — the session as recorded", what_ifs.NONE),
                   *((w.option, w.name) for w in what_ifs.WHAT_IFS)]


def build_options(installed: dict[int, list[str]] | None = None,
                  sources: list | None = None) -> list[tuple[str, str]]:
    """The A/B choices: the catalog's presets and installed releases (✓ with their backends),
    then the installed source builds by label (a patched release, a commit: the fix to demo)."""
    installed = manager.installed_backends() if installed is None else installed
    sources = manager.installed_sources() if sources is None else sources

    def mark(number: int) -> str:
        backends = installed.get(number)
        return f"  ✓ {','.join(backends)}" if backends else ""

    opts = [(label + mark(int(number)), number) for number, label in BUILD_PRESETS]
    known = {n for n, _ in BUILD_PRESETS}
    for number, backends in sorted(installed.items()):
        if str(number) not in known:
            opts.append((f"b{number} — installed{mark(number)}", str(number)))
    seen = {v for _, v in opts}
    for rec in sources:
        if rec.label and rec.label not in seen:
            seen.add(rec.label)
            opts.append((f"{rec.label} — from source, {rec.generation or 'live only'}  ✓ {rec.backend}", rec.label))
    return opts


def missing_builds(cfg: ReplayConfig) -> list[int]:
    """Build numbers a live run needs that are not installed for its backend."""
    installed = manager.installed_backends()
    out = []
    for spec in (cfg.a, cfg.b):
        if "/" in spec:
            continue
        number = parse_build(spec).number
        if number is not None and (cfg.backend or LIVE_BACKEND) not in installed.get(number, []) \
                and number not in out:
            out.append(number)
    return out


class NoFocusScroll(VerticalScroll, can_focus=False):
    """The form scrolls to whatever control has focus; the container itself is no Tab stop
    (Textual's default made the first Tab land on an invisible focus)."""


class SetupScreen(Screen):
    BINDINGS = [
        Binding("ctrl+r", "start", "Replay", priority=True),
        Binding("ctrl+b", "builds", "builds"),
        Binding("ctrl+g", "bisect", "bisect A…B", show=False),
        Binding("escape", "back", "sessions"),
    ]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (34, "-tall")]

    def __init__(self, session: Session, config: ReplayConfig | None = None, mode: str = "resume",
                 what_if: str = "none", server_args: str | None = None) -> None:
        super().__init__()
        self.session = session
        self.config = config or ReplayConfig()
        self.mode = mode
        self.what_if = what_if
        self.server_args = server_args  # the session replay's llama-server command line, as typed

    def compose(self) -> ComposeResult:
        s = self.session
        roles = ", ".join(f"{k} {v}" for k, v in s.role_counts().items())
        c = self.config
        yield Header()
        with NoFocusScroll(id="setup"):
            yield Static(f"[b]{s.title or Path(s.path).name}[/b]\n{s.format} · {len(s.messages)} messages ({roles}) · "
                         f"{s.n_tool_results} tool results · model {s.model or '?'}", id="session-summary")
            yield Static("", id="estimate")
            opts = build_options()
            with Grid(id="form"):
                for which in ("a", "b"):
                    yield Label(f"build {which.upper()}")
                    with Horizontal():
                        yield from self._build_row(which, getattr(c, which), opts)
                yield Label("mode")
                yield Select(MODE_OPTIONS, value=self.mode, allow_blank=False, id="mode")
                # a what-if of the session mode only: shown (and a Tab stop) when that mode is chosen
                yield Label("what-if", id="what-if-label")
                yield Select(WHAT_IF_OPTIONS, value=self.what_if, allow_blank=False, id="what-if")
                # the server as the user runs it (slots, host cache): the session replay's too
                yield Label("server flags", id="server-args-label")
                yield Input(self.server_args or "", id="server-args", tooltip=option("server_args").help,
                            placeholder="e.g. -np 4 --cache-ram 8192 (empty: the build's defaults)")
                yield Label("engine")
                yield Select(choice_options("engine"), value=c.engine, allow_blank=False, id="engine")
                yield from self._cost_model_rows(c)
                yield Label("GGUF (live)")
                yield Input(placeholder="path to a .gguf model for live runs", id="gguf")
                yield Label("-b / -ub")
                with Horizontal():
                    yield self._field("n-batch", c)
                    yield self._field("n-ubatch", c)
                yield Label("-cms / ckpts")
                with Horizontal():
                    yield self._field("cms", c, placeholder="build's")
                    yield self._field("ctx-checkpoints", c)
        with Vertical(id="actions"):
            yield Static("", id="setup-error")
            with Horizontal(id="action-bar"):
                yield Static("Tab / shift+Tab move · Enter or Space opens a list · ↑↓ Enter chooses",
                             id="setup-keys")
                yield Button("Builds…  ctrl+b", id="open-builds")
                # last in the focus order: Tab from it goes round to build A, the first control
                yield Button("Replay  ⏎ / ctrl+r", variant="primary", id="start")
        yield KeyFooter()

    @staticmethod
    def _build_row(which: str, spec: str, opts: list[tuple[str, str]]) -> ComposeResult:
        """A build's list and its free field: a build the list does not offer (a path, a number
        not installed, a source build since removed) is shown in the field, the list on its default."""
        offered = any(v == spec for _, v in opts)
        default = option(which).default
        yield Select(opts, value=spec if offered else default, allow_blank=False, id=f"build-{which}")
        yield Input("" if offered else spec, placeholder="or build number / path", id=f"build-{which}-custom")

    @staticmethod
    def _field(wid: str, c: ReplayConfig, placeholder: str = "") -> Input:
        """A text field of the option table: the config's value, the CLI's flags as its tooltip."""
        opt = option(dict(TEXT_FIELDS)[wid])
        return Input(opt.text(c), placeholder=placeholder, id=wid, type="integer", tooltip=", ".join(opt.flags))

    def _cost_model_rows(self, c: ReplayConfig) -> ComposeResult:
        """GPU, backend and model: what the cost model prices, each with the config's value
        even when it is not a preset (an alias, ``custom:…``, the user's GGUF)."""
        yield Label("GPU")
        gpus = [(g.name, g.id) for g in presets.GPUS.values()]
        if c.gpu not in presets.GPUS:  # an alias or custom:… from the command line
            gpus.append((presets.gpu(c.gpu).name, c.gpu))
        yield Select(gpus, value=c.gpu, allow_blank=False, id="gpu")
        yield Label("backend")
        yield Select([(v, k) for k, v in presets.BACKENDS.items()],
                     value=c.backend or (LIVE_BACKEND if c.engine == "live" else presets.gpu(c.gpu).backend),
                     allow_blank=False, id="backend")
        yield Label("model")
        models = [(m.name, m.id) for m in presets.MODELS.values()]
        if c.model not in presets.MODELS:  # the user's GGUF, simulated from its header
            models.append((f"GGUF: {presets.model(c.model).name}", c.model))
        yield Select(models, value=c.model, allow_blank=False, id="model")

    def on_mount(self) -> None:
        self.title = "replayer — setup"
        n = None
        try:
            from replayer.core.prompt.layout import compute_layout
            from replayer.core.session import build_request

            req = build_request(self.session)
            n = compute_layout(req.messages, req.body.get("tools"), template=self.config.template_obj()).n_tokens
            missing = f"  ·  not stored: {', '.join(req.missing)}" if req.missing else ""
        except ReplayerError as exc:
            missing = f"  ·  {exc}"
        self.query_one("#estimate", Static).update(f"≈ {n:,} prompt tokens (estimate){missing}" if n else missing)
        self.show_what_if(self.mode == "session")
        self.query_one("#start", Button).focus()

    def show_what_if(self, shown: bool) -> None:
        """The session mode's own controls (what-if, server flags): shown, and Tab stops, in that mode only."""
        for sel in ("#what-if-label", "#what-if", "#server-args-label", "#server-args"):
            self.query_one(sel).display = shown

    def on_resize(self) -> None:
        # borderless controls below 34 rows: the whole form fits 80×24 with the Replay bar
        compact = self.size.height < 34
        for w in self.query("Select, Input, Button"):
            w.compact = compact

    def on_screen_resume(self) -> None:
        self.refresh_builds()

    def refresh_builds(self) -> None:
        """Installed marks change after the builds screen installed something."""
        opts = build_options()
        for sid in ("#build-a", "#build-b"):
            sel = self.query_one(sid, Select)
            value = sel.value
            sel.set_options(opts)
            if any(v == value for _, v in opts):
                sel.value = value

    def read_config(self) -> ReplayConfig:
        """The config the controls say; each text field parsed by its option's type and range (the
        CLI's), an empty one is the option's default."""

        def val(sel: str) -> str:
            return str(self.query_one(sel, Select).value)

        texts = {option(name).field: option(name).parse_text(self.query_one(f"#{wid}", Input).value)
                 for wid, name in TEXT_FIELDS}

        def build(which: str) -> str:
            custom = self.query_one(f"#build-{which}-custom", Input).value.strip()
            if not custom:
                return val(f"#build-{which}")
            if "/" not in custom:
                parse_build(custom)  # a clear error for anything that is not a build
            return custom

        # the options the screen does not show (the CLI's --timeout, --threads, …) stay as they came
        return replace(self.config, a=build("a"), b=build("b"), engine=val("#engine"), gpu=val("#gpu"),
                       backend=val("#backend"), model=val("#model"), **texts)

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.value is Select.NULL:
            return
        if event.select.id == "gpu" and val_of(self, "#engine") != "live":
            self.query_one("#backend", Select).value = presets.gpu(str(event.value)).backend
        elif event.select.id == "mode":
            self.show_what_if(event.value == "session")
            self.app.remember_mode(str(event.value))
        elif event.select.id == "engine":
            # a live run starts an installed build on this machine: the CPU build `builds install`
            # makes by default; the simulated engine prices the GPU preset's backend
            self.query_one("#backend", Select).value = (
                LIVE_BACKEND if event.value == "live" else presets.gpu(val_of(self, "#gpu")).backend)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "start":
            self.action_start()
        elif event.button.id == "open-builds":
            self.action_builds()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_start()

    def action_start(self) -> None:
        from replayer.ui.screens.replay import ReplayScreen

        err = self.query_one("#setup-error", Static)
        try:
            cfg = self.read_config()
            cfg.knobs()
            chosen = replace(cfg)  # what the controls say, remembered once the replay starts
            live_model = self.query_one("#gguf", Input).value.strip() or None
            if cfg.engine == "live":
                if not live_model:
                    raise ReplayerError("a live replay needs a GGUF model path")
                cfg.model = live_model
            if cfg.engine == "simulated":
                cfg.cost()  # an impossible GPU/backend pair is said here, not in both panes
            missing = missing_builds(cfg) if cfg.engine == "live" else []
            if missing:
                self.offer_install(missing, cfg.backend or LIVE_BACKEND)
                return
            if self.tokenizer_build_started(cfg):
                return  # the start runs again once the tokenizer is built
            if val_of(self, "#mode") == "session":  # its turns are laid out on the session screen
                screen = self.session_screen(cfg)  # an unknown server flag is the error line, as in the CLI
                err.update("")
                self.app.remember_options(chosen)
                self.app.remember_server_args(screen.spec.server_args_typed)
                self.app.push_screen(screen)
                return
            prep = prepare(self.session.path, cfg, session=self.session)
        except ReplayerError as exc:
            err.update(f"[b red]{exc}[/]")
            self.notify(str(exc), severity="error")
            return
        err.update("")
        self.app.remember_options(chosen)
        self.app.push_screen(ReplayScreen(prep, speed=self.app.default_speed))

    def tokenizer_build_started(self, cfg: ReplayConfig) -> bool:
        """A GGUF vocabulary seen for the first time is built (and cached) on a worker thread,
        its stages shown under the form; then the start goes on. False: nothing to build."""
        from replayer.core.prompt import gguf_tokenizer

        tok = cfg.tokenizer_eff
        if not tok.startswith("gguf:") or not gguf_tokenizer.needs_build(tok[len("gguf:"):]):
            return False
        status = self.query_one("#setup-error", Static)
        status.update("[b]first use of this vocabulary: building its tokenizer…[/]")

        def progress(stage: str, done: int, total: int) -> None:
            self.app.call_from_thread(status.update, f"[b]first use of this vocabulary: {stage} ({done}/{total})[/]")

        def build() -> None:
            try:
                gguf_tokenizer.load(tok[len("gguf:"):], progress=progress)
            except ReplayerError as exc:
                self.app.call_from_thread(status.update, f"[b red]{exc}[/]")
                return
            self.app.call_from_thread(self.action_start)

        self.run_worker(build, thread=True, exclusive=True, group="tokenizer-build")
        return True

    def session_screen(self, cfg: ReplayConfig) -> Screen:
        """The session replay the controls say; the server flags checked for A and B first
        (``check_server_args``: an unknown flag raises before any screen opens)."""
        from replayer.core.server.session import check_server_args
        from replayer.ui.screens.session import SessionScreen, SessionSpec

        typed = self.query_one("#server-args", Input).value.strip()
        spec = SessionSpec(Path(self.session.path), cfg, session=self.session,
                           server_args=check_server_args(typed, cfg) if typed else None, server_args_typed=typed or None,
                           **what_ifs.switches(val_of(self, "#what-if")))
        return SessionScreen(spec, speed=self.app.default_speed)

    def offer_install(self, missing: list[int], backend: str) -> None:
        from replayer.ui.screens.builds import BuildsScreen, ConfirmInstall

        names = ", ".join(f"b{n}" for n in missing)
        self.query_one("#setup-error", Static).update(f"[b]{names} not installed for {backend}[/]")

        def answered(yes: bool | None) -> None:
            if yes:
                self.app.push_screen(BuildsScreen(install=[(n, backend) for n in missing]))

        self.app.push_screen(ConfirmInstall(missing, backend), answered)

    def action_builds(self) -> None:
        from replayer.ui.screens.builds import BuildsScreen

        self.app.push_screen(BuildsScreen())

    def action_bisect(self) -> None:
        """Bisect between the two chosen builds; B is taken as the good one (edit on the screen)."""
        from replayer.ui.screens.bisect import BisectScreen

        try:
            cfg = self.read_config()
        except ReplayerError as exc:
            self.query_one("#setup-error", Static).update(f"[b red]{exc}[/]")
            return
        gguf = self.query_one("#gguf", Input).value.strip() or None
        self.app.push_screen(BisectScreen(self.session, cfg, good=cfg.b, bad=cfg.a, live_model=gguf))

    def action_back(self) -> None:
        self.app.pop_screen()


def val_of(screen: Screen, sel: str) -> str:
    return str(screen.query_one(sel, Select).value)
