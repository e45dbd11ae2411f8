"""Bisect builds on this session: the steps as they are measured, and each build's progress.

The search runs in a worker thread (a live one compiles and runs servers); it reports
through callbacks that hop to the UI thread. Cancel stops a compile or the next step.
"""

from __future__ import annotations

import threading
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Button, Header, Input, Label, Log, ProgressBar, Select, Static
from textual.worker import get_current_worker

from replayer.core import bisect
from replayer.core.errors import ReplayerError
from replayer.core.replay import ReplayConfig
from replayer.core.session import Session
from replayer.ui.widgets.key_footer import KeyFooter


class BisectScreen(Screen):
    BINDINGS = [
        # not a priority binding: Enter on a dropdown opens it and chooses its highlighted
        # option (a priority Enter restarted the bisection instead); in a field it starts
        Binding("enter", "start", "bisect"),
        Binding("ctrl+x", "cancel", "cancel"),
        Binding("escape", "back", "setup"),
    ]
    DEFAULT_CSS = """
    BisectScreen #bisect-form { height: auto; padding: 1 2 0 2; }
    BisectScreen #bisect-form Horizontal { height: auto; }
    BisectScreen #bisect-form Label { padding: 1 1 0 0; }
    BisectScreen #bisect-form Input { width: 14; }
    BisectScreen #bisect-form #bisect-gguf { width: 1fr; }
    BisectScreen #bisect-form Select { width: 24; }
    BisectScreen #bisect-progress-row { height: 1; padding: 0 2; }
    BisectScreen #bisect-stage { width: 36; }
    BisectScreen #bisect-steps { height: 1fr; margin: 1 2 0 2; border: round $primary; }
    BisectScreen #bisect-result { height: auto; padding: 0 2 1 2; }
    """

    def __init__(self, session: Session, config: ReplayConfig, good: str, bad: str,
                 live_model: str | None = None) -> None:
        super().__init__()
        self.session = session
        self.config = config
        self.good, self.bad = good, bad
        self.live_model = live_model
        self.cancel_flag = threading.Event()
        self.result: bisect.BisectResult | None = None
        self.steps: list[bisect.StepReport] = []

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="bisect-form"):
            with Horizontal():
                yield Label("good")
                yield Input(self.good, id="bisect-good")
                yield Label("bad")
                yield Input(self.bad, id="bisect-bad")
                yield Label("metric")
                yield Select([(m.name, m.name) for m in bisect.METRICS.values()], value="prompt_tps",
                             allow_blank=False, id="bisect-metric")
            with Horizontal():  # its own row: at 80 columns it was off the right edge
                yield Label("engine")
                yield Select([("simulated", "simulated"), ("live (build+run)", "live")],
                             value="simulated", allow_blank=False, id="bisect-engine")
                yield Label("GGUF")
                yield Input(self.live_model or "", placeholder="path to a .gguf model for a live bisection",
                            id="bisect-gguf")
                yield Button("Bisect  ⏎", variant="primary", id="bisect-start")
        with Horizontal(id="bisect-progress-row"):
            yield Static("", id="bisect-stage")
            yield ProgressBar(total=100, show_eta=False, id="bisect-progress")
        yield Log(id="bisect-steps", highlight=False)
        yield Static("", id="bisect-result")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.title = "replayer — bisect"
        self.sub_title = Path(self.session.path).name
        self.query_one("#bisect-start", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "bisect-start":
            self.action_start()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_start()

    def _number(self, sel: str) -> int:
        from replayer.core.builds.catalog import parse_build

        text = self.query_one(sel, Input).value.strip()
        b = parse_build(text)
        if b.number is None:
            raise ReplayerError(f"{sel.split('-')[-1]} needs a build number, not a generation ({text})")
        return b.number

    def action_start(self) -> None:
        if any(w.is_running for w in self.workers if w.group == "bisect"):
            self.notify("a bisection is running (ctrl+x cancels it)", severity="warning")
            return
        out = self.query_one("#bisect-result", Static)
        try:
            good, bad = self._number("#bisect-good"), self._number("#bisect-bad")
            metric = bisect.metric(str(self.query_one("#bisect-metric", Select).value))
            engine = str(self.query_one("#bisect-engine", Select).value)
            model = self.query_one("#bisect-gguf", Input).value.strip()
            if engine == "live" and not model:
                raise ReplayerError("a live bisection needs a GGUF model path")
        except ReplayerError as exc:
            out.update(f"[b red]{exc}[/]")
            self.notify(str(exc), severity="error")
            return
        self.cancel_flag.clear()
        self.steps.clear()
        self.result = None
        self.query_one("#bisect-steps", Log).clear()
        out.update("bisecting…")
        self._run(engine, good, bad, metric, model)

    @work(thread=True, group="bisect", exclusive=True, exit_on_error=False)
    def _run(self, engine: str, good: int, bad: int, metric: bisect.Metric, model: str) -> None:
        call = self.app.call_from_thread
        worker = get_current_worker()

        def on_step(step: bisect.StepReport) -> None:
            call(self._step, step, metric)

        def on_progress(build: int, stage: str, frac: float) -> None:
            if worker.is_cancelled:
                self.cancel_flag.set()
            call(self._progress, build, stage, frac)

        try:
            if engine == "live":
                res = bisect.live(self.session.path, self.config, good, bad, metric, Path(model),
                                  backend=self.config.backend or "cpu", on_step=on_step, on_progress=on_progress,
                                  cancel=self.cancel_flag)
            else:
                res = bisect.simulated(self.session.path, self.config, good, bad, metric, session=self.session,
                                       on_step=on_step)
        except ReplayerError as exc:
            call(self._failed, str(exc))
            return
        call(self._done, res)

    # -- UI thread -------------------------------------------------------------------------
    def _step(self, step: bisect.StepReport, metric: bisect.Metric) -> None:
        if not self.is_attached:  # left while the worker finished
            return
        self.steps.append(step)
        self.query_one("#bisect-steps", Log).write_line(bisect.step_line(step, metric))

    def _progress(self, build: int, stage: str, frac: float) -> None:
        if not self.is_attached:  # left while the worker finished
            return
        self.query_one("#bisect-stage", Static).update(f"b{build} {stage} {frac:.0%}")
        self.query_one("#bisect-progress", ProgressBar).update(progress=frac * 100)

    def _failed(self, message: str) -> None:
        if not self.is_attached:  # left while the worker finished
            return
        self.query_one("#bisect-result", Static).update(f"[b red]{message}[/]")
        self.notify(message, severity="error")

    def _done(self, res: bisect.BisectResult) -> None:
        if not self.is_attached:  # left while the worker finished
            return
        self.result = res
        self.query_one("#bisect-stage", Static).update(f"done: {len(res.steps)} step{'s' if len(res.steps) != 1 else ''}")
        self.query_one("#bisect-progress", ProgressBar).update(progress=100)
        lines = res.summary_lines()
        if res.found is not None:
            lines.insert(0, "threshold: " + res.threshold.describe(*res.references()))
        for bd in res.boundaries:
            prs = ", ".join(f"#{p}" for p in bd["prs"]) or "no PR known"
            lines.append(f"boundary b{bd['last']} → b{bd['first']} ({' → '.join(bd['generations'])}, {prs}): "
                         f"{bd['batches'][0]:.0f} → {bd['batches'][1]:.0f} batches")
        self.query_one("#bisect-result", Static).update("\n".join(lines))

    def action_cancel(self) -> None:
        self.cancel_flag.set()
        self.workers.cancel_group(self, "bisect")
        self.notify("cancelling the bisection")

    def action_back(self) -> None:
        if any(w.is_running for w in self.workers if w.group == "bisect"):
            self.action_cancel()
        self.app.pop_screen()
