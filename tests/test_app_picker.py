"""The picker on a home with 300 Claude Code sessions: filter as you type, sort, clean titles,
hidden non-sessions, tokens first, focus back on the list after a session."""

from __future__ import annotations

import os
import time

import pytest
from textual.widgets import DataTable, Input, Static

from replayer.core.session.listing import clean_title
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.picker import SORTS, PickerScreen
from replayer.ui.screens.setup import SetupScreen

from claude_home import write_home
from helpers import wait_for


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    for var in ("PI_CODING_AGENT_SESSION_DIR", "PI_CODING_AGENT_DIR", "CLAUDE_CONFIG_DIR", "CODEX_HOME",
                "XDG_DATA_HOME"):
        monkeypatch.delenv(var, raising=False)
    sessions = write_home(tmp_path)
    yield sessions
    monkeypatch.undo()
    time.tzset()


def test_clean_title_keeps_what_the_user_typed():
    assert clean_title("<command-message>init is analyzing…</command-message>\n<command-name>/init</command-name>"
                       "\n<command-args></command-args>") == "/init"
    assert clean_title("fix it <system-reminder>be brief</system-reminder> <b>now</b>") == "fix it now"


def _keys(t: DataTable) -> list:
    return [t.coordinate_to_cell_key((i, 0)).row_key.value for i in range(t.row_count)]


async def _listed(pilot, screen) -> DataTable:
    t = screen.query_one("#sessions", DataTable)
    await wait_for(pilot, lambda: bool(screen.hidden))
    return t


async def test_picker_hides_non_sessions_and_filters_as_you_type(home):
    app = ReplayerApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, PickerScreen)
        t = await _listed(pilot, screen)
        assert t.row_count == 301  # the demo and 300 sessions: no agent-*.jsonl, no summary-only file
        assert not any("agent-" in k or "summary-" in k for k in _keys(t))
        status = str(screen.query_one("#picker-status", Static).render())
        assert "300 sessions" in status and "10 hidden: 7 subagent, 3 summary-only" in status
        assert [c.label.plain for c in t.ordered_columns][0] == "≈ tokens"
        assert _keys(t)[1:4] == [str(p) for p in home[:3]]  # newest first
        assert t.get_cell(str(home[3]), "title") == "/review session 3"
        assert not any("<command" in str(t.get_cell(k, "title")) for k in _keys(t))
        await pilot.press("slash")
        assert app.focused is screen.query_one("#filter", Input)
        await pilot.press(*"review")
        assert t.row_count == 30 and all("/review" in t.get_cell(k, "title") for k in _keys(t))
        assert "30 match “review”" in str(screen.query_one("#picker-status", Static).render())
        await pilot.press("space", *"proj5")  # every word must match
        assert {t.get_cell(k, "project") for k in _keys(t)} == {"proj5"} and 0 < t.row_count < 30
        await pilot.press("enter")
        assert app.focused is t
        await pilot.press("slash", "escape")  # Esc clears the filter and returns to the list
        assert t.row_count == 301 and app.focused is t
        await pilot.press("o", *"/tmp/x", "escape")  # and the path field, the same way
        assert screen.query_one("#path", Input).value == "" and app.focused is t


async def test_picker_sorts_by_tokens_and_back_from_a_session_focuses_the_list(home):
    app = ReplayerApp()
    async with app.run_test(size=(140, 45)) as pilot:
        await pilot.pause()
        screen = app.screen
        t = await _listed(pilot, screen)
        await wait_for(pilot, lambda: t.get_cell(str(home[40]), "tokens") != "…")
        await app.workers.wait_for_complete()
        known = {k for k, r in screen.rows.items() if r["tokens_n"] >= 0}
        await pilot.press("s")
        assert "sorted by tokens" in str(screen.query_one("#picker-status", Static).render())
        described = [k for k in _keys(t) if k in known]  # (the sort asks for the counts of the rows now first)
        counts = [screen.rows[k]["tokens_n"] for k in described]
        assert counts == sorted(counts, reverse=True) and len(counts) >= 50
        await pilot.press(*"s" * (len(SORTS) - 1))
        assert "sorted by newest" in str(screen.query_one("#picker-status", Static).render())
        await pilot.press("down", "down")  # the second newest session highlighted
        # open another session by its path, go back: the list has focus, the path field is empty
        await pilot.press("o")
        await pilot.press(*str(home[0]), "enter")
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.screen is screen)
        await pilot.pause()
        assert app.focused is t and screen.query_one("#path", Input).value == ""
        await pilot.press("enter")  # the highlighted row, not the previous file
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        assert app.screen.session.path == str(home[1])


