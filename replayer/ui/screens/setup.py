"""Pick builds A and B, the engine, backend, GPU, model and knobs; Enter starts the replay."""

from __future__ import annotations

from pathlib import Path

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Button, Footer, Header, Input, Label, Select, Static

from replayer.core.builds.catalog import BUILD_PRESETS, parse_build
from replayer.core.errors import ReplayerError
from replayer.core.hardware import presets
from replayer.core.replay import ReplayConfig, prepare
from replayer.core.session import Session


def build_options() -> list[tuple[str, str]]:
    opts = list((label, number) for number, label in BUILD_PRESETS)
    try:
        from replayer.core.builds import manager

        known = {n for n, _ in BUILD_PRESETS}
        for rec in manager.list_builds():
            if str(rec.build) not in known:
                opts.append((f"b{rec.build} — installed ({rec.backend})", str(rec.build)))
                known.add(str(rec.build))
    except Exception:  # a damaged build cache must not keep the app from starting
        pass
    return opts


class SetupScreen(Screen):
    BINDINGS = [Binding("enter", "start", "replay", priority=True), Binding("escape", "back", "sessions")]

    def __init__(self, session: Session, config: ReplayConfig | None = None) -> None:
        super().__init__()
        self.session = session
        self.config = config or ReplayConfig.seed()

    def compose(self) -> ComposeResult:
        s = self.session
        roles = ", ".join(f"{k} {v}" for k, v in s.role_counts().items())
        c = self.config
        yield Header()
        with VerticalScroll(id="setup"):
            yield Static(f"[b]{s.title or Path(s.path).name}[/b]\n{s.format} · {len(s.messages)} messages ({roles}) · "
                         f"{s.n_tool_results} tool results · model {s.model or '?'}", id="session-summary")
            yield Static("", id="estimate")
            with Grid(id="form"):
                yield Label("build A")
                with Horizontal():
                    yield Select(build_options(), value=c.a, allow_blank=False, id="build-a")
                    yield Input(placeholder="or a build number / binary path", id="build-a-custom")
                yield Label("build B")
                with Horizontal():
                    yield Select(build_options(), value=c.b, allow_blank=False, id="build-b")
                    yield Input(placeholder="or a build number / binary path", id="build-b-custom")
                yield Label("engine")
                yield Select([("simulated (cost model)", "simulated"), ("live (real llama-server)", "live")],
                             value=c.engine, allow_blank=False, id="engine")
                yield Label("GPU")
                gpus = [(g.name, g.id) for g in presets.GPUS.values()]
                if c.gpu not in presets.GPUS:  # an alias or custom:… from the command line
                    gpus.append((presets.gpu(c.gpu).name, c.gpu))
                yield Select(gpus, value=c.gpu, allow_blank=False, id="gpu")
                yield Label("backend")
                yield Select([(v, k) for k, v in presets.BACKENDS.items()], value=presets.gpu(c.gpu).backend,
                             allow_blank=False, id="backend")
                yield Label("model")
                models = [(m.name, m.id) for m in presets.MODELS.values()]
                if c.model not in presets.MODELS:  # the user's GGUF, simulated from its header
                    models.append((f"GGUF: {presets.model(c.model).name}", c.model))
                yield Select(models, value=c.model, allow_blank=False, id="model")
                yield Label("GGUF (live)")
                yield Input(placeholder="path to a .gguf model for live runs", id="gguf")
                yield Label("-b / -ub")
                with Horizontal():
                    yield Input(str(c.n_batch), id="n-batch", type="integer")
                    yield Input(str(c.n_ubatch), id="n-ubatch", type="integer")
                yield Label("-cms / --ctx-checkpoints")
                with Horizontal():
                    yield Input("", placeholder="build default", id="cms", type="integer")
                    yield Input(str(c.ctx_checkpoints), id="ctx-checkpoints", type="integer")
            with Vertical(id="actions"):
                yield Static("", id="setup-error")
                yield Button("Replay  ⏎", variant="primary", id="start")
        yield Footer()

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
        self.query_one("#start", Button).focus()

    def read_config(self) -> ReplayConfig:
        def val(sel: str) -> str:
            return str(self.query_one(sel, Select).value)

        def num(sel: str, default: int | None) -> int | None:
            text = self.query_one(sel, Input).value.strip()
            if not text:
                return default
            try:
                return int(text)
            except ValueError:
                raise ReplayerError(f"{sel.lstrip('#')} must be a whole number, got {text!r}") from None

        def build(which: str) -> str:
            custom = self.query_one(f"#build-{which}-custom", Input).value.strip()
            if not custom:
                return val(f"#build-{which}")
            if "/" not in custom:
                parse_build(custom)  # a clear error for anything that is not a build
            return custom

        return ReplayConfig(a=build("a"), b=build("b"), engine=val("#engine"), gpu=val("#gpu"),
                            backend=val("#backend"), model=val("#model"), n_batch=num("#n-batch", 2048),
                            n_ubatch=num("#n-ubatch", 512), checkpoint_min_step=num("#cms", None),
                            ctx_checkpoints=num("#ctx-checkpoints", 32))

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "gpu" and event.value is not Select.NULL:
            self.query_one("#backend", Select).value = presets.gpu(str(event.value)).backend

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "start":
            self.action_start()

    def action_start(self) -> None:
        from replayer.ui.screens.replay import ReplayScreen

        err = self.query_one("#setup-error", Static)
        try:
            cfg = self.read_config()
            cfg.knobs()
            live_model = self.query_one("#gguf", Input).value.strip() or None
            if cfg.engine == "live" and not live_model:
                raise ReplayerError("a live replay needs a GGUF model path")
            from replayer.core.replay import cost_for

            if cfg.engine == "simulated":
                cost_for(cfg)
            prep = prepare(self.session.path, cfg, session=self.session)
        except ReplayerError as exc:
            err.update(f"[b red]{exc}[/]")
            self.notify(str(exc), severity="error")
            return
        err.update("")
        self.app.push_screen(ReplayScreen(prep, speed=self.app.default_speed, live_model=live_model))

    def action_back(self) -> None:
        self.app.pop_screen()
