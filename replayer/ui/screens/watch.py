"""``replayer watch``: the session as it happens on the user's own server, request by request.

The core's ``record.watch.Watch`` runs the recording proxy and the prediction on threads of
their own and queues a ``WatchRow`` per request; this screen drains them on a timer (as a
replay's panes drain their runs) into two turn strips — what the server re-processed and what
build B's simulation predicts, one cell a request, the shared ``TurnStrip`` — the running
totals, and a table of one line a request (``record.watch_text.row_line``: fits 80 columns)
with ``≠`` where the predicted reuse is not the server's. Nothing here computes a number.

``b`` chooses build B among the setup's builds (the presets and what is installed, ✓): the
watch predicts every request logged so far again on it (``Watch.rebuild``) and the strips and
table start again from the new rows. ``l`` gives the upstream's own log to follow from then on
(``watch --server-log`` from the app: ``Watch.follow``), for the slot and full re-processing its
answers do not say; the head line names the log followed.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import ModalScreen, Screen
from textual.widgets import Input, OptionList, RichLog, Static
from textual.widgets.option_list import Option

from replayer.core.engine.slot_turns import TurnRecord
from replayer.core.errors import ReplayerError
from replayer.core.prepare import ReplayConfig
from replayer.core.record.predict import WatchRow
from replayer.core.record.watch import Watch
from replayer.core.record.watch_text import FLAG, SLOT_FLAG, export, header_line, row_line, totals_lines
from replayer.ui.widgets.key_footer import KeyFooter
from replayer.ui.widgets.watch_strip import GrowingStrip

DRAIN_S = 0.1


@dataclass
class WatchSpec:
    """What ``replayer watch`` asked for; the app opens ``open_screen()`` on it."""

    upstream: str
    config: ReplayConfig
    listen: str
    out: Path | None = None
    watch: Watch | None = None  # already listening (the CLI binds before the app opens)
    server_args: str | None = None  # the upstream's command line: build B's simulated server runs it
    server_log: Path | None = None  # the upstream's own log, followed (``record.log_follow``)

    def open_screen(self) -> "WatchScreen":
        return WatchScreen(self, self.watch)


class ChooseBuild(ModalScreen[str | None]):
    """Build B for the prediction: the setup screen's choices (``setup.build_options``)."""

    DEFAULT_CSS = """
    ChooseBuild { align: center middle; }
    ChooseBuild > OptionList { width: 70; max-width: 95%; height: auto; max-height: 80%; border: round $accent; }
    """
    BINDINGS = [Binding("escape", "dismiss(None)", "cancel")]

    def __init__(self, current: str) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        from replayer.ui.screens.setup import build_options

        opts = build_options()
        if self.current not in {v for _, v in opts}:
            opts.insert(0, (self.current, self.current))
        ol = OptionList(*(Option(label, id=value) for label, value in opts), id="build-b-choices")
        ol.border_title = "build B: what the simulation predicts with"
        yield ol

    def on_mount(self) -> None:
        ol = self.query_one(OptionList)
        ol.highlighted = ol.get_option_index(self.current)
        ol.focus()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)


class ServerLogPath(ModalScreen[str | None]):
    """The upstream server's log file to follow (``watch --server-log``), typed: its
    ``--log-file``, or the file its stderr or ``--log-jsonl`` goes to."""

    DEFAULT_CSS = """
    ServerLogPath { align: center middle; }
    ServerLogPath > Input { width: 70; max-width: 95%; border: round $accent; }
    """
    BINDINGS = [Binding("escape", "dismiss(None)", "cancel")]

    def __init__(self, current: Path | None) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        field = Input(str(self.current or ""), placeholder="/path/to/llama-server.log", id="server-log-path")
        field.border_title = "the server's own log, to follow from now on (esc: cancel)"
        yield field

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.dismiss(event.value.strip() or None)


