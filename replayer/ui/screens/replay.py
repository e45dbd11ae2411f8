"""Two builds side by side, animated from the core's event stream, then the verdict.

Each run is a worker in its own group (cancelling A leaves B alone). Workers only append
events to a per-run buffer; a 20 Hz timer drains the buffers into the panes inside one
``batch_update``, so a run producing thousands of events a second costs ~20 repaints.
An instant replay hands over all its events at once and is drained right after the
screen's first frame, in slices with the event loop let through between them (keys and
timers are served), and repainted once at the end: one layout, one repaint.

A replay owns the screen: ``r`` gives the new runs fresh buffers, so anything a cancelled
worker still appends lands in a buffer nobody drains, and the verdict is built only from
the new runs. Pause holds events back in the buffers (a live server keeps computing; the
label says so). A cancelled or failed run is marked partial/failed in the panes and table.
"""

from __future__ import annotations

import asyncio
import gc
import threading
from collections import deque
from datetime import datetime
from pathlib import Path

from rich.markup import escape
from textual import events, work
from textual.app import ComposeResult
from textual.message import Message
from textual.containers import Horizontal, VerticalScroll
from textual.geometry import Size
from textual.screen import Screen
from textual.widgets import Header, Static
from textual.worker import Worker, WorkerState, get_current_worker

from replayer.core.redact import redact
from replayer.core.compare import Comparison
from replayer.core.engine import events as ev
from replayer.core.engine.simulate import apaced
from replayer.core.replay import RUNS, Prepared, is_realtime, report, run_events
from replayer.ui.screens.replay_keys import REPLAY_KEYS, offered
from replayer.ui.widgets.comparison import ComparisonTable
from replayer.ui.widgets.key_footer import KeyFooter
from replayer.ui.widgets.run_pane import RunPane, run_status
from replayer.ui.widgets.timeline import Timeline

FLUSH_HZ = 20
MAX_EVENTS_PER_FLUSH = 20000  # per run and frame: a huge instant run spreads over a few frames
DRAIN_SLICE = 1000  # per run: an instant replay's events reach the panes ~10 ms at a time
SIM_SLICE = 1000  # simulated events between two turns of the event loop
SPEEDS = {"1": 1.0, "2": 10.0, "3": 0.0}  # ×1, ×10, instant
# the collector's middle-generation passes between two full ones while a replay screen is up
# (Python's default is 10): a full pass is ~25–40 ms of the UI thread, mid-replay
FULL_GC_EVERY = 1000


def speed_label(speed: float) -> str:
    return "instant" if not speed else f"×{speed:g}"


