"""Two builds side by side, animated from the orchestrator's event stream, then the verdict.

The screen sequences nothing: the runs are the core's (``pipeline.Replay.stream``), with the
screen's pause, speed and cancel keys as their ``run_control.Controls``; their events reach the
panes through the feed (``replay_feed``: per-run buffers drained at 20 Hz, an instant run's
drained in slices), and the verdict and exports are the core's (``replay_verdict``).

A replay owns the screen: ``r`` gives the new runs fresh buffers and controls, so anything a
cancelled run still hands over lands in a buffer nobody drains, and the verdict is built only
from the new runs. Pause holds events back in the buffers (a live server keeps computing; the
label says so). A cancelled or failed run is marked partial/failed in the panes and table.
"""

from __future__ import annotations

import gc
from pathlib import Path

from textual import events
from textual.app import ComposeResult
from textual.message import Message
from textual.containers import Horizontal, VerticalScroll
from textual.geometry import Size
from textual.screen import Screen
from textual.widgets import Header, Static

from replayer.core.compare import Comparison
from replayer.core.pipeline import Replay
from replayer.core.redact import redact
from replayer.core.replay import Prepared
from replayer.ui.screens.replay_feed import DRAIN_SLICE, FLUSH_HZ, RunFeed  # noqa: F401  (DRAIN_SLICE: the session screen's)
from replayer.ui.screens.replay_keys import REPLAY_KEYS
from replayer.ui.screens.replay_verdict import Verdict
from replayer.ui.widgets.comparison import ComparisonTable
from replayer.ui.widgets.key_footer import KeyFooter
from replayer.ui.widgets.run_pane import RunPane
from replayer.ui.widgets.timeline import Timeline

SPEEDS = {"1": 1.0, "2": 10.0, "3": 0.0}  # ×1, ×10, instant
# the collector's middle-generation passes between two full ones while a replay screen is up
# (Python's default is 10): a full pass is ~25–40 ms of the UI thread, mid-replay
FULL_GC_EVERY = 1000


def speed_label(speed: float) -> str:
    return "instant" if not speed else f"×{speed:g}"


class ReplayScreen(RunFeed, Verdict, Screen):
    BINDINGS = REPLAY_KEYS
    PANE = RunPane  # one build's column
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (120, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-tiny"), (28, "-short"), (40, "-tall")]

    def __init__(self, prepared: Prepared, speed: float = 1.0, autostart: bool = True) -> None:
        super().__init__()
        self.autostart = autostart
        self.prep = prepared
        # the one orchestrator, on the replay already prepared (the session screen makes its own)
        self.replay = Replay(prepared.session.path, prepared.config, prepared=prepared) if prepared else None
        self.speed = speed
        self.comparison: Comparison | None = None
        self.advice: list[str] = []
        self.verdict_pending = False
        self.paused = False
        self.resumed = False
        self.restarts = 0  # ``r`` presses: a verdict scheduled before one is dropped
        self._gc_threshold: tuple[int, int, int] | None = None  # the collector's, before this screen
        self.init_feed()

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
        self.controls.cancel()  # nobody watches: the runs' threads end (and their servers stop)
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
            self.call_after_refresh(self.unless_restarted(self.start_runs))

    def pane(self, run: str) -> RunPane:
        return self.query_one(f"#pane-{run}", RunPane)

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

    class Finished(Message):
        def __init__(self, comparison: Comparison) -> None:
            super().__init__()
            self.comparison = comparison

    # -- actions: the orchestrator's controls -----------------------------------------------
    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        if self.paused:
            self.controls.pause()  # a simulated run waits; a live server cannot be paused
        else:
            self.controls.resume()
            for run in ("A", "B"):
                self.pane(run).query_one("#progress").restart_rate()
            # what was held back, in slices (one flush of it all was a long stall)
            self.start_drain(sum(len(b) for b in self.buffers.values()))
        self.show_state()

    def action_speed(self, key: str) -> None:
        self.speed = self.controls.speed = SPEEDS[key]
        for run in ("A", "B"):
            self.pane(run).query_one("#progress").restart_rate()  # the ETA follows the new speed
        self.show_state()
        self.notify(f"speed {speed_label(self.speed)}")

    def action_cancel(self, run: str) -> None:
        self.controls.cancel(run)  # its server is stopped at once; the other run goes on

    def action_zoom(self, factor: float) -> None:
        self.pane("A").query_one(Timeline).action_zoom(factor)

    def action_pan(self, direction: int) -> None:
        self.pane("A").query_one(Timeline).action_scroll_tokens(direction)

    def action_restart(self) -> None:
        for run in ("A", "B"):
            self.pane(run).reset()
        self.new_feed()  # the old runs cancelled; new buffers and controls
        self.comparison = None
        self.refresh_bindings()
        self.workers.cancel_group(self, "advice")
        self.restarts += 1
        self.verdict_pending = False
        self.paused = False
        self.remove_class("-verdict")
        self.query_one("#summary").display = False
        self.clear_summary()
        self.show_state()
        self.call_after_refresh(self.start_runs)

    def action_back(self) -> None:
        self.controls.cancel()
        if len(self.app.screen_stack) > 2:
            self.app.pop_screen()
            return
        # opened straight on this replay (replay --app): go to its setup instead of a blank screen
        self.app.switch_screen(self.setup_screen())

    def setup_screen(self) -> Screen:
        return self.app.setup_screen(self.prep.session, self.prep.config)
