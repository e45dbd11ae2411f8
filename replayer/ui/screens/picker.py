"""Start: sessions found in the agents' default folders, the bundled demo, or a path.

Each row says what the session is (its title or first prompt, its project, its size in
prompt tokens), filled in by a background thread that imports the sessions; the demo row is
read the same way from the bundled file, never written by hand. With nothing found, the
screen lists the folders it searched and how to open a file instead.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import Screen
from textual.suggester import Suggester
from textual.widgets import DataTable, Header, Input, Static

from replayer.core.errors import ReplayerError
from replayer.core.replay import demo_session_path
from replayer.core.session import load_session
from replayer.core.session.discover import default_roots, discover
from replayer.core.session.listing import clean_title, hidden_note, listing
from replayer.ui.widgets.key_footer import KeyFooter

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


def session_facts(path: Path) -> dict[str, str]:
    """What a picker row shows about one session (importing it; raises ReplayerError)."""
    from replayer.core.prompt.layout import compute_layout
    from replayer.core.replay import ReplayConfig
    from replayer.core.session import build_request

    s = load_session(path)
    first = next((m for m in s.messages if m.role == "user"), None)
    text = s.title or (_text_of(first.content) if first is not None else "") or Path(s.path).name
    try:
        req = build_request(s)
        tokens = f"{compute_layout(req.messages, req.body.get('tools'), template=ReplayConfig().template_obj()).n_tokens:,}"
    except ReplayerError:
        tokens = "?"
    return {"messages": f"{len(s.messages):,}", "tokens": tokens, "title": clean_title(text)[:60],
            "project": Path(s.cwd).name if s.cwd else "", "tools": f"{s.n_tool_results:,}"}


def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(getattr(p, "text", "") for p in content)
    return ""


#: the picker's orders, cycled by ``s``: (name, sort key, newest/largest first)
SORTS = [("newest", lambda r: r["mtime"], True), ("tokens", lambda r: r["tokens_n"], True),
         ("size", lambda r: r["size_n"], True), ("agent", lambda r: (r["agent"], -r["mtime"]), False),
         ("title", lambda r: r["title"].lower(), False)]
#: columns, tokens first: at 80 columns the size of a session is what decides which to replay
COLUMNS = (("tokens", "≈ tokens"), ("agent", "agent"), ("date", "date"), ("title", "title / first prompt"),
           ("project", "project"), ("messages", "messages"), ("size", "size"))
DESCRIBED_AT_ONCE = 50  # sessions imported for their token counts per batch (first the shown ones)


def _tokens_n(text: str) -> int:
    try:
        return int(text.replace(",", ""))
    except ValueError:
        return -1


class PickerScreen(Screen):
    # "/" and "o" are priority keys, run before the next key is passed on: in one fast write
    # ("/review" pasted, or tmux send-keys) the letters behind them were already on their way to
    # the list; in a text field they are characters (check_action)
    BINDINGS = [Binding("slash", "filter", "filter", priority=True), Binding("s", "sort", "sort"),
                Binding("o", "focus_path", "open file…", priority=True), Binding("d", "open_demo", "demo"),
                Binding("ctrl+b", "builds", "builds")]
    DEFAULT_CSS = """
    PickerScreen #picker-empty { height: auto; color: $text-muted; padding: 1 0; }
    PickerScreen #filter { margin: 0 0 1 0; }
    PickerScreen #picker-status { color: $text-muted; height: 1; }
    """

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="picker"):
            yield Static("Pick a session: [b]⏎[/b] opens, [b]/[/b] filters, [b]s[/b] sorts, [b]o[/b] a path, "
                         "[b]d[/b] the demo.", id="picker-help")
            # always shown (one row): a field shown on `/` took its focus a frame late, and the
            # first letters typed quickly after `/` went to the list
            yield Input(placeholder="/ filter: words in the title, project, agent or file (⏎ to the list)",
                        id="filter", compact=True)
            yield Static("", id="picker-status")
            yield DataTable(id="sessions", cursor_type="row", zebra_stripes=True)
            yield Static("", id="picker-empty")
            yield Input(placeholder="open file… (path to a session log; → completes, ⏎ opens)", id="path",
                        suggester=PathSuggester())
            yield Static("", id="picker-error")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.title = "replayer — sessions"
        self.sort_index = 0
        self.hidden = ""
        t = self.query_one("#sessions", DataTable)
        for key, label in COLUMNS:
            t.add_column(label, key=key)
        demo = demo_session_path()
        self.rows: dict[str, dict] = {DEMO_KEY: self._row(DEMO_KEY, "demo", float("inf"), demo.stat().st_size,
                                                          "bundled seed scenario (#25213) …", "—")}
        self.found = discover()
        for f in self.found:
            self.rows[str(f.path)] = self._row(str(f.path), f.agent, f.mtime, f.size, f.path.name)
        if not self.found:
            searched = "\n".join(f"  {agent:<12} {root / pattern}" for agent, root, pattern in default_roots())
            self.query_one("#picker-empty", Static).update(
                "No agent sessions found. Folders searched:\n" + searched +
                "\nPress [b]o[/b] and type the path of a session file (pi, Claude Code, Codex, OpenCode, Qwen Code, "
                "Gemini CLI, Continue, Kilo, Crush, Goose, mini-swe-agent, Cline, Roo Code, Kilo Code, OpenAI body, ShareGPT, llama.cpp web UI, Aider), or [b]d[/b] for "
                "the bundled demo.")
        else:
            self.query_one("#picker-empty", Static).display = False
        self.described: set[str] = set()
        self.refill()
        t.focus()
        self.describe_sessions()

    @staticmethod
    def _row(key: str, agent: str, mtime: float, size: int, title: str, date: str | None = None) -> dict:
        return {"key": key, "agent": agent, "mtime": mtime, "size_n": size, "tokens_n": -1, "tokens": "…",
                "messages": "…", "title": title, "project": "", "size": f"{size / 1e6:.2f} MB",
                "date": date or datetime.fromtimestamp(mtime).strftime("%Y-%m-%d %H:%M")}

    # -- the shown rows -------------------------------------------------------------------
    def matching(self) -> list[dict]:
        """The rows the filter keeps (every word somewhere in the row), in the chosen order."""
        words = self.query_one("#filter", Input).value.lower().split()
        rows = [r for r in self.rows.values()
                if all(any(w in str(r[c]).lower() for c in ("title", "project", "agent", "key")) for w in words)]
        _, key, reverse = SORTS[self.sort_index]
        rows.sort(key=key, reverse=reverse)
        if not words:  # the demo stays first (its date is 'now' for the newest order only)
            rows.sort(key=lambda r: r["key"] != DEMO_KEY)
        return rows

    def refill(self) -> None:
        t = self.query_one("#sessions", DataTable)
        selected = self._selected_key()
        rows = self.matching()
        t.clear()
        for r in rows:
            t.add_row(*(r[c] for c, _ in COLUMNS), key=r["key"])
        keys = [r["key"] for r in rows]
        if selected in keys:
            t.move_cursor(row=keys.index(selected))
        value = self.query_one("#filter", Input).value.strip()
        n = len(self.rows) - 1
        status = [f"{n} session{'s' if n != 1 else ''}"]
        if value:
            status.append(f"{sum(1 for k in keys if k != DEMO_KEY)} match “{value}”")
        status.append(f"sorted by {SORTS[self.sort_index][0]}")
        if self.hidden:
            status.append(self.hidden)
        self.query_one("#picker-status", Static).update(" · ".join(status))

    def _selected_key(self) -> str | None:
        t = self.query_one("#sessions", DataTable)
        if not t.row_count:
            return None
        try:
            return t.coordinate_to_cell_key(t.cursor_coordinate).row_key.value
        except Exception:
            return None

    # -- facts, from a thread ---------------------------------------------------------------
    @work(thread=True, exit_on_error=False, group="count")
    def describe_sessions(self) -> None:
        listed = listing(self.found)
        self.app.call_from_thread(self._set_listing, listed)
        self.describe_shown()

    def _set_listing(self, listed) -> None:
        for x in listed:
            key = str(x.found.path)
            if x.kind != "session":
                self.rows.pop(key, None)
            elif x.title:
                self.rows[key].update(title=x.title, project=x.project)
        self.found = [x.found for x in listed if x.kind == "session"]
        self.hidden = hidden_note(listed)
        self.refill()

    def describe_shown(self) -> None:
        """Import the first shown sessions not yet described (thread: called by the workers)."""
        while True:
            keys = self.app.call_from_thread(lambda: [r["key"] for r in self.matching()])
            todo = [k for k in keys if k not in self.described][:DESCRIBED_AT_ONCE]
            if not todo:
                return
            for key in todo:
                self.described.add(key)
                path = demo_session_path() if key == DEMO_KEY else Path(key)
                try:
                    facts = session_facts(path)
                except ReplayerError:
                    facts = {"messages": "?", "tokens": "?", "title": "cannot be read"}
                except Exception as exc:  # one odd file must not stop the others
                    facts = {"messages": "?", "tokens": "?", "title": f"{type(exc).__name__}"}
                if key == DEMO_KEY:
                    facts["title"] = f"bundled seed scenario (#25213): {facts.get('tools', '?')} tool results"
                self.app.call_from_thread(self._set_facts, key, facts)
            return  # one batch per request: the filter asks again for the rows it shows

    @work(thread=True, exit_on_error=False, group="count", exclusive=False)
    def describe_more(self) -> None:
        self.describe_shown()

    def _set_facts(self, key: str, facts: dict[str, str]) -> None:
        row = self.rows.get(key)
        if row is None:
            return
        row.update({c: facts[c] for c in ("title", "project", "tokens", "messages") if facts.get(c)})
        row["tokens_n"] = _tokens_n(row["tokens"])
        try:
            t = self.query_one("#sessions", DataTable)
            for col in ("title", "project", "tokens", "messages"):
                t.update_cell(key, col, row[col], update_width=True)
        except Exception:
            pass  # filtered out meanwhile

    # -- keys -------------------------------------------------------------------------------
    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        key = event.row_key.value
        self.open(demo_session_path() if key == DEMO_KEY else Path(str(key)))

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "filter":
            self.refill()
            self.describe_more()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            self.query_one("#sessions", DataTable).focus()
        elif event.value.strip():
            self.open(Path(event.value.strip()).expanduser())

    def on_key(self, event) -> None:
        """Esc in the filter or the path field clears it and gives the list back its focus."""
        if event.key == "escape" and isinstance(self.focused, Input) and self.focused.id in ("filter", "path"):
            self.focused.value = ""
            self.query_one("#sessions", DataTable).focus()
            event.stop()

    def on_screen_resume(self) -> None:
        """Back from a session: the list has focus again, and the path field no longer holds
        the file just opened (Enter there reopened it)."""
        self.query_one("#path", Input).value = ""
        self.query_one("#picker-error", Static).update("")
        self.query_one("#sessions", DataTable).focus()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """In a text field "/" and "o" are characters (paths have them), not the picker's keys."""
        if action in ("filter", "focus_path"):
            return not isinstance(self.focused, Input)
        return True

    def action_filter(self) -> None:
        """Focus now, not after a refresh (``Widget.focus`` defers it): the letters that follow
        ``/`` in one fast write (a paste, tmux send-keys) arrive before a deferred focus and went
        to the list."""
        self.set_focus(self.query_one("#filter", Input))

    def action_sort(self) -> None:
        self.sort_index = (self.sort_index + 1) % len(SORTS)
        self.refill()
        self.describe_more()

    def action_focus_path(self) -> None:
        self.set_focus(self.query_one("#path", Input))  # now: see action_filter

    def action_open_demo(self) -> None:
        self.open(demo_session_path())

    def action_builds(self) -> None:
        self.app.action_builds()

    def open(self, path: Path) -> None:
        self.app.open_session(path)
