"""Session replay: every turn of a session on builds A and B, then the verdict over the session.

The resume screen's machinery, reused as is (``ReplayScreen``): the orchestrator's runs under the
screen's controls, buffers drained at 20 Hz, pause, speed, cancel, and ``r`` — a new replay owns the screen, so a
cancelled worker's leftovers land in buffers nobody drains, and a cancelled run is marked
partial. What differs is the stream (``session_replay``'s turns instead of one prefill),
the panes (a turn strip and running totals above the current turn, ``SessionPane``) and
the verdict, which is the core's ``session_replay.report`` over both runs: the app shows
it, the turns and causes behind it, and exports the same document the CLI prints.

Laying out the turns of a long session takes seconds, so the orchestrator's ``prepare`` runs
in a thread worker while the screen is already up; the runs start once it is done.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Static
from textual.worker import Worker, WorkerState, get_current_worker

from replayer.core import what_ifs
from replayer.core.compare import Comparison
from replayer.core.errors import ReplayerError
from replayer.core.redact import redact
from replayer.core.replay import ReplayConfig
from replayer.core.session import Session
from replayer.core.pipeline import Replay
from replayer.core.session_replay import SESSION_FORMATS, SessionPrepared, report, session_report, to_text
from replayer.core.words import counted
from replayer.ui.screens.replay import DRAIN_SLICE, ReplayScreen
from replayer.ui.widgets.session_pane import SessionPane
from replayer.ui.widgets.turn_strip import TurnStrip


@dataclass
class SessionSpec:
    """What a session replay needs before its turns are laid out (that happens on the screen)."""

    path: Path
    config: ReplayConfig
    freeze_system: bool = False
    keep_reasoning: bool = False  # simulated only (core refuses it with a live engine)
    session: Session | None = None  # already imported (the setup screen's): the way back to it
    server_args: str | None = None  # the user's llama-server command line, checked (``check_server_args``)
    server_args_typed: str | None = None  # as the setup's field held it (``@file`` unread): the way back to it

    @property
    def what_if(self) -> str:
        """The setup screen's what-if choice this spec stands for."""
        return what_ifs.chosen(freeze_system=self.freeze_system, keep_reasoning=self.keep_reasoning)


