"""Two builds side by side, animated from the core's event stream, then the verdict.

Each run is a worker in its own group (cancelling A leaves B alone). Workers only append
events to a per-run buffer; a 20 Hz timer drains the buffers into the panes inside one
``batch_update``, so a run producing thousands of events a second costs ~20 repaints.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from datetime import datetime
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.containers import Horizontal, Vertical
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static
from textual.worker import Worker, WorkerState, get_current_worker

from replayer.core import export, paths
from replayer.core.compare import Comparison, RunSummary
from replayer.core.engine import events as ev
from replayer.core.engine.simulate import apaced
from replayer.core.replay import Prepared, simulated_events
from replayer.ui.widgets.run_pane import RunPane

FLUSH_HZ = 20
MAX_EVENTS_PER_FLUSH = 1500  # per run: a burst (instant mode) spreads over a few frames
SPEEDS = {"1": 1.0, "2": 10.0, "3": 0.0}  # ×1, ×10, instant


class ReplayScreen(Screen):
    BINDINGS = [
        Binding("space", "toggle_pause", "pause/resume"),
        Binding("1", "speed('1')", "×1"),
        Binding("2", "speed('2')", "×10"),
        Binding("3", "speed('3')", "instant"),
        Binding("a", "cancel('A')", "cancel A"),
        Binding("b", "cancel('B')", "cancel B"),
        Binding("r", "restart", "replay again"),
        Binding("e", "export('md')", "export"),
        Binding("s", "screenshot", "screenshot"),
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
        self.events: list[ev.Event] = []
        self.flushes = 0
        self.max_gap_ms = 0.0
        self._last_flush = 0.0
        self.comparison: Comparison | None = None
        self.finished: set[str] = set()
        self.started_at = 0.0

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="panes"):
            yield RunPane("A", id="pane-A")
            yield RunPane("B", id="pane-B")
        with Vertical(id="summary"):
            yield Static("replaying…", id="verdict")
            yield DataTable(id="comparison", show_cursor=False)
        yield Footer()

    def on_mount(self) -> None:
        s = self.prep.session
        self.title = f"replayer — {Path(s.path).name}"
        self.sub_title = f"{s.format} · {self.prep.n_tokens:,} tokens"
        for run in ("A", "B"):
            lay = self.prep.layouts[run]
            self.pane(run).set_layout(lay.n_tokens, [(sp.role, sp.start) for sp in lay.spans])
        t = self.query_one("#comparison", DataTable)
        t.add_columns("", "A", "B")
        self.set_interval(1 / FLUSH_HZ, self.flush)
        if self.autostart:
            self.start_runs()

    def pane(self, run: str) -> RunPane:
        return self.query_one(f"#pane-{run}", RunPane)

    # -- runs -----------------------------------------------------------------------------
    def start_runs(self) -> None:
        self.started_at = time.monotonic()
        for run in ("A", "B"):
            if self.prep.config.engine == "live":
                self.run_live(run)
            else:
                self.run_simulated(run)

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
            # the schedule of a long run takes tens of ms: compute it off the event loop
            events = await asyncio.to_thread(lambda: list(simulated_events(self.prep, run)))
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
        now = time.monotonic()
        if self._last_flush:
            self.max_gap_ms = max(self.max_gap_ms, (now - self._last_flush) * 1000)
        self._last_flush = now
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
                self.events.extend(items)
                self.pane(run).apply(items)
                if any(isinstance(e, (ev.RunFinished, ev.RunFailed)) for e in items):
                    self.finished.add(run)
        if self.finished == {"A", "B"} and self.comparison is None:
            self.show_verdict()

    def show_verdict(self) -> None:
        cmp = Comparison(RunSummary.from_events("A", self.events), RunSummary.from_events("B", self.events))
        self.comparison = cmp
        self.query_one("#verdict", Static).update(f"[b]{cmp.verdict()}[/b]")
        t = self.query_one("#comparison", DataTable)
        t.clear()
        t.add_rows(cmp.rows())
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
        self.events.clear()
        self.finished.clear()
        self.comparison = None
        self.query_one("#verdict", Static).update("replaying…")
        self.query_one("#comparison", DataTable).clear()
        self.call_after_refresh(self.start_runs)

    def action_back(self) -> None:
        for run in ("A", "B"):
            self.workers.cancel_group(self, f"run-{run}")
        self.app.pop_screen()

    def export_path(self, suffix: str) -> Path:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        return paths.export_dir() / f"replayer-{stamp}.{suffix}"

    def action_export(self, fmt: str = "md") -> None:
        if self.comparison is None:
            self.notify("the runs have not finished yet", severity="warning")
            return
        try:
            dest = export.write(self.comparison, fmt, self.export_path(fmt), self.prep.meta())
        except OSError as exc:
            self.notify(f"export failed: {exc}", severity="error")
            return
        self.notify(f"exported {dest}")

    def action_screenshot(self) -> None:
        dest = self.export_path("svg")
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            self.app.save_screenshot(filename=dest.name, path=str(dest.parent))
        except OSError as exc:
            self.notify(f"screenshot failed: {exc}", severity="error")
            return
        self.notify(f"screenshot {dest}")
