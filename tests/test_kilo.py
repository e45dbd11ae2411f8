"""Kilo's CLI sessions (``kilo.db``) import as Kilo sends them again.

``fixtures/kilo/kilo.db`` is the database a real ``kilo run --auto`` (7.7.7) wrote against the
scripted model (``fixtures/make_fixtures.py --kilo``: the suite's prompts, the stub's replies);
the edits below are made on copies of it. The real CLI, every turn compared with what it sent
(its ``<environment_details>`` part included), is tests/agents (agent ``kilo``)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import FIXTURES
from replayer.core.session import detect_format, load_session
from replayer.core.session.discover import default_roots
from replayer.core.session.formats.kilo import environment_details

DB = FIXTURES / "kilo" / "kilo.db"


def _copy(tmp_path: Path) -> Path:
    db = tmp_path / "kilo.db"
    shutil.copy(DB, db)
    return db


def _user_rows(db: Path) -> list[tuple[str, dict]]:
    con = sqlite3.connect(db)
    rows = [(i, json.loads(d)) for i, d in con.execute("select id, data from message order by time_created, id")]
    con.close()
    return [(i, d) for i, d in rows if d.get("role") == "user"]


def _set_message(db: Path, mid: str, data: dict) -> None:
    con = sqlite3.connect(db)
    con.execute("update message set data=? where id=?", (json.dumps(data), mid))
    con.commit()
    con.close()


def test_the_real_runs_database_is_kilo_and_every_prompt_gets_its_environment_details():
    assert detect_format(DB) == "kilo" and detect_format(FIXTURES / "opencode" / "opencode.db") == "opencode"
    s = load_session(DB)
    assert s.format == "kilo" and s.agent_version == "7.7.7" and s.cwd == "/tmp/kt1/project"
    users = [m for m in s.messages if m.role == "user"]
    assert [u.content[0].text for u in users] == ['"TOOL: list the files here"', "thanks"]
    # each from its own message's creation time (ms, printed to the second, UTC), the session's
    # folder, and its workspace root: the folder less its stored path's three segments
    assert [u.content[1].text for u in users] == [
        "\n\n<environment_details>\nMessage time: 2026-12-04T20:58:20Z\nWorking directory: /tmp/kt1/project\n"
        "Workspace root folder: /\n</environment_details>",
        "\n\n<environment_details>\nMessage time: 2026-12-04T20:58:39Z\nWorking directory: /tmp/kt1/project\n"
        "Workspace root folder: /\n</environment_details>"]


def test_forced_as_opencode_the_same_database_has_no_environment_details():
    s = load_session(DB, format="opencode")
    assert s.format == "opencode"
    assert [m.content for m in s.messages if m.role == "user"] == ['"TOOL: list the files here"', "thanks"]


def test_an_editors_context_on_the_message_is_sent_in_kilos_order(tmp_path):
    db = _copy(tmp_path)
    mid, data = _user_rows(db)[0]
    data["editorContext"] = {"openTabs": ["a.py", "b.py"], "activeFile": "a.py", "visibleFiles": ["a.py"],
                             "directory": "/w/sub"}
    _set_message(db, mid, data)
    text = [m for m in load_session(db).messages if m.role == "user"][0].content[1].text
    assert text.splitlines()[3:] == ["Message time: 2026-12-04T20:58:20Z", "Working directory: /w/sub",
                                     "Workspace root folder: /", "Active file: a.py", "Visible files:", "  a.py",
                                     "Open tabs:", "  a.py", "  b.py", "</environment_details>"]


def test_a_stored_environment_part_is_sent_as_stored_and_no_second_is_added(tmp_path):
    db = _copy(tmp_path)
    mid, _ = _user_rows(db)[1]
    stored = "\n\n<environment_details>\nMessage time: 2020-01-01T00:00:00Z\n</environment_details>"
    con = sqlite3.connect(db)
    con.execute("insert into part values ('prt_zzzz', ?, 'ses_dbd264f41ffeREEikZucta8kHX', 0, 0, ?)",
                (mid, json.dumps({"type": "text", "text": stored, "synthetic": True})))
    con.commit()
    con.close()
    last = [m for m in load_session(db).messages if m.role == "user"][-1]
    assert [p.text for p in last.content] == ["thanks", stored]


@pytest.mark.parametrize("directory,path,root", [("/w/a/b", "a/b", "/w"), ("/w", "", "/w"), ("/w", None, "/w"),
                                                 ("/w", "x/y/z", "/")])
def test_the_workspace_root_is_the_folder_less_its_stored_path(directory, path, root):
    text = environment_details({"directory": directory, "path": path}, {"time": {"created": 0}}, [])
    assert text.splitlines()[3:6] == ["Message time: 1970-01-01T00:00:00Z", f"Working directory: {directory}",
                                      f"Workspace root folder: {root}"]


@pytest.mark.parametrize("created", [None, "1", True, 10 ** 20])
def test_a_message_without_a_printable_time_gets_no_block(created):
    assert environment_details({"directory": "/w"}, {"time": {"created": created}}, []) is None


def test_an_sqlite_file_of_other_tables_is_no_kilo_or_opencode_session(tmp_path):
    db = tmp_path / "kilo.db"
    con = sqlite3.connect(db)
    con.execute("create table kilo_board (root_session_id text)")
    con.commit()
    con.close()
    from replayer.core.errors import ImportFailed
    with pytest.raises(ImportFailed, match="SQLite database without the session tables of OpenCode, Kilo, Crush or Goose"):
        load_session(db)
    with pytest.raises(ImportFailed, match="not a database of Kilo"):
        load_session(db, format="kilo")


def test_the_picker_looks_in_kilos_data_folder_and_at_kilo_db(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    monkeypatch.delenv("KILO_DB", raising=False)
    assert ("kilo", tmp_path / ".local" / "share" / "kilo", "kilo*.db") in default_roots()
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("KILO_DB", "other.db")
    assert ("kilo", tmp_path / "data" / "kilo", "other.db") in default_roots()
    monkeypatch.setenv("KILO_DB", str(tmp_path / "elsewhere" / "k.db"))
    assert ("kilo", tmp_path / "elsewhere", "k.db") in default_roots()
