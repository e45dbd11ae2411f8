"""The replay screens' end: the verdict once both runs ended (with the advice, off the UI thread)
and the exports of the finished replay, through the core's report (the CLI's bytes)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from rich.markup import escape
from textual import work
from textual.widgets import Static
from textual.worker import get_current_worker

from replayer.core.compare import Comparison
from replayer.core.replay import report
from replayer.ui.screens.replay_keys import offered
from replayer.ui.widgets.comparison import ComparisonTable
from replayer.ui.widgets.run_pane import run_status


class Verdict:
    """A mixin of the replay screen: ``prep``, ``pane``, ``comparison``, ``advice``, ``restarts`` and
    ``Finished`` are the screen's."""

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        return offered(action, self.comparison is not None)

    def unless_restarted(self, fn, *args):
        """``fn(*args)`` as a callback that does nothing once ``r`` has started a new replay
        (the new replay schedules its own runs and verdict)."""
        restarts = self.restarts

        def call() -> None:
            if restarts == self.restarts:
                fn(*args)
        return call

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

    def clear_summary(self) -> None:
        self.query_one("#verdict", Static).update("")
        self.query_one("#comparison", ComparisonTable).clear()

    # -- exports ------------------------------------------------------------------------------
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
