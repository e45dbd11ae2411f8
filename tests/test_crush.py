"""Crush's ``.crush/crush.db`` imports as Crush sends it again.

The database is built from the schema of Crush's migrations (``internal/db/migrations``: the
initial tables, then ``summary_message_id``, ``provider``, ``is_summary_message``, ``todos``,
``read_files``; charmbracelet/crush 37f36e9) and rows in the shape ``internal/message`` writes
(``parts``: a JSON list of ``{type, data}``). The Crush CLI itself could not be run here: its npm
package's install script downloads the binary from GitHub."""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path

import pytest

from replayer.core.errors import ImportFailed
from replayer.core.session import detect_format, load_session
from replayer.core.session.discover import default_roots
from replayer.core.session.formats.crush import INTERRUPTED, TODO_REMINDER

SCHEMA = """
CREATE TABLE sessions (id TEXT PRIMARY KEY, parent_session_id TEXT, title TEXT NOT NULL,
    message_count INTEGER NOT NULL DEFAULT 0, prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0, cost REAL NOT NULL DEFAULT 0.0, updated_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL, summary_message_id TEXT, todos TEXT);
CREATE TABLE files (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, path TEXT NOT NULL, content TEXT NOT NULL,
    version INTEGER NOT NULL DEFAULT 0, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
CREATE TABLE messages (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, role TEXT NOT NULL,
    parts TEXT NOT NULL default '[]', model TEXT, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,
    finished_at INTEGER, provider TEXT, is_summary_message INTEGER DEFAULT 0 NOT NULL);
CREATE TABLE read_files (session_id TEXT NOT NULL, path TEXT NOT NULL, read_at INTEGER NOT NULL,
    PRIMARY KEY (path, session_id));
CREATE TABLE goose_db_version (id INTEGER PRIMARY KEY AUTOINCREMENT, version_id INTEGER NOT NULL,
    is_applied INTEGER NOT NULL, tstamp TIMESTAMP DEFAULT (datetime('now')));
"""


def P(kind: str, **data) -> dict:
    return {"type": kind, "data": data}


FINISH = P("finish", reason="stop", time=1)


def call(i: str, cmd: str) -> dict:
    return P("tool_call", id=i, name="bash", input=json.dumps({"command": cmd}), provider_executed=False,
             finished=True)


def result(i: str, content: str) -> dict:
    return P("tool_result", tool_call_id=i, name="bash", content=content, data="", mime_type="", metadata="",
             is_error=False)


def build(d: Path, messages: list[tuple[str, str, list, int]], *, summary: str | None = None,
          sessions: list[tuple] = ()) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    db = d / "crush.db"
    con = sqlite3.connect(db)
    con.executescript(SCHEMA)
    con.execute("insert into sessions (id, title, updated_at, created_at, summary_message_id) values "
                "('s1', 'Fix the build', 1796400100, 1796400000, ?)", (summary,))
    for s in sessions:
        con.execute("insert into sessions (id, parent_session_id, title, updated_at, created_at) values (?,?,?,?,?)", s)
    for mid, role, parts, t in messages:
        con.execute("insert into messages (id, session_id, role, parts, model, provider, created_at, updated_at) "
                    "values (?, 's1', ?, ?, 'qwen3', 'local', ?, ?)", (mid, role, json.dumps(parts), t, t))
    con.commit()
    con.close()
    return db


ROUND = [("m1", "user", [P("text", text="  list the files \n"), FINISH], 1796400000),
         ("m2", "assistant", [P("reasoning", thinking="run ls", signature=""), call("c1", "ls"),
                              P("finish", reason="tool_use", time=2)], 1796400001),
         ("m3", "tool", [result("c1", "a.py\nb.py"), FINISH], 1796400002),
         ("m4", "assistant", [P("text", text="Two files.\n"), P("finish", reason="end_turn", time=3)], 1796400003)]


def test_a_tool_round_is_sent_after_the_todo_reminder(tmp_path):
    db = build(tmp_path / ".crush", ROUND)
    assert detect_format(db) == "crush"
    s = load_session(db)
    assert s.format == "crush" and s.title == "Fix the build" and s.model == "qwen3"
    assert [(m.role, m.content if isinstance(m.content, str) else None) for m in s.messages] == [
        ("user", TODO_REMINDER), ("user", "list the files"), ("assistant", None), ("tool", "a.py\nb.py"),
        ("assistant", "Two files.")]
    a = s.messages[2]
    assert a.reasoning == "run ls" and [(c.id, c.name) for c in a.tool_calls] == [("c1", "bash")]
    assert s.n_tool_calls == 1 and s.n_tool_results == 1


def test_messages_of_one_second_keep_the_order_written(tmp_path):
    rows = [(mid, role, parts, 1796400000) for mid, role, parts, _ in ROUND]
    rows = [rows[0], rows[1], ("m0", "tool", rows[2][2], 1796400000), rows[3]]  # an id sorting first
    s = load_session(build(tmp_path, rows))
    assert [m.role for m in s.messages] == ["user", "user", "assistant", "tool", "assistant"]