class SessionScreen(ReplayScreen):
    PANE = SessionPane
    BINDINGS = [Binding("x", "repro", "reproduction for a maintainer", show=False),
                Binding("c", "calibrate", "calibrate on the log's timings", show=False),
                Binding("v", "verdict_again", "verdict", show=False)]  # the strip shows it

    def __init__(self, spec: SessionSpec, speed: float = 1.0, autostart: bool = True) -> None:
        super().__init__(None, speed=speed, autostart=autostart)  # type: ignore[arg-type]
        self.spec = spec
        self.replay = Replay(spec.path, spec.config, mode="session", freeze_system=spec.freeze_system,
                             keep_reasoning=spec.keep_reasoning,
                             server_args=spec.server_args)  # the one orchestrator, in session mode
        self.prep: SessionPrepared | None = None
        self.summary_doc: dict[str, Any] | None = None  # the report without its turns: what the screen shows
        self._doc: dict[str, Any] | None = None
        self.runs: tuple[Any, Any] | None = None
        self.prepare_error: str | None = None
        self.calibration_text: str | None = None  # what ``c`` fitted on a traffic log's timings

    def summary_widgets(self) -> ComposeResult:
        yield Static("", id="session-report")

    def on_mount(self, event: events.Mount) -> None:
        event.prevent_default()  # Textual calls every class's handler: not the resume screen's
        self.defer_full_collections()
        self.title = redact(Path(self.spec.path).name)
        self.show_state()
        self.set_interval(1 / 20, self.flush)
        self.call_after_refresh(self._second_frame)

    def _second_frame(self) -> None:
        """After the first paint, the lists (as the replay screen shows them); a frame later the
        turns' layout starts. That thread is a second Python thread wanting the GIL: started
        with the screen, it doubled the wall time of the screen's first frames (~100 ms of UI
        work each took 200–300 ms)."""
        self.show_lists()
        self.call_after_refresh(self._prepare)

    @property
    def session(self) -> Session | None:
        return self.prep.turns.session if self.prep else self.spec.session

    @work(thread=True, group="prepare", exclusive=True, exit_on_error=False)
    def _prepare(self) -> None:
        try:
            prep = self.replay.prepare()
        except ReplayerError as exc:
            self.app.call_from_thread(self._prepare_failed, str(exc))
            return
        if not get_current_worker().is_cancelled:
            self.app.call_from_thread(self._prepared, prep)

    def _prepared(self, prep: SessionPrepared) -> None:
        if not self.is_attached:
            return
        gc.freeze()  # the laid-out turns live as long as the screen
        self.prep = prep
        for run in ("A", "B"):
            self.pane(run).set_prepared(prep)
        self.show_state()
        if self.autostart:
            self.start_runs()

    def _prepare_failed(self, message: str) -> None:
        self.prepare_error = message
        self.sub_title = "cannot replay this session"
        self.query_one("#verdict", Static).update(Text(message, style="bold red"))
        self.query_one("#summary").display = True
        self.notify(message, title="cannot replay this session", severity="error", timeout=10)
        if getattr(self.app, "screenshot_to", None) is not None:  # headless: nobody to read it
            self.app.shot_error = message
            self.app.exit(return_code=2)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The preparation's worker is no run: the resume screen's handler (called after this
        one) must not see it."""
        if event.worker.group == "prepare":
            event.prevent_default()
            if event.state == WorkerState.ERROR:  # anything but a ReplayerError: still a message
                err = event.worker.error
                self._prepare_failed(f"{type(err).__name__}: {err}")
        elif event.worker.group == "calibrate":  # no run either
            event.prevent_default()
            if event.state == WorkerState.ERROR:
                err = event.worker.error
                self.notify(f"{type(err).__name__}: {err}", title="cannot calibrate", severity="error", markup=False)

    @property
    def drain_slice(self) -> int:
        """A session pane's event costs ~1.5× a resume pane's (turn headers, the turn strip, the
        facts of each finished turn): smaller slices keep each as short (~8 ms on a 2-core Xeon)."""
        return max(1, DRAIN_SLICE * 3 // 5)

    def show_state(self) -> None:
        if self.prep is None:
            self.sub_title = "laying out the turns…"
            return
        super().show_state()

    def headline(self) -> str:
        return counted(len(self.prep.turns.turns), "turn") + "".join(
            f" · what-if: {what_ifs.label(w)}" for w in self.prep.what_if)

    # -- the verdict ------------------------------------------------------------------------
    def show_verdict(self) -> None:
        if self.verdict_pending:
            return
        self.verdict_pending = True
        a, b = (self.pane(run).refresh_facts() for run in ("A", "B"))
        # after the frame that paints the last turns: the verdict's layout (the panes shrink)
        # is the session screen's longest frame, and sharing it with the drain's last slice
        # made it longer
        self.after_last_paint(self.unless_restarted(self._show_summary, a, b))

    def _show_summary(self, a, b) -> None:
        self.summary_doc = report(self.prep, a, b, turns=False)
        self.runs = (a, b)
        self.comparison = Comparison(a, b)  # a session run is a run summary over all turns
        self.query_one("#verdict", Static).update(Text(self.summary_doc["verdict"], style="bold"))
        self.query_one("#session-report", Static).update(Text(self.report_text()))
        self.query_one("#summary").display = True
        self.query_one("#summary").focus()  # the user's next read: ↑/↓ scroll it, Tab goes to the strips
        self.refresh_bindings()  # the footer now offers replay again and export, not pause
        if self.has_class("-tiny"):
            self.add_class("-verdict")
        self.post_message(self.Finished(self.comparison))

    @property
    def doc(self) -> dict[str, Any] | None:
        """The core's whole report (every turn), made when an export or a reader asks for it."""
        if self._doc is None and self.runs is not None:
            self._doc = report(self.prep, *self.runs)
        return self._doc

    def report_text(self) -> str:
        """The core's text report without its last word (the verdict, shown above it), then the
        time each run lost per cause."""
        doc = self.summary_doc
        lines = [ln for ln in to_text(doc, self.runs).splitlines() if ln != doc["verdict"]]
        for r in doc["runs"]:
            for cause, v in r["lost_by_cause"].items():
                lines.append(f"{r['label']} lost {v['ms'] / 1000:,.2f} s ({int(v['tokens']):,} tokens) to {cause} "
                             f"over {int(v['turns'])} turn{'s' if v['turns'] != 1 else ''}")
        return "\n".join(lines)

    def clear_summary(self) -> None:
        self.summary_doc = self._doc = self.runs = None
        self.query_one("#verdict", Static).update("")
        self.query_one("#session-report", Static).update("")

    # -- a turn's batches after the verdict ---------------------------------------------------
    def on_turn_strip_selected(self, event: TurnStrip.Selected) -> None:
        """Enter on a turn shows its batches: the verdict had taken the lists' rows (at 140×45 the
        batch list kept two, at 80×24 none), so it gives them back until ``v``."""
        summary = self.query_one("#summary")
        if event.scroll and self.summary_doc is not None and summary.display:
            self.remove_class("-verdict")  # a tiny terminal's verdict layout
            self.add_class("-turn-rows")
            summary.display = False
            self.refresh_bindings()

    def action_verdict_again(self) -> None:
        self.remove_class("-turn-rows")
        if self.has_class("-tiny"):
            self.add_class("-verdict")
        self.query_one("#summary").display = True
        self.query_one("#summary").focus()
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action == "verdict_again":
            return self.has_class("-turn-rows")
        return super().check_action(action, parameters)

    # -- actions ----------------------------------------------------------------------------
    def action_restart(self) -> None:
        if self.prep is None:  # still laying out the turns: the runs start when that is done
            return
        self.remove_class("-turn-rows")
        super().action_restart()

    def action_back(self) -> None:
        self.workers.cancel_group(self, "prepare")
        if self.session is None and len(self.app.screen_stack) <= 2:  # opened straight on this replay
            from replayer.core.session import load_session

            try:
                self.spec.session = load_session(self.spec.path, self.spec.config.format)
            except ReplayerError as exc:  # no setup to go back to: say why, stay
                self.notify(str(exc), title="cannot open session", severity="error")
                return
        super().action_back()

    def setup_screen(self) -> Screen:
        return self.app.setup_screen(self.session, self.spec.config, mode="session",
                                     what_if=self.spec.what_if,
                                     server_args=self.spec.server_args_typed or self.spec.server_args)

    def action_repro(self) -> None:
        """The replay as a folder a maintainer runs with stock llama-server (``core/repro.py``),
        beside the exports."""
        from replayer.core.repro import write_bundle

        if self.runs is None or self.prep is None or self.comparison is None:
            self.notify("the runs have not finished yet", severity="warning")
            return
        stamp = self.export_path("x")
        try:
            dest = write_bundle(stamp.with_name(stamp.stem + "-repro"), self.prep, dict(zip("AB", self.runs)))
        except (OSError, ReplayerError) as exc:
            self.notify(f"reproduction not written: {exc}", severity="error")
            return
        self.notify(f"reproduction written to {dest.resolve()} (python3 repro.py --expect A)", timeout=10)

    def action_calibrate(self) -> None:
        """A traffic log's recorded timings fitted as a cost line (``record.calibrate_log``, what
        ``replay LOG --calibrate`` prints), saved for ``--calibration ID``; no run needed."""
        self.notify("fitting a cost line on the log's timings…", timeout=3)
        self._calibrate()

    @work(thread=True, group="calibrate", exclusive=True, exit_on_error=False)
    def _calibrate(self) -> None:
        from replayer.core.record.calibrate_log import calibrate_log

        try:
            _, _, said = calibrate_log(Path(self.spec.path).expanduser(), self.spec.config)
        except ReplayerError as exc:
            self.app.call_from_thread(self.notify, str(exc), title="cannot calibrate", severity="error",
                                      timeout=10, markup=False)
            return
        self.calibration_text = said
        self.app.call_from_thread(self.notify, said, title="calibrated on the log", timeout=30, markup=False)

    def export_bytes(self, fmt: str) -> bytes:
        if fmt in SESSION_FORMATS:  # the CLI's documents, redacted by core/export.py
            return session_report(self.doc, self.runs, fmt)
        return super().export_bytes(fmt)  # csv: one row per batch, every turn's
