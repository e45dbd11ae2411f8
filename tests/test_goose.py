"""Goose's ``sessions.db`` imports as Goose's OpenAI-compatible provider sends it again.

The database is built from the schema ``SessionStorage::create_schema`` writes (block/goose
``crates/goose/src/session/session_manager.rs``, schema version 9; the eval tables left out) and
rows in the shape of ``conversation/message.rs`` and ``tool_result_serde.rs``. Goose itself was
not run here (a Rust binary, not an npm package)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from replayer.core.session import detect_format, load_session
from replayer.core.session.discover import default_roots
from replayer.core.session.formats.goose import IMAGE_IN_RESULT, RESULT_ERROR

SCHEMA = """
CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP);
CREATE TABLE sessions (id TEXT PRIMARY KEY, name TEXT NOT NULL DEFAULT '', description TEXT NOT NULL DEFAULT '',
    user_set_name BOOLEAN DEFAULT FALSE, session_type TEXT NOT NULL DEFAULT 'user', working_dir TEXT NOT NULL,
    created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, updated_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP,
    extension_data TEXT DEFAULT '{}', total_tokens INTEGER, input_tokens INTEGER, output_tokens INTEGER,
    accumulated_total_tokens INTEGER, accumulated_input_tokens INTEGER, accumulated_output_tokens INTEGER,
    schedule_id TEXT, recipe_json TEXT, user_recipe_values_json TEXT, provider_name TEXT, model_config_json TEXT,
    tenant_id TEXT, user_id TEXT);
CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, message_id TEXT,
    session_id TEXT NOT NULL REFERENCES sessions(id), role TEXT NOT NULL, content_json TEXT NOT NULL,
    created_timestamp INTEGER NOT NULL, timestamp TIMESTAMP DEFAULT CURRENT_TIMESTAMP, tokens INTEGER,
    metadata_json TEXT);
"""

VISIBLE = {"userVisible": True, "agentVisible": True}


def text(t: str, **kw) -> dict:
    return {"type": "text", "text": t, **kw}


def request(i: str, name: str, args: dict) -> dict:
    return {"type": "toolRequest", "id": i, "toolCall": {"status": "success", "value": {"name": name,
                                                                                     "arguments": args}}}


def response(i: str, *content: dict, error: str | None = None) -> dict:
    result = {"status": "error", "error": error} if error else \
        {"status": "success", "value": {"content": list(content), "isError": False}}
    return {"type": "toolResponse", "id": i, "toolResult": result}


def build(d: Path, rows: list[tuple[str, list, dict]]) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    db = d / "sessions.db"
    con = sqlite3.connect(db)
    con.executescript(SCHEMA)
    con.execute("insert into schema_version (version) values (9)")
    con.execute("insert into sessions (id, name, working_dir, provider_name, model_config_json) values "
                "('20261201_1', 'Fix the tests', '/w/app', 'openai', ?)", (json.dumps({"model_name": "qwen3"}),))
    for k, (role, content, meta) in enumerate(rows):
        con.execute("insert into messages (message_id, session_id, role, content_json, created_timestamp, "
                    "metadata_json) values (?, '20261201_1', ?, ?, ?, ?)",
                    (f"msg_{k}", role, json.dumps(content), 1796400000 + k, json.dumps(meta)))
    con.commit()
    con.close()
    return db


def test_a_tool_round_as_goose_sends_it(tmp_path):
    db = build(tmp_path, [
        ("user", [text("list the files"), text("(a note for the user)", annotations={"audience": ["user"]})],
         VISIBLE),
        ("assistant", [{"type": "thinking", "thinking": "hm", "signature": ""}, text("Listing."),
                       request("call_1", "developer__shell", {"command": "ls"})], VISIBLE),
        ("user", [response("call_1", text("a.py"), text("b.py"))], VISIBLE),
        ("assistant", [text("Two files.")], VISIBLE)])
    assert detect_format(db) == "goose"
    s = load_session(db)
    assert s.format == "goose" and s.title == "Fix the tests" and s.cwd == "/w/app" and s.model == "qwen3"
    assert [(m.role, m.content) for m in s.messages] == [("user", "list the files"), ("assistant", "Listing."),
                                                         ("tool", "a.py b.py"), ("assistant", "Two files.")]
    call = s.messages[1].tool_calls[0]
    assert (call.id, call.name, json.loads(call.arguments)) == ("call_1", "developer__shell", {"command": "ls"})
    assert s.messages[2].tool_call_id == "call_1"


def test_messages_hidden_from_the_agent_are_not_sent(tmp_path):
    hidden = {"userVisible": True, "agentVisible": False}
    db = build(tmp_path, [("user", [text("old prompt")], hidden), ("assistant", [text("old reply")], hidden),
                          ("user", [text("SUMMARY of the work so far")], {"userVisible": False, "agentVisible": True}),
                          ("user", [text("go on")], VISIBLE)])
    s = load_session(db)
    assert [m.content for m in s.messages] == ["SUMMARY of the work so far", "go on"]
    assert any("2 message(s) hidden from the agent" in w for w in s.warnings)


def test_errors_and_images_in_tool_results(tmp_path):
    db = build(tmp_path, [
        ("user", [text("shoot")], VISIBLE),
        ("assistant", [request("c1", "screen", {}), request("c2", "shell", {}),
                       {"type": "toolRequest", "id": "c3", "toolCall": {"status": "error", "error": "bad json"}}],
         VISIBLE),
        ("user", [response("c1", {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}),
                  response("c2", error="exit 1")], VISIBLE)])
    s = load_session(db)
    roles = [(m.role, m.text() if m.role != "user" or isinstance(m.content, str) else "[image]") for m in s.messages]
    # the call that could not be parsed is its own error result; the image waits for the tool run to end
    assert roles == [("user", "shoot"), ("assistant", ""), ("tool", "Error: bad json"), ("tool", IMAGE_IN_RESULT),
                     ("tool", RESULT_ERROR + "exit 1"), ("user", "[image]")]
    assert s.stats.image_placeholders == 1


def test_other_sqlite_files_are_not_goose_and_the_picker_looks_in_its_data_folder(tmp_path, monkeypatch):
    other = tmp_path / "x.db"
    con = sqlite3.connect(other)
    con.executescript("create table sessions (id text); create table messages (id text); create table files (id text);")
    con.close()
    assert detect_format(other) == "crush"  # Crush's tables: not Goose's, which have schema_version
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    assert ("goose", tmp_path / ".local" / "share" / "goose" / "sessions", "sessions.db") in default_roots()