def one_write(app, text: str) -> None:
    """``text`` as a terminal delivers one fast write (a paste, tmux send-keys): every key queued
    at once, none waiting for the one before it to be handled (``pilot.press`` waits)."""
    from textual import events

    names = {"/": "slash", " ": "space", ".": "full_stop", "-": "minus", "_": "underscore"}
    for ch in text:
        app.post_message(events.Key(names.get(ch, ch), ch))


async def test_a_filter_typed_in_one_fast_write_keeps_every_letter(home):
    app = ReplayerApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        screen = app.screen
        t = await _listed(pilot, screen)
        assert app.focused is t
        one_write(app, "/proj5 so/d")  # the picker's keys s, o, /, d are letters once in the filter
        await pilot.pause()
        f = screen.query_one("#filter", Input)
        assert app.focused is f and f.value == "proj5 so/d"
        assert "sorted by newest" in str(screen.query_one("#picker-status", Static).render())
        await pilot.press("escape")
        assert app.focused is t and f.value == ""
        one_write(app, f"o{home[2]}")  # a path typed fast after "o": the "/"s are the path's
        await pilot.pause()
        path = screen.query_one("#path", Input)
        assert app.focused is path and path.value == str(home[2]) and f.value == ""
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        assert app.screen.session.path == str(home[2])


@pytest.mark.parametrize("size", [(80, 24), (140, 45)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_picker_snapshot_with_a_filter(snap_compare, home, size):
    async def run_before(pilot):
        screen = pilot.app.screen
        await _listed(pilot, screen)
        await pilot.press("slash", *"review", "enter")
        t = screen.query_one("#sessions", DataTable)
        await wait_for(pilot, lambda: all(t.get_cell(k, "tokens") != "…" for k in _keys(t)))
        await pilot.pause()

    assert snap_compare(ReplayerApp(deterministic=True), terminal_size=size, run_before=run_before)


async def test_the_picker_lists_clines_sessions_and_its_forks_tasks(tmp_path, monkeypatch):
    """Cline's CLI session (its subagent's file hidden), and the VS Code task folders of Cline,
    Roo Code and Kilo Code, each read for its first prompt and size like any other session."""
    import sys

    from cline_home import cli_session, vscode_task

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setattr(sys, "platform", "linux")
    for var in ("PI_CODING_AGENT_SESSION_DIR", "PI_CODING_AGENT_DIR", "CLAUDE_CONFIG_DIR", "CODEX_HOME",
                "XDG_DATA_HOME", "XDG_CONFIG_HOME", "CLINE_SESSION_DATA_DIR", "CLINE_DATA_DIR", "CLINE_DIR"):
        monkeypatch.delenv(var, raising=False)
    info = [{"tokensIn": 900, "cacheReads": 0, "apiProtocol": "openai"}] * 2
    storage = tmp_path / ".config" / "Code" / "User" / "globalStorage"
    rows = {str(cli_session(tmp_path, [None] * 3)): ("cline", "list the files"),
            str(vscode_task(storage / "saoudrizwan.claude-dev", "t1", info)): ("cline", "list the files"),
            str(vscode_task(storage / "rooveterinaryinc.roo-cline", "t2", info)): ("roo-code", "list the files"),
            str(vscode_task(tmp_path / ".kilocode" / "cli" / "global", "t3", info)): ("kilo-code", "list the files")}
    app = ReplayerApp()
    async with app.run_test(size=(160, 40)) as pilot:
        await pilot.pause()
        screen = app.screen
        t = screen.query_one("#sessions", DataTable)
        await wait_for(pilot, lambda: bool(screen.hidden))
        assert sorted(_keys(t)[1:]) == sorted(rows)  # the demo, then the four: no subagent file
        assert "1 hidden: 1 subagent" in str(screen.query_one("#picker-status", Static).render())
        await wait_for(pilot, lambda: all(t.get_cell(k, "messages") != "…" for k in rows))
        for key, (agent, title) in rows.items():
            assert t.get_cell(key, "agent") == agent
            assert t.get_cell(key, "title") == title
            assert int(t.get_cell(key, "tokens").replace(",", "")) > 0
        await pilot.press("slash", *"roo-code")
        assert _keys(t) == [k for k, (agent, _) in rows.items() if agent == "roo-code"]
