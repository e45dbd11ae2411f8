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
    return {"messages": f"{len(s.messages):,}", "tokens": tokens, "title": " ".join(text.split())[:60],
            "project": Path(s.cwd).name if s.cwd else "", "tools": f"{s.n_tool_results:,}"}


def _text_of(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(getattr(p, "text", "") for p in content)
    return ""


class PickerScreen(Screen):
    BINDINGS = [Binding("o", "focus_path", "open file…"), Binding("d", "open_demo", "demo"),
                Binding("ctrl+b", "builds", "builds")]
    DEFAULT_CSS = """
    PickerScreen #picker-empty { height: auto; color: $text-muted; padding: 1 0; }
    """

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="picker"):
            yield Static("Pick a session to replay (newest first, ⏎ opens), [b]o[/b] to type a path, "
                         "[b]d[/b] for the demo.", id="picker-help")
            yield DataTable(id="sessions", cursor_type="row", zebra_stripes=True)
            yield Static("", id="picker-empty")
            yield Input(placeholder="open file… (path to a session log; → completes, ⏎ opens)", id="path",
                        suggester=PathSuggester())
            yield Static("", id="picker-error")
        yield KeyFooter()

    def on_mount(self) -> None:
        self.title = "replayer — sessions"
        t = self.query_one("#sessions", DataTable)
        for key, label in (("agent", "agent"), ("date", "date"), ("title", "title / first prompt"),
                           ("project", "project"), ("tokens", "≈ tokens"), ("messages", "messages"),
                           ("size", "size")):
            t.add_column(label, key=key)
        demo = demo_session_path()
        t.add_row("demo", "—", "bundled seed scenario (#25213) …", "", "…", "…",
                  f"{demo.stat().st_size / 1e6:.1f} MB", key=DEMO_KEY)
        self.found = discover()
        for f in self.found:
            t.add_row(f.agent, datetime.fromtimestamp(f.mtime).strftime("%Y-%m-%d %H:%M"), f.path.name, "", "…",
                      "…", f"{f.size / 1e6:.2f} MB", key=str(f.path))
        if not self.found:
            searched = "\n".join(f"  {agent:<12} {root / pattern}" for agent, root, pattern in default_roots())
            self.query_one("#picker-empty", Static).update(
                "No agent sessions found. Folders searched:\n" + searched +
                "\nPress [b]o[/b] and type the path of a session file (pi, Claude Code, Codex, OpenCode, "
                "OpenAI body, ShareGPT, llama.cpp web UI, Aider), or [b]d[/b] for the bundled demo.")
        else:
            self.query_one("#picker-empty", Static).display = False
        t.focus()
        self.describe_sessions()

    @work(thread=True, exit_on_error=False, group="count")
    def describe_sessions(self) -> None:
        for key, path in [(DEMO_KEY, demo_session_path())] + [(str(f.path), f.path) for f in self.found[:50]]:
            try:
                facts = session_facts(path)
            except ReplayerError:
                facts = {"messages": "?", "tokens": "?", "title": "cannot be read", "project": ""}
            except Exception as exc:  # one odd file must not stop the others
                facts = {"messages": "?", "tokens": "?", "title": f"{type(exc).__name__}", "project": ""}
            if key == DEMO_KEY:
                facts["title"] = f"bundled seed scenario (#25213): {facts.get('tools', '?')} tool results"
            self.app.call_from_thread(self._set_facts, key, facts)

    def _set_facts(self, key: str, facts: dict[str, str]) -> None:
        try:
            t = self.query_one("#sessions", DataTable)
            for col in ("title", "project", "tokens", "messages"):
                t.update_cell(key, col, facts.get(col, ""), update_width=True)
        except Exception:
            pass

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

    def action_builds(self) -> None:
        self.app.action_builds()

    def open(self, path: Path) -> None:
        self.app.open_session(path)
