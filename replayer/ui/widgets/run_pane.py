"""One build's column: timeline, progress with ETA, throughput, batch list, checkpoint log.

``apply(events)`` takes a batch of events (the screen coalesces them ~20 times a second)
and updates every child once, so thousands of events a second cost a few repaints.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, Log, Sparkline, Static

from replayer.core.compare import RunSummary
from replayer.core.engine import events as ev
from replayer.ui.widgets.progress_line import ProgressLine
from replayer.ui.widgets.timeline import Timeline

MAX_BATCH_LINES = 20_000
BATCH_HEADER = f"{'#':>5}  {'start':>9}  {'tokens':>7}  {'reason':<17}  {'ms':>10}"


class RunPane(Vertical):
    DEFAULT_CSS = """
    RunPane { border: round $primary; padding: 0 1; height: 1fr; }
    RunPane > #title { text-style: bold; width: 1fr; height: 1; }
    RunPane > #stats { width: 1fr; height: 2; color: $text-muted; }
    RunPane Sparkline { height: 2; margin-bottom: 1; }
    RunPane #batches { height: 1fr; min-height: 4; }
    RunPane Log { height: 5; border-top: solid $panel; overflow-x: hidden; }
    """

    def __init__(self, run: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.run = run
        self.summary = RunSummary(run)
        self.tps: list[float] = []
        self.total = 0
        self.events_applied = 0

    def compose(self) -> ComposeResult:
        yield Label(f"{self.run}: waiting…", id="title")
        yield Timeline(id="timeline")
        yield ProgressLine(show_eta=not getattr(self.app, "deterministic", False), id="progress")
        yield Sparkline([0.0], id="tps")
        yield Static("", id="stats")
        # a Log, not a DataTable: thousands of streamed rows cost one refresh per flush
        yield Log(max_lines=MAX_BATCH_LINES, id="batches", auto_scroll=False)
        yield Log(max_lines=500, id="ckpts", auto_scroll=True)

    def on_mount(self) -> None:
        self.query_one("#batches", Log).write_line(BATCH_HEADER)
        self.query_one("#ckpts", Log).write_line("checkpoints:")

    def set_layout(self, n_tokens: int, spans: list[tuple[str, int]]) -> None:
        self.query_one(Timeline).set_layout(n_tokens, spans)

    def reset(self) -> None:
        self.summary = RunSummary(self.run)
        self.tps = []
        self.events_applied = 0
        self.styles.border = ("round", self.app.theme_variables.get("primary", "blue"))
        self.query_one(Timeline).reset()
        self.query_one("#progress", ProgressLine).reset()
        batches = self.query_one("#batches", Log)
        batches.clear()
        batches.write_line(BATCH_HEADER)
        log = self.query_one("#ckpts", Log)
        log.clear()
        log.write_line("checkpoints:")
        self.query_one("#tps", Sparkline).data = [0.0]

    def apply(self, batch: list[ev.Event]) -> None:
        if not batch:
            return
        tl = self.query_one(Timeline)
        rows, log_lines = [], []
        progress = None
        for e in batch:
            self.summary.apply(e)
            self.events_applied += 1
            if isinstance(e, ev.RunStarted):
                self.total = e.n_tokens
                tl.n_past = e.n_past
                self.query_one("#title", Label).update(
                    Text(f"{e.run}: {e.build} ({e.generation}) · {e.engine}", style="bold"), layout=False)
            elif isinstance(e, ev.BatchDone):
                tl.add_batch(e.end, e.reason)
                rows.append(f"{e.index:>5}  {e.start:>9,}  {e.n_tokens:>7,}  {e.reason:<17}  {e.duration_ms:>10,.1f}")
                if e.duration_ms > 0:
                    self.tps.append(e.n_tokens / (e.duration_ms / 1000))
                progress = e.end
            elif isinstance(e, ev.Progress):
                progress = e.processed
            elif isinstance(e, ev.CheckpointCreated):
                tl.add_checkpoint(e.n_tokens)
                log_lines.append(f"+ {e.n_tokens:>7,}  [{e.pos_min}, {e.pos_max}]  {e.size_mib:.3f} MiB  ({e.count}/{e.n_max})")
            elif isinstance(e, ev.CheckpointErased):
                log_lines.append(f"- {e.n_tokens:>7,}  erased ({e.reason})")
            elif isinstance(e, ev.CheckpointRestored):
                log_lines.append(f"↺ {e.n_tokens:>7,}  restored, n_past {e.n_past}")
            elif isinstance(e, ev.RunFinished):
                self._border("success" if e.status == ev.STATUS_COMPLETE else "warning")
                if e.status != ev.STATUS_COMPLETE:
                    self.query_one("#title", Label).update(Text(f"{self.run}: {e.status}", style="bold yellow"),
                                                           layout=False)
            elif isinstance(e, ev.RunFailed):
                self._border("error")
                self.query_one("#title", Label).update(Text(f"{self.run}: FAILED — {e.error}", style="bold red"),
                                                       layout=False)
        if rows:
            self.query_one("#batches", Log).write_lines(rows)
        if log_lines:
            self.query_one("#ckpts", Log).write_lines(log_lines)
        if progress is not None and self.total:
            self.query_one("#progress", ProgressLine).update(progress, self.total)
        if self.tps:
            self.query_one("#tps", Sparkline).data = list(self.tps[-400:])
        tl.refresh()
        self._stats()

    def _border(self, variable: str) -> None:
        """Finished/failed colour as an inline style: a CSS class would restyle the whole pane."""
        self.styles.border = ("round", self.app.theme_variables.get(variable, "green"))

    def _stats(self) -> None:
        s = self.summary
        br = s.breaks()
        text = (f"{s.n_batches} batches · user/tool breaks {br.get('user_start', 0)} · n_batch {br.get('n_batch', 0)}"
                f" · ckpt offsets {br.get('checkpoint_offset', 0)}\n"
                f"{len(s.created)} checkpoints ({s.checkpoint_mib:,.1f} MiB) · "
                f"{s.prompt_ms / 1000:,.1f} s · {s.tokens_per_s:,.1f} tok/s")
        self.query_one("#stats", Static).update(text, layout=False)  # fixed size: no re-layout