class ReplayScreen(Screen):
    BINDINGS = REPLAY_KEYS
    PANE = RunPane  # one build's column
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-tiny"), (28, "-short"), (40, "-tall")]

    def __init__(self, prepared: Prepared, speed: float = 1.0, autostart: bool = True) -> None:
        super().__init__()
        self.autostart = autostart
        self.prep = prepared
        self.speed = speed
        self.pause = asyncio.Event()
        self.pause.set()
        self.buffers: dict[str, deque] = {"A": deque(), "B": deque()}
        self.n_events = 0  # drained into the panes
        self.flushes = 0
        self.comparison: Comparison | None = None
        self.advice: list[str] = []
        self.verdict_pending = False
        self.finished: set[str] = set()
        self.waiting_on: Worker | None = None  # live A, when B waits for it to end
        self.paused = False
        self.live_threads: dict[str, int] = {}
        self.drain_worker: Worker | None = None  # while an instant run's events go into the panes
        self.drain_left = 0  # events the drain still takes
        self.after_drain = None  # the advice's start, when the drain's last slice ended the runs
        self.resumed = False
        self.restarts = 0  # ``r`` presses: a verdict scheduled before one is dropped
        self._gc_threshold: tuple[int, int, int] | None = None  # the collector's, before this screen

    def compose(self) -> ComposeResult:
        # the size classes (-wide, -tall, ...) before anything is styled: Textual sets them on the
        # screen's first Resize, after its first layout, and the class change then restyled,
        # laid out and repainted the whole screen a second time (~90 ms on a 2-core Xeon)
        width, height = self.app.size
        self.set_classes([*self._get_breakpoint_classes(width, self.HORIZONTAL_BREAKPOINTS),
                          *self._get_breakpoint_classes(height, self.VERTICAL_BREAKPOINTS), *self.classes])
        yield Header()
        with Horizontal(id="panes"):
            yield self.PANE("A", id="pane-A")
            yield self.PANE("B", id="pane-B")
        # takes no room until there is a verdict; scrolls when the terminal is short
        with VerticalScroll(id="summary"):
            yield Static("", id="verdict")
            yield from self.summary_widgets()
        yield KeyFooter()

    def on_screen_resume(self, event: events.ScreenResume) -> None:
        """Runs before Textual's own handler: on the first resume, just after every widget
        was mounted and styled, it restyled them all again (18-35 ms of the push's stall)."""
        if not self.resumed:
            self.resumed = True
            event.refresh_styles = False

    def _screen_resized(self, size: Size) -> None:
        if size == self._compositor.size:
            # the Resize that the screen's own first layout sends, at the size it was just laid
            # out at: the layout it asks for (widgets learning their sizes) goes to the next
            # update instead of running inside the push's stall (20-30 ms)
            self.refresh(layout=True)
            return
        super()._screen_resized(size)

    def summary_widgets(self) -> ComposeResult:
        """What the verdict explains itself with (the session screen shows the turns behind it)."""
        yield ComparisonTable(id="comparison")

    def defer_full_collections(self) -> None:
        """The collector's full passes wait while this screen is up (young objects are still
        collected as often as ever): everything a replay makes lives as long as its panes, and
        a full pass over it (~25–40 ms) landed in a frame of every replay. What the replay made
        is frozen once the verdict is shown (``on_replay_screen_finished``), as the prepared
        session is before it starts, so a full pass after the screen is gone has little to scan."""
        if self._gc_threshold is None:
            self._gc_threshold = gc.get_threshold()
            young, middle, _ = self._gc_threshold
            gc.set_threshold(young, middle, FULL_GC_EVERY)

    def on_unmount(self) -> None:
        if self._gc_threshold is not None:
            gc.set_threshold(*self._gc_threshold)
            self._gc_threshold = None

    def on_replay_screen_finished(self, message: "ReplayScreen.Finished") -> None:
        gc.freeze()  # the finished runs live as long as the screen shows them (bubbles on to the app)

    def on_mount(self) -> None:
        gc.freeze()  # the prepared session is long-lived: no full GC pass should scan it again
        self.defer_full_collections()
        s = self.prep.session
        self.title = redact(Path(s.path).name)  # a file name can hold a key
        self.show_state()
        for run in ("A", "B"):
            lay = self.prep.layouts[run]
            self.pane(run).set_layout(lay.n_tokens, [(sp.role, sp.start) for sp in lay.spans])
        self.set_interval(1 / FLUSH_HZ, self.flush)
        self.call_after_refresh(self._second_frame)

    def show_lists(self) -> None:
        for run in ("A", "B"):
            self.pane(run).show_lists()

    def _second_frame(self) -> None:
        """After the screen's first paint: the panes' lists, then (a frame later) the runs."""
        self.show_lists()
        if self.autostart:
            self.start_runs()

    def pane(self, run: str) -> RunPane:
        return self.query_one(f"#pane-{run}", RunPane)

    # -- runs -----------------------------------------------------------------------------
    def start_runs(self) -> None:
        """Start the runs as the orchestrator would: real servers one after the other unless
        ``parallel_runs`` (B starts when A's worker ends), simulated ones at once."""
        if is_realtime(self.prep.config):
            first = self.run_live("A")
            if self.prep.config.parallel_runs:
                self.run_live("B")
            else:
                self.waiting_on = first
            return
        # after the screen's first frame, and B a frame after A: a run's first slice computes
        # its whole schedule (~15 ms for 5,000 batches), and both in one frame made it the
        # longest of an instant replay's start
        self.call_after_refresh(self.unless_restarted(self.run_simulated, "A"))
        self.call_after_refresh(self.call_after_refresh, self.unless_restarted(self.run_simulated, "B"))

    def unless_restarted(self, fn, *args):
        """``fn(*args)`` as a callback that does nothing once ``r`` has started a new replay
        (the new replay schedules its own runs and verdict)."""
        restarts = self.restarts

        def call() -> None:
            if restarts == self.restarts:
                fn(*args)
        return call

    def after_last_paint(self, callback) -> None:
        """``callback`` after the frame that paints the runs' last events (a repaint held back
        by an instant drain's batch would not count as one: the drain calls it after its own)."""
        if self.draining:
            self.after_drain = callback
        else:
            self.call_after_refresh(callback)

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
            # ~30 ms for 5,000 batches: on the event loop, letting it through every
            # SIM_SLICE events (in a thread it would hold the GIL against the UI for longer)
            events = []
            for e in self.events_of(run):
                events.append(e)
                if len(events) % SIM_SLICE == 0:
                    await asyncio.sleep(0)
            # thousands of long-lived events: keep them (and the app's own start-up objects)
            # out of the garbage collector's full passes, one of which cost ~80 ms mid-replay
            gc.freeze()
            if not self.speed and self.pause.is_set():  # instant: all at once, the drain paces the UI
                buf.extend(events)
                self.start_drain(len(events))  # now (the screen is painted), not at the next 20 Hz tick
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

    def events_of(self, run: str):
        """One run's event stream (the session screen streams turns instead)."""
        return run_events(self.prep, run)

    def headline(self) -> str:
        return f"{self.prep.n_tokens:,} tokens"

    def show_state(self) -> None:
        """Speed and pause in the header: visible at any terminal size, no extra row."""
        live = self.prep.config.engine == "live"
        state = f"speed {speed_label(self.speed)}" if not live else "live"
        if self.paused:
            state += " · ⏸ PAUSED — " + ("the servers keep running; events are held back (space resumes)"
                                          if live else "space resumes")
        self.sub_title = f"{self.headline()} · {state}"
        for run in ("A", "B"):
            try:
                self.pane(run).query_one("#progress").note = "paused" if self.paused else ""
            except Exception:  # not composed yet
                pass

    def run_live(self, run: str) -> Worker:
        return self.run_worker(lambda: self._live(run), group=f"run-{run}", name=f"live-{run}", thread=True,
                               exit_on_error=False, exclusive=True)

    def _live(self, run: str) -> None:
        buf = self.buffers[run]
        worker = get_current_worker()
        self.live_threads[run] = threading.get_ident()  # cancel stops this run's server, not the other's
        gen = self.events_of(run)
        try:
            for e in gen:
                buf.append(e)
                if worker.is_cancelled:
                    buf.append(ev.RunFailed(run=run, error="cancelled"))
                    break
        finally:
            gen.close()  # stops the server

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        run = "A" if event.worker.group == "run-A" else "B"
        if event.state == WorkerState.ERROR and not event.worker.is_cancelled:
            self.buffers[run].append(ev.RunFailed(run=run, error=str(event.worker.error)))
            self.notify(f"run {run} failed: {event.worker.error}", severity="error")
        if event.worker is self.waiting_on and event.state in (WorkerState.SUCCESS, WorkerState.ERROR,
                                                                WorkerState.CANCELLED):
            self.waiting_on = None
            self.run_live("B")  # one server at a time, as the CLI runs them

    # -- coalescing -----------------------------------------------------------------------
    @property
    def draining(self) -> bool:
        """An instant run's events are going into the panes (``_drain``)."""
        return self.drain_worker is not None

    def start_drain(self, n_events: int) -> None:
        """Drain ``n_events`` more in slices (only those: a live run's later events go to the
        20 Hz flush, so a steady stream cannot hold the repaint back)."""
        self.drain_left += n_events
        if not self.draining:
            self.drain_worker = self.run_worker(self._drain, group="drain", exit_on_error=False)

    async def _drain(self) -> None:
        """An instant run's events into the panes, DRAIN_SLICE at a time with the event loop
        let through between slices, and one repaint per pane: 10,000 events in one flush held
        the UI for ~60 ms, and the frame repainting both filled panes was the instant replay's
        longest (~65–125 ms on a 2-core Xeon); each pane's is about half of that."""
        try:
            while self.drain_left > 0 and not self.paused and any(self.buffers.values()):
                for run in RUNS:
                    if not self.buffers[run]:
                        continue
                    with self.app.batch_update():
                        while self.buffers[run] and self.drain_left > 0 and not self.paused:
                            self.drain_left -= self.flush(limit=self.drain_slice, draining=True, runs=(run,))
                            await asyncio.sleep(0)
                    await self.painted()
            if self.after_drain is not None:  # the batch is over: after the frame it repaints
                self.call_after_refresh(self.after_drain)
                self.after_drain = None
        finally:
            if get_current_worker() is self.drain_worker:  # not a drain that ``r`` cancelled
                self.drain_worker = None
                self.drain_left = 0

    @property
    def drain_slice(self) -> int:
        """Events per slice of an instant drain (the session screen's events cost more each)."""
        return DRAIN_SLICE

    async def painted(self) -> None:
        """Until the screen has repainted what was changed so far."""
        done = asyncio.get_running_loop().create_future()
        self.call_after_refresh(lambda: done.done() or done.set_result(None))
        await done

    def flush(self, limit: int = MAX_EVENTS_PER_FLUSH, draining: bool = False,
              runs: tuple[str, ...] | None = None) -> int:
        """Buffered events (at most ``limit`` per run) into the panes; how many.

        The 20 Hz flush takes one pane's events per tick, in turns, when both have some: a
        pane's update is repainted in a frame of its own (both in one frame made frames twice
        as long), and each pane still follows its run ten times a second."""
        if self.paused or (self.draining and not draining):
            return 0  # held back until resumed / the drain has them
        if runs is None:
            runs = tuple(run for run in RUNS if self.buffers[run])
            if len(runs) == 2:
                runs = (runs[self.flushes % 2],)
        drained = {}
        for run in runs:
            buf = self.buffers[run]
            items = []
            while buf and len(items) < limit:
                items.append(buf.popleft())
            if items:
                drained[run] = items
        if not drained:
            return 0
        self.flushes += 1
        with self.app.batch_update():
            for run, items in drained.items():
                self.n_events += len(items)
                for e in items:
                    if isinstance(e, ev.LayoutReady):  # the server's own layout replaces the estimate
                        self.pane(run).set_layout(e.n_tokens, e.spans)
                self.pane(run).apply(items)
                if any(isinstance(e, (ev.RunFinished, ev.RunFailed)) for e in items):
                    self.finished.add(run)
        if self.finished == {"A", "B"} and self.comparison is None:
            self.show_verdict()
        return sum(len(items) for items in drained.values())

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        return offered(action, self.comparison is not None)

    def show_verdict(self) -> None:
        if self.verdict_pending:
            return
        self.verdict_pending = True
        cmp = Comparison(self.pane("A").summary, self.pane("B").summary)  # the panes saw every event
        # after the frame that paints the last events: the advice thread holds the GIL for
        # 0.3-1 s, and a frame sharing it with that thread took twice its own time
        self.after_last_paint(self.unless_restarted(self._advise, cmp))

    # a description, or Textual builds one from repr(cmp): every event of both runs, 46 ms of
    # the UI thread in the frame that finishes the runs
    @work(thread=True, group="advice", exclusive=True, exit_on_error=False, description="advice")
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
        caveat = self.prep.session.incomplete  # a verdict on part of the session says so
        self.query_one("#verdict", Static).update(f"[b]{cmp.verdict()}[/b]"
                                                  + (f"\n[b yellow]warning: {escape(caveat)}[/]" if caveat else ""))
        table = self.query_one("#comparison", ComparisonTable)
        table.statuses = (run_status(cmp.a), run_status(cmp.b))
        table.show(cmp.rows(), advice)
        self.query_one("#summary").display = True
        if self.has_class("-tiny"):
            # only a tiny terminal restyles the panes for the verdict: a class on the screen
            # restyles every widget under it, a third of the verdict frame's time
            self.add_class("-verdict")
        self.refresh_bindings()  # the footer now offers replay again and export, not pause
        self.post_message(self.Finished(cmp))

    class Finished(Message):
        def __init__(self, comparison: Comparison) -> None:
            super().__init__()
            self.comparison = comparison

    # -- actions --------------------------------------------------------------------------
    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        if self.paused:
            self.pause.clear()  # the simulated pacer stops; a live server cannot be paused
        else:
            self.pause.set()
            for run in ("A", "B"):
                self.pane(run).query_one("#progress").restart_rate()
            # what was held back, in slices (one flush of it all was a long stall)
            self.start_drain(sum(len(b) for b in self.buffers.values()))
        self.show_state()

    def action_speed(self, key: str) -> None:
        self.speed = SPEEDS[key]
        for run in ("A", "B"):
            self.pane(run).query_one("#progress").restart_rate()  # the ETA follows the new speed
        self.show_state()
        self.notify(f"speed {speed_label(self.speed)}")

    def action_cancel(self, run: str) -> None:
        self.workers.cancel_group(self, f"run-{run}")
        self.stop_live(run)

    def stop_live(self, run: str) -> None:
        """A live run's thread only sees the cancel between events: stop its server now, and
        again while the thread may still be starting one."""
        ident = self.live_threads.pop(run, None)
        if ident is None:
            return
        from replayer.core.engine.live import stop_started_by

        stop_started_by(ident)
        for delay in (0.3, 1.0, 3.0):
            self.set_timer(delay, lambda: stop_started_by(ident))

    def action_zoom(self, factor: float) -> None:
        self.pane("A").query_one(Timeline).action_zoom(factor)

    def action_pan(self, direction: int) -> None:
        self.pane("A").query_one(Timeline).action_scroll_tokens(direction)

    def action_restart(self) -> None:
        for run in ("A", "B"):
            self.workers.cancel_group(self, f"run-{run}")
            self.stop_live(run)
            self.pane(run).reset()
        # new buffers: a cancelled worker may still append ("cancelled"), into the old ones
        self.buffers = {"A": deque(), "B": deque()}
        self.n_events = 0
        self.finished.clear()
        self.comparison = None
        self.refresh_bindings()
        self.workers.cancel_group(self, "advice")
        self.workers.cancel_group(self, "drain")
        self.drain_worker = None
        self.drain_left = 0
        self.after_drain = None
        self.restarts += 1
        self.verdict_pending = False
        self.paused = False
        self.pause.set()
        self.remove_class("-verdict")
        self.query_one("#summary").display = False
        self.clear_summary()
        self.show_state()
        self.call_after_refresh(self.start_runs)

    def clear_summary(self) -> None:
        self.query_one("#verdict", Static).update("")
        self.query_one("#comparison", ComparisonTable).clear()

    def action_back(self) -> None:
        for run in ("A", "B"):
            self.workers.cancel_group(self, f"run-{run}")
            self.stop_live(run)
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
            return
        # opened straight on this replay (replay --app): go to its setup instead of a blank screen
        self.app.switch_screen(self.setup_screen())

    def setup_screen(self) -> Screen:
        return self.app.setup_screen(self.prep.session, self.prep.config)

    def export_path(self, suffix: str) -> Path:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        return self.app.settings.export_folder() / f"replayer-{stamp}.{suffix}"

    def action_export(self, fmt: str = "md") -> None:
        if self.comparison is None:
            self.notify("the runs have not finished yet", severity="warning")
            return
        try:
            dest = self.export_path(fmt)
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(self.export_bytes(fmt))
        except OSError as exc:
            self.notify(f"export failed: {exc}", severity="error")
            return
        self.notify(f"exported {dest.resolve()}", timeout=10)

    def export_bytes(self, fmt: str) -> bytes:
        return report(self.prep, self.comparison, fmt, advice=self.advice)

    def action_screenshot(self) -> None:
        self.app.deliver_screenshot(self.export_path("svg").name)
