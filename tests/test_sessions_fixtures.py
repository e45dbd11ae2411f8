"""The project's own fixtures: every format imports without ../shared; bad input fails clearly."""

from __future__ import annotations

import os
import subprocess
import sys
import tracemalloc

import orjson
import pytest

from replayer.core.errors import FormatUnknown, ImportFailed
from replayer.core.session import detect_format, load_session

from conftest import FIXTURES, REPO

CASES = [
    ("pi/small-v3.jsonl", "pi", {"user": 6, "assistant": 3, "tool": 2}),
    ("claude-code/small.jsonl", "claude-code", {"user": 2, "assistant": 2, "tool": 1}),
    ("codex/small-rollout.jsonl", "codex", {"user": 1, "assistant": 2, "tool": 1}),
    ("openai/request.json", "openai", {"user": 1, "assistant": 2, "tool": 1}),
    ("sharegpt/conversations.json", "sharegpt", {"user": 1, "assistant": 2, "tool": 1}),
    ("aider/.aider.chat.history.md", "aider", {"user": 2, "assistant": 2}),
    ("opencode/opencode.db", "opencode", {"user": 1, "assistant": 2, "tool": 1}),
    ("opencode/storage", "opencode", {"user": 1, "assistant": 2, "tool": 1}),
    ("kilo/kilo.db", "kilo", {"user": 2, "assistant": 3, "tool": 1}),
    ("llamacpp-webui/conversation.json", "llamacpp-webui", {"user": 1, "assistant": 2, "tool": 1}),
]


@pytest.mark.parametrize("rel,fmt,roles", CASES, ids=[c[0] for c in CASES])
def test_fixture_imports_read_only(rel, fmt, roles):
    path = FIXTURES / rel
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    before = {p: (p.read_bytes(), os.stat(p).st_mtime_ns) for p in files}
    s = load_session(path)
    assert detect_format(path) == fmt == s.format
    assert s.role_counts() == roles
    assert {p: (p.read_bytes(), os.stat(p).st_mtime_ns) for p in files} == before


def test_pi_fixture_rules():
    s = load_session(FIXTURES / "pi/small-v3.jsonl")
    # compaction kept everything from the first user message; the aborted turn is gone,
    # the orphan call got pi's "No result provided" result
    assert s.messages[0].text().startswith("The conversation history before this point was compacted")
    assert s.stats.dropped_turns == 1 and s.stats.synthetic_results == 1
    orphan = [m for m in s.messages if m.origin == "no_result"]
    assert orphan and orphan[0].content == "No result provided" and orphan[0].tool_call_id == "c2"


def test_claude_code_fixture_merges_split_blocks():
    s = load_session(FIXTURES / "claude-code/small.jsonl")
    a = s.messages[1]
    assert a.reasoning == "use ls" and a.tool_calls[0].arguments == '{"command":"ls"}'
    assert "subagent" not in [m.text() for m in s.messages]


def test_codex_fixture_reasoning_and_system():
    s = load_session(FIXTURES / "codex/small-rollout.jsonl")
    assert s.system_prompt == "You are Codex."
    assert s.messages[1].reasoning == "run ls" and s.messages[1].tool_calls[0].id == "f1"
    assert s.model == "gpt-oss-20b"


