"""The replay screens' feed: the orchestrator's events into per-run buffers, and from there into
the panes at 20 Hz, or by an instant run's drain.

The runs are the core's (``pipeline.Replay.stream`` under ``run_control.Controls``: the order of
A and B, pacing, pause and cancel are decided there); one thread worker per replay hands each
event to ``sink``, which only appends it to its run's buffer. A 20 Hz timer drains the buffers
into the panes inside one ``batch_update``, so a run producing thousands of events a second costs
~20 repaints. A simulated run at instant speed is handed to the panes once it has been computed
whole, drained in slices with the event loop let through between them (keys and timers are
served), and repainted once per pane: one layout, one repaint.

A replay owns its buffers: ``r`` gives the next replay new ones, so anything a cancelled run still
hands over lands in buffers nobody drains.
"""

from __future__ import annotations

import asyncio
import gc
from collections import deque

from textual.message import Message
from textual.worker import Worker, WorkerState, get_current_worker

from replayer.core.engine import events as ev
from replayer.core.replay import RUNS, is_realtime
from replayer.core.run_control import Controls

FLUSH_HZ = 20
MAX_EVENTS_PER_FLUSH = 20000  # per run and frame: a huge instant run spreads over a few frames
DRAIN_SLICE = 1000  # per run: an instant replay's events reach the panes ~10 ms at a time
ENDS = (ev.RunFinished, ev.RunFailed)


class RunFeed:
    """A replay screen's events, from the orchestrator's runs to its panes (a mixin of the screen:
    ``pane``, ``paused``, ``speed``, ``replay`` and ``show_verdict`` are the screen's)."""

    class Computed(Message):
        """A simulated run at instant speed is all in its buffer: drain ``n`` events (from the runs' thread)."""

        bubble = False

        def __init__(self, buffers: dict[str, deque], n: int) -> None:
            super().__init__()
            self.buffers, self.n = buffers, n

    def init_feed(self) -> None:
        self.buffers: dict[str, deque] = {"A": deque(), "B": deque()}
        self.controls = Controls(self.speed)
        self.n_events = 0  # drained into the panes
        self.flushes = 0
        self.finished: set[str] = set()
        self.drain_worker: Worker | None = None  # while an instant run's events go into the panes
        self.drain_left = 0  # events the drain still takes
        self.after_drain = None  # the advice's start, when the drain's last slice ended the runs

    def new_feed(self) -> None:
        """A new replay: the old runs cancelled, their leftovers into buffers nobody drains."""
        self.controls.cancel()
        self.workers.cancel_group(self, "drain")
        self.buffers = {"A": deque(), "B": deque()}
        self.controls = Controls(self.speed)
        self.n_events = 0
        self.finished.clear()
        self.drain_worker = None
        self.drain_left = 0
        self.after_drain = None

    # -- the runs, as the orchestrator runs them ---------------------------------------------------
    def start_runs(self) -> None:
        """Both runs on the orchestrator, in one thread worker, into this replay's buffers."""
        buffers, controls = self.buffers, self.controls
        self.run_worker(lambda: self.replay.stream(self.sink(buffers, controls), controls), thread=True,
                        group="runs", name="runs", exit_on_error=False, description="runs")

    def sink(self, buffers: dict[str, deque], controls: Controls):
        """What the runs' threads hand each event to: its run's buffer; at instant speed a
        simulated run's events are held until it has all of them, then drained (``Computed``)."""
        realtime = is_realtime(self.replay.config)
        held: dict[str, list] = {run: [] for run in RUNS}

        def put(e) -> None:
            mine = held[e.run]
            if realtime or controls.speed:
                if mine:
                    buffers[e.run].extend(mine)
                    mine.clear()
                buffers[e.run].append(e)
                return
            mine.append(e)
            if isinstance(e, ENDS):
                buffers[e.run].extend(mine)
                self.post_message(self.Computed(buffers, len(mine)))
                held[e.run] = []
        return put

    def on_run_feed_computed(self, message: "RunFeed.Computed") -> None:
        if message.buffers is not self.buffers:
            return  # a replay ``r`` replaced
        # thousands of long-lived events: keep them (and the app's own start-up objects) out of
        # the garbage collector's full passes, one of which cost ~80 ms mid-replay
        gc.freeze()
        self.start_drain(message.n)  # now (the screen is painted), not at the next 20 Hz tick

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The orchestrator turns a run's failure into its ``RunFailed``; anything that escapes it
        still ends the runs that had not finished, with the reason."""
        if event.worker.group != "runs" or event.state != WorkerState.ERROR or event.worker.is_cancelled:
            return
        for run in RUNS:
            if run not in self.finished:
                self.buffers[run].append(ev.RunFailed(run=run, error=str(event.worker.error)))
        self.notify(f"the replay failed: {event.worker.error}", severity="error")

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

    def after_last_paint(self, callback) -> None:
        """``callback`` after the frame that paints the runs' last events (a repaint held back
        by an instant drain's batch would not count as one: the drain calls it after its own)."""
        if self.draining:
            self.after_drain = callback
        else:
            self.call_after_refresh(callback)

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
                if any(isinstance(e, ENDS) for e in items):
                    self.finished.add(run)
        if self.finished == {"A", "B"} and self.comparison is None:
            self.show_verdict()
        return sum(len(items) for items in drained.values())