def test_from_the_summary_on_as_a_user_message_the_history_before_it_earlier(tmp_path):
    rows = ROUND + [("m5", "assistant", [P("text", text="SUMMARY: listed two files"), FINISH], 1796400010),
                    ("m6", "user", [P("text", text="now read a.py"), FINISH], 1796400011)]
    s = load_session(build(tmp_path, rows, summary="m5"))
    assert [(m.role, m.text()) for m in s.messages] == [("user", TODO_REMINDER), ("user", "SUMMARY: listed two files"),
                                                         ("user", "now read a.py")]
    assert s.stats.compactions_applied == 1 and len(s.earlier) == 1
    assert [m.role for m in s.earlier[0].messages] == ["user", "user", "assistant", "tool", "assistant"]
    assert any("summarization request" in w for w in s.warnings)


def test_cancelled_replies_orphan_results_and_unanswered_calls_as_crush_sends_them(tmp_path):
    rows = [("m1", "user", [P("text", text="go"), FINISH], 1),
            ("m2", "assistant", [P("finish", reason="canceled", time=1)], 2),  # nothing returned: not sent
            ("m3", "assistant", [call("c1", "ls")], 3),  # interrupted: no result stored
            ("m4", "tool", [result("zz", "stray")], 4),  # a result with no call
            ("m5", "user", [P("text", text="again"), FINISH], 5)]
    s = load_session(build(tmp_path, rows))
    assert [(m.role, m.text()) for m in s.messages[1:]] == [("user", "go"), ("assistant", ""), ("tool", INTERRUPTED),
                                                             ("user", "again")]
    assert s.stats.dropped_turns == 1 and s.stats.synthetic_results == 1 and s.stats.orphan_results == 1
    assert any("1 tool result(s) with no call" in w for w in s.warnings)


def test_attachments_and_shell_commands_are_put_in_the_prompt(tmp_path):
    text_file = P("binary", Path="notes.md", MIMEType="text/markdown", Data=base64.b64encode(b"# hi").decode())
    image = P("binary", Path="shot.png", MIMEType="image/png", Data=base64.b64encode(b"\x89PNG").decode())
    shell = P("shell_command", command="git status", output="clean", exit_code=0)
    rows = [("m1", "user", [P("text", text="look"), text_file, image, shell, FINISH], 1)]
    s = load_session(build(tmp_path, rows))
    u = s.messages[1]
    assert u.content[0].text == ("look\n<system_info>The files below have been attached by the user, consider them "
                                 "in your response</system_info>\n<file path='notes.md'>\n\n# hi\n</file>\n"
                                 "\n\n$ git status\nclean\n(exit code 0)")
    assert len(u.content) == 2 and s.stats.image_placeholders == 1


def test_a_subagent_session_has_no_reminder_and_the_parent_names_it(tmp_path):
    db = build(tmp_path, ROUND, sessions=[("k1", "s1", "task", 1796400002, 1796400001)])
    con = sqlite3.connect(db)
    con.execute("insert into messages (id, session_id, role, parts, created_at, updated_at) values "
                "('k_m1', 'k1', 'user', ?, 1796400001, 1796400001)", (json.dumps([P("text", text="find x")]),))
    con.commit()
    con.close()
    parent = load_session(db)
    assert parent.session_id == "s1" and any("1 subagent session(s)" in w for w in parent.warnings)
    child = load_session(db, session_id="k1")
    assert [(m.role, m.text()) for m in child.messages] == [("user", "find x")]


def test_a_bad_parts_row_leaves_that_message_out_and_other_sqlite_files_are_not_crush(tmp_path):
    rows = ROUND[:1] + [("m2", "assistant", "not a list", 2)]
    s = load_session(build(tmp_path / "a", rows))
    assert [m.role for m in s.messages] == ["user", "user"]
    other = tmp_path / "b" / "crush.db"
    other.parent.mkdir()
    con = sqlite3.connect(other)
    con.execute("create table sessions (id text)")
    con.execute("create table messages (id text)")
    con.commit()
    con.close()
    with pytest.raises(ImportFailed, match="SQLite database without the session tables of OpenCode, Kilo, Crush or Goose"):
        detect_format(other)
    with pytest.raises(ImportFailed, match="not a Crush database"):
        load_session(other, format="crush")


def test_the_picker_finds_each_projects_database_from_crushs_project_list(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("CRUSH_GLOBAL_DATA", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    listing = tmp_path / ".local" / "share" / "crush" / "projects.json"
    listing.parent.mkdir(parents=True)
    listing.write_text(json.dumps({"projects": [{"path": "/w/app", "data_dir": "/w/app/.crush"}, {"path": 3},
                                                {"path": "/w/x", "data_dir": "relative"}]}))
    roots = [r for r in default_roots() if r[0] == "crush"]
    assert roots == [("crush", Path("/w/app/.crush"), "crush.db")]
    listing.write_text("{not json")
    assert [r for r in default_roots() if r[0] == "crush"] == []