def _cli(*args, **kw):
    return subprocess.run([sys.executable, "-m", "replayer.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120, **kw)


@pytest.mark.parametrize("content,needle", [
    (b"", "is empty"),
    (bytes(range(256)) * 20, "binary"),
    (b'{"hello": "world"}\n{"x": 1}\n', "cannot tell which agent"),
    (b"just some text\nand more\n", "cannot tell which agent"),
    # a shared opencode.db as `sqlite3 .dump` text: say how to make it the database replayer reads
    (b"PRAGMA foreign_keys=OFF;\nBEGIN TRANSACTION;\nCREATE TABLE `session` (`id` text);\n", "sqlite3 opencode.db <"),
])
def test_bad_files_one_line_error(tmp_path, content, needle):
    f = tmp_path / "bad.jsonl"
    f.write_bytes(content)
    r = _cli("inspect", str(f))
    assert r.returncode == 2
    assert needle in r.stderr and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_missing_path_and_directory(tmp_path):
    for arg, needle in ((str(tmp_path / "nope.jsonl"), "no such file"), (str(tmp_path), "is a directory")):
        r = _cli("inspect", arg)
        assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr


def test_truncated_last_line_and_unknown_types(tmp_path):
    src = (FIXTURES / "pi/small-v3.jsonl").read_text()
    lines = src.splitlines()
    unknown = orjson.dumps({"type": "future_thing", "id": "ffff0000", "parentId": None, "timestamp": "x"}).decode()
    f = tmp_path / "t.jsonl"
    f.write_text("\n".join(lines[:1] + [unknown] + lines[1:]) + "\n" + lines[-1][: len(lines[-1]) // 2])
    s = load_session(f)
    assert s.stats.bad_lines == 1 and s.stats.partial_tail
    assert s.stats.unknown_types == {"future_thing": 1}
    r = _cli("inspect", str(f))
    assert r.returncode == 0 and "did not parse" in r.stdout


def test_forced_wrong_format(tmp_path):
    with pytest.raises(ImportFailed):
        load_session(FIXTURES / "openai/request.json", format="sharegpt")
    with pytest.raises(ImportFailed, match="unknown format"):
        load_session(FIXTURES / "openai/request.json", format="nope")
    with pytest.raises(FormatUnknown):
        detect_format(FIXTURES.parent / "pyproject.toml")


def test_inspect_request_json_is_the_body():
    r = _cli("inspect", str(FIXTURES / "openai/request.json"), "--request")
    body = orjson.loads(r.stdout)
    src = orjson.loads((FIXTURES / "openai/request.json").read_bytes())
    assert body["messages"] == src["messages"] and body["tools"] == src["tools"]


def test_inspect_json_fields():
    r = _cli("inspect", str(FIXTURES / "pi/small-v3.jsonl"), "--json")
    info = orjson.loads(r.stdout)
    assert info["format"] == "pi" and info["tool_calls"] == 2 and info["compactions_applied"] == 1
    assert info["estimated_tokens"] > 0 and info["missing"] == ["system_prompt", "tools"]


def test_large_session_streams_with_bounded_memory(tmp_path):
    """~100 MB of pi session, mostly base64 images: memory follows the text, not the file."""
    f = tmp_path / "big.jsonl"
    img = "A" * 1_000_000
    with f.open("w") as out:
        out.write('{"type":"session","version":3,"id":"big","timestamp":"2026-01-01T00:00:00Z","cwd":"/"}\n')
        parent = "null"
        for i in range(100):
            eid = f"{i:08x}"
            msg = {"role": "user", "content": [{"type": "text", "text": f"step {i}"},
                                               {"type": "image", "data": img, "mimeType": "image/png"}]}
            out.write(orjson.dumps({"type": "message", "id": eid, "parentId": None if parent == "null" else parent,
                                    "timestamp": "2026-01-01T00:00:00Z", "message": msg}).decode() + "\n")
            parent = eid
    assert f.stat().st_size > 100_000_000
    tracemalloc.start()
    s = load_session(f)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert len(s.messages) == 100
    assert peak < 40_000_000, f"peak {peak / 1e6:.0f} MB"
    assert "(image omitted" in s.messages[0].text()


def _opencode_with_undo(tmp_path, revert: dict | None):
    """Two turns (the fixture's messages, then a second question and answer) in an OpenCode
    1.18 database whose session row carries ``revert``, and the same as a storage tree."""
    import shutil
    import sqlite3

    db = tmp_path / "opencode.db"
    shutil.copy(FIXTURES / "opencode/opencode.db", db)
    con = sqlite3.connect(db)
    con.execute("alter table session add column revert text")
    con.execute("update session set revert=?", (orjson.dumps(revert).decode() if revert else None,))
    more = [("msg_003", {"role": "user", "time": {"created": 1790000003000}},
             [("prt_006", {"type": "text", "text": "and the tests?"})]),
            ("msg_004", {"role": "assistant", "parentID": "msg_003", "time": {"created": 1790000004000,
                                                                              "completed": 1790000005000}},
             [("prt_007", {"type": "step-start"}), ("prt_008", {"type": "text", "text": "none yet"})])]
    for mid, data, parts in more:
        con.execute("insert into message values (?,?,?,?,?)",
                    (mid, "ses_fixture", data["time"]["created"], data["time"]["created"], orjson.dumps(data).decode()))
        for pid, pdata in parts:
            con.execute("insert into part values (?,?,?,?,?,?)", (pid, mid, "ses_fixture", 0, 0, orjson.dumps(pdata).decode()))
    con.commit()
    con.close()
    st = tmp_path / "storage"
    shutil.copytree(FIXTURES / "opencode/storage", st)
    info = st / "session/global/ses_fixture.json"
    info.write_bytes(orjson.dumps(orjson.loads(info.read_bytes()) | ({"revert": revert} if revert else {})))
    for mid, data, parts in more:
        (st / "message/ses_fixture" / f"{mid}.json").write_bytes(orjson.dumps({"id": mid, **data}))
        (st / "part" / mid).mkdir()
        for pid, pdata in parts:
            (st / "part" / mid / f"{pid}.json").write_bytes(orjson.dumps({"id": pid, "messageID": mid, **pdata}))
    return db, st


def _texts(s):
    return [(m.role, m.content if isinstance(m.content, str) else None) for m in s.messages]


@pytest.mark.parametrize("store", ["db", "storage"])
def test_opencode_undo_point_drops_what_follows(tmp_path, store):
    def load(revert):
        d = tmp_path / f"case{len(list(tmp_path.iterdir()))}"
        d.mkdir()
        db, st = _opencode_with_undo(d, revert)
        return load_session(db if store == "db" else st)

    full = load(None)
    assert [r for r, _ in _texts(full)] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
    assert not full.warnings
    # undo to the second question: it and its answer are gone
    back = load({"messageID": "msg_003", "snapshot": "x"})
    assert _texts(back) == _texts(full)[:4]
    assert any("reverted" in w and "2 later message" in w for w in back.warnings)
    # undo inside the first answer, at its second step: the tool round trip stays, the text goes
    mid = load({"messageID": "msg_002", "partID": "prt_004"})
    assert [r for r, _ in _texts(mid)] == ["user", "assistant", "tool"]
    assert mid.messages[1].tool_calls[0].name == "bash"


def test_llamacpp_webui_export_is_the_request_the_ui_sends(tmp_path):
    """The active branch (currNode up to the root, not the edited-away first question), the
    attachment expanded before the question as the UI does, tool calls from their JSON string."""
    from replayer.core.session import build_request

    path = FIXTURES / "llamacpp-webui/conversation.json"
    s = load_session(path)
    assert s.stats.branch_length == 6 and s.stats.entries_total == 8
    body = build_request(s).body
    msgs = body["messages"]
    assert msgs[0] == {"role": "system", "content": "You are a helpful assistant."}
    assert msgs[1]["content"] == [{"type": "text", "text": "\n\n--- File: notes.txt ---\nbuy milk"},
                                  {"type": "text", "text": "what is in notes.txt?"}]
    assert msgs[2]["content"] == "" and msgs[2]["reasoning_content"].startswith("The file is attached")
    assert msgs[2]["tool_calls"][0]["function"] == {"name": "read_file", "arguments": '{"path": "notes.txt"}'}
    assert msgs[3] == {"role": "tool", "content": "buy milk\n", "tool_call_id": "call_1"}
    assert msgs[4]["content"] == "It says: buy milk."
    assert all("list the files" not in str(m) for m in msgs)
    # an export of several conversations replays the newest; the other branch when currNode moves
    doc = orjson.loads(path.read_bytes())
    other = orjson.loads(path.read_bytes())
    other["conv"] |= {"id": "older", "lastModified": 1}
    doc["conv"]["currNode"] = "a1-old"
    many = tmp_path / "export.json"
    many.write_bytes(orjson.dumps([other, doc]))
    s2 = load_session(many)
    assert [m.text() for m in s2.messages] == ["list the files", "I cannot see your files."]
    assert any("2 conversations" in w for w in s2.warnings)
