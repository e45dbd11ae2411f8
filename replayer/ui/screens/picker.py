"""Start: sessions found in the agents' default folders, the bundled demo, or a path."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.suggester import Suggester
from textual.widgets import DataTable, Footer, Header, Input, Static

from replayer.core.errors import ReplayerError
from replayer.core.replay import demo_session_path
from replayer.core.session import load_session
from replayer.core.session.discover import discover

DEMO_KEY = "__demo__"


class PathSuggester(Suggester):
    """Completes file-system paths as the user types (→ accepts the suggestion)."""

    def __init__(self) -> None:
        super().__init__(use_cache=False, case_sensitive=True)

    async def get_suggestion(self, value: str) -> str | None:
        if not value:
            return None
        p = Path(value).expanduser()
        parent, stem = (p, "") if value.endswith("/") else (p.parent, p.name)
        try:
            names = sorted(e.name for e in parent.iterdir() if e.name.startswith(stem) and not e.name.startswith("."))
        except OSError:
            return None
        if not names:
            return None
        head = value if value.endswith("/") else value[: len(value) - len(stem)]
        full = head + names[0]
        return full + "/" if (parent / names[0]).is_dir() else full


class PickerScreen(Screen):
    BINDINGS = [Binding("o", "focus_path", "open file…"), Binding("d", "open_demo", "demo")]

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="picker"):
            yield Static("Pick a session to replay (newest first), or type a path.", id="picker-help")
            yield DataTable(id="sessions", cursor_type="row", zebra_stripes=True)
            yield Input(placeholder="open file… (path to a session log; → completes, ⏎ opens)", id="path",
                        suggester=PathSuggester())
            yield Static("", id="picker-error")
        yield Footer()

    def on_mount(self) -> None:
        self.title = "replayer — sessions"
        t = self.query_one("#sessions", DataTable)
        t.add_column("agent", key="agent")
        t.add_column("date", key="date")
        t.add_column("messages", key="messages")
        t.add_column("size", key="size")
        t.add_column("session", key="path")
        demo = demo_session_path()
        t.add_row("demo", "—", "…", f"{demo.stat().st_size / 1e6:.1f} MB",
                  "bundled seed scenario (#25213)", key=DEMO_KEY)
        self.found = discover()
        for f in self.found:
            t.add_row(f.agent, datetime.fromtimestamp(f.mtime).strftime("%Y-%m-%d %H:%M"), "…",
                      f"{f.size / 1e6:.2f} MB", str(f.path), key=str(f.path))
        t.focus()
        self.count_messages()

    @work(thread=True, exit_on_error=False, group="count")
    def count_messages(self) -> None:
        self._demo_facts()
        for f in self.found[:50]:
            try:
                n = str(len(load_session(f.path).messages))
            except ReplayerError:
                n = "?"
            self.app.call_from_thread(self._set_count, str(f.path), n)

    def _demo_facts(self) -> None:
        """The demo row's numbers, read from the bundled session itself."""
        from replayer.core.replay import ReplayConfig, prepare

        try:
            prep = prepare(demo_session_path(), ReplayConfig.seed())
        except ReplayerError:
            return
        s = prep.session
        about = (f"bundled seed scenario: {prep.n_tokens / 1000:.0f}k tokens, "
                 f"{s.n_tool_results} tool results (#25213)")
        self.app.call_from_thread(self._set_count, DEMO_KEY, str(len(s.messages)))
        self.app.call_from_thread(self._set_cell, DEMO_KEY, "path", about)

    def _set_cell(self, key: str, column: str, text: str) -> None:
        try:
            self.query_one("#sessions", DataTable).update_cell(key, column, text)
        except Exception:
            pass

    def _set_count(self, key: str, n: str) -> None:
        self._set_cell(key, "messages", n)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        key = event.row_key.value
        self.open(demo_session_path() if key == DEMO_KEY else Path(str(key)))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self.open(Path(event.value.strip()).expanduser())

    def action_focus_path(self) -> None:
        self.query_one("#path", Input).focus()

    def action_open_demo(self) -> None:
        self.open(demo_session_path())

    def open(self, path: Path) -> None:
        self.app.open_session(path)
