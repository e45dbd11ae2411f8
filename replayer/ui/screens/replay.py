"""Two builds side by side, animated from the core's event stream, then the verdict.

Each run is a worker in its own group (cancelling A leaves B alone). Workers only append
events to a per-run buffer; a 20 Hz timer drains the buffers into the panes inside one
``batch_update``, so a run producing thousands of events a second costs ~20 repaints.
An instant replay hands over all its events at once and is drained right after the
screen's first frame: one pass through the panes, one layout, one repaint.
"""

from __future__ import annotations

import asyncio
import gc
from collections import deque
from datetime import datetime
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import Footer, Header, Static
from textual.worker import Worker, WorkerState, get_current_worker

from replayer.core import export, paths
from replayer.core.compare import Comparison
from replayer.core.engine import events as ev
from replayer.core.engine.simulate import apaced
from replayer.core.replay import Prepared, simulated_events
from replayer.ui.widgets.comparison import ComparisonTable
from replayer.ui.widgets.run_pane import RunPane

FLUSH_HZ = 20
MAX_EVENTS_PER_FLUSH = 20000  # per run and frame: a huge instant run spreads over a few frames
SPEEDS = {"1": 1.0, "2": 10.0, "3": 0.0}  # ×1, ×10, instant


class ReplayScreen(Screen):
    BINDINGS = [
        Binding("space", "toggle_pause", "pause/resume"),
        Binding("1", "speed('1')", "×1"),
        Binding("2", "speed('2')", "×10"),
        Binding("3", "speed('3')", "instant"),
        Binding("a", "cancel('A')", "cancel A"),
        Binding("b", "cancel('B')", "cancel B"),
        # in the help screen and the command palette, not the footer: each footer key is a
        # widget, and the footer was a fifth of the time to mount this screen
        Binding("r", "restart", "replay again", show=False),
        Binding("e", "export('md')", "export", show=False),
        Binding("s", "screenshot", "screenshot", show=False),
        Binding("escape", "back", "setup"),
    ]

    def __init__(self, prepared: Prepared, speed: float = 1.0, live_model: str | None = None,
                 autostart: bool = True) -> None:
        super().__init__()
        self.autostart = autostart
        self.prep = prepared
        self.speed = speed
        self.live_model = live_model
        self.pause = asyncio.Event()
        self.pause.set()
        self.buffers: dict[str, deque] = {"A": deque(), "B": deque()}
        self.n_events = 0  # drained into the panes
        self.flushes = 0
        self.comparison: Comparison | None = None
        self.advice: list[str] = []
        self.verdict_pending = False
        self.finished: set[str] = set()

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="panes"):
            yield RunPane("A", id="pane-A")
            yield RunPane("B", id="pane-B")
        with Vertical(id="summary"):
            yield Static("replaying…", id="verdict")
            yield ComparisonTable(id="comparison")
        yield Footer()

    def on_mount(self) -> None:
        gc.freeze()  # the prepared session is long-lived: no full GC pass should scan it again
        s = self.prep.session
        self.title = f"replayer — {Path(s.path).name}"
        self.sub_title = f"{s.format} · {self.prep.n_tokens:,} tokens"
        for run in ("A", "B"):
            lay = self.prep.layouts[run]
            self.pane(run).set_layout(lay.n_tokens, [(sp.role, sp.start) for sp in lay.spans])
        self.set_interval(1 / FLUSH_HZ, self.flush)
        if self.autostart:
            self.start_runs()

    def pane(self, run: str) -> RunPane:
        return self.query_one(f"#pane-{run}", RunPane)

    # -- runs -----------------------------------------------------------------------------
    def start_runs(self) -> None:
        for run in ("A", "B"):
            if self.prep.config.engine == "live":
                self.run_live(run)
            else:
                # after the screen's first frame: mounting, painting and scheduling each run
                # are separate steps of the event loop, not one long stall
                self.call_after_refresh(self.run_simulated, run)

    @work(group="run-A", exit_on_error=False, name="sim-A", exclusive=True)
    async def _sim_a(self) -> None:
        await self._simulate("A")

    @work(group="run-B", exit_on_error=False, name="sim-B", exclusive=True)
    async def _sim_b(self) -> None:
        await self._simulate("B")

    def run_simulated(self, run: str) -> Worker:
        return self._sim_a() if run == "A" else self._sim_b()

    async def _simulate(self, run: str) -> None:
        buf = self.buffers[run]
        n = 0
        try:
            # a few ms even for thousands of batches; in a thread it would hold the GIL
            # against the UI for longer than that (the render it overlaps took 3x as long)
            events = list(simulated_events(self.prep, run))
            # thousands of long-lived events: keep them (and the app's own start-up objects)
            # out of the garbage collector's full passes, one of which cost ~80 ms mid-replay
            gc.freeze()
            if not self.speed and self.pause.is_set():  # instant: all at once, the flush paces the UI
                buf.extend(events)
                self.call_later(self.flush)  # now (the screen is painted), not at the next 20 Hz tick
                return
            async for e in apaced(iter(events), lambda: self.speed, pause=self.pause):
                buf.append(e)
                n += 1
                if n % 256 == 0:
                    await asyncio.sleep(0)  # instant mode must still let the UI breathe
        except asyncio.CancelledError:
            buf.append(ev.RunFailed(run=run, error="cancelled"))
            raise
        except Exception as exc:  # a failing run is shown, never crashes the app
            buf.append(ev.RunFailed(run=run, error=f"{type(exc).__name__}: {exc}"))

    def run_live(self, run: str) -> Worker:
        return self.run_worker(lambda: self._live(run), group=f"run-{run}", name=f"live-{run}", thread=True,
                               exit_on_error=False, exclusive=True)

    def _live(self, run: str) -> None:
        from replayer.core.engine.live import installed_run_events

        cfg = self.prep.config
        buf = self.buffers[run]
        worker = get_current_worker()
        gen = installed_run_events(run, cfg.a if run == "A" else cfg.b, cfg.backend or "cpu", cfg.knobs(),
                                   Path(self.live_model or ""), self.prep.request.body)
        try:
            for e in gen:
                buf.append(e)
                if worker.is_cancelled:
                    buf.append(ev.RunFailed(run=run, error="cancelled"))
                    break
        finally:
            gen.close()  # stops the server

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            run = "A" if event.worker.group == "run-A" else "B"
            self.buffers[run].append(ev.RunFailed(run=run, error=str(event.worker.error)))
            self.notify(f"run {run} failed: {event.worker.error}", severity="error")

    # -- coalescing -----------------------------------------------------------------------
    def flush(self) -> None:
        drained = {}
        for run, buf in self.buffers.items():
            items = []
            while buf and len(items) < MAX_EVENTS_PER_FLUSH:
                items.append(buf.popleft())
            if items:
                drained[run] = items
        if not drained:
            return
        self.flushes += 1
        with self.app.batch_update():
            for run, items in drained.items():
                self.n_events += len(items)
                self.pane(run).apply(items)
                if any(isinstance(e, (ev.RunFinished, ev.RunFailed)) for e in items):
                    self.finished.add(run)
        if self.finished == {"A", "B"} and self.comparison is None:
            self.show_verdict()

    def show_verdict(self) -> None:
        if self.verdict_pending:
            return
        self.verdict_pending = True
        self._advise(Comparison(self.pane("A").summary, self.pane("B").summary))  # the panes saw every event

    @work(thread=True, group="advice", exclusive=True, exit_on_error=False)
    def _advise(self, cmp: Comparison) -> None:
        """The advice simulates a dozen variants (~0.1 s): off the UI thread, shown with the verdict."""
        from replayer.core.advise import advice_for

        try:
            lines = advice_for(self.prep, cmp)
        except Exception as exc:  # advice is a bonus: never lose the verdict over it
            lines = [f"advice unavailable: {exc}"]
        if get_current_worker().is_cancelled:
            return
        self.app.call_from_thread(self._show_verdict, cmp, lines)

    def _show_verdict(self, cmp: Comparison, advice: list[str]) -> None:
        self.comparison = cmp
        self.advice = advice
        self.query_one("#verdict", Static).update(f"[b]{cmp.verdict()}[/b]", layout=False)
        self.query_one("#comparison", ComparisonTable).show(cmp.rows(), advice)
        self.post_message(self.Finished(cmp))

    class Finished(Message):
        def __init__(self, comparison: Comparison) -> None:
            super().__init__()
            self.comparison = comparison

    # -- actions --------------------------------------------------------------------------
    def action_toggle_pause(self) -> None:
        if self.pause.is_set():
            self.pause.clear()
            self.notify("paused (space to resume)")
        else:
            self.pause.set()

    def action_speed(self, key: str) -> None:
        self.speed = SPEEDS[key]
        self.notify({"1": "speed ×1", "2": "speed ×10", "3": "instant"}[key])

    def action_cancel(self, run: str) -> None:
        self.workers.cancel_group(self, f"run-{run}")

    def action_restart(self) -> None:
        for run in ("A", "B"):
            self.workers.cancel_group(self, f"run-{run}")
            self.buffers[run].clear()
            self.pane(run).reset()
        self.workers.cancel_group(self, "advice")
        self.n_events = 0
        self.finished.clear()
        self.comparison = None
        self.verdict_pending = False
        self.query_one("#verdict", Static).update("replaying…", layout=False)
        self.query_one("#comparison", ComparisonTable).clear()
        self.call_after_refresh(self.start_runs)

    def action_back(self) -> None:
        for run in ("A", "B"):
            self.workers.cancel_group(self, f"run-{run}")
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
            return
        # opened straight on this replay (replay --app): go to its setup instead of a blank screen
        from replayer.ui.screens.setup import SetupScreen

        self.app.switch_screen(SetupScreen(self.prep.session, self.prep.config))

    def export_path(self, suffix: str) -> Path:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        return paths.export_dir() / f"replayer-{stamp}.{suffix}"

    def action_export(self, fmt: str = "md") -> None:
        if self.comparison is None:
            self.notify("the runs have not finished yet", severity="warning")
            return
        try:
            dest = export.write(self.comparison, fmt, self.export_path(fmt), self.prep.meta(), advice=self.advice)
        except OSError as exc:
            self.notify(f"export failed: {exc}", severity="error")
            return
        self.notify(f"exported {dest}")

    def action_screenshot(self) -> None:
        dest = self.export_path("svg")
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            self.app.write_svg(dest)
        except OSError as exc:
            self.notify(f"screenshot failed: {exc}", severity="error")
            return
        self.notify(f"screenshot {dest}")