class WatchScreen(Screen):
    DEFAULT_CSS = """
    WatchScreen { layout: vertical; }
    WatchScreen #watch-head { height: 1; color: $text-muted; }
    WatchScreen .watch-label { height: 1; color: $text-muted; }
    WatchScreen GrowingStrip { height: 3; }
    WatchScreen #watch-totals { height: 2; }
    WatchScreen #watch-cols { height: 1; color: $text-muted; }
    WatchScreen #watch-rows { height: 1fr; scrollbar-size-vertical: 1; }
    """
    BINDINGS = [Binding("b", "choose_build", "build B"), Binding("l", "server_log", "server log"),
                Binding("e", "export('md')", "export md"),
                Binding("j", "export('json')", "export json"), Binding("q", "app.quit", "quit")]

    def __init__(self, spec: WatchSpec, watch: Watch | None = None) -> None:
        super().__init__()
        self.spec = spec
        self.watch = watch
        self.rows: list[WatchRow] = []
        self.observed: list[TurnRecord] = []
        self.predicted: list[TurnRecord] = []
        self.error: str | None = None
        self.epoch = 0  # the watch's epoch the rows shown are of (a new build B starts a new one)

    def compose(self) -> ComposeResult:
        yield Static("", id="watch-head", markup=False)
        yield Static("server (observed): re-processed share per request", classes="watch-label", id="label-observed")
        yield GrowingStrip(id="watch-observed")
        yield Static("", classes="watch-label", id="label-predicted", markup=False)
        yield GrowingStrip(id="watch-predicted")
        yield Static("", id="watch-totals", markup=False)
        yield Static(header_line(), id="watch-cols", markup=False)
        yield RichLog(id="watch-rows", wrap=False, markup=False, highlight=False, auto_scroll=True)
        yield KeyFooter()

    def on_mount(self) -> None:
        try:
            if self.watch is None:
                self.watch = Watch(self.spec.upstream, self.spec.config, self.spec.listen, self.spec.out,
                                   server_args=self.spec.server_args, server_log=self.spec.server_log)
            url = self.watch.url or self.watch.start()
        except ReplayerError as exc:
            self.error = str(exc)
            self.query_one("#watch-head", Static).update(Text(f"cannot watch: {exc}", style="bold red"))
            self.notify(str(exc), title="cannot watch", severity="error", timeout=15, markup=False)
            return
        self._show_head()
        self._show_label()
        self._show_totals()
        self.set_interval(DRAIN_S, self.drain)

    def _show_head(self, server_log: Path | None = None) -> None:
        assert self.watch is not None
        w = self.watch
        followed = server_log or w.server_log
        # without the scheme: the line fits 80 columns with a log name and the server log's
        self.query_one("#watch-head", Static).update(
            f"watch {_bare(w.url)} → {_bare(w.upstream_url)} · log {w.path.name}"
            + (f" · server log {followed.name}" if followed is not None else " · l: server log"))

    def action_server_log(self) -> None:
        if self.watch is None or self.error:
            self.notify("the watch did not start", severity="warning")
            return
        self.app.push_screen(ServerLogPath(self.watch.server_log), self._follow)

    def _follow(self, path: str | None) -> None:
        if path is None or self.watch is None:
            return
        log = Path(path).expanduser()
        try:
            self.watch.follow(log)
        except ReplayerError as exc:
            self.notify(str(exc), title="cannot follow this log", severity="error", markup=False)
            return
        self._show_head(log)
        self.notify(f"following {log}: the requests from now on get its slot and full re-processing",
                    markup=False)

    def _show_label(self) -> None:
        assert self.watch is not None
        w = self.watch
        self.query_one("#label-predicted", Static).update(
            f"predicted by {w.build_label} ({w.meta()['layout']} layout, simulated slots) · b: build B")

    def action_choose_build(self) -> None:
        if self.watch is None or self.error:
            self.notify("the watch did not start", severity="warning")
            return
        self.app.push_screen(ChooseBuild(self.watch.predictor.config.b), self._chosen)

    def _chosen(self, b: str | None) -> None:
        if b is None or self.watch is None or b == self.watch.predictor.config.b:
            return
        try:
            self.watch.rebuild(b)
        except ReplayerError as exc:
            self.notify(str(exc), title="cannot predict with this build", severity="error", markup=False)
            return
        self.notify(f"predicting every request again on {b}…", markup=False)

    def _restart(self) -> None:
        """A new build B: every row comes again, so the strips and the table start empty."""
        self.rows, self.observed, self.predicted = [], [], []
        self.query_one("#watch-rows", RichLog).clear()
        for strip in ("#watch-observed", "#watch-predicted"):
            s = self.query_one(strip, GrowingStrip)
            s.n_turns = 0
            s.update_turns([])
        self._show_label()

    def drain(self) -> None:
        """Rows predicted since the last tick: the strips, the totals and the table."""
        if self.watch is None:
            return
        epoch, new = self.watch.drain_epoch()
        if epoch != self.epoch:
            self.epoch = epoch
            self._restart()
        if not new:
            if epoch and not self.rows:  # a build change before any request: the strips stay empty
                self._show_totals()
            return
        log = self.query_one("#watch-rows", RichLog)
        for row in new:
            self.rows.append(row)
            obs, pred = row.records()
            self.observed.append(obs)
            if pred is not None:
                self.predicted.append(pred)
            line = Text(row_line(row), no_wrap=True)
            if row.slot_differs:
                at = line.plain.find(SLOT_FLAG, line.plain.find("│") + 1)
                if at > 0:
                    line.stylize("bold yellow", at, at + 1)
            if row.differs:
                line.stylize("bold red", len(line) - len(FLAG))
            elif row.predicted is None:
                line.stylize("dim")
            log.write(line)
        n = len(self.rows)
        for strip, turns in (("#watch-observed", self.observed), ("#watch-predicted", self.predicted)):
            s = self.query_one(strip, GrowingStrip)
            s.n_turns = n
            s.update_turns(list(turns))
        self._show_totals()

    def _show_totals(self) -> None:
        assert self.watch is not None
        lines = totals_lines(self.watch.totals, self.watch.build_label)
        self.query_one("#watch-totals", Static).update("\n".join(lines))

    def action_export(self, fmt: str) -> None:
        if self.watch is None or self.error:
            self.notify("nothing to export: the watch did not start", severity="warning")
            return
        dest = self.app.settings.export_folder() / f"replayer-watch-{datetime.now():%Y%m%d-%H%M%S}.{fmt}"
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(export(self.rows, self.watch.totals, self.watch.meta(), fmt))
        except OSError as exc:
            self.notify(f"export failed: {exc}", severity="error", markup=False)
            return
        self.notify(f"exported {dest.resolve()}", timeout=10, markup=False)

    def on_unmount(self) -> None:
        if self.watch is not None:
            self.watch.stop()


def _bare(url: str | None) -> str:
    return (url or "").removeprefix("http://")


def run_watch_app(spec: WatchSpec) -> int:
    """The app opened on a watch; the proxy stops with it."""
    from replayer.ui.app import ReplayerApp

    app = ReplayerApp(config=spec.config, replay=spec)
    app.run()
    return app.return_code or 0
