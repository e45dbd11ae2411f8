"""One bad field leaves out its record, by name, not the whole session (issue 24), in every
importer: claude_code, codex, pi, opencode (storage and database), qwen-code, cline, and the
metadata fields dropped with a note. Aider's Markdown has no typed fields to get wrong."""

from __future__ import annotations

import json
import shutil
import sqlite3

import orjson
import pytest

from conftest import FIXTURES
from replayer.core.session import load_session


def _jsonl_with(src, tmp_path, lineno: int, mutate) -> tuple:
    lines = src.read_bytes().split(b"\n")
    rec = orjson.loads(lines[lineno - 1])
    mutate(rec)
    lines[lineno - 1] = orjson.dumps(rec)
    f = tmp_path / src.name
    f.write_bytes(b"\n".join(lines))
    return load_session(src), load_session(f)


def _content_of(rec: dict) -> None:
    (rec.get("message") or rec.get("payload"))["content"] = 5


@pytest.mark.parametrize("src,lineno", [(FIXTURES / "claude-code" / "small.jsonl", 3)])
def test_a_record_whose_content_cannot_be_read_is_named_and_the_rest_imported(tmp_path, src, lineno):
    whole, s = _jsonl_with(src, tmp_path, lineno, _content_of)
    assert s.stats.skipped and s.stats.skipped[0].startswith(f"line {lineno} (")
    assert f"line {lineno} (" in s.incomplete and s.incomplete in s.notes
    assert 0 < len(s.messages) < len(whole.messages) + 1


def _qwen(uuid, parent, t, message=None):
    r = {"uuid": uuid, "parentUuid": parent, "sessionId": "s1", "timestamp": "2026-12-02T10:00:00.000Z",
         "type": t, "cwd": "/p", "version": "0.24.4"}
    if message is not None:
        r["message"] = message
    return r


def test_qwen_tool_name_of_the_wrong_type_is_dropped_with_a_note(tmp_path):
    recs = [_qwen("u1", None, "user", {"role": "user", "parts": [{"text": "first"}]}),
            _qwen("a1", "u1", "tool_result", {"role": "user", "parts": [
                {"functionResponse": {"id": "c1", "name": 5, "response": {"output": "x"}}}]}),
            _qwen("u2", "a1", "user", {"role": "user", "parts": [{"text": "second"}]}),
            _qwen("a2", "u2", "assistant", {"role": "model", "parts": [{"text": "ok"}]})]
    f = tmp_path / "chat.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    s = load_session(f)
    assert [m.content for m in s.messages if m.role == "user"] == ["first", "second"]
    assert any(n.startswith("left out a message's name (int") for n in s.notes)  # was: refused whole


def test_cline_message_left_out_by_index(tmp_path):
    doc = {"sessionId": "c1", "system_prompt": "You are Cline.", "origin": {"version": "3.0.65"}, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "read a"}]},
        {"role": "assistant", "content": [{"type": "text", "text": 5}]},
        {"role": "user", "content": [{"type": "text", "text": "and b"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "b"}]}]}
    f = tmp_path / "x.messages.json"
    f.write_text(json.dumps(doc))
    s = load_session(f, "cline")
    assert [m.content for m in s.messages] == ["read a", "and b", "b"]
    assert "messages[1] (" in s.incomplete


@pytest.mark.parametrize("field,value", [("sessionId", 5), ("origin", {"version": [1]})])
def test_cline_bad_metadata_is_dropped_with_a_note(tmp_path, field, value):
    doc = {"sessionId": "c1", "origin": {"version": "3.0.65"}, "system_prompt": "p", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}]}]}
    doc[field] = value
    f = tmp_path / "y.messages.json"
    f.write_text(json.dumps(doc))
    s = load_session(f, "cline")
    assert len(s.messages) == 2 and s.incomplete is None
    assert any(n.startswith("left out a session's") for n in s.notes)


def test_opencode_storage_part_left_out_by_its_path(tmp_path):
    root = tmp_path / "storage"
    shutil.copytree(FIXTURES / "opencode" / "storage", root)
    whole = load_session(root)
    part = root / "part" / "msg_002" / "prt_003.json"
    rec = orjson.loads(part.read_bytes())
    bad = {k: ([1] if isinstance(v, str) and k not in ("id", "messageID", "sessionID", "type") else v)
           for k, v in rec.items()}
    part.write_bytes(orjson.dumps(bad))
    s = load_session(root)
    assert s.messages and (s.incomplete is None or "part/msg_002/prt_003.json" in s.incomplete)
    assert s.incomplete is not None or s.notes != whole.notes or len(s.messages) != len(whole.messages) \
        or s.messages != whole.messages


def test_opencode_database_row_left_out_by_its_id(tmp_path):
    db = tmp_path / "opencode.db"
    shutil.copy(FIXTURES / "opencode" / "opencode.db", db)
    con = sqlite3.connect(db)
    pid, data = con.execute("select id, data from part where data like '%\"text\"%' limit 1").fetchone()
    rec = json.loads(data)
    rec["text"] = {"not": "text"}
    con.execute("update part set data=? where id=?", (json.dumps(rec), pid))
    con.commit()
    con.close()
    s = load_session(db)
    assert s.messages and f"part {pid} (" in s.incomplete


@pytest.mark.parametrize("extra", [[], ["--json"], ["--jsonl"], ["--markdown"], ["--mode", "session"]])
def test_the_record_left_out_is_named_in_every_output(tmp_path, extra):
    import subprocess
    import sys

    from conftest import REPO

    lines = (FIXTURES / "claude-code" / "small.jsonl").read_bytes().split(b"\n")
    rec = orjson.loads(lines[2])
    rec["message"]["content"] = 5
    lines[2] = orjson.dumps(rec)
    f = tmp_path / "bad.jsonl"
    f.write_bytes(b"\n".join(lines))
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(f), *extra], capture_output=True,
                       text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-1500:]
    assert "record(s) had a field that could not be read (line 3 (" in r.stdout


def test_the_app_verdict_names_the_record_left_out(tmp_path):
    import subprocess
    import sys

    from conftest import REPO

    lines = (FIXTURES / "claude-code" / "small.jsonl").read_bytes().split(b"\n")
    rec = orjson.loads(lines[2])
    rec["message"]["content"] = 5
    lines[2] = orjson.dumps(rec)
    f = tmp_path / "bad.jsonl"
    f.write_bytes(b"\n".join(lines))
    svg = tmp_path / "bad.svg"
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(f), "--screenshot", str(svg)],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr[-1500:]
    assert "record(s)&#160;had&#160;a&#160;field" in svg.read_text()
